//! rkube runtime: a CRI v1 container runtime that runs each container as a host process.
//!
//! What it is for: giving the node agent (and kubelet-compatible clients) a real CRI endpoint
//! that implements `GetContainerEvents` (KEP-3386), so evented PLEG can be exercised without
//! containerd. Images are names only; containers share the host's network and filesystem.
//!
//! Main types:
//! - [`Runtime`] — sandbox/container records and lifecycles ([`runtime`]), one clock
//!   ([`clock::RuntimeClock`]), one event bus ([`events::EventBus`]).
//! - [`service::CriService`] — the `RuntimeService` + `ImageService` gRPC edge.
//! - [`serve`] / [`RuntimeHandle`] — serving on a unix socket, and shutting down (kills every
//!   container's process group).
//! - [`endpoint::connect`] — a tonic channel to any `unix://` CRI endpoint (used by the node
//!   agent and the tests, in place of crictl).
//! - [`cri`] — the CRI v1 messages and stubs (re-exported from the `k8s-cri` crate).
//!
//! Processes: [`process`] (process groups, signals, exit codes), [`logs`] (CRI log format) and
//! [`stats`] (CPU and memory of each container, from its cgroup ([`cgroups`]) or from `/proc`).
//!
//! Streaming: CRI `Exec` answers a URL on the runtime's streaming server ([`streaming`]), which
//! runs the command in the container's context ([`exec`]) and speaks the WebSocket channel
//! protocol of `kubectl exec`; `ExecSync` runs it to its end.
//!
//! State across restarts: sandboxes, containers and images are kept in memory only, and every
//! container process dies with the runtime (`PR_SET_PDEATHSIG`). A runtime started again on the
//! same socket and root directory therefore lists no sandbox and no container; the node agent
//! treats the pods as lost (see `rkube-node`: `Never` pods that were running become `Failed`
//! with `ContainerStatusUnknown`, others are started again).
#![deny(missing_docs)]

pub mod attach;
pub mod cgroups;
pub mod cli;
pub mod clock;
pub mod endpoint;
pub mod events;
pub mod exec;
pub mod logs;
pub mod process;
pub mod runtime;
pub mod server;
pub mod service;
pub mod state;
pub mod stats;
pub mod streaming;

/// CRI v1 (`runtime.v1`) messages, clients and servers, generated from upstream `api.proto`.
pub use k8s_cri::v1 as cri;
pub use runtime::{Runtime, RuntimeConfig, RuntimeError};
pub use server::{serve, serve_runtime, RuntimeHandle, ServeError};
