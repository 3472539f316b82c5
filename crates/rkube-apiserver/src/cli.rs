//! Command-line entry points: `rkube apiserver` and `rkube up`.
//!
//! `rkube apiserver` takes kube-apiserver's flag names (`--bind-address`,
//! `--secure-port`, `--storage-backend`, `--etcd-servers`, `--etcd-prefix`,
//! `--service-cluster-ip-range`, `-v/--v`) plus rkube's `--port` and
//! `--data-dir`. This issue serves plain HTTP only.
//!
//! `rkube up` starts an API server on the embedded store in a data directory,
//! on 127.0.0.1 (port 8080, or a free one when 8080 is taken), writes
//! `<data-dir>/kubeconfig`, prints exactly one line to stdout,
//! `export KUBECONFIG=<absolute path>`, logs to stderr, and serves until
//! SIGINT/SIGTERM.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use rkube_storage::Storage;
use tokio::net::TcpListener;

use crate::ipalloc::Cidr;
use crate::state::{ApiState, ServerConfig, DEFAULT_SERVICE_CIDR};

/// Errors of the command-line layer.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// `--storage-backend` names no backend.
    #[error("unknown --storage-backend {0:?}: use embedded or etcd3")]
    UnknownBackend(String),
    /// `--storage-backend=etcd3` without `--etcd-servers`.
    #[error("--etcd-servers must be set with --storage-backend=etcd3")]
    NoEtcdServers,
}

/// Flags of `rkube apiserver`.
#[derive(clap::Args, Debug, Clone)]
pub struct ApiserverArgs {
    /// The IP address on which to listen.
    #[arg(long = "bind-address", default_value = "127.0.0.1")]
    pub bind_address: IpAddr,
    /// The port on which to serve plain HTTP (0 picks a free port).
    #[arg(long = "port", default_value_t = 8080)]
    pub port: u16,
    /// kube-apiserver's HTTPS port flag. TLS is not implemented yet: when set,
    /// rkube serves PLAIN HTTP on this port (it overrides --port).
    #[arg(long = "secure-port")]
    pub secure_port: Option<u16>,
    /// Storage backend: `embedded` (redb in --data-dir) or `etcd3` (`etcd` also accepted).
    #[arg(long = "storage-backend", default_value = "embedded")]
    pub storage_backend: String,
    /// Directory of the embedded store.
    #[arg(long = "data-dir", default_value = "./.rkube")]
    pub data_dir: PathBuf,
    /// etcd endpoints, comma separated (e.g. http://127.0.0.1:2379).
    #[arg(long = "etcd-servers", value_delimiter = ',')]
    pub etcd_servers: Vec<String>,
    /// Prefix of every key in storage.
    #[arg(long = "etcd-prefix", default_value = "/registry")]
    pub etcd_prefix: String,
    /// CIDR from which Service ClusterIPs are allocated.
    #[arg(long = "service-cluster-ip-range", default_value = DEFAULT_SERVICE_CIDR)]
    pub service_cluster_ip_range: String,
    /// Log verbosity (0–1 info, 2–4 debug, 5+ trace), like kube-apiserver's `-v`.
    #[arg(short = 'v', long = "v", default_value_t = 0)]
    pub v: u8,
    /// Watch cache, feature gates, storage readiness and compaction flags.
    #[command(flatten)]
    pub cache: crate::cache_options::CacheFlags,
}

/// Flags of `rkube up`.
#[derive(clap::Args, Debug, Clone)]
pub struct UpArgs {
    /// Directory of the embedded store and the kubeconfig.
    #[arg(long = "data-dir", default_value = "./.rkube")]
    pub data_dir: PathBuf,
    /// Port to serve on 127.0.0.1; when it is taken a free one is used. 0 always picks a free port.
    #[arg(long = "port", default_value_t = 8080)]
    pub port: u16,
    /// Log verbosity (0–1 info, 2–4 debug, 5+ trace).
    #[arg(short = 'v', long = "v", default_value_t = 0)]
    pub v: u8,
}

/// Sends logs to stderr at the level `-v` asks for (`RUST_LOG` overrides).
fn init_logging(v: u8) {
    let level = match v {
        0 | 1 => "info",
        2..=4 => "debug",
        _ => "trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}

/// Opens the storage backend the flags name.
pub async fn open_storage(backend: &str, data_dir: &Path, etcd_servers: &[String]) -> anyhow::Result<Arc<dyn Storage>> {
    match backend {
        "embedded" => {
            std::fs::create_dir_all(data_dir).with_context(|| format!("creating data dir {}", data_dir.display()))?;
            let store = rkube_storage::embedded::EmbeddedStorage::open(data_dir)
                .with_context(|| format!("opening the embedded store in {}", data_dir.display()))?;
            Ok(Arc::new(store))
        }
        "etcd3" | "etcd" => {
            if etcd_servers.is_empty() {
                return Err(CliError::NoEtcdServers.into());
            }
            let store = rkube_storage::etcd::EtcdStorage::connect(etcd_servers)
                .await
                .with_context(|| format!("connecting to etcd at {}", etcd_servers.join(",")))?;
            Ok(Arc::new(store))
        }
        other => Err(CliError::UnknownBackend(other.to_string()).into()),
    }
}

/// Waits for SIGINT or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
    tracing::info!("shutting down");
}

/// Builds the state, bootstraps system namespaces and serves on `listener` until a signal.
async fn serve_until_signal(
    listener: TcpListener,
    storage: Arc<dyn Storage>,
    config: ServerConfig,
) -> anyhow::Result<()> {
    let st = ApiState::new(storage, config);
    crate::readiness::bootstrap_or_retry(&st).await.map_err(|e| anyhow::anyhow!("bootstrap failed: {e}"))?;
    crate::server::serve(listener, st, shutdown_signal()).await.context("serving HTTP")?;
    Ok(())
}

/// Run `rkube apiserver`.
pub async fn run_apiserver(args: ApiserverArgs) -> anyhow::Result<()> {
    init_logging(args.v);
    let cidr = Cidr::parse(&args.service_cluster_ip_range)?;
    let storage =
        crate::lazy_storage::open_storage_resilient(&args.storage_backend, &args.data_dir, &args.etcd_servers).await?;
    let port = args.secure_port.unwrap_or(args.port);
    if args.secure_port.is_some() {
        tracing::warn!(port, "--secure-port: TLS is not implemented yet; serving plain HTTP");
    }
    let addr = SocketAddr::new(args.bind_address, port);
    let listener = TcpListener::bind(addr).await.with_context(|| format!("listening on {addr}"))?;
    let local = listener.local_addr()?;
    tracing::info!(address = %local, backend = storage.backend_name(), "serving the Kubernetes API over plain HTTP");
    let watch_cache = args.cache.options()?;
    let config = ServerConfig { etcd_prefix: args.etcd_prefix.clone(), service_cidr: cidr, watch_cache };
    serve_until_signal(listener, storage, config).await
}

/// The kubeconfig `rkube up` writes: cluster, user and context all named `rkube`.
pub fn kubeconfig(server: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: rkube\n  cluster:\n    server: {server}\nusers:\n- name: rkube\n  user: {{}}\ncontexts:\n- name: rkube\n  context:\n    cluster: rkube\n    user: rkube\n    namespace: default\ncurrent-context: rkube\npreferences: {{}}\n"
    )
}

/// Binds 127.0.0.1:`port`, or a free port when it is taken (or 0).
async fn bind_loopback(port: u16) -> anyhow::Result<TcpListener> {
    let ip = IpAddr::V4(Ipv4Addr::LOCALHOST);
    if port != 0 {
        match TcpListener::bind(SocketAddr::new(ip, port)).await {
            Ok(l) => return Ok(l),
            Err(e) => tracing::warn!(port, error = %e, "port is taken; picking a free one"),
        }
    }
    TcpListener::bind(SocketAddr::new(ip, 0)).await.context("binding a free port on 127.0.0.1")
}

/// Run `rkube up`.
pub async fn run_up(args: UpArgs) -> anyhow::Result<()> {
    init_logging(args.v);
    std::fs::create_dir_all(&args.data_dir).with_context(|| format!("creating {}", args.data_dir.display()))?;
    let data_dir =
        std::fs::canonicalize(&args.data_dir).with_context(|| format!("resolving {}", args.data_dir.display()))?;
    let storage = open_storage("embedded", &data_dir, &[]).await?;
    let listener = bind_loopback(args.port).await?;
    let local = listener.local_addr()?;
    let server = format!("http://{local}");
    let kubeconfig_path = data_dir.join("kubeconfig");
    std::fs::write(&kubeconfig_path, kubeconfig(&server))
        .with_context(|| format!("writing {}", kubeconfig_path.display()))?;
    tracing::info!(server = %server, data_dir = %data_dir.display(), "rkube is up");
    let st = ApiState::new(storage, ServerConfig::default());
    crate::server::bootstrap(&st).await.map_err(|e| anyhow::anyhow!("bootstrap failed: {e}"))?;
    // The one line on stdout, printed once the server can answer.
    println!("export KUBECONFIG={}", kubeconfig_path.display());
    use std::io::Write as _;
    let _ = std::io::stdout().flush();
    crate::server::serve(listener, st, shutdown_signal()).await.context("serving HTTP")?;
    Ok(())
}
