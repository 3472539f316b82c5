//! rkube node: a node agent that runs its Node's pods through any CRI runtime, with generic and
//! evented PLEG (KEP-3386).
//!
//! Main parts:
//! - [`pleg`] — the Pod Lifecycle Event Generator: [`pleg::GenericPleg`] (relisting),
//!   [`pleg::EventedPleg`] (`GetContainerEvents`), the pod status cache [`pleg::PodCache`], the
//!   connection state machine [`pleg::connection`], metrics [`pleg::PlegMetrics`].
//! - [`pod`] — running pods: the sync plan ([`pod::actions`]), phases, API status, per-pod
//!   workers and the dispatcher over a kube-rs watch of `spec.nodeName=<node>`.
//! - [`node_status`] — Node registration, `Ready` condition, Lease heartbeats.
//! - [`agent`] — wiring ([`agent::start`] → [`agent::AgentHandle`]); [`healthz`] serves
//!   `/healthz` and `/metrics`; [`kubelet_api`] is the kubelet API (HTTPS, authenticated and
//!   authorized through the API server): `/healthz`, `/containerLogs`.
//! - [`local`] — [`run_local_node`]: runtime + agent in one process (`rkube up --node`; the scheduler places pods).
//! - [`cri`] — the CRI client and the [`cri::RuntimeApi`] trait PLEG reads through.
//! - [`container_log_manager`] — container log rotation (`--container-log-max-size`, ...).
//! - [`feature_gates`], [`shutdown`].
#![deny(missing_docs)]

pub mod agent;
pub mod cli;
pub mod container_log_manager;
pub mod cri;
pub mod events;
pub mod feature_gates;
pub mod healthz;
pub mod kubelet_api;
pub mod local;
pub mod node_status;
pub mod pleg;
pub mod pod;
pub mod shutdown;

pub use local::{run_local_node, NodeHandle};
