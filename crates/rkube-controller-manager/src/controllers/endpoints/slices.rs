//! The discovery.k8s.io/v1 EndpointSlices of a Service (upstream
//! `pkg/controller/endpointslice`, `staging/.../endpointslice/reconciler.go`):
//! endpoints grouped by address type and resolved ports, at most
//! [`MAX_ENDPOINTS_PER_SLICE`] per slice, named `<service>-<random>`, owned
//! by the Service (so the garbage collector removes them with it), labelled
//! `kubernetes.io/service-name` and `endpointslice.kubernetes.io/managed-by`.
//! A Service with no endpoints gets one empty placeholder slice.
//!
//! Reconciling keeps slices whose content is already right, rewrites the
//! others in place, creates what is missing and deletes what is left over.
//! Not done: the `zone` of each endpoint (the node's
//! `topology.kubernetes.io/zone`) and traffic-distribution hints.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{ObjectReference, Pod, Service};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use super::desired::{self, ResolvedPort};
use super::legacy::{service_labels, TRIGGER_TIME_ANNOTATION};

/// `kubernetes.io/service-name`: the Service a slice belongs to.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// `endpointslice.kubernetes.io/managed-by`.
pub const MANAGED_BY_LABEL: &str = "endpointslice.kubernetes.io/managed-by";
/// This controller's value of [`MANAGED_BY_LABEL`].
pub const MANAGED_BY: &str = "endpointslice-controller.k8s.io";
/// Upstream's default `--max-endpoints-per-slice`.
pub const MAX_ENDPOINTS_PER_SLICE: usize = 100;

/// What one slice holds.
#[derive(Debug, Clone, PartialEq)]
pub struct SliceContent {
    /// `IPv4` or `IPv6`.
    pub address_type: String,
    /// The ports (`None` for the placeholder).
    pub ports: Option<Vec<EndpointPort>>,
    /// The endpoints.
    pub endpoints: Vec<Endpoint>,
}

/// A write the reconciler makes.
#[derive(Debug, Clone)]
pub enum Action {
    /// Create this slice (it has `generateName`).
    Create(EndpointSlice),
    /// Replace this slice (it carries the existing name and resourceVersion).
    Update(EndpointSlice),
    /// Delete the slice of this name.
    Delete(String),
}

fn endpoint_port(p: &ResolvedPort) -> EndpointPort {
    EndpointPort {
        name: Some(p.name.clone()),
        port: Some(p.port),
        protocol: Some(p.protocol.clone()),
        app_protocol: p.app_protocol.clone(),
    }
}

/// The slice contents a Service should have, given the pods of its namespace.
pub fn desired_contents(svc: &Service, pods: &[Arc<Pod>]) -> Vec<SliceContent> {
    let namespace = svc.metadata.namespace.clone().unwrap_or_default();
    let eps = desired::endpoints(svc, pods.iter().map(|p| p.as_ref()), true);
    let mut groups: BTreeMap<(bool, Vec<ResolvedPort>), Vec<Endpoint>> = BTreeMap::new();
    for ep in eps {
        let endpoint = Endpoint {
            addresses: vec![ep.ip.clone()],
            conditions: Some(EndpointConditions { ready: Some(ep.ready), serving: Some(ep.serving), terminating: Some(ep.terminating) }),
            hostname: ep.hostname.clone(),
            node_name: ep.node_name.clone(),
            target_ref: Some(ObjectReference {
                kind: Some("Pod".into()),
                namespace: Some(namespace.clone()),
                name: Some(ep.pod_name.clone()),
                uid: Some(ep.pod_uid.clone()),
                ..Default::default()
            }),
            ..Default::default()
        };
        groups.entry((ep.is_ipv6(), ep.ports.clone())).or_default().push(endpoint);
    }
    let mut out = Vec::new();
    for ((ipv6, ports), endpoints) in groups {
        for chunk in endpoints.chunks(MAX_ENDPOINTS_PER_SLICE) {
            out.push(SliceContent {
                address_type: if ipv6 { "IPv6" } else { "IPv4" }.into(),
                ports: Some(ports.iter().map(endpoint_port).collect()),
                endpoints: chunk.to_vec(),
            });
        }
    }
    if out.is_empty() {
        let ipv6 = svc.spec.as_ref().and_then(|s| s.ip_families.as_ref()).and_then(|f| f.first()).is_some_and(|f| f == "IPv6");
        out.push(SliceContent { address_type: if ipv6 { "IPv6" } else { "IPv4" }.into(), ports: None, endpoints: Vec::new() });
    }
    out
}

/// The labels of the Service's slices.
pub fn slice_labels(svc: &Service) -> BTreeMap<String, String> {
    let mut labels = service_labels(svc);
    labels.insert(SERVICE_NAME_LABEL.into(), svc.metadata.name.clone().unwrap_or_default());
    labels.insert(MANAGED_BY_LABEL.into(), MANAGED_BY.into());
    labels
}

fn owner(svc: &Service) -> OwnerReference {
    OwnerReference {
        api_version: "v1".into(),
        kind: "Service".into(),
        name: svc.metadata.name.clone().unwrap_or_default(),
        uid: svc.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

fn content_of(slice: &EndpointSlice) -> SliceContent {
    SliceContent {
        address_type: slice.address_type.clone(),
        ports: slice.ports.clone().filter(|p| !p.is_empty()),
        endpoints: slice.endpoints.clone(),
    }
}

fn build(svc: &Service, content: SliceContent, trigger_time: Option<&str>, base: Option<&EndpointSlice>) -> EndpointSlice {
    let name = svc.metadata.name.clone().unwrap_or_default();
    EndpointSlice {
        metadata: ObjectMeta {
            name: base.and_then(|b| b.metadata.name.clone()),
            generate_name: base.is_none().then(|| format!("{name}-")),
            namespace: svc.metadata.namespace.clone(),
            resource_version: base.and_then(|b| b.metadata.resource_version.clone()),
            labels: Some(slice_labels(svc)),
            annotations: trigger_time.map(|t| BTreeMap::from([(TRIGGER_TIME_ANNOTATION.to_string(), t.to_string())])),
            owner_references: Some(vec![owner(svc)]),
            ..Default::default()
        },
        address_type: content.address_type,
        endpoints: content.endpoints,
        ports: content.ports,
    }
}

/// The writes that turn `existing` (the Service's managed slices) into
/// `desired`: slices already holding a desired content (with the right
/// labels) are kept; the others are rewritten with the remaining contents;
/// then slices are created or deleted for the difference.
pub fn plan(svc: &Service, desired: Vec<SliceContent>, existing: &[Arc<EndpointSlice>], trigger_time: Option<&str>) -> Vec<Action> {
    let labels = slice_labels(svc);
    let mut unmatched: Vec<SliceContent> = Vec::new();
    let mut free: Vec<&EndpointSlice> = existing.iter().map(|s| s.as_ref()).collect();
    for content in desired {
        let found = free.iter().position(|s| content_of(s) == content && s.metadata.labels.as_ref() == Some(&labels));
        match found {
            Some(i) => {
                free.remove(i);
            }
            None => unmatched.push(content),
        }
    }
    let mut actions = Vec::new();
    let mut free = free.into_iter();
    for content in unmatched {
        match free.next() {
            Some(slice) => actions.push(Action::Update(build(svc, content, trigger_time, Some(slice)))),
            None => actions.push(Action::Create(build(svc, content, trigger_time, None))),
        }
    }
    actions.extend(free.filter_map(|s| s.metadata.name.clone()).map(Action::Delete));
    actions
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::endpoints::desired::tests::{pod, service};
    use serde_json::json;

    fn applied(actions: &[Action], existing: &mut Vec<Arc<EndpointSlice>>) {
        for (i, a) in actions.iter().enumerate() {
            match a {
                Action::Create(s) => {
                    let mut s = s.clone();
                    s.metadata.name = Some(format!("{}{i}", s.metadata.generate_name.clone().unwrap()));
                    existing.push(Arc::new(s));
                }
                Action::Update(s) => {
                    let pos = existing.iter().position(|e| e.metadata.name == s.metadata.name).unwrap();
                    existing[pos] = Arc::new(s.clone());
                }
                Action::Delete(name) => existing.retain(|e| e.metadata.name.as_ref() != Some(name)),
            }
        }
    }

    #[test]
    fn a_service_without_pods_gets_one_placeholder_and_a_steady_state_writes_nothing() {
        let svc = service("web", json!({"app": "web"}), json!([{"name": "http", "port": 80, "targetPort": 8080}]));
        let mut existing = Vec::new();
        let actions = plan(&svc, desired_contents(&svc, &[]), &existing, None);
        assert!(matches!(actions.as_slice(), [Action::Create(s)] if s.endpoints.is_empty() && s.ports.is_none()));
        applied(&actions, &mut existing);
        assert!(plan(&svc, desired_contents(&svc, &[]), &existing, None).is_empty());

        let pods = vec![Arc::new(pod("a", "10.1.0.1", true, json!({"app": "web"})))];
        let actions = plan(&svc, desired_contents(&svc, &pods), &existing, Some("2026-01-01T00:00:00Z"));
        assert!(matches!(actions.as_slice(), [Action::Update(_)]), "the placeholder is reused: {actions:?}");
        applied(&actions, &mut existing);
        let v = serde_json::to_value(existing[0].as_ref()).unwrap();
        assert_eq!(v["metadata"]["labels"]["kubernetes.io/service-name"], "web");
        assert_eq!(v["metadata"]["labels"]["endpointslice.kubernetes.io/managed-by"], "endpointslice-controller.k8s.io");
        assert_eq!(v["metadata"]["ownerReferences"][0]["kind"], "Service");
        assert_eq!(v["endpoints"][0]["conditions"], json!({"ready": true, "serving": true, "terminating": false}));
        assert_eq!(v["ports"], json!([{"name": "http", "port": 8080, "protocol": "TCP"}]));
        assert!(plan(&svc, desired_contents(&svc, &pods), &existing, None).is_empty());
    }

    #[test]
    fn more_than_a_hundred_endpoints_spread_over_slices_and_shrink_back() {
        let svc = service("web", json!({"app": "web"}), json!([{"port": 80}]));
        let pods: Vec<_> = (0..250).map(|i| Arc::new(pod(&format!("p{i}"), &format!("10.1.{}.{}", i / 200, i % 200), true, json!({"app": "web"})))).collect();
        let mut existing = Vec::new();
        let actions = plan(&svc, desired_contents(&svc, &pods), &existing, None);
        assert_eq!(actions.len(), 3);
        applied(&actions, &mut existing);
        assert_eq!(existing.iter().map(|s| s.endpoints.len()).sum::<usize>(), 250);
        assert!(existing.iter().all(|s| s.endpoints.len() <= MAX_ENDPOINTS_PER_SLICE));
        let actions = plan(&svc, desired_contents(&svc, &pods[..50]), &existing, None);
        applied(&actions, &mut existing);
        assert_eq!(existing.len(), 1);
        assert_eq!(existing[0].endpoints.len(), 50);
    }
}
