//! End to end on `rkube up --node` (as root, so volumes are bind-mounted in
//! the container's own mount namespace) with the real kubectl 1.33: a pod
//! reads its configMap, secret, downwardAPI, projected, emptyDir (tmpfs)
//! and hostPath volumes; a ConfigMap update reaches the mounted file; a
//! missing ConfigMap gives `FailedMount` and keeps the pod
//! `ContainerCreating`.
//!
//! Mount points live under the test's own directory (the runtime creates
//! them on the host's tree). The cluster process is killed by PID when its
//! guard drops; the pods (host processes) die with it.

use crate::common;

use std::time::Duration;

use common::{Backend, Cluster};

/// Longest wait for a pod transition (a ConfigMap update takes up to the
/// agent's 10 s refresh).
const LIMIT: Duration = Duration::from_secs(60);

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

#[test]
fn pods_read_every_volume_type_and_see_config_map_updates() {
    if !is_root() {
        eprintln!("skipped: volumes are mounted only when rkube runs as root");
        return;
    }
    let cluster = Cluster::builder(Backend::Embedded).arg("--node").start();
    let k = cluster.kubectl("1.33");
    cluster.wait_for_ready_node(&k, LIMIT);
    let base = cluster.dir().join("mnt");
    let host_data = cluster.dir().join("host-data");
    let b = base.display();
    let manifest = format!(
        r#"
apiVersion: v1
kind: ConfigMap
metadata: {{name: app-config}}
data: {{app.conf: "mode=fast", other: "x"}}
---
apiVersion: v1
kind: Secret
metadata: {{name: app-secret}}
stringData: {{password: s3cret}}
---
apiVersion: v1
kind: Pod
metadata: {{name: vols, labels: {{app: vols, tier: web}}}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: c
    image: busybox
    command: [sh, -c]
    args:
    - |
      echo "CFG=$(cat {b}/cfg/conf/app.conf)"
      echo "CFGMODE=$(stat -L -c %a {b}/cfg/conf/app.conf)"
      echo "SECRET=$(cat {b}/secret/password) MODE=$(stat -L -c %a {b}/secret/password)"
      echo "NAME=$(cat {b}/info/name) LABELS=$(cat {b}/info/labels | tr '\n' ',')"
      echo "PROJ=$(cat {b}/all/app.conf)/$(cat {b}/all/password)"
      echo "CACHE=$(stat -f -c %T {b}/cache)"
      echo written > {b}/data/from-pod
      while true; do echo "NOW=$(cat {b}/cfg/conf/app.conf)"; sleep 1; done
    volumeMounts:
    - {{name: cfg, mountPath: {b}/cfg}}
    - {{name: secret, mountPath: {b}/secret, readOnly: true}}
    - {{name: info, mountPath: {b}/info}}
    - {{name: all, mountPath: {b}/all}}
    - {{name: cache, mountPath: {b}/cache}}
    - {{name: data, mountPath: {b}/data}}
  volumes:
  - name: cfg
    configMap:
      name: app-config
      items: [{{key: app.conf, path: conf/app.conf, mode: 0600}}]
  - name: secret
    secret: {{secretName: app-secret, defaultMode: 0400}}
  - name: info
    downwardAPI:
      items:
      - {{path: name, fieldRef: {{fieldPath: metadata.name}}}}
      - {{path: labels, fieldRef: {{fieldPath: metadata.labels}}}}
  - name: all
    projected:
      sources:
      - configMap: {{name: app-config, items: [{{key: app.conf, path: app.conf}}]}}
      - secret: {{name: app-secret}}
  - name: cache
    emptyDir: {{medium: Memory, sizeLimit: 16Mi}}
  - name: data
    hostPath: {{path: {h}, type: DirectoryOrCreate}}
"#,
        h = host_data.display()
    );
    let file = cluster.write_file("vols.yaml", &manifest);
    k.ok(&["apply", "-f", file.to_str().unwrap_or_default()]);
    let log = cluster.wait_until("the volumes' contents in the log", LIMIT, || {
        let out = k.run(&["logs", "vols"]).stdout;
        out.contains("NOW=").then_some(out)
    });
    for want in [
        "CFG=mode=fast",
        "CFGMODE=600",
        "SECRET=s3cret MODE=400",
        "NAME=vols LABELS=app=\"vols\",tier=\"web\"",
        "PROJ=mode=fast/s3cret",
        "CACHE=tmpfs",
    ] {
        assert!(log.contains(want), "{want:?} missing in:\n{log}");
    }
    assert_eq!(std::fs::read_to_string(host_data.join("from-pod")).unwrap_or_default(), "written\n");

    k.ok(&["patch", "configmap", "app-config", "--type=merge", "-p", r#"{"data":{"app.conf":"mode=slow"}}"#]);
    cluster.wait_until("the update in the mounted file", LIMIT, || {
        k.run(&["logs", "vols", "--tail=1"]).stdout.contains("NOW=mode=slow").then_some(())
    });

    // A missing ConfigMap: FailedMount, and the container is not started.
    let missing = format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{name: no-config}}
spec:
  containers:
  - name: c
    image: busybox
    command: [sleep, "3600"]
    volumeMounts: [{{name: cfg, mountPath: {b}/missing}}]
  volumes:
  - {{name: cfg, configMap: {{name: not-there}}}}
"#
    );
    let file = cluster.write_file("missing.yaml", &missing);
    k.ok(&["apply", "-f", file.to_str().unwrap_or_default()]);
    cluster.wait_until("the FailedMount event", LIMIT, || {
        let events = k.ok(&["get", "events", "--field-selector", "involvedObject.name=no-config"]).stdout;
        events.contains("MountVolume.SetUp failed for volume \"cfg\" : configmap \"not-there\" not found").then_some(())
    });
    let pod = k.json(&["get", "pod", "no-config"]);
    assert_eq!(pod["status"]["containerStatuses"][0]["state"]["waiting"]["reason"], "ContainerCreating", "{pod}");
}
