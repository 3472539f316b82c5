//! Wiring of the node agent: CRI client, PLEG (evented when the `EventedPLEG` gate is on),
//! pod manager, node heartbeats, healthz/metrics server, kubelet API server.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::registry::Registry;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::cri::CriClient;
use crate::feature_gates::{FeatureGates, EVENTED_PLEG};
use crate::healthz::{self, HealthCheck};
use crate::node_status::{self, NodeInfo};
use crate::pleg::{EventedPleg, GenericPleg, PlegMetrics, PodCache, PLEG_CHANNEL_CAPACITY};
use crate::pod::actions::Backoff;
use crate::pod::manager::{PodManager, PodStore};
use crate::pod::worker::WorkerEnv;
use crate::shutdown::{self, Trigger};

/// Settings of one node agent.
#[derive(Clone, Debug)]
pub struct NodeConfig {
    /// The Node's name.
    pub node_name: String,
    /// The Node's InternalIP (pods' hostIP).
    pub node_ip: String,
    /// CRI endpoint, `unix:///...`.
    pub runtime_endpoint: String,
    /// Feature gates.
    pub feature_gates: FeatureGates,
    /// Root of pod log directories (kubelet: `/var/log/pods`).
    pub pod_logs_dir: PathBuf,
    /// kubelet's `--root-dir` (`/var/lib/kubelet`): pods' volumes live in `pods/<uid>/volumes/`.
    pub root_dir: PathBuf,
    /// `/healthz` and `/metrics` address (kubelet healthz: 127.0.0.1:10248); port 0 = any.
    pub healthz_addr: SocketAddr,
    /// CrashLoopBackOff parameters.
    pub backoff: Backoff,
    /// Periodic pod resync (kubelet `--sync-frequency`).
    pub resync: Duration,
    /// The kubelet API server (`--address`, `--port`, TLS, authentication, authorization).
    pub kubelet: crate::kubelet_api::KubeletServerConfig,
    /// Container log rotation (`--container-log-max-size`, `--container-log-max-files`, ...).
    pub log_rotation: crate::container_log_manager::LogRotatePolicy,
}

impl NodeConfig {
    /// Defaults for a node name and CRI endpoint.
    pub fn new(node_name: impl Into<String>, runtime_endpoint: impl Into<String>) -> Self {
        Self {
            node_name: node_name.into(),
            node_ip: rkube_runtime::runtime::detect_host_ip(),
            runtime_endpoint: runtime_endpoint.into(),
            feature_gates: FeatureGates::default(),
            pod_logs_dir: PathBuf::from("/var/log/pods"),
            root_dir: PathBuf::from("/var/lib/kubelet"),
            healthz_addr: SocketAddr::from(([127, 0, 0, 1], 10248)),
            backoff: Backoff::default(),
            resync: Duration::from_secs(60),
            kubelet: crate::kubelet_api::KubeletServerConfig::default(),
            log_rotation: crate::container_log_manager::LogRotatePolicy::default(),
        }
    }
}

/// A running agent.
pub struct AgentHandle {
    trigger: Trigger,
    tasks: Vec<JoinHandle<()>>,
    /// Where `/healthz` and `/metrics` are served.
    pub healthz_addr: SocketAddr,
    /// Where the kubelet API is served (HTTPS).
    pub kubelet_addr: SocketAddr,
    /// PLEG metrics.
    pub metrics: PlegMetrics,
    /// The pod status cache.
    pub cache: Arc<PodCache>,
    /// The evented PLEG, when the gate is on.
    pub evented: Option<Arc<EventedPleg>>,
    /// The generic PLEG (alone, or under the evented one).
    pub generic: Arc<GenericPleg>,
    /// The kubelet API's serving certificate (empty until issued with
    /// `--rotate-server-certificates`).
    pub serving_cert: Arc<crate::kubelet_api::tls::CertSlot>,
}

impl std::fmt::Debug for AgentHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentHandle")
            .field("healthz_addr", &self.healthz_addr)
            .finish_non_exhaustive()
    }
}

impl AgentHandle {
    /// Stops every task (pods keep running in the runtime).
    pub async fn shutdown(self) {
        self.trigger.fire();
        for t in self.tasks {
            let _ = tokio::time::timeout(Duration::from_secs(10), t).await;
        }
    }
}

/// Waits (up to `wait`) for the runtime to answer `Version`; returns `<name>`, `<version>`.
async fn runtime_version(cri: &CriClient, wait: Duration) -> anyhow::Result<(String, String)> {
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        match cri.version().await {
            Ok(v) => return Ok((v.runtime_name, v.runtime_version)),
            Err(err) if tokio::time::Instant::now() >= deadline => {
                return Err(anyhow::anyhow!("container runtime not reachable: {err}"))
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// Starts the agent against the API server behind `client`.
pub async fn start(config: NodeConfig, client: kube::Client) -> anyhow::Result<AgentHandle> {
    config.log_rotation.validate().map_err(anyhow::Error::msg)?;
    let cri = CriClient::connect_lazy(&config.runtime_endpoint)?;
    let (runtime_name, runtime_version) = runtime_version(&cri, Duration::from_secs(30)).await?;
    let (trigger, sd) = shutdown::channel();
    let cache = PodCache::new();
    let metrics = PlegMetrics::new();
    let mut registry = Registry::default();
    metrics.register(&mut registry);
    let (tx, rx) = mpsc::channel(PLEG_CHANNEL_CAPACITY);
    let api: Arc<dyn crate::cri::RuntimeApi> = Arc::new(cri.clone());
    let generic = GenericPleg::new(
        Arc::clone(&api),
        Arc::clone(&cache),
        tx.clone(),
        metrics.clone(),
    );
    let mut tasks = vec![tokio::spawn(crate::container_log_manager::run(
        cri.clone(),
        config.log_rotation.clone(),
        sd.clone(),
    ))];
    let (evented, health): (Option<Arc<EventedPleg>>, HealthCheck) =
        if config.feature_gates.enabled(EVENTED_PLEG) {
            let evented = EventedPleg::new(
                api,
                Arc::clone(&cache),
                tx,
                metrics.clone(),
                Arc::clone(&generic),
            );
            tasks.push(tokio::spawn(Arc::clone(&evented).run(sd.clone())));
            let e = Arc::clone(&evented);
            (Some(evented), Arc::new(move || e.healthy()))
        } else {
            tasks.push(tokio::spawn(Arc::clone(&generic).run(sd.clone())));
            let g = Arc::clone(&generic);
            (None, Arc::new(move || g.healthy()))
        };
    let registry = Arc::new(registry);
    let (healthz_addr, healthz_task) = healthz::serve(
        config.healthz_addr,
        Arc::clone(&health),
        Arc::clone(&registry),
        sd.clone(),
    )
    .await?;
    let pods = PodStore::default();
    tasks.push(healthz_task);
    let deps = crate::kubelet_api::ServeDeps {
        cri: cri.clone(),
        health: Arc::clone(&health),
        client: client.clone(),
        node_name: config.node_name.clone(),
        cert_names: vec![
            config.node_name.clone(),
            config.node_ip.clone(),
            "localhost".into(),
            "127.0.0.1".into(),
        ],
        cert_dir: config.root_dir.join("pki"),
        pods: pods.clone(),
        registry,
    };
    let (kubelet_addr, kubelet_task, serving_cert) =
        crate::kubelet_api::serve(&config.kubelet, deps, sd.clone()).await?;
    tasks.push(kubelet_task);
    let info = NodeInfo {
        name: config.node_name.clone(),
        ip: config.node_ip.clone(),
        container_runtime_version: format!("{runtime_name}://{runtime_version}"),
        kubelet_port: kubelet_addr.port(),
    };
    let node = node_status::register(&client, &info).await?;
    node_status::renew_lease(&client, &node).await?;
    tasks.push(tokio::spawn(node_status::heartbeat(
        client.clone(),
        info,
        Some(node),
        health,
        sd.clone(),
    )));
    let env = Arc::new(WorkerEnv {
        cri,
        pleg: Arc::clone(&generic),
        cache: Arc::clone(&cache),
        metrics: metrics.clone(),
        events: crate::events::PodEvents::new(client.clone(), config.node_name.clone()),
        allocatable: node_status::capacity()
            .into_iter()
            .filter_map(|(k, q)| Some((k, rkube_scheduler::resources::parse_milli(&q.0)?)))
            .collect(),
        client,
        logs_root: config.pod_logs_dir.clone(),
        root_dir: config.root_dir.clone(),
        backoff: config.backoff,
        host_ip: config.node_ip.clone(),
        node_name: config.node_name.clone(),
        runtime_name,
        resync: config.resync,
    });
    tasks.push(tokio::spawn(PodManager::new(env, pods).run(rx, sd)));
    Ok(AgentHandle {
        trigger,
        tasks,
        healthz_addr,
        kubelet_addr,
        metrics,
        cache,
        evented,
        generic,
        serving_cert,
    })
}
