//! Strategies of apps/v1 kinds (`pkg/apis/apps/v1/defaults.go`,
//! `pkg/apis/apps/validation/validation.go`, `pkg/registry/apps/*/strategy.go`).

use serde_json::{json, Value};

use super::core::replicas_status;
use super::pod::{template_defaults, validate_template};
use super::{child, default_field, immutable, non_negative, reset_status, selector_matches_template, Object, ScaleSelector, Strategy};
use crate::field_error::FieldError;

fn deployment_defaults(map: &mut Object) {
    let spec = child(map, "spec");
    default_field(spec, "replicas", json!(1));
    default_field(spec, "revisionHistoryLimit", json!(10));
    default_field(spec, "progressDeadlineSeconds", json!(600));
    let strategy = child(spec, "strategy");
    default_field(strategy, "type", json!("RollingUpdate"));
    if strategy.get("type").and_then(Value::as_str) == Some("RollingUpdate") {
        let ru = child(strategy, "rollingUpdate");
        default_field(ru, "maxUnavailable", json!("25%"));
        default_field(ru, "maxSurge", json!("25%"));
    }
    template_defaults(spec);
}

fn workload_validate(obj: &Value, old: Option<&Value>, errs: &mut Vec<FieldError>) {
    selector_matches_template(obj, errs);
    non_negative(obj, "/spec/replicas", "spec.replicas", errs);
    non_negative(obj, "/spec/minReadySeconds", "spec.minReadySeconds", errs);
    non_negative(obj, "/spec/revisionHistoryLimit", "spec.revisionHistoryLimit", errs);
    validate_template(obj, &["Always"], errs);
    // apps/v1 selectors are immutable (upstream `ValidateDeploymentUpdate` and friends).
    immutable(obj, old, "/spec/selector", "spec.selector", errs);
}

fn deployment_validate(obj: &Value, old: Option<&Value>, errs: &mut Vec<FieldError>) {
    workload_validate(obj, old, errs);
    if let (Some(p), Some(m)) = (
        obj.pointer("/spec/progressDeadlineSeconds").and_then(Value::as_i64),
        obj.pointer("/spec/minReadySeconds").and_then(Value::as_i64),
    ) {
        if p <= m {
            errs.push(FieldError::invalid_json(
                "spec.progressDeadlineSeconds",
                &Value::from(p),
                "must be greater than minReadySeconds",
            ));
        }
    }
}

/// Deployments: replicas, history, progress deadline and RollingUpdate
/// 25 %/25 % defaults; `/scale`.
pub(crate) const DEPLOYMENT: Strategy = Strategy {
    defaults: deployment_defaults,
    prepare_for_create: reset_status,
    validate: deployment_validate,
    name_is_label: false,
    validate_name: None,
    scale: Some(ScaleSelector::LabelSelector),
    delete: super::DeleteRules::NONE,
    warnings: Strategy::NO_WARNINGS,
    prepare_for_update: Strategy::NO_UPDATE_PREPARATION,
};

fn replica_set_defaults(map: &mut Object) {
    let spec = child(map, "spec");
    default_field(spec, "replicas", json!(1));
    template_defaults(spec);
}

/// ReplicaSets: one replica; `/scale`.
pub(crate) const REPLICA_SET: Strategy = Strategy {
    defaults: replica_set_defaults,
    prepare_for_create: replicas_status,
    validate: workload_validate,
    name_is_label: false,
    validate_name: None,
    scale: Some(ScaleSelector::LabelSelector),
    delete: super::DeleteRules::NONE,
    warnings: Strategy::NO_WARNINGS,
    prepare_for_update: Strategy::NO_UPDATE_PREPARATION,
};

fn stateful_set_defaults(map: &mut Object) {
    let spec = child(map, "spec");
    default_field(spec, "replicas", json!(1));
    default_field(spec, "podManagementPolicy", json!("OrderedReady"));
    default_field(spec, "revisionHistoryLimit", json!(10));
    let strategy = child(spec, "updateStrategy");
    default_field(strategy, "type", json!("RollingUpdate"));
    if strategy.get("type").and_then(Value::as_str) == Some("RollingUpdate") {
        let ru = child(strategy, "rollingUpdate");
        default_field(ru, "partition", json!(0));
    }
    let retention = child(spec, "persistentVolumeClaimRetentionPolicy");
    default_field(retention, "whenDeleted", json!("Retain"));
    default_field(retention, "whenScaled", json!("Retain"));
    super::each(spec, "volumeClaimTemplates", |pvc| {
        let pvc_spec = child(pvc, "spec");
        default_field(pvc_spec, "volumeMode", json!("Filesystem"));
        let status = child(pvc, "status");
        default_field(status, "phase", json!("Pending"));
    });
    template_defaults(spec);
}

fn stateful_set_prepare(obj: &mut Object) {
    obj.insert("status".into(), json!({"replicas": 0, "availableReplicas": 0}));
}

fn stateful_set_validate(obj: &Value, old: Option<&Value>, errs: &mut Vec<FieldError>) {
    workload_validate(obj, old, errs);
    if let Some(policy) = obj.pointer("/spec/podManagementPolicy").and_then(Value::as_str) {
        if !matches!(policy, "OrderedReady" | "Parallel") {
            errs.push(FieldError::not_supported("spec.podManagementPolicy", policy, &["OrderedReady", "Parallel"]));
        }
    }
    if old.is_some() {
        // Upstream `ValidateStatefulSetUpdate`: only these spec fields may change.
        let strip = |v: Option<&Value>| {
            let mut spec = v.and_then(|v| v.get("spec")).cloned().unwrap_or(Value::Null);
            if let Some(m) = spec.as_object_mut() {
                for k in [
                    "replicas",
                    "ordinals",
                    "template",
                    "updateStrategy",
                    "persistentVolumeClaimRetentionPolicy",
                    "minReadySeconds",
                    "revisionHistoryLimit",
                ] {
                    m.remove(k);
                }
            }
            spec
        };
        if strip(Some(obj)) != strip(old) {
            errs.push(FieldError::forbidden(
                "spec",
                "updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'revisionHistoryLimit', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden",
            ));
        }
    }
}

/// StatefulSets: OrderedReady, RollingUpdate with partition 0, PVC
/// retention `Retain`; the update rules; `/scale`.
pub(crate) const STATEFUL_SET: Strategy = Strategy {
    defaults: stateful_set_defaults,
    prepare_for_create: stateful_set_prepare,
    validate: stateful_set_validate,
    name_is_label: false,
    validate_name: None,
    scale: Some(ScaleSelector::LabelSelector),
    delete: super::DeleteRules::NONE,
    warnings: Strategy::NO_WARNINGS,
    prepare_for_update: Strategy::NO_UPDATE_PREPARATION,
};

fn daemon_set_defaults(map: &mut Object) {
    let spec = child(map, "spec");
    default_field(spec, "revisionHistoryLimit", json!(10));
    let strategy = child(spec, "updateStrategy");
    default_field(strategy, "type", json!("RollingUpdate"));
    if strategy.get("type").and_then(Value::as_str) == Some("RollingUpdate") {
        let ru = child(strategy, "rollingUpdate");
        default_field(ru, "maxUnavailable", json!(1));
        default_field(ru, "maxSurge", json!(0));
    }
    template_defaults(spec);
}

/// The annotation holding a DaemonSet's template generation: apps/v1 keeps
/// upstream's internal `spec.templateGeneration` there (conversion in
/// `pkg/apis/apps/v1/conversion.go`); the DaemonSet controller labels its
/// pods with it as `pod-template-generation`.
pub const DAEMON_SET_TEMPLATE_GENERATION: &str = "deprecated.daemonset.template.generation";

fn daemon_set_prepare(obj: &mut Object) {
    obj.insert(
        "status".into(),
        json!({"currentNumberScheduled": 0, "numberMisscheduled": 0, "desiredNumberScheduled": 0, "numberReady": 0}),
    );
    set_template_generation(obj, 1);
}

/// Upstream's `daemonSetStrategy.PrepareForUpdate`: the template generation
/// is the server's (a client's value is replaced by the old one) and goes up
/// by one when `spec.template` changes.
fn daemon_set_prepare_update(obj: &mut Object, old: &Value) {
    let old_generation = old
        .pointer(&format!("/metadata/annotations/{}", DAEMON_SET_TEMPLATE_GENERATION.replace('/', "~1")))
        .and_then(Value::as_str)
        .and_then(|g| g.parse::<i64>().ok())
        .unwrap_or(0);
    let changed = obj.get("spec").and_then(|s| s.get("template")) != old.pointer("/spec/template");
    set_template_generation(obj, if changed { old_generation + 1 } else { old_generation });
}

fn set_template_generation(obj: &mut Object, generation: i64) {
    if generation > 0 {
        let annotations = child(child(obj, "metadata"), "annotations");
        annotations.insert(DAEMON_SET_TEMPLATE_GENERATION.into(), Value::String(generation.to_string()));
    } else if let Some(annotations) = obj.get_mut("metadata").and_then(|m| m.get_mut("annotations")).and_then(Value::as_object_mut) {
        annotations.remove(DAEMON_SET_TEMPLATE_GENERATION);
    }
}

/// DaemonSets: RollingUpdate with maxUnavailable 1 and maxSurge 0, history 10;
/// the template generation annotation ([`DAEMON_SET_TEMPLATE_GENERATION`]).
pub(crate) const DAEMON_SET: Strategy = Strategy {
    defaults: daemon_set_defaults,
    prepare_for_create: daemon_set_prepare,
    validate: workload_validate,
    name_is_label: false,
    validate_name: None,
    scale: None,
    delete: super::DeleteRules::NONE,
    warnings: Strategy::NO_WARNINGS,
    prepare_for_update: daemon_set_prepare_update,
};
