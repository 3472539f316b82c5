//! Rule writers: turn the tracked state into one backend's ruleset update.
//!
//! One sync engine drives any [`RuleWriter`]; [`iptables::IptablesWriter`]
//! writes `iptables-restore` input (kube-proxy's iptables mode), and an
//! nftables writer (KEP-3866) can implement the same trait from the same
//! [`crate::plan::ServicePortPlan`]s. A writer is pure: it reads a
//! [`SyncRequest`] and returns bytes plus bookkeeping, never touching the system.

pub mod iptables;

use std::collections::{BTreeSet, HashSet};
use std::net::Ipv4Addr;

use crate::chains::Chain;
use crate::model::{Ipv4Cidr, NamespacedName};
use crate::tracker::ChangeTracker;

/// Endpoint count above which rule comments on per-endpoint rules are dropped
/// (upstream `largeClusterEndpointsThreshold`).
pub const LARGE_CLUSTER_ENDPOINTS_THRESHOLD: usize = 1000;

/// Settings that shape the rules (from kube-proxy flags).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleConfig {
    /// `--cluster-cidr`: traffic from outside it to a ClusterIP is masqueraded, and
    /// pod traffic to external IPs of Local services is short-circuited.
    pub cluster_cidr: Option<Ipv4Cidr>,
    /// `--masquerade-all`: masquerade all ClusterIP traffic.
    pub masquerade_all: bool,
    /// Mark for masquerade, e.g. `0x4000` for `--iptables-masquerade-bit=14`.
    pub masquerade_mark: String,
    /// `--nodeport-addresses`; empty means every local address.
    pub node_port_addresses: Vec<Ipv4Cidr>,
    /// Add `--random-fully` to MASQUERADE (iptables ≥ 1.6.2).
    pub random_fully: bool,
    /// The node's IP, used to let the node itself reach LoadBalancer IPs with source ranges.
    pub node_ip: Option<Ipv4Addr>,
}

impl Default for RuleConfig {
    fn default() -> Self {
        Self {
            cluster_cidr: None,
            masquerade_all: false,
            masquerade_mark: masquerade_mark(14),
            node_port_addresses: Vec::new(),
            random_fully: true,
            node_ip: None,
        }
    }
}

/// Mark value for `--iptables-masquerade-bit` (upstream formats `1 << bit` as `%#08x`
/// and iptables prints it without leading zeros, which is what we write).
pub fn masquerade_mark(bit: u8) -> String {
    format!("{:#x}", 1u32 << u32::from(bit.min(31)))
}

/// Which per-service chains a sync writes.
#[derive(Debug, Clone, Copy)]
pub enum SyncMode<'a> {
    /// Every chain.
    Full,
    /// Only the per-service chains of these services (plus any service whose chains
    /// are not all known to exist); the top-level chains are always written whole.
    Partial {
        /// Services changed since the last successful restore.
        changed: &'a BTreeSet<NamespacedName>,
    },
}

/// Everything a writer reads for one sync.
#[derive(Debug, Clone, Copy)]
pub struct SyncRequest<'a> {
    /// Current services and endpoints.
    pub tracker: &'a ChangeTracker,
    /// Flags.
    pub config: &'a RuleConfig,
    /// Full or partial.
    pub mode: SyncMode<'a>,
    /// Per-service nat chains the last successful restore left in place.
    pub programmed_chains: &'a HashSet<Chain>,
    /// Per-service nat chains seen in the kernel (read before full syncs; may be empty).
    pub existing_chains: &'a HashSet<Chain>,
    /// Local addresses inside `--nodeport-addresses` (used only when that flag is set).
    pub node_ips: &'a [Ipv4Addr],
    /// Drop per-endpoint comments (more than [`LARGE_CLUSTER_ENDPOINTS_THRESHOLD`] endpoints).
    pub large_cluster_mode: bool,
}

/// A backend's rule generator.
pub trait RuleWriter {
    /// What the writer produces (e.g. `iptables-restore` input).
    type Output;
    /// Generate the update for `request`.
    fn write(&mut self, request: &SyncRequest<'_>) -> Self::Output;
}

/// Whether the state is big enough for large-cluster mode.
pub fn is_large_cluster(tracker: &ChangeTracker) -> bool {
    tracker
        .service_ports()
        .map(|svc| tracker.endpoints(&svc.name).len())
        .sum::<usize>()
        > LARGE_CLUSTER_ENDPOINTS_THRESHOLD
}
