//! `rkube node` flags (kubelet's names) and entry point.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use crate::agent::{self, NodeConfig};
use crate::feature_gates::FeatureGates;
use crate::local::{client_from_kubeconfig, default_node_name};

/// Flags of `rkube node`.
#[derive(clap::Args, Debug)]
pub struct NodeArgs {
    /// kubeconfig of the API server (default: $KUBECONFIG).
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: PathBuf,
    /// CRI endpoint of the container runtime.
    #[arg(long = "container-runtime-endpoint", default_value = "unix:///run/rkube/cri.sock")]
    pub container_runtime_endpoint: String,
    /// Node name (default: the host name).
    #[arg(long = "hostname-override")]
    pub hostname_override: Option<String>,
    /// The node's IP (default: the host's primary address).
    #[arg(long = "node-ip")]
    pub node_ip: Option<String>,
    /// Feature gates, `Name=bool,...` (EventedPLEG=true by default in rkube).
    #[arg(long = "feature-gates", default_value = "")]
    pub feature_gates: String,
    /// Where container logs go (kubelet config `podLogsDirectory`).
    #[arg(long = "pod-logs-directory", default_value = "/var/log/pods")]
    pub pod_logs_directory: PathBuf,
    /// Directory of the agent's files: pods' volumes are prepared in `<root-dir>/pods/<uid>/volumes` (kubelet's `--root-dir`).
    #[arg(long = "root-dir", default_value = "/var/lib/kubelet")]
    pub root_dir: PathBuf,
    /// Address of /healthz and /metrics.
    #[arg(long = "healthz-bind-address", default_value = "127.0.0.1")]
    pub healthz_bind_address: IpAddr,
    /// Port of /healthz and /metrics (0: any).
    #[arg(long = "healthz-port", default_value_t = 10248)]
    pub healthz_port: u16,
    /// Periodic pod resync, seconds.
    #[arg(long = "sync-frequency", default_value_t = 60)]
    pub sync_frequency: u64,
}

/// The agent's settings from the flags (everything but the kubeconfig).
///
/// # Errors
/// An unparsable `--feature-gates`.
pub fn node_config(args: NodeArgs) -> anyhow::Result<NodeConfig> {
    let name = args.hostname_override.unwrap_or_else(default_node_name);
    let mut config = NodeConfig::new(name, args.container_runtime_endpoint);
    if let Some(ip) = args.node_ip {
        config.node_ip = ip;
    }
    config.feature_gates = FeatureGates::parse(&args.feature_gates)?;
    config.pod_logs_dir = args.pod_logs_directory;
    config.root_dir = args.root_dir;
    config.healthz_addr = SocketAddr::new(args.healthz_bind_address, args.healthz_port);
    config.resync = Duration::from_secs(args.sync_frequency.max(1));
    Ok(config)
}

/// Run `rkube node` until SIGINT/SIGTERM (pods keep running in the runtime).
pub async fn run(args: NodeArgs) -> anyhow::Result<()> {
    let client = client_from_kubeconfig(&args.kubeconfig).await?;
    let handle = agent::start(node_config(args)?, client).await?;
    eprintln!("rkube node agent ready; healthz on http://{}/healthz", handle.healthz_addr);
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    handle.shutdown().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Node {
        #[command(flatten)]
        args: NodeArgs,
    }

    #[test]
    fn root_dir_sets_where_pod_volumes_live() {
        let parse = |extra: &[&str]| {
            let argv = ["node", "--kubeconfig", "k"].iter().chain(extra.iter()).copied();
            node_config(Node::try_parse_from(argv).expect("flags parse").args).expect("config")
        };
        assert_eq!(parse(&[]).root_dir, std::path::PathBuf::from("/var/lib/kubelet"), "kubelet's default");
        assert_eq!(parse(&["--root-dir", "/tmp/kubelet"]).root_dir, std::path::PathBuf::from("/tmp/kubelet"));
    }
}
