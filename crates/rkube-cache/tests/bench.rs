//! LIST benchmark: cache vs storage, side by side, on the real embedded store.
//!
//! Run (release, prints a table):
//! `cargo test -p rkube-cache --release --test integration -- --ignored --nocapture bench::`
//! Sizes default to 10000,50000; override with `RKUBE_BENCH_SIZES=100000`.

use crate::common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use common::*;
use futures::StreamExt;
use rkube_api::list_options::ListOptions;
use rkube_cache::{Cacher, ListResult, ServedFrom};
use rkube_storage::{prefix_end, RangeRequest};

const RUNS: usize = 7;

fn opts(q: &str) -> ListOptions {
    ListOptions::from_query(q).unwrap()
}

/// A pod of about 1.5 KB of JSON on one of `nodes` nodes (see [`load::bench_pod`]).
fn big_pod(i: usize, nodes: usize) -> Bytes {
    load::bench_pod(i, &format!("node-{}", i % nodes), 0)
}

/// Writes the response body a server would send (items' JSON joined), as it would.
fn body(r: &ListResult) -> usize {
    let mut b = BytesMut::with_capacity(r.items.iter().map(|o| o.json.len() + 1).sum::<usize>() + 64);
    b.put_slice(br#"{"kind":"PodList","apiVersion":"v1","metadata":{},"items":["#);
    for (i, o) in r.items.iter().enumerate() {
        if i > 0 {
            b.put_u8(b',');
        }
        b.put_slice(&o.json);
    }
    b.put_slice(b"]}");
    b.len()
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn p99(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[(v.len() * 99 / 100).min(v.len() - 1)]
}

async fn timed<F, Fut, T>(runs: usize, mut f: F) -> (Duration, T)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = T>,
{
    let mut times = Vec::new();
    let mut last = None;
    for _ in 0..runs {
        let t = Instant::now();
        last = Some(f().await);
        times.push(t.elapsed());
    }
    (median(times), last.expect("runs > 0"))
}

async fn walk(c: &Cacher, rv: i64) -> (usize, Vec<ServedFrom>) {
    let mut page = c.list(None, &opts(&format!("resourceVersion={rv}&resourceVersionMatch=Exact&limit=500"))).await.unwrap();
    let mut n = page.items.len();
    let mut from = vec![page.served_from];
    while let Some(t) = page.continue_token.clone() {
        page = c.list(None, &opts(&format!("limit=500&continue={t}"))).await.unwrap();
        n += page.items.len();
        from.push(page.served_from);
    }
    (n, from)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: run with --release -- --ignored --nocapture"]
async fn bench_list_cache_vs_storage() {
    let sizes: Vec<usize> = std::env::var("RKUBE_BENCH_SIZES")
        .unwrap_or_else(|_| "10000,50000".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    println!("\nLIST benchmark, embedded store, medians of {RUNS} runs (release build)");
    println!(
        "{:>7} | {:>12} {:>12} {:>7} {:>10} | {:>12} {:>12} {:>7} {:>14} | {:>12}",
        "objects", "RV=0 cache", "storage", "ratio", "cache MB/s", "walk snap", "walk storage", "ratio", "storage reads", "node p99"
    );
    for n in sizes {
        let b = embedded();
        let s = b.storage.clone();
        let nodes = (n / 30).max(1);
        let t = Instant::now();
        futures::stream::iter(0..n)
            .map(|i| {
                let s = s.clone();
                async move {
                    let p = big_pod(i, nodes);
                    s.create(&format!("{PODS}ns-{}/pod-{i:06}", i % 10), p).await.unwrap();
                }
            })
            .buffer_unordered(256)
            .collect::<Vec<_>>()
            .await;
        let load = t.elapsed();
        let cacher = Cacher::new(s.clone(), pod_config());
        let t = Instant::now();
        wait_for(&cacher, s.current_revision().await.unwrap()).await;
        let init = t.elapsed();
        let mut off = pod_config();
        off.history_size = Some(0); // --watch-cache-sizes=pods#0: everything from storage
        let storage_only: Arc<Cacher> = Cacher::new(s.clone(), off);

        let (cache_t, bytes) = timed(RUNS, || async {
            let r = cacher.list(None, &opts("resourceVersion=0")).await.unwrap();
            assert_eq!((r.items.len(), r.served_from), (n, ServedFrom::Cache));
            body(&r)
        })
        .await;
        let (storage_t, _) = timed(RUNS, || async {
            let r = storage_only.list(None, &opts("resourceVersion=0")).await.unwrap();
            assert_eq!((r.items.len(), r.served_from), (n, ServedFrom::Storage));
            body(&r)
        })
        .await;
        let (raw_range_t, _) = timed(RUNS, || async {
            s.range(RangeRequest { start: PODS.into(), end: prefix_end(PODS), revision: 0, limit: 0, count_only: false })
                .await
                .unwrap()
                .kvs
                .len()
        })
        .await;

        let rv = cacher.resource_version();
        let reads_before = cacher.metrics().storage_list_count();
        let (walk_snap_t, (count, from)) = timed(RUNS, || walk(&cacher, rv)).await;
        assert_eq!(count, n);
        assert!(from.iter().all(|f| *f == ServedFrom::Snapshot));
        let storage_reads = cacher.metrics().storage_list_count() - reads_before;
        let (walk_storage_t, (count, _)) = timed(RUNS, || walk(&storage_only, rv)).await;
        assert_eq!(count, n);

        let mut node_times = Vec::new();
        for i in 0..500 {
            let q = opts(&format!("resourceVersion=0&fieldSelector=spec.nodeName%3Dnode-{}", i % nodes));
            let t = Instant::now();
            let r = cacher.list(None, &q).await.unwrap();
            node_times.push(t.elapsed());
            assert!(!r.items.is_empty());
        }

        let mbps = bytes as f64 / 1e6 / cache_t.as_secs_f64();
        println!(
            "{:>7} | {:>12.2?} {:>12.2?} {:>6.1}x {:>10.0} | {:>12.2?} {:>12.2?} {:>6.1}x {:>14} | {:>12.2?}",
            n,
            cache_t,
            storage_t,
            storage_t.as_secs_f64() / cache_t.as_secs_f64(),
            mbps,
            walk_snap_t,
            walk_storage_t,
            walk_storage_t.as_secs_f64() / walk_snap_t.as_secs_f64(),
            storage_reads,
            p99(node_times),
        );
        println!(
            "        (load {load:.1?}, cache init {init:.2?}, raw storage range {raw_range_t:.2?}, body {:.1} MB, {} B/object)",
            bytes as f64 / 1e6,
            bytes / n
        );
    }
}
