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
#[path = "../../rkube-apiserver/tests/webhook_support/mod.rs"]
mod webhook_support;

#[path = "auth_review.rs"]
mod auth_review;
#[path = "bench_smoke.rs"]
mod bench_smoke;
#[path = "component_e2e.rs"]
mod component_e2e;
#[path = "controller_identities.rs"]
mod controller_identities;
#[path = "crd_e2e.rs"]
mod crd_e2e;
#[path = "csr_e2e.rs"]
mod csr_e2e;
#[path = "exec_e2e.rs"]
mod exec_e2e;
#[path = "flags.rs"]
mod flags;
#[path = "jobs_e2e.rs"]
mod jobs_e2e;
#[path = "kubectl_e2e.rs"]
mod kubectl_e2e;
#[path = "logs_e2e.rs"]
mod logs_e2e;
#[path = "metrics_e2e.rs"]
mod metrics_e2e;
#[path = "node_runtime_restart.rs"]
mod node_runtime_restart;
#[path = "pod_config_e2e.rs"]
mod pod_config_e2e;
#[path = "probes_e2e.rs"]
mod probes_e2e;
#[path = "proxy_e2e.rs"]
mod proxy_e2e;
#[path = "pvc_e2e.rs"]
mod pvc_e2e;
#[path = "python_client.rs"]
mod python_client;
#[path = "quota_e2e.rs"]
mod quota_e2e;
#[path = "scheduler_e2e.rs"]
mod scheduler_e2e;
#[path = "secure_up.rs"]
mod secure_up;
#[path = "service_accounts.rs"]
mod service_accounts;
#[path = "snapshot_e2e.rs"]
mod snapshot_e2e;
#[path = "stateful_daemon_e2e.rs"]
mod stateful_daemon_e2e;
#[path = "termination_e2e.rs"]
mod termination_e2e;
#[path = "trust_bundles_e2e.rs"]
mod trust_bundles_e2e;
#[path = "up_node_e2e.rs"]
mod up_node_e2e;
#[path = "volumes_e2e.rs"]
mod volumes_e2e;
#[path = "webhooks_e2e.rs"]
mod webhooks_e2e;
#[path = "workloads_e2e.rs"]
mod workloads_e2e;

/// Every crate's `tests/*.rs` file (and `tests/*/main.rs` directory), what
/// Cargo would have built as a test binary of its own, is a `mod` line of
/// that crate's `tests/integration.rs`.
#[test]
fn every_test_file_is_a_module() {
    let crates = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut missing = Vec::new();
    for krate in std::fs::read_dir(&crates).expect("reading crates/") {
        let tests = krate.expect("crates/ entry").path().join("tests");
        let Ok(entries) = std::fs::read_dir(&tests) else { continue };
        let root = std::fs::read_to_string(tests.join("integration.rs")).unwrap_or_default();
        for entry in entries {
            let path = entry.expect("tests/ entry").path();
            let Some(stem) = path.file_stem().and_then(|s| s.to_str()) else { continue };
            let target = (path.extension().is_some_and(|e| e == "rs") && stem != "integration")
                || path.join("main.rs").is_file();
            if target && !root.lines().any(|l| l == format!("mod {stem};")) {
                missing.push(path.display().to_string());
            }
        }
    }
    assert!(missing.is_empty(), "not declared in their crate's tests/integration.rs: {missing:?}");
}
