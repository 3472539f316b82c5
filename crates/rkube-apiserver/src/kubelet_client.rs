//! The API server's client of kubelet APIs (upstream `pkg/kubelet/client`): HTTPS to the node's
//! address and kubelet port, authenticating with `--kubelet-client-certificate` and
//! `--kubelet-client-key`, and checking the kubelet's serving certificate against
//! `--kubelet-certificate-authority` when given (without it, as upstream, the kubelet's
//! certificate is not verified).

use std::path::PathBuf;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

use crate::filters::tls::{self, TlsError};

/// kubelet's default port (`--port`), used when a Node publishes none.
pub const DEFAULT_KUBELET_PORT: i32 = 10250;

/// The kubelet client flags of kube-apiserver.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct KubeletClientArgs {
    /// Client certificate (PEM) the API server presents to kubelets.
    #[arg(long = "kubelet-client-certificate", requires = "kubelet_client_key")]
    pub kubelet_client_certificate: Option<PathBuf>,
    /// Key of --kubelet-client-certificate.
    #[arg(long = "kubelet-client-key", requires = "kubelet_client_certificate")]
    pub kubelet_client_key: Option<PathBuf>,
    /// CA bundle that kubelet serving certificates must chain to (unverified without it).
    #[arg(long = "kubelet-certificate-authority")]
    pub kubelet_certificate_authority: Option<PathBuf>,
}

/// A configured HTTP client for kubelets. Cheap to clone.
#[derive(Clone, Debug)]
pub struct KubeletClient {
    /// The HTTP client (TLS as configured).
    pub http: reqwest::Client,
}

/// Accepts any serving certificate (signatures of the handshake are still checked): what
/// upstream does without `--kubelet-certificate-authority`.
#[derive(Debug)]
struct UnverifiedServer(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for UnverifiedServer {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

impl KubeletClient {
    /// A client from the flags.
    ///
    /// # Errors
    /// A file cannot be read or holds no usable certificate or key.
    pub fn from_args(args: &KubeletClientArgs) -> Result<Self, TlsError> {
        let provider = tls::provider();
        let builder = rustls::ClientConfig::builder_with_provider(Arc::clone(&provider)).with_safe_default_protocol_versions()?;
        let builder = match &args.kubelet_certificate_authority {
            Some(ca) => {
                let mut roots = rustls::RootCertStore::empty();
                for c in tls::load_certs(ca)? {
                    roots.add(c).map_err(|e| TlsError::ClientCa(e.to_string()))?;
                }
                builder.with_root_certificates(roots)
            }
            None => builder.dangerous().with_custom_certificate_verifier(Arc::new(UnverifiedServer(provider))),
        };
        let config = match (&args.kubelet_client_certificate, &args.kubelet_client_key) {
            (Some(cert), Some(key)) => builder.with_client_auth_cert(tls::load_certs(cert)?, tls::load_key(key)?)?,
            _ => builder.with_no_client_auth(),
        };
        let http = reqwest::Client::builder()
            .use_preconfigured_tls(config)
            .build()
            .map_err(|e| TlsError::ClientCa(format!("kubelet client: {e}")))?;
        Ok(Self { http })
    }
}
