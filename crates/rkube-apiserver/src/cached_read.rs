//! The HTTP side of reads served by a [`ReadSource`] that routes by the
//! request's own options (the watch cache, [`crate::cache_source`]).
//!
//! Each function returns `None` when the source has no such path (plain
//! storage, or a resource it does not cache); the handler then serves the
//! request itself.
//!
//! - LIST: with JSON output the body is assembled from the cached bytes of
//!   each item (`{"kind":..,"apiVersion":..,"metadata":..,"items":[<bytes>,..]}`),
//!   never re-serializing an object; Table / PartialObjectMetadata / YAML
//!   outputs decode the items and go through [`render::list`].
//! - WATCH: JSON events are [`WatchEvent::to_json_line`]: the object's cached
//!   bytes as-is, the same bytes for every watcher. Other outputs shape each
//!   object like [`crate::watch`] does. The stream ends at `timeoutSeconds`
//!   (default: random 30–60 min, as [`crate::watch`]), after an `ERROR`
//!   event, or at server shutdown.
//! - GET: the cached (or storage-read) object's bytes.
//!
//! [`ReadSource`]: crate::source::ReadSource

use std::convert::Infallible;

use axum::body::Body;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::{BufMut, Bytes, BytesMut};
use futures::StreamExt;
use rkube_api::registry::ResourceInfo;
use rkube_cache::{CacheWatch, WatchEvent};
use serde_json::{json, Map, Value};

use crate::error::{ApiError, ApiResult};
use crate::filters::trace::{self, steps};
use crate::handlers::read::list_options;
use crate::handlers::Ctx;
use crate::media::Output;
use crate::render::{self, Render};

/// One LIST page with its items kept as serialized JSON objects.
#[derive(Debug, Clone, Default)]
pub struct RawList {
    /// Each item's JSON (with `metadata.resourceVersion` set), in key order.
    pub items: Vec<Bytes>,
    /// The list's `metadata.resourceVersion`.
    pub resource_version: i64,
    /// `metadata.continue`.
    pub continue_token: Option<String>,
    /// `metadata.remainingItemCount`.
    pub remaining_item_count: Option<i64>,
}

fn decode(bytes: &[u8]) -> ApiResult<Value> {
    serde_json::from_slice(bytes).map_err(|e| ApiError::internal(format!("cached object is not JSON: {e}")))
}

fn json_response(body: Bytes) -> Response {
    let mut resp = (StatusCode::OK, body).into_response();
    resp.headers_mut().insert("content-type", HeaderValue::from_static("application/json"));
    resp
}

/// GET through the source's options path (`resourceVersion` honoured).
pub async fn get(ctx: &Ctx) -> Option<ApiResult<Response>> {
    let info = ctx.ri.info;
    let name = ctx.name();
    let key = ctx.key(name);
    let found = ctx.st.source.get_by_options(info, &key, ctx.q("resourceVersion")).await?;
    trace::step(steps::GET_DONE);
    Some((|| {
        let bytes = found.map_err(ApiError::from)?.ok_or_else(|| ApiError::not_found(info, name))?;
        trace::step(steps::ABOUT_TO_WRITE);
        if ctx.render.output == Output::Json {
            // The cached bytes plus the `\n` kube-apiserver ends every body with.
            let mut body = BytesMut::with_capacity(bytes.len() + 1);
            body.put_slice(&bytes);
            body.put_u8(rkube_api::wire::JSON_TERMINATOR);
            return Ok(json_response(body.freeze()));
        }
        Ok(render::object(info, ctx.render, 200, &decode(&bytes)?, &[]))
    })())
}

/// The list's `metadata` (same keys and order as the handler's own LIST).
fn list_meta(page: &RawList) -> Map<String, Value> {
    let mut meta = Map::new();
    meta.insert("resourceVersion".into(), Value::String(page.resource_version.to_string()));
    if let Some(token) = &page.continue_token {
        meta.insert("continue".into(), Value::String(token.clone()));
        if let Some(rem) = page.remaining_item_count.filter(|r| *r > 0) {
            meta.insert("remainingItemCount".into(), Value::from(rem));
        }
    }
    meta
}

/// `{"kind":..,"apiVersion":..,"metadata":..,"items":[..]}\n` from the items' bytes.
pub fn list_json(info: &ResourceInfo, page: &RawList) -> Bytes {
    let head = json!({"kind": info.list_kind, "apiVersion": info.api_version()});
    let head = serde_json::to_vec(&head).unwrap_or_default();
    let meta = serde_json::to_vec(&Value::Object(list_meta(page))).unwrap_or_default();
    let items_len: usize = page.items.iter().map(|b| b.len() + 1).sum();
    let mut out = BytesMut::with_capacity(head.len() + meta.len() + items_len + 33);
    // `head` is `{"kind":..,"apiVersion":..}`: reopen it.
    out.put_slice(&head[..head.len().saturating_sub(1)]);
    out.put_slice(b",\"metadata\":");
    out.put_slice(&meta);
    out.put_slice(b",\"items\":[");
    for (i, item) in page.items.iter().enumerate() {
        if i > 0 {
            out.put_u8(b',');
        }
        out.put_slice(item);
    }
    out.put_slice(b"]}");
    out.put_u8(rkube_api::wire::JSON_TERMINATOR);
    out.freeze()
}

/// LIST through the source's options path.
pub async fn list(ctx: &Ctx) -> Option<ApiResult<Response>> {
    let info = ctx.ri.info;
    let opts = match list_options(ctx) {
        Ok((opts, _)) => opts,
        Err(e) => return Some(Err(e)),
    };
    let page = ctx.st.source.list_by_options(info, ctx.ri.namespace.as_deref(), &opts).await?;
    trace::step_with(steps::LIST_DONE, trace::count(page.as_ref().map_or(0, |p| p.items.len())));
    Some((|| {
        let page = page.map_err(ApiError::from)?;
        trace::step(steps::ABOUT_TO_WRITE);
        if ctx.render.output == Output::Json {
            return Ok(json_response(list_json(info, &page)));
        }
        let items = page.items.iter().map(|b| decode(b)).collect::<ApiResult<Vec<Value>>>()?;
        Ok(render::list(info, ctx.render, items, list_meta(&page)))
    })())
}

/// WATCH through the source's options path.
pub async fn watch(ctx: &Ctx) -> Option<ApiResult<Response>> {
    let info = ctx.ri.info;
    let (mut opts, predicate) = match list_options(ctx) {
        Ok(x) => x,
        Err(e) => return Some(Err(e)),
    };
    // `GET .../pods/<name>?watch=true` adds `metadata.name=<name>` to the predicate.
    opts.field_selector = predicate.field.clone();
    if opts.timeout_seconds.is_none_or(|s| s == 0) {
        let min = ctx.st.config.min_request_timeout;
        opts.timeout_seconds = Some(crate::filters::timeout::watch_timeout(min, None).as_secs());
    }
    let watch = ctx.st.source.watch_by_options(info, ctx.ri.namespace.as_deref(), &opts).await?;
    let watch = match watch {
        Ok(w) => w,
        Err(s) => return Some(Err(s.into())),
    };
    Some(Ok(stream_response(info, ctx.render, watch, ctx.st.shutdown.subscribe())))
}

/// The chunked `200` response carrying `watch`'s events.
fn stream_response(
    info: &'static ResourceInfo,
    render: Render,
    watch: CacheWatch,
    stop: tokio::sync::watch::Receiver<bool>,
) -> Response {
    let api_version = info.api_version();
    let stream = futures::stream::unfold((watch, stop, false), move |(mut w, mut stop, done)| {
        let api_version = api_version.clone();
        async move {
            if done {
                return None;
            }
            let ev = tokio::select! {
                ev = w.next() => ev?,
                _ = stop.wait_for(|s| *s) => return None,
            };
            let is_error = matches!(ev, WatchEvent::Error(_));
            let line = encode_event(info, &api_version, render, &ev);
            Some((Ok::<Bytes, Infallible>(line), (w, stop, is_error)))
        }
    });
    let mut resp = (StatusCode::OK, Body::from_stream(stream)).into_response();
    resp.headers_mut().insert("content-type", HeaderValue::from_static("application/json"));
    resp.headers_mut().insert("cache-control", HeaderValue::from_static("no-cache, private"));
    resp
}

/// One event line in the negotiated representation.
fn encode_event(info: &ResourceInfo, api_version: &str, render: Render, ev: &WatchEvent) -> Bytes {
    if render.output == Output::Json || matches!(ev, WatchEvent::Error(_)) {
        return ev.to_json_line(info.kind, api_version);
    }
    let object = match ev {
        WatchEvent::Added(o) | WatchEvent::Modified(o) | WatchEvent::Deleted(o) => {
            let Ok(obj) = serde_json::from_slice::<Value>(&o.json) else {
                return ev.to_json_line(info.kind, api_version);
            };
            crate::watch::shape_object(info, render, &obj)
        }
        WatchEvent::Bookmark(b) => bookmark(info, api_version, render, b.resource_version, b.initial_events_end),
        WatchEvent::Error(_) => return ev.to_json_line(info.kind, api_version),
    };
    let mut v = serde_json::to_vec(&json!({"type": ev.type_name(), "object": object})).unwrap_or_default();
    v.push(b'\n');
    Bytes::from(v)
}

fn bookmark(info: &ResourceInfo, api_version: &str, r: Render, rv: i64, initial_end: bool) -> Value {
    let mut meta = json!({"resourceVersion": rv.to_string()});
    if initial_end {
        meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    match r.output {
        Output::Table(v) => json!({
            "kind": "Table",
            "apiVersion": v.api_version(),
            "metadata": {"resourceVersion": rv.to_string()},
            "columnDefinitions": [],
            "rows": [],
        }),
        Output::PartialMetadata => render::partial_metadata(&json!({"metadata": meta})),
        _ => json!({"kind": info.kind, "apiVersion": api_version, "metadata": meta}),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_json_splices_cached_item_bytes() {
        let info = rkube_api::registry::lookup("", "v1", "configmaps").unwrap();
        let page = RawList {
            items: vec![Bytes::from_static(br#"{"a":1}"#), Bytes::from_static(br#"{"b":2}"#)],
            resource_version: 7,
            continue_token: Some("tok".into()),
            remaining_item_count: Some(3),
        };
        let body = list_json(info, &page);
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            v,
            json!({"kind": "ConfigMapList", "apiVersion": "v1",
                   "metadata": {"resourceVersion": "7", "continue": "tok", "remainingItemCount": 3},
                   "items": [{"a": 1}, {"b": 2}]})
        );
        let empty = list_json(info, &RawList { resource_version: 1, ..Default::default() });
        assert_eq!(serde_json::from_slice::<Value>(&empty).unwrap()["items"], json!([]));
    }
}
