//! `rkube bench <scenario>`: flags, then one run of the scenario and its report.
//!
//! ```text
//! rkube bench list    [--backend etcd|embedded] [--sizes 10000,50000] [--kinds configmaps,pods] [--runs 5]
//! rkube bench watch   [--watchers 100,1000,5000] [--rates 50,100,...]
//! rkube bench cluster [--nodes 1000] [--pods-per-node 30] [--workload deployments|pods] [--pod-rate 100]
//! rkube bench init    [--sizes ...]       (both backends unless --backend)
//! rkube bench writes  [--concurrency 1,8,64] [--ops 5000]  (both backends unless --backend)
//! rkube bench rbac    [--sizes 0,400,10000] [--runs 3] [--step-seconds 5]  (exits non-zero below its goal)
//! rkube bench bodies  [--sizes 3137536] [--runs 5]  (body bytes; fails on a wrong answer)
//! rkube bench streaming [--sizes 1073741824] [--runs 3] [--kubectl-dir DIR]  (exec and port-forward, kubectl 1.27 and 1.33)
//! rkube bench pods    [--pods 100] [--step-seconds 30]  (pod startup on `rkube up --node`; exits non-zero unless every pod runs)
//! rkube bench testenv [--runs 50]  (TestEnv start → first answer, CRD → Established, in process; exits non-zero unless the median start is under 1 s)
//! rkube bench all     every scenario above in turn, each with its own report
//! rkube bench summary --commit SHA   BENCHMARKS.md (stdout) from the reports in --out
//! common: [--quick] [--out bench-results] [--rkube PATH]
//! ```
//!
//! A scenario that measures the wrong thing (a LIST or a paginated walk that
//! returns another number of objects than it loaded, a walk that does not
//! end) fails: the command exits non-zero and writes no report for it.
//!
//! Writes `<out>/<scenario>.json`, `<out>/<scenario>.md` and, for scenarios
//! that sweep a size, `<out>/<scenario>.svg`; prints the Markdown on stdout
//! and progress on stderr. SIGINT or SIGTERM stops the scenario and every
//! process it started.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;

use crate::machine::{self, MachineInfo};
use crate::objects::Kind;
use crate::procs::{Backend, ServerCaps};
use crate::scenarios::{self, Ctx};

/// The scenarios.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Scenario {
    /// LIST latency and throughput vs object count: RV=0, consistent, cache disabled, direct storage range.
    List,
    /// Watch fan-out: watchers count sweep, event rate sweep, delivery latency, highest clean write rate.
    Watch,
    /// A simulated cluster (hollow kubelets and proxies, a pod-creating controller) against the SLOs.
    Cluster,
    /// Server start → /readyz and → first LIST vs object count, both backends.
    Init,
    /// Create/update throughput and latency vs concurrency, embedded vs etcd.
    Writes,
    /// GET throughput over HTTPS of an RBAC-bound user vs a system:masters user, vs
    /// ClusterRoleBindings of other users; exits non-zero below the goal (85 %).
    Rbac,
    /// Server RSS while 100 HTTP/1.1 clients and 100 HTTP/2 streams stall on a ~15 MB LIST over
    /// HTTPS, and 20 s after they left; exits non-zero above the goal (200 MiB growth).
    Stalled,
    /// Server CPU per request for ~3 MiB ConfigMap bodies: JSON, block YAML, JSON text as YAML,
    /// server-side apply, nested YAML; writes to and deletes of 1 MiB ConfigMaps; against the
    /// goal of about 100 ms.
    Bodies,
    /// `kubectl exec` round trips and `kubectl port-forward` throughput on `rkube up --node`,
    /// with kubectl 1.27 (SPDY) and 1.33 (WebSocket).
    Streaming,
    /// Pod create → Running and → Ready on `rkube up --node` for pods with a configMap volume
    /// and a readiness probe, against the pod startup SLO, and that process's CPU with the pods
    /// idle; exits non-zero when not every pod runs.
    Pods,
    /// Full LISTs of custom resources (default 100000) from the watch cache (RV=0, RV="") vs from
    /// storage (a direct range read, and a server with the resource's cache disabled).
    Crds,
    /// `rkube_testenv::TestEnv` in this process: start → first answered LIST of namespaces
    /// (median, p90, p99, max of --runs, default 50) and a CRD install → Established (10 times);
    /// exits non-zero unless the median start is under 1 s.
    Testenv,
    /// Every scenario in turn (list, writes, init, watch, cluster, rbac, stalled, bodies, streaming, pods, crds, testenv), each writing its report;
    /// exits non-zero when any failed.
    All,
    /// Prints BENCHMARKS.md made from the reports in --out, which must all come from
    /// the clean build of --commit.
    Summary,
}

/// Who creates the pods of `rkube bench cluster`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Workload {
    /// Deployments, expanded by `rkube controller-manager`, placed by `rkube scheduler`.
    Deployments,
    /// Pods created bound to nodes by the bench itself.
    Pods,
}

/// The measuring scenarios, in the order `all` runs them.
pub const EVERY_SCENARIO: [Scenario; 12] = [
    Scenario::List,
    Scenario::Writes,
    Scenario::Init,
    Scenario::Watch,
    Scenario::Cluster,
    Scenario::Rbac,
    Scenario::Stalled,
    Scenario::Bodies,
    Scenario::Streaming,
    Scenario::Pods,
    Scenario::Crds,
    Scenario::Testenv,
];

impl Scenario {
    /// The scenario's name (also the report file name).
    pub fn name(self) -> &'static str {
        match self {
            Scenario::List => "list",
            Scenario::Watch => "watch",
            Scenario::Cluster => "cluster",
            Scenario::Init => "init",
            Scenario::Writes => "writes",
            Scenario::Rbac => "rbac",
            Scenario::Stalled => "stalled",
            Scenario::Bodies => "bodies",
            Scenario::Streaming => "streaming",
            Scenario::Pods => "pods",
            Scenario::Crds => "crds",
            Scenario::Testenv => "testenv",
            Scenario::All => "all",
            Scenario::Summary => "summary",
        }
    }
}

/// Flags of `rkube bench`.
#[derive(clap::Args, Debug, Clone)]
pub struct BenchArgs {
    /// The scenario to run.
    #[arg(value_enum)]
    pub scenario: Scenario,
    /// Storage backend of the API server under test. Default: etcd for `list`
    /// (its floor is a direct etcd read), both for `init` and `writes`, embedded otherwise.
    #[arg(long, value_enum)]
    pub backend: Option<Backend>,
    /// A smoke run with tiny sizes (finishes in well under 20 s); figures are not meaningful.
    #[arg(long)]
    pub quick: bool,
    /// Directory for the reports.
    #[arg(long, default_value = "bench-results")]
    pub out: PathBuf,
    /// Repetitions of each timed measurement (default 5; 2 with --quick; testenv: starts, default 50, 5 with --quick).
    #[arg(long)]
    pub runs: Option<usize>,
    /// list, init, crds: object counts (default 10000,50000,100000,300000 for list; 10000,50000,100000 for init;
    /// 100000 for crds);
    /// rbac: ClusterRoleBindings of other users (default 0,400,10000); stalled: ConfigMaps (default 13500);
    /// bodies: request body bytes (default 3137536, just under the 3 MiB limit);
    /// streaming: bytes per port-forward connection (default 1073741824).
    #[arg(long, value_delimiter = ',')]
    pub sizes: Vec<usize>,
    /// list, init: kinds to load (default configmaps,pods for list; pods for init).
    #[arg(long, value_enum, value_delimiter = ',')]
    pub kinds: Vec<Kind>,
    /// watch: watcher counts of the fan-out sweep (default 100,1000,5000).
    #[arg(long, value_delimiter = ',')]
    pub watchers: Vec<usize>,
    /// watch: event rates (events/s) of the rate sweep (default 50,100,200,500,1000,2000,4000).
    #[arg(long, value_delimiter = ',')]
    pub rates: Vec<u32>,
    /// watch: seconds each rate or watcher step lasts (default 10); rbac: seconds of each timed window (default 5);
    /// pods: seconds over which the idle node's CPU is measured (default 30).
    #[arg(long)]
    pub step_seconds: Option<u64>,
    /// cluster: simulated node counts (default 1000).
    #[arg(long, value_delimiter = ',')]
    pub nodes: Vec<usize>,
    /// cluster: pods per node the controller creates.
    #[arg(long, default_value_t = 30)]
    pub pods_per_node: usize,
    /// cluster: who makes the pods: `deployments` (default: Deployments expanded by `rkube
    /// controller-manager` and placed by `rkube scheduler`, with pod startup latency) or
    /// `pods` (the bench creates pods bound to nodes at --pod-rate).
    #[arg(long, value_enum, default_value = "deployments")]
    pub workload: Workload,
    /// cluster: pods created per second by the bench (`--workload pods`; default 100).
    #[arg(long)]
    pub pod_rate: Option<f64>,
    /// cluster: seconds of steady state (leases, status, lists) after the pods are created (default 60).
    #[arg(long)]
    pub steady_seconds: Option<u64>,
    /// cluster: upper bound on the pod-creation phase, seconds (default 600); fewer pods are created past it.
    #[arg(long)]
    pub max_pod_seconds: Option<u64>,
    /// cluster: latency pods (one-replica Deployments) created after the saturation burst,
    /// whose startup is judged against upstream's steady-state SLO (default 500; 5 with --quick).
    #[arg(long)]
    pub latency_pods: Option<usize>,
    /// cluster: latency pods created per second (default 10: with their Deployments, a churn of
    /// 20/s, upstream's steady-state bound).
    #[arg(long)]
    pub latency_pod_rate: Option<f64>,
    /// cluster: simulated nodes sharing one proxy-like client (default: 1 up to 1000 nodes, then nodes/1000).
    #[arg(long)]
    pub proxy_share: Option<usize>,
    /// pods: pods created on `rkube up --node` (default 100; 10 with --quick).
    #[arg(long)]
    pub pods: Option<usize>,
    /// writes: concurrency levels (default 1,8,64).
    #[arg(long, value_delimiter = ',')]
    pub concurrency: Vec<usize>,
    /// writes: operations per verb and concurrency level (default 5000).
    #[arg(long)]
    pub ops: Option<usize>,
    /// streaming: the directory holding `kubectl.1.27` and `kubectl.1.33` (default: the first
    /// directory of PATH that has both).
    #[arg(long, env = "RKUBE_KUBECTL_DIR")]
    pub kubectl_dir: Option<PathBuf>,
    /// The rkube binary to start as the API server (default: this binary).
    #[arg(long)]
    pub rkube: Option<PathBuf>,
    /// summary: the git commit (or a prefix of it) every report in --out must have been measured on.
    #[arg(long, required_if_eq("scenario", "summary"))]
    pub commit: Option<String>,
}

/// The error of a scenario stopped by SIGINT or SIGTERM.
#[derive(Debug, thiserror::Error)]
#[error("interrupted; stopped every process this run started")]
pub struct Interrupted;

/// Resolves on SIGINT or SIGTERM.
async fn interrupted() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {},
        _ = term => {},
    }
}

/// Run `rkube bench`.
pub async fn run(args: BenchArgs) -> anyhow::Result<()> {
    match args.scenario {
        Scenario::Summary => {
            let commit = args.commit.as_deref().unwrap_or_default();
            print!("{}", crate::summary::benchmarks_md(&args.out, commit)?);
            Ok(())
        }
        Scenario::All => {
            let mut failed = Vec::new();
            for scenario in EVERY_SCENARIO {
                crate::progress::phase(&format!("scenario {}", scenario.name()));
                let args = BenchArgs {
                    scenario,
                    ..args.clone()
                };
                if let Err(e) = run_one(args).await {
                    // SIGINT/SIGTERM stops the whole run, not just the scenario it interrupted.
                    if e.is::<Interrupted>() {
                        return Err(e);
                    }
                    crate::progress::phase(&format!("scenario {} failed: {e:#}", scenario.name()));
                    failed.push(scenario.name());
                }
            }
            anyhow::ensure!(failed.is_empty(), "failed scenarios: {}", failed.join(", "));
            Ok(())
        }
        _ => run_one(args).await,
    }
}

/// Runs one measuring scenario and writes its report.
async fn run_one(args: BenchArgs) -> anyhow::Result<()> {
    let started = Instant::now();
    machine::raise_open_files_limit();
    let exe = match &args.rkube {
        Some(p) => p.clone(),
        None => std::env::current_exe().context("finding the rkube binary")?,
    };
    let caps = ServerCaps::detect(&exe);
    let machine = MachineInfo::collect(&args.out);
    if machine.rkube_build == "debug" && !args.quick {
        crate::progress::phase("warning: this is a debug build; figures are not comparable (use cargo build --release)");
    }
    let scenario = args.scenario;
    let out = args.out.clone();
    let ctx = Ctx {
        args,
        exe,
        caps,
        machine,
    };
    // On SIGINT/SIGTERM the scenario future is dropped, and with it every
    // child process handle (each kills its PID on drop).
    let report = tokio::select! {
        r = scenarios::run(scenario, &ctx) => r?,
        _ = interrupted() => return Err(Interrupted.into()),
    };
    let mut report = report;
    report.duration_seconds = started.elapsed().as_secs_f64();
    report.machine.finish();
    let written = report
        .write(&out)
        .with_context(|| format!("writing the report to {}", out.display()))?;
    println!("{}", report.to_markdown());
    for p in written {
        crate::progress::phase(&format!("wrote {}", p.display()));
    }
    anyhow::ensure!(
        report.missed_goals.is_empty(),
        "goal missed: {}",
        report.missed_goals.join("; ")
    );
    Ok(())
}
