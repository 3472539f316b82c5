//! Ephemeral containers (`kubectl debug`): the rules of
//! `pods/ephemeralcontainers` and of `spec.ephemeralContainers` on pods
//! (upstream `pkg/registry/core/pod/strategy.go`
//! `podEphemeralContainersStrategy`, and `validateEphemeralContainers`,
//! `ValidatePodEphemeralContainersUpdate` and `validatePodCreate` of
//! `pkg/apis/core/validation/validation.go`).
//!
//! - The subresource changes only `spec.ephemeralContainers` (its row entry
//!   says so with [`crate::registry::SubresourceInfo::updates`]).
//! - Ephemeral containers may be added, never removed or changed.
//! - Their names are unique across `containers`, `initContainers` and
//!   `ephemeralContainers`; `targetContainerName` names a regular or init
//!   container.
//! - Ports, probes, lifecycle, resources, `resizePolicy` and
//!   `restartPolicy` are refused (`cannot be set for an Ephemeral
//!   Container`), as are volume mounts with `subPath`/`subPathExpr`.
//! - A pod cannot be created with ephemeral containers, and the main `pods`
//!   update cannot change them (its spec rule refuses it).

use serde_json::Value;

use super::pod::validate_pod_spec;
use crate::field_error::FieldError;
use crate::validation;

/// Container fields an ephemeral container may not set, in upstream's field
/// order (`EphemeralContainerCommon`), as JSON names.
const NOT_ALLOWED: &[&str] =
    &["ports", "resources", "resizePolicy", "restartPolicy", "livenessProbe", "readinessProbe", "startupProbe", "lifecycle"];

/// The message upstream gives for each of [`NOT_ALLOWED`].
const NOT_FOR_EPHEMERAL: &str = "cannot be set for an Ephemeral Container";

/// Upstream's mirror pod annotation: static pods have no ephemeral containers.
const MIRROR_POD_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// True when a JSON value is its type's zero value (how upstream's field
/// allow-list tells a set field from an unset one): null, `""`, `0`,
/// `false`, `[]` or an object whose values are all zero (`resources: {}`).
fn is_zero(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(m) => m.values().all(is_zero),
    }
}

fn names<'a>(spec: &'a Value, key: &str) -> Vec<&'a str> {
    spec.get(key)
        .and_then(Value::as_array)
        .map(|a| a.iter().map(|c| c.get("name").and_then(Value::as_str).unwrap_or("")).collect())
        .unwrap_or_default()
}

/// Validates `spec.ephemeralContainers` of a pod spec at `path` (upstream
/// `validateEphemeralContainers`).
pub(crate) fn validate_ephemeral_containers(spec: Option<&Value>, path: &str, errs: &mut Vec<FieldError>) {
    let Some(spec) = spec else { return };
    let Some(ecs) = spec.get("ephemeralContainers").and_then(Value::as_array) else { return };
    let mut others = names(spec, "containers");
    others.extend(names(spec, "initContainers"));
    let mut all = others.clone();
    for (i, ec) in ecs.iter().enumerate() {
        let p = format!("{path}.ephemeralContainers[{i}]");
        let name = ec.get("name").and_then(Value::as_str).unwrap_or("");
        if name.is_empty() {
            errs.push(FieldError::required(&format!("{p}.name"), ""));
        } else {
            for m in validation::is_dns1123_label(name) {
                errs.push(FieldError::invalid(&format!("{p}.name"), name, m));
            }
        }
        if ec.get("image").and_then(Value::as_str).unwrap_or("").trim().is_empty() {
            errs.push(FieldError::required(&format!("{p}.image"), ""));
        }
        if all.contains(&name) {
            errs.push(FieldError::duplicate(&format!("{p}.name"), name));
        } else {
            all.push(name);
        }
        let target = ec.get("targetContainerName").and_then(Value::as_str).unwrap_or("");
        if !target.is_empty() && !others.contains(&target) {
            errs.push(FieldError::not_found(&format!("{p}.targetContainerName"), target));
        }
        for field in NOT_ALLOWED {
            if ec.get(*field).is_some_and(|v| !is_zero(v)) {
                errs.push(FieldError::forbidden(&format!("{p}.{field}"), NOT_FOR_EPHEMERAL));
            }
        }
        for (j, vm) in ec.get("volumeMounts").and_then(Value::as_array).into_iter().flatten().enumerate() {
            for key in ["subPath", "subPathExpr"] {
                if vm.get(key).and_then(Value::as_str).is_some_and(|s| !s.is_empty()) {
                    errs.push(FieldError::forbidden(&format!("{p}.volumeMounts[{j}].{key}"), NOT_FOR_EPHEMERAL));
                }
            }
        }
    }
}

/// A pod cannot be created with ephemeral containers (upstream
/// `validatePodCreate`: `spec.ephemeralContainers: Forbidden: cannot be set on create`).
pub(crate) fn forbid_on_create(obj: &Value, errs: &mut Vec<FieldError>) {
    if obj.pointer("/spec/ephemeralContainers").and_then(Value::as_array).is_some_and(|a| !a.is_empty()) {
        errs.push(FieldError::forbidden("spec.ephemeralContainers", "cannot be set on create"));
    }
}

/// Validation of an update through `pods/ephemeralcontainers` (upstream
/// `ValidatePodEphemeralContainersUpdate`): the new pod's spec is valid,
/// static pods are refused, and every existing ephemeral container is kept
/// unchanged (matched by name, since patches do not keep the order).
/// Upstream appends a Go `cmp.Diff` of the change to the "may not be
/// changed" message; rkube ends the message where that diff would start.
pub fn validate_ephemeral_containers_update(obj: &Value, old: Option<&Value>, errs: &mut Vec<FieldError>) {
    validate_pod_spec(obj.get("spec"), "spec", &[], errs);
    validate_ephemeral_containers(obj.get("spec"), "spec", errs);
    let Some(old) = old else { return };
    if old.pointer("/metadata/annotations").and_then(|a| a.get(MIRROR_POD_ANNOTATION)).is_some() {
        errs.clear();
        errs.push(FieldError::forbidden("", "static pods do not support ephemeral containers"));
        return;
    }
    let new_ecs: Vec<&Value> =
        obj.pointer("/spec/ephemeralContainers").and_then(Value::as_array).map(|a| a.iter().collect()).unwrap_or_default();
    for old_ec in old.pointer("/spec/ephemeralContainers").and_then(Value::as_array).into_iter().flatten() {
        let name = old_ec.get("name").and_then(Value::as_str).unwrap_or("");
        match new_ecs.iter().find(|c| c.get("name").and_then(Value::as_str) == Some(name)) {
            None => errs.push(FieldError::forbidden(
                "spec.ephemeralContainers",
                format!("existing ephemeral containers {name:?} may not be removed\n"),
            )),
            Some(new_ec) if *new_ec != old_ec => errs.push(FieldError::forbidden(
                &format!("spec.ephemeralContainers[{name}]"),
                format!("existing ephemeral containers {name:?} may not be changed\n"),
            )),
            Some(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn errors(obj: &Value, old: Option<&Value>) -> Vec<String> {
        let mut errs = Vec::new();
        validate_ephemeral_containers_update(obj, old, &mut errs);
        errs.iter().map(ToString::to_string).collect()
    }

    fn pod(ecs: Value) -> Value {
        json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "app", "image": "nginx"}], "ephemeralContainers": ecs}})
    }

    #[test]
    fn empty_resources_are_not_a_set_field() {
        let ok = pod(json!([{"name": "dbg", "image": "busybox", "resources": {}, "targetContainerName": "app"}]));
        assert!(errors(&ok, None).is_empty(), "{:?}", errors(&ok, None));
        let bad = pod(json!([{"name": "dbg", "image": "busybox", "resources": {"limits": {"cpu": "1"}}}]));
        assert_eq!(errors(&bad, None), ["spec.ephemeralContainers[0].resources: Forbidden: cannot be set for an Ephemeral Container"]);
    }

    #[test]
    fn existing_ephemeral_containers_stay_as_they_are() {
        let old = pod(json!([{"name": "dbg", "image": "busybox"}]));
        let changed = pod(json!([{"name": "dbg", "image": "alpine"}]));
        assert_eq!(
            errors(&changed, Some(&old)),
            ["spec.ephemeralContainers[dbg]: Forbidden: existing ephemeral containers \"dbg\" may not be changed\n"]
        );
        let added = pod(json!([{"name": "dbg", "image": "busybox"}, {"name": "dbg2", "image": "busybox"}]));
        assert!(errors(&added, Some(&old)).is_empty());
    }
}
