//! Partial vs full sync benchmark (ignored by default; run explicitly):
//!
//! ```text
//! cargo test -p rkube-proxy --release --test integration -- --ignored --nocapture bench::
//! RKUBE_BENCH_SIZES=1000,5000 RKUBE_BENCH_RUNS=5 cargo test ... (same)
//! RKUBE_TEST_IPTABLES=legacy ...   # iptables-legacy-restore instead of the nf_tables one
//! ```
//!
//! For each size: N ClusterIP services × 5 endpoints in a fresh namespace, one
//! initial full sync, then RUNS rounds of { change one service's endpoints →
//! partial sync; full sync of the same state }, measured side by side. Prints
//! medians of total sync time (full syncs also read the current rules with
//! iptables-save), generation alone, restore alone and restore-input bytes, each
//! ratio next to the issue's goal; peak RSS (VmHWM) of the test process at the end.
//! `bench_generation_only` with `RKUBE_BENCH_DUMP=<dir>` also writes the full and
//! partial restore inputs to `<dir>` (for timing `iptables-restore` by hand).

use crate::common;

use std::time::Duration;

use common::{NetNs, Proxy};
use rkube_proxy::engine::machine::{FullReason, SyncKind};
use rkube_proxy::engine::SyncReport;
use rkube_proxy::fixtures::{endpoint_slice, service, Ep};

const ENDPOINTS: usize = 5;

fn median<T: Ord + Copy>(mut v: Vec<T>) -> T {
    v.sort();
    v[v.len() / 2]
}

fn env_list(name: &str, default: &str) -> Vec<usize> {
    std::env::var(name)
        .unwrap_or_else(|_| default.to_string())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect()
}

fn cluster_ip(i: usize) -> String {
    format!("10.96.{}.{}", i / 250, i % 250 + 1)
}

fn endpoints(i: usize, shift: usize) -> Vec<Ep> {
    (0..ENDPOINTS)
        .map(|k| {
            let n = i * 8 + k + shift;
            Ep::ready(&format!("10.{}.{}.{}", 100 + n / 65536, (n / 256) % 256, n % 256))
        })
        .collect()
}

fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("VmHWM:")).map(str::to_string))
        .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        .unwrap_or(0)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn checked(r: SyncReport) -> SyncReport {
    assert!(r.result.is_ok(), "sync failed: {:?}", r.result);
    r
}

/// Goals of the issue: partial sync time and input bytes as a share of a full sync's.
const GOAL_TIME_PERCENT: f64 = 5.0;
const GOAL_BYTES_PERCENT: f64 = 2.0;

fn verdict(value: f64, goal: f64) -> &'static str {
    if value <= goal {
        "met"
    } else {
        "NOT met"
    }
}

#[test]
#[ignore = "benchmark: run with --ignored --nocapture (and --release)"]
fn bench_partial_vs_full_sync() {
    let sizes = env_list("RKUBE_BENCH_SIZES", "1000,5000,10000");
    let runs = env_list("RKUBE_BENCH_RUNS", "5").first().copied().unwrap_or(5).max(1);
    let legacy = std::env::var("RKUBE_TEST_IPTABLES").as_deref() == Ok("legacy");
    let binary = if legacy { "iptables-legacy" } else { "iptables" };
    println!("iptables: {}", common::must(binary, &["--version"]).trim());
    for &n in &sizes {
        let ns = NetNs::new("bench");
        let mut p = Proxy::new(&ns, "node-a");
        p.change(|t| {
            for i in 0..n {
                t.update_service(&service("bench", &format!("svc{i}"), &cluster_ip(i), "http", 80));
                t.update_slice(&endpoint_slice("bench", &format!("svc{i}"), &format!("svc{i}-1"), "http", 8080, &endpoints(i, 0)));
            }
        });
        let first = checked(p.sync());
        let (mut full_t, mut full_g, mut full_r, mut full_b) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let (mut part_t, mut part_g, mut part_r, mut part_b) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for run in 0..runs {
            // One service changes: its endpoints move (as in a rolling update).
            let i = (run * 7919) % n;
            p.change(|t| {
                t.update_slice(&endpoint_slice("bench", &format!("svc{i}"), &format!("svc{i}-1"), "http", 8080, &endpoints(i, 1 + run % 2)))
            });
            let r = checked(p.sync_kind(SyncKind::Partial));
            assert_eq!(r.services_written, 1, "partial sync writes only the changed service");
            part_t.push(r.duration);
            part_g.push(r.generation);
            part_r.push(r.restore);
            part_b.push(r.bytes);
            let r = checked(p.sync_kind(SyncKind::Full(FullReason::Periodic)));
            full_t.push(r.duration);
            full_g.push(r.generation);
            full_r.push(r.restore);
            full_b.push(r.bytes);
        }
        let (ft, fg, fr, fb) = (median(full_t), median(full_g), median(full_r), median(full_b));
        let (pt, pg, pr, pb) = (median(part_t), median(part_g), median(part_r), median(part_b));
        let time_pct = 100.0 * pt.as_secs_f64() / ft.as_secs_f64();
        let bytes_pct = 100.0 * pb as f64 / fb as f64;
        let tx = if p.backend.writer_mut().splits_nat() { "split nat transactions" } else { "one nat transaction" };
        println!("\n{n} services x {ENDPOINTS} endpoints ({tx}; medians of {runs} runs; ms):");
        println!("  first full sync (empty namespace): {:>10.1} (restore {:.1})", ms(first.duration), ms(first.restore));
        println!("  full sync    total {:>10.1}  generation {:>8.1}  restore {:>10.1}  input {:>10} bytes", ms(ft), ms(fg), ms(fr), fb);
        println!("  partial sync total {:>10.1}  generation {:>8.1}  restore {:>10.1}  input {:>10} bytes", ms(pt), ms(pg), ms(pr), pb);
        println!("  partial/full time  {time_pct:>6.2} %   goal <= {GOAL_TIME_PERCENT} %: {}", verdict(time_pct, GOAL_TIME_PERCENT));
        println!("  partial/full bytes {bytes_pct:>6.2} %   goal <= {GOAL_BYTES_PERCENT} %: {}", verdict(bytes_pct, GOAL_BYTES_PERCENT));
        println!("  generation alone (full) {:.1} ms = {:.1} % of the full sync", ms(fg), 100.0 * fg.as_secs_f64() / ft.as_secs_f64());
    }
    println!("\npeak RSS of the test process (VmHWM; iptables-restore children not included): {} MiB", peak_rss_kib() / 1024);
}

/// Generation alone (no iptables): full vs partial restore input for one changed
/// service, medians over RUNS, sizes from RKUBE_BENCH_SIZES (default 1000,5000,10000,20000).
#[test]
#[ignore = "benchmark: run with --ignored --nocapture (and --release)"]
fn bench_generation_only() {
    use std::collections::{BTreeSet, HashSet};
    use std::time::{Instant, SystemTime};

    use rkube_proxy::tracker::ChangeTracker;
    use rkube_proxy::writer::iptables::IptablesWriter;
    use rkube_proxy::writer::{RuleWriter, SyncMode, SyncRequest};

    let sizes = env_list("RKUBE_BENCH_SIZES", "1000,5000,10000,20000");
    let runs = env_list("RKUBE_BENCH_RUNS", "5").first().copied().unwrap_or(5).max(1);
    println!("{:>8} | {:>10} {:>10} | {:>12} {:>12}", "services", "full ms", "part ms", "full bytes", "part bytes");
    for &n in &sizes {
        let mut t = ChangeTracker::new("node-a", SystemTime::UNIX_EPOCH);
        for i in 0..n {
            t.update_service(&service("bench", &format!("svc{i}"), &cluster_ip(i), "http", 80));
            t.update_slice(&endpoint_slice("bench", &format!("svc{i}"), &format!("svc{i}-1"), "http", 8080, &endpoints(i, 0)));
        }
        let cfg = common::test_config();
        let none = HashSet::new();
        let mut writer = IptablesWriter::new();
        // The nf_tables layout (split nat transactions) unless the legacy backend is asked for.
        if std::env::var("RKUBE_TEST_IPTABLES").as_deref() != Ok("legacy") {
            writer.split_nat(Some(rkube_proxy::writer::iptables::NAT_TRANSACTION_CHAINS));
        }
        let mut request = SyncRequest {
            tracker: &t,
            config: &cfg,
            mode: SyncMode::Full,
            programmed_chains: &none,
            existing_chains: &none,
            node_ips: &[],
            large_cluster_mode: true,
        };
        let programmed = writer.write(&request).active_chains;
        let changed: BTreeSet<_> = [rkube_proxy::model::NamespacedName::new("bench", "svc0")].into();
        let (mut full, mut part, mut fb, mut pb) = (Vec::new(), Vec::new(), 0, 0);
        for _ in 0..runs {
            request.mode = SyncMode::Full;
            request.programmed_chains = &programmed;
            let s = Instant::now();
            fb = writer.write(&request).data.len();
            full.push(s.elapsed());
            request.mode = SyncMode::Partial { changed: &changed };
            let s = Instant::now();
            let out = writer.write(&request);
            part.push(s.elapsed());
            pb = out.data.len();
            assert_eq!(out.services_written, 1);
        }
        println!("{:>8} | {:>10.1} {:>10.1} | {:>12} {:>12}", n, ms(median(full)), ms(median(part)), fb, pb);
        if let Some(dir) = std::env::var_os("RKUBE_BENCH_DUMP") {
            request.mode = SyncMode::Full;
            request.programmed_chains = &none;
            let path = std::path::Path::new(&dir).join(format!("full-{n}.txt"));
            std::fs::write(&path, writer.write(&request).data).expect("write dump");
            request.mode = SyncMode::Partial { changed: &changed };
            request.programmed_chains = &programmed;
            let path = std::path::Path::new(&dir).join(format!("partial-{n}.txt"));
            std::fs::write(&path, writer.write(&request).data).expect("write dump");
        }
    }
}
