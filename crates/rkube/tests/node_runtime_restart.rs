//! KEP-3386's recovery test with a real runtime process: the node agent (in this process, evented
//! PLEG) runs pods through `rkube runtime` (the built binary, a child process); the runtime is
//! killed with SIGKILL and started again on the same socket.
//!
//! What the runtime does with its state: `rkube runtime` keeps sandboxes and containers in memory
//! only, and every container process has `PR_SET_PDEATHSIG=SIGKILL`. So a runtime killed with
//! SIGKILL takes its containers with it, and the runtime started again on the same socket (and
//! root directory) knows no sandbox or container: for the node agent it is a runtime that lost
//! every pod (as containerd after a reboot with a wiped state directory).
//!
//! What the agent must do (asserted on the API server, through kubectl):
//! - while the runtime is down: leave the stream (`kubelet_evented_pleg_connection_error_count`
//!   grows), relist every 1 s (`kubelet_pleg_relist_interval_seconds` keeps counting, each relist
//!   failing), back off its reconnects (0, 1, 2, 4 s …), stay healthy (`/healthz`: the relist
//!   threshold is 3 min);
//! - once the runtime is back: the 1 s relist (still on while backing off) finds the pods gone —
//!   also pods it never listed because events alone told about them (fixed here: the cache stands
//!   in for a missing relist record) — and the pod workers start them again; the stream
//!   reconnects when the back-off says (`kubelet_evented_pleg_connection_success_count` = 2) and
//!   the relist goes back to 300 s;
//! - pods (fixed here to follow upstream `convertToAPIContainerStatuses` / `getPhase`): a pod
//!   that already failed (exit 3, `restartPolicy: Never`) keeps `Failed` with exit code 3 although
//!   the runtime forgot its container; a `Never` pod whose running container was lost is
//!   `Failed`, its container terminated `ContainerStatusUnknown` (137) with `restartCount` 1, and
//!   is not started again; an `Always` pod runs again (a new process, child of the new runtime,
//!   `restartCount` 1); an `OnFailure` pod runs again too, and when that second run exits 3 —
//!   after the reconnection — its last termination shows exit code 3, learnt from the new event
//!   stream with no relist.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::process::ChildGuard;
use common::{str_at, Backend, Cluster, Kubectl};
use rkube_node::agent::{self, AgentHandle, NodeConfig};
use rkube_node::pleg::connection::ConnectionState;
use rkube_node::pleg::metrics::CacheSource;
use rkube_node::pleg::{EventedPleg, EVENTED_RELIST, GENERIC_RELIST};

const NODE: &str = "restart-node";
/// Longest wait for a pod transition or a reconnection.
const LIMIT: Duration = Duration::from_secs(20);

/// `rkube runtime` as a child process on `socket`; killed by PID on drop.
struct RuntimeProcess {
    guard: ChildGuard,
    log: PathBuf,
}

impl RuntimeProcess {
    /// Starts the binary and waits until its socket accepts connections.
    #[track_caller]
    fn start(dir: &Path, socket: &Path, n: u32) -> RuntimeProcess {
        let log = dir.join(format!("runtime-{n}.log"));
        let out = std::fs::File::create(&log).expect("runtime log");
        let child = Command::new(common::cluster::rkube_bin())
            .arg("runtime")
            .arg(format!("--listen=unix://{}", socket.display()))
            .arg(format!("--root={}", dir.join("runtime").display()))
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("log handle"))
            .stderr(out)
            .spawn()
            .expect("start rkube runtime");
        let mut p = RuntimeProcess {
            guard: ChildGuard::new(child, "rkube runtime"),
            log,
        };
        let deadline = Instant::now() + LIMIT;
        while std::os::unix::net::UnixStream::connect(socket).is_err() {
            assert!(
                p.guard.try_wait().is_none(),
                "rkube runtime exited:\n{}",
                p.log()
            );
            assert!(
                Instant::now() < deadline,
                "rkube runtime not listening:\n{}",
                p.log()
            );
            thread::sleep(Duration::from_millis(20));
        }
        p
    }

    fn pid(&self) -> u32 {
        self.guard.pid()
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `kill -9 <pid>` and wait for the exit.
    #[track_caller]
    fn kill9(mut self) {
        self.guard.signal("KILL");
        assert!(
            self.guard.wait_timeout(Duration::from_secs(5)).is_some(),
            "runtime survived SIGKILL"
        );
    }
}

/// PIDs of processes whose argv is exactly `argv`.
fn pids_with_argv(argv: &[&str]) -> Vec<u32> {
    let want: Vec<u8> = argv.iter().flat_map(|a| a.bytes().chain([0])).collect();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return vec![];
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == want))
        .collect()
}

/// The parent PID of a live (not zombie) process.
fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(") ")?;
    let mut f = rest.split_whitespace();
    if f.next()? == "Z" {
        return None;
    }
    f.next()?.parse().ok()
}

/// Polls `cond` every 50 ms until true; panics with `what()` after `limit`.
#[track_caller]
fn wait_until(limit: Duration, what: impl Fn() -> String, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !cond() {
        assert!(
            Instant::now() < deadline,
            "not within {limit:?}: {}",
            what()
        );
        thread::sleep(Duration::from_millis(50));
    }
}

/// A pod bound to [`NODE`] running `command`.
fn pod_manifest(name: &str, restart: &str, command: &[&str]) -> String {
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeName": NODE,
            "restartPolicy": restart,
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "main", "image": "busybox", "command": command}],
        }
    })
    .to_string()
}

fn pod(k: &Kubectl, name: &str) -> serde_json::Value {
    k.json(&["get", "pod", name])
}

/// Waits for `phase` and returns the pod.
#[track_caller]
fn wait_phase(k: &Kubectl, name: &str, phase: &str) -> serde_json::Value {
    let deadline = Instant::now() + LIMIT;
    loop {
        let p = pod(k, name);
        if p.pointer("/status/phase").and_then(|v| v.as_str()) == Some(phase) {
            return p;
        }
        assert!(
            Instant::now() < deadline,
            "{name} not {phase} within {LIMIT:?}: {}",
            p["status"]
        );
        thread::sleep(Duration::from_millis(100));
    }
}

/// A sample of the agent's `/metrics` (`name` without labels).
fn metric(agent: &AgentHandle, name: &str) -> f64 {
    let (code, body) =
        common::cluster::http_get(agent.healthz_addr.port(), "/metrics").expect("GET /metrics");
    assert_eq!(code, 200);
    body.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or_else(|| panic!("{name} not in /metrics:\n{body}"))
}

fn state(evented: &EventedPleg) -> ConnectionState {
    *evented.connection().borrow()
}

#[test]
fn runtime_killed_and_restarted_backs_off_relists_reconnects_and_pod_statuses_stay_right() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    // The agent's log in the test output (RKUBE_E2E_LOG=debug for more).
    let _ = tracing_subscriber::fmt()
        .with_env_filter(std::env::var("RKUBE_E2E_LOG").unwrap_or_else(|_| "info".into()))
        .with_test_writer()
        .try_init();
    let cluster = Cluster::start(Backend::Embedded);
    let k = cluster.kubectl("1.33");
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("cri.sock");
    let runtime = RuntimeProcess::start(dir.path(), &socket, 1);

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio");
    let agent = rt.block_on(async {
        let client = rkube_node::local::client_from_kubeconfig(&cluster.kubeconfig)
            .await
            .expect("client");
        let mut config = NodeConfig::new(NODE, format!("unix://{}", socket.display()));
        config.pod_logs_dir = dir.path().join("pods");
        config.healthz_addr = ([127, 0, 0, 1], 0).into();
        // A free port for the kubelet API: 10250 may be taken by a test running beside this one.
        config.kubelet.addr = ([127, 0, 0, 1], 0).into();
        agent::start(config, client).await.expect("agent")
    });
    let evented = Arc::clone(
        agent
            .evented
            .as_ref()
            .expect("EventedPLEG is on by default"),
    );
    wait_until(
        LIMIT,
        || format!("{:?}; runtime log:\n{}", state(&evented), runtime.log()),
        || state(&evented).is_streaming(),
    );

    // A pod that is over (exit 3) and one that runs (its process has a unique argv).
    let hour = format!("3600.{}", std::process::id());
    k.run_stdin(
        &["apply", "-f", "-"],
        &pod_manifest("failed", "Never", &["sh", "-c", "exit 3"]),
    )
    .success();
    k.run_stdin(
        &["apply", "-f", "-"],
        &pod_manifest("sleeper", "Always", &["sleep", &hour]),
    )
    .success();
    let failed = wait_phase(&k, "failed", "Failed");
    assert_eq!(
        failed.pointer("/status/containerStatuses/0/state/terminated/exitCode"),
        Some(&3.into())
    );
    let failed_container = str_at(&failed, "/status/containerStatuses/0/containerID").to_owned();
    // Both run until the runtime dies; a second run would find its marker file and exit 3.
    let once = |name: &str, n: u32| {
        let marker = dir.path().join(format!("{name}.marker"));
        let hour = format!("{}.{}", 3600 + n, std::process::id());
        let script = format!(
            "if [ -e {m} ]; then sleep 8; exit 3; fi; touch {m}; exec sleep {hour}",
            m = marker.display()
        );
        (hour, script)
    };
    let (never_hour, never_script) = once("never", 1);
    let (retry_hour, retry_script) = once("retry", 2);
    k.run_stdin(
        &["apply", "-f", "-"],
        &pod_manifest("never", "Never", &["sh", "-c", &never_script]),
    )
    .success();
    k.run_stdin(
        &["apply", "-f", "-"],
        &pod_manifest("retry", "OnFailure", &["sh", "-c", &retry_script]),
    )
    .success();
    for (name, hour) in [("never", &never_hour), ("retry", &retry_hour)] {
        wait_phase(&k, name, "Running");
        wait_until(
            LIMIT,
            || format!("{name}'s sleep"),
            || pids_with_argv(&["sleep", hour]).len() == 1,
        );
    }
    let sleeper = wait_phase(&k, "sleeper", "Running");
    let old_container = str_at(&sleeper, "/status/containerStatuses/0/containerID").to_owned();
    let pids = pids_with_argv(&["sleep", &hour]);
    assert_eq!(pids.len(), 1, "one sleep {hour}: {pids:?}");
    assert_eq!(
        parent_of(pids[0]),
        Some(runtime.pid()),
        "the container is a child of rkube runtime"
    );
    assert!(
        agent.metrics.cache_updates_by(CacheSource::Event) > 0,
        "statuses learnt from events"
    );
    let events_before = agent.metrics.cache_updates_by(CacheSource::Event);
    let errors_before = agent.metrics.connection_errors.get();
    assert_eq!(agent.metrics.connection_successes.get(), 1);

    // kill -9: the stream breaks, the container dies with the runtime (PDEATHSIG).
    let down = Instant::now();
    runtime.kill9();
    wait_until(
        Duration::from_secs(5),
        || format!("{:?}", state(&evented)),
        || !state(&evented).is_streaming(),
    );
    wait_until(
        Duration::from_secs(2),
        || format!("sleep {} alive", pids[0]),
        || parent_of(pids[0]).is_none(),
    );
    for hour in [&never_hour, &retry_hour] {
        assert!(
            pids_with_argv(&["sleep", hour]).is_empty(),
            "sleep {hour} died with the runtime"
        );
    }
    assert_eq!(
        evented.generic().relist_duration(),
        GENERIC_RELIST,
        "generic relisting at 1 s while down"
    );
    let intervals_before = metric(&agent, "kubelet_pleg_relist_interval_seconds_count");
    // Reconnects back off: at once, then after 1 s, 2 s, and the next one waits 4 s.
    wait_until(
        Duration::from_secs(10),
        || format!("{:?}", state(&evented)),
        || {
            matches!(
                state(&evented),
                ConnectionState::BackingOff { failures: 4.., .. }
            )
        },
    );
    let s = state(&evented);
    let ConnectionState::BackingOff { retry_at, .. } = s else {
        panic!("not backing off: {s:?}")
    };
    let wait = retry_at.saturating_duration_since(Instant::now());
    let failing = down.elapsed();
    assert!(
        failing >= Duration::from_millis(2500),
        "4 failed connects took {failing:?}, want 0 + 1 + 2 s"
    );
    assert!(
        wait > Duration::from_secs(3) && wait <= Duration::from_secs(4),
        "5th connect in {wait:?}, want 4 s"
    );
    assert!(agent.metrics.connection_errors.get() >= errors_before + 4);
    let relists_down =
        metric(&agent, "kubelet_pleg_relist_interval_seconds_count") - intervals_before;
    assert!(
        relists_down >= 2.0,
        "{relists_down} relists in {failing:?} (period 1 s)"
    );
    let (code, body) =
        common::cluster::http_get(agent.healthz_addr.port(), "/healthz").expect("healthz");
    assert_eq!(
        (code, body.as_str()),
        (200, "ok"),
        "a failing relist is not unhealthy before 3 min"
    );

    // Start the runtime again on the same socket: the agent reconnects within its back-off.
    let runtime = RuntimeProcess::start(dir.path(), &socket, 2);
    let back = Instant::now();
    wait_until(
        LIMIT,
        || format!("{:?}", state(&evented)),
        || state(&evented).is_streaming(),
    );
    let reconnect = back.elapsed();
    // Not before the back-off allows it; at it, when the runtime was up by then (else at the
    // next attempt, 8 s later).
    let connected = Instant::now();
    assert!(
        connected + Duration::from_millis(60) >= retry_at,
        "reconnected before the back-off's 4 s"
    );
    if back < retry_at {
        assert!(
            connected <= retry_at + Duration::from_secs(1),
            "reconnected {reconnect:?} after the restart"
        );
    }
    assert_eq!(agent.metrics.connection_successes.get(), 2);
    eprintln!(
        "runtime down: 4 failed connects in {failing:?}, 5th due in {wait:?}, {relists_down} relists; \
         reconnected {reconnect:?} after the restart"
    );
    assert_eq!(evented.generic().relist_duration(), EVENTED_RELIST);
    // The reconnection's own relist (milliseconds); after it, none for 300 s.
    thread::sleep(Duration::from_millis(300));
    let relists_streaming = agent.metrics.relists.get();

    // The pods, as the API server reports them.
    let deadline = Instant::now() + LIMIT;
    let sleeper = loop {
        let p = pod(&k, "sleeper");
        let id = p
            .pointer("/status/containerStatuses/0/containerID")
            .and_then(|v| v.as_str());
        let running = p
            .pointer("/status/containerStatuses/0/state/running")
            .is_some();
        if running && id.is_some_and(|id| id != old_container) {
            break p;
        }
        assert!(
            Instant::now() < deadline,
            "sleeper not running again: {}",
            p["status"]
        );
        thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(str_at(&sleeper, "/status/phase"), "Running");
    assert_eq!(
        sleeper.pointer("/status/containerStatuses/0/restartCount"),
        Some(&1.into()),
        "{}",
        sleeper["status"]
    );
    let pids = pids_with_argv(&["sleep", &hour]);
    assert_eq!(pids.len(), 1, "one sleep {hour}: {pids:?}");
    assert_eq!(
        parent_of(pids[0]),
        Some(runtime.pid()),
        "run again by the new runtime"
    );
    let failed = pod(&k, "failed");
    assert_eq!(
        str_at(&failed, "/status/phase"),
        "Failed",
        "{}",
        failed["status"]
    );
    assert_eq!(
        failed.pointer("/status/containerStatuses/0/state/terminated/exitCode"),
        Some(&3.into()),
        "{}",
        failed["status"]
    );
    assert_eq!(
        str_at(&failed, "/status/containerStatuses/0/containerID"),
        failed_container,
        "the failed pod was not run again"
    );

    let never = pod(&k, "never");
    let cs = &never["status"]["containerStatuses"][0];
    assert_eq!(never["status"]["phase"], "Failed", "{}", never["status"]);
    assert_eq!(
        cs["state"]["terminated"]["reason"], "ContainerStatusUnknown",
        "{}",
        never["status"]
    );
    assert_eq!(
        cs["state"]["terminated"]["exitCode"], 137,
        "{}",
        never["status"]
    );
    assert_eq!(
        cs["lastState"]["terminated"]["reason"], "ContainerStatusUnknown",
        "{}",
        never["status"]
    );
    assert_eq!(cs["restartCount"], 1, "{}", never["status"]);
    // The OnFailure pod's second run exits 3 after the reconnection.
    let deadline = Instant::now() + LIMIT;
    let retry = loop {
        let p = pod(&k, "retry");
        if p.pointer("/status/containerStatuses/0/lastState/terminated/exitCode") == Some(&3.into())
        {
            break p;
        }
        assert!(
            Instant::now() < deadline,
            "retry's second run did not exit 3: {}",
            p["status"]
        );
        thread::sleep(Duration::from_millis(100));
    };
    let cs = &retry["status"]["containerStatuses"][0];
    assert_eq!(
        retry["status"]["phase"], "Running",
        "OnFailure restarts it: {}",
        retry["status"]
    );
    assert_eq!(
        cs["state"]["waiting"]["reason"], "CrashLoopBackOff",
        "{}",
        retry["status"]
    );
    assert_eq!(cs["restartCount"], 1, "{}", retry["status"]);
    // The new runtime never got a sandbox for the Never pod; the others have theirs.
    let sandboxes = rt.block_on(async {
        let cri = rkube_node::cri::CriClient::connect_lazy(&format!("unix://{}", socket.display()))
            .expect("cri");
        rkube_node::cri::RuntimeApi::list_pod_sandbox(&cri)
            .await
            .expect("ListPodSandbox")
    });
    let mut names: Vec<String> = sandboxes
        .iter()
        .filter_map(|s| s.metadata.as_ref().map(|m| m.name.clone()))
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["retry", "sleeper"],
        "sandboxes in the restarted runtime"
    );
    assert!(
        agent.metrics.cache_updates_by(CacheSource::Event) > events_before,
        "the exit came as an event; /metrics:\n{}",
        common::cluster::http_get(agent.healthz_addr.port(), "/metrics")
            .map(|(_, b)| b)
            .unwrap_or_default()
    );
    assert_eq!(
        agent.metrics.relists.get(),
        relists_streaming,
        "no relist since the reconnection"
    );
    assert_eq!(agent.metrics.missed_events.get(), 0);

    rt.block_on(agent.shutdown());
    drop(runtime);
}
