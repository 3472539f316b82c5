//! `rkube bench writes`: create and update throughput and latency of ~1 KB
//! configmaps through the API, per backend and concurrency level.
//!
//! For each backend one API server runs; for each concurrency level `c`,
//! `ops` configmaps are POSTed with `c` requests in flight, then each is PUT
//! once with the resourceVersion its create returned (a guarded update).
//! Latency is per request (send → body read); throughput is ops / wall time.

use std::collections::BTreeMap;
use std::time::Instant;

use futures::{StreamExt, TryStreamExt};
use serde_json::json;

use crate::cli::Scenario;
use crate::client::Api;
use crate::load;
use crate::objects;
use crate::procs::{Backend, ProcWatcher};
use crate::progress;
use crate::report::{Report, Table};
use crate::scenarios::{pick, Ctx};
use crate::stats::{fmt_bytes, fmt_rate, fmt_secs, micros, Summary};
use crate::svg::{Plot, Series};

const NS: &str = "bench-writes";

/// One (backend, verb, concurrency) result.
struct Row {
    throughput: f64,
    latency: Summary,
}

/// Runs the scenario.
pub async fn run(ctx: &Ctx) -> anyhow::Result<Report> {
    let quick = ctx.args.quick;
    let backends = ctx.backends(&[Backend::Embedded, Backend::Etcd]);
    let levels = pick(&ctx.args.concurrency, quick, &[1, 4], &[1, 8, 64]);
    let ops = ctx.args.ops.unwrap_or(if quick { 100 } else { 5000 }).max(1);
    let mut report = ctx.report(
        Scenario::Writes,
        json!({"backends": backends, "concurrency": levels, "ops": ops, "object": "~1 KB configmap", "namespace": NS,
            "verbs": {"create": "POST", "update": "PUT with the resourceVersion the create returned"}}),
    );
    let mut rows: BTreeMap<(Backend, &'static str, usize), Row> = BTreeMap::new();
    let mut usage = Vec::new();
    for &backend in &backends {
        let env = ctx.env(backend).await?;
        let server = env.start_server(&[]).await?;
        let api = Api::new(server.base_url());
        load::namespace_http(&api, NS).await?;
        let watcher = ProcWatcher::start(server.pid());
        for &c in &levels {
            let pb = progress::bar(ops as u64, format!("{} create ×{ops}, {c} in flight", backend.name()));
            let t = Instant::now();
            let created: Vec<(usize, String, u32)> = futures::stream::iter(0..ops)
                .map(|i| {
                    let api = api.clone();
                    async move {
                        let name = format!("w{c}-{i:06}");
                        let mut body = objects::configmap(NS, &name, i);
                        strip_server_fields(&mut body);
                        let t = Instant::now();
                        let rv = api.create(&format!("/api/v1/namespaces/{NS}/configmaps"), &body).await?;
                        Ok::<_, anyhow::Error>((i, rv, micros(t.elapsed())))
                    }
                })
                .buffer_unordered(c)
                .inspect_ok(|_| pb.inc(1))
                .try_collect()
                .await?;
            let wall = t.elapsed().as_secs_f64();
            pb.finish_and_clear();
            push(&mut report, &mut rows, backend, "create", c, ops, wall, created.iter().map(|r| r.2).collect());

            let pb = progress::bar(ops as u64, format!("{} update ×{ops}, {c} in flight", backend.name()));
            let t = Instant::now();
            let lat: Vec<u32> = futures::stream::iter(created)
                .map(|(i, rv, _)| {
                    let api = api.clone();
                    async move {
                        let name = format!("w{c}-{i:06}");
                        let mut body = objects::configmap(NS, &name, i + 1);
                        strip_server_fields(&mut body);
                        body["metadata"]["resourceVersion"] = json!(rv);
                        let t = Instant::now();
                        api.update(&format!("/api/v1/namespaces/{NS}/configmaps/{name}"), &body).await?;
                        Ok::<_, anyhow::Error>(micros(t.elapsed()))
                    }
                })
                .buffer_unordered(c)
                .inspect_ok(|_| pb.inc(1))
                .try_collect()
                .await?;
            let wall = t.elapsed().as_secs_f64();
            pb.finish_and_clear();
            push(&mut report, &mut rows, backend, "update", c, ops, wall, lat);
        }
        if let Some(u) = watcher.finish() {
            usage.push((backend, u));
        }
        server.stop().await;
    }

    let mut t = Table::new(
        format!("Writes of ~1 KB configmaps, {ops} per row"),
        &["backend", "verb", "in flight", "throughput", "p50", "p90", "p99", "max"],
    );
    let mut plot = Plot { title: "Write throughput vs requests in flight".into(), x_label: "requests in flight".into(), y_label: "operations/s".into(), log_x: true, log_y: false, series: vec![] };
    for &backend in &backends {
        for verb in ["create", "update"] {
            let mut series = Series { name: format!("{} {verb}", backend.name()), points: vec![] };
            for &c in &levels {
                if let Some(r) = rows.get(&(backend, verb, c)) {
                    t.row(vec![
                        backend.name().into(),
                        verb.into(),
                        c.to_string(),
                        fmt_rate(r.throughput),
                        fmt_secs(r.latency.p50),
                        fmt_secs(r.latency.p90),
                        fmt_secs(r.latency.p99),
                        fmt_secs(r.latency.max),
                    ]);
                    series.points.push((c as f64, r.throughput));
                }
            }
            plot.series.push(series);
        }
    }
    report.tables.push(t);
    let mut u = Table::new("API server resource use over the whole run", &["backend", "CPU (avg cores)", "CPU seconds", "peak RSS"]);
    for (backend, usage) in usage {
        u.row(vec![backend.name().into(), format!("{:.2}", usage.avg_cores), format!("{:.1}", usage.cpu_seconds), fmt_bytes(usage.peak_rss_bytes)]);
    }
    report.tables.push(u);
    report.plots.push(plot);
    Ok(report)
}

/// Removes what the server sets (uid, creationTimestamp) from a generated object.
fn strip_server_fields(obj: &mut serde_json::Value) {
    if let Some(meta) = obj.get_mut("metadata").and_then(|m| m.as_object_mut()) {
        meta.remove("uid");
        meta.remove("creationTimestamp");
    }
}

#[allow(clippy::too_many_arguments)]
fn push(report: &mut Report, rows: &mut BTreeMap<(Backend, &'static str, usize), Row>, backend: Backend, verb: &'static str, c: usize, ops: usize, wall: f64, lat: Vec<u32>) {
    let labels = [("backend", backend.name().to_string()), ("verb", verb.to_string()), ("concurrency", c.to_string())];
    let throughput = ops as f64 / wall;
    report.measure(&format!("writes/{verb}/throughput"), "ops/s", &labels, &[throughput]);
    if let Some(latency) = Summary::of_micros(&lat) {
        report.push_summary(&format!("writes/{verb}/latency"), "s", &labels, latency);
        rows.insert((backend, verb, c), Row { throughput, latency });
    }
}
