//! Every integration test of this crate, in one test binary.
//!
//! Each `tests/*.rs` file is a module here (`cargo test --test integration --
//! <file>::` runs one file's tests), and the support modules (`common`,
//! `*_support`) are declared once for all of them. One binary per crate, not
//! one per file: each test binary links the whole server, and ~120 of them
//! needed tens of GB of disk and minutes of linking. `autotests = false` would
//! skip a new file silently: `every_test_file_is_a_module` (in `crates/rkube`)
//! fails when a file (or a directory with a `main.rs`) in any crate's `tests/`
//! has no line here.

#[macro_use]
#[path = "common/mod.rs"]
mod common;
#[macro_use]
#[path = "workload_support/mod.rs"]
mod workload_support;

#[path = "cronjobs.rs"]
mod cronjobs;
#[path = "daemonset.rs"]
mod daemonset;
#[path = "deployment.rs"]
mod deployment;
#[path = "disruption.rs"]
mod disruption;
#[path = "endpoints.rs"]
mod endpoints;
#[path = "garbage_collector.rs"]
mod garbage_collector;
#[path = "jobs.rs"]
mod jobs;
#[path = "namespace_deletion.rs"]
mod namespace_deletion;
#[path = "node_lifecycle.rs"]
mod node_lifecycle;
#[path = "persistent_volumes.rs"]
mod persistent_volumes;
#[path = "replicaset.rs"]
mod replicaset;
#[path = "resource_quota.rs"]
mod resource_quota;
#[path = "statefulset.rs"]
mod statefulset;
