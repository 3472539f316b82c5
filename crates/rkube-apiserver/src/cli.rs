//! Command-line entry points: `rkube apiserver` and `rkube up`.
//!
//! `rkube apiserver` takes kube-apiserver's flag names (`--bind-address`,
//! `--secure-port`, `--advertise-address`, `--storage-backend`, `--etcd-servers`, `--etcd-prefix`,
//! `--service-cluster-ip-range`, `-v/--v`) plus rkube's `--port` and
//! `--data-dir`, and the filter chain's flags ([`crate::filters::FilterArgs`]).
//!
//! `rkube up` starts an API server on the embedded store in a data directory,
//! on 127.0.0.1 (port 6443, or a free one when it is taken), writes
//! `<data-dir>/kubeconfig`, prints exactly one line to stdout,
//! `export KUBECONFIG=<absolute path>`, logs to stderr, and serves until
//! SIGINT/SIGTERM. It is secure by default ([`crate::up_auth`]): HTTPS with a
//! CA and serving certificate generated in `<data-dir>/pki`, no anonymous
//! access, RBAC, and a kubeconfig that trusts the CA and authenticates as an
//! admin (client certificate in `system:masters`). `rkube up --insecure`
//! serves plain HTTP on loopback (port 8080) with no access control. It
//! takes `rkube apiserver`'s filter flags too ([`UpArgs::filters`]): its own
//! `--tls-cert-file`/`--tls-private-key-file`, audit, inflight, request
//! timeout and trace flags (`--insecure` refuses only TLS and access control).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use rkube_storage::Storage;
use tokio::net::TcpListener;

use crate::ipalloc::Cidr;
use crate::state::{ApiState, ServerConfig, DEFAULT_SERVICE_CIDR};

pub use crate::lazy_storage::{open_storage, CliError};

/// Flags of `rkube apiserver`.
#[derive(clap::Args, Debug, Clone)]
pub struct ApiserverArgs {
    /// The IP address on which to listen.
    #[arg(long = "bind-address", default_value = "127.0.0.1")]
    pub bind_address: IpAddr,
    /// The IP address advertised to the cluster as the API server's (the
    /// `default/kubernetes` Endpoints and EndpointSlice). Default: --bind-address,
    /// or when that is unspecified (0.0.0.0) the address of the default route's interface.
    #[arg(long = "advertise-address")]
    pub advertise_address: Option<IpAddr>,
    /// The port on which to serve plain HTTP (0 picks a free port).
    #[arg(long = "port", default_value_t = 8080)]
    pub port: u16,
    /// The port on which to serve HTTPS with --tls-cert-file and
    /// --tls-private-key-file (it overrides --port). Without a certificate
    /// it serves plain HTTP there and logs a warning.
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
    /// PEM CA certificate that signs approved CertificateSigningRequests of
    /// the `kubernetes.io/kube-apiserver-client(-kubelet)` signers (a
    /// kube-controller-manager flag upstream; no signing without it).
    #[arg(long = "cluster-signing-cert-file", requires = "cluster_signing_key_file")]
    pub cluster_signing_cert_file: Option<PathBuf>,
    /// PEM private key of --cluster-signing-cert-file.
    #[arg(long = "cluster-signing-key-file", requires = "cluster_signing_cert_file")]
    pub cluster_signing_key_file: Option<PathBuf>,
    /// The longest lifetime of a signed certificate (Go duration); a CSR's
    /// `spec.expirationSeconds` may only shorten it.
    #[arg(long = "cluster-signing-duration", default_value = "8760h0m0s")]
    pub cluster_signing_duration: String,
    /// Watch cache, feature gates, storage readiness and compaction flags.
    #[command(flatten)]
    pub cache: crate::cache_options::CacheFlags,
    /// TLS, authentication, authorization, audit, inflight limits, request timeouts and traces.
    #[command(flatten)]
    pub filters: crate::filters::FilterArgs,
    /// ServiceAccount token issuer, keys and audiences.
    #[command(flatten)]
    pub service_accounts: crate::serviceaccount::ServiceAccountArgs,
    /// Admission plugins.
    #[command(flatten)]
    pub admission: crate::admission::AdmissionArgs,
    /// The kubelet client of `pods/log` (certificate, key, kubelet CA).
    #[command(flatten)]
    pub kubelet: crate::kubelet_client::KubeletClientArgs,
    /// The resource metrics API's scrape period.
    #[command(flatten)]
    pub metrics: crate::metrics_api::scraper::MetricsArgs,
}

/// Flags of `rkube up`.
///
/// The filter-chain flags are `rkube apiserver`'s own ([`crate::filters::FilterArgs`],
/// flattened), with `rkube up`'s secure defaults (`--anonymous-auth=false`,
/// `--authorization-mode=RBAC`) and help texts that say what they mean here.
#[derive(clap::Args, Debug, Clone)]
#[command(
    mut_arg("anonymous_auth", |a| a.default_value("false").help(UP_ANONYMOUS_HELP)),
    mut_arg("authorization_mode", |a| a.default_value("RBAC").help(UP_AUTHORIZATION_HELP)),
    mut_arg("client_ca_file", |a| a.help(UP_CLIENT_CA_HELP)),
    mut_arg("tls_cert_file", |a| a.help(UP_TLS_CERT_HELP).requires("tls_private_key_file")),
    mut_arg("tls_private_key_file", |a| a.requires("tls_cert_file")),
)]
pub struct UpArgs {
    /// Directory of the embedded store, the PKI (`pki/`) and the kubeconfig.
    #[arg(long = "data-dir", default_value = "./.rkube")]
    pub data_dir: PathBuf,
    /// Port to serve on 127.0.0.1 (default 6443, or 8080 with --insecure); when it is taken a free one is used. 0 always picks a free port.
    #[arg(long = "port", visible_alias = "secure-port")]
    pub port: Option<u16>,
    /// Log verbosity (0–1 info, 2–4 debug, 5+ trace).
    #[arg(short = 'v', long = "v", default_value_t = 0)]
    pub v: u8,
    /// Serve plain HTTP on 127.0.0.1 with no authentication or authorization
    /// (anyone who can reach loopback is an admin). Default: HTTPS, client
    /// certificates and tokens, no anonymous access, RBAC. Audit, inflight,
    /// timeout and trace flags still apply.
    #[arg(long = "insecure", conflicts_with_all = UP_SECURE_ONLY_FLAGS)]
    pub insecure: bool,
    /// Deprecated (HTTPS is the default): accepted so old command lines
    /// parse, and warned about (`rkube::DEPRECATED_FLAGS`).
    #[arg(long = "secure", hide = true, conflicts_with = "insecure")]
    pub secure: bool,
    /// kube-apiserver's TLS, authentication, authorization, audit, inflight,
    /// request timeout and trace flags (TLS and access control are ignored
    /// with --insecure, which refuses them).
    #[command(flatten)]
    pub filters: crate::filters::FilterArgs,
    /// kube-apiserver's ServiceAccount token flags; by default tokens are
    /// signed with `<data-dir>/pki/sa.key` (generated once) for issuer
    /// `https://kubernetes.default.svc.cluster.local`.
    #[command(flatten)]
    pub service_accounts: crate::serviceaccount::ServiceAccountArgs,
    /// Admission plugins.
    #[command(flatten)]
    pub admission: crate::admission::AdmissionArgs,
    /// Also run this machine as a node: `rkube runtime` and `rkube node`
    /// (evented PLEG), binding pods without `spec.nodeName` to it. Handled by
    /// the `rkube` binary, which calls [`run_up_with`].
    #[arg(long = "node")]
    pub node: bool,
    /// The resource metrics API's scrape period (`kubectl top`).
    #[command(flatten)]
    pub metrics: crate::metrics_api::scraper::MetricsArgs,
    /// Default local storage path for the local-path provisioner's volumes
    /// (StorageClass `local-path`), k3s's flag; default `<data-dir>/storage`.
    /// The provisioner runs in this process and writes there directly, so
    /// pods using its volumes must run on this machine (`--node`).
    #[arg(long = "default-local-storage-path")]
    pub default_local_storage_path: Option<PathBuf>,
}

/// The flags of [`UpArgs`] that mean nothing over `--insecure`'s plain HTTP
/// without access control (clap ids: field names).
const UP_SECURE_ONLY_FLAGS: [&str; 6] =
    ["tls_cert_file", "tls_private_key_file", "token_auth_file", "client_ca_file", "anonymous_auth", "authorization_mode"];
const UP_ANONYMOUS_HELP: &str = "Allow requests without credentials as system:anonymous (off by default in `rkube up`, unlike kube-apiserver)";
const UP_AUTHORIZATION_HELP: &str =
    "Ordered list of authorizers: AlwaysAllow, AlwaysDeny, RBAC (`rkube up` default RBAC; system:masters may do anything)";
const UP_CLIENT_CA_HELP: &str =
    "Extra CA bundle for client certificates (CN = user, O = groups), trusted besides the CA in <data-dir>/pki (which signs the admin certificate of the kubeconfig)";
const UP_TLS_CERT_HELP: &str = "Serve HTTPS with this certificate (PEM; CA cert, if any, concatenated after the server cert, as for kube-apiserver) instead of the one generated in <data-dir>/pki. It must be valid for IP 127.0.0.1. The kubeconfig `rkube up` writes then trusts the LAST certificate of this file (your CA when the chain is concatenated, else the certificate itself); it still authenticates with the admin client certificate of <data-dir>/pki";

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

/// Wraps `storage` for the filter chain's storage latency metrics and builds
/// the chain from `fargs`. RBAC reads roles and bindings from memory
/// ([`crate::filters::rbac_cache::RbacCache`], returned for the aggregation
/// controller too).
fn build_chain(
    storage: Arc<dyn Storage>,
    fargs: &crate::filters::FilterArgs,
    etcd_prefix: &str,
) -> anyhow::Result<(Arc<dyn Storage>, crate::filters::FilterChain, Arc<crate::filters::rbac_cache::RbacCache>)> {
    use crate::filters::{metrics::ApiserverMetrics, rbac, rbac_cache::RbacCache, storage_metrics::InstrumentedStorage};
    let metrics = Arc::new(ApiserverMetrics::new());
    let storage: Arc<dyn Storage> = Arc::new(InstrumentedStorage::new(storage, metrics.clone(), etcd_prefix));
    let rbac_cache = RbacCache::start(storage.clone(), etcd_prefix);
    let rbac_source: Arc<dyn rbac::RbacSource> = rbac_cache.clone();
    let config = fargs.load().map_err(|e| anyhow::anyhow!("{e}"))?;
    let chain = crate::filters::FilterChain::build(config, Some(rbac_source), metrics)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok((storage, chain, rbac_cache))
}

/// What a server knows of its identity besides the filter flags: the
/// ServiceAccount token settings and the CA it publishes in every namespace.
struct Identity {
    /// `--service-account-*` (`None`: no ServiceAccount tokens).
    tokens: Option<crate::serviceaccount::TokenConfig>,
    /// The CA certificate (PEM) of the `kube-root-ca.crt` ConfigMaps and
    /// legacy token Secrets (`None`: not published).
    root_ca: Option<String>,
    /// The CSR signer (`None`: CSRs are not signed).
    signer: Option<crate::csr::signer::Signer>,
}

/// Builds the state, bootstraps system namespaces (and the RBAC bootstrap
/// policy when RBAC is on), keeps the `default/kubernetes` Service pointing at
/// `advertise` and the listener's port ([`crate::kubernetes_service`]), runs
/// the in-process controllers ([`crate::controllers`]) and serves `st` behind the filter chain on
/// `listener` until a signal. `ready` runs once the server can answer.
async fn serve_until_signal(
    listener: TcpListener,
    storage: Arc<dyn Storage>,
    config: ServerConfig,
    fargs: &crate::filters::FilterArgs,
    identity: Identity,
    advertise: IpAddr,
    ready: impl FnOnce(),
) -> anyhow::Result<()> {
    let config = ServerConfig { min_request_timeout: fargs.min_request_timeout, ..config };
    let prefix = config.etcd_prefix.clone();
    let cidr = config.service_cidr;
    let me = crate::kubernetes_service::ApiserverEndpoint { ip: advertise, port: listener.local_addr()?.port() };
    let (storage, chain, rbac_cache) = build_chain(storage, fargs, &prefix)?;
    let tokens = identity.tokens.map(Arc::new);
    let st = ApiState::new(storage.clone(), config).with_service_account_tokens(tokens.clone());
    let chain = match &tokens {
        Some(t) => {
            let objects = Arc::new(crate::serviceaccount::CacheGetter::new(st.cache.clone()));
            chain.with_service_account_tokens(Arc::new(crate::serviceaccount::ServiceAccountAuthenticator::new(t.clone(), objects)))
        }
        None => chain,
    };
    // `serve_api` attaches the cache's metrics (watch cache, consistency checks) to the chain's /metrics.
    crate::readiness::bootstrap_or_retry(&st).await.map_err(|e| anyhow::anyhow!("bootstrap failed: {e}"))?;
    if fargs.authorization_mode.iter().any(|m| m.split(',').any(|m| m.trim() == "RBAC")) {
        crate::filters::rbac::ensure_bootstrap_policy(storage.as_ref(), &prefix)
            .await
            .map_err(|e| anyhow::anyhow!("writing the RBAC bootstrap policy: {e}"))?;
    }
    // ClusterRole aggregation (upstream runs it in kube-controller-manager).
    tokio::spawn(crate::rbac_aggregation::run_with(rbac_cache.clone(), st.shutdown.subscribe()));
    // The default/kubernetes Service, Endpoints and EndpointSlice: in place
    // before the server reports ready (when storage answers), then kept right.
    if let Err(e) = crate::kubernetes_service::reconcile(storage.as_ref(), &prefix, cidr, me).await {
        tracing::warn!(error = %e, "creating the default/kubernetes service; retrying in the background");
    }
    tokio::spawn(crate::kubernetes_service::run(st.cache.clone(), storage.clone(), prefix.clone(), cidr, me, st.shutdown.subscribe()));
    tokio::spawn(crate::controllers::serviceaccounts::run(st.clone(), identity.root_ca.clone(), st.shutdown.subscribe()));
    if let Some(t) = tokens.filter(|t| t.signer.is_some()) {
        tokio::spawn(crate::controllers::tokens::run(st.clone(), t, identity.root_ca.clone(), st.shutdown.subscribe()));
    }
    // The CSR signer (upstream runs it in kube-controller-manager).
    if let Some(signer) = identity.signer {
        tokio::spawn(crate::csr::signer::run(signer, storage.clone(), prefix.clone(), st.shutdown.subscribe()));
    }
    // The resource metrics API's scraper (metrics-server's job upstream).
    tokio::spawn(crate::metrics_api::scraper::run(
        st.clone(),
        st.resource_metrics.clone(),
        st.config.metric_resolution,
        st.shutdown.subscribe(),
    ));
    // RBAC answers from memory once its caches are filled; until then (storage
    // not answering yet, KEP-4568) it reads storage, so serving starts at once.
    ready();
    crate::server::serve_api(listener, st, &chain, shutdown_signal()).await.context("serving the API")?;
    Ok(())
}

/// Run `rkube apiserver`.
pub async fn run_apiserver(args: ApiserverArgs) -> anyhow::Result<()> {
    crate::filters::trace::init_logging(args.v);
    let cidr = Cidr::parse(&args.service_cluster_ip_range)?;
    let storage =
        crate::lazy_storage::open_storage_resilient(&args.storage_backend, &args.data_dir, &args.etcd_servers).await?;
    let port = args.secure_port.unwrap_or(args.port);
    let tls = args.filters.tls_cert_file.is_some();
    if args.secure_port.is_some() && !tls {
        tracing::warn!(port, "--secure-port without --tls-cert-file/--tls-private-key-file: serving plain HTTP");
    }
    let addr = SocketAddr::new(args.bind_address, port);
    let listener = TcpListener::bind(addr).await.with_context(|| format!("listening on {addr}"))?;
    let local = listener.local_addr()?;
    let scheme = if tls { "HTTPS" } else { "plain HTTP" };
    tracing::info!(address = %local, backend = storage.backend_name(), "serving the Kubernetes API over {scheme}");
    let watch_cache = args.cache.options()?;
    let admission = args.admission.load().map_err(|e| anyhow::anyhow!(e))?;
    let config =
        ServerConfig { etcd_prefix: args.etcd_prefix.clone(), service_cidr: cidr, watch_cache, admission, ..Default::default() };
    let kubelet_client = Some(crate::kubelet_client::KubeletClient::from_args(&args.kubelet)?);
    let config = ServerConfig { kubelet_client, metric_resolution: args.metrics.resolution()?, ..config };
    let advertise = args.advertise_address.unwrap_or_else(|| crate::kubernetes_service::advertise_address(local.ip()));
    let tokens = args.service_accounts.load()?;
    let signer = apiserver_signer(&args)?;
    // The CA of the serving certificate (the last one of --tls-cert-file), as kubeadm's clusters publish theirs.
    let root_ca = match &args.filters.tls_cert_file {
        Some(cert) => std::fs::read_to_string(cert).ok().and_then(|pem| crate::up_auth::last_certificate_pem(&pem)),
        None => None,
    };
    serve_until_signal(listener, storage, config, &args.filters, Identity { tokens, root_ca, signer }, advertise, || {}).await
}

/// The CSR signer of `rkube apiserver`: from --cluster-signing-cert-file and
/// --cluster-signing-key-file, none without them.
fn apiserver_signer(args: &ApiserverArgs) -> anyhow::Result<Option<crate::csr::signer::Signer>> {
    let duration = crate::filters::timeout::parse_go_duration(&args.cluster_signing_duration)
        .map_err(|e| anyhow::anyhow!("--cluster-signing-duration: {e}"))?;
    match (&args.cluster_signing_cert_file, &args.cluster_signing_key_file) {
        (Some(cert), Some(key)) => Ok(Some(crate::csr::signer::Signer::load(cert, key, duration)?)),
        _ => Ok(None),
    }
}

/// The kubeconfig `rkube up` writes: cluster, user and context all named `rkube`.
pub fn kubeconfig(server: &str) -> String {
    crate::filters::tls::render_kubeconfig(server, None)
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
    run_up_with(args, || {}).await
}

/// Run `rkube up`, calling `ready` once the server answers (right after the
/// `export KUBECONFIG=` line is printed) so a caller can start clients of it.
pub async fn run_up_with(args: UpArgs, ready: impl FnOnce() + Send + 'static) -> anyhow::Result<()> {
    crate::filters::trace::init_logging(args.v);
    std::fs::create_dir_all(&args.data_dir).with_context(|| format!("creating {}", args.data_dir.display()))?;
    let data_dir =
        std::fs::canonicalize(&args.data_dir).with_context(|| format!("resolving {}", args.data_dir.display()))?;
    let storage = open_storage("embedded", &data_dir, &[]).await?;
    let default_port = if args.insecure { crate::up_auth::INSECURE_PORT } else { crate::up_auth::SECURE_PORT };
    let listener = bind_loopback(args.port.unwrap_or(default_port)).await?;
    let local = listener.local_addr()?;
    let kubeconfig_path = data_dir.join("kubeconfig");
    let tokens = args.service_accounts.with_up_defaults(&data_dir)?.load()?;
    let mut signer = None;
    let mut kubelet_client = None;
    let (fargs, server, root_ca) = if args.insecure {
        tracing::warn!("--insecure: serving plain HTTP on loopback with no authentication or authorization");
        let server = format!("http://{local}");
        std::fs::write(&kubeconfig_path, kubeconfig(&server))
            .with_context(|| format!("writing {}", kubeconfig_path.display()))?;
        (crate::up_auth::insecure_filter_args(&args.filters), server, None)
    } else {
        let up = crate::up_auth::secure_filter_args(&data_dir, &args.filters)?;
        let server = format!("https://{local}");
        crate::filters::tls::write_kubeconfig(&kubeconfig_path, &server, &up.kubeconfig_pki())?;
        crate::up_auth::write_component_kubeconfigs(&data_dir, &server, &up)?;
        let kubelet_args = crate::up_auth::write_kubelet_client_cert(&data_dir, &up)?;
        kubelet_client = Some(crate::kubelet_client::KubeletClient::from_args(&kubelet_args)?);
        // The generated CA signs approved client CSRs; it is a trusted client CA.
        let ca_key = data_dir.join("pki").join("ca.key");
        let duration = crate::csr::signer::DEFAULT_SIGNING_DURATION;
        signer = Some(crate::csr::signer::Signer::load(&up.pki.ca_cert_path, &ca_key, duration)?);
        let root_ca = Some(up.server_ca_pem.clone());
        (up.filters, server, root_ca)
    };
    let mut admission = args.admission.load().map_err(|e| anyhow::anyhow!(e))?;
    // Over plain HTTP there is no CA to publish in `kube-root-ca.crt` and no
    // authentication to present a token to: pods get no token volume unless
    // the plugin is asked for by name.
    if args.insecure && !args.admission.enable.iter().any(|p| p.trim() == crate::admission::SERVICE_ACCOUNT) {
        admission.service_account = false;
    }
    let metric_resolution = args.metrics.resolution()?;
    let config = ServerConfig { admission, kubelet_client, metric_resolution, ..ServerConfig::default() };
    tracing::info!(server = %server, data_dir = %data_dir.display(), "rkube is up");
    let printed = kubeconfig_path.display().to_string();
    serve_until_signal(listener, storage, config, &fargs, Identity { tokens, root_ca, signer }, local.ip(), move || {
        // The one line on stdout, printed once the server can answer.
        println!("export KUBECONFIG={printed}");
        use std::io::Write as _;
        let _ = std::io::stdout().flush();
        ready();
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;
    use clap::Parser;

    #[derive(Parser)]
    struct Up {
        #[command(flatten)]
        args: UpArgs,
    }

    fn parse(args: &[&str]) -> Result<UpArgs, clap::Error> {
        Up::try_parse_from(std::iter::once("up").chain(args.iter().copied())).map(|u| u.args)
    }

    #[test]
    fn up_is_secure_by_default() {
        let a = parse(&[]).unwrap();
        assert!(!a.insecure);
        assert_eq!(a.port, None);
        assert!(!a.filters.anonymous_auth);
        assert_eq!(a.filters.authorization_mode, vec!["RBAC".to_string()]);
        assert!(a.filters.tls_cert_file.is_none());
        assert_eq!(a.filters.max_requests_inflight, crate::filters::inflight::DEFAULT_MAX_REQUESTS_INFLIGHT);
        // The old opt-in flag is still accepted; --secure-port names the port.
        let a = parse(&["--secure", "--secure-port", "7443", "--token-auth-file", "t.csv"]).unwrap();
        assert_eq!(a.port, Some(7443));
        assert_eq!(a.filters.token_auth_file.as_deref(), Some(Path::new("t.csv")));
        let a = parse(&["--anonymous-auth", "--authorization-mode=AlwaysAllow"]).unwrap();
        assert!(a.filters.anonymous_auth);
        assert_eq!(a.filters.authorization_mode, vec!["AlwaysAllow".to_string()]);
    }

    #[test]
    fn up_insecure_rejects_access_control_flags() {
        assert!(parse(&["--insecure"]).unwrap().insecure);
        for flag in [
            "--token-auth-file=t.csv",
            "--client-ca-file=ca.crt",
            "--anonymous-auth",
            "--authorization-mode=RBAC",
            "--secure",
            "--tls-cert-file=s.crt",
            "--tls-private-key-file=s.key",
        ] {
            let err = parse(&["--insecure", flag]).err();
            assert_eq!(err.map(|e| e.kind()), Some(clap::error::ErrorKind::ArgumentConflict), "{flag}");
        }
    }

    #[test]
    fn up_takes_the_apiservers_operability_flags_also_with_insecure() {
        let argv = [
            "--audit-log-path=/tmp/audit.log",
            "--audit-policy-file=/tmp/policy.yaml",
            "--audit-log-maxsize=5",
            "--audit-log-maxbackup=2",
            "--audit-log-maxage=7",
            "--max-requests-inflight=10",
            "--max-mutating-requests-inflight=3",
            "--enable-priority-and-fairness=false",
            "--request-timeout=30s",
            "--min-request-timeout=900",
            "--request-trace-threshold=2s",
        ];
        for insecure in [false, true] {
            let mut args: Vec<&str> = argv.to_vec();
            if insecure {
                args.push("--insecure");
            }
            let f = parse(&args).unwrap().filters;
            assert_eq!(f.audit_log_path.as_deref(), Some("/tmp/audit.log"));
            assert_eq!(f.audit_policy_file.as_deref(), Some(Path::new("/tmp/policy.yaml")));
            assert_eq!((f.audit_log_maxsize, f.audit_log_maxbackup, f.audit_log_maxage), (5, 2, 7));
            assert_eq!((f.max_requests_inflight, f.max_mutating_requests_inflight), (10, 3));
            assert!(!f.enable_priority_and_fairness);
            assert_eq!((f.request_timeout.as_str(), f.min_request_timeout), ("30s", 900));
            assert_eq!(f.request_trace_threshold, "2s");
        }
    }

    #[derive(Parser)]
    struct Apiserver {
        #[command(flatten)]
        args: ApiserverArgs,
    }

    fn parse_apiserver(args: &[&str]) -> Result<ApiserverArgs, clap::Error> {
        Apiserver::try_parse_from(std::iter::once("apiserver").chain(args.iter().copied())).map(|a| a.args)
    }

    #[test]
    fn apiserver_signs_csrs_only_with_a_cluster_signing_cert_and_key() {
        let a = parse_apiserver(&[]).unwrap();
        assert_eq!(a.cluster_signing_duration, "8760h0m0s");
        assert!(apiserver_signer(&a).unwrap().is_none(), "no signer without the flags");
        for one in ["--cluster-signing-cert-file=ca.crt", "--cluster-signing-key-file=ca.key"] {
            let err = parse_apiserver(&[one]).err();
            assert_eq!(err.map(|e| e.kind()), Some(clap::error::ErrorKind::MissingRequiredArgument), "{one}");
        }
        let dir = tempfile::tempdir().unwrap();
        let pki = crate::filters::tls::generate_self_signed(dir.path()).unwrap();
        let key = dir.path().join("pki/ca.key");
        let cert_flag = format!("--cluster-signing-cert-file={}", pki.ca_cert_path.display());
        let key_flag = format!("--cluster-signing-key-file={}", key.display());
        let a = parse_apiserver(&[&cert_flag, &key_flag, "--cluster-signing-duration=2h"]).unwrap();
        let signer = apiserver_signer(&a).unwrap().expect("a signer");
        assert!(format!("{signer:?}").contains("duration: 7200s"), "{signer:?}");
        let a = parse_apiserver(&[&cert_flag, &key_flag, "--cluster-signing-duration=soon"]).unwrap();
        assert!(apiserver_signer(&a).is_err());
        let missing = format!("--cluster-signing-key-file={}", dir.path().join("nope.key").display());
        assert!(apiserver_signer(&parse_apiserver(&[&cert_flag, &missing]).unwrap()).is_err());
    }

    #[test]
    fn up_tls_cert_and_key_go_together() {
        let a = parse(&["--tls-cert-file=s.crt", "--tls-private-key-file=s.key"]).unwrap();
        assert_eq!(a.filters.tls_cert_file.as_deref(), Some(Path::new("s.crt")));
        for one in ["--tls-cert-file=s.crt", "--tls-private-key-file=s.key"] {
            let err = parse(&[one]).err();
            assert_eq!(err.map(|e| e.kind()), Some(clap::error::ErrorKind::MissingRequiredArgument), "{one}");
        }
    }
}
