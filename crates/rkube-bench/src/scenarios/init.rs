//! `rkube bench init`: how long a server takes to become useful vs the
//! number of objects in storage, on each backend.
//!
//! Objects are loaded straight into storage with no server running; then,
//! `runs` times per size, an API server is spawned and timed:
//! - spawn → first `/readyz` 200 (polled every 10 ms);
//! - spawn → first 200 to `LIST <resource>?resourceVersion=0&labelSelector=…`
//!   (a selector that matches nothing: a cache still initializing answers it
//!   429 (KEP-4568) instead of passing it to storage, and the answer is small,
//!   so this is when LISTs are served);
//! - the server's RSS at that point.
//!
//! Servers are stopped with SIGTERM between runs.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::cli::Scenario;
use crate::client::Api;
use crate::load;
use crate::objects::Kind;
use crate::procs::{sample_proc, Backend};
use crate::progress;
use crate::report::{Report, Table};
use crate::scenarios::{cell, pick, Ctx};
use crate::stats::{fmt_bytes, fmt_count, Summary};
use crate::svg::{Plot, Series};

const NS: &str = "bench-init";

/// Runs the scenario.
pub async fn run(ctx: &Ctx) -> anyhow::Result<Report> {
    let quick = ctx.args.quick;
    let backends = ctx.backends(&[Backend::Embedded, Backend::Etcd]);
    let mut sizes = pick(&ctx.args.sizes, quick, &[100, 500], &[10_000, 50_000, 100_000]);
    sizes.sort_unstable();
    sizes.dedup();
    let kind = ctx.args.kinds.first().copied().unwrap_or(Kind::Pods);
    let runs = ctx.runs(3);
    let mut report = ctx.report(
        Scenario::Init,
        json!({"backends": backends, "sizes": sizes, "kind": kind, "runs": runs, "namespace": NS,
            "loading": "straight into storage via rkube-storage with no API server running",
            "first_list": format!("GET /api/v1/{}?resourceVersion=0&labelSelector=rkube-bench%3Dnone", kind.resource())}),
    );
    let mut results: BTreeMap<(Backend, usize, &'static str), Summary> = BTreeMap::new();
    let mut rss: BTreeMap<(Backend, usize), u64> = BTreeMap::new();
    for &backend in &backends {
        let env = ctx.env(backend).await?;
        let mut loaded = 0;
        for &size in &sizes {
            {
                let storage = env.open_storage().await?;
                let pb = progress::bar((size - loaded) as u64, format!("loading {} {} into {}", size - loaded, kind.resource(), backend.name()));
                load::load_direct(&storage, kind, NS, loaded..size, &pb).await?;
                pb.finish_and_clear();
                loaded = size;
            }
            let pb = progress::bar(runs as u64, format!("{runs} × start rkube apiserver on {} with {size} {}", backend.name(), kind.resource()));
            let mut ready = Vec::new();
            let mut listed = Vec::new();
            for _ in 0..runs {
                let server = env.start_server(&[]).await?;
                ready.push(server.ready_after.as_secs_f64());
                let api = Api::new(server.base_url());
                let path = format!("/api/v1/{}?resourceVersion=0&labelSelector=rkube-bench%3Dnone", kind.resource());
                let deadline = Instant::now() + Duration::from_secs(300);
                loop {
                    if let Ok(200) = api.status_of(&path).await {
                        listed.push(server.spawned_at.elapsed().as_secs_f64());
                        break;
                    }
                    if Instant::now() > deadline {
                        anyhow::bail!("LIST {path} did not answer 200 within 300 s of the server's start");
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                if let Some(s) = sample_proc(server.pid()) {
                    rss.insert((backend, size), s.rss_bytes);
                }
                server.stop().await;
                pb.inc(1);
            }
            pb.finish_and_clear();
            let labels = [("backend", backend.name().to_string()), ("objects", size.to_string()), ("kind", kind.resource().to_string())];
            if let Some(s) = report.measure("init/readyz", "s", &labels, &ready) {
                results.insert((backend, size, "readyz"), s);
            }
            if let Some(s) = report.measure("init/first_list", "s", &labels, &listed) {
                results.insert((backend, size, "first_list"), s);
            }
        }
    }
    if !ctx.caps.has_watch_cache() {
        report.note(
            "This server build has no watch cache: /readyz and the first LIST do not wait for a cache to fill, so these \
             figures are process start + storage open, not cache initialization.",
        );
    }
    let mut t = Table::new(
        format!("Start → ready, {} (median (p90) of {runs} starts)", kind.resource()),
        &["backend", "objects", "spawn → /readyz 200", "spawn → first LIST 200", "apiserver RSS then"],
    );
    let mut plot = Plot { title: "Server start vs objects in storage".into(), x_label: "objects".into(), y_label: "seconds".into(), log_x: true, log_y: false, series: vec![] };
    for &backend in &backends {
        for &size in &sizes {
            t.row(vec![
                backend.name().into(),
                fmt_count(size as u64),
                cell(results.get(&(backend, size, "readyz")).copied()),
                cell(results.get(&(backend, size, "first_list")).copied()),
                rss.get(&(backend, size)).map(|b| fmt_bytes(*b)).unwrap_or_else(|| "n/a".into()),
            ]);
        }
        for (m, title) in [("readyz", "/readyz"), ("first_list", "first LIST")] {
            plot.series.push(Series {
                name: format!("{} {title}", backend.name()),
                points: sizes.iter().filter_map(|&n| results.get(&(backend, n, m)).map(|s| (n as f64, s.median))).collect(),
            });
        }
    }
    report.tables.push(t);
    report.plots.push(plot);
    Ok(report)
}
