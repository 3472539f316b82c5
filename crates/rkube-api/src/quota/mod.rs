//! Quota accounting shared by the `ResourceQuota` admission plugin and the
//! `resourcequota-controller` (upstream `pkg/quota/v1` and
//! `pkg/quota/v1/evaluator/core`): which quota resource names an object of
//! a resource counts towards, its usage, whether a quota's scopes select
//! it, and the pod constraints of cpu/memory quotas.
//!
//! Objects are JSON (`serde_json::Value`) as the API serves them. Resource
//! names are upstream's: `pods`, `services`, `configmaps`, `secrets`,
//! `persistentvolumeclaims`, `replicationcontrollers`, `resourcequotas`,
//! `services.nodeports`, `services.loadbalancers`, `requests.storage`,
//! `cpu`/`memory` (= requests), `requests.*`, `limits.*`, and object counts
//! `count/<resource>` (core) or `count/<resource>.<group>`.

pub mod pods;
pub mod quantity;

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{json, Value};

pub use quantity::{Format, Quantity};

/// Quota amounts by resource name (upstream `corev1.ResourceList`).
pub type ResourceList = BTreeMap<String, Quantity>;

/// The core resources with a legacy (un-prefixed) object count name.
const LEGACY_COUNTED: &[&str] = &["configmaps", "secrets", "replicationcontrollers", "resourcequotas"];

/// The object count name of a resource: `count/pods`, `count/deployments.apps`.
pub fn object_count_name(group: &str, resource: &str) -> String {
    if group.is_empty() {
        format!("count/{resource}")
    } else {
        format!("count/{resource}.{group}")
    }
}

/// Splits an object count name into (group, resource); `None` for other names.
pub fn parse_object_count_name(name: &str) -> Option<(String, String)> {
    let rest = name.strip_prefix("count/")?;
    match rest.split_once('.') {
        Some((resource, group)) => Some((group.to_string(), resource.to_string())),
        None => Some((String::new(), rest.to_string())),
    }
}

/// Reads a JSON resource map (`spec.hard`, `status.used`); entries that
/// are not quantities are left out.
pub fn parse_list(v: Option<&Value>) -> ResourceList {
    v.and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| {
                    let q = match v {
                        Value::String(s) => Quantity::parse(s)?,
                        Value::Number(n) => Quantity::parse(&n.to_string())?,
                        _ => return None,
                    };
                    Some((k.clone(), q))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// A resource map as JSON, quantities in canonical form.
pub fn list_to_json(l: &ResourceList) -> Value {
    Value::Object(l.iter().map(|(k, q)| (k.clone(), json!(q.to_string()))).collect())
}

/// `a + b` per name (upstream `quota.Add`).
pub fn add(a: &ResourceList, b: &ResourceList) -> ResourceList {
    let mut out = a.clone();
    for (k, q) in b {
        let sum = out.get(k).map_or(*q, |have| have.plus(*q));
        out.insert(k.clone(), sum);
    }
    out
}

/// `a - b` per name (upstream `quota.Subtract`); names only in `b` become negative.
pub fn subtract(a: &ResourceList, b: &ResourceList) -> ResourceList {
    let mut out = a.clone();
    for (k, q) in b {
        let have = out.get(k).copied().unwrap_or(Quantity { milli: 0, format: q.format });
        out.insert(k.clone(), Quantity { milli: have.milli.saturating_sub(q.milli), format: have.format });
    }
    out
}

/// Whether an UPDATE of (`group`, `resource`) can change quota usage
/// (upstream `Evaluator.Handles`): Services (type and ports) and
/// PersistentVolumeClaims (storage requests). Pod resizes go through the
/// `resize` subresource, which quota does not see.
pub fn charges_updates(group: &str, resource: &str) -> bool {
    group.is_empty() && matches!(resource, "services" | "persistentvolumeclaims")
}

/// The entries of `l` named in `names` (upstream `quota.Mask`).
pub fn mask<'a>(l: &ResourceList, names: impl IntoIterator<Item = &'a String>) -> ResourceList {
    names.into_iter().filter_map(|n| l.get(n).map(|q| (n.clone(), *q))).collect()
}

/// `name=value` pairs sorted by name, joined by `,` (upstream `prettyPrint`).
pub fn pretty(l: &ResourceList) -> String {
    l.iter().map(|(k, q)| format!("{k}={q}")).collect::<Vec<_>>().join(",")
}

/// The names among `names` that objects of (`group`, `resource`) count
/// towards (upstream `Evaluator.MatchingResources`).
pub fn matching_resources<'a>(group: &str, resource: &str, names: impl IntoIterator<Item = &'a String>) -> Vec<String> {
    let count = object_count_name(group, resource);
    names
        .into_iter()
        .filter(|n| {
            **n == count
                || match (group, resource) {
                    ("", "pods") => pods::tracks(n),
                    ("", "services") => matches!(n.as_str(), "services" | "services.nodeports" | "services.loadbalancers"),
                    ("", "persistentvolumeclaims") => {
                        matches!(n.as_str(), "persistentvolumeclaims" | "requests.storage")
                            || n.ends_with(".storageclass.storage.k8s.io/requests.storage")
                            || n.ends_with(".storageclass.storage.k8s.io/persistentvolumeclaims")
                    }
                    ("", r) => LEGACY_COUNTED.contains(&r) && n.as_str() == r,
                    _ => false,
                }
        })
        .cloned()
        .collect()
}

/// What `obj`, an object of (`group`, `resource`), uses (upstream
/// `Evaluator.Usage`): its object count, plus the per-kind resources.
pub fn usage(group: &str, resource: &str, obj: &Value) -> ResourceList {
    if group.is_empty() && resource == "pods" {
        return pods::usage(obj);
    }
    let mut out = ResourceList::new();
    out.insert(object_count_name(group, resource), Quantity::count(1));
    if !group.is_empty() {
        return out;
    }
    match resource {
        "services" => {
            out.insert("services".into(), Quantity::count(1));
            let ports = obj.pointer("/spec/ports").and_then(Value::as_array).map_or(0, Vec::len);
            let ports = i64::try_from(ports).unwrap_or(i64::MAX);
            match obj.pointer("/spec/type").and_then(Value::as_str) {
                Some("NodePort") => {
                    out.insert("services.nodeports".into(), Quantity::count(ports));
                }
                Some("LoadBalancer") => {
                    out.insert("services.loadbalancers".into(), Quantity::count(1));
                    if obj.pointer("/spec/allocateLoadBalancerNodePorts").and_then(Value::as_bool) != Some(false) {
                        out.insert("services.nodeports".into(), Quantity::count(ports));
                    }
                }
                _ => {}
            }
        }
        "persistentvolumeclaims" => {
            out.insert("persistentvolumeclaims".into(), Quantity::count(1));
            let class = obj.pointer("/spec/storageClassName").and_then(Value::as_str).unwrap_or("");
            if !class.is_empty() {
                out.insert(format!("{class}.storageclass.storage.k8s.io/persistentvolumeclaims"), Quantity::count(1));
            }
            let storage = obj.pointer("/spec/resources/requests/storage").and_then(Value::as_str).and_then(Quantity::parse);
            if let Some(storage) = storage {
                out.insert("requests.storage".into(), storage);
                if !class.is_empty() {
                    out.insert(format!("{class}.storageclass.storage.k8s.io/requests.storage"), storage);
                }
            }
        }
        r if LEGACY_COUNTED.contains(&r) => {
            out.insert(r.to_string(), Quantity::count(1));
        }
        _ => {}
    }
    out
}

/// One scope requirement of a quota (upstream `ScopedResourceSelectorRequirement`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScopeRequirement {
    /// `Terminating`, `NotTerminating`, `BestEffort`, `NotBestEffort`,
    /// `PriorityClass`, `CrossNamespacePodAffinity`.
    pub scope: String,
    /// `In`, `NotIn`, `Exists`, `DoesNotExist`.
    pub operator: String,
    /// The values of `In`/`NotIn`.
    pub values: Vec<String>,
}

/// A quota's `spec.scopes` (as `Exists` requirements) and
/// `spec.scopeSelector.matchExpressions` (upstream `GetScopeSelectorsFromQuota`).
pub fn scope_requirements(quota: &Value) -> Vec<ScopeRequirement> {
    let strings = |v: Option<&Value>| -> Vec<String> {
        v.and_then(Value::as_array).map(|a| a.iter().filter_map(Value::as_str).map(String::from).collect()).unwrap_or_default()
    };
    let mut out: Vec<ScopeRequirement> = strings(quota.pointer("/spec/scopes"))
        .into_iter()
        .map(|scope| ScopeRequirement { scope, operator: "Exists".into(), values: Vec::new() })
        .collect();
    for e in quota.pointer("/spec/scopeSelector/matchExpressions").and_then(Value::as_array).into_iter().flatten() {
        out.push(ScopeRequirement {
            scope: e.get("scopeName").and_then(Value::as_str).unwrap_or("").to_string(),
            operator: e.get("operator").and_then(Value::as_str).unwrap_or("").to_string(),
            values: strings(e.get("values")),
        });
    }
    out
}

/// Whether `quota` selects `obj`, an object of (`group`, `resource`), by
/// its scopes: every requirement must hold; only pods have scopes, so a
/// scoped quota never selects other objects (upstream `MatchesNoScopeFunc`).
pub fn scopes_select(quota: &Value, group: &str, resource: &str, obj: &Value) -> bool {
    let reqs = scope_requirements(quota);
    if reqs.is_empty() {
        return true;
    }
    if !(group.is_empty() && resource == "pods") {
        return false;
    }
    reqs.iter().all(|r| pods::matches_scope(r, obj))
}

/// Whether `quota` (with a computed `status.hard`) applies to `obj`: it
/// tracks a resource the object counts towards and its scopes select it
/// (upstream `quota.Matches`). Returns the matching `status.hard` names.
pub fn quota_matches(quota: &Value, group: &str, resource: &str, obj: &Value) -> Option<Vec<String>> {
    let hard = parse_list(quota.pointer("/status/hard"));
    let names = matching_resources(group, resource, hard.keys());
    (!names.is_empty() && scopes_select(quota, group, resource, obj)).then_some(names)
}

/// The names of `l` that are negative.
pub fn negative(l: &ResourceList) -> BTreeSet<String> {
    l.iter().filter(|(_, q)| q.milli < 0).map(|(k, _)| k.clone()).collect()
}
