//! ClusterTrustBundles (`certificates.k8s.io`, KEP-3257): upstream
//! `pkg/apis/certificates/validation/validation.go` (`ValidateClusterTrustBundle`,
//! `ValidateClusterTrustBundleUpdate`, `validateTrustBundle`) and `pkg/apis/core/validation`
//! (`ValidateClusterTrustBundleName`):
//!
//! - `metadata.name`: with `spec.signerName`, it starts with the signer name with `/` turned into
//!   `:`, then `:`, and the rest is a DNS-1123 subdomain; without one, it holds no `:` and is a
//!   DNS-1123 subdomain ([`name_problems`]);
//! - `spec.signerName`: when set, `<domain>/<path>` as a CSR's; immutable;
//! - `spec.trustBundle`: at most 1 MiB; only `CERTIFICATE` PEM blocks, without headers, each an
//!   X.509 certificate whose basic constraints say CA; at least one; no duplicates. Every error
//!   names entry `i` (the block's index) and omits the value (`"<value omitted>"`). On update an
//!   unchanged bundle is not parsed again.
//!
//! The `attest` check on `signers` for bundles with a signer name is the API server's
//! admission (`rkube_apiserver::trust_bundle`).

use base64::Engine as _;
use serde_json::Value;

use super::{immutable, Strategy};
use crate::field_error::FieldError;
use crate::validation::is_dns1123_subdomain;

/// Largest `spec.trustBundle` upstream accepts (`MaxTrustBundleSize`), bytes.
pub const MAX_TRUST_BUNDLE_SIZE: usize = 1024 * 1024;

const BUNDLE: &str = "spec.trustBundle";
const OMITTED: &str = "\"<value omitted>\"";

/// ClusterTrustBundles (see the module docs).
pub(crate) const CLUSTER_TRUST_BUNDLE: Strategy = Strategy { validate, validate_name: Some(name_problems), ..Strategy::NONE };

/// Problems of a ClusterTrustBundle's `metadata.name` given the object's `spec.signerName`
/// (upstream `ValidateClusterTrustBundleName`); empty when the name is fine.
pub fn name_problems(name: &str, obj: &Value) -> Vec<String> {
    let signer = obj.pointer("/spec/signerName").and_then(Value::as_str).unwrap_or("");
    if signer.is_empty() {
        if name.contains(':') {
            return vec!["ClusterTrustBundle without signer name must not have \":\" in its name".to_string()];
        }
        return is_dns1123_subdomain(name);
    }
    let prefix = format!("{}:", signer.replace('/', ":"));
    match name.strip_prefix(&prefix) {
        Some(rest) => is_dns1123_subdomain(rest),
        None => vec![format!("ClusterTrustBundle for signerName {signer} must be named with prefix {prefix}")],
    }
}

fn validate(obj: &Value, old: Option<&Value>, errs: &mut Vec<FieldError>) {
    let signer = obj.pointer("/spec/signerName").and_then(Value::as_str).unwrap_or("");
    if !signer.is_empty() {
        super::certificates::validate_signer_name(signer, errs);
    }
    let bundle = obj.pointer("/spec/trustBundle").and_then(Value::as_str).unwrap_or("");
    let unchanged = old.is_some_and(|o| o.pointer("/spec/trustBundle").and_then(Value::as_str) == Some(bundle));
    if !unchanged {
        errs.extend(trust_bundle_problems(bundle));
    }
    immutable(obj, old, "/spec/signerName", "spec.signerName", errs);
}

/// One PEM block as Go's `encoding/pem` sees it.
#[derive(Debug, PartialEq, Eq)]
pub struct PemBlock {
    /// The word after `BEGIN`, e.g. `CERTIFICATE`.
    pub label: String,
    /// Whether it has `Key: value` header lines.
    pub has_headers: bool,
    /// The decoded body.
    pub der: Vec<u8>,
}

/// The PEM blocks of `text`, in order. Text between blocks is skipped, and so is a block whose
/// body is not base64 or that never ends (as `pem.Decode` skips what it cannot read).
pub fn pem_blocks(text: &str) -> Vec<PemBlock> {
    let mut blocks = Vec::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let Some(label) = line.trim_end().strip_prefix("-----BEGIN ").and_then(|l| l.strip_suffix("-----")) else { continue };
        let end = format!("-----END {label}-----");
        let (mut body, mut has_headers, mut ended) = (String::new(), false, false);
        for l in lines.by_ref() {
            let l = l.trim_end();
            if l == end {
                ended = true;
                break;
            }
            if l.contains(':') {
                has_headers = true;
            } else {
                body.push_str(l.trim());
            }
        }
        if !ended {
            break;
        }
        if let Ok(der) = base64::engine::general_purpose::STANDARD.decode(body.as_bytes()) {
            blocks.push(PemBlock { label: label.to_string(), has_headers, der });
        }
    }
    blocks
}

/// The 422 causes of a `spec.trustBundle` (see the module docs; upstream `validateTrustBundle`).
pub fn trust_bundle_problems(bundle: &str) -> Vec<FieldError> {
    if bundle.len() > MAX_TRUST_BUNDLE_SIZE {
        return vec![FieldError::too_long(BUNDLE, MAX_TRUST_BUNDLE_SIZE)];
    }
    let mut errs = Vec::new();
    let mut seen: Vec<(Vec<u8>, Vec<usize>)> = Vec::new();
    for (i, block) in pem_blocks(bundle).into_iter().enumerate() {
        let problem = if block.label != "CERTIFICATE" {
            Some(format!("entry {i} has bad block type: {}", block.label))
        } else if block.has_headers {
            Some(format!("entry {i} has PEM block headers"))
        } else {
            match x509_parser::parse_x509_certificate(&block.der) {
                Err(_) => Some(format!("entry {i} does not parse as X.509")),
                Ok((_, cert)) => match cert.basic_constraints() {
                    Ok(Some(bc)) if bc.value.ca => None,
                    _ => Some(format!("entry {i} does not have the CA bit set")),
                },
            }
        };
        match problem {
            Some(p) => errs.push(FieldError::invalid_rendered(BUNDLE, OMITTED, p)),
            None => match seen.iter_mut().find(|(der, _)| *der == block.der) {
                Some((_, indices)) => indices.push(i),
                None => seen.push((block.der, vec![i])),
            },
        }
    }
    if !errs.is_empty() {
        return errs;
    }
    if seen.is_empty() {
        errs.push(FieldError::invalid_rendered(BUNDLE, OMITTED, "at least one trust anchor must be provided"));
    }
    for (_, indices) in seen.iter().filter(|(_, i)| i.len() > 1) {
        let list: Vec<String> = indices.iter().map(ToString::to_string).collect();
        errs.push(FieldError::invalid_rendered(BUNDLE, OMITTED, format!("duplicate trust anchor (indices [{}])", list.join(" "))));
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A self-signed CA certificate (CN=rkube-test-ca, basicConstraints CA:TRUE), PEM.
    pub(crate) fn ca_pem() -> String {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let key = rcgen::KeyPair::generate().expect("key");
        params.self_signed(&key).expect("self-signed").pem()
    }

    fn messages(errs: &[FieldError]) -> Vec<String> {
        errs.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn a_bundle_of_one_ca_certificate_is_valid() {
        assert!(trust_bundle_problems(&ca_pem()).is_empty());
    }

    #[test]
    fn bad_blocks_empty_bundles_and_duplicates_are_refused_as_upstream() {
        let ca = ca_pem();
        let key = "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n";
        assert_eq!(
            messages(&trust_bundle_problems(&format!("{ca}{key}"))),
            ["spec.trustBundle: Invalid value: \"<value omitted>\": entry 1 has bad block type: PRIVATE KEY"]
        );
        assert_eq!(
            messages(&trust_bundle_problems("not pem at all")),
            ["spec.trustBundle: Invalid value: \"<value omitted>\": at least one trust anchor must be provided"]
        );
        let junk = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
        assert_eq!(
            messages(&trust_bundle_problems(junk)),
            ["spec.trustBundle: Invalid value: \"<value omitted>\": entry 0 does not parse as X.509"]
        );
        assert_eq!(
            messages(&trust_bundle_problems(&format!("{ca}\n{}{ca}", ca_pem()))),
            ["spec.trustBundle: Invalid value: \"<value omitted>\": duplicate trust anchor (indices [0 2])"]
        );
    }

    #[test]
    fn names_carry_the_signer_prefix_or_no_colon() {
        let with = json!({"spec": {"signerName": "example.com/foo"}});
        assert!(name_problems("example.com:foo:abc", &with).is_empty());
        assert_eq!(name_problems("abc", &with), ["ClusterTrustBundle for signerName example.com/foo must be named with prefix example.com:foo:"]);
        assert_eq!(name_problems("example.com:foo:", &with).len(), 1, "the rest must be a subdomain");
        let without = json!({"spec": {}});
        assert!(name_problems("plain.bundle", &without).is_empty());
        assert_eq!(name_problems("a:b", &without), ["ClusterTrustBundle without signer name must not have \":\" in its name"]);
    }

    #[test]
    fn the_signer_name_is_immutable_and_an_unchanged_bundle_is_not_parsed_again() {
        let old = json!({"spec": {"signerName": "example.com/foo", "trustBundle": "stored before"}});
        let mut errs = Vec::new();
        validate(&json!({"spec": {"signerName": "example.com/bar", "trustBundle": "stored before"}}), Some(&old), &mut errs);
        assert_eq!(messages(&errs), ["spec.signerName: Invalid value: \"example.com/bar\": field is immutable"]);
    }
}
