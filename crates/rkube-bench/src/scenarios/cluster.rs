//! `rkube bench cluster`: a simulated cluster (kubemark/kwok-like) against
//! the Kubernetes API call latency SLOs.
//!
//! For each `--nodes` N, one API server runs on the backend and this process
//! plays (see [`super::cluster_sim`]):
//! - N hollow kubelets (Node + Lease, lease renewal, node GET, node status
//!   PATCH, a node-scoped pod LIST+WATCH, pod status PATCH to Running);
//! - ⌈N / share⌉ hollow proxies (Service + EndpointSlice LIST+WATCH), one per
//!   `--proxy-share` nodes;
//! - with `--workload deployments` (the default), Deployments totalling
//!   N × `--pods-per-node` pods that `rkube controller-manager` and `rkube
//!   scheduler` expand and place (see [`super::cluster_workload`]); with
//!   `--workload pods`, a controller creating that many bound pods at
//!   `--pod-rate`;
//! - an endpoints controller, and a lister (namespace LIST every 5 s,
//!   cluster LIST of pods and nodes every 30 s, paginated by 500).
//!
//! Phases: setup → register nodes → create pods (the saturation burst,
//! bounded by `--max-pod-seconds`) → `--latency-pods` one-replica
//! Deployments at `--latency-pod-rate` on the saturated cluster, whose
//! startup is judged against upstream's pod startup SLO as ClusterLoader2's
//! density test does (the SLO is a steady-state one: churn ≤ 20/s) →
//! `--steady-seconds` of steady state. Every API call
//! is timed client-side and grouped by verb and scope as the SLOs are:
//! mutating p99 ≤ 1 s, GET p99 ≤ 1 s, namespace LIST p99 ≤ 5 s, cluster LIST
//! p99 ≤ 30 s. Apiserver (and etcd) RSS and CPU come from `/proc/<pid>`.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::sync::Semaphore;

use anyhow::Context as _;

use super::cluster_sim::{self as simc, CallKey, Scope, Sim, Verb};
use super::cluster_workload::{self as workload, PodKind};
use crate::cli::Scenario;
use crate::cli::Workload;
use crate::client::Api;
use crate::procs::{sample_proc, Backend, ProcUsage, ProcWatcher};
use crate::progress;
use crate::report::{Report, Table};
use crate::scenarios::{pick, Ctx};
use crate::stats::{fmt_bytes, fmt_count, fmt_rate, fmt_secs, Histogram, Summary};
use crate::svg::{Plot, Series};

/// Aborts the task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The SLO groups: (title, verbs, scope, p99 bound in seconds).
const SLOS: &[(&str, &[Verb], Scope, f64)] = &[
    (
        "mutating (POST/PUT/PATCH)",
        &[Verb::Create, Verb::Update, Verb::Patch],
        Scope::Resource,
        1.0,
    ),
    ("GET", &[Verb::Get], Scope::Resource, 1.0),
    ("LIST namespace", &[Verb::List], Scope::Namespace, 5.0),
    ("LIST cluster", &[Verb::List], Scope::Cluster, 30.0),
];

/// The latency pods created after the saturation burst.
#[derive(Debug, Clone, Copy)]
struct Latency {
    /// How many (one-replica Deployments).
    pods: usize,
    /// Created per second.
    rate: f64,
}

/// Waits until `want` pods of `kind` are seen Running or `deadline` passes, showing progress;
/// fails when a component exits meanwhile (with the tails of their logs).
async fn wait_running(
    startup: &workload::Startup,
    kind: PodKind,
    want: u64,
    deadline: Instant,
    pb: &indicatif::ProgressBar,
    c: &mut workload::Components,
) -> anyhow::Result<()> {
    loop {
        let running = startup.running(kind);
        pb.set_position(running);
        if running >= want || Instant::now() > deadline {
            return Ok(());
        }
        if !c.alive() {
            let logs: Vec<String> = c.logs.iter().map(|p| crate::procs::tail_of(p, 20)).collect();
            anyhow::bail!("a component exited during the run:\n{}", logs.join("\n"));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// What one cluster size produced.
struct Outcome {
    nodes: usize,
    slo: Vec<(&'static str, Option<Summary>, u64, f64)>,
}

/// Runs the scenario.
pub async fn run(ctx: &Ctx) -> anyhow::Result<Report> {
    let a = &ctx.args;
    let quick = a.quick;
    let backend = a.backend.unwrap_or(Backend::Embedded);
    let node_counts = pick(&a.nodes, quick, &[20], &[1000]);
    let ppn = if quick {
        a.pods_per_node.min(3)
    } else {
        a.pods_per_node
    };
    let pod_rate = a
        .pod_rate
        .unwrap_or(if quick { 50.0 } else { 100.0 })
        .max(0.1);
    let steady = Duration::from_secs(a.steady_seconds.unwrap_or(if quick { 3 } else { 60 }));
    let max_pod = Duration::from_secs(a.max_pod_seconds.unwrap_or(if quick { 10 } else { 600 }));
    let latency = Latency {
        pods: a.latency_pods.unwrap_or(if quick { 5 } else { 500 }),
        rate: a.latency_pod_rate.unwrap_or(10.0).max(0.1),
    };
    let lease_interval = Duration::from_secs(if quick { 1 } else { 10 });
    let node_status_interval = Duration::from_secs(if quick { 2 } else { 300 });
    let (ns_every, cluster_every) = if quick {
        (Duration::from_secs(1), Duration::from_secs(2))
    } else {
        (Duration::from_secs(5), Duration::from_secs(30))
    };
    let mut report = ctx.report(
        Scenario::Cluster,
        json!({"backend": backend, "nodes": node_counts, "pods_per_node": ppn, "pod_rate": pod_rate,
            "latency_pods": latency.pods, "latency_pod_rate": latency.rate,
            "steady_seconds": steady.as_secs(), "max_pod_seconds": max_pod.as_secs(),
            "lease_interval_seconds": lease_interval.as_secs(), "node_status_interval_seconds": node_status_interval.as_secs(),
            "namespace_list_every_seconds": ns_every.as_secs(), "cluster_list_every_seconds": cluster_every.as_secs(),
            "proxy_share": a.proxy_share}),
    );
    if quick {
        report.note("--quick shortens the lease period to 1 s and the node status period to 2 s so a few-second run exercises them.");
    }
    let fd_limit = ctx.machine.open_files_limit.unwrap_or(1024) as usize;
    let mut outcomes = Vec::new();
    for &nodes in &node_counts {
        let mut share = a
            .proxy_share
            .unwrap_or(if nodes <= 1000 {
                1
            } else {
                nodes.div_ceil(1000)
            })
            .max(1);
        // Each watch is a descriptor here and one in the server: kubelet watches + 2 per proxy + the request pool.
        while nodes + 2 * nodes.div_ceil(share) + 1500 > fd_limit && share < nodes {
            share += 1;
        }
        if nodes + 2 * nodes.div_ceil(share) + 1500 > fd_limit {
            report.note(format!("{nodes} nodes need more watch connections than the open-files limit ({fd_limit}) allows; skipped."));
            report.not_measured(
                format!("cluster with {nodes} nodes"),
                format!("open-files limit {fd_limit} too low"),
            );
            continue;
        }
        let proxies = nodes.div_ceil(share);
        if share > 1 {
            report.note(format!(
                "{nodes} nodes: one hollow proxy serves {share} nodes ({proxies} proxies, {} service/endpointslice watches) to fit this machine.",
                2 * proxies
            ));
        }
        let o = one(
            ctx,
            &mut report,
            backend,
            nodes,
            ppn,
            pod_rate,
            latency,
            steady,
            max_pod,
            lease_interval,
            node_status_interval,
            ns_every,
            cluster_every,
            share,
        )
        .await?;
        outcomes.push(o);
    }
    if outcomes.len() > 1 {
        let mut plot = Plot {
            title: "API call p99 vs simulated nodes".into(),
            x_label: "nodes".into(),
            y_label: "seconds (p99)".into(),
            log_x: true,
            log_y: false,
            series: vec![],
        };
        for (i, (title, ..)) in SLOS.iter().enumerate() {
            plot.series.push(Series {
                name: title.to_string(),
                points: outcomes
                    .iter()
                    .filter_map(|o| {
                        o.slo
                            .get(i)
                            .and_then(|s| s.1)
                            .map(|s| (o.nodes as f64, s.p99))
                    })
                    .collect(),
            });
        }
        report.plots.push(plot);
    }
    Ok(report)
}

#[allow(clippy::too_many_arguments)]
async fn one(
    ctx: &Ctx,
    report: &mut Report,
    backend: Backend,
    nodes: usize,
    ppn: usize,
    pod_rate: f64,
    latency: Latency,
    steady: Duration,
    max_pod: Duration,
    lease_interval: Duration,
    node_status_interval: Duration,
    ns_every: Duration,
    cluster_every: Duration,
    share: usize,
) -> anyhow::Result<Outcome> {
    let started = Instant::now();
    let env = ctx.env(backend).await?;
    // Kubelets, the controller manager and the scheduler authenticate as upstream's do.
    let auth_dir = tempfile::tempdir().context("temp dir for the token file")?;
    let token_file = auth_dir.path().join("tokens.csv");
    std::fs::write(&token_file, workload::token_file(nodes)).context("writing the token file")?;
    let server = env
        .start_server(&[format!("--token-auth-file={}", token_file.display())])
        .await?;
    let pid = server.pid();
    let whole = ProcWatcher::start(pid);
    let etcd_whole = env.etcd_pid().map(ProcWatcher::start);
    let bench_whole = ProcWatcher::start(std::process::id());
    let services = (nodes / 10).max(2);
    let sim = Arc::new(Sim {
        api: Api::new(server.base_url()),
        watch_api: Api::new(server.base_url()),
        rec: Default::default(),
        nodes,
        services,
        namespaces: if ctx.args.quick { 2 } else { 10 },
        lease_interval,
        node_status_interval,
        stopping: Default::default(),
        registered: Default::default(),
        pods_created: Default::default(),
        pods_running: Default::default(),
        watch_terminations: Default::default(),
        unfinished_walks: Default::default(),
        proxy_events: Default::default(),
        pod_seen: Default::default(),
        dirty: Default::default(),
    });
    // RSS over time.
    let series: Arc<Mutex<Vec<(f64, f64)>>> = Arc::default();
    let sampler = {
        let series = series.clone();
        let every = if ctx.args.quick {
            Duration::from_millis(500)
        } else {
            Duration::from_secs(2)
        };
        AbortOnDrop(tokio::spawn(async move {
            let t0 = Instant::now();
            while let Some(s) = sample_proc(pid) {
                if let Ok(mut v) = series.lock() {
                    v.push((
                        t0.elapsed().as_secs_f64(),
                        s.rss_bytes as f64 / (1024.0 * 1024.0),
                    ));
                }
                tokio::time::sleep(every).await;
            }
        }))
    };

    progress::phase(&format!(
        "cluster with {nodes} nodes on {}: namespaces, {services} services",
        backend.name()
    ));
    simc::setup(&sim).await?;

    let gate = Arc::new(Semaphore::new(50));
    let mut tasks: Vec<AbortOnDrop> = (0..nodes)
        .map(|i| AbortOnDrop(tokio::spawn(simc::kubelet(sim.clone(), i, gate.clone()))))
        .collect();
    let pb = progress::bar(
        nodes as u64,
        format!("registering {nodes} hollow nodes (node, lease, pod watch)"),
    );
    let reg_deadline = Instant::now() + Duration::from_secs((nodes as u64 / 10).max(120));
    loop {
        let r = sim.registered.load(Ordering::Relaxed);
        pb.set_position(r);
        if r as usize >= nodes || Instant::now() > reg_deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    pb.finish_and_clear();
    let registered = sim.registered.load(Ordering::Relaxed) as usize;
    let register_secs = started.elapsed().as_secs_f64();
    if registered < nodes {
        report.note(format!("{nodes} nodes: only {registered} registered within the deadline; the run went on with them."));
    }
    let proxies = nodes.div_ceil(share);
    tasks.extend((0..proxies).map(|_| AbortOnDrop(tokio::spawn(simc::proxy(sim.clone())))));
    tasks.push(AbortOnDrop(tokio::spawn(simc::endpoints(sim.clone()))));
    tasks.push(AbortOnDrop(tokio::spawn(simc::lister(
        sim.clone(),
        ns_every,
        cluster_every,
    ))));

    let target = nodes * ppn;
    let pods_started = Instant::now();
    let startup = Arc::new(workload::Startup::default());
    let mut components = None;
    let mut deployments = 0;
    let (mut saturation_replicas, mut saturation_secs, mut latency_created) = (0u64, 0f64, 0u64);
    match ctx.args.workload {
        Workload::Pods => {
            let pb = progress::bar(
                target as u64,
                format!("creating {target} pods at {pod_rate}/s"),
            );
            simc::controller(
                sim.clone(),
                target,
                pod_rate,
                pods_started + max_pod,
                pb.clone(),
            )
            .await;
            let created = sim.pods_created.load(Ordering::Relaxed);
            let run_deadline = Instant::now() + Duration::from_secs(60);
            while sim.pods_running.load(Ordering::Relaxed) < created
                && Instant::now() < run_deadline
            {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            pb.finish_and_clear();
        }
        Workload::Deployments => {
            tasks.push(AbortOnDrop(tokio::spawn(workload::startup_watcher(
                sim.clone(),
                startup.clone(),
            ))));
            let dir = tempfile::tempdir().context("temp dir for the components")?;
            let mut c = workload::Components::start(&ctx.exe, server.base_url(), dir.path())?;
            let pb = progress::bar(
                target as u64,
                format!("{target} pods from Deployments (controller-manager, scheduler, hollow kubelets)"),
            );
            let burst_started = Instant::now();
            let (d, replicas) = workload::create_deployments(&sim, target).await;
            deployments = d;
            saturation_replicas = replicas as u64;
            let deadline = pods_started + max_pod;
            wait_running(&startup, PodKind::Saturation, replicas as u64, deadline, &pb, &mut c).await?;
            pb.finish_and_clear();
            saturation_secs = burst_started.elapsed().as_secs_f64();
            if latency.pods > 0 {
                let pb = progress::bar(
                    latency.pods as u64,
                    format!("{} latency pods at {}/s on the saturated cluster", latency.pods, latency.rate),
                );
                let creating = workload::create_latency_deployments(&sim, latency.pods, latency.rate);
                let waiting = async {
                    // Progress while they are created; the wait below judges completion.
                    loop {
                        pb.set_position(startup.running(PodKind::Latency));
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                };
                latency_created = tokio::select! {
                    n = creating => n as u64,
                    () = waiting => unreachable!("the progress loop never ends"),
                };
                let deadline = Instant::now() + Duration::from_secs(60);
                wait_running(&startup, PodKind::Latency, latency_created, deadline, &pb, &mut c).await?;
                pb.finish_and_clear();
            }
            components = Some((c, dir));
        }
    }
    // The saturation burst's pods (latency pods are reported in their own table).
    let (created, pod_secs) = match ctx.args.workload {
        Workload::Deployments => (saturation_replicas, saturation_secs),
        Workload::Pods => (sim.pods_created.load(Ordering::Relaxed), pods_started.elapsed().as_secs_f64()),
    };
    if (created as usize) < target && ctx.args.workload == Workload::Deployments {
        report.note(format!(
            "{nodes} nodes: Deployments for {created} of {target} pods were created; the other creates failed (see the failed calls)."
        ));
    } else if (created as usize) < target {
        report.note(format!(
            "{nodes} nodes: {created} of {target} pods were created: the pod phase is capped at {} s (--max-pod-seconds) on this machine.",
            max_pod.as_secs()
        ));
    }

    let pb = progress::bar(0, format!("steady state for {} s", steady.as_secs()));
    let steady_usage = ProcWatcher::start(pid);
    tokio::time::sleep(steady).await;
    let steady_usage = steady_usage.finish();
    pb.finish_and_clear();

    let terminated_metric = sim.api.metrics().await.map(|text| {
        crate::client::metric_sum(&text, "apiserver_terminated_watchers_total")
            .map(|v| format!("{v}"))
            .unwrap_or_else(|| {
                if text.contains("apiserver_watch_cache_") {
                    "0".into()
                } else {
                    "n/a (no watch cache metrics)".into()
                }
            })
    });
    sim.stopping.store(true, Ordering::SeqCst);
    drop(components);
    drop(tasks);
    let unfinished = sim.unfinished_walks.load(Ordering::Relaxed);
    anyhow::ensure!(
        unfinished == 0,
        "{unfinished} paginated LISTs had not ended after {} pages",
        crate::scenarios::cluster_sim::WALK_PAGE_BUDGET
    );
    let whole = whole.finish();
    let etcd_whole = etcd_whole.and_then(ProcWatcher::finish);
    let bench_whole = bench_whole.finish();
    drop(sampler);
    server.stop().await;
    drop(env);

    // Reports.
    let calls = sim.rec.calls();
    let errors = sim.rec.errors();
    let err_count = |pred: &dyn Fn(&CallKey) -> bool| {
        errors
            .iter()
            .filter(|((k, _), _)| pred(k))
            .map(|(_, n)| n)
            .sum::<u64>()
    };
    let mut slo_table = Table::new(
        format!("{nodes} nodes: API call latency vs the Kubernetes SLOs (client-side, whole run)"),
        &[
            "SLI",
            "scope",
            "calls",
            "errors",
            "p50",
            "p90",
            "p99",
            "max",
            "SLO (p99 ≤)",
            "met",
        ],
    );
    let mut slo = Vec::new();
    for (title, verbs, scope, bound) in SLOS {
        let mut h = Histogram::default();
        for ((v, s, _), hist) in &calls {
            if verbs.contains(v) && s == scope {
                h.merge(hist);
            }
        }
        let errs = err_count(&|(v, s, _)| verbs.contains(v) && s == scope);
        let summary = h.summary();
        let fmt = |f: fn(&Summary) -> f64| {
            summary
                .as_ref()
                .map(|s| fmt_secs(f(s)))
                .unwrap_or_else(|| "n/a".into())
        };
        slo_table.row(vec![
            title.to_string(),
            scope.name().into(),
            fmt_count(h.count()),
            fmt_count(errs),
            fmt(|s| s.p50),
            fmt(|s| s.p90),
            fmt(|s| s.p99),
            fmt(|s| s.max),
            fmt_secs(*bound),
            match summary {
                Some(s) if s.p99 <= *bound => "yes".into(),
                Some(_) => "NO".into(),
                None => "no calls".into(),
            },
        ]);
        if let Some(s) = summary {
            report.push_summary(
                "cluster/slo_latency",
                "s",
                &[
                    ("nodes", nodes.to_string()),
                    ("sli", title.to_string()),
                    ("scope", scope.name().into()),
                ],
                s,
            );
        }
        slo.push((*title, summary, errs, *bound));
    }
    let mut detail = Table::new(
        format!("{nodes} nodes: calls by verb, scope and resource"),
        &[
            "verb", "scope", "resource", "calls", "errors", "p50", "p99", "max",
        ],
    );
    for (key @ (v, s, r), h) in &calls {
        let Some(sum) = h.summary() else { continue };
        let errs = err_count(&|k| k == key);
        detail.row(vec![
            v.name().into(),
            s.name().into(),
            r.to_string(),
            fmt_count(h.count()),
            fmt_count(errs),
            fmt_secs(sum.p50),
            fmt_secs(sum.p99),
            fmt_secs(sum.max),
        ]);
        report.push_summary(
            "cluster/call_latency",
            "s",
            &[
                ("nodes", nodes.to_string()),
                ("verb", v.name().into()),
                ("scope", s.name().into()),
                ("resource", r.to_string()),
            ],
            sum,
        );
    }
    let mut err_table = Table::new(
        format!("{nodes} nodes: failed calls"),
        &["verb", "scope", "resource", "code", "count"],
    );
    for (((v, s, r), code), n) in &errors {
        err_table.row(vec![
            v.name().into(),
            s.name().into(),
            r.to_string(),
            code.clone(),
            fmt_count(*n),
        ]);
    }
    let seen = sim.pod_seen.lock().ok().and_then(|h| h.summary());
    if let Some(s) = seen {
        report.push_summary(
            "cluster/pod_create_to_kubelet_watch",
            "s",
            &[("nodes", nodes.to_string())],
            s,
        );
    }
    let mut sim_table = Table::new(format!("{nodes} nodes: the simulation"), &["what", "value"]);
    let rows: Vec<(&str, String)> = vec![
        (
            "hollow kubelets registered",
            format!(
                "{} of {nodes} in {register_secs:.0} s",
                fmt_count(registered as u64)
            ),
        ),
        (
            "hollow proxies (nodes per proxy)",
            format!("{} ({share})", fmt_count(proxies as u64)),
        ),
        (
            "open watches (kubelet pod watches + 2 per proxy)",
            fmt_count((registered + 2 * proxies) as u64),
        ),
        ("services / endpointslices", fmt_count(services as u64)),
        (
            "pods created / target",
            format!("{} / {}", fmt_count(created), fmt_count(target as u64)),
        ),
        (
            "pod creation rate achieved",
            fmt_rate(created as f64 / pod_secs.max(1e-9)),
        ),
        (
            "pods reported Running by their kubelet",
            fmt_count(sim.pods_running.load(Ordering::Relaxed)),
        ),
        (
            "pod create → ADDED at its kubelet (p50 / p99 / max)",
            seen.map(|s| {
                format!(
                    "{} / {} / {}",
                    fmt_secs(s.p50),
                    fmt_secs(s.p99),
                    fmt_secs(s.max)
                )
            })
            .unwrap_or_else(|| "n/a".into()),
        ),
        (
            "events received by proxies",
            fmt_count(sim.proxy_events.load(Ordering::Relaxed)),
        ),
        (
            "watch streams that ended early (re-opened by the client)",
            fmt_count(sim.watch_terminations.load(Ordering::Relaxed)),
        ),
        (
            "apiserver_terminated_watchers_total at the end",
            terminated_metric.unwrap_or_else(|| "n/a (no /metrics)".into()),
        ),
        ("steady state", format!("{} s", steady.as_secs())),
        (
            "wall time",
            format!("{:.0} s", started.elapsed().as_secs_f64()),
        ),
    ];
    for (k, v) in rows {
        sim_table.row(vec![k.into(), v]);
    }
    let mut res = Table::new(
        format!("{nodes} nodes: resource use"),
        &[
            "process",
            "window",
            "peak RSS",
            "RSS at end",
            "CPU seconds",
            "avg cores",
        ],
    );
    let mut usage_row = |name: &str, window: &str, u: Option<ProcUsage>| match u {
        Some(u) => res.row(vec![
            name.into(),
            window.into(),
            fmt_bytes(u.peak_rss_bytes),
            fmt_bytes(u.final_rss_bytes),
            format!("{:.1}", u.cpu_seconds),
            format!("{:.2}", u.avg_cores),
        ]),
        None => res.row(vec![
            name.into(),
            window.into(),
            "n/a".into(),
            "n/a".into(),
            "n/a".into(),
            "n/a".into(),
        ]),
    };
    usage_row("rkube apiserver", "whole run", whole);
    usage_row("rkube apiserver", "steady state", steady_usage);
    if backend == Backend::Etcd {
        usage_row("etcd", "whole run", etcd_whole);
    }
    usage_row(
        "rkube bench (all simulated clients)",
        "whole run",
        bench_whole,
    );
    for (name, u) in [
        ("apiserver", whole),
        ("apiserver_steady", steady_usage),
        ("etcd", etcd_whole),
        ("bench", bench_whole),
    ] {
        if let Some(u) = u {
            let labels = [("nodes", nodes.to_string()), ("process", name.to_string())];
            report.measure(
                "cluster/peak_rss",
                "bytes",
                &labels,
                &[u.peak_rss_bytes as f64],
            );
            report.measure("cluster/avg_cores", "cores", &labels, &[u.avg_cores]);
        }
    }
    report.tables.extend([slo_table, sim_table]);
    if ctx.args.workload == Workload::Deployments {
        let t = startup_table(
            report,
            nodes,
            deployments,
            saturation_replicas,
            saturation_secs,
            &startup.summary(PodKind::Saturation),
        );
        report.tables.push(t);
        if latency.pods > 0 {
            let t = latency_table(report, nodes, latency, latency_created, &startup.summary(PodKind::Latency));
            report.tables.push(t);
        }
    }
    report.tables.extend([res, detail]);
    if !err_table.rows.is_empty() {
        report.tables.push(err_table);
    }
    let points = series.lock().map(|v| v.clone()).unwrap_or_default();
    report.plots.push(Plot {
        title: format!("{nodes} nodes: apiserver RSS over the run"),
        x_label: "seconds since start".into(),
        y_label: "RSS (MiB)".into(),
        log_x: false,
        log_y: false,
        series: vec![Series {
            name: "apiserver RSS".into(),
            points,
        }],
    });
    if ctx.machine.nproc <= 2 {
        report.note(format!(
            "{nodes} nodes: the simulated clients run on the same {} CPUs as the API server{}; their CPU use is in the resource table.",
            ctx.machine.nproc,
            if backend == Backend::Etcd { " and etcd" } else { "" }
        ));
    }
    Ok(Outcome { nodes, slo })
}

/// Upstream's pod startup SLO for stateless pods: p99 of created → Running ≤ 5 s
/// (`sig-scalability/slos/pod_startup_latency.md`), a steady-state SLO: it holds while the
/// cluster's churn is at most 20 pod or user operations per second (`slos.md`).
const POD_STARTUP_SLO_SECONDS: f64 = 5.0;

/// One row per stage of `f` (created → scheduled → Running), each also a measurement named
/// `{prefix}…` with `labels`; the startup row is judged against `slo` when given.
fn stage_rows(
    report: &mut Report,
    t: &mut Table,
    prefix: &str,
    labels: &[(&str, String)],
    f: &workload::StartupFigures,
    expected: u64,
    slo: Option<f64>,
) {
    let stages: [(&str, String, &Histogram, Option<f64>); 3] = [
        ("created → scheduled", format!("cluster/{prefix}pod_create_to_scheduled"), &f.create_to_schedule, None),
        (
            "scheduled → Running reported",
            format!("cluster/{prefix}pod_scheduled_to_running"),
            &f.schedule_to_running,
            None,
        ),
        ("created → Running (pod startup)", format!("cluster/{prefix}pod_startup_latency"), &f.startup, slo),
    ];
    for (title, metric, h, slo) in stages {
        let sum = h.summary();
        let cell = |g: fn(&Summary) -> f64| sum.as_ref().map_or("n/a".into(), |s| fmt_secs(g(s)));
        let met = match (slo, &sum) {
            (Some(bound), Some(s)) if s.p99 <= bound && h.count() == expected => "yes".to_string(),
            (Some(_), _) => "NO".to_string(),
            (None, _) => String::new(),
        };
        t.row(vec![
            title.into(),
            fmt_count(h.count()),
            cell(|s| s.p50),
            cell(|s| s.p90),
            cell(|s| s.p99),
            cell(|s| s.max),
            slo.map_or(String::new(), fmt_secs),
            met,
        ]);
        if let Some(s) = sum {
            report.push_summary(&metric, "s", labels, s);
        }
    }
}

/// The latency pods' figures: created one at a time at `latency.rate`/s on the saturated
/// cluster, as ClusterLoader2's density test measures the pod startup SLO.
fn latency_table(
    report: &mut Report,
    nodes: usize,
    latency: Latency,
    created: u64,
    f: &workload::StartupFigures,
) -> Table {
    let mut t = Table::new(
        format!(
            "{nodes} nodes: pod startup SLO on {} latency pods (one-replica Deployments created at {}/s after the saturation pods run; churn ≤ 20/s, upstream's steady state)",
            fmt_count(created),
            latency.rate
        ),
        &["stage", "pods", "p50", "p90", "p99", "max", "SLO (p99 ≤)", "met"],
    );
    let labels = [("nodes", nodes.to_string())];
    stage_rows(report, &mut t, "", &labels, f, created, Some(POD_STARTUP_SLO_SECONDS));
    if (created as usize) < latency.pods {
        report.note(format!(
            "{nodes} nodes: {created} of {} latency Deployments were created (see the failed calls).",
            latency.pods
        ));
    }
    if f.running < created {
        report.note(format!(
            "{nodes} nodes: {} of {} latency pods were seen Running within 60 s of the last create.",
            fmt_count(f.running),
            fmt_count(created)
        ));
    }
    t
}

/// The saturation burst's figures: each stage's latency, the time until every pod ran, and
/// the scheduler's throughput, also as measurements. No SLO is judged here: the burst creates
/// pods far faster than upstream's steady state, and upstream's burst SLO (time to start
/// 30 × nodes pods) has no threshold yet.
fn startup_table(
    report: &mut Report,
    nodes: usize,
    deployments: usize,
    replicas: u64,
    saturation_secs: f64,
    f: &workload::StartupFigures,
) -> Table {
    let mut t = Table::new(
        format!(
            "{nodes} nodes: saturation burst of {} pods in {deployments} Deployments created at once, expanded by rkube controller-manager and placed by rkube scheduler (times seen by one pod watch)",
            fmt_count(replicas)
        ),
        &["stage", "pods", "p50", "p90", "p99", "max", "SLO (p99 ≤)", "met"],
    );
    let labels = [("nodes", nodes.to_string())];
    stage_rows(report, &mut t, "saturation_", &labels, f, replicas, None);
    t.row(vec![
        "first Deployment create sent → last pod Running".into(),
        fmt_count(f.running),
        fmt_secs(saturation_secs),
        String::new(),
        String::new(),
        String::new(),
        String::new(),
        String::new(),
    ]);
    report.measure("cluster/saturation_seconds", "s", &labels, &[saturation_secs]);
    let rate = f.scheduler_pods_per_second;
    t.row(vec![
        "scheduler throughput (first → last binding)".into(),
        fmt_count(f.scheduled),
        rate.map_or("n/a".into(), fmt_rate),
        String::new(),
        String::new(),
        String::new(),
        String::new(),
        String::new(),
    ]);
    if let Some(r) = rate {
        report.measure("cluster/scheduler_throughput", "pods/s", &labels, &[r]);
    }
    if f.running < replicas {
        report.note(format!(
            "{nodes} nodes: {} of {} pods were seen Running before the pod phase ended (--max-pod-seconds).",
            fmt_count(f.running),
            fmt_count(replicas)
        ));
    }
    t
}
