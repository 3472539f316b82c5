//! `kubectl debug <pod> --image=... --target=...` (without `-it`): kubectl
//! reads the pod and sends a strategic merge patch to
//! `pods/<name>/ephemeralcontainers`; the server adds the ephemeral
//! container and keeps it.

use crate::common::{at, str_at, Cluster, Kubectl};

/// `kubectl debug` adds an ephemeral container targeting the pod's
/// container; `kubectl get -o jsonpath` shows it, a second debug adds
/// another, and the regular containers are untouched.
pub fn debug_adds_an_ephemeral_container(_c: &mut Cluster, k: &Kubectl) {
    k.ok(&["run", "web", "-n", "default", "--image=nginx:1.25", "--restart=Never"]);
    k.ok(&["debug", "web", "-n", "default", "--image=busybox", "--target=web", "--container=dbg"]);
    let name = k.ok(&["get", "pod", "web", "-n", "default", "-o", "jsonpath={.spec.ephemeralContainers[0].name}"]);
    assert_eq!(name.stdout.trim(), "dbg");

    k.ok(&["debug", "web", "-n", "default", "--image=busybox", "--container=dbg2"]);
    let pod = k.json(&["get", "pod", "web", "-n", "default"]);
    let ecs = at(&pod, "/spec/ephemeralContainers").as_array().cloned().unwrap_or_default();
    let names: Vec<&str> = ecs.iter().map(|c| str_at(c, "/name")).collect();
    assert_eq!(names.len(), 2, "{pod}");
    assert!(names.contains(&"dbg") && names.contains(&"dbg2"), "{names:?}");
    let dbg = ecs.iter().find(|c| str_at(c, "/name") == "dbg").cloned().unwrap_or_default();
    assert_eq!(str_at(&dbg, "/image"), "busybox");
    assert_eq!(str_at(&dbg, "/targetContainerName"), "web");
    let containers = at(&pod, "/spec/containers").as_array().map(Vec::len).unwrap_or(0);
    assert_eq!(containers, 1, "{pod}");
}
