//! Namespace deletion and cascading deletion through kubectl, served by the
//! namespace controller and the garbage collector (`rkube up` runs them in
//! its process; the etcd backend runs `rkube controller-manager` beside
//! `rkube apiserver`).

use std::time::{Duration, Instant};

use crate::common::{str_at, Cluster, Kubectl, Table};

const REMOVE_FINALIZERS: &str = r#"[{"op":"remove","path":"/metadata/finalizers"}]"#;

/// Runs `kubectl get <args>` until `check` accepts its stdout (30 s limit).
#[track_caller]
fn wait_until(k: &Kubectl, args: &[&str], what: &str, check: impl Fn(&str) -> bool) {
    let start = Instant::now();
    loop {
        let out = k.run(args);
        if out.code == Some(0) && check(&out.stdout) {
            return;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "timed out waiting for {what}; last: {out:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `kubectl delete ns` answers at once, `kubectl get ns` shows the namespace
/// `Terminating` while content held by a finalizer remains, creating in it
/// is refused, and it goes once the content is gone.
pub fn delete_namespace_shows_terminating_then_it_goes(c: &mut Cluster, k: &Kubectl) {
    k.ok(&["create", "namespace", "scratch"]);
    k.ok(&["create", "configmap", "plain", "-n", "scratch", "--from-literal=a=1"]);
    let held = c.write_file(
        "held-in-scratch.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: held\n  namespace: scratch\n  finalizers:\n  - example.com/hold\n",
    );
    k.ok(&["create", "-f", held.to_str().unwrap()]);

    let out = k.ok(&["delete", "namespace", "scratch", "--wait=false"]);
    assert_eq!(out.stdout.trim_end(), r#"namespace "scratch" deleted"#);
    let t = Table::parse(&k.ok(&["get", "namespace", "scratch"]).stdout);
    let row = t.row("NAME", "scratch");
    assert_eq!(t.cell(&row, "STATUS"), "Terminating");
    k.fails_with(
        &["create", "configmap", "late", "-n", "scratch", "--from-literal=a=1"],
        r#"error: failed to create configmap: configmaps "late" is forbidden: unable to create new content in namespace scratch because it is being terminated"#,
    );
    wait_until(k, &["get", "configmaps", "-n", "scratch", "-o", "name"], "only the held ConfigMap left", |s| {
        s.trim_end() == "configmap/held"
    });
    let ns = k.json(&["get", "namespace", "scratch"]);
    assert_eq!(str_at(&ns, "/status/phase"), "Terminating");

    k.ok(&["patch", "configmap", "held", "-n", "scratch", "--type=json", "-p", REMOVE_FINALIZERS]);
    k.ok(&["wait", "--for=delete", "namespace/scratch", "--timeout=30s"]);
    k.fails_with(&["get", "namespace", "scratch"], r#"Error from server (NotFound): namespaces "scratch" not found"#);
}

const APP: &str = "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: app\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  namespace: app\ndata:\n  a: \"1\"\n---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: creds\n  namespace: app\nstringData:\n  p: q\n";

/// `kubectl delete -f` of a manifest holding its own namespace deletes all
/// of it and waits until everything is gone.
pub fn delete_manifest_holding_its_own_namespace_succeeds(c: &mut Cluster, k: &Kubectl) {
    let f = c.write_file("app.yaml", APP);
    k.ok(&["apply", "-f", f.to_str().unwrap()]);
    let out = k.ok(&["delete", "-f", f.to_str().unwrap(), "--timeout=60s"]);
    assert_eq!(
        out.stdout_lines(),
        vec![r#"namespace "app" deleted"#, r#"configmap "settings" deleted"#, r#"secret "creds" deleted"#]
    );
    k.fails_with(&["get", "namespace", "app"], r#"Error from server (NotFound): namespaces "app" not found"#);
}

/// A ConfigMap `name` in `default` owned by `owner` (a ConfigMap with `uid`).
fn dependent(c: &Cluster, k: &Kubectl, name: &str, owner: &str, uid: &str, block: bool, hold: bool) {
    let finalizers = if hold { "  finalizers:\n  - example.com/hold\n" } else { "" };
    let manifest = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: default\n{finalizers}  ownerReferences:\n  - apiVersion: v1\n    kind: ConfigMap\n    name: {owner}\n    uid: {uid}\n    blockOwnerDeletion: {block}\n"
    );
    let f = c.write_file(&format!("{name}.yaml"), &manifest);
    k.ok(&["create", "-f", f.to_str().unwrap()]);
}

fn owner(k: &Kubectl, name: &str) -> String {
    k.ok(&["create", "configmap", name, "-n", "default", "--from-literal=a=1"]);
    str_at(&k.json(&["get", "configmap", name, "-n", "default"]), "/metadata/uid").to_string()
}

/// `--cascade=background` removes the owner, then the collector its
/// dependents; `--cascade=foreground` keeps the owner (with
/// `foregroundDeletion`) until its blocking dependents are gone;
/// `--cascade=orphan` removes the owner and leaves its dependents without
/// the reference.
pub fn delete_cascade_background_foreground_orphan(c: &mut Cluster, k: &Kubectl) {
    let uid = owner(k, "bg-owner");
    dependent(c, k, "bg-dep", "bg-owner", &uid, false, false);
    let out = k.ok(&["delete", "configmap", "bg-owner", "-n", "default", "--cascade=background"]);
    assert_eq!(out.stdout.trim_end(), r#"configmap "bg-owner" deleted"#);
    k.ok(&["wait", "--for=delete", "configmap/bg-dep", "-n", "default", "--timeout=30s"]);

    let uid = owner(k, "fg-owner");
    dependent(c, k, "fg-blocker", "fg-owner", &uid, true, true);
    dependent(c, k, "fg-free", "fg-owner", &uid, false, false);
    let out = k.ok(&["delete", "configmap", "fg-owner", "-n", "default", "--cascade=foreground", "--wait=false"]);
    assert_eq!(out.stdout.trim_end(), r#"configmap "fg-owner" deleted"#);
    k.ok(&["wait", "--for=delete", "configmap/fg-free", "-n", "default", "--timeout=30s"]);
    let o = k.json(&["get", "configmap", "fg-owner", "-n", "default"]);
    assert_eq!(o["metadata"]["finalizers"], serde_json::json!(["foregroundDeletion"]));
    assert!(!str_at(&o, "/metadata/deletionTimestamp").is_empty());
    let b = k.json(&["get", "configmap", "fg-blocker", "-n", "default"]);
    assert!(!str_at(&b, "/metadata/deletionTimestamp").is_empty(), "the blocking dependent is being deleted");
    k.ok(&["patch", "configmap", "fg-blocker", "-n", "default", "--type=json", "-p", REMOVE_FINALIZERS]);
    k.ok(&["wait", "--for=delete", "configmap/fg-owner", "-n", "default", "--timeout=30s"]);

    let uid = owner(k, "or-owner");
    dependent(c, k, "or-dep", "or-owner", &uid, true, false);
    let out = k.ok(&["delete", "configmap", "or-owner", "-n", "default", "--cascade=orphan", "--timeout=30s"]);
    assert_eq!(out.stdout.trim_end(), r#"configmap "or-owner" deleted"#);
    k.fails_with(
        &["get", "configmap", "or-owner", "-n", "default"],
        r#"Error from server (NotFound): configmaps "or-owner" not found"#,
    );
    std::thread::sleep(Duration::from_secs(1));
    let d = k.json(&["get", "configmap", "or-dep", "-n", "default"]);
    assert_eq!(d["metadata"].get("ownerReferences"), None, "the orphan keeps living without its owner reference");
}
