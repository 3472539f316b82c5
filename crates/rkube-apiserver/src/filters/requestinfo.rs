//! What a request addresses, from its method, path and query alone, like
//! upstream's `RequestInfoFactory`
//! (`staging/src/k8s.io/apiserver/pkg/endpoints/request/requestinfo.go`),
//! plus the per-request context every filter shares ([`RequestContext`]:
//! audit ID, receive time, source IPs), set by the outermost filter
//! [`request_context`] (upstream `WithRequestInfo`, `WithAuditInit`,
//! `WithRequestReceivedTimestamp` and `WithPanicRecovery` in one).
//!
//! Unlike the handlers' parser (`crate::request`), this one never fails and
//! needs no registry: it classifies any path, known resource or not, so that
//! authentication, audit, authorization and metrics see the same attributes
//! for every request.
//!
//! ```text
//! /api/v1/namespaces/ns/pods/web/status   resource request: verb from method, group "", version v1,
//!                                          namespace ns, resource pods, name web, subresource status
//! /apis/apps/v1/deployments?watch=true     verb watch, group apps, all namespaces
//! /api/v1/watch/namespaces/ns/pods         verb watch (legacy watch prefix)
//! /api/v1, /apis/apps, /healthz, /metrics  non-resource: verb = lowercase HTTP method
//! ```

use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Instant;

use axum::extract::{ConnectInfo, Request};
use axum::http::{HeaderMap, HeaderValue, Method, Uri};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use futures::FutureExt;
use rkube_api::status::Status;

use crate::error::ApiError;
use crate::filters::tls::ConnInfo;

/// Verbs that read (upstream `nonMutatingRequestVerbs` of the max-inflight filter).
const READ_ONLY_VERBS: &[&str] = &["get", "list", "watch"];

/// Subresources served as long-running requests (upstream `LongRunningFunc`:
/// `proxy`, `attach`, `exec`, `log`, `portforward`).
const LONG_RUNNING_SUBRESOURCES: &[&str] = &["proxy", "attach", "exec", "log", "portforward"];

/// Namespace subresources: `namespaces/<name>/<sub>` addresses the namespace itself.
const NAMESPACE_SUBRESOURCES: &[&str] = &["status", "finalize"];

/// Longest `Audit-ID` request header reused as the request's audit ID.
const MAX_AUDIT_ID_LEN: usize = 128;

/// The attributes of one request, as upstream's `RequestInfo`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestAttributes {
    /// True for `/api/<v>/...` and `/apis/<g>/<v>/...` paths with a resource.
    pub is_resource_request: bool,
    /// The URL path.
    pub path: String,
    /// Kubernetes verb (`get`, `list`, `watch`, `create`, `update`, `patch`,
    /// `delete`, `deletecollection`); for non-resource requests the lowercase
    /// HTTP method (`get`, `put`, ...).
    pub verb: String,
    /// `api` or `apis` (empty for non-resource requests).
    pub api_prefix: String,
    /// API group (`""` for core).
    pub api_group: String,
    /// API version.
    pub api_version: String,
    /// Namespace (`""` when cluster-scoped or all namespaces). For the
    /// namespace object itself (`/api/v1/namespaces/ns`) it is the name, as upstream.
    pub namespace: String,
    /// Resource (plural).
    pub resource: String,
    /// Subresource (`status`, `binding`, ...).
    pub subresource: String,
    /// Object name (also from `fieldSelector=metadata.name=<n>` on LIST/WATCH).
    pub name: String,
    /// The HTTP method, uppercase.
    pub method: String,
    /// `dryRun` query values, sorted and comma-joined (the `dry_run` metric label).
    pub dry_run: String,
    /// PATCH with `Content-Type: application/apply-patch+yaml` (server-side apply).
    pub is_apply: bool,
}

impl RequestAttributes {
    /// Classifies a request. Never fails: anything that is not a resource path
    /// is a non-resource request.
    pub fn new(method: &Method, uri: &Uri, headers: &HeaderMap) -> Self {
        // Decoded like the router does (a malformed escape is left as is:
        // the router answers 400 for it).
        let path = crate::request::decode_path(uri.path()).map_or_else(|_| uri.path().to_string(), |p| p.into_owned());
        let query = parse_query(uri.query().unwrap_or(""));
        let mut ri = RequestAttributes {
            path: path.clone(),
            verb: method.as_str().to_ascii_lowercase(),
            method: method.as_str().to_string(),
            dry_run: dry_run_label(&query),
            is_apply: *method == Method::PATCH
                && headers
                    .get("content-type")
                    .and_then(|v| v.to_str().ok())
                    .is_some_and(|ct| ct.split(';').next().unwrap_or("").trim() == "application/apply-patch+yaml"),
            ..Default::default()
        };
        let parts: Vec<&str> = path.trim_matches('/').split('/').filter(|s| !s.is_empty()).collect();
        if parts.len() < 3 || !(parts[0] == "api" || parts[0] == "apis") {
            return ri;
        }
        let mut cur: &[&str] = &parts[1..];
        let prefix = parts[0];
        if prefix == "apis" {
            if cur.len() < 3 {
                return ri;
            }
            ri.api_group = cur[0].to_string();
            cur = &cur[1..];
        }
        ri.api_prefix = prefix.to_string();
        ri.is_resource_request = true;
        ri.api_version = cur[0].to_string();
        cur = &cur[1..];
        if cur[0] == "watch" || cur[0] == "proxy" {
            if cur.len() < 2 {
                // Upstream fails such a request; treat it as non-resource.
                ri.is_resource_request = false;
                return ri;
            }
            ri.verb = cur[0].to_string();
            cur = &cur[1..];
        } else {
            ri.verb = match *method {
                Method::POST => "create",
                Method::GET | Method::HEAD => "get",
                Method::PUT => "update",
                Method::PATCH => "patch",
                Method::DELETE => "delete",
                _ => "",
            }
            .to_string();
        }
        if cur[0] == "namespaces" && cur.len() > 1 {
            ri.namespace = cur[1].to_string();
            if cur.len() > 2 && !NAMESPACE_SUBRESOURCES.contains(&cur[2]) {
                cur = &cur[2..];
            }
        }
        // parts: resource/name/subresource/...
        if cur.len() >= 3 && ri.verb != "proxy" {
            ri.subresource = cur[2].to_string();
        }
        if cur.len() >= 2 {
            ri.name = cur[1].to_string();
        }
        ri.resource = cur[0].to_string();
        if ri.name.is_empty() && ri.verb == "get" {
            ri.verb = if query_bool(&query, "watch") { "watch" } else { "list" }.to_string();
        }
        if ri.name.is_empty() && (ri.verb == "list" || ri.verb == "watch") {
            if let Some(name) = name_from_field_selector(&query) {
                ri.name = name;
            }
        }
        if ri.name.is_empty() && ri.verb == "delete" {
            ri.verb = "deletecollection".to_string();
        }
        ri
    }

    /// Long-running requests (watches and streaming subresources) are exempt
    /// from the inflight limits and the request timeout (upstream `LongRunningFunc`).
    pub fn is_long_running(&self) -> bool {
        self.is_resource_request
            && (self.verb == "watch"
                || self.verb == "proxy"
                || LONG_RUNNING_SUBRESOURCES.contains(&self.subresource.as_str()))
    }

    /// True for `get`/`list`/`watch` (and non-resource GET/HEAD): the
    /// `readOnly` inflight pool; everything else is `mutating`.
    pub fn is_read_only(&self) -> bool {
        READ_ONLY_VERBS.contains(&self.verb.as_str()) || (!self.is_resource_request && self.verb == "head")
    }

    /// The `scope` metric label (upstream `CleanScope`): `resource` for one
    /// object (or a create), `namespace`, `cluster`, or `""` for non-resource requests.
    pub fn scope(&self) -> &'static str {
        if !self.is_resource_request {
            return "";
        }
        if !self.name.is_empty() || self.verb == "create" {
            "resource"
        } else if !self.namespace.is_empty() {
            "namespace"
        } else {
            "cluster"
        }
    }

    /// The `verb` metric label (upstream `cleanVerb(CanonicalVerb(...))`):
    /// `GET`, `LIST`, `WATCH`, `POST`, `PUT`, `PATCH`, `APPLY`, `DELETE`,
    /// `DELETECOLLECTION`, `CONNECT`; non-resource requests report the HTTP method.
    pub fn metrics_verb(&self) -> String {
        if !self.is_resource_request {
            return self.method.clone();
        }
        match self.verb.as_str() {
            "get" => "GET",
            "list" => "LIST",
            "watch" => "WATCH",
            "create" => "POST",
            "update" => "PUT",
            "patch" if self.is_apply => "APPLY",
            "patch" => "PATCH",
            "delete" => "DELETE",
            "deletecollection" => "DELETECOLLECTION",
            "proxy" => "CONNECT",
            _ => "other",
        }
        .to_string()
    }

    /// `<resource>[/<subresource>]`, as RBAC and audit policies name it.
    pub fn combined_resource(&self) -> String {
        if self.subresource.is_empty() {
            self.resource.clone()
        } else {
            format!("{}/{}", self.resource, self.subresource)
        }
    }
}

/// Everything the filters share about one request; inserted into the
/// request's extensions by [`request_context`] as `Arc<RequestContext>`.
#[derive(Debug, Clone)]
pub struct RequestContext {
    /// What the request addresses.
    pub attrs: RequestAttributes,
    /// The audit ID (a UUID, or the client's `Audit-ID` header), also sent
    /// back as the `Audit-Id` response header.
    pub audit_id: String,
    /// When the request arrived (wall clock, for audit timestamps).
    pub received: DateTime<Utc>,
    /// When the request arrived (monotonic, for durations).
    pub started: Instant,
    /// Client addresses: `X-Forwarded-For` entries, `X-Real-Ip`, then the
    /// peer address (upstream `utilnet.SourceIPs`).
    pub source_ips: Vec<String>,
    /// The `User-Agent` header.
    pub user_agent: String,
    /// The request URI (path and query), as audit's `requestURI`.
    pub request_uri: String,
    /// `HTTP/1.1` or `HTTP/2.0` (a trace field).
    pub protocol: String,
    /// The `Accept` header (a trace field).
    pub accept: String,
}

impl RequestContext {
    /// Builds the context of `req` (without touching it).
    pub fn from_request(req: &Request) -> Self {
        let headers = req.headers();
        let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
        let audit_id = match headers.get("audit-id").and_then(|v| v.to_str().ok()) {
            Some(id) if !id.trim().is_empty() && id.len() <= MAX_AUDIT_ID_LEN => id.trim().to_string(),
            _ => uuid::Uuid::new_v4().to_string(),
        };
        let peer = peer_addr(req);
        RequestContext {
            attrs: RequestAttributes::new(req.method(), req.uri(), headers),
            audit_id,
            received: Utc::now(),
            started: Instant::now(),
            source_ips: source_ips(headers, peer),
            user_agent: header("user-agent"),
            request_uri: req.uri().path_and_query().map(|p| p.as_str().to_string()).unwrap_or_else(|| "/".into()),
            protocol: match req.version() {
                axum::http::Version::HTTP_2 => "HTTP/2.0",
                axum::http::Version::HTTP_10 => "HTTP/1.0",
                _ => "HTTP/1.1",
            }
            .to_string(),
            accept: header("accept"),
        }
    }
}

/// The shared context of `req`: the one [`request_context`] inserted, or a
/// fresh one when that filter is not installed.
pub fn context_of(req: &Request) -> Arc<RequestContext> {
    match req.extensions().get::<Arc<RequestContext>>() {
        Some(c) => c.clone(),
        None => Arc::new(RequestContext::from_request(req)),
    }
}

/// The peer address from axum's connect info (set by [`crate::filters::serve`]).
pub fn peer_addr(req: &Request) -> Option<SocketAddr> {
    if let Some(ConnectInfo(c)) = req.extensions().get::<ConnectInfo<ConnInfo>>() {
        return Some(c.remote_addr);
    }
    req.extensions().get::<ConnectInfo<SocketAddr>>().map(|c| c.0)
}

/// Outermost filter: classifies the request, assigns its audit ID (sent back
/// as `Audit-Id`), and turns a panic anywhere inside into a 500 `InternalError`
/// Status (upstream `WithPanicRecovery`) instead of a dropped connection.
pub async fn request_context(mut req: Request, next: Next) -> Response {
    let ctx = Arc::new(RequestContext::from_request(&req));
    req.extensions_mut().insert(ctx.clone());
    let mut resp = match AssertUnwindSafe(next.run(req)).catch_unwind().await {
        Ok(resp) => resp,
        Err(panic) => {
            tracing::error!(
                path = %ctx.attrs.path,
                audit_id = %ctx.audit_id,
                panic = %panic_message(&panic),
                "request handler panicked"
            );
            panic_response()
        }
    };
    if let Ok(v) = HeaderValue::from_str(&ctx.audit_id) {
        resp.headers_mut().insert("audit-id", v);
    }
    resp
}

/// The answer to a request whose handler panicked.
pub(crate) fn panic_response() -> Response {
    ApiError::from(Status::internal("This request caused apiserver to panic. Look in the logs for details.")).into_response()
}

/// The text of a panic payload.
pub(crate) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic".to_string()
    }
}

fn parse_query(q: &str) -> Vec<(String, String)> {
    axum::extract::Query::<Vec<(String, String)>>::try_from_uri(
        &format!("/?{q}").parse::<Uri>().unwrap_or_else(|_| Uri::from_static("/")),
    )
    .map(|q| q.0)
    .unwrap_or_default()
}

/// Go's query bool conversion: absent, `""`, `0` and `false` are false.
fn query_bool(query: &[(String, String)], name: &str) -> bool {
    match query.iter().find(|(k, _)| k == name) {
        Some((_, v)) => {
            let v = v.to_ascii_lowercase();
            !(v.is_empty() || v == "0" || v == "false")
        }
        None => false,
    }
}

fn dry_run_label(query: &[(String, String)]) -> String {
    let mut v: Vec<&str> = query.iter().filter(|(k, _)| k == "dryRun").map(|(_, v)| v.as_str()).collect();
    v.sort_unstable();
    v.dedup();
    v.join(",")
}

/// `fieldSelector=metadata.name=<n>` (or `==`) names one object, when `<n>`
/// is a valid path segment (upstream uses it as the request's name).
fn name_from_field_selector(query: &[(String, String)]) -> Option<String> {
    let (_, sel) = query.iter().find(|(k, _)| k == "fieldSelector")?;
    for term in sel.split(',') {
        let term = term.trim();
        let rest = term.strip_prefix("metadata.name")?;
        let value = rest.strip_prefix("==").or_else(|| rest.strip_prefix('='));
        if let Some(v) = value {
            if !v.is_empty() && v != "." && v != ".." && !v.contains('/') && !v.contains('%') {
                return Some(v.to_string());
            }
            return None;
        }
    }
    None
}

fn source_ips(headers: &HeaderMap, peer: Option<SocketAddr>) -> Vec<String> {
    let mut ips: Vec<String> = Vec::new();
    let mut push = |s: &str| {
        let s = s.trim();
        if s.parse::<std::net::IpAddr>().is_ok() && !ips.iter().any(|i| i == s) {
            ips.push(s.to_string());
        }
    };
    if let Some(xff) = headers.get("x-forwarded-for").and_then(|v| v.to_str().ok()) {
        for part in xff.split(',') {
            push(part);
        }
    }
    if let Some(real) = headers.get("x-real-ip").and_then(|v| v.to_str().ok()) {
        push(real);
    }
    if let Some(p) = peer {
        push(&p.ip().to_string());
    }
    ips
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attrs(method: Method, uri: &str) -> RequestAttributes {
        RequestAttributes::new(&method, &uri.parse().unwrap(), &HeaderMap::new())
    }

    #[test]
    fn resource_paths_classify_like_upstream_request_info() {
        let a = attrs(Method::PUT, "/api/v1/namespaces/ns/pods/web/status");
        assert!(a.is_resource_request);
        assert_eq!(
            (a.verb.as_str(), a.api_group.as_str(), a.api_version.as_str(), a.namespace.as_str()),
            ("update", "", "v1", "ns")
        );
        assert_eq!((a.resource.as_str(), a.name.as_str(), a.subresource.as_str()), ("pods", "web", "status"));
        assert_eq!(a.scope(), "resource");
        assert_eq!(a.metrics_verb(), "PUT");

        let a = attrs(Method::GET, "/apis/apps/v1/deployments?watch=true");
        assert_eq!((a.verb.as_str(), a.api_group.as_str(), a.scope()), ("watch", "apps", "cluster"));
        assert!(a.is_long_running());
        assert_eq!(a.metrics_verb(), "WATCH");

        let a = attrs(Method::GET, "/api/v1/watch/namespaces/ns/pods");
        assert_eq!((a.verb.as_str(), a.namespace.as_str(), a.resource.as_str()), ("watch", "ns", "pods"));

        let a = attrs(Method::GET, "/api/v1/namespaces/ns/pods?limit=500");
        assert_eq!((a.verb.as_str(), a.scope(), a.metrics_verb().as_str()), ("list", "namespace", "LIST"));

        let a = attrs(Method::DELETE, "/api/v1/namespaces/ns/pods");
        assert_eq!(a.verb, "deletecollection");
        let a = attrs(Method::POST, "/api/v1/namespaces/ns/pods");
        assert_eq!((a.verb.as_str(), a.scope()), ("create", "resource"));
    }

    #[test]
    fn namespace_object_carries_its_own_namespace() {
        let a = attrs(Method::GET, "/api/v1/namespaces/kube-system");
        assert_eq!((a.resource.as_str(), a.name.as_str(), a.namespace.as_str()), ("namespaces", "kube-system", "kube-system"));
        let a = attrs(Method::PUT, "/api/v1/namespaces/x/finalize");
        assert_eq!((a.resource.as_str(), a.subresource.as_str()), ("namespaces", "finalize"));
    }

    #[test]
    fn discovery_and_other_paths_are_non_resource() {
        for p in ["/api", "/api/v1", "/apis", "/apis/apps", "/apis/apps/v1", "/healthz", "/metrics", "/debug/flags/v"] {
            let a = attrs(Method::GET, p);
            assert!(!a.is_resource_request, "{p}");
            assert_eq!(a.verb, "get");
            assert_eq!(a.scope(), "");
            assert_eq!(a.metrics_verb(), "GET");
        }
        assert_eq!(attrs(Method::PUT, "/debug/flags/v").verb, "put");
    }

    #[test]
    fn field_selector_on_name_sets_the_name() {
        let a = attrs(Method::GET, "/api/v1/namespaces/ns/pods?fieldSelector=metadata.name%3Dweb&watch=1");
        assert_eq!((a.verb.as_str(), a.name.as_str()), ("watch", "web"));
        let a = attrs(Method::GET, "/api/v1/pods?fieldSelector=spec.nodeName%3Dn1");
        assert_eq!(a.name, "");
    }

    #[test]
    fn apply_patch_and_dry_run_are_reported() {
        let mut h = HeaderMap::new();
        h.insert("content-type", HeaderValue::from_static("application/apply-patch+yaml"));
        let a = RequestAttributes::new(&Method::PATCH, &"/api/v1/namespaces/a/configmaps/c?dryRun=All".parse().unwrap(), &h);
        assert_eq!(a.metrics_verb(), "APPLY");
        assert_eq!(a.dry_run, "All");
    }

    #[test]
    fn source_ips_list_forwarded_then_peer() {
        let mut h = HeaderMap::new();
        h.insert("x-forwarded-for", HeaderValue::from_static("10.0.0.1, 10.0.0.2"));
        h.insert("x-real-ip", HeaderValue::from_static("10.0.0.2"));
        let ips = source_ips(&h, Some("127.0.0.1:5555".parse().unwrap()));
        assert_eq!(ips, vec!["10.0.0.1", "10.0.0.2", "127.0.0.1"]);
    }
}
