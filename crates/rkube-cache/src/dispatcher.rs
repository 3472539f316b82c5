//! Fan-out of cache events to watchers (upstream `Cacher.dispatchEvents`,
//! `dispatchEvent`, `processBookmarkEvent`, with `time_budget.go`'s intent).
//!
//! One task per cacher receives, in revision order, the events the
//! reflector applied ([`DispatchMsg::Event`]), progress
//! ([`DispatchMsg::Progress`]) and re-initializations
//! ([`DispatchMsg::TerminateAll`]). For each event it offers every
//! interested watcher the same `Arc`ed object; an offer never waits (see
//! [`crate::watchers`]), so a slow watcher can delay nobody. Blocked
//! watchers are retried every [`RETRY_INTERVAL`] and terminated once they
//! have made no progress for the budget (counted in
//! `apiserver_terminated_watchers_total`). Once a second it sends due
//! bookmarks at the last dispatched revision.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;

use crate::bookmarks::{next_bookmark_time, BOOKMARK_FREQUENCY};
use crate::clock::Clock;
use crate::event::CacheEvent;
use crate::metrics::ResourceMetrics;
use crate::watchers::{Delivery, Registry, WatcherId};

/// How often blocked watchers are retried.
pub const RETRY_INTERVAL: Duration = Duration::from_millis(10);
/// How often due bookmarks are looked for (upstream dispatches bookmarks on a 1 s timer).
pub const BOOKMARK_TICK: Duration = Duration::from_secs(1);

/// What the reflector tells the dispatcher, in order.
#[derive(Debug)]
pub enum DispatchMsg {
    /// An applied event.
    Event(Arc<CacheEvent>),
    /// The cache reached this revision without an event of its own (progress notification, list).
    Progress(i64),
    /// The cache is re-initializing: close every watcher.
    TerminateAll,
}

/// Slow-watcher policy.
#[derive(Debug, Clone, Copy)]
pub struct DispatchPolicy {
    /// A watcher making no progress for this long is terminated (spec: ≤ 100 ms).
    pub budget: Duration,
    /// A watcher with more queued events than this is terminated at once.
    pub max_overflow: usize,
}

/// The dispatcher's state between messages.
pub struct Dispatcher {
    registry: Arc<Mutex<Registry>>,
    metrics: ResourceMetrics,
    clock: Arc<dyn Clock>,
    policy: DispatchPolicy,
    dispatched_rv: i64,
}

impl Dispatcher {
    /// A dispatcher over `registry`.
    pub fn new(
        registry: Arc<Mutex<Registry>>,
        metrics: ResourceMetrics,
        clock: Arc<dyn Clock>,
        policy: DispatchPolicy,
    ) -> Self {
        Dispatcher { registry, metrics, clock, policy, dispatched_rv: 0 }
    }

    fn registry(&self) -> std::sync::MutexGuard<'_, Registry> {
        self.registry.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs until the reflector side of `rx` is dropped.
    pub async fn run(mut self, mut rx: mpsc::Receiver<DispatchMsg>) {
        let mut bookmark_tick = tokio::time::interval(BOOKMARK_TICK);
        bookmark_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let blocked = !self.registry().blocked().is_empty();
            tokio::select! {
                msg = rx.recv() => match msg {
                    Some(m) => self.handle(m),
                    None => break,
                },
                _ = bookmark_tick.tick() => self.send_bookmarks(),
                _ = tokio::time::sleep(RETRY_INTERVAL), if blocked => self.retry_blocked(),
            }
        }
        let n = self.registry().clear();
        self.metrics.registered_watchers(-(n as i64));
    }

    /// Handles one message.
    pub fn handle(&mut self, msg: DispatchMsg) {
        match msg {
            DispatchMsg::Event(ev) => self.dispatch(&ev),
            DispatchMsg::Progress(rv) => self.dispatched_rv = self.dispatched_rv.max(rv),
            DispatchMsg::TerminateAll => {
                let n = self.registry().clear();
                self.metrics.registered_watchers(-(n as i64));
                self.dispatched_rv = 0;
            }
        }
    }

    /// Offers `ev` to every interested watcher.
    pub fn dispatch(&mut self, ev: &CacheEvent) {
        self.dispatched_rv = self.dispatched_rv.max(ev.resource_version);
        let now = self.clock.now();
        let policy = self.policy;
        let mut dead = Vec::new();
        let mut slow = Vec::new();
        {
            let mut reg = self.registry();
            for id in reg.candidates(ev) {
                let Some(w) = reg.get_mut(id) else { continue };
                let Some(out) = w.convert(ev) else { continue };
                match w.offer(out, now) {
                    Delivery::Sent => {}
                    Delivery::Queued => {
                        if w.is_unresponsive(now, policy.budget, policy.max_overflow) {
                            slow.push(id);
                        }
                    }
                    Delivery::Gone => dead.push(id),
                }
            }
        }
        self.metrics.events_dispatched(1);
        self.drop_watchers(&dead, false);
        self.drop_watchers(&slow, true);
    }

    /// Retries blocked watchers; terminates those past the budget.
    pub fn retry_blocked(&mut self) {
        let now = self.clock.now();
        let policy = self.policy;
        let mut dead = Vec::new();
        let mut slow = Vec::new();
        {
            let mut reg = self.registry();
            for id in reg.blocked() {
                let Some(w) = reg.get_mut(id) else { continue };
                match w.flush(now) {
                    Delivery::Sent => {}
                    Delivery::Gone => dead.push(id),
                    Delivery::Queued => {
                        if w.is_unresponsive(now, policy.budget, policy.max_overflow) {
                            slow.push(id);
                        }
                    }
                }
            }
        }
        self.drop_watchers(&dead, false);
        self.drop_watchers(&slow, true);
    }

    /// Sends due bookmarks and schedules the next ones.
    pub fn send_bookmarks(&mut self) {
        let now = self.clock.now();
        let rv = self.dispatched_rv;
        let mut dead = Vec::new();
        {
            let mut reg = self.registry();
            for id in reg.bookmarks.pop_due(now) {
                let Some(w) = reg.get_mut(id) else { continue };
                if w.offer_bookmark(rv) == Delivery::Gone {
                    dead.push(id);
                    continue;
                }
                let deadline = w.deadline;
                // A next time within this tick means the pre-deadline bookmark
                // was just sent (buckets are 1 s wide): it was the last one.
                if let Some(t) = next_bookmark_time(now, deadline, BOOKMARK_FREQUENCY).filter(|t| *t >= now + BOOKMARK_TICK) {
                    reg.bookmarks.schedule(id, t);
                }
            }
        }
        self.drop_watchers(&dead, false);
    }

    fn drop_watchers(&mut self, ids: &[WatcherId], unresponsive: bool) {
        if ids.is_empty() {
            return;
        }
        let mut removed = 0;
        {
            let mut reg = self.registry();
            for id in ids {
                if reg.remove(*id) {
                    removed += 1;
                }
            }
        }
        self.metrics.registered_watchers(-removed);
        if unresponsive {
            for _ in 0..removed {
                self.metrics.terminated_watcher();
            }
            tracing::warn!(count = removed, "terminated unresponsive watchers");
        }
    }

    /// The revision of the last dispatched event or progress.
    pub fn dispatched_rv(&self) -> i64 {
        self.dispatched_rv
    }
}

impl std::fmt::Debug for Dispatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dispatcher").field("dispatched_rv", &self.dispatched_rv).finish_non_exhaustive()
    }
}
