//! Watch fan-out under load (issue 3's benchmark): node-scoped watchers
//! (`fieldSelector=spec.nodeName=X`, routed by the node index) and
//! cluster-wide watchers on one pods cache over the real embedded store,
//! while pods are updated at a paced rate through storage writes; some
//! updates move a pod to another node.
//!
//! Checked for every watcher: it got exactly the events of its selection,
//! in revision order (a moved pod is DELETED for its old node's watcher and
//! ADDED for the new one's), and no watcher was terminated
//! (`apiserver_terminated_watchers_total` delta, streams that ended).
//! Measured: delivery latency = time the watcher's stream yielded the event
//! − time storage acknowledged the write, p50/p99/max per class of watcher.
//!
//! Benchmark (release; 1,000 nodes × 30 pods, 1,000 node watchers + 10
//! cluster-wide, 500 updates/s for 60 s):
//! `cargo test -p rkube-cache --release --test integration -- --ignored --nocapture bench_watchers::`
//! Env overrides: `RKUBE_BENCH_WATCH_SECS` (60), `RKUBE_BENCH_WATCH_RATE`
//! (500), `RKUBE_BENCH_WATCH_NODES` (1000), `RKUBE_BENCH_WATCH_PODS_PER_NODE`
//! (30), `RKUBE_BENCH_WATCH_NODE_WATCHERS` (one per node), `RKUBE_BENCH_WATCH_CLUSTER`
//! (10), `RKUBE_BENCH_WATCH_RUNS` (1).
//!
//! A short variant (100 node watchers, 5 s) runs with the normal tests and
//! asserts correctness only, never timing.

use crate::common;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::load::{self, Pacing, Write};
use common::*;
use futures::StreamExt;
use rkube_api::list_options::ListOptions;
use rkube_cache::{CacheWatch, Cacher, WatchEvent};
use rkube_storage::WatchResponse;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Goal: p99 delivery latency (issue 3).
const P99_GOAL: Duration = Duration::from_millis(50);

#[derive(Debug, Clone, Copy)]
struct Params {
    nodes: usize,
    pods_per_node: usize,
    node_watchers: usize,
    cluster_watchers: usize,
    rate: f64,
    duration: Duration,
    move_every: usize,
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok()).unwrap_or(default)
}

/// Event kinds as recorded by a watcher.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    Added,
    Modified,
    Deleted,
}

/// What one watcher saw.
struct Seen {
    /// Node index for node-scoped watchers, None for cluster-wide.
    node: Option<usize>,
    events: Vec<(i64, Kind, Instant)>,
    /// The stream ended before the run did (terminated or closed).
    ended: bool,
    /// Something other than ADDED/MODIFIED/DELETED arrived (bookmark, error).
    other: usize,
}

/// Consumes `w` until `stop`, recording (rv, kind, arrival) per event and
/// building each event's wire line as a server would.
fn spawn_watcher(
    node: Option<usize>,
    mut w: CacheWatch,
    mut stop: tokio::sync::watch::Receiver<bool>,
    delivered: Arc<AtomicU64>,
) -> JoinHandle<Seen> {
    tokio::spawn(async move {
        let mut seen = Seen { node, events: Vec::new(), ended: false, other: 0 };
        loop {
            tokio::select! {
                biased;
                ev = w.next() => {
                    let Some(ev) = ev else { seen.ended = true; break };
                    let now = Instant::now();
                    let kind = match &ev {
                        WatchEvent::Added(_) => Kind::Added,
                        WatchEvent::Modified(_) => Kind::Modified,
                        WatchEvent::Deleted(_) => Kind::Deleted,
                        _ => { seen.other += 1; continue }
                    };
                    let line = ev.to_json_line("Pod", "v1");
                    std::hint::black_box(&line);
                    seen.events.push((ev.resource_version().unwrap_or(0), kind, now));
                    delivered.fetch_add(1, Ordering::Relaxed);
                }
                _ = stop.changed() => break,
            }
        }
        seen
    })
}

/// What a watcher should have seen of the writes, in order.
fn expected(node: Option<usize>, writes: &[Write]) -> Vec<(i64, Kind)> {
    writes
        .iter()
        .filter_map(|w| match node {
            None => Some((w.rv, Kind::Modified)),
            Some(n) if w.old_node == n && w.new_node == n => Some((w.rv, Kind::Modified)),
            Some(n) if w.new_node == n => Some((w.rv, Kind::Added)),
            Some(n) if w.old_node == n => Some((w.rv, Kind::Deleted)),
            Some(_) => None,
        })
        .collect()
}

/// Latency figures of one class of watchers.
#[derive(Debug, Default)]
struct ClassStats {
    watchers: usize,
    events: usize,
    p50: Duration,
    p99: Duration,
    max: Duration,
    /// Events that arrived before the writer saw its acknowledgement.
    before_ack: usize,
    /// Latency from the moment the storage watch delivered the event (the cache's own share).
    cache_p50: Duration,
    cache_p99: Duration,
    cache_max: Duration,
    /// Latency from the moment the write was issued (includes the storage commit).
    issue_p50: Duration,
    issue_p99: Duration,
    issue_max: Duration,
}

/// One run's results.
#[derive(Debug)]
struct Outcome {
    load: Duration,
    init: Duration,
    pods: usize,
    writes: usize,
    achieved_rate: f64,
    moves: usize,
    delivered: u64,
    expected: u64,
    /// Watchers whose events differ from the expected sequence.
    wrong_watchers: Vec<String>,
    ended_streams: usize,
    terminated: u64,
    node: ClassStats,
    cluster: ClassStats,
    /// Write acknowledgement latency p99 (storage commit).
    write_p99: Duration,
}

async fn run(p: Params) -> Outcome {
    let b = embedded();
    let s = b.storage.clone();
    let pods = p.nodes * p.pods_per_node;
    let t = Instant::now();
    let state = load::load_pods(&s, pods, p.nodes).await;
    let load_t = t.elapsed();

    let cacher = Cacher::new(s.clone(), pod_config());
    let t = Instant::now();
    wait_for(&cacher, s.current_revision().await.expect("revision")).await;
    let init = t.elapsed();
    let rv = cacher.resource_version();
    let terminated_before = cacher.metrics().terminated_watchers();

    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let delivered = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for n in 0..p.node_watchers.min(p.nodes) {
        let q = format!("resourceVersion={rv}&fieldSelector=spec.nodeName%3D{}", load::node_name(n));
        let w = cacher.watch(None, &ListOptions::from_query(&q).expect("query")).await.expect("node watch");
        tasks.push(spawn_watcher(Some(n), w, stop_rx.clone(), delivered.clone()));
    }
    for _ in 0..p.cluster_watchers {
        let q = format!("resourceVersion={rv}");
        let w = cacher.watch(None, &ListOptions::from_query(&q).expect("query")).await.expect("cluster watch");
        tasks.push(spawn_watcher(None, w, stop_rx.clone(), delivered.clone()));
    }

    // A raw storage watch next to the cache's: when storage delivered each
    // event, so the cache's own share of the latency can be told apart.
    let mut raw = s.watch(PODS, rv).await.expect("storage watch").stream;
    let mut raw_stop = stop_rx.clone();
    let raw_task = tokio::spawn(async move {
        let mut at: HashMap<i64, Instant> = HashMap::new();
        loop {
            tokio::select! {
                biased;
                msg = raw.next() => match msg {
                    Some(Ok(WatchResponse::Events(evs))) => {
                        let now = Instant::now();
                        for e in evs {
                            at.insert(e.revision(), now);
                        }
                    }
                    Some(Ok(_)) => {}
                    _ => break,
                },
                _ = raw_stop.changed() => break,
            }
        }
        at
    });

    let pacing = Pacing { rate: p.rate, duration: p.duration, move_every: p.move_every, nodes: p.nodes };
    let (writes, achieved_rate) = load::paced_updates(&s, state, pacing).await;

    // Wait for the expected deliveries (bounded), then stop the watchers.
    let watched_nodes = p.node_watchers.min(p.nodes);
    let want: u64 = (0..watched_nodes)
        .map(|n| expected(Some(n), &writes).len() as u64)
        .sum::<u64>()
        + (p.cluster_watchers * writes.len()) as u64;
    let deadline = Instant::now() + Duration::from_secs(10);
    while delivered.load(Ordering::Relaxed) < want && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // A short grace period to catch extra (unexpected) events.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let _ = stop_tx.send(true);
    let mut seen = Vec::new();
    for t in tasks {
        seen.push(t.await.expect("watcher task"));
    }
    let terminated = cacher.metrics().terminated_watchers() - terminated_before;
    let storage_at = raw_task.await.expect("storage watch task");

    let by_rv: HashMap<i64, &Write> = writes.iter().map(|w| (w.rv, w)).collect();
    let mut wrong_watchers = Vec::new();
    let mut lat: [Vec<Duration>; 2] = [Vec::new(), Vec::new()];
    let mut lat_issue: [Vec<Duration>; 2] = [Vec::new(), Vec::new()];
    let mut lat_cache: [Vec<Duration>; 2] = [Vec::new(), Vec::new()];
    let mut before_ack = [0usize; 2];
    let mut count = [0usize; 2];
    for w in &seen {
        let class = usize::from(w.node.is_none());
        count[class] += 1;
        let got: Vec<(i64, Kind)> = w.events.iter().map(|(rv, k, _)| (*rv, *k)).collect();
        let exp = expected(w.node, &writes);
        if got != exp || w.other > 0 {
            let name = w.node.map(load::node_name).unwrap_or_else(|| "cluster-wide".into());
            let (got_set, exp_set): (HashSet<_>, HashSet<_>) = (got.iter().collect(), exp.iter().collect());
            let missing = exp_set.difference(&got_set).count();
            let extra = got_set.difference(&exp_set).count();
            wrong_watchers.push(format!(
                "{name}: got {} events, want {} ({missing} missing, {extra} unexpected, other {})",
                got.len(),
                exp.len(),
                w.other
            ));
        }
        for (rv, _, at) in &w.events {
            let Some(wr) = by_rv.get(rv) else { continue };
            if *at < wr.acked {
                before_ack[class] += 1;
            }
            lat[class].push(at.saturating_duration_since(wr.acked));
            lat_issue[class].push(at.saturating_duration_since(wr.started));
            if let Some(t) = storage_at.get(rv) {
                lat_cache[class].push(at.saturating_duration_since(*t));
            }
        }
    }
    let mut stats = |class: usize| {
        let mut v = std::mem::take(&mut lat[class]);
        v.sort();
        let mut vi = std::mem::take(&mut lat_issue[class]);
        vi.sort();
        let mut vc = std::mem::take(&mut lat_cache[class]);
        vc.sort();
        ClassStats {
            cache_p50: load::percentile(&vc, 50.0),
            cache_p99: load::percentile(&vc, 99.0),
            cache_max: vc.last().copied().unwrap_or_default(),
            issue_p50: load::percentile(&vi, 50.0),
            issue_p99: load::percentile(&vi, 99.0),
            issue_max: vi.last().copied().unwrap_or_default(),
            watchers: count[class],
            events: v.len(),
            p50: load::percentile(&v, 50.0),
            p99: load::percentile(&v, 99.0),
            max: v.last().copied().unwrap_or_default(),
            before_ack: before_ack[class],
        }
    };
    let node = stats(0);
    let cluster = stats(1);
    let mut write_lat: Vec<Duration> = writes.iter().map(|w| w.acked - w.started).collect();
    write_lat.sort();
    Outcome {
        load: load_t,
        init,
        pods,
        writes: writes.len(),
        achieved_rate,
        moves: writes.iter().filter(|w| w.old_node != w.new_node).count(),
        delivered: delivered.load(Ordering::Relaxed),
        expected: want,
        wrong_watchers,
        ended_streams: seen.iter().filter(|w| w.ended).count(),
        terminated,
        node,
        cluster,
        write_p99: load::percentile(&write_lat, 99.0),
    }
}

fn assert_correct(o: &Outcome) {
    assert!(
        o.wrong_watchers.is_empty(),
        "{} watchers saw wrong events, e.g. {:?}",
        o.wrong_watchers.len(),
        &o.wrong_watchers[..o.wrong_watchers.len().min(5)]
    );
    assert_eq!(o.delivered, o.expected, "events delivered vs expected");
    assert_eq!(o.terminated, 0, "apiserver_terminated_watchers_total grew");
    assert_eq!(o.ended_streams, 0, "watch streams ended during the run");
}

fn mark(ok: bool) -> &'static str {
    if ok {
        "met"
    } else {
        "MISSED"
    }
}

/// One latency of a class: `(p50, p99, max)`.
type Pick = fn(&ClassStats) -> (Duration, Duration, Duration);
/// Arrival at the watcher − write acknowledged by storage.
const FROM_ACK: Pick = |c| (c.p50, c.p99, c.max);
/// Arrival at the watcher − arrival on a raw storage watch.
const CACHE_SHARE: Pick = |c| (c.cache_p50, c.cache_p99, c.cache_max);
/// Arrival at the watcher − write issued.
const END_TO_END: Pick = |c| (c.issue_p50, c.issue_p99, c.issue_max);

/// One table row per class for the latency `pick`; the `before ack` column
/// is filled only when `before_ack`.
fn print_classes(o: &Outcome, pick: Pick, before_ack: bool) {
    for (name, c) in [("node-scoped", &o.node), ("cluster-wide", &o.cluster)] {
        let (p50, p99, max) = pick(c);
        let before = if before_ack { c.before_ack.to_string() } else { String::new() };
        println!(
            "  {:<14} {:>8} {:>9} {:>10.2?} {:>10.2?} {:>10.2?} {:>11}   p99 goal < {P99_GOAL:?}: {}",
            name,
            c.watchers,
            c.events,
            p50,
            p99,
            max,
            before,
            mark(p99 < P99_GOAL)
        );
    }
}

fn print(p: &Params, o: &Outcome) {
    println!(
        "  load {} pods {:.1?}, cache init {:.2?}; {} updates ({} moves) at {:.0}/s achieved (target {}/s), write ack p99 {:.2?}",
        o.pods, o.load, o.init, o.writes, o.moves, o.achieved_rate, p.rate, o.write_p99
    );
    println!("  delivery latency = arrival at the watcher − write acknowledged by storage (events arriving before the ack count 0)");
    println!("  {:<14} {:>8} {:>9} {:>10} {:>10} {:>10} {:>11}", "class", "watchers", "events", "p50", "p99", "max", "before ack");
    print_classes(o, FROM_ACK, true);
    println!("  cache share = arrival at the watcher − arrival of the same event on a raw storage watch (0 when the watcher was first)");
    print_classes(o, CACHE_SHARE, false);
    println!("  end to end = arrival − write issued (includes the storage commit, fsync)");
    print_classes(o, END_TO_END, false);
    println!(
        "  events delivered {} / expected {}: {}; watchers with wrong events: {}",
        o.delivered,
        o.expected,
        mark(o.delivered == o.expected),
        o.wrong_watchers.len()
    );
    println!(
        "  apiserver_terminated_watchers_total delta {} (goal 0: {}); streams ended early {}",
        o.terminated,
        mark(o.terminated == 0),
        o.ended_streams
    );
}

/// The short variant: every watcher gets every event of its node (or of
/// the cluster), in order, moves included, and none is terminated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_watcher_gets_each_event_of_its_selection_in_order_and_none_is_terminated() {
    let p = Params {
        nodes: 100,
        pods_per_node: 5,
        node_watchers: 100,
        cluster_watchers: 3,
        rate: 200.0,
        duration: Duration::from_secs(5),
        move_every: 10,
    };
    let o = run(p).await;
    print(&p, &o);
    assert!(o.moves > 0 && o.writes > 0);
    assert_correct(&o);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: run with --release -- --ignored --nocapture"]
async fn bench_watchers_fan_out() {
    let nodes = env_or("RKUBE_BENCH_WATCH_NODES", 1000);
    let p = Params {
        nodes,
        pods_per_node: env_or("RKUBE_BENCH_WATCH_PODS_PER_NODE", 30),
        node_watchers: env_or("RKUBE_BENCH_WATCH_NODE_WATCHERS", nodes),
        cluster_watchers: env_or("RKUBE_BENCH_WATCH_CLUSTER", 10),
        rate: env_or("RKUBE_BENCH_WATCH_RATE", 500.0),
        duration: Duration::from_secs_f64(env_or("RKUBE_BENCH_WATCH_SECS", 60.0)),
        move_every: 50,
    };
    let runs: usize = env_or("RKUBE_BENCH_WATCH_RUNS", 1);
    println!(
        "\nWatch fan-out benchmark, embedded store: {} node-scoped + {} cluster-wide watchers, {} pods, {}/s updates for {:?} (1 in {} moves a pod)",
        p.node_watchers, p.cluster_watchers, p.nodes * p.pods_per_node, p.rate, p.duration, p.move_every
    );
    let mut outcomes = Vec::new();
    for r in 1..=runs {
        println!("run {r}/{runs}:");
        let o = run(p).await;
        print(&p, &o);
        outcomes.push(o);
    }
    if runs > 1 {
        let med = |f: &dyn Fn(&Outcome) -> Duration| {
            let mut v: Vec<Duration> = outcomes.iter().map(f).collect();
            v.sort();
            v[v.len() / 2]
        };
        // `node-scoped p50 .. p99 .. max ..; cluster-wide p50 .. p99 .. max ..` of the medians.
        let classes = |pick: Pick| {
            let of = |c: fn(&Outcome) -> &ClassStats| (med(&|o| pick(c(o)).0), med(&|o| pick(c(o)).1), med(&|o| pick(c(o)).2));
            let (n, c) = (of(|o| &o.node), of(|o| &o.cluster));
            format!(
                "node-scoped p50 {:.2?} p99 {:.2?} max {:.2?}; cluster-wide p50 {:.2?} p99 {:.2?} max {:.2?}",
                n.0, n.1, n.2, c.0, c.1, c.2
            )
        };
        println!("median of {runs} runs, from ack: {} (p99 goal < {P99_GOAL:?})", classes(FROM_ACK));
        println!("median of {runs} runs, cache share: {}", classes(CACHE_SHARE));
        println!("median of {runs} runs, end to end: {}; write ack p99 {:.2?}", classes(END_TO_END), med(&|o| o.write_p99));
    }
    for o in &outcomes {
        assert_correct(o);
    }
}
