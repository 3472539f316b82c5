//! Resource request handlers: the Kubernetes REST semantics of GET, LIST,
//! WATCH, POST, PUT, PATCH, DELETE and DELETE-collection over the registry's
//! resources (upstream `staging/src/k8s.io/apiserver/pkg/endpoints/handlers`
//! and `pkg/registry/generic/registry/store.go`).
//!
//! - [`read`]: GET and LIST (selectors, pagination, resourceVersion semantics).
//! - [`create`]: POST (server-set metadata, generateName, defaults, validation).
//! - [`update`]: PUT and PATCH through one read-modify-write loop
//!   (upstream `GuaranteedUpdate`), status subresources, `pods/binding`.
//! - [`delete`]: DELETE with `DeleteOptions`, finalizers, graceful pod
//!   deletion, namespace cascade, DELETE-collection.
//! - WATCH lives in [`watch`].
//! - [`pod_log`]: `pods/log`, proxied to the node's kubelet.
//! - [`node_proxy`]: `nodes/proxy`, passed through to the node's kubelet.
//! - [`pod_stream`]: `pods/exec`, `pods/attach` and `pods/portforward`, upgrades proxied to the
//!   node's kubelet.
//! - [`review`]: POST to the create-only review APIs (TokenReview,
//!   SubjectAccessReview, ...), answered without storage.

pub mod create;
#[cfg(test)]
mod create_cost;
pub mod delete;
pub mod eviction;
pub mod node_proxy;
pub mod pod_log;
pub mod pod_stream;
pub mod read;
pub mod review;
pub mod component_status;
pub mod scale;
pub mod token_request;
pub mod update;
pub mod watch;
pub(crate) mod write;

pub use write::encode_for_storage;

use axum::body::Body;
use axum::http::{HeaderMap, Method, Uri};
use axum::response::{IntoResponse, Response};
use std::sync::Arc;

use rkube_storage::KeyValue;
use serde_json::Value;

use crate::error::{ApiError, ApiResult};
use crate::media::{self, Output};
use crate::render::Render;
use crate::request::{self, RequestInfo, Verb};
use crate::source::decode_stored;
use crate::state::ApiState;

/// One resource request, parsed.
pub struct Ctx {
    /// Server state.
    pub st: ApiState,
    /// What is addressed.
    pub ri: RequestInfo,
    /// Query parameters in order.
    pub query: Vec<(String, String)>,
    /// The raw query string (for `ListOptions::from_query`).
    pub raw_query: String,
    /// Request headers.
    pub headers: HeaderMap,
    /// How to render the response.
    pub render: Render,
    /// Who sent the request, as authentication (and impersonation) left it;
    /// `None` when the server runs without the filter chain (tests, embedding).
    pub user: Option<crate::filters::authn::UserInfo>,
}

impl Ctx {
    /// The last value of query parameter `name`.
    pub fn q(&self, name: &str) -> Option<&str> {
        self.query.iter().rev().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    /// `dryRun=All` (true), absent (false); other values are 400 like upstream.
    pub fn dry_run(&self) -> ApiResult<bool> {
        let values: Vec<&str> = self.query.iter().filter(|(k, _)| k == "dryRun").map(|(_, v)| v.as_str()).collect();
        if values.is_empty() {
            return Ok(false);
        }
        for v in &values {
            if *v != "All" {
                return Err(ApiError::bad_request(format!("Invalid dry run value: {v}: supported values: \"All\"")));
            }
        }
        Ok(true)
    }

    /// `fieldManager`, else the name derived from `User-Agent` (upstream behaviour).
    /// 422 when longer than 128 characters.
    pub fn field_manager(&self) -> ApiResult<String> {
        match self.q("fieldManager") {
            Some(m) if !m.is_empty() => {
                if m.chars().count() > 128 {
                    return Err(ApiError::bad_request(format!(
                        "fieldManager: Too long: may not be more than 128 bytes, got {}",
                        m.len()
                    )));
                }
                Ok(m.to_string())
            }
            _ => {
                let ua = self.headers.get("user-agent").and_then(|v| v.to_str().ok()).unwrap_or("");
                Ok(manager_from_user_agent(ua))
            }
        }
    }

    /// The path namespace, or `""`.
    pub fn namespace(&self) -> &str {
        self.ri.namespace.as_deref().unwrap_or("")
    }

    /// The path name, or `""`.
    pub fn name(&self) -> &str {
        self.ri.name.as_deref().unwrap_or("")
    }

    /// Storage key of object `name` in the path namespace.
    pub fn key(&self, name: &str) -> String {
        self.ri.info.object_key(self.st.prefix(), self.namespace(), name)
    }

    /// Reads and decodes the object at `key` from storage (not the read source:
    /// read-modify-write loops need the latest committed value), in the
    /// request's version ([`crate::crd_conversion::served`]). A large object
    /// decoded or written lately for these very bytes comes from
    /// [`crate::decoded`] instead of being decoded again.
    pub async fn load(&self, key: &str, name: &str) -> ApiResult<Option<(Arc<Value>, KeyValue)>> {
        self.load_as(self.ri.info, key, name, Keep::Decoded).await
    }

    /// [`Ctx::load`] of an object of `info` (which may not be the request's
    /// resource: an eviction deletes a pod). With [`Keep::Not`], an object
    /// decoded here is not kept for later (it is about to be deleted); one
    /// already kept is still used.
    pub async fn load_as(
        &self,
        info: &'static rkube_api::registry::ResourceInfo,
        key: &str,
        name: &str,
        keep: Keep,
    ) -> ApiResult<Option<(Arc<Value>, KeyValue)>> {
        let kv = self.st.storage.get(key).await.map_err(|e| ApiError::from_storage(e, info, name))?;
        let Some(kv) = kv else { return Ok(None) };
        let keeps = keeps_decoded(info);
        if keeps {
            if let Some(obj) = self.st.decoded.get(key, &kv.value, kv.mod_revision) {
                return Ok(Some((obj, kv)));
            }
        }
        let obj = media::off_the_workers(kv.value.len(), || decode_stored(&kv.key, &kv.value, kv.mod_revision))
            .map_err(|e| ApiError::from_storage(e, info, name))?;
        if !keeps {
            return Ok(Some((Arc::new(crate::crd_conversion::served(&self.st, info, obj).await?), kv)));
        }
        let obj = Arc::new(obj);
        if keep == Keep::Decoded {
            self.st.decoded.put(key, kv.value.clone(), kv.mod_revision, obj.clone());
        }
        Ok(Some((obj, kv)))
    }

    /// Keeps `obj`, just written at `key` as `stored` at `revision`, for the
    /// next update of the object ([`crate::decoded`]). `obj` must be what
    /// [`Ctx::load`] would decode from `stored`: the object the write
    /// encoded, with `metadata.resourceVersion` set to `revision` by
    /// [`crate::source::set_resource_version`].
    pub fn remember_written(&self, key: &str, obj: Value, stored: bytes::Bytes, revision: i64) {
        if keeps_decoded(self.ri.info) {
            self.st.decoded.put(key, stored, revision, Arc::new(obj));
        }
    }

    /// [`Ctx::remember_written`] of `obj` once `entries` are written into
    /// it, which is done only when the next write of `key` wants the
    /// object ([`crate::decoded::DecodedObjects::put_pending`]).
    pub fn remember_written_apart(
        &self,
        key: &str,
        obj: Value,
        entries: crate::patch::UnwrittenEntries,
        stored: bytes::Bytes,
        revision: i64,
    ) {
        // (Sized first: the estimate reads the whole entry.)
        if keeps_decoded(self.ri.info) && stored.len() >= crate::decoded::MIN_STORED_BYTES {
            let extra_heap = entries.heap_estimate();
            let complete = Box::new(move |obj: &mut Value| entries.write_into(obj));
            self.st.decoded.put_pending(key, stored, revision, obj, extra_heap, complete);
        }
    }
}

/// Whether [`Ctx::load_as`] keeps an object it decodes in [`crate::decoded`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    /// Kept, for the next write of it.
    Decoded,
    /// Not kept: no later write will need it.
    Not,
}

/// Whether objects of `info` are kept decoded ([`crate::decoded`]): only
/// when their stored form is the served one (no conversion), so an entry
/// serves every request for the key alike.
fn keeps_decoded(info: &rkube_api::registry::ResourceInfo) -> bool {
    info.conversion.is_none() && !crate::crd_conversion::by_webhook(info)
}

/// The manager name upstream derives from a `User-Agent` when `fieldManager`
/// is not given: the part before the first `/` (e.g. `kubectl`), at most 128 characters.
pub fn manager_from_user_agent(user_agent: &str) -> String {
    let m = user_agent.split('/').next().unwrap_or("").trim();
    if m.is_empty() {
        "unknown".to_string()
    } else {
        m.chars().take(128).collect()
    }
}

/// Handles a request under `/api/v1/...` or `/apis/<group>/<version>/...`;
/// `segments` is the path after the group version; `user` is the
/// authenticated user (`None` without the filter chain).
#[allow(clippy::too_many_arguments)]
pub async fn dispatch(
    st: ApiState,
    user: Option<crate::filters::authn::UserInfo>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
    group: &str,
    version: &str,
    segments: &[&str],
    upgrade: Option<hyper::upgrade::OnUpgrade>,
) -> Response {
    let mut output = None;
    match dispatch_inner(st, user, method, uri, headers, body, group, version, segments, upgrade, &mut output).await {
        Ok(r) => r,
        Err(e) => error_response(e, output),
    }
}

/// An error `Status` in the representation the request negotiated: protobuf
/// when the client asked for it (as upstream's `ErrorNegotiated`), JSON
/// otherwise (also for errors found before negotiation). The code and
/// `Retry-After` are the same either way.
fn error_response(e: ApiError, output: Option<Output>) -> Response {
    if output == Some(Output::Protobuf) {
        if let Ok(Some(body)) = crate::protobuf_body::value_body(&e.0.to_json()) {
            let mut resp = e.into_response();
            resp.headers_mut().remove(axum::http::header::CONTENT_LENGTH);
            resp.headers_mut()
                .insert("content-type", axum::http::HeaderValue::from_static(crate::protobuf_body::CONTENT_TYPE));
            *resp.body_mut() = Body::from(body);
            return resp;
        }
    }
    e.into_response()
}

#[allow(clippy::too_many_arguments)]
async fn dispatch_inner(
    st: ApiState,
    user: Option<crate::filters::authn::UserInfo>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
    group: &str,
    version: &str,
    segments: &[&str],
    upgrade: Option<hyper::upgrade::OnUpgrade>,
    negotiated: &mut Option<Output>,
) -> ApiResult<Response> {
    let raw_query = uri.query().unwrap_or("").to_string();
    let query: Vec<(String, String)> = axum::extract::Query::<Vec<(String, String)>>::try_from_uri(&uri)
        .map(|q| q.0)
        .map_err(|e| ApiError::bad_request(format!("invalid query: {e}")))?;
    let watch_param = query.iter().any(|(k, v)| k == "watch" && (v == "true" || v == "1"));
    let ri = request::parse(group, version, segments, &method, watch_param)?;
    if ri.info.group.is_empty() && ri.info.resource == "nodes" && ri.subresource.as_deref() == Some("proxy") {
        // Passed through to the kubelet whatever the client accepts.
        let ctx = Ctx { st, ri, query, raw_query, headers, render: Render { output: Output::Json, include: Default::default() }, user };
        return node_proxy::proxy(&ctx, &method, &node_proxy::proxied_path(segments), body).await;
    }
    let output = media::negotiate_output(&headers, crate::protobuf_body::supported(ri.info))?;
    *negotiated = Some(output);
    let include_q = query.iter().rev().find(|(k, _)| k == "includeObject").map(|(_, v)| v.as_str());
    let include = media::include_object(include_q)?;
    let ctx = Ctx { st, ri, query, raw_query, headers, render: Render { output, include }, user };
    if ctx.ri.info.group.is_empty() && ctx.ri.info.resource == "pods" {
        match ctx.ri.subresource.as_deref() {
            Some("exec") => return pod_stream::connect(&ctx, &method, upgrade, pod_stream::Stream::Exec).await,
            Some("attach") => return pod_stream::connect(&ctx, &method, upgrade, pod_stream::Stream::Attach).await,
            Some("portforward") => {
                return pod_stream::connect(&ctx, &method, upgrade, pod_stream::Stream::PortForward).await
            }
            _ => {}
        }
    }
    match ctx.ri.verb {
        Verb::Get if ctx.ri.subresource.as_deref() == Some("scale") => scale::get(&ctx).await,
        Verb::Get if ctx.ri.subresource.as_deref() == Some("log") => pod_log::get(&ctx).await,
        Verb::Get if crate::metrics_api::is_metrics(&ctx) => crate::metrics_api::get(&ctx).await,
        Verb::List if crate::metrics_api::is_metrics(&ctx) => crate::metrics_api::list(&ctx).await,
        Verb::Get if is_component_status(&ctx) => component_status::get(&ctx).await,
        Verb::List if is_component_status(&ctx) => component_status::list(&ctx).await,
        Verb::Get => read::get(&ctx).await,
        Verb::List => read::list(&ctx).await,
        Verb::Watch => watch::serve(ctx).await,
        Verb::Create => {
            let body = media::read_body(body).await?;
            if !ctx.ri.info.stored {
                review::create(&ctx, &body).await
            } else if ctx.ri.subresource.as_deref() == Some("binding") {
                update::binding(&ctx, &body).await
            } else if ctx.ri.subresource.as_deref() == Some("eviction") {
                eviction::create(&ctx, &body).await
            } else if ctx.ri.subresource.as_deref() == Some("token") {
                token_request::create(&ctx, &body).await
            } else {
                create::create(&ctx, &body).await
            }
        }
        Verb::Update => {
            let body = media::read_body(body).await?;
            if ctx.ri.subresource.as_deref() == Some("scale") {
                return scale::write(&ctx, &body, None).await;
            }
            update::update(&ctx, &body).await
        }
        Verb::Patch => {
            let body = media::read_body(body).await?;
            if ctx.ri.subresource.as_deref() == Some("scale") {
                let t = update::patch_kind(&media::content_type(&ctx.headers))?.into();
                return scale::write(&ctx, &body, Some(t)).await;
            }
            update::patch(&ctx, &body).await
        }
        Verb::Delete => {
            let body = media::read_body(body).await?;
            delete::delete(&ctx, &body).await
        }
        Verb::DeleteCollection => {
            let body = media::read_body(body).await?;
            delete::delete_collection(&ctx, &body).await
        }
    }
}

/// True for `componentstatuses`, which are computed, not stored.
fn is_component_status(ctx: &Ctx) -> bool {
    ctx.ri.info.group.is_empty() && ctx.ri.info.resource == "componentstatuses"
}

/// True when the response should be a Table.
pub fn wants_table(ctx: &Ctx) -> bool {
    matches!(ctx.render.output, Output::Table(_))
}
