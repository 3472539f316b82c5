//! Per-resource strategies: what kube-apiserver does to an object of a
//! built-in kind besides storing it.
//!
//! A [`Strategy`] bundles, for one row of the resource table:
//! - `defaults`: upstream's `SetDefaults_*` functions
//!   (`pkg/apis/<group>/v1/defaults.go` and the generated
//!   `zz_generated.defaults.go`), idempotent;
//! - `prepare_for_create`: the create-time part of the registry strategy
//!   (`pkg/registry/<group>/<resource>/strategy.go`, `PrepareForCreate`):
//!   status reset, generated selectors; runs once `metadata.uid` is set;
//! - `validate`: the field validation clients and controllers rely on
//!   (`pkg/apis/<group>/validation/validation.go`): required fields, value
//!   ranges, a selector that must match the template's labels, immutable
//!   fields on update;
//! - `scale`: how `/scale` maps onto the object (`ScaleREST`).
//!
//! Strategies are plain function pointers over `serde_json` objects, so rows
//! stay `const` and adding a kind is writing its functions here.

mod apps;
mod batch;
pub mod certificates;
mod core;
pub mod delete;
mod ephemeral;
mod events;
mod other;
mod pod;
pub mod trust_bundle;

pub(crate) use apps::{DAEMON_SET, DEPLOYMENT, REPLICA_SET, STATEFUL_SET};
pub(crate) use batch::{CRON_JOB, JOB};
pub(crate) use core::{
    CONFIG_MAP, ENDPOINTS, ENDPOINT_SLICE, NAMESPACE, NODE, PERSISTENT_VOLUME, PERSISTENT_VOLUME_CLAIM, POD,
    POD_TEMPLATE, REPLICATION_CONTROLLER, SECRET, SERVICE, STATUS_RESET,
};
pub(crate) use other::{
    CSI_DRIVER, FLOW_SCHEMA, HORIZONTAL_POD_AUTOSCALER, HORIZONTAL_POD_AUTOSCALER_V1, INGRESS, MUTATING_WEBHOOK_CONFIGURATION, NETWORK_POLICY,
    POD_DISRUPTION_BUDGET, PRIORITY_CLASS, PRIORITY_LEVEL_CONFIGURATION, RUNTIME_CLASS, STORAGE_CLASS,
    VALIDATING_ADMISSION_POLICY, VALIDATING_ADMISSION_POLICY_BINDING, VALIDATING_WEBHOOK_CONFIGURATION,
};
pub(crate) use certificates::CERTIFICATE_SIGNING_REQUEST;
pub(crate) use events::{EVENT, EVENT_V1};
pub(crate) use trust_bundle::CLUSTER_TRUST_BUNDLE;

pub use apps::DAEMON_SET_TEMPLATE_GENERATION;
pub use delete::{DeleteRules, Lifecycle};
pub use ephemeral::validate_ephemeral_containers_update;
pub use pod::{pod_spec_defaults, qos_class};

use serde_json::{Map, Value};

use crate::field_error::FieldError;

/// A JSON object being defaulted or prepared.
pub type Object = Map<String, Value>;

/// How `/scale` reads the selector of a scalable resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScaleSelector {
    /// `spec.selector` is a `metav1.LabelSelector` (deployments, replica sets,
    /// stateful sets).
    LabelSelector,
    /// `spec.selector` is a plain label map (replication controllers).
    Map,
}

/// A validation function: pushes the 422 causes of `obj` (`old` on update).
pub type ValidateFn = fn(obj: &Value, old: Option<&Value>, errs: &mut Vec<FieldError>);

/// What the API server does to objects of one resource on create, update and delete.
#[derive(Clone, Copy)]
pub struct Strategy {
    /// Fills unset fields (upstream `SetDefaults_*`); idempotent.
    pub defaults: fn(&mut Object),
    /// Create-time preparation (upstream `PrepareForCreate`), after
    /// `metadata.uid` and `creationTimestamp` are set.
    pub prepare_for_create: fn(&mut Object),
    /// Update-time preparation of the new object from the old one (upstream
    /// `PrepareForUpdate`), after defaulting and the `metadata.generation`
    /// bump; not run for writes to a subresource.
    pub prepare_for_update: fn(&mut Object, &Value),
    /// Field validation of `obj` (`old` on update); pushes the 422 causes.
    pub validate: ValidateFn,
    /// True when names must be DNS-1123 labels (upstream
    /// `ValidateNamespaceName`, `ValidateServiceName`, …) instead of subdomains.
    pub name_is_label: bool,
    /// A kind's own rule for a non-empty `metadata.name` in place of the DNS-1123 check:
    /// `(name, obj) -> problems` (ClusterTrustBundle names carry their signer,
    /// upstream `ValidateClusterTrustBundleName`). `None` for the usual rule.
    pub validate_name: Option<NameFn>,
    /// The `/scale` mapping, for resources with a `scale` subresource.
    pub scale: Option<ScaleSelector>,
    /// Graceful deletion and lifecycle on DELETE ([`DeleteRules::NONE`]: removed at once).
    pub delete: DeleteRules,
    /// Warnings for the client about `obj` (`old` on update), as upstream's
    /// `WarningsOnCreate`/`WarningsOnUpdate`: accepted, but worth knowing.
    pub warnings: WarningsFn,
}

/// A strategy's warnings: `(obj, old) -> messages`.
pub type WarningsFn = fn(&Value, Option<&Value>) -> Vec<String>;

/// A kind's name rule: `(name, obj) -> problems` (each an `Invalid` detail of `metadata.name`).
pub type NameFn = fn(&str, &Value) -> Vec<String>;

fn no_warnings(_: &Value, _: Option<&Value>) -> Vec<String> {
    Vec::new()
}

impl std::fmt::Debug for Strategy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Strategy").field("name_is_label", &self.name_is_label).field("scale", &self.scale).finish()
    }
}

fn nothing(_: &mut Object) {}

fn nothing_on_update(_: &mut Object, _: &Value) {}

fn no_validation(_: &Value, _: Option<&Value>, _: &mut Vec<FieldError>) {}

impl Strategy {
    /// No warnings.
    pub const NO_WARNINGS: WarningsFn = no_warnings;

    /// No update-time preparation.
    pub const NO_UPDATE_PREPARATION: fn(&mut Object, &Value) = nothing_on_update;

    /// No defaults, no preparation, no validation beyond ObjectMeta's.
    pub const NONE: Strategy = Strategy {
        defaults: nothing,
        prepare_for_create: nothing,
        validate: no_validation,
        name_is_label: false,
        validate_name: None,
        scale: None,
        delete: DeleteRules::NONE,
        warnings: Strategy::NO_WARNINGS,
        prepare_for_update: Strategy::NO_UPDATE_PREPARATION,
    };

    /// Applies the defaults to `obj` (a JSON object; anything else is left alone).
    pub fn apply_defaults(&self, obj: &mut Value) {
        if let Some(m) = obj.as_object_mut() {
            (self.defaults)(m);
        }
    }

    /// Runs the update-time preparation on `obj`, the new version of `old`.
    pub fn prepare_update(&self, obj: &mut Value, old: &Value) {
        if let Some(m) = obj.as_object_mut() {
            (self.prepare_for_update)(m, old);
        }
    }

    /// Runs the create-time preparation on `obj`.
    pub fn prepare(&self, obj: &mut Value) {
        if let Some(m) = obj.as_object_mut() {
            (self.prepare_for_create)(m);
        }
    }

    /// The field errors of `obj` (`old` on update).
    pub fn validate_object(&self, obj: &Value, old: Option<&Value>) -> Vec<FieldError> {
        let mut errs = Vec::new();
        (self.validate)(obj, old, &mut errs);
        errs
    }
}

// ---- helpers shared by the strategies ----

/// Inserts `key: value` into `map` when absent (or null).
pub(crate) fn default_field(map: &mut Object, key: &str, value: Value) {
    match map.get(key) {
        None | Some(Value::Null) => {
            map.insert(key.to_string(), value);
        }
        _ => {}
    }
}

/// The object map at `obj[key]`, created when absent (a non-object is replaced).
pub(crate) fn child<'a>(obj: &'a mut Object, key: &str) -> &'a mut Object {
    let v = obj.entry(key.to_string()).or_insert_with(|| Value::Object(Map::new()));
    if !v.is_object() {
        *v = Value::Object(Map::new());
    }
    v.as_object_mut().expect("made an object above")
}

/// Runs `f` on every object of the array at `obj[key]`.
pub(crate) fn each(obj: &mut Object, key: &str, mut f: impl FnMut(&mut Object)) {
    if let Some(items) = obj.get_mut(key).and_then(Value::as_array_mut) {
        for item in items.iter_mut().filter_map(Value::as_object_mut) {
            f(item);
        }
    }
}

/// Sets `status` to an empty object (upstream `PrepareForCreate` of kinds
/// with a status subresource: `obj.Status = XStatus{}`).
pub(crate) fn reset_status(obj: &mut Object) {
    obj.insert("status".into(), Value::Object(Map::new()));
}

/// The value at a JSON pointer (`/spec/selector`) inside an object map.
pub(crate) fn at<'a>(map: &'a Object, pointer: &str) -> Option<&'a Value> {
    let mut parts = pointer.trim_start_matches('/').split('/');
    let first = map.get(parts.next()?)?;
    parts.try_fold(first, |v, k| v.get(k))
}

/// An integer at a JSON pointer.
pub(crate) fn int_at(obj: &Value, pointer: &str) -> Option<i64> {
    obj.pointer(pointer).and_then(Value::as_i64)
}

/// A string at a JSON pointer (`""` when absent).
pub(crate) fn str_at<'a>(obj: &'a Value, pointer: &str) -> &'a str {
    obj.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

/// `field` must be ≥ 0 when set (upstream `ValidateNonnegativeField`).
pub(crate) fn non_negative(obj: &Value, pointer: &str, field: &str, errs: &mut Vec<FieldError>) {
    if let Some(n) = int_at(obj, pointer) {
        if n < 0 {
            errs.push(FieldError::invalid_json(field, &Value::from(n), "must be greater than or equal to 0"));
        }
    }
}

/// `field` must be set to a non-empty string.
pub(crate) fn required_str(obj: &Value, pointer: &str, field: &str, errs: &mut Vec<FieldError>) {
    if str_at(obj, pointer).is_empty() {
        errs.push(FieldError::required(field, ""));
    }
}

/// On update, the value at `pointer` may not change (upstream
/// `ValidateImmutableField`: `Invalid value: …: field is immutable`).
pub(crate) fn immutable(obj: &Value, old: Option<&Value>, pointer: &str, field: &str, errs: &mut Vec<FieldError>) {
    let Some(old) = old else { return };
    let (a, b) = (obj.pointer(pointer), old.pointer(pointer));
    if a != b {
        errs.push(FieldError::invalid_json(field, a.unwrap_or(&Value::Null), "field is immutable"));
    }
}

/// A workload's `spec.selector` (a `metav1.LabelSelector`) is required, not
/// empty, and must select `spec.template.metadata.labels` (upstream
/// `ValidatePodTemplateSpecForReplicaSet` and friends:
/// `selector does not match template labels`).
pub(crate) fn selector_matches_template(obj: &Value, errs: &mut Vec<FieldError>) {
    let selector = obj.pointer("/spec/selector");
    let match_labels = selector.and_then(|s| s.get("matchLabels")).and_then(Value::as_object);
    let exprs = selector.and_then(|s| s.get("matchExpressions")).and_then(Value::as_array);
    let empty = match_labels.is_none_or(|m| m.is_empty()) && exprs.is_none_or(|a| a.is_empty());
    if selector.is_none() || selector == Some(&Value::Null) || empty {
        errs.push(FieldError::required("spec.selector", ""));
        return;
    }
    let labels = obj.pointer("/spec/template/metadata/labels").and_then(Value::as_object).cloned().unwrap_or_default();
    if !crate::selector::label_selector_matches(selector.unwrap_or(&Value::Null), &labels) {
        errs.push(FieldError::invalid_json(
            "spec.template.metadata.labels",
            &Value::Object(labels),
            "`selector` does not match template `labels`",
        ));
    }
}

#[cfg(test)]
mod tests;
