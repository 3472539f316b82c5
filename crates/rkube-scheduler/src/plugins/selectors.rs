//! Label selectors (`metav1.LabelSelector`), node selector terms
//! (`v1.NodeSelectorTerm`) and tolerations, as upstream's
//! `apimachinery/pkg/labels`, `component-helpers/scheduling/corev1` and
//! `v1helper.TolerationsTolerateTaint`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{NodeSelectorRequirement, NodeSelectorTerm, Pod, Taint, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// Whether `selector` matches `labels`; an empty selector matches
/// everything, an unknown operator nothing.
pub fn label_selector_matches(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    let by_labels = selector.match_labels.iter().flatten().all(|(k, v)| labels.get(k) == Some(v));
    let by_exprs = selector.match_expressions.iter().flatten().all(|e| {
        let value = labels.get(&e.key);
        let values = e.values.as_deref().unwrap_or(&[]);
        match e.operator.as_str() {
            "In" => value.is_some_and(|v| values.contains(v)),
            "NotIn" => value.is_none_or(|v| !values.contains(v)),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            _ => false,
        }
    });
    by_labels && by_exprs
}

/// The labels of `pod` (empty when none).
pub fn pod_labels(pod: &Pod) -> &BTreeMap<String, String> {
    static NONE: BTreeMap<String, String> = BTreeMap::new();
    pod.metadata.labels.as_ref().unwrap_or(&NONE)
}

fn requirement_matches(r: &NodeSelectorRequirement, value: Option<&str>) -> bool {
    let values = r.values.as_deref().unwrap_or(&[]);
    let int = |s: &str| s.parse::<i64>().ok();
    match r.operator.as_str() {
        "In" => value.is_some_and(|v| values.iter().any(|x| x == v)),
        "NotIn" => value.is_none_or(|v| !values.iter().any(|x| x == v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" | "Lt" => {
            let (Some(v), [bound]) = (value.and_then(int), values) else { return false };
            let Some(bound) = int(bound) else { return false };
            if r.operator == "Gt" {
                v > bound
            } else {
                v < bound
            }
        }
        _ => false,
    }
}

/// Whether a node selector term matches a node's labels and name (its
/// `matchFields` know only `metadata.name`); a term with no requirements
/// matches nothing, as upstream.
pub fn node_selector_term_matches(term: &NodeSelectorTerm, labels: &BTreeMap<String, String>, node_name: &str) -> bool {
    let exprs = term.match_expressions.as_deref().unwrap_or(&[]);
    let fields = term.match_fields.as_deref().unwrap_or(&[]);
    if exprs.is_empty() && fields.is_empty() {
        return false;
    }
    exprs.iter().all(|r| requirement_matches(r, labels.get(&r.key).map(String::as_str)))
        && fields.iter().all(|r| r.key == "metadata.name" && requirement_matches(r, Some(node_name)))
}

/// Whether `toleration` tolerates `taint` (key, effect and value; empty
/// key with `Exists` tolerates every taint, empty effect every effect).
pub fn tolerates(toleration: &Toleration, taint: &Taint) -> bool {
    let effect_ok = toleration.effect.as_deref().is_none_or(|e| e.is_empty() || e == taint.effect);
    let key = toleration.key.as_deref().unwrap_or("");
    let op = toleration.operator.as_deref().unwrap_or("Equal");
    if !effect_ok || (!key.is_empty() && key != taint.key) {
        return false;
    }
    match op {
        "Exists" => true,
        "Equal" | "" => !key.is_empty() && toleration.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or(""),
        _ => false,
    }
}

/// The pod's tolerations.
pub fn tolerations(pod: &Pod) -> &[Toleration] {
    pod.spec.as_ref().and_then(|s| s.tolerations.as_deref()).unwrap_or(&[])
}
