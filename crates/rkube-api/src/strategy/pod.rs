//! Pod specs, shared by pods and every pod template (deployments, replica
//! sets, stateful sets, daemon sets, jobs, cron jobs, replication
//! controllers, pod templates): `SetDefaults_PodSpec`/`SetDefaults_Container`
//! (`pkg/apis/core/v1/defaults.go`) and the parts of `ValidatePodSpec`
//! (`pkg/apis/core/validation/validation.go`) clients meet first.

use serde_json::{json, Value};

use super::{child, default_field, each, Object};
use crate::field_error::FieldError;
use crate::validation;

/// `Always` for `:latest` or untagged images, else `IfNotPresent` (upstream `SetDefaults_Container`).
fn pull_policy(image: &str) -> &'static str {
    if image.contains('@') {
        return "IfNotPresent";
    }
    let last = image.rsplit('/').next().unwrap_or(image);
    match last.split_once(':') {
        Some((_, tag)) if tag != "latest" => "IfNotPresent",
        _ => "Always",
    }
}

fn container(c: &mut Object) {
    default_field(c, "terminationMessagePath", json!("/dev/termination-log"));
    default_field(c, "terminationMessagePolicy", json!("File"));
    default_field(c, "resources", json!({}));
    let image = c
        .get("image")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    default_field(c, "imagePullPolicy", json!(pull_policy(&image)));
    each(c, "ports", |p| default_field(p, "protocol", json!("TCP")));
    // Upstream's SetDefaults_Probe and SetDefaults_HTTPGetAction.
    for key in ["livenessProbe", "readinessProbe", "startupProbe"] {
        if let Some(Value::Object(probe)) = c.get_mut(key) {
            default_field(probe, "timeoutSeconds", json!(1));
            default_field(probe, "periodSeconds", json!(10));
            default_field(probe, "successThreshold", json!(1));
            default_field(probe, "failureThreshold", json!(3));
            if let Some(Value::Object(get)) = probe.get_mut("httpGet") {
                default_field(get, "path", json!("/"));
                default_field(get, "scheme", json!("HTTP"));
            }
        }
    }
}

/// Defaults of a `PodSpec` (pods and pod templates).
pub fn pod_spec_defaults(spec: &mut Object) {
    default_field(spec, "restartPolicy", json!("Always"));
    default_field(spec, "dnsPolicy", json!("ClusterFirst"));
    default_field(spec, "terminationGracePeriodSeconds", json!(30));
    default_field(spec, "schedulerName", json!("default-scheduler"));
    default_field(spec, "securityContext", json!({}));
    default_field(spec, "enableServiceLinks", json!(true));
    for key in ["containers", "initContainers", "ephemeralContainers"] {
        each(spec, key, container);
    }
}

/// Defaults of the pod template at `obj.spec.template` (and of its spec).
pub(crate) fn template_defaults(spec: &mut Object) {
    let template = child(spec, "template");
    pod_spec_defaults(child(template, "spec"));
}

/// Pod QoS class (upstream `GetPodQOS`, simplified to cpu/memory of regular containers).
pub fn qos_class(spec: Option<&Value>) -> &'static str {
    let containers = spec
        .and_then(|s| s.get("containers"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut any = false;
    let mut guaranteed = true;
    for c in &containers {
        let req = c.pointer("/resources/requests").and_then(Value::as_object);
        let lim = c.pointer("/resources/limits").and_then(Value::as_object);
        for res in ["cpu", "memory"] {
            let r = req.and_then(|m| m.get(res));
            let l = lim.and_then(|m| m.get(res));
            if r.is_some() || l.is_some() {
                any = true;
            }
            match (r, l) {
                (_, None) => guaranteed = false,
                (Some(r), Some(l)) if r != l => guaranteed = false,
                _ => {}
            }
        }
    }
    if !any {
        "BestEffort"
    } else if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

/// Validates a `PodSpec` at `path`: containers with DNS-1123 names and
/// images, container ports in range, a known `restartPolicy` (limited to
/// `allowed_restart` when given, as workload templates are).
pub(crate) fn validate_pod_spec(
    spec: Option<&Value>,
    path: &str,
    allowed_restart: &[&str],
    errs: &mut Vec<FieldError>,
) {
    let containers = spec
        .and_then(|s| s.get("containers"))
        .and_then(Value::as_array);
    match containers {
        None => errs.push(FieldError::required(&format!("{path}.containers"), "")),
        Some(cs) if cs.is_empty() => {
            errs.push(FieldError::required(&format!("{path}.containers"), ""))
        }
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
                if c.get("image")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .trim()
                    .is_empty()
                {
                    errs.push(FieldError::required(&format!("{p}.image"), ""));
                }
                if let Some(ports) = c.get("ports").and_then(Value::as_array) {
                    for (j, port) in ports.iter().enumerate() {
                        let n = port
                            .get("containerPort")
                            .and_then(Value::as_i64)
                            .unwrap_or(0);
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
    if let Some(rp) = spec
        .and_then(|s| s.get("restartPolicy"))
        .and_then(Value::as_str)
    {
        let field = format!("{path}.restartPolicy");
        if !matches!(rp, "Always" | "OnFailure" | "Never") {
            errs.push(FieldError::not_supported(
                &field,
                rp,
                &["Always", "OnFailure", "Never"],
            ));
        } else if !allowed_restart.is_empty() && !allowed_restart.contains(&rp) {
            errs.push(FieldError::not_supported(&field, rp, allowed_restart));
        }
    }
}

/// Validates `spec.template.spec` of a workload.
pub(crate) fn validate_template(obj: &Value, allowed_restart: &[&str], errs: &mut Vec<FieldError>) {
    validate_pod_spec(
        obj.pointer("/spec/template/spec"),
        "spec.template.spec",
        allowed_restart,
        errs,
    );
}

/// Pod spec updates may change only container images, `activeDeadlineSeconds`,
/// tolerations (additions) and `terminationGracePeriodSeconds` (upstream
/// `ValidatePodUpdate`); `nodeName` may go from unset to a node (binding).
pub(crate) fn validate_pod_update(old: &Value, new: &Value, errs: &mut Vec<FieldError>) {
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
            for key in [
                "activeDeadlineSeconds",
                "tolerations",
                "terminationGracePeriodSeconds",
            ] {
                m.remove(key);
            }
        }
        s
    };
    let (o, n) = (strip(old.get("spec")), strip(new.get("spec")));
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
