//! WATCH: a chunked `200` response of newline-delimited JSON events
//! `{"type":"ADDED|MODIFIED|DELETED|BOOKMARK|ERROR","object":{...}}`
//! (upstream `handlers/watch.go`, `cacher/cache_watcher.go`). The events
//! come from the watch-cache layer ([`rkube_cache::CacheLayer::watch`], a
//! storage watch for a cacher of size 0); this module encodes them. JSON
//! events carry the object's cached bytes as-is, the same bytes for every
//! watcher; other outputs shape each object (a one-row Table, metadata only).
//!
//! - `resourceVersion=N`: every change after N.
//! - `resourceVersion` `""` or `"0"` (or `sendInitialEvents=true`): synthetic
//!   `ADDED` events for the current state (a list at revision R), then every
//!   change after R. With `sendInitialEvents=true` the initial events end
//!   with a `BOOKMARK` annotated `k8s.io/initial-events-end: "true"`.
//! - Selectors: an object that stops matching is sent as `DELETED` (its
//!   previous state), one that starts matching as `ADDED`.
//! - `allowWatchBookmarks=true`: about once a minute a `BOOKMARK` whose object
//!   has the resource's kind/apiVersion and only `metadata.resourceVersion`.
//! - `timeoutSeconds` (default: random between 30 and 60 minutes, like
//!   upstream's `--min-request-timeout` of 1800 s) ends the stream, as do an
//!   `ERROR` event and server shutdown.
//! - A resourceVersion that was compacted away: one `ERROR` event carrying a
//!   410 `Expired` Status, then the end of the stream.
//! - With a Table `Accept`, every object is a one-row Table.
//! - With a protobuf `Accept` (built-in kinds), the stream is
//!   `application/vnd.kubernetes.protobuf;stream=watch`: length-prefixed
//!   `WatchEvent` frames ([`crate::protobuf_body::watch_frame`]).

use std::convert::Infallible;

use axum::body::Body;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures::StreamExt;
use rkube_api::registry::ResourceInfo;
use rkube_cache::{CacheWatch, WatchEvent};
use serde_json::{json, Value};

use super::read::list_options;
use super::Ctx;
use crate::error::ApiResult;
use crate::media::Output;
use crate::render::{self, Render};

/// Serves a WATCH request.
pub async fn serve(ctx: Ctx) -> ApiResult<Response> {
    let info = ctx.ri.info;
    let mut opts = list_options(&ctx)?;
    if opts.timeout_seconds.is_none_or(|s| s == 0) {
        // Random in [min, 2·min) of `--min-request-timeout`, as upstream spreads watch ends.
        let min = ctx.st.config.min_request_timeout;
        opts.timeout_seconds = Some(crate::filters::timeout::watch_timeout(min, None).as_secs());
    }
    let watch = ctx.st.cache.watch(info, ctx.ri.namespace.as_deref(), &opts).await?;
    let convert = crate::crd_conversion::by_webhook(info).then(|| ctx.st.clone());
    Ok(stream_response(info, ctx.render, watch, ctx.st.shutdown.subscribe(), convert))
}

/// `ev` with its object in `info`'s version, converted by the CRD's
/// conversion webhook ([`crate::crd_conversion`]); on failure, the `ERROR`
/// event line carrying the 500 Status, after which the stream ends.
async fn converted_event(st: &crate::state::ApiState, info: &'static ResourceInfo, ev: WatchEvent) -> Result<WatchEvent, Bytes> {
    let (obj, rebuild): (_, fn(std::sync::Arc<rkube_cache::CachedObject>) -> WatchEvent) = match ev {
        WatchEvent::Added(o) => (o, WatchEvent::Added),
        WatchEvent::Modified(o) => (o, WatchEvent::Modified),
        WatchEvent::Deleted(o) => (o, WatchEvent::Deleted),
        other => return Ok(other),
    };
    match crate::crd_conversion::served_objects(st, info, vec![obj], false).await {
        Ok(mut objs) => objs.pop().map(rebuild).ok_or_else(Bytes::new),
        Err(e) => {
            let mut line = serde_json::to_vec(&json!({"type": "ERROR", "object": e.0.to_json()})).unwrap_or_default();
            line.push(b'\n');
            Err(Bytes::from(line))
        }
    }
}

/// The chunked `200` response carrying `watch`'s events.
fn stream_response(
    info: &'static ResourceInfo,
    render: Render,
    watch: CacheWatch,
    stop: tokio::sync::watch::Receiver<bool>,
    convert: Option<crate::state::ApiState>,
) -> Response {
    let api_version = info.api_version();
    let stream = futures::stream::unfold((watch, stop, false), move |(mut w, mut stop, done)| {
        let api_version = api_version.clone();
        let convert = convert.clone();
        async move {
            if done {
                return None;
            }
            let ev = tokio::select! {
                ev = w.next() => ev?,
                _ = stop.wait_for(|s| *s) => return None,
            };
            let ev = match &convert {
                Some(st) => match converted_event(st, info, ev).await {
                    Ok(ev) => ev,
                    Err(line) => return Some((Ok::<Bytes, Infallible>(line), (w, stop, true))),
                },
                None => ev,
            };
            let mut is_error = matches!(ev, WatchEvent::Error(_));
            let line = if render.output == Output::Protobuf {
                crate::protobuf_body::watch_frame(info, &api_version, &ev).unwrap_or_else(|e| {
                    // Nothing a client could decode: end the stream, as upstream does.
                    tracing::error!(kind = info.kind, error = %e.0.message, "watch event not encodable as protobuf");
                    is_error = true;
                    Bytes::new()
                })
            } else {
                encode_event(info, &api_version, render, &ev)
            };
            Some((Ok::<Bytes, Infallible>(line), (w, stop, is_error)))
        }
    });
    let mut resp = (StatusCode::OK, Body::from_stream(stream)).into_response();
    let content_type = match render.output {
        Output::Protobuf => crate::protobuf_body::WATCH_CONTENT_TYPE,
        _ => "application/json",
    };
    resp.headers_mut().insert("content-type", HeaderValue::from_static(content_type));
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
            shape_object(info, render, &obj)
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

/// `obj` of `info` as a watch event carries it for `render`: a one-row
/// Table, metadata only, or as is.
pub(crate) fn shape_object(info: &ResourceInfo, render: Render, obj: &Value) -> Value {
    match render.output {
        Output::Table(v) => {
            let rv = obj.pointer("/metadata/resourceVersion").cloned().unwrap_or(Value::Null);
            render::table(info, v, std::slice::from_ref(obj), render.include, Some(json!({"resourceVersion": rv})))
        }
        Output::PartialMetadata => render::partial_metadata(obj),
        _ => obj.clone(),
    }
}
