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

use rkube_api::registry::ResourceInfo;
use rkube_api::status::StatusCause;
use rkube_api::validation;
use serde_json::Value;

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
pub fn check_typed(info: &ResourceInfo, obj: &mut Value, mode: FieldValidation) -> ApiResult<Vec<String>> {
    check_typed_body(info, obj, mode, None)
}

/// [`check_typed`] for an object decoded from a JSON body whose keys were
/// scanned ([`crate::strict::KeyScan`]): repeated keys are reported with the
/// unknown fields, in document order, as upstream's strict decoder does.
pub fn check_typed_body(
    info: &ResourceInfo,
    obj: &mut Value,
    mode: FieldValidation,
    keys: Option<&crate::strict::KeyScan>,
) -> ApiResult<Vec<String>> {
    let kind = info.kind;
    let mut unknown = Vec::new();
    if let Some(typed) = info.typed {
        let typed = (typed.roundtrip)(obj).map_err(|e| {
            ApiError::bad_request(format!("{kind} in version \"{}\" cannot be handled as a {kind}: {e}", info.version))
        })?;
        prune_unknown(obj, &typed, "", &mut unknown);
    }
    if let Some(schema) = info.custom.and_then(|c| c.schema.as_ref()) {
        // Custom resources: pruning, then defaulting, on decode (upstream's
        // `schemaCoercingDecoder` and `pruning`/`defaulting`); their
        // `metadata` is an ObjectMeta like any object's.
        unknown = rkube_api::apiextensions::schema::prune(obj, schema);
        rkube_api::apiextensions::schema::apply_defaults(obj, schema);
        if let Some(meta) = obj.get_mut("metadata") {
            type ObjectMeta = k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
            let typed = serde_json::from_value::<ObjectMeta>(meta.clone())
                .and_then(serde_json::to_value)
                .map_err(|e| ApiError::bad_request(format!("{kind} in version \"{}\" cannot be handled as a {kind}: {e}", info.version)))?;
            let mut in_meta = Vec::new();
            prune_unknown(meta, &typed, "metadata", &mut in_meta);
            unknown.splice(0..0, in_meta);
        }
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

/// Field validation of `obj` (`old` on update). Returns the 422 causes.
pub fn validate(info: &ResourceInfo, obj: &Value, old: Option<&Value>) -> Vec<StatusCause> {
    validate_with(info, None, obj, old)
}

/// [`validate`], with `strategy_validate` (a subresource's
/// [`rkube_api::registry::SubresourceInfo::validate_update`]) in place of the
/// row's strategy validation when given; the ObjectMeta checks stay.
pub fn validate_with(
    info: &ResourceInfo,
    strategy_validate: Option<rkube_api::registry::ValidateFn>,
    obj: &Value,
    old: Option<&Value>,
) -> Vec<StatusCause> {
    let mut causes: Vec<StatusCause> = Vec::new();
    let name = crate::object::name(obj);
    if old.is_none() {
        causes.extend(validation::validate_object_meta_name(name, info.strategy.name_is_label));
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
    let mut errs = match strategy_validate {
        Some(f) => {
            let mut errs = Vec::new();
            f(obj, old, &mut errs);
            errs
        }
        None => info.strategy.validate_object(obj, old),
    };
    if let Some(schema) = info.custom.and_then(|c| c.schema.as_ref()) {
        errs.extend(rkube_api::apiextensions::schema::validate(obj, schema));
        errs.extend(rkube_api::apiextensions::cel::validate(obj, old, schema));
    }
    errs.extend(crate::config_data::validate_size(info.kind, obj));
    causes.extend(errs.into_iter().map(StatusCause::from));
    causes
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
        let warnings = check_typed(info, &mut cm, FieldValidation::Warn).unwrap();
        assert_eq!(warnings, vec!["unknown field \"metadata.bogus\"", "unknown field \"extra\""]);
        assert!(cm.get("extra").is_none());
        let mut cm2 = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "spec": 1});
        let err = check_typed(info, &mut cm2, FieldValidation::Strict).unwrap_err();
        assert_eq!(err.0.message, "ConfigMap in version \"v1\" cannot be handled as a ConfigMap: strict decoding error: unknown field \"spec\"");
    }

    #[test]
    fn type_errors_are_bad_requests() {
        let info = registry::lookup("", "v1", "pods").unwrap();
        let mut pod =
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a"}, "spec": {"containers": "no"}});
        let err = check_typed(info, &mut pod, FieldValidation::Warn).unwrap_err();
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
