//! kube-rs `Api::logs` and `Api::log_stream` against `rkube up` (in-process) + `run_local_node`:
//! `pods/log` goes from the API server to the node agent's kubelet API with the API server's
//! kubelet client certificate (both from the PKI of `rkube up`), which reads the CRI log file:
//! the whole log, `tailLines`, `follow` until the container exits, and `previous` after a restart.

mod common;

use std::time::{Duration, Instant};

use common::{apiserver, phases_until};
use futures::AsyncReadExt as _;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{LogParams, PostParams};
use kube::Api;
use serde_json::json;

fn pod(name: &str, script: &str) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox", "command": ["sh", "-c", script]}]}
    }))
    .expect("pod")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rs_reads_and_follows_pod_logs_through_the_kubelet_api() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (api, client) = apiserver(dir.path()).await;
    // The node shares the API server's data dir, so it finds the `rkube up` PKI.
    let node = rkube_node::run_local_node(&api.kubeconfig, dir.path().join("api"))
        .await
        .expect("local node");
    let scheduler = rkube_scheduler::cli::start(client.clone(), Default::default())
        .await
        .expect("scheduler");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");

    pods.create(
        &PostParams::default(),
        &pod("printer", "echo one; echo two; sleep 3600"),
    )
    .await
    .expect("create");
    phases_until(&pods, "printer", "Running", Duration::from_secs(20)).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let text = pods
            .logs("printer", &LogParams::default())
            .await
            .expect("logs");
        if text == "one\ntwo\n" {
            break;
        }
        assert!(Instant::now() < deadline, "logs so far: {text:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let tail = pods
        .logs(
            "printer",
            &LogParams {
                tail_lines: Some(1),
                ..Default::default()
            },
        )
        .await
        .expect("tail");
    assert_eq!(tail, "two\n");

    // follow streams lines as they come and ends when the container exits.
    pods.create(
        &PostParams::default(),
        &pod(
            "counter",
            "sleep 1; for i in 1 2 3; do echo n $i; sleep 0.5; done",
        ),
    )
    .await
    .expect("create");
    phases_until(&pods, "counter", "Running", Duration::from_secs(20)).await;
    let stream = pods
        .log_stream(
            "counter",
            &LogParams {
                follow: true,
                ..Default::default()
            },
        )
        .await
        .expect("log stream");
    let mut text = String::new();
    let mut reader = Box::pin(stream);
    tokio::time::timeout(Duration::from_secs(20), reader.read_to_string(&mut text))
        .await
        .expect("the stream ends when the container exits")
        .expect("read");
    assert_eq!(text, "n 1\nn 2\nn 3\n");

    // previous: the log of the instance before a restart.
    let counter_file = dir.path().join("attempts");
    let script = format!(
        "n=$(cat {f} 2>/dev/null || echo 0); n=$((n+1)); echo $n > {f}; echo attempt $n; sleep 5; exit 1",
        f = counter_file.display()
    );
    let mut crasher = pod("crasher", &script);
    if let Some(spec) = crasher.spec.as_mut() {
        spec.restart_policy = Some("Always".into());
    }
    pods.create(&PostParams::default(), &crasher)
        .await
        .expect("create");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let p = pods.get("crasher").await.expect("get");
        let status = p
            .status
            .and_then(|s| s.container_statuses)
            .and_then(|s| s.into_iter().next());
        let restarted = status.as_ref().is_some_and(|s| {
            s.restart_count >= 1 && s.state.as_ref().is_some_and(|st| st.running.is_some())
        });
        if restarted {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "crasher did not restart: {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let previous = pods
        .logs(
            "crasher",
            &LogParams {
                previous: true,
                ..Default::default()
            },
        )
        .await
        .expect("previous");
    assert_eq!(previous, "attempt 1\n");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let current = pods
            .logs("crasher", &LogParams::default())
            .await
            .expect("current");
        if current == "attempt 2\n" {
            break;
        }
        assert!(Instant::now() < deadline, "current log: {current:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    scheduler.shutdown().await.expect("scheduler stops");
    node.shutdown().await;
    drop(api);
}
