//! rkube's service proxy: Services and EndpointSlices in, kube-proxy's iptables
//! rules out, with partial restores (KEP-3453).
//!
//! Layers, each usable on its own:
//! - [`model`]: the proxy's view of a Service port ([`model::ServicePortInfo`]) and
//!   its endpoints ([`model::EndpointInfo`]), built from k8s-openapi types.
//! - [`chains`]: kube-proxy's chain names and hash scheme.
//! - [`tracker`]: [`tracker::ChangeTracker`], the current state plus which services
//!   changed since the last successful restore (pure, no I/O).
//! - [`plan`]: backend-neutral per-service-port decisions (which endpoints, which chains).
//! - [`writer`]: the [`writer::RuleWriter`] trait and the iptables writer
//!   ([`writer::iptables::IptablesWriter`]), pure text generation.
//! - [`iptables`]: the [`iptables::Iptables`] trait (restore, save) and its real
//!   implementation spawning `iptables-restore`/`iptables-save`, optionally inside a
//!   network namespace.
//! - [`engine`]: the sync state machine ([`engine::machine::SyncMachine`], a pure
//!   step function deciding full vs partial), the [`engine::SyncBackend`] trait with
//!   its iptables implementation [`engine::IptablesBackend`], and the async loop
//!   ([`engine::runner::run_sync_loop`]) that drives them.
//! - [`metrics`], [`healthz`]: kube-proxy's metric names and `/healthz`.
//! - [`watch`], [`cli`]: kube-rs watchers feeding the tracker, and `rkube proxy`.
//!
//! Differences from kube-proxy's iptables mode (not implemented yet): IPv4 only (one
//! proxier, no dual stack); NodePorts are not served on 127.0.0.0/8
//! (`--iptables-localhost-nodeports=false` behaviour, no `route_localnet`); no
//! `nfacct` counters; no conntrack cleanup of stale UDP flows; no per-service
//! health-check node port servers (the filter ACCEPT rule for `healthCheckNodePort`
//! is written); EndpointSlice node hints (`PreferSameTrafficDistribution`) are ignored.
#![deny(missing_docs)]

pub mod chains;
pub mod cli;
pub mod engine;
pub mod fixtures;
pub mod healthz;
pub mod iptables;
pub mod metrics;
pub mod model;
pub mod plan;
pub mod tracker;
pub mod watch;
pub mod writer;
