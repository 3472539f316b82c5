//! `rkube proxy`: flags named like kube-proxy's, parsed in two stages (raw clap
//! values, then validated [`ProxySettings`]), and the process wiring.
//!
//! rkube extension: `--network-namespace NAME` applies the rules inside a named
//! network namespace (`ip netns exec`) while the process itself stays in the
//! host namespace to reach the API server (used by tests and demos).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use anyhow::Context as _;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use tokio::sync::{mpsc, watch};

use crate::engine::machine::Timing;
use crate::engine::runner::{run_sync_loop, LoopStatus, Observers};
use crate::engine::IptablesBackend;
use crate::healthz::{self, ProxyHealth};
use crate::iptables::ExecIptables;
use crate::metrics::Metrics;
use crate::model::Ipv4Cidr;
use crate::tracker::ChangeTracker;
use crate::watch::{self as watchers, InformerSync, WatchContext};
use crate::writer::{masquerade_mark, RuleConfig};

/// Errors validating flags.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    /// A duration flag was not a Go duration (`1s`, `500ms`, `1m30s`, `1h`).
    #[error("invalid duration {0:?} (expected e.g. 1s, 500ms, 1m30s)")]
    InvalidDuration(String),
    /// Only `iptables` is implemented.
    #[error("unsupported --proxy-mode {0:?}: only \"iptables\" is implemented")]
    UnsupportedMode(String),
    /// A CIDR flag was invalid.
    #[error(transparent)]
    Cidr(#[from] crate::model::Error),
    /// `--iptables-masquerade-bit` out of range.
    #[error("--iptables-masquerade-bit must be within [0, 31], got {0}")]
    MasqueradeBit(u8),
}

/// Flags of `rkube proxy` (kube-proxy's names).
#[derive(clap::Args, Debug, Clone)]
pub struct ProxyArgs {
    /// Path to a kubeconfig file with authorization and API server location.
    #[arg(long)]
    pub kubeconfig: Option<String>,
    /// Address of the API server (overrides the kubeconfig's).
    #[arg(long)]
    pub master: Option<String>,
    /// Name of this node (default: the host name).
    #[arg(long)]
    pub hostname_override: Option<String>,
    /// Pod CIDR range; traffic from outside it to a ClusterIP is masqueraded.
    #[arg(long)]
    pub cluster_cidr: Option<String>,
    /// CIDRs of the node addresses NodePorts accept traffic on (comma-separated); empty = all.
    #[arg(long, value_delimiter = ',')]
    pub nodeport_addresses: Vec<String>,
    /// Proxy mode; only `iptables` is implemented.
    #[arg(long, default_value = "iptables")]
    pub proxy_mode: String,
    /// Minimum time between syncs, start to start (Go duration).
    #[arg(long, default_value = "1s")]
    pub iptables_min_sync_period: String,
    /// Interval of the check for externally flushed chains, and retry delay after a failure.
    #[arg(long, default_value = "30s")]
    pub iptables_sync_period: String,
    /// Bit of the packet mark used for masquerade.
    #[arg(long, default_value_t = 14)]
    pub iptables_masquerade_bit: u8,
    /// Masquerade all traffic to ClusterIPs.
    #[arg(long)]
    pub masquerade_all: bool,
    /// Address of the health check server (`/healthz`); empty disables it.
    #[arg(long, default_value = "0.0.0.0:10256")]
    pub healthz_bind_address: String,
    /// Address of the metrics server (`/metrics`); empty disables it.
    #[arg(long, default_value = "127.0.0.1:10249")]
    pub metrics_bind_address: String,
    /// rkube extension: apply rules inside this named network namespace.
    #[arg(long)]
    pub network_namespace: Option<String>,
}

/// Validated settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxySettings {
    /// Node name.
    pub node_name: String,
    /// Rule shaping.
    pub rules: RuleConfig,
    /// Sync timing.
    pub timing: Timing,
}

/// Parse a Go duration such as `1s`, `250ms`, `1m30s`, `1h`.
pub fn parse_go_duration(s: &str) -> Result<Duration, Error> {
    let err = || Error::InvalidDuration(s.to_string());
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    let mut total = Duration::ZERO;
    let mut rest = s;
    if rest.is_empty() {
        return Err(err());
    }
    while !rest.is_empty() {
        let num_len = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).ok_or_else(err)?;
        let value: f64 = rest[..num_len].parse().map_err(|_| err())?;
        rest = &rest[num_len..];
        let unit_len = rest.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(err()),
        };
        rest = &rest[unit_len..];
        total += Duration::try_from_secs_f64(value * scale).map_err(|_| err())?;
    }
    Ok(total)
}

fn default_hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "localhost".to_string())
}

impl ProxyArgs {
    /// Validate the flags.
    pub fn settings(&self) -> Result<ProxySettings, Error> {
        if self.proxy_mode != "iptables" && !self.proxy_mode.is_empty() {
            return Err(Error::UnsupportedMode(self.proxy_mode.clone()));
        }
        if self.iptables_masquerade_bit > 31 {
            return Err(Error::MasqueradeBit(self.iptables_masquerade_bit));
        }
        let cluster_cidr = self.cluster_cidr.as_deref().filter(|s| !s.is_empty()).map(Ipv4Cidr::parse).transpose()?;
        let node_port_addresses = self
            .nodeport_addresses
            .iter()
            .filter(|s| !s.is_empty())
            .map(|s| Ipv4Cidr::parse(s))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(ProxySettings {
            node_name: self
                .hostname_override
                .clone()
                .filter(|s| !s.is_empty())
                .unwrap_or_else(default_hostname)
                .to_lowercase(),
            rules: RuleConfig {
                cluster_cidr,
                masquerade_all: self.masquerade_all,
                masquerade_mark: masquerade_mark(self.iptables_masquerade_bit),
                node_port_addresses,
                random_fully: true,
                node_ip: None,
            },
            timing: {
                let sync_period = parse_go_duration(&self.iptables_sync_period)?;
                Timing {
                    min_sync_period: parse_go_duration(&self.iptables_min_sync_period)?,
                    sync_period,
                    retry_period: sync_period,
                    ..Timing::default()
                }
            },
        })
    }
}

async fn client(args: &ProxyArgs) -> anyhow::Result<Client> {
    let mut config = match &args.kubeconfig {
        Some(path) => {
            let kc = Kubeconfig::read_from(path).with_context(|| format!("reading kubeconfig {path}"))?;
            Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?
        }
        None => match &args.master {
            Some(master) => Config::new(master.parse().with_context(|| format!("parsing --master {master}"))?),
            None => Config::infer().await?,
        },
    };
    if let Some(master) = &args.master {
        config.cluster_url = master.parse().with_context(|| format!("parsing --master {master}"))?;
    }
    Ok(Client::try_from(config)?)
}

async fn bind(addr: &str, what: &str) -> anyhow::Result<Option<tokio::net::TcpListener>> {
    if addr.is_empty() {
        return Ok(None);
    }
    let sock: SocketAddr = addr.parse().with_context(|| format!("parsing {what} {addr}"))?;
    Ok(Some(tokio::net::TcpListener::bind(sock).await.with_context(|| format!("binding {what} {addr}"))?))
}

/// Run `rkube proxy` until interrupted.
pub async fn run(args: ProxyArgs) -> anyhow::Result<()> {
    let _ = tracing_subscriber_init();
    let settings = args.settings()?;
    let client = client(&args).await?;
    let metrics = Arc::new(Metrics::new());
    let health = Arc::new(ProxyHealth::new(settings.timing.sync_period * 2, SystemTime::now()));
    let tracker = Arc::new(Mutex::new(ChangeTracker::new(settings.node_name.clone(), SystemTime::now())));
    let (tx, rx) = mpsc::unbounded_channel();
    let ctx = WatchContext {
        tracker: tracker.clone(),
        notices: tx,
        metrics: metrics.clone(),
        synced: Arc::new(Mutex::new(InformerSync::default())),
    };
    if let Some(l) = bind(&args.healthz_bind_address, "--healthz-bind-address").await? {
        let h = health.clone();
        tokio::spawn(async move { healthz::serve_healthz(l, h).await });
    }
    if let Some(l) = bind(&args.metrics_bind_address, "--metrics-bind-address").await? {
        let m = metrics.clone();
        tokio::spawn(async move { healthz::serve_metrics(l, m).await });
    }
    let watches = [
        tokio::spawn(watchers::watch_services(client.clone(), ctx.clone())),
        tokio::spawn(watchers::watch_endpoint_slices(client.clone(), ctx.clone())),
        tokio::spawn(watchers::watch_node(client.clone(), settings.node_name.clone(), ctx.clone())),
    ];
    drop(ctx);
    let iptables = match &args.network_namespace {
        Some(ns) => ExecIptables::in_netns(ns.clone()),
        None => ExecIptables::new(),
    };
    let backend = IptablesBackend::new(iptables, settings.rules.clone());
    let (status, _) = watch::channel(LoopStatus::default());
    let observers = Observers { metrics, health, status };
    tracing::info!(node = %settings.node_name, mode = "iptables", "starting rkube proxy");
    tokio::select! {
        () = run_sync_loop(backend, tracker, settings.timing, rx, observers) => {}
        r = tokio::signal::ctrl_c() => { r?; tracing::info!("interrupted; stopping"); }
    }
    for w in watches {
        w.abort();
    }
    Ok(())
}

/// Install a `RUST_LOG`-filtered log subscriber unless one is already set.
fn tracing_subscriber_init() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .try_init()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(clap::Parser)]
    struct Wrapper {
        #[command(flatten)]
        args: ProxyArgs,
    }

    #[test]
    fn go_durations_parse_like_time_parse_duration() {
        assert_eq!(parse_go_duration("1s"), Ok(Duration::from_secs(1)));
        assert_eq!(parse_go_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_go_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_go_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_go_duration("0"), Ok(Duration::ZERO));
        assert!(parse_go_duration("10").is_err());
        assert!(parse_go_duration("1x").is_err());
        assert!(parse_go_duration("").is_err());
    }

    #[test]
    fn flags_have_kube_proxy_names_and_defaults() {
        let w = Wrapper::parse_from([
            "proxy",
            "--hostname-override=Node-A",
            "--cluster-cidr=10.244.0.0/16",
            "--nodeport-addresses=10.0.0.0/8,192.168.0.0/16",
            "--iptables-min-sync-period=500ms",
        ]);
        let s = w.args.settings().expect("valid flags");
        assert_eq!(s.node_name, "node-a");
        assert_eq!(s.rules.cluster_cidr.map(|c| c.to_string()), Some("10.244.0.0/16".to_string()));
        assert_eq!(s.rules.node_port_addresses.len(), 2);
        assert_eq!(s.rules.masquerade_mark, "0x4000");
        assert_eq!(s.timing.min_sync_period, Duration::from_millis(500));
        assert_eq!(s.timing.sync_period, Duration::from_secs(30));
        assert_eq!(w.args.healthz_bind_address, "0.0.0.0:10256");
        assert_eq!(w.args.metrics_bind_address, "127.0.0.1:10249");
    }

    #[test]
    fn unsupported_proxy_mode_is_rejected() {
        let w = Wrapper::parse_from(["proxy", "--proxy-mode=ipvs"]);
        assert_eq!(w.args.settings(), Err(Error::UnsupportedMode("ipvs".into())));
    }
}
