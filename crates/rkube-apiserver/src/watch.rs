//! WATCH: a chunked `200` response of newline-delimited JSON events
//! `{"type":"ADDED|MODIFIED|DELETED|BOOKMARK|ERROR","object":{...}}`
//! (upstream `handlers/watch.go`, `cacher/cache_watcher.go`).
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
//!   upstream's `--min-request-timeout` of 1800 s) ends the stream.
//! - A resourceVersion that was compacted away: one `ERROR` event carrying a
//!   410 `Expired` Status, then the end of the stream.
//! - With a Table `Accept`, every object is a one-row Table.

use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures::StreamExt;
use rkube_api::registry::ResourceInfo;
use rkube_cache::error::{storage_status, StorageOp, Target};
use rkube_storage::{Revision, StorageError};
use serde_json::{json, Value};
use tokio::sync::mpsc;

use crate::error::{ApiError, ApiResult};
use crate::handlers::read::{list_options, parse_rv};
use crate::handlers::Ctx;
use crate::media::Output;
use crate::render::{self, Render};
use crate::source::{ListRequest, Predicate, SourceEvent, SourceWatch};

/// How often a watcher with `allowWatchBookmarks=true` gets a bookmark.
const BOOKMARK_INTERVAL: Duration = Duration::from_secs(60);

/// Upstream `--min-request-timeout` default: watches last between 1× and 2× this.
const MIN_REQUEST_TIMEOUT_SECS: u64 = 1800;

/// A watch's `timeoutSeconds` when the client set none: random between 1×
/// and 2× `--min-request-timeout` (upstream spreads watch ends this way).
pub(crate) fn default_timeout_secs() -> u64 {
    let r = u64::from(uuid::Uuid::new_v4().as_bytes()[0]);
    MIN_REQUEST_TIMEOUT_SECS + r * MIN_REQUEST_TIMEOUT_SECS / 256
}

/// Events buffered between the watch task and the HTTP body.
const CHANNEL_CAPACITY: usize = 256;

/// One watch request's settings.
struct WatchPlan {
    info: &'static ResourceInfo,
    prefix: String,
    predicate: Predicate,
    render: Render,
    bookmarks: bool,
    initial: bool,
    initial_events_end: bool,
    start_rev: Revision,
    timeout: Duration,
}

/// Serves a WATCH request.
pub async fn serve(ctx: Ctx) -> ApiResult<Response> {
    if let Some(r) = crate::cached_read::watch(&ctx).await {
        return r;
    }
    let info = ctx.ri.info;
    let (opts, predicate) = list_options(&ctx)?;
    let rv = opts.resource_version.clone().unwrap_or_default();
    let send_initial = opts.send_initial_events == Some(true);
    let initial = send_initial || ((rv.is_empty() || rv == "0") && opts.send_initial_events != Some(false));
    let start_rev = if rv.is_empty() || rv == "0" { 0 } else { parse_rv(&rv)? };
    let timeout = match opts.timeout_seconds {
        Some(s) if s > 0 => Duration::from_secs(s),
        _ => Duration::from_secs(default_timeout_secs()),
    };
    let plan = WatchPlan {
        info,
        prefix: info.list_prefix(ctx.st.prefix(), ctx.ri.namespace.as_deref()),
        predicate,
        render: ctx.render,
        bookmarks: opts.allow_watch_bookmarks,
        initial,
        initial_events_end: send_initial,
        start_rev,
        timeout,
    };

    let (tx, rx) = mpsc::channel::<Bytes>(CHANNEL_CAPACITY);
    // Set up the initial list and the storage watch before answering, so
    // setup errors other than 410 are plain error responses.
    let mut initial_items = Vec::new();
    let mut from = plan.start_rev;
    if plan.initial {
        let page = ctx
            .st
            .source
            .list(ListRequest {
                info,
                prefix: plan.prefix.clone(),
                revision: 0,
                start_key: None,
                limit: 0,
                predicate: &plan.predicate,
            })
            .await
            .map_err(|e| ApiError::from_storage(e, info, ""))?;
        if page.revision < plan.start_rev {
            // The client asked for a state newer than the store has.
            return Err(rkube_api::status::Status::too_large_resource_version(plan.start_rev, page.revision).into());
        }
        initial_items = page.items;
        from = page.revision;
    }
    let watch = match ctx.st.source.watch(&plan.prefix, from).await {
        Ok(w) => Some(w),
        Err(e @ StorageError::Compacted { .. }) => {
            let _ = tx.try_send(line("ERROR", &watch_status(info, e).to_json()));
            None
        }
        Err(e) => return Err(watch_status(info, e).into()),
    };
    if let Some(watch) = watch {
        let reliable = ctx.st.source.progress_reliable();
        let stop = ctx.st.shutdown.subscribe();
        tokio::spawn(run(plan, initial_items, from, watch, tx, reliable, stop));
    }
    let stream = tokio_stream::wrappers::ReceiverStream::new(rx).map(Ok::<Bytes, std::convert::Infallible>);
    let mut resp = (StatusCode::OK, Body::from_stream(stream)).into_response();
    resp.headers_mut().insert("content-type", HeaderValue::from_static("application/json"));
    resp.headers_mut().insert("cache-control", HeaderValue::from_static("no-cache, private"));
    Ok(resp)
}

/// A storage failure of a watch on `info` as its `Status` (the one mapping).
fn watch_status(info: &ResourceInfo, e: StorageError) -> rkube_api::status::Status {
    let target = Target { group: info.group, resource: info.resource, name: "" };
    storage_status(e, target, StorageOp::Watch)
}

/// One event line.
fn line(kind: &str, object: &Value) -> Bytes {
    let mut v = serde_json::to_vec(&json!({"type": kind, "object": object})).unwrap_or_default();
    v.push(b'\n');
    Bytes::from(v)
}

/// The object as sent (a one-row Table or metadata only when asked).
fn shape(plan: &WatchPlan, obj: &Value) -> Value {
    shape_object(plan.info, plan.render, obj)
}

/// `obj` of `info` as a watch event carries it for `render`: a one-row
/// Table, metadata only, or as is (shared with [`crate::cached_read`]).
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

fn bookmark(plan: &WatchPlan, rev: Revision, initial_end: bool) -> Value {
    let mut meta = json!({"resourceVersion": rev.to_string(), "creationTimestamp": null});
    if initial_end {
        meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    let obj = json!({"kind": plan.info.kind, "apiVersion": plan.info.api_version(), "metadata": meta});
    match plan.render.output {
        Output::Table(v) => json!({
            "kind": "Table",
            "apiVersion": v.api_version(),
            "metadata": {"resourceVersion": rev.to_string()},
            "columnDefinitions": [],
            "rows": [],
        }),
        Output::PartialMetadata => render::partial_metadata(&obj),
        _ => obj,
    }
}

/// Converts one storage event to what this watcher sees (None: filtered out).
fn filter(plan: &WatchPlan, ev: SourceEvent) -> Option<(&'static str, Value)> {
    let m = |o: &Value| plan.predicate.matches(plan.info, o);
    match ev {
        SourceEvent::Put { object, prev, revision } => {
            let now = m(&object);
            let before = prev.as_ref().map(&m);
            match (before, now) {
                (None, true) | (Some(false), true) => Some(("ADDED", object)),
                (Some(true), true) => Some(("MODIFIED", object)),
                (Some(true), false) => {
                    let mut p = prev?;
                    crate::source::set_resource_version(&mut p, revision);
                    Some(("DELETED", p))
                }
                _ => None,
            }
        }
        SourceEvent::Delete { object, .. } => m(&object).then_some(("DELETED", object)),
        SourceEvent::Progress(_) => None,
    }
}

async fn run(
    plan: WatchPlan,
    initial: Vec<Value>,
    from: Revision,
    watch: SourceWatch,
    tx: mpsc::Sender<Bytes>,
    reliable: bool,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let deadline = tokio::time::Instant::now() + plan.timeout;
    for obj in initial {
        if tx.send(line("ADDED", &shape(&plan, &obj))).await.is_err() {
            return;
        }
    }
    let mut last_rev = from;
    if plan.initial_events_end && tx.send(line("BOOKMARK", &bookmark(&plan, from, true))).await.is_err() {
        return;
    }
    let SourceWatch { mut events, progress } = watch;
    let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + BOOKMARK_INTERVAL, BOOKMARK_INTERVAL);
    loop {
        tokio::select! {
            _ = tokio::time::sleep_until(deadline) => return,
            _ = tx.closed() => return,
            _ = async { let _ = stop.wait_for(|s| *s).await.is_ok(); } => return,
            _ = ticker.tick(), if plan.bookmarks => {
                if reliable {
                    progress.request_progress();
                } else if tx.send(line("BOOKMARK", &bookmark(&plan, last_rev, false))).await.is_err() {
                    return;
                }
            }
            next = events.next() => {
                let batch = match next {
                    None => return,
                    Some(Err(e)) => {
                        let _ = tx.send(line("ERROR", &watch_status(plan.info, e).to_json())).await;
                        return;
                    }
                    Some(Ok(batch)) => batch,
                };
                for ev in batch {
                    match ev {
                        SourceEvent::Progress(rev) => {
                            if plan.bookmarks && reliable && rev >= last_rev {
                                last_rev = rev;
                                if tx.send(line("BOOKMARK", &bookmark(&plan, rev, false))).await.is_err() {
                                    return;
                                }
                            }
                        }
                        other => {
                            let rev = match &other {
                                SourceEvent::Put { revision, .. } | SourceEvent::Delete { revision, .. } => *revision,
                                SourceEvent::Progress(r) => *r,
                            };
                            last_rev = last_rev.max(rev);
                            if let Some((kind, obj)) = filter(&plan, other) {
                                if tx.send(line(kind, &shape(&plan, &obj))).await.is_err() {
                                    return;
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}
