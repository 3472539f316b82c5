//! Snapshots of the store per resourceVersion (KEP-4988, upstream
//! `cacher/store/snapshotter.go`).
//!
//! After every event the cache adds an O(1) clone of its [`Store`] keyed by
//! the event's revision. A LIST at an exact resourceVersion `N` (or a
//! continue token at `N`) is served from the snapshot with the greatest
//! revision ≤ `N`: every event creates a snapshot, so that snapshot *is* the
//! state at `N`, provided the cache has reached `N`.
//!
//! ```text
//! events:     rv 10 (list)   12        15        19
//! snapshots:  [10]           [12]      [15]      [19]
//! Exact 14 -> [12]    Exact 9 -> none (storage)    Exact 19 -> [19]
//! ```
//!
//! Snapshots are dropped with the history events they belong to (older than
//! the oldest event still in history), below a compaction, wholesale on a
//! re-list ([`Snapshots::reset`]) and on a detected inconsistency
//! ([`Snapshots::purge`], serving from storage until re-enabled).

use std::collections::BTreeMap;

use crate::store::Store;

/// Revision-ordered snapshots.
#[derive(Debug, Default, Clone)]
pub struct Snapshots {
    by_rv: BTreeMap<i64, Store>,
    /// When false (after a purge), nothing is kept or served.
    enabled: bool,
}

impl Snapshots {
    /// An empty, enabled set.
    pub fn new() -> Self {
        Snapshots { by_rv: BTreeMap::new(), enabled: true }
    }

    /// Keeps `store` as the state at `rv`.
    pub fn add(&mut self, rv: i64, store: Store) {
        if self.enabled {
            self.by_rv.insert(rv, store);
        }
    }

    /// The snapshot with the greatest revision ≤ `rv`, with that revision.
    pub fn get_less_or_equal(&self, rv: i64) -> Option<(i64, &Store)> {
        self.by_rv.range(..=rv).next_back().map(|(r, s)| (*r, s))
    }

    /// Drops snapshots with revision < `rv`.
    pub fn remove_less(&mut self, rv: i64) {
        self.by_rv = self.by_rv.split_off(&rv);
    }

    /// Drops every snapshot (re-list): the caller adds the list's state next.
    pub fn reset(&mut self) {
        self.by_rv.clear();
        self.enabled = true;
    }

    /// Drops every snapshot and keeps none until [`Snapshots::reset`] (a
    /// failed consistency check, KEP-4988 beta behaviour).
    pub fn purge(&mut self) {
        self.by_rv.clear();
        self.enabled = false;
    }

    /// Number of snapshots kept.
    pub fn len(&self) -> usize {
        self.by_rv.len()
    }

    /// True when none is kept.
    pub fn is_empty(&self) -> bool {
        self.by_rv.is_empty()
    }

    /// The oldest revision a snapshot is kept for.
    pub fn oldest(&self) -> Option<i64> {
        self.by_rv.keys().next().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{CachedObject, FieldExtractor};
    use std::sync::Arc;

    fn store_with(n: usize) -> Store {
        let mut s = Store::new();
        for i in 0..n {
            let key = format!("ns/o{i}");
            let json = format!(r#"{{"metadata":{{"name":"o{i}","namespace":"ns"}}}}"#);
            s.insert(Arc::new(CachedObject::decode(&key, json.as_bytes(), 1, FieldExtractor::None).unwrap()));
        }
        s
    }

    /// rv:        10   12   15   19
    /// lookups:   9→none 10→10 14→12 15→15 100→19
    #[test]
    fn greatest_revision_less_or_equal_is_found() {
        let mut s = Snapshots::new();
        for (rv, n) in [(10, 1), (12, 2), (15, 3), (19, 4)] {
            s.add(rv, store_with(n));
        }
        let cases = [(9, None), (10, Some((10, 1))), (14, Some((12, 2))), (15, Some((15, 3))), (100, Some((19, 4)))];
        for (rv, want) in cases {
            let got = s.get_less_or_equal(rv).map(|(r, st)| (r, st.len()));
            assert_eq!(got, want, "lookup at {rv}");
        }
    }

    #[test]
    fn remove_less_drops_only_older_snapshots() {
        let mut s = Snapshots::new();
        for rv in [10, 12, 15] {
            s.add(rv, Store::new());
        }
        s.remove_less(12);
        assert_eq!(s.oldest(), Some(12));
        assert!(s.get_less_or_equal(11).is_none());
        assert_eq!(s.len(), 2);
    }

    #[test]
    fn purge_keeps_nothing_until_reset() {
        let mut s = Snapshots::new();
        s.add(1, Store::new());
        s.purge();
        s.add(2, Store::new());
        assert!(s.is_empty());
        s.reset();
        s.add(3, Store::new());
        assert_eq!(s.oldest(), Some(3));
    }
}
