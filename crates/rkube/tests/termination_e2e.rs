//! End to end on `rkube up --node` (kubectl 1.33): graceful pod deletion
//! runs the preStop hook (an httpGet to a server this test runs), then
//! SIGTERM, which the container's trap records in a hostPath file; when
//! `kubectl delete --wait` returns the container's processes are gone. A
//! process that ignores SIGTERM is killed once its grace period is over.
//!
//! Also: restart counts survive a restart of `rkube up --node` itself (the
//! node agent goes on from the reported `restartCount`).
//!
//! Processes are found by a marker unique to this test in their command
//! line. The cluster process is killed by PID when its guard drops.

use crate::common;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::cluster::Stop;
use common::{Backend, Cluster};

/// Longest wait for a pod transition.
const LIMIT: Duration = Duration::from_secs(60);

/// Whether a process whose command line contains `marker` exists.
fn process_with(marker: &str) -> bool {
    let Ok(dir) = std::fs::read_dir("/proc") else { return false };
    dir.flatten().any(|e| {
        std::fs::read(e.path().join("cmdline")).is_ok_and(|c| String::from_utf8_lossy(&c).replace('\0', " ").contains(marker))
    })
}

#[test]
fn deletion_runs_the_pre_stop_hook_then_sigterm_and_waits_for_the_processes() {
    let cluster = Cluster::builder(Backend::Embedded).arg("--node").start();
    let k = cluster.kubectl("1.33");
    cluster.wait_for_ready_node(&k, LIMIT);

    // The preStop hook's target: records the request line.
    let hook_server = TcpListener::bind("127.0.0.1:0").expect("bind");
    let hook_port = hook_server.local_addr().expect("addr").port();
    let (seen_tx, seen_rx) = mpsc::channel::<String>();
    std::thread::spawn(move || {
        for stream in hook_server.incoming().flatten() {
            let mut stream = stream;
            let mut buf = [0u8; 1024];
            let n = stream.read(&mut buf).unwrap_or(0);
            let line = String::from_utf8_lossy(&buf[..n]).lines().next().unwrap_or("").to_string();
            let _ = stream.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
            let _ = seen_tx.send(line);
        }
    });
    let marker = format!("rkube-term-{}", std::process::id());
    let out = cluster.dir().join("term-out");
    let manifest = format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{name: polite}}
spec:
  terminationGracePeriodSeconds: 10
  containers:
  - name: c
    image: busybox
    command: [sh, -c, 'trap "echo TERM >> {o}/log; exit 0" TERM; echo {m}-polite >/dev/null; while true; do sleep 0.2; done', {m}-polite]
    lifecycle:
      preStop:
        httpGet: {{host: 127.0.0.1, port: {hook_port}, path: /pre-stop}}
    volumeMounts: [{{name: out, mountPath: {o}}}]
  volumes:
  - {{name: out, hostPath: {{path: {o}, type: DirectoryOrCreate}}}}
---
apiVersion: v1
kind: Pod
metadata: {{name: stubborn}}
spec:
  terminationGracePeriodSeconds: 3
  containers:
  - name: c
    image: busybox
    command: [sh, -c, 'trap "" TERM; while true; do sleep 0.2; done', {m}-stubborn]
"#,
        o = out.display(),
        m = marker
    );
    let file = cluster.write_file("term.yaml", &manifest);
    k.ok(&["apply", "-f", file.to_str().unwrap_or_default()]);
    for pod in ["polite", "stubborn"] {
        cluster.wait_until("running", LIMIT, || {
            let p = k.json(&["get", "pod", pod]);
            p["status"]["containerStatuses"][0]["state"]["running"].is_object().then_some(())
        });
    }
    assert!(process_with(&format!("{marker}-polite")) && process_with(&format!("{marker}-stubborn")));

    k.ok(&["delete", "pod", "polite", "--wait=true"]);
    assert!(!process_with(&format!("{marker}-polite")), "the container's process outlived the pod object");
    assert_eq!(seen_rx.recv_timeout(Duration::from_secs(5)).ok().as_deref(), Some("GET /pre-stop HTTP/1.1"));
    assert_eq!(std::fs::read_to_string(out.join("log")).unwrap_or_default(), "TERM\n");

    let began = Instant::now();
    k.ok(&["delete", "pod", "stubborn", "--wait=true"]);
    let took = began.elapsed();
    assert!(!process_with(&format!("{marker}-stubborn")), "the SIGTERM-ignoring process survived");
    assert!(took >= Duration::from_millis(2500), "killed before its 3 s grace period: {took:?}");
}

#[test]
fn restart_counts_go_on_across_a_restart_of_the_node() {
    let mut cluster = Cluster::builder(Backend::Embedded).arg("--node").start();
    let k = cluster.kubectl("1.33");
    cluster.wait_for_ready_node(&k, LIMIT);
    k.ok(&["run", "sleeper", "--image=busybox", "--", "sleep", "3600"]);
    let first = cluster.wait_until("sleeper running", LIMIT, || {
        let c = k.json(&["get", "pod", "sleeper"])["status"]["containerStatuses"][0].clone();
        c["state"]["running"].is_object().then_some(c)
    });
    assert_eq!(first["restartCount"], 0);
    cluster.stop(Stop::Term);
    cluster.restart();
    let k = cluster.kubectl("1.33");
    let again = cluster.wait_until("sleeper running in a new container", LIMIT, || {
        let c = k.json(&["get", "pod", "sleeper"])["status"]["containerStatuses"][0].clone();
        (c["state"]["running"].is_object() && c["containerID"] != first["containerID"]).then_some(c)
    });
    assert_eq!(again["restartCount"], 1, "{again}");
    assert!(again["lastState"]["terminated"].is_object(), "{again}");
}
