//! The watcher registry (upstream `cacheWatcher` bookkeeping and
//! `indexedWatchers` in `cacher.go`).
//!
//! Each watcher has a bounded channel to its [`crate::CacheWatch`] stream,
//! its selection, and the resourceVersion its initial events covered
//! (`start_rv`: later events only). Watchers whose field selector requires
//! `spec.nodeName=X` are registered under X and only see events whose old or
//! new object is on X; all others are cluster-wide.
//!
//! Delivery never waits: an event that does not fit in a watcher's channel
//! goes to the watcher's overflow queue, and the watcher is *blocked*. The
//! dispatcher retries blocked watchers; one still blocked after the budget
//! (or whose overflow fills) is terminated: its channel is closed, so the
//! client sees its watch end and re-watches from its last resourceVersion.
//!
//! Lock order: the registry mutex is taken after the cache state lock (watch
//! registration holds both), never the other way round.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::sync::mpsc::error::TrySendError;
use tokio::time::Instant;

use crate::bookmarks::{next_bookmark_time, BookmarkTimer, BOOKMARK_FREQUENCY};
use crate::event::{Bookmark, CacheEvent, EventKind, WatchEvent};
use crate::filter::Predicate;
use crate::index::NodeIndex;

/// Identifies a registered watcher.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WatcherId(pub u64);

/// Outcome of offering an event to a watcher.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// In the channel (or not for this watcher).
    Sent,
    /// Queued in the overflow: the watcher is behind.
    Queued,
    /// The watcher's stream is gone (dropped by its client).
    Gone,
}

/// What a watch selecting `pred`, whose initial events covered every change
/// up to `start_rv`, should see of `ev` (upstream `convertToWatchEvent`):
/// the selector matched before and after → MODIFIED; only after → ADDED;
/// only before → DELETED with the old object at the event's revision;
/// neither → nothing. Events at or before `start_rv` were in the initial events.
pub fn convert_event(pred: &Predicate, start_rv: i64, ev: &CacheEvent) -> Option<WatchEvent> {
    if ev.resource_version <= start_rv {
        return None;
    }
    let cur = ev.kind != EventKind::Deleted && pred.matches(&ev.object);
    let old = ev.prev_object.as_ref().is_some_and(|p| pred.matches(p));
    match (cur, old) {
        (true, true) => Some(WatchEvent::Modified(ev.object.clone())),
        (true, false) => Some(WatchEvent::Added(ev.object.clone())),
        (false, true) => ev.prev_at_event_rv().map(WatchEvent::Deleted),
        (false, false) => None,
    }
}

/// One registered watcher.
#[derive(Debug)]
pub struct Watcher {
    /// What it selects.
    pub pred: Arc<Predicate>,
    /// The node it is registered under (`spec.nodeName=X` selector).
    pub node: Option<String>,
    /// Its initial events covered every change up to this revision.
    pub start_rv: i64,
    /// Bookmarks requested (`allowWatchBookmarks=true`).
    pub allow_bookmarks: bool,
    /// When the watch ends (`timeoutSeconds`).
    pub deadline: Option<Instant>,
    tx: mpsc::Sender<WatchEvent>,
    overflow: VecDeque<WatchEvent>,
    blocked_since: Option<Instant>,
}

impl Watcher {
    /// A watcher sending into `tx`.
    pub fn new(
        pred: Arc<Predicate>,
        start_rv: i64,
        allow_bookmarks: bool,
        deadline: Option<Instant>,
        tx: mpsc::Sender<WatchEvent>,
    ) -> Self {
        let node = pred.node_name().map(str::to_string);
        Watcher { pred, node, start_rv, allow_bookmarks, deadline, tx, overflow: VecDeque::new(), blocked_since: None }
    }

    /// What this watcher should see of `ev` (see [`convert_event`]).
    pub fn convert(&self, ev: &CacheEvent) -> Option<WatchEvent> {
        convert_event(&self.pred, self.start_rv, ev)
    }

    /// Offers `event` without waiting; keeps order behind earlier queued events.
    pub fn offer(&mut self, event: WatchEvent, now: Instant) -> Delivery {
        if !self.overflow.is_empty() && self.flush(now) != Delivery::Sent {
            self.overflow.push_back(event);
            return Delivery::Queued;
        }
        match self.tx.try_send(event) {
            Ok(()) => Delivery::Sent,
            Err(TrySendError::Full(ev)) => {
                self.overflow.push_back(ev);
                self.blocked_since.get_or_insert(now);
                Delivery::Queued
            }
            Err(TrySendError::Closed(_)) => Delivery::Gone,
        }
    }

    /// Offers a bookmark only if it fits right now (bookmarks are never queued).
    pub fn offer_bookmark(&mut self, rv: i64) -> Delivery {
        if !self.overflow.is_empty() {
            return Delivery::Queued;
        }
        let bm = WatchEvent::Bookmark(Bookmark { resource_version: rv.max(self.start_rv), initial_events_end: false });
        match self.tx.try_send(bm) {
            Ok(()) => Delivery::Sent,
            Err(TrySendError::Full(_)) => Delivery::Queued,
            Err(TrySendError::Closed(_)) => Delivery::Gone,
        }
    }

    /// Moves queued events into the channel while they fit.
    pub fn flush(&mut self, now: Instant) -> Delivery {
        while let Some(ev) = self.overflow.pop_front() {
            match self.tx.try_send(ev) {
                Ok(()) => self.blocked_since = Some(now),
                Err(TrySendError::Full(ev)) => {
                    self.overflow.push_front(ev);
                    return Delivery::Queued;
                }
                Err(TrySendError::Closed(_)) => return Delivery::Gone,
            }
        }
        self.blocked_since = None;
        Delivery::Sent
    }

    /// True when the watcher has been unable to take an event for longer
    /// than `budget`, or has queued more than `max_overflow` events.
    pub fn is_unresponsive(&self, now: Instant, budget: Duration, max_overflow: usize) -> bool {
        self.overflow.len() > max_overflow
            || self.blocked_since.is_some_and(|t| now.saturating_duration_since(t) > budget)
    }

    /// True while events are queued.
    pub fn is_blocked(&self) -> bool {
        !self.overflow.is_empty()
    }
}

/// All watchers of one cacher, indexed by node.
#[derive(Debug)]
pub struct Registry {
    watchers: HashMap<WatcherId, Watcher>,
    cluster_wide: HashSet<WatcherId>,
    by_node: HashMap<String, HashSet<WatcherId>>,
    next_id: u64,
    /// Bookmark schedule of the watchers that asked for bookmarks.
    pub bookmarks: BookmarkTimer,
}

impl Registry {
    /// An empty registry; bookmark buckets count from `origin`.
    pub fn new(origin: Instant) -> Self {
        Registry {
            watchers: HashMap::new(),
            cluster_wide: HashSet::new(),
            by_node: HashMap::new(),
            next_id: 1,
            bookmarks: BookmarkTimer::new(origin),
        }
    }

    /// Registers `w`; schedules its first bookmark.
    pub fn add(&mut self, w: Watcher, now: Instant) -> WatcherId {
        let id = WatcherId(self.next_id);
        self.next_id += 1;
        match &w.node {
            Some(node) => {
                self.by_node.entry(node.clone()).or_default().insert(id);
            }
            None => {
                self.cluster_wide.insert(id);
            }
        }
        if w.allow_bookmarks {
            if let Some(t) = next_bookmark_time(now, w.deadline, BOOKMARK_FREQUENCY) {
                self.bookmarks.schedule(id, t);
            }
        }
        self.watchers.insert(id, w);
        id
    }

    /// Unregisters `id` (its channel closes when the sender drops). Returns true if it was there.
    pub fn remove(&mut self, id: WatcherId) -> bool {
        let Some(w) = self.watchers.remove(&id) else { return false };
        match &w.node {
            Some(node) => {
                if let Some(set) = self.by_node.get_mut(node) {
                    set.remove(&id);
                    if set.is_empty() {
                        self.by_node.remove(node);
                    }
                }
            }
            None => {
                self.cluster_wide.remove(&id);
            }
        }
        true
    }

    /// Unregisters everyone (re-initialization). Returns how many.
    pub fn clear(&mut self) -> usize {
        let n = self.watchers.len();
        self.watchers.clear();
        self.cluster_wide.clear();
        self.by_node.clear();
        n
    }

    /// Number of registered watchers.
    pub fn len(&self) -> usize {
        self.watchers.len()
    }

    /// True when nobody watches.
    pub fn is_empty(&self) -> bool {
        self.watchers.is_empty()
    }

    /// The watcher `id`.
    pub fn get_mut(&mut self, id: WatcherId) -> Option<&mut Watcher> {
        self.watchers.get_mut(&id)
    }

    /// Watchers that may care about `ev`: every cluster-wide watcher plus the
    /// watchers of the old and new object's nodes.
    pub fn candidates(&self, ev: &CacheEvent) -> Vec<WatcherId> {
        let mut out: Vec<WatcherId> = self.cluster_wide.iter().copied().collect();
        if !self.by_node.is_empty() {
            let new_node = (ev.kind != EventKind::Deleted).then(|| NodeIndex::node_of(&ev.object));
            let old_node = ev.prev_object.as_deref().map(NodeIndex::node_of);
            for node in [new_node, old_node.filter(|o| Some(*o) != new_node)].into_iter().flatten() {
                if let Some(set) = self.by_node.get(node) {
                    out.extend(set.iter().copied());
                }
            }
        }
        out
    }

    /// Ids of watchers with queued events.
    pub fn blocked(&self) -> Vec<WatcherId> {
        self.watchers.iter().filter(|(_, w)| w.is_blocked()).map(|(id, _)| *id).collect()
    }
}
