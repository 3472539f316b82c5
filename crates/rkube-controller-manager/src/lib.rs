//! `rkube controller-manager`: upstream kube-controller-manager's controllers,
//! written on kube-rs's runtime (reflectors, `Controller`, the events
//! `Recorder`) and talking to any API server through a kubeconfig.
//!
//! - [`controllers`]: the table of controllers ([`controllers::CONTROLLERS`]),
//!   one row each, with upstream's names (`deployment-controller`, …) and
//!   their short aliases, and the `--controllers` selection rules;
//! - [`client_builder`]: the controllers' clients, the manager's own or,
//!   with `--use-service-account-credentials`, one ServiceAccount each;
//! - [`context`]: what every controller is started with (client, identity,
//!   stop signal);
//! - [`cli`]: the `rkube controller-manager` flags and entry point (leader
//!   election on the `kube-controller-manager` Lease and the `/healthz`,
//!   `/metrics` server come from `rkube-component`).
//!
//! Upstream: `cmd/kube-controller-manager/app`, `pkg/controller/*`.
#![deny(missing_docs)]

pub mod cli;
pub mod client_builder;
pub mod context;
pub mod controllers;
pub mod events;
pub mod expectations;
pub mod history;
pub mod pod_control;
pub mod pod_util;
pub mod work_queue;
