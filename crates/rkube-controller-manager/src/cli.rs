//! `rkube controller-manager`: flags named like kube-controller-manager's,
//! and [`start`], which `rkube up` also uses to run the controllers in its
//! own process.

use std::path::PathBuf;

use anyhow::Context as _;
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::context::ControllerContext;
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
}

/// Running controllers: stop them with [`ControllerManager::shutdown`].
#[derive(Debug)]
pub struct ControllerManager {
    stop: watch::Sender<bool>,
    tasks: JoinSet<(&'static str, anyhow::Result<()>)>,
}

impl ControllerManager {
    /// Waits until a controller ends (with its name and result), or forever
    /// when none runs.
    pub async fn ended(&mut self) -> (&'static str, anyhow::Result<()>) {
        match self.tasks.join_next().await {
            Some(Ok(done)) => done,
            Some(Err(e)) => ("controller task", Err(anyhow::anyhow!("controller task failed: {e}"))),
            None => std::future::pending().await,
        }
    }

    /// Signals every controller to stop and waits for them.
    pub async fn shutdown(mut self) {
        let _ = self.stop.send(true);
        while self.tasks.join_next().await.is_some() {}
    }
}

/// Starts `selected` controllers against `client`.
pub fn start(client: kube::Client, selected: &[&'static Controller]) -> ControllerManager {
    let (stop, stop_rx) = watch::channel(false);
    let mut tasks = JoinSet::new();
    for c in selected {
        let ctx = ControllerContext { client: client.clone(), stop: stop_rx.clone() };
        let fut = (c.start)(ctx);
        let name = c.name;
        tracing::info!(controller = name, "starting controller");
        tasks.spawn(async move { (name, fut.await) });
    }
    ControllerManager { stop, tasks }
}

/// A client from `--kubeconfig`, or kube-rs's default discovery.
pub async fn client(kubeconfig: Option<&std::path::Path>) -> anyhow::Result<kube::Client> {
    let config = match kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path).with_context(|| format!("reading kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default()).await?
        }
        None => kube::Config::infer().await?,
    };
    Ok(kube::Client::try_from(config)?)
}

/// Runs `rkube controller-manager` until interrupted (SIGINT/SIGTERM) or a
/// controller fails.
pub async fn run(args: ControllerManagerArgs) -> anyhow::Result<()> {
    let (selected, warnings) = controllers::select(&args.controllers).map_err(|e| anyhow::anyhow!(e))?;
    for w in warnings {
        tracing::warn!("{w}");
    }
    let client = client(args.kubeconfig.as_deref()).await?;
    let mut cm = start(client, &selected);
    let result = tokio::select! {
        (name, result) = cm.ended() => result.with_context(|| format!("controller {name}")),
        _ = shutdown_signal() => Ok(()),
    };
    cm.shutdown().await;
    result
}

async fn shutdown_signal() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => return std::future::pending().await,
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
