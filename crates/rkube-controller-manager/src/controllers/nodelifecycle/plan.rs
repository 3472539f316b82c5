//! The decisions of the node lifecycle and taint eviction controllers, as
//! pure functions of nodes, pods and time (upstream
//! `pkg/controller/nodelifecycle/node_lifecycle_controller.go` and
//! `pkg/controller/tainteviction/taint_eviction.go`).

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, NodeCondition, Pod, Taint, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

/// `node.kubernetes.io/not-ready`: the node's Ready condition is False.
pub const NOT_READY: &str = "node.kubernetes.io/not-ready";
/// `node.kubernetes.io/unreachable`: the node's Ready condition is Unknown.
pub const UNREACHABLE: &str = "node.kubernetes.io/unreachable";
/// `node.kubernetes.io/unschedulable`: `spec.unschedulable` is set.
pub const UNSCHEDULABLE: &str = "node.kubernetes.io/unschedulable";

/// The NoSchedule taint of each (condition type, status) (upstream's
/// `nodeConditionToTaintKeyStatusMap`).
const CONDITION_TAINTS: &[(&str, &str, &str)] = &[
    ("Ready", "False", NOT_READY),
    ("Ready", "Unknown", UNREACHABLE),
    ("MemoryPressure", "True", "node.kubernetes.io/memory-pressure"),
    ("DiskPressure", "True", "node.kubernetes.io/disk-pressure"),
    ("NetworkUnavailable", "True", "node.kubernetes.io/network-unavailable"),
    ("PIDPressure", "True", "node.kubernetes.io/pid-pressure"),
];

/// The conditions set to Unknown when the kubelet stops posting status.
const MONITORED: &[&str] = &["Ready", "MemoryPressure", "DiskPressure", "PIDPressure"];

/// The status of the node's `Ready` condition (`True`, `False`, `Unknown`), if any.
pub fn ready_status(node: &Node) -> Option<&str> {
    condition(node, "Ready").map(|c| c.status.as_str())
}

fn condition<'a>(node: &'a Node, type_: &str) -> Option<&'a NodeCondition> {
    node.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == type_)
}

/// What shows the node's kubelet is alive: its Lease's `renewTime` and its
/// Ready condition's `lastHeartbeatTime`. The controller records when this
/// last changed, by its own clock, as upstream's `probeTimestamp`.
pub fn heartbeat(node: &Node, lease_renew: Option<&str>) -> (Option<String>, Option<String>) {
    let ready = condition(node, "Ready").and_then(|c| c.last_heartbeat_time.as_ref()).map(|t| t.0.to_string());
    (lease_renew.map(str::to_string), ready)
}

/// The node's conditions once its kubelet is declared gone (upstream's
/// `tryUpdateNodeHealth`): Ready, MemoryPressure, DiskPressure and
/// PIDPressure become `Unknown` with reason `NodeStatusUnknown` ("Kubelet
/// stopped posting node status."), or are added with `NodeStatusNeverUpdated`
/// when the kubelet never posted them; other conditions stay. `None` when
/// every monitored condition is Unknown already.
pub fn unknown_conditions(node: &Node, now: Timestamp) -> Option<Vec<NodeCondition>> {
    let mut conditions = node.status.as_ref().and_then(|s| s.conditions.clone()).unwrap_or_default();
    let mut changed = false;
    for type_ in MONITORED {
        match conditions.iter_mut().find(|c| c.type_ == *type_) {
            Some(c) if c.status == "Unknown" => {}
            Some(c) => {
                c.status = "Unknown".into();
                c.reason = Some("NodeStatusUnknown".into());
                c.message = Some("Kubelet stopped posting node status.".into());
                c.last_transition_time = Some(Time(now));
                changed = true;
            }
            None => {
                conditions.push(NodeCondition {
                    type_: type_.to_string(),
                    status: "Unknown".into(),
                    reason: Some("NodeStatusNeverUpdated".into()),
                    message: Some("Kubelet never posted node status.".into()),
                    last_heartbeat_time: node.metadata.creation_timestamp.clone(),
                    last_transition_time: Some(Time(now)),
                });
                changed = true;
            }
        }
    }
    changed.then_some(conditions)
}

/// Whether a taint key is one this controller manages.
fn managed(key: &str) -> bool {
    key == UNSCHEDULABLE || CONDITION_TAINTS.iter().any(|(_, _, k)| *k == key)
}

/// The node's taints as the controllers want them, or `None` when they are
/// right already:
/// - NoSchedule from conditions and `spec.unschedulable` (upstream's
///   `doNoScheduleTaintingPass`, TaintNodesByCondition);
/// - NoExecute `not-ready` / `unreachable` from the Ready condition
///   (`doNoExecuteTaintingPass`), unless `evictions_stopped` (every node is
///   not Ready: upstream's full-disruption mode, which stops evicting and
///   lifts these taints). A NoExecute taint keeps its `timeAdded`.
///
/// Taints of other keys are kept as they are, in their order.
pub fn wanted_taints(node: &Node, evictions_stopped: bool, now: Timestamp) -> Option<Vec<Taint>> {
    let current = node.spec.as_ref().and_then(|s| s.taints.clone()).unwrap_or_default();
    let mut want: Vec<Taint> = current.iter().filter(|t| !managed(&t.key)).cloned().collect();
    let taint = |key: &str, effect: &str| Taint { key: key.to_string(), effect: effect.to_string(), value: None, time_added: None };
    for (type_, status, key) in CONDITION_TAINTS {
        if condition(node, type_).is_some_and(|c| c.status == *status) {
            want.push(taint(key, "NoSchedule"));
        }
    }
    if node.spec.as_ref().and_then(|s| s.unschedulable).unwrap_or(false) {
        want.push(taint(UNSCHEDULABLE, "NoSchedule"));
    }
    if !evictions_stopped {
        let key = match ready_status(node) {
            Some("False") => Some(NOT_READY),
            Some("Unknown") => Some(UNREACHABLE),
            _ => None,
        };
        if let Some(key) = key {
            let since = current
                .iter()
                .find(|t| t.key == key && t.effect == "NoExecute")
                .and_then(|t| t.time_added.clone())
                .unwrap_or(Time(now));
            want.push(Taint { time_added: Some(since), ..taint(key, "NoExecute") });
        }
    }
    let same = |a: &[Taint], b: &[Taint]| {
        a.len() == b.len() && a.iter().all(|t| b.iter().any(|u| u.key == t.key && u.effect == t.effect && u.value == t.value))
    };
    (!same(&want, &current)).then_some(want)
}

/// Whether `toleration` tolerates `taint` (upstream `ToleratesTaint`): the
/// same key (or an empty key with `Exists`), the same effect (or none), and
/// the value equal unless the operator is `Exists`.
pub fn tolerates(toleration: &Toleration, taint: &Taint) -> bool {
    let effect_ok = toleration.effect.as_deref().is_none_or(|e| e.is_empty() || e == taint.effect);
    let key = toleration.key.as_deref().unwrap_or("");
    let exists = toleration.operator.as_deref() == Some("Exists");
    if !effect_ok || (!key.is_empty() && key != taint.key) || (key.is_empty() && !exists) {
        return false;
    }
    exists || toleration.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or("")
}

/// When a pod on a node with `taints` is to be evicted (upstream's taint
/// eviction manager), or `None` for never:
/// - a NoExecute taint the pod does not tolerate: now (`Duration::ZERO`
///   after the earliest `timeAdded`, so already due);
/// - all tolerated: the smallest `tolerationSeconds` among the tolerations
///   matching those taints (negative counts as 0), after the earliest
///   NoExecute taint's `timeAdded`; `None` if none sets it (tolerated forever).
///
/// Returns the time at which the eviction is due.
pub fn eviction_due(pod: &Pod, taints: &[Taint], now: Timestamp) -> Option<Timestamp> {
    let no_execute: Vec<&Taint> = taints.iter().filter(|t| t.effect == "NoExecute").collect();
    if no_execute.is_empty() {
        return None;
    }
    let since = no_execute.iter().filter_map(|t| t.time_added.as_ref().map(|t| t.0)).min().unwrap_or(now);
    let tolerations = pod.spec.as_ref().and_then(|s| s.tolerations.clone()).unwrap_or_default();
    let mut min: Option<i64> = None;
    for taint in &no_execute {
        let matching: Vec<&Toleration> = tolerations.iter().filter(|t| tolerates(t, taint)).collect();
        if matching.is_empty() {
            return Some(since);
        }
        for t in matching {
            if let Some(s) = t.toleration_seconds {
                min = Some(min.map_or(s.max(0), |m| m.min(s.max(0))));
            }
        }
    }
    let secs = min?;
    since.checked_add(Duration::from_secs(secs as u64)).ok()
}

/// Whether a pod is finished or being deleted (nothing left to evict).
pub fn gone_or_going(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
        || matches!(pod.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded") | Some("Failed"))
}

/// Whether the pod's `Ready` condition must be set to False because its
/// node is not Ready (upstream's `MarkPodsNotReady`).
pub fn needs_not_ready(pod: &Pod) -> bool {
    !gone_or_going(pod)
        && pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
            .is_some_and(|c| c.status != "False")
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
