//! Memory benchmark (issue 3): RSS per cached pod, and the extra RSS of
//! keeping a snapshot per event (KEP-4988, `ListFromCacheSnapshot`) for
//! 75 s at 100 updates/s, against the same run with snapshots off.
//!
//! Run (release):
//! `cargo test -p rkube-cache --release --test integration -- --ignored --nocapture bench_memory::bench_memory`
//!
//! The parent test loads 100,000 pods of about 1.5 KB of JSON into an
//! embedded store once, then runs each configuration in its own child
//! process (this test binary again, test `memory_child`), alternating
//! snapshots on / off / no cache at all (the store's own growth under the
//! same writes, subtracted from the cache's), `RKUBE_BENCH_MEM_RUNS` times
//! each, and prints the medians. A child opens the store, reads it once (so the store's own
//! caches are warm before the baseline), measures, builds the pods cache,
//! measures, updates pods at the paced rate through storage writes, and
//! measures again; with snapshots on it then purges them and measures once
//! more (the in-process cost of the snapshots). Each measurement releases
//! free heap pages first (`malloc_trim`) and reads `VmRSS` from
//! `/proc/self/status`; a counting allocator gives live heap bytes too.
//!
//! Env: `RKUBE_BENCH_MEM_PODS` (100000), `RKUBE_BENCH_MEM_SECS` (75),
//! `RKUBE_BENCH_MEM_RATE` (100), `RKUBE_BENCH_MEM_RUNS` (3).

use crate::common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::load::{self, Pacing, PodState};
use common::*;
use rkube_cache::Cacher;
use rkube_storage::embedded::EmbeddedStorage;
use rkube_storage::{prefix_end, RangeRequest, Storage};
use serde_json::json;

/// Live heap bytes of this process.
static LIVE: AtomicIsize = AtomicIsize::new(0);

struct Counting;

// SAFETY: forwards to the system allocator and only counts sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        }
        p
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE.fetch_add(new_size as isize - layout.size() as isize, Ordering::Relaxed);
        }
        p
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

const GOAL_RATIO: f64 = 0.10;
const CHILD_ENV: &str = "RKUBE_BENCH_MEM_CHILD_DIR";

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok()).unwrap_or(default)
}

/// (VmRSS bytes, live heap bytes) after returning free heap pages to the system.
fn measure() -> (i64, i64) {
    // SAFETY: malloc_trim only releases free memory of glibc's heaps.
    unsafe {
        libc::malloc_trim(0);
    }
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let rss_kb: i64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0);
    (rss_kb * 1024, LIVE.load(Ordering::Relaxed) as i64)
}

fn open_store(dir: &std::path::Path) -> Arc<dyn Storage> {
    // The previous process may still hold the file lock for a moment.
    for _ in 0..100 {
        if let Ok(s) = EmbeddedStorage::open(dir) {
            return Arc::new(s);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("cannot open the embedded store at {}", dir.display());
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("tokio runtime")
}

/// One configuration's run, in this (child) process; prints one `RKUBE_MEM {json}` line.
/// `mode`: "on" / "off" = a pods cache with `ListFromCacheSnapshot` on / off;
/// "none" = no cache, the same writes (what the store itself grows by).
async fn child(dir: &std::path::Path, mode: &str, secs: f64, rate: f64) -> serde_json::Value {
    let snapshots = mode == "on";
    let s = open_store(dir);
    // Warm the store with one full read; it also gives each pod's revision.
    let resp = s
        .range(RangeRequest { start: PODS.into(), end: prefix_end(PODS), revision: 0, limit: 0, count_only: false })
        .await
        .expect("range");
    let n = resp.kvs.len();
    let nodes = (n / 30).max(1);
    let mut pods = vec![PodState { node: 0, mod_revision: 0 }; n];
    for kv in &resp.kvs {
        let i: usize = kv.key.rsplit("pod-").next().and_then(|x| x.parse().ok()).expect("bench pod key");
        pods[i] = PodState { node: i % nodes, mod_revision: kv.mod_revision };
    }
    drop(resp);
    let (rss0, heap0) = measure();

    let mut config = pod_config();
    config.gates.list_from_cache_snapshot = snapshots;
    let cacher = (mode != "none").then(|| Cacher::new(s.clone(), config));
    if let Some(c) = &cacher {
        wait_for(c, s.current_revision().await.expect("revision")).await;
    }
    let (rss1, heap1) = measure();
    let mut json_bytes = 0;
    if let Some(c) = &cacher {
        let opts = rkube_api::list_options::ListOptions::from_query("resourceVersion=0").expect("opts");
        let all = c.list(None, &opts).await.expect("list");
        json_bytes = all.items.iter().map(|o| o.json.len()).sum();
    }

    let pacing = Pacing { rate, duration: Duration::from_secs_f64(secs), move_every: 0, nodes };
    let (writes, achieved) = load::paced_updates(&s, pods, pacing).await;
    if let (Some(c), Some(last)) = (&cacher, writes.last()) {
        wait_for(c, last.rv).await;
    }
    let (rss2, heap2) = measure();
    let kept = cacher.as_ref().map_or(0, |c| c.snapshot_count());
    let history = cacher.as_ref().map_or(0, |c| c.history_capacity());
    let (rss3, heap3) = match &cacher {
        Some(c) if snapshots => {
            c.purge_snapshots();
            measure()
        }
        _ => (rss2, heap2),
    };
    json!({
        "mode": mode, "pods": n, "avg_json": json_bytes / n.max(1), "updates": writes.len(), "achieved_rate": achieved,
        "snapshot_count": kept, "history_capacity": history,
        "rss0": rss0, "rss1": rss1, "rss2": rss2, "rss3": rss3,
        "heap0": heap0, "heap1": heap1, "heap2": heap2, "heap3": heap3,
    })
}

/// Entry point of a child process (does nothing unless the parent set the env).
#[test]
#[ignore = "child process of bench_memory_per_pod_and_snapshots"]
fn memory_child() {
    let Ok(dir) = std::env::var(CHILD_ENV) else { return };
    let mode: String = env_or("RKUBE_BENCH_MEM_MODE", "on".to_string());
    let secs = env_or("RKUBE_BENCH_MEM_SECS", 75.0);
    let rate = env_or("RKUBE_BENCH_MEM_RATE", 100.0);
    let v = runtime().block_on(child(std::path::Path::new(&dir), &mode, secs, rate));
    println!("\nRKUBE_MEM {v}");
}

fn spawn_child(dir: &std::path::Path, mode: &str) -> serde_json::Value {
    let exe = std::env::current_exe().expect("test binary path");
    // This test binary holds every file of tests/: the child test's name is its module path.
    let child_test = concat!(module_path!(), "::memory_child").split_once("::").expect("crate::module").1;
    let out = std::process::Command::new(exe)
        .args([child_test, "--exact", "--ignored", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, dir)
        .env("RKUBE_BENCH_MEM_MODE", mode)
        .output()
        .expect("run child");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout.lines().find_map(|l| l.find("RKUBE_MEM ").map(|i| &l[i + "RKUBE_MEM ".len()..])).unwrap_or_else(|| {
        panic!("child failed ({}):\n{stdout}\n{}", out.status, String::from_utf8_lossy(&out.stderr))
    });
    serde_json::from_str(line).expect("child result")
}

fn mb(b: f64) -> f64 {
    b / (1024.0 * 1024.0)
}

#[test]
#[ignore = "benchmark: run with --release -- --ignored --nocapture bench_memory"]
fn bench_memory_per_pod_and_snapshots() {
    let n: usize = env_or("RKUBE_BENCH_MEM_PODS", 100_000);
    let runs: usize = env_or("RKUBE_BENCH_MEM_RUNS", 3);
    let secs: f64 = env_or("RKUBE_BENCH_MEM_SECS", 75.0);
    let rate: f64 = env_or("RKUBE_BENCH_MEM_RATE", 100.0);
    let dir = tempfile::tempdir().expect("temp dir");
    runtime().block_on(async {
        let s = open_store(dir.path());
        let t = std::time::Instant::now();
        load::load_pods(&s, n, (n / 30).max(1)).await;
        eprintln!("loaded {n} pods in {:.1?}", t.elapsed());
    });
    println!(
        "\nMemory benchmark: {n} pods, {rate} updates/s for {secs} s, {runs} runs per configuration (release build)"
    );
    println!(
        "{:>4} {:>9} | {:>9} {:>11} {:>9} {:>11} | {:>11} {:>11} | {:>9} {:>14}",
        "run", "snapshots", "base RSS", "cache RSS", "B/pod", "cache heap", "after RSS", "after heap", "kept", "purge frees"
    );
    let mut rows: Vec<serde_json::Value> = Vec::new();
    for r in 1..=runs {
        for mode in ["on", "off", "none"] {
            let v = spawn_child(dir.path(), mode);
            let g = |k: &str| v[k].as_f64().unwrap_or(0.0);
            println!(
                "{:>4} {:>9} | {:>7.0}MB {:>9.1}MB {:>9.0} {:>9.1}MB | {:>9.1}MB {:>9.1}MB | {:>9} {:>7.1}MB RSS {:>5.1}MB heap",
                r,
                if mode == "none" { "no cache" } else { mode },
                mb(g("rss0")),
                mb(g("rss1") - g("rss0")),
                (g("rss1") - g("rss0")) / n as f64,
                mb(g("heap1") - g("heap0")),
                mb(g("rss2") - g("rss0")),
                mb(g("heap2") - g("heap0")),
                v["snapshot_count"],
                mb(g("rss2") - g("rss3")),
                mb(g("heap2") - g("heap3")),
            );
            rows.push(v);
        }
    }
    // None: every run with a cache.
    let med = |mode: Option<&str>, f: &dyn Fn(&serde_json::Value) -> f64| {
        let pick = |v: &&serde_json::Value| match mode {
            Some(m) => v["mode"] == m,
            None => v["mode"] != "none",
        };
        load::median_f64(rows.iter().filter(pick).map(f).collect())
    };
    let g = |v: &serde_json::Value, k: &str| v[k].as_f64().unwrap_or(0.0);
    let per_pod_rss = med(None, &|v| (g(v, "rss1") - g(v, "rss0")) / n as f64);
    let per_pod_heap = med(None, &|v| (g(v, "heap1") - g(v, "heap0")) / n as f64);
    let cache_rss_off = med(Some("off"), &|v| g(v, "rss2") - g(v, "rss0"));
    let cache_rss_on = med(Some("on"), &|v| g(v, "rss2") - g(v, "rss0"));
    let cache_heap_off = med(Some("off"), &|v| g(v, "heap2") - g(v, "heap0"));
    let cache_heap_on = med(Some("on"), &|v| g(v, "heap2") - g(v, "heap0"));
    let purge_rss = med(Some("on"), &|v| g(v, "rss2") - g(v, "rss3"));
    let purge_heap = med(Some("on"), &|v| g(v, "heap2") - g(v, "heap3"));
    let kept = med(Some("on"), &|v| g(v, "snapshot_count"));
    let avg_json = med(None, &|v| g(v, "avg_json"));
    let extra_rss = cache_rss_on - cache_rss_off;
    let store_rss = med(Some("none"), &|v| g(v, "rss2") - g(v, "rss0"));
    let store_heap = med(Some("none"), &|v| g(v, "heap2") - g(v, "heap0"));
    println!("medians:");
    println!("  RSS per cached pod: {per_pod_rss:.0} B (live heap {per_pod_heap:.0} B; cached JSON {avg_json:.0} B per pod)");
    println!(
        "  cache RSS after the run: snapshots off {:.1} MB, on {:.1} MB (heap {:.1} / {:.1} MB)",
        mb(cache_rss_off),
        mb(cache_rss_on),
        mb(cache_heap_off),
        mb(cache_heap_on)
    );
    println!(
        "  the store alone grows by {:.1} MB RSS ({:.1} MB heap) over the same writes: the cache's own RSS is {:.1} MB",
        mb(store_rss),
        mb(store_heap),
        mb(cache_rss_off - store_rss)
    );
    let ratio = extra_rss / (cache_rss_off - store_rss);
    println!(
        "  extra RSS of {kept:.0} snapshots (on − off): {:.1} MB = {:.1}% of the cache's RSS; goal ≤ {:.0}%: {}",
        mb(extra_rss),
        ratio * 100.0,
        GOAL_RATIO * 100.0,
        if ratio <= GOAL_RATIO { "met" } else { "MISSED" }
    );
    println!(
        "  in-process: purging the snapshots frees {:.1} MB RSS, {:.1} MB live heap ({:.0} B per snapshot) = {:.1}% of the cache's heap",
        mb(purge_rss),
        mb(purge_heap),
        purge_heap / kept.max(1.0),
        purge_heap / (cache_heap_off - store_heap) * 100.0
    );
    assert!(rows.iter().all(|v| v["pods"].as_u64() == Some(n as u64)), "every child saw every pod");
    assert!(rows.iter().filter(|v| v["mode"] == "on").all(|v| g(v, "snapshot_count") > 0.0));
}
