//! `rkube controller-manager`: flags named like kube-controller-manager's,
//! and [`start`], which `rkube up` also uses to run the controllers in its
//! own process.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;
use rkube_component::leader::{LeaderElectionArgs, LeaderElector};
use rkube_component::serving::{self, HealthCheck, ServingArgs};
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::client_builder::{ControllerClients, ServiceAccountClients};
use crate::context::{ControllerConfig, ControllerContext};
use crate::controllers::{self, Controller};

/// Flags of `rkube controller-manager` (kube-controller-manager's names).
#[derive(clap::Args, Debug, Clone)]
pub struct ControllerManagerArgs {
    /// Path to a kubeconfig file with the API server's location and credentials
    /// (default: in-cluster config, then `$KUBECONFIG`, then `~/.kube/config`).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// A list of controllers to enable. '*' enables all on-by-default controllers,
    /// 'foo' enables the controller named 'foo', '-foo' disables the controller named 'foo'.
    #[arg(long, value_delimiter = ',', default_value = "*")]
    pub controllers: Vec<String>,
    /// Number of terminated pods that can exist before the terminated pod garbage
    /// collector starts deleting terminated pods. If <= 0, the terminated pod garbage
    /// collector is disabled.
    #[arg(long, default_value_t = 12500)]
    pub terminated_pod_gc_threshold: i32,
    /// The period for syncing NodeStatus in the node lifecycle controller.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub node_monitor_period: std::time::Duration,
    /// Amount of time which we allow a running Node to be unresponsive before
    /// marking it unhealthy (its conditions Unknown, its pods not ready).
    #[arg(long, default_value = "50s", value_parser = parse_duration)]
    pub node_monitor_grace_period: std::time::Duration,
    /// Amount of time which we allow a starting Node to be unresponsive before
    /// marking it unhealthy.
    #[arg(long, default_value = "1m0s", value_parser = parse_duration)]
    pub node_startup_grace_period: std::time::Duration,
    /// Directory the local-path provisioner (`local-path-provisioner-controller`,
    /// off unless selected) creates volumes in (k3s's flag name).
    #[arg(long, default_value = crate::context::DEFAULT_LOCAL_STORAGE_PATH)]
    pub default_local_storage_path: PathBuf,
    /// If true, use individual service account credentials for each
    /// controller: each acts as the ServiceAccount `kube-system/<name>`
    /// (created if missing) with tokens from the TokenRequest API, bound to
    /// the ClusterRole `system:controller:<name>`; otherwise every
    /// controller uses this process's own credentials.
    #[arg(long, default_value_t = false, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub use_service_account_credentials: bool,
    /// Leader election on the `kube-system/kube-controller-manager` Lease.
    #[command(flatten)]
    pub leader_election: LeaderElectionArgs,
    /// Secure serving of /healthz, /livez, /readyz, /metrics (port 10257).
    #[command(flatten)]
    pub serving: ServingArgs,
}

/// Parses a Go duration flag value (`5s`, `1m0s`) with rkube's one parser.
fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    match rkube_api::time::parse_go_duration(s.trim()) {
        Some(ns) if ns >= 0 => Ok(std::time::Duration::from_nanos(ns as u64)),
        _ => Err(format!("invalid duration {s:?}")),
    }
}

impl ControllerManagerArgs {
    /// The controllers' settings these flags give.
    pub fn controller_config(&self) -> ControllerConfig {
        ControllerConfig {
            terminated_pod_gc_threshold: self.terminated_pod_gc_threshold,
            node_lifecycle: crate::controllers::nodelifecycle::NodeLifecycleOptions {
                monitor_period: self.node_monitor_period,
                monitor_grace: self.node_monitor_grace_period,
                startup_grace: self.node_startup_grace_period,
            },
            local_path_root: self.default_local_storage_path.clone(),
        }
    }
}

/// The Lease name of kube-controller-manager (`--leader-elect-resource-name` default).
pub const COMPONENT: &str = "kube-controller-manager";

/// How long [`ControllerManager::shutdown`] waits for the controllers to
/// stop before it aborts the ones still running.
pub const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// Running controllers: stop them with [`ControllerManager::shutdown`].
#[derive(Debug)]
pub struct ControllerManager {
    stop: watch::Sender<bool>,
    tasks: JoinSet<(&'static str, anyhow::Result<()>)>,
    /// The controllers whose task has not ended.
    running: Vec<&'static str>,
}

impl ControllerManager {
    /// Waits until a controller ends (with its name and result), or forever
    /// when none runs.
    pub async fn ended(&mut self) -> (&'static str, anyhow::Result<()>) {
        match self.tasks.join_next().await {
            Some(Ok(done)) => {
                self.running.retain(|n| *n != done.0);
                done
            }
            Some(Err(e)) => ("controller task", Err(anyhow::anyhow!("controller task failed: {e}"))),
            None => std::future::pending().await,
        }
    }

    /// Signals every controller to stop and waits for them, at most
    /// [`SHUTDOWN_GRACE`]; the ones still running then are aborted and
    /// named in a warning, so a controller stuck in a retry (its API server
    /// gone) cannot keep the process from exiting on SIGTERM.
    pub async fn shutdown(mut self) {
        let _ = self.stop.send(true);
        let running = &mut self.running;
        let tasks = &mut self.tasks;
        let joined = tokio::time::timeout(SHUTDOWN_GRACE, async {
            while let Some(done) = tasks.join_next().await {
                if let Ok((name, _)) = done {
                    running.retain(|n| *n != name);
                }
            }
        })
        .await;
        if joined.is_err() {
            tracing::warn!(controllers = ?self.running, "controllers did not stop within {SHUTDOWN_GRACE:?} of being asked; aborting them");
            self.tasks.abort_all();
            while self.tasks.join_next().await.is_some() {}
        }
    }
}

/// Starts `selected` controllers against `client` with the default [`ControllerConfig`].
pub fn start(client: kube::Client, selected: &[&'static Controller]) -> ControllerManager {
    start_with(client, selected, ControllerConfig::default())
}

/// Starts `selected` controllers against `client` with `config`.
pub fn start_with(client: kube::Client, selected: &[&'static Controller], config: ControllerConfig) -> ControllerManager {
    let (stop, stop_rx) = watch::channel(false);
    let clients = selected.iter().map(|c| (*c, client.clone())).collect();
    spawn(clients, config, stop, stop_rx)
}

/// Starts `selected` controllers with `config`, each with its client from
/// `clients` (its own ServiceAccount's with
/// `--use-service-account-credentials`).
///
/// Errors: a controller's client cannot be made (its ServiceAccount cannot
/// be created or gets no token); no controller is left running then.
pub async fn start_with_clients(
    clients: &ControllerClients,
    selected: &[&'static Controller],
    config: ControllerConfig,
) -> anyhow::Result<ControllerManager> {
    let (stop, stop_rx) = watch::channel(false);
    let mut each = Vec::with_capacity(selected.len());
    for c in selected {
        match clients.client_for(c.service_account, stop_rx.clone()).await {
            Ok(client) => each.push((*c, client)),
            Err(e) => {
                let _ = stop.send(true);
                return Err(e.context(format!("the client of {}", c.name)));
            }
        }
    }
    Ok(spawn(each, config, stop, stop_rx))
}

fn spawn(
    clients: Vec<(&'static Controller, kube::Client)>,
    config: ControllerConfig,
    stop: watch::Sender<bool>,
    stop_rx: watch::Receiver<bool>,
) -> ControllerManager {
    let mut tasks = JoinSet::new();
    let mut running = Vec::with_capacity(clients.len());
    let config = Arc::new(config);
    for (c, client) in clients {
        let ctx = ControllerContext { client, stop: stop_rx.clone(), config: config.clone() };
        let fut = (c.start)(ctx);
        let name = c.name;
        tracing::info!(controller = name, "starting controller");
        tasks.spawn(async move { (name, fut.await) });
        running.push(name);
    }
    ControllerManager { stop, tasks, running }
}

/// A client from `--kubeconfig`, or kube-rs's default discovery.
pub use rkube_component::client::client;

/// Runs `selected` controllers until one ends or `stop` turns true.
async fn run_controllers(
    clients: ControllerClients,
    selected: Vec<&'static Controller>,
    config: ControllerConfig,
    mut stop: watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let mut cm = start_with_clients(&clients, &selected, config).await?;
    let result = tokio::select! {
        (name, result) = cm.ended() => result.with_context(|| format!("controller {name}")),
        _ = rkube_component::leader::stopped(&mut stop) => Ok(()),
    };
    cm.shutdown().await;
    result
}

/// Runs `rkube controller-manager` until interrupted (SIGINT/SIGTERM), a
/// controller fails or the lease is lost; with leader election the
/// controllers run only while this instance leads.
pub async fn run(args: ControllerManagerArgs) -> anyhow::Result<()> {
    let (selected, warnings) = controllers::select(&args.controllers).map_err(|e| anyhow::anyhow!(e))?;
    for w in warnings {
        tracing::warn!("{w}");
    }
    let leader = args.leader_election.config(COMPONENT)?;
    let kube_config = rkube_component::client::config(args.kubeconfig.as_deref()).await?;
    let client = rkube_component::client::client_from_config(kube_config.clone())?;
    let clients = if args.use_service_account_credentials {
        ControllerClients::ServiceAccounts(ServiceAccountClients::new(client.clone(), &kube_config))
    } else {
        ControllerClients::Shared(client.clone())
    };
    let elector = leader.map(|cfg| LeaderElector::new(client.clone(), cfg));
    let mut registry = prometheus_client::registry::Registry::default();
    let mut checks = Vec::new();
    if let Some(e) = &elector {
        let status = e.status();
        status.register(&mut registry);
        checks.push(HealthCheck::new("leaderElection", move || status.check()));
    }
    let _serving = match args.serving.address(serving::CONTROLLER_MANAGER_PORT) {
        Some(addr) => Some(serving::serve(addr, args.serving.certificate()?, checks, Arc::new(registry)).await?),
        None => None,
    };
    let config = args.controller_config();
    let (stop, stop_rx) = watch::channel(false);
    let work = async move {
        match elector {
            Some(e) => Ok(e.run(stop_rx, move |work_stop| run_controllers(clients, selected, config, work_stop)).await?),
            None => run_controllers(clients, selected, config, stop_rx).await,
        }
    };
    let mut work = std::pin::pin!(work);
    tokio::select! {
        r = &mut work => r,
        _ = rkube_component::shutdown_signal() => {
            let _ = stop.send(true);
            work.await
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: ControllerManagerArgs,
    }

    static HONOURS_STOP: Controller = Controller {
        name: "honours-stop",
        service_account: "honours-stop",
        aliases: &[],
        enabled_by_default: false,
        start: |mut ctx| Box::pin(async move {
            let _ = ctx.stop.wait_for(|s| *s).await;
            Ok(())
        }),
    };

    static IGNORES_STOP: Controller = Controller {
        name: "ignores-stop",
        service_account: "ignores-stop",
        aliases: &[],
        enabled_by_default: false,
        start: |_ctx| Box::pin(std::future::pending()),
    };

    #[tokio::test(start_paused = true)]
    async fn shutdown_aborts_a_controller_that_does_not_stop_within_the_grace_period() {
        let config = kube::Config::new("http://127.0.0.1:1".parse().expect("uri"));
        let client = kube::Client::try_from(config).expect("client");
        let cm = start(client, &[&HONOURS_STOP, &IGNORES_STOP]);
        assert_eq!(cm.running, ["honours-stop", "ignores-stop"]);
        let began = tokio::time::Instant::now();
        cm.shutdown().await;
        // Paused time: the wait is exactly the grace period, not a wall-clock race.
        assert_eq!(began.elapsed(), SHUTDOWN_GRACE);
        let config = kube::Config::new("http://127.0.0.1:1".parse().expect("uri"));
        let cm = start(kube::Client::try_from(config).expect("client"), &[&HONOURS_STOP]);
        let began = tokio::time::Instant::now();
        cm.shutdown().await;
        assert!(began.elapsed() < SHUTDOWN_GRACE, "a controller that stops is not waited for");
    }

    #[test]
    fn node_lifecycle_flags_reach_the_controller_config_with_upstreams_defaults() {
        let defaults = Cli::parse_from(["cm"]).args.controller_config().node_lifecycle;
        assert_eq!(defaults, crate::controllers::nodelifecycle::NodeLifecycleOptions::default());
        assert_eq!(defaults.monitor_grace, std::time::Duration::from_secs(50));
        let set = Cli::parse_from(["cm", "--node-monitor-period=1s", "--node-monitor-grace-period=1m30s", "--node-startup-grace-period=2m"])
            .args
            .controller_config()
            .node_lifecycle;
        assert_eq!(
            (set.monitor_period.as_secs(), set.monitor_grace.as_secs(), set.startup_grace.as_secs()),
            (1, 90, 120)
        );
        assert!(Cli::try_parse_from(["cm", "--node-monitor-grace-period=-5s"]).is_err());
    }
}
