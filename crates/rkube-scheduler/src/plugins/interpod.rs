//! InterPodAffinity's filter for required terms (upstream
//! `plugins/interpodaffinity/filtering.go`): the incoming pod's
//! `requiredDuringSchedulingIgnoredDuringExecution` pod affinity and
//! anti-affinity, and the anti-affinity of pods already placed. Preferred
//! terms (scoring) are not implemented.
//!
//! A term matches a pod when the pod's namespace is one of the term's
//! (`namespaces`, pods selected by `namespaceSelector`, or by default the
//! namespace of the pod that has the term) and its labels match the term's
//! `labelSelector`; two nodes are "together" when they share the value of
//! the term's `topologyKey`.

use std::collections::{BTreeMap, HashMap, HashSet};

use k8s_openapi::api::core::v1::{Pod, PodAffinityTerm};

use super::selectors::{label_selector_matches, pod_labels};
use super::{Code, Status};
use crate::snapshot::{NodeInfo, Snapshot};

/// The reason when a required affinity term finds no partner.
pub const ERR_AFFINITY: &str = "node(s) didn't match pod affinity rules";
/// The reason when the pod's anti-affinity finds a pod in the domain.
pub const ERR_ANTI_AFFINITY: &str = "node(s) didn't match pod anti-affinity rules";
/// The reason when a placed pod's anti-affinity rejects the incoming pod.
pub const ERR_EXISTING_ANTI_AFFINITY: &str = "node(s) didn't satisfy existing pods anti-affinity rules";

/// Whether `term` (of a pod in `owner_ns`) selects `target`.
pub fn term_matches(term: &PodAffinityTerm, owner_ns: &str, target: &Pod, snapshot: &Snapshot) -> bool {
    let ns = target.metadata.namespace.as_deref().unwrap_or("default");
    let listed = term.namespaces.iter().flatten().any(|n| n == ns);
    let selected = term.namespace_selector.as_ref().is_some_and(|sel| {
        let empty = BTreeMap::new();
        label_selector_matches(sel, snapshot.namespace_labels.get(ns).unwrap_or(&empty))
    });
    let default = term.namespaces.as_ref().is_none_or(|n| n.is_empty()) && term.namespace_selector.is_none() && ns == owner_ns;
    if !(listed || selected || default) {
        return false;
    }
    term.label_selector.as_ref().is_some_and(|sel| label_selector_matches(sel, pod_labels(target)))
}

/// `pod`'s required pod affinity (`anti` false) or anti-affinity terms.
pub(crate) fn required(pod: &Pod, anti: bool) -> &[PodAffinityTerm] {
    let a = pod.spec.as_ref().and_then(|s| s.affinity.as_ref());
    let terms = if anti {
        a.and_then(|a| a.pod_anti_affinity.as_ref()).and_then(|x| x.required_during_scheduling_ignored_during_execution.as_ref())
    } else {
        a.and_then(|a| a.pod_affinity.as_ref()).and_then(|x| x.required_during_scheduling_ignored_during_execution.as_ref())
    };
    terms.map(Vec::as_slice).unwrap_or(&[])
}

/// Topology domains as `key -> values`.
type Domains = HashMap<String, HashSet<String>>;

fn add_domain(domains: &mut Domains, key: &str, node: &NodeInfo) {
    if let Some(value) = node.label(key) {
        domains.entry(key.to_string()).or_default().insert(value.to_string());
    }
}

fn in_domains(domains: &Domains, node: &NodeInfo) -> bool {
    domains.iter().any(|(key, values)| node.label(key).is_some_and(|v| values.contains(v)))
}

/// One required affinity term of the incoming pod, resolved over the cluster.
#[derive(Debug, Default)]
struct AffinityTerm {
    key: String,
    /// Values of `key` on nodes holding a pod the term selects.
    domains: HashSet<String>,
    /// Whether the term selects any placed pod at all.
    anywhere: bool,
    /// Whether the term selects the incoming pod itself.
    selects_itself: bool,
}

/// What the filter needs from the whole cluster, computed once per scheduling
/// cycle (upstream's PreFilter and its `preFilterState`): domains that the
/// filter then looks a node's labels up in, so a cycle visits the placed pods
/// once instead of once for every node.
#[derive(Debug, Default)]
pub struct PreFilterState {
    /// Domains where a placed pod's required anti-affinity selects the
    /// incoming pod (upstream `existingAntiAffinityCounts`).
    existing_anti: Domains,
    /// The incoming pod's required affinity terms (upstream `affinityCounts`).
    affinity: Vec<AffinityTerm>,
    /// Domains holding a pod that the incoming pod's required anti-affinity
    /// selects (upstream `antiAffinityCounts`).
    anti: Domains,
}

/// Computes [`PreFilterState`] for `pod`. Pods with required anti-affinity are
/// reached through each node's
/// [`NodeInfo::pods_with_required_anti_affinity`]; every placed pod is visited
/// only when `pod` has required (anti-)affinity terms of its own.
pub fn pre_filter(pod: &Pod, snapshot: &Snapshot) -> PreFilterState {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let mut state = PreFilterState::default();
    for other in &snapshot.nodes {
        for placed in &other.pods_with_required_anti_affinity {
            let owner = placed.metadata.namespace.as_deref().unwrap_or("default");
            for term in required(placed, true) {
                if term_matches(term, owner, pod, snapshot) {
                    add_domain(&mut state.existing_anti, &term.topology_key, other);
                }
            }
        }
    }
    let (affinity, anti) = (required(pod, false), required(pod, true));
    if affinity.is_empty() && anti.is_empty() {
        return state;
    }
    state.affinity = affinity
        .iter()
        .map(|term| AffinityTerm {
            key: term.topology_key.clone(),
            selects_itself: term_matches(term, ns, pod, snapshot),
            ..AffinityTerm::default()
        })
        .collect();
    for other in &snapshot.nodes {
        for placed in &other.pods {
            for (term, resolved) in affinity.iter().zip(state.affinity.iter_mut()) {
                if term_matches(term, ns, placed, snapshot) {
                    resolved.anywhere = true;
                    if let Some(value) = other.label(&term.topology_key) {
                        resolved.domains.insert(value.to_string());
                    }
                }
            }
            for term in anti {
                if term_matches(term, ns, placed, snapshot) {
                    add_domain(&mut state.anti, &term.topology_key, other);
                }
            }
        }
    }
    state
}

/// The filter, over the cycle's [`pre_filter`] state: placed pods'
/// anti-affinity first; then the incoming pod's affinity (a partner in the
/// node's domain or, when no pod anywhere matches, the pod matching its own
/// term on a node that has the key); then its anti-affinity.
pub fn filter(state: &PreFilterState, node: &NodeInfo) -> Result<(), Status> {
    if in_domains(&state.existing_anti, node) {
        return Err(Status::new("InterPodAffinity", Code::Unschedulable, ERR_EXISTING_ANTI_AFFINITY));
    }
    for term in &state.affinity {
        let value = node.label(&term.key);
        let here = value.is_some_and(|v| term.domains.contains(v));
        let self_ok = !term.anywhere && value.is_some() && term.selects_itself;
        if !here && !self_ok {
            return Err(Status::new("InterPodAffinity", Code::UnschedulableAndUnresolvable, ERR_AFFINITY));
        }
    }
    if in_domains(&state.anti, node) {
        return Err(Status::new("InterPodAffinity", Code::Unschedulable, ERR_ANTI_AFFINITY));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{node, pod, snapshot};
    use serde_json::json;

    fn term(kind: &str, app: &str) -> serde_json::Value {
        json!({kind: {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": "zone"}]}})
    }

    #[test]
    fn required_affinity_and_anti_affinity_follow_topology_domains() {
        let za = node("a", json!({"metadata": {"labels": {"zone": "a"}}}));
        let zb = node("b", json!({"metadata": {"labels": {"zone": "b"}}}));
        let db = pod("db", json!({"nodeName": "a", "labels": {"app": "db"},
            "affinity": term("podAntiAffinity", "batch")}));
        let snap = snapshot(vec![za, zb], vec![db]);
        let fits = |p: &Pod| {
            let state = pre_filter(p, &snap);
            snap.nodes.iter().map(|n| filter(&state, n).err().map(|s| s.reasons[0].clone())).collect::<Vec<_>>()
        };
        // Affinity to app=db: only zone a.
        let web = pod("web", json!({"affinity": term("podAffinity", "db")}));
        assert_eq!(fits(&web), vec![None, Some(ERR_AFFINITY.into())]);
        // Anti-affinity to app=db: only zone b.
        let lone = pod("lone", json!({"affinity": term("podAntiAffinity", "db")}));
        assert_eq!(fits(&lone), vec![Some(ERR_ANTI_AFFINITY.into()), None]);
        // The placed db pod's anti-affinity keeps app=batch out of zone a.
        let batch = pod("batch", json!({"labels": {"app": "batch"}}));
        assert_eq!(fits(&batch), vec![Some(ERR_EXISTING_ANTI_AFFINITY.into()), None]);
        // The first pod of a group with affinity to itself fits anywhere.
        let first = pod("cache", json!({"labels": {"app": "cache"}, "affinity": term("podAffinity", "cache")}));
        assert_eq!(fits(&first), vec![None, None]);
        // Another namespace is not matched by default.
        let mut elsewhere = pod("web2", json!({"affinity": term("podAffinity", "db")}));
        elsewhere.metadata.namespace = Some("other".into());
        assert_eq!(fits(&elsewhere), vec![Some(ERR_AFFINITY.into()), Some(ERR_AFFINITY.into())]);
    }
}
