//! The pod evaluator (upstream `pkg/quota/v1/evaluator/core/pods.go`).
//!
//! A pod counts `count/pods` always, and while it is not terminal (phase
//! `Succeeded`/`Failed`) also `pods` and its compute resources: the
//! effective requests and limits of `k8s.io/component-helpers/resource`
//! (containers and sidecars summed, raised to what each other init
//! container needs while it runs, plus `spec.overhead`). A container's
//! missing request defaults to its limit, as the API server's pod
//! defaulting does.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::{Quantity, ResourceList, ScopeRequirement};

/// Named pod resources quota tracks (besides `requests.hugepages-*` and extended resources).
const POD_RESOURCES: &[&str] = &[
    "pods",
    "cpu",
    "memory",
    "ephemeral-storage",
    "requests.cpu",
    "requests.memory",
    "requests.ephemeral-storage",
    "limits.cpu",
    "limits.memory",
    "limits.ephemeral-storage",
];

/// Resources each container must request or limit when a quota tracks them
/// (upstream's backward-compatible `validationSet`).
const MUST_SPECIFY: &[&str] = &["cpu", "memory", "requests.cpu", "requests.memory", "limits.cpu", "limits.memory"];

/// Whether the quota resource `name` is tracked by the pod evaluator.
pub fn tracks(name: &str) -> bool {
    POD_RESOURCES.contains(&name)
        || name == "count/pods"
        || name.starts_with("requests.hugepages-")
        || name.strip_prefix("requests.").is_some_and(|r| r.contains('/') && !r.starts_with("kubernetes.io/"))
}

/// Whether the pod is terminal (upstream `QuotaV1Pod` is false).
pub fn is_terminal(pod: &Value) -> bool {
    matches!(pod.pointer("/status/phase").and_then(Value::as_str), Some("Succeeded") | Some("Failed"))
}

type Amounts = BTreeMap<String, Quantity>;

fn amounts(v: Option<&Value>) -> Amounts {
    super::parse_list(v)
}

/// A container's (requests, limits); a missing request takes the limit.
fn container_resources(c: &Value) -> (Amounts, Amounts) {
    let limits = amounts(c.pointer("/resources/limits"));
    let mut requests = amounts(c.pointer("/resources/requests"));
    for (k, q) in &limits {
        requests.entry(k.clone()).or_insert(*q);
    }
    (requests, limits)
}

fn add_into(sum: &mut Amounts, other: &Amounts) {
    for (k, q) in other {
        let v = sum.get(k).map_or(*q, |have| have.plus(*q));
        sum.insert(k.clone(), v);
    }
}

fn max_into(sum: &mut Amounts, other: &Amounts) {
    for (k, q) in other {
        if sum.get(k).is_none_or(|have| have.milli < q.milli) {
            sum.insert(k.clone(), *q);
        }
    }
}

fn containers<'a>(pod: &'a Value, key: &str) -> impl Iterator<Item = &'a Value> {
    pod.pointer(&format!("/spec/{key}")).and_then(Value::as_array).into_iter().flatten()
}

/// The pod's effective requests (or, with `limits`, limits): containers
/// and sidecars summed, raised to each other init container's needs, plus
/// `spec.overhead` (upstream `resourcehelper.PodRequests`/`PodLimits`).
pub fn effective(pod: &Value, limits: bool) -> ResourceList {
    let pick = |c: &Value| {
        let (r, l) = container_resources(c);
        if limits {
            l
        } else {
            r
        }
    };
    let mut sum = Amounts::new();
    for c in containers(pod, "containers") {
        add_into(&mut sum, &pick(c));
    }
    let mut sidecars = Amounts::new();
    let mut init_max = Amounts::new();
    for c in containers(pod, "initContainers") {
        let own = pick(c);
        if c.get("restartPolicy").and_then(Value::as_str) == Some("Always") {
            add_into(&mut sum, &own);
            add_into(&mut sidecars, &own);
            max_into(&mut init_max, &sidecars);
        } else {
            let mut running = sidecars.clone();
            add_into(&mut running, &own);
            max_into(&mut init_max, &running);
        }
    }
    max_into(&mut sum, &init_max);
    if !limits || !sum.is_empty() {
        add_into(&mut sum, &amounts(pod.pointer("/spec/overhead")));
    }
    sum
}

/// The quota names of `requests` and `limits` (upstream `podComputeUsageHelper`).
fn compute_usage(requests: &Amounts, limits: &Amounts) -> ResourceList {
    let mut out = ResourceList::new();
    out.insert("pods".into(), Quantity::count(1));
    for (k, q) in requests {
        match k.as_str() {
            "cpu" | "memory" | "ephemeral-storage" => {
                out.insert(k.clone(), *q);
                out.insert(format!("requests.{k}"), *q);
            }
            other if other.starts_with("hugepages-") || other.contains('/') => {
                out.insert(format!("requests.{other}"), *q);
            }
            _ => {}
        }
    }
    for (k, q) in limits {
        if matches!(k.as_str(), "cpu" | "memory" | "ephemeral-storage") {
            out.insert(format!("limits.{k}"), *q);
        }
    }
    out
}

/// A pod's quota usage (upstream `PodUsageFunc`).
pub fn usage(pod: &Value) -> ResourceList {
    let mut out = ResourceList::new();
    out.insert("count/pods".into(), Quantity::count(1));
    if is_terminal(pod) {
        return out;
    }
    out.extend(compute_usage(&effective(pod, false), &effective(pod, true)));
    out
}

fn best_effort(pod: &Value) -> bool {
    containers(pod, "containers").chain(containers(pod, "initContainers")).all(|c| {
        let (r, l) = container_resources(c);
        !r.keys().chain(l.keys()).any(|k| k == "cpu" || k == "memory")
    })
}

fn cross_namespace_affinity(pod: &Value) -> bool {
    ["podAffinity", "podAntiAffinity"].iter().any(|kind| {
        let Some(a) = pod.pointer(&format!("/spec/affinity/{kind}")) else { return false };
        let required = a.get("requiredDuringSchedulingIgnoredDuringExecution").and_then(Value::as_array).into_iter().flatten();
        let preferred = a
            .get("preferredDuringSchedulingIgnoredDuringExecution")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|p| p.get("podAffinityTerm"));
        required.chain(preferred).any(|t| {
            t.get("namespaces").and_then(Value::as_array).is_some_and(|n| !n.is_empty())
                || t.get("namespaceSelector").is_some_and(|s| !s.is_null())
        })
    })
}

/// Whether one scope requirement selects `pod` (upstream `podMatchesScopeFunc`).
pub fn matches_scope(req: &ScopeRequirement, pod: &Value) -> bool {
    let terminating = pod.pointer("/spec/activeDeadlineSeconds").and_then(Value::as_i64).is_some_and(|s| s >= 0);
    match req.scope.as_str() {
        "Terminating" => terminating,
        "NotTerminating" => !terminating,
        "BestEffort" => best_effort(pod),
        "NotBestEffort" => !best_effort(pod),
        "CrossNamespacePodAffinity" => cross_namespace_affinity(pod),
        "PriorityClass" => {
            let class = pod.pointer("/spec/priorityClassName").and_then(Value::as_str).unwrap_or("");
            match req.operator.as_str() {
                "Exists" => !class.is_empty(),
                "In" => req.values.iter().any(|v| v == class),
                "NotIn" => !req.values.iter().any(|v| v == class),
                // The selector always sees a `PriorityClass` key (possibly empty).
                _ => false,
            }
        }
        _ => false,
    }
}

/// Upstream `Constraints`: with a quota on cpu or memory (`required`),
/// every container and init container must request or limit it. Errors:
/// `must specify <resource> for: <containers>[; <resource> for: …]`,
/// resources and container names sorted.
pub fn constraints(required: &[String], pod: &Value) -> Result<(), String> {
    let required: BTreeSet<&str> = required.iter().map(String::as_str).filter(|r| MUST_SPECIFY.contains(r)).collect();
    if required.is_empty() {
        return Ok(());
    }
    let mut missing: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for c in containers(pod, "containers").chain(containers(pod, "initContainers")) {
        let (r, l) = container_resources(c);
        let has = compute_usage(&r, &l);
        for res in &required {
            if !has.contains_key(*res) {
                missing.entry(res).or_default().insert(c.get("name").and_then(Value::as_str).unwrap_or("").to_string());
            }
        }
    }
    if missing.is_empty() {
        return Ok(());
    }
    let parts: Vec<String> =
        missing.iter().map(|(res, names)| format!("{res} for: {}", names.iter().cloned().collect::<Vec<_>>().join(","))).collect();
    Err(format!("must specify {}", parts.join("; ")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn show(l: &ResourceList) -> String {
        super::super::pretty(l)
    }

    #[test]
    fn pod_usage_sums_containers_and_takes_the_larger_init_container() {
        let pod = json!({"spec": {
            "containers": [
                {"name": "a", "resources": {"requests": {"cpu": "250m", "memory": "64Mi"}, "limits": {"cpu": "500m"}}},
                {"name": "b", "resources": {"limits": {"cpu": "1", "memory": "128Mi"}}},
            ],
            "initContainers": [{"name": "i", "resources": {"requests": {"cpu": "2"}}}],
        }});
        assert_eq!(
            show(&usage(&pod)),
            "count/pods=1,cpu=2,limits.cpu=1500m,limits.memory=128Mi,memory=192Mi,pods=1,requests.cpu=2,requests.memory=192Mi"
        );
        let done = json!({"spec": {"containers": [{"name": "a"}]}, "status": {"phase": "Succeeded"}});
        assert_eq!(show(&usage(&done)), "count/pods=1");
    }

    #[test]
    fn cpu_and_memory_quotas_require_every_container_to_name_them() {
        let pod = json!({"spec": {
            "containers": [{"name": "web", "resources": {"requests": {"cpu": "1"}}}, {"name": "log"}],
            "initContainers": [{"name": "init", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}],
        }});
        let req = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            constraints(&req(&["limits.cpu", "pods"]), &pod).unwrap_err(),
            "must specify limits.cpu for: log,web"
        );
        assert_eq!(
            constraints(&req(&["requests.cpu", "limits.memory"]), &pod).unwrap_err(),
            "must specify limits.memory for: log,web; requests.cpu for: log"
        );
        assert_eq!(constraints(&req(&["pods", "count/pods"]), &pod), Ok(()));
    }

    #[test]
    fn scopes_select_pods_by_deadline_qos_and_priority_class() {
        let req = |scope: &str, op: &str, values: &[&str]| ScopeRequirement {
            scope: scope.into(),
            operator: op.into(),
            values: values.iter().map(|s| s.to_string()).collect(),
        };
        let plain = json!({"spec": {"containers": [{"name": "a"}]}});
        let batch = json!({"spec": {"activeDeadlineSeconds": 30, "priorityClassName": "high",
            "containers": [{"name": "a", "resources": {"requests": {"cpu": "1"}}}]}});
        assert!(matches_scope(&req("NotTerminating", "Exists", &[]), &plain));
        assert!(matches_scope(&req("Terminating", "Exists", &[]), &batch));
        assert!(matches_scope(&req("BestEffort", "Exists", &[]), &plain));
        assert!(matches_scope(&req("NotBestEffort", "Exists", &[]), &batch));
        assert!(!matches_scope(&req("PriorityClass", "Exists", &[]), &plain));
        assert!(matches_scope(&req("PriorityClass", "In", &["high", "low"]), &batch));
        assert!(matches_scope(&req("PriorityClass", "NotIn", &["high"]), &plain));
        assert!(!matches_scope(&req("PriorityClass", "NotIn", &["high"]), &batch));
    }
}
