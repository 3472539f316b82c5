//! `metav1.LabelSelector` objects (the `selector` of workloads, budgets,
//! aggregation rules) as JSON, matched against an object's labels like
//! upstream's `metav1.LabelSelectorAsSelector(...).Matches(...)`
//! (`staging/src/k8s.io/apimachinery/pkg/apis/meta/v1/helpers.go`).

use serde_json::{Map, Value};

/// Whether a `metav1.LabelSelector` (JSON) matches `labels`: `matchLabels`
/// and `matchExpressions` with `In`, `NotIn`, `Exists`, `DoesNotExist`; an
/// empty selector matches everything, an unknown operator nothing.
pub fn label_selector_matches(selector: &Value, labels: &Map<String, Value>) -> bool {
    let label = |k: &str| labels.get(k).and_then(Value::as_str);
    if let Some(ml) = selector.get("matchLabels").and_then(Value::as_object) {
        if !ml.iter().all(|(k, v)| v.as_str().is_some() && label(k) == v.as_str()) {
            return false;
        }
    }
    let exprs = selector.get("matchExpressions").and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[]);
    exprs.iter().all(|e| {
        let key = e.get("key").and_then(Value::as_str).unwrap_or("");
        let values: Vec<&str> =
            e.get("values").and_then(Value::as_array).map(|a| a.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
        match e.get("operator").and_then(Value::as_str).unwrap_or("") {
            "In" => label(key).is_some_and(|v| values.contains(&v)),
            "NotIn" => label(key).is_none_or(|v| !values.contains(&v)),
            "Exists" => label(key).is_some(),
            "DoesNotExist" => label(key).is_none(),
            _ => false,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn selectors_match_labels_and_expressions() {
        let labels = json!({"a": "1", "b": "x"});
        let l = labels.as_object().unwrap();
        assert!(label_selector_matches(&json!({"matchLabels": {"a": "1"}}), l));
        assert!(!label_selector_matches(&json!({"matchLabels": {"a": "2"}}), l));
        assert!(label_selector_matches(&json!({"matchExpressions": [{"key": "b", "operator": "In", "values": ["x", "y"]}]}), l));
        assert!(label_selector_matches(&json!({"matchExpressions": [{"key": "c", "operator": "DoesNotExist"}]}), l));
        assert!(!label_selector_matches(&json!({"matchExpressions": [{"key": "b", "operator": "NotIn", "values": ["x"]}]}), l));
        assert!(!label_selector_matches(&json!({"matchExpressions": [{"key": "b", "operator": "Bogus"}]}), l));
        assert!(label_selector_matches(&json!({}), l));
    }
}
