//! Missed-event detection (KEP-3386 `kube_pod_missed_events`): a container state change that a
//! relist found while the event stream was up, and that no event reported within a grace
//! period, is a missed event.
//!
//! Pure bookkeeping; [`super::evented::EventedPleg`] feeds it events and relist reports and
//! decides when the stream counts as "up for the whole relist interval".

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::generic::ContainerChange;
use super::PlegState;

/// How long after a relist an event may still arrive for a change the relist saw (the event is
/// published before the change is listable, but may be processed after the relist's diff).
pub const EVENT_GRACE: Duration = Duration::from_secs(2);

#[derive(Debug, Clone)]
struct Suspect {
    container: String,
    state: PlegState,
    deadline: Instant,
}

/// Last event-reported state per container, and relist-found changes awaiting their event.
#[derive(Debug, Default)]
pub struct MissedEvents {
    seen: HashMap<String, PlegState>,
    suspects: Vec<Suspect>,
}

impl MissedEvents {
    /// Records that an event reported `container` in `state`; returns the previously reported
    /// state (`NonExistent` if none).
    pub fn record_event(&mut self, container: &str, state: PlegState) -> PlegState {
        self.seen.insert(container.to_string(), state).unwrap_or(PlegState::NonExistent)
    }

    /// The last event-reported state of a container.
    pub fn seen(&self, container: &str) -> Option<PlegState> {
        self.seen.get(container).copied()
    }

    /// A relist found `changes`; those no event has reported yet become suspects until `now +`
    /// [`EVENT_GRACE`].
    pub fn relist_found(&mut self, changes: &[ContainerChange], now: Instant) {
        for ch in changes {
            if self.seen.get(&ch.container) != Some(&ch.new) {
                self.suspects.push(Suspect { container: ch.container.clone(), state: ch.new, deadline: now + EVENT_GRACE });
            }
        }
        // Removed containers confirmed by the relist need no further memory.
        for ch in changes.iter().filter(|c| c.new == PlegState::NonExistent) {
            if self.seen.get(&ch.container) == Some(&PlegState::NonExistent) {
                self.seen.remove(&ch.container);
            }
        }
    }

    /// Settles suspects: those an event has since confirmed are dropped; those past their
    /// deadline are returned as missed. Call at or after the deadline.
    pub fn settle(&mut self, now: Instant) -> u64 {
        let mut missed = 0;
        let seen = &self.seen;
        self.suspects.retain(|s| {
            let confirmed = seen.get(&s.container) == Some(&s.state);
            if confirmed {
                return false;
            }
            if now >= s.deadline {
                missed += 1;
                return false;
            }
            true
        });
        missed
    }

    /// Suspects not yet settled.
    pub fn pending(&self) -> usize {
        self.suspects.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use PlegState::*;

    fn change(c: &str, old: PlegState, new: PlegState) -> ContainerChange {
        ContainerChange { pod: "p".into(), container: c.into(), old, new }
    }

    #[test]
    fn change_already_reported_by_an_event_is_not_missed() {
        let mut m = MissedEvents::default();
        let t0 = Instant::now();
        m.record_event("c", Unknown);
        m.record_event("c", Running);
        m.relist_found(&[change("c", NonExistent, Running)], t0);
        assert_eq!(m.pending(), 0);
        assert_eq!(m.settle(t0 + EVENT_GRACE), 0);
    }

    #[test]
    fn event_arriving_within_the_grace_period_clears_the_suspect() {
        let mut m = MissedEvents::default();
        let t0 = Instant::now();
        m.record_event("c", Running);
        m.relist_found(&[change("c", Running, Exited)], t0);
        assert_eq!(m.pending(), 1);
        m.record_event("c", Exited); // in flight during the relist
        assert_eq!(m.settle(t0 + EVENT_GRACE), 0);
        assert_eq!(m.pending(), 0);
    }

    #[test]
    fn change_without_any_event_counts_once_after_the_grace_period() {
        let mut m = MissedEvents::default();
        let t0 = Instant::now();
        m.record_event("c", Running);
        m.relist_found(&[change("c", Running, Exited), change("d", NonExistent, Running)], t0);
        assert_eq!(m.settle(t0 + Duration::from_millis(10)), 0, "still within grace");
        assert_eq!(m.settle(t0 + EVENT_GRACE), 2);
        assert_eq!(m.settle(t0 + EVENT_GRACE * 2), 0, "counted once");
    }
}
