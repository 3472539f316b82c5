//! End to end on `rkube up --node` (as root, so volumes are bind-mounted)
//! with the real kubectl 1.33 and 1.27: PersistentVolumeClaims of the
//! default `local-path` StorageClass bind to volumes the local-path
//! provisioner creates under `<data-dir>/storage`; a pod's writes land
//! there; a StatefulSet's `volumeClaimTemplates` claims keep a member's data
//! across its pod's deletion; deleting a claim deletes its volume and
//! directory (reclaim policy `Delete`).
//!
//! Mount points live under the test's own directory (the runtime creates
//! them on the host's tree). The cluster process is killed by PID when its
//! guard drops; the pods (host processes) die with it.

use crate::common;

use std::path::PathBuf;
use std::time::Duration;

use common::{Backend, Cluster};

/// Longest wait for a pod transition.
const LIMIT: Duration = Duration::from_secs(90);

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

#[test]
fn claims_of_the_default_class_get_local_path_volumes_that_keep_data_and_go_with_their_claim() {
    if !is_root() {
        eprintln!("skipped: volumes are mounted only when rkube runs as root");
        return;
    }
    let cluster = Cluster::builder(Backend::Embedded).arg("--node").start();
    let k = cluster.kubectl("1.33");
    let k27 = cluster.kubectl("1.27");
    cluster.wait_for_ready_node(&k, LIMIT);
    let storage = cluster.data_dir().canonicalize().unwrap_or_else(|_| cluster.data_dir()).join("storage");
    let sc = k.json(&["get", "storageclass", "local-path"]);
    assert_eq!(sc["provisioner"], "rancher.io/local-path");
    assert_eq!(sc["volumeBindingMode"], "WaitForFirstConsumer");
    assert_eq!(sc["metadata"]["annotations"]["storageclass.kubernetes.io/is-default-class"], "true");
    let listed = k.ok(&["get", "storageclass"]).stdout;
    assert!(listed.contains("local-path (default)"), "{listed}");

    let b = cluster.dir().join("mnt");
    let b = b.display();
    let manifest = format!(
        r#"
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {{name: data}}
spec:
  accessModes: [ReadWriteOnce]
  resources: {{requests: {{storage: 1Gi}}}}
---
apiVersion: v1
kind: Pod
metadata: {{name: writer}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: c
    image: busybox
    command: [sh, -c, "echo hello > {b}/data/greeting && echo WROTE && sleep 3600"]
    volumeMounts: [{{name: data, mountPath: {b}/data}}]
  volumes:
  - {{name: data, persistentVolumeClaim: {{claimName: data}}}}
"#
    );
    let file = cluster.write_file("pvc.yaml", &manifest);
    k.ok(&["apply", "-f", file.to_str().unwrap_or_default()]);
    cluster.wait_until("the writer's log", LIMIT, || k.run(&["logs", "writer"]).stdout.contains("WROTE").then_some(()));
    let claim = k.json(&["get", "pvc", "data"]);
    assert_eq!(claim["status"]["phase"], "Bound", "{claim}");
    assert_eq!(claim["spec"]["storageClassName"], "local-path", "the DefaultStorageClass plugin sets the class");
    let uid = claim["metadata"]["uid"].as_str().unwrap_or_default().to_string();
    let volume = format!("pvc-{uid}");
    assert_eq!(claim["spec"]["volumeName"], volume.as_str());
    let node = k.json(&["get", "pod", "writer"])["spec"]["nodeName"].as_str().unwrap_or_default().to_string();
    assert_eq!(claim["metadata"]["annotations"]["volume.kubernetes.io/selected-node"], node.as_str());
    let pv = k.json(&["get", "pv", &volume]);
    let dir: PathBuf = storage.join(format!("pvc-{uid}_default_data"));
    assert_eq!(pv["spec"]["hostPath"]["path"], dir.display().to_string().as_str(), "{pv}");
    assert_eq!(pv["status"]["phase"], "Bound");
    assert_eq!(pv["spec"]["claimRef"]["name"], "data");
    assert_eq!(std::fs::read_to_string(dir.join("greeting")).unwrap_or_default(), "hello\n");
    let events = k.ok(&["get", "events", "--field-selector", "involvedObject.name=data"]).stdout;
    assert!(events.contains("ExternalProvisioning") && events.contains("ProvisioningSucceeded"), "{events}");

    // A StatefulSet member finds its earlier data after its pod is replaced (kubectl 1.27).
    let sts = format!(
        r#"
apiVersion: apps/v1
kind: StatefulSet
metadata: {{name: web}}
spec:
  serviceName: web
  replicas: 1
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: c
        image: busybox
        command: [sh, -c, "if [ -f {b}/www/first ]; then echo FOUND=$(cat {b}/www/first); else echo $HOSTNAME-1 > {b}/www/first; echo CREATED; fi; sleep 3600"]
        volumeMounts: [{{name: www, mountPath: {b}/www}}]
  volumeClaimTemplates:
  - metadata: {{name: www}}
    spec:
      accessModes: [ReadWriteOnce]
      resources: {{requests: {{storage: 64Mi}}}}
"#
    );
    let file = cluster.write_file("sts.yaml", &sts);
    k27.ok(&["apply", "-f", file.to_str().unwrap_or_default()]);
    cluster.wait_until("web-0 created its data", LIMIT, || k27.run(&["logs", "web-0"]).stdout.contains("CREATED").then_some(()));
    let www = k27.json(&["get", "pvc", "www-web-0"]);
    assert_eq!(www["status"]["phase"], "Bound", "{www}");
    let old_uid = k27.json(&["get", "pod", "web-0"])["metadata"]["uid"].clone();
    k27.ok(&["delete", "pod", "web-0"]);
    cluster.wait_until("a new web-0 that found the data", LIMIT, || {
        let pod = k27.run(&["get", "pod", "web-0", "-o", "json"]);
        let uid = serde_json::from_str::<serde_json::Value>(&pod.stdout).ok()?["metadata"]["uid"].clone();
        (uid != old_uid && k27.run(&["logs", "web-0"]).stdout.contains("FOUND=web-0-1")).then_some(())
    });

    // Deleting the claim (after its pod) deletes the volume and its directory.
    k.ok(&["delete", "pod", "writer"]);
    k.ok(&["delete", "pvc", "data"]);
    cluster.wait_until("the volume deleted", LIMIT, || {
        let out = k.run(&["get", "pv", &volume]);
        (out.code != Some(0) && out.stderr.contains("NotFound")).then_some(())
    });
    assert!(!dir.exists(), "{} is removed", dir.display());
}
