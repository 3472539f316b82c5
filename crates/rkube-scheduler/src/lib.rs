//! `rkube scheduler`: kube-scheduler's default profile on kube-rs.
//!
//! - [`cli`]: the flags (`--kubeconfig`, leader election, secure serving, as
//!   kube-scheduler's) and [`cli::start`], which `rkube up` also uses;
//! - [`scheduler`]: the loop: reflectors, queue, assume, bind, events;
//! - [`queue`]: [`queue::SchedulingQueue`] (activeQ, backoffQ,
//!   unschedulable pods; backoff 1s..10s);
//! - [`framework`]: one decision ([`framework::schedule_pod`]) and the
//!   `FailedScheduling` text ([`framework::FitError`]);
//! - [`plugins`]: the filters and scores;
//! - [`cache`]: nodes and their pods kept from informer events, copied into
//!   each cycle's snapshot node by node;
//! - [`snapshot`], [`resources`]: the cluster and the resource arithmetic
//!   the plugins read;
//! - [`writes`]: bindings, conditions, evictions;
//! - [`metrics`]: `scheduler_*` metrics.
//!
//! Not implemented: preemption (the FailedScheduling text reports that no
//! victims were found, as upstream does when preemption cannot help),
//! volume plugins, ImageLocality, soft topology spread and inter-pod
//! affinity scoring, scheduler configuration files and extra profiles.
//! Upstream: `cmd/kube-scheduler`, `pkg/scheduler`.
#![deny(missing_docs)]

pub mod cache;
pub mod cli;
pub mod framework;
pub mod metrics;
pub mod plugins;
pub mod preemption;
pub mod queue;
pub mod resources;
pub mod scheduler;
pub mod snapshot;
pub mod writes;
#[cfg(test)]
mod testutil;
