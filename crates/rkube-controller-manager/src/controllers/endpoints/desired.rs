//! What a Service's endpoints should be, from the Service and the pods of
//! its namespace: pure functions shared by the Endpoints and EndpointSlice
//! controllers (upstream `pkg/controller/util/endpoint`,
//! `pkg/api/v1/pod.FindPort`, `endpointslice/util.ShouldPodBeInEndpoints`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Pod, Service, ServicePort};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// Whether the controllers manage this Service's endpoints: it has a
/// non-empty selector and is not of type ExternalName.
pub fn is_managed(svc: &Service) -> bool {
    let Some(spec) = &svc.spec else { return false };
    spec.type_.as_deref() != Some("ExternalName") && spec.selector.as_ref().is_some_and(|s| !s.is_empty())
}

/// Whether `pod`'s labels match the Service's selector (every pair present).
pub fn selects(svc: &Service, pod: &Pod) -> bool {
    let Some(selector) = svc.spec.as_ref().and_then(|s| s.selector.as_ref()) else { return false };
    if selector.is_empty() || pod.metadata.namespace != svc.metadata.namespace {
        return false;
    }
    let labels = pod.metadata.labels.as_ref();
    selector.iter().all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v))
}

/// One port of an endpoint: the Service port's name, protocol and
/// appProtocol with the pod's resolved number.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ResolvedPort {
    /// The Service port's name (`""` when unnamed).
    pub name: String,
    /// The pod's port number.
    pub port: i32,
    /// `TCP`, `UDP` or `SCTP`.
    pub protocol: String,
    /// The Service port's appProtocol.
    pub app_protocol: Option<String>,
}

/// One pod as an endpoint of a Service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodEndpoint {
    /// The pod's name.
    pub pod_name: String,
    /// The pod's UID.
    pub pod_uid: String,
    /// The pod's (first) IP.
    pub ip: String,
    /// `spec.nodeName`.
    pub node_name: Option<String>,
    /// `spec.hostname`, when `spec.subdomain` names the Service.
    pub hostname: Option<String>,
    /// Ready for traffic: the PodReady condition, or the Service publishes
    /// not-ready addresses (and the pod is not terminating).
    pub ready: bool,
    /// Serving: the PodReady condition, also while terminating.
    pub serving: bool,
    /// The pod has a deletionTimestamp.
    pub terminating: bool,
    /// The Service's ports resolved against this pod, in Service order.
    pub ports: Vec<ResolvedPort>,
}

impl PodEndpoint {
    /// `true` for IPv6 addresses (the EndpointSlice `addressType`).
    pub fn is_ipv6(&self) -> bool {
        self.ip.contains(':')
    }
}

fn pod_is_ready(pod: &Pod) -> bool {
    let conditions = pod.status.as_ref().and_then(|s| s.conditions.as_ref());
    conditions.is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Whether a pod belongs among a Service's endpoints at all (upstream
/// `ShouldPodBeInEndpoints`): it has an IP, has not finished (phase
/// Succeeded or Failed), and is not being deleted unless `include_terminating`.
pub fn should_include(pod: &Pod, include_terminating: bool) -> bool {
    let status = pod.status.as_ref();
    if status.and_then(|s| s.pod_ip.as_deref()).is_none_or(str::is_empty) {
        return false;
    }
    if matches!(status.and_then(|s| s.phase.as_deref()), Some("Succeeded" | "Failed")) {
        return false;
    }
    include_terminating || pod.metadata.deletion_timestamp.is_none()
}

/// The pod's port for a Service port (upstream `podutil.FindPort`): a number
/// as is; a name looked up among the containers' ports of the same protocol;
/// `None` when the name is not found.
pub fn find_port(pod: &Pod, sp: &ServicePort) -> Option<i32> {
    let protocol = sp.protocol.as_deref().unwrap_or("TCP");
    match &sp.target_port {
        None => Some(sp.port),
        Some(IntOrString::Int(n)) => Some(*n),
        Some(IntOrString::String(name)) => {
            if let Ok(n) = name.parse::<i32>() {
                return Some(n);
            }
            let containers = pod.spec.as_ref().map(|s| s.containers.as_slice()).unwrap_or(&[]);
            containers.iter().flat_map(|c| c.ports.iter().flatten()).find_map(|p| {
                (p.name.as_deref() == Some(name.as_str()) && p.protocol.as_deref().unwrap_or("TCP") == protocol).then_some(p.container_port)
            })
        }
    }
}

/// The endpoints of `svc` among `pods` (any namespace; only the selected
/// ones count), sorted by IP then pod name. `include_terminating`: keep
/// pods being deleted (EndpointSlices report them as terminating; the
/// Endpoints controller drops them unless the Service publishes not-ready
/// addresses).
pub fn endpoints<'a>(svc: &Service, pods: impl IntoIterator<Item = &'a Pod>, include_terminating: bool) -> Vec<PodEndpoint> {
    let spec = svc.spec.as_ref();
    let publish_not_ready = spec.and_then(|s| s.publish_not_ready_addresses).unwrap_or(false);
    let svc_name = svc.metadata.name.as_deref().unwrap_or_default();
    let service_ports = spec.and_then(|s| s.ports.as_deref()).unwrap_or(&[]);
    let mut out: Vec<PodEndpoint> = pods
        .into_iter()
        .filter(|p| selects(svc, p) && should_include(p, include_terminating || publish_not_ready))
        .map(|pod| {
            let ready_condition = pod_is_ready(pod);
            let terminating = pod.metadata.deletion_timestamp.is_some();
            let pod_spec = pod.spec.as_ref();
            let hostname = match (pod_spec.and_then(|s| s.hostname.as_deref()), pod_spec.and_then(|s| s.subdomain.as_deref())) {
                (Some(h), Some(sub)) if sub == svc_name && !h.is_empty() => Some(h.to_string()),
                _ => None,
            };
            let ports = service_ports
                .iter()
                .filter_map(|sp| {
                    find_port(pod, sp).map(|port| ResolvedPort {
                        name: sp.name.clone().unwrap_or_default(),
                        port,
                        protocol: sp.protocol.clone().unwrap_or_else(|| "TCP".into()),
                        app_protocol: sp.app_protocol.clone(),
                    })
                })
                .collect();
            PodEndpoint {
                pod_name: pod.metadata.name.clone().unwrap_or_default(),
                pod_uid: pod.metadata.uid.clone().unwrap_or_default(),
                ip: pod.status.as_ref().and_then(|s| s.pod_ip.clone()).unwrap_or_default(),
                node_name: pod_spec.and_then(|s| s.node_name.clone()),
                hostname,
                ready: (ready_condition || publish_not_ready) && !terminating,
                serving: ready_condition || publish_not_ready,
                terminating,
                ports,
            }
        })
        .collect();
    out.sort_by(|a, b| (&a.ip, &a.pod_name).cmp(&(&b.ip, &b.pod_name)));
    out
}

/// `endpoints` grouped by their resolved port lists (pods whose named
/// ports resolve differently land in different groups), groups in port order.
pub fn by_ports(endpoints: Vec<PodEndpoint>) -> BTreeMap<Vec<ResolvedPort>, Vec<PodEndpoint>> {
    let mut groups: BTreeMap<Vec<ResolvedPort>, Vec<PodEndpoint>> = BTreeMap::new();
    for ep in endpoints {
        groups.entry(ep.ports.clone()).or_default().push(ep);
    }
    groups
}

/// The value of `endpoints.kubernetes.io/last-change-trigger-time`: the
/// latest of the Service's creation and, for each selected pod, its
/// creation and its Ready condition's last transition (RFC 3339). Upstream
/// records when the informer saw the triggering change; these are the
/// object times that change recorded.
pub fn last_change_trigger_time<'a>(svc: &Service, pods: impl IntoIterator<Item = &'a Pod>) -> Option<String> {
    let mut latest = svc.metadata.creation_timestamp.as_ref().map(|t| t.0);
    for pod in pods.into_iter().filter(|p| selects(svc, p)) {
        let ready_change = pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
            .and_then(|c| c.last_transition_time.as_ref())
            .map(|t| t.0);
        for t in [pod.metadata.creation_timestamp.as_ref().map(|t| t.0), ready_change].into_iter().flatten() {
            latest = Some(latest.map_or(t, |l| l.max(t)));
        }
    }
    latest.map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use serde_json::json;

    pub(crate) fn service(name: &str, selector: serde_json::Value, ports: serde_json::Value) -> Service {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}"), "labels": {"app": "web"}},
            "spec": {"selector": selector, "ports": ports, "clusterIP": "10.0.0.10"},
        }))
        .unwrap()
    }

    pub(crate) fn pod(name: &str, ip: &str, ready: bool, labels: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}"), "labels": labels},
            "spec": {"nodeName": "node-1", "containers": [{"name": "c", "image": "busybox",
                "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}]}]},
            "status": {"phase": "Running", "podIP": ip,
                "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]},
        }))
        .unwrap()
    }

    #[test]
    fn selected_pods_with_ips_become_endpoints_sorted_by_ip() {
        let svc = service("web", json!({"app": "web"}), json!([{"port": 80, "targetPort": "http", "protocol": "TCP"}]));
        let pods = [
            pod("b", "10.1.0.9", true, json!({"app": "web"})),
            pod("a", "10.1.0.10", false, json!({"app": "web", "x": "y"})),
            pod("other", "10.1.0.11", true, json!({"app": "db"})),
            pod("no-ip", "", true, json!({"app": "web"})),
        ];
        let eps = endpoints(&svc, &pods, false);
        assert_eq!(eps.iter().map(|e| e.pod_name.as_str()).collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!((eps[0].ready, eps[1].ready), (false, true));
        assert_eq!(eps[1].ports, vec![ResolvedPort { name: String::new(), port: 8080, protocol: "TCP".into(), app_protocol: None }]);
    }

    #[test]
    fn finished_and_terminating_pods_follow_upstream() {
        let svc = service("web", json!({"app": "web"}), json!([{"port": 80}]));
        let mut done = pod("done", "10.1.0.1", true, json!({"app": "web"}));
        done.status.as_mut().unwrap().phase = Some("Succeeded".into());
        let mut going = pod("going", "10.1.0.2", true, json!({"app": "web"}));
        going.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now()));
        let pods = [done, going];
        assert!(endpoints(&svc, &pods, false).is_empty());
        let eps = endpoints(&svc, &pods, true);
        assert_eq!(eps.len(), 1);
        assert_eq!((eps[0].ready, eps[0].serving, eps[0].terminating), (false, true, true));
    }

    #[test]
    fn named_target_ports_resolve_per_pod_or_are_left_out() {
        let svc = service("web", json!({"app": "web"}), json!([{"name": "h", "port": 80, "targetPort": "http"}, {"name": "m", "port": 9, "targetPort": "metrics"}]));
        let p = pod("a", "10.1.0.1", true, json!({"app": "web"}));
        let eps = endpoints(&svc, [&p], false);
        assert_eq!(eps[0].ports.iter().map(|p| (p.name.as_str(), p.port)).collect::<Vec<_>>(), [("h", 8080)]);
    }

    #[test]
    fn services_without_selectors_or_external_names_are_not_managed() {
        assert!(!is_managed(&service("a", json!({}), json!([]))));
        let mut ext = service("b", json!({"app": "web"}), json!([]));
        ext.spec.as_mut().unwrap().type_ = Some("ExternalName".into());
        assert!(!is_managed(&ext));
        assert!(is_managed(&service("c", json!({"app": "web"}), json!([]))));
    }
}
