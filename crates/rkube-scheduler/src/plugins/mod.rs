//! The default profile's filter and score plugins (upstream
//! `pkg/scheduler/framework/plugins/*`), as plain functions over a
//! [`Snapshot`](crate::snapshot::Snapshot).
//!
//! Filters run in upstream's order ([`FILTERS`]); the first that rejects a
//! node gives its [`Status`]. Scores ([`score`]) are each normalized to
//! 0..=[`MAX_NODE_SCORE`] and summed with upstream's default weights.
//!
//! - [`filters`]: NodeUnschedulable, NodeName, TaintToleration, NodeAffinity
//!   (with `nodeSelector`), NodePorts, NodeResourcesFit;
//! - [`spread`]: PodTopologySpread (`whenUnsatisfiable: DoNotSchedule`);
//! - [`interpod`]: InterPodAffinity (required affinity and anti-affinity);
//! - [`score`]: NodeResourcesFit (LeastAllocated),
//!   NodeResourcesBalancedAllocation, TaintToleration and NodeAffinity
//!   (preferred terms);
//! - [`volumes`]: VolumeBinding (PersistentVolumeClaims: unbound immediate
//!   claims, volume node affinity);
//! - [`selectors`]: label and node selector matching.

pub mod filters;
pub mod interpod;
pub mod score;
pub mod selectors;
pub mod spread;
pub mod volumes;

use k8s_openapi::api::core::v1::Pod;

use crate::snapshot::{NodeInfo, Snapshot};

/// The highest score a plugin gives a node (`framework.MaxNodeScore`).
pub const MAX_NODE_SCORE: i64 = 100;

/// Why a filter rejected a node (upstream `framework.Code`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    /// The node does not fit now; preempting pods might help.
    Unschedulable,
    /// The node cannot fit the pod whatever is removed from it.
    UnschedulableAndUnresolvable,
}

/// A filter's rejection: the plugin, its code and the reasons shown to
/// users (`Insufficient cpu`, `node(s) had untolerated taint {k: v}`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    /// The plugin's name (`NodeResourcesFit`).
    pub plugin: &'static str,
    /// The code.
    pub code: Code,
    /// Reasons, each counted once in the FailedScheduling message.
    pub reasons: Vec<String>,
}

impl Status {
    /// A rejection by `plugin` with one reason.
    pub fn new(plugin: &'static str, code: Code, reason: impl Into<String>) -> Self {
        Status { plugin, code, reasons: vec![reason.into()] }
    }
}

/// What filters compute once per scheduling cycle from the whole cluster
/// (upstream's PreFilter results in `framework.CycleState`), so that filtering
/// a node costs what that node holds, not what the cluster holds.
#[derive(Debug, Default)]
pub struct CycleState {
    spread: spread::PreFilterState,
    interpod: interpod::PreFilterState,
    /// The pod's requests (NodeResourcesFit's PreFilter).
    requests: crate::resources::Resource,
}

impl CycleState {
    /// Runs the PreFilters of [`spread`] and [`interpod`] for `pod` over
    /// `snapshot`, and reads the pod's requests once for NodeResourcesFit.
    pub fn new(pod: &Pod, snapshot: &Snapshot) -> Self {
        CycleState {
            spread: spread::pre_filter(pod, snapshot),
            interpod: interpod::pre_filter(pod, snapshot),
            requests: crate::resources::pod_requests(pod, false),
        }
    }
}

/// A filter: `Err` when `node` cannot run `pod` (the pod is not assigned
/// yet; `snapshot` holds the other pods, `state` the cycle's PreFilter results).
pub type Filter = fn(&Pod, &NodeInfo, &Snapshot, &CycleState) -> Result<(), Status>;

/// The default profile's filters in upstream's order.
pub const FILTERS: &[(&str, Filter)] = &[
    ("NodeUnschedulable", |pod, node, snapshot, _| filters::node_unschedulable(pod, node, snapshot)),
    ("NodeName", |pod, node, snapshot, _| filters::node_name(pod, node, snapshot)),
    ("TaintToleration", |pod, node, snapshot, _| filters::taint_toleration(pod, node, snapshot)),
    ("NodeAffinity", |pod, node, snapshot, _| filters::node_affinity(pod, node, snapshot)),
    ("NodePorts", |pod, node, snapshot, _| filters::node_ports(pod, node, snapshot)),
    ("NodeResourcesFit", |_, node, _, state| filters::resources_fit(&state.requests, node)),
    ("VolumeBinding", |pod, node, snapshot, _| volumes::filter(pod, node, snapshot)),
    ("PodTopologySpread", |_, node, _, state| spread::filter(&state.spread, node)),
    ("InterPodAffinity", |_, node, _, state| interpod::filter(&state.interpod, node)),
];

/// Runs [`FILTERS`] on one node; the first rejection wins.
pub fn run_filters(pod: &Pod, node: &NodeInfo, snapshot: &Snapshot, state: &CycleState) -> Result<(), Status> {
    FILTERS.iter().try_for_each(|(_, f)| f(pod, node, snapshot, state))
}
