//! Preemption (upstream `pkg/scheduler/framework/plugins/defaultpreemption`
//! and `framework/preemption`): when no node fits a pod, find a node where
//! evicting pods of lower `spec.priority` makes room, and the fewest and
//! least important such pods.
//!
//! For each node the filters rejected for a reason evicting pods can fix
//! (not `UnschedulableAndUnresolvable`), the pod must fit once every
//! lower-priority pod is gone; then those pods are given back in order of
//! decreasing priority (earlier started first), each kept when the pod still
//! fits with it: the rest are the node's victims. Pods whose eviction would
//! break a PodDisruptionBudget ([`split_by_pdb_violation`]) are given back
//! before the others, so they are evicted only when nothing else makes room.
//! Among the nodes with victims, the one chosen breaks the fewest budgets,
//! then has the lowest highest victim priority, then the smallest sum of
//! victim priorities, then the fewest victims, then comes first in name
//! order (upstream's `pickOneNodeForPreemption`, without its start-time
//! criteria). As upstream, a budget may still be broken when no other choice
//! makes room.
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
use k8s_openapi::api::policy::v1::PodDisruptionBudget;

use crate::framework::FitError;
use crate::plugins::selectors::label_selector_matches;
use crate::plugins::{run_filters, Code, CycleState};
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
    let state = CycleState::new(pod, snapshot);
    let mut candidates: Vec<(usize, Candidate)> = fit
        .statuses
        .iter()
        .filter(|(_, s)| s.code != Code::UnschedulableAndUnresolvable)
        .filter_map(|(name, _)| snapshot.node(name))
        .filter_map(|node| {
            victims_on(pod, p, node, snapshot, &state).map(|(victims, violations)| {
                (
                    violations,
                    Candidate {
                        node: node.name.clone(),
                        victims,
                    },
                )
            })
        })
        .filter(|(_, c)| !c.victims.is_empty())
        .collect();
    candidates.sort_by_key(|(violations, c)| {
        let top = c
            .victims
            .iter()
            .map(|v| priority(v))
            .max()
            .unwrap_or(i32::MIN);
        let sum: i64 = c.victims.iter().map(|v| i64::from(priority(v))).sum();
        (*violations, top, sum, c.victims.len())
    });
    candidates.into_iter().next().map(|(_, c)| c)
}

/// Splits `pods` (in order) into those whose eviction would take a PodDisruptionBudget below
/// its allowed disruptions and the others (upstream's `filterPodsWithPDBViolation`): each
/// pod a budget selects, and that is not yet among its `disruptedPods`, uses one of its
/// `disruptionsAllowed`; a pod that takes any budget below zero violates it. A budget with
/// an empty selector selects nothing.
pub fn split_by_pdb_violation(
    pods: Vec<Arc<Pod>>,
    pdbs: &[Arc<PodDisruptionBudget>],
) -> (Vec<Arc<Pod>>, Vec<Arc<Pod>>) {
    let mut allowed: Vec<i32> = pdbs
        .iter()
        .map(|b| b.status.as_ref().map_or(0, |s| s.disruptions_allowed))
        .collect();
    let (mut violating, mut other) = (Vec::new(), Vec::new());
    for pod in pods {
        let labels = pod.metadata.labels.clone().unwrap_or_default();
        let mut violates = false;
        if !labels.is_empty() {
            for (i, pdb) in pdbs.iter().enumerate() {
                if pdb.metadata.namespace != pod.metadata.namespace {
                    continue;
                }
                let Some(selector) = pdb.spec.as_ref().and_then(|s| s.selector.as_ref()) else {
                    continue;
                };
                let empty = selector.match_labels.as_ref().is_none_or(|m| m.is_empty())
                    && selector
                        .match_expressions
                        .as_ref()
                        .is_none_or(|e| e.is_empty());
                if empty || !label_selector_matches(selector, &labels) {
                    continue;
                }
                let name = pod.metadata.name.as_deref().unwrap_or("");
                let disrupted = pdb
                    .status
                    .as_ref()
                    .and_then(|s| s.disrupted_pods.as_ref())
                    .is_some_and(|d| d.contains_key(name));
                if disrupted {
                    continue;
                }
                allowed[i] -= 1;
                if allowed[i] < 0 {
                    violates = true;
                }
            }
        }
        if violates {
            violating.push(pod);
        } else {
            other.push(pod);
        }
    }
    (violating, other)
}

/// The fewest lower-priority pods of `node` whose eviction lets `pod` fit, with how many of
/// them break a PodDisruptionBudget; `None` when evicting all of them would not.
fn victims_on(
    pod: &Pod,
    p: i32,
    node: &NodeInfo,
    snapshot: &Snapshot,
    state: &CycleState,
) -> Option<(Vec<Arc<Pod>>, usize)> {
    let (mut lower, keep): (Vec<Arc<Pod>>, Vec<Arc<Pod>>) =
        node.pods.iter().cloned().partition(|v| priority(v) < p);
    let mut trial = NodeInfo::new(Arc::clone(&node.node));
    for k in keep {
        trial.add_pod(k);
    }
    run_filters(pod, &trial, snapshot, state).ok()?;
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
    // Pods whose eviction would break a budget are given back first.
    let (violating, other) = split_by_pdb_violation(lower, &snapshot.pdbs);
    let mut victims = Vec::new();
    let mut violations = 0;
    for (v, breaks_budget) in violating
        .into_iter()
        .map(|v| (v, true))
        .chain(other.into_iter().map(|v| (v, false)))
    {
        let mut with = trial.clone();
        with.add_pod(Arc::clone(&v));
        if run_filters(pod, &with, snapshot, state).is_ok() {
            trial = with;
        } else {
            violations += usize::from(breaks_budget);
            victims.push(v);
        }
    }
    Some((victims, violations))
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

    fn labelled(name: &str, prio: i32, node_name: &str, app: &str) -> Pod {
        pod(
            name,
            json!({"priority": prio, "nodeName": node_name, "labels": {"app": app},
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "2"}}}]}),
        )
    }

    fn pdb(app: &str, allowed: i32, disrupted: &[&str]) -> Arc<PodDisruptionBudget> {
        let disrupted: serde_json::Map<String, serde_json::Value> = disrupted
            .iter()
            .map(|p| (p.to_string(), json!("2026-11-27T00:00:00Z")))
            .collect();
        Arc::new(
            serde_json::from_value(json!({"metadata": {"name": app, "namespace": "default"},
                "spec": {"selector": {"matchLabels": {"app": app}}},
                "status": {"disruptionsAllowed": allowed, "disruptedPods": disrupted,
                    "currentHealthy": 1, "desiredHealthy": 1, "expectedPods": 1}}))
            .expect("pdb"),
        )
    }

    #[test]
    fn a_node_whose_victims_break_no_disruption_budget_is_preferred() {
        // n1's pod is the lower one but its budget allows no disruption; n2's is not covered.
        let mut s = snapshot(
            vec![node("n1", json!({})), node("n2", json!({}))],
            vec![
                labelled("db-0", 1, "n1", "db"),
                labelled("web-0", 5, "n2", "web"),
            ],
        );
        s.pdbs = vec![pdb("db", 0, &[])];
        let p = sized("urgent", "1", 100, None);
        let c = find(&p, &s, &fit_error(&p, &s)).expect("a candidate");
        assert_eq!(
            (c.node.as_str(), c.victims[0].metadata.name.as_deref()),
            ("n2", Some("web-0"))
        );
        // With room in the budget, or the pod already counted as disrupted, the lower one goes.
        for budget in [pdb("db", 1, &[]), pdb("db", 0, &["db-0"])] {
            s.pdbs = vec![budget];
            let c = find(&p, &s, &fit_error(&p, &s)).expect("a candidate");
            assert_eq!(c.node, "n1");
        }
        // A budget is still broken when nothing else makes room.
        let mut only = snapshot(
            vec![node("n1", json!({}))],
            vec![labelled("db-0", 1, "n1", "db")],
        );
        only.pdbs = vec![pdb("db", 0, &[])];
        assert_eq!(
            find(&p, &only, &fit_error(&p, &only))
                .expect("a candidate")
                .node,
            "n1"
        );
    }

    #[test]
    fn budgets_count_down_over_the_pods_they_select() {
        let pods: Vec<Arc<Pod>> = ["a", "b", "c"]
            .iter()
            .map(|n| Arc::new(labelled(n, 1, "n1", "db")))
            .collect();
        let other = Arc::new(labelled("x", 1, "n1", "web"));
        let mut all = pods.clone();
        all.push(other);
        let (violating, rest) = split_by_pdb_violation(all, &[pdb("db", 1, &[])]);
        let names = |v: &[Arc<Pod>]| {
            v.iter()
                .map(|p| p.metadata.name.clone().unwrap_or_default())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            (names(&violating), names(&rest)),
            (
                vec!["b".to_string(), "c".into()],
                vec!["a".to_string(), "x".into()]
            )
        );
        let empty: Arc<PodDisruptionBudget> = Arc::new(
            serde_json::from_value(json!({"metadata": {"name": "e", "namespace": "default"}, "spec": {"selector": {}}, "status": {"disruptionsAllowed": 0, "currentHealthy": 0, "desiredHealthy": 0, "expectedPods": 0}}))
                .expect("pdb"),
        );
        assert!(
            split_by_pdb_violation(pods, &[empty]).0.is_empty(),
            "an empty selector selects nothing"
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
