//! Validation of incoming objects.
//!
//! 1. Typed decoding: a built-in kind must decode into its `k8s-openapi` type
//!    (what upstream's codec does); a type error is 400 `BadRequest`
//!    `<Kind> in version "<v>" cannot be handled as a <Kind>: <error>`.
//! 2. Unknown fields (fields the typed decoder does not know) are dropped, and
//!    (with repeated keys of a JSON body, [`crate::strict`]) reported per `fieldValidation` (`Strict` → 400 `<Kind> in version "v1"
//!    cannot be handled as a <Kind>: strict decoding error: unknown field "spec.foo"`, `Warn` (default) → a `Warning` header,
//!    `Ignore` → nothing), as upstream's `fieldValidation` does.
//! 3. Field validation (422 `Invalid` with causes): `metadata.name` (DNS-1123
//!    label for namespaces and services, subdomain otherwise), labels,
//!    annotations, ownerReferences, finalizers, the ConfigMap / Secret
//!    payload size ([`crate::config_data`]), and the essential required fields of pods, services and
//!    deployments (`pkg/apis/core/validation`, `pkg/apis/apps/validation`).

use rkube_api::field_error::FieldError;
use rkube_api::registry::ResourceInfo;
use rkube_api::status::StatusCause;
use rkube_api::validation;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{Map, Value};

use crate::error::{ApiError, ApiResult};

/// `?fieldValidation=` (upstream `Ignore`, `Warn`, `Strict`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldValidation {
    /// Drop unknown fields silently.
    Ignore,
    /// Drop them and warn (the default).
    Warn,
    /// Reject the request.
    Strict,
}

impl FieldValidation {
    /// Parses the query value (empty → `Warn`). 400 on other values.
    pub fn parse(v: Option<&str>) -> ApiResult<Self> {
        match v {
            None | Some("") | Some("Warn") => Ok(FieldValidation::Warn),
            Some("Ignore") => Ok(FieldValidation::Ignore),
            Some("Strict") => Ok(FieldValidation::Strict),
            Some(other) => Err(ApiError::bad_request(format!(
                "fieldValidation parameter unsupported: {other}. Supported values are: Ignore, Warn, Strict"
            ))),
        }
    }
}

fn roundtrip<T: DeserializeOwned + Serialize>(obj: &Value) -> Result<Value, String> {
    let typed: T = serde_json::from_value(obj.clone()).map_err(|e| e.to_string())?;
    serde_json::to_value(&typed).map_err(|e| e.to_string())
}

/// The object as `k8s-openapi` sees it, or `None` for kinds without a typed check.
fn typed_roundtrip(kind: &str, obj: &Value) -> Option<Result<Value, String>> {
    use k8s_openapi::api::{apps, coordination, core, discovery, rbac};
    Some(match kind {
        "Namespace" => roundtrip::<core::v1::Namespace>(obj),
        "Pod" => roundtrip::<core::v1::Pod>(obj),
        "Node" => roundtrip::<core::v1::Node>(obj),
        "Service" => roundtrip::<core::v1::Service>(obj),
        "Endpoints" => roundtrip::<core::v1::Endpoints>(obj),
        "ConfigMap" => roundtrip::<core::v1::ConfigMap>(obj),
        "Secret" => roundtrip::<core::v1::Secret>(obj),
        "ServiceAccount" => roundtrip::<core::v1::ServiceAccount>(obj),
        "Event" => roundtrip::<core::v1::Event>(obj),
        "Binding" => roundtrip::<core::v1::Binding>(obj),
        "EndpointSlice" => roundtrip::<discovery::v1::EndpointSlice>(obj),
        "Lease" => roundtrip::<coordination::v1::Lease>(obj),
        "Deployment" => roundtrip::<apps::v1::Deployment>(obj),
        "Role" => roundtrip::<rbac::v1::Role>(obj),
        "ClusterRole" => roundtrip::<rbac::v1::ClusterRole>(obj),
        "RoleBinding" => roundtrip::<rbac::v1::RoleBinding>(obj),
        "ClusterRoleBinding" => roundtrip::<rbac::v1::ClusterRoleBinding>(obj),
        _ => return None,
    })
}

/// Removes from `input` every field absent from `typed` (the round-tripped
/// object), collecting their paths (`spec.containers[0].foo`).
fn prune_unknown(input: &mut Value, typed: &Value, path: &str, unknown: &mut Vec<String>) {
    match (input, typed) {
        (Value::Object(m), Value::Object(t)) => {
            let keys: Vec<String> = m.keys().cloned().collect();
            for k in keys {
                let child_path = if path.is_empty() { k.clone() } else { format!("{path}.{k}") };
                match t.get(&k) {
                    Some(tv) => {
                        if let Some(v) = m.get_mut(&k) {
                            prune_unknown(v, tv, &child_path, unknown);
                        }
                    }
                    None => {
                        if !m.get(&k).is_some_and(Value::is_null) {
                            unknown.push(child_path);
                        }
                        m.remove(&k);
                    }
                }
            }
        }
        (Value::Array(items), Value::Array(titems)) => {
            for (i, (v, tv)) in items.iter_mut().zip(titems.iter()).enumerate() {
                prune_unknown(v, tv, &format!("{path}[{i}]"), unknown);
            }
        }
        _ => {}
    }
}

/// Decodes `obj` as its built-in kind, drops unknown fields and applies
/// `mode`. Returns the warnings to send (`Warn` mode).
pub fn check_typed(info: &ResourceInfo, kind: &str, obj: &mut Value, mode: FieldValidation) -> ApiResult<Vec<String>> {
    check_typed_body(info, kind, obj, mode, None)
}

/// [`check_typed`] for an object decoded from a JSON body whose keys were
/// scanned ([`crate::strict::KeyScan`]): repeated keys are reported with the
/// unknown fields, in document order, as upstream's strict decoder does.
pub fn check_typed_body(
    info: &ResourceInfo,
    kind: &str,
    obj: &mut Value,
    mode: FieldValidation,
    keys: Option<&crate::strict::KeyScan>,
) -> ApiResult<Vec<String>> {
    let mut unknown = Vec::new();
    if let Some(result) = typed_roundtrip(kind, obj) {
        let typed = result.map_err(|e| {
            ApiError::bad_request(format!("{kind} in version \"{}\" cannot be handled as a {kind}: {e}", info.version))
        })?;
        prune_unknown(obj, &typed, "", &mut unknown);
    }
    let msgs: Vec<String> = match keys {
        Some(keys) if keys.has_duplicates() => keys.strict_errors(&unknown),
        _ => unknown.iter().map(|p| format!("unknown field \"{p}\"")).collect(),
    };
    if msgs.is_empty() {
        return Ok(Vec::new());
    }
    match mode {
        FieldValidation::Strict => Err(ApiError::bad_request(format!(
            "{kind} in version \"{}\" cannot be handled as a {kind}: strict decoding error: {}",
            info.version,
            msgs.join(", ")
        ))),
        FieldValidation::Warn => Ok(msgs),
        FieldValidation::Ignore => Ok(Vec::new()),
    }
}

/// True when names of `info` must be DNS-1123 labels (upstream
/// `ValidateNamespaceName`, `ValidateServiceName`).
fn name_is_label(info: &ResourceInfo) -> bool {
    matches!(info.kind, "Namespace" | "Service")
}

/// Field validation of `obj` (`old` on update). Returns the 422 causes.
pub fn validate(info: &ResourceInfo, obj: &Value, old: Option<&Value>) -> Vec<StatusCause> {
    let mut causes: Vec<StatusCause> = Vec::new();
    let name = crate::object::name(obj);
    if old.is_none() {
        causes.extend(validation::validate_object_meta_name(name, name_is_label(info)));
    }
    if let Some(labels) = obj.pointer("/metadata/labels").and_then(Value::as_object) {
        causes.extend(validation::validate_labels(labels));
    }
    if let Some(ann) = obj.pointer("/metadata/annotations").and_then(Value::as_object) {
        causes.extend(validation::validate_annotations(ann));
    }
    if let Some(refs) = obj.pointer("/metadata/ownerReferences").and_then(Value::as_array) {
        causes.extend(validation::validate_owner_references(refs));
    }
    if let Some(finalizers) = obj.pointer("/metadata/finalizers").and_then(Value::as_array) {
        causes.extend(validation::validate_finalizers(finalizers));
    }
    let mut errs: Vec<FieldError> = Vec::new();
    match info.kind {
        "Pod" => {
            pod_spec(obj.get("spec"), "spec", &mut errs);
            if let Some(old) = old {
                pod_update(old, obj, &mut errs);
            }
        }
        "Service" => service(obj, &mut errs),
        "Deployment" => deployment(obj, &mut errs),
        "ConfigMap" | "Secret" => {
            for section in ["data", "binaryData", "stringData"] {
                if let Some(m) = obj.get(section).and_then(Value::as_object) {
                    for k in m.keys() {
                        if !is_config_key(k) {
                            errs.push(FieldError::invalid(
                                &format!("{section}[{k}]"),
                                k,
                                "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')",
                            ));
                        }
                    }
                }
            }
        }
        _ => {}
    }
    errs.extend(crate::config_data::validate_size(info.kind, obj));
    causes.extend(errs.into_iter().map(StatusCause::from));
    causes
}

fn is_config_key(k: &str) -> bool {
    !k.is_empty() && k.len() <= 253 && k.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

fn pod_spec(spec: Option<&Value>, path: &str, errs: &mut Vec<FieldError>) {
    let containers = spec.and_then(|s| s.get("containers")).and_then(Value::as_array);
    match containers {
        None => errs.push(FieldError::required(&format!("{path}.containers"), "")),
        Some(cs) if cs.is_empty() => errs.push(FieldError::required(&format!("{path}.containers"), "")),
        Some(cs) => {
            let mut seen: Vec<&str> = Vec::new();
            for (i, c) in cs.iter().enumerate() {
                let p = format!("{path}.containers[{i}]");
                let name = c.get("name").and_then(Value::as_str).unwrap_or("");
                if name.is_empty() {
                    errs.push(FieldError::required(&format!("{p}.name"), ""));
                } else {
                    for m in validation::is_dns1123_label(name) {
                        errs.push(FieldError::invalid(&format!("{p}.name"), name, m));
                    }
                    if seen.contains(&name) {
                        errs.push(FieldError::duplicate(&format!("{p}.name"), name));
                    }
                    seen.push(name);
                }
                if c.get("image").and_then(Value::as_str).unwrap_or("").trim().is_empty() {
                    errs.push(FieldError::required(&format!("{p}.image"), ""));
                }
                if let Some(ports) = c.get("ports").and_then(Value::as_array) {
                    for (j, port) in ports.iter().enumerate() {
                        let n = port.get("containerPort").and_then(Value::as_i64).unwrap_or(0);
                        if !(1..=65535).contains(&n) {
                            errs.push(FieldError::invalid_json(
                                &format!("{p}.ports[{j}].containerPort"),
                                &Value::from(n),
                                "must be between 1 and 65535, inclusive",
                            ));
                        }
                    }
                }
            }
        }
    }
    if let Some(rp) = spec.and_then(|s| s.get("restartPolicy")).and_then(Value::as_str) {
        if !matches!(rp, "Always" | "OnFailure" | "Never") {
            errs.push(FieldError::not_supported(
                &format!("{path}.restartPolicy"),
                rp,
                &["Always", "OnFailure", "Never"],
            ));
        }
    }
}

/// Pod spec updates may change only container images, `activeDeadlineSeconds`,
/// tolerations (additions) and `terminationGracePeriodSeconds` (upstream
/// `ValidatePodUpdate`).
fn pod_update(old: &Value, new: &Value, errs: &mut Vec<FieldError>) {
    let strip = |spec: Option<&Value>| {
        let mut s = spec.cloned().unwrap_or(Value::Null);
        if let Some(m) = s.as_object_mut() {
            for key in ["containers", "initContainers"] {
                if let Some(cs) = m.get_mut(key).and_then(Value::as_array_mut) {
                    for c in cs.iter_mut().filter_map(Value::as_object_mut) {
                        c.remove("image");
                    }
                }
            }
            for key in ["activeDeadlineSeconds", "tolerations", "terminationGracePeriodSeconds"] {
                m.remove(key);
            }
        }
        s
    };
    let (o, n) = (strip(old.get("spec")), strip(new.get("spec")));
    // Binding sets nodeName once; it may go from "" to a node.
    let node_changed = |o: &Value, n: &Value| {
        let on = o.get("nodeName").and_then(Value::as_str).unwrap_or("");
        let nn = n.get("nodeName").and_then(Value::as_str).unwrap_or("");
        !on.is_empty() && on != nn
    };
    let without_node = |v: &Value| {
        let mut v = v.clone();
        if let Some(m) = v.as_object_mut() {
            m.remove("nodeName");
        }
        v
    };
    if node_changed(&o, &n) || without_node(&o) != without_node(&n) {
        errs.push(FieldError::forbidden(
            "spec",
            "pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)",
        ));
    }
}

fn service(obj: &Value, errs: &mut Vec<FieldError>) {
    let spec = obj.get("spec");
    let ty = spec.and_then(|s| s.get("type")).and_then(Value::as_str).unwrap_or("ClusterIP");
    if !matches!(ty, "ClusterIP" | "NodePort" | "LoadBalancer" | "ExternalName") {
        errs.push(FieldError::not_supported(
            "spec.type",
            ty,
            &["ClusterIP", "ExternalName", "LoadBalancer", "NodePort"],
        ));
    }
    let headless = spec.and_then(|s| s.get("clusterIP")).and_then(Value::as_str) == Some("None");
    let ports = spec.and_then(|s| s.get("ports")).and_then(Value::as_array);
    if ty != "ExternalName" && !headless && ports.is_none_or(|p| p.is_empty()) {
        errs.push(FieldError::required("spec.ports", ""));
    }
    if ty == "ExternalName" && spec.and_then(|s| s.get("externalName")).and_then(Value::as_str).unwrap_or("").is_empty()
    {
        errs.push(FieldError::required("spec.externalName", ""));
    }
    if let Some(ports) = ports {
        let named = ports.len() > 1;
        for (i, p) in ports.iter().enumerate() {
            let n = p.get("port").and_then(Value::as_i64).unwrap_or(0);
            if !(1..=65535).contains(&n) {
                errs.push(FieldError::invalid_json(
                    &format!("spec.ports[{i}].port"),
                    &Value::from(n),
                    "must be between 1 and 65535, inclusive",
                ));
            }
            if named && p.get("name").and_then(Value::as_str).unwrap_or("").is_empty() {
                errs.push(FieldError::required(&format!("spec.ports[{i}].name"), ""));
            }
        }
    }
}

fn deployment(obj: &Value, errs: &mut Vec<FieldError>) {
    let spec = obj.get("spec");
    let selector = spec.and_then(|s| s.get("selector"));
    let match_labels: Map<String, Value> =
        selector.and_then(|s| s.get("matchLabels")).and_then(Value::as_object).cloned().unwrap_or_default();
    let has_exprs =
        selector.and_then(|s| s.get("matchExpressions")).and_then(Value::as_array).is_some_and(|a| !a.is_empty());
    if selector.is_none() || (match_labels.is_empty() && !has_exprs) {
        errs.push(FieldError::required("spec.selector", ""));
    }
    let template_labels: Map<String, Value> = spec
        .and_then(|s| s.pointer("/template/metadata/labels"))
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    if !match_labels.is_empty() && !match_labels.iter().all(|(k, v)| template_labels.get(k) == Some(v)) {
        errs.push(FieldError::invalid_json(
            "spec.template.metadata.labels",
            &Value::Object(template_labels.clone()),
            "`selector` does not match template `labels`",
        ));
    }
    if let Some(r) = spec.and_then(|s| s.get("replicas")).and_then(Value::as_i64) {
        if r < 0 {
            errs.push(FieldError::invalid_json("spec.replicas", &Value::from(r), "must be greater than or equal to 0"));
        }
    }
    pod_spec(spec.and_then(|s| s.pointer("/template/spec")), "spec.template.spec", errs);
}

#[cfg(test)]
mod tests {
    use super::*;
    use rkube_api::registry;
    use serde_json::json;

    #[test]
    fn unknown_fields_are_pruned_and_reported() {
        let info = registry::lookup("", "v1", "configmaps").unwrap();
        let mut cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "bogus": 1}, "data": {"k": "v"}, "extra": true});
        let warnings = check_typed(info, "ConfigMap", &mut cm, FieldValidation::Warn).unwrap();
        assert_eq!(warnings, vec!["unknown field \"metadata.bogus\"", "unknown field \"extra\""]);
        assert!(cm.get("extra").is_none());
        let mut cm2 = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "spec": 1});
        let err = check_typed(info, "ConfigMap", &mut cm2, FieldValidation::Strict).unwrap_err();
        assert_eq!(err.0.message, "ConfigMap in version \"v1\" cannot be handled as a ConfigMap: strict decoding error: unknown field \"spec\"");
    }

    #[test]
    fn type_errors_are_bad_requests() {
        let info = registry::lookup("", "v1", "pods").unwrap();
        let mut pod =
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a"}, "spec": {"containers": "no"}});
        let err = check_typed(info, "Pod", &mut pod, FieldValidation::Warn).unwrap_err();
        assert_eq!(err.code(), 400);
        assert!(err.0.message.starts_with("Pod in version \"v1\" cannot be handled as a Pod:"), "{}", err.0.message);
    }

    #[test]
    fn pods_need_containers_with_images() {
        let info = registry::lookup("", "v1", "pods").unwrap();
        let pod = json!({"metadata": {"name": "a"}, "spec": {"containers": [{"name": "c"}]}});
        let causes = validate(info, &pod, None);
        assert_eq!(causes.len(), 1);
        assert_eq!(causes[0].field, "spec.containers[0].image");
        assert_eq!(causes[0].reason, "FieldValueRequired");
    }
}
