//! End to end on `rkube up --node` with the real kubectl 1.27 and 1.33:
//! a container's environment from ConfigMaps, Secrets and the downward
//! API, `$(VAR)` expansion in its command, `CreateContainerConfigError`
//! for a missing ConfigMap (and Running once it exists), and the node
//! agent's events (`Pulled`, `Created`, `Started`, `Failed`, `Killing`)
//! as `kubectl get events` shows them.
//!
//! The cluster process is killed by PID when its guard drops; the pods
//! (host processes) die with it.

use crate::common;

use std::time::Duration;

use common::{Backend, Cluster, Kubectl};
use serde_json::Value;

/// Longest wait for a pod transition.
const LIMIT: Duration = Duration::from_secs(60);

const MANIFEST: &str = r#"
apiVersion: v1
kind: ConfigMap
metadata: {name: app-config}
data: {MODE: fast, LEVEL: "3"}
---
apiVersion: v1
kind: Secret
metadata: {name: app-secret}
stringData: {password: s3cret}
---
apiVersion: v1
kind: Pod
metadata: {name: env-demo, labels: {app: demo}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: c
    image: busybox
    command: [sh, -c, 'echo "MODE=$MODE LEVEL=$APP_LEVEL PASS=$DB_PASSWORD POD=$POD_NAME APP=$APP URL=$URL ARG=$(MODE)"; sleep 3600']
    envFrom:
    - configMapRef: {name: app-config}
    env:
    - {name: APP_LEVEL, valueFrom: {configMapKeyRef: {name: app-config, key: LEVEL}}}
    - {name: DB_PASSWORD, valueFrom: {secretKeyRef: {name: app-secret, key: password}}}
    - {name: POD_NAME, valueFrom: {fieldRef: {fieldPath: metadata.name}}}
    - {name: APP, valueFrom: {fieldRef: {fieldPath: "metadata.labels['app']"}}}
    - {name: URL, value: "http://$(MODE):$(APP_LEVEL)"}
"#;

const MISSING: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: needs-config}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: c
    image: busybox
    command: [sh, -c, 'echo "FLAG=$FLAG"; sleep 3600']
    env:
    - {name: FLAG, valueFrom: {configMapKeyRef: {name: late-config, key: flag}}}
"#;

fn container_state(k: &Kubectl, pod: &str) -> Value {
    k.json(&["get", "pod", pod])["status"]["containerStatuses"][0]["state"].clone()
}

fn environment_comes_from_config_maps_secrets_and_the_downward_api(version: &str) {
    let cluster = Cluster::builder(Backend::Embedded).arg("--node").start();
    let k = cluster.kubectl(version);
    cluster.wait_for_ready_node(&k, LIMIT);
    let file = cluster.write_file("env.yaml", MANIFEST);
    k.ok(&["apply", "-f", file.to_str().unwrap_or_default()]);
    let want = "MODE=fast LEVEL=3 PASS=s3cret POD=env-demo APP=demo URL=http://fast:3 ARG=fast";
    cluster.wait_until("the environment in the log", LIMIT, || {
        let out = k.run(&["logs", "env-demo"]);
        out.stdout.contains(want).then_some(())
    });

    // A missing ConfigMap: waiting with upstream's reason and message, a
    // `Failed` event, then Running once the ConfigMap is created.
    let file = cluster.write_file("missing.yaml", MISSING);
    k.ok(&["apply", "-f", file.to_str().unwrap_or_default()]);
    let waiting = cluster.wait_until("CreateContainerConfigError", LIMIT, || {
        let state = container_state(&k, "needs-config");
        (state["waiting"]["reason"] == "CreateContainerConfigError").then_some(state)
    });
    assert_eq!(waiting["waiting"]["message"], "configmap \"late-config\" not found", "{waiting}");
    let table = k.ok(&["get", "pod", "needs-config"]).stdout;
    assert!(table.contains("CreateContainerConfigError"), "{table}");
    cluster.wait_until("the Failed event", LIMIT, || {
        let events = k.ok(&["get", "events", "--field-selector", "involvedObject.name=needs-config"]).stdout;
        events.contains("Error: configmap \"late-config\" not found").then_some(())
    });
    k.ok(&["create", "configmap", "late-config", "--from-literal=flag=on"]);
    cluster.wait_until("needs-config running with FLAG=on", LIMIT, || {
        let out = k.run(&["logs", "needs-config"]);
        (container_state(&k, "needs-config")["running"].is_object() && out.stdout.contains("FLAG=on")).then_some(())
    });

    // The node agent's events, as kubectl shows them.
    let events = k.ok(&["get", "events", "--field-selector", "involvedObject.name=env-demo"]).stdout;
    for want in ["Created container: c", "Started container c"] {
        assert!(events.contains(want), "{want:?} missing in:\n{events}");
    }
    // The first pod of an image pulls it; later ones find it present.
    let pulled = events.lines().find(|l| l.contains("Pulled")).unwrap_or_default();
    assert!(
        pulled.contains("Successfully pulled image \"busybox\" in ") || pulled.contains("Container image \"busybox\" already present on machine"),
        "{events}"
    );
    k.ok(&["delete", "pod", "env-demo", "--wait=true"]);
    let events = k.ok(&["get", "events", "--field-selector", "involvedObject.name=env-demo"]).stdout;
    assert!(events.contains("Stopping container c"), "{events}");
}

per_kubectl_version!(environment_comes_from_config_maps_secrets_and_the_downward_api);
