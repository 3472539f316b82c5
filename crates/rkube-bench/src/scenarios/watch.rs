//! `rkube bench watch`: watch fan-out and delivery latency.
//!
//! W watchers (one HTTP/1.1 connection each, like W kubelets) watch
//! configmaps in one namespace from a LIST's resourceVersion; a writer
//! creates small configmaps at a set rate, each carrying its send time
//! (`data.sent`, Unix nanoseconds, taken just before the POST). A watcher
//! records `receive time − sent` per event: the delivery latency through the
//! whole write path and fan-out.
//!
//! - Fan-out sweep: W in `--watchers` (100, 1,000, 5,000) at a fixed rate.
//! - Rate sweep: W = 1,000 (or the largest that fitted) at rising rates
//!   (`--rates`) until a watcher is terminated, deliveries are lost, or the
//!   writer cannot reach the rate: the last clean rate is the highest
//!   sustained write rate before any watcher is terminated.
//!
//! A watcher whose stream ends early counts as terminated (and re-watches from
//! its last resourceVersion, like client-go); `apiserver_terminated_watchers_total`
//! is read from `/metrics` when the server has it. Each step starts with a
//! few untimed warm-up events that every watcher must see.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::json;
use tokio::sync::Semaphore;

use crate::cli::Scenario;
use crate::client::{metric_sum, Api};
use crate::load;
use crate::objects;
use crate::procs::{sample_proc, Backend, ProcWatcher};
use crate::progress;
use crate::report::{Report, Table};
use crate::scenarios::{pick, Ctx};
use crate::stats::{fmt_bytes, fmt_count, fmt_rate, fmt_secs, Histogram, Summary};
use crate::svg::{Plot, Series};

const NS: &str = "bench-watch";
/// Writes in flight at most; beyond it the writer is saturated and skips.
const WRITER_IN_FLIGHT: usize = 512;
/// The metric upstream counts closed slow watchers with.
const TERMINATED_METRIC: &str = "apiserver_terminated_watchers_total";

/// `apiserver_terminated_watchers_total` summed over resources; 0 when the
/// server exposes its watch cache metrics but no watcher was terminated yet
/// (an empty counter family is not printed); `None` without such metrics.
async fn terminated_metric(api: &Api) -> Option<f64> {
    let text = api.metrics().await?;
    metric_sum(&text, TERMINATED_METRIC).or_else(|| text.contains("apiserver_watch_cache_").then_some(0.0))
}

fn now_nanos() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0)
}

/// One watcher's counters for the current step.
#[derive(Default)]
struct WatcherState {
    hist: Mutex<Histogram>,
    received: AtomicU64,
    terminated: AtomicU64,
    connected: AtomicBool,
}

/// Shared by the writer and all watchers.
struct Global {
    step: AtomicU32,
    stopping: AtomicBool,
}

/// A set of running watchers.
struct Watchers {
    states: Vec<Arc<WatcherState>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    global: Arc<Global>,
}

impl Watchers {
    async fn start(api: &Api, count: usize, rv: &str) -> Watchers {
        let global = Arc::new(Global { step: AtomicU32::new(0), stopping: AtomicBool::new(false) });
        let mut states = Vec::with_capacity(count);
        let mut tasks = Vec::with_capacity(count);
        // Connect in waves so the accept queue is not flooded.
        let gate = Arc::new(Semaphore::new(100));
        for _ in 0..count {
            let state = Arc::new(WatcherState::default());
            states.push(state.clone());
            tasks.push(tokio::spawn(watch_loop(api.clone(), state, global.clone(), rv.to_string(), gate.clone())));
        }
        Watchers { states, tasks, global }
    }

    fn connected(&self) -> usize {
        self.states.iter().filter(|s| s.connected.load(Ordering::Relaxed)).count()
    }

    fn received(&self) -> u64 {
        self.states.iter().map(|s| s.received.load(Ordering::Relaxed)).sum()
    }

    fn terminated(&self) -> u64 {
        self.states.iter().map(|s| s.terminated.load(Ordering::Relaxed)).sum()
    }

    /// Moves to step `step`: clears per-step counters and histograms.
    fn begin(&self, step: u32) {
        self.global.step.store(step, Ordering::SeqCst);
        for s in &self.states {
            s.received.store(0, Ordering::Relaxed);
            if let Ok(mut h) = s.hist.lock() {
                *h = Histogram::default();
            }
        }
    }

    fn merged(&self) -> Histogram {
        let mut all = Histogram::default();
        for s in &self.states {
            if let Ok(h) = s.hist.lock() {
                all.merge(&h);
            }
        }
        all
    }

    fn stop(self) {
        self.global.stopping.store(true, Ordering::SeqCst);
        for t in self.tasks {
            t.abort();
        }
    }
}

/// One watcher: watch, record, re-watch from the last resourceVersion when the stream ends.
async fn watch_loop(api: Api, state: Arc<WatcherState>, global: Arc<Global>, mut rv: String, gate: Arc<Semaphore>) {
    loop {
        let path = format!("/api/v1/namespaces/{NS}/configmaps?watch=true&resourceVersion={rv}&allowWatchBookmarks=true&timeoutSeconds=3600");
        let opened = {
            let _permit = gate.acquire().await;
            api.watch(&path).await
        };
        let mut stream = match opened {
            Ok(s) => s,
            Err(_) => {
                if global.stopping.load(Ordering::Relaxed) {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        state.connected.store(true, Ordering::Relaxed);
        while let Ok(Some(ev)) = stream.next_event().await {
            let received = now_nanos();
            if ev.kind == "ERROR" {
                // 410 Expired or another error: start over from the current state.
                if let Ok(page) = api.list(&format!("/api/v1/namespaces/{NS}/configmaps?limit=1")).await {
                    rv = page.resource_version;
                }
                break;
            }
            if !ev.object.metadata.resource_version.is_empty() {
                rv = ev.object.metadata.resource_version.clone();
            }
            if ev.kind != "ADDED" {
                continue;
            }
            let Some(data) = &ev.object.data else { continue };
            let (Some(sent), Some(step)) = (data.get("sent").and_then(|s| s.parse::<u128>().ok()), data.get("step").and_then(|s| s.parse::<u32>().ok())) else {
                continue;
            };
            if step == global.step.load(Ordering::Relaxed) {
                let us = u32::try_from(received.saturating_sub(sent) / 1000).unwrap_or(u32::MAX);
                if let Ok(mut h) = state.hist.lock() {
                    h.record(us);
                }
                state.received.fetch_add(1, Ordering::Relaxed);
            }
        }
        if global.stopping.load(Ordering::Relaxed) {
            return;
        }
        state.terminated.fetch_add(1, Ordering::Relaxed);
    }
}

/// What the writer did in one step.
struct Written {
    ok: u64,
    failed: u64,
    skipped: u64,
    seconds: f64,
}

/// Creates configmaps at `rate`/s for `duration` (step `step`), at most [`WRITER_IN_FLIGHT`] in flight.
async fn write_step(api: &Api, step: u32, rate: f64, duration: Duration) -> Written {
    let sem = Arc::new(Semaphore::new(WRITER_IN_FLIGHT));
    let ok = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let mut skipped = 0;
    let start = Instant::now();
    let total = (rate * duration.as_secs_f64()).round().max(1.0) as u64;
    for i in 0..total {
        let at = start + Duration::from_secs_f64(i as f64 / rate);
        tokio::time::sleep_until(at.into()).await;
        let Ok(permit) = sem.clone().try_acquire_owned() else {
            skipped += 1;
            continue;
        };
        let (api, ok, failed) = (api.clone(), ok.clone(), failed.clone());
        tokio::spawn(async move {
            let name = format!("ev-{step}-{i}");
            let body = json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": NS},
                "data": {"sent": now_nanos().to_string(), "step": step.to_string(), "pad": objects::payload(i as usize, 200)},
            });
            match api.create(&format!("/api/v1/namespaces/{NS}/configmaps"), &body).await {
                Ok(_) => ok.fetch_add(1, Ordering::Relaxed),
                Err(_) => failed.fetch_add(1, Ordering::Relaxed),
            };
            drop(permit);
        });
    }
    let _ = sem.acquire_many(WRITER_IN_FLIGHT as u32).await;
    Written { ok: ok.load(Ordering::Relaxed), failed: failed.load(Ordering::Relaxed), skipped, seconds: start.elapsed().as_secs_f64() }
}

/// The result of one step.
struct StepResult {
    watchers: usize,
    target_rate: f64,
    achieved_rate: f64,
    delivered: f64,
    latency: Option<Summary>,
    terminated_client: u64,
    terminated_metric: Option<f64>,
    server_cores: Option<f64>,
    bench_cores: Option<f64>,
    server_rss: Option<u64>,
    write_failures: u64,
}

impl StepResult {
    fn clean(&self) -> bool {
        self.terminated_client == 0 && self.terminated_metric.unwrap_or(0.0) == 0.0 && self.delivered >= 0.999
    }
}

#[allow(clippy::too_many_arguments)]
/// Runs one step: warm-up, then `rate` events/s for `secs`, then waits for delivery.
async fn step(api: &Api, writer: &Api, w: &Watchers, step_id: u32, rate: f64, secs: Duration, drain: Duration, pid: u32) -> StepResult {
    // Warm-up: every watcher must see these before timing starts.
    w.begin(step_id * 2);
    let warm = write_step(writer, step_id * 2, 20.0, Duration::from_millis(150)).await;
    let want = warm.ok * w.states.len() as u64;
    let deadline = Instant::now() + drain;
    while w.received() < want && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let metric_before = terminated_metric(api).await;
    let term_before = w.terminated();
    w.begin(step_id * 2 + 1);
    let usage = ProcWatcher::start(pid);
    let own = ProcWatcher::start(std::process::id());
    let written = write_step(writer, step_id * 2 + 1, rate, secs).await;
    let want = written.ok * w.states.len() as u64;
    let deadline = Instant::now() + drain;
    while w.received() < want && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let usage = usage.finish();
    let own = own.finish();
    let metric_after = terminated_metric(api).await;
    StepResult {
        watchers: w.states.len(),
        target_rate: rate,
        achieved_rate: written.ok as f64 / written.seconds.max(1e-9),
        delivered: if want == 0 { 0.0 } else { w.received() as f64 / want as f64 },
        latency: w.merged().summary(),
        terminated_client: w.terminated() - term_before,
        terminated_metric: match (metric_before, metric_after) {
            (Some(b), Some(a)) => Some(a - b),
            (None, Some(a)) => Some(a),
            _ => None,
        },
        server_cores: usage.map(|u| u.avg_cores),
        bench_cores: own.map(|u| u.avg_cores),
        server_rss: sample_proc(pid).map(|s| s.rss_bytes),
        write_failures: written.failed + written.skipped,
    }
}

/// Starts `count` watchers and waits up to 120 s for them to connect.
async fn start_watchers(api: &Api, count: usize, rv: &str) -> Watchers {
    let pb = progress::bar(count as u64, format!("opening {count} watches"));
    let w = Watchers::start(api, count, rv).await;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let c = w.connected();
        pb.set_position(c as u64);
        if c >= count || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    pb.finish_and_clear();
    w
}

/// Runs the scenario.
pub async fn run(ctx: &Ctx) -> anyhow::Result<Report> {
    let quick = ctx.args.quick;
    let backend = ctx.args.backend.unwrap_or(Backend::Embedded);
    let mut counts = pick(&ctx.args.watchers, quick, &[10, 50], &[100, 1000, 5000]);
    counts.sort_unstable();
    let rates: Vec<f64> = pick(&ctx.args.rates, quick, &[20, 100], &[50, 100, 200, 500, 1000, 2000, 4000]).into_iter().map(f64::from).collect();
    let secs = Duration::from_secs(ctx.args.step_seconds.unwrap_or(if quick { 1 } else { 10 }));
    let drain = Duration::from_secs(if quick { 3 } else { 15 });
    let fanout_rate = if quick { 20.0 } else { 50.0 };
    let sweep_watchers = if quick { 10 } else { 1000 };
    let mut report = ctx.report(
        Scenario::Watch,
        json!({"backend": backend, "watchers": counts, "fanout_rate": fanout_rate, "rates": rates, "sweep_watchers": sweep_watchers,
            "step_seconds": secs.as_secs(), "drain_seconds": drain.as_secs(), "writer_in_flight": WRITER_IN_FLIGHT,
            "latency": "POST send (timestamp in data.sent) → event parsed by the watcher, same host clock"}),
    );
    // Each watcher costs one descriptor here and one in the server.
    let fd_limit = ctx.machine.open_files_limit.unwrap_or(1024) as usize;
    let fit = fd_limit.saturating_sub(1000);
    if let Some(&max) = counts.last() {
        if max > fit {
            report.note(format!("Watcher counts above {fit} do not fit the open-files limit ({fd_limit}); they were capped."));
            for c in counts.iter_mut() {
                *c = (*c).min(fit);
            }
            counts.dedup();
        }
    }
    let env = ctx.env(backend).await?;
    let server = env.start_server(&[]).await?;
    let api = Api::new(server.base_url());
    let writer = Api::new(server.base_url());
    load::namespace_http(&api, NS).await?;
    let has_metric = terminated_metric(&api).await.is_some();
    if !has_metric {
        report.note("The server has no watch cache metrics on /metrics: terminated watchers are counted client-side only (a stream that ended before its timeoutSeconds).");
    }
    let mut step_id = 1;
    let mut fanout = Vec::new();
    let mut largest_ok = 0;
    for &count in &counts {
        let rv = api.list(&format!("/api/v1/namespaces/{NS}/configmaps?limit=1")).await?.resource_version;
        let w = start_watchers(&api, count, &rv).await;
        let connected = w.connected();
        if connected < count {
            report.note(format!("Only {connected} of {count} watches connected within 120 s; the step ran with those that did."));
        } else {
            largest_ok = count;
        }
        progress::phase(&format!("fan-out: {count} watchers, {fanout_rate} events/s for {} s", secs.as_secs()));
        let r = step(&api, &writer, &w, step_id, fanout_rate, secs, drain, server.pid()).await;
        step_id += 1;
        w.stop();
        record(&mut report, "fanout", &r, backend);
        fanout.push(r);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let sweep_w = if largest_ok > 0 { sweep_watchers.min(largest_ok.max(counts[0])) } else { sweep_watchers.min(counts.first().copied().unwrap_or(10)) };
    if sweep_w < sweep_watchers {
        report.note(format!("Rate sweep scaled down to {sweep_w} watchers (the largest count that connected fully)."));
    }
    let rv = api.list(&format!("/api/v1/namespaces/{NS}/configmaps?limit=1")).await?.resource_version;
    let w = start_watchers(&api, sweep_w, &rv).await;
    let mut sweep = Vec::new();
    let mut stop_reason = format!("the sweep reached its last rate ({}/s) with no termination", rates.last().copied().unwrap_or(0.0));
    for &rate in &rates {
        progress::phase(&format!("rate sweep: {sweep_w} watchers, {rate} events/s for {} s", secs.as_secs()));
        let r = step(&api, &writer, &w, step_id, rate, secs, drain, server.pid()).await;
        step_id += 1;
        record(&mut report, "rate", &r, backend);
        let clean = r.clean();
        let saturated = r.achieved_rate < 0.9 * rate;
        let failed = r.write_failures;
        sweep.push(r);
        if !clean {
            let r = sweep.last().map(|r| (r.terminated_client, r.terminated_metric.unwrap_or(0.0), r.delivered)).unwrap_or_default();
            stop_reason = if r.0 > 0 || r.1 > 0.0 {
                format!("at {rate}/s watchers were terminated ({} streams ended early, metric +{})", r.0, r.1)
            } else {
                format!(
                    "at {rate}/s only {:.1}% of the events reached the watchers within {} s of the last write, with no watcher terminated                      (the server or this client, which parses every event on the same CPUs, could not keep up)",
                    r.2 * 100.0,
                    drain.as_secs()
                )
            };
            break;
        }
        if saturated || failed > 0 {
            stop_reason = format!(
                "at {rate}/s the writer could not sustain the rate ({failed} writes skipped at its in-flight limit or failed), before any watcher was terminated"
            );
            break;
        }
    }
    w.stop();
    server.stop().await;
    drop(env);

    let best_step = sweep.iter().filter(|r| r.clean()).max_by(|a, b| a.achieved_rate.total_cmp(&b.achieved_rate));
    let best = best_step.map(|r| r.achieved_rate).unwrap_or(f64::NAN);
    let mut summary = Table::new(
        "Highest sustained write rate before any watcher was terminated",
        &["watchers", "highest clean rate (achieved)", "p99 delivery latency there", "why the sweep stopped"],
    );
    summary.row(vec![
        fmt_count(sweep_w as u64),
        if best.is_nan() { "none".into() } else { fmt_rate(best) },
        best_step.and_then(|r| r.latency).map(|l| fmt_secs(l.p99)).unwrap_or_else(|| "n/a".into()),
        stop_reason,
    ]);
    if !best.is_nan() {
        report.measure("watch/max_sustained_rate", "events/s", &[("watchers", sweep_w.to_string()), ("backend", backend.name().into())], &[best]);
    }
    report.tables.push(table(&format!("Fan-out at {fanout_rate} events/s ({} s per step)", secs.as_secs()), &fanout));
    report.tables.push(table(&format!("Event rate sweep with {sweep_w} watchers ({} s per step)", secs.as_secs()), &sweep));
    report.tables.push(summary);
    report.plots.push(plot("Watch delivery latency vs watchers", "watchers", &fanout, |r| r.watchers as f64));
    report.plots.push(plot(&format!("Watch delivery latency vs event rate ({sweep_w} watchers)"), "events/s (target)", &sweep, |r| r.target_rate));
    Ok(report)
}

fn record(report: &mut Report, sweep: &str, r: &StepResult, backend: Backend) {
    let labels = [
        ("sweep", sweep.to_string()),
        ("watchers", r.watchers.to_string()),
        ("rate", format!("{}", r.target_rate)),
        ("backend", backend.name().to_string()),
    ];
    if let Some(l) = r.latency {
        report.push_summary("watch/delivery_latency", "s", &labels, l);
    }
    report.measure("watch/achieved_rate", "events/s", &labels, &[r.achieved_rate]);
    report.measure("watch/delivered_fraction", "ratio", &labels, &[r.delivered]);
    if let Some(c) = r.server_cores {
        report.measure("watch/apiserver_cores", "cores", &labels, &[c]);
    }
    if let Some(c) = r.bench_cores {
        report.measure("watch/bench_client_cores", "cores", &labels, &[c]);
    }
}

fn table(title: &str, rows: &[StepResult]) -> Table {
    let mut t = Table::new(
        title,
        &["watchers", "target rate", "achieved", "delivered", "p50", "p99", "max", "terminated (client / metric)", "apiserver CPU (cores)", "bench client CPU (cores)", "apiserver RSS"],
    );
    for r in rows {
        let lat = |f: fn(&Summary) -> f64| r.latency.as_ref().map(|s| fmt_secs(f(s))).unwrap_or_else(|| "n/a".into());
        t.row(vec![
            fmt_count(r.watchers as u64),
            fmt_rate(r.target_rate),
            fmt_rate(r.achieved_rate),
            format!("{:.2}%", r.delivered * 100.0),
            lat(|s| s.p50),
            lat(|s| s.p99),
            lat(|s| s.max),
            format!("{} / {}", r.terminated_client, r.terminated_metric.map(|m| format!("{m}")).unwrap_or_else(|| "n/a".into())),
            r.server_cores.map(|c| format!("{c:.2}")).unwrap_or_else(|| "n/a".into()),
            r.bench_cores.map(|c| format!("{c:.2}")).unwrap_or_else(|| "n/a".into()),
            r.server_rss.map(fmt_bytes).unwrap_or_else(|| "n/a".into()),
        ]);
    }
    t
}

fn plot(title: &str, x_label: &str, rows: &[StepResult], x: fn(&StepResult) -> f64) -> Plot {
    let pts = |f: fn(&Summary) -> f64| rows.iter().filter_map(|r| r.latency.as_ref().map(|s| (x(r), f(s)))).collect::<Vec<_>>();
    Plot {
        title: title.into(),
        x_label: x_label.into(),
        y_label: "seconds".into(),
        log_x: true,
        log_y: false,
        series: vec![Series { name: "p50".into(), points: pts(|s| s.p50) }, Series { name: "p99".into(), points: pts(|s| s.p99) }],
    }
}
