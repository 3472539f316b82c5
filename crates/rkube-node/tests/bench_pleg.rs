//! Benchmark (ignored by default): generic vs evented PLEG against `rkube runtime`.
//!
//! For each mode: N pods (one sandbox + one `sleep` container each) idle for a window, then K
//! containers die (SIGKILL behind the runtime's back, one every 20 ms). Printed side by side:
//! relists during the idle window, CPU seconds of this process (PLEG + runtime, which run
//! in-process; the `sleep` children are not counted) during the idle window, and the latency
//! from each death to its `ContainerDied` lifecycle event (p50/p99).
//!
//! Run (defaults: 100 containers, 60 s idle, 100 exits):
//! `cargo test -p rkube-node --release --test integration -- --ignored --nocapture bench_pleg::`
//! Knobs: `RKUBE_BENCH_CONTAINERS`, `RKUBE_BENCH_IDLE_SECS`, `RKUBE_BENCH_EXITS`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rkube_node::cri::{CriClient, RuntimeApi};
use rkube_node::pleg::{
    EventedPleg, GenericPleg, PlegMetrics, PodCache, PodLifecycleEvent, PodLifecycleEventType, PLEG_CHANNEL_CAPACITY,
};
use rkube_node::shutdown;
use rkube_runtime::{cri, serve, RuntimeConfig};
use tokio::sync::mpsc;

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// User + system CPU seconds of this process so far.
fn cpu_seconds() -> f64 {
    // SAFETY: getrusage fills the zeroed struct we own.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    if rc != 0 {
        return 0.0;
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

struct Result {
    mode: &'static str,
    relists: u64,
    cpu: f64,
    idle: Duration,
    p50: Duration,
    p99: Duration,
    max: Duration,
    exits: usize,
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

async fn run_mode(evented: bool, containers: usize, idle: Duration, exits: usize) -> Result {
    let dir = tempfile::tempdir().expect("tempdir");
    let handle = serve(&dir.path().join("cri.sock"), RuntimeConfig::new(dir.path())).await.expect("serve");
    let client = CriClient::connect_lazy(&handle.endpoint()).expect("client");
    let api: Arc<dyn RuntimeApi> = Arc::new(client.clone());
    let cache = PodCache::new();
    let metrics = PlegMetrics::new();
    let (tx, mut rx) = mpsc::channel::<PodLifecycleEvent>(PLEG_CHANNEL_CAPACITY * 4);
    let generic = GenericPleg::new(Arc::clone(&api), Arc::clone(&cache), tx.clone(), metrics.clone());
    let (trigger, sd) = shutdown::channel();
    let task = if evented {
        let e = EventedPleg::new(api, Arc::clone(&cache), tx, metrics.clone(), Arc::clone(&generic));
        let mut conn = e.connection();
        let t = tokio::spawn(Arc::clone(&e).run(sd));
        conn.wait_for(|s| s.is_streaming()).await.expect("streaming");
        t
    } else {
        tokio::spawn(Arc::clone(&generic).run(sd))
    };

    let mut ids = Vec::new();
    for i in 0..containers {
        let sandbox_config = cri::PodSandboxConfig {
            metadata: Some(cri::PodSandboxMetadata { name: format!("p{i}"), uid: format!("uid-{i}"), namespace: "bench".into(), attempt: 0 }),
            ..Default::default()
        };
        let sb = client.run_pod_sandbox(sandbox_config.clone()).await.expect("sandbox");
        let config = cri::ContainerConfig {
            metadata: Some(cri::ContainerMetadata { name: "c".into(), attempt: 0 }),
            command: vec!["sleep".into(), "100000".into()],
            ..Default::default()
        };
        let c = client.create_container(&sb, config, sandbox_config).await.expect("create");
        client.start_container(&c).await.expect("start");
        ids.push(c);
    }
    // Let both PLEGs catch up with the start-up burst, then drain its events.
    tokio::time::sleep(Duration::from_secs(3)).await;
    while rx.try_recv().is_ok() {}

    let relists0 = metrics.relists.get();
    let cpu0 = cpu_seconds();
    let t0 = Instant::now();
    tokio::time::sleep(idle).await;
    let cpu = cpu_seconds() - cpu0;
    let idle_elapsed = t0.elapsed();
    let relists = metrics.relists.get() - relists0;

    // Record each ContainerDied as it arrives (a reader task, so receipt times are not skewed
    // by the kill loop).
    let (stop_reader, mut stop_rx) = tokio::sync::oneshot::channel::<()>();
    let reader = tokio::spawn(async move {
        let mut died: HashMap<String, Instant> = HashMap::new();
        loop {
            tokio::select! {
                ev = rx.recv() => match ev {
                    Some(ev) if ev.r#type == PodLifecycleEventType::ContainerDied => {
                        died.entry(ev.data).or_insert_with(Instant::now);
                    }
                    Some(_) => {}
                    None => return died,
                },
                _ = &mut stop_rx => return died,
            }
        }
    });
    let mut killed_at: HashMap<String, Instant> = HashMap::new();
    for id in ids.iter().take(exits) {
        let pid = handle
            .runtime()
            .container_status(id, true)
            .ok()
            .and_then(|s| s.info.get("pid").and_then(|p| p.parse::<i32>().ok()))
            .expect("pid");
        killed_at.insert(id.clone(), Instant::now());
        // SAFETY: signalling a process we started.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Generic needs up to one relist period after the last death.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let _ = stop_reader.send(());
    let died = reader.await.expect("reader");
    trigger.fire();
    let _ = task.await;
    let mut latencies: Vec<Duration> =
        killed_at.iter().filter_map(|(id, at)| died.get(id).map(|d| d.duration_since(*at))).collect();
    latencies.sort();
    handle.shutdown().await;
    Result {
        mode: if evented { "evented" } else { "generic" },
        relists,
        cpu,
        idle: idle_elapsed,
        p50: percentile(&latencies, 0.5),
        p99: percentile(&latencies, 0.99),
        max: latencies.last().copied().unwrap_or_default(),
        exits: latencies.len(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: takes about 2 × (idle window + 10 s)"]
async fn bench_evented_vs_generic_pleg() {
    let containers = env_or("RKUBE_BENCH_CONTAINERS", 100);
    let idle = Duration::from_secs(env_or("RKUBE_BENCH_IDLE_SECS", 60) as u64);
    let exits = env_or("RKUBE_BENCH_EXITS", 100).min(containers);
    let generic = run_mode(false, containers, idle, exits).await;
    let evented = run_mode(true, containers, idle, exits).await;
    println!();
    println!("PLEG benchmark: {containers} containers, {}s idle, {exits} exits", idle.as_secs());
    println!(
        "{:<8} {:>8} {:>12} {:>10} {:>12} {:>12} {:>12} {:>6}",
        "mode", "relists", "cpu_s(idle)", "cpu_%", "died p50", "died p99", "died max", "seen"
    );
    for r in [&generic, &evented] {
        println!(
            "{:<8} {:>8} {:>12.3} {:>9.2}% {:>10.1}ms {:>10.1}ms {:>10.1}ms {:>6}",
            r.mode,
            r.relists,
            r.cpu,
            100.0 * r.cpu / r.idle.as_secs_f64(),
            r.p50.as_secs_f64() * 1e3,
            r.p99.as_secs_f64() * 1e3,
            r.max.as_secs_f64() * 1e3,
            r.exits
        );
    }
    println!("evented/generic idle CPU: {:.1}%", 100.0 * evented.cpu / generic.cpu.max(1e-9));
    assert_eq!(generic.exits, exits, "every death reported (generic)");
    assert_eq!(evented.exits, exits, "every death reported (evented)");
}
