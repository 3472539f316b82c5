//! The `LimitRanger` admission plugin (upstream
//! `plugin/pkg/admission/limitranger`), on create of pods and
//! PersistentVolumeClaims in a namespace with LimitRanges:
//!
//! - defaulting (before the other plugins): each container and init
//!   container gets the `default` (limits) and `defaultRequest` (requests)
//!   of the `Container` items it does not set, LimitRange defaulting
//!   applied first (`default` from `max`, `defaultRequest` from `default`,
//!   then from `min`), after a container's own limits have filled its
//!   missing requests (upstream's pod defaulting); the pod records what was set in the annotation
//!   `kubernetes.io/limit-ranger` (`LimitRanger plugin set: cpu, memory
//!   request for container web; cpu limit for container web`);
//! - validation (after the mutating webhooks): `min`, `max` and
//!   `maxLimitRequestRatio` of `Container` items per container, of `Pod`
//!   items on the pod's effective requests and limits, and `min`/`max`
//!   `storage` of `PersistentVolumeClaim` items on the claim's request.
//!   The first LimitRange with violations refuses the object: 403
//!   `<resource> "<name>" is forbidden: <violation>` or, for several,
//!   `[<violation>, <violation>]`, with upstream's wording (`minimum cpu
//!   usage per Container is 100m, but request is 50m`, `maximum memory
//!   usage per Container is 1Gi.  No limit is specified`, …).
//!
//! Pod updates are not checked (their containers' resources cannot change
//! there), as upstream.

use std::collections::BTreeMap;

use rkube_api::quota::{self, pods, Quantity, ResourceList};
use rkube_api::registry::{self, ResourceInfo};
use rkube_storage::RangeRequest;
use serde_json::{json, Value};

use crate::error::{ApiError, ApiResult};
use crate::source::decode_stored;
use crate::state::ApiState;

/// The annotation recording what the plugin set.
pub const ANNOTATION: &str = "kubernetes.io/limit-ranger";

/// Whether the plugin looks at creates of (`group`, `resource`).
pub fn handles(info: &ResourceInfo) -> bool {
    info.group.is_empty() && matches!(info.resource, "pods" | "persistentvolumeclaims")
}

/// The namespace's LimitRanges, in name order, read from storage (so a
/// LimitRange applies from the moment its create returned).
pub async fn read(st: &ApiState, ns: &str) -> ApiResult<Vec<Value>> {
    let info = registry::lookup("", "v1", "limitranges").ok_or_else(|| ApiError::internal("limitranges are not served"))?;
    let prefix = info.list_prefix(st.prefix(), Some(ns));
    let resp = st.storage.range(RangeRequest::prefix(&prefix)).await.map_err(|e| ApiError::from_storage(e, info, ""))?;
    resp.kvs
        .iter()
        .map(|kv| decode_stored(&kv.key, &kv.value, kv.mod_revision).map_err(|e| ApiError::from_storage(e, info, "")))
        .collect()
}

fn items(lr: &Value) -> impl Iterator<Item = &Value> {
    lr.pointer("/spec/limits").and_then(Value::as_array).into_iter().flatten()
}

fn item_type(item: &Value) -> &str {
    item.get("type").and_then(Value::as_str).unwrap_or("")
}

/// A `Container` item's (default limits, default requests), with
/// upstream's LimitRange defaulting (`SetDefaults_LimitRangeItem`).
fn container_defaults(item: &Value) -> (ResourceList, ResourceList) {
    let mut default = quota::parse_list(item.get("default"));
    let mut request = quota::parse_list(item.get("defaultRequest"));
    for (k, q) in quota::parse_list(item.get("max")) {
        default.entry(k).or_insert(q);
    }
    for (k, q) in &default {
        request.entry(k.clone()).or_insert(*q);
    }
    for (k, q) in quota::parse_list(item.get("min")) {
        request.entry(k).or_insert(q);
    }
    (default, request)
}

/// Sets the defaults of `limit_ranges` into the containers of `pod` and
/// records them in [`ANNOTATION`].
pub fn default_pod(limit_ranges: &[Value], pod: &mut Value) {
    let mut notes: Vec<String> = Vec::new();
    for lr in limit_ranges {
        let (mut limits, mut requests) = (ResourceList::new(), ResourceList::new());
        for item in items(lr).filter(|i| item_type(i) == "Container") {
            let (l, r) = container_defaults(item);
            limits.extend(l);
            requests.extend(r);
        }
        if limits.is_empty() && requests.is_empty() {
            continue;
        }
        let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else { return };
        for (key, label) in [("initContainers", "init container"), ("containers", "container")] {
            for c in spec.get_mut(key).and_then(Value::as_array_mut).into_iter().flatten() {
                let name = c.get("name").and_then(Value::as_str).unwrap_or("").to_string();
                let Some(c) = c.as_object_mut() else { continue };
                let resources = c.entry("resources").or_insert_with(|| json!({}));
                if !resources.is_object() {
                    *resources = json!({});
                }
                let Some(resources) = resources.as_object_mut() else { continue };
                // Upstream's pod defaulting (before admission) sets a missing
                // request to the container's own limit.
                let own_limits = resources.get("limits").and_then(Value::as_object).cloned().unwrap_or_default();
                if !own_limits.is_empty() {
                    let reqs = resources.entry("requests").or_insert_with(|| json!({}));
                    if let Some(reqs) = reqs.as_object_mut() {
                        for (k, v) in own_limits {
                            reqs.entry(k).or_insert(v);
                        }
                    }
                }
                for (field, defaults, what) in [("requests", &requests, "request"), ("limits", &limits, "limit")] {
                    let set = resources.entry(field).or_insert_with(|| json!({}));
                    if !set.is_object() {
                        *set = json!({});
                    }
                    let Some(set) = set.as_object_mut() else { continue };
                    let mut added: Vec<&str> = Vec::new();
                    for (k, q) in defaults.iter() {
                        if !set.contains_key(k) {
                            set.insert(k.clone(), json!(q.to_string()));
                            added.push(k);
                        }
                    }
                    if !added.is_empty() {
                        notes.push(format!("{} {what} for {label} {name}", added.join(", ")));
                    }
                }
                resources.retain(|_, v| v.as_object().is_none_or(|m| !m.is_empty()));
            }
        }
    }
    if notes.is_empty() {
        return;
    }
    if let Some(meta) = pod.get_mut("metadata").and_then(Value::as_object_mut) {
        let annotations = meta.entry("annotations").or_insert_with(|| json!({}));
        if !annotations.is_object() {
            *annotations = json!({});
        }
        annotations[ANNOTATION] = json!(format!("LimitRanger plugin set: {}", notes.join("; ")));
    }
}

fn min_violation(kind: &str, res: &str, min: Quantity, req: Option<Quantity>, lim: Option<Quantity>) -> Option<String> {
    match (req, lim) {
        (None, _) => Some(format!("minimum {res} usage per {kind} is {min}.  No request is specified")),
        (Some(r), _) if r.milli < min.milli => Some(format!("minimum {res} usage per {kind} is {min}, but request is {r}")),
        (_, Some(l)) if l.milli < min.milli => Some(format!("minimum {res} usage per {kind} is {min}, but limit is {l}")),
        _ => None,
    }
}

fn max_violation(kind: &str, res: &str, max: Quantity, req: Option<Quantity>, lim: Option<Quantity>) -> Option<String> {
    match (req, lim) {
        (_, None) => Some(format!("maximum {res} usage per {kind} is {max}.  No limit is specified")),
        (_, Some(l)) if l.milli > max.milli => Some(format!("maximum {res} usage per {kind} is {max}, but limit is {l}")),
        (Some(r), _) if r.milli > max.milli => Some(format!("maximum {res} usage per {kind} is {max}, but request is {r}")),
        _ => None,
    }
}

fn ratio_violation(kind: &str, res: &str, ratio: Quantity, req: Option<Quantity>, lim: Option<Quantity>) -> Option<String> {
    let r = req.filter(|r| r.milli != 0);
    let l = lim.filter(|l| l.milli != 0);
    match (r, l) {
        (None, _) => Some(format!("{res} max limit to request ratio per {kind} is {ratio}, but no request is specified or request is 0")),
        (_, None) => Some(format!("{res} max limit to request ratio per {kind} is {ratio}, but no limit is specified or limit is 0")),
        (Some(r), Some(l)) => {
            let observed = l.milli as f64 / r.milli as f64;
            (observed * 1000.0 > ratio.milli as f64)
                .then(|| format!("{res} max limit to request ratio per {kind} is {ratio}, but provided ratio is {observed:.6}"))
        }
    }
}

/// Checks `min`, `max` and `maxLimitRequestRatio` of `item` (of `kind`)
/// against `requests`/`limits`, adding violations to `errs`.
fn check_item(item: &Value, kind: &str, requests: &ResourceList, limits: &ResourceList, errs: &mut Vec<String>) {
    for (res, min) in quota::parse_list(item.get("min")) {
        errs.extend(min_violation(kind, &res, min, requests.get(&res).copied(), limits.get(&res).copied()));
    }
    for (res, max) in quota::parse_list(item.get("max")) {
        errs.extend(max_violation(kind, &res, max, requests.get(&res).copied(), limits.get(&res).copied()));
    }
    for (res, ratio) in quota::parse_list(item.get("maxLimitRequestRatio")) {
        errs.extend(ratio_violation(kind, &res, ratio, requests.get(&res).copied(), limits.get(&res).copied()));
    }
}

/// The violations of one LimitRange by `obj` (a pod or a claim).
pub fn violations(lr: &Value, resource: &str, obj: &Value) -> Vec<String> {
    let mut errs = Vec::new();
    for item in items(lr) {
        match (resource, item_type(item)) {
            ("pods", "Container") => {
                for key in ["containers", "initContainers"] {
                    for c in obj.pointer(&format!("/spec/{key}")).and_then(Value::as_array).into_iter().flatten() {
                        let requests = quota::parse_list(c.pointer("/resources/requests"));
                        let limits = quota::parse_list(c.pointer("/resources/limits"));
                        check_item(item, "Container", &requests, &limits, &mut errs);
                    }
                }
            }
            ("pods", "Pod") => {
                check_item(item, "Pod", &pods::effective(obj, false), &pods::effective(obj, true), &mut errs);
            }
            ("persistentvolumeclaims", "PersistentVolumeClaim") => {
                let requests = quota::parse_list(obj.pointer("/spec/resources/requests"));
                for (res, min) in quota::parse_list(item.get("min")) {
                    match requests.get(&res) {
                        None => errs.push(format!("minimum {res} usage per PersistentVolumeClaim is {min}.  No request is specified")),
                        Some(r) if r.milli < min.milli => {
                            errs.push(format!("minimum {res} usage per PersistentVolumeClaim is {min}, but request is {r}"))
                        }
                        _ => {}
                    }
                }
                for (res, max) in quota::parse_list(item.get("max")) {
                    match requests.get(&res) {
                        None => errs.push(format!("maximum {res} usage per PersistentVolumeClaim is {max}.  No request is specified")),
                        Some(r) if r.milli > max.milli => {
                            errs.push(format!("maximum {res} usage per PersistentVolumeClaim is {max}, but request is {r}"))
                        }
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    let mut seen = BTreeMap::new();
    errs.retain(|e| seen.insert(e.clone(), ()).is_none());
    errs
}

/// Refuses `obj` (an object of `info` named `name`) with a 403 when a
/// LimitRange of `limit_ranges` is violated (the first one that is).
pub fn validate(info: &ResourceInfo, name: &str, limit_ranges: &[Value], obj: &Value) -> ApiResult<()> {
    for lr in limit_ranges {
        let errs = violations(lr, info.resource, obj);
        if errs.is_empty() {
            continue;
        }
        let reason = if errs.len() == 1 { errs[0].clone() } else { format!("[{}]", errs.join(", ")) };
        return Err(super::forbidden(info.group, info.resource, name, &reason));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lr() -> Value {
        json!({"spec": {"limits": [{"type": "Container",
            "max": {"cpu": "1"}, "min": {"cpu": "100m"}, "defaultRequest": {"memory": "64Mi"}, "default": {"memory": "128Mi"}}]}})
    }

    #[test]
    fn containers_get_defaults_and_the_annotation_says_which() {
        let mut pod = json!({"metadata": {"name": "p"}, "spec": {"containers": [
            {"name": "web", "resources": {"requests": {"cpu": "200m"}}},
            {"name": "log", "resources": {"limits": {"cpu": "500m", "memory": "32Mi"}}},
        ]}});
        default_pod(&[lr()], &mut pod);
        assert_eq!(pod["spec"]["containers"][0]["resources"], json!({"requests": {"cpu": "200m", "memory": "64Mi"}, "limits": {"cpu": "1", "memory": "128Mi"}}));
        assert_eq!(pod["spec"]["containers"][1]["resources"], json!({"requests": {"cpu": "500m", "memory": "32Mi"}, "limits": {"cpu": "500m", "memory": "32Mi"}}));
        assert_eq!(
            pod["metadata"]["annotations"][ANNOTATION],
            "LimitRanger plugin set: memory request for container web; cpu, memory limit for container web"
        );
    }

    #[test]
    fn min_max_and_ratio_violations_use_upstreams_words() {
        let pod = json!({"spec": {"containers": [{"name": "a", "resources": {"requests": {"cpu": "50m"}, "limits": {"cpu": "2"}}}]}});
        assert_eq!(
            violations(&lr(), "pods", &pod),
            vec!["minimum cpu usage per Container is 100m, but request is 50m", "maximum cpu usage per Container is 1, but limit is 2"]
        );
        let ratio = json!({"spec": {"limits": [{"type": "Container", "maxLimitRequestRatio": {"cpu": "2"}}]}});
        let pod = json!({"spec": {"containers": [{"name": "a", "resources": {"requests": {"cpu": "100m"}, "limits": {"cpu": "300m"}}}]}});
        assert_eq!(violations(&ratio, "pods", &pod), vec!["cpu max limit to request ratio per Container is 2, but provided ratio is 3.000000"]);
        let pvc = json!({"spec": {"limits": [{"type": "PersistentVolumeClaim", "min": {"storage": "1Gi"}}]}});
        let claim = json!({"spec": {"resources": {"requests": {"storage": "500Mi"}}}});
        assert_eq!(violations(&pvc, "persistentvolumeclaims", &claim), vec!["minimum storage usage per PersistentVolumeClaim is 1Gi, but request is 500Mi"]);
    }
}
