//! The reflector: fills the cache from storage and keeps it following
//! (upstream `Cacher.startCaching` + client-go `Reflector.ListAndWatch`).
//!
//! ```text
//!   Listing ──list done──► Watching ──watch broke / Compacted──► Broken
//!      ▲                                                            │
//!      └──────────────────── after backoff ─────────────────────────┘
//! ```
//!
//! - **Listing**: a paged range over the resource prefix, every page at the
//!   revision of the first one, built into a fresh store off the lock. The
//!   storage watch (after that revision) is opened *before* the list is
//!   installed, so no event can fall between them. Then the store, history,
//!   snapshots and index are replaced in one write-locked step: readers see
//!   the old complete view or the new one, never a mix.
//! - **Watching**: each event is applied under the write lock, then handed
//!   to the dispatcher; progress notifications move the resourceVersion.
//! - **Broken**: readiness goes to `Reinitializing` (requests get 429),
//!   every watcher is closed (clients re-watch from their last
//!   resourceVersion), and after a backoff ([`Backoff`]: 800 ms doubling to
//!   30 s as client-go's reflector, with jitter so cachers broken together
//!   do not re-list in lockstep) the loop lists again.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use rkube_storage::{prefix_end, RangeRequest, StorageError, WatchResponse};

use crate::backoff::Backoff;
use crate::cacher::Inner;
use crate::dispatcher::DispatchMsg;
use crate::ready::ReadyInput;
use crate::store::{CachedObject, Store};

/// Why a list-and-watch round ended.
#[derive(Debug, thiserror::Error)]
pub enum ReflectorError {
    /// Storage failed (including `Compacted` for a watch that fell behind).
    #[error("storage: {0}")]
    Storage(#[from] StorageError),
    /// The storage watch stream ended.
    #[error("storage watch closed")]
    WatchClosed,
    /// The dispatcher is gone (cacher stopping).
    #[error("dispatcher stopped")]
    Stopped,
}

/// Runs list-and-watch rounds until the cacher is dropped.
pub(crate) async fn run(inner: Arc<Inner>) {
    let tuning = inner.config.tuning;
    let mut backoff = Backoff::new(tuning.initial_backoff, tuning.max_backoff);
    loop {
        let started = tokio::time::Instant::now();
        let err = list_and_watch(&inner).await;
        if matches!(err, ReflectorError::Stopped) {
            return;
        }
        tracing::warn!(resource = %inner.config.resource, error = %err, "watch cache list/watch ended; re-initializing");
        broken(&inner).await;
        // A round that served for a while resets the backoff (client-go resets after 2 min of health).
        if started.elapsed() > Duration::from_secs(120) {
            backoff.reset();
        }
        tokio::time::sleep(backoff.next_delay()).await;
    }
}

/// Marks the cache unready and closes every watcher.
async fn broken(inner: &Inner) {
    inner.ready.apply(ReadyInput::WatchBroken, inner.config.clock.now());
    *inner.progress.lock().unwrap_or_else(|e| e.into_inner()) = None;
    inner.watch_synced.store(false, Ordering::Release);
    let _ = inner.dispatch.send(DispatchMsg::TerminateAll).await;
}

/// Reads the whole resource at one revision, page by page. Returns the store and the revision.
pub(crate) async fn list_all(inner: &Inner) -> Result<(Store, i64), StorageError> {
    let prefix = &inner.config.resource_prefix;
    let end = prefix_end(prefix);
    let mut store = Store::new();
    let mut start = prefix.clone();
    let mut revision = 0;
    loop {
        let resp = inner
            .storage
            .range(RangeRequest {
                start: start.clone(),
                end: end.clone(),
                revision,
                limit: inner.config.tuning.list_page_size,
                count_only: false,
            })
            .await?;
        revision = resp.revision;
        for kv in &resp.kvs {
            let Some(key) = inner.relative_key(&kv.key) else { continue };
            match CachedObject::decode(key, &kv.value, kv.mod_revision, inner.config.field_extractor) {
                Ok(o) => {
                    store.insert(Arc::new(o));
                }
                Err(e) => tracing::warn!(error = %e, "skipping undecodable object while listing"),
            }
        }
        match resp.kvs.last() {
            Some(last) if resp.more => start = format!("{}\0", last.key),
            _ => break,
        }
    }
    Ok((store, revision))
}

/// One round: list, open the watch, install, follow. Returns why it ended.
async fn list_and_watch(inner: &Inner) -> ReflectorError {
    let (store, rv) = match list_all(inner).await {
        Ok(x) => x,
        Err(e) => return e.into(),
    };
    let watch = match inner.storage.watch(&inner.config.resource_prefix, rv).await {
        Ok(w) => w,
        Err(e) => return e.into(),
    };
    // On storage whose requested progress notifications may overtake events
    // (etcd < 3.4.31 / 3.5.13, issue 15220), trust them only once the cache
    // has caught up with the revision current after the watch opened.
    let mut sync_target = None;
    if !inner.storage.progress_notify_reliable() {
        match inner.storage.current_revision().await {
            Ok(c) if c > rv => sync_target = Some(c),
            Ok(_) => {}
            Err(e) => return e.into(),
        }
    }
    install(inner, store, rv);
    *inner.progress.lock().unwrap_or_else(|e| e.into_inner()) = Some(watch.progress.clone());
    inner.watch_synced.store(sync_target.is_none(), Ordering::Release);
    if inner.dispatch.send(DispatchMsg::Progress(rv)).await.is_err() {
        return ReflectorError::Stopped;
    }

    let mut stream = watch.stream;
    loop {
        let rv_now = match stream.next().await {
            None => return ReflectorError::WatchClosed,
            Some(Err(e)) => return e.into(),
            Some(Ok(WatchResponse::Events(events))) => match apply_events(inner, &events).await {
                Ok(rv) => rv,
                Err(e) => return e,
            },
            Some(Ok(WatchResponse::Progress { revision })) => {
                let moved = inner.write_state().progress(revision);
                if moved {
                    inner.rv.send_replace(revision);
                    inner.metrics.resource_version(revision);
                    if inner.dispatch.send(DispatchMsg::Progress(revision)).await.is_err() {
                        return ReflectorError::Stopped;
                    }
                }
                revision
            }
        };
        if let Some(target) = sync_target {
            if rv_now >= target {
                inner.watch_synced.store(true, Ordering::Release);
                sync_target = None;
            }
        }
    }
}

/// Installs a complete list (write lock held for the swap only) and marks the cache ready.
fn install(inner: &Inner, store: Store, rv: i64) {
    {
        let mut state = inner.write_state();
        state.replace(store, rv);
    }
    inner.rv.send_replace(rv);
    inner.metrics.resource_version(rv);
    inner.metrics.initialized();
    inner.ready.apply(ReadyInput::ListCompleted, inner.config.clock.now());
    tracing::info!(resource = %inner.config.resource, resource_version = rv, "watch cache initialized");
}

/// Applies a batch of storage events; returns the cache's resourceVersion after it.
async fn apply_events(inner: &Inner, events: &[rkube_storage::Event]) -> Result<i64, ReflectorError> {
    let now = inner.config.clock.now();
    inner.metrics.events_received(events.len() as u64);
    let mut applied = Vec::with_capacity(events.len());
    let rv = {
        let mut state = inner.write_state();
        for ev in events {
            let Some(key) = inner.relative_key(&ev.kv.key) else { continue };
            if let Some((cache_event, outcome)) = state.apply(ev, key, inner.config.field_extractor, now) {
                if let Some((old, new)) = outcome.resized {
                    inner.metrics.capacity(old, new);
                }
                applied.push(cache_event);
            }
            state.progress(ev.revision());
        }
        state.resource_version
    };
    inner.rv.send_replace(rv);
    inner.metrics.resource_version(rv);
    for ev in applied {
        inner.dispatch.send(DispatchMsg::Event(ev)).await.map_err(|_| ReflectorError::Stopped)?;
    }
    inner.dispatch.send(DispatchMsg::Progress(rv)).await.map_err(|_| ReflectorError::Stopped)?;
    Ok(rv)
}
