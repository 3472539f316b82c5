//! Which webhooks a request goes to (upstream
//! `staging/src/k8s.io/apiserver/pkg/admission/plugin/webhook/predicates`):
//! `rules` (operations, apiGroups, apiVersions, resources with the
//! `resource/subresource` syntax and `*`, scope), `namespaceSelector` and
//! `objectSelector`.

use rkube_api::selector::object::label_selector_matches;
use serde_json::{Map, Value};

use super::Attributes;

/// True when `list` (a JSON array of strings) holds `*` or `want`.
fn has(list: Option<&Value>, want: &str) -> bool {
    list.and_then(Value::as_array).is_some_and(|l| l.iter().any(|v| v.as_str().is_some_and(|s| s == "*" || s == want)))
}

/// True when one of a rule's `resources` entries names the request's
/// resource and subresource: `pods` (no subresource), `pods/status`, `pods/*`,
/// `*` (every resource, no subresource), `*/status`, `*/*` (everything).
fn resource_matches(resources: Option<&Value>, resource: &str, subresource: &str) -> bool {
    let Some(list) = resources.and_then(Value::as_array) else { return false };
    list.iter().filter_map(Value::as_str).any(|entry| {
        let (r, s) = entry.split_once('/').unwrap_or((entry, ""));
        let r_ok = r == "*" || r == resource;
        let s_ok = if s.is_empty() { subresource.is_empty() } else { s == "*" || s == subresource };
        r_ok && s_ok
    })
}

/// True when one `RuleWithOperations` matches the request. `scope`: `*`
/// (default), `Cluster` (cluster-scoped resources) or `Namespaced`.
pub fn rule_matches(rule: &Value, a: &Attributes) -> bool {
    let scope_ok = match rule.get("scope").and_then(Value::as_str).unwrap_or("*") {
        "Cluster" => !a.namespaced,
        "Namespaced" => a.namespaced,
        _ => true,
    };
    scope_ok
        && has(rule.get("operations"), a.operation)
        && has(rule.get("apiGroups"), &a.group)
        && has(rule.get("apiVersions"), &a.version)
        && resource_matches(rule.get("resources"), &a.resource, &a.subresource)
}

/// True when any of the webhook's `rules` matches.
pub fn rules_match(webhook: &Value, a: &Attributes) -> bool {
    webhook.get("rules").and_then(Value::as_array).is_some_and(|rules| rules.iter().any(|r| rule_matches(r, a)))
}

fn labels_of(obj: Option<&Value>) -> Map<String, Value> {
    obj.and_then(|o| o.pointer("/metadata/labels")).and_then(Value::as_object).cloned().unwrap_or_default()
}

/// `objectSelector`: matches the object's labels or the old object's (either
/// suffices, as upstream); an absent or empty selector matches everything.
pub fn object_selector_matches(webhook: &Value, a: &Attributes) -> bool {
    let Some(sel) = webhook.get("objectSelector").filter(|s| !is_empty_selector(s)) else { return true };
    [a.object.as_ref(), a.old_object.as_deref()]
        .into_iter()
        .flatten()
        .any(|o| label_selector_matches(sel, &labels_of(Some(o))))
}

/// An absent, null or `{}` selector (matches everything).
pub fn is_empty_selector(sel: &Value) -> bool {
    match sel {
        Value::Null => true,
        Value::Object(m) => m.values().all(|v| match v {
            Value::Null => true,
            Value::Object(o) => o.is_empty(),
            Value::Array(a) => a.is_empty(),
            _ => false,
        }),
        _ => false,
    }
}

/// `namespaceSelector` against `namespace_labels` (the labels of the
/// request's namespace, or of the Namespace object itself for requests on
/// namespaces; `None` for other cluster-scoped resources, which always match).
pub fn namespace_selector_matches(webhook: &Value, namespace_labels: Option<&Map<String, Value>>) -> bool {
    let Some(sel) = webhook.get("namespaceSelector").filter(|s| !is_empty_selector(s)) else { return true };
    match namespace_labels {
        Some(labels) => label_selector_matches(sel, labels),
        None => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn attrs(op: &'static str, resource: &str, sub: &str, namespaced: bool) -> Attributes {
        Attributes {
            operation: op,
            group: String::new(),
            version: "v1".into(),
            kind: "Pod".into(),
            resource: resource.into(),
            subresource: sub.into(),
            namespaced,
            name: "p".into(),
            namespace: "default".into(),
            object: Some(json!({"metadata": {"labels": {"app": "a"}}})),
            old_object: None,
            dry_run: false,
            options: Value::Null,
            user: None,
        }
    }

    #[test]
    fn rules_match_operations_groups_versions_resources_subresources_and_scope() {
        let rule = json!({"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "scope": "*"});
        assert!(rule_matches(&rule, &attrs("CREATE", "pods", "", true)));
        assert!(!rule_matches(&rule, &attrs("UPDATE", "pods", "", true)));
        assert!(!rule_matches(&rule, &attrs("CREATE", "pods", "status", true)), "pods does not cover pods/status");
        let status = json!({"operations": ["*"], "apiGroups": ["*"], "apiVersions": ["*"], "resources": ["pods/status"]});
        assert!(rule_matches(&status, &attrs("UPDATE", "pods", "status", true)));
        assert!(!rule_matches(&status, &attrs("UPDATE", "pods", "", true)));
        let all = json!({"operations": ["*"], "apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*/*"]});
        assert!(rule_matches(&all, &attrs("DELETE", "pods", "status", true)));
        let star = json!({"operations": ["*"], "apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*"]});
        assert!(rule_matches(&star, &attrs("CREATE", "configmaps", "", true)));
        assert!(!rule_matches(&star, &attrs("CREATE", "pods", "status", true)));
        let cluster = json!({"operations": ["*"], "apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*"], "scope": "Cluster"});
        assert!(!rule_matches(&cluster, &attrs("CREATE", "pods", "", true)));
        assert!(rule_matches(&cluster, &attrs("CREATE", "nodes", "", false)));
    }

    #[test]
    fn selectors_match_new_or_old_labels_and_namespace_labels() {
        let w = json!({"objectSelector": {"matchLabels": {"app": "a"}}, "namespaceSelector": {"matchLabels": {"team": "x"}}});
        assert!(object_selector_matches(&w, &attrs("CREATE", "pods", "", true)));
        let mut other = attrs("CREATE", "pods", "", true);
        other.object = Some(json!({"metadata": {}}));
        assert!(!object_selector_matches(&w, &other));
        other.old_object = Some(std::sync::Arc::new(json!({"metadata": {"labels": {"app": "a"}}})));
        assert!(object_selector_matches(&w, &other), "the old object's labels suffice");
        let team: Map<String, Value> = json!({"team": "x"}).as_object().cloned().unwrap_or_default();
        assert!(namespace_selector_matches(&w, Some(&team)));
        assert!(!namespace_selector_matches(&w, Some(&Map::new())));
        assert!(namespace_selector_matches(&w, None), "cluster-scoped objects ignore namespaceSelector");
        assert!(namespace_selector_matches(&json!({"namespaceSelector": {}}), Some(&Map::new())));
    }
}
