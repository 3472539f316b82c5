//! The scenarios. Each takes the run's [`Ctx`], starts what it needs
//! (through [`crate::procs::Env`]), and returns a [`Report`].
//!
//! - [`list`]: LIST served four ways vs object count.
//! - [`watch`]: watch fan-out, event-rate sweep, delivery latency.
//! - [`cluster`]: a hollow cluster (kubelets, proxies, a controller) against the SLOs.
//! - [`init`]: server start → ready → first LIST vs object count.
//! - [`writes`]: create/update throughput and latency vs concurrency.
//! - [`stalled`]: server memory while clients stall on large LISTs, and after.
//! - [`bodies`]: server CPU per large request body, per encoding.
//! - [`streaming`]: `kubectl exec` round trips and `port-forward` throughput, SPDY and WebSocket.
//! - [`pods`]: pod startup on `rkube up --node` against the SLO, and its CPU with the pods idle.
//! - [`rbac`]: GET throughput of an RBAC-bound user vs a `system:masters` one, vs bindings.
//! - [`crds`]: LIST of many custom resources from the watch cache vs from storage.
//! - [`testenv`]: `rkube_testenv::TestEnv` start → first answer, and a CRD install → Established.

pub mod bodies;
pub mod cluster;
pub mod crds;
mod cluster_sim;
mod cluster_workload;
pub mod init;
pub mod pods;
pub mod list;
pub mod rbac;
pub mod stalled;
pub mod streaming;
pub mod testenv;
pub mod watch;
pub mod writes;

use std::path::PathBuf;

use crate::cli::{BenchArgs, Scenario};
use crate::machine::MachineInfo;
use crate::procs::{Backend, Env, ServerCaps};
use crate::report::Report;

/// Everything a scenario needs from the command line and the machine.
pub struct Ctx {
    /// The flags.
    pub args: BenchArgs,
    /// The rkube binary to start as the API server.
    pub exe: PathBuf,
    /// Optional features of that binary's API server.
    pub caps: ServerCaps,
    /// The machine.
    pub machine: MachineInfo,
}

impl Ctx {
    /// `--backend`, or `default` when not given.
    pub fn backends(&self, default: &[Backend]) -> Vec<Backend> {
        match self.args.backend {
            Some(b) => vec![b],
            None => default.to_vec(),
        }
    }

    /// A fresh backend environment (etcd started when needed). Blocks up to
    /// etcd's start timeout, so it runs on the blocking pool.
    pub async fn env(&self, backend: Backend) -> anyhow::Result<Env> {
        let exe = self.exe.clone();
        let caps = self.caps.clone();
        Ok(tokio::task::spawn_blocking(move || Env::new(backend, exe, caps)).await??)
    }

    /// `--runs`, else `normal` (or 2 with `--quick`).
    pub fn runs(&self, normal: usize) -> usize {
        self.args
            .runs
            .unwrap_or(if self.args.quick { 2 } else { normal })
            .max(1)
    }

    /// A new report for `scenario` with `parameters`, carrying the server capabilities.
    pub fn report(&self, scenario: Scenario, mut parameters: serde_json::Value) -> Report {
        if let Some(map) = parameters.as_object_mut() {
            map.insert("quick".into(), self.args.quick.into());
            map.insert(
                "server_caps".into(),
                serde_json::to_value(&self.caps).unwrap_or_default(),
            );
        }
        let mut r = Report::new(scenario.name(), self.machine.clone(), parameters);
        if self.args.quick {
            r.note("--quick: a smoke run with tiny sizes; its figures are not meaningful.");
        }
        if self.machine.rkube_build == "debug" {
            r.note("Debug build of rkube: figures are not comparable with release builds.");
        }
        r
    }
}

/// `list` if given, else `quick` or `normal`.
pub fn pick<T: Clone>(given: &[T], quick: bool, quick_default: &[T], normal: &[T]) -> Vec<T> {
    if !given.is_empty() {
        given.to_vec()
    } else if quick {
        quick_default.to_vec()
    } else {
        normal.to_vec()
    }
}

/// Runs `scenario`.
pub async fn run(scenario: Scenario, ctx: &Ctx) -> anyhow::Result<Report> {
    match scenario {
        Scenario::List => list::run(ctx).await,
        Scenario::Watch => watch::run(ctx).await,
        Scenario::Cluster => cluster::run(ctx).await,
        Scenario::Init => init::run(ctx).await,
        Scenario::Writes => writes::run(ctx).await,
        Scenario::Rbac => rbac::run(ctx).await,
        Scenario::Stalled => stalled::run(ctx).await,
        Scenario::Bodies => bodies::run(ctx).await,
        Scenario::Streaming => streaming::run(ctx).await,
        Scenario::Pods => pods::run(ctx).await,
        Scenario::Crds => crds::run(ctx).await,
        Scenario::Testenv => testenv::run(ctx).await,
        Scenario::All | Scenario::Summary => {
            anyhow::bail!("`{}` is not a measuring scenario", scenario.name())
        }
    }
}

/// "median (p90 x)" of a summary in seconds, or "n/a".
pub fn cell(s: Option<crate::stats::Summary>) -> String {
    match s {
        Some(s) if s.runs > 2 => format!(
            "{} (p90 {})",
            crate::stats::fmt_secs(s.median),
            crate::stats::fmt_secs(s.p90)
        ),
        Some(s) => crate::stats::fmt_secs(s.median),
        None => "n/a".into(),
    }
}
