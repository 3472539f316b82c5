//! `rkube node` flags (kubelet's names) and entry point.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use crate::agent::{self, NodeConfig};
use crate::feature_gates::FeatureGates;
use crate::kubelet_api::KubeletServerConfig;
use crate::local::{client_from_kubeconfig, default_node_name};

/// Flags of `rkube node`.
#[derive(clap::Args, Debug)]
pub struct NodeArgs {
    /// kubeconfig of the API server (default: $KUBECONFIG).
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: PathBuf,
    /// CRI endpoint of the container runtime.
    #[arg(
        long = "container-runtime-endpoint",
        default_value = "unix:///run/rkube/cri.sock"
    )]
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
    /// Address of the kubelet API (HTTPS).
    #[arg(long = "address", default_value = "0.0.0.0")]
    pub address: IpAddr,
    /// Port of the kubelet API (0: any free port).
    #[arg(long = "port", default_value_t = 10250)]
    pub port: u16,
    /// Serving certificate of the kubelet API (PEM, leaf first); without it a self-signed one
    /// is generated in `<root-dir>/pki/kubelet.crt`.
    #[arg(long = "tls-cert-file", requires = "tls_private_key_file")]
    pub tls_cert_file: Option<PathBuf>,
    /// Key of `--tls-cert-file`.
    #[arg(long = "tls-private-key-file", requires = "tls_cert_file")]
    pub tls_private_key_file: Option<PathBuf>,
    /// CA bundle that client certificates of kubelet API callers must chain to.
    #[arg(long = "client-ca-file")]
    pub client_ca_file: Option<PathBuf>,
    /// Serve kubelet API requests without credentials as `system:anonymous` (default false in
    /// rkube, as kubeadm configures kubelets; upstream's flag default is true).
    #[arg(long = "anonymous-auth", num_args = 0..=1, default_value_t = false, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub anonymous_auth: bool,
    /// `Webhook` (SubjectAccessReview at the API server) or `AlwaysAllow` (default Webhook in
    /// rkube, as kubeadm configures kubelets).
    #[arg(long = "authorization-mode", default_value = "Webhook")]
    pub authorization_mode: crate::kubelet_api::auth::AuthorizationMode,
    /// Without `--tls-cert-file`: request the kubelet API's serving certificate through the
    /// certificates API (signer `kubernetes.io/kubelet-serving`; an admin approves it with
    /// `kubectl certificate approve`) instead of signing one itself.
    #[arg(long = "rotate-server-certificates", num_args = 0..=1, default_value_t = false, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub rotate_server_certificates: bool,
    /// Size a container's log may reach before it is rotated (a quantity: `10Mi`).
    #[arg(long = "container-log-max-size", default_value = "10Mi", value_parser = crate::container_log_manager::parse_max_size)]
    pub container_log_max_size: u64,
    /// Log files kept per container, the live one included (at least 2).
    #[arg(long = "container-log-max-files", default_value_t = 5)]
    pub container_log_max_files: usize,
    /// How often container logs are checked for rotation (a Go duration, at least `3s`).
    #[arg(long = "container-log-monitor-interval", default_value = "10s", value_parser = rkube_apiserver::filters::timeout::parse_go_duration)]
    pub container_log_monitor_interval: Duration,
    /// Containers whose logs are rotated at once.
    #[arg(long = "container-log-max-workers", default_value_t = 1)]
    pub container_log_max_workers: usize,
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
    config.kubelet = KubeletServerConfig {
        addr: SocketAddr::new(args.address, args.port),
        tls_cert_file: args.tls_cert_file,
        tls_private_key_file: args.tls_private_key_file,
        client_ca_file: args.client_ca_file,
        anonymous_auth: args.anonymous_auth,
        authorization_mode: args.authorization_mode,
        rotate_server_certificates: args.rotate_server_certificates,
        approve_own_serving_csr: false,
    };
    config.log_rotation = crate::container_log_manager::LogRotatePolicy {
        max_size: args.container_log_max_size,
        max_files: args.container_log_max_files,
        monitor_interval: args.container_log_monitor_interval,
        max_workers: args.container_log_max_workers,
    };
    config.log_rotation.validate().map_err(anyhow::Error::msg)?;
    Ok(config)
}

/// Run `rkube node` until SIGINT/SIGTERM (pods keep running in the runtime).
pub async fn run(args: NodeArgs) -> anyhow::Result<()> {
    let client = client_from_kubeconfig(&args.kubeconfig).await?;
    let handle = agent::start(node_config(args)?, client).await?;
    eprintln!(
        "rkube node agent ready; healthz on http://{}/healthz, kubelet API on https://{}",
        handle.healthz_addr, handle.kubelet_addr
    );
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
            let argv = ["node", "--kubeconfig", "k"]
                .iter()
                .chain(extra.iter())
                .copied();
            node_config(Node::try_parse_from(argv).expect("flags parse").args).expect("config")
        };
        assert_eq!(
            parse(&[]).root_dir,
            std::path::PathBuf::from("/var/lib/kubelet"),
            "kubelet's default"
        );
        assert_eq!(
            parse(&["--root-dir", "/tmp/kubelet"]).root_dir,
            std::path::PathBuf::from("/tmp/kubelet")
        );
    }

    #[test]
    fn container_log_flags_set_the_rotation_policy_and_are_checked() {
        let parse = |extra: &[&str]| {
            let argv = ["node", "--kubeconfig", "k"]
                .iter()
                .chain(extra.iter())
                .copied();
            node_config(Node::try_parse_from(argv).expect("flags parse").args)
        };
        assert_eq!(
            parse(&[]).expect("config").log_rotation,
            crate::container_log_manager::LogRotatePolicy::default()
        );
        let p = parse(&[
            "--container-log-max-size=1Mi",
            "--container-log-max-files=3",
            "--container-log-monitor-interval=1m30s",
            "--container-log-max-workers=2",
        ])
        .expect("config")
        .log_rotation;
        assert_eq!(
            (p.max_size, p.max_files, p.monitor_interval, p.max_workers),
            (1 << 20, 3, Duration::from_secs(90), 2)
        );
        let err = parse(&["--container-log-max-files=1"]).expect_err("one file is refused");
        assert!(err.to_string().contains("must be more than 1"), "{err}");
        let bad = ["node", "--kubeconfig", "k", "--container-log-max-size=lots"];
        assert!(
            Node::try_parse_from(bad).is_err(),
            "an unparsable quantity is a flag error"
        );
    }

    #[test]
    fn kubelet_api_flags_keep_kubelet_names() {
        let parse = |extra: &[&str]| {
            let argv = ["node", "--kubeconfig", "k"]
                .iter()
                .chain(extra.iter())
                .copied();
            node_config(Node::try_parse_from(argv).expect("flags parse").args)
                .expect("config")
                .kubelet
        };
        let d = parse(&[]);
        assert_eq!(d.addr, SocketAddr::from(([0, 0, 0, 0], 10250)));
        assert!(!d.anonymous_auth);
        assert_eq!(
            d.authorization_mode,
            crate::kubelet_api::auth::AuthorizationMode::Webhook
        );
        let k = parse(&[
            "--address=127.0.0.1",
            "--port=0",
            "--tls-cert-file=c.crt",
            "--tls-private-key-file=c.key",
            "--client-ca-file=ca.crt",
            "--anonymous-auth",
            "--authorization-mode=AlwaysAllow",
        ]);
        assert_eq!(k.addr, SocketAddr::from(([127, 0, 0, 1], 0)));
        assert_eq!(
            k.tls_cert_file.as_deref(),
            Some(std::path::Path::new("c.crt"))
        );
        assert_eq!(
            k.client_ca_file.as_deref(),
            Some(std::path::Path::new("ca.crt"))
        );
        assert!(k.anonymous_auth);
        assert_eq!(
            k.authorization_mode,
            crate::kubelet_api::auth::AuthorizationMode::AlwaysAllow
        );
        assert!(!parse(&["--anonymous-auth=false"]).anonymous_auth);
        assert!(!d.rotate_server_certificates && !d.approve_own_serving_csr);
        let r = parse(&["--rotate-server-certificates"]);
        assert!(
            r.rotate_server_certificates,
            "the flag turns CSR-issued serving certificates on"
        );
        assert!(!r.approve_own_serving_csr, "an admin approves them");
    }
}
