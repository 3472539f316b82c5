//! CertificateSigningRequest helpers shared by validation, the API server's
//! `/approval` and `/status` handling and the signer: the PKCS#10 request
//! and issued certificate PEM checks (upstream
//! `pkg/apis/certificates/helpers.go` `ParseCSR` and
//! `pkg/apis/certificates/validation/validation.go` `validateCertificate`),
//! the known key usages and the condition types.
//!
//! In JSON, `spec.request` and `status.certificate` are `[]byte` fields:
//! base64 strings whose decoded bytes are PEM text.

use base64::Engine as _;
use serde_json::Value;
use x509_parser::certification_request::X509CertificationRequest;
use x509_parser::pem::Pem;
use x509_parser::prelude::FromDer;

/// The `Approved` condition type.
pub const APPROVED: &str = "Approved";
/// The `Denied` condition type.
pub const DENIED: &str = "Denied";
/// The `Failed` condition type (set by a signer that will not sign).
pub const FAILED: &str = "Failed";

/// The signer of client certificates that authenticate to the API server.
pub const KUBE_APISERVER_CLIENT: &str = "kubernetes.io/kube-apiserver-client";
/// The signer of kubelets' client certificates (`system:node:<name>`, `system:nodes`).
pub const KUBE_APISERVER_CLIENT_KUBELET: &str = "kubernetes.io/kube-apiserver-client-kubelet";
/// The signer of kubelets' serving certificates (the kubelet API's, `--rotate-server-certificates`).
pub const KUBELET_SERVING: &str = "kubernetes.io/kubelet-serving";

/// Every `spec.usages` value upstream accepts (`allValidUsages`), sorted as
/// upstream lists them in a `NotSupported` error.
pub const KNOWN_USAGES: &[&str] = &[
    "any",
    "cert sign",
    "client auth",
    "code signing",
    "content commitment",
    "crl sign",
    "data encipherment",
    "decipher only",
    "digital signature",
    "email protection",
    "encipher only",
    "ipsec end system",
    "ipsec tunnel",
    "ipsec user",
    "key agreement",
    "key encipherment",
    "microsoft sgc",
    "netscape sgc",
    "ocsp signing",
    "s/mime",
    "server auth",
    "signing",
    "timestamping",
];

/// The bytes of a `[]byte` JSON field (base64); `None` when absent, not a
/// string or not base64.
pub fn bytes_field(obj: &Value, pointer: &str) -> Option<Vec<u8>> {
    let s = obj.pointer(pointer)?.as_str()?;
    base64::engine::general_purpose::STANDARD.decode(s).ok()
}

/// The DER of the first PEM block of `pem` when it is a `CERTIFICATE
/// REQUEST` whose PKCS#10 structure parses and whose signature verifies with
/// its own public key. Errors carry upstream's message where it has one
/// (`PEM block type must be CERTIFICATE REQUEST`).
pub fn request_der(pem: &[u8]) -> Result<Vec<u8>, String> {
    let block = match Pem::iter_from_buffer(pem).next() {
        Some(Ok(b)) if b.label == "CERTIFICATE REQUEST" => b,
        _ => return Err("PEM block type must be CERTIFICATE REQUEST".into()),
    };
    let (_, req) = X509CertificationRequest::from_der(&block.contents)
        .map_err(|e| format!("x509: malformed certificate request: {e}"))?;
    req.verify_signature()
        .map_err(|e| format!("x509: certificate request signature is invalid: {e}"))?;
    Ok(block.contents)
}

/// `status.certificate` content check (upstream `validateCertificate`):
/// empty is fine; otherwise one or more `CERTIFICATE` PEM blocks, each
/// holding a parseable X.509 certificate.
pub fn check_certificate_pem(pem: &[u8]) -> Result<(), String> {
    if pem.is_empty() {
        return Ok(());
    }
    let mut blocks = 0;
    for block in Pem::iter_from_buffer(pem) {
        let block = block.map_err(|e| format!("invalid PEM: {e}"))?;
        if block.label != "CERTIFICATE" {
            return Err(format!(
                "only CERTIFICATE PEM blocks are allowed, found {:?}",
                block.label
            ));
        }
        x509_parser::parse_x509_certificate(&block.contents).map_err(|e| format!("x509: {e}"))?;
        blocks += 1;
    }
    if blocks == 0 {
        return Err("must contain at least one CERTIFICATE PEM block".into());
    }
    Ok(())
}

/// The conditions of a CSR (`status.conditions`), empty when absent.
pub fn conditions(csr: &Value) -> &[Value] {
    csr.pointer("/status/conditions")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

/// The `type` of a condition (`""` when absent).
pub fn condition_type(c: &Value) -> &str {
    c.get("type").and_then(Value::as_str).unwrap_or("")
}

/// True when a condition of type `t` is present with status `True` (or no
/// status, which defaults to `True`).
pub fn has_true_condition(csr: &Value, t: &str) -> bool {
    conditions(csr).iter().any(|c| {
        condition_type(c) == t
            && matches!(
                c.get("status").and_then(Value::as_str),
                None | Some("") | Some("True")
            )
    })
}

/// Approved and not denied (upstream `IsCertificateRequestApproved`).
pub fn is_approved(csr: &Value) -> bool {
    has_true_condition(csr, APPROVED) && !has_true_condition(csr, DENIED)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_usages_are_sorted_like_upstreams_list() {
        let mut sorted = KNOWN_USAGES.to_vec();
        sorted.sort();
        assert_eq!(sorted, KNOWN_USAGES);
    }

    #[test]
    fn a_pem_that_is_not_a_certificate_request_is_refused_with_upstreams_message() {
        let not_csr = b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
        assert_eq!(
            request_der(not_csr).unwrap_err(),
            "PEM block type must be CERTIFICATE REQUEST"
        );
        assert_eq!(
            request_der(b"garbage").unwrap_err(),
            "PEM block type must be CERTIFICATE REQUEST"
        );
        let junk =
            b"-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n";
        assert!(request_der(junk)
            .unwrap_err()
            .starts_with("x509: malformed certificate request"));
    }

    #[test]
    fn certificate_content_must_be_certificate_blocks() {
        assert!(check_certificate_pem(b"").is_ok());
        assert_eq!(
            check_certificate_pem(b"hello").unwrap_err(),
            "must contain at least one CERTIFICATE PEM block"
        );
        let key = b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n";
        assert_eq!(
            check_certificate_pem(key).unwrap_err(),
            "only CERTIFICATE PEM blocks are allowed, found \"PRIVATE KEY\""
        );
    }
}
