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

/// `timeoutSeconds` when a webhook sets none, and the largest allowed.
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
    /// The decoded `response.patch` (a JSON Patch), when present.
    pub patch: Option<json_patch::Patch>,
    /// `response.warnings`.
    pub warnings: Vec<String>,
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
        "oldObject": a.old_object.clone().unwrap_or(Value::Null),
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

/// An HTTPS client trusting the PEM certificates of `ca_bundle` only.
fn client(ca_bundle: &[u8], resolve: Option<&(String, SocketAddr)>) -> Result<reqwest::Client, CallError> {
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

/// Calls `webhook` with `review_body` (its `request.uid` is `uid`), within
/// the webhook's `timeoutSeconds`. Errors are upstream's `ErrCallingWebhook`
/// reasons (unreachable, timed out, not 200, undecodable, wrong uid).
pub async fn call(st: &ApiState, webhook: &Value, review_body: &Value, uid: &str) -> Result<Answer, CallError> {
    let cc = webhook.get("clientConfig").cloned().unwrap_or(Value::Null);
    let timeout = webhook
        .get("timeoutSeconds")
        .and_then(Value::as_u64)
        .unwrap_or(DEFAULT_TIMEOUT_SECONDS)
        .clamp(1, MAX_TIMEOUT_SECONDS);
    let target = match (cc.get("url").and_then(Value::as_str), cc.get("service")) {
        (Some(url), _) => Target { url: url.to_string(), resolve: None },
        (None, Some(svc)) => resolve_service(st, svc).await?,
        (None, None) => return Err(CallError("webhook has neither url nor service".into())),
    };
    let ca = cc.get("caBundle").and_then(Value::as_str).unwrap_or("");
    let ca = base64::engine::general_purpose::STANDARD.decode(ca).map_err(|e| CallError(format!("invalid caBundle: {e}")))?;
    let http = client(&ca, target.resolve.as_ref())?;
    let sep = if target.url.contains('?') { '&' } else { '?' };
    let url = format!("{}{sep}timeout={timeout}s", target.url);
    let body = serde_json::to_vec(review_body).map_err(|e| CallError(e.to_string()))?;
    let send = http.post(&url).header("content-type", "application/json").header("accept", "application/json").body(body);
    let failed = |what: String| CallError(format!("failed to call webhook: Post \"{url}\": {what}"));
    let exchange = async {
        let resp = send.send().await.map_err(|e| failed(error_chain(&e)))?;
        let code = resp.status();
        let bytes = resp.bytes().await.map_err(|e| failed(error_chain(&e)))?;
        Ok::<_, CallError>((code, bytes))
    };
    let (code, bytes) = match tokio::time::timeout(Duration::from_secs(timeout), exchange).await {
        Ok(r) => r?,
        Err(_) => return Err(failed("context deadline exceeded".into())),
    };
    if !code.is_success() {
        let text = String::from_utf8_lossy(&bytes);
        return Err(CallError(format!("failed to call webhook: the server responded with the status code {}: {text}", code.as_u16())));
    }
    let answer: Value = serde_json::from_slice(&bytes)
        .map_err(|e| CallError(format!("received invalid webhook response: {e}")))?;
    parse_answer(&answer, uid)
}

/// Checks and decodes an AdmissionReview response (upstream `VerifyAdmissionResponse`).
pub fn parse_answer(answer: &Value, uid: &str) -> Result<Answer, CallError> {
    let api_version = answer.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let kind = answer.get("kind").and_then(Value::as_str).unwrap_or("");
    if api_version != "admission.k8s.io/v1" || kind != "AdmissionReview" {
        return Err(CallError(format!(
            "expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, got {api_version}, Kind={kind}"
        )));
    }
    let Some(resp) = answer.get("response") else {
        return Err(CallError("webhook response was absent".into()));
    };
    let got = resp.get("uid").and_then(Value::as_str).unwrap_or("");
    if got != uid {
        return Err(CallError(format!("expected response.uid={uid:?}, got {got:?}")));
    }
    let warnings = resp
        .get("warnings")
        .and_then(Value::as_array)
        .map(|w| w.iter().filter_map(Value::as_str).map(str::to_string).collect())
        .unwrap_or_default();
    let patch_b64 = resp.get("patch").and_then(Value::as_str).unwrap_or("");
    let patch = if patch_b64.is_empty() {
        None
    } else {
        let patch_type = resp.get("patchType").and_then(Value::as_str).unwrap_or("");
        if patch_type != "JSONPatch" {
            return Err(CallError(format!("webhook returned a patch with patchType {patch_type:?}: only \"JSONPatch\" is supported")));
        }
        let raw = base64::engine::general_purpose::STANDARD
            .decode(patch_b64)
            .map_err(|e| CallError(format!("invalid patch: {e}")))?;
        Some(serde_json::from_slice::<json_patch::Patch>(&raw).map_err(|e| CallError(format!("invalid patch: {e}")))?)
    };
    Ok(Answer {
        allowed: resp.get("allowed").and_then(Value::as_bool).unwrap_or(false),
        status: resp.get("status").cloned(),
        patch,
        warnings,
    })
}

