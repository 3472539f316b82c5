//! The scheduling queue (upstream
//! `pkg/scheduler/backend/queue/scheduling_queue.go`): three sets of
//! pending pods, keyed `namespace/name`.
//!
//! ```text
//!   new/updated pod ──► activeQ ──pop──► scheduling attempt
//!                         ▲   ▲              │ unschedulable    │ error
//!          backoff over ──┘   │              ▼                  ▼
//!                      backoffQ ◄── cluster event ── unschedulable   backoffQ
//!                                   (or 5 min)         pods
//! ```
//!
//! `activeQ` pops the highest `spec.priority` first, then the earliest
//! queued. A pod's backoff after `n` attempts is 1s doubled per attempt, at
//! most 10s (`--pod-initial-backoff-seconds`/`--pod-max-backoff-seconds`
//! defaults). An unschedulable pod waits in `unschedulable` until a cluster
//! event (a node added or changed, an assigned pod changed or deleted) moves
//! it back, to `backoffQ` while its backoff lasts, or after 5 minutes
//! (`podMaxInUnschedulablePodsDuration`). If such an event arrives while the
//! pod is being scheduled, its failure sends it to `backoffQ` instead, so
//! the event is not missed. Unlike upstream, every cluster event moves every
//! unschedulable pod (no per-plugin queueing hints). Time is passed in, so
//! the queue is tested without sleeping.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Backoff after the first failed attempt (`podInitialBackoffSeconds`, 1s).
pub const INITIAL_BACKOFF: Duration = Duration::from_secs(1);
/// Longest backoff (`podMaxBackoffSeconds`, 10s).
pub const MAX_BACKOFF: Duration = Duration::from_secs(10);
/// How long a pod waits in `unschedulable` without an event (5 minutes).
pub const MAX_UNSCHEDULABLE: Duration = Duration::from_secs(300);

/// A pending pod's bookkeeping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueuedPod {
    /// `namespace/name`.
    pub key: String,
    /// `spec.priority`.
    pub priority: i32,
    /// Scheduling attempts so far.
    pub attempts: u32,
    /// When it was (re)queued: orders `activeQ`, starts the backoff.
    pub timestamp: Instant,
    /// When it was first queued (for the scheduling SLI).
    pub initial: Instant,
}

/// Where a pending pod is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Queue {
    /// Ready to be scheduled.
    Active,
    /// Waiting for its backoff to end.
    Backoff,
    /// Waiting for a cluster event.
    Unschedulable,
}

impl Queue {
    /// The `queue` label of `scheduler_pending_pods`.
    pub fn label(self) -> &'static str {
        match self {
            Queue::Active => "active",
            Queue::Backoff => "backoff",
            Queue::Unschedulable => "unschedulable",
        }
    }
}

/// The backoff of a pod after `attempts` attempts.
pub fn backoff(attempts: u32) -> Duration {
    if attempts == 0 {
        return Duration::ZERO;
    }
    let shift = (attempts - 1).min(16);
    INITIAL_BACKOFF.saturating_mul(1 << shift).min(MAX_BACKOFF)
}

/// The queue.
#[derive(Debug, Default)]
pub struct SchedulingQueue {
    pods: HashMap<String, (Queue, QueuedPod)>,
    in_flight: HashMap<String, QueuedPod>,
    /// Bumped by every cluster event; attempts remember it when they start.
    move_cycle: u64,
    in_flight_cycle: HashMap<String, u64>,
}

impl SchedulingQueue {
    /// An empty queue.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a new pending pod to `activeQ`, or updates the priority of one
    /// already queued; an update of an unschedulable pod moves it (its spec
    /// may fit now). Pods being scheduled are left alone.
    pub fn add_or_update(&mut self, key: &str, priority: i32, now: Instant) {
        if self.in_flight.contains_key(key) {
            return;
        }
        match self.pods.get_mut(key) {
            Some((q, p)) => {
                p.priority = priority;
                if *q == Queue::Unschedulable {
                    let p = p.clone();
                    self.requeue(p, now);
                }
            }
            None => {
                let p = QueuedPod { key: key.to_string(), priority, attempts: 0, timestamp: now, initial: now };
                self.pods.insert(key.to_string(), (Queue::Active, p));
            }
        }
    }

    /// Forgets a pod (deleted, assigned, or no longer ours).
    pub fn delete(&mut self, key: &str) {
        self.pods.remove(key);
        self.in_flight.remove(key);
        self.in_flight_cycle.remove(key);
    }

    fn requeue(&mut self, p: QueuedPod, now: Instant) {
        let q = if p.timestamp + backoff(p.attempts) > now { Queue::Backoff } else { Queue::Active };
        self.pods.insert(p.key.clone(), (q, p));
    }

    /// Moves backoffQ pods whose backoff ended, and unschedulable pods
    /// waiting longer than [`MAX_UNSCHEDULABLE`], to `activeQ`.
    pub fn flush(&mut self, now: Instant) {
        for (q, p) in self.pods.values_mut() {
            let due = match q {
                Queue::Backoff => p.timestamp + backoff(p.attempts) <= now,
                Queue::Unschedulable => p.timestamp + MAX_UNSCHEDULABLE <= now,
                Queue::Active => false,
            };
            if due {
                *q = Queue::Active;
            }
        }
    }

    /// Takes the next pod to schedule (after [`SchedulingQueue::flush`]),
    /// counting the attempt; it stays "in flight" until
    /// [`SchedulingQueue::done`], [`SchedulingQueue::unschedulable`] or
    /// [`SchedulingQueue::failed`].
    pub fn pop(&mut self, now: Instant) -> Option<QueuedPod> {
        self.flush(now);
        let key = self
            .pods
            .values()
            .filter(|(q, _)| *q == Queue::Active)
            .map(|(_, p)| p)
            .min_by(|a, b| b.priority.cmp(&a.priority).then(a.timestamp.cmp(&b.timestamp)).then(a.key.cmp(&b.key)))?
            .key
            .clone();
        let (_, mut p) = self.pods.remove(&key)?;
        p.attempts += 1;
        self.in_flight.insert(key.clone(), p.clone());
        self.in_flight_cycle.insert(key, self.move_cycle);
        Some(p)
    }

    /// The attempt ended with the pod bound (or gone).
    pub fn done(&mut self, key: &str) {
        self.in_flight.remove(key);
        self.in_flight_cycle.remove(key);
    }

    /// The attempt found no node: the pod waits for a cluster event, or
    /// backs off when one came during the attempt.
    pub fn unschedulable(&mut self, key: &str, now: Instant) {
        let Some(mut p) = self.in_flight.remove(key) else { return };
        let started = self.in_flight_cycle.remove(key).unwrap_or(0);
        p.timestamp = now;
        let q = if self.move_cycle > started { Queue::Backoff } else { Queue::Unschedulable };
        self.pods.insert(key.to_string(), (q, p));
    }

    /// The attempt failed for another reason (API error): back off.
    pub fn failed(&mut self, key: &str, now: Instant) {
        let Some(mut p) = self.in_flight.remove(key) else { return };
        self.in_flight_cycle.remove(key);
        p.timestamp = now;
        self.pods.insert(key.to_string(), (Queue::Backoff, p));
    }

    /// A cluster event: unschedulable pods go to `backoffQ` or `activeQ`.
    pub fn move_all(&mut self, now: Instant) {
        self.move_cycle += 1;
        let waiting: Vec<QueuedPod> =
            self.pods.values().filter(|(q, _)| *q == Queue::Unschedulable).map(|(_, p)| p.clone()).collect();
        for p in waiting {
            self.requeue(p, now);
        }
    }

    /// Where `key` waits (None: not queued, or in flight).
    pub fn position(&self, key: &str) -> Option<Queue> {
        self.pods.get(key).map(|(q, _)| *q)
    }

    /// How many pods each queue holds (for `scheduler_pending_pods`).
    pub fn counts(&self) -> [(Queue, i64); 3] {
        let n = |which| self.pods.values().filter(|(q, _)| *q == which).count() as i64;
        [(Queue::Active, n(Queue::Active)), (Queue::Backoff, n(Queue::Backoff)), (Queue::Unschedulable, n(Queue::Unschedulable))]
    }

    /// When the next backoff ends (or an unschedulable pod times out).
    pub fn next_wake(&self) -> Option<Instant> {
        self.pods
            .values()
            .filter_map(|(q, p)| match q {
                Queue::Backoff => Some(p.timestamp + backoff(p.attempts)),
                Queue::Unschedulable => Some(p.timestamp + MAX_UNSCHEDULABLE),
                Queue::Active => None,
            })
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_one_second_up_to_ten() {
        let got: Vec<u64> = (1..=6).map(|a| backoff(a).as_secs()).collect();
        assert_eq!(got, vec![1, 2, 4, 8, 10, 10]);
    }

    #[test]
    fn active_queue_pops_by_priority_then_age() {
        let t = Instant::now();
        let mut q = SchedulingQueue::new();
        q.add_or_update("ns/low", 0, t);
        q.add_or_update("ns/high", 100, t + Duration::from_millis(5));
        q.add_or_update("ns/low2", 0, t + Duration::from_millis(1));
        let order: Vec<String> = std::iter::from_fn(|| q.pop(t + Duration::from_secs(1)).map(|p| p.key)).collect();
        assert_eq!(order, vec!["ns/high", "ns/low", "ns/low2"]);
    }

    #[test]
    fn unschedulable_pods_wait_for_an_event_then_back_off() {
        let t = Instant::now();
        let mut q = SchedulingQueue::new();
        q.add_or_update("ns/p", 0, t);
        let p = q.pop(t).unwrap();
        assert_eq!(p.attempts, 1);
        q.unschedulable("ns/p", t);
        assert_eq!(q.position("ns/p"), Some(Queue::Unschedulable));
        assert!(q.pop(t + Duration::from_secs(60)).is_none(), "no event, no retry");
        // A node appears half a second later: still backing off (1s).
        q.move_all(t + Duration::from_millis(500));
        assert_eq!(q.position("ns/p"), Some(Queue::Backoff));
        assert!(q.pop(t + Duration::from_millis(900)).is_none());
        assert_eq!(q.next_wake(), Some(t + Duration::from_secs(1)));
        let again = q.pop(t + Duration::from_secs(1)).unwrap();
        assert_eq!(again.attempts, 2);
        // Unschedulable again, with no event: retried after 5 minutes anyway.
        q.unschedulable("ns/p", t + Duration::from_secs(1));
        assert!(q.pop(t + Duration::from_secs(300)).is_none());
        assert!(q.pop(t + Duration::from_secs(301)).is_some());
    }

    #[test]
    fn an_event_during_the_attempt_sends_the_failed_pod_to_backoff() {
        let t = Instant::now();
        let mut q = SchedulingQueue::new();
        q.add_or_update("ns/p", 0, t);
        q.pop(t).unwrap();
        q.move_all(t);
        q.unschedulable("ns/p", t);
        assert_eq!(q.position("ns/p"), Some(Queue::Backoff));
        assert_eq!(q.counts()[1], (Queue::Backoff, 1));
        q.delete("ns/p");
        assert_eq!(q.counts().iter().map(|(_, n)| n).sum::<i64>(), 0);
    }

    #[test]
    fn errors_back_off_and_updates_wake_unschedulable_pods() {
        let t = Instant::now();
        let mut q = SchedulingQueue::new();
        q.add_or_update("ns/p", 0, t);
        q.pop(t).unwrap();
        q.failed("ns/p", t);
        assert_eq!(q.position("ns/p"), Some(Queue::Backoff));
        q.pop(t + Duration::from_secs(1)).unwrap();
        q.unschedulable("ns/p", t + Duration::from_secs(1));
        q.add_or_update("ns/p", 0, t + Duration::from_secs(10));
        assert_eq!(q.position("ns/p"), Some(Queue::Active), "backoff of 2s is over");
    }
}
