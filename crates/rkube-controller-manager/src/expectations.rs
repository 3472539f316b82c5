//! Expectations: what a controller asked the API server to do and has not
//! yet seen in its caches, so a watch lag does not make it act twice
//! (upstream's `UIDTrackingControllerExpectations`, `pkg/controller/controller_utils.go`).
//!
//! Here an expectation is the set of pod names a sync created and the set of
//! pod UIDs it deleted; it is met once every created pod is in the cache and
//! every deleted pod is gone from it or terminating, or after
//! [`EXPECTATIONS_TIMEOUT`] (upstream's 5 minutes), whichever comes first.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long unmet expectations hold back a sync (upstream's `ExpectationsTimeout`).
pub const EXPECTATIONS_TIMEOUT: Duration = Duration::from_secs(5 * 60);

#[derive(Debug, Default, Clone)]
struct Pending {
    creates: BTreeSet<String>,
    deletes: BTreeSet<String>,
    since: Option<Instant>,
}

/// Expectations of one controller, keyed by `namespace/name` of the owner.
#[derive(Debug, Default)]
pub struct Expectations {
    inner: Mutex<HashMap<String, Pending>>,
}

/// What the cache holds of one pod, for [`Expectations::satisfied`].
#[derive(Debug, Clone, Copy)]
pub struct Seen<'a> {
    /// `metadata.name`.
    pub name: &'a str,
    /// `metadata.uid`.
    pub uid: &'a str,
    /// Whether `metadata.deletionTimestamp` is set.
    pub terminating: bool,
}

impl Expectations {
    /// Records that pods named `names` were created for `key`.
    pub fn expect_creations(&self, key: &str, names: impl IntoIterator<Item = String>) {
        let mut m = self.lock();
        sweep(&mut m);
        let p = m.entry(key.to_string()).or_default();
        p.creates.extend(names);
        p.since.get_or_insert_with(Instant::now);
    }

    /// Records that pods with `uids` were deleted for `key`.
    pub fn expect_deletions(&self, key: &str, uids: impl IntoIterator<Item = String>) {
        let mut m = self.lock();
        sweep(&mut m);
        let p = m.entry(key.to_string()).or_default();
        p.deletes.extend(uids);
        p.since.get_or_insert_with(Instant::now);
    }

    /// Whether `key` may sync: nothing pending, everything pending observed
    /// in `cache`, or the expectations are older than [`EXPECTATIONS_TIMEOUT`].
    /// Observed entries are dropped.
    pub fn satisfied<'a>(&self, key: &str, cache: impl IntoIterator<Item = Seen<'a>>) -> bool {
        let mut m = self.lock();
        let Some(p) = m.get_mut(key) else { return true };
        let mut live = BTreeSet::new();
        for s in cache {
            p.creates.remove(s.name);
            if !s.terminating {
                live.insert(s.uid);
            }
        }
        // A deleted pod that is terminating or no longer cached is observed.
        p.deletes.retain(|uid| live.contains(uid.as_str()));
        let expired = p.since.is_some_and(|t| t.elapsed() > EXPECTATIONS_TIMEOUT);
        if expired || (p.creates.is_empty() && p.deletes.is_empty()) {
            m.remove(key);
            return true;
        }
        false
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Pending>> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Drops expired entries (of owners deleted before their pods were seen,
/// which no sync checks again).
fn sweep(m: &mut HashMap<String, Pending>) {
    m.retain(|_, p| p.since.is_none_or(|t| t.elapsed() <= EXPECTATIONS_TIMEOUT));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn creations_hold_back_a_sync_until_the_cache_has_the_pods() {
        let e = Expectations::default();
        assert!(e.satisfied("ns/rs", []));
        e.expect_creations("ns/rs", ["a".to_string(), "b".to_string()]);
        assert!(!e.satisfied("ns/rs", [Seen { name: "a", uid: "1", terminating: false }]));
        assert!(e.satisfied("ns/rs", [Seen { name: "b", uid: "2", terminating: false }]));
    }

    #[test]
    fn deletions_are_observed_when_the_pod_terminates_or_leaves_the_cache() {
        let e = Expectations::default();
        e.expect_deletions("ns/rs", ["1".to_string(), "2".to_string()]);
        let live = [Seen { name: "a", uid: "1", terminating: true }, Seen { name: "b", uid: "2", terminating: false }];
        assert!(!e.satisfied("ns/rs", live));
        assert!(e.satisfied("ns/rs", [Seen { name: "a", uid: "1", terminating: true }]));
    }
}
