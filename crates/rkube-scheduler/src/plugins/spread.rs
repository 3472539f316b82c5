//! PodTopologySpread's filter for `whenUnsatisfiable: DoNotSchedule`
//! constraints (upstream `plugins/podtopologyspread/filtering.go`).
//!
//! For each constraint, pods in the incoming pod's namespace matching the
//! constraint's selector (plus `matchLabelKeys`) are counted per topology
//! domain over the eligible nodes (those carrying every constraint's key
//! and, with `nodeAffinityPolicy: Honor` (default), matching the pod's
//! node selector/affinity; with `nodeTaintsPolicy: Honor`, tolerating their
//! taints). Placing the pod in a domain must keep
//! `count + self - min <= maxSkew`, where `min` is 0 while there are fewer
//! domains than `minDomains`. Soft (`ScheduleAnyway`) constraints and
//! scoring are not implemented.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::{Pod, TopologySpreadConstraint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};

use super::filters::{matches_node_selector_and_affinity, taints};
use super::selectors::{label_selector_matches, pod_labels, tolerates, tolerations};
use super::{Code, Status};
use crate::snapshot::{NodeInfo, Snapshot};

/// The reason when a domain would exceed `maxSkew`.
pub const ERR_CONSTRAINTS_NOT_MATCH: &str = "node(s) didn't match pod topology spread constraints";
/// The reason when the node lacks a constraint's topology key.
pub const ERR_MISSING_LABEL: &str = "node(s) didn't match pod topology spread constraints (missing required label)";

fn hard_constraints(pod: &Pod) -> Vec<&TopologySpreadConstraint> {
    pod.spec
        .as_ref()
        .and_then(|s| s.topology_spread_constraints.as_ref())
        .map(|cs| cs.iter().filter(|c| c.when_unsatisfiable == "DoNotSchedule").collect())
        .unwrap_or_default()
}

/// The constraint's selector with `matchLabelKeys` turned into `In`
/// requirements on the incoming pod's values.
fn effective_selector(c: &TopologySpreadConstraint, labels: &BTreeMap<String, String>) -> LabelSelector {
    let mut sel = c.label_selector.clone().unwrap_or_default();
    for key in c.match_label_keys.iter().flatten() {
        if let Some(v) = labels.get(key) {
            sel.match_expressions.get_or_insert_with(Vec::new).push(LabelSelectorRequirement {
                key: key.clone(),
                operator: "In".into(),
                values: Some(vec![v.clone()]),
            });
        }
    }
    sel
}

fn eligible(pod: &Pod, c: &TopologySpreadConstraint, all: &[&TopologySpreadConstraint], node: &NodeInfo) -> bool {
    if !all.iter().all(|k| node.label(&k.topology_key).is_some()) {
        return false;
    }
    if c.node_affinity_policy.as_deref().unwrap_or("Honor") == "Honor" && !matches_node_selector_and_affinity(pod, node) {
        return false;
    }
    if c.node_taints_policy.as_deref().unwrap_or("Ignore") == "Honor" {
        let tols = tolerations(pod);
        let untolerated = taints(node)
            .iter()
            .filter(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
            .any(|t| !tols.iter().any(|tol| tolerates(tol, t)));
        if untolerated {
            return false;
        }
    }
    true
}

/// One hard constraint, counted over the cluster.
#[derive(Debug)]
struct Counted {
    key: String,
    /// Matching pods per domain (value of `key`) over the eligible nodes.
    counts: HashMap<String, i32>,
    /// The smallest count, or 0 while there are fewer domains than `minDomains`.
    global_min: i32,
    /// 1 when the incoming pod matches its own selector.
    self_match: i32,
    max_skew: i32,
}

/// The constraints counted once per scheduling cycle (upstream's PreFilter
/// and its `preFilterState`); empty when the pod has no hard constraints.
#[derive(Debug, Default)]
pub struct PreFilterState {
    constraints: Vec<Counted>,
}

/// Counts each of `pod`'s hard constraints over `snapshot`.
pub fn pre_filter(pod: &Pod, snapshot: &Snapshot) -> PreFilterState {
    let constraints = hard_constraints(pod);
    let labels = pod_labels(pod);
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let counted = constraints
        .iter()
        .map(|c| {
            let selector = effective_selector(c, labels);
            let mut counts: HashMap<String, i32> = HashMap::new();
            for n in snapshot.nodes.iter().filter(|n| eligible(pod, c, &constraints, n)) {
                let Some(value) = n.label(&c.topology_key) else { continue };
                let matching = n
                    .pods
                    .iter()
                    .filter(|p| p.metadata.namespace.as_deref() == Some(namespace) && p.metadata.deletion_timestamp.is_none())
                    .filter(|p| label_selector_matches(&selector, pod_labels(p)))
                    .count() as i32;
                *counts.entry(value.to_string()).or_default() += matching;
            }
            let min_domains = c.min_domains.unwrap_or(1).max(1) as usize;
            let global_min = if counts.len() < min_domains { 0 } else { counts.values().copied().min().unwrap_or(0) };
            Counted {
                key: c.topology_key.clone(),
                counts,
                global_min,
                self_match: i32::from(label_selector_matches(&selector, labels)),
                max_skew: c.max_skew,
            }
        })
        .collect();
    PreFilterState { constraints: counted }
}

/// The filter, over the cycle's [`pre_filter`] counts: the node must carry
/// every constraint's key, and placing the pod in its domain must keep
/// `count + self - min <= maxSkew`.
pub fn filter(state: &PreFilterState, node: &NodeInfo) -> Result<(), Status> {
    for c in &state.constraints {
        let Some(domain) = node.label(&c.key) else {
            return Err(Status::new("PodTopologySpread", Code::UnschedulableAndUnresolvable, ERR_MISSING_LABEL));
        };
        let here = c.counts.get(domain).copied().unwrap_or(0);
        if here + c.self_match - c.global_min > c.max_skew {
            return Err(Status::new("PodTopologySpread", Code::Unschedulable, ERR_CONSTRAINTS_NOT_MATCH));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{node, pod, snapshot};
    use serde_json::json;

    fn spread(max_skew: i32, extra: serde_json::Value) -> serde_json::Value {
        let mut c = json!({"maxSkew": max_skew, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule",
                           "labelSelector": {"matchLabels": {"app": "web"}}});
        if let (Some(o), Some(e)) = (c.as_object_mut(), extra.as_object()) {
            o.extend(e.clone());
        }
        json!({"labels": {"app": "web"}, "topologySpreadConstraints": [c]})
    }

    #[test]
    fn max_skew_bounds_the_difference_between_domains() {
        let za = node("a", json!({"metadata": {"labels": {"zone": "a"}}}));
        let zb = node("b", json!({"metadata": {"labels": {"zone": "b"}}}));
        let bare = node("c", json!({}));
        let existing = pod("w1", json!({"nodeName": "a", "labels": {"app": "web"}}));
        let snap = snapshot(vec![za, zb, bare], vec![existing]);
        let p = pod("w2", spread(1, json!({})));
        // zone a already has one: a gets skew 2 - 0 > 1; b fits; c has no zone.
        let filter = |p: &Pod, n: &NodeInfo, snap: &Snapshot| filter(&pre_filter(p, snap), n);
        let results: Vec<_> = snap.nodes.iter().map(|n| filter(&p, n, &snap).err().map(|s| s.reasons[0].clone())).collect();
        assert_eq!(results, vec![Some(ERR_CONSTRAINTS_NOT_MATCH.to_string()), None, Some(ERR_MISSING_LABEL.to_string())]);
        // maxSkew 2 allows zone a too.
        let loose = pod("w2", spread(2, json!({})));
        assert!(filter(&loose, &snap.nodes[0], &snap).is_ok());
        // minDomains 3 with two domains: the minimum counts as 0, so a is refused even with maxSkew 1... and b fits.
        let md = pod("w2", spread(1, json!({"minDomains": 3})));
        assert!(filter(&md, &snap.nodes[0], &snap).is_err());
        assert!(filter(&md, &snap.nodes[1], &snap).is_ok());
        // A pod not matching its own selector does not count itself.
        let other = pod("x", json!({"labels": {"app": "db"}, "topologySpreadConstraints": spread(1, json!({}))["topologySpreadConstraints"].clone()}));
        assert!(filter(&other, &snap.nodes[0], &snap).is_ok());
    }
}
