use super::*;
use serde_json::{json, Value};

fn node(v: Value) -> Node {
    serde_json::from_value(v).unwrap()
}

fn ready_node(status: &str) -> Node {
    node(json!({"metadata": {"name": "n", "creationTimestamp": "2026-01-01T00:00:00Z"},
                "status": {"conditions": [{"type": "Ready", "status": status, "lastHeartbeatTime": "2026-01-01T00:01:00Z"}]}}))
}

fn now() -> Timestamp {
    "2026-01-01T01:00:00Z".parse().unwrap()
}

fn keys(taints: &[Taint]) -> Vec<(String, String)> {
    taints.iter().map(|t| (t.key.clone(), t.effect.clone())).collect()
}

#[test]
fn a_silent_kubelet_makes_monitored_conditions_unknown() {
    let conditions = unknown_conditions(&ready_node("True"), now()).unwrap();
    let ready = conditions.iter().find(|c| c.type_ == "Ready").unwrap();
    assert_eq!((ready.status.as_str(), ready.reason.as_deref()), ("Unknown", Some("NodeStatusUnknown")));
    assert_eq!(ready.message.as_deref(), Some("Kubelet stopped posting node status."));
    assert_eq!(ready.last_heartbeat_time.as_ref().unwrap().0.to_string(), "2026-01-01T00:01:00Z", "heartbeat kept");
    assert_eq!(ready.last_transition_time.as_ref().unwrap().0, now());
    let memory = conditions.iter().find(|c| c.type_ == "MemoryPressure").unwrap();
    assert_eq!((memory.status.as_str(), memory.reason.as_deref()), ("Unknown", Some("NodeStatusNeverUpdated")));
    assert_eq!(conditions.len(), 4);
    // Once Unknown, nothing more to write.
    let mut gone = ready_node("Unknown");
    gone.status.as_mut().unwrap().conditions = Some(conditions);
    assert!(unknown_conditions(&gone, now()).is_none());
}

#[test]
fn taints_follow_the_ready_condition_and_keep_their_time_added() {
    assert_eq!(wanted_taints(&ready_node("True"), false, now()), None);
    let t = wanted_taints(&ready_node("Unknown"), false, now()).unwrap();
    assert_eq!(
        keys(&t),
        [(UNREACHABLE.into(), "NoSchedule".into()), (UNREACHABLE.into(), "NoExecute".into())]
    );
    assert_eq!(t[1].time_added.as_ref().unwrap().0, now());
    let t = wanted_taints(&ready_node("False"), false, now()).unwrap();
    assert_eq!(keys(&t), [(NOT_READY.into(), "NoSchedule".into()), (NOT_READY.into(), "NoExecute".into())]);

    // Already tainted: nothing to write, the old timeAdded stands.
    let mut tainted = ready_node("Unknown");
    tainted.spec = Some(serde_json::from_value(json!({"taints": [
        {"key": "team", "value": "a", "effect": "NoSchedule"},
        {"key": UNREACHABLE, "effect": "NoSchedule"},
        {"key": UNREACHABLE, "effect": "NoExecute", "timeAdded": "2026-01-01T00:30:00Z"},
    ]})).unwrap());
    assert_eq!(wanted_taints(&tainted, false, now()), None);
    // Back to Ready: only the user's taint stays.
    tainted.status = ready_node("True").status;
    assert_eq!(keys(&wanted_taints(&tainted, false, now()).unwrap()), [("team".into(), "NoSchedule".into())]);
}

#[test]
fn when_every_node_is_down_no_execute_taints_are_lifted() {
    let mut tainted = ready_node("Unknown");
    tainted.spec = Some(serde_json::from_value(json!({"taints": [
        {"key": UNREACHABLE, "effect": "NoSchedule"},
        {"key": UNREACHABLE, "effect": "NoExecute", "timeAdded": "2026-01-01T00:30:00Z"},
    ]})).unwrap());
    assert_eq!(keys(&wanted_taints(&tainted, true, now()).unwrap()), [(UNREACHABLE.into(), "NoSchedule".into())]);
}

#[test]
fn conditions_and_cordons_give_no_schedule_taints() {
    let n = node(json!({"metadata": {"name": "n"}, "spec": {"unschedulable": true},
        "status": {"conditions": [{"type": "Ready", "status": "True"}, {"type": "DiskPressure", "status": "True"}]}}));
    assert_eq!(
        keys(&wanted_taints(&n, false, now()).unwrap()),
        [("node.kubernetes.io/disk-pressure".into(), "NoSchedule".into()), (UNSCHEDULABLE.into(), "NoSchedule".into())]
    );
}

fn pod(tolerations: Value) -> Pod {
    serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": {"containers": [], "tolerations": tolerations}})).unwrap()
}

#[test]
fn evictions_wait_for_the_shortest_matching_toleration() {
    let taints: Vec<Taint> = serde_json::from_value(json!([
        {"key": UNREACHABLE, "effect": "NoExecute", "timeAdded": "2026-01-01T00:59:00Z"},
        {"key": UNREACHABLE, "effect": "NoSchedule"},
    ]))
    .unwrap();
    let added: Timestamp = "2026-01-01T00:59:00Z".parse().unwrap();
    // No toleration: due at once (since the taint was added).
    assert_eq!(eviction_due(&pod(json!([])), &taints, now()), Some(added));
    // DefaultTolerationSeconds' toleration: 300 s after the taint.
    let default = json!([{"key": UNREACHABLE, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}]);
    assert_eq!(eviction_due(&pod(default), &taints, now()), Some("2026-01-01T01:04:00Z".parse().unwrap()));
    // Two matching tolerations: the shorter wins; a negative one counts as 0.
    let two = json!([{"operator": "Exists", "tolerationSeconds": 600}, {"key": UNREACHABLE, "operator": "Exists", "tolerationSeconds": -5}]);
    assert_eq!(eviction_due(&pod(two), &taints, now()), Some(added));
    // Tolerated forever.
    assert_eq!(eviction_due(&pod(json!([{"operator": "Exists"}])), &taints, now()), None);
    // A toleration of another key does not help.
    let other = json!([{"key": NOT_READY, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}]);
    assert_eq!(eviction_due(&pod(other), &taints, now()), Some(added));
    // No NoExecute taint: never.
    assert_eq!(eviction_due(&pod(json!([])), &taints[1..], now()), None);
}

#[test]
fn toleration_matching_follows_upstream() {
    let taint = Taint { key: "k".into(), value: Some("v".into()), effect: "NoExecute".into(), time_added: None };
    let t = |v: Value| serde_json::from_value::<Toleration>(v).unwrap();
    assert!(tolerates(&t(json!({"key": "k", "value": "v"})), &taint));
    assert!(tolerates(&t(json!({"key": "k", "operator": "Equal", "value": "v", "effect": "NoExecute"})), &taint));
    assert!(!tolerates(&t(json!({"key": "k", "value": "w"})), &taint));
    assert!(tolerates(&t(json!({"key": "k", "operator": "Exists"})), &taint));
    assert!(tolerates(&t(json!({"operator": "Exists"})), &taint));
    assert!(!tolerates(&t(json!({"key": "k", "operator": "Exists", "effect": "NoSchedule"})), &taint));
    assert!(!tolerates(&t(json!({"value": "v"})), &taint), "an empty key needs Exists");
}
