//! End to end: `rkube up --node` places pods with its in-process scheduler,
//! and the real kubectl 1.27 and 1.33 show the scheduler's events:
//! `Scheduled` in `kubectl get events`, `FailedScheduling` with upstream's
//! text in `kubectl describe pod` for a pod no node can hold.

use crate::common;

use std::thread;
use std::time::{Duration, Instant};

use common::{str_at, Backend, Cluster, Kubectl};

/// Longest wait for the scheduler's effects.
const LIMIT: Duration = Duration::from_secs(30);

/// The name of the Ready node.
#[track_caller]
fn ready_node(k: &Kubectl) -> String {
    let deadline = Instant::now() + LIMIT;
    loop {
        let nodes = k.json(&["get", "nodes"]);
        let ready = nodes["items"].as_array().into_iter().flatten().find(|n| {
            n["status"]["conditions"].as_array().into_iter().flatten().any(|c| c["type"] == "Ready" && c["status"] == "True")
        });
        if let Some(n) = ready {
            return str_at(n, "/metadata/name").to_owned();
        }
        assert!(Instant::now() < deadline, "no Ready node: {nodes}");
        thread::sleep(Duration::from_millis(200));
    }
}

/// Runs `kubectl <args>` until a line of its output satisfies `pred`; returns that line.
#[track_caller]
fn line_eventually(k: &Kubectl, args: &[&str], what: &str, pred: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + LIMIT;
    loop {
        let out = k.ok(args).stdout;
        if let Some(l) = out.lines().find(|l| pred(l)) {
            return l.to_string();
        }
        assert!(Instant::now() < deadline, "no {what} in `kubectl {}`:\n{out}", args.join(" "));
        thread::sleep(Duration::from_millis(300));
    }
}

const HUGE: &str = r#"apiVersion: v1
kind: Pod
metadata:
  name: huge
spec:
  restartPolicy: Never
  containers:
  - name: main
    image: busybox
    command: ["true"]
    resources:
      requests:
        cpu: "100000"
"#;

fn scheduler_events_show_in_kubectl(version: &str) {
    let cluster = Cluster::builder(Backend::Embedded).arg("--node").start();
    let k = cluster.kubectl(version);
    let node = ready_node(&k);
    k.ok(&["run", "demo", "--image=busybox", "--restart=Never", "--", "true"]);
    let assigned = format!("Successfully assigned default/demo to {node}");
    let row = line_eventually(&k, &["get", "events"], "Scheduled event", |l| l.contains("pod/demo") && l.contains("Scheduled"));
    let cols: Vec<&str> = row.split_whitespace().collect();
    assert!(cols.windows(3).any(|w| w == ["Normal", "Scheduled", "pod/demo"]), "{row}");
    assert!(row.trim_end().ends_with(&assigned), "{row}");
    let bound = k.json(&["get", "pod", "demo"]);
    assert_eq!(str_at(&bound, "/spec/nodeName"), node);

    // No node has 100000 cpus: the pod stays Pending with upstream's text.
    k.run_stdin(&["create", "-f", "-"], HUGE).success();
    let message = "0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod.";
    let line = line_eventually(&k, &["describe", "pod", "huge"], "FailedScheduling event", |l| l.contains("FailedScheduling"));
    let cols: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(cols.first().copied(), Some("Warning"), "{line}");
    assert_eq!(cols.get(1).copied(), Some("FailedScheduling"), "{line}");
    assert!(cols.contains(&"default-scheduler"), "{line}");
    assert!(line.trim_end().ends_with(message), "{line}");
    let pending = k.json(&["get", "pod", "huge"]);
    assert_eq!(str_at(&pending, "/status/phase"), "Pending");
    assert!(pending.pointer("/spec/nodeName").is_none(), "{pending}");
    let cond = pending["status"]["conditions"].as_array().into_iter().flatten().find(|c| c["type"] == "PodScheduled").cloned();
    let cond = cond.unwrap_or_else(|| panic!("no PodScheduled condition: {pending}"));
    assert_eq!((cond["status"].as_str(), cond["reason"].as_str(), cond["message"].as_str()), (Some("False"), Some("Unschedulable"), Some(message)));
}

per_kubectl_version!(scheduler_events_show_in_kubectl);
