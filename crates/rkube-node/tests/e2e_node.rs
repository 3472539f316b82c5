//! End to end: `rkube up` (in-process, its public entry point) + `run_local_node` (runtime,
//! agent with evented PLEG, binder). Pods are created without `nodeName`, bound by the binder,
//! run as host processes, and their status reaches the API server.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::Parser;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{DeleteParams, PostParams};
use kube::runtime::watcher::{self, Event};
use kube::Api;
use rkube_node::pleg::metrics::CacheSource;
use serde_json::json;

#[derive(Parser)]
struct Up {
    #[command(flatten)]
    args: rkube_apiserver::cli::UpArgs,
}

struct Apiserver {
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
    kubeconfig: PathBuf,
}

impl Drop for Apiserver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn apiserver(dir: &Path) -> (Apiserver, kube::Client) {
    let data = dir.join("api");
    let up = Up::parse_from(["up", "--data-dir", data.to_str().expect("utf-8 path"), "--port", "0"]);
    let task = tokio::spawn(rkube_apiserver::cli::run_up(up.args));
    let kubeconfig = data.join("kubeconfig");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        assert!(Instant::now() < deadline, "API server did not come up");
        assert!(!task.is_finished(), "rkube up exited");
        if kubeconfig.exists() {
            if let Ok(client) = rkube_node::local::client_from_kubeconfig(&kubeconfig).await {
                let ns: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
                if ns.get("kube-node-lease").await.is_ok() {
                    return (Apiserver { task, kubeconfig }, client);
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn pod(name: &str, restart: &str, command: &[&str]) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "restartPolicy": restart,
            "containers": [{"name": "main", "image": "busybox", "command": command}],
        }
    }))
    .expect("pod")
}

/// Watches one pod and returns the distinct phases it goes through until `until` (or panics).
async fn phases_until(pods: &Api<Pod>, name: &str, until: &str, within: Duration) -> (Vec<String>, Pod) {
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut stream = watcher::watcher(pods.clone(), config).boxed();
    let mut seen: Vec<String> = Vec::new();
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let ev = tokio::time::timeout_at(deadline, stream.next())
            .await
            .unwrap_or_else(|_| panic!("{name} did not reach {until}; phases seen {seen:?}"))
            .expect("watch open")
            .expect("watch event");
        let p = match ev {
            Event::Apply(p) | Event::InitApply(p) => p,
            _ => continue,
        };
        let phase = p.status.as_ref().and_then(|s| s.phase.clone()).unwrap_or_else(|| "<none>".into());
        if seen.last() != Some(&phase) {
            seen.push(phase.clone());
        }
        if phase == until {
            return (seen, p);
        }
    }
}

/// A plain HTTP/1.0 GET; returns (status code, body).
async fn http_get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect healthz");
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").as_bytes()).await.expect("write");
    let mut buf = String::new();
    s.read_to_string(&mut buf).await.expect("read");
    let code = buf.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = buf.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    (code, body)
}

fn exit_code(p: &Pod) -> Option<i32> {
    p.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .first()?
        .state
        .as_ref()?
        .terminated
        .as_ref()
        .map(|t| t.exit_code)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_run_on_the_local_node_and_report_phases_exit_codes_and_deletion() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (api, client) = apiserver(dir.path()).await;
    let node = rkube_node::run_local_node(&api.kubeconfig, dir.path()).await.expect("local node");

    // The Node registers Ready, with a lease.
    let nodes: Api<Node> = Api::all(client.clone());
    let n = nodes.get(&node.node_name).await.expect("node registered");
    let ready = n.status.as_ref().and_then(|s| s.conditions.as_ref()).and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"));
    assert_eq!(ready.map(|c| c.status.as_str()), Some("True"));
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    assert!(leases.get(&node.node_name).await.is_ok(), "lease created");

    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");

    // A command that exits 0: Pending → Running → Succeeded, bound by the binder.
    pods.create(&PostParams::default(), &pod("ok", "Never", &["sh", "-c", "sleep 1; exit 0"])).await.expect("create ok");
    let (phases, done) = phases_until(&pods, "ok", "Succeeded", Duration::from_secs(20)).await;
    assert!(phases.contains(&"Running".to_string()), "phases {phases:?}");
    assert_eq!(phases.last().map(String::as_str), Some("Succeeded"));
    assert_eq!(done.spec.as_ref().and_then(|s| s.node_name.as_deref()), Some(node.node_name.as_str()));
    assert_eq!(exit_code(&done), Some(0));
    assert!(done.status.as_ref().and_then(|s| s.pod_ip.as_ref()).is_some());

    // Exit 3 under Never: Failed with the exit code.
    pods.create(&PostParams::default(), &pod("bad", "Never", &["sh", "-c", "exit 3"])).await.expect("create bad");
    let (_, failed) = phases_until(&pods, "bad", "Failed", Duration::from_secs(20)).await;
    assert_eq!(exit_code(&failed), Some(3));

    // /healthz is ok and /metrics carries the PLEG metrics under kubelet's names.
    let addr = node.agent().healthz_addr;
    let (code, body) = http_get(addr, "/healthz").await;
    assert_eq!((code, body.as_str()), (200, "ok"));
    let (code, metrics) = http_get(addr, "/metrics").await;
    assert_eq!(code, 200);
    for name in ["kube_pod_missed_events 0", "kubelet_evented_pleg_connection_success_count 1", "kubelet_pleg_relist_duration_seconds_count"] {
        assert!(metrics.contains(name), "{name} missing from /metrics");
    }

    // The statuses came from container events, not from relisting.
    let m = &node.agent().metrics;
    assert!(m.cache_updates_by(CacheSource::Event) > 0);
    assert_eq!(m.missed_events.get(), 0);

    // Deleting a running pod stops its process and removes the object.
    pods.create(&PostParams::default(), &pod("sleeper", "Always", &["sleep", "1000"])).await.expect("create sleeper");
    phases_until(&pods, "sleeper", "Running", Duration::from_secs(20)).await;
    let pids = node.runtime().runtime().running_pids();
    assert_eq!(pids.len(), 1, "only the sleeper runs, once (no duplicate container)");
    pods.delete("sleeper", &DeleteParams::default()).await.expect("delete");
    let deadline = Instant::now() + Duration::from_secs(20);
    while pods.get_opt("sleeper").await.expect("get").is_some() {
        assert!(Instant::now() < deadline, "pod object not removed after its containers stopped");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(!rkube_runtime::process::process_exists(pids[0]), "sleep {} still running", pids[0]);

    node.shutdown().await;
    drop(api);
}
