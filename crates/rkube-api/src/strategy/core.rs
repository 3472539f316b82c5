//! Strategies of core/v1 kinds (`pkg/apis/core/v1/defaults.go`,
//! `pkg/apis/core/validation/validation.go`, `pkg/registry/core/*/strategy.go`).

use serde_json::{json, Value};

use super::pod::{pod_spec_defaults, qos_class, template_defaults, validate_pod_spec, validate_pod_update, validate_template};
use super::{child, default_field, each, immutable, non_negative, reset_status, Object, Strategy};
use crate::field_error::FieldError;

/// A strategy whose only job is resetting `status` on create (kinds with a
/// status subresource and no other rules here: resource quotas, …).
pub(crate) const STATUS_RESET: Strategy = Strategy { prepare_for_create: reset_status, ..Strategy::NONE };

// ---- pods ----

fn pod_defaults(obj: &mut Object) {
    pod_spec_defaults(child(obj, "spec"));
}

fn pod_prepare(obj: &mut Object) {
    let qos = qos_class(obj.get("spec"));
    obj.insert("status".into(), json!({"phase": "Pending", "qosClass": qos}));
}

fn pod_validate(obj: &Value, old: Option<&Value>, errs: &mut Vec<FieldError>) {
    validate_pod_spec(obj.get("spec"), "spec", &[], errs);
    super::ephemeral::validate_ephemeral_containers(obj.get("spec"), "spec", errs);
    match old {
        Some(old) => validate_pod_update(old, obj, errs),
        None => super::ephemeral::forbid_on_create(obj, errs),
    }
}

/// Pods: container defaults, `Pending` status with the QoS class, pod spec
/// validation and the pod update rules.
pub(crate) const POD: Strategy = Strategy {
    defaults: pod_defaults,
    prepare_for_create: pod_prepare,
    validate: pod_validate,
    delete: super::DeleteRules { graceful: Some(super::delete::pod_grace), lifecycle: None },
    ..Strategy::NONE
};

fn pod_template_defaults(obj: &mut Object) {
    let template = child(obj, "template");
    pod_spec_defaults(child(template, "spec"));
}

fn pod_template_validate(obj: &Value, _old: Option<&Value>, errs: &mut Vec<FieldError>) {
    validate_pod_spec(obj.pointer("/template/spec"), "template.spec", &[], errs);
}

/// Pod templates (`v1.PodTemplate`).
pub(crate) const POD_TEMPLATE: Strategy =
    Strategy { defaults: pod_template_defaults, validate: pod_template_validate, ..Strategy::NONE };

// ---- services ----

fn service_defaults(map: &mut Object) {
    let spec = child(map, "spec");
    default_field(spec, "type", json!("ClusterIP"));
    default_field(spec, "sessionAffinity", json!("None"));
    let ty = spec.get("type").and_then(Value::as_str).unwrap_or("ClusterIP").to_string();
    if ty != "ExternalName" {
        default_field(spec, "internalTrafficPolicy", json!("Cluster"));
        default_field(spec, "ipFamilies", json!(["IPv4"]));
        default_field(spec, "ipFamilyPolicy", json!("SingleStack"));
    }
    if ty == "NodePort" || ty == "LoadBalancer" {
        default_field(spec, "externalTrafficPolicy", json!("Cluster"));
    }
    each(spec, "ports", |p| {
        default_field(p, "protocol", json!("TCP"));
        if let Some(port) = p.get("port").cloned() {
            default_field(p, "targetPort", port);
        }
    });
    // A headless service's clusterIPs mirror clusterIP "None".
    if spec.get("clusterIP").and_then(Value::as_str) == Some("None") {
        default_field(spec, "clusterIPs", json!(["None"]));
    }
}

fn service_prepare(obj: &mut Object) {
    obj.insert("status".into(), json!({"loadBalancer": {}}));
}

fn service_validate(obj: &Value, _old: Option<&Value>, errs: &mut Vec<FieldError>) {
    let spec = obj.get("spec");
    let ty = spec.and_then(|s| s.get("type")).and_then(Value::as_str).unwrap_or("ClusterIP");
    if !matches!(ty, "ClusterIP" | "NodePort" | "LoadBalancer" | "ExternalName") {
        errs.push(FieldError::not_supported("spec.type", ty, &["ClusterIP", "ExternalName", "LoadBalancer", "NodePort"]));
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

/// Services: type, traffic-policy and port defaults, empty load-balancer
/// status, type and port validation; names are DNS-1123 labels.
pub(crate) const SERVICE: Strategy = Strategy {
    defaults: service_defaults,
    prepare_for_create: service_prepare,
    validate: service_validate,
    name_is_label: true,
    validate_name: None,
    scale: None,
    delete: super::DeleteRules::NONE,
    warnings: Strategy::NO_WARNINGS,
    prepare_for_update: Strategy::NO_UPDATE_PREPARATION,
};

// ---- namespaces, nodes ----

fn namespace_defaults(map: &mut Object) {
    let name = map.get("metadata").and_then(|m| m.get("name")).and_then(Value::as_str).unwrap_or("").to_string();
    let labels = child(child(map, "metadata"), "labels");
    if !name.is_empty() {
        labels.insert("kubernetes.io/metadata.name".into(), json!(name));
    }
    let spec = child(map, "spec");
    default_field(spec, "finalizers", json!(["kubernetes"]));
    let status = child(map, "status");
    default_field(status, "phase", json!("Active"));
}

/// Namespaces: the `kubernetes.io/metadata.name` label, the `kubernetes`
/// finalizer and phase `Active`; names are DNS-1123 labels.
pub(crate) const NAMESPACE: Strategy = Strategy {
    defaults: namespace_defaults,
    name_is_label: true,
    validate_name: None,
    delete: super::DeleteRules { graceful: None, lifecycle: Some(super::delete::NAMESPACE_LIFECYCLE) },
    ..Strategy::NONE
};

fn node_prepare(obj: &mut Object) {
    // Upstream `nodeStrategy.PrepareForCreate` keeps status (the kubelet
    // registers with it) but clears `spec.configSource`.
    if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
        spec.remove("configSource");
    }
}

/// Nodes.
pub(crate) const NODE: Strategy = Strategy { prepare_for_create: node_prepare, ..Strategy::NONE };

// ---- configuration ----

fn is_config_key(k: &str) -> bool {
    !k.is_empty() && k.len() <= 253 && k.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

fn config_keys(obj: &Value, errs: &mut Vec<FieldError>) {
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

/// `immutable: true` ConfigMaps and Secrets keep their data (upstream
/// `ValidateConfigMapUpdate`/`ValidateSecretUpdate`).
fn immutable_data(obj: &Value, old: Option<&Value>, errs: &mut Vec<FieldError>) {
    let Some(old) = old else { return };
    if old.get("immutable").and_then(Value::as_bool) != Some(true) {
        return;
    }
    if obj.get("immutable").and_then(Value::as_bool) != Some(true) {
        errs.push(FieldError::forbidden("immutable", "field is immutable when `immutable` is set"));
    }
    for section in ["data", "binaryData"] {
        if obj.get(section) != old.get(section) {
            errs.push(FieldError::forbidden(section, "field is immutable when `immutable` is set"));
        }
    }
}

fn config_map_validate(obj: &Value, old: Option<&Value>, errs: &mut Vec<FieldError>) {
    config_keys(obj, errs);
    immutable_data(obj, old, errs);
}

/// ConfigMaps: key names; immutable data once `immutable: true`.
pub(crate) const CONFIG_MAP: Strategy = Strategy { validate: config_map_validate, ..Strategy::NONE };

fn secret_defaults(map: &mut Object) {
    default_field(map, "type", json!("Opaque"));
}

fn secret_validate(obj: &Value, old: Option<&Value>, errs: &mut Vec<FieldError>) {
    config_keys(obj, errs);
    immutable_data(obj, old, errs);
    immutable(obj, old, "/type", "type", errs);
}

/// Secrets: type `Opaque`; key names; immutable type, and data once `immutable: true`.
pub(crate) const SECRET: Strategy = Strategy { defaults: secret_defaults, validate: secret_validate, ..Strategy::NONE };

// ---- endpoints ----

fn endpoints_defaults(map: &mut Object) {
    each(map, "subsets", |s| each(s, "ports", |p| default_field(p, "protocol", json!("TCP"))));
}

/// Endpoints: port protocols.
pub(crate) const ENDPOINTS: Strategy = Strategy { defaults: endpoints_defaults, ..Strategy::NONE };

fn endpoint_slice_defaults(map: &mut Object) {
    // kubectl 1.33 crashes describing slices whose ports lack name/protocol.
    each(map, "ports", |p| {
        default_field(p, "name", json!(""));
        default_field(p, "protocol", json!("TCP"));
    });
    each(map, "endpoints", |e| default_field(e, "conditions", json!({})));
}

fn endpoint_slice_validate(obj: &Value, old: Option<&Value>, errs: &mut Vec<FieldError>) {
    match obj.get("addressType").and_then(Value::as_str) {
        None | Some("") => errs.push(FieldError::required("addressType", "")),
        Some(t) if !matches!(t, "IPv4" | "IPv6" | "FQDN") => {
            errs.push(FieldError::not_supported("addressType", t, &["FQDN", "IPv4", "IPv6"]))
        }
        _ => {}
    }
    immutable(obj, old, "/addressType", "addressType", errs);
}

/// EndpointSlices: port and condition defaults; address type.
pub(crate) const ENDPOINT_SLICE: Strategy =
    Strategy { defaults: endpoint_slice_defaults, validate: endpoint_slice_validate, ..Strategy::NONE };

// ---- volumes ----

fn pv_defaults(map: &mut Object) {
    let spec = child(map, "spec");
    default_field(spec, "persistentVolumeReclaimPolicy", json!("Retain"));
    default_field(spec, "volumeMode", json!("Filesystem"));
    let status = child(map, "status");
    default_field(status, "phase", json!("Pending"));
}

fn pv_prepare(obj: &mut Object) {
    obj.insert("status".into(), json!({"phase": "Pending"}));
}

fn pv_validate(obj: &Value, _old: Option<&Value>, errs: &mut Vec<FieldError>) {
    if obj.pointer("/spec/accessModes").and_then(Value::as_array).is_none_or(|a| a.is_empty()) {
        errs.push(FieldError::required("spec.accessModes", ""));
    }
    if obj.pointer("/spec/capacity/storage").is_none() {
        errs.push(FieldError::required("spec.capacity", ""));
    }
}

/// PersistentVolumes: reclaim policy `Retain`, volume mode, phase `Pending`.
pub(crate) const PERSISTENT_VOLUME: Strategy =
    Strategy { defaults: pv_defaults, prepare_for_create: pv_prepare, validate: pv_validate, ..Strategy::NONE };

fn pvc_defaults(map: &mut Object) {
    let spec = child(map, "spec");
    default_field(spec, "volumeMode", json!("Filesystem"));
    let status = child(map, "status");
    default_field(status, "phase", json!("Pending"));
}

fn pvc_validate(obj: &Value, old: Option<&Value>, errs: &mut Vec<FieldError>) {
    if obj.pointer("/spec/accessModes").and_then(Value::as_array).is_none_or(|a| a.is_empty()) {
        errs.push(FieldError::required("spec.accessModes", "at least 1 access mode is required"));
    }
    if obj.pointer("/spec/resources/requests/storage").is_none() {
        errs.push(FieldError::required("spec.resources[storage]", ""));
    }
    if let Some(old) = old {
        // The binder sets volumeName on a claim that had none (upstream's
        // ValidatePersistentVolumeClaimUpdate ignores it then).
        let binding = old.pointer("/spec/volumeName").and_then(Value::as_str).is_none_or(str::is_empty);
        let strip = |v: &Value| {
            let mut spec = v.get("spec").cloned().unwrap_or(Value::Null);
            if let Some(m) = spec.as_object_mut() {
                m.remove("resources");
                m.remove("volumeAttributesClassName");
                if binding {
                    m.remove("volumeName");
                }
            }
            spec
        };
        if strip(obj) != strip(old) {
            errs.push(FieldError::forbidden(
                "spec",
                "spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims",
            ));
        }
    }
}

/// PersistentVolumeClaims: volume mode, phase `Pending`; access modes and a
/// storage request are required; the spec is immutable but for requests.
pub(crate) const PERSISTENT_VOLUME_CLAIM: Strategy =
    Strategy { defaults: pvc_defaults, prepare_for_create: pv_prepare, validate: pvc_validate, ..Strategy::NONE };

// ---- replication controllers ----

/// `status: {replicas: 0}` (replica counts whose JSON tags lack `omitempty`).
pub(crate) fn replicas_status(obj: &mut Object) {
    obj.insert("status".into(), json!({"replicas": 0}));
}

fn rc_defaults(map: &mut Object) {
    let template_labels = super::at(map, "/spec/template/metadata/labels").cloned();
    let spec = child(map, "spec");
    default_field(spec, "replicas", json!(1));
    if let Some(labels) = template_labels.filter(|l| l.as_object().is_some_and(|m| !m.is_empty())) {
        if spec.get("selector").and_then(Value::as_object).is_none_or(|m| m.is_empty()) {
            spec.insert("selector".into(), labels.clone());
        }
        let meta = child(map, "metadata");
        if meta.get("labels").and_then(Value::as_object).is_none_or(|m| m.is_empty()) {
            meta.insert("labels".into(), labels);
        }
    }
    template_defaults(child(map, "spec"));
}

fn rc_validate(obj: &Value, _old: Option<&Value>, errs: &mut Vec<FieldError>) {
    non_negative(obj, "/spec/replicas", "spec.replicas", errs);
    let selector = obj.pointer("/spec/selector").and_then(Value::as_object);
    match selector {
        None => errs.push(FieldError::required("spec.selector", "")),
        Some(s) if s.is_empty() => errs.push(FieldError::required("spec.selector", "")),
        Some(s) => {
            let labels = obj.pointer("/spec/template/metadata/labels").and_then(Value::as_object);
            let matches = labels.is_some_and(|l| s.iter().all(|(k, v)| l.get(k) == Some(v)));
            if !matches {
                errs.push(FieldError::invalid_json(
                    "spec.template.metadata.labels",
                    labels.map(|l| Value::Object(l.clone())).as_ref().unwrap_or(&Value::Null),
                    "`selector` does not match template `labels`",
                ));
            }
        }
    }
    validate_template(obj, &["Always"], errs);
}

/// ReplicationControllers: one replica, selector and labels from the
/// template; selector and template validation; `/scale` with a map selector.
pub(crate) const REPLICATION_CONTROLLER: Strategy = Strategy {
    defaults: rc_defaults,
    prepare_for_create: replicas_status,
    validate: rc_validate,
    name_is_label: false,
    validate_name: None,
    scale: Some(super::ScaleSelector::Map),
    delete: super::DeleteRules::NONE,
    warnings: Strategy::NO_WARNINGS,
    prepare_for_update: Strategy::NO_UPDATE_PREPARATION,
};
