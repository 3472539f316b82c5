//! The pure part of the ReplicaSet controller: how many pods to create or
//! delete, and the status to report (upstream's
//! `pkg/controller/replicaset/replica_set.go` `manageReplicas` and
//! `replica_set_utils.go` `calculateStatus`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use serde_json::{json, Value};

use crate::pod_util;

/// At most this many pods are created or deleted in one sync (upstream's `BurstReplicas`).
pub const BURST_REPLICAS: usize = 500;

/// `ReplicaFailure`, the condition a failed create or delete sets.
pub const REPLICA_FAILURE: &str = "ReplicaFailure";

/// A status condition of a ReplicaSet or ReplicationController.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Condition {
    /// `type`.
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// `reason` (`FailedCreate`, `FailedDelete`).
    pub reason: String,
    /// `message`: the error.
    pub message: String,
    /// `lastTransitionTime` (RFC 3339).
    pub last_transition_time: Option<String>,
}

/// The status both kinds share (`ReplicaSetStatus`, `ReplicationControllerStatus`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ReplicaStatus {
    /// Active pods owned.
    pub replicas: i32,
    /// Of those, pods whose labels hold every template label.
    pub fully_labeled_replicas: i32,
    /// Of those, pods whose `Ready` condition is `True`.
    pub ready_replicas: i32,
    /// Of those, pods ready for at least `minReadySeconds`.
    pub available_replicas: i32,
    /// The generation this status describes.
    pub observed_generation: i64,
    /// `ReplicaFailure` when the last create or delete failed.
    pub conditions: Vec<Condition>,
}

impl ReplicaStatus {
    /// The status as the API's JSON (for a merge patch of `/status`;
    /// `conditions: null` removes them).
    pub fn to_json(&self) -> Value {
        let conds: Vec<Value> = self
            .conditions
            .iter()
            .map(|c| {
                json!({"type": c.type_, "status": c.status, "reason": c.reason, "message": c.message,
                       "lastTransitionTime": c.last_transition_time})
            })
            .collect();
        json!({
            "replicas": self.replicas,
            "fullyLabeledReplicas": self.fully_labeled_replicas,
            "readyReplicas": self.ready_replicas,
            "availableReplicas": self.available_replicas,
            "observedGeneration": self.observed_generation,
            "conditions": if conds.is_empty() { Value::Null } else { Value::Array(conds) },
        })
    }
}

/// What a sync does to the pod count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Manage {
    /// Create this many pods.
    Create(usize),
    /// Delete this many pods.
    Delete(usize),
    /// Nothing.
    Steady,
}

/// Compares `active` owned pods with `desired` replicas; at most
/// [`BURST_REPLICAS`] either way.
pub fn manage(active: usize, desired: i32) -> Manage {
    let desired = usize::try_from(desired.max(0)).unwrap_or(0);
    if active < desired {
        Manage::Create((desired - active).min(BURST_REPLICAS))
    } else if active > desired {
        Manage::Delete((active - desired).min(BURST_REPLICAS))
    } else {
        Manage::Steady
    }
}

/// Upstream's slow start: batches of 1, 2, 4, … summing to `n`; creating
/// stops at the first batch with a failure, so a doomed create fails once,
/// not `n` times.
pub fn slow_start_batches(n: usize) -> Vec<usize> {
    let mut out = Vec::new();
    let (mut left, mut size) = (n, 1usize);
    while left > 0 {
        let b = size.min(left);
        out.push(b);
        left -= b;
        size *= 2;
    }
    out
}

/// A failed manage step: whether it was a create (else a delete) and the error.
#[derive(Debug, Clone)]
pub struct ManageError {
    /// Creating (`FailedCreate`) or deleting (`FailedDelete`).
    pub creating: bool,
    /// The error text.
    pub message: String,
}

/// The new status from the owned active `pods` (upstream's `calculateStatus`):
/// counts, and the `ReplicaFailure` condition set on a manage error (kept as
/// is while one is already there) and removed once a sync succeeds.
pub fn calculate_status(
    current: &ReplicaStatus,
    pods: &[&Pod],
    template_labels: &BTreeMap<String, String>,
    min_ready_seconds: i32,
    generation: i64,
    err: Option<&ManageError>,
    now: Timestamp,
) -> ReplicaStatus {
    let count = |f: &dyn Fn(&Pod) -> bool| i32::try_from(pods.iter().filter(|p| f(p)).count()).unwrap_or(i32::MAX);
    let fully = count(&|p| {
        let labels = p.metadata.labels.clone().unwrap_or_default();
        template_labels.iter().all(|(k, v)| labels.get(k) == Some(v))
    });
    let mut conditions = current.conditions.clone();
    let has_failure = conditions.iter().any(|c| c.type_ == REPLICA_FAILURE);
    match err {
        Some(e) if !has_failure => conditions.push(Condition {
            type_: REPLICA_FAILURE.into(),
            status: "True".into(),
            reason: if e.creating { "FailedCreate" } else { "FailedDelete" }.into(),
            message: e.message.clone(),
            last_transition_time: Some(now.to_string()),
        }),
        None => conditions.retain(|c| c.type_ != REPLICA_FAILURE),
        Some(_) => {}
    }
    ReplicaStatus {
        replicas: count(&|_| true),
        fully_labeled_replicas: fully,
        ready_replicas: count(&pod_util::is_ready),
        available_replicas: count(&|p| pod_util::is_available(p, min_ready_seconds, now)),
        observed_generation: generation,
        conditions,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manage_creates_or_deletes_the_difference_capped_at_the_burst() {
        assert_eq!(manage(0, 3), Manage::Create(3));
        assert_eq!(manage(5, 3), Manage::Delete(2));
        assert_eq!(manage(3, 3), Manage::Steady);
        assert_eq!(manage(0, 10_000), Manage::Create(BURST_REPLICAS));
        assert_eq!(manage(2, -1), Manage::Delete(2));
    }

    #[test]
    fn slow_start_doubles_batches_up_to_the_total() {
        assert_eq!(slow_start_batches(10), vec![1, 2, 4, 3]);
        assert_eq!(slow_start_batches(1), vec![1]);
        assert!(slow_start_batches(0).is_empty());
    }

    fn pod(labels: serde_json::Value, ready_at: Option<&str>) -> Pod {
        let conds: Vec<Value> =
            ready_at.map(|t| json!({"type": "Ready", "status": "True", "lastTransitionTime": t})).into_iter().collect();
        serde_json::from_value(json!({"metadata": {"labels": labels}, "status": {"phase": "Running", "conditions": conds}}))
            .unwrap()
    }

    #[test]
    fn status_counts_labeled_ready_and_available_and_tracks_replica_failure() {
        let now: Timestamp = "2026-01-01T00:01:00Z".parse().unwrap();
        let template: BTreeMap<String, String> = [("app".to_string(), "web".to_string()), ("tier".into(), "fe".into())].into();
        let a = pod(json!({"app": "web", "tier": "fe"}), Some("2026-01-01T00:00:00Z"));
        let b = pod(json!({"app": "web"}), Some("2026-01-01T00:00:55Z"));
        let c = pod(json!({"app": "web", "tier": "fe"}), None);
        let err = ManageError { creating: true, message: "pods \"x\" is forbidden".into() };
        let s = calculate_status(&ReplicaStatus::default(), &[&a, &b, &c], &template, 30, 4, Some(&err), now);
        assert_eq!((s.replicas, s.fully_labeled_replicas, s.ready_replicas, s.available_replicas), (3, 2, 2, 1));
        assert_eq!(s.observed_generation, 4);
        assert_eq!(s.conditions.len(), 1);
        assert_eq!((s.conditions[0].reason.as_str(), s.conditions[0].status.as_str()), ("FailedCreate", "True"));
        let healed = calculate_status(&s, &[&a], &template, 0, 4, None, now);
        assert!(healed.conditions.is_empty());
        assert_eq!(healed.to_json()["conditions"], Value::Null);
    }
}
