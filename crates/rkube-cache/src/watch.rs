//! WATCH from the cache (upstream `Cacher.Watch`, `getAllEventsSinceLocked`,
//! `cacheWatcher.processInterval`).
//!
//! - `resourceVersion` "0", or "" without `sendInitialEvents`: a synthetic
//!   ADDED per object of the current state, then the stream.
//! - `resourceVersion=N`: every event after N from the history, then the
//!   stream; N older than the history → one `ERROR` event (410 `Expired`).
//! - N newer than the cache: wait up to 3 s, then `TooLargeResourceVersion` (504).
//! - `sendInitialEvents=true` (WatchList): ADDED for the state at ≥ RV (RV ""
//!   = storage's current revision, a consistent read), then, with
//!   `allowWatchBookmarks`, a BOOKMARK annotated `k8s.io/initial-events-end`.
//!
//! With a cacher of size 0 (`--watch-cache=false`,
//! `--watch-cache-sizes=resource#0`) the same stream is served from a
//! storage watch instead (`storage_watch`).
//!
//! Registration happens under the cache's read lock, so the initial events
//! and the live stream meet exactly at the cache's revision at that moment.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::Stream;
use rkube_api::list_options::ListOptions;
use tokio::sync::mpsc;
use tokio::time::Sleep;

use crate::bookmarks::BOOKMARK_FREQUENCY;
use crate::cacher::Inner;
use crate::error::{CacheError, Result};
use crate::event::{Bookmark, WatchEvent};
use crate::filter::Predicate;
use crate::history::HistoryError;
use crate::metrics::ResourceMetrics;
use crate::watchers::{convert_event, Registry, Watcher, WatcherId};

/// A watch served from the cache: a `Stream` of [`WatchEvent`]s. It ends
/// when `timeoutSeconds` passes, after an `ERROR` event, when the watcher
/// is terminated for being too slow, or when the cache re-initializes.
/// Dropping it unregisters the watcher.
pub struct CacheWatch {
    initial: VecDeque<WatchEvent>,
    rx: Option<mpsc::Receiver<WatchEvent>>,
    registration: Option<(Weak<Mutex<Registry>>, WatcherId, ResourceMetrics)>,
    deadline: Option<Pin<Box<Sleep>>>,
    /// The task feeding a storage-backed watch (cache disabled).
    forwarder: Option<tokio::task::JoinHandle<()>>,
    /// The row the objects are served as, when it converts the stored
    /// row's objects ([`CacheWatch::served_as`]).
    served_as: Option<&'static rkube_api::registry::ResourceInfo>,
}

impl std::fmt::Debug for CacheWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CacheWatch")
            .field("initial_left", &self.initial.len())
            .field("id", &self.registration.as_ref().map(|r| r.1))
            .finish_non_exhaustive()
    }
}

impl CacheWatch {
    /// A watch that sends one `ERROR` event and ends.
    pub fn error(e: CacheError) -> Self {
        CacheWatch {
            initial: VecDeque::from([WatchEvent::Error(e)]),
            rx: None,
            registration: None,
            deadline: None,
            forwarder: None,
            served_as: None,
        }
    }

    /// This watch with every object converted to `info`'s form (a row with
    /// a [`rkube_api::registry::Conversion`]; other rows change nothing).
    pub fn served_as(mut self, info: &'static rkube_api::registry::ResourceInfo) -> Self {
        if crate::convert::converts(info) {
            self.served_as = Some(info);
        }
        self
    }

    /// Events still queued before the live stream (initial events).
    pub fn initial_len(&self) -> usize {
        self.initial.len()
    }
}

impl Stream for CacheWatch {
    type Item = WatchEvent;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<WatchEvent>> {
        let served_as = self.served_as;
        let polled = self.as_mut().poll_stored(cx);
        match served_as {
            Some(info) => polled.map(|ev| ev.map(|ev| crate::convert::served_event(info, ev))),
            None => polled,
        }
    }
}

impl CacheWatch {
    /// The next event as the cache holds it (stored form).
    fn poll_stored(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<WatchEvent>> {
        if let Some(ev) = self.initial.pop_front() {
            return Poll::Ready(Some(ev));
        }
        if let Some(d) = self.deadline.as_mut() {
            if d.as_mut().poll(cx).is_ready() {
                self.rx = None;
                return Poll::Ready(None);
            }
        }
        match self.rx.as_mut() {
            Some(rx) => rx.poll_recv(cx),
            None => Poll::Ready(None),
        }
    }
}

impl Drop for CacheWatch {
    fn drop(&mut self) {
        if let Some(t) = self.forwarder.take() {
            t.abort();
        }
        if let Some((registry, id, metrics)) = self.registration.take() {
            if let Some(reg) = registry.upgrade() {
                if reg.lock().unwrap_or_else(|e| e.into_inner()).remove(id) {
                    metrics.registered_watchers(-1);
                }
            }
        }
    }
}

/// Sets up a watch (see the module docs).
pub(crate) async fn watch(inner: &Inner, namespace: Option<&str>, opts: &ListOptions) -> Result<CacheWatch> {
    let pred = Arc::new(Predicate::from_list_options(namespace, opts));
    if inner.config.cache_disabled() {
        return storage_watch(inner, pred, opts).await;
    }
    inner.check_ready()?;
    let send_initial = inner.config.gates.watch_list && opts.send_initial_events == Some(true);
    let requested = opts.resource_version_number();
    // The revision the cache must reach before the watch starts.
    let required = if send_initial && opts.resource_version.is_none() {
        inner.storage.current_revision().await?
    } else {
        requested
    };
    if required > 0 {
        inner.wait_until_fresh(required, inner.consistent_read_supported()).await?;
    }
    let now = inner.config.clock.now();
    let deadline = opts.timeout_seconds.filter(|s| *s > 0).map(|s| now + Duration::from_secs(s));

    let state = inner.read_state();
    let start_rv = state.resource_version;
    // `sendInitialEvents=false` at resourceVersion ""/"0": no initial
    // events, the stream starts at the cache's current revision (upstream).
    let initial_events = send_initial || (requested == 0 && opts.send_initial_events != Some(false));
    let initial: VecDeque<WatchEvent> = if initial_events {
        let mut v: VecDeque<WatchEvent> = match (pred.node_name(), state.node_index.as_ref()) {
            (Some(node), Some(index)) => index
                .keys(node)
                .filter_map(|k| state.store.get(k))
                .filter(|o| pred.matches(o))
                .map(|o| WatchEvent::Added(o.clone()))
                .collect(),
            _ => state
                .store
                .range(pred.namespace.as_deref(), None)
                .filter(|o| pred.matches(o))
                .map(|o| WatchEvent::Added(o.clone()))
                .collect(),
        };
        if send_initial && opts.allow_watch_bookmarks {
            v.push_back(WatchEvent::Bookmark(Bookmark { resource_version: start_rv, initial_events_end: true }));
        }
        v
    } else if requested == 0 {
        VecDeque::new()
    } else {
        match state.history.since(requested) {
            Ok(events) => {
                events.iter().filter_map(|e| convert_event(&pred, requested, e)).collect()
            }
            Err(HistoryError::TooOld { requested, oldest }) => {
                return Ok(CacheWatch::error(CacheError::TooOldResourceVersion { requested, oldest }));
            }
            Err(HistoryError::Uninitialized) => {
                let retry_after_secs = inner.ready.get().retry_after_secs(now).unwrap_or(1);
                return Err(CacheError::NotReady { retry_after_secs });
            }
        }
    };
    let (tx, rx) = mpsc::channel(inner.config.tuning.watcher_buffer.max(1));
    let watcher = Watcher::new(pred, start_rv, opts.allow_watch_bookmarks, deadline, tx);
    let id = inner.registry.lock().unwrap_or_else(|e| e.into_inner()).add(watcher, now);
    drop(state);
    inner.metrics.registered_watchers(1);

    Ok(CacheWatch {
        initial,
        rx: Some(rx),
        registration: Some((Arc::downgrade(&inner.registry), id, inner.metrics.clone())),
        deadline: deadline.map(|d| Box::pin(tokio::time::sleep_until(d))),
        forwarder: None,
        served_as: None,
    })
}

/// A periodic `BOOKMARK` at `resource_version`.
fn bookmark(resource_version: i64) -> WatchEvent {
    WatchEvent::Bookmark(Bookmark { resource_version, initial_events_end: false })
}

/// A watch straight from storage, for a resource whose cacher has size 0
/// (`--watch-cache=false`, `--watch-cache-sizes=resource#0`; upstream
/// `storage/etcd3/watcher.go`): initial state from a storage LIST when asked
/// for, then the storage watch, filtered and typed like a cache watcher's
/// events. With `allowWatchBookmarks`, every [`BOOKMARK_FREQUENCY`] a
/// progress notification is requested and sent on as a `BOOKMARK` (when the
/// storage's notifications are reliable; otherwise a `BOOKMARK` at the last
/// revision seen), plus WatchList's initial-events-end.
async fn storage_watch(inner: &Inner, pred: Arc<Predicate>, opts: &ListOptions) -> Result<CacheWatch> {
    use crate::event::{CacheEvent, EventKind};
    use crate::storage_list::{self, StorageRead};
    use crate::store::CachedObject;
    use futures::StreamExt;
    use rkube_storage::{EventKind as StorageEventKind, StorageError, WatchResponse};

    let send_initial = inner.config.gates.watch_list && opts.send_initial_events == Some(true);
    let requested = opts.resource_version_number();
    let mut initial = VecDeque::new();
    let initial_events = send_initial || (requested == 0 && opts.send_initial_events != Some(false));
    let after = if initial_events {
        let read = if requested > 0 { StorageRead::NotOlderThan(requested) } else { StorageRead::Latest };
        let r = storage_list::list(inner, &pred, read, None, 0, false).await?;
        initial.extend(r.items.into_iter().map(WatchEvent::Added));
        if send_initial && opts.allow_watch_bookmarks {
            initial.push_back(WatchEvent::Bookmark(Bookmark { resource_version: r.resource_version, initial_events_end: true }));
        }
        r.resource_version
    } else if requested == 0 {
        inner.storage.current_revision().await?
    } else {
        requested
    };
    let watch = match inner.storage.watch(&inner.config.resource_prefix, after).await {
        Ok(w) => w,
        Err(StorageError::Compacted { compacted, .. }) => {
            return Ok(CacheWatch::error(CacheError::TooOldResourceVersion { requested: after, oldest: compacted }));
        }
        Err(e) => return Err(e.into()),
    };
    let (tx, rx) = mpsc::channel(inner.config.tuning.watcher_buffer.max(1));
    let prefix = inner.config.resource_prefix.clone();
    let extract = inner.config.field_extractor;
    let clock = inner.config.clock.clone();
    let bookmarks = opts.allow_watch_bookmarks;
    let reliable = inner.storage.progress_notify_reliable();
    let forwarder = tokio::spawn(async move {
        let rkube_storage::Watch { mut stream, progress } = watch;
        let mut last_rv = after;
        let first = tokio::time::Instant::now() + BOOKMARK_FREQUENCY;
        let mut ticker = tokio::time::interval_at(first, BOOKMARK_FREQUENCY);
        loop {
            let msg = tokio::select! {
                msg = stream.next() => match msg {
                    Some(msg) => msg,
                    None => return,
                },
                _ = ticker.tick(), if bookmarks => {
                    if reliable {
                        progress.request_progress();
                    } else if tx.send(bookmark(last_rv)).await.is_err() {
                        return;
                    }
                    continue;
                }
            };
            let events = match msg {
                Ok(WatchResponse::Events(evs)) => evs,
                Ok(WatchResponse::Progress { revision }) => {
                    if bookmarks && reliable && revision >= last_rv {
                        last_rv = revision;
                        if tx.send(bookmark(revision)).await.is_err() {
                            return;
                        }
                    }
                    continue;
                }
                Err(StorageError::Compacted { requested, compacted }) => {
                    let _ = tx.send(WatchEvent::Error(CacheError::TooOldResourceVersion { requested, oldest: compacted })).await;
                    return;
                }
                Err(e) => {
                    let _ = tx.send(WatchEvent::Error(e.into())).await;
                    return;
                }
            };
            for ev in events {
                let rv = ev.revision();
                last_rv = last_rv.max(rv);
                let Some(key) = ev.kv.key.strip_prefix(prefix.as_str()) else { continue };
                let decode = |v: &[u8], rv| CachedObject::decode(key, v, rv, extract).ok().map(Arc::new);
                let prev = ev.prev_kv.as_ref().and_then(|p| decode(&p.value, p.mod_revision));
                let cache_event = match (ev.kind, prev) {
                    (StorageEventKind::Put, prev) => {
                        let Some(obj) = decode(&ev.kv.value, rv) else { continue };
                        let kind = if prev.is_some() { EventKind::Modified } else { EventKind::Added };
                        CacheEvent::new(kind, obj, prev, rv, clock.now())
                    }
                    (StorageEventKind::Delete, Some(prev)) => {
                        let last = Arc::new(prev.with_resource_version(rv));
                        CacheEvent::new(EventKind::Deleted, last, Some(prev), rv, clock.now())
                    }
                    (StorageEventKind::Delete, None) => continue,
                };
                if let Some(out) = convert_event(&pred, after, &cache_event) {
                    if tx.send(out).await.is_err() {
                        return;
                    }
                }
            }
        }
    });
    let now = inner.config.clock.now();
    let deadline = opts.timeout_seconds.filter(|s| *s > 0).map(|s| now + Duration::from_secs(s));
    Ok(CacheWatch {
        initial,
        rx: Some(rx),
        registration: None,
        deadline: deadline.map(|d| Box::pin(tokio::time::sleep_until(d))),
        forwarder: Some(forwarder),
        served_as: None,
    })
}
