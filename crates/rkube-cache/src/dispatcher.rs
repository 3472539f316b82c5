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
        // One timer for the whole loop: a sleep created per iteration would
        // restart with every message and never fire while events arrive more
        // often than RETRY_INTERVAL, leaving blocked watchers' queued events
        // undelivered until their next own event.
        let mut retry_tick = tokio::time::interval(RETRY_INTERVAL);
        retry_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let blocked = !self.registry().blocked().is_empty();
            tokio::select! {
                msg = rx.recv() => match msg {
                    Some(m) => self.handle(m),
                    None => break,
                },
                _ = bookmark_tick.tick() => self.send_bookmarks(),
                _ = retry_tick.tick(), if blocked => self.retry_blocked(),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::TokioClock;
    use crate::event::{EventKind, WatchEvent};
    use crate::filter::{Predicate, NODE_NAME_FIELD};
    use crate::metrics::CacheMetrics;
    use crate::store::CachedObject;
    use crate::watchers::Watcher;
    use rkube_api::selector::FieldSelector;
    use serde_json::Value;

    fn pod_fields(v: &Value) -> Vec<(String, String)> {
        let node = v.pointer("/spec/nodeName").and_then(Value::as_str).unwrap_or("");
        vec![(NODE_NAME_FIELD.to_string(), node.to_string())]
    }

    fn event(name: &str, node: &str, rv: i64) -> DispatchMsg {
        let json = format!(r#"{{"metadata":{{"name":"{name}","namespace":"d"}},"spec":{{"nodeName":"{node}"}}}}"#);
        let obj = Arc::new(CachedObject::decode(&format!("d/{name}"), json.as_bytes(), rv, crate::store::FieldExtractor::Fn(pod_fields)).unwrap());
        let ev = CacheEvent::new(EventKind::Modified, obj.clone(), Some(obj), rv, tokio::time::Instant::now());
        DispatchMsg::Event(Arc::new(ev))
    }

    /// A node watcher whose buffer filled gets its queued events as soon as
    /// its client reads again, even while other nodes' events keep the
    /// dispatcher busy more often than the retry interval (they used to
    /// restart the retry timer, leaving the events queued until the watcher's
    /// next own event).
    #[tokio::test(start_paused = true)]
    async fn queued_events_reach_a_reading_watcher_while_other_events_keep_coming() {
        let registry = Arc::new(Mutex::new(Registry::new(tokio::time::Instant::now())));
        let metrics = ResourceMetrics::new(CacheMetrics::unregistered(), "", "pods");
        let policy = DispatchPolicy { budget: Duration::from_secs(5), max_overflow: 100 };
        let dispatcher = Dispatcher::new(registry.clone(), metrics.clone(), Arc::new(TokioClock), policy);
        let pred = Predicate { field: FieldSelector::one_term(NODE_NAME_FIELD, "a"), ..Default::default() };
        let (tx, mut rx) = mpsc::channel(2);
        registry.lock().unwrap().add(Watcher::new(Arc::new(pred), 0, false, None, tx), tokio::time::Instant::now());
        let (dtx, drx) = mpsc::channel(16);
        let task = tokio::spawn(dispatcher.run(drx));

        // Five events for node a: two fit in the channel, three are queued.
        for rv in 1..=5 {
            dtx.send(event("on-a", "a", rv)).await.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
        let mut got = Vec::new();
        while let Ok(ev) = rx.try_recv() {
            got.push(ev.resource_version().unwrap());
        }
        assert_eq!(got, [1, 2], "the channel held two events");

        // Node b's events every 5 ms (more often than RETRY_INTERVAL) for 1 s,
        // while the node-a client keeps reading.
        let mut rv = 5;
        for _ in 0..200 {
            rv += 1;
            dtx.send(event("on-b", "b", rv)).await.unwrap();
            tokio::time::sleep(Duration::from_millis(5)).await;
            while let Ok(ev) = rx.try_recv() {
                got.push(ev.resource_version().unwrap());
            }
            if got.len() == 5 {
                break;
            }
        }
        assert_eq!(got, [1, 2, 3, 4, 5], "queued events delivered in order while node b stayed busy");
        assert!(rv <= 5 + 4, "the queued events waited {} ms", (rv - 5) * 5);
        assert_eq!(metrics.terminated_watchers(), 0);
        assert!(!matches!(rx.try_recv(), Ok(WatchEvent::Error(_))));
        drop(dtx);
        task.await.unwrap();
    }
}
