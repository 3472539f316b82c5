//! The one retry backoff of the watch cache's background loops: the
//! reflector's list-and-watch ([`crate::reflector`]) and the
//! `compact_rev_key` watch ([`crate::compaction`]).
//!
//! Exponential with jitter: each delay is the exponential step (doubling
//! from `initial` up to `max`) plus a random part of up to the same amount,
//! so delays fall in `[d, 2d)`. Built on `backon`'s `ExponentialBuilder`,
//! the crate kube-runtime's `DefaultBackoff` uses (client-go's reflector
//! backoff manager also jitters). The jitter is what keeps 20 cachers whose
//! watches broke together (an etcd outage) from re-listing in lockstep.

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};

/// Exponential backoff with jitter (see the module docs). An infinite
/// sequence; [`Backoff::reset`] starts it over after a healthy period.
#[derive(Debug)]
pub struct Backoff {
    builder: ExponentialBuilder,
    delays: ExponentialBackoff,
    max: Duration,
}

impl Backoff {
    /// Delays start at `initial` (plus jitter), double, and stop growing at `max`.
    pub fn new(initial: Duration, max: Duration) -> Self {
        let builder = ExponentialBuilder::default()
            .with_min_delay(initial)
            .with_max_delay(max)
            .with_factor(2.0)
            .with_jitter()
            .without_max_times();
        Backoff { delays: builder.build(), builder, max }
    }

    /// The next delay, in `[d, 2d)` for the current step `d`.
    pub fn next_delay(&mut self) -> Duration {
        // `without_max_times`: the sequence does not end; `max` is a safe fallback.
        self.delays.next().unwrap_or(self.max)
    }

    /// Starts over at `initial`.
    pub fn reset(&mut self) {
        self.delays = self.builder.build();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_double_up_to_max_with_jitter_in_d_to_2d() {
        let (initial, max) = (Duration::from_millis(800), Duration::from_secs(30));
        let mut b = Backoff::new(initial, max);
        let mut step = initial;
        for _ in 0..12 {
            let d = b.next_delay();
            assert!(d >= step && d < step * 2, "{d:?} not in [{step:?}, {:?})", step * 2);
            step = (step * 2).min(max);
        }
        b.reset();
        let d = b.next_delay();
        assert!(d >= initial && d < initial * 2, "after reset: {d:?}");
    }

    #[test]
    fn cachers_broken_together_do_not_retry_in_lockstep() {
        // 20 cachers whose watches broke at the same moment (an etcd outage).
        let first: Vec<Duration> =
            (0..20).map(|_| Backoff::new(Duration::from_millis(800), Duration::from_secs(30)).next_delay()).collect();
        let mut distinct = first.clone();
        distinct.sort();
        distinct.dedup();
        assert!(distinct.len() >= 15, "retries should spread out: {first:?}");
        let spread = distinct[distinct.len() - 1] - distinct[0];
        assert!(spread >= Duration::from_millis(200), "spread {spread:?} of {first:?}");
    }
}
