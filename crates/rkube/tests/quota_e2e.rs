//! End to end: `rkube up` runs the resourcequota controller and the
//! `ResourceQuota` admission plugin; with the real kubectl 1.27 and 1.33,
//! `kubectl create quota q --hard=pods=1` gets its status computed, a
//! second pod is refused with upstream's error text, and `kubectl describe
//! quota` shows Used and Hard; a LimitRange's defaults land in a new pod
//! and a pod above its max is refused.
//!
//! The cluster process is killed by PID when its guard drops.

use crate::common;

use std::time::Duration;

use common::{Backend, Cluster};

const LIMIT: Duration = Duration::from_secs(60);

fn a_pod_beyond_a_quota_or_a_limit_range_is_refused(version: &str) {
    let cluster = Cluster::start(Backend::Embedded);
    let k = cluster.kubectl(version);
    k.ok(&["create", "namespace", "quota"]);
    k.ok(&["create", "quota", "q", "--hard=pods=1", "-n", "quota"]);
    cluster.wait_until("the controller computes the quota's usage", LIMIT, || {
        let out = k.run(&["get", "quota", "q", "-n", "quota", "-o", "jsonpath={.status.used.pods}/{.status.hard.pods}"]).stdout;
        (out == "0/1").then_some(())
    });
    k.ok(&["run", "first", "--image=nginx", "-n", "quota"]);
    k.fails_with(
        &["run", "second", "--image=nginx", "-n", "quota"],
        "Error from server (Forbidden): pods \"second\" is forbidden: exceeded quota: q, requested: pods=1, used: pods=1, limited: pods=1",
    );
    let out = k.ok(&["describe", "quota", "q", "-n", "quota"]).stdout;
    let rows: Vec<Vec<&str>> = out.lines().map(|l| l.split_whitespace().collect()).collect();
    assert!(rows.contains(&vec!["Name:", "q"]), "{out}");
    assert!(rows.contains(&vec!["Namespace:", "quota"]), "{out}");
    assert!(rows.contains(&vec!["Resource", "Used", "Hard"]), "{out}");
    assert!(rows.contains(&vec!["pods", "1", "1"]), "{out}");

    // LimitRanger: a pod without resources gets the LimitRange's defaults;
    // one above its max is refused.
    k.ok(&["create", "namespace", "limits"]);
    let lr = "apiVersion: v1\nkind: LimitRange\nmetadata:\n  name: lr\n  namespace: limits\nspec:\n  limits:\n  - type: Container\n    max:\n      memory: 256Mi\n    defaultRequest:\n      memory: 64Mi\n";
    k.run_stdin(&["create", "-f", "-"], lr).success();
    k.ok(&["run", "small", "--image=nginx", "-n", "limits"]);
    let pod = k.json(&["get", "pod", "small", "-n", "limits"]);
    assert_eq!(pod["spec"]["containers"][0]["resources"], serde_json::json!({"requests": {"memory": "64Mi"}, "limits": {"memory": "256Mi"}}), "{pod}");
    k.fails_with(
        &["run", "big", "--image=nginx", "-n", "limits", "--overrides", r#"{"spec":{"containers":[{"name":"big","image":"nginx","resources":{"limits":{"memory":"1Gi"}}}]}}"#],
        "Error from server (Forbidden): pods \"big\" is forbidden: maximum memory usage per Container is 256Mi, but limit is 1Gi",
    );
}

#[test]
fn kubectl_1_27_a_pod_beyond_a_quota_or_a_limit_range_is_refused() {
    a_pod_beyond_a_quota_or_a_limit_range_is_refused("1.27");
}

#[test]
fn kubectl_1_33_a_pod_beyond_a_quota_or_a_limit_range_is_refused() {
    a_pod_beyond_a_quota_or_a_limit_range_is_refused("1.33");
}
