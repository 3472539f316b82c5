//! The audit log (`--audit-log-path`, `--audit-policy-file`), like upstream's
//! `WithAudit` filter (`staging/src/k8s.io/apiserver/pkg/endpoints/filters/audit.go`).
//!
//! - [`policy`]: the audit.k8s.io/v1 Policy and its evaluation.
//! - [`event`]: the audit.k8s.io/v1 Event written per stage.
//! - [`writer`]: the bounded buffer, writer thread and file rotation.
//!
//! [`audit_middleware`] runs after authentication (it needs the user) and
//! emits, for each request whose level is not `None`, the stages the policy
//! does not omit:
//!
//! - `RequestReceived` before the handler runs;
//! - for long-running requests (watches) `ResponseStarted` when the response
//!   headers are ready and `ResponseComplete` when the stream ends;
//! - `ResponseComplete` for every other request;
//! - `Panic` when the handler panics (the client gets a 500 Status).
//!
//! At `Request` level the request body (up to [`MAX_CAPTURED_BODY`]) is
//! logged as `requestObject`; at `RequestResponse` the response body too as
//! `responseObject` (not for watches). Bodies that are not JSON (or YAML)
//! objects are not logged. Failed requests carry the Status' message and
//! reason in `responseStatus`.

pub mod event;
pub mod policy;
pub mod writer;

use std::collections::BTreeMap;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};

use axum::extract::Request;
use axum::extract::State;
use axum::http::Method;
use axum::middleware::Next;
use axum::response::Response;
use bytes::Bytes;
use futures::FutureExt;
use serde_json::value::RawValue;
use serde_json::Value;

use crate::filters::authn::UserInfo;
use crate::filters::body::{capture, guard_response};
use crate::filters::requestinfo::{context_of, panic_message, panic_response, RequestContext};
use event::{status_code_only, status_from_body, strip_managed_fields, Event, ObjectReference};
use policy::{Level, Policy, RequestAuditConfig, Stage};
use writer::AuditBackend;

/// Largest request or response body copied into an event (3 MiB, upstream's
/// request body limit); larger bodies are not logged.
pub const MAX_CAPTURED_BODY: usize = 3 * 1024 * 1024;

/// Largest error body read to fill `responseStatus` at `Metadata` level.
const MAX_STATUS_BODY: usize = 64 * 1024;

/// Annotations other filters add to the request's audit events (e.g.
/// `authorization.k8s.io/decision`); a request extension set by
/// [`audit_middleware`].
#[derive(Debug, Clone, Default)]
pub struct AuditAnnotations(Arc<Mutex<BTreeMap<String, String>>>);

impl AuditAnnotations {
    /// Sets `key` to `value` (empty values are skipped).
    pub fn set(&self, key: &str, value: &str) {
        if !value.is_empty() {
            self.0.lock().unwrap_or_else(|p| p.into_inner()).insert(key.into(), value.into());
        }
    }

    fn snapshot(&self) -> BTreeMap<String, String> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

tokio::task_local! {
    /// The annotations of the request being handled (see [`annotate`]).
    static REQUEST_ANNOTATIONS: AuditAnnotations;
}

/// Runs `f` (a request's handler) with `annotations` as the target of
/// [`annotate`].
pub async fn with_request_annotations<F: std::future::Future>(annotations: AuditAnnotations, f: F) -> F::Output {
    REQUEST_ANNOTATIONS.scope(annotations, f).await
}

/// Adds an audit annotation to the request being handled (upstream
/// `admission.Attributes.AddAnnotation`), e.g. admission webhooks'
/// `<webhook>/<key>`; nothing when the server runs without an audit filter.
pub fn annotate(key: &str, value: &str) {
    let _ = REQUEST_ANNOTATIONS.try_with(|a| a.set(key, value));
}

/// The impersonated user of a request, set by the impersonation filter and
/// logged as the events' `impersonatedUser` (upstream `LogImpersonatedUser`).
#[derive(Debug, Clone, Default)]
pub struct AuditImpersonation(Arc<Mutex<Option<Value>>>);

impl AuditImpersonation {
    /// Records the impersonated user (`username`, `uid`, `groups`, `extra`).
    pub fn set(&self, user: Value) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(user);
    }

    fn get(&self) -> Option<Value> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// The policy and the backend events are written to.
#[derive(Debug)]
pub struct Auditor {
    /// The policy.
    pub policy: Policy,
    /// The backend.
    pub backend: AuditBackend,
    metrics: Arc<crate::filters::metrics::ApiserverMetrics>,
}

impl Auditor {
    /// An auditor writing to `backend`.
    pub fn new(policy: Policy, backend: AuditBackend, metrics: Arc<crate::filters::metrics::ApiserverMetrics>) -> Self {
        Auditor { policy, backend, metrics }
    }

    /// Logs a request that failed authentication (upstream
    /// `WithFailedAuthenticationAudit`): one `ResponseStarted` event with
    /// code 401, when the policy audits unauthenticated requests.
    pub async fn log_failed_authentication(&self, ctx: &RequestContext) {
        let cfg = self.policy.evaluate(&ctx.attrs, None);
        if cfg.level == Level::None || cfg.omit_stages.contains(&Stage::ResponseStarted) {
            return;
        }
        let mut ev = base_event(ctx, &UserInfo::default(), cfg.level, Stage::ResponseStarted);
        ev.response_status = Some(serde_json::json!({"metadata": {}, "message": "Authentication failed", "code": 401}));
        self.backend.process(ev).await;
    }
}

fn object_ref(ctx: &RequestContext) -> Option<ObjectReference> {
    let a = &ctx.attrs;
    a.is_resource_request.then(|| ObjectReference {
        resource: a.resource.clone(),
        namespace: a.namespace.clone(),
        name: a.name.clone(),
        api_group: a.api_group.clone(),
        api_version: a.api_version.clone(),
        subresource: a.subresource.clone(),
        ..Default::default()
    })
}

fn base_event(ctx: &RequestContext, user: &UserInfo, level: Level, stage: Stage) -> Event {
    Event {
        kind: "Event",
        api_version: "audit.k8s.io/v1",
        level,
        audit_id: ctx.audit_id.clone(),
        stage,
        request_uri: ctx.request_uri.clone(),
        verb: ctx.attrs.verb.clone(),
        user: user.clone(),
        source_ips: ctx.source_ips.clone(),
        user_agent: ctx.user_agent.clone(),
        object_ref: object_ref(ctx),
        response_status: None,
        request_object: None,
        response_object: None,
        request_received_timestamp: rkube_api::time::format_rfc3339_micros(ctx.received),
        stage_timestamp: rkube_api::time::now_rfc3339_micros(),
        annotations: BTreeMap::new(),
        impersonated_user: None,
    }
}

/// A logged request or response body: the JSON text itself (never re-encoded)
/// and, for request bodies, the metadata that completes the object reference.
#[derive(Debug, Clone)]
struct LoggedObject {
    raw: Arc<RawValue>,
    meta: ObjectMetaFields,
}

#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct ObjectMetaFields {
    #[serde(default)]
    name: String,
    #[serde(default)]
    namespace: String,
    #[serde(default)]
    uid: String,
    #[serde(default)]
    resource_version: String,
}

#[derive(serde::Deserialize)]
struct MetaOnly {
    #[serde(default)]
    metadata: ObjectMetaFields,
}

/// A captured body as a logged object, when it is a JSON (or YAML) object.
/// JSON bodies are kept verbatim (validated, not re-encoded) unless
/// `metadata.managedFields` must be removed.
fn decode_object(bytes: &Bytes, omit_managed_fields: bool, with_meta: bool) -> Option<LoggedObject> {
    let first = bytes.iter().find(|b| !b.is_ascii_whitespace()).copied();
    let text: String = if first == Some(b'{') && !omit_managed_fields {
        String::from_utf8(bytes.to_vec()).ok()?
    } else {
        let mut v: Value = serde_json::from_slice(bytes)
            .ok()
            .or_else(|| crate::media::yaml_to_json(bytes).ok())?;
        if !v.is_object() {
            return None;
        }
        if omit_managed_fields {
            strip_managed_fields(&mut v);
        }
        serde_json::to_string(&v).ok()?
    };
    let meta = if with_meta {
        serde_json::from_str::<MetaOnly>(&text).map(|m| m.metadata).unwrap_or_default()
    } else {
        ObjectMetaFields::default()
    };
    let raw: Arc<RawValue> = RawValue::from_string(text).ok()?.into();
    Some(LoggedObject { raw, meta })
}

/// Fills the object reference's empty fields from the request object's
/// metadata (upstream `LogRequestObject`).
fn complete_object_ref(ev: &mut Event, meta: &ObjectMetaFields) {
    let Some(r) = ev.object_ref.as_mut() else { return };
    for (field, value) in [
        (&mut r.namespace, &meta.namespace),
        (&mut r.name, &meta.name),
        (&mut r.uid, &meta.uid),
        (&mut r.resource_version, &meta.resource_version),
    ] {
        if field.is_empty() {
            *field = value.clone();
        }
    }
}

/// Everything needed to finish a request's events.
struct Pending {
    auditor: Arc<Auditor>,
    ctx: Arc<RequestContext>,
    user: UserInfo,
    cfg: RequestAuditConfig,
    annotations: AuditAnnotations,
    impersonation: AuditImpersonation,
    request_object: Option<LoggedObject>,
}

impl Pending {
    fn event(&self, stage: Stage) -> Event {
        let mut ev = base_event(&self.ctx, &self.user, self.cfg.level, stage);
        ev.annotations = self.annotations.snapshot();
        ev.impersonated_user = self.impersonation.get();
        if let Some(obj) = &self.request_object {
            complete_object_ref(&mut ev, &obj.meta);
            ev.request_object = Some(obj.raw.clone());
        }
        ev
    }

    fn emits(&self, stage: Stage) -> bool {
        !self.cfg.omit_stages.contains(&stage)
    }
}

/// Emits `ResponseComplete` of a long-running request when its body ends.
struct CompleteOnDrop {
    pending: Pending,
    status: Value,
}

impl Drop for CompleteOnDrop {
    fn drop(&mut self) {
        if self.pending.emits(Stage::ResponseComplete) {
            let mut ev = self.pending.event(Stage::ResponseComplete);
            ev.response_status = Some(self.status.clone());
            self.pending.auditor.backend.try_process(ev);
        }
    }
}

fn has_body(method: &Method) -> bool {
    matches!(*method, Method::POST | Method::PUT | Method::PATCH | Method::DELETE)
}

fn is_json(resp: &Response) -> bool {
    resp.headers().get("content-type").and_then(|v| v.to_str().ok()).is_some_and(|ct| ct.starts_with("application/json"))
}

/// Middleware writing the audit events of every request (see the module docs).
pub async fn audit_middleware(State(auditor): State<Arc<Auditor>>, mut req: Request, next: Next) -> Response {
    let ctx = context_of(&req);
    let user = req.extensions().get::<UserInfo>().cloned().unwrap_or_default();
    let cfg = auditor.policy.evaluate(&ctx.attrs, Some(&user));
    auditor.metrics.audit_level(cfg.level.as_str());
    if cfg.level == Level::None {
        return next.run(req).await;
    }
    let annotations = AuditAnnotations::default();
    req.extensions_mut().insert(annotations.clone());
    let impersonation = AuditImpersonation::default();
    req.extensions_mut().insert(impersonation.clone());
    let mut pending =
        Pending { auditor: auditor.clone(), ctx: ctx.clone(), user, cfg, annotations, impersonation, request_object: None };
    if pending.emits(Stage::RequestReceived) {
        // As upstream, RequestReceived is logged before the body is read: no requestObject.
        let mut ev = base_event(&ctx, &pending.user, pending.cfg.level, Stage::RequestReceived);
        ev.annotations = pending.annotations.snapshot();
        auditor.backend.process(ev).await;
    }
    if pending.cfg.level >= Level::Request && has_body(req.method()) {
        let (parts, body) = req.into_parts();
        let (body, bytes) = capture(body, MAX_CAPTURED_BODY).await;
        pending.request_object = bytes.as_ref().and_then(|b| decode_object(b, pending.cfg.omit_managed_fields, true));
        req = Request::from_parts(parts, body);
    }
    let resp = match AssertUnwindSafe(next.run(req)).catch_unwind().await {
        Ok(resp) => resp,
        Err(panic) => {
            let msg = panic_message(&panic);
            tracing::error!(path = %ctx.attrs.path, audit_id = %ctx.audit_id, panic = %msg, "request handler panicked");
            let mut ev = pending.event(Stage::Panic);
            ev.response_status = Some(serde_json::json!({
                "metadata": {}, "status": "Failure", "message": format!("APIServer panic'd: {msg}"),
                "reason": "InternalError", "code": 500,
            }));
            auditor.backend.process(ev).await;
            return panic_response();
        }
    };
    let code = resp.status().as_u16();
    if ctx.attrs.is_long_running() {
        let status = status_code_only(code);
        if pending.emits(Stage::ResponseStarted) {
            let mut ev = pending.event(Stage::ResponseStarted);
            ev.response_status = Some(status.clone());
            auditor.backend.process(ev).await;
        }
        return guard_response(resp, CompleteOnDrop { pending, status });
    }
    let want_body = pending.cfg.level == Level::RequestResponse;
    let want_status = code >= 400 && is_json(&resp);
    let (resp, body_bytes) = if want_body || want_status {
        let cap = if want_body { MAX_CAPTURED_BODY } else { MAX_STATUS_BODY };
        let (parts, body) = resp.into_parts();
        let (body, bytes) = capture(body, cap).await;
        (Response::from_parts(parts, body), bytes)
    } else {
        (resp, None)
    };
    let json_body = body_bytes.as_ref().filter(|_| is_json(&resp));
    if pending.emits(Stage::ResponseComplete) {
        let mut ev = pending.event(Stage::ResponseComplete);
        let status = json_body
            .filter(|_| code >= 400)
            .filter(|b| b.len() <= MAX_STATUS_BODY)
            .and_then(|b| serde_json::from_slice::<Value>(b).ok())
            .filter(|v| v.get("kind").and_then(Value::as_str) == Some("Status"));
        ev.response_status = Some(match &status {
            Some(s) => status_from_body(code, s),
            None => status_code_only(code),
        });
        if want_body {
            ev.response_object = json_body.and_then(|b| decode_object(b, pending.cfg.omit_managed_fields, false)).map(|o| o.raw);
        }
        auditor.backend.process(ev).await;
    }
    resp
}
