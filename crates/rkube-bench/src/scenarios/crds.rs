//! `rkube bench crds`: a full LIST of many custom resources (issue 15's
//! 100,000) from the watch cache vs from storage, side by side, with the
//! `list` scenario's machinery ([`super::list::time_list`], [`super::list::floor`]):
//!
//! | mode | request |
//! |---|---|
//! | floor | a direct range read of the custom resources' storage prefix (etcd-client on etcd; `Storage::range` in process on the embedded store, server stopped) |
//! | `rv0` | `GET /apis/<group>/v1/widgets?resourceVersion=0` (cache) |
//! | `consistent` | `GET /apis/<group>/v1/widgets` (RV="": cache once fresh; the scenario waits up to 10 s for that) |
//! | `storage` | RV="" on a server started with the resource's cache disabled (`--watch-cache-sizes=widgets.<group>#0`) |
//!
//! The Widgets (about 1 KB of JSON each, like the `list` scenario's
//! ConfigMaps) are written straight into storage while no API server runs;
//! the CRD is created through the API on the first start (timed from the
//! POST until a LIST of all of them answers: CRD established and its cache
//! filled) and read from storage on later starts. Every LIST must return
//! exactly the objects loaded, or the scenario fails (issue 13's rule).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::{json, Value};

use super::list::{floor, time_list, wait_consistent_from_cache};
use crate::cli::Scenario;
use crate::client::{parse_list, Api};
use crate::objects::{payload, uid};
use crate::procs::{sample_proc, Backend};
use crate::progress;
use crate::report::{Report, Table};
use crate::scenarios::{cell, pick, Ctx};
use crate::stats::{fmt_bytes, fmt_count, fmt_rate, Summary};

/// The custom resources' API group.
pub const GROUP: &str = "bench.rkube.dev";
/// Their plural resource name.
pub const PLURAL: &str = "widgets";
/// Namespace every Widget is loaded into.
const NS: &str = "bench-crds";

/// The modes, in table order: (key, column title).
const MODES: &[(&str, &str)] = &[
    ("floor", "direct storage range (floor)"),
    ("rv0", "RV=0 (cache)"),
    ("consistent", "RV=\"\" (consistent)"),
    ("storage", "cache disabled (storage)"),
];

/// The CustomResourceDefinition of the Widgets: one version, a structural
/// schema for `spec.size` and `spec.payload`.
pub fn crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{PLURAL}.{GROUP}")},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {"plural": PLURAL, "kind": "Widget", "singular": "widget", "listKind": "WidgetList"},
            "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {
                "type": "object",
                "properties": {"spec": {"type": "object", "properties": {
                    "size": {"type": "integer"}, "payload": {"type": "string"}}}}}}}],
        }
    })
}

/// Widget `i` as the API server stores it (about 1 KB of JSON).
pub fn widget(i: usize) -> Value {
    json!({
        "apiVersion": format!("{GROUP}/v1"),
        "kind": "Widget",
        "metadata": {
            "name": name(i),
            "namespace": NS,
            "uid": uid(7, i),
            "creationTimestamp": "2025-01-01T00:00:00Z",
            "generation": 1,
            "labels": {"app": format!("app-{}", i % 50), "bench": "crds"},
        },
        "spec": {"size": i, "payload": payload(i, 780)},
    })
}

fn name(i: usize) -> String {
    format!("widget-{i:07}")
}

/// The storage key of Widget `name` (`/registry/<group>/<plural>/<ns>/<name>`, as upstream's CR storage).
fn key(name: &str) -> String {
    format!("/registry/{GROUP}/{PLURAL}/{NS}/{name}")
}

/// The collection path (all namespaces).
fn collection() -> String {
    format!("/apis/{GROUP}/v1/{PLURAL}")
}

/// Runs the scenario.
pub async fn run(ctx: &Ctx) -> anyhow::Result<Report> {
    let quick = ctx.args.quick;
    let backend = ctx.args.backend.unwrap_or(Backend::Etcd);
    let mut sizes = pick(&ctx.args.sizes, quick, &[300], &[100_000]);
    sizes.sort_unstable();
    sizes.dedup();
    let runs = ctx.runs(5);
    let resource = format!("{PLURAL}.{GROUP}");
    let disabled = ctx.caps.cache_disabled_flags(&[resource.as_str()]);
    let mut report = ctx.report(
        Scenario::Crds,
        json!({
            "backend": backend, "sizes": sizes, "runs": runs, "namespace": NS, "resource": resource,
            "object": "a Widget of about 1 KB of JSON (spec.size, spec.payload, two labels)",
            "loading": "straight into storage via rkube-storage (Storage::create, 256 in flight) with no API server running",
            "cache_disabled_flags": disabled,
        }),
    );
    let env = ctx.env(backend).await?;
    let mut results: BTreeMap<(usize, &'static str), Summary> = BTreeMap::new();
    let mut served: BTreeMap<(usize, &'static str), String> = BTreeMap::new();
    let mut bytes: BTreeMap<usize, usize> = BTreeMap::new();
    let mut rss: BTreeMap<usize, u64> = BTreeMap::new();
    let mut loaded = 0usize;
    let mut crd_created = false;
    let prefix = format!("/registry/{GROUP}/{PLURAL}/");

    for &size in &sizes {
        // 1. Load (no server running) and read the floor.
        {
            let storage = env.open_storage().await?;
            if loaded < size {
                let pb = progress::bar((size - loaded) as u64, format!("loading {} widgets into {}", size - loaded, backend.name()));
                let t = Instant::now();
                load(&storage, loaded..size, &pb).await?;
                pb.finish_and_clear();
                let secs = t.elapsed().as_secs_f64();
                report.measure("load/widgets", "objects/s", &[("objects", (size - loaded).to_string()), ("backend", backend.name().into())], &[(size - loaded) as f64 / secs]);
                loaded = size;
            }
            let pb = progress::bar(runs as u64, format!("{runs} × direct range of {size} widgets"));
            match floor(&env, &storage, &prefix, size, runs, &pb).await {
                Ok(samples) => {
                    if let Some(s) = record(&mut report, size, "floor", backend, &samples) {
                        results.insert((size, "floor"), s);
                    }
                }
                Err(e) => report.not_measured(format!("floor for {size} widgets"), format!("{e:#}")),
            }
            pb.finish_and_clear();
        }

        // 2. The server with its watch cache.
        progress::phase(&format!("starting rkube apiserver on {} with {size} widgets", backend.name()));
        let server = env.start_server(&[]).await?;
        let api = Api::new(server.base_url());
        if !crd_created {
            let t = Instant::now();
            api.create("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", &crd()).await.context("creating the CRD")?;
            wait_all_listed(&api, size).await?;
            report.measure("crds/created_to_listed", "s", &[("objects", size.to_string()), ("backend", backend.name().into())], &[t.elapsed().as_secs_f64()]);
            crd_created = true;
        } else {
            wait_all_listed(&api, size).await?;
        }
        let path = collection();
        if !wait_consistent_from_cache(&api, &format!("{path}?labelSelector=rkube-bench%3Dnone")).await {
            report.note(format!("{size} widgets: consistent LISTs were still served from storage 10 s after the server started"));
        }
        for (mode, query) in [("rv0", "?resourceVersion=0"), ("consistent", "")] {
            let pb = progress::bar(runs as u64 + 1, format!("LIST {size} widgets {mode}"));
            let (samples, body, from) = time_list(ctx, &api, &format!("{path}{query}"), runs, size, &pb).await?;
            pb.finish_and_clear();
            bytes.insert(size, body);
            if let Some(s) = record(&mut report, size, mode, backend, &samples) {
                results.insert((size, mode), s);
            }
            served.insert((size, mode), from);
        }
        if let Some(s) = sample_proc(server.pid()) {
            rss.insert(size, s.rss_bytes);
        }
        server.stop().await;

        // 3. The server with the Widgets' cache disabled: LISTs read storage.
        match &disabled {
            Some(flags) => {
                progress::phase(&format!("starting rkube apiserver with {}", flags.join(" ")));
                let server = env.start_server(flags).await?;
                let api = Api::new(server.base_url());
                wait_all_listed(&api, size).await?;
                let pb = progress::bar(runs as u64 + 1, format!("LIST {size} widgets, cache disabled"));
                let (samples, _, from) = time_list(ctx, &api, &path, runs, size, &pb).await?;
                pb.finish_and_clear();
                if let Some(s) = record(&mut report, size, "storage", backend, &samples) {
                    results.insert((size, "storage"), s);
                }
                served.insert((size, "storage"), from);
                server.stop().await;
            }
            None => report.not_measured("cache disabled (storage)", "this server build has no flag to disable a resource's watch cache"),
        }
    }
    drop(env);
    tables(&mut report, &sizes, &results, &served, &bytes, &rss, runs, backend);
    Ok(report)
}

/// Writes Widgets `range` straight into storage (with their namespace).
async fn load(storage: &std::sync::Arc<dyn rkube_storage::Storage>, range: std::ops::Range<usize>, pb: &indicatif::ProgressBar) -> anyhow::Result<()> {
    use futures::{StreamExt, TryStreamExt};
    crate::load::namespace_direct(storage, NS).await?;
    futures::stream::iter(range)
        .map(|i| {
            let storage = storage.clone();
            async move {
                let n = name(i);
                let bytes = serde_json::to_vec(&widget(i))?;
                match storage.create(&key(&n), bytes.into()).await {
                    Ok(_) | Err(rkube_storage::StorageError::AlreadyExists { .. }) => Ok::<(), anyhow::Error>(()),
                    Err(e) => Err(e).with_context(|| format!("writing {n}")),
                }
            }
        })
        .buffer_unordered(crate::load::DIRECT_IN_FLIGHT)
        .try_for_each(|()| {
            pb.inc(1);
            futures::future::ready(Ok(()))
        })
        .await
}

/// Waits (300 s at most) until a LIST of the Widgets answers 200 with all
/// `size` of them: the CRD is established and its watch cache (if any) filled.
async fn wait_all_listed(api: &Api, size: usize) -> anyhow::Result<()> {
    let path = format!("{}?resourceVersion=0", collection());
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let last = match api.list_raw(&path).await {
            Ok((_, chunks)) => match parse_list(&path, &chunks) {
                Ok(page) if page.items == size => return Ok(()),
                Ok(page) => format!("{} of {size} widgets listed", page.items),
                Err(e) => e.to_string(),
            },
            Err(e) => e.to_string(),
        };
        anyhow::ensure!(Instant::now() < deadline, "LIST {path} not answered with {size} widgets after 300 s: {last}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Records a latency measurement `crds/list/<mode>`.
fn record(report: &mut Report, size: usize, mode: &str, backend: Backend, samples: &[f64]) -> Option<Summary> {
    report.measure(
        &format!("crds/list/{mode}"),
        "s",
        &[("objects", size.to_string()), ("mode", mode.into()), ("backend", backend.name().into())],
        samples,
    )
}

#[allow(clippy::too_many_arguments)]
fn tables(
    report: &mut Report,
    sizes: &[usize],
    results: &BTreeMap<(usize, &'static str), Summary>,
    served: &BTreeMap<(usize, &'static str), String>,
    bytes: &BTreeMap<usize, usize>,
    rss: &BTreeMap<usize, u64>,
    runs: usize,
    backend: Backend,
) {
    let mut cols = vec!["objects", "response"];
    cols.extend(MODES.iter().map(|m| m.1));
    cols.push("apiserver RSS after");
    let mut t = Table::new(format!("Full LIST of ~1 KB custom resources on {}: median (p90) seconds, {runs} runs", backend.name()), &cols);
    let mut tp = Table::new("Full LIST of custom resources: throughput at the median (objects/s)", &["objects", "floor", "RV=0 (cache)", "RV=\"\" (consistent)", "cache disabled (storage)"]);
    let mut tf = Table::new(
        "Where each mode was served from (apiserver_cache_list_total / apiserver_storage_list_total deltas over its warm-up + timed runs)",
        &["objects", "RV=0", "RV=\"\"", "cache disabled"],
    );
    for &size in sizes {
        let mut row = vec![fmt_count(size as u64), bytes.get(&size).map(|b| fmt_bytes(*b as u64)).unwrap_or_else(|| "n/a".into())];
        row.extend(MODES.iter().map(|m| cell(results.get(&(size, m.0)).copied())));
        row.push(rss.get(&size).map(|b| fmt_bytes(*b)).unwrap_or_else(|| "n/a".into()));
        t.row(row);
        let rate = |mode: &str| results.get(&(size, mode)).map(|s| fmt_rate(size as f64 / s.median)).unwrap_or_else(|| "n/a".into());
        tp.row(vec![fmt_count(size as u64), rate("floor"), rate("rv0"), rate("consistent"), rate("storage")]);
        let from = |mode: &'static str| served.get(&(size, mode)).cloned().unwrap_or_else(|| "n/a".into());
        tf.row(vec![fmt_count(size as u64), from("rv0"), from("consistent"), from("storage")]);
    }
    report.tables.extend([t, tp, tf]);
    let title = format!("Full LIST of custom resources ({}): median latency", backend.name());
    report.plots.push(super::list::median_latency_plot(title, MODES, sizes, |n, mode| results.get(&(n, mode)).map(|s| s.median)));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn widgets_are_about_a_kilobyte_and_stored_under_the_crd_prefix() {
        let len = serde_json::to_vec(&widget(12_345)).map(|v| v.len()).unwrap_or(0);
        assert!((950..=1100).contains(&len), "{len} bytes");
        assert_eq!(key(&name(7)), "/registry/bench.rkube.dev/widgets/bench-crds/widget-0000007");
        let rows = rkube_api::apiextensions::rows_for(&{
            let mut c = crd();
            c["status"] = json!({"acceptedNames": c["spec"]["names"].clone()});
            c
        });
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].object_key("/registry", NS, "widget-0000007"), key("widget-0000007"));
    }
}
