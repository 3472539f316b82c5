//! Pod predicates and the deletion ranking of upstream's
//! `pkg/controller/controller_utils.go` (`IsPodActive`, `ActivePodsWithRanks`)
//! and `pkg/api/v1/pod` (`IsPodReady`, `IsPodAvailable`).

use std::cmp::Ordering;
use std::collections::HashMap;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;

/// Not `Succeeded`, not `Failed`, and not being deleted.
pub fn is_active(pod: &Pod) -> bool {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    !matches!(phase, Some("Succeeded") | Some("Failed")) && pod.metadata.deletion_timestamp.is_none()
}

/// The time the `Ready` condition turned `True`, when it is `True`.
pub fn ready_since(pod: &Pod) -> Option<Option<Timestamp>> {
    let conds = pod.status.as_ref()?.conditions.as_ref()?;
    let c = conds.iter().find(|c| c.type_ == "Ready")?;
    (c.status == "True").then(|| c.last_transition_time.as_ref().map(|t| t.0))
}

/// The pod's `Ready` condition is `True`.
pub fn is_ready(pod: &Pod) -> bool {
    ready_since(pod).is_some()
}

/// Ready for at least `min_ready_seconds` at `now` (ready at once when 0).
pub fn is_available(pod: &Pod, min_ready_seconds: i32, now: Timestamp) -> bool {
    match ready_since(pod) {
        None => false,
        Some(_) if min_ready_seconds <= 0 => true,
        Some(None) => false,
        Some(Some(since)) => since.as_second() + i64::from(min_ready_seconds) <= now.as_second(),
    }
}

fn phase_rank(pod: &Pod) -> u8 {
    match pod.status.as_ref().and_then(|s| s.phase.as_deref()) {
        Some("Pending") | None => 0,
        Some("Running") => 2,
        _ => 1,
    }
}

fn restarts(pod: &Pod) -> i32 {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .map(|cs| cs.iter().map(|c| c.restart_count).max().unwrap_or(0))
        .unwrap_or(0)
}

fn node(pod: &Pod) -> &str {
    pod.spec.as_ref().and_then(|s| s.node_name.as_deref()).unwrap_or("")
}

/// Log2 bucket of how long a pod has been ready (upstream's
/// LogarithmicScaleDown: pods ready for similar times rank equal).
fn ready_bucket(pod: &Pod, now: Timestamp) -> i64 {
    match ready_since(pod) {
        Some(Some(t)) => {
            let secs = (now.as_second() - t.as_second()).max(0) + 1;
            i64::from(63 - secs.leading_zeros() as i32)
        }
        _ => 0,
    }
}

/// Orders `pods` so the first ones are the ones to delete first, as
/// upstream's `ActivePodsWithRanks` (with `LogarithmicScaleDown`):
/// unscheduled before scheduled; Pending before Unknown before Running;
/// not ready before ready; more siblings (`related`) on the same node first;
/// ready for less time first; more restarts first; newer first.
pub fn sort_for_deletion(pods: &mut [&Pod], related: &[&Pod], now: Timestamp) {
    let mut per_node: HashMap<&str, usize> = HashMap::new();
    for p in related.iter().filter(|p| is_active(p)) {
        let n = node(p);
        if !n.is_empty() {
            *per_node.entry(n).or_default() += 1;
        }
    }
    let rank = |p: &Pod| if node(p).is_empty() { 0 } else { per_node.get(node(p)).copied().unwrap_or(0) };
    pods.sort_by(|a, b| {
        let ord = (!node(a).is_empty()).cmp(&!node(b).is_empty());
        if ord != Ordering::Equal {
            return ord;
        }
        let ord = phase_rank(a).cmp(&phase_rank(b));
        if ord != Ordering::Equal {
            return ord;
        }
        let ord = is_ready(a).cmp(&is_ready(b));
        if ord != Ordering::Equal {
            return ord;
        }
        let ord = rank(b).cmp(&rank(a));
        if ord != Ordering::Equal {
            return ord;
        }
        if is_ready(a) && is_ready(b) {
            let ord = ready_bucket(a, now).cmp(&ready_bucket(b, now));
            if ord != Ordering::Equal {
                return ord;
            }
        }
        let ord = restarts(b).cmp(&restarts(a));
        if ord != Ordering::Equal {
            return ord;
        }
        let created = |p: &Pod| p.metadata.creation_timestamp.as_ref().map(|t| t.0);
        created(b).cmp(&created(a))
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(name: &str, node: &str, phase: &str, ready: Option<&str>, restarts: i32, created: &str) -> Pod {
        let mut conds = vec![];
        if let Some(t) = ready {
            conds.push(json!({"type": "Ready", "status": "True", "lastTransitionTime": t}));
        }
        serde_json::from_value(json!({
            "metadata": {"name": name, "creationTimestamp": created},
            "spec": {"nodeName": node, "containers": []},
            "status": {"phase": phase, "conditions": conds,
                       "containerStatuses": [{"name": "c", "image": "i", "imageID": "", "ready": ready.is_some(), "restartCount": restarts}]},
        }))
        .unwrap()
    }

    #[test]
    fn deletion_prefers_unscheduled_then_pending_then_unready_then_restarts_then_newest() {
        let now: Timestamp = "2026-01-01T01:00:00Z".parse().unwrap();
        let t0 = "2026-01-01T00:00:00Z";
        let running_ready = pod("running-ready", "n1", "Running", Some(t0), 0, t0);
        let unscheduled = pod("unscheduled", "", "Pending", None, 0, t0);
        let pending = pod("pending", "n1", "Pending", None, 0, t0);
        let running_unready = pod("running-unready", "n1", "Running", None, 0, t0);
        let restarted = pod("restarted", "n1", "Running", Some(t0), 5, t0);
        let newer = pod("newer", "n1", "Running", Some(t0), 0, "2026-01-01T00:00:30Z");
        let mut pods = vec![&running_ready, &newer, &restarted, &running_unready, &pending, &unscheduled];
        sort_for_deletion(&mut pods, &[], now);
        let names: Vec<_> = pods.iter().map(|p| p.metadata.name.as_deref().unwrap()).collect();
        assert_eq!(names, ["unscheduled", "pending", "running-unready", "restarted", "newer", "running-ready"]);
    }

    #[test]
    fn pods_ready_for_a_shorter_time_go_first_and_availability_waits_min_ready_seconds() {
        let now: Timestamp = "2026-01-01T01:00:00Z".parse().unwrap();
        let old = pod("old", "n1", "Running", Some("2026-01-01T00:00:00Z"), 0, "2026-01-01T00:00:00Z");
        let fresh = pod("fresh", "n1", "Running", Some("2026-01-01T00:59:58Z"), 0, "2026-01-01T00:00:00Z");
        let mut pods = vec![&old, &fresh];
        sort_for_deletion(&mut pods, &[], now);
        assert_eq!(pods[0].metadata.name.as_deref(), Some("fresh"));
        assert!(is_available(&fresh, 0, now));
        assert!(!is_available(&fresh, 10, now));
        assert!(is_available(&old, 10, now));
    }

    #[test]
    fn pods_on_nodes_crowded_with_siblings_go_first() {
        let now: Timestamp = "2026-01-01T01:00:00Z".parse().unwrap();
        let t0 = "2026-01-01T00:00:00Z";
        let a = pod("a", "n1", "Running", Some(t0), 0, t0);
        let b = pod("b", "n2", "Running", Some(t0), 0, t0);
        let sibling = pod("s", "n2", "Running", Some(t0), 0, t0);
        let mut pods = vec![&a, &b];
        sort_for_deletion(&mut pods, &[&a, &b, &sibling], now);
        assert_eq!(pods[0].metadata.name.as_deref(), Some("b"));
    }
}
