//! Restart persistence: objects written before the server stops (SIGTERM or
//! SIGKILL) are there after it starts again on the same store, with the same
//! uid and resourceVersion, and new writes continue the revision sequence.

use std::collections::BTreeMap;

use super::apply::apply_app;
use super::manifests::configmap;
use crate::common::{str_at, Cluster, Kubectl, Stop};

const KINDS: &[&str] = &[
    "namespaces",
    "configmaps",
    "pods",
    "services",
    "endpointslices",
    "deployments",
];

/// (kind, namespace, name) → (uid, resourceVersion, creationTimestamp).
type Snapshot = BTreeMap<(String, String, String), (String, String, String)>;

fn snapshot(k: &Kubectl) -> Snapshot {
    let mut snap = Snapshot::new();
    for kind in KINDS {
        let list = k.json(&["get", kind, "-A"]);
        for item in list["items"].as_array().into_iter().flatten() {
            let ns = item["metadata"]["namespace"]
                .as_str()
                .unwrap_or("")
                .to_owned();
            snap.insert(
                (
                    kind.to_string(),
                    ns,
                    str_at(item, "/metadata/name").to_owned(),
                ),
                (
                    str_at(item, "/metadata/uid").to_owned(),
                    str_at(item, "/metadata/resourceVersion").to_owned(),
                    str_at(item, "/metadata/creationTimestamp").to_owned(),
                ),
            );
        }
    }
    snap
}

fn restart_keeps_objects(c: &mut Cluster, k: &Kubectl, how: Stop) {
    apply_app(c, k);
    let docs: Vec<String> = (0..10)
        .map(|i| configmap("shop", &format!("cm-{i}"), &[("i", &i.to_string())]))
        .collect();
    let f = c.write_file("many.yaml", &docs.join("---\n"));
    k.ok(&["create", "-f", f.to_str().unwrap()]);
    // The last write before the stop is acknowledged: it must survive too.
    k.ok(&[
        "patch",
        "configmap",
        "cm-9",
        "-n",
        "shop",
        "--type=merge",
        "-p",
        r#"{"data":{"last":"yes"}}"#,
    ]);

    let before = snapshot(k);
    assert!(before.len() >= 16, "objects to compare: {before:#?}");
    let max_rv = before
        .values()
        .filter_map(|v| v.1.parse::<u64>().ok())
        .max()
        .unwrap_or(0);

    let status = c.stop(how);
    if how == Stop::Term {
        assert!(
            status.success(),
            "rkube should exit 0 after SIGTERM, got {status}; log:\n{}",
            c.server_log()
        );
    }
    c.restart();

    let after = snapshot(k);
    assert_eq!(
        after, before,
        "objects (uid, resourceVersion, creationTimestamp) after restart"
    );
    let cm = k.json(&["get", "configmap", "cm-9", "-n", "shop"]);
    assert_eq!(str_at(&cm, "/data/last"), "yes");

    let out = k.ok(&[
        "create",
        "configmap",
        "after",
        "-n",
        "shop",
        "--from-literal=a=1",
        "-o",
        "json",
    ]);
    let rv: u64 = str_at(&out.json(), "/metadata/resourceVersion")
        .parse()
        .expect("numeric resourceVersion");
    assert!(
        rv > max_rv,
        "a write after restart continues the revision sequence: {rv} <= {max_rv}"
    );
}

/// SIGTERM: graceful stop (exit 0), then restart on the same store.
pub fn restart_after_sigterm_keeps_objects_and_resource_versions(c: &mut Cluster, k: &Kubectl) {
    restart_keeps_objects(c, k, Stop::Term);
}

/// SIGKILL: nothing acknowledged may be lost.
pub fn restart_after_sigkill_keeps_objects_and_resource_versions(c: &mut Cluster, k: &Kubectl) {
    restart_keeps_objects(c, k, Stop::Kill);
}
