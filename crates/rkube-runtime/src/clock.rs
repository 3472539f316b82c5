//! The runtime's clock: wall-clock nanoseconds since the Unix epoch, strictly increasing.
//!
//! Every timestamp the runtime hands out (`created_at`, `started_at`, `finished_at`, a
//! `ContainerEventResponse.created_at`, a `PodSandboxStatusResponse.timestamp`) comes from one
//! [`RuntimeClock`]. Two readings never compare equal, so a node agent that keeps "the newest
//! status wins" (KEP-3386, *Pod Status Update in the Cache*) never has to break a tie, and a status
//! read after an event always carries a larger timestamp than that event.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// A strictly increasing wall clock in nanoseconds since the Unix epoch (CRI timestamps are
/// `int64` nanoseconds).
#[derive(Debug, Default)]
pub struct RuntimeClock {
    last: AtomicI64,
}

impl RuntimeClock {
    /// A clock that has handed out nothing yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The current time in ns; larger than every earlier reading of this clock, even when the
    /// system clock stands still or steps back.
    pub fn now_ns(&self) -> i64 {
        let wall = wall_ns();
        let mut prev = self.last.load(Ordering::Relaxed);
        loop {
            let next = if wall > prev { wall } else { prev + 1 };
            match self.last.compare_exchange_weak(prev, next, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => return next,
                Err(seen) => prev = seen,
            }
        }
    }
}

/// The system wall clock in ns since the Unix epoch (0 if the clock is before 1970).
pub fn wall_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readings_strictly_increase() {
        let clock = RuntimeClock::new();
        let mut prev = clock.now_ns();
        for _ in 0..10_000 {
            let next = clock.now_ns();
            assert!(next > prev, "{next} <= {prev}");
            prev = next;
        }
    }
}
