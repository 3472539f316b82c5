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

use std::cmp::Reverse;
use std::collections::{BTreeSet, HashMap};
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
///
/// Each of the three sets is ordered by what it is taken in (activeQ by
/// priority then age, the other two by when they are due), so taking the
/// next pod, flushing due pods and the next wake-up cost O(log n) per pod
/// moved instead of a scan of every pending pod.
#[derive(Debug, Default)]
pub struct SchedulingQueue {
    pods: HashMap<String, (Queue, QueuedPod)>,
    /// activeQ: highest priority first, then the earliest queued, then the key.
    active: BTreeSet<(Reverse<i32>, Instant, String)>,
    /// backoffQ by the end of each pod's backoff.
    backoff: BTreeSet<(Instant, String)>,
    /// Unschedulable pods by when they time out ([`MAX_UNSCHEDULABLE`]).
    unschedulable: BTreeSet<(Instant, String)>,
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

    /// Puts `p` in `q` (replacing whatever `p.key` was in).
    fn place(&mut self, q: Queue, p: QueuedPod) {
        self.take(&p.key);
        match q {
            Queue::Active => self.active.insert((Reverse(p.priority), p.timestamp, p.key.clone())),
            Queue::Backoff => self.backoff.insert((p.timestamp + backoff(p.attempts), p.key.clone())),
            Queue::Unschedulable => self.unschedulable.insert((p.timestamp + MAX_UNSCHEDULABLE, p.key.clone())),
        };
        self.pods.insert(p.key.clone(), (q, p));
    }

    /// Removes `key` from the queue it waits in.
    fn take(&mut self, key: &str) -> Option<(Queue, QueuedPod)> {
        let (q, p) = self.pods.remove(key)?;
        match q {
            Queue::Active => self.active.remove(&(Reverse(p.priority), p.timestamp, p.key.clone())),
            Queue::Backoff => self.backoff.remove(&(p.timestamp + backoff(p.attempts), p.key.clone())),
            Queue::Unschedulable => self.unschedulable.remove(&(p.timestamp + MAX_UNSCHEDULABLE, p.key.clone())),
        };
        Some((q, p))
    }

    /// Adds a new pending pod to `activeQ`, or updates the priority of one
    /// already queued; an update of an unschedulable pod moves it (its spec
    /// may fit now). Pods being scheduled are left alone.
    pub fn add_or_update(&mut self, key: &str, priority: i32, now: Instant) {
        if self.in_flight.contains_key(key) {
            return;
        }
        match self.take(key) {
            Some((q, mut p)) => {
                p.priority = priority;
                if q == Queue::Unschedulable {
                    self.requeue(p, now);
                } else {
                    self.place(q, p);
                }
            }
            None => {
                let p = QueuedPod { key: key.to_string(), priority, attempts: 0, timestamp: now, initial: now };
                self.place(Queue::Active, p);
            }
        }
    }

    /// Forgets a pod (deleted, assigned, or no longer ours).
    pub fn delete(&mut self, key: &str) {
        self.take(key);
        self.in_flight.remove(key);
        self.in_flight_cycle.remove(key);
    }

    fn requeue(&mut self, p: QueuedPod, now: Instant) {
        let q = if p.timestamp + backoff(p.attempts) > now { Queue::Backoff } else { Queue::Active };
        self.place(q, p);
    }

    /// Moves backoffQ pods whose backoff ended, and unschedulable pods
    /// waiting longer than [`MAX_UNSCHEDULABLE`], to `activeQ`.
    pub fn flush(&mut self, now: Instant) {
        for set in [Queue::Backoff, Queue::Unschedulable] {
            loop {
                let due = match set {
                    Queue::Backoff => self.backoff.first(),
                    _ => self.unschedulable.first(),
                };
                let Some((_, key)) = due.filter(|(at, _)| *at <= now).cloned() else { break };
                if let Some((_, p)) = self.take(&key) {
                    self.place(Queue::Active, p);
                }
            }
        }
    }

    /// Takes the next pod to schedule (after [`SchedulingQueue::flush`]),
    /// counting the attempt; it stays "in flight" until
    /// [`SchedulingQueue::done`], [`SchedulingQueue::unschedulable`] or
    /// [`SchedulingQueue::failed`].
    pub fn pop(&mut self, now: Instant) -> Option<QueuedPod> {
        self.flush(now);
        let key = self.active.first()?.2.clone();
        let (_, mut p) = self.take(&key)?;
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
        self.place(q, p);
    }

    /// The attempt failed for another reason (API error): back off.
    pub fn failed(&mut self, key: &str, now: Instant) {
        let Some(mut p) = self.in_flight.remove(key) else { return };
        self.in_flight_cycle.remove(key);
        p.timestamp = now;
        self.place(Queue::Backoff, p);
    }

    /// A cluster event: unschedulable pods go to `backoffQ` or `activeQ`.
    pub fn move_all(&mut self, now: Instant) {
        self.move_cycle += 1;
        let waiting: Vec<String> = self.unschedulable.iter().map(|(_, key)| key.clone()).collect();
        for key in waiting {
            if let Some((_, p)) = self.take(&key) {
                self.requeue(p, now);
            }
        }
    }

    /// Where `key` waits (None: not queued, or in flight).
    pub fn position(&self, key: &str) -> Option<Queue> {
        self.pods.get(key).map(|(q, _)| *q)
    }

    /// How many pods each queue holds (for `scheduler_pending_pods`).
    pub fn counts(&self) -> [(Queue, i64); 3] {
        [
            (Queue::Active, self.active.len() as i64),
            (Queue::Backoff, self.backoff.len() as i64),
            (Queue::Unschedulable, self.unschedulable.len() as i64),
        ]
    }

    /// When the next backoff ends (or an unschedulable pod times out).
    pub fn next_wake(&self) -> Option<Instant> {
        let backoff = self.backoff.first().map(|(at, _)| *at);
        let unschedulable = self.unschedulable.first().map(|(at, _)| *at);
        backoff.into_iter().chain(unschedulable).min()
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

    #[test]
    fn a_priority_update_reorders_an_active_pod_and_counts_follow_every_move() {
        let t = Instant::now();
        let mut q = SchedulingQueue::new();
        for i in 0..100 {
            q.add_or_update(&format!("ns/p{i:03}"), 0, t + Duration::from_millis(i));
        }
        q.add_or_update("ns/p050", 10, t + Duration::from_secs(5));
        assert_eq!(q.counts(), [(Queue::Active, 100), (Queue::Backoff, 0), (Queue::Unschedulable, 0)]);
        let first = q.pop(t + Duration::from_secs(6)).unwrap();
        assert_eq!((first.key.as_str(), first.timestamp), ("ns/p050", t + Duration::from_millis(50)), "keeps its age");
        q.unschedulable("ns/p050", t + Duration::from_secs(6));
        let second = q.pop(t + Duration::from_secs(6)).unwrap();
        q.failed(&second.key, t + Duration::from_secs(6));
        assert_eq!(q.counts(), [(Queue::Active, 98), (Queue::Backoff, 1), (Queue::Unschedulable, 1)]);
        assert_eq!(q.next_wake(), Some(t + Duration::from_secs(7)), "the backoff ends before the unschedulable timeout");
        let order: Vec<String> = std::iter::from_fn(|| q.pop(t + Duration::from_secs(7)).map(|p| p.key)).collect();
        assert_eq!(order.len(), 99, "98 active and the backed-off pod; the unschedulable one waits");
        assert_eq!((order[0].as_str(), order[1].as_str()), ("ns/p001", "ns/p002"), "p000 backs off, p050 waits");
        assert_eq!((second.key.as_str(), order.last().map(String::as_str)), ("ns/p000", Some("ns/p000")), "requeued last: its timestamp is the failure's");
        assert_eq!(q.position("ns/p050"), Some(Queue::Unschedulable));
        q.move_all(t + Duration::from_secs(20));
        assert_eq!(q.position("ns/p050"), Some(Queue::Active));
    }
}
