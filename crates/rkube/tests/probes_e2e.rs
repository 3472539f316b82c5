//! End to end on `rkube up --node` (kubectl 1.33): a readiness probe
//! (httpGet) holds a running pod's `Ready` condition at False until its
//! server answers, and a failing liveness probe (tcpSocket) gets the
//! container killed and restarted, with kubelet's `Unhealthy` and `Killing`
//! events.
//!
//! The HTTP server in the pod is `python3 -m http.server` (the test
//! machine's Python), on a free port. The cluster process is killed by PID
//! when its guard drops; the pods (host processes) die with it.

use crate::common;

use std::time::Duration;

use common::cluster::free_port;
use common::{Backend, Cluster, Kubectl};
use serde_json::Value;

/// Longest wait for a pod transition.
const LIMIT: Duration = Duration::from_secs(60);

fn condition(k: &Kubectl, pod: &str, ty: &str) -> (Value, Value) {
    let p = k.json(&["get", "pod", pod]);
    let c = p["status"]["conditions"].as_array().into_iter().flatten().find(|c| c["type"] == ty).cloned().unwrap_or_default();
    (c["status"].clone(), p["status"]["containerStatuses"][0].clone())
}

#[test]
fn readiness_gates_ready_and_liveness_failures_restart_the_container() {
    let cluster = Cluster::builder(Backend::Embedded).arg("--node").start();
    let k = cluster.kubectl("1.33");
    cluster.wait_for_ready_node(&k, LIMIT);
    let port = free_port();
    let closed = free_port();
    let manifest = format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{name: web}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: c
    image: busybox
    command: [sh, -c, 'sleep 4; exec python3 -m http.server {port}']
    readinessProbe:
      httpGet: {{path: /, port: {port}}}
      periodSeconds: 1
      failureThreshold: 1
---
apiVersion: v1
kind: Pod
metadata: {{name: sick}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: c
    image: busybox
    command: [sleep, "3600"]
    livenessProbe:
      tcpSocket: {{port: {closed}}}
      periodSeconds: 1
      failureThreshold: 2
"#
    );
    let file = cluster.write_file("probes.yaml", &manifest);
    k.ok(&["apply", "-f", file.to_str().unwrap_or_default()]);

    // Running but not Ready while the server sleeps.
    let (ready, container) = cluster.wait_until("web running", LIMIT, || {
        let (ready, c) = condition(&k, "web", "Ready");
        c["state"]["running"].is_object().then_some((ready, c))
    });
    assert_eq!(ready, "False", "{container}");
    assert_eq!(container["ready"], false, "{container}");
    cluster.wait_until("web Ready once the server answers", LIMIT, || {
        let (ready, c) = condition(&k, "web", "Ready");
        (ready == "True" && c["ready"] == true).then_some(())
    });

    // The liveness probe fails twice in a row: killed, restarted.
    cluster.wait_until("sick restarted", LIMIT, || {
        let (_, c) = condition(&k, "sick", "Ready");
        (c["restartCount"].as_i64().unwrap_or(0) >= 1).then_some(())
    });
    let events = k.ok(&["get", "events", "--field-selector", "involvedObject.name=sick"]).stdout;
    assert!(events.contains(&format!(":{closed}: connect: ")) && events.contains("Liveness probe failed: dial tcp "), "{events}");
    assert!(events.contains("Container c failed liveness probe, will be restarted"), "{events}");
}
