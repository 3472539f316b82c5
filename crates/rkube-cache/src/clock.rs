//! Time source for every time-based rule of the cache (history window,
//! readiness downtime, bookmark schedule), injectable for tests.
//!
//! Upstream injects `k8s.io/utils/clock.Clock` the same way. Timestamps are
//! [`tokio::time::Instant`], so the default [`TokioClock`] follows
//! `tokio::time::pause()` / `advance()` in tests; [`FakeClock`] is a clock a
//! test moves by hand, for the pure modules (history, readiness, bookmarks).
//! Waiting (3 s freshness caps, 100 ms progress ticks) always uses
//! `tokio::time`, which tests control with a paused runtime.

use std::fmt;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// A source of the current time.
pub trait Clock: Send + Sync + fmt::Debug + 'static {
    /// The current instant.
    fn now(&self) -> Instant;
}

/// The real clock (`tokio::time::Instant::now()`, which honours a paused tokio runtime).
#[derive(Debug, Default, Clone, Copy)]
pub struct TokioClock;

impl Clock for TokioClock {
    fn now(&self) -> Instant {
        Instant::now()
    }
}

/// A clock that only moves when told to.
#[derive(Debug)]
pub struct FakeClock {
    now: Mutex<Instant>,
}

impl FakeClock {
    /// A clock standing at the current real instant.
    pub fn new() -> Self {
        FakeClock { now: Mutex::new(Instant::now()) }
    }

    /// Moves the clock forward by `d`.
    pub fn advance(&self, d: Duration) {
        let mut now = self.now.lock().unwrap_or_else(|e| e.into_inner());
        *now += d;
    }
}

impl Default for FakeClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for FakeClock {
    fn now(&self) -> Instant {
        *self.now.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fake_clock_moves_only_when_advanced() {
        let c = FakeClock::new();
        let t0 = c.now();
        assert_eq!(c.now(), t0);
        c.advance(Duration::from_secs(75));
        assert_eq!(c.now() - t0, Duration::from_secs(75));
    }
}
