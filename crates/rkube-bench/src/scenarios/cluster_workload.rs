//! The Deployments workload of `rkube bench cluster` (`--workload deployments`, the default):
//! the bench creates Deployments; `rkube controller-manager` (its deployment and replicaset
//! controllers) expands them into pods, `rkube scheduler` binds the pods to the hollow nodes,
//! and the hollow kubelets report them Running. Both components run as child processes of the
//! `rkube` binary under test, against the same API server, with a kubeconfig the bench writes.
//!
//! [`startup_watcher`] follows every pod through one cluster-wide LIST+WATCH and stamps, on the
//! bench's clock, the first time it sees each pod (created), bound (`spec.nodeName` set:
//! scheduled) and `status.phase=Running`; pod startup latency is created → Running, as
//! upstream's pod startup SLI measures it for stateless pods (p99 ≤ 5 s). Scheduler throughput
//! is bound pods per second between the first and the last binding seen.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::json;

use super::cluster_sim::{CallKey, Scope, Sim, Verb};
use crate::stats::{micros, Histogram};

/// Tries of one Deployment create that the server answers 429.
const CREATE_ATTEMPTS: usize = 10;

/// Replicas of each Deployment (the last one takes the remainder).
pub const REPLICAS_PER_DEPLOYMENT: usize = 100;

/// When the bench saw a pod reach each stage.
#[derive(Debug, Default, Clone, Copy)]
struct Stages {
    created: Option<Instant>,
    scheduled: Option<Instant>,
    running: Option<Instant>,
}

/// Every pod's stages, by `namespace/name`.
#[derive(Debug, Default)]
pub struct Startup {
    pods: Mutex<HashMap<String, Stages>>,
}

/// Which pods a figure is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodKind {
    /// The saturation burst: Deployments of [`REPLICAS_PER_DEPLOYMENT`] created at once.
    Saturation,
    /// One-replica Deployments named [`LATENCY_PREFIX`]…, created at a steady rate afterwards.
    Latency,
}

impl PodKind {
    /// Whether the pod `namespace/name` is of this kind.
    fn has(self, key: &str) -> bool {
        let name = key.rsplit('/').next().unwrap_or(key);
        name.starts_with(LATENCY_PREFIX) == (self == PodKind::Latency)
    }
}

/// What [`Startup::summary`] computes.
#[derive(Debug, Default)]
pub struct StartupFigures {
    /// Created → bound, µs.
    pub create_to_schedule: Histogram,
    /// Bound → Running reported, µs.
    pub schedule_to_running: Histogram,
    /// Created → Running reported (pod startup latency), µs.
    pub startup: Histogram,
    /// Pods seen bound.
    pub scheduled: u64,
    /// Pods seen Running.
    pub running: u64,
    /// Bindings per second between the first and the last one seen.
    pub scheduler_pods_per_second: Option<f64>,
}

impl Startup {
    fn observe(&self, key: String, bound: bool, running: bool) {
        let now = Instant::now();
        let Ok(mut pods) = self.pods.lock() else {
            return;
        };
        let s = pods.entry(key).or_default();
        s.created.get_or_insert(now);
        if bound {
            s.scheduled.get_or_insert(now);
        }
        if running {
            s.running.get_or_insert(now);
        }
    }

    /// Pods of one kind (latency pods or the saturation burst) seen Running so far.
    pub fn running(&self, kind: PodKind) -> u64 {
        self.pods
            .lock()
            .map(|p| p.iter().filter(|(k, s)| kind.has(k) && s.running.is_some()).count() as u64)
            .unwrap_or(0)
    }

    /// The latencies and the scheduler's throughput of one kind of pods.
    pub fn summary(&self, kind: PodKind) -> StartupFigures {
        let mut f = StartupFigures::default();
        let Ok(pods) = self.pods.lock() else { return f };
        let (mut first, mut last): (Option<Instant>, Option<Instant>) = (None, None);
        for s in pods.iter().filter(|(k, _)| kind.has(k)).map(|(_, s)| s) {
            let Some(created) = s.created else { continue };
            if let Some(b) = s.scheduled {
                f.scheduled += 1;
                f.create_to_schedule.record(micros(b - created));
                first = Some(first.map_or(b, |x| x.min(b)));
                last = Some(last.map_or(b, |x| x.max(b)));
                if let Some(r) = s.running {
                    f.schedule_to_running
                        .record(micros(r.saturating_duration_since(b)));
                }
            }
            if let Some(r) = s.running {
                f.running += 1;
                f.startup.record(micros(r - created));
            }
        }
        if let (Some(a), Some(b)) = (first, last) {
            let secs = (b - a).as_secs_f64();
            if secs > 0.0 {
                f.scheduler_pods_per_second = Some(f.scheduled.saturating_sub(1) as f64 / secs);
            }
        }
        f
    }
}

/// Follows every pod (cluster-wide LIST+WATCH, re-listed when the watch ends) into `startup`.
pub async fn startup_watcher(sim: Arc<Sim>, startup: Arc<Startup>) {
    const LIST: CallKey = (Verb::List, Scope::Cluster, "pods");
    loop {
        let rv = match sim
            .rec
            .call(LIST, sim.api.list("/api/v1/pods?resourceVersion=0"))
            .await
        {
            Ok(page) => page.resource_version,
            Err(_) => {
                if sim.stopping.load(Ordering::Relaxed) {
                    return;
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        let path = format!("/api/v1/pods?watch=true&resourceVersion={rv}&allowWatchBookmarks=true&timeoutSeconds=3600");
        if let Ok(mut stream) = sim.watch_api.watch(&path).await {
            while let Ok(Some(ev)) = stream.next_event().await {
                if ev.kind != "ADDED" && ev.kind != "MODIFIED" {
                    continue;
                }
                let o = ev.object;
                let bound = o.spec.as_ref().is_some_and(|s| !s.node_name.is_empty());
                let running = o.status.as_ref().is_some_and(|s| s.phase == "Running");
                startup.observe(
                    format!("{}/{}", o.metadata.namespace, o.metadata.name),
                    bound,
                    running,
                );
            }
        }
        if sim.stopping.load(Ordering::Relaxed) {
            return;
        }
        sim.watch_terminations.fetch_add(1, Ordering::Relaxed);
    }
}

/// A Deployment of `replicas` hollow pods (the pod shape of [`crate::objects::pending_pod`],
/// unbound: the scheduler places them).
pub fn deployment(ns: &str, name: &str, replicas: usize) -> serde_json::Value {
    let mut template = crate::objects::pending_pod(ns, name, "", 0);
    if let Some(spec) = template["spec"].as_object_mut() {
        spec.remove("nodeName");
    }
    let meta = json!({"labels": {"app": name, "tier": "backend"}, "annotations": template["metadata"]["annotations"].clone()});
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": meta, "spec": template["spec"].clone()},
        },
    })
}

/// Creates Deployments totalling `total` replicas ([`REPLICAS_PER_DEPLOYMENT`] each) across the
/// simulation's namespaces, as fast as the server takes them (the saturation burst); returns
/// how many Deployments and replicas were created. Failures are counted by the recorder, and
/// the replicas of a create that failed for good are not expected.
pub async fn create_deployments(sim: &Sim, total: usize) -> (usize, usize) {
    let (mut deployments, mut created, mut asked) = (0, 0, 0);
    for d in 0.. {
        if asked >= total {
            break;
        }
        let n = REPLICAS_PER_DEPLOYMENT.min(total - asked);
        asked += n;
        if create_one(sim, &sim.namespace(d), &format!("dep-{d:05}"), n).await {
            deployments += 1;
            created += n;
        }
    }
    (deployments, created)
}

/// Name prefix of the latency pods' Deployments (and so of their pods).
pub const LATENCY_PREFIX: &str = "lat-";

/// Creates `count` Deployments of one replica each, named [`LATENCY_PREFIX`]`NNNNN`, at `rate`
/// per second (uniformly spaced), as ClusterLoader2's density test creates its latency pods
/// on a saturated cluster; returns how many were created. At `rate` ≤ 10/s the churn (pod and
/// Deployment creations) stays within upstream's steady state (≤ 20 per second,
/// `sig-scalability/slos/slos.md`), the condition under which the pod startup SLO applies.
pub async fn create_latency_deployments(sim: &Sim, count: usize, rate: f64) -> usize {
    let start = Instant::now();
    let mut created = 0;
    for i in 0..count {
        let at = start + Duration::from_secs_f64(i as f64 / rate.max(0.1));
        tokio::time::sleep_until(at.into()).await;
        if create_one(sim, &sim.namespace(i), &format!("{LATENCY_PREFIX}{i:05}"), 1).await {
            created += 1;
        }
    }
    created
}

/// Creates one Deployment of `replicas`; a create answered 429 (the server's in-flight limit)
/// is tried again after a second, as client-go does, up to [`CREATE_ATTEMPTS`] times.
async fn create_one(sim: &Sim, ns: &str, name: &str, replicas: usize) -> bool {
    let path = format!("/apis/apps/v1/namespaces/{ns}/deployments");
    let body = deployment(ns, name, replicas);
    for attempt in 1..=CREATE_ATTEMPTS {
        let call = sim.api.create(&path, &body);
        match sim
            .rec
            .call((Verb::Create, Scope::Resource, "deployments"), call)
            .await
        {
            Ok(_) => {
                sim.pods_created.fetch_add(replicas as u64, Ordering::Relaxed);
                return true;
            }
            Err(e) if e.code() == Some(429) && attempt < CREATE_ATTEMPTS => {
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            Err(_) => return false,
        }
    }
    false
}

/// Bearer token of `rkube controller-manager` in the bench (user `system:kube-controller-manager`).
pub const CONTROLLER_MANAGER_TOKEN: &str = "bench-kube-controller-manager";
/// Bearer token of `rkube scheduler` in the bench (user `system:kube-scheduler`).
pub const SCHEDULER_TOKEN: &str = "bench-kube-scheduler";

/// Bearer token of hollow node `node`'s kubelet (user `system:node:<node>`, group `system:nodes`).
pub fn node_token(node: &str) -> String {
    format!("bench-node-{node}")
}

/// A `--token-auth-file` (`token,user,uid,"groups"` lines) giving the hollow kubelets of
/// `nodes` nodes, the controller manager and the scheduler the identities upstream's
/// components have, so API Priority and Fairness classifies their requests as a real
/// cluster's (`system-node-high`, `system-nodes`, `kube-controller-manager`, `kube-scheduler`
/// FlowSchemas). The bench's other clients stay anonymous (`global-default`).
pub fn token_file(nodes: usize) -> String {
    let mut s = format!(
        "{CONTROLLER_MANAGER_TOKEN},system:kube-controller-manager,uid-kcm\n{SCHEDULER_TOKEN},system:kube-scheduler,uid-scheduler\n"
    );
    for i in 0..nodes {
        let node = Sim::node_name(i);
        s += &format!("{},system:node:{node},uid-{node},\"system:nodes\"\n", node_token(&node));
    }
    s
}

/// `rkube controller-manager` (deployment and replicaset controllers) and `rkube scheduler`
/// as child processes of `exe` against `base_url`; both are stopped (SIGTERM, then SIGKILL, by
/// PID) when dropped.
pub struct Components {
    children: Vec<std::process::Child>,
    /// Their logs.
    pub logs: Vec<PathBuf>,
}

impl Components {
    /// Writes a kubeconfig for `base_url` in `dir` and starts both components.
    ///
    /// # Errors
    /// The kubeconfig cannot be written or a component cannot be started.
    pub fn start(exe: &Path, base_url: &str, dir: &Path) -> anyhow::Result<Components> {
        let mut out = Components {
            children: Vec::new(),
            logs: Vec::new(),
        };
        let runs: [(&str, &str, Vec<&str>); 2] = [
            (
                "controller-manager",
                CONTROLLER_MANAGER_TOKEN,
                vec!["--controllers=deployment-controller,replicaset-controller"],
            ),
            ("scheduler", SCHEDULER_TOKEN, vec![]),
        ];
        for (component, token, extra) in runs {
            // Each component authenticates as its upstream user (see [`token_file`]).
            let kubeconfig = dir.join(format!("{component}.kubeconfig"));
            let config = json!({
                "apiVersion": "v1", "kind": "Config", "current-context": "bench",
                "clusters": [{"name": "bench", "cluster": {"server": base_url}}],
                "users": [{"name": "bench", "user": {"token": token}}],
                "contexts": [{"name": "bench", "context": {"cluster": "bench", "user": "bench"}}],
            });
            std::fs::write(&kubeconfig, config.to_string())
                .with_context(|| format!("writing the {component} kubeconfig"))?;
            let kc = format!("--kubeconfig={}", kubeconfig.display());
            let log_path = dir.join(format!("{component}.log"));
            let log = std::fs::File::create(&log_path)
                .with_context(|| format!("creating {}", log_path.display()))?;
            let child = std::process::Command::new(exe)
                .arg(component)
                .arg(&kc)
                .args(["--leader-elect=false", "--secure-port=0"])
                .args(extra)
                .stdin(Stdio::null())
                .stdout(log.try_clone().context("cloning the log file")?)
                .stderr(log)
                .spawn()
                .with_context(|| format!("running {} {component}", exe.display()))?;
            out.children.push(child);
            out.logs.push(log_path);
        }
        Ok(out)
    }

    /// Whether every component is still running.
    pub fn alive(&mut self) -> bool {
        self.children
            .iter_mut()
            .all(|c| matches!(c.try_wait(), Ok(None)))
    }
}

impl Drop for Components {
    fn drop(&mut self) {
        for c in &mut self.children {
            if let Ok(pid) = i32::try_from(c.id()) {
                // SAFETY: kill(2) on a child this process started and has not reaped.
                unsafe { libc::kill(pid, libc::SIGTERM) };
            }
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        for c in &mut self.children {
            while matches!(c.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
