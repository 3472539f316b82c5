//! Benchmark (ignored in the test suite; run it by name):
//! `TestEnv::start()` to the first answered request, median and p99 over
//! 50 starts, and a CRD applied until `Established`, median over 10.
//!
//! ```text
//! cargo test --release -p rkube-testenv --test integration -- --ignored --nocapture bench_start::
//! ```
//!
//! It fails when the median start is not under 1 s, a fifth of the 5 s
//! envtest needs to start kube-apiserver and etcd, the alternative this
//! replaces.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ListParams};
use kube::CustomResource;
use rkube_testenv::TestEnv;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, JsonSchema)]
#[kube(group = "bench.rkube.dev", version = "v1", kind = "Widget", namespaced)]
pub struct WidgetSpec {
    size: i32,
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "benchmark: run with --ignored"]
async fn bench_testenv_start_and_crd_established() {
    let mut starts = Vec::new();
    for _ in 0..50 {
        let began = Instant::now();
        let env = TestEnv::start().await.expect("start");
        Api::<Namespace>::all(env.client()).list(&ListParams::default()).await.expect("first request");
        starts.push(began.elapsed());
        env.stop().await;
    }
    starts.sort();
    let mut crds = Vec::new();
    for _ in 0..10 {
        let env = TestEnv::start().await.expect("start");
        let began = Instant::now();
        env.install_crd::<Widget>().await.expect("install");
        crds.push(began.elapsed());
        env.stop().await;
    }
    crds.sort();
    let (median, p99) = (percentile(&starts, 0.5), percentile(&starts, 0.99));
    println!("testenv start to first answer: median {median:?}, p99 {p99:?} (50 starts)");
    println!("CRD apply to Established: median {:?}, max {:?} (10 CRDs)", percentile(&crds, 0.5), crds[crds.len() - 1]);
    assert!(median < Duration::from_secs(1), "median start {median:?} is not under 1 s");
}
