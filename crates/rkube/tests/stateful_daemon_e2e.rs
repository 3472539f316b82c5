//! End to end: on `rkube up --node`, StatefulSets and DaemonSets applied
//! with the real kubectl 1.27 and 1.33 get Running pods on this machine
//! (controller manager, scheduler and node agent in one process), and
//! `kubectl rollout status`, `rollout history` and `rollout undo` work on
//! them through their ControllerRevisions.
//!
//! The cluster process is killed by PID when its guard drops; the pods
//! (host processes) die with it.

use crate::common;

use std::time::Duration;

use common::{Backend, Cluster, Kubectl};
use serde_json::Value;

/// Longest wait for a rollout step.
const LIMIT: Duration = Duration::from_secs(90);

const STATEFUL_SET: &str = r#"
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  clusterIP: None
  selector: {app: web}
  ports: [{port: 80}]
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: web}
spec:
  serviceName: web
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: c
        image: busybox
        command: [sleep, "3600"]
        env: [{name: VERSION, value: "1"}]
"#;

const DAEMON_SET: &str = r#"
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent}
spec:
  selector: {matchLabels: {app: agent}}
  template:
    metadata: {labels: {app: agent}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: c
        image: busybox
        command: [sleep, "3600"]
"#;

/// Pods labelled `app=<app>` not being deleted.
fn live_pods(k: &Kubectl, app: &str) -> Vec<Value> {
    let list = k.json(&["get", "pods", "-l", &format!("app={app}")]);
    list["items"].as_array().cloned().unwrap_or_default().into_iter().filter(|p| p["metadata"]["deletionTimestamp"].is_null()).collect()
}

fn env_version(pod: &Value) -> String {
    pod["spec"]["containers"][0]["env"][0]["value"].as_str().unwrap_or("").to_string()
}

/// Revision numbers `kubectl rollout history` lists.
fn history(k: &Kubectl, what: &str) -> Vec<String> {
    let out = k.ok(&["rollout", "history", what]).stdout;
    out.lines().filter_map(|l| l.split_whitespace().next()).filter(|w| w.parse::<u32>().is_ok()).map(String::from).collect()
}

fn stateful_set_rolls_out_updates_undoes_and_scales(version: &str) {
    let cluster = Cluster::builder(Backend::Embedded).arg("--node").start();
    let k = cluster.kubectl(version);
    cluster.wait_for_ready_node(&k, LIMIT);
    let file = cluster.write_file("web.yaml", STATEFUL_SET);
    k.ok(&["apply", "-f", file.to_str().unwrap_or_default()]);
    let status = k.ok(&["rollout", "status", "statefulset/web", "--timeout=90s"]).stdout;
    // The API server defaults `partition: 0`, so kubectl reports a partitioned roll out.
    assert!(status.contains("partitioned roll out complete: 2 new pods have been updated"), "{status}");
    let pods = live_pods(&k, "web");
    let mut names: Vec<&str> = pods.iter().filter_map(|p| p["metadata"]["name"].as_str()).collect();
    names.sort();
    assert_eq!(names, ["web-0", "web-1"]);
    for p in &pods {
        assert_eq!(p["status"]["phase"], "Running", "{p}");
        assert_eq!(p["spec"]["hostname"], p["metadata"]["name"], "{p}");
        assert_eq!(p["spec"]["subdomain"], "web", "{p}");
        assert!(p["spec"]["nodeName"].as_str().is_some_and(|n| !n.is_empty()), "{p}");
    }

    // A template change rolls every pod, highest ordinal first.
    k.ok(&["set", "env", "statefulset/web", "VERSION=2"]);
    let status = k.ok(&["rollout", "status", "statefulset/web", "--timeout=90s"]).stdout;
    assert!(status.contains("roll out complete: 2 new pods have been updated"), "{status}");
    cluster.wait_until("both pods at VERSION=2", LIMIT, || {
        let pods = live_pods(&k, "web");
        (pods.len() == 2 && pods.iter().all(|p| env_version(p) == "2" && p["status"]["phase"] == "Running")).then_some(())
    });
    assert_eq!(history(&k, "statefulset/web"), ["1", "2"]);

    // `rollout undo` applies the previous ControllerRevision's template.
    k.ok(&["rollout", "undo", "statefulset/web"]);
    k.ok(&["rollout", "status", "statefulset/web", "--timeout=90s"]);
    cluster.wait_until("both pods back at VERSION=1", LIMIT, || {
        let pods = live_pods(&k, "web");
        (pods.len() == 2 && pods.iter().all(|p| env_version(p) == "1" && p["status"]["phase"] == "Running")).then_some(())
    });
    assert_eq!(history(&k, "statefulset/web"), ["2", "3"]);

    k.ok(&["scale", "statefulset/web", "--replicas=1"]);
    cluster.wait_until("web-1 gone", LIMIT, || {
        let pods = live_pods(&k, "web");
        (pods.len() == 1 && pods[0]["metadata"]["name"] == "web-0").then_some(())
    });
    let events = k.ok(&["get", "events"]).stdout;
    assert!(events.contains("create Pod web-0 in StatefulSet web successful"), "{events}");
    assert!(events.contains("delete Pod web-1 in StatefulSet web successful"), "{events}");
}

fn daemon_set_runs_one_pod_on_the_node_and_rolls_out(version: &str) {
    let cluster = Cluster::builder(Backend::Embedded).arg("--node").start();
    let k = cluster.kubectl(version);
    cluster.wait_for_ready_node(&k, LIMIT);
    let file = cluster.write_file("agent.yaml", DAEMON_SET);
    k.ok(&["apply", "-f", file.to_str().unwrap_or_default()]);
    let status = k.ok(&["rollout", "status", "daemonset/agent", "--timeout=90s"]).stdout;
    assert!(status.contains("daemon set \"agent\" successfully rolled out"), "{status}");
    let node = k.json(&["get", "nodes"])["items"][0]["metadata"]["name"].as_str().unwrap_or("").to_string();
    let pods = live_pods(&k, "agent");
    assert_eq!(pods.len(), 1, "{pods:?}");
    assert_eq!(pods[0]["spec"]["nodeName"].as_str(), Some(node.as_str()));
    assert_eq!(pods[0]["status"]["phase"], "Running");
    let ds = k.json(&["get", "daemonset", "agent"]);
    let s = &ds["status"];
    assert_eq!((s["desiredNumberScheduled"].as_i64(), s["currentNumberScheduled"].as_i64(), s["numberReady"].as_i64()), (Some(1), Some(1), Some(1)));

    let old = pods[0]["metadata"]["name"].as_str().unwrap_or("").to_string();
    k.ok(&["set", "env", "daemonset/agent", "VERSION=2"]);
    let status = k.ok(&["rollout", "status", "daemonset/agent", "--timeout=90s"]).stdout;
    assert!(status.contains("successfully rolled out"), "{status}");
    cluster.wait_until("the pod replaced", LIMIT, || {
        let pods = live_pods(&k, "agent");
        (pods.len() == 1 && pods[0]["metadata"]["name"] != old.as_str() && pods[0]["status"]["phase"] == "Running").then_some(())
    });
    assert_eq!(history(&k, "daemonset/agent"), ["1", "2"]);
    let events = k.ok(&["get", "events"]).stdout;
    assert!(events.contains(&format!("Deleted pod: {old}")), "{events}");
}

per_kubectl_version!(stateful_set_rolls_out_updates_undoes_and_scales, daemon_set_runs_one_pod_on_the_node_and_rolls_out);
