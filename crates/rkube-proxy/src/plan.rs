//! What each service port needs, independent of the packet-filter backend.
//!
//! Follows upstream `pkg/proxy/topology.go` (`CategorizeEndpoints`) and the
//! policy part at the top of the iptables proxier's per-service loop: which
//! endpoints serve Cluster and Local traffic policy, whether internal/external
//! traffic has endpoints, and which per-service chains exist. An iptables and
//! an nftables writer render the same [`ServicePortPlan`].
//!
//! Endpoint choice: Ready endpoints, falling back (separately for Cluster and
//! Local) to Serving+Terminating ones when none is Ready. Zone hints are used
//! when every ready endpoint has one and one names this node's zone. Node hints
//! (`PreferSameTrafficDistribution`, alpha in 1.33) are ignored.

use crate::chains::Chain;
use crate::model::{EndpointInfo, ServicePortInfo};

/// Where traffic that has no usable endpoint goes (filter table).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoEndpointsTarget {
    /// The service has no endpoints at all: `REJECT` (the client sees "connection refused").
    Reject,
    /// A Local policy has no local endpoints: `DROP`.
    Drop,
}

impl NoEndpointsTarget {
    /// iptables target name.
    pub fn target(self) -> &'static str {
        match self {
            NoEndpointsTarget::Reject => "REJECT",
            NoEndpointsTarget::Drop => "DROP",
        }
    }
}

/// The rules one service port needs.
#[derive(Debug, Clone)]
pub struct ServicePortPlan<'a> {
    /// The service port.
    pub svc: &'a ServicePortInfo,
    /// Endpoints for Cluster traffic policy (`KUBE-SVC-`).
    pub cluster_endpoints: Vec<&'a EndpointInfo>,
    /// Endpoints for Local traffic policy (`KUBE-SVL-`).
    pub local_endpoints: Vec<&'a EndpointInfo>,
    /// Union of the two: every endpoint that gets a `KUBE-SEP-` chain, sorted by `ip:port`.
    pub all_reachable: Vec<&'a EndpointInfo>,
    /// Some usable endpoint exists anywhere in the cluster.
    pub has_endpoints: bool,
    /// `KUBE-SVC-` chain is written.
    pub uses_cluster_chain: bool,
    /// `KUBE-SVL-` chain is written.
    pub uses_local_chain: bool,
    /// Chain ClusterIP traffic jumps to (SVC, or SVL with internalTrafficPolicy Local).
    pub internal_chain: &'a Chain,
    /// ClusterIP traffic has endpoints.
    pub has_internal_endpoints: bool,
    /// Chain external traffic ends in after short-circuiting (SVC or SVL).
    pub external_policy_chain: &'a Chain,
    /// External traffic has endpoints.
    pub has_external_endpoints: bool,
    /// `KUBE-EXT-` chain is written.
    pub uses_external_chain: bool,
    /// `KUBE-FW-` chain is written (loadBalancerSourceRanges in use).
    pub uses_firewall_chain: bool,
    /// Chain LoadBalancer-IP traffic jumps to (EXT, or FW with source ranges).
    pub load_balancer_chain: &'a Chain,
    /// Filter target for ClusterIP traffic without endpoints.
    pub internal_no_endpoints: Option<NoEndpointsTarget>,
    /// Filter target for external traffic without endpoints.
    pub external_no_endpoints: Option<NoEndpointsTarget>,
}

impl<'a> ServicePortPlan<'a> {
    /// Compute the plan for `svc` with its endpoints on node `node_name` in `zone`.
    pub fn new(svc: &'a ServicePortInfo, endpoints: &'a [EndpointInfo], zone: Option<&str>) -> Self {
        let (cluster_endpoints, local_endpoints, all_reachable, has_endpoints) =
            categorize_endpoints(endpoints, svc, zone);
        let chains = &svc.chains;
        let uses_cluster_chain = !cluster_endpoints.is_empty() && svc.uses_cluster_endpoints();
        let uses_local_chain = !local_endpoints.is_empty() && svc.uses_local_endpoints();

        let (internal_chain, has_internal_endpoints) = if svc.internal_policy_local {
            (&chains.local, has_endpoints && !local_endpoints.is_empty())
        } else {
            (&chains.cluster, has_endpoints)
        };
        let (external_policy_chain, has_external_endpoints) = if svc.external_policy_local {
            (&chains.local, has_endpoints && !local_endpoints.is_empty())
        } else {
            (&chains.cluster, has_endpoints)
        };
        let uses_external_chain = has_endpoints && svc.externally_accessible();
        let uses_firewall_chain = has_endpoints
            && !svc.load_balancer_vips.is_empty()
            && !svc.load_balancer_source_ranges.is_empty();
        let load_balancer_chain = if uses_firewall_chain { &chains.firewall } else { &chains.external };

        let (internal_no_endpoints, external_no_endpoints) = if !has_endpoints {
            (Some(NoEndpointsTarget::Reject), Some(NoEndpointsTarget::Reject))
        } else {
            (
                (!has_internal_endpoints).then_some(NoEndpointsTarget::Drop),
                (!has_external_endpoints).then_some(NoEndpointsTarget::Drop),
            )
        };
        ServicePortPlan {
            svc,
            cluster_endpoints,
            local_endpoints,
            all_reachable,
            has_endpoints,
            uses_cluster_chain,
            uses_local_chain,
            internal_chain,
            has_internal_endpoints,
            external_policy_chain,
            has_external_endpoints,
            uses_external_chain,
            uses_firewall_chain,
            load_balancer_chain,
            internal_no_endpoints,
            external_no_endpoints,
        }
    }

    /// Every per-service nat chain this plan writes (SVC, SVL, EXT, FW, SEPs).
    pub fn chains(&self) -> impl Iterator<Item = &'a Chain> + '_ {
        let c = &self.svc.chains;
        [
            (self.uses_external_chain, &c.external),
            (self.uses_firewall_chain, &c.firewall),
            (self.uses_cluster_chain, &c.cluster),
            (self.uses_local_chain, &c.local),
        ]
        .into_iter()
        .filter_map(|(used, chain)| used.then_some(chain))
        .chain(self.all_reachable.iter().map(|ep| &ep.chain))
    }
}

type Categorized<'a> = (Vec<&'a EndpointInfo>, Vec<&'a EndpointInfo>, Vec<&'a EndpointInfo>, bool);

/// Upstream `CategorizeEndpoints`: (cluster, local, all reachable, has any endpoints).
pub fn categorize_endpoints<'a>(
    endpoints: &'a [EndpointInfo],
    svc: &ServicePortInfo,
    zone: Option<&str>,
) -> Categorized<'a> {
    let mut cluster: Vec<&EndpointInfo> = Vec::new();
    let mut has_any = false;
    let mut topology_in_use = false;
    if svc.uses_cluster_endpoints() {
        topology_in_use = zone_hints_apply(endpoints, zone);
        cluster = endpoints
            .iter()
            .filter(|ep| ep.ready && (!topology_in_use || zone.is_some_and(|z| ep.zone_hints.iter().any(|h| h == z))))
            .collect();
        if cluster.is_empty() {
            cluster = endpoints.iter().filter(|ep| ep.serving && ep.terminating).collect();
        }
        has_any = !cluster.is_empty();
    }
    if !svc.uses_local_endpoints() {
        let all = cluster.clone();
        return (cluster, Vec::new(), all, has_any);
    }

    let mut has_local_ready = false;
    let mut has_local_serving_terminating = false;
    for ep in endpoints {
        if ep.ready {
            has_any = true;
            has_local_ready |= ep.is_local;
        } else if ep.serving && ep.terminating {
            has_any = true;
            has_local_serving_terminating |= ep.is_local;
        }
    }
    let mut use_serving_terminating = false;
    let local: Vec<&EndpointInfo> = if has_local_ready {
        endpoints.iter().filter(|ep| ep.is_local && ep.ready).collect()
    } else if has_local_serving_terminating {
        use_serving_terminating = true;
        endpoints.iter().filter(|ep| ep.is_local && ep.serving && ep.terminating).collect()
    } else {
        Vec::new()
    };

    if !svc.uses_cluster_endpoints() {
        let all = local.clone();
        return (cluster, local, all, has_any);
    }
    let all = if !topology_in_use && !use_serving_terminating {
        // cluster holds every ready endpoint, a superset of local.
        cluster.clone()
    } else {
        let mut merged: Vec<&EndpointInfo> = cluster.iter().chain(local.iter()).copied().collect();
        merged.sort_by(|a, b| a.addr.cmp(&b.addr));
        merged.dedup_by(|a, b| a.addr == b.addr);
        merged
    };
    (cluster, local, all, has_any)
}

/// Upstream `topologyModeFromHints` for zones: every ready endpoint carries a zone
/// hint and at least one names this node's zone.
fn zone_hints_apply(endpoints: &[EndpointInfo], zone: Option<&str>) -> bool {
    let Some(zone) = zone else { return false };
    let mut all_have_hints = true;
    let mut one_for_zone = false;
    for ep in endpoints.iter().filter(|ep| ep.ready) {
        if ep.zone_hints.is_empty() {
            all_have_hints = false;
        } else if ep.zone_hints.iter().any(|h| h == zone) {
            one_for_zone = true;
        }
    }
    all_have_hints && one_for_zone
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::{endpoint_slice, service, with_external_policy_local, with_node_port, Ep};
    use crate::model::{self, NamespacedName};

    fn plan_inputs(
        svc: k8s_openapi::api::core::v1::Service,
        eps: &[Ep],
    ) -> (ServicePortInfo, Vec<EndpointInfo>) {
        let ports = model::service_ports(&svc);
        let nn = NamespacedName::new("ns", "a");
        let slice = endpoint_slice("ns", "a", "a-1", "http", 80, eps);
        let per_slice = model::slice_endpoints(&nn, &slice, "node-a");
        let merged = model::merge_slices([&per_slice]);
        let eps = merged.into_values().next().unwrap_or_default();
        (ports.into_iter().next().expect("one port"), eps)
    }

    #[test]
    fn terminating_serving_endpoints_used_only_when_none_ready() {
        let (svc, eps) = plan_inputs(
            service("ns", "a", "10.96.0.1", "http", 80),
            &[Ep::ready("10.0.0.1"), Ep::terminating_serving("10.0.0.2"), Ep::terminating_not_serving("10.0.0.3")],
        );
        let plan = ServicePortPlan::new(&svc, &eps, None);
        let addrs: Vec<&str> = plan.cluster_endpoints.iter().map(|e| e.addr.as_str()).collect();
        assert_eq!(addrs, ["10.0.0.1:80"]);

        let (svc, eps) = plan_inputs(
            service("ns", "a", "10.96.0.1", "http", 80),
            &[Ep::terminating_serving("10.0.0.2"), Ep::terminating_not_serving("10.0.0.3")],
        );
        let plan = ServicePortPlan::new(&svc, &eps, None);
        let addrs: Vec<&str> = plan.cluster_endpoints.iter().map(|e| e.addr.as_str()).collect();
        assert_eq!(addrs, ["10.0.0.2:80"]);
        assert!(plan.has_endpoints);
    }

    #[test]
    fn no_usable_endpoints_rejects_internal_and_external() {
        let (svc, eps) = plan_inputs(
            with_node_port(service("ns", "a", "10.96.0.1", "http", 80), 30080),
            &[Ep::terminating_not_serving("10.0.0.3")],
        );
        let plan = ServicePortPlan::new(&svc, &eps, None);
        assert!(!plan.has_endpoints);
        assert_eq!(plan.internal_no_endpoints, Some(NoEndpointsTarget::Reject));
        assert_eq!(plan.external_no_endpoints, Some(NoEndpointsTarget::Reject));
        assert_eq!(plan.chains().count(), 0);
    }

    #[test]
    fn external_policy_local_without_local_endpoints_drops_external_only() {
        let svc = with_external_policy_local(with_node_port(service("ns", "a", "10.96.0.1", "http", 80), 30080), 0);
        let (svc, eps) = plan_inputs(svc, &[Ep::ready("10.0.0.1").on("node-b")]);
        let plan = ServicePortPlan::new(&svc, &eps, None);
        assert!(plan.has_internal_endpoints);
        assert_eq!(plan.internal_no_endpoints, None);
        assert_eq!(plan.external_no_endpoints, Some(NoEndpointsTarget::Drop));
        assert!(plan.uses_external_chain && plan.uses_cluster_chain && !plan.uses_local_chain);
    }
}
