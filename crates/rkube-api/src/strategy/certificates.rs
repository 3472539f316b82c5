//! CertificateSigningRequests: upstream `pkg/registry/certificates/certificates/strategy.go`
//! (create clears `status`), `pkg/apis/certificates/v1/defaults.go` (a
//! condition's `status` defaults to `True`) and
//! `pkg/apis/certificates/validation/validation.go`:
//!
//! - `spec.request`: base64 of a PEM `CERTIFICATE REQUEST` whose signature
//!   verifies (`Invalid` with the parse error otherwise);
//! - `spec.usages`: required, each a known usage (`NotSupported`), no duplicates;
//! - `spec.signerName`: required, `<domain>/<path>` (upstream
//!   `ValidateCertificateSigningRequestSignerName`); `kubernetes.io/legacy-unknown`
//!   is refused by v1;
//! - `spec.expirationSeconds`: at least 600;
//! - `status.conditions`: a type each, `Approved`/`Denied`/`Failed` only
//!   with status `True`, `Approved` and `Denied` exclusive, no duplicate types;
//! - `status.certificate`: `CERTIFICATE` PEM blocks;
//! - on update: no removal of an `Approved`, `Denied` or `Failed`
//!   condition; a certificate once set may not change.
//!
//! Problems already present in the stored object are tolerated on update,
//! as upstream's `getValidationOptions` does. Which part of the object each
//! write path may change (main resource, `/status`, `/approval`) is the API
//! server's business (`rkube_apiserver::csr`).

use serde_json::Value;

use super::{child, each, reset_status, Object, Strategy};
use crate::csr::{self, APPROVED, DENIED, FAILED, KNOWN_USAGES};
use crate::field_error::FieldError;
use crate::validation::{is_dns1123_label, is_dns1123_subdomain};

/// The signer name v1 refuses (accepted by the removed v1beta1 API).
const LEGACY_UNKNOWN_SIGNER: &str = "kubernetes.io/legacy-unknown";

/// Shortest `spec.expirationSeconds` upstream accepts.
pub const MIN_EXPIRATION_SECONDS: i64 = 600;

/// CertificateSigningRequests (see the module docs).
pub(crate) const CERTIFICATE_SIGNING_REQUEST: Strategy =
    Strategy { defaults: csr_defaults, prepare_for_create: reset_status, validate: csr_validate, ..Strategy::NONE };

fn csr_defaults(obj: &mut Object) {
    if !obj.get("status").is_some_and(Value::is_object) {
        return;
    }
    each(child(obj, "status"), "conditions", |c| {
        if c.get("status").and_then(Value::as_str).is_none_or(str::is_empty) {
            c.insert("status".into(), Value::String("True".into()));
        }
    });
}

fn strs(v: Option<&Value>) -> Vec<&str> {
    v.and_then(Value::as_array).map(|a| a.iter().map(|u| u.as_str().unwrap_or("")).collect()).unwrap_or_default()
}

fn has_duplicates<'a>(items: impl IntoIterator<Item = &'a str>) -> bool {
    let mut seen = std::collections::HashSet::new();
    items.into_iter().any(|i| !seen.insert(i))
}

fn csr_validate(obj: &Value, old: Option<&Value>, errs: &mut Vec<FieldError>) {
    let old_usages = strs(old.and_then(|o| o.pointer("/spec/usages")));
    let old_conditions = old.map(csr::conditions).unwrap_or(&[]);
    let old_types: Vec<&str> = old_conditions.iter().map(csr::condition_type).collect();
    // Compatibility with stored data, as upstream's getValidationOptions.
    let allow_unknown_usages = old_usages.iter().any(|u| !KNOWN_USAGES.contains(u));
    let allow_duplicate_usages = has_duplicates(old_usages.iter().copied());
    let allow_both = old_types.contains(&APPROVED) && old_types.contains(&DENIED);
    let allow_duplicate_types = has_duplicates(old_types.iter().copied());
    let allow_empty_type = old_types.contains(&"");
    let allow_legacy_signer = old.is_some_and(|o| o.pointer("/spec/signerName").and_then(Value::as_str) == Some(LEGACY_UNKNOWN_SIGNER));

    let request = obj.pointer("/spec/request").and_then(Value::as_str).unwrap_or("");
    let checked = match csr::bytes_field(obj, "/spec/request") {
        Some(pem) => csr::request_der(&pem).map(|_| ()),
        None if request.is_empty() => Err("PEM block type must be CERTIFICATE REQUEST".to_string()),
        None => Err("illegal base64 data".to_string()),
    };
    if let Err(e) = checked {
        errs.push(FieldError::invalid_rendered("spec.request", "\"<request data>\"", e));
    }

    let usages = strs(obj.pointer("/spec/usages"));
    if usages.is_empty() {
        errs.push(FieldError::required("spec.usages", ""));
    }
    if !allow_unknown_usages {
        for (i, u) in usages.iter().enumerate() {
            if !KNOWN_USAGES.contains(u) {
                errs.push(FieldError::not_supported(&format!("spec.usages[{i}]"), u, KNOWN_USAGES));
            }
        }
    }
    if !allow_duplicate_usages {
        let mut seen = std::collections::HashSet::new();
        for (i, u) in usages.iter().enumerate() {
            if !seen.insert(*u) {
                errs.push(FieldError::duplicate(&format!("spec.usages[{i}]"), u));
            }
        }
    }

    let signer = obj.pointer("/spec/signerName").and_then(Value::as_str).unwrap_or("");
    if signer == LEGACY_UNKNOWN_SIGNER && !allow_legacy_signer {
        errs.push(FieldError::invalid("spec.signerName", signer, "the legacy signerName is not allowed via this API version"));
    } else {
        validate_signer_name(signer, errs);
    }

    if let Some(secs) = obj.pointer("/spec/expirationSeconds").and_then(Value::as_i64) {
        if secs < MIN_EXPIRATION_SECONDS {
            errs.push(FieldError::invalid_json(
                "spec.expirationSeconds",
                &Value::from(secs),
                "may not specify a duration less than 600 seconds (10 minutes)",
            ));
        }
    }

    validate_conditions(obj, allow_both, allow_duplicate_types, allow_empty_type, errs);

    let cert = obj.pointer("/status/certificate");
    let unchanged = old.is_some_and(|o| o.pointer("/status/certificate") == cert);
    let old_cert_bad = old
        .and_then(|o| csr::bytes_field(o, "/status/certificate"))
        .is_some_and(|c| csr::check_certificate_pem(&c).is_err());
    if !unchanged && !old_cert_bad && cert.is_some_and(|c| !c.is_null()) {
        let checked = match csr::bytes_field(obj, "/status/certificate") {
            Some(pem) => csr::check_certificate_pem(&pem),
            None => Err("illegal base64 data".to_string()),
        };
        if let Err(e) = checked {
            errs.push(FieldError::invalid("status.certificate", "<certificate data>", e));
        }
    }

    let Some(old) = old else { return };
    for t in [APPROVED, DENIED, FAILED] {
        let count = |v: &Value| csr::conditions(v).iter().filter(|c| csr::condition_type(c) == t).count();
        if count(obj) < count(old) {
            errs.push(FieldError::forbidden("status.conditions", format!("updates may not remove a condition of type {t:?}")));
        }
    }
    let old_cert = old.pointer("/status/certificate").and_then(Value::as_str).unwrap_or("");
    if !unchanged && !old_cert.is_empty() {
        errs.push(FieldError::forbidden("status.certificate", "updates may not modify existing certificate content"));
    }
}

fn validate_conditions(obj: &Value, allow_both: bool, allow_dup: bool, allow_empty: bool, errs: &mut Vec<FieldError>) {
    let (mut approved, mut denied) = (false, false);
    let mut seen = std::collections::HashSet::new();
    for (i, c) in csr::conditions(obj).iter().enumerate() {
        let t = csr::condition_type(c);
        if t.is_empty() && !allow_empty {
            errs.push(FieldError::required(&format!("status.conditions[{i}].type"), ""));
        }
        let only_true = [APPROVED, DENIED, FAILED].contains(&t);
        let allowed: &[&str] = if only_true { &["True"] } else { &["False", "True", "Unknown"] };
        let status = c.get("status").and_then(Value::as_str).unwrap_or("");
        if status.is_empty() {
            errs.push(FieldError::required(&format!("status.conditions[{i}].status"), ""));
        } else if !allowed.contains(&status) {
            errs.push(FieldError::not_supported(&format!("status.conditions[{i}].status"), status, allowed));
        }
        if !allow_both {
            let clash = match t {
                APPROVED => {
                    approved = true;
                    denied
                }
                DENIED => {
                    denied = true;
                    approved
                }
                _ => false,
            };
            if clash {
                errs.push(FieldError::invalid(
                    &format!("status.conditions[{i}].type"),
                    t,
                    "Approved and Denied conditions are mutually exclusive",
                ));
            }
        }
        if !allow_dup && !seen.insert(t) {
            errs.push(FieldError::duplicate(&format!("status.conditions[{i}].type"), t));
        }
    }
}

/// `spec.signerName`: `<domain>/<path>`, the domain at least two DNS-1123
/// labels, the path dot-separated DNS-1123 subdomains (upstream
/// `ValidateCertificateSigningRequestSignerName`).
pub(crate) fn validate_signer_name(signer: &str, errs: &mut Vec<FieldError>) {
    const FIELD: &str = "spec.signerName";
    if signer.is_empty() {
        errs.push(FieldError::required(FIELD, "signerName must be provided"));
        return;
    }
    let Some((domain, path)) = signer.split_once('/').filter(|(_, p)| !p.contains('/')) else {
        errs.push(FieldError::invalid(FIELD, signer, "must be a fully qualified domain and path of the form 'example.com/signer-name'"));
        return;
    };
    if domain.len() > 253 {
        errs.push(FieldError::too_long(FIELD, 253));
    }
    for label in domain.split('.') {
        let problems = is_dns1123_label(label);
        for p in &problems {
            errs.push(FieldError::invalid(FIELD, domain, format!("validating label {label:?}: {p}")));
        }
        if !problems.is_empty() {
            break;
        }
    }
    if domain.split('.').count() < 2 {
        errs.push(FieldError::invalid(FIELD, domain, "should be a domain with at least two segments separated by dots"));
    }
    for part in path.split('.') {
        let problems = is_dns1123_subdomain(part);
        for p in &problems {
            errs.push(FieldError::invalid(FIELD, path, format!("validating component {part:?}: {p}")));
        }
        if !problems.is_empty() {
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A PKCS#10 request (P-256, CN=every-resource), base64 of its PEM.
    const REQUEST: &str = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURSBSRVFVRVNULS0tLS0KTUlIU01Ic0NBUUF3R1RFWE1CVUdBMVVFQXd3T1pYWmxjbmt0Y21WemIzVnlZMlV3V1RBVEJnY3Foa2pPUFFJQgpCZ2dxaGtqT1BRTUJCd05DQUFRS1RodkRzNEJIRUw4MEl4NUxUNW9QdU0xeVh4bXoxajNmZFZWYnF4STczTlhICnhEYWNSV2R1OE9TWnc4VGYvd3diVkZMNGlQRk4zNXNsZHhCMFMwNmxvQUF3Q2dZSUtvWkl6ajBFQXdJRFJ3QXcKUkFJZ1R3NUxwZ2J0V0NlQ1Fsb21KRWVyODF6TVFyZFFxTFZOcVlpNVdoNWZkSG9DSUdNTHI5dVFZazNzL0JZOAp5MjJyNUI4bU5qdDBvMFh3QlI0YXowc3lkV0Z2Ci0tLS0tRU5EIENFUlRJRklDQVRFIFJFUVVFU1QtLS0tLQo=";

    fn errors(obj: &Value, old: Option<&Value>) -> Vec<String> {
        let mut errs = Vec::new();
        csr_validate(obj, old, &mut errs);
        errs.iter().map(ToString::to_string).collect()
    }

    fn valid() -> Value {
        json!({"spec": {"request": REQUEST, "signerName": "kubernetes.io/kube-apiserver-client", "usages": ["client auth"]}})
    }

    #[test]
    fn a_signed_request_with_signer_and_usages_is_valid() {
        assert_eq!(errors(&valid(), None), Vec::<String>::new());
    }

    #[test]
    fn spec_problems_get_upstreams_field_errors() {
        let mut obj = valid();
        obj["spec"]["request"] = json!("eA==");
        obj["spec"]["usages"] = json!(["client auth", "flying", "client auth"]);
        obj["spec"]["signerName"] = json!("example/signer");
        obj["spec"]["expirationSeconds"] = json!(599);
        let got = errors(&obj, None);
        assert_eq!(got[0], "spec.request: Invalid value: \"<request data>\": PEM block type must be CERTIFICATE REQUEST");
        assert!(got[1].starts_with("spec.usages[1]: Unsupported value: \"flying\": supported values: \"any\", \"cert sign\""), "{got:?}");
        assert_eq!(got[2], "spec.usages[2]: Duplicate value: \"client auth\"");
        assert_eq!(got[3], "spec.signerName: Invalid value: \"example\": should be a domain with at least two segments separated by dots");
        assert_eq!(got[4], "spec.expirationSeconds: Invalid value: 599: may not specify a duration less than 600 seconds (10 minutes)");
        assert_eq!(got.len(), 5, "{got:?}");
        let mut obj = valid();
        obj["spec"]["signerName"] = json!("");
        obj["spec"]["usages"] = json!([]);
        assert_eq!(errors(&obj, None), ["spec.usages: Required value", "spec.signerName: Required value: signerName must be provided"]);
        obj["spec"]["signerName"] = json!("a.b/c/d");
        obj["spec"]["usages"] = json!(["client auth"]);
        assert_eq!(
            errors(&obj, None),
            ["spec.signerName: Invalid value: \"a.b/c/d\": must be a fully qualified domain and path of the form 'example.com/signer-name'"]
        );
    }

    #[test]
    fn conditions_approved_and_denied_exclude_each_other_and_only_hold_true() {
        let mut obj = valid();
        obj["status"] = json!({"conditions": [
            {"type": "Approved", "status": "True"},
            {"type": "Denied", "status": "False"},
            {"type": "Approved", "status": "True"}
        ]});
        let got = errors(&obj, None);
        assert_eq!(
            got,
            [
                "status.conditions[1].status: Unsupported value: \"False\": supported values: \"True\"",
                "status.conditions[1].type: Invalid value: \"Denied\": Approved and Denied conditions are mutually exclusive",
                "status.conditions[2].type: Invalid value: \"Approved\": Approved and Denied conditions are mutually exclusive",
                "status.conditions[2].type: Duplicate value: \"Approved\"",
            ]
        );
    }

    #[test]
    fn updates_may_not_remove_approval_conditions_or_change_a_certificate() {
        let mut old = valid();
        old["status"] = json!({"conditions": [{"type": "Approved", "status": "True"}], "certificate": "bm90IGEgcGVt"});
        let mut new = old.clone();
        new["status"]["conditions"] = json!([]);
        new["status"]["certificate"] = json!("");
        assert_eq!(
            errors(&new, Some(&old)),
            [
                "status.conditions: Forbidden: updates may not remove a condition of type \"Approved\"",
                "status.certificate: Forbidden: updates may not modify existing certificate content",
            ]
        );
        // A certificate that is not PEM is refused when it is set.
        let mut fresh = valid();
        fresh["status"] = json!({"certificate": "bm90IGEgcGVt"});
        assert_eq!(
            errors(&fresh, Some(&valid())),
            ["status.certificate: Invalid value: \"<certificate data>\": must contain at least one CERTIFICATE PEM block"]
        );
    }

    #[test]
    fn condition_status_defaults_to_true() {
        let mut obj = json!({"status": {"conditions": [{"type": "Approved"}, {"type": "Ready", "status": "False"}]}});
        csr_defaults(obj.as_object_mut().unwrap());
        assert_eq!(obj["status"]["conditions"], json!([{"type": "Approved", "status": "True"}, {"type": "Ready", "status": "False"}]));
    }
}
