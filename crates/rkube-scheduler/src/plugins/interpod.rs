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

use std::collections::BTreeMap;

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
    term.label_selector.as_ref().is_some_and(|sel| label_selector_matches(sel, &pod_labels(target)))
}

fn required(pod: &Pod, anti: bool) -> &[PodAffinityTerm] {
    let a = pod.spec.as_ref().and_then(|s| s.affinity.as_ref());
    let terms = if anti {
        a.and_then(|a| a.pod_anti_affinity.as_ref()).and_then(|x| x.required_during_scheduling_ignored_during_execution.as_ref())
    } else {
        a.and_then(|a| a.pod_affinity.as_ref()).and_then(|x| x.required_during_scheduling_ignored_during_execution.as_ref())
    };
    terms.map(Vec::as_slice).unwrap_or(&[])
}

fn same_domain(a: &NodeInfo, b: &NodeInfo, key: &str) -> bool {
    matches!((a.label(key), b.label(key)), (Some(x), Some(y)) if x == y)
}

/// The filter.
pub fn filter(pod: &Pod, node: &NodeInfo, snapshot: &Snapshot) -> Result<(), Status> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    // Placed pods whose anti-affinity forbids the incoming pod in their domain.
    for other in &snapshot.nodes {
        for placed in &other.pods {
            let owner = placed.metadata.namespace.as_deref().unwrap_or("default");
            for term in required(placed, true) {
                if same_domain(node, other, &term.topology_key) && term_matches(term, owner, pod, snapshot) {
                    return Err(Status::new("InterPodAffinity", Code::Unschedulable, ERR_EXISTING_ANTI_AFFINITY));
                }
            }
        }
    }
    // The incoming pod's required affinity: a partner in the node's domain,
    // or, when no pod anywhere matches, the pod matching its own term.
    for term in required(pod, false) {
        let mut anywhere = false;
        let mut here = false;
        for other in &snapshot.nodes {
            for placed in &other.pods {
                if term_matches(term, ns, placed, snapshot) {
                    anywhere = true;
                    here |= same_domain(node, other, &term.topology_key);
                }
            }
        }
        let self_ok = !anywhere && node.label(&term.topology_key).is_some() && term_matches(term, ns, pod, snapshot);
        if !here && !self_ok {
            return Err(Status::new("InterPodAffinity", Code::UnschedulableAndUnresolvable, ERR_AFFINITY));
        }
    }
    // The incoming pod's required anti-affinity.
    for term in required(pod, true) {
        for other in snapshot.nodes.iter().filter(|o| same_domain(node, o, &term.topology_key)) {
            if other.pods.iter().any(|placed| term_matches(term, ns, placed, snapshot)) {
                return Err(Status::new("InterPodAffinity", Code::Unschedulable, ERR_ANTI_AFFINITY));
            }
        }
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
        let fits = |p: &Pod| snap.nodes.iter().map(|n| filter(p, n, &snap).err().map(|s| s.reasons[0].clone())).collect::<Vec<_>>();
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
