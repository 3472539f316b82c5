//! Score plugins of the default profile (upstream
//! `plugins/noderesources/{least_allocated,balanced_allocation}.go`,
//! `plugins/tainttoleration`, `plugins/nodeaffinity`) and upstream's
//! normalization (`helper.DefaultNormalizeScore`) and default weights.

use k8s_openapi::api::core::v1::Pod;

use super::filters::taints;
use super::selectors::{node_selector_term_matches, tolerations};
use super::MAX_NODE_SCORE;
use crate::resources::{pod_requests, Resource};
use crate::snapshot::NodeInfo;

/// Default weights: TaintToleration 3, NodeAffinity 2, NodeResourcesFit 1,
/// NodeResourcesBalancedAllocation 1 (`apis/config/v1/default_plugins.go`).
pub const WEIGHTS: [(&str, i64); 4] =
    [("TaintToleration", 3), ("NodeAffinity", 2), ("NodeResourcesFit", 1), ("NodeResourcesBalancedAllocation", 1)];

/// cpu and memory as (requested, allocatable) after placing the pod.
fn cpu_memory(node: &NodeInfo, pod: &Resource, non_zero: bool) -> [(i64, i64); 2] {
    let on_node = if non_zero { &node.non_zero_requested } else { &node.requested };
    [
        (on_node.milli_cpu + pod.milli_cpu, node.allocatable.milli_cpu),
        (on_node.memory + pod.memory, node.allocatable.memory),
    ]
}

/// NodeResourcesFit's default `LeastAllocated` strategy: the free share of
/// cpu and memory (weights 1 each) after placing the pod, counting
/// default requests for containers without any; 0..=100.
pub fn least_allocated(pod: &Pod, node: &NodeInfo) -> i64 {
    least_allocated_for(&pod_requests(pod, true), node)
}

/// [`least_allocated`] for a pod whose non-zero requests (`pod_requests(pod, true)`) are `req`.
pub fn least_allocated_for(req: &Resource, node: &NodeInfo) -> i64 {
    let (mut sum, mut weights) = (0, 0);
    for (requested, alloc) in cpu_memory(node, req, true) {
        if alloc == 0 {
            continue;
        }
        sum += if requested > alloc { 0 } else { (alloc - requested) * MAX_NODE_SCORE / alloc };
        weights += 1;
    }
    if weights == 0 {
        0
    } else {
        sum / weights
    }
}

/// NodeResourcesBalancedAllocation: `(1 - std) * 100` of the cpu and
/// memory fractions requested after placing the pod (actual requests).
pub fn balanced_allocation(pod: &Pod, node: &NodeInfo) -> i64 {
    balanced_allocation_for(&pod_requests(pod, false), node)
}

/// [`balanced_allocation`] for a pod whose requests (`pod_requests(pod, false)`) are `req`.
pub fn balanced_allocation_for(req: &Resource, node: &NodeInfo) -> i64 {
    let fractions: Vec<f64> = cpu_memory(node, req, false)
        .into_iter()
        .filter(|(_, alloc)| *alloc > 0)
        .map(|(r, a)| (r as f64 / a as f64).min(1.0))
        .collect();
    let std = match fractions.as_slice() {
        [a, b] => ((a - b) / 2.0).abs(),
        _ => 0.0,
    };
    ((1.0 - std) * MAX_NODE_SCORE as f64) as i64
}

/// TaintToleration's raw score: how many `PreferNoSchedule` taints the pod
/// does not tolerate (normalized in reverse: fewer is better).
pub fn intolerable_taints(pod: &Pod, node: &NodeInfo) -> i64 {
    let tols: Vec<_> = tolerations(pod)
        .iter()
        .filter(|t| t.effect.as_deref().is_none_or(|e| e.is_empty() || e == "PreferNoSchedule"))
        .collect();
    taints(node)
        .iter()
        .filter(|t| t.effect == "PreferNoSchedule")
        .filter(|t| !tols.iter().any(|tol| super::selectors::tolerates(tol, t)))
        .count() as i64
}

/// NodeAffinity's raw score: the sum of the weights of the matching
/// `preferredDuringSchedulingIgnoredDuringExecution` terms.
pub fn preferred_affinity(pod: &Pod, node: &NodeInfo) -> i64 {
    let preferred = pod
        .spec
        .as_ref()
        .and_then(|s| s.affinity.as_ref())
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|na| na.preferred_during_scheduling_ignored_during_execution.as_ref());
    let empty = Default::default();
    let labels = node.labels().unwrap_or(&empty);
    preferred
        .iter()
        .flat_map(|p| p.iter())
        .filter(|t| t.weight != 0 && node_selector_term_matches(&t.preference, labels, &node.name))
        .map(|t| i64::from(t.weight))
        .sum()
}

/// Scales `scores` to 0..=100 by their maximum; `reverse` turns the best
/// into the worst. All zeros stay 0 (or become 100 when reversed).
pub fn default_normalize(scores: &mut [i64], reverse: bool) {
    let max = scores.iter().copied().max().unwrap_or(0);
    if max == 0 {
        if reverse {
            scores.iter_mut().for_each(|s| *s = MAX_NODE_SCORE);
        }
        return;
    }
    for s in scores.iter_mut() {
        *s = MAX_NODE_SCORE * *s / max;
        if reverse {
            *s = MAX_NODE_SCORE - *s;
        }
    }
}

/// The weighted total of every score plugin for each of `nodes`.
pub fn score(pod: &Pod, nodes: &[&NodeInfo]) -> Vec<i64> {
    let mut taint: Vec<i64> = nodes.iter().map(|n| intolerable_taints(pod, n)).collect();
    default_normalize(&mut taint, true);
    let mut affinity: Vec<i64> = nodes.iter().map(|n| preferred_affinity(pod, n)).collect();
    default_normalize(&mut affinity, false);
    let (requests, non_zero) = (pod_requests(pod, false), pod_requests(pod, true));
    nodes
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let parts = [taint[i], affinity[i], least_allocated_for(&non_zero, n), balanced_allocation_for(&requests, n)];
            parts.iter().zip(WEIGHTS.iter()).map(|(s, (_, w))| s * w).sum()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{node, pod, snapshot};
    use serde_json::json;

    #[test]
    fn resource_scores_follow_upstream_formulas() {
        // 4 cpu / 8Gi node with 1 cpu / 2Gi assigned; pod asks 1 cpu / 2Gi.
        let n = node("n", json!({"status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}}}));
        let placed = pod("a", json!({"nodeName": "n", "containers": [{"name": "c", "resources": {"requests": {"cpu": "1", "memory": "2Gi"}}}]}));
        let snap = snapshot(vec![n], vec![placed]);
        let p = pod("p", json!({"containers": [{"name": "c", "resources": {"requests": {"cpu": "1", "memory": "2Gi"}}}]}));
        assert_eq!(least_allocated(&p, &snap.nodes[0]), 50);
        assert_eq!(balanced_allocation(&p, &snap.nodes[0]), 100);
        // cpu-heavy pod: cpu 3/4 = .75, memory 2/8 = .25 -> std .25 -> 75.
        let cpu = pod("q", json!({"containers": [{"name": "c", "resources": {"requests": {"cpu": "2"}}}]}));
        assert_eq!(balanced_allocation(&cpu, &snap.nodes[0]), 75);
        // least allocated counts default requests: cpu (4000-3000)/4000=25, memory (8Gi-2Gi-200Mi)*100/8Gi=72 -> 48.
        assert_eq!(least_allocated(&cpu, &snap.nodes[0]), 48);
    }

    #[test]
    fn normalization_scales_by_the_maximum() {
        let cases: Vec<(Vec<i64>, bool, Vec<i64>)> = vec![
            (vec![0, 0], false, vec![0, 0]),
            (vec![0, 0], true, vec![100, 100]),
            (vec![1, 2, 4], false, vec![25, 50, 100]),
            (vec![0, 1, 2], true, vec![100, 50, 0]),
        ];
        for (mut input, reverse, want) in cases {
            default_normalize(&mut input, reverse);
            assert_eq!(input, want);
        }
    }

    #[test]
    fn preferences_and_soft_taints_rank_nodes() {
        let tainted = node("t", json!({"spec": {"taints": [{"key": "k", "effect": "PreferNoSchedule"}]}}));
        let ssd = node("s", json!({"metadata": {"labels": {"disk": "ssd"}}}));
        let snap = snapshot(vec![tainted, ssd], vec![]);
        let p = pod("p", json!({"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 10, "preference": {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]}}]}}}));
        let nodes: Vec<&NodeInfo> = snap.nodes.iter().collect();
        assert_eq!(nodes[0].name, "s");
        let totals = score(&p, &nodes);
        // s: taint 100*3 + affinity 100*2 + ...; t: 0 + 0 + same resource scores.
        assert_eq!(totals[0] - totals[1], 500);
    }
}
