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
#[path = "containerd_support/mod.rs"]
mod containerd_support;

#[path = "bench_pleg.rs"]
mod bench_pleg;
#[path = "containerd.rs"]
mod containerd;
#[path = "e2e_node.rs"]
mod e2e_node;
#[path = "exec_kube_rs.rs"]
mod exec_kube_rs;
#[path = "kubelet_stats_kube_rs.rs"]
mod kubelet_stats_kube_rs;
#[path = "logs_kube_rs.rs"]
mod logs_kube_rs;
#[path = "pleg_runtime.rs"]
mod pleg_runtime;
#[path = "portforward_kube_rs.rs"]
mod portforward_kube_rs;
#[path = "serving_cert.rs"]
mod serving_cert;
