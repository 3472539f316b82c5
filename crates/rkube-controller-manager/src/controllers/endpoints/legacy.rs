//! The core/v1 Endpoints object of a Service (upstream
//! `pkg/controller/endpoint/endpoints_controller.go`): one object named
//! like the Service, its pods' addresses grouped into subsets by their
//! resolved ports (`RepackSubsets`), ready ones in `addresses`, the others
//! in `notReadyAddresses`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{EndpointAddress, EndpointPort, EndpointSubset, Endpoints, ObjectReference, Pod, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::desired::{self, PodEndpoint};

/// `endpoints.kubernetes.io/last-change-trigger-time`.
pub const TRIGGER_TIME_ANNOTATION: &str = "endpoints.kubernetes.io/last-change-trigger-time";
/// `endpointslice.kubernetes.io/skip-mirror`: the Endpoints is managed by
/// this controller, so the mirroring controller leaves it alone.
pub const SKIP_MIRROR_LABEL: &str = "endpointslice.kubernetes.io/skip-mirror";
/// `service.kubernetes.io/headless`, set (empty) for `clusterIP: None`.
pub const HEADLESS_LABEL: &str = "service.kubernetes.io/headless";

/// The labels of a Service's managed endpoints objects: the Service's own,
/// plus [`HEADLESS_LABEL`] for headless Services.
pub fn service_labels(svc: &Service) -> BTreeMap<String, String> {
    let mut labels = svc.metadata.labels.clone().unwrap_or_default();
    if svc.spec.as_ref().and_then(|s| s.cluster_ip.as_deref()) == Some("None") {
        labels.insert(HEADLESS_LABEL.into(), String::new());
    } else {
        labels.remove(HEADLESS_LABEL);
    }
    labels
}

fn address(ep: &PodEndpoint, namespace: &str) -> EndpointAddress {
    EndpointAddress {
        ip: ep.ip.clone(),
        hostname: ep.hostname.clone(),
        node_name: ep.node_name.clone(),
        target_ref: Some(ObjectReference {
            kind: Some("Pod".into()),
            namespace: Some(namespace.to_string()),
            name: Some(ep.pod_name.clone()),
            uid: Some(ep.pod_uid.clone()),
            ..Default::default()
        }),
    }
}

/// The subsets for `endpoints`: one per distinct resolved port list; a pod
/// with no resolvable port is left out; subsets without any address are
/// dropped. `None` when there is none (the field is then absent, as upstream).
pub fn subsets(endpoints: Vec<PodEndpoint>, namespace: &str) -> Option<Vec<EndpointSubset>> {
    let mut out = Vec::new();
    for (ports, eps) in desired::by_ports(endpoints) {
        if ports.is_empty() {
            continue;
        }
        let (ready, not_ready): (Vec<_>, Vec<_>) = eps.iter().partition(|e| e.ready);
        let ready: Vec<EndpointAddress> = ready.into_iter().map(|e| address(e, namespace)).collect();
        let not_ready: Vec<EndpointAddress> = not_ready.into_iter().map(|e| address(e, namespace)).collect();
        if ready.is_empty() && not_ready.is_empty() {
            continue;
        }
        out.push(EndpointSubset {
            addresses: (!ready.is_empty()).then_some(ready),
            not_ready_addresses: (!not_ready.is_empty()).then_some(not_ready),
            ports: Some(
                ports
                    .into_iter()
                    .map(|p| EndpointPort {
                        name: (!p.name.is_empty()).then_some(p.name),
                        port: p.port,
                        protocol: Some(p.protocol),
                        app_protocol: p.app_protocol,
                    })
                    .collect(),
            ),
        });
    }
    (!out.is_empty()).then_some(out)
}

/// The Endpoints `svc` should have, given every pod of its namespace.
pub fn desired_endpoints(svc: &Service, pods: &[std::sync::Arc<Pod>]) -> Endpoints {
    let namespace = svc.metadata.namespace.clone().unwrap_or_default();
    let eps = desired::endpoints(svc, pods.iter().map(|p| p.as_ref()), false);
    let mut labels = service_labels(svc);
    labels.insert(SKIP_MIRROR_LABEL.into(), "true".into());
    let annotations = desired::last_change_trigger_time(svc, pods.iter().map(|p| p.as_ref()))
        .map(|t| BTreeMap::from([(TRIGGER_TIME_ANNOTATION.to_string(), t)]));
    Endpoints {
        metadata: ObjectMeta {
            name: svc.metadata.name.clone(),
            namespace: Some(namespace.clone()),
            labels: Some(labels),
            annotations,
            ..Default::default()
        },
        subsets: subsets(eps, &namespace),
    }
}

/// Whether `existing` differs from `desired` in what the controller owns:
/// subsets or labels (the trigger-time annotation alone never causes a write).
pub fn differs(existing: &Endpoints, desired: &Endpoints) -> bool {
    let empty = |s: &Option<Vec<EndpointSubset>>| s.as_ref().is_none_or(|v| v.is_empty());
    let subsets_differ = if empty(&existing.subsets) && empty(&desired.subsets) { false } else { existing.subsets != desired.subsets };
    subsets_differ || existing.metadata.labels.clone().unwrap_or_default() != desired.metadata.labels.clone().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::endpoints::desired::tests::{pod, service};
    use serde_json::json;
    use std::sync::Arc;

    #[test]
    fn ready_and_not_ready_pods_share_one_subset_with_the_service_ports() {
        let svc = service("web", json!({"app": "web"}), json!([{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}]));
        let pods = vec![Arc::new(pod("a", "10.1.0.1", true, json!({"app": "web"}))), Arc::new(pod("b", "10.1.0.2", false, json!({"app": "web"})))];
        let ep = desired_endpoints(&svc, &pods);
        let v = serde_json::to_value(&ep).unwrap();
        assert_eq!(v["metadata"]["labels"], json!({"app": "web", "endpointslice.kubernetes.io/skip-mirror": "true"}));
        assert_eq!(v["subsets"][0]["addresses"][0]["ip"], "10.1.0.1");
        assert_eq!(v["subsets"][0]["addresses"][0]["targetRef"], json!({"kind": "Pod", "namespace": "default", "name": "a", "uid": "uid-a"}));
        assert_eq!(v["subsets"][0]["notReadyAddresses"][0]["ip"], "10.1.0.2");
        assert_eq!(v["subsets"][0]["ports"], json!([{"name": "http", "port": 8080, "protocol": "TCP"}]));
    }

    #[test]
    fn no_pods_means_no_subsets_and_only_subsets_or_labels_cause_writes() {
        let svc = service("web", json!({"app": "web"}), json!([{"port": 80}]));
        let empty = desired_endpoints(&svc, &[]);
        assert!(empty.subsets.is_none());
        let mut existing = empty.clone();
        existing.metadata.annotations = None;
        existing.subsets = Some(vec![]);
        assert!(!differs(&existing, &empty));
        let one = desired_endpoints(&svc, &[Arc::new(pod("a", "10.1.0.1", true, json!({"app": "web"})))]);
        assert!(differs(&existing, &one));
    }
}
