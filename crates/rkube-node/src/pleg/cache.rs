//! The pod status cache (upstream `pkg/kubelet/container/cache.go`, with KEP-3386's setter).
//!
//! Invariants (all under the one mutex):
//! - an entry is replaced only by a status with a strictly newer timestamp ([`PodCache::set`]),
//!   so a buffered event delivered after a reconnect cannot overwrite what a relist found later;
//! - the global timestamp only moves forward; it means "every entry reflects the runtime at least
//!   as of this time" and releases waiters whose own entry is not newer yet;
//! - a waiter of [`PodCache::get_newer_than`] is released exactly when its entry's timestamp or the
//!   global timestamp is strictly after its `min` (upstream released on `>=` in `notify` but
//!   checked `>` in `getIfNewerThan`; here both are `>`).
//!
//! Readers learn *why* they were released ([`Freshness`]): a release by the global timestamp
//! can hand out an entry older than the waiter's own last action, which is exactly how upstream
//! pod workers started duplicate containers (kubernetes#120942, #123087). The node agent
//! re-inspects the pod in that case instead of trusting the entry.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::oneshot;

use super::{PodStatus, Timestamp};

/// Why a read returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Freshness {
    /// The entry itself is newer than the requested time (or no time was requested).
    Entry,
    /// Only the global timestamp is newer: the entry may predate the caller's last action.
    Global,
}

/// One cache read.
#[derive(Clone, Debug)]
pub struct CacheRead {
    /// The status (an empty one with the id set when the runtime has nothing for the pod).
    pub status: Arc<PodStatus>,
    /// The error of the last inspection, if it failed.
    pub error: Option<String>,
    /// When the entry was written (runtime time); `None` for a missing entry.
    pub modified: Option<Timestamp>,
    /// Why it was returned.
    pub freshness: Freshness,
}

#[derive(Debug, Clone)]
struct Entry {
    status: Arc<PodStatus>,
    error: Option<String>,
    modified: Timestamp,
}

#[derive(Debug)]
struct Waiter {
    min: Timestamp,
    tx: oneshot::Sender<CacheRead>,
}

#[derive(Debug, Default)]
struct Inner {
    pods: HashMap<String, Entry>,
    /// `None` until the first relist completes.
    global: Option<Timestamp>,
    waiters: HashMap<String, Vec<Waiter>>,
}

/// The cache; share it as `Arc<PodCache>`.
#[derive(Debug, Default)]
pub struct PodCache {
    inner: Mutex<Inner>,
}

impl Inner {
    fn read(&self, id: &str, freshness: Freshness) -> CacheRead {
        match self.pods.get(id) {
            Some(e) => CacheRead {
                status: Arc::clone(&e.status),
                error: e.error.clone(),
                modified: Some(e.modified),
                freshness,
            },
            None => CacheRead { status: Arc::new(PodStatus::empty(id)), error: None, modified: None, freshness },
        }
    }

    /// The read for a waiter with `min`, if it may be released now.
    fn read_if_newer(&self, id: &str, min: Timestamp) -> Option<CacheRead> {
        if self.pods.get(id).is_some_and(|e| e.modified > min) {
            return Some(self.read(id, Freshness::Entry));
        }
        if self.global.is_some_and(|g| g > min) {
            return Some(self.read(id, Freshness::Global));
        }
        None
    }

    fn notify(&mut self, id: &str) {
        let Some(list) = self.waiters.remove(id) else { return };
        let mut keep = Vec::new();
        for w in list {
            if w.tx.is_closed() {
                continue;
            }
            match self.read_if_newer(id, w.min) {
                Some(read) => {
                    let _ = w.tx.send(read);
                }
                None => keep.push(w),
            }
        }
        if !keep.is_empty() {
            self.waiters.insert(id.to_string(), keep);
        }
    }
}

impl PodCache {
    /// An empty cache without a global timestamp.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The current entry (never blocks).
    pub fn get(&self, id: &str) -> CacheRead {
        self.lock().read(id, Freshness::Entry)
    }

    /// Every cached status.
    pub fn get_all(&self) -> Vec<Arc<PodStatus>> {
        self.lock().pods.values().map(|e| Arc::clone(&e.status)).collect()
    }

    /// Stores `status` if the pod has no entry or its entry is older than `timestamp`
    /// (KEP-3386's setter); returns whether it was stored. Wakes waiters it satisfies.
    pub fn set(&self, id: &str, status: PodStatus, error: Option<String>, timestamp: Timestamp) -> bool {
        let mut inner = self.lock();
        if inner.pods.get(id).is_some_and(|e| e.modified >= timestamp) {
            return false;
        }
        inner.pods.insert(id.to_string(), Entry { status: Arc::new(status), error, modified: timestamp });
        inner.notify(id);
        true
    }

    /// Forgets a pod (its sandboxes are gone from the runtime).
    pub fn delete(&self, id: &str) {
        self.lock().pods.remove(id);
    }

    /// Advances the global timestamp (never backwards) and releases every waiter it satisfies.
    pub fn update_time(&self, timestamp: Timestamp) {
        let mut inner = self.lock();
        if inner.global.is_some_and(|g| g >= timestamp) {
            return;
        }
        inner.global = Some(timestamp);
        let ids: Vec<String> = inner.waiters.keys().cloned().collect();
        for id in ids {
            inner.notify(&id);
        }
    }

    /// The global timestamp, if set.
    pub fn global_time(&self) -> Option<Timestamp> {
        self.lock().global
    }

    /// The entry's timestamp, if cached.
    pub fn modified(&self, id: &str) -> Option<Timestamp> {
        self.lock().pods.get(id).map(|e| e.modified)
    }

    /// Waits until the pod's entry, or the global timestamp, is strictly newer than `min`
    /// (upstream `GetNewerThan`). Cancel-safe: dropping the future drops the registration.
    pub async fn get_newer_than(&self, id: &str, min: Timestamp) -> CacheRead {
        let rx = {
            let mut inner = self.lock();
            if let Some(read) = inner.read_if_newer(id, min) {
                return read;
            }
            let (tx, rx) = oneshot::channel();
            let list = inner.waiters.entry(id.to_string()).or_default();
            list.retain(|w| !w.tx.is_closed());
            list.push(Waiter { min, tx });
            rx
        };
        match rx.await {
            Ok(read) => read,
            // Unreachable while the cache lives (senders are only dropped after sending);
            // answer with the current entry rather than hang.
            Err(_) => self.get(id),
        }
    }

    /// Number of registered waiters (tests, metrics).
    pub fn waiters(&self) -> usize {
        self.lock().waiters.values().map(Vec::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn status(id: &str, ts: i64) -> PodStatus {
        PodStatus { id: id.into(), name: format!("at-{ts}"), timestamp: Timestamp(ts), ..Default::default() }
    }

    #[test]
    fn set_ignores_older_and_equal_timestamps() {
        let cache = PodCache::new();
        assert!(cache.set("p", status("p", 20), None, Timestamp(20)));
        // A buffered event from before a relist (t=10) must not overwrite the relist's t=20.
        assert!(!cache.set("p", status("p", 10), None, Timestamp(10)));
        assert!(!cache.set("p", status("p", 20), None, Timestamp(20)));
        assert_eq!(cache.get("p").status.name, "at-20");
        assert!(cache.set("p", status("p", 30), None, Timestamp(30)));
        assert_eq!(cache.get("p").status.name, "at-30");
    }

    #[test]
    fn missing_entry_reads_as_empty_status() {
        let cache = PodCache::new();
        let read = cache.get("nope");
        assert_eq!(read.status.id, "nope");
        assert!(read.status.container_statuses.is_empty());
        assert_eq!(read.modified, None);
    }

    #[tokio::test]
    async fn get_newer_than_returns_at_once_when_entry_is_newer() {
        let cache = PodCache::new();
        cache.set("p", status("p", 20), None, Timestamp(20));
        let read = cache.get_newer_than("p", Timestamp(19)).await;
        assert_eq!((read.status.name.as_str(), read.freshness), ("at-20", Freshness::Entry));
    }

    #[tokio::test]
    async fn get_newer_than_wakes_on_a_newer_set_only() {
        let cache = PodCache::new();
        cache.set("p", status("p", 10), None, Timestamp(10));
        let waiter = {
            let cache = Arc::clone(&cache);
            tokio::spawn(async move { cache.get_newer_than("p", Timestamp(10)).await })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiter.is_finished(), "entry at 10 is not newer than 10");
        cache.set("q", status("q", 50), None, Timestamp(50)); // another pod: no wake-up
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiter.is_finished());
        cache.set("p", status("p", 11), None, Timestamp(11));
        let read = tokio::time::timeout(Duration::from_secs(1), waiter).await.expect("woken").expect("task");
        assert_eq!((read.status.name.as_str(), read.freshness), ("at-11", Freshness::Entry));
        assert_eq!(cache.waiters(), 0);
    }

    #[tokio::test]
    async fn global_timestamp_releases_waiters_and_says_so() {
        let cache = PodCache::new();
        cache.set("p", status("p", 10), None, Timestamp(10));
        let waiter = {
            let cache = Arc::clone(&cache);
            tokio::spawn(async move { cache.get_newer_than("p", Timestamp(15)).await })
        };
        let missing = {
            let cache = Arc::clone(&cache);
            tokio::spawn(async move { cache.get_newer_than("gone", Timestamp(15)).await })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        cache.update_time(Timestamp(15)); // not strictly newer: nobody released
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiter.is_finished() && !missing.is_finished());
        cache.update_time(Timestamp(16));
        let read = tokio::time::timeout(Duration::from_secs(1), waiter).await.expect("woken").expect("task");
        assert_eq!((read.status.name.as_str(), read.freshness), ("at-10", Freshness::Global));
        let read = tokio::time::timeout(Duration::from_secs(1), missing).await.expect("woken").expect("task");
        assert_eq!((read.status.id.as_str(), read.modified), ("gone", None));
    }

    #[test]
    fn global_timestamp_never_moves_back() {
        let cache = PodCache::new();
        cache.update_time(Timestamp(20));
        cache.update_time(Timestamp(10));
        assert_eq!(cache.global_time(), Some(Timestamp(20)));
    }

    #[tokio::test]
    async fn cancelled_waiters_are_dropped() {
        let cache = PodCache::new();
        let fut = cache.get_newer_than("p", Timestamp(5));
        let _ = tokio::time::timeout(Duration::from_millis(10), fut).await;
        assert_eq!(cache.waiters(), 1);
        cache.set("p", status("p", 1), None, Timestamp(1)); // notify prunes the closed waiter
        assert_eq!(cache.waiters(), 0);
    }
}
