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

/// A filter: `Err` when `node` cannot run `pod` (the pod is not assigned
/// yet; `snapshot` holds the other pods).
pub type Filter = fn(&Pod, &NodeInfo, &Snapshot) -> Result<(), Status>;

/// The default profile's filters in upstream's order.
pub const FILTERS: &[(&str, Filter)] = &[
    ("NodeUnschedulable", filters::node_unschedulable),
    ("NodeName", filters::node_name),
    ("TaintToleration", filters::taint_toleration),
    ("NodeAffinity", filters::node_affinity),
    ("NodePorts", filters::node_ports),
    ("NodeResourcesFit", filters::node_resources_fit),
    ("VolumeBinding", volumes::filter),
    ("PodTopologySpread", spread::filter),
    ("InterPodAffinity", interpod::filter),
];

/// Runs [`FILTERS`] on one node; the first rejection wins.
pub fn run_filters(pod: &Pod, node: &NodeInfo, snapshot: &Snapshot) -> Result<(), Status> {
    FILTERS.iter().try_for_each(|(_, f)| f(pod, node, snapshot))
}
