//! `rkube bench pods`: pod startup on a real node, `rkube up --node` (API server, controllers,
//! scheduler, node agent and runtime in one process), against upstream's pod startup SLO
//! (stateless pods, image pulls excluded: p99 of created → Running ≤ 5 s), and the CPU that
//! process uses with the pods idle.
//!
//! One `rkube up --node` runs over HTTPS (a bearer token of `system:masters` from
//! `--token-auth-file`). The bench creates one ConfigMap and then `--pods` pods (default 100;
//! 10 with `--quick`), one at a time, each with that ConfigMap as a volume and a TCP readiness
//! probe (period 1 s) against a listener the bench holds open on a free port; the container is
//! `sleep`, a host process of the node's runtime.
//!
//! Times are on the bench's clock. A pod is created at the earlier of its create response and
//! the first event of one pod watch (LIST + WATCH of the bench's label, re-listed when the watch
//! ends) that shows it; Running is the first event with `status.phase=Running`, Ready the first
//! with condition `Ready=True`. Reported: created → Running (the SLI of the SLO) and created →
//! Ready, p50/p90/p99/max, against 5 s. Then, with every pod Ready and nothing else asked of the
//! server, the `rkube up` process's user + system CPU (from `/proc/<pid>/stat`) over
//! `--step-seconds` (default 30; 5 with `--quick`), in % of one core, and its RSS.
//!
//! The scenario fails (the report is written, the command exits non-zero) when not every pod is
//! seen Running and Ready within [`START_TIMEOUT`]; missing the SLO is reported (`met`: NO) but is
//! not a failure, as in `rkube bench cluster`. Every pod is deleted and `rkube up` is stopped by
//! PID (SIGTERM, which stops its pods' processes, then SIGKILL after 30 s).

use std::collections::HashMap;
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::{json, Value};

use crate::cli::Scenario;
use crate::client::Api;
use crate::procs::{free_port, ProcWatcher};
use crate::report::{Report, Table};
use crate::scenarios::Ctx;
use crate::stats::{fmt_bytes, fmt_secs, Summary};

/// Upstream's pod startup SLO for stateless pods: p99 of created → Running ≤ 5 s.
const POD_STARTUP_SLO_SECONDS: f64 = 5.0;

/// Pods created by default (`--pods`).
const DEFAULT_PODS: usize = 100;
/// Pods created with `--quick` when `--pods` is not given.
const QUICK_PODS: usize = 10;

/// How long every pod may take to be seen Running and Ready after the last create.
pub const START_TIMEOUT: Duration = Duration::from_secs(300);

/// How long `rkube up --node` may take to serve and report its node Ready.
const UP_TIMEOUT: Duration = Duration::from_secs(90);

/// The bench's bearer token (a `system:masters` user of `--token-auth-file`).
const TOKEN: &str = "bench-pods-token";

/// The label every pod of the bench carries (`bench=pods`).
const LABEL: (&str, &str) = ("bench", "pods");

/// When the bench saw one pod reach each stage.
#[derive(Debug, Default, Clone, Copy)]
struct Stages {
    created: Option<Instant>,
    running: Option<Instant>,
    ready: Option<Instant>,
}

/// Every pod's stages, by name.
#[derive(Debug, Default)]
struct Seen {
    pods: Mutex<HashMap<String, Stages>>,
}

impl Seen {
    /// Stamps `name` created (and Running / Ready when the object says so) at `at`, keeping
    /// earlier stamps.
    fn observe(&self, name: &str, at: Instant, running: bool, ready: bool) {
        let Ok(mut pods) = self.pods.lock() else {
            return;
        };
        let s = pods.entry(name.to_string()).or_default();
        s.created = Some(s.created.map_or(at, |c| c.min(at)));
        if running {
            s.running.get_or_insert(at);
        }
        if ready {
            s.ready.get_or_insert(at);
        }
    }

    /// Pods seen Running and pods seen Ready.
    fn counts(&self) -> (usize, usize) {
        self.pods.lock().map_or((0, 0), |p| {
            (
                p.values().filter(|s| s.running.is_some()).count(),
                p.values().filter(|s| s.ready.is_some()).count(),
            )
        })
    }

    /// Seconds from created to Running and to Ready of every pod that got there.
    fn latencies(&self) -> (Vec<f64>, Vec<f64>) {
        let Ok(pods) = self.pods.lock() else {
            return (Vec::new(), Vec::new());
        };
        let since = |c: Instant, t: Option<Instant>| t.map(|t| t.saturating_duration_since(c).as_secs_f64());
        let mut running = Vec::new();
        let mut ready = Vec::new();
        for s in pods.values() {
            let Some(c) = s.created else { continue };
            running.extend(since(c, s.running));
            ready.extend(since(c, s.ready));
        }
        (running, ready)
    }
}

/// Stamps one pod object (from a LIST item or a watch event) into `seen`.
fn observe_pod(seen: &Seen, pod: &Value, at: Instant) {
    let Some(name) = pod["metadata"]["name"].as_str() else {
        return;
    };
    let running = pod["status"]["phase"] == "Running";
    let ready = pod["status"]["conditions"]
        .as_array()
        .is_some_and(|c| c.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"));
    seen.observe(name, at, running, ready);
}

/// `rkube up --node`, stopped by PID on drop (SIGTERM, then SIGKILL).
struct Up {
    child: Option<std::process::Child>,
    log: std::path::PathBuf,
}

impl Up {
    fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(std::process::Child::id)
    }

    /// Whether it is still running.
    fn alive(&mut self) -> bool {
        self.child.as_mut().is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// SIGTERM (the runtime stops every container), then SIGKILL after `grace`.
    fn stop(&mut self, grace: Duration) {
        let Some(mut child) = self.child.take() else { return };
        if let Ok(pid) = i32::try_from(child.id()) {
            // SAFETY: kill(2) on the child this scenario started and has not reaped.
            unsafe { libc::kill(pid, libc::SIGTERM) };
        }
        let deadline = Instant::now() + grace;
        while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

impl Drop for Up {
    fn drop(&mut self) {
        self.stop(Duration::from_secs(30));
    }
}

/// Starts `rkube up --node` in `dir` with the bench's token; returns it and its client once
/// `/readyz` answers 200.
async fn start_up(exe: &Path, dir: &Path) -> anyhow::Result<(Up, Api)> {
    let port = free_port().context("picking a free port")?;
    let tokens = dir.join("tokens.csv");
    std::fs::write(&tokens, format!("{TOKEN},bench-admin,1,\"system:masters\"\n")).context("writing the token file")?;
    let log_path = dir.join("up.log");
    let log = std::fs::File::create(&log_path).context("creating up.log")?;
    let data = dir.join("data");
    let child = std::process::Command::new(exe)
        .args(["up", "--node", &format!("--port={port}")])
        .arg(format!("--data-dir={}", data.display()))
        .arg(format!("--token-auth-file={}", tokens.display()))
        .stdin(Stdio::null())
        .stdout(log.try_clone().context("cloning the log file")?)
        .stderr(log)
        .spawn()
        .with_context(|| format!("running {} up --node", exe.display()))?;
    let mut up = Up { child: Some(child), log: log_path };
    let ca = data.join("pki").join("ca.crt");
    let deadline = Instant::now() + UP_TIMEOUT;
    let api = loop {
        anyhow::ensure!(up.alive(), "rkube up exited:\n{}", crate::procs::tail_of(&up.log, 20));
        anyhow::ensure!(Instant::now() < deadline, "rkube up was not ready in {UP_TIMEOUT:?}");
        if let Ok(pem) = std::fs::read_to_string(&ca) {
            let api = Api::secure(&format!("https://127.0.0.1:{port}"), &pem, TOKEN).map_err(anyhow::Error::msg)?;
            if api.status_of("/readyz").await.ok() == Some(200) {
                break api;
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    Ok((up, api))
}

/// Waits until a node reports `Ready=True`.
async fn wait_for_ready_node(api: &Api, up: &mut Up) -> anyhow::Result<()> {
    let deadline = Instant::now() + UP_TIMEOUT;
    loop {
        anyhow::ensure!(up.alive(), "rkube up exited:\n{}", crate::procs::tail_of(&up.log, 20));
        if let Ok(body) = api.get("/api/v1/nodes").await {
            let nodes: Value = serde_json::from_slice(&body).unwrap_or_default();
            let ready = nodes["items"].as_array().into_iter().flatten().any(|n| {
                n["status"]["conditions"]
                    .as_array()
                    .is_some_and(|c| c.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"))
            });
            if ready {
                return Ok(());
            }
        }
        anyhow::ensure!(Instant::now() < deadline, "no node was Ready within {UP_TIMEOUT:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Follows the bench's pods into `seen`: LIST, then WATCH from its resourceVersion, again
/// whenever the watch ends or fails, until the task is aborted.
async fn watch_pods(http: reqwest::Client, base: String, seen: Arc<Seen>) {
    let selector = format!("{}%3D{}", LABEL.0, LABEL.1);
    let list_url = format!("{base}/api/v1/namespaces/default/pods?labelSelector={selector}");
    loop {
        let listed = async {
            let resp = http.get(&list_url).bearer_auth(TOKEN).send().await.ok()?;
            let at = Instant::now();
            let list: Value = resp.json().await.ok()?;
            for p in list["items"].as_array().into_iter().flatten() {
                observe_pod(&seen, p, at);
            }
            list["metadata"]["resourceVersion"].as_str().map(str::to_string)
        }
        .await;
        let Some(rv) = listed else {
            tokio::time::sleep(Duration::from_millis(500)).await;
            continue;
        };
        let url = format!("{list_url}&watch=true&resourceVersion={rv}&timeoutSeconds=3600");
        let Ok(mut resp) = http.get(&url).bearer_auth(TOKEN).send().await else {
            continue;
        };
        let mut buf: Vec<u8> = Vec::new();
        while let Ok(Some(chunk)) = resp.chunk().await {
            let at = Instant::now();
            buf.extend_from_slice(&chunk);
            while let Some(pos) = buf.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = buf.drain(..=pos).collect();
                let Ok(ev) = serde_json::from_slice::<Value>(&line) else { continue };
                if ev["type"] == "ADDED" || ev["type"] == "MODIFIED" {
                    observe_pod(&seen, &ev["object"], at);
                }
            }
        }
    }
}

/// The pod `name`: `sleep`, the ConfigMap `cm` mounted at `mount_path`, readiness by TCP to
/// `probe_port`. The mount path is under the bench's temporary directory: `rkube runtime`
/// creates mount points on the host's tree (each container mounts in its own mount namespace).
fn pod(name: &str, cm: &str, mount_path: &str, probe_port: u16) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {LABEL.0: LABEL.1}},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "main", "image": "busybox", "command": ["sleep", "36000"],
                "readinessProbe": {"tcpSocket": {"port": probe_port}, "periodSeconds": 1},
                "volumeMounts": [{"name": "config", "mountPath": mount_path, "readOnly": true}],
            }],
            "volumes": [{"name": "config", "configMap": {"name": cm}}],
        },
    })
}

/// A latency row of the startup table, and its measurement.
fn latency_row(report: &mut Report, t: &mut Table, title: &str, metric: &str, samples: &[f64], pods: usize, slo: bool) {
    let sum = Summary::of(samples);
    let cell = |g: fn(&Summary) -> f64| sum.as_ref().map_or("n/a".into(), |s| fmt_secs(g(s)));
    let met = match (&sum, slo) {
        (Some(s), true) if s.p99 <= POD_STARTUP_SLO_SECONDS && samples.len() == pods => "yes",
        (_, true) => "NO",
        (_, false) => "",
    };
    t.row(vec![
        title.into(),
        format!("{} of {pods}", samples.len()),
        cell(|s| s.p50),
        cell(|s| s.p90),
        cell(|s| s.p99),
        cell(|s| s.max),
        if slo { fmt_secs(POD_STARTUP_SLO_SECONDS) } else { String::new() },
        met.into(),
    ]);
    if let Some(s) = sum {
        report.push_summary(metric, "s", &[("pods", pods.to_string())], s);
    }
}

/// Runs the scenario.
pub async fn run(ctx: &Ctx) -> anyhow::Result<Report> {
    let quick = ctx.args.quick;
    let pods = ctx.args.pods.unwrap_or(if quick { QUICK_PODS } else { DEFAULT_PODS }).max(1);
    let idle = Duration::from_secs(ctx.args.step_seconds.unwrap_or(if quick { 5 } else { 30 }).max(1));
    let mut report = ctx.report(
        Scenario::Pods,
        json!({"pods": pods, "idle_seconds": idle.as_secs(), "slo_p99_seconds": POD_STARTUP_SLO_SECONDS,
            "pod": "sleep (host process), one configMap volume, tcpSocket readiness probe every 1 s",
            "start_timeout_seconds": START_TIMEOUT.as_secs()}),
    );
    let work = tempfile::tempdir().context("temp dir")?;
    crate::progress::phase("starting rkube up --node");
    let (mut up, api) = start_up(&ctx.exe, work.path()).await?;
    wait_for_ready_node(&api, &mut up).await?;
    let pid = up.pid().context("rkube up has no pid")?;

    // The readiness probes' target: a listener that accepts and drops every connection.
    let listener = tokio::net::TcpListener::bind(("0.0.0.0", 0)).await.context("binding the probe target")?;
    let probe_port = listener.local_addr().context("the probe target's port")?.port();
    let acceptor = tokio::spawn(async move { while listener.accept().await.is_ok() {} });

    let cm = "bench-pods";
    api.create(
        "/api/v1/namespaces/default/configmaps",
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": cm}, "data": {"bench.conf": "pods=1\n"}}),
    )
    .await
    .context("creating the ConfigMap")?;

    let seen = Arc::new(Seen::default());
    let ca = std::fs::read_to_string(work.path().join("data").join("pki").join("ca.crt")).context("reading the CA")?;
    let http = crate::client::https_builder(&ca).map_err(anyhow::Error::msg)?.build().context("watch client")?;
    let watcher = tokio::spawn(watch_pods(http, api.base().to_string(), seen.clone()));

    crate::progress::phase(&format!("creating {pods} pods"));
    let mount_path = work.path().join("config").display().to_string();
    let began = Instant::now();
    for i in 0..pods {
        let name = format!("pod-{i:04}");
        api.create("/api/v1/namespaces/default/pods", &pod(&name, cm, &mount_path, probe_port))
            .await
            .with_context(|| format!("creating pod {name}"))?;
        seen.observe(&name, Instant::now(), false, false);
    }
    let create_secs = began.elapsed().as_secs_f64();
    crate::progress::phase("waiting for every pod to be Running and Ready");
    let deadline = Instant::now() + START_TIMEOUT;
    let (running, ready) = loop {
        let (running, ready) = seen.counts();
        if (running >= pods && ready >= pods) || Instant::now() >= deadline || !up.alive() {
            break (running, ready);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let all_started = running >= pods && ready >= pods;
    let (to_running, to_ready) = seen.latencies();

    let mut t = Table::new(
        format!("{pods} pods on `rkube up --node`, each with a configMap volume and a readiness probe (times seen by one pod watch, on the bench's clock)"),
        &["stage", "pods", "p50", "p90", "p99", "max", "SLO (p99 ≤)", "met"],
    );
    latency_row(&mut report, &mut t, "created → Running (pod startup)", "pods/startup_latency", &to_running, pods, true);
    latency_row(&mut report, &mut t, "created → Ready", "pods/created_to_ready", &to_ready, pods, false);
    report.tables.push(t);
    report.measure("pods/create_phase", "s", &[("pods", pods.to_string())], &[create_secs]);
    report.note(format!(
        "The {pods} pods were created one at a time in {}; each pod's clock starts at its own create.",
        fmt_secs(create_secs)
    ));
    report.note("Pod images are not pulled: the node's runtime runs the command as a host process, so the SLO's exclusion of image pulls holds by construction.");

    if all_started {
        crate::progress::phase(&format!("measuring rkube up's CPU with {pods} idle pods for {}", fmt_secs(idle.as_secs_f64())));
        let w = ProcWatcher::start(pid);
        tokio::time::sleep(idle).await;
        match w.finish() {
            Some(u) => {
                let mut cpu = Table::new(
                    format!("The `rkube up --node` process (API server, controllers, scheduler, node agent, runtime) with {pods} idle Ready pods"),
                    &["window", "CPU (% of one core)", "CPU seconds", "RSS at the end", "peak RSS"],
                );
                cpu.row(vec![
                    fmt_secs(u.wall_seconds),
                    format!("{:.1} %", u.avg_cores * 100.0),
                    format!("{:.2}", u.cpu_seconds),
                    fmt_bytes(u.final_rss_bytes),
                    fmt_bytes(u.peak_rss_bytes),
                ]);
                report.tables.push(cpu);
                let labels = [("pods", pods.to_string())];
                report.measure("pods/idle_cpu_percent_of_core", "%", &labels, &[u.avg_cores * 100.0]);
                report.measure("pods/idle_rss", "bytes", &labels, &[u.final_rss_bytes as f64]);
            }
            None => report.not_measured("pods/idle_cpu_percent_of_core", "the rkube up process could not be read from /proc"),
        }
    } else {
        report.not_measured("pods/idle_cpu_percent_of_core", "not every pod was Running and Ready");
        report.missed_goals.push(format!(
            "{running} of {pods} pods seen Running and {ready} Ready within {} of the last create{}",
            fmt_secs(START_TIMEOUT.as_secs_f64()),
            if up.alive() { String::new() } else { format!("; rkube up exited:\n{}", crate::procs::tail_of(&up.log, 20)) }
        ));
    }

    watcher.abort();
    acceptor.abort();
    let selector = format!("{}%3D{}", LABEL.0, LABEL.1);
    if let Err(e) = api
        .send_raw("DELETE", &format!("/api/v1/namespaces/default/pods?labelSelector={selector}"), b"{}".to_vec(), "application/json")
        .await
    {
        report.note(format!("deleting the pods failed ({e}); stopping rkube up stops them"));
    }
    crate::progress::phase("stopping rkube up");
    tokio::task::spawn_blocking(move || up.stop(Duration::from_secs(30))).await.context("stopping rkube up")?;
    Ok(report)
}
