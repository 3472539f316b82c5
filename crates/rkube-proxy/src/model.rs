//! The proxy's view of Services and EndpointSlices.
//!
//! Follows upstream `pkg/proxy/serviceport.go`, `servicechangetracker.go`
//! (`newBaseServiceInfo`, `serviceToServiceMap`), `endpoint.go` and
//! `endpointslicecache.go` (`addEndpoints`): a [`Service`] becomes one
//! [`ServicePortInfo`] per port, and the EndpointSlices of a service become a
//! sorted, de-duplicated list of [`EndpointInfo`] per [`ServicePortName`].
//!
//! This is the IPv4 single-stack proxier: IPv6 addresses and IPv6/FQDN
//! EndpointSlices are ignored (upstream runs one proxier per IP family).

use std::collections::BTreeMap;
use std::fmt;
use std::net::Ipv4Addr;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;

use crate::chains::{self, Chain};

/// Errors converting API objects or flag values into the proxy model.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    /// A CIDR string was not `a.b.c.d/n` with `n <= 32`.
    #[error("invalid IPv4 CIDR {0:?}")]
    InvalidCidr(String),
    /// An EndpointSlice lacks the `kubernetes.io/service-name` label.
    #[error("EndpointSlice {namespace}/{name} has no kubernetes.io/service-name label")]
    NoServiceNameLabel {
        /// Namespace of the slice.
        namespace: String,
        /// Name of the slice.
        name: String,
    },
}

/// Result alias for this module.
pub type Result<T> = std::result::Result<T, Error>;

/// Label naming the Service an EndpointSlice belongs to (`discovery.LabelServiceName`).
pub const LABEL_SERVICE_NAME: &str = "kubernetes.io/service-name";
/// Annotation with the time of the change that triggered the EndpointSlice update
/// (`v1.EndpointsLastChangeTriggerTime`), RFC 3339.
pub const ANNOTATION_LAST_CHANGE_TRIGGER_TIME: &str = "endpoints.kubernetes.io/last-change-trigger-time";
/// Node label holding the node's zone (`v1.LabelTopologyZone`), used for topology hints.
pub const LABEL_TOPOLOGY_ZONE: &str = "topology.kubernetes.io/zone";
/// Session affinity timeout used when `sessionAffinityConfig` is absent
/// (`v1.DefaultClientIPServiceAffinitySeconds`).
pub const DEFAULT_CLIENT_IP_AFFINITY_SECONDS: u32 = 10800;

/// `namespace/name` of an object (apimachinery `types.NamespacedName`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NamespacedName {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
}

impl NamespacedName {
    /// Build from parts.
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self { namespace: namespace.into(), name: name.into() }
    }
}

impl fmt::Display for NamespacedName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// L4 protocol of a service port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Protocol {
    /// TCP (the API default).
    Tcp,
    /// UDP.
    Udp,
    /// SCTP.
    Sctp,
}

impl Protocol {
    /// Parse the API spelling (`TCP`, `UDP`, `SCTP`); absent means TCP (API defaulting).
    pub fn from_api(value: Option<&str>) -> Option<Self> {
        match value.unwrap_or("TCP") {
            "TCP" => Some(Protocol::Tcp),
            "UDP" => Some(Protocol::Udp),
            "SCTP" => Some(Protocol::Sctp),
            _ => None,
        }
    }

    /// Lower-case spelling used in iptables rules and chain hashes (`tcp`).
    pub fn lower(self) -> &'static str {
        match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
            Protocol::Sctp => "sctp",
        }
    }
}

/// One port of one service (upstream `proxy.ServicePortName`).
///
/// Displays as `ns/svc:port` (or `ns/svc` for an unnamed port), the string
/// upstream hashes into chain names and prints in rule comments.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ServicePortName {
    /// The service.
    pub service: NamespacedName,
    /// The port's name (`""` for a single unnamed port).
    pub port: String,
    /// The port's protocol.
    pub protocol: Protocol,
}

impl fmt::Display for ServicePortName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.port.is_empty() {
            write!(f, "{}", self.service)
        } else {
            write!(f, "{}:{}", self.service, self.port)
        }
    }
}

/// An IPv4 CIDR (`a.b.c.d/n`), displayed with host bits cleared as iptables prints it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Ipv4Cidr {
    addr: Ipv4Addr,
    prefix: u8,
}

impl Ipv4Cidr {
    /// Parse `a.b.c.d/n` (surrounding whitespace allowed, as upstream tolerates in
    /// `loadBalancerSourceRanges`). A bare address is a `/32`.
    pub fn parse(s: &str) -> Result<Self> {
        let s = s.trim();
        let (addr, prefix) = match s.split_once('/') {
            Some((a, p)) => (a, p.parse::<u8>().map_err(|_| Error::InvalidCidr(s.to_string()))?),
            None => (s, 32),
        };
        let addr: Ipv4Addr = addr.parse().map_err(|_| Error::InvalidCidr(s.to_string()))?;
        if prefix > 32 {
            return Err(Error::InvalidCidr(s.to_string()));
        }
        Ok(Self { addr: Ipv4Addr::from(u32::from(addr) & Self::mask(prefix)), prefix })
    }

    fn mask(prefix: u8) -> u32 {
        if prefix == 0 {
            0
        } else {
            u32::MAX << (32 - u32::from(prefix))
        }
    }

    /// Whether `ip` lies inside this CIDR.
    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        u32::from(ip) & Self::mask(self.prefix) == u32::from(self.addr)
    }
}

impl fmt::Display for Ipv4Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

/// Everything the rule writers need to know about one service port
/// (upstream `BaseServicePortInfo` plus the iptables proxier's cached chain names).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServicePortInfo {
    /// Which service port this is.
    pub name: ServicePortName,
    /// `name` formatted once (`ns/svc:port`), used in comments.
    pub name_string: String,
    /// The IPv4 cluster IP.
    pub cluster_ip: Ipv4Addr,
    /// The service port.
    pub port: u16,
    /// The node port, 0 if none.
    pub node_port: u16,
    /// IPv4 `spec.externalIPs`.
    pub external_ips: Vec<Ipv4Addr>,
    /// IPv4 `status.loadBalancer.ingress[].ip` in VIP mode.
    pub load_balancer_vips: Vec<Ipv4Addr>,
    /// IPv4 `spec.loadBalancerSourceRanges` (invalid entries dropped).
    pub load_balancer_source_ranges: Vec<Ipv4Cidr>,
    /// `Some(timeoutSeconds)` when `sessionAffinity: ClientIP`.
    pub session_affinity_seconds: Option<u32>,
    /// `externalTrafficPolicy: Local` on an externally accessible service.
    pub external_policy_local: bool,
    /// `internalTrafficPolicy: Local`.
    pub internal_policy_local: bool,
    /// `spec.healthCheckNodePort` for Local LoadBalancer services, 0 otherwise.
    pub health_check_node_port: u16,
    /// The per-service-port chains (names only; which ones exist depends on endpoints).
    pub chains: ServicePortChains,
}

/// Names of a service port's chains (`KUBE-SVC-`, `KUBE-SVL-`, `KUBE-EXT-`, `KUBE-FW-`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServicePortChains {
    /// `KUBE-SVC-<h>`: Cluster-policy endpoints.
    pub cluster: Chain,
    /// `KUBE-SVL-<h>`: Local-policy endpoints.
    pub local: Chain,
    /// `KUBE-EXT-<h>`: external traffic entry.
    pub external: Chain,
    /// `KUBE-FW-<h>`: loadBalancerSourceRanges firewall.
    pub firewall: Chain,
}

impl ServicePortInfo {
    /// Upstream `ExternallyAccessible`: reachable by NodePort, LoadBalancer IP or external IP.
    pub fn externally_accessible(&self) -> bool {
        self.node_port != 0 || !self.load_balancer_vips.is_empty() || !self.external_ips.is_empty()
    }

    /// Upstream `UsesClusterEndpoints`.
    pub fn uses_cluster_endpoints(&self) -> bool {
        !self.internal_policy_local || self.externally_accessible()
    }

    /// Upstream `UsesLocalEndpoints`.
    pub fn uses_local_endpoints(&self) -> bool {
        self.internal_policy_local || (self.external_policy_local && self.externally_accessible())
    }
}

/// One backend of a service port (upstream `BaseEndpointInfo` plus its `KUBE-SEP-` chain).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointInfo {
    /// Endpoint IP (the first address of the slice endpoint).
    pub ip: Ipv4Addr,
    /// Target port.
    pub port: u16,
    /// `ip:port`, the string upstream calls `Endpoint.String()`.
    pub addr: String,
    /// The endpoint runs on this node (`nodeName == --hostname-override`).
    pub is_local: bool,
    /// `conditions.ready` (absent = true).
    pub ready: bool,
    /// `conditions.serving` (absent = true).
    pub serving: bool,
    /// `conditions.terminating` (absent = false).
    pub terminating: bool,
    /// `hints.forZones[].name`.
    pub zone_hints: Vec<String>,
    /// `hints.forNodes[].name`.
    pub node_hints: Vec<String>,
    /// `KUBE-SEP-<h>`.
    pub chain: Chain,
}

/// Whether a Service gets proxy rules at all (upstream `ShouldSkipService`):
/// headless (`clusterIP: None`), IP-less and `ExternalName` services are skipped.
fn should_skip(service: &Service) -> bool {
    let Some(spec) = service.spec.as_ref() else { return true };
    if spec.type_.as_deref() == Some("ExternalName") {
        return true;
    }
    !matches!(spec.cluster_ip.as_deref(), Some(ip) if !ip.is_empty() && ip != "None")
}

/// The IPv4 cluster IP of a service (`clusterIPs` first, then `clusterIP`).
fn ipv4_cluster_ip(service: &Service) -> Option<Ipv4Addr> {
    let spec = service.spec.as_ref()?;
    spec.cluster_ips
        .iter()
        .flatten()
        .chain(spec.cluster_ip.iter())
        .find_map(|ip| ip.parse::<Ipv4Addr>().ok())
}

/// Convert a Service into its ports' infos (upstream `serviceToServiceMap`), sorted by
/// port name. Returns an empty list for services the proxy does not handle.
pub fn service_ports(service: &Service) -> Vec<ServicePortInfo> {
    if should_skip(service) {
        return Vec::new();
    }
    let Some(cluster_ip) = ipv4_cluster_ip(service) else { return Vec::new() };
    let Some(spec) = service.spec.as_ref() else { return Vec::new() };
    let nn = NamespacedName::new(
        service.metadata.namespace.clone().unwrap_or_default(),
        service.metadata.name.clone().unwrap_or_default(),
    );
    let type_ = spec.type_.as_deref().unwrap_or("ClusterIP");
    let external_ips: Vec<Ipv4Addr> =
        spec.external_ips.iter().flatten().filter_map(|ip| ip.trim().parse().ok()).collect();
    // apiservice.ExternallyAccessible / ExternalPolicyLocal / NeedsHealthCheck.
    let externally_accessible_type = type_ == "LoadBalancer"
        || type_ == "NodePort"
        || (type_ == "ClusterIP" && !external_ips.is_empty());
    let external_policy_local =
        externally_accessible_type && spec.external_traffic_policy.as_deref() == Some("Local");
    let internal_policy_local = spec.internal_traffic_policy.as_deref() == Some("Local");
    let health_check_node_port = if type_ == "LoadBalancer" && external_policy_local {
        spec.health_check_node_port.and_then(|p| u16::try_from(p).ok()).unwrap_or(0)
    } else {
        0
    };
    let session_affinity_seconds = (spec.session_affinity.as_deref() == Some("ClientIP")).then(|| {
        spec.session_affinity_config
            .as_ref()
            .and_then(|c| c.client_ip.as_ref())
            .and_then(|c| c.timeout_seconds)
            .and_then(|t| u32::try_from(t).ok())
            .unwrap_or(DEFAULT_CLIENT_IP_AFFINITY_SECONDS)
    });
    let load_balancer_source_ranges: Vec<Ipv4Cidr> = spec
        .load_balancer_source_ranges
        .iter()
        .flatten()
        .filter_map(|r| Ipv4Cidr::parse(r).ok())
        .collect();
    let load_balancer_vips: Vec<Ipv4Addr> = service
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref())
        .into_iter()
        .flatten()
        // Proxy-mode load balancers handle the traffic themselves (proxyutil.IsVIPMode).
        .filter(|ing| matches!(ing.ip_mode.as_deref(), None | Some("VIP")))
        .filter_map(|ing| ing.ip.as_deref().and_then(|ip| ip.parse().ok()))
        .collect();

    let mut ports: Vec<ServicePortInfo> = spec
        .ports
        .iter()
        .flatten()
        .filter_map(|p| {
            let protocol = Protocol::from_api(p.protocol.as_deref())?;
            let port = u16::try_from(p.port).ok()?;
            let name = ServicePortName {
                service: nn.clone(),
                port: p.name.clone().unwrap_or_default(),
                protocol,
            };
            let name_string = name.to_string();
            let chains = chains::service_port_chains(&name_string, protocol);
            Some(ServicePortInfo {
                name,
                name_string,
                cluster_ip,
                port,
                node_port: p.node_port.and_then(|n| u16::try_from(n).ok()).unwrap_or(0),
                external_ips: external_ips.clone(),
                load_balancer_vips: load_balancer_vips.clone(),
                load_balancer_source_ranges: load_balancer_source_ranges.clone(),
                session_affinity_seconds,
                external_policy_local,
                internal_policy_local,
                health_check_node_port,
                chains,
            })
        })
        .collect();
    ports.sort_by(|a, b| a.name.cmp(&b.name));
    ports
}

/// The service an EndpointSlice belongs to (upstream `endpointSliceCacheKeys`).
pub fn slice_service(slice: &EndpointSlice) -> Result<NamespacedName> {
    let namespace = slice.metadata.namespace.clone().unwrap_or_default();
    let name = slice.metadata.name.clone().unwrap_or_default();
    match slice.metadata.labels.as_ref().and_then(|l| l.get(LABEL_SERVICE_NAME)) {
        Some(svc) if !svc.is_empty() && !namespace.is_empty() => Ok(NamespacedName::new(namespace, svc.clone())),
        _ => Err(Error::NoServiceNameLabel { namespace, name }),
    }
}

/// Endpoints of one slice grouped by service port name (unsorted; see [`merge_slices`]).
///
/// Only `addressType: IPv4` slices contribute. A port without a name counts as `""` and
/// without a protocol as TCP (API defaulting); ports without a number are ignored.
pub fn slice_endpoints(
    service: &NamespacedName,
    slice: &EndpointSlice,
    node_name: &str,
) -> BTreeMap<ServicePortName, Vec<EndpointInfo>> {
    let mut out: BTreeMap<ServicePortName, Vec<EndpointInfo>> = BTreeMap::new();
    if slice.address_type != "IPv4" {
        return out;
    }
    for port in slice.ports.iter().flatten() {
        let Some(protocol) = Protocol::from_api(port.protocol.as_deref()) else { continue };
        let Some(port_num) = port.port.and_then(|p| u16::try_from(p).ok()).filter(|p| *p != 0) else {
            continue;
        };
        let spn = ServicePortName {
            service: service.clone(),
            port: port.name.clone().unwrap_or_default(),
            protocol,
        };
        let spn_string = spn.to_string();
        let list = out.entry(spn).or_default();
        for ep in &slice.endpoints {
            let Some(ip) = ep.addresses.first().and_then(|a| a.parse::<Ipv4Addr>().ok()) else { continue };
            let cond = ep.conditions.as_ref();
            let ready = cond.and_then(|c| c.ready).unwrap_or(true);
            let addr = format!("{ip}:{port_num}");
            let chain = chains::endpoint_chain(&spn_string, protocol, &addr);
            list.push(EndpointInfo {
                ip,
                port: port_num,
                is_local: !node_name.is_empty() && ep.node_name.as_deref() == Some(node_name),
                ready,
                serving: cond.and_then(|c| c.serving).unwrap_or(ready),
                terminating: cond.and_then(|c| c.terminating).unwrap_or(false),
                zone_hints: ep
                    .hints
                    .as_ref()
                    .and_then(|h| h.for_zones.as_ref())
                    .map(|z| z.iter().map(|z| z.name.clone()).collect())
                    .unwrap_or_default(),
                node_hints: ep
                    .hints
                    .as_ref()
                    .and_then(|h| h.for_nodes.as_ref())
                    .map(|n| n.iter().map(|n| n.name.clone()).collect())
                    .unwrap_or_default(),
                addr,
                chain,
            });
        }
    }
    out
}

/// Merge per-slice endpoint lists into the service's endpoints: one entry per `ip:port`
/// (a non-terminating endpoint wins over a terminating duplicate), sorted by `ip:port`
/// string as upstream's `byEndpoint` does.
pub fn merge_slices<'a>(
    per_slice: impl IntoIterator<Item = &'a BTreeMap<ServicePortName, Vec<EndpointInfo>>>,
) -> BTreeMap<ServicePortName, Vec<EndpointInfo>> {
    let mut sets: BTreeMap<ServicePortName, BTreeMap<String, EndpointInfo>> = BTreeMap::new();
    for slice in per_slice {
        for (spn, eps) in slice {
            let set = sets.entry(spn.clone()).or_default();
            for ep in eps {
                let replace = match set.get(&ep.addr) {
                    None => true,
                    Some(_) => !ep.terminating,
                };
                if replace {
                    set.insert(ep.addr.clone(), ep.clone());
                }
            }
        }
    }
    sets.into_iter()
        .filter(|(_, set)| !set.is_empty())
        .map(|(spn, set)| (spn, set.into_values().collect()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_port_name_displays_like_upstream() {
        let nn = NamespacedName::new("ns1", "svc1");
        let named = ServicePortName { service: nn.clone(), port: "p80".into(), protocol: Protocol::Tcp };
        let unnamed = ServicePortName { service: nn, port: String::new(), protocol: Protocol::Udp };
        assert_eq!(named.to_string(), "ns1/svc1:p80");
        assert_eq!(unnamed.to_string(), "ns1/svc1");
    }

    #[test]
    fn cidr_parses_trims_and_masks_host_bits() {
        let c = Ipv4Cidr::parse(" 203.0.113.7/25").unwrap();
        assert_eq!(c.to_string(), "203.0.113.0/25");
        assert!(c.contains("203.0.113.100".parse().unwrap()));
        assert!(!c.contains("203.0.113.200".parse().unwrap()));
        assert!(Ipv4Cidr::parse("10.0.0.0/33").is_err());
        assert!(Ipv4Cidr::parse("nonsense").is_err());
    }
}
