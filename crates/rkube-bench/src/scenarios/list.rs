//! `rkube bench list`: LIST latency and throughput vs object count, served
//! side by side (KEP-2340's comparison, plus KEP-4988's paginated walks):
//!
//! | mode | request |
//! |---|---|
//! | floor | a direct range read of the same keys: etcd-client on etcd; `Storage::range` in process on the embedded store (server stopped) |
//! | `rv0` | `GET /api/v1/<resource>?resourceVersion=0` (cache: latest state) |
//! | `rv0-https`, `rv0-h2` | the same over HTTPS (bearer token, RBAC), HTTP/1.1 and HTTP/2: the path kubectl takes |
//! | `rv0-h2-pb` | the same over HTTP/2 in protobuf (`Accept: application/vnd.kubernetes.protobuf, application/json`): the path client-go's typed clients and informers take |
//! | `consistent` | `GET /api/v1/<resource>` (RV="": cache once fresh, else storage) |
//! | `storage` | RV="" on a server started with the resource's cache disabled (`--watch-cache-sizes=<resource>#0`) |
//! | `walk` / `walk-storage` | `limit=500` pages with `continue` until done, on either server |
//!
//! Objects are written straight into storage through `rkube-storage` while
//! no API server runs, then an API server is started on them (once with its
//! cache, once with it disabled when the build supports that). Each timed
//! LIST follows one untimed warm-up; a LIST is timed from sending the
//! request to the last body byte.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::json;

use crate::cli::Scenario;
use crate::client::{metric_sum, metric_sum_where, parse_list, Api};
use crate::load;
use crate::objects::Kind;
use crate::procs::{sample_proc, Backend, Env};
use crate::progress;
use crate::report::{Report, Table};
use crate::scenarios::{cell, pick, Ctx};
use crate::stats::{fmt_bytes, fmt_count, fmt_rate, Summary};
use crate::svg::{Plot, Series};

/// Namespace every object is loaded into.
const NS: &str = "bench-list";
/// Page size of the paginated walks.
const PAGE: usize = 500;

/// The modes, in table order: (key, column title).
const MODES: &[(&str, &str)] = &[
    ("floor", "direct storage range (floor)"),
    ("rv0", "RV=0"),
    ("rv0-https", "RV=0 over HTTPS, HTTP/1.1"),
    ("rv0-h2", "RV=0 over HTTPS, HTTP/2"),
    ("rv0-h2-pb", "RV=0 over HTTPS, HTTP/2, protobuf"),
    ("consistent", "RV=\"\" (consistent)"),
    ("storage", "cache disabled (storage)"),
    ("walk", "walk limit=500 (RV=\"\" + continue)"),
    ("walk-storage", "walk limit=500, cache disabled"),
];

/// Results keyed by (kind, objects, mode).
type Results = BTreeMap<(Kind, usize, &'static str), Summary>;

/// Runs the scenario.
pub async fn run(ctx: &Ctx) -> anyhow::Result<Report> {
    let quick = ctx.args.quick;
    let backend = ctx.args.backend.unwrap_or(Backend::Etcd);
    let mut sizes = pick(&ctx.args.sizes, quick, &[200, 1000], &[10_000, 50_000, 100_000, 300_000]);
    sizes.sort_unstable();
    sizes.dedup();
    let kinds = pick(&ctx.args.kinds, quick, &[Kind::Configmaps, Kind::Pods], &[Kind::Configmaps, Kind::Pods]);
    let runs = ctx.runs(5);
    let walk_runs = ctx.runs(3).min(runs);
    let resources: Vec<&str> = kinds.iter().map(|k| k.resource()).collect();
    let disabled = ctx.caps.cache_disabled_flags(&resources);
    let mut report = ctx.report(
        Scenario::List,
        json!({
            "backend": backend, "sizes": sizes, "kinds": kinds, "runs": runs, "walk_runs": walk_runs,
            "page_limit": PAGE, "namespace": NS,
            "loading": "straight into storage via rkube-storage (Storage::create, 256 in flight) with no API server running",
            "cache_disabled_flags": disabled,
        }),
    );
    let mut results = Results::new();
    let mut bytes: BTreeMap<(Kind, usize), usize> = BTreeMap::new();
    let mut rss: BTreeMap<(Kind, usize), u64> = BTreeMap::new();
    let mut served: BTreeMap<(Kind, usize, &'static str), String> = BTreeMap::new();
    // One backend environment (a fresh etcd or data dir) per kind, so each
    // kind's store holds only its own objects (and etcd stays below its quota).
    for &one in &kinds {
        let kinds_here = [one];
        let env = ctx.env(backend).await?;
        let mut loaded: BTreeMap<Kind, usize> = BTreeMap::new();

        for (si, &size) in sizes.iter().enumerate() {
            // 1. Load (no server running) and read the floor.
            {
                let storage = env.open_storage().await?;
                for &kind in &kinds_here {
                    let have = loaded.get(&kind).copied().unwrap_or(0);
                    if have < size {
                        let pb = progress::bar((size - have) as u64, format!("loading {} {} into {}", size - have, kind.resource(), backend.name()));
                        let t = Instant::now();
                        load::load_direct(&storage, kind, NS, have..size, &pb).await?;
                        pb.finish_and_clear();
                        let secs = t.elapsed().as_secs_f64();
                        report.measure(
                            &format!("load/{}", kind.resource()),
                            "objects/s",
                            &[("kind", kind.resource().into()), ("objects", (size - have).to_string()), ("backend", backend.name().into())],
                            &[(size - have) as f64 / secs],
                        );
                        loaded.insert(kind, size);
                    }
                    let pb = progress::bar(runs as u64, format!("{} × direct range of {} {}", runs, size, kind.resource()));
                    match floor(&env, &storage, &format!("/registry/{}/", kind.resource()), size, runs, &pb).await {
                        Ok(samples) => {
                            if let Some(s) = record(&mut report, kind, size, "floor", backend, &samples) {
                                results.insert((kind, size, "floor"), s);
                            }
                        }
                        Err(e) => report.not_measured(format!("floor for {size} {}", kind.resource()), format!("{e:#}")),
                    }
                    pb.finish_and_clear();
                }
            }

            // 2. The server with its default settings (watch cache on when it has one).
            progress::phase(&format!("starting rkube apiserver on {} with {size} {}", backend.name(), one.resource()));
            let server = env.start_server(&[]).await?;
            let api = Api::new(server.base_url());
            for &kind in &kinds_here {
                wait_listable(&api, kind).await?;
                let probe = format!("/api/v1/{}?labelSelector=rkube-bench%3Dnone", kind.resource());
                if !wait_consistent_from_cache(&api, &probe).await && si == 0 {
                    report.note(format!("{}: consistent LISTs were still served from storage 10 s after the server started", kind.resource()));
                }
                let path = format!("/api/v1/{}", kind.resource());
                for (mode, query) in [("rv0", "?resourceVersion=0"), ("consistent", "")] {
                    let pb = progress::bar(runs as u64 + 1, format!("LIST {size} {} {mode}", kind.resource()));
                    let (samples, body, from) = time_list(ctx, &api, &format!("{path}{query}"), runs, size, &pb).await?;
                    pb.finish_and_clear();
                    bytes.insert((kind, size), body);
                    if let Some(s) = record(&mut report, kind, size, mode, backend, &samples) {
                        results.insert((kind, size, mode), s);
                    }
                    served.insert((kind, size, mode), from);
                }
                let pb = progress::bar(walk_runs as u64, format!("walk {size} {} limit={PAGE}", kind.resource()));
                let (samples, from) = time_walk(ctx, &api, &path, walk_runs, size, &pb).await?;
                pb.finish_and_clear();
                if let Some(s) = record(&mut report, kind, size, "walk", backend, &samples) {
                    results.insert((kind, size, "walk"), s);
                }
                served.insert((kind, size, "walk"), from);
            }
            if let Some(s) = sample_proc(server.pid()) {
                rss.insert((one, size), s.rss_bytes);
            }
            server.stop().await;

            // 3. The server with the cache disabled for these resources.
            match &disabled {
                Some(flags) => {
                    progress::phase(&format!("starting rkube apiserver with {}", flags.join(" ")));
                    match env.start_server(flags).await {
                        Ok(server) => {
                            let api = Api::new(server.base_url());
                            for &kind in &kinds_here {
                                wait_listable(&api, kind).await?;
                                let path = format!("/api/v1/{}", kind.resource());
                                let pb = progress::bar(runs as u64 + 1, format!("LIST {size} {} cache disabled", kind.resource()));
                                let (samples, _, from) = time_list(ctx, &api, &path, runs, size, &pb).await?;
                                pb.finish_and_clear();
                                if let Some(s) = record(&mut report, kind, size, "storage", backend, &samples) {
                                    results.insert((kind, size, "storage"), s);
                                }
                                served.insert((kind, size, "storage"), from);
                                let pb = progress::bar(walk_runs as u64, format!("walk {size} {} cache disabled", kind.resource()));
                                let (samples, from) = time_walk(ctx, &api, &path, walk_runs, size, &pb).await?;
                                pb.finish_and_clear();
                                if let Some(s) = record(&mut report, kind, size, "walk-storage", backend, &samples) {
                                    results.insert((kind, size, "walk-storage"), s);
                                }
                                served.insert((kind, size, "walk-storage"), from);
                            }
                            server.stop().await;
                        }
                        Err(e) => {
                            if si == 0 {
                                report.not_measured("cache disabled (storage) columns", format!("the server did not start with {}: {e:#}", flags.join(" ")));
                            }
                        }
                    }
                }
                None if si == 0 => report.not_measured(
                    "cache disabled (storage) columns",
                    "this rkube apiserver build has neither --watch-cache-sizes nor --watch-cache: the watch cache is not wired \
                     into the server yet, so the RV=0 and RV=\"\" columns are themselves served from storage",
                ),
                None => {}
            }

            // 4. The server with its cache, over HTTPS: HTTP/1.1 and HTTP/2 side by side.
            //    Last, since it publishes `kube-root-ca.crt` ConfigMaps, removed after it.
            progress::phase(&format!("starting rkube apiserver over HTTPS with {size} {}", one.resource()));
            let dir = tempfile::tempdir()?;
            let (ca_pem, flags) = crate::scenarios::rbac::pki(dir.path())?;
            let token = crate::scenarios::rbac::MASTERS_TOKEN;
            let server = env.start_server_with(&flags, Some(&crate::procs::Secure { ca_pem: ca_pem.clone(), token: token.into() })).await?;
            for (mode, http2, accept) in [
                ("rv0-https", false, "application/json"),
                ("rv0-h2", true, "application/json"),
                ("rv0-h2-pb", true, "application/vnd.kubernetes.protobuf, application/json"),
            ] {
                let api = Api::secure_with(server.base_url(), &ca_pem, token, http2).map_err(anyhow::Error::msg)?.with_accept(accept);
                for &kind in &kinds_here {
                    wait_listable(&api, kind).await?;
                    // A server with a CA publishes `kube-root-ca.crt` in every
                    // namespace: those are listed too, so they are counted first.
                    let extra = settled_extras(&api, kind).await?;
                    let path = format!("/api/v1/{}?resourceVersion=0", kind.resource());
                    let pb = progress::bar(runs as u64 + 1, format!("LIST {size} {} {mode}", kind.resource()));
                    let (samples, _, from) = time_list(ctx, &api, &path, runs, size + extra, &pb).await?;
                    pb.finish_and_clear();
                    if let Some(s) = record(&mut report, kind, size, mode, backend, &samples) {
                        results.insert((kind, size, mode), s);
                    }
                    served.insert((kind, size, mode), from);
                }
            }
            server.stop().await;
            remove_published(&env).await?;
        }
        drop(env);
    }

    if !ctx.caps.has_watch_cache() {
        report.note("This server build has no watch cache flag: every LIST here was served from storage.");
    }
    tables(&mut report, &kinds, &sizes, &results, &bytes, &rss, runs, walk_runs, backend);
    let mut t = Table::new(
        "Where each mode was served from (apiserver_cache_list_total / apiserver_storage_list_total deltas over its warm-up + timed runs)",
        &["kind", "objects", "RV=0", "RV=0 HTTPS", "RV=0 HTTP/2", "RV=0 HTTP/2 protobuf", "RV=\"\"", "walk", "cache disabled", "walk, cache disabled"],
    );
    for &kind in &kinds {
        for &size in &sizes {
            let get = |m: &str| served.get(&(kind, size, m)).cloned().unwrap_or_else(|| "n/a".into());
            t.row(vec![kind.resource().into(), fmt_count(size as u64), get("rv0"), get("rv0-https"), get("rv0-h2"), get("rv0-h2-pb"), get("consistent"), get("walk"), get("storage"), get("walk-storage")]);
        }
    }
    report.tables.push(t);
    Ok(report)
}

/// Records a latency measurement `list/<kind>/<mode>`.
fn record(report: &mut Report, kind: Kind, size: usize, mode: &str, backend: Backend, samples: &[f64]) -> Option<Summary> {
    report.measure(
        &format!("list/{}/{mode}", kind.resource()),
        "s",
        &[("kind", kind.resource().into()), ("objects", size.to_string()), ("mode", mode.into()), ("backend", backend.name().into())],
        samples,
    )
}

/// Direct range reads of the storage prefix `prefix` (`/registry/configmaps/`):
/// etcd-client on etcd, the store in process on embedded. Fewer than `size`
/// keys fails the scenario. Also used by [`super::crds`].
pub(crate) async fn floor(env: &Env, storage: &std::sync::Arc<dyn rkube_storage::Storage>, prefix: &str, size: usize, runs: usize, pb: &indicatif::ProgressBar) -> anyhow::Result<Vec<f64>> {
    let mut samples = Vec::with_capacity(runs);
    match env.etcd_endpoint() {
        Some(endpoint) => {
            let client = etcd_client::Client::connect([endpoint], None).await.context("connecting etcd-client")?;
            let mut kv = client.kv_client().max_decoding_message_size(usize::MAX);
            for _ in 0..runs {
                let t = Instant::now();
                let resp = kv.get(prefix, Some(etcd_client::GetOptions::new().with_prefix())).await.context("etcd range")?;
                samples.push(t.elapsed().as_secs_f64());
                anyhow::ensure!(resp.kvs().len() >= size, "etcd range returned {} keys, expected {size}", resp.kvs().len());
                pb.inc(1);
            }
        }
        None => {
            for _ in 0..runs {
                let t = Instant::now();
                let resp = storage.range(rkube_storage::RangeRequest::prefix(prefix)).await.context("storage range")?;
                samples.push(t.elapsed().as_secs_f64());
                anyhow::ensure!(resp.kvs.len() >= size, "range returned {} keys, expected {size}", resp.kvs.len());
                pb.inc(1);
            }
        }
    }
    Ok(samples)
}

/// How many objects of `kind` not loaded by the bench (no `bench=list`
/// label) the server holds, once that stops changing: on a server with a CA,
/// one `kube-root-ca.crt` ConfigMap per namespace, published shortly after
/// start. Polls for up to 10 s, until the count matches the namespaces (for
/// ConfigMaps) and two readings 500 ms apart agree.
async fn settled_extras(api: &Api, kind: Kind) -> anyhow::Result<usize> {
    if kind != Kind::Configmaps {
        return Ok(0);
    }
    let path = format!("/api/v1/{}?resourceVersion=0&labelSelector=bench%21%3Dlist", kind.resource());
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut last = api.list(&path).await?.items;
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = api.list(&path).await?.items;
        let namespaces = api.list("/api/v1/namespaces").await?.items;
        let complete = now >= namespaces;
        if (now == last && complete) || Instant::now() > deadline {
            return Ok(now);
        }
        last = now;
    }
}

/// Deletes, straight from storage (no server running), the
/// `kube-root-ca.crt` ConfigMaps a server with a CA published, so the next
/// server lists only what the bench loaded.
async fn remove_published(env: &Env) -> anyhow::Result<()> {
    let storage = env.open_storage().await?;
    let found = storage.range(rkube_storage::RangeRequest::prefix("/registry/configmaps/")).await.context("storage range")?;
    for kv in found.kvs.iter().filter(|kv| kv.key.ends_with("/kube-root-ca.crt")) {
        storage.delete(&kv.key, None).await.context("deleting a published ConfigMap")?;
    }
    Ok(())
}

/// Waits until a LIST of the kind answers 200 (a cache still initializing answers 429).
async fn wait_listable(api: &Api, kind: Kind) -> anyhow::Result<()> {
    let path = format!("/api/v1/{}?resourceVersion=0&labelSelector=rkube-bench%3Dnone", kind.resource());
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        match api.status_of(&path).await {
            Ok(200) => return Ok(()),
            Ok(code) if Instant::now() > deadline => anyhow::bail!("LIST {path} still answers {code} after 300 s"),
            Err(e) if Instant::now() > deadline => return Err(e.into()),
            _ => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

/// Waits up to 10 s until a consistent LIST (RV="") of `path` is served
/// from the cache (after a restart the cache serves consistent reads only
/// once its watch is known to be synced); true when it is, or when the
/// server has no `/metrics` to tell. Also used by [`super::crds`].
pub(crate) async fn wait_consistent_from_cache(api: &Api, path: &str) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let Some(before) = counters(api).await else { return true };
        let _ = api.status_of(path).await;
        let Some(after) = counters(api).await else { return true };
        if after.cache > before.cache && after.storage == before.storage {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// One warm-up then `runs` timed LISTs of `path`; an item count other than
/// `expect` in the warm-up fails the scenario.
/// Returns the samples (seconds), the body size and where the LISTs were
/// served from. Also used by [`super::crds`].
pub(crate) async fn time_list(ctx: &Ctx, api: &Api, path: &str, runs: usize, expect: usize, pb: &indicatif::ProgressBar) -> anyhow::Result<(Vec<f64>, usize, String)> {
    let before = counters(api).await;
    let (_, chunks) = api.list_raw(path).await?;
    let page = parse_list(path, &chunks)?;
    drop(chunks);
    pb.inc(1);
    check_count(&format!("LIST {path}"), page.items, expect)?;
    let mut samples = Vec::with_capacity(runs);
    for _ in 0..runs {
        let (elapsed, chunks) = api.list_raw(path).await?;
        drop(chunks);
        samples.push(elapsed.as_secs_f64());
        pb.inc(1);
    }
    let after = counters(api).await;
    Ok((samples, page.bytes, served(ctx, before, after)))
}

/// `runs` paginated walks (`limit=500`, then `continue`) of `path`; seconds
/// per whole walk. A walk that returns other than `expect` items, or that has
/// not ended after `expect / 500 + 10` pages, fails the scenario.
async fn time_walk(ctx: &Ctx, api: &Api, path: &str, runs: usize, expect: usize, pb: &indicatif::ProgressBar) -> anyhow::Result<(Vec<f64>, String)> {
    let before = counters(api).await;
    let mut samples = Vec::with_capacity(runs);
    for run in 0..runs {
        let t = Instant::now();
        let mut items = 0;
        let mut token = String::new();
        let mut pages = 0;
        loop {
            let url = if token.is_empty() {
                format!("{path}?limit={PAGE}")
            } else {
                format!("{path}?limit={PAGE}&continue={}", crate::client::urlencode(&token))
            };
            let page = api.list(&url).await?;
            items += page.items;
            pages += 1;
            token = page.continue_token;
            if token.is_empty() {
                break;
            }
            check_walk_budget(&format!("walk {run} of {path}"), pages, items, expect)?;
        }
        samples.push(t.elapsed().as_secs_f64());
        check_count(&format!("walk {run} of {path} ({pages} pages)"), items, expect)?;
        pb.inc(1);
    }
    let after = counters(api).await;
    Ok((samples, served(ctx, before, after)))
}

/// A LIST or walk that returned another number of objects than were loaded
/// measured something else: an error, so the scenario fails.
fn check_count(what: &str, items: usize, expect: usize) -> anyhow::Result<()> {
    anyhow::ensure!(items == expect, "{what} returned {items} items, expected {expect}");
    Ok(())
}

/// A walk still handing out `continue` tokens after `expect / PAGE + 10`
/// pages does not end: an error, so the scenario fails.
fn check_walk_budget(what: &str, pages: usize, items: usize, expect: usize) -> anyhow::Result<()> {
    let budget = expect / PAGE + 10;
    anyhow::ensure!(pages <= budget, "{what} had not ended after {pages} pages ({items} items so far, expected {expect})");
    Ok(())
}

/// The `/metrics` counters that tell where LISTs were served from.
#[derive(Debug, Clone, Copy)]
struct Counters {
    cache: f64,
    storage: f64,
    fallback: f64,
}

async fn counters(api: &Api) -> Option<Counters> {
    let text = api.metrics().await?;
    Some(Counters {
        cache: metric_sum(&text, "apiserver_cache_list_total").unwrap_or(0.0),
        storage: metric_sum(&text, "apiserver_storage_list_total").unwrap_or(0.0),
        fallback: metric_sum_where(&text, "apiserver_watch_cache_consistent_read_total", "fallback=\"true\"").unwrap_or(0.0),
    })
}

/// Where the LISTs between two counter readings were served from.
fn served(ctx: &Ctx, before: Option<Counters>, after: Option<Counters>) -> String {
    let (Some(b), Some(a)) = (before, after) else {
        return if ctx.caps.has_watch_cache() { "unknown (no /metrics)".into() } else { "storage (no watch cache in this build)".into() };
    };
    let (c, s, f) = (a.cache - b.cache, a.storage - b.storage, a.fallback - b.fallback);
    let mut out = match (c > 0.0, s > 0.0) {
        (true, false) => "cache".to_string(),
        (false, true) => "storage".to_string(),
        (true, true) => format!("cache ×{c}, storage ×{s}"),
        (false, false) => "unknown (counters did not move)".to_string(),
    };
    if f > 0.0 {
        out += &format!(" ({f} consistent-read fallbacks)");
    }
    out
}

#[allow(clippy::too_many_arguments)]
fn tables(
    report: &mut Report,
    kinds: &[Kind],
    sizes: &[usize],
    results: &Results,
    bytes: &BTreeMap<(Kind, usize), usize>,
    rss: &BTreeMap<(Kind, usize), u64>,
    runs: usize,
    walk_runs: usize,
    backend: Backend,
) {
    for &kind in kinds {
        let what = match kind {
            Kind::Configmaps => "~1 KB configmaps",
            Kind::Pods => "~1.5 KB pods",
        };
        let mut cols = vec!["objects", "response"];
        cols.extend(MODES.iter().map(|m| m.1));
        cols.push("apiserver RSS after");
        let mut t = Table::new(
            format!("LIST {what} on {}: median (p90) seconds, {runs} runs ({walk_runs} for walks)", backend.name()),
            &cols,
        );
        let mut tp = Table::new(format!("LIST {what}: throughput at the median (objects/s)"), &["objects", "floor", "RV=0", "RV=0 HTTP/2", "RV=0 HTTP/2 protobuf", "RV=\"\"", "cache disabled"]);
        for &size in sizes {
            let mut row = vec![fmt_count(size as u64), bytes.get(&(kind, size)).map(|b| fmt_bytes(*b as u64)).unwrap_or_else(|| "n/a".into())];
            row.extend(MODES.iter().map(|m| cell(results.get(&(kind, size, m.0)).copied())));
            row.push(rss.get(&(kind, size)).map(|b| fmt_bytes(*b)).unwrap_or_else(|| "n/a".into()));
            t.row(row);
            let rate = |mode: &str| {
                results.get(&(kind, size, mode)).map(|s| fmt_rate(size as f64 / s.median)).unwrap_or_else(|| "n/a".into())
            };
            tp.row(vec![fmt_count(size as u64), rate("floor"), rate("rv0"), rate("rv0-h2"), rate("rv0-h2-pb"), rate("consistent"), rate("storage")]);
        }
        report.tables.push(t);
        report.tables.push(tp);
        let title = format!("LIST {what} ({}): median latency", backend.name());
        report.plots.push(median_latency_plot(title, MODES, sizes, |n, mode| results.get(&(kind, n, mode)).map(|s| s.median)));
    }
}

/// A plot of median LIST latency (seconds) against object count (log
/// scale), one series per `(mode, title)` of `modes` that has a figure;
/// `median(size, mode)` gives the figures. Shared by the list and crds
/// scenarios.
pub(super) fn median_latency_plot(
    title: String,
    modes: &[(&str, &str)],
    sizes: &[usize],
    median: impl Fn(usize, &str) -> Option<f64>,
) -> Plot {
    let series = modes
        .iter()
        .map(|(mode, name)| Series {
            name: name.to_string(),
            points: sizes.iter().filter_map(|&n| median(n, mode).map(|m| (n as f64, m))).collect(),
        })
        .filter(|s| !s.points.is_empty())
        .collect();
    Plot { title, x_label: "objects".into(), y_label: "seconds".into(), log_x: true, log_y: false, series }
}

#[cfg(test)]
mod count_tests {
    use super::*;

    #[test]
    fn wrong_counts_and_endless_walks_fail_the_scenario() {
        assert!(check_count("LIST x", 10, 10).is_ok());
        let err = check_count("LIST /api/v1/pods", 9, 10).unwrap_err().to_string();
        assert_eq!(err, "LIST /api/v1/pods returned 9 items, expected 10");
        assert!(check_walk_budget("walk", 30, 15_000, 10_000).is_ok());
        let err = check_walk_budget("walk 0 of /api/v1/pods", 31, 15_500, 10_000).unwrap_err().to_string();
        assert_eq!(err, "walk 0 of /api/v1/pods had not ended after 31 pages (15500 items so far, expected 10000)");
    }
}
