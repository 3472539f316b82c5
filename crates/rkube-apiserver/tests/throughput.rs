//! Write and read throughput over HTTP on both backends (ignored by default;
//! run with `cargo test -p rkube-apiserver --release --test integration -- --ignored --nocapture throughput::`).
//!
//! Creates `N` ConfigMaps from `CONCURRENCY` concurrent clients and reports
//! creates/s, then GETs them one by one and reports the p50/p99 latency.

use crate::common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{configmap, TestServer};

const N: usize = 2000;
const CONCURRENCY: usize = 16;

async fn measure(label: &str, s: TestServer) {
    let s = Arc::new(s);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for worker in 0..CONCURRENCY {
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            for i in (worker..N).step_by(CONCURRENCY) {
                let r = s.post("/api/v1/namespaces/default/configmaps", &configmap(&format!("cm-{i:05}"))).await;
                assert_eq!(r.code, 201, "{}", r.text);
            }
        }));
    }
    for t in tasks {
        t.await.expect("worker");
    }
    let create_secs = started.elapsed().as_secs_f64();
    let mut lat: Vec<Duration> = Vec::with_capacity(N);
    for i in 0..N {
        let t = Instant::now();
        let r = s.get(&format!("/api/v1/namespaces/default/configmaps/cm-{i:05}")).await;
        lat.push(t.elapsed());
        assert_eq!(r.code, 200);
    }
    lat.sort();
    let list = Instant::now();
    let r = s.get("/api/v1/namespaces/default/configmaps").await;
    let list_ms = list.elapsed().as_secs_f64() * 1000.0;
    assert_eq!(r.body["items"].as_array().map(Vec::len), Some(N));
    println!(
        "{label}: {N} creates ({CONCURRENCY} clients) {:.0} objects/s; GET p50 {:.2} ms p99 {:.2} ms; LIST of {N} {:.1} ms",
        N as f64 / create_secs,
        lat[N / 2].as_secs_f64() * 1000.0,
        lat[N * 99 / 100].as_secs_f64() * 1000.0,
        list_ms
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark; run explicitly"]
async fn throughput_embedded() {
    measure("embedded", TestServer::embedded().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark; run explicitly"]
async fn throughput_etcd() {
    measure("etcd", TestServer::etcd().await).await;
}
