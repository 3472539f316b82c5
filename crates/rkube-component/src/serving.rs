//! The health and metrics server of a component (upstream's
//! `component-base` secure serving and `apiserver/pkg/server/healthz`):
//! `/healthz`, `/livez`, `/readyz` (each also per check, `/healthz/<name>`)
//! and `/metrics` (Prometheus text from a prometheus-client registry).
//!
//! Served over HTTPS on `--bind-address`:`--secure-port` (kube-scheduler
//! 10259, kube-controller-manager 10257; 0 turns serving off) with
//! `--tls-cert-file`/`--tls-private-key-file`, or else a self-signed
//! certificate for `localhost` generated at start, as upstream does when no
//! certificate is given. Unlike upstream, `/metrics` is not behind delegated
//! authentication and authorization.
//!
//! A health endpoint answers `ok` when every check passes; otherwise 500 with
//! one line per check (`[+]ping ok`, `[-]leaderElection failed: reason
//! withheld`) and `healthz check failed` (upstream's text; the reason is
//! logged, not served). `?verbose` lists the checks on success too.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;
use axum::extract::{Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use prometheus_client::registry::Registry;
use rkube_apiserver::filters::tls;
/// A serving certificate chain and key (rkube-apiserver's).
pub use rkube_apiserver::filters::tls::TlsConfig;
use tokio::sync::oneshot;

/// kube-scheduler's default `--secure-port`.
pub const SCHEDULER_PORT: u16 = 10259;
/// kube-controller-manager's default `--secure-port`.
pub const CONTROLLER_MANAGER_PORT: u16 = 10257;

/// Secure serving flags of kube-scheduler and kube-controller-manager.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct ServingArgs {
    /// The IP address on which to listen for the --secure-port port. The associated
    /// interface(s) must be reachable by the rest of the cluster. If blank or an
    /// unspecified address (0.0.0.0 or ::), all interfaces will be used.
    #[arg(long = "bind-address")]
    pub bind_address: Option<IpAddr>,
    /// The port on which to serve HTTPS with authentication and authorization. If 0, don't
    /// serve HTTPS at all (default: 10259 for the scheduler, 10257 for the controller manager).
    #[arg(long = "secure-port")]
    pub secure_port: Option<u16>,
    /// File containing the default x509 Certificate for HTTPS. If not provided, a
    /// self-signed certificate is generated for localhost.
    #[arg(long = "tls-cert-file", requires = "tls_private_key_file")]
    pub tls_cert_file: Option<PathBuf>,
    /// File containing the default x509 private key matching --tls-cert-file.
    #[arg(long = "tls-private-key-file", requires = "tls_cert_file")]
    pub tls_private_key_file: Option<PathBuf>,
}

impl ServingArgs {
    /// The address to serve on (`None` with `--secure-port=0`);
    /// `default_port` is the component's.
    pub fn address(&self, default_port: u16) -> Option<SocketAddr> {
        let port = self.secure_port.unwrap_or(default_port);
        (port != 0).then(|| SocketAddr::new(self.bind_address.unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED)), port))
    }

    /// The serving certificate: the files given, or a self-signed one.
    pub fn certificate(&self) -> anyhow::Result<TlsConfig> {
        match (&self.tls_cert_file, &self.tls_private_key_file) {
            (Some(cert), Some(key)) => Ok(TlsConfig::load(cert, key)?),
            _ => self_signed(),
        }
    }
}

/// A self-signed serving certificate for `localhost`, `127.0.0.1` and `::1`
/// (upstream: `localhost@<unix time>` from `GenerateSelfSignedCertKey`).
pub fn self_signed() -> anyhow::Result<TlsConfig> {
    let names = vec!["localhost".to_string(), "127.0.0.1".to_string(), "::1".to_string()];
    let cert = rcgen::generate_simple_self_signed(names).context("generating a self-signed serving certificate")?;
    let key = rustls_pki_types::PrivateKeyDer::Pkcs8(cert.signing_key.serialize_der().into());
    Ok(TlsConfig { cert_chain: vec![cert.cert.der().clone()], key })
}

/// A named health check: `Err(reason)` when failing.
#[derive(Clone)]
pub struct HealthCheck {
    /// The check's name (`leaderElection`), also its path `/healthz/<name>`.
    pub name: String,
    /// Runs the check.
    pub check: Arc<dyn Fn() -> Result<(), String> + Send + Sync>,
}

impl HealthCheck {
    /// A check named `name`.
    pub fn new(name: &str, check: impl Fn() -> Result<(), String> + Send + Sync + 'static) -> Self {
        HealthCheck { name: name.to_string(), check: Arc::new(check) }
    }
}

impl std::fmt::Debug for HealthCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HealthCheck").field("name", &self.name).finish_non_exhaustive()
    }
}

#[derive(Clone)]
struct Endpoints {
    checks: Arc<Vec<HealthCheck>>,
    registry: Arc<Registry>,
}

/// The body and code of `/<endpoint>` (`healthz`, `livez`, `readyz`).
pub fn health_response(endpoint: &str, checks: &[HealthCheck], verbose: bool) -> (StatusCode, String) {
    let mut lines = vec!["[+]ping ok".to_string()];
    let mut failed = false;
    for c in checks {
        match (c.check)() {
            Ok(()) => lines.push(format!("[+]{} ok", c.name)),
            Err(reason) => {
                tracing::warn!(check = %c.name, %reason, "{endpoint} check failed");
                failed = true;
                lines.push(format!("[-]{} failed: reason withheld", c.name));
            }
        }
    }
    if failed {
        (StatusCode::INTERNAL_SERVER_ERROR, format!("{}\n{endpoint} check failed\n", lines.join("\n")))
    } else if verbose {
        (StatusCode::OK, format!("{}\n{endpoint} check passed\n", lines.join("\n")))
    } else {
        (StatusCode::OK, "ok".to_string())
    }
}

fn text(code: StatusCode, body: String) -> Response {
    (code, [(header::CONTENT_TYPE, "text/plain; charset=utf-8"), (header::X_CONTENT_TYPE_OPTIONS, "nosniff")], body)
        .into_response()
}

async fn all(endpoint: &'static str, e: Endpoints, q: HashMap<String, String>) -> Response {
    let (code, body) = health_response(endpoint, &e.checks, q.contains_key("verbose"));
    text(code, body)
}

async fn one(e: Endpoints, name: String) -> Response {
    if name == "ping" {
        return text(StatusCode::OK, "ok".into());
    }
    match e.checks.iter().find(|c| c.name == name) {
        None => text(StatusCode::NOT_FOUND, "404 page not found\n".into()),
        Some(c) => match (c.check)() {
            Ok(()) => text(StatusCode::OK, "ok".into()),
            Err(reason) => text(StatusCode::INTERNAL_SERVER_ERROR, format!("internal server error: {reason}\n")),
        },
    }
}

async fn metrics(State(e): State<Endpoints>) -> Response {
    let mut body = String::new();
    match prometheus_client::encoding::text::encode(&mut body, &e.registry) {
        Ok(()) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")],
            body,
        )
            .into_response(),
        Err(err) => text(StatusCode::INTERNAL_SERVER_ERROR, format!("encoding metrics: {err}\n")),
    }
}

/// The routes, for tests and [`serve`].
pub fn router(checks: Vec<HealthCheck>, registry: Arc<Registry>) -> Router {
    let state = Endpoints { checks: Arc::new(checks), registry };
    let mut r = Router::new();
    for endpoint in ["healthz", "livez", "readyz"] {
        r = r
            .route(
                &format!("/{endpoint}"),
                get(move |State(e): State<Endpoints>, Query(q): Query<HashMap<String, String>>| all(endpoint, e, q)),
            )
            .route(
                &format!("/{endpoint}/{{name}}"),
                get(|State(e): State<Endpoints>, Path(name): Path<String>| one(e, name)),
            );
    }
    r.route("/metrics", get(metrics)).with_state(state)
}

/// A running health and metrics server; stops when dropped or [`Serving::shutdown`].
#[derive(Debug)]
pub struct Serving {
    /// The bound address (the real port when 0 was asked).
    pub addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl Serving {
    /// Stops serving and waits for the server task.
    pub async fn shutdown(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        let _ = (&mut self.task).await;
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

/// Binds `addr` (port 0: any free port) and serves [`router`] over HTTPS
/// with `cert`. Errors: the address cannot be bound or the certificate is
/// unusable.
pub async fn serve(addr: SocketAddr, cert: TlsConfig, checks: Vec<HealthCheck>, registry: Arc<Registry>) -> anyhow::Result<Serving> {
    let listener = tokio::net::TcpListener::bind(addr).await.with_context(|| format!("binding {addr}"))?;
    let addr = listener.local_addr()?;
    let config = tls::server_config(&cert, None)?;
    let (stop, rx) = oneshot::channel();
    let app = router(checks, registry);
    let task = tokio::spawn(async move {
        if let Err(e) = tls::serve(listener, app, Some(config), async move {
            let _ = rx.await;
        })
        .await
        {
            tracing::warn!(error = %e, "health server failed");
        }
    });
    tracing::info!(%addr, "serving securely (/healthz, /livez, /readyz, /metrics)");
    Ok(Serving { addr, stop: Some(stop), task })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failing_check_lists_checks_and_withholds_the_reason() {
        let checks = vec![HealthCheck::new("leaderElection", || Err("lost".into()))];
        let (code, body) = health_response("healthz", &checks, false);
        assert_eq!(code, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(body, "[+]ping ok\n[-]leaderElection failed: reason withheld\nhealthz check failed\n");
        let ok = vec![HealthCheck::new("leaderElection", || Ok(()))];
        assert_eq!(health_response("readyz", &ok, false), (StatusCode::OK, "ok".into()));
        assert_eq!(
            health_response("livez", &ok, true).1,
            "[+]ping ok\n[+]leaderElection ok\nlivez check passed\n"
        );
    }

    #[test]
    fn secure_port_zero_disables_serving_and_defaults_are_upstreams() {
        let a = ServingArgs::default();
        assert_eq!(a.address(SCHEDULER_PORT), Some("0.0.0.0:10259".parse().unwrap()));
        let off = ServingArgs { secure_port: Some(0), ..ServingArgs::default() };
        assert_eq!(off.address(CONTROLLER_MANAGER_PORT), None);
        assert!(self_signed().is_ok());
    }
}
