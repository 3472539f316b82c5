//! HTTPS: serving certificates (`--tls-cert-file`, `--tls-private-key-file`),
//! client certificates (`--client-ca-file`), a self-signed PKI for `rkube up`,
//! and [`serve`], which serves a router over plain HTTP or TLS with the
//! connection's peer address and client certificates available to the filters
//! ([`ConnInfo`]). Request heads must arrive within [`READ_HEADER_TIMEOUT`]
//! (upstream's `ReadHeaderTimeout`), so a slow client cannot hold a
//! connection open forever.
//!
//! rustls with the ring provider only. With a client CA the server asks for
//! a client certificate but does not require one, and does not reject a bad
//! one during the handshake: the authentication filter verifies the chain and
//! answers 401, as kube-apiserver does (its TLS layer uses
//! `RequestClientCert`). The handshake still proves the client holds the
//! certificate's key.
//!
//! [`generate_self_signed`] writes, in `<data-dir>/pki/`, a CA (`ca.crt`,
//! `ca.key`), a serving certificate for `localhost`, `127.0.0.1`, `::1` and
//! `kubernetes.default.svc` (`apiserver.crt`, `apiserver.key`) and an admin
//! client certificate (`CN=rkube-admin`, `O=system:masters`; `admin.crt`,
//! `admin.key`), reusing them when all six files exist;
//! [`write_kubeconfig`] writes a kubeconfig that trusts the CA and uses the
//! admin certificate.

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::connect_info::Connected;
use axum::extract::ConnectInfo;
use axum::serve::{IncomingStream, Listener};
use axum::Router;
use base64::Engine as _;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use rustls::crypto::CryptoProvider;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ServerConfig, WebPkiClientVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, RootCertStore, SignatureScheme};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt as _;

/// Errors of TLS setup.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A PEM file could not be read or decoded.
    #[error("reading {path}: {message}")]
    Pem {
        /// The file.
        path: String,
        /// Why.
        message: String,
    },
    /// A certificate file held no certificate.
    #[error("{0}: no certificate found")]
    NoCertificate(String),
    /// rustls rejected the configuration (e.g. key does not match the certificate).
    #[error("TLS configuration: {0}")]
    Rustls(#[from] rustls::Error),
    /// The client CA could not be used.
    #[error("client CA: {0}")]
    ClientCa(String),
    /// Only one of `--tls-cert-file` and `--tls-private-key-file` was given.
    #[error("--tls-cert-file and --tls-private-key-file must be given together")]
    Incomplete,
    /// Generating certificates failed.
    #[error("generating certificates: {0}")]
    Generate(#[from] rcgen::Error),
    /// Writing a file failed.
    #[error("writing {path}: {source}")]
    Write {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
}

/// The crypto provider of every rkube TLS config (ring).
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Reads every certificate of a PEM file.
pub fn load_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem_err = |e: rustls_pki_types::pem::Error| TlsError::Pem { path: path.display().to_string(), message: e.to_string() };
    let certs = CertificateDer::pem_file_iter(path).map_err(pem_err)?.collect::<Result<Vec<_>, _>>().map_err(pem_err)?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate(path.display().to_string()));
    }
    Ok(certs)
}

/// Reads the first private key (PKCS#8, PKCS#1 or SEC1) of a PEM file.
pub fn load_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| TlsError::Pem { path: path.display().to_string(), message: e.to_string() })
}

/// A serving certificate and key.
#[derive(Debug)]
pub struct TlsConfig {
    /// The certificate chain, leaf first.
    pub cert_chain: Vec<CertificateDer<'static>>,
    /// The private key.
    pub key: PrivateKeyDer<'static>,
}

impl Clone for TlsConfig {
    fn clone(&self) -> Self {
        TlsConfig { cert_chain: self.cert_chain.clone(), key: self.key.clone_key() }
    }
}

impl TlsConfig {
    /// Reads `--tls-cert-file` and `--tls-private-key-file`.
    pub fn load(cert_file: &Path, key_file: &Path) -> Result<Self, TlsError> {
        Ok(TlsConfig { cert_chain: load_certs(cert_file)?, key: load_key(key_file)? })
    }
}

/// A verifier of client certificates against the CA certificates of
/// `--client-ca-file` (that also accepts clients without one).
pub fn client_verifier(ca_certs: &[CertificateDer<'static>]) -> Result<Arc<dyn ClientCertVerifier>, TlsError> {
    let mut roots = RootCertStore::empty();
    for c in ca_certs {
        roots.add(c.clone()).map_err(|e| TlsError::ClientCa(e.to_string()))?;
    }
    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
        .allow_unauthenticated()
        .build()
        .map_err(|e| TlsError::ClientCa(e.to_string()))
}

/// Requests client certificates and checks the handshake signature, but
/// leaves the chain check to the authentication filter (so a bad certificate
/// is a 401, not a failed handshake).
#[derive(Debug)]
struct DeferredClientVerifier {
    inner: Arc<dyn ClientCertVerifier>,
}

impl ClientCertVerifier for DeferredClientVerifier {
    fn offer_client_auth(&self) -> bool {
        true
    }
    fn client_auth_mandatory(&self) -> bool {
        false
    }
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }
    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// The rustls server config for `tls`, asking for client certificates when
/// `client_ca` is given (see the module docs); ALPN `h2`, `http/1.1`.
pub fn server_config(tls: &TlsConfig, client_ca: Option<Arc<dyn ClientCertVerifier>>) -> Result<Arc<ServerConfig>, TlsError> {
    let builder = ServerConfig::builder_with_provider(provider()).with_safe_default_protocol_versions()?;
    let mut cfg = match client_ca {
        Some(inner) => builder
            .with_client_cert_verifier(Arc::new(DeferredClientVerifier { inner }))
            .with_single_cert(tls.cert_chain.clone(), tls.key.clone_key())?,
        None => builder.with_no_client_auth().with_single_cert(tls.cert_chain.clone(), tls.key.clone_key())?,
    };
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(cfg))
}

/// The self-signed PKI of `rkube up` (see the module docs). Paths are absolute
/// when `data_dir` is.
#[derive(Debug, Clone)]
pub struct Pki {
    /// `<data-dir>/pki/ca.crt`: pass as `--client-ca-file`, trust as the server CA.
    pub ca_cert_path: PathBuf,
    /// `<data-dir>/pki/apiserver.crt`: `--tls-cert-file`.
    pub serving_cert_path: PathBuf,
    /// `<data-dir>/pki/apiserver.key`: `--tls-private-key-file`.
    pub serving_key_path: PathBuf,
    /// `<data-dir>/pki/admin.crt`.
    pub admin_cert_path: PathBuf,
    /// `<data-dir>/pki/admin.key`.
    pub admin_key_path: PathBuf,
    /// The CA certificate (PEM).
    pub ca_cert_pem: String,
    /// The admin client certificate (PEM).
    pub admin_cert_pem: String,
    /// The admin client key (PEM, PKCS#8).
    pub admin_key_pem: String,
}

impl Pki {
    /// The serving certificate and key.
    pub fn tls_config(&self) -> Result<TlsConfig, TlsError> {
        TlsConfig::load(&self.serving_cert_path, &self.serving_key_path)
    }

    /// The CA certificates, for [`client_verifier`].
    pub fn ca_certs(&self) -> Result<Vec<CertificateDer<'static>>, TlsError> {
        load_certs(&self.ca_cert_path)
    }
}

/// Admin client certificate subject.
pub const ADMIN_USER: &str = "rkube-admin";

fn write_file(path: &Path, contents: &str, private: bool) -> Result<(), TlsError> {
    let err = |source| TlsError::Write { path: path.display().to_string(), source };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(err)?;
    }
    let tmp = path.with_extension("tmp");
    {
        use std::io::Write as _;
        let mut opts = std::fs::OpenOptions::new();
        opts.write(true).create(true).truncate(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            opts.mode(if private { 0o600 } else { 0o644 });
        }
        let mut f = opts.open(&tmp).map_err(err)?;
        f.write_all(contents.as_bytes()).map_err(err)?;
        f.sync_all().map_err(err)?;
    }
    std::fs::rename(&tmp, path).map_err(err)
}

fn validity(params: &mut rcgen::CertificateParams, years: i32) {
    use chrono::Datelike;
    let year = chrono::Utc::now().year();
    params.not_before = rcgen::date_time_ymd(year - 1, 1, 1);
    params.not_after = rcgen::date_time_ymd(year + years, 1, 1);
}

/// Creates (or reuses) the PKI of `rkube up` under `<data_dir>/pki`.
pub fn generate_self_signed(data_dir: &Path) -> Result<Pki, TlsError> {
    use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose};
    let dir = data_dir.join("pki");
    let p = |n: &str| dir.join(n);
    let paths = ["ca.crt", "ca.key", "apiserver.crt", "apiserver.key", "admin.crt", "admin.key"];
    let reusable = paths.iter().all(|n| p(n).is_file())
        && load_certs(&p("ca.crt")).is_ok()
        && TlsConfig::load(&p("apiserver.crt"), &p("apiserver.key")).is_ok()
        && TlsConfig::load(&p("admin.crt"), &p("admin.key")).is_ok();
    if !reusable {
        let ca_key = KeyPair::generate()?;
        let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
        ca_params.distinguished_name = rcgen::DistinguishedName::new();
        ca_params.distinguished_name.push(DnType::CommonName, "rkube-ca");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
        validity(&mut ca_params, 10);
        let ca_cert = ca_params.self_signed(&ca_key)?;
        let issuer = Issuer::new(ca_params, &ca_key);

        let serving_key = KeyPair::generate()?;
        let mut sp = CertificateParams::new(vec![
            "localhost".to_string(),
            "kubernetes".to_string(),
            "kubernetes.default".to_string(),
            "kubernetes.default.svc".to_string(),
            "127.0.0.1".to_string(),
            "::1".to_string(),
        ])?;
        sp.distinguished_name = rcgen::DistinguishedName::new();
        sp.distinguished_name.push(DnType::CommonName, "kube-apiserver");
        sp.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
        sp.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        sp.use_authority_key_identifier_extension = true;
        validity(&mut sp, 10);
        let serving = sp.signed_by(&serving_key, &issuer)?;

        let admin_key = KeyPair::generate()?;
        let mut ap = CertificateParams::new(Vec::<String>::new())?;
        ap.distinguished_name = rcgen::DistinguishedName::new();
        ap.distinguished_name.push(DnType::OrganizationName, crate::filters::authn::MASTERS_GROUP);
        ap.distinguished_name.push(DnType::CommonName, ADMIN_USER);
        ap.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
        ap.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        ap.use_authority_key_identifier_extension = true;
        validity(&mut ap, 10);
        let admin = ap.signed_by(&admin_key, &issuer)?;

        write_file(&p("ca.key"), &ca_key.serialize_pem(), true)?;
        write_file(&p("apiserver.key"), &serving_key.serialize_pem(), true)?;
        write_file(&p("admin.key"), &admin_key.serialize_pem(), true)?;
        write_file(&p("apiserver.crt"), &serving.pem(), false)?;
        write_file(&p("admin.crt"), &admin.pem(), false)?;
        // The CA certificate last: its presence with the others marks a complete set.
        write_file(&p("ca.crt"), &ca_cert.pem(), false)?;
    }
    let read = |n: &str| {
        std::fs::read_to_string(p(n)).map_err(|e| TlsError::Pem { path: p(n).display().to_string(), message: e.to_string() })
    };
    Ok(Pki {
        ca_cert_path: p("ca.crt"),
        serving_cert_path: p("apiserver.crt"),
        serving_key_path: p("apiserver.key"),
        admin_cert_path: p("admin.crt"),
        admin_key_path: p("admin.key"),
        ca_cert_pem: read("ca.crt")?,
        admin_cert_pem: read("admin.crt")?,
        admin_key_pem: read("admin.key")?,
    })
}

/// Writes a kubeconfig for `server_url` (e.g. `https://127.0.0.1:6443`) that
/// trusts the PKI's CA and authenticates with its admin certificate; cluster,
/// user and context are all named `rkube` (namespace `default`). Mode 0600.
pub fn write_kubeconfig(path: &Path, server_url: &str, pki: &Pki) -> Result<(), TlsError> {
    write_file(path, &render_kubeconfig(server_url, Some(pki)), true)
}

/// The text of the kubeconfig `rkube up` writes: cluster, user and context
/// all named `rkube` (namespace `default`); with `pki`, the cluster trusts
/// its CA and the user authenticates with its admin certificate, else the
/// user has no credentials.
pub(crate) fn render_kubeconfig(server_url: &str, pki: Option<&Pki>) -> String {
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s.as_bytes());
    let (ca, user) = match pki {
        Some(pki) => (
            format!("    certificate-authority-data: {}\n", b64(&pki.ca_cert_pem)),
            format!(
                "\n    client-certificate-data: {}\n    client-key-data: {}",
                b64(&pki.admin_cert_pem),
                b64(&pki.admin_key_pem)
            ),
        ),
        None => (String::new(), " {}".to_string()),
    };
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: rkube\n  cluster:\n    server: {server_url}\n{ca}users:\n- name: rkube\n  user:{user}\ncontexts:\n- name: rkube\n  context:\n    cluster: rkube\n    user: rkube\n    namespace: default\ncurrent-context: rkube\npreferences: {{}}\n"
    )
}

/// What the filters know about the connection a request came on; axum's
/// `ConnectInfo<ConnInfo>` request extension, set by [`serve`].
#[derive(Debug, Clone)]
pub struct ConnInfo {
    /// The peer's address.
    pub remote_addr: SocketAddr,
    /// The client certificate chain (leaf first) presented in the TLS handshake.
    pub peer_certs: Option<Arc<Vec<CertificateDer<'static>>>>,
}

impl Connected<IncomingStream<'_, TcpListener>> for ConnInfo {
    fn connect_info(stream: IncomingStream<'_, TcpListener>) -> Self {
        ConnInfo { remote_addr: *stream.remote_addr(), peer_certs: None }
    }
}

impl Connected<IncomingStream<'_, TlsListener>> for ConnInfo {
    fn connect_info(stream: IncomingStream<'_, TlsListener>) -> Self {
        let certs = stream.io().get_ref().1.peer_certificates().map(|c| Arc::new(c.iter().map(|d| d.clone().into_owned()).collect()));
        ConnInfo { remote_addr: *stream.remote_addr(), peer_certs: certs }
    }
}

/// How long a client may take to finish the TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// A listener yielding TLS connections whose handshake completed; handshakes
/// run concurrently, so a slow client never delays others.
pub struct TlsListener {
    rx: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl TlsListener {
    /// Accepts on `listener` with `config`.
    pub fn new(listener: TcpListener, config: Arc<ServerConfig>) -> std::io::Result<Self> {
        let local = listener.local_addr()?;
        let acceptor = TlsAcceptor::from(config);
        let (tx, rx) = mpsc::channel(64);
        let task = tokio::spawn(async move {
            loop {
                let (tcp, addr) = match listener.accept().await {
                    Ok(c) => c,
                    Err(e) => {
                        tracing::warn!(error = %e, "accepting a connection");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                let _ = tcp.set_nodelay(true);
                let (acceptor, tx) = (acceptor.clone(), tx.clone());
                tokio::spawn(async move {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                        Ok(Ok(tls)) => {
                            let _ = tx.send((tls, addr)).await;
                        }
                        Ok(Err(e)) => tracing::debug!(peer = %addr, error = %e, "TLS handshake failed"),
                        Err(_) => tracing::debug!(peer = %addr, "TLS handshake timed out"),
                    }
                });
            }
        });
        Ok(TlsListener { rx, local, task })
    }
}

impl Drop for TlsListener {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.rx.recv().await {
            Some(c) => c,
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local)
    }
}

/// How long a client may take to send a request's line and headers (HTTP/1)
/// before the connection is closed; upstream kube-apiserver sets Go's
/// `http.Server.ReadHeaderTimeout` to 32 s (`SecureServingInfo.Serve` in
/// `k8s.io/apiserver/pkg/server/secure_serving.go`). hyper starts the clock
/// whenever it waits for a request head, so an idle keep-alive connection is
/// closed after this long as well.
pub const READ_HEADER_TIMEOUT: Duration = Duration::from_secs(32);

/// Connection settings of [`serve_with`]; `Default` is the production values.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// How long a client may take to send a request head before the
    /// connection is closed ([`READ_HEADER_TIMEOUT`]; tests shorten it).
    pub header_read_timeout: Duration,
    /// How long a response write may wait for the client to read before the
    /// connection is closed ([`super::write_stall::WRITE_STALL_TIMEOUT`];
    /// zero disables; tests shorten it).
    pub write_stall_timeout: Duration,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions { header_read_timeout: READ_HEADER_TIMEOUT, write_stall_timeout: super::write_stall::WRITE_STALL_TIMEOUT }
    }
}

/// Serves `router` on `listener` until `shutdown` completes (then waits for
/// open requests), over TLS when `tls` is given, else plain HTTP, with the
/// default [`ServeOptions`]. Requests carry `ConnectInfo<`[`ConnInfo`]`>`.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    tls: Option<Arc<ServerConfig>>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_with(listener, router, tls, ServeOptions::default(), shutdown).await
}

/// [`serve`] with explicit [`ServeOptions`]. Plain HTTP is HTTP/1.1 only (as
/// Go's server without h2c); over TLS the ALPN result picks HTTP/2 (`h2`) or
/// HTTP/1.1. HTTP/1 connections support upgrades and close when a request
/// head takes longer than `opts.header_read_timeout`; any connection closes
/// when a write waits on the client longer than `opts.write_stall_timeout`
/// ([`super::write_stall`]). On shutdown no new
/// connection is accepted, every open one is shut down gracefully (idle ones
/// close, in-flight requests finish) and this returns when all are closed.
pub async fn serve_with(
    listener: TcpListener,
    router: Router,
    tls: Option<Arc<ServerConfig>>,
    opts: ServeOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    match tls {
        None => {
            let info = |tcp: &TcpStream, addr: SocketAddr| {
                let _ = tcp;
                (ConnInfo { remote_addr: addr, peer_certs: None }, false)
            };
            accept_loop(listener, router, opts, shutdown, info).await;
        }
        Some(cfg) => {
            let info = |tls: &TlsStream<TcpStream>, addr: SocketAddr| {
                let session = tls.get_ref().1;
                let certs = session.peer_certificates().map(|c| Arc::new(c.iter().map(|d| d.clone().into_owned()).collect()));
                (ConnInfo { remote_addr: addr, peer_certs: certs }, session.alpn_protocol() == Some(b"h2"))
            };
            accept_loop(TlsListener::new(listener, cfg)?, router, opts, shutdown, info).await;
        }
    }
    Ok(())
}

/// Accepts connections until `shutdown`, serving each on its own task; `info`
/// gives a connection's [`ConnInfo`] and whether it speaks HTTP/2. Returns
/// once every connection task ended.
async fn accept_loop<L, F>(mut listener: L, router: Router, opts: ServeOptions, shutdown: impl Future<Output = ()> + Send + 'static, info: F)
where
    L: Listener<Addr = SocketAddr>,
    F: Fn(&L::Io, SocketAddr) -> (ConnInfo, bool),
{
    // Dropping `stop_rx` tells connection tasks to shut down; each task holds
    // a `done_rx` clone, so `done_tx.closed()` resolves when all ended.
    let (stop_tx, stop_rx) = watch::channel(());
    tokio::spawn(async move {
        shutdown.await;
        drop(stop_rx);
    });
    let (done_tx, done_rx) = watch::channel(());
    let mut http1 = hyper::server::conn::http1::Builder::new();
    http1.timer(TokioTimer::new()).header_read_timeout(opts.header_read_timeout);
    let mut http2 = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
    http2.timer(TokioTimer::new()).enable_connect_protocol();
    let router = router.layer(axum::middleware::from_fn(super::body::complete_http2_answers));
    loop {
        let (io, addr) = tokio::select! {
            conn = listener.accept() => conn,
            _ = stop_tx.closed() => break,
        };
        let (conn_info, is_h2) = info(&io, addr);
        let service = TowerToHyperService::new(router.clone().map_request(move |mut req: axum::extract::Request<Incoming>| {
            req.extensions_mut().insert(ConnectInfo(conn_info.clone()));
            req
        }));
        let (stop, done) = (stop_tx.clone(), done_rx.clone());
        let io = super::write_stall::WriteStallGuard::new(io, opts.write_stall_timeout);
        if is_h2 {
            let conn = http2.serve_connection(TokioIo::new(io), service);
            tokio::spawn(drive(conn, stop, done, addr, |c| c.graceful_shutdown()));
        } else {
            // hyper's 414 gets a Status body (see `uri_too_long`).
            let io = TokioIo::new(super::uri_too_long::StatusOn414::new(io));
            let conn = http1.serve_connection(io, service).with_upgrades();
            tokio::spawn(drive(conn, stop, done, addr, |c| c.graceful_shutdown()));
        }
    }
    drop(done_rx);
    drop(listener);
    done_tx.closed().await;
}

/// Runs one connection to its end, shutting it down gracefully (with
/// `graceful`) once `stop` has no receiver left; drops `done` at the end.
async fn drive<C>(conn: C, stop: watch::Sender<()>, done: watch::Receiver<()>, peer: SocketAddr, graceful: fn(Pin<&mut C>))
where
    C: Future<Output = Result<(), hyper::Error>>,
{
    let mut conn = std::pin::pin!(conn);
    let mut stopping = std::pin::pin!(stop.closed());
    let mut draining = false;
    loop {
        tokio::select! {
            res = conn.as_mut() => {
                if let Err(e) = res {
                    tracing::debug!(peer = %peer, error = %e, "connection ended");
                }
                break;
            }
            _ = &mut stopping, if !draining => {
                draining = true;
                graceful(conn.as_mut());
            }
        }
    }
    drop(done);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pki_is_generated_once_and_reused() {
        let dir = tempfile::tempdir().unwrap();
        let a = generate_self_signed(dir.path()).unwrap();
        let b = generate_self_signed(dir.path()).unwrap();
        assert_eq!(a.ca_cert_pem, b.ca_cert_pem, "reused, not regenerated");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&a.admin_key_path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let admin = load_certs(&a.admin_cert_path).unwrap();
        let subject = crate::filters::x509::subject(admin[0].as_ref()).unwrap();
        assert_eq!(subject.common_name, ADMIN_USER);
        assert_eq!(subject.organizations, vec!["system:masters".to_string()]);
        // The admin certificate chains to the CA.
        let v = client_verifier(&a.ca_certs().unwrap()).unwrap();
        v.verify_client_cert(&admin[0], &[], UnixTime::now()).unwrap();
        // And the serving pair makes a server config.
        server_config(&a.tls_config().unwrap(), Some(v)).unwrap();
    }

    #[test]
    fn kubeconfig_embeds_ca_and_client_credentials() {
        let dir = tempfile::tempdir().unwrap();
        let pki = generate_self_signed(dir.path()).unwrap();
        let path = dir.path().join("kubeconfig");
        write_kubeconfig(&path, "https://127.0.0.1:6443", &pki).unwrap();
        let v: serde_yaml::Value = serde_yaml::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(v["clusters"][0]["cluster"]["server"].as_str(), Some("https://127.0.0.1:6443"));
        let ca = v["clusters"][0]["cluster"]["certificate-authority-data"].as_str().unwrap();
        let ca = base64::engine::general_purpose::STANDARD.decode(ca).unwrap();
        assert_eq!(String::from_utf8(ca).unwrap(), pki.ca_cert_pem);
        assert!(v["users"][0]["user"]["client-key-data"].as_str().is_some());
        assert_eq!(v["current-context"].as_str(), Some("rkube"));
    }

    #[test]
    fn missing_or_mismatched_files_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(load_certs(&dir.path().join("nope.crt")), Err(TlsError::Pem { .. })));
        std::fs::write(dir.path().join("empty.crt"), "").unwrap();
        assert!(matches!(load_certs(&dir.path().join("empty.crt")), Err(TlsError::NoCertificate(_))));
    }
}
