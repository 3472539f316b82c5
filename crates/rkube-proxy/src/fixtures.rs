//! Builders for Service and EndpointSlice objects, shared by unit tests,
//! integration tests and the benchmark (like upstream's `makeTestService` /
//! `makeTestEndpointSlice`). Not used by the proxy itself.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    ClientIPConfig, LoadBalancerIngress, LoadBalancerStatus, Service, ServicePort, ServiceSpec,
    ServiceStatus, SessionAffinityConfig,
};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::model::LABEL_SERVICE_NAME;

/// A `ClusterIP` Service `ns/name` at `cluster_ip` with one TCP port `port_name`/`port`.
pub fn service(ns: &str, name: &str, cluster_ip: &str, port_name: &str, port: i32) -> Service {
    Service {
        metadata: ObjectMeta { namespace: Some(ns.into()), name: Some(name.into()), ..Default::default() },
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".into()),
            cluster_ip: Some(cluster_ip.into()),
            cluster_ips: Some(vec![cluster_ip.into()]),
            ports: Some(vec![ServicePort {
                name: Some(port_name.into()),
                port,
                protocol: Some("TCP".into()),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        status: None,
    }
}

/// Mutable access to a Service's spec (created if absent).
pub fn spec_mut(svc: &mut Service) -> &mut ServiceSpec {
    svc.spec.get_or_insert_with(Default::default)
}

/// Make the service `NodePort` with node port `node_port` on its first port.
pub fn with_node_port(mut svc: Service, node_port: i32) -> Service {
    let spec = spec_mut(&mut svc);
    spec.type_ = Some("NodePort".into());
    if let Some(p) = spec.ports.as_mut().and_then(|p| p.first_mut()) {
        p.node_port = Some(node_port);
    }
    svc
}

/// Make the service `LoadBalancer` with node port `node_port` and ingress IPs `vips`.
pub fn with_load_balancer(svc: Service, node_port: i32, vips: &[&str]) -> Service {
    let mut svc = with_node_port(svc, node_port);
    spec_mut(&mut svc).type_ = Some("LoadBalancer".into());
    svc.status = Some(ServiceStatus {
        load_balancer: Some(LoadBalancerStatus {
            ingress: Some(
                vips.iter().map(|ip| LoadBalancerIngress { ip: Some((*ip).into()), ..Default::default() }).collect(),
            ),
        }),
        ..Default::default()
    });
    svc
}

/// Set `spec.externalIPs`.
pub fn with_external_ips(mut svc: Service, ips: &[&str]) -> Service {
    spec_mut(&mut svc).external_ips = Some(ips.iter().map(|s| (*s).into()).collect());
    svc
}

/// Set `externalTrafficPolicy: Local` (and `healthCheckNodePort` if non-zero).
pub fn with_external_policy_local(mut svc: Service, health_check_node_port: i32) -> Service {
    let spec = spec_mut(&mut svc);
    spec.external_traffic_policy = Some("Local".into());
    if health_check_node_port != 0 {
        spec.health_check_node_port = Some(health_check_node_port);
    }
    svc
}

/// Set `internalTrafficPolicy: Local`.
pub fn with_internal_policy_local(mut svc: Service) -> Service {
    spec_mut(&mut svc).internal_traffic_policy = Some("Local".into());
    svc
}

/// Set `sessionAffinity: ClientIP` with the given timeout.
pub fn with_client_ip_affinity(mut svc: Service, timeout_seconds: i32) -> Service {
    let spec = spec_mut(&mut svc);
    spec.session_affinity = Some("ClientIP".into());
    spec.session_affinity_config = Some(SessionAffinityConfig {
        client_ip: Some(ClientIPConfig { timeout_seconds: Some(timeout_seconds) }),
    });
    svc
}

/// Set `loadBalancerSourceRanges`.
pub fn with_source_ranges(mut svc: Service, ranges: &[&str]) -> Service {
    spec_mut(&mut svc).load_balancer_source_ranges = Some(ranges.iter().map(|s| (*s).into()).collect());
    svc
}

/// One endpoint of a slice: address, conditions and node.
#[derive(Debug, Clone)]
pub struct Ep {
    /// IPv4 address.
    pub ip: String,
    /// `conditions.ready`.
    pub ready: Option<bool>,
    /// `conditions.serving`.
    pub serving: Option<bool>,
    /// `conditions.terminating`.
    pub terminating: Option<bool>,
    /// `nodeName`.
    pub node: Option<String>,
}

impl Ep {
    /// A ready endpoint (conditions left unset, which means ready).
    pub fn ready(ip: &str) -> Self {
        Ep { ip: ip.into(), ready: None, serving: None, terminating: None, node: None }
    }

    /// A terminating endpoint that is still serving (`ready=false, serving=true, terminating=true`).
    pub fn terminating_serving(ip: &str) -> Self {
        Ep { ip: ip.into(), ready: Some(false), serving: Some(true), terminating: Some(true), node: None }
    }

    /// A terminating endpoint that no longer serves.
    pub fn terminating_not_serving(ip: &str) -> Self {
        Ep { ip: ip.into(), ready: Some(false), serving: Some(false), terminating: Some(true), node: None }
    }

    /// Place the endpoint on `node`.
    pub fn on(mut self, node: &str) -> Self {
        self.node = Some(node.into());
        self
    }
}

/// An IPv4 EndpointSlice `slice` of service `ns/svc` with one TCP port.
pub fn endpoint_slice(ns: &str, svc: &str, slice: &str, port_name: &str, port: i32, eps: &[Ep]) -> EndpointSlice {
    EndpointSlice {
        metadata: ObjectMeta {
            namespace: Some(ns.into()),
            name: Some(slice.into()),
            labels: Some(BTreeMap::from([(LABEL_SERVICE_NAME.to_string(), svc.to_string())])),
            ..Default::default()
        },
        address_type: "IPv4".into(),
        endpoints: eps
            .iter()
            .map(|e| Endpoint {
                addresses: vec![e.ip.clone()],
                conditions: Some(EndpointConditions { ready: e.ready, serving: e.serving, terminating: e.terminating }),
                node_name: e.node.clone(),
                ..Default::default()
            })
            .collect(),
        ports: Some(vec![EndpointPort {
            name: Some(port_name.into()),
            port: Some(port),
            protocol: Some("TCP".into()),
            ..Default::default()
        }]),
    }
}
