//! The kubelet API's serving certificate requested through the certificates API (kubelet's
//! `--rotate-server-certificates` / `serverTLSBootstrap`; upstream
//! `pkg/kubelet/certificate/kubelet.go` over client-go's certificate manager).
//!
//! A certificate in `<root-dir>/pki/kubelet-server-current.pem` (certificate and key, as
//! upstream names it) that is valid for more than [`RENEW_BEFORE`] is served as it is.
//! Otherwise a new key (ECDSA P-256) is made and a CertificateSigningRequest created with
//! `generateName: csr-`, signer `kubernetes.io/kubelet-serving`, usages `digital signature` and
//! `server auth`, subject `CN=system:node:<node>, O=system:nodes`, and the node's names and
//! addresses as subject alternative names. Upstream leaves approval to the cluster's admins
//! (`kubectl certificate approve`); `rkube up --node` approves its own node's request (reason
//! `RkubeUpLocalNode`). Once the signer has issued the certificate, it is written beside the key
//! and served. A denied or failed request is an error naming the condition's message.
//! Certificates are not renewed while the agent runs: a restart requests a new one when the old
//! one is near its end.

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use kube::api::{Patch, PatchParams, PostParams};
use kube::Api;
use serde_json::json;

use crate::shutdown::Shutdown;

/// The file holding the served certificate and its key.
pub const CURRENT: &str = "kubelet-server-current.pem";
/// The signer kubelets' serving certificates are requested from.
pub const SIGNER: &str = "kubernetes.io/kubelet-serving";
/// A certificate closer than this to its end is requested again at start.
pub const RENEW_BEFORE: Duration = Duration::from_secs(24 * 3600);
/// How often the request is looked at until it is issued.
const POLL: Duration = Duration::from_millis(500);

/// What the request needs.
#[derive(Debug, Clone)]
pub struct ServingRequest {
    /// The Node's name (`CN=system:node:<name>`).
    pub node_name: String,
    /// DNS names and IP addresses the certificate names.
    pub names: Vec<String>,
    /// `<root-dir>/pki`.
    pub dir: PathBuf,
    /// Approve the request with this client's identity (`rkube up --node` only).
    pub approve: bool,
}

/// The path of a current certificate (see the module docs), requesting one when needed; ends
/// early (with an error) when `shutdown` fires.
///
/// # Errors
/// The request cannot be made or created, it was denied or failed, or the agent stopped.
pub async fn ensure(
    client: kube::Client,
    req: &ServingRequest,
    mut shutdown: Shutdown,
) -> anyhow::Result<PathBuf> {
    let current = req.dir.join(CURRENT);
    if still_valid(&current) {
        return Ok(current);
    }
    // Errors talking to the API server (429s, a restart) are retried with a back-off, as
    // client-go's certificate manager does; a denied or failed request is final.
    let mut wait = Duration::from_secs(1);
    loop {
        match request_once(client.clone(), req, &current, shutdown.clone()).await {
            Ok(path) => return Ok(path),
            Err(Outcome::Final(err)) => return Err(err),
            Err(Outcome::Retry(err)) => {
                tracing::warn!(%err, retry_in = ?wait, "requesting the kubelet API's serving certificate");
                tokio::select! {
                    _ = shutdown.wait() => anyhow::bail!("stopped while requesting the serving certificate: {err}"),
                    _ = tokio::time::sleep(wait) => {}
                }
                wait = (wait * 2).min(MAX_RETRY_WAIT);
            }
        }
    }
}

/// The longest wait between two tries of the request.
const MAX_RETRY_WAIT: Duration = Duration::from_secs(30);

/// How one try ended without a certificate.
enum Outcome {
    /// Try again (the API server could not be reached or refused for now).
    Retry(anyhow::Error),
    /// Give up (denied, failed, or the agent stopped).
    Final(anyhow::Error),
}

impl<E: Into<anyhow::Error>> From<E> for Outcome {
    fn from(e: E) -> Self {
        Outcome::Retry(e.into())
    }
}

/// One try: a new key and CSR, then waiting until it is issued, denied or failed.
async fn request_once(
    client: kube::Client,
    req: &ServingRequest,
    current: &Path,
    mut shutdown: Shutdown,
) -> Result<PathBuf, Outcome> {
    let key = rcgen::KeyPair::generate()?;
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new())?;
    params.distinguished_name = rcgen::DistinguishedName::new();
    params.distinguished_name.push(
        rcgen::DnType::CommonName,
        format!("system:node:{}", req.node_name),
    );
    params
        .distinguished_name
        .push(rcgen::DnType::OrganizationName, "system:nodes");
    for name in &req.names {
        params
            .subject_alt_names
            .push(match name.parse::<std::net::IpAddr>() {
                Ok(ip) => rcgen::SanType::IpAddress(ip),
                Err(_) => rcgen::SanType::DnsName(name.as_str().try_into()?),
            });
    }
    let pem = params.serialize_request(&key)?.pem()?;
    let csrs: Api<CertificateSigningRequest> = Api::all(client);
    let object: CertificateSigningRequest = serde_json::from_value(json!({
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": {"generateName": "csr-"},
        "spec": {
            "request": k8s_openapi::ByteString(pem.into_bytes()),
            "signerName": SIGNER,
            "usages": ["digital signature", "server auth"],
        },
    }))?;
    let created = csrs.create(&PostParams::default(), &object).await?;
    let name = created.metadata.name.clone().unwrap_or_default();
    tracing::info!(csr = %name, "requested the kubelet API's serving certificate (kubectl certificate approve {name})");
    if req.approve {
        let approval = json!({"status": {"conditions": [{
            "type": "Approved", "status": "True", "reason": "RkubeUpLocalNode",
            "message": "rkube up approves the serving certificate of its own node",
        }]}});
        csrs.patch_approval(&name, &PatchParams::default(), &Patch::Merge(&approval))
            .await?;
    }
    loop {
        let csr = csrs.get(&name).await?;
        let status = csr.status.unwrap_or_default();
        for c in status.conditions.unwrap_or_default() {
            if (c.type_ == "Denied" || c.type_ == "Failed") && c.status == "True" {
                let state = c.type_.to_lowercase();
                let message = c.message.unwrap_or_default();
                return Err(Outcome::Final(anyhow::anyhow!(
                    "certificate signing request {name} {state}: {message}"
                )));
            }
        }
        if let Some(cert) = status.certificate.filter(|c| !c.0.is_empty()) {
            std::fs::create_dir_all(&req.dir)?;
            let mut both = String::from_utf8(cert.0)?;
            both.push_str(&key.serialize_pem());
            super::tls::write_private(current, &both)?;
            return Ok(current.to_path_buf());
        }
        tokio::select! {
            _ = shutdown.wait() => return Err(Outcome::Final(anyhow::anyhow!(
                "stopped while waiting for certificate signing request {name}"
            ))),
            _ = tokio::time::sleep(POLL) => {}
        }
    }
}

/// Whether `path` holds a certificate valid for more than [`RENEW_BEFORE`].
fn still_valid(path: &Path) -> bool {
    let Ok(text) = std::fs::read(path) else {
        return false;
    };
    let Some(Ok(pem)) = x509_parser::pem::Pem::iter_from_buffer(&text).next() else {
        return false;
    };
    let Ok((_, cert)) = x509_parser::parse_x509_certificate(&pem.contents) else {
        return false;
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let end = u64::try_from(cert.validity().not_after.timestamp()).unwrap_or(0);
    end > now + RENEW_BEFORE.as_secs()
}
