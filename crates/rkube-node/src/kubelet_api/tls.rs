//! TLS of the kubelet API: the serving certificate (`--tls-cert-file`/`--tls-private-key-file`,
//! else a self-signed one in `<root-dir>/pki/kubelet.crt` and `kubelet.key`, generated once, as
//! kubelet does), client certificates checked against `--client-ca-file`, and a listener that
//! yields connections whose handshake finished, with the client's certificate chain.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::connect_info::Connected;
use axum::serve::{IncomingStream, Listener};
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{RootCertStore, ServerConfig};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn pem_err(path: &Path) -> impl Fn(rustls_pki_types::pem::Error) -> anyhow::Error + '_ {
    move |e| anyhow::anyhow!("{}: {e}", path.display())
}

/// Every certificate of a PEM file (error when there is none).
pub fn load_certs(path: &Path) -> anyhow::Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(pem_err(path))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(pem_err(path))?;
    anyhow::ensure!(!certs.is_empty(), "{}: no certificate", path.display());
    Ok(certs)
}

/// Writes a self-signed serving certificate and key for `names` (DNS names or IPs) unless both
/// files exist; returns their paths.
///
/// # Errors
/// The files cannot be written or the certificate cannot be generated.
pub fn ensure_self_signed(
    dir: &Path,
    names: &[String],
) -> anyhow::Result<(std::path::PathBuf, std::path::PathBuf)> {
    let (cert, key) = (dir.join("kubelet.crt"), dir.join("kubelet.key"));
    if cert.exists() && key.exists() {
        return Ok((cert, key));
    }
    std::fs::create_dir_all(dir)?;
    let pair = rcgen::KeyPair::generate()?;
    let mut params = rcgen::CertificateParams::new(names.to_vec())?;
    params.distinguished_name = rcgen::DistinguishedName::new();
    let cn = names.first().cloned().unwrap_or_else(|| "kubelet".into());
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, format!("{cn}@self-signed"));
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - time::Duration::hours(1);
    params.not_after = now + time::Duration::days(365);
    let signed = params.self_signed(&pair)?;
    std::fs::write(&cert, signed.pem())?;
    write_private(&key, &pair.serialize_pem())?;
    Ok((cert, key))
}

/// Writes a key file readable by its owner only.
pub fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(text.as_bytes())
}

/// The serving certificate of the kubelet API, replaceable while it serves: empty until a
/// certificate requested through the certificates API is issued (handshakes fail meanwhile,
/// as upstream kubelet's with `serverTLSBootstrap`), then that certificate.
#[derive(Debug)]
pub struct CertSlot {
    current: std::sync::RwLock<Option<Arc<CertifiedKey>>>,
    ready: tokio::sync::watch::Sender<bool>,
}

impl Default for CertSlot {
    fn default() -> Self {
        Self {
            current: std::sync::RwLock::new(None),
            ready: tokio::sync::watch::channel(false).0,
        }
    }
}

impl CertSlot {
    /// Serves the certificate chain of the PEM file `cert` with the key of the PEM file `key`
    /// (they may be one file) from now on.
    ///
    /// # Errors
    /// Unreadable files, or a key that does not match the certificate.
    pub fn load(&self, cert: &Path, key: &Path) -> anyhow::Result<()> {
        let chain = load_certs(cert)?;
        let key = PrivateKeyDer::from_pem_file(key).map_err(pem_err(key))?;
        let certified = CertifiedKey::from_der(chain, key, &provider())?;
        if let Ok(mut current) = self.current.write() {
            *current = Some(Arc::new(certified));
        }
        // `send_replace`, not `send`: `send` stores nothing while no receiver exists, and
        // `wait_ready` may subscribe only after the certificate is loaded.
        self.ready.send_replace(true);
        Ok(())
    }

    /// Waits (up to `limit`) until a certificate is served; false when none came.
    pub async fn wait_ready(&self, limit: Duration) -> bool {
        let mut rx = self.ready.subscribe();
        tokio::time::timeout(limit, rx.wait_for(|ready| *ready))
            .await
            .is_ok_and(|r| r.is_ok())
    }
}

impl ResolvesServerCert for CertSlot {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.current.read().ok()?.clone()
    }
}

/// The server config: the serving certificate of `slot`, and client certificates verified
/// against `client_ca` when given (optional for the client: a request without one falls through
/// to token or anonymous authentication; one that does not chain fails the handshake).
///
/// # Errors
/// An unreadable CA file.
pub fn server_config(
    slot: Arc<CertSlot>,
    client_ca: Option<&Path>,
) -> anyhow::Result<Arc<ServerConfig>> {
    let builder =
        ServerConfig::builder_with_provider(provider()).with_safe_default_protocol_versions()?;
    let mut cfg = match client_ca {
        Some(ca) => {
            let mut roots = RootCertStore::empty();
            for c in load_certs(ca)? {
                roots.add(c)?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
                .allow_unauthenticated()
                .build()?;
            builder
                .with_client_cert_verifier(verifier)
                .with_cert_resolver(slot)
        }
        None => builder.with_no_client_auth().with_cert_resolver(slot),
    };
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(cfg))
}

/// The connection a request came on (axum `ConnectInfo`).
#[derive(Clone, Debug)]
pub struct KubeletConn {
    /// The verified client certificate chain, leaf first.
    pub peer_certs: Option<Arc<Vec<CertificateDer<'static>>>>,
}

impl Connected<IncomingStream<'_, TlsListener>> for KubeletConn {
    fn connect_info(stream: IncomingStream<'_, TlsListener>) -> Self {
        let certs = stream
            .io()
            .get_ref()
            .1
            .peer_certificates()
            .map(|c| Arc::new(c.iter().map(|d| d.clone().into_owned()).collect()));
        KubeletConn { peer_certs: certs }
    }
}

/// How long a client may take to finish the TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// A listener yielding TLS connections whose handshake completed (handshakes run concurrently).
pub struct TlsListener {
    rx: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl TlsListener {
    /// Accepts on `listener` with `config`.
    ///
    /// # Errors
    /// The listener has no local address.
    pub fn new(listener: TcpListener, config: Arc<ServerConfig>) -> std::io::Result<Self> {
        let local = listener.local_addr()?;
        let acceptor = TlsAcceptor::from(config);
        let (tx, rx) = mpsc::channel(64);
        let task = tokio::spawn(async move {
            loop {
                let Ok((tcp, addr)) = listener.accept().await else {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                };
                let (acceptor, tx) = (acceptor.clone(), tx.clone());
                tokio::spawn(async move {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                        Ok(Ok(tls)) => {
                            let _ = tx.send((tls, addr)).await;
                        }
                        Ok(Err(e)) => {
                            tracing::debug!(peer = %addr, error = %e, "kubelet API TLS handshake failed")
                        }
                        Err(_) => {
                            tracing::debug!(peer = %addr, "kubelet API TLS handshake timed out")
                        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_certificate_loaded_before_anyone_waits_is_ready() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (cert, key) = ensure_self_signed(dir.path(), &["127.0.0.1".to_string()]).expect("self-signed");
        let slot = CertSlot::default();
        assert!(!slot.wait_ready(Duration::from_millis(10)).await, "nothing loaded yet");
        slot.load(&cert, &key).expect("load");
        assert!(slot.wait_ready(Duration::from_millis(10)).await, "loaded with no waiter subscribed");
    }
}
