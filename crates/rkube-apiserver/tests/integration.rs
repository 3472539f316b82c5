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
#[path = "cache_support/mod.rs"]
mod cache_support;
#[macro_use]
#[path = "common/mod.rs"]
mod common;
#[macro_use]
#[path = "faults_support/mod.rs"]
mod faults_support;
#[macro_use]
#[path = "fuzz_support/mod.rs"]
mod fuzz_support;
#[macro_use]
#[path = "log_support/mod.rs"]
mod log_support;
#[macro_use]
#[path = "pb_support/mod.rs"]
mod pb_support;
#[macro_use]
#[path = "suite/mod.rs"]
mod suite;
#[macro_use]
#[path = "webhook_support/mod.rs"]
mod webhook_support;

#[path = "admission_policies.rs"]
mod admission_policies;
#[path = "api_embedded.rs"]
mod api_embedded;
#[path = "api_etcd.rs"]
mod api_etcd;
#[path = "body_bytes.rs"]
mod body_bytes;
#[path = "cache.rs"]
mod cache;
#[path = "cache_kube.rs"]
mod cache_kube;
#[path = "crd_cel.rs"]
mod crd_cel;
#[path = "crd_conversion.rs"]
mod crd_conversion;
#[path = "crds.rs"]
mod crds;
#[path = "crds_kube.rs"]
mod crds_kube;
#[path = "csr.rs"]
mod csr;
#[path = "default_storage_class.rs"]
mod default_storage_class;
#[path = "discovery.rs"]
mod discovery;
#[path = "disk_full.rs"]
mod disk_full;
#[path = "events_v1.rs"]
mod events_v1;
#[path = "every_resource.rs"]
mod every_resource;
#[path = "faults.rs"]
mod faults;
#[path = "filters.rs"]
mod filters;
#[path = "filters_real_server.rs"]
mod filters_real_server;
#[path = "flowcontrol.rs"]
mod flowcontrol;
#[path = "fuzz_body.rs"]
mod fuzz_body;
#[path = "fuzz_patch.rs"]
mod fuzz_patch;
#[path = "hostile_input.rs"]
mod hostile_input;
#[path = "hpa_v1.rs"]
mod hpa_v1;
#[path = "http2_errors.rs"]
mod http2_errors;
#[path = "metrics_api.rs"]
mod metrics_api;
#[path = "min_request_timeout.rs"]
mod min_request_timeout;
#[path = "operability.rs"]
mod operability;
#[path = "priority.rs"]
mod priority;
#[path = "rbac_extra.rs"]
mod rbac_extra;
#[path = "resource_quota.rs"]
mod resource_quota;
#[path = "review.rs"]
mod review;
#[path = "row_rules.rs"]
mod row_rules;
#[path = "slow_client.rs"]
mod slow_client;
#[path = "stalled_list.rs"]
mod stalled_list;
#[path = "throughput.rs"]
mod throughput;
#[path = "webhooks.rs"]
mod webhooks;
