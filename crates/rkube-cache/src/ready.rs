//! Readiness of one cache (upstream `cacher/ready.go`, KEP-4568).
//!
//! ```text
//!              ListCompleted               WatchBroken
//!   Pending ─────────────────► Ready ─────────────────► Reinitializing
//!      │  ▲                      ▲                          │
//!      └──┘ WatchBroken          └──────── ListCompleted ───┘
//! ```
//!
//! - `Pending`: never initialized; since the cacher was created.
//! - `Ready`: the store is a complete, consistent view following storage.
//! - `Reinitializing`: the storage watch broke; re-listing. The old view is
//!   kept intact but not served (no torn view, no stale serving).
//!
//! While not ready, requests that would need the cache get 429
//! `TooManyRequests` "storage is (re)initializing" with
//! `Retry-After = clamp(floor(e^(0.06 × seconds unready)), 1, 30)`
//! (upstream `calculateRetryAfterForUnreadyCache`).

use tokio::sync::watch;
use tokio::time::Instant;

/// The readiness state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadyState {
    /// Waiting for the first complete list. Goes to `Ready`.
    Pending {
        /// When the cacher was created.
        since: Instant,
    },
    /// Serving. Goes to `Reinitializing` when the storage watch breaks.
    Ready,
    /// Re-listing after a broken watch. Goes back to `Ready`.
    Reinitializing {
        /// When the watch broke.
        since: Instant,
    },
}

/// What the reflector reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadyInput {
    /// A full list was installed; the store is consistent.
    ListCompleted,
    /// The storage watch (or a list attempt) failed.
    WatchBroken,
}

impl ReadyState {
    /// The pure transition function.
    pub fn step(self, input: ReadyInput, now: Instant) -> ReadyState {
        match (self, input) {
            (_, ReadyInput::ListCompleted) => ReadyState::Ready,
            (ReadyState::Ready, ReadyInput::WatchBroken) => ReadyState::Reinitializing { since: now },
            // Already unready: keep the original time (downtime keeps growing).
            (s @ (ReadyState::Pending { .. } | ReadyState::Reinitializing { .. }), ReadyInput::WatchBroken) => s,
        }
    }

    /// True when `Ready`.
    pub fn is_ready(&self) -> bool {
        matches!(self, ReadyState::Ready)
    }

    /// Since when the cache has been unready (None when ready).
    pub fn unready_since(&self) -> Option<Instant> {
        match self {
            ReadyState::Pending { since } | ReadyState::Reinitializing { since } => Some(*since),
            ReadyState::Ready => None,
        }
    }

    /// The `Retry-After` seconds for a 429 at `now` (None when ready).
    pub fn retry_after_secs(&self, now: Instant) -> Option<u64> {
        self.unready_since().map(|since| retry_after_for_downtime(now.saturating_duration_since(since).as_secs_f64()))
    }
}

/// `clamp(floor(e^(0.06 × downtime_secs)), 1, 30)`.
pub fn retry_after_for_downtime(downtime_secs: f64) -> u64 {
    let r = (0.06 * downtime_secs).exp().clamp(1.0, 30.0);
    r.floor() as u64
}

/// Shared readiness with change notification (readers may await `Ready`,
/// e.g. the `storage-readiness` post-start hook).
#[derive(Debug)]
pub struct Readiness {
    tx: watch::Sender<ReadyState>,
}

impl Readiness {
    /// `Pending` since `now`.
    pub fn new(now: Instant) -> Self {
        Readiness { tx: watch::Sender::new(ReadyState::Pending { since: now }) }
    }

    /// The current state.
    pub fn get(&self) -> ReadyState {
        *self.tx.borrow()
    }

    /// Applies `input`; returns the new state.
    pub fn apply(&self, input: ReadyInput, now: Instant) -> ReadyState {
        let mut out = self.get();
        self.tx.send_modify(|s| {
            *s = s.step(input, now);
            out = *s;
        });
        out
    }

    /// A receiver that sees every change.
    pub fn subscribe(&self) -> watch::Receiver<ReadyState> {
        self.tx.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn step_follows_the_diagram() {
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_secs(5);
        let pending = ReadyState::Pending { since: t0 };
        let cases = [
            (pending, ReadyInput::WatchBroken, pending),
            (pending, ReadyInput::ListCompleted, ReadyState::Ready),
            (ReadyState::Ready, ReadyInput::WatchBroken, ReadyState::Reinitializing { since: t1 }),
            (ReadyState::Ready, ReadyInput::ListCompleted, ReadyState::Ready),
            (ReadyState::Reinitializing { since: t0 }, ReadyInput::WatchBroken, ReadyState::Reinitializing { since: t0 }),
            (ReadyState::Reinitializing { since: t0 }, ReadyInput::ListCompleted, ReadyState::Ready),
        ];
        for (from, input, want) in cases {
            assert_eq!(from.step(input, t1), want, "{from:?} + {input:?}");
        }
    }

    #[test]
    fn retry_after_grows_exponentially_with_downtime_and_is_clamped() {
        // (seconds unready, Retry-After)
        let cases = [(0.0, 1), (5.0, 1), (11.0, 1), (12.0, 2), (20.0, 3), (30.0, 6), (45.0, 14), (56.0, 28), (57.0, 30), (600.0, 30)];
        for (secs, want) in cases {
            assert_eq!(retry_after_for_downtime(secs), want, "after {secs}s");
        }
        let t0 = Instant::now();
        let s = ReadyState::Reinitializing { since: t0 };
        assert_eq!(s.retry_after_secs(t0 + Duration::from_secs(30)), Some(6));
        assert_eq!(ReadyState::Ready.retry_after_secs(t0), None);
    }
}
