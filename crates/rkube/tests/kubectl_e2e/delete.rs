//! `kubectl delete`: by default it waits until the object is gone;
//! `--wait=false` returns at once. Finalizers keep a deleted object (marked
//! with `deletionTimestamp`) until they are removed.

use std::time::Duration;

use crate::common::{str_at, Cluster, Kubectl};

const HELD: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: held\n  namespace: default\n  finalizers:\n  - example.com/hold\ndata:\n  a: \"1\"\n";

const UNSCHEDULED_POD: &str = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: gone\n  namespace: default\nspec:\n  containers:\n  - name: c\n    image: busybox:1.36\n";

/// Plain delete removes the object and waits for it; an unscheduled pod goes
/// at once; with a finalizer, `--wait=false` returns while the object stays
/// marked, and a waiting delete returns only once the finalizer is removed.
pub fn delete_waits_until_gone_and_wait_false_returns_at_once(c: &mut Cluster, k: &Kubectl) {
    k.ok(&[
        "create",
        "configmap",
        "plain",
        "-n",
        "default",
        "--from-literal=a=1",
    ]);
    let out = k.ok(&["delete", "configmap", "plain", "-n", "default"]);
    assert_eq!(out.stdout.trim_end(), r#"configmap "plain" deleted"#);
    k.fails_with(
        &["get", "configmap", "plain", "-n", "default"],
        r#"Error from server (NotFound): configmaps "plain" not found"#,
    );

    let f = c.write_file("gone.yaml", UNSCHEDULED_POD);
    k.ok(&["create", "-f", f.to_str().unwrap()]);
    let out = k.ok(&["delete", "pod", "gone", "-n", "default", "--timeout=20s"]);
    assert_eq!(out.stdout.trim_end(), r#"pod "gone" deleted"#);
    k.fails_with(
        &["get", "pod", "gone", "-n", "default"],
        r#"Error from server (NotFound): pods "gone" not found"#,
    );

    let f = c.write_file("held.yaml", HELD);
    k.ok(&["create", "-f", f.to_str().unwrap()]);
    let out = k.ok(&[
        "delete",
        "configmap",
        "held",
        "-n",
        "default",
        "--wait=false",
    ]);
    assert_eq!(out.stdout.trim_end(), r#"configmap "held" deleted"#);
    assert!(
        out.elapsed < Duration::from_secs(10),
        "--wait=false returned after {:?}",
        out.elapsed
    );
    let cm = k.json(&["get", "configmap", "held", "-n", "default"]);
    assert!(!str_at(&cm, "/metadata/deletionTimestamp").is_empty());
    assert_eq!(
        cm["metadata"]["finalizers"],
        serde_json::json!(["example.com/hold"])
    );

    let mut waiting = k.spawn(&[
        "delete",
        "configmap",
        "held",
        "-n",
        "default",
        "--timeout=40s",
    ]);
    waiting.expect_line(
        "`configmap \"held\" deleted`",
        Duration::from_secs(15),
        |l| l == r#"configmap "held" deleted"#,
    );
    std::thread::sleep(Duration::from_millis(1500));
    assert!(
        waiting.guard().try_wait().is_none(),
        "kubectl delete returned while a finalizer still holds the object"
    );

    let out = k.ok(&[
        "patch",
        "configmap",
        "held",
        "-n",
        "default",
        "--type=json",
        "-p",
        r#"[{"op":"remove","path":"/metadata/finalizers"}]"#,
    ]);
    assert_eq!(out.stdout.trim_end(), "configmap/held patched");
    let status = waiting.guard().wait_timeout(Duration::from_secs(15));
    let seen = waiting.seen().to_vec();
    let stderr = waiting.stop();
    assert!(
        status.is_some_and(|s| s.success()),
        "the waiting delete should exit 0 once the finalizer is removed; status {status:?}, stdout {seen:?}, stderr {stderr}"
    );
    k.fails_with(
        &["get", "configmap", "held", "-n", "default"],
        r#"Error from server (NotFound): configmaps "held" not found"#,
    );

    // Deleting a namespace removes it and what is in it.
    k.ok(&["create", "namespace", "doomed"]);
    k.ok(&[
        "create",
        "configmap",
        "inside",
        "-n",
        "doomed",
        "--from-literal=a=1",
    ]);
    let out = k.ok(&["delete", "namespace", "doomed", "--timeout=30s"]);
    assert_eq!(out.stdout.trim_end(), r#"namespace "doomed" deleted"#);
    k.fails_with(
        &["get", "namespace", "doomed"],
        r#"Error from server (NotFound): namespaces "doomed" not found"#,
    );
    let out = k.ok(&["get", "configmaps", "-n", "doomed"]);
    assert_eq!(
        (out.stdout.as_str(), out.stderr.trim_end()),
        ("", "No resources found in doomed namespace.")
    );
}
