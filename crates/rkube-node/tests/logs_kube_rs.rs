//! kube-rs `Api::logs` and `Api::log_stream` against `rkube up` (in-process) + `run_local_node`:
//! `pods/log` goes from the API server to the node agent's kubelet API with the API server's
//! kubelet client certificate (both from the PKI of `rkube up`), which reads the CRI log file:
//! the whole log, `tailLines`, `follow` until the container exits, and `previous` after a restart.

use crate::common;

use std::time::{Duration, Instant};

use common::phases_until;
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

/// Reads `pods/log?follow=true` of `name` until the stream ends (the container exited).
async fn follow_to_end(pods: &Api<Pod>, name: &str, limit: Duration) -> String {
    let params = LogParams {
        follow: true,
        ..Default::default()
    };
    let stream = pods.log_stream(name, &params).await.expect("log stream");
    let mut text = String::new();
    let mut reader = Box::pin(stream);
    tokio::time::timeout(limit, reader.read_to_string(&mut text))
        .await
        .expect("the stream ends when the container exits")
        .expect("read");
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rs_reads_and_follows_pod_logs_through_the_kubelet_api() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster = common::LocalCluster::start(dir.path(), |_| {}).await;
    let client = cluster.client.clone();
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
    let text = follow_to_end(&pods, "counter", Duration::from_secs(20)).await;
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

    cluster.stop().await;
}

/// Log rotation (`--container-log-max-size` 4 KiB, `--container-log-max-files` 3, checked every
/// 3 s): a container writing for ~12 s has its log rotated several times; a `follow` stream
/// started before the first rotation reads every line once, in order, across rotations; the
/// directory never holds more than three files of the container, older ones gzipped; a plain
/// read gives the live file only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follow_reads_every_line_across_log_rotations_and_old_logs_are_compressed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let policy = rkube_node::container_log_manager::LogRotatePolicy {
        max_size: 4096,
        max_files: 3,
        monitor_interval: Duration::from_secs(3),
        max_workers: 1,
    };
    let cluster = common::LocalCluster::start(dir.path(), |c| c.log_rotation = policy).await;
    let client = cluster.client.clone();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    const LINES: usize = 600;
    let script = format!(
        "sleep 1; i=0; while [ $i -lt {LINES} ]; do echo \"line $i of a log that grows by about a hundred bytes at a time, to be rotated\"; i=$((i+1)); sleep 0.02; done"
    );
    pods.create(&PostParams::default(), &pod("chatty", &script))
        .await
        .expect("create");
    phases_until(&pods, "chatty", "Running", Duration::from_secs(20)).await;
    let text = follow_to_end(&pods, "chatty", Duration::from_secs(60)).await;
    let numbers: Vec<usize> = text
        .lines()
        .map(|l| {
            l.split_whitespace()
                .nth(1)
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("line {l:?}"))
        })
        .collect();
    assert_eq!(
        numbers,
        (0..LINES).collect::<Vec<_>>(),
        "every line once, in order"
    );

    // The container's log directory: at most max_files files, the older ones compressed.
    let pod_dir = std::fs::read_dir(dir.path().join("api/node/pods"))
        .expect("pod logs dir")
        .map(|e| e.expect("entry").path())
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("default_chatty_"))
        })
        .expect("chatty's log dir");
    let mut files: Vec<String> = std::fs::read_dir(pod_dir.join("main"))
        .expect("container log dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert!(files.len() <= 3, "files: {files:?}");
    assert!(
        files
            .iter()
            .any(|f| f.starts_with("0.log.") && f.ends_with(".gz")),
        "a compressed rotated log: {files:?}"
    );
    assert!(
        files.iter().any(|f| f == "0.log"),
        "the live log: {files:?}"
    );
    let live = pods
        .logs("chatty", &LogParams::default())
        .await
        .expect("logs");
    assert!(
        live.ends_with(&format!(
            "line {} of a log that grows by about a hundred bytes at a time, to be rotated\n",
            LINES - 1
        )),
        "{live:?}"
    );
    assert!(
        !live.starts_with("line 0 "),
        "a plain read gives the live file only"
    );

    cluster.stop().await;
}
