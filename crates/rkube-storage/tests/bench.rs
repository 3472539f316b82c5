//! Hand-run throughput figures for both backends (ignored by default):
//!
//! ```text
//! cargo test -p rkube-storage --release --test integration -- --ignored --nocapture --test-threads=1 bench::bench_
//! ```
//!
//! Each backend: 2,000 creates one at a time (latency-bound: one durable
//! commit each), 2,000 creates with 64 in flight (group commit on embedded,
//! pipelining on etcd), 2,000 GETs one at a time (p50 / p99), and one LIST
//! of all 4,000 keys.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt;
use rkube_storage::embedded::EmbeddedStorage;
use rkube_storage::etcd::EtcdStorage;
use rkube_storage::testing::EtcdServer;
use rkube_storage::{RangeRequest, Storage};

const N: usize = 2000;

/// A ~1 KiB JSON-ish value, the size of a small pod.
fn value(i: usize) -> Bytes {
    Bytes::from(format!("{{\"metadata\":{{\"name\":\"p{i}\"}},\"pad\":\"{}\"}}", "x".repeat(1000)))
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

async fn run(name: &str, s: Arc<dyn Storage>) {
    let t = Instant::now();
    for i in 0..N {
        s.create(&format!("/registry/pods/seq/p{i:05}"), value(i)).await.unwrap();
    }
    let sequential = N as f64 / t.elapsed().as_secs_f64();

    let t = Instant::now();
    futures::stream::iter(0..N)
        .map(|i| {
            let s = s.clone();
            async move { s.create(&format!("/registry/pods/par/p{i:05}"), value(i)).await.unwrap() }
        })
        .buffer_unordered(64)
        .collect::<Vec<_>>()
        .await;
    let concurrent = N as f64 / t.elapsed().as_secs_f64();

    let mut latencies = Vec::with_capacity(N);
    for i in 0..N {
        let t = Instant::now();
        let kv = s.get(&format!("/registry/pods/seq/p{i:05}")).await.unwrap();
        latencies.push(t.elapsed());
        assert!(kv.is_some());
    }
    latencies.sort();

    let t = Instant::now();
    let list = s.range(RangeRequest::prefix("/registry/pods/")).await.unwrap();
    let list_time = t.elapsed();
    assert_eq!(list.kvs.len(), 2 * N);

    println!(
        "BENCH {name}: creates/s sequential {sequential:.0}, 64 in flight {concurrent:.0}; \
         GET p50 {:?} p99 {:?}; LIST {} keys {:?}",
        percentile(&latencies, 0.5),
        percentile(&latencies, 0.99),
        list.kvs.len(),
        list_time
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: run by hand with --release"]
async fn bench_embedded() {
    let dir = tempfile::tempdir().unwrap();
    let s = Arc::new(EmbeddedStorage::open(dir.path()).unwrap());
    run("embedded", s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: run by hand with --release"]
async fn bench_etcd() {
    let server = EtcdServer::start().unwrap();
    let s = Arc::new(EtcdStorage::connect(&[server.endpoint()]).await.unwrap());
    run("etcd", s).await;
}

/// LIST cost at scale on the embedded store: 100,000 keys of ~1 KiB, full
/// LIST and a 500-key page (which still counts the whole range).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: run by hand with --release"]
async fn bench_embedded_list_100k() {
    let dir = tempfile::tempdir().unwrap();
    let s = Arc::new(EmbeddedStorage::open(dir.path()).unwrap());
    let t = Instant::now();
    futures::stream::iter(0..100_000usize)
        .map(|i| {
            let s = s.clone();
            async move { s.create(&format!("/registry/pods/ns/p{i:06}"), value(i)).await.unwrap() }
        })
        .buffer_unordered(256)
        .collect::<Vec<_>>()
        .await;
    let load = t.elapsed();
    let t = Instant::now();
    let all = s.range(RangeRequest::prefix("/registry/pods/")).await.unwrap();
    let full = t.elapsed();
    assert_eq!(all.kvs.len(), 100_000);
    let t = Instant::now();
    let page = s.range(RangeRequest { limit: 500, ..RangeRequest::prefix("/registry/pods/") }).await.unwrap();
    let paged = t.elapsed();
    assert_eq!((page.kvs.len(), page.count), (500, 100_000));
    println!("BENCH embedded 100k: load {load:?}; LIST all {full:?}; LIST limit=500 (count 100k) {paged:?}");
}
