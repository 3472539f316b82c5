//! When to send each watcher a bookmark (upstream `cacheWatcher.nextBookmarkTime`
//! and `watcherBookmarkTimeBuckets` in `cacher.go`).
//!
//! A watcher that asked for bookmarks (`allowWatchBookmarks=true`) gets one
//! about every [`BOOKMARK_FREQUENCY`] (1 min), and one 2 s before its
//! deadline (`timeoutSeconds`), so a client that reconnects after the
//! timeout resumes from a recent resourceVersion. Watchers are kept in
//! 1-second buckets; the dispatcher pops due buckets once a second.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::time::Instant;

use crate::watchers::WatcherId;

/// Period of bookmarks (upstream `bookmarkFrequency`).
pub const BOOKMARK_FREQUENCY: Duration = Duration::from_secs(60);
/// A bookmark is due this long before a watcher's deadline.
pub const BOOKMARK_BEFORE_DEADLINE: Duration = Duration::from_secs(2);

/// The next bookmark time after `now` for a watcher with `deadline`, or
/// `None` when the pre-deadline bookmark time has passed.
pub fn next_bookmark_time(now: Instant, deadline: Option<Instant>, frequency: Duration) -> Option<Instant> {
    let heartbeat = now + frequency;
    let Some(deadline) = deadline else { return Some(heartbeat) };
    let pre_timeout = deadline.checked_sub(BOOKMARK_BEFORE_DEADLINE).unwrap_or(deadline);
    let t = heartbeat.min(pre_timeout);
    (t >= now).then_some(t)
}

/// Watchers by the second their next bookmark is due.
#[derive(Debug)]
pub struct BookmarkTimer {
    origin: Instant,
    buckets: BTreeMap<u64, Vec<WatcherId>>,
}

impl BookmarkTimer {
    /// Buckets counted from `origin`.
    pub fn new(origin: Instant) -> Self {
        BookmarkTimer { origin, buckets: BTreeMap::new() }
    }

    fn bucket(&self, t: Instant) -> u64 {
        t.saturating_duration_since(self.origin).as_secs()
    }

    /// Schedules `id` at `at`.
    pub fn schedule(&mut self, id: WatcherId, at: Instant) {
        let b = self.bucket(at);
        self.buckets.entry(b).or_default().push(id);
    }

    /// Removes and returns the watchers due at or before `now`.
    pub fn pop_due(&mut self, now: Instant) -> Vec<WatcherId> {
        let now_b = self.bucket(now);
        let later = self.buckets.split_off(&(now_b + 1));
        let due = std::mem::replace(&mut self.buckets, later);
        due.into_values().flatten().collect()
    }

    /// Number of scheduled entries (a watcher gone since is skipped when popped).
    pub fn len(&self) -> usize {
        self.buckets.values().map(Vec::len).sum()
    }

    /// True when nothing is scheduled.
    pub fn is_empty(&self) -> bool {
        self.buckets.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bookmark_every_minute_and_two_seconds_before_deadline() {
        let now = Instant::now();
        let s = Duration::from_secs;
        // (deadline from now, expected next bookmark from now)
        let cases: [(Option<u64>, Option<u64>); 5] = [
            (None, Some(60)),
            (Some(600), Some(60)),
            (Some(30), Some(28)),
            (Some(2), Some(0)),
            (Some(1), None),
        ];
        for (deadline, want) in cases {
            let got = next_bookmark_time(now, deadline.map(|d| now + s(d)), BOOKMARK_FREQUENCY);
            assert_eq!(got, want.map(|w| now + s(w)), "deadline {deadline:?}");
        }
    }

    #[test]
    fn timer_pops_due_buckets_only() {
        let t0 = Instant::now();
        let mut t = BookmarkTimer::new(t0);
        t.schedule(WatcherId(1), t0 + Duration::from_millis(1500));
        t.schedule(WatcherId(2), t0 + Duration::from_secs(60));
        assert!(t.pop_due(t0).is_empty());
        assert_eq!(t.pop_due(t0 + Duration::from_secs(1)), vec![WatcherId(1)]);
        assert_eq!(t.len(), 1);
        assert_eq!(t.pop_due(t0 + Duration::from_secs(61)), vec![WatcherId(2)]);
        assert!(t.is_empty());
    }
}
