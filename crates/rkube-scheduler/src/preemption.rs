//! Preemption (upstream `pkg/scheduler/framework/plugins/defaultpreemption`
//! and `framework/preemption`): when no node fits a pod, find a node where
//! evicting pods of lower `spec.priority` makes room, and the fewest and
//! least important such pods.
//!
//! For each node the filters rejected for a reason evicting pods can fix
//! (not `UnschedulableAndUnresolvable`), the pod must fit once every
//! lower-priority pod is gone; then those pods are given back in order of
//! decreasing priority (earlier started first), each kept when the pod still
//! fits with it: the rest are the node's victims. Among the nodes with
//! victims, the one chosen has the lowest highest victim priority, then the
//! smallest sum of victim priorities, then the fewest victims, then the
//! first in name order. PodDisruptionBudgets are not consulted.
//!
//! A pod nominated to a node keeps its room there: lower-priority pods do
//! not fit into it ([`Snapshot::with_nominated_for`]).
//!
//! A pod with `preemptionPolicy: Never` never preempts; nor does one whose
//! nominated node still has lower-priority pods terminating (upstream's
//! `PodEligibleToPreemptOthers`), so one preemption is not repeated while
//! its victims shut down.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;

use crate::framework::FitError;
use crate::plugins::{run_filters, Code};
use crate::snapshot::{NodeInfo, Snapshot};

/// The reason of the `DisruptionTarget` condition victims get.
pub const PREEMPTION_BY_SCHEDULER: &str = "PreemptionByScheduler";

/// Where to preempt, and whom.
#[derive(Debug, Clone)]
pub struct Candidate {
    /// The node the pod is nominated to.
    pub node: String,
    /// The pods to evict there.
    pub victims: Vec<Arc<Pod>>,
}

/// `spec.priority`, 0 when unset.
pub fn priority(pod: &Pod) -> i32 {
    pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0)
}

/// Why a pod may not preempt: `preemptionPolicy: Never`.
pub const NOT_ELIGIBLE_NEVER: &str = "not eligible due to preemptionPolicy=Never.";

/// Why a pod may not preempt: its nominated node's victims are still terminating.
pub const NOT_ELIGIBLE_TERMINATING: &str =
    "not eligible due to a terminating pod on the nominated node.";

/// Whether `pod` may preempt others now (see the module docs); the reason
/// it may not, as upstream's `PodEligibleToPreemptOthers` words it.
pub fn eligible(pod: &Pod, snapshot: &Snapshot) -> Result<(), &'static str> {
    let spec = pod.spec.as_ref();
    if spec.and_then(|s| s.preemption_policy.as_deref()) == Some("Never") {
        return Err(NOT_ELIGIBLE_NEVER);
    }
    let nominated = pod
        .status
        .as_ref()
        .and_then(|s| s.nominated_node_name.as_deref())
        .filter(|n| !n.is_empty());
    let p = priority(pod);
    match nominated.and_then(|n| snapshot.node(n)) {
        Some(node)
            if node
                .pods
                .iter()
                .any(|v| v.metadata.deletion_timestamp.is_some() && priority(v) < p) =>
        {
            Err(NOT_ELIGIBLE_TERMINATING)
        }
        _ => Ok(()),
    }
}

/// The best preemption for `pod`, which no node fits (`fit` says why), if
/// evicting lower-priority pods helps anywhere.
pub fn find(pod: &Pod, snapshot: &Snapshot, fit: &FitError) -> Option<Candidate> {
    let p = priority(pod);
    let mut candidates: Vec<Candidate> = fit
        .statuses
        .iter()
        .filter(|(_, s)| s.code != Code::UnschedulableAndUnresolvable)
        .filter_map(|(name, _)| snapshot.node(name))
        .filter_map(|node| {
            victims_on(pod, p, node, snapshot).map(|victims| Candidate {
                node: node.name.clone(),
                victims,
            })
        })
        .filter(|c| !c.victims.is_empty())
        .collect();
    candidates.sort_by_key(|c| {
        let top = c
            .victims
            .iter()
            .map(|v| priority(v))
            .max()
            .unwrap_or(i32::MIN);
        let sum: i64 = c.victims.iter().map(|v| i64::from(priority(v))).sum();
        (top, sum, c.victims.len())
    });
    candidates.into_iter().next()
}

/// The fewest lower-priority pods of `node` whose eviction lets `pod` fit,
/// or `None` when evicting all of them would not.
fn victims_on(pod: &Pod, p: i32, node: &NodeInfo, snapshot: &Snapshot) -> Option<Vec<Arc<Pod>>> {
    let (mut lower, keep): (Vec<Arc<Pod>>, Vec<Arc<Pod>>) =
        node.pods.iter().cloned().partition(|v| priority(v) < p);
    let mut trial = NodeInfo::new(Arc::clone(&node.node));
    for k in keep {
        trial.add_pod(k);
    }
    run_filters(pod, &trial, snapshot).ok()?;
    let started = |v: &Pod| {
        v.status
            .as_ref()
            .and_then(|s| s.start_time.as_ref())
            .map(|t| t.0)
    };
    lower.sort_by(|a, b| {
        priority(b)
            .cmp(&priority(a))
            .then_with(|| started(a).cmp(&started(b)))
    });
    let mut victims = Vec::new();
    for v in lower {
        let mut with = trial.clone();
        with.add_pod(Arc::clone(&v));
        if run_filters(pod, &with, snapshot).is_ok() {
            trial = with;
        } else {
            victims.push(v);
        }
    }
    Some(victims)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::{schedule_pod, ScheduleError};
    use crate::testutil::{node, pod, snapshot};
    use serde_json::json;

    fn sized(name: &str, cpu: &str, prio: i32, node_name: Option<&str>) -> Pod {
        let mut spec = json!({"priority": prio, "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]});
        if let Some(n) = node_name {
            spec["nodeName"] = json!(n);
        }
        pod(name, spec)
    }

    fn fit_error(p: &Pod, s: &Snapshot) -> FitError {
        match schedule_pod(p, s) {
            Err(ScheduleError::Fit(f)) => f,
            other => panic!("expected no fit: {other:?}"),
        }
    }

    #[test]
    fn the_fewest_least_important_pods_are_chosen() {
        // n1: two low pods of 1 cpu; n2: one medium pod of 2 cpu. A 1-cpu pod of priority 100.
        let s = snapshot(
            vec![node("n1", json!({})), node("n2", json!({}))],
            vec![
                sized("low-a", "1", 1, Some("n1")),
                sized("low-b", "1", 2, Some("n1")),
                sized("mid", "2", 50, Some("n2")),
            ],
        );
        let p = sized("urgent", "1", 100, None);
        let c = find(&p, &s, &fit_error(&p, &s)).expect("a candidate");
        assert_eq!(c.node, "n1");
        // Only one of the two needs to go: the lower one.
        assert_eq!(
            c.victims
                .iter()
                .map(|v| v.metadata.name.clone().unwrap_or_default())
                .collect::<Vec<_>>(),
            ["low-a"]
        );
    }

    #[test]
    fn equal_or_higher_priority_pods_and_unresolvable_nodes_are_left_alone() {
        let s = snapshot(
            vec![node("n1", json!({}))],
            vec![sized("peer", "2", 100, Some("n1"))],
        );
        let p = sized("urgent", "1", 100, None);
        assert!(find(&p, &s, &fit_error(&p, &s)).is_none());
        let tainted = snapshot(
            vec![node(
                "n1",
                json!({"spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]}}),
            )],
            vec![sized("low", "2", 0, Some("n1"))],
        );
        assert!(
            find(&p, &tainted, &fit_error(&p, &tainted)).is_none(),
            "evictions cannot remove a taint"
        );
    }

    #[test]
    fn never_policies_and_pending_preemptions_are_not_eligible() {
        let s = snapshot(vec![node("n1", json!({}))], vec![]);
        let mut never = sized("never", "1", 100, None);
        if let Some(spec) = never.spec.as_mut() {
            spec.preemption_policy = Some("Never".into());
        }
        assert_eq!(eligible(&never, &s), Err(NOT_ELIGIBLE_NEVER));
        let mut victim = sized("going", "2", 1, Some("n1"));
        victim.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::now(),
            ));
        let s = snapshot(vec![node("n1", json!({}))], vec![victim]);
        let mut waiting = sized("waiting", "1", 100, None);
        waiting.status = Some(k8s_openapi::api::core::v1::PodStatus {
            nominated_node_name: Some("n1".into()),
            ..Default::default()
        });
        assert_eq!(eligible(&waiting, &s), Err(NOT_ELIGIBLE_TERMINATING));
        assert_eq!(eligible(&sized("fresh", "1", 100, None), &s), Ok(()));
    }
}
