//! The evented PLEG's connection to `GetContainerEvents`, as an explicit state machine with a
//! pure step function (no I/O, time passed in), driven by [`super::evented::EventedPleg`].
//!
//! ```text
//!              Connected                      Failed(other)
//!  Connecting ───────────▶ Streaming ───────────────────────────┐
//!     ▲   │ Failed(other)      │ Failed(Unimplemented)           ▼
//!     │   └────────────────────┼──────────────────────────▶ BackingOff
//!     │                        ▼                                 │
//!     │                    Relisting (terminal)                  │
//!     └──────────────────────────────── RetryDue ────────────────┘
//!  (Connecting also goes to Relisting on Failed(Unimplemented))
//! ```
//!
//! Relist period per state: Streaming → 300 s ([`EVENTED_RELIST`]); every other state → 1 s
//! ([`GENERIC_RELIST`]), i.e. the generic PLEG takes over while the stream is down and for good
//! when the runtime answers `UNIMPLEMENTED` (containerd 1.6; KEP-3386 *Compatibility Check*).
//! Every failure forces an immediate relist, and so does every (re)connection, so changes made
//! while no stream was open are found at once.
//!
//! Reconnect back-off ([`backoff_delay`]): at once, then 1, 2, 4, 8, 16, 32, 64 s, then every
//! 60 s forever. A stream that stayed up for [`STABLE_AFTER`] resets the sequence.

use std::time::{Duration, Instant};

use super::{RelistDuration, EVENTED_RELIST, GENERIC_RELIST};

/// A stream that lived this long counts as healthy: the next failure retries at once again.
pub const STABLE_AFTER: Duration = Duration::from_secs(60);

/// Where the connection is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConnectionState {
    /// A `GetContainerEvents` call is in flight (`failures` consecutive failures before it).
    /// Next: `Streaming` on `Connected`, `BackingOff` on a failure, `Relisting` on
    /// `Unimplemented`.
    Connecting {
        /// Consecutive failures so far.
        failures: u32,
    },
    /// Events are flowing; relist every 300 s. Next: `BackingOff` or `Relisting` on failure.
    Streaming {
        /// Consecutive failures before this stream opened.
        failures: u32,
        /// When it opened.
        since: Instant,
    },
    /// Waiting to reconnect; relist every 1 s. Next: `Connecting` on `RetryDue`.
    BackingOff {
        /// Consecutive failures including the last one.
        failures: u32,
        /// When to reconnect.
        retry_at: Instant,
    },
    /// The runtime has no container events: generic PLEG at 1 s. Terminal.
    Relisting,
}

/// Why a connection attempt or an open stream failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// gRPC `UNIMPLEMENTED`.
    Unimplemented,
    /// Anything else: unavailable, reset, stream ended, lagged.
    Other,
}

/// What happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Input {
    /// The stream is established.
    Connected,
    /// The call or the stream failed.
    Failed(Failure),
    /// The back-off delay has passed.
    RetryDue,
}

/// What the driver must do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Effect {
    /// Call `GetContainerEvents`.
    OpenStream,
    /// Relist with this period and health threshold from now on.
    SetRelist(RelistDuration),
    /// Relist at once.
    RelistNow,
    /// `kubelet_evented_pleg_connection_success_count` += 1.
    CountSuccess,
    /// `kubelet_evented_pleg_connection_error_count` += 1.
    CountError,
}

/// A transition: the next state and the effects, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    /// The state after the input.
    pub next: ConnectionState,
    /// What to do.
    pub effects: Vec<Effect>,
}

/// The delay before reconnect attempt number `failures` (0-based count of failures so far):
/// 0 s, 1, 2, 4, 8, 16, 32, 64 s, then 60 s forever.
pub fn backoff_delay(failures: u32) -> Duration {
    match failures {
        0 => Duration::ZERO,
        1..=7 => Duration::from_secs(1 << (failures - 1)),
        _ => Duration::from_secs(60),
    }
}

/// The start: connect, relisting at 1 s until the stream is up.
pub fn initial() -> Step {
    Step {
        next: ConnectionState::Connecting { failures: 0 },
        effects: vec![Effect::SetRelist(GENERIC_RELIST), Effect::OpenStream],
    }
}

impl ConnectionState {
    /// True while events are flowing (the evented PLEG is "in use").
    pub fn is_streaming(&self) -> bool {
        matches!(self, ConnectionState::Streaming { .. })
    }

    /// The relist period and threshold this state runs the generic PLEG with.
    pub fn relist(&self) -> RelistDuration {
        if self.is_streaming() {
            EVENTED_RELIST
        } else {
            GENERIC_RELIST
        }
    }
}

fn fail(failures_before: u32, failure: Failure, now: Instant) -> Step {
    match failure {
        Failure::Unimplemented => Step {
            next: ConnectionState::Relisting,
            effects: vec![Effect::CountError, Effect::SetRelist(GENERIC_RELIST), Effect::RelistNow],
        },
        Failure::Other => Step {
            next: ConnectionState::BackingOff {
                failures: failures_before + 1,
                retry_at: now + backoff_delay(failures_before),
            },
            effects: vec![Effect::CountError, Effect::SetRelist(GENERIC_RELIST), Effect::RelistNow],
        },
    }
}

/// The pure transition function. Inputs that do not apply to a state change nothing.
pub fn step(state: &ConnectionState, input: Input, now: Instant) -> Step {
    use ConnectionState::*;
    let stay = || Step { next: *state, effects: vec![] };
    match (*state, input) {
        (Connecting { failures }, Input::Connected) => Step {
            next: Streaming { failures, since: now },
            effects: vec![Effect::CountSuccess, Effect::SetRelist(EVENTED_RELIST), Effect::RelistNow],
        },
        (Connecting { failures }, Input::Failed(f)) => fail(failures, f, now),
        (Streaming { failures, since }, Input::Failed(f)) => {
            let failures = if now.saturating_duration_since(since) >= STABLE_AFTER { 0 } else { failures };
            fail(failures, f, now)
        }
        (BackingOff { failures, .. }, Input::RetryDue) => {
            Step { next: Connecting { failures }, effects: vec![Effect::OpenStream] }
        }
        _ => stay(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delays_of_consecutive_failures(n: usize) -> Vec<u64> {
        let t0 = Instant::now();
        let mut now = t0;
        let mut state = initial().next;
        let mut out = Vec::new();
        for _ in 0..n {
            let s = step(&state, Input::Failed(Failure::Other), now);
            let ConnectionState::BackingOff { retry_at, .. } = s.next else { panic!("not backing off: {:?}", s.next) };
            out.push((retry_at - now).as_secs());
            now = retry_at;
            state = step(&s.next, Input::RetryDue, now).next;
            assert!(matches!(state, ConnectionState::Connecting { .. }));
        }
        out
    }

    #[test]
    fn reconnect_backoff_is_0_1_2_4_to_64_then_every_60s() {
        assert_eq!(delays_of_consecutive_failures(11), vec![0, 1, 2, 4, 8, 16, 32, 64, 60, 60, 60]);
    }

    #[test]
    fn start_relists_at_1s_and_opens_the_stream() {
        let s = initial();
        assert_eq!(s.next, ConnectionState::Connecting { failures: 0 });
        assert_eq!(s.effects, vec![Effect::SetRelist(GENERIC_RELIST), Effect::OpenStream]);
    }

    #[test]
    fn connecting_switches_to_300s_relist_and_resyncs_once() {
        let now = Instant::now();
        let s = step(&ConnectionState::Connecting { failures: 3 }, Input::Connected, now);
        assert_eq!(s.next, ConnectionState::Streaming { failures: 3, since: now });
        assert_eq!(s.effects, vec![Effect::CountSuccess, Effect::SetRelist(EVENTED_RELIST), Effect::RelistNow]);
        assert_eq!(s.next.relist(), EVENTED_RELIST);
    }

    #[test]
    fn unimplemented_falls_back_to_generic_for_good() {
        let now = Instant::now();
        let s = step(&ConnectionState::Connecting { failures: 0 }, Input::Failed(Failure::Unimplemented), now);
        assert_eq!(s.next, ConnectionState::Relisting);
        assert_eq!(s.effects, vec![Effect::CountError, Effect::SetRelist(GENERIC_RELIST), Effect::RelistNow]);
        // Terminal: nothing moves it.
        for input in [Input::Connected, Input::RetryDue, Input::Failed(Failure::Other)] {
            assert_eq!(step(&ConnectionState::Relisting, input, now).next, ConnectionState::Relisting);
        }
    }

    #[test]
    fn stream_failure_falls_back_to_1s_relist_and_retries_at_once() {
        let t0 = Instant::now();
        let streaming = ConnectionState::Streaming { failures: 0, since: t0 };
        let s = step(&streaming, Input::Failed(Failure::Other), t0 + Duration::from_secs(5));
        assert_eq!(s.next, ConnectionState::BackingOff { failures: 1, retry_at: t0 + Duration::from_secs(5) });
        assert_eq!(s.effects, vec![Effect::CountError, Effect::SetRelist(GENERIC_RELIST), Effect::RelistNow]);
        assert_eq!(s.next.relist(), GENERIC_RELIST);
    }

    #[test]
    fn flapping_stream_keeps_backing_off_but_a_stable_one_resets() {
        let t0 = Instant::now();
        // Up for 1 s after 4 failures: the next delay continues the sequence (8 s).
        let short = ConnectionState::Streaming { failures: 4, since: t0 };
        let s = step(&short, Input::Failed(Failure::Other), t0 + Duration::from_secs(1));
        assert_eq!(s.next, ConnectionState::BackingOff { failures: 5, retry_at: t0 + Duration::from_secs(9) });
        // Up for STABLE_AFTER: back to "retry at once".
        let long = ConnectionState::Streaming { failures: 4, since: t0 };
        let now = t0 + STABLE_AFTER;
        let s = step(&long, Input::Failed(Failure::Other), now);
        assert_eq!(s.next, ConnectionState::BackingOff { failures: 1, retry_at: now });
    }

    #[test]
    fn inputs_that_do_not_apply_change_nothing() {
        let now = Instant::now();
        let streaming = ConnectionState::Streaming { failures: 0, since: now };
        assert_eq!(step(&streaming, Input::Connected, now), Step { next: streaming, effects: vec![] });
        assert_eq!(step(&streaming, Input::RetryDue, now), Step { next: streaming, effects: vec![] });
        let backing = ConnectionState::BackingOff { failures: 2, retry_at: now };
        assert_eq!(step(&backing, Input::Connected, now).next, backing);
    }
}
