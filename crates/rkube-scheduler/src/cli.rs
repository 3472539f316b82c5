//! `rkube scheduler`: kube-scheduler's flags, and [`start`] for running the
//! scheduler in another process (`rkube up`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use prometheus_client::registry::Registry;
use rkube_component::leader::{ElectionStatus, LeaderElectionArgs, LeaderElectionConfig, LeaderElector, LeaderError};
use rkube_component::serving::{self, HealthCheck, Serving, ServingArgs, TlsConfig};
use tokio::sync::watch;

use crate::metrics::SchedulerMetrics;

/// The Lease name of kube-scheduler (`--leader-elect-resource-name` default).
pub const COMPONENT: &str = "kube-scheduler";

/// Flags of `rkube scheduler` (kube-scheduler's names and defaults).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct SchedulerArgs {
    /// Path to kubeconfig file with authorization and master location information
    /// (default: in-cluster config, then `$KUBECONFIG`, then `~/.kube/config`).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Leader election.
    #[command(flatten)]
    pub leader_election: LeaderElectionArgs,
    /// Secure serving of /healthz, /livez, /readyz, /metrics.
    #[command(flatten)]
    pub serving: ServingArgs,
}

/// How [`start`] runs the scheduler.
#[derive(Debug, Clone, Default)]
pub struct StartOptions {
    /// Campaign for this Lease first (None: schedule at once).
    pub leader_election: Option<LeaderElectionConfig>,
    /// Serve health and metrics here (port 0: any free port) with this certificate.
    pub serving: Option<(SocketAddr, TlsConfig)>,
}

/// A running scheduler.
#[derive(Debug)]
pub struct SchedulerHandle {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<Result<(), LeaderError>>,
    serving: Option<Serving>,
    election: Option<Arc<ElectionStatus>>,
}

impl SchedulerHandle {
    /// Where `/healthz` and `/metrics` are served.
    pub fn health_addr(&self) -> Option<SocketAddr> {
        self.serving.as_ref().map(|s| s.addr)
    }

    /// Whether this instance leads (always true without leader election once started).
    pub fn is_leader(&self) -> bool {
        self.election.as_ref().is_none_or(|e| e.is_leader())
    }

    /// Waits until the scheduler ends by itself (a lost lease, an error).
    pub async fn ended(&mut self) -> Result<(), LeaderError> {
        match (&mut self.task).await {
            Ok(r) => r,
            Err(e) => Err(LeaderError::Work(anyhow::anyhow!("scheduler task failed: {e}"))),
        }
    }

    /// Stops scheduling (releasing the Lease) and serving.
    pub async fn shutdown(self) -> Result<(), LeaderError> {
        let _ = self.stop.send(true);
        let result = match self.task.await {
            Ok(r) => r,
            Err(e) => Err(LeaderError::Work(anyhow::anyhow!("scheduler task failed: {e}"))),
        };
        if let Some(s) = self.serving {
            s.shutdown().await;
        }
        result
    }
}

/// Starts the scheduler against `client`: serving first (so `/healthz`
/// answers while campaigning), then leader election when configured, then
/// the scheduling loop while leading.
pub async fn start(client: kube::Client, options: StartOptions) -> anyhow::Result<SchedulerHandle> {
    let metrics = Arc::new(SchedulerMetrics::default());
    let mut registry = Registry::default();
    metrics.register(&mut registry);
    let elector = options.leader_election.map(|cfg| LeaderElector::new(client.clone(), cfg));
    let election = elector.as_ref().map(|e| e.status());
    let mut checks = Vec::new();
    if let Some(status) = &election {
        status.register(&mut registry);
        let status = Arc::clone(status);
        checks.push(HealthCheck::new("leaderElection", move || status.check()));
    }
    let serving = match options.serving {
        Some((addr, cert)) => Some(serving::serve(addr, cert, checks, Arc::new(registry)).await?),
        None => None,
    };
    let (stop, stop_rx) = watch::channel(false);
    let task = tokio::spawn(async move {
        match elector {
            Some(elector) => elector.run(stop_rx, move |work_stop| crate::scheduler::run(client, metrics, work_stop)).await,
            None => crate::scheduler::run(client, metrics, stop_rx).await.map_err(LeaderError::Work),
        }
    });
    Ok(SchedulerHandle { stop, task, serving, election })
}

/// Runs `rkube scheduler` until SIGINT/SIGTERM, or until the lease is lost
/// (an error, as kube-scheduler exits then).
pub async fn run(args: SchedulerArgs) -> anyhow::Result<()> {
    let leader_election = args.leader_election.config(COMPONENT)?;
    let serving = match args.serving.address(serving::SCHEDULER_PORT) {
        Some(addr) => Some((addr, args.serving.certificate()?)),
        None => None,
    };
    let client = rkube_component::client::client(args.kubeconfig.as_deref()).await?;
    let mut handle = start(client, StartOptions { leader_election, serving }).await?;
    tokio::select! {
        r = handle.ended() => Ok(r?),
        _ = rkube_component::shutdown_signal() => Ok(handle.shutdown().await?),
    }
}
