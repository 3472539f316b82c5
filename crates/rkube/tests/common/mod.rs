//! Test harness for end-to-end tests of the `rkube` binary.
//!
//! - [`cluster`]: start `rkube up` (embedded store; secure by default: HTTPS,
//!   RBAC, the admin kubeconfig it writes) or `rkube apiserver` (real etcd,
//!   plain HTTP) on a free loopback port, wait for `/readyz`, stop/restart it;
//!   every process is killed by PID on drop. `Cluster::start(Backend::Embedded)`
//!   or `Cluster::builder(..).arg(..).insecure().start()`; `cluster.kubectl("1.33")`
//!   is a kubectl carrying `--kubeconfig` (`.run/.ok/.json/.spawn/.command`).
//! - [`kubeconfig`]: parse / write kubeconfigs for other users (token, client
//!   certificate) and a small HTTP(S) GET client with their credentials.
//! - [`kubectl`]: the real versioned kubectl binaries, each call under a limit.
//! - [`process`]: child processes with timeouts and line-by-line output.
//! - [`table`]: parsing kubectl tables and `describe` output.
//! - [`e2e_matrix!`]: generates one test per scenario × backend × kubectl version;
//!   [`per_kubectl_version!`]: one test per kubectl version.

#![allow(dead_code, unused_imports)]

pub mod cluster;
pub mod kubeconfig;
pub mod kubectl;
pub mod process;
pub mod table;

pub use cluster::{Backend, Cluster, ClusterBuilder, Stop};
pub use kubeconfig::{Credentials, KubeconfigInfo};
pub use kubectl::Kubectl;
pub use table::Table;

use serde_json::Value;

/// kubectl versions every scenario runs with (oldest and newest supported).
pub const KUBECTL_VERSIONS: [&str; 2] = ["1.27", "1.33"];

/// Starts a cluster on `backend`, runs `scenario` with kubectl `version`.
pub fn run_scenario(backend: Backend, version: &str, scenario: fn(&mut Cluster, &Kubectl)) {
    let mut cluster = Cluster::start(backend);
    let kubectl = cluster.kubectl(version);
    scenario(&mut cluster, &kubectl);
}

/// Generates, for each scenario `fn(version: &str)`, one `#[test]` per
/// kubectl version, in modules `kubectl_1_27` and `kubectl_1_33` (for
/// scenarios that start their own server).
#[macro_export]
macro_rules! per_kubectl_version {
    ($($scenario:ident),* $(,)?) => {
        mod kubectl_1_27 {
            $( #[test] fn $scenario() { super::$scenario("1.27") } )*
        }
        mod kubectl_1_33 {
            $( #[test] fn $scenario() { super::$scenario("1.33") } )*
        }
    };
}

/// Generates, for each scenario function, one `#[test]` per backend × kubectl
/// version, in modules `embedded_kubectl_1_27`, `etcd_kubectl_1_33`, ...
#[macro_export]
macro_rules! e2e_matrix {
    ($($scenario:ident),* $(,)?) => {
        $crate::e2e_matrix!(@module embedded_kubectl_1_27, Embedded, "1.27", $($scenario),*);
        $crate::e2e_matrix!(@module embedded_kubectl_1_33, Embedded, "1.33", $($scenario),*);
        $crate::e2e_matrix!(@module etcd_kubectl_1_27, Etcd, "1.27", $($scenario),*);
        $crate::e2e_matrix!(@module etcd_kubectl_1_33, Etcd, "1.33", $($scenario),*);
    };
    (@module $module:ident, $backend:ident, $version:literal, $($scenario:ident),*) => {
        mod $module {
            $(
                #[test]
                fn $scenario() {
                    $crate::common::run_scenario($crate::common::Backend::$backend, $version, super::$scenario);
                }
            )*
        }
    };
}

/// `value[pointer]` as a string, panicking with the document if absent.
#[track_caller]
pub fn str_at<'a>(value: &'a Value, pointer: &str) -> &'a str {
    value
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_else(|| {
            panic!(
                "no string at {pointer} in {}",
                serde_json::to_string_pretty(value).unwrap_or_default()
            )
        })
}

/// `value[pointer]`, panicking with the document if absent.
#[track_caller]
pub fn at<'a>(value: &'a Value, pointer: &str) -> &'a Value {
    value.pointer(pointer).unwrap_or_else(|| {
        panic!(
            "nothing at {pointer} in {}",
            serde_json::to_string_pretty(value).unwrap_or_default()
        )
    })
}

/// The `metadata.name`s of a list's items, in order.
#[track_caller]
pub fn item_names(list: &Value) -> Vec<String> {
    at(list, "/items")
        .as_array()
        .map(|items| {
            items
                .iter()
                .map(|i| str_at(i, "/metadata/name").to_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Lines of `s` as owned strings, trailing whitespace dropped.
pub fn lines(s: &str) -> Vec<String> {
    s.lines().map(|l| l.trim_end().to_owned()).collect()
}
