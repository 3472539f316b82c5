//! Calling one webhook (upstream
//! `staging/src/k8s.io/apiserver/pkg/admission/plugin/webhook/request` and
//! `pkg/util/webhook`): the AdmissionReview v1 request, HTTPS with rustls
//! trusting only `clientConfig.caBundle`, the `timeoutSeconds` deadline, and
//! the checks on the response.
//!
//! `clientConfig.service` is resolved without a cluster network: the
//! Service's port (`port`, default 443) is looked up in its Endpoints, and the
//! request goes to the first ready address and the matching endpoint port
//! (a pod IP, or e.g. `127.0.0.1` for a host process), with TLS server name
//! `<name>.<namespace>.svc` as upstream.

use std::net::SocketAddr;
use std::time::Duration;

use base64::Engine;
use rkube_api::registry;
use serde_json::{json, Value};

use super::Attributes;
use crate::state::ApiState;

/// `timeoutSeconds` when a webhook sets none (upstream default), seconds.
pub const DEFAULT_TIMEOUT_SECONDS: u64 = 10;
/// The largest `timeoutSeconds` (upstream validation allows 1..=30).
pub const MAX_TIMEOUT_SECONDS: u64 = 30;

/// Why a call failed (upstream `ErrCallingWebhook`'s reason): the message
/// that follows `failed calling webhook "<name>": `.
#[derive(Debug)]
pub struct CallError(pub String);

/// What the webhook answered (`response` of the AdmissionReview), checked.
#[derive(Debug, Default)]
pub struct Answer {
    /// `response.allowed`.
    pub allowed: bool,
    /// `response.status`, when the webhook set one.
    pub status: Option<Value>,
    /// `response.patchType` and the base64-decoded `response.patch`, when present.
    pub patch: Option<(String, Vec<u8>)>,
    /// `response.warnings`.
    pub warnings: Vec<String>,
    /// `response.auditAnnotations` (key, value), logged as `<webhook>/<key>`.
    pub audit_annotations: Vec<(String, String)>,
}

/// The AdmissionReview v1 sent for `a` with request `uid`.
pub fn review(a: &Attributes, uid: &str) -> Value {
    let kind = json!({"group": a.group, "version": a.version, "kind": a.kind});
    let resource = json!({"group": a.group, "version": a.version, "resource": a.resource});
    let mut req = json!({
        "uid": uid,
        "kind": kind,
        "resource": resource,
        "requestKind": kind,
        "requestResource": resource,
        "name": a.name,
        "namespace": a.namespace,
        "operation": a.operation,
        "userInfo": a.user.as_ref().map(|u| serde_json::to_value(u).unwrap_or(Value::Null)).unwrap_or_else(|| json!({})),
        "object": a.object.clone().unwrap_or(Value::Null),
        "oldObject": a.old_object.as_deref().cloned().unwrap_or(Value::Null),
        "dryRun": a.dry_run,
        "options": a.options,
    });
    if let Some(m) = req.as_object_mut() {
        if !a.subresource.is_empty() {
            m.insert("subResource".into(), json!(a.subresource));
            m.insert("requestSubResource".into(), json!(a.subresource));
        }
        if a.name.is_empty() {
            m.remove("name");
        }
        if a.namespace.is_empty() {
            m.remove("namespace");
        }
    }
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req})
}

/// Where a webhook is called: the URL, and for `service` the address its
/// host name resolves to.
struct Target {
    url: String,
    resolve: Option<(String, SocketAddr)>,
}

/// The Endpoints address and port behind `service` (namespace, name, port).
async fn resolve_service(st: &ApiState, svc: &Value) -> Result<Target, CallError> {
    let ns = svc.get("namespace").and_then(Value::as_str).unwrap_or("");
    let name = svc.get("name").and_then(Value::as_str).unwrap_or("");
    let port = svc.get("port").and_then(Value::as_i64).unwrap_or(443);
    let path = svc.get("path").and_then(Value::as_str).unwrap_or("");
    let get = |resource: &'static str| async move {
        let info = registry::lookup("", "v1", resource).ok_or_else(|| CallError(format!("no {resource} resource")))?;
        let found = st.cache.get(info, ns, name, Some("0")).await.map_err(|e| CallError(e.to_string()))?;
        let Some(found) = found else {
            return Err(CallError(format!("failed to resolve the webhook's service: {resource} \"{name}\" not found")));
        };
        serde_json::from_slice::<Value>(&found.json).map_err(|e| CallError(e.to_string()))
    };
    let service = get("services").await?;
    let ports = service.pointer("/spec/ports").and_then(Value::as_array).cloned().unwrap_or_default();
    let Some(sp) = ports.iter().find(|p| p.get("port").and_then(Value::as_i64) == Some(port)) else {
        return Err(CallError(format!("service {ns}/{name} has no port {port}")));
    };
    let port_name = sp.get("name").and_then(Value::as_str).unwrap_or("");
    let endpoints = get("endpoints").await?;
    let subsets = endpoints.get("subsets").and_then(Value::as_array).cloned().unwrap_or_default();
    for subset in &subsets {
        let eports = subset.get("ports").and_then(Value::as_array).cloned().unwrap_or_default();
        let eport = eports
            .iter()
            .find(|p| p.get("name").and_then(Value::as_str).unwrap_or("") == port_name || eports.len() == 1)
            .and_then(|p| p.get("port").and_then(Value::as_u64));
        let ip = subset.pointer("/addresses/0/ip").and_then(Value::as_str);
        if let (Some(eport), Some(ip)) = (eport, ip) {
            let Ok(ip) = ip.parse::<std::net::IpAddr>() else { continue };
            let host = format!("{name}.{ns}.svc");
            let addr = SocketAddr::new(ip, u16::try_from(eport).unwrap_or(443));
            return Ok(Target { url: format!("https://{host}:{port}{path}"), resolve: Some((host, addr)) });
        }
    }
    Err(CallError(format!("service {ns}/{name} has no ready endpoints for port {port}")))
}

/// Clients by (`caBundle`, resolved service address), so calls to one
/// webhook reuse their connections (upstream caches its REST clients the
/// same way). Bounded: past [`MAX_CACHED_CLIENTS`] entries it starts over.
type ClientKey = (Vec<u8>, Option<(String, SocketAddr)>);
static CLIENTS: std::sync::LazyLock<std::sync::Mutex<std::collections::HashMap<ClientKey, reqwest::Client>>> =
    std::sync::LazyLock::new(Default::default);

/// The most webhook clients kept at once.
pub const MAX_CACHED_CLIENTS: usize = 64;

/// An HTTPS client trusting the PEM certificates of `ca_bundle` only
/// (cached, see [`CLIENTS`]).
fn client(ca_bundle: &[u8], resolve: Option<&(String, SocketAddr)>) -> Result<reqwest::Client, CallError> {
    let key: ClientKey = (ca_bundle.to_vec(), resolve.cloned());
    if let Some(c) = CLIENTS.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
        return Ok(c.clone());
    }
    let built = new_client(ca_bundle, resolve)?;
    let mut cache = CLIENTS.lock().unwrap_or_else(|e| e.into_inner());
    if cache.len() >= MAX_CACHED_CLIENTS {
        cache.clear();
    }
    cache.insert(key, built.clone());
    Ok(built)
}

/// Builds an HTTPS client trusting the PEM certificates of `ca_bundle` only.
fn new_client(ca_bundle: &[u8], resolve: Option<&(String, SocketAddr)>) -> Result<reqwest::Client, CallError> {
    let mut roots = rustls::RootCertStore::empty();
    use rustls::pki_types::pem::PemObject;
    for cert in rustls::pki_types::CertificateDer::pem_slice_iter(ca_bundle).filter_map(Result::ok) {
        roots.add(cert).map_err(|e| CallError(format!("invalid caBundle: {e}")))?;
    }
    let config = rustls::ClientConfig::builder_with_provider(crate::filters::tls::provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| CallError(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let mut builder = reqwest::Client::builder().use_preconfigured_tls(config);
    if let Some((host, addr)) = resolve {
        builder = builder.resolve(host, *addr);
    }
    builder.build().map_err(|e| CallError(e.to_string()))
}

/// The chain of causes of `e`, joined (reqwest puts the useful part last).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut src = e.source();
    while let Some(s) = src {
        out.push_str(": ");
        out.push_str(&s.to_string());
        src = s.source();
    }
    out
}

/// Why [`post`] failed: before sending (the `clientConfig` cannot be used:
/// an unresolvable service, a bad `caBundle`), or the exchange itself
/// (`Post "<url>": <cause>`, as Go's HTTP client words it).
#[derive(Debug)]
pub enum PostError {
    /// The request could not be made.
    Setup(CallError),
    /// The request was made and failed: `Post "<url>": <cause>`.
    Exchange(String),
}

/// A webhook's answer to [`post`]: the URL called, the HTTP status code
/// and the body.
#[derive(Debug)]
pub struct Posted {
    /// The URL called (with its `timeout` query parameter).
    pub url: String,
    /// The HTTP status code.
    pub code: u16,
    /// The response body (at most the `max_response_bytes` given to [`post`]).
    pub body: bytes::Bytes,
}

/// POSTs `body` (JSON) to the webhook `client_config` names (`url`, or
/// `service` resolved through its Endpoints, see the module doc), over
/// HTTPS trusting only its `caBundle`, within `timeout` (also sent as the
/// `timeout` query parameter, as upstream's clients do), reading at most
/// `max_response_bytes` of the answer. Used by admission webhooks
/// ([`call`]) and CRD conversion webhooks
/// ([`crate::crd_conversion`]).
pub async fn post(
    st: &ApiState,
    client_config: &Value,
    body: Vec<u8>,
    timeout: Duration,
    max_response_bytes: usize,
) -> Result<Posted, PostError> {
    let target = match (client_config.get("url").and_then(Value::as_str), client_config.get("service")) {
        (Some(url), _) => Target { url: url.to_string(), resolve: None },
        (None, Some(svc)) => resolve_service(st, svc).await.map_err(PostError::Setup)?,
        (None, None) => return Err(PostError::Setup(CallError("webhook has neither url nor service".into()))),
    };
    let ca = client_config.get("caBundle").and_then(Value::as_str).unwrap_or("");
    let ca = base64::engine::general_purpose::STANDARD
        .decode(ca)
        .map_err(|e| PostError::Setup(CallError(format!("invalid caBundle: {e}"))))?;
    let http = client(&ca, target.resolve.as_ref()).map_err(PostError::Setup)?;
    let sep = if target.url.contains('?') { '&' } else { '?' };
    let url = format!("{}{sep}timeout={}s", target.url, timeout.as_secs().max(1));
    let send = http.post(&url).header("content-type", "application/json").header("accept", "application/json").body(body);
    let failed = |what: String| PostError::Exchange(format!("Post \"{url}\": {what}"));
    let exchange = async {
        let mut resp = send.send().await.map_err(|e| failed(error_chain(&e)))?;
        let code = resp.status().as_u16();
        let mut out = bytes::BytesMut::new();
        while let Some(chunk) = resp.chunk().await.map_err(|e| failed(error_chain(&e)))? {
            if out.len() + chunk.len() > max_response_bytes {
                return Err(failed(format!("the response is larger than {max_response_bytes} bytes")));
            }
            out.extend_from_slice(&chunk);
        }
        Ok((code, out.freeze()))
    };
    match tokio::time::timeout(timeout, exchange).await {
        Ok(r) => r.map(|(code, body)| Posted { url: url.clone(), code, body }),
        Err(_) => Err(failed("context deadline exceeded".into())),
    }
}

/// The most bytes read from an admission webhook's answer.
pub const MAX_ADMISSION_RESPONSE_BYTES: usize = 64 * 1024 * 1024;

/// Calls `webhook` with `review_body` (its `request.uid` is `uid`), within
/// the webhook's `timeoutSeconds`. Errors are upstream's `ErrCallingWebhook`
/// reasons (unreachable, timed out, not 200, undecodable, wrong uid).
pub async fn call(st: &ApiState, webhook: &Value, review_body: &Value, uid: &str, mutating: bool) -> Result<Answer, CallError> {
    let cc = webhook.get("clientConfig").cloned().unwrap_or(Value::Null);
    let timeout = webhook
        .get("timeoutSeconds")
        .and_then(Value::as_u64)
        .unwrap_or(DEFAULT_TIMEOUT_SECONDS)
        .clamp(1, MAX_TIMEOUT_SECONDS);
    let body = serde_json::to_vec(review_body).map_err(|e| CallError(e.to_string()))?;
    let posted = match post(st, &cc, body, Duration::from_secs(timeout), MAX_ADMISSION_RESPONSE_BYTES).await {
        Ok(p) => p,
        Err(PostError::Setup(e)) => return Err(e),
        Err(PostError::Exchange(e)) => return Err(CallError(format!("failed to call webhook: {e}"))),
    };
    if !(200..300).contains(&posted.code) {
        let text = String::from_utf8_lossy(&posted.body);
        return Err(CallError(format!("failed to call webhook: the server responded with the status code {}: {text}", posted.code)));
    }
    let answer: Value = serde_json::from_slice(&posted.body)
        .map_err(|e| CallError(format!("failed to call webhook: Post \"{}\": decoding the response: {e}", posted.url)))?;
    parse_answer(&answer, uid, mutating)
}

/// Checks an AdmissionReview response as upstream's `VerifyAdmissionResponse`
/// does (in its order); errors are the reasons after
/// `received invalid webhook response: `. `mutating`: a mutating webhook may
/// return `patch` with `patchType` (both or neither); a validating one neither.
pub fn parse_answer(answer: &Value, uid: &str, mutating: bool) -> Result<Answer, CallError> {
    let invalid = |why: String| CallError(format!("received invalid webhook response: {why}"));
    let Some(resp) = answer.get("response").filter(|r| !r.is_null()) else {
        return Err(invalid("webhook response was absent".into()));
    };
    let got = resp.get("uid").and_then(Value::as_str).unwrap_or("");
    if got != uid {
        return Err(invalid(format!("expected response.uid={uid:?}, got {got:?}")));
    }
    let api_version = answer.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let kind = answer.get("kind").and_then(Value::as_str).unwrap_or("");
    if api_version != "admission.k8s.io/v1" || kind != "AdmissionReview" {
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let got = if group.is_empty() { format!("/{version}, Kind={kind}") } else { format!("{group}/{version}, Kind={kind}") };
        return Err(invalid(format!("expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, got {got}")));
    }
    let patch = resp.get("patch").and_then(Value::as_str).unwrap_or("");
    let patch_type = resp.get("patchType").and_then(Value::as_str);
    let patch = if mutating {
        match (patch.is_empty(), patch_type) {
            (false, None) => return Err(invalid("webhook returned response.patch but not response.patchType".into())),
            (true, Some(_)) => return Err(invalid("webhook returned response.patchType but not response.patch".into())),
            (false, Some("")) => return Err(invalid("webhook returned invalid response.patchType of \"\"".into())),
            (false, Some(t)) => {
                let raw = base64::engine::general_purpose::STANDARD
                    .decode(patch)
                    .map_err(|e| invalid(format!("response.patch is not base64: {e}")))?;
                Some((t.to_string(), raw))
            }
            (true, None) => None,
        }
    } else if !patch.is_empty() {
        return Err(invalid("validating webhook may not return response.patch".into()));
    } else if patch_type.is_some() {
        return Err(invalid("validating webhook may not return response.patchType".into()));
    } else {
        None
    };
    let warnings = resp
        .get("warnings")
        .and_then(Value::as_array)
        .map(|w| w.iter().filter_map(Value::as_str).map(str::to_string).collect())
        .unwrap_or_default();
    let audit_annotations = resp
        .get("auditAnnotations")
        .and_then(Value::as_object)
        .map(|m| m.iter().filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string()))).collect())
        .unwrap_or_default();
    Ok(Answer {
        allowed: resp.get("allowed").and_then(Value::as_bool).unwrap_or(false),
        status: resp.get("status").cloned(),
        patch,
        warnings,
        audit_annotations,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn review(response: Value) -> Value {
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response})
    }

    #[test]
    fn responses_are_checked_like_upstreams_verify_admission_response() {
        let err = |v: &Value, mutating: bool| parse_answer(v, "u1", mutating).err().map(|e| e.0).unwrap_or_default();
        assert_eq!(err(&json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}), true), "received invalid webhook response: webhook response was absent");
        assert_eq!(err(&review(json!({"uid": "u2", "allowed": true})), true), "received invalid webhook response: expected response.uid=\"u1\", got \"u2\"");
        let v1beta1 = json!({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "response": {"uid": "u1"}});
        assert!(err(&v1beta1, true).ends_with("expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, got admission.k8s.io/v1beta1, Kind=AdmissionReview"));
        let patch = "W10="; // []
        assert!(err(&review(json!({"uid": "u1", "allowed": true, "patch": patch})), true).ends_with("webhook returned response.patch but not response.patchType"));
        assert!(err(&review(json!({"uid": "u1", "allowed": true, "patchType": "JSONPatch"})), true).ends_with("webhook returned response.patchType but not response.patch"));
        assert!(err(&review(json!({"uid": "u1", "allowed": true, "patch": patch, "patchType": "JSONPatch"})), false).ends_with("validating webhook may not return response.patch"));
        let ok = parse_answer(&review(json!({"uid": "u1", "allowed": true, "patch": patch, "patchType": "JSONPatch", "warnings": ["w"]})), "u1", true);
        let ok = ok.ok().unwrap_or_default();
        assert!(ok.allowed);
        assert_eq!(ok.patch, Some(("JSONPatch".to_string(), b"[]".to_vec())));
        assert_eq!(ok.warnings, vec!["w".to_string()]);
    }
}
