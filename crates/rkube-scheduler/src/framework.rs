//! One scheduling decision (upstream `pkg/scheduler/schedule_one.go`
//! `schedulePod`, `findNodesThatFitPod`, `prioritizeNodes`, `selectHost`
//! and `framework.FitError`): filter every node, score those that fit, pick
//! the best (ties broken at random), or explain why none fits.
//!
//! When no node fits and [`crate::preemption`] finds no victims, the
//! message reports, as upstream's DefaultPreemption does, that preemption
//! would not help (`Preemption is not helpful for scheduling` for nodes
//! rejected as unresolvable, `No preemption victims found for incoming pod`
//! for the others).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;

use crate::plugins::{run_filters, score, Code, CycleState, Status};
use crate::snapshot::{NodeInfo, Snapshot};

/// The message when the cluster has no nodes (`ErrNoNodesAvailable`).
pub const ERR_NO_NODES: &str = "no nodes available to schedule pods";
/// Preemption's reason for nodes whose rejection removing pods cannot fix.
pub const PREEMPTION_NOT_HELPFUL: &str = "Preemption is not helpful for scheduling";
/// Preemption's reason for nodes where no lower-priority pods could be evicted.
pub const NO_PREEMPTION_VICTIMS: &str = "No preemption victims found for incoming pod";

/// Why no node was chosen.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    /// The cluster has no nodes.
    #[error("{}", ERR_NO_NODES)]
    NoNodes,
    /// Every node was filtered out.
    #[error("{0}")]
    Fit(FitError),
}

/// Every node's rejection (upstream `FitError` with its `Diagnosis`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FitError {
    /// How many nodes were considered.
    pub num_all_nodes: usize,
    /// Each node's rejection.
    pub statuses: Vec<(String, Status)>,
    /// A PreFilter's rejection of the pod as a whole (it then stands for
    /// every node's reason in the message, as upstream's `PreFilterMsg`).
    pub pre_filter_msg: Option<String>,
}

/// `0/N nodes are available: <count> <reason>, ....`: reasons counted over
/// the nodes and sorted as strings, as upstream's histogram.
fn histogram_message(num_nodes: usize, reasons: impl Iterator<Item = String>) -> String {
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for r in reasons {
        *counts.entry(r).or_default() += 1;
    }
    let mut parts: Vec<String> = counts.into_iter().map(|(r, n)| format!("{n} {r}")).collect();
    parts.sort();
    format!("0/{num_nodes} nodes are available: {}.", parts.join(", "))
}

impl FitError {
    /// Why no node fits, without the preemption part: `0/N nodes are
    /// available: <count> <reason>, ....` (the whole message when preemption
    /// found victims, as upstream's empty `PostFilterMsg`).
    pub fn nodes_message(&self) -> String {
        if let Some(msg) = &self.pre_filter_msg {
            return format!("0/{} nodes are available: {msg}.", self.num_all_nodes);
        }
        histogram_message(self.num_all_nodes, self.statuses.iter().flat_map(|(_, s)| s.reasons.iter().cloned()))
    }

    /// What the preemption step reports: `preemption: 0/N nodes are available: ...`.
    pub fn preemption_message(&self) -> String {
        let reasons = self.statuses.iter().map(|(_, s)| {
            if s.code == Code::UnschedulableAndUnresolvable { PREEMPTION_NOT_HELPFUL } else { NO_PREEMPTION_VICTIMS }.to_string()
        });
        format!("preemption: {}", histogram_message(self.num_all_nodes, reasons))
    }
}

impl std::fmt::Display for FitError {
    /// Upstream's FailedScheduling text, e.g. `0/1 nodes are available: 1
    /// Insufficient cpu. preemption: 0/1 nodes are available: 1 No
    /// preemption victims found for incoming pod.`
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.nodes_message(), self.preemption_message())
    }
}

/// A random index below `n` (ties between equally scored nodes).
fn random_below(n: usize) -> usize {
    (uuid::Uuid::new_v4().as_u128() % n.max(1) as u128) as usize
}

/// Fewest feasible nodes a cycle looks for before it stops filtering (`minFeasibleNodesToFind`).
pub const MIN_FEASIBLE_NODES_TO_FIND: usize = 100;
/// The lowest adaptive share of nodes to find feasible, percent (`minFeasibleNodesPercentageToFind`).
pub const MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND: usize = 5;

/// How many feasible nodes a cycle finds before it stops filtering, with
/// upstream's default `percentageOfNodesToScore` (0: adaptive): every node
/// below [`MIN_FEASIBLE_NODES_TO_FIND`]; else `50 - nodes/125` percent (at
/// least [`MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND`]) of them, and at least
/// [`MIN_FEASIBLE_NODES_TO_FIND`]: 420 of 1,000 nodes, 500 of 5,000
/// (upstream `numFeasibleNodesToFind` in `schedule_one.go`).
pub fn num_feasible_nodes_to_find(all: usize) -> usize {
    if all < MIN_FEASIBLE_NODES_TO_FIND {
        return all;
    }
    let percentage = 50usize
        .saturating_sub(all / 125)
        .max(MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND);
    (all * percentage / 100).max(MIN_FEASIBLE_NODES_TO_FIND)
}

/// Picks a node for `pod` in `snapshot`: the name of the best-scoring node
/// that passes every filter, filtering from the first node on (see [`schedule_pod_from`]).
pub fn schedule_pod(pod: &Pod, snapshot: &Snapshot) -> Result<String, ScheduleError> {
    schedule_pod_from(pod, snapshot, &mut 0)
}

/// Picks a node for `pod` in `snapshot`, as upstream's `schedulePod`:
/// filters the nodes in turn from index `*next_start` (wrapping around),
/// stops once [`num_feasible_nodes_to_find`] of them fit, scores those and
/// takes the best (ties at random); `*next_start` then moves past the
/// nodes filtered, so successive cycles spread over the cluster
/// (`nextStartNodeIndex`). When no node fits, every node was filtered and
/// the error gives each one's reason.
pub fn schedule_pod_from(pod: &Pod, snapshot: &Snapshot, next_start: &mut usize) -> Result<String, ScheduleError> {
    if snapshot.nodes.is_empty() {
        return Err(ScheduleError::NoNodes);
    }
    if let Err(msg) = crate::plugins::volumes::pre_filter(pod, snapshot) {
        let status = Status::new(crate::plugins::volumes::NAME, Code::UnschedulableAndUnresolvable, msg.clone());
        let statuses = snapshot.nodes.iter().map(|n| (n.name.clone(), status.clone())).collect();
        return Err(ScheduleError::Fit(FitError { num_all_nodes: snapshot.nodes.len(), statuses, pre_filter_msg: Some(msg) }));
    }
    let state = CycleState::new(pod, snapshot);
    let all = snapshot.nodes.len();
    let wanted = num_feasible_nodes_to_find(all);
    let start = *next_start % all;
    let mut feasible: Vec<&NodeInfo> = Vec::new();
    let mut statuses = Vec::new();
    let mut filtered = 0;
    for node in snapshot.nodes[start..].iter().chain(&snapshot.nodes[..start]) {
        if feasible.len() >= wanted {
            break;
        }
        filtered += 1;
        let with_nominated = snapshot.with_nominated_for(pod, node);
        match run_filters(pod, with_nominated.as_ref().unwrap_or(node), snapshot, &state) {
            Ok(()) => feasible.push(node),
            Err(s) => statuses.push((node.name.clone(), s)),
        }
    }
    *next_start = (start + filtered) % all;
    if feasible.is_empty() {
        return Err(ScheduleError::Fit(FitError { num_all_nodes: snapshot.nodes.len(), statuses, pre_filter_msg: None }));
    }
    if feasible.len() == 1 {
        return Ok(feasible[0].name.clone());
    }
    let scores = score::score(pod, &feasible);
    let best = scores.iter().copied().max().unwrap_or(0);
    let top: Vec<usize> = scores.iter().enumerate().filter(|(_, s)| **s == best).map(|(i, _)| i).collect();
    Ok(feasible[top[random_below(top.len())]].name.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{node, pod, snapshot};
    use serde_json::json;

    #[test]
    fn failed_scheduling_message_has_upstreams_shape() {
        let cpu = pod("p", json!({"containers": [{"name": "c", "resources": {"requests": {"cpu": "100"}}}]}));
        let one = snapshot(vec![node("n1", json!({}))], vec![]);
        let err = schedule_pod(&cpu, &one).unwrap_err();
        assert_eq!(
            err.to_string(),
            "0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod."
        );
        let three = snapshot(
            vec![
                node("a", json!({"spec": {"unschedulable": true}})),
                node("b", json!({"spec": {"taints": [{"key": "gpu", "value": "yes", "effect": "NoSchedule"}]}})),
                node("c", json!({})),
            ],
            vec![],
        );
        assert_eq!(
            schedule_pod(&cpu, &three).unwrap_err().to_string(),
            "0/3 nodes are available: 1 Insufficient cpu, 1 node(s) had untolerated taint {gpu: yes}, 1 node(s) were unschedulable. \
             preemption: 0/3 nodes are available: 1 No preemption victims found for incoming pod, 2 Preemption is not helpful for scheduling."
        );
        assert_eq!(schedule_pod(&cpu, &snapshot(vec![], vec![])).unwrap_err().to_string(), ERR_NO_NODES);
    }

    #[test]
    fn a_cycle_filters_until_enough_nodes_fit_and_the_next_one_starts_after_them() {
        let counts: Vec<usize> = [50, 100, 300, 1000, 5000, 10_000].into_iter().map(num_feasible_nodes_to_find).collect();
        assert_eq!(counts, vec![50, 100, 144, 420, 500, 500]);
        let nodes: Vec<_> = (0..300).map(|i| node(&format!("n{i:03}"), json!({}))).collect();
        let snap = snapshot(nodes, vec![]);
        let p = pod("p", json!({}));
        let mut next = 0;
        let chosen = schedule_pod_from(&p, &snap, &mut next).unwrap();
        assert!(chosen.as_str() < "n144", "{chosen} is among the first 144 nodes filtered");
        assert_eq!(next, 144);
        let chosen = schedule_pod_from(&p, &snap, &mut next).unwrap();
        assert!(("n144".."n288").contains(&chosen.as_str()), "{chosen}");
        assert_eq!(next, 288);
        schedule_pod_from(&p, &snap, &mut next).unwrap();
        assert_eq!(next, 132, "wraps around");
        // No node fits: every node is filtered and named, from wherever the cycle starts.
        let big = pod("big", json!({"containers": [{"name": "c", "resources": {"requests": {"cpu": "100"}}}]}));
        let Err(ScheduleError::Fit(fit)) = schedule_pod_from(&big, &snap, &mut next) else { panic!("fits nowhere") };
        assert_eq!(fit.statuses.len(), 300);
        assert_eq!(fit.nodes_message(), "0/300 nodes are available: 300 Insufficient cpu.");
        assert_eq!(next, 132);
    }

    #[test]
    fn the_emptier_node_wins() {
        let busy = pod("busy", json!({"nodeName": "a", "containers": [{"name": "c", "resources": {"requests": {"cpu": "1500m", "memory": "1Gi"}}}]}));
        let snap = snapshot(vec![node("a", json!({})), node("b", json!({}))], vec![busy]);
        let p = pod("p", json!({"containers": [{"name": "c", "resources": {"requests": {"cpu": "100m", "memory": "100Mi"}}}]}));
        for _ in 0..10 {
            assert_eq!(schedule_pod(&p, &snap).unwrap(), "b");
        }
    }

    /// The cost of one scheduling cycle on 1,000 nodes with 30 pods each (30 of them with
    /// required anti-affinity), for a plain pod, one with a topology spread constraint and
    /// one with required anti-affinity: the median of 50 cycles. Ignored in the test run:
    /// `cargo test -p rkube-scheduler --release --lib -- --ignored --nocapture bench_cycle`.
    /// `rkube bench cluster` gives the end-to-end figure (pods/s).
    #[test]
    #[ignore = "benchmark: run with --ignored --nocapture"]
    fn bench_cycle() {
        let nodes: Vec<_> = (0..1000)
            .map(|i| {
                node(
                    &format!("node-{i:04}"),
                    json!({"metadata": {"labels": {"zone": format!("z{}", i % 3)}},
                           "status": {"allocatable": {"cpu": "64", "memory": "256Gi", "pods": "110"}}}),
                )
            })
            .collect();
        let request = json!([{"name": "c", "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]);
        let pods: Vec<Pod> = (0..30_000)
            .map(|i| {
                let mut spec = json!({"nodeName": format!("node-{:04}", i % 1000), "containers": request,
                                      "labels": {"app": format!("app-{}", i % 7)}});
                if i % 1000 == 0 {
                    spec["affinity"] = json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                        {"labelSelector": {"matchLabels": {"app": "singleton"}}, "topologyKey": "kubernetes.io/hostname"}]}});
                }
                pod(&format!("p-{i}"), spec)
            })
            .collect();
        let snap = snapshot(nodes, pods);
        let plain = pod("new", json!({"containers": request, "labels": {"app": "web"}}));
        let spread = pod("new", json!({"containers": request, "labels": {"app": "app-3"}, "topologySpreadConstraints": [
            {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "app-3"}}}]}));
        let anti = pod("new", json!({"containers": request, "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "app-3"}}, "topologyKey": "zone"}]}}}));
        // Every zone holds app-3 pods: the anti-affinity pod fits nowhere.
        for (what, p, fits) in [("plain", &plain, true), ("topology spread", &spread, true), ("required anti-affinity", &anti, false)] {
            let mut times: Vec<f64> = (0..50)
                .map(|_| {
                    let t = std::time::Instant::now();
                    assert_eq!(schedule_pod(p, &snap).is_ok(), fits, "{what}");
                    t.elapsed().as_secs_f64() * 1e3
                })
                .collect();
            times.sort_by(f64::total_cmp);
            println!("bench_cycle: 1000 nodes, 30000 pods, {what} pod: {:.2} ms per cycle (median of 50)", times[25]);
        }
    }
}
