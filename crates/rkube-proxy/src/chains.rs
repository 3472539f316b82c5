//! iptables chain names: kube-proxy's fixed chains and its hashed per-service ones.
//!
//! Follows upstream `pkg/proxy/iptables/proxier.go` (`portProtoHash`,
//! `servicePortPolicyClusterChain`, `servicePortEndpointChainName`, …): the hash
//! is the first 16 characters of the standard (padded, upper-case) base32
//! encoding of `sha256(servicePortName + protocol)`; endpoint chains also hash
//! the endpoint's `ip:port`. Names stay under iptables' 28-character limit.

use std::fmt;
use std::sync::Arc;

use sha2::{Digest, Sha256};

use crate::model::{Protocol, ServicePortChains};

/// An iptables chain name; cheap to clone (shared string) and cheap to hash: the
/// name's FNV-1a hash is computed once, so sets of tens of thousands of chains
/// (one per service and endpoint) are built and probed without rehashing names.
/// Ordered by name.
#[derive(Debug, Clone)]
pub struct Chain {
    hash: u64,
    name: Arc<str>,
}

impl Chain {
    /// Wrap a name.
    pub fn new(name: &str) -> Self {
        let hash = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
        Chain { hash, name: Arc::from(name) }
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.name
    }
}

impl PartialEq for Chain {
    fn eq(&self, other: &Self) -> bool {
        self.hash == other.hash && self.name == other.name
    }
}

impl Eq for Chain {}

impl std::hash::Hash for Chain {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

impl PartialOrd for Chain {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Chain {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.name.cmp(&other.name)
    }
}

impl fmt::Display for Chain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}

/// `KUBE-SERVICES` (nat and filter): entry point for service IPs.
pub const KUBE_SERVICES: &str = "KUBE-SERVICES";
/// `KUBE-EXTERNAL-SERVICES` (filter): rejects/drops for external IPs without endpoints.
pub const KUBE_EXTERNAL_SERVICES: &str = "KUBE-EXTERNAL-SERVICES";
/// `KUBE-NODEPORTS` (nat and filter).
pub const KUBE_NODEPORTS: &str = "KUBE-NODEPORTS";
/// `KUBE-POSTROUTING` (nat): masquerades marked traffic.
pub const KUBE_POSTROUTING: &str = "KUBE-POSTROUTING";
/// `KUBE-MARK-MASQ` (nat): marks traffic for masquerade.
pub const KUBE_MARK_MASQ: &str = "KUBE-MARK-MASQ";
/// `KUBE-FORWARD` (filter).
pub const KUBE_FORWARD: &str = "KUBE-FORWARD";
/// `KUBE-PROXY-FIREWALL` (filter): loadBalancerSourceRanges drops.
pub const KUBE_PROXY_FIREWALL: &str = "KUBE-PROXY-FIREWALL";
/// `KUBE-PROXY-CANARY` (mangle, nat, filter): existence shows the tables were not flushed.
pub const KUBE_PROXY_CANARY: &str = "KUBE-PROXY-CANARY";

/// Prefix of Cluster-policy service chains.
pub const PREFIX_SVC: &str = "KUBE-SVC-";
/// Prefix of Local-policy service chains.
pub const PREFIX_SVL: &str = "KUBE-SVL-";
/// Prefix of external-traffic chains.
pub const PREFIX_EXT: &str = "KUBE-EXT-";
/// Prefix of firewall chains.
pub const PREFIX_FW: &str = "KUBE-FW-";
/// Prefix of endpoint chains.
pub const PREFIX_SEP: &str = "KUBE-SEP-";

/// Whether a nat chain is a per-service or per-endpoint chain owned by the proxy
/// (upstream `isServiceChainName`); only those are ever deleted as stale.
pub fn is_service_chain(name: &str) -> bool {
    [PREFIX_SVC, PREFIX_SVL, PREFIX_EXT, PREFIX_FW, PREFIX_SEP].iter().any(|p| name.starts_with(p))
}

fn hash16(input: &[&str]) -> String {
    let mut h = Sha256::new();
    for part in input {
        h.update(part.as_bytes());
    }
    let digest = h.finalize();
    let mut encoded = base32::encode(base32::Alphabet::Rfc4648 { padding: true }, &digest);
    encoded.truncate(16);
    encoded
}

/// The four per-service-port chain names for `ns/svc:port` and protocol.
pub fn service_port_chains(service_port_name: &str, protocol: Protocol) -> ServicePortChains {
    let h = hash16(&[service_port_name, protocol.lower()]);
    ServicePortChains {
        cluster: Chain::new(&format!("{PREFIX_SVC}{h}")),
        local: Chain::new(&format!("{PREFIX_SVL}{h}")),
        external: Chain::new(&format!("{PREFIX_EXT}{h}")),
        firewall: Chain::new(&format!("{PREFIX_FW}{h}")),
    }
}

/// `KUBE-SEP-<h>` for an endpoint `ip:port` of a service port.
pub fn endpoint_chain(service_port_name: &str, protocol: Protocol, endpoint: &str) -> Chain {
    Chain::new(&format!("{PREFIX_SEP}{}", hash16(&[service_port_name, protocol.lower(), endpoint])))
}

#[cfg(test)]
mod tests {
    use super::*;

    // Expected names are the ones upstream's TestOverallIPTablesRules shows for
    // the same inputs.
    #[test]
    fn chain_names_match_upstream_hashes() {
        let c = service_port_chains("ns1/svc1:p80", Protocol::Tcp);
        assert_eq!(c.cluster.as_str(), "KUBE-SVC-XPGD46QRK7WJZT7O");
        let c5 = service_port_chains("ns5/svc5:p80", Protocol::Tcp);
        assert_eq!(c5.firewall.as_str(), "KUBE-FW-NUKIZ6OKUXPJNT4C");
        assert_eq!(c5.external.as_str(), "KUBE-EXT-NUKIZ6OKUXPJNT4C");
        assert_eq!(
            endpoint_chain("ns1/svc1:p80", Protocol::Tcp, "10.180.0.1:80").as_str(),
            "KUBE-SEP-SXIVWICOYRO3J4NJ"
        );
    }

    #[test]
    fn only_per_service_chains_count_as_service_chains() {
        assert!(is_service_chain("KUBE-SEP-SXIVWICOYRO3J4NJ"));
        assert!(is_service_chain("KUBE-FW-NUKIZ6OKUXPJNT4C"));
        assert!(!is_service_chain(KUBE_SERVICES));
        assert!(!is_service_chain("DOCKER"));
    }
}
