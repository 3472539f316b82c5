//! Liveness, readiness and startup probes (upstream `pkg/kubelet/prober`:
//! `prober.go` runs one probe, `worker.go` keeps its results).
//!
//! A probe runs every `periodSeconds` (10) once `initialDelaySeconds` have
//! passed since its container started, each try bounded by
//! `timeoutSeconds` (1). Its result turns after `successThreshold` (1)
//! consecutive successes or `failureThreshold` (3) consecutive failures.
//! Until the startup probe succeeds the others do not run and the container
//! is not `started`; a container is ready when it runs, has started and its
//! readiness probe (if any) succeeds; a failed liveness or startup probe
//! kills the container (the restart policy then decides). Kinds: `exec`
//! (CRI `ExecSync`), `httpGet` (2xx and 3xx succeed; `User-Agent:
//! kube-probe/1.33`, HTTPS without verification, as kubelet), `tcpSocket`
//! (a connection), `grpc` (`grpc.health.v1.Health/Check` answering `SERVING`).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Container, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::cri::CriClient;

/// Runs a command in a container for `exec` probes (CRI `ExecSync`).
#[async_trait::async_trait]
pub trait ExecSync: Send + Sync {
    /// Runs `cmd` in container `id` for at most `timeout_s` seconds; returns
    /// (exit code, stdout and stderr). Errors: the runtime's, as text.
    async fn exec_sync(&self, id: &str, cmd: Vec<String>, timeout_s: i64) -> Result<(i32, Vec<u8>), String>;
}

#[async_trait::async_trait]
impl ExecSync for CriClient {
    async fn exec_sync(&self, id: &str, cmd: Vec<String>, timeout_s: i64) -> Result<(i32, Vec<u8>), String> {
        let answer = CriClient::exec_sync(self, id, cmd, timeout_s).await.map_err(|e| e.to_string())?;
        let mut out = answer.stdout;
        out.extend_from_slice(&answer.stderr);
        Ok((answer.exit_code, out))
    }
}

/// Which probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// `livenessProbe`.
    Liveness,
    /// `readinessProbe`.
    Readiness,
    /// `startupProbe`.
    Startup,
}

impl Kind {
    /// `Liveness`, `Readiness`, `Startup` as kubelet's event messages start.
    pub fn title(self) -> &'static str {
        match self {
            Kind::Liveness => "Liveness",
            Kind::Readiness => "Readiness",
            Kind::Startup => "Startup",
        }
    }

    fn of(self, c: &Container) -> Option<&Probe> {
        match self {
            Kind::Liveness => c.liveness_probe.as_ref(),
            Kind::Readiness => c.readiness_probe.as_ref(),
            Kind::Startup => c.startup_probe.as_ref(),
        }
    }
}

/// The outcome of one try: `Ok` or the failure's output.
pub type Outcome = Result<(), String>;

/// What one probe of one container instance has seen.
#[derive(Debug, Clone)]
struct Tracked {
    container_id: String,
    result: Option<bool>,
    successes: i32,
    failures: i32,
    last_run: Option<Instant>,
}

/// What a round of probing asks of the worker.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Round {
    /// Probe failures to report as `Unhealthy` events: (container, message).
    pub unhealthy: Vec<(String, String)>,
    /// Containers to kill: (name, id, reason message for the `Killing` event).
    pub kill: Vec<(String, String, String)>,
}

/// The probe results of one pod's containers.
#[derive(Debug, Default)]
pub struct Prober {
    tracked: HashMap<(String, Kind), Tracked>,
}

/// A running container as the prober needs it.
#[derive(Debug, Clone)]
pub struct Running<'a> {
    /// Its spec.
    pub spec: &'a Container,
    /// The runtime's id.
    pub id: String,
    /// When it started.
    pub started_at: Instant,
}

impl Prober {
    /// Whether `name` (running) counts as started: no startup probe, or it succeeded.
    pub fn started(&self, c: &Container) -> bool {
        c.startup_probe.is_none() || self.result(&c.name, Kind::Startup) == Some(true)
    }

    /// Whether `name` (running) is ready: started, and no readiness probe
    /// or it succeeds.
    pub fn ready(&self, c: &Container) -> bool {
        self.started(c) && (c.readiness_probe.is_none() || self.result(&c.name, Kind::Readiness) == Some(true))
    }

    fn result(&self, name: &str, kind: Kind) -> Option<bool> {
        self.tracked.get(&(name.to_string(), kind)).and_then(|t| t.result)
    }

    /// Runs the probes that are due on `running` containers and updates the
    /// results; the others' state is dropped. Returns what to report and kill.
    pub async fn round(&mut self, running: &[Running<'_>], cri: &dyn ExecSync, pod_ip: &str) -> Round {
        self.tracked.retain(|(name, _), t| running.iter().any(|r| r.spec.name == *name && r.id == t.container_id));
        let mut due = Vec::new();
        for r in running {
            let startup_pending = r.spec.startup_probe.is_some() && self.result(&r.spec.name, Kind::Startup) != Some(true);
            for kind in [Kind::Startup, Kind::Liveness, Kind::Readiness] {
                let Some(probe) = kind.of(r.spec) else { continue };
                if kind == Kind::Startup && !startup_pending || kind != Kind::Startup && startup_pending {
                    continue;
                }
                let t = self.tracked.entry((r.spec.name.clone(), kind)).or_insert_with(|| Tracked {
                    container_id: r.id.clone(),
                    result: None,
                    successes: 0,
                    failures: 0,
                    last_run: None,
                });
                if is_due(probe, r.started_at, t.last_run) {
                    due.push((r, kind, probe));
                }
            }
        }
        let outcomes = futures::future::join_all(due.iter().map(|(r, _, probe)| run(probe, r.spec, &r.id, cri, pod_ip))).await;
        let mut round = Round::default();
        for ((r, kind, probe), outcome) in due.into_iter().zip(outcomes) {
            let Some(t) = self.tracked.get_mut(&(r.spec.name.clone(), kind)) else { continue };
            t.last_run = Some(Instant::now());
            match &outcome {
                Ok(()) => {
                    t.successes += 1;
                    t.failures = 0;
                    if t.successes >= probe.success_threshold.unwrap_or(1).max(1) {
                        t.result = Some(true);
                    }
                }
                Err(output) => {
                    t.failures += 1;
                    t.successes = 0;
                    if t.failures == 1 {
                        round.unhealthy.push((r.spec.name.clone(), format!("{} probe failed: {output}", kind.title())));
                    }
                    if t.failures >= probe.failure_threshold.unwrap_or(3).max(1) {
                        t.result = Some(false);
                        if kind != Kind::Readiness {
                            let why = format!("Container {} failed {} probe, will be restarted", r.spec.name, kind.title().to_lowercase());
                            round.kill.push((r.spec.name.clone(), r.id.clone(), why));
                        }
                    }
                }
            }
        }
        round
    }

    /// When the next probe of `running` is due (for the worker's wake-up).
    pub fn next_due(&self, running: &[Running<'_>]) -> Option<Instant> {
        running
            .iter()
            .flat_map(|r| {
                [Kind::Startup, Kind::Liveness, Kind::Readiness].into_iter().filter_map(move |k| Some((r, k, k.of(r.spec)?)))
            })
            .map(|(r, k, p)| {
                let last = self.tracked.get(&(r.spec.name.clone(), k)).and_then(|t| t.last_run);
                next_time(p, r.started_at, last)
            })
            .min()
    }
}

fn secs(v: Option<i32>, default: i32) -> Duration {
    Duration::from_secs(u64::try_from(v.unwrap_or(default).max(0)).unwrap_or(0))
}

fn next_time(p: &Probe, started_at: Instant, last_run: Option<Instant>) -> Instant {
    let first = started_at + secs(p.initial_delay_seconds, 0);
    match last_run {
        None => first,
        Some(t) => (t + secs(p.period_seconds, 10).max(Duration::from_secs(1))).max(first),
    }
}

fn is_due(p: &Probe, started_at: Instant, last_run: Option<Instant>) -> bool {
    Instant::now() >= next_time(p, started_at, last_run)
}

/// The port number `port` names in `c` (a number, or a container port's name).
fn port_of(port: &IntOrString, c: &Container) -> Result<u16, String> {
    match port {
        IntOrString::Int(n) => u16::try_from(*n).map_err(|_| format!("invalid port number: {n}")),
        IntOrString::String(name) => c
            .ports
            .iter()
            .flatten()
            .find(|p| p.name.as_deref() == Some(name.as_str()))
            .and_then(|p| u16::try_from(p.container_port).ok())
            .ok_or_else(|| format!("couldn't find port: {name} in {}", c.name)),
    }
}

/// Runs one try of `probe` against container `c` (id `id`, reached at `pod_ip`).
pub async fn run(probe: &Probe, c: &Container, id: &str, cri: &dyn ExecSync, pod_ip: &str) -> Outcome {
    let timeout = secs(probe.timeout_seconds, 1).max(Duration::from_secs(1));
    if let Some(e) = &probe.exec {
        let cmd = e.command.clone().unwrap_or_default();
        let (code, output) = cri.exec_sync(id, cmd, i64::try_from(timeout.as_secs()).unwrap_or(1)).await?;
        if code == 0 {
            return Ok(());
        }
        let out = String::from_utf8_lossy(&output).into_owned();
        return Err(if out.trim().is_empty() { format!("command exited with code {code}") } else { out });
    }
    if let Some(h) = &probe.http_get {
        let port = port_of(&h.port, c)?;
        let host = h.host.clone().filter(|h| !h.is_empty()).unwrap_or_else(|| pod_ip.to_string());
        let scheme = h.scheme.as_deref().unwrap_or("HTTP").to_ascii_lowercase();
        let path = h.path.clone().unwrap_or_else(|| "/".into());
        let path = if path.starts_with('/') { path } else { format!("/{path}") };
        let url = format!("{scheme}://{host}:{port}{path}");
        return http_probe(&url, h.http_headers.as_deref().unwrap_or_default(), timeout).await;
    }
    if let Some(t) = &probe.tcp_socket {
        let port = port_of(&t.port, c)?;
        let host = t.host.clone().filter(|h| !h.is_empty()).unwrap_or_else(|| pod_ip.to_string());
        return match tokio::time::timeout(timeout, tokio::net::TcpStream::connect((host.as_str(), port))).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(format!("dial tcp {host}:{port}: connect: {e}")),
            Err(_) => Err(format!("dial tcp {host}:{port}: i/o timeout")),
        };
    }
    if let Some(g) = &probe.grpc {
        return grpc_probe(pod_ip, g.port, g.service.clone().unwrap_or_default(), timeout).await;
    }
    Err("probe has no handler".into())
}

/// The one HTTP client of every `httpGet` probe and hook (kubelet keeps one
/// too): no certificate checks, `kube-probe/1.33`; the timeout is per request.
fn http_client() -> Result<reqwest::Client, String> {
    static CLIENT: std::sync::OnceLock<reqwest::Client> = std::sync::OnceLock::new();
    if let Some(c) = CLIENT.get() {
        return Ok(c.clone());
    }
    // reqwest's rustls needs a process-wide provider (a no-op when one is set).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let built = reqwest::Client::builder()
        .danger_accept_invalid_certs(true)
        .user_agent("kube-probe/1.33")
        // No keep-alive, as kubelet's prober: a probe leaves no connection open in the pod.
        .pool_max_idle_per_host(0)
        .build()
        .map_err(|e| e.to_string())?;
    Ok(CLIENT.get_or_init(|| built).clone())
}

async fn http_probe(url: &str, headers: &[k8s_openapi::api::core::v1::HTTPHeader], timeout: Duration) -> Outcome {
    let mut req = http_client()?.get(url).timeout(timeout);
    for h in headers {
        req = req.header(h.name.as_str(), h.value.as_str());
    }
    match req.send().await {
        Ok(resp) if (200..400).contains(&resp.status().as_u16()) => Ok(()),
        Ok(resp) => Err(format!("HTTP probe failed with statuscode: {}", resp.status().as_u16())),
        Err(e) if e.is_timeout() => Err(format!("Get {url:?}: context deadline exceeded (Client.Timeout exceeded while awaiting headers)")),
        Err(e) => Err(format!("Get {url:?}: {e}")),
    }
}

async fn grpc_probe(host: &str, port: i32, service: String, timeout: Duration) -> Outcome {
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::health_client::HealthClient;
    use tonic_health::pb::HealthCheckRequest;
    let addr = format!("http://{host}:{port}");
    let attempt = async {
        let channel = tonic::transport::Endpoint::from_shared(addr.clone()).map_err(|e| e.to_string())?.connect().await.map_err(|e| {
            format!("failed to connect service {host}:{port} within {}s: {e}", timeout.as_secs())
        })?;
        let answer = HealthClient::new(channel).check(HealthCheckRequest { service }).await.map_err(|s| {
            format!("health rpc probe failed: {}", s.message())
        })?;
        match ServingStatus::try_from(answer.into_inner().status) {
            Ok(ServingStatus::Serving) => Ok(()),
            Ok(other) => Err(format!("service unhealthy (responded with {:?})", other.as_str_name())),
            Err(_) => Err("service unhealthy (responded with an unknown status)".to_string()),
        }
    };
    match tokio::time::timeout(timeout, attempt).await {
        Ok(r) => r,
        Err(_) => Err(format!("timeout: health rpc did not complete within {}s", timeout.as_secs())),
    }
}

#[cfg(test)]
mod tests;
