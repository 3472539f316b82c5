use super::*;
use serde_json::json;
use std::sync::Mutex;

/// Exec answers scripted per call: exit codes in order (the last repeats).
struct Script(Mutex<Vec<i32>>);

#[async_trait::async_trait]
impl ExecSync for Script {
    async fn exec_sync(&self, _id: &str, _cmd: Vec<String>, _timeout_s: i64) -> Result<(i32, Vec<u8>), String> {
        let mut codes = self.0.lock().unwrap();
        let code = if codes.len() > 1 { codes.remove(0) } else { codes[0] };
        Ok((code, if code == 0 { vec![] } else { b"not healthy\n".to_vec() }))
    }
}

fn container(v: serde_json::Value) -> Container {
    serde_json::from_value(v).unwrap()
}

/// Makes every tracked probe due again.
fn rewind(p: &mut Prober) {
    for t in p.tracked.values_mut() {
        t.last_run = None;
    }
}

fn running(c: &Container) -> Vec<Running<'_>> {
    vec![Running { spec: c, id: "id1".into(), started_at: Instant::now() }]
}

#[tokio::test]
async fn readiness_turns_after_the_thresholds_and_reports_the_first_failure() {
    let c = container(json!({"name": "c", "readinessProbe": {"exec": {"command": ["check"]}, "failureThreshold": 2, "successThreshold": 2}}));
    let exec = Script(Mutex::new(vec![1, 1, 0, 0]));
    let mut p = Prober::default();
    let r = running(&c);
    let round = p.round(&r, &exec, "127.0.0.1").await;
    assert_eq!(round.unhealthy, vec![("c".to_string(), "Readiness probe failed: not healthy\n".to_string())]);
    assert!(round.kill.is_empty());
    assert!(!p.ready(&c));
    rewind(&mut p);
    let round = p.round(&r, &exec, "127.0.0.1").await;
    assert!(round.unhealthy.is_empty(), "one event per streak");
    rewind(&mut p);
    p.round(&r, &exec, "127.0.0.1").await;
    assert!(!p.ready(&c), "one success is below successThreshold 2");
    rewind(&mut p);
    p.round(&r, &exec, "127.0.0.1").await;
    assert!(p.ready(&c));
}

#[tokio::test]
async fn liveness_failures_kill_the_container_and_a_new_instance_starts_afresh() {
    let c = container(json!({"name": "c", "livenessProbe": {"exec": {"command": ["check"]}, "failureThreshold": 1}}));
    let exec = Script(Mutex::new(vec![1]));
    let mut p = Prober::default();
    let round = p.round(&running(&c), &exec, "127.0.0.1").await;
    assert_eq!(round.kill, vec![("c".into(), "id1".into(), "Container c failed liveness probe, will be restarted".into())]);
    assert!(p.ready(&c), "liveness does not gate readiness");
    let restarted = vec![Running { spec: &c, id: "id2".into(), started_at: Instant::now() }];
    p.round(&restarted, &Script(Mutex::new(vec![0])), "127.0.0.1").await;
    assert_eq!(p.tracked.values().map(|t| t.container_id.as_str()).collect::<Vec<_>>(), ["id2"]);
}

#[tokio::test]
async fn startup_probe_holds_back_the_others_until_it_succeeds() {
    let c = container(json!({"name": "c",
        "startupProbe": {"exec": {"command": ["started"]}, "failureThreshold": 5},
        "readinessProbe": {"exec": {"command": ["ready"]}}}));
    let exec = Script(Mutex::new(vec![1, 0, 0]));
    let mut p = Prober::default();
    let r = running(&c);
    p.round(&r, &exec, "127.0.0.1").await;
    assert!(!p.started(&c) && !p.ready(&c));
    assert!(!p.tracked.contains_key(&("c".to_string(), Kind::Readiness)));
    rewind(&mut p);
    p.round(&r, &exec, "127.0.0.1").await;
    assert!(p.started(&c) && !p.ready(&c));
    rewind(&mut p);
    p.round(&r, &exec, "127.0.0.1").await;
    assert!(p.ready(&c));
}

#[tokio::test]
async fn initial_delay_and_period_decide_when_a_probe_is_due() {
    let c = container(json!({"name": "c", "readinessProbe": {"exec": {"command": ["x"]}, "initialDelaySeconds": 30, "periodSeconds": 5}}));
    let probe = c.readiness_probe.as_ref().unwrap();
    let now = Instant::now();
    assert!(!is_due(probe, now, None));
    assert_eq!(next_time(probe, now, None), now + Duration::from_secs(30));
    let long_ago = now - Duration::from_secs(60);
    assert!(is_due(probe, long_ago, None));
    assert_eq!(next_time(probe, long_ago, Some(now)), now + Duration::from_secs(5));
    let mut p = Prober::default();
    let r = vec![Running { spec: &c, id: "i".into(), started_at: now }];
    let round = p.round(&r, &Script(Mutex::new(vec![1])), "127.0.0.1").await;
    assert_eq!(round, Round::default(), "nothing runs before the initial delay");
    assert_eq!(p.next_due(&r), Some(now + Duration::from_secs(30)));
}

#[tokio::test]
async fn tcp_and_http_probes_reach_the_pod_and_name_ports() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        loop {
            let Ok((mut s, _)) = listener.accept().await else { return };
            let mut buf = vec![0u8; 2048];
            let n = s.read(&mut buf).await.unwrap_or(0);
            let req = String::from_utf8_lossy(&buf[..n]).to_string();
            let status = if req.starts_with("GET /healthz") && req.contains("kube-probe/1.33") && req.contains("x-probe: yes") { "200 OK" } else { "503 Service Unavailable" };
            let _ = s.write_all(format!("HTTP/1.1 {status}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n").as_bytes()).await;
        }
    });
    let c = container(json!({"name": "c", "ports": [{"name": "http", "containerPort": port}]}));
    let exec = Script(Mutex::new(vec![0]));
    let tcp: Probe = serde_json::from_value(json!({"tcpSocket": {"port": "http"}})).unwrap();
    assert_eq!(run(&tcp, &c, "i", &exec, "127.0.0.1").await, Ok(()));
    let good: Probe = serde_json::from_value(json!({"httpGet": {"path": "/healthz", "port": port, "httpHeaders": [{"name": "X-Probe", "value": "yes"}]}})).unwrap();
    assert_eq!(run(&good, &c, "i", &exec, "127.0.0.1").await, Ok(()));
    let bad: Probe = serde_json::from_value(json!({"httpGet": {"path": "/other", "port": "http"}})).unwrap();
    assert_eq!(run(&bad, &c, "i", &exec, "127.0.0.1").await, Err("HTTP probe failed with statuscode: 503".into()));
    let unnamed: Probe = serde_json::from_value(json!({"tcpSocket": {"port": "nope"}})).unwrap();
    assert_eq!(run(&unnamed, &c, "i", &exec, "127.0.0.1").await, Err("couldn't find port: nope in c".into()));
    server.abort();
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap().local_addr().unwrap().port();
    let refused: Probe = serde_json::from_value(json!({"tcpSocket": {"port": closed}})).unwrap();
    let err = run(&refused, &c, "i", &exec, "127.0.0.1").await.unwrap_err();
    assert!(err.starts_with(&format!("dial tcp 127.0.0.1:{closed}: connect: ")), "{err}");
}
