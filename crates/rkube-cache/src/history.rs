//! The event history: a ring buffer of the latest events, from which a watch
//! at resourceVersion `N` replays every event after `N` (upstream
//! `watch_cache.go`: `updateCache`, `resizeCacheLocked`,
//! `getAllEventsSinceLocked`).
//!
//! Sizing (dynamic, the default): the ring starts at 100 events. Before an
//! event is added to a full ring,
//! - if the oldest event is younger than 75 s, capacity doubles (≤ 102,400):
//!   the ring should cover at least 75 s of history;
//! - else if the event a quarter of the capacity back from the newest is
//!   older than 75 s, capacity halves (≥ 100), dropping the oldest events.
//!
//! A fixed size (`--watch-cache-sizes=resource#N`, N > 0) disables resizing.
//!
//! ```text
//! relist at 10, events 11..=15, capacity 4 (fixed):
//!   ring: [12 13 14 15]   since(11) ok   since(10) -> 410 "too old resource version: 10 (11)"
//! ```

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::event::CacheEvent;

/// Initial and minimal capacity (upstream `defaultLowerBoundCapacity`).
pub const LOWER_BOUND_CAPACITY: usize = 100;
/// Maximal capacity (upstream `defaultUpperBoundCapacity`, 100 × 1024).
pub const UPPER_BOUND_CAPACITY: usize = 100 * 1024;
/// The history should cover at least this long (upstream `eventFreshDuration`).
pub const EVENT_FRESH_DURATION: Duration = Duration::from_secs(75);

/// Result alias for this module.
pub type Result<T, E = HistoryError> = std::result::Result<T, E>;

/// Errors reading the history.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum HistoryError {
    /// Events after `requested` are no longer all in the history (API: 410
    /// `Expired`, `too old resource version: requested (oldest)`).
    #[error("too old resource version: {requested} ({oldest})")]
    TooOld {
        /// The requested resourceVersion.
        requested: i64,
        /// The oldest resourceVersion a watch can still start from.
        oldest: i64,
    },
    /// The history was never initialized by a list.
    #[error("watch cache isn't correctly initialized")]
    Uninitialized,
}

/// How the history is sized.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sizing {
    /// Grow and shrink against the 75 s window (the default).
    Dynamic,
    /// Always this many events (`--watch-cache-sizes=resource#N`, N > 0).
    Fixed(usize),
}

/// What adding an event changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PushOutcome {
    /// `(old, new)` capacity when it changed.
    pub resized: Option<(usize, usize)>,
    /// True when events were dropped from the oldest end.
    pub evicted: bool,
}

/// The ring buffer of events.
#[derive(Debug)]
pub struct History {
    events: VecDeque<Arc<CacheEvent>>,
    capacity: usize,
    lower: usize,
    upper: usize,
    fresh: Duration,
    /// Revision of the last (re)list; 0 before the first one.
    list_resource_version: i64,
    /// True once a list was installed (a store listed at revision 0, e.g. a
    /// fresh embedded store, is initialized too).
    listed: bool,
    /// True once an event was dropped since the last (re)list.
    removed_since_relist: bool,
}

impl History {
    /// An empty history sized by `sizing`.
    pub fn new(sizing: Sizing) -> Self {
        let (capacity, lower, upper) = match sizing {
            Sizing::Dynamic => (LOWER_BOUND_CAPACITY, LOWER_BOUND_CAPACITY, UPPER_BOUND_CAPACITY),
            Sizing::Fixed(n) => {
                let n = n.max(1);
                (n, n, n)
            }
        };
        History {
            events: VecDeque::new(),
            capacity,
            lower,
            upper,
            fresh: EVENT_FRESH_DURATION,
            list_resource_version: 0,
            listed: false,
            removed_since_relist: false,
        }
    }

    /// Current capacity.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Number of events held.
    pub fn len(&self) -> usize {
        self.events.len()
    }

    /// True when no event is held.
    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// Revision of the oldest event held.
    pub fn oldest_event_rv(&self) -> Option<i64> {
        self.events.front().map(|e| e.resource_version)
    }

    /// Forgets every event: the cache was (re)listed at `list_rv`.
    pub fn reset(&mut self, list_rv: i64) {
        self.events.clear();
        self.list_resource_version = list_rv;
        self.listed = true;
        self.removed_since_relist = false;
    }

    /// Adds `event` (received at `event.record_time`), resizing first.
    pub fn push(&mut self, event: Arc<CacheEvent>) -> PushOutcome {
        let mut out = PushOutcome { resized: self.resize(event.record_time), evicted: false };
        while self.events.len() > self.capacity {
            self.events.pop_front();
            out.evicted = true;
        }
        if self.events.len() == self.capacity {
            self.events.pop_front();
            out.evicted = true;
        }
        if out.evicted {
            self.removed_since_relist = true;
        }
        self.events.push_back(event);
        out
    }

    /// Upstream `resizeCacheLocked`, against the time of the incoming event.
    fn resize(&mut self, now: Instant) -> Option<(usize, usize)> {
        if self.events.len() < self.capacity {
            return None;
        }
        let old = self.capacity;
        let oldest = self.events.front()?.record_time;
        if now.saturating_duration_since(oldest) < self.fresh {
            self.capacity = (old * 2).min(self.upper);
        } else {
            let quarter_back = self.events.len() - (self.capacity / 4).max(1);
            let t = self.events.get(quarter_back)?.record_time;
            if now.saturating_duration_since(t) > self.fresh {
                self.capacity = (old / 2).max(self.lower);
            }
        }
        (self.capacity != old).then_some((old, self.capacity))
    }

    /// The oldest resourceVersion a watch can start from (events after it are all held).
    pub fn oldest_watchable_rv(&self) -> Result<i64> {
        if self.listed && !self.removed_since_relist {
            Ok(self.list_resource_version)
        } else if let Some(front) = self.events.front() {
            Ok(front.resource_version - 1)
        } else {
            Err(HistoryError::Uninitialized)
        }
    }

    /// Every event with revision > `rv`, oldest first. Errors: `TooOld` when
    /// some of them were already dropped.
    pub fn since(&self, rv: i64) -> Result<Vec<Arc<CacheEvent>>> {
        let oldest = self.oldest_watchable_rv()?;
        if rv < oldest {
            return Err(HistoryError::TooOld { requested: rv, oldest });
        }
        let first = self.events.partition_point(|e| e.resource_version <= rv);
        Ok(self.events.range(first..).cloned().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{Clock, FakeClock};
    use crate::event::EventKind;
    use crate::store::{CachedObject, FieldExtractor};

    fn ev(rv: i64, at: Instant) -> Arc<CacheEvent> {
        let o = CachedObject::decode("ns/a", br#"{"metadata":{"name":"a"}}"#, rv, FieldExtractor::None).unwrap();
        Arc::new(CacheEvent::new(EventKind::Modified, Arc::new(o), None, rv, at))
    }

    #[test]
    fn history_grows_and_shrinks_against_75s_window() {
        let clock = FakeClock::new();
        let mut h = History::new(Sizing::Dynamic);
        h.reset(1);
        let mut rv = 1;
        // Table: (events to add, seconds before each, expected capacity after).
        let steps: &[(usize, u64, usize)] = &[
            // 100 events in a burst fill the ring.
            (100, 0, 100),
            // The 101st finds a full ring whose oldest event is < 75 s old: ×2.
            (1, 0, 200),
            // 99 events 1 s apart fill the ring again without resizing.
            (99, 1, 200),
            // Full, oldest 100 s old (no growth), but the newest quarter is
            // within 75 s (no shrink): the ring spans the window, it stays.
            (1, 1, 200),
        ];
        for &(n, gap, want) in steps {
            for _ in 0..n {
                clock.advance(Duration::from_secs(gap));
                rv += 1;
                h.push(ev(rv, clock.now()));
            }
            assert_eq!(h.capacity(), want, "after adding {n} events {gap}s apart");
        }
        // Quiet for 10 minutes: the next event finds the newest quarter older
        // than 75 s: ÷2 (200 → 100); it never goes below 100.
        clock.advance(Duration::from_secs(600));
        let mut caps = Vec::new();
        for _ in 0..4 {
            rv += 1;
            h.push(ev(rv, clock.now()));
            caps.push(h.capacity());
        }
        assert_eq!(caps, [100, 100, 100, 100], "halves once full and stale, floor 100");
        assert!(h.len() <= 100);
    }

    #[test]
    fn capacity_never_exceeds_upper_bound() {
        let clock = FakeClock::new();
        let mut h = History::new(Sizing::Dynamic);
        h.reset(1);
        for rv in 2..(UPPER_BOUND_CAPACITY as i64 + 500) {
            h.push(ev(rv, clock.now()));
        }
        assert_eq!(h.capacity(), UPPER_BOUND_CAPACITY);
        assert_eq!(h.len(), UPPER_BOUND_CAPACITY);
    }

    #[test]
    fn fixed_size_never_resizes() {
        let clock = FakeClock::new();
        let mut h = History::new(Sizing::Fixed(4));
        h.reset(10);
        for rv in 11..=15 {
            h.push(ev(rv, clock.now()));
        }
        assert_eq!(h.capacity(), 4);
        assert_eq!(h.oldest_event_rv(), Some(12));
    }

    #[test]
    fn since_returns_events_after_rv_or_too_old() {
        let clock = FakeClock::new();
        let mut h = History::new(Sizing::Fixed(4));
        h.reset(10);
        // Before any eviction, everything after the list RV is available.
        h.push(ev(11, clock.now()));
        assert_eq!(h.since(10).unwrap().len(), 1);
        assert_eq!(h.since(9).err(), Some(HistoryError::TooOld { requested: 9, oldest: 10 }));
        for rv in 12..=15 {
            h.push(ev(rv, clock.now()));
        }
        // ring: [12 13 14 15]
        let cases: &[(i64, Result<Vec<i64>>)] = &[
            (11, Ok(vec![12, 13, 14, 15])),
            (13, Ok(vec![14, 15])),
            (15, Ok(vec![])),
            (99, Ok(vec![])),
            (10, Err(HistoryError::TooOld { requested: 10, oldest: 11 })),
        ];
        for (rv, want) in cases {
            let got = h.since(*rv).map(|v| v.iter().map(|e| e.resource_version).collect::<Vec<_>>());
            assert_eq!(&got, want, "since({rv})");
        }
    }
}
