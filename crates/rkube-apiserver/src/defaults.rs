//! Defaulting of built-in kinds, as upstream's `SetDefaults_*` functions
//! (`pkg/apis/core/v1/defaults.go`, `pkg/apis/apps/v1/defaults.go`,
//! `pkg/apis/discovery/v1/defaults.go`) and the create-time parts of the
//! registry strategies (pod `status.phase`/`qosClass`, namespace phase and
//! `kubernetes.io/metadata.name` label).
//!
//! Defaults are idempotent: applying them to an already defaulted object
//! changes nothing. ClusterIP allocation needs storage and lives in the
//! create handler; here a Service only gets its other defaults.

use serde_json::{json, Map, Value};

/// Inserts `key: value` into `map` when absent (or null).
fn default_field(map: &mut Map<String, Value>, key: &str, value: Value) {
    match map.get(key) {
        None | Some(Value::Null) => {
            map.insert(key.to_string(), value);
        }
        _ => {}
    }
}

/// The object map at `obj[key]`, created when absent.
fn child<'a>(obj: &'a mut Map<String, Value>, key: &str) -> &'a mut Map<String, Value> {
    let v = obj.entry(key.to_string()).or_insert_with(|| Value::Object(Map::new()));
    if !v.is_object() {
        *v = Value::Object(Map::new());
    }
    v.as_object_mut().expect("made an object above")
}

/// Applies the defaults of `kind` to `obj` (create and update).
pub fn apply(kind: &str, obj: &mut Value) {
    let Some(map) = obj.as_object_mut() else { return };
    match kind {
        "Pod" => {
            pod_spec(child(map, "spec"));
        }
        "Service" => service(map),
        "Endpoints" => {
            if let Some(subsets) = map.get_mut("subsets").and_then(Value::as_array_mut) {
                for s in subsets.iter_mut().filter_map(Value::as_object_mut) {
                    ports(s, "protocol");
                }
            }
        }
        "EndpointSlice" => {
            // kubectl 1.33 crashes describing slices whose ports lack name/protocol.
            if let Some(ps) = map.get_mut("ports").and_then(Value::as_array_mut) {
                for p in ps.iter_mut().filter_map(Value::as_object_mut) {
                    default_field(p, "name", json!(""));
                    default_field(p, "protocol", json!("TCP"));
                }
            }
            if let Some(eps) = map.get_mut("endpoints").and_then(Value::as_array_mut) {
                for e in eps.iter_mut().filter_map(Value::as_object_mut) {
                    default_field(e, "conditions", json!({}));
                }
            }
        }
        "Deployment" => deployment(map),
        "Secret" => default_field(map, "type", json!("Opaque")),
        "Namespace" => {
            let name =
                map.get("metadata").and_then(|m| m.get("name")).and_then(Value::as_str).unwrap_or("").to_string();
            let labels = child(child(map, "metadata"), "labels");
            if !name.is_empty() {
                labels.insert("kubernetes.io/metadata.name".into(), json!(name));
            }
            let spec = child(map, "spec");
            default_field(spec, "finalizers", json!(["kubernetes"]));
            let status = child(map, "status");
            default_field(status, "phase", json!("Active"));
        }
        _ => {}
    }
}

/// Create-time status of kinds whose strategies reset it (pods: `Pending` and
/// the QoS class; services: empty load balancer status; deployments: empty).
pub fn initial_status(kind: &str, obj: &mut Value) {
    let Some(map) = obj.as_object_mut() else { return };
    match kind {
        "Pod" => {
            let qos = qos_class(map.get("spec"));
            map.insert("status".into(), json!({"phase": "Pending", "qosClass": qos}));
        }
        "Service" => {
            map.insert("status".into(), json!({"loadBalancer": {}}));
        }
        "Deployment" => {
            map.insert("status".into(), json!({}));
        }
        _ => {}
    }
}

fn ports(map: &mut Map<String, Value>, protocol_key: &str) {
    if let Some(ps) = map.get_mut("ports").and_then(Value::as_array_mut) {
        for p in ps.iter_mut().filter_map(Value::as_object_mut) {
            default_field(p, protocol_key, json!("TCP"));
        }
    }
}

fn container(c: &mut Map<String, Value>) {
    default_field(c, "terminationMessagePath", json!("/dev/termination-log"));
    default_field(c, "terminationMessagePolicy", json!("File"));
    default_field(c, "resources", json!({}));
    let image = c.get("image").and_then(Value::as_str).unwrap_or("").to_string();
    default_field(c, "imagePullPolicy", json!(pull_policy(&image)));
    ports(c, "protocol");
}

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

/// Defaults of a `PodSpec` (pods and pod templates).
pub fn pod_spec(spec: &mut Map<String, Value>) {
    default_field(spec, "restartPolicy", json!("Always"));
    default_field(spec, "dnsPolicy", json!("ClusterFirst"));
    default_field(spec, "terminationGracePeriodSeconds", json!(30));
    default_field(spec, "schedulerName", json!("default-scheduler"));
    default_field(spec, "securityContext", json!({}));
    default_field(spec, "enableServiceLinks", json!(true));
    for key in ["containers", "initContainers"] {
        if let Some(cs) = spec.get_mut(key).and_then(Value::as_array_mut) {
            for c in cs.iter_mut().filter_map(Value::as_object_mut) {
                container(c);
            }
        }
    }
}

fn service(map: &mut Map<String, Value>) {
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
    if let Some(ps) = spec.get_mut("ports").and_then(Value::as_array_mut) {
        for p in ps.iter_mut().filter_map(Value::as_object_mut) {
            default_field(p, "protocol", json!("TCP"));
            if let Some(port) = p.get("port").cloned() {
                default_field(p, "targetPort", port);
            }
        }
    }
    // A headless service's clusterIPs mirror clusterIP "None".
    if spec.get("clusterIP").and_then(Value::as_str) == Some("None") {
        default_field(spec, "clusterIPs", json!(["None"]));
    }
}

fn deployment(map: &mut Map<String, Value>) {
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
    let template = child(spec, "template");
    pod_spec(child(template, "spec"));
    // Upstream keeps an (empty) creationTimestamp on templates; rkube leaves metadata as sent.
}

/// Pod QoS class (upstream `GetPodQOS`, simplified to cpu/memory of regular containers).
fn qos_class(spec: Option<&Value>) -> &'static str {
    let containers = spec.and_then(|s| s.get("containers")).and_then(Value::as_array).cloned().unwrap_or_default();
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_defaults_match_upstream() {
        let mut pod = json!({"kind": "Pod", "spec": {"containers": [{"name": "c", "image": "nginx:1.25", "ports": [{"containerPort": 80}]}]}});
        apply("Pod", &mut pod);
        initial_status("Pod", &mut pod);
        assert_eq!(pod["spec"]["restartPolicy"], "Always");
        assert_eq!(pod["spec"]["dnsPolicy"], "ClusterFirst");
        assert_eq!(pod["spec"]["terminationGracePeriodSeconds"], 30);
        assert_eq!(pod["spec"]["schedulerName"], "default-scheduler");
        let c = &pod["spec"]["containers"][0];
        assert_eq!(c["imagePullPolicy"], "IfNotPresent");
        assert_eq!(c["terminationMessagePath"], "/dev/termination-log");
        assert_eq!(c["ports"][0]["protocol"], "TCP");
        assert_eq!(pod["status"]["phase"], "Pending");
        assert_eq!(pod["status"]["qosClass"], "BestEffort");
        assert_eq!(pull_policy("nginx"), "Always");
        assert_eq!(pull_policy("registry:5000/nginx"), "Always");
    }

    #[test]
    fn endpointslice_ports_get_name_and_protocol() {
        let mut s = json!({"ports": [{"port": 80}]});
        apply("EndpointSlice", &mut s);
        assert_eq!(s["ports"][0]["name"], "");
        assert_eq!(s["ports"][0]["protocol"], "TCP");
    }

    #[test]
    fn service_ports_default_target_port() {
        let mut s = json!({"spec": {"ports": [{"port": 80}]}});
        apply("Service", &mut s);
        assert_eq!(s["spec"]["type"], "ClusterIP");
        assert_eq!(s["spec"]["ports"][0]["targetPort"], 80);
        assert_eq!(s["spec"]["ports"][0]["protocol"], "TCP");
    }
}
