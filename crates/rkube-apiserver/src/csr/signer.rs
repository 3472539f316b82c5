//! The CSR signer for `kubernetes.io/kube-apiserver-client`,
//! `kubernetes.io/kube-apiserver-client-kubelet` and `kubernetes.io/kubelet-serving`, run inside
//! the API server
//! process. Upstream runs it in kube-controller-manager (the `csrsigning`
//! controller, `pkg/controller/certificates/signer/signer.go`, with
//! `--cluster-signing-cert-file`, `--cluster-signing-key-file` and
//! `--cluster-signing-duration`); rkube has no controller manager, so
//! `rkube apiserver` takes those flags and `rkube up` signs with the CA in
//! `<data-dir>/pki` (`ca.crt`, `ca.key`), which the API server already
//! trusts for client certificates: what it issues authenticates
//! (`rkube up --insecure` has no PKI and no signer).
//!
//! A CSR is handled when it is approved (and not denied), not `Failed`, has
//! no `status.certificate` yet and names one of the three signers:
//! - its usages are checked against the signer (upstream's
//!   `validAPIServerClientUsages`, `ValidateKubeletClientCSR` and
//!   `ValidateKubeletServingCSR`); a refusal
//!   adds a `Failed` condition with reason `SignerValidationFailure` and the
//!   check's message;
//! - otherwise `status.certificate` gets a PEM certificate signed by the CA:
//!   the request's subject and subject alternative names, the requested
//!   usages, valid from 5 minutes ago for `min(spec.expirationSeconds,
//!   --cluster-signing-duration)` (at least 10 minutes; lifetimes of 8 hours
//!   or more lose the 5 minutes at the end, as upstream's
//!   `PermissiveSigningPolicy`), never past the CA's own expiry.
//!
//! [`run`] lists the CSRs, handles each, then watches
//! `<prefix>/certificatesigningrequests/` and lists again after each batch
//! of events. Writes change only `status` (the `/status` path's semantics)
//! and are guarded by the read `mod_revision`; a lost race is retried on
//! the next event.

use std::sync::Arc;
use std::time::Duration;

use rkube_api::csr::{
    self as api_csr, FAILED, KUBELET_SERVING, KUBE_APISERVER_CLIENT, KUBE_APISERVER_CLIENT_KUBELET,
};
use rkube_storage::{RangeRequest, Storage, StorageError};
use serde_json::{json, Value};
use x509_parser::certification_request::X509CertificationRequest;
use x509_parser::extensions::{GeneralName, ParsedExtension};
use x509_parser::prelude::FromDer;

/// Upstream's default `--cluster-signing-duration` (one year).
pub const DEFAULT_SIGNING_DURATION: Duration = Duration::from_secs(8760 * 3600);
/// How far back `notBefore` goes (upstream `Backdate`).
const BACKDATE: Duration = Duration::from_secs(5 * 60);
/// Lifetimes below this keep their full end (upstream `Short`).
const SHORT: Duration = Duration::from_secs(8 * 3600);
/// The shortest lifetime issued.
const MIN_DURATION: Duration = Duration::from_secs(10 * 60);

/// Errors loading the signing CA.
#[derive(Debug, thiserror::Error)]
pub enum SignerError {
    /// A file could not be read.
    #[error("reading {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The certificate or key does not parse.
    #[error("{0}")]
    Parse(String),
}

/// The CA that signs and the longest lifetime it gives.
#[derive(Clone)]
pub struct Signer {
    ca_cert_pem: String,
    ca_key_pem: String,
    /// Unix seconds of the CA certificate's `notAfter`.
    ca_not_after: i64,
    duration: Duration,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signer")
            .field("ca_not_after", &self.ca_not_after)
            .field("duration", &self.duration)
            .finish()
    }
}

impl Signer {
    /// A signer from PEM texts: `ca_cert_pem` (one CA certificate) and
    /// `ca_key_pem` (its private key, PKCS#8 or SEC1/PKCS#1 as `rcgen`
    /// reads them); `duration` is `--cluster-signing-duration`.
    pub fn new(
        ca_cert_pem: &str,
        ca_key_pem: &str,
        duration: Duration,
    ) -> Result<Self, SignerError> {
        let key = rcgen::KeyPair::from_pem(ca_key_pem)
            .map_err(|e| SignerError::Parse(format!("CA key: {e}")))?;
        rcgen::Issuer::from_ca_cert_pem(ca_cert_pem, &key)
            .map_err(|e| SignerError::Parse(format!("CA certificate: {e}")))?;
        let block = x509_parser::pem::Pem::iter_from_buffer(ca_cert_pem.as_bytes())
            .next()
            .and_then(Result::ok)
            .ok_or_else(|| SignerError::Parse("CA certificate: no PEM block".into()))?;
        let (_, cert) = x509_parser::parse_x509_certificate(&block.contents)
            .map_err(|e| SignerError::Parse(format!("CA certificate: {e}")))?;
        let ca_not_after = cert.validity().not_after.timestamp();
        Ok(Signer {
            ca_cert_pem: ca_cert_pem.to_string(),
            ca_key_pem: ca_key_pem.to_string(),
            ca_not_after,
            duration,
        })
    }

    /// [`Signer::new`] from `--cluster-signing-cert-file` and `--cluster-signing-key-file`.
    pub fn load(
        cert_file: &std::path::Path,
        key_file: &std::path::Path,
        duration: Duration,
    ) -> Result<Self, SignerError> {
        let read = |p: &std::path::Path| {
            std::fs::read_to_string(p).map_err(|source| SignerError::Read {
                path: p.display().to_string(),
                source,
            })
        };
        Self::new(&read(cert_file)?, &read(key_file)?, duration)
    }

    /// What to do with `csr` (see the module docs): `None` when nothing,
    /// else the CSR with its new status. `now` is Unix seconds.
    pub fn handle(&self, csr: &Value, now: i64) -> Option<Value> {
        let signer = csr
            .pointer("/spec/signerName")
            .and_then(Value::as_str)
            .unwrap_or("");
        if ![
            KUBE_APISERVER_CLIENT,
            KUBE_APISERVER_CLIENT_KUBELET,
            KUBELET_SERVING,
        ]
        .contains(&signer)
        {
            return None;
        }
        if !api_csr::is_approved(csr) || api_csr::has_true_condition(csr, FAILED) {
            return None;
        }
        if csr
            .pointer("/status/certificate")
            .and_then(Value::as_str)
            .is_some_and(|c| !c.is_empty())
        {
            return None;
        }
        let name = csr
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("");
        let der = match api_csr::bytes_field(csr, "/spec/request")
            .ok_or("request is not base64".to_string())
            .and_then(|p| api_csr::request_der(&p))
        {
            Ok(der) => der,
            Err(e) => {
                tracing::warn!(csr = name, error = %e, "unable to parse csr");
                return None;
            }
        };
        let usages: Vec<String> = csr
            .pointer("/spec/usages")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(String::from)
                    .collect()
            })
            .unwrap_or_default();
        let mut out = csr.clone();
        if let Err(reason) = signer_usages_ok(&der, &usages, signer) {
            let stamp = rkube_api::time::format_rfc3339(
                chrono::DateTime::from_timestamp(now, 0).unwrap_or_default(),
            );
            let failed = json!({
                "type": FAILED,
                "status": "True",
                "reason": "SignerValidationFailure",
                "message": reason,
                "lastUpdateTime": stamp,
                "lastTransitionTime": stamp,
            });
            let status = out
                .as_object_mut()?
                .entry("status")
                .or_insert_with(|| json!({}));
            let conds = status
                .as_object_mut()?
                .entry("conditions")
                .or_insert_with(|| json!([]));
            conds.as_array_mut()?.push(failed);
            return Some(out);
        }
        let expiration = csr
            .pointer("/spec/expirationSeconds")
            .and_then(Value::as_i64);
        let lifetime = lifetime(self.duration, expiration);
        match self.sign(&der, &usages, lifetime, now) {
            Ok(pem) => {
                use base64::Engine as _;
                let b64 = base64::engine::general_purpose::STANDARD.encode(pem.as_bytes());
                let status = out
                    .as_object_mut()?
                    .entry("status")
                    .or_insert_with(|| json!({}));
                status
                    .as_object_mut()?
                    .insert("certificate".into(), json!(b64));
                Some(out)
            }
            Err(e) => {
                tracing::warn!(csr = name, error = %e, "signing failed");
                None
            }
        }
    }

    /// A PEM certificate for the PKCS#10 request `der`, with `usages`, valid
    /// for `lifetime` from `now` (Unix seconds), as described in the module docs.
    pub fn sign(
        &self,
        der: &[u8],
        usages: &[String],
        lifetime: Duration,
        now: i64,
    ) -> Result<String, String> {
        use rcgen::{
            CertificateParams, CertificateSigningRequestParams, DnType, IsCa, SerialNumber,
        };
        let key = rcgen::KeyPair::from_pem(&self.ca_key_pem).map_err(|e| e.to_string())?;
        let issuer =
            rcgen::Issuer::from_ca_cert_pem(&self.ca_cert_pem, &key).map_err(|e| e.to_string())?;
        let (_, req) = X509CertificationRequest::from_der(der).map_err(|e| e.to_string())?;
        let info = &req.certification_request_info;
        let mut params = CertificateParams::default();
        let public_key = rcgen::SubjectPublicKeyInfo::from_der(info.subject_pki.raw)
            .map_err(|e| e.to_string())?;
        match CertificateSigningRequestParams::from_der(&der.to_vec().into()) {
            Ok(parsed) => {
                params.distinguished_name = parsed.params.distinguished_name;
                params.subject_alt_names = parsed.params.subject_alt_names;
            }
            Err(_) => {
                // Extensions rcgen does not model: keep the subject's common name and organizations.
                let mut dn = rcgen::DistinguishedName::new();
                for cn in info
                    .subject
                    .iter_common_name()
                    .filter_map(|a| a.as_str().ok())
                {
                    dn.push(DnType::CommonName, cn);
                }
                for o in info
                    .subject
                    .iter_organization()
                    .filter_map(|a| a.as_str().ok())
                {
                    dn.push(DnType::OrganizationName, o);
                }
                params.distinguished_name = dn;
            }
        }
        let (key_usages, ext_usages) = x509_usages(usages)?;
        params.key_usages = key_usages;
        params.extended_key_usages = ext_usages;
        params.is_ca = IsCa::ExplicitNoCa;
        params.use_authority_key_identifier_extension = true;
        let mut serial = *uuid::Uuid::new_v4().as_bytes();
        serial[0] &= 0x7f;
        params.serial_number = Some(SerialNumber::from_slice(&serial));
        let backdate = BACKDATE.as_secs() as i64;
        let secs = lifetime.as_secs() as i64;
        let not_before = now - backdate;
        let mut not_after = if lifetime < SHORT {
            now + secs
        } else {
            now + secs - backdate
        };
        if not_before >= self.ca_not_after || now >= self.ca_not_after {
            return Err(format!(
                "the signer has expired: NotAfter={}",
                self.ca_not_after
            ));
        }
        not_after = not_after.min(self.ca_not_after);
        let ts = |t: i64| time::OffsetDateTime::from_unix_timestamp(t).map_err(|e| e.to_string());
        params.not_before = ts(not_before)?;
        params.not_after = ts(not_after)?;
        let cert = params
            .signed_by(&public_key, &issuer)
            .map_err(|e| e.to_string())?;
        Ok(cert.pem())
    }
}

/// The lifetime of an issued certificate: `max_duration`
/// (`--cluster-signing-duration`), shortened to `expiration_seconds` when
/// that is smaller, never below 10 minutes (upstream `duration`).
pub fn lifetime(max_duration: Duration, expiration_seconds: Option<i64>) -> Duration {
    let Some(secs) = expiration_seconds else {
        return max_duration;
    };
    let requested = Duration::from_secs(secs.max(0) as u64);
    if requested > max_duration {
        max_duration
    } else if requested < MIN_DURATION {
        MIN_DURATION
    } else {
        requested
    }
}

/// rcgen key usages and extended key usages for CSR `usages`.
fn x509_usages(
    usages: &[String],
) -> Result<
    (
        Vec<rcgen::KeyUsagePurpose>,
        Vec<rcgen::ExtendedKeyUsagePurpose>,
    ),
    String,
> {
    use rcgen::{ExtendedKeyUsagePurpose as E, KeyUsagePurpose as K};
    let (mut ku, mut eku) = (Vec::new(), Vec::new());
    for u in usages {
        let (k, e) = match u.as_str() {
            "signing" | "digital signature" => (Some(K::DigitalSignature), None),
            "content commitment" => (Some(K::ContentCommitment), None),
            "key encipherment" => (Some(K::KeyEncipherment), None),
            "key agreement" => (Some(K::KeyAgreement), None),
            "data encipherment" => (Some(K::DataEncipherment), None),
            "cert sign" => (Some(K::KeyCertSign), None),
            "crl sign" => (Some(K::CrlSign), None),
            "encipher only" => (Some(K::EncipherOnly), None),
            "decipher only" => (Some(K::DecipherOnly), None),
            "any" => (None, Some(E::Any)),
            "server auth" => (None, Some(E::ServerAuth)),
            "client auth" => (None, Some(E::ClientAuth)),
            "code signing" => (None, Some(E::CodeSigning)),
            "email protection" | "s/mime" => (None, Some(E::EmailProtection)),
            "ipsec end system" => (None, Some(E::Other(vec![1, 3, 6, 1, 5, 5, 7, 3, 5]))),
            "ipsec tunnel" => (None, Some(E::Other(vec![1, 3, 6, 1, 5, 5, 7, 3, 6]))),
            "ipsec user" => (None, Some(E::Other(vec![1, 3, 6, 1, 5, 5, 7, 3, 7]))),
            "timestamping" => (None, Some(E::TimeStamping)),
            "ocsp signing" => (None, Some(E::OcspSigning)),
            "microsoft sgc" => (None, Some(E::Other(vec![1, 3, 6, 1, 4, 1, 311, 10, 3, 3]))),
            "netscape sgc" => (None, Some(E::Other(vec![2, 16, 840, 1, 113730, 4, 1]))),
            other => return Err(format!("unknown key usage: {other}")),
        };
        if let Some(k) = k.filter(|k| !ku.contains(k)) {
            ku.push(k);
        }
        if let Some(e) = e.filter(|e| !eku.contains(e)) {
            eku.push(e);
        }
    }
    Ok((ku, eku))
}

/// Whether `signer` may issue a certificate for request `der` with `usages`;
/// the error is upstream's message (upstream `signerUsagesOK`).
pub fn signer_usages_ok(der: &[u8], usages: &[String], signer: &str) -> Result<(), String> {
    match signer {
        KUBE_APISERVER_CLIENT => apiserver_client_usages(usages),
        KUBE_APISERVER_CLIENT_KUBELET => kubelet_client(der, usages),
        KUBELET_SERVING => kubelet_serving(der, usages),
        other => Err(format!("unrecognized signerName: {other:?}")),
    }
}

fn apiserver_client_usages(usages: &[String]) -> Result<(), String> {
    let mut client_auth = false;
    for u in usages {
        match u.as_str() {
            "digital signature" | "key encipherment" => {}
            "client auth" => client_auth = true,
            other => return Err(format!("invalid usage for client certificate: {other}")),
        }
    }
    if !client_auth {
        return Err("missing required usage for client certificate: client auth".into());
    }
    Ok(())
}

/// Upstream `ValidateKubeletClientCSR`: organization exactly `system:nodes`,
/// no subject alternative names, common name `system:node:<name>`, usages
/// {digital signature, client auth} with or without key encipherment.
fn kubelet_client(der: &[u8], usages: &[String]) -> Result<(), String> {
    let (_, req) = X509CertificationRequest::from_der(der).map_err(|e| e.to_string())?;
    system_nodes_organization(&req)?;
    for n in subject_alt_names(&req) {
        match n {
            GeneralName::DNSName(_) => return Err("DNS subjectAltNames are not allowed".into()),
            GeneralName::RFC822Name(_) => {
                return Err("Email subjectAltNames are not allowed".into())
            }
            GeneralName::IPAddress(_) => return Err("IP subjectAltNames are not allowed".into()),
            GeneralName::URI(_) => return Err("URI subjectAltNames are not allowed".into()),
            _ => {}
        }
    }
    node_common_name(&req)?;
    node_usages(usages, "client auth")
}

/// Upstream `ValidateKubeletServingCSR`: organization exactly `system:nodes`, at least one DNS
/// or IP subject alternative name and no email or URI ones, usages {digital signature, server
/// auth} with or without key encipherment, common name `system:node:<name>`.
fn kubelet_serving(der: &[u8], usages: &[String]) -> Result<(), String> {
    let (_, req) = X509CertificationRequest::from_der(der).map_err(|e| e.to_string())?;
    system_nodes_organization(&req)?;
    let sans = subject_alt_names(&req);
    if !sans
        .iter()
        .any(|n| matches!(n, GeneralName::DNSName(_) | GeneralName::IPAddress(_)))
    {
        return Err("DNS or IP subjectAltName is required".into());
    }
    if sans.iter().any(|n| matches!(n, GeneralName::RFC822Name(_))) {
        return Err("Email subjectAltNames are not allowed".into());
    }
    if sans.iter().any(|n| matches!(n, GeneralName::URI(_))) {
        return Err("URI subjectAltNames are not allowed".into());
    }
    node_usages(usages, "server auth")?;
    node_common_name(&req)
}

/// The organization of a kubelet's request must be exactly `system:nodes`.
fn system_nodes_organization(req: &X509CertificationRequest<'_>) -> Result<(), String> {
    let orgs: Vec<&str> = req
        .certification_request_info
        .subject
        .iter_organization()
        .filter_map(|a| a.as_str().ok())
        .collect();
    if orgs != ["system:nodes"] {
        return Err("subject organization is not system:nodes".into());
    }
    Ok(())
}

/// The common name of a kubelet's request must begin with `system:node:`.
fn node_common_name(req: &X509CertificationRequest<'_>) -> Result<(), String> {
    let cn = req
        .certification_request_info
        .subject
        .iter_common_name()
        .next()
        .and_then(|a| a.as_str().ok())
        .unwrap_or("");
    if !cn.starts_with("system:node:") {
        return Err("subject common name does not begin with system:node:".into());
    }
    Ok(())
}

/// Every subject alternative name the request asks for.
fn subject_alt_names<'a>(req: &'a X509CertificationRequest<'_>) -> Vec<&'a GeneralName<'a>> {
    let mut out = Vec::new();
    for ext in req.requested_extensions().into_iter().flatten() {
        if let ParsedExtension::SubjectAlternativeName(san) = ext {
            out.extend(san.general_names.iter());
        }
    }
    out
}

/// A kubelet certificate's usages: `digital signature` and `auth` (client or server), with or
/// without `key encipherment` (upstream's `kubelet*RequiredUsages` and `...NoRSA` sets); the
/// error lists the full set sorted, as upstream's `sets.List`.
fn node_usages(usages: &[String], auth: &str) -> Result<(), String> {
    let set: std::collections::BTreeSet<&str> = usages.iter().map(String::as_str).collect();
    let without_rsa: std::collections::BTreeSet<&str> = [auth, "digital signature"].into();
    let mut with_rsa = without_rsa.clone();
    with_rsa.insert("key encipherment");
    if set != with_rsa && set != without_rsa {
        let listed: Vec<&str> = with_rsa.into_iter().collect();
        return Err(format!("usages did not match [{}]", listed.join(" ")));
    }
    Ok(())
}

/// One pass: lists the CSRs under `prefix` and writes the new status of
/// each one [`Signer::handle`] changes. Returns the list's revision and how
/// many CSRs were written.
pub async fn reconcile_all(
    signer: &Signer,
    storage: &dyn Storage,
    prefix: &str,
) -> Result<(i64, usize), StorageError> {
    let dir = format!(
        "{}/certificatesigningrequests/",
        prefix.trim_end_matches('/')
    );
    let resp = storage.range(RangeRequest::prefix(&dir)).await?;
    let now = chrono::Utc::now().timestamp();
    let mut written = 0;
    for kv in &resp.kvs {
        let Ok(csr) = serde_json::from_slice::<Value>(&kv.value) else {
            continue;
        };
        let Some(mut updated) = signer.handle(&csr, now) else {
            continue;
        };
        rkube_api::wire::order_object_keys(&mut updated);
        let Ok(bytes) = serde_json::to_vec(&updated) else {
            continue;
        };
        match storage.update(&kv.key, bytes.into(), kv.mod_revision).await {
            Ok(_) => written += 1,
            // Changed or deleted meanwhile: the watch brings it back.
            Err(StorageError::Conflict { .. }) | Err(StorageError::NotFound { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    Ok((resp.revision, written))
}

/// Runs the signer until `stop` turns true (or its sender is dropped): a
/// pass over every CSR, then one after each batch of CSR events, on the
/// controllers' one list-and-watch loop ([`crate::controllers::run_watching`]).
pub async fn run(
    signer: Signer,
    storage: Arc<dyn Storage>,
    prefix: String,
    stop: tokio::sync::watch::Receiver<bool>,
) {
    let signer = Arc::new(signer);
    let (pass_signer, pass_storage, pass_prefix) =
        (signer.clone(), storage.clone(), prefix.clone());
    let (event_storage, event_prefix) = (storage.clone(), prefix.clone());
    crate::controllers::run_watching(
        "certificatesigningrequest-signing-controller",
        storage,
        &prefix,
        &["certificatesigningrequests/"],
        stop,
        move || {
            let (signer, storage, prefix) = (
                pass_signer.clone(),
                pass_storage.clone(),
                pass_prefix.clone(),
            );
            async move {
                reconcile_all(&signer, storage.as_ref(), &prefix)
                    .await
                    .map(|(rev, _)| rev)
                    .map_err(|e| e.to_string())
            }
        },
        move |_events| {
            let (signer, storage, prefix) =
                (signer.clone(), event_storage.clone(), event_prefix.clone());
            async move {
                if let Err(e) = reconcile_all(&signer, storage.as_ref(), &prefix).await {
                    tracing::warn!(error = %e, "csr signing failed");
                }
            }
        },
    )
    .await
}

#[cfg(test)]
mod tests;
