//! The cache's data under one lock (upstream `watchCache`): the latest
//! store, its resourceVersion, snapshots, the event history and the node
//! index. Only the reflector writes it; readers take O(1) clones.
//!
//! Invariants (hold whenever the lock is released):
//! - `store` is exactly the storage state at `resource_version`;
//! - every event in `history` has revision ≤ `resource_version`, in order;
//! - a snapshot at revision r is the storage state at r, and covers every
//!   revision up to the next snapshot (or `resource_version`);
//! - `node_index` indexes `store`.

use std::sync::Arc;

use rkube_storage::{Event, EventKind as StorageEventKind};
use tokio::time::Instant;

use crate::event::{CacheEvent, EventKind};
use crate::history::{History, PushOutcome, Sizing};
use crate::index::NodeIndex;
use crate::snapshots::Snapshots;
use crate::store::{CachedObject, FieldExtractor, Store};

/// See the module docs.
#[derive(Debug)]
pub struct CacheState {
    /// The latest state.
    pub store: Store,
    /// The revision `store` is at (events and progress notifications).
    pub resource_version: i64,
    /// Snapshots per revision (empty when the ListFromCacheSnapshot gate is off).
    pub snapshots: Snapshots,
    /// Recent events.
    pub history: History,
    /// Pods by node, when enabled.
    pub node_index: Option<NodeIndex>,
    snapshots_enabled: bool,
}

impl CacheState {
    /// An empty, never-listed state.
    pub fn new(sizing: Sizing, index_node_name: bool, snapshots_enabled: bool) -> Self {
        CacheState {
            store: Store::new(),
            resource_version: 0,
            snapshots: Snapshots::new(),
            history: History::new(sizing),
            node_index: index_node_name.then(NodeIndex::new),
            snapshots_enabled,
        }
    }

    /// Installs a complete list at `rv` (upstream `Replace`): history and
    /// snapshots restart from it.
    pub fn replace(&mut self, store: Store, rv: i64) {
        if let Some(idx) = self.node_index.as_mut() {
            *idx = NodeIndex::build(&store);
        }
        self.history.reset(rv);
        self.snapshots.reset();
        if self.snapshots_enabled {
            self.snapshots.add(rv, store.clone());
        }
        self.store = store;
        self.resource_version = rv;
    }

    /// Applies one storage event whose key is `key` (relative). Returns the
    /// recorded event and what it did to the history, or `None` when the
    /// event changes nothing visible (already applied, deletion of an
    /// unknown key, undecodable value — logged).
    pub fn apply(
        &mut self,
        ev: &Event,
        key: &str,
        extract: FieldExtractor,
        now: Instant,
    ) -> Option<(Arc<CacheEvent>, PushOutcome)> {
        let rv = ev.revision();
        if rv <= self.resource_version {
            return None;
        }
        self.resource_version = rv;
        let cache_event = match ev.kind {
            StorageEventKind::Put => {
                let obj = match CachedObject::decode(key, &ev.kv.value, rv, extract) {
                    Ok(o) => Arc::new(o),
                    Err(e) => {
                        tracing::warn!(error = %e, "skipping undecodable object in watch cache");
                        return None;
                    }
                };
                let prev = self.store.insert(obj.clone());
                let kind = if prev.is_some() { EventKind::Modified } else { EventKind::Added };
                CacheEvent::new(kind, obj, prev, rv, now)
            }
            StorageEventKind::Delete => {
                let prev = self.store.remove(key)?;
                let last = Arc::new(prev.with_resource_version(rv));
                CacheEvent::new(EventKind::Deleted, last, Some(prev), rv, now)
            }
        };
        if let Some(idx) = self.node_index.as_mut() {
            let new = (cache_event.kind != EventKind::Deleted).then_some(&*cache_event.object);
            idx.update(cache_event.prev_object.as_deref(), new);
        }
        let cache_event = Arc::new(cache_event);
        let outcome = self.history.push(cache_event.clone());
        if self.snapshots_enabled {
            self.snapshots.add(rv, self.store.clone());
            if outcome.evicted {
                if let Some(oldest) = self.history.oldest_event_rv() {
                    self.snapshots.remove_less(oldest);
                }
            }
        }
        Some((cache_event, outcome))
    }

    /// Moves the resourceVersion forward without an event (progress
    /// notification). Returns true when it moved.
    pub fn progress(&mut self, rv: i64) -> bool {
        if rv > self.resource_version {
            self.resource_version = rv;
            true
        } else {
            false
        }
    }

    /// Storage was compacted at `rv`: snapshots below it go (KEP-4988).
    pub fn compacted(&mut self, rv: i64) {
        self.snapshots.remove_less(rv);
    }
}
