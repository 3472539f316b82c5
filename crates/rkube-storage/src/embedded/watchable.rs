//! The watch layer of the embedded store (etcd's `watchable_store.go`).
//!
//! [`WatchableStore`] wraps the [`Store`]: every committed batch goes through
//! [`WatchableStore::apply`], which commits and then publishes the batch's
//! events to the [`Hub`] — events come from the write path's commit, in one
//! place. The hub fans them out to registered watchers with `try_send`, so a
//! watcher never blocks the writer.
//!
//! A watch from an older revision first replays history from disk (pages of
//! [`REPLAY_PAGE_EVENTS`] events read in their own snapshot), then forwards the
//! live events queued meanwhile. The boundary is exact: the watcher is
//! registered under the hub lock at published revision `R`; replay covers
//! `(after, R]` and the live channel receives only batches above `R`.
//!
//! **Slow watchers**: each watcher's live channel holds
//! `watch_channel_capacity` messages (one message per committed batch or
//! progress notification). When it is full the watcher is dropped from the hub:
//! its stream yields the messages already queued, then
//! `Err(StorageError::Unavailable("... watch channel overflowed ..."))`, and
//! ends. The consumer re-watches from the last revision it saw (as a
//! Kubernetes reflector does after a watch error).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use futures::StreamExt;
use redb::ReadableDatabase;
use tokio::sync::mpsc;

use super::database::DbSlot;
use super::index;
use super::store::{Committed, Store, WriteOp};
use crate::{ProgressRequester, Result, Revision, StorageError, Watch, WatchResponse};

/// Events read from disk per replay page (one read transaction each).
pub(crate) const REPLAY_PAGE_EVENTS: usize = 1000;

/// One registered watcher.
struct Watcher {
    /// Keys starting with this are delivered.
    prefix: String,
    /// Live responses; `try_send` only.
    tx: mpsc::Sender<WatchResponse>,
    /// Set when the channel overflowed and the watcher was dropped.
    overflowed: Arc<AtomicBool>,
}

/// Registry of live watchers plus the published revision.
struct HubState {
    /// Revision of the last batch delivered to watchers. Every event at or
    /// below it is either on disk and published, or was never committed.
    published: Revision,
    watchers: HashMap<u64, Watcher>,
    next_id: u64,
    /// Set when the writer stopped; no watcher registers after it.
    closed: bool,
}

/// Fan-out point for committed events (see the module docs).
pub(crate) struct Hub {
    /// Lock order: `state` is a leaf lock; nothing else is locked while held.
    state: Mutex<HubState>,
    /// Mirrors `state.published` for lock-free `current_revision` reads.
    published: AtomicI64,
    /// Compacted revision, updated after each compaction commits.
    compacted: AtomicI64,
    capacity: usize,
}

impl Hub {
    /// A hub starting at the store's revisions.
    pub fn new(current: Revision, compacted: Revision, capacity: usize) -> Hub {
        Hub {
            state: Mutex::new(HubState { published: current, watchers: HashMap::new(), next_id: 0, closed: false }),
            published: AtomicI64::new(current),
            compacted: AtomicI64::new(compacted),
            capacity: capacity.max(1),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HubState> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The last published (committed and delivered) revision.
    pub fn published(&self) -> Revision {
        self.published.load(Ordering::Acquire)
    }

    /// The compacted revision.
    pub fn compacted(&self) -> Revision {
        self.compacted.load(Ordering::Acquire)
    }

    /// Delivers a committed batch to every matching watcher.
    fn publish(&self, committed: &Committed) {
        let mut state = self.lock();
        state.published = committed.revision;
        self.published.store(committed.revision, Ordering::Release);
        if committed.events.is_empty() {
            return;
        }
        state.watchers.retain(|_, w| {
            let events: Vec<_> = committed.events.iter().filter(|e| e.kv.key.starts_with(&w.prefix)).cloned().collect();
            events.is_empty() || offer(w, WatchResponse::Events(events))
        });
    }

    /// Queues a progress notification at the published revision for watcher `id`.
    fn request_progress(&self, id: u64) {
        let mut state = self.lock();
        let revision = state.published;
        let keep = match state.watchers.get(&id) {
            Some(w) => offer(w, WatchResponse::Progress { revision }),
            None => return,
        };
        if !keep {
            state.watchers.remove(&id);
        }
    }

    fn remove(&self, id: u64) {
        self.lock().watchers.remove(&id);
    }

    /// Drops every watcher (their streams end with `Unavailable`); called when
    /// the writer stops.
    pub fn close(&self) {
        let mut state = self.lock();
        state.closed = true;
        state.watchers.clear();
    }
}

/// `try_send`s `resp`; false when the watcher must be dropped (full or gone).
fn offer(w: &Watcher, resp: WatchResponse) -> bool {
    match w.tx.try_send(resp) {
        Ok(()) => true,
        Err(mpsc::error::TrySendError::Full(_)) => {
            w.overflowed.store(true, Ordering::Release);
            false
        }
        Err(mpsc::error::TrySendError::Closed(_)) => false,
    }
}

/// The store plus its watch hub: the commit decorator.
pub(crate) struct WatchableStore {
    store: Store,
    hub: Arc<Hub>,
}

impl WatchableStore {
    /// Wraps `store`, publishing to `hub`.
    pub fn new(store: Store, hub: Arc<Hub>) -> WatchableStore {
        WatchableStore { store, hub }
    }

    /// Commits `ops` (see [`Store::apply`]) and then publishes their events.
    pub fn apply(&mut self, ops: &[WriteOp]) -> Result<Committed> {
        let committed = self.store.apply(ops)?;
        self.hub.publish(&committed);
        Ok(committed)
    }

    /// The database file.
    pub fn path(&self) -> &std::path::Path {
        self.store.slot().path()
    }

    /// See [`Store::latched`].
    pub fn latched(&self) -> bool {
        self.store.latched()
    }

    /// See [`Store::reopen`].
    pub fn reopen(&mut self) -> Result<()> {
        self.store.reopen()
    }

    /// See [`Store::probe`].
    pub fn probe(&mut self) -> Result<()> {
        self.store.probe()
    }

    /// Compacts the store and records the new compacted revision.
    pub fn compact(&mut self, revision: Revision) -> Result<()> {
        self.store.compact(revision)?;
        self.hub.compacted.store(self.store.compacted_revision(), Ordering::Release);
        Ok(())
    }
}

/// Removes its watcher from the hub when the stream is dropped.
struct Registration {
    hub: Arc<Hub>,
    id: u64,
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.hub.remove(self.id);
    }
}

/// Requests progress on one embedded watch.
struct HubProgress {
    hub: Arc<Hub>,
    id: u64,
}

impl ProgressRequester for HubProgress {
    fn request_progress(&self) {
        self.hub.request_progress(self.id);
    }
}

/// The live half of a watch.
struct Live {
    rx: mpsc::Receiver<WatchResponse>,
    overflowed: Arc<AtomicBool>,
    /// Events at or below this revision are dropped (a watch from a future revision).
    skip_through: Revision,
    _registration: Registration,
}

/// Watch stream state. `Replay` reads history pages until `until`, then
/// becomes `Live`; `Live` forwards channel messages until the channel ends,
/// then yields one error and becomes `Done`.
enum WatchState {
    /// Replaying `(after, until]` from disk.
    Replay { db: Arc<DbSlot>, prefix: String, after: Revision, until: Revision, live: Live },
    /// Forwarding live messages.
    Live(Live),
    /// Finished (after an error).
    Done,
}

/// Opens a watch on `prefix` for events after `after` (0 = from now).
///
/// Errors: `Compacted` when `after` is below the compacted revision;
/// `Unavailable` when the store is closed.
pub(crate) fn watch(hub: &Arc<Hub>, db: Arc<DbSlot>, prefix: &str, after: Revision) -> Result<Watch> {
    let (tx, rx) = mpsc::channel(hub.capacity);
    let overflowed = Arc::new(AtomicBool::new(false));
    let (id, published) = {
        let mut state = hub.lock();
        if state.closed {
            return Err(StorageError::Unavailable("embedded store is closed".into()));
        }
        let compacted = hub.compacted();
        if after != 0 && after < compacted {
            return Err(StorageError::Compacted { requested: after, compacted });
        }
        let id = state.next_id;
        state.next_id += 1;
        state.watchers.insert(id, Watcher { prefix: prefix.to_string(), tx, overflowed: overflowed.clone() });
        (id, state.published)
    };
    let after = if after == 0 { published } else { after };
    let live = Live {
        rx,
        overflowed,
        skip_through: after.max(published),
        _registration: Registration { hub: hub.clone(), id },
    };
    let state = if after < published {
        WatchState::Replay { db, prefix: prefix.to_string(), after, until: published, live }
    } else {
        WatchState::Live(live)
    };
    let stream = futures::stream::unfold(state, step).boxed();
    Ok(Watch { stream, progress: Arc::new(HubProgress { hub: hub.clone(), id }) })
}

/// Advances the watch by one message.
async fn step(mut state: WatchState) -> Option<(Result<WatchResponse>, WatchState)> {
    loop {
        state = match state {
            WatchState::Replay { db, prefix, after, until, live } => {
                let page = {
                    let (db, prefix) = (db.clone(), prefix.clone());
                    tokio::task::spawn_blocking(move || {
                        let txn = db.get()?.begin_read().map_err(|e| super::schema::internal("begin read", e))?;
                        index::replay(&txn, &prefix, after, until, REPLAY_PAGE_EVENTS)
                    })
                    .await
                    .unwrap_or_else(|e| Err(StorageError::Internal(format!("watch replay task failed: {e}"))))
                };
                let page = match page {
                    Ok(page) => page,
                    Err(e) => return Some((Err(e), WatchState::Done)),
                };
                let next = if page.scanned_to >= until {
                    WatchState::Live(live)
                } else {
                    WatchState::Replay { db, prefix, after: page.scanned_to, until, live }
                };
                if !page.events.is_empty() {
                    return Some((Ok(WatchResponse::Events(page.events)), next));
                }
                next
            }
            WatchState::Live(mut live) => match live.rx.recv().await {
                Some(WatchResponse::Events(events)) => {
                    let events: Vec<_> = events.into_iter().filter(|e| e.revision() > live.skip_through).collect();
                    if events.is_empty() {
                        WatchState::Live(live)
                    } else {
                        return Some((Ok(WatchResponse::Events(events)), WatchState::Live(live)));
                    }
                }
                Some(progress) => return Some((Ok(progress), WatchState::Live(live))),
                None => {
                    let err = if live.overflowed.load(Ordering::Acquire) {
                        StorageError::Unavailable(
                            "embedded watch channel overflowed: the consumer was too slow; \
                             re-watch from the last revision seen"
                                .into(),
                        )
                    } else {
                        StorageError::Unavailable("embedded store closed".into())
                    };
                    return Some((Err(err), WatchState::Done));
                }
            },
            WatchState::Done => return None,
        };
    }
}
