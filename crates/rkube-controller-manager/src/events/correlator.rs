//! Upstream's event correlation (`staging/src/k8s.io/client-go/tools/record/events_cache.go`,
//! `EventCorrelator`), applied to the events.k8s.io/v1 events a controller
//! publishes, before anything is written:
//!
//! 1. the **aggregator** (`EventAggregator`, `EventAggregatorByReasonFunc`)
//!    groups events by object, type and reason and counts their distinct
//!    notes over a rolling [`AGGREGATE_INTERVAL`]; from the
//!    [`AGGREGATE_MAX_EVENTS`]th distinct note on, the event becomes the
//!    group's one aggregate event with note `(combined from similar events): <note>`;
//! 2. the **logger** (`eventLogger`) turns an event seen before (same object,
//!    field path, type, reason and note, or the same aggregate) into the next
//!    occurrence of that Event object: same name and `eventTime`, `series`
//!    `{count, lastObservedTime}` (the v1 form of core/v1's `count` and
//!    `lastTimestamp`);
//! 3. the **spam filter** (`EventSourceObjectSpamFilter`) gives each object a
//!    token bucket of [`SPAM_BURST`] writes refilled at one per
//!    [`SPAM_REFILL`]; an event finding no token is dropped (its occurrence
//!    still counts in the logger, as upstream).
//!
//! The three caches are LRUs of [`MAX_LRU_CACHE_ENTRIES`] keys each
//! (upstream `maxLruCacheEntries`). A correlator belongs to one reporting
//! controller, so its keys leave out the source upstream puts in them.
//! Time is passed in (`now`), so tests drive it by hand.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::Hash;
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event as K8sEvent, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::runtime::events::EventType;

/// Keys each cache keeps (upstream `maxLruCacheEntries`).
pub const MAX_LRU_CACHE_ENTRIES: usize = 4096;
/// Distinct notes of one object, type and reason within
/// [`AGGREGATE_INTERVAL`] from which events are aggregated (upstream
/// `defaultAggregateMaxEvents`).
pub const AGGREGATE_MAX_EVENTS: usize = 10;
/// How long a group of similar events stays open after its last event
/// (upstream `defaultAggregateIntervalInSeconds`, 600 s).
pub const AGGREGATE_INTERVAL: Duration = Duration::from_secs(600);
/// Writes an object's events may burst (upstream `defaultSpamBurst`).
pub const SPAM_BURST: f64 = 25.0;
/// Time to earn one more write (upstream `defaultSpamQPS`, 1/300 per second).
pub const SPAM_REFILL: Duration = Duration::from_secs(300);
/// Upstream `EventAggregatorByReasonMessageFunc`'s prefix of an aggregate event's note.
pub const AGGREGATE_NOTE_PREFIX: &str = "(combined from similar events): ";

/// A least-recently-used map of at most `capacity` keys (upstream's
/// `groupcache/lru`): reading or writing a key makes it the newest, and
/// adding one past the capacity drops the oldest.
struct Lru<K, V> {
    capacity: usize,
    tick: u64,
    entries: HashMap<K, (V, u64)>,
    by_age: BTreeMap<u64, K>,
}

impl<K: Clone + Eq + Hash, V> Lru<K, V> {
    fn new(capacity: usize) -> Self {
        Lru { capacity: capacity.max(1), tick: 0, entries: HashMap::new(), by_age: BTreeMap::new() }
    }

    /// The value of `key`, made the newest; `make`'s value if there was none.
    fn get_or_insert_with(&mut self, key: &K, make: impl FnOnce() -> V) -> &mut V {
        self.tick += 1;
        let tick = self.tick;
        if let Some((_, age)) = self.entries.get(key) {
            self.by_age.remove(age);
        } else if self.entries.len() >= self.capacity {
            if let Some((_, oldest)) = self.by_age.pop_first() {
                self.entries.remove(&oldest);
            }
        }
        self.by_age.insert(tick, key.clone());
        let slot = self.entries.entry(key.clone()).or_insert_with(|| (make(), tick));
        slot.1 = tick;
        &mut slot.0
    }

    fn len(&self) -> usize {
        self.entries.len()
    }
}

/// One event a controller wants to publish.
#[derive(Clone, Copy, Debug)]
pub struct Occurrence<'a> {
    /// The object the event is about.
    pub regarding: &'a ObjectReference,
    /// `Normal` or `Warning`.
    pub type_: EventType,
    /// Upstream's reason (`SuccessfulCreate`, …), also the event's action.
    pub reason: &'a str,
    /// The human-readable note.
    pub note: &'a str,
}

/// The object an event is about (upstream `getSpamKey`, without the source).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct ObjectKey {
    api_version: String,
    kind: String,
    namespace: String,
    name: String,
    uid: String,
}

/// Similar events (upstream `EventAggregatorByReasonFunc`'s aggregate key).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct AggregateKey {
    object: ObjectKey,
    type_: EventType,
    reason: String,
}

/// One Event object: identical events (upstream `getEventKey`), or a group's aggregate.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum LogKey {
    Event { similar: AggregateKey, field_path: String, note: String },
    Aggregate(AggregateKey),
}

/// Upstream `aggregateRecord`: the distinct notes of a group and its last event.
struct AggregateRecord {
    notes: HashSet<String>,
    last: Timestamp,
}

/// Upstream `eventLog`: an Event object written before.
struct EventLog {
    count: i32,
    first: Timestamp,
    name: String,
}

/// A token bucket (upstream `flowcontrol.NewTokenBucketRateLimiterWithClock`, `TryAccept`).
struct Bucket {
    tokens: f64,
    last: Timestamp,
}

impl Bucket {
    fn try_accept(&mut self, now: Timestamp) -> bool {
        let elapsed = now.duration_since(self.last).as_secs_f64().max(0.0);
        self.tokens = (self.tokens + elapsed / SPAM_REFILL.as_secs_f64()).min(SPAM_BURST);
        self.last = self.last.max(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// Upstream `EventCorrelator` for one reporting controller.
pub struct EventCorrelator {
    controller: String,
    aggregates: Lru<AggregateKey, AggregateRecord>,
    logs: Lru<LogKey, EventLog>,
    spam: Lru<ObjectKey, Bucket>,
    /// The last nanosecond used in a new event's name (names stay unique
    /// even when the clock does not move between two events).
    last_name_nanos: i128,
}

impl EventCorrelator {
    /// A correlator for `controller`'s events (its `reportingController`).
    pub fn new(controller: impl Into<String>) -> Self {
        Self::with_capacity(controller, MAX_LRU_CACHE_ENTRIES)
    }

    /// As [`EventCorrelator::new`], with caches of `capacity` keys each.
    pub fn with_capacity(controller: impl Into<String>, capacity: usize) -> Self {
        EventCorrelator {
            controller: controller.into(),
            aggregates: Lru::new(capacity),
            logs: Lru::new(capacity),
            spam: Lru::new(capacity),
            last_name_nanos: 0,
        }
    }

    /// Upstream `EventCorrelate`: the Event to write for `ev` seen at `now`,
    /// or `None` when the spam filter drops it. A returned event with
    /// `series` is a later occurrence of an Event written before (update
    /// its `series` and `note`); one without is a new Event (create it).
    pub fn correlate(&mut self, ev: &Occurrence<'_>, now: Timestamp) -> Option<K8sEvent> {
        let r = ev.regarding;
        let object = ObjectKey {
            api_version: r.api_version.clone().unwrap_or_default(),
            kind: r.kind.clone().unwrap_or_default(),
            namespace: r.namespace.clone().unwrap_or_default(),
            name: r.name.clone().unwrap_or_default(),
            uid: r.uid.clone().unwrap_or_default(),
        };
        let similar = AggregateKey { object: object.clone(), type_: ev.type_, reason: ev.reason.to_string() };

        // The aggregator.
        let record = self.aggregates.get_or_insert_with(&similar, || AggregateRecord { notes: HashSet::new(), last: now });
        if now.duration_since(record.last).as_secs_f64() > AGGREGATE_INTERVAL.as_secs_f64() {
            record.notes.clear();
        }
        record.notes.insert(ev.note.to_string());
        record.last = now;
        let (key, note) = if record.notes.len() < AGGREGATE_MAX_EVENTS {
            let field_path = r.field_path.clone().unwrap_or_default();
            (LogKey::Event { similar, field_path, note: ev.note.to_string() }, ev.note.to_string())
        } else {
            // Keep the set below the threshold, so that each new note is aggregated too.
            if let Some(any) = record.notes.iter().next().cloned() {
                record.notes.remove(&any);
            }
            (LogKey::Aggregate(similar), format!("{AGGREGATE_NOTE_PREFIX}{}", ev.note))
        };

        // The logger.
        let log = self.logs.get_or_insert_with(&key, || EventLog { count: 0, first: now, name: String::new() });
        if log.count == 0 {
            let nanos = now.as_nanosecond().max(self.last_name_nanos + 1);
            self.last_name_nanos = nanos;
            let owner = r.name.as_deref().filter(|n| !n.is_empty()).unwrap_or(&self.controller);
            *log = EventLog { count: 1, first: now, name: format!("{owner}.{nanos:x}") };
        } else {
            log.count = log.count.saturating_add(1);
        }
        let event = v1_event(&self.controller, ev, &note, log, now);

        // The spam filter.
        let bucket = self.spam.get_or_insert_with(&object, || Bucket { tokens: SPAM_BURST, last: now });
        bucket.try_accept(now).then_some(event)
    }

    /// Keys held in the largest of the three caches (at most the capacity).
    pub fn cached_keys(&self) -> usize {
        self.aggregates.len().max(self.logs.len()).max(self.spam.len())
    }
}

/// The events.k8s.io/v1 Event of occurrence `log.count` of `ev` (with
/// `note`) reported by `controller`, in the object's namespace (`default`
/// for a cluster-scoped object, as kube-runtime's recorder and client-go).
fn v1_event(controller: &str, ev: &Occurrence<'_>, note: &str, log: &EventLog, now: Timestamp) -> K8sEvent {
    let namespace = ev.regarding.namespace.clone().filter(|ns| !ns.is_empty()).unwrap_or_else(|| "default".into());
    K8sEvent {
        metadata: ObjectMeta { name: Some(log.name.clone()), namespace: Some(namespace), ..ObjectMeta::default() },
        event_time: Some(MicroTime(log.first)),
        series: (log.count > 1).then_some(EventSeries { count: log.count, last_observed_time: MicroTime(now) }),
        type_: Some(match ev.type_ {
            EventType::Normal => "Normal".into(),
            EventType::Warning => "Warning".into(),
        }),
        reason: Some(ev.reason.to_string()),
        action: Some(ev.reason.to_string()),
        note: Some(note.to_string()),
        regarding: Some(ev.regarding.clone()),
        reporting_controller: Some(controller.to_string()),
        reporting_instance: Some(controller.to_string()),
        ..K8sEvent::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::SignedDuration;

    fn rs(name: &str) -> ObjectReference {
        ObjectReference {
            api_version: Some("apps/v1".into()),
            kind: Some("ReplicaSet".into()),
            namespace: Some("ns".into()),
            name: Some(name.into()),
            uid: Some(format!("uid-{name}")),
            ..ObjectReference::default()
        }
    }

    fn created<'a>(regarding: &'a ObjectReference, note: &'a str) -> Occurrence<'a> {
        Occurrence { regarding, type_: EventType::Normal, reason: "SuccessfulCreate", note }
    }

    /// A fake clock: `t0` plus whole seconds.
    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000).expect("time") + SignedDuration::from_secs(secs)
    }

    fn count(ev: &K8sEvent) -> i32 {
        ev.series.as_ref().map_or(1, |s| s.count)
    }

    #[test]
    fn identical_events_are_one_event_with_a_growing_series() {
        let mut c = EventCorrelator::new("replicaset-controller");
        let web = rs("web");
        let first = c.correlate(&created(&web, "Created pod: web-a"), at(0)).expect("first");
        assert!(first.series.is_none());
        assert_eq!(first.note.as_deref(), Some("Created pod: web-a"));
        assert_eq!(first.metadata.namespace.as_deref(), Some("ns"));
        assert!(first.metadata.name.as_deref().is_some_and(|n| n.starts_with("web.")));
        for n in 2..=4 {
            let again = c.correlate(&created(&web, "Created pod: web-a"), at(n)).expect("again");
            assert_eq!(again.metadata.name, first.metadata.name);
            assert_eq!(again.event_time, first.event_time);
            let series = again.series.expect("series");
            assert_eq!((series.count, series.last_observed_time), (n as i32, MicroTime(at(n))));
        }
        // Another note, type or object is another Event.
        let other = c.correlate(&created(&web, "Created pod: web-b"), at(5)).expect("other note");
        assert_ne!(other.metadata.name, first.metadata.name);
        assert!(other.series.is_none());
        let warning = Occurrence { type_: EventType::Warning, ..created(&web, "Created pod: web-a") };
        assert!(c.correlate(&warning, at(5)).expect("warning").series.is_none());
        assert!(c.correlate(&created(&rs("api"), "Created pod: web-a"), at(5)).expect("other object").series.is_none());
    }

    #[test]
    fn the_tenth_distinct_note_within_ten_minutes_starts_the_aggregate_event() {
        let mut c = EventCorrelator::new("replicaset-controller");
        let web = rs("web");
        let mut names = HashSet::new();
        for i in 1..AGGREGATE_MAX_EVENTS {
            let ev = c.correlate(&created(&web, &format!("Created pod: web-{i}")), at(i as i64)).expect("event");
            assert_eq!((ev.note.clone(), count(&ev)), (Some(format!("Created pod: web-{i}")), 1));
            names.insert(ev.metadata.name.expect("name"));
        }
        assert_eq!(names.len(), AGGREGATE_MAX_EVENTS - 1);
        let tenth = c.correlate(&created(&web, "Created pod: web-10"), at(10)).expect("aggregate");
        assert_eq!(tenth.note.as_deref(), Some("(combined from similar events): Created pod: web-10"));
        assert_eq!(count(&tenth), 1);
        assert!(!names.contains(tenth.metadata.name.as_deref().expect("name")));
        let eleventh = c.correlate(&created(&web, "Created pod: web-11"), at(11)).expect("aggregate again");
        assert_eq!(eleventh.metadata.name, tenth.metadata.name);
        assert_eq!(eleventh.note.as_deref(), Some("(combined from similar events): Created pod: web-11"));
        assert_eq!(count(&eleventh), 2);
        // Other reasons of the same object are not similar.
        let deleted = Occurrence { reason: "SuccessfulDelete", ..created(&web, "Deleted pod: web-1") };
        assert_eq!(c.correlate(&deleted, at(12)).expect("delete").note.as_deref(), Some("Deleted pod: web-1"));
    }

    #[test]
    fn similar_events_more_than_ten_minutes_apart_start_over() {
        let mut c = EventCorrelator::new("job-controller");
        let job = rs("j");
        // Nine distinct notes, one every 2 minutes: the group stays open.
        for i in 1..AGGREGATE_MAX_EVENTS as i64 {
            c.correlate(&created(&job, &format!("Created pod: j-{i}")), at(i * 120)).expect("event");
        }
        // Ten minutes and a second after the last one the group is new: no aggregate.
        let late = at(9 * 120 + 601);
        let ev = c.correlate(&created(&job, "Created pod: j-10"), late).expect("event");
        assert_eq!(ev.note.as_deref(), Some("Created pod: j-10"));
    }

    #[test]
    fn the_spam_filter_allows_a_burst_of_25_then_one_per_five_minutes() {
        let mut c = EventCorrelator::new("replicaset-controller");
        let web = rs("web");
        let written: Vec<K8sEvent> =
            (0..40).filter_map(|i| c.correlate(&created(&web, &format!("Created pod: web-{i}")), at(0))).collect();
        assert_eq!(written.len(), 25);
        // 9 Events with their own note, then the aggregate created and updated 15 times.
        let aggregates: Vec<&K8sEvent> =
            written.iter().filter(|e| e.note.as_deref().is_some_and(|n| n.starts_with(AGGREGATE_NOTE_PREFIX))).collect();
        assert_eq!(aggregates.len(), 16);
        assert_eq!(count(aggregates[15]), 16);
        // Another object has its own bucket.
        assert!(c.correlate(&created(&rs("api"), "Created pod: api-1"), at(0)).is_some());
        // The bucket is the object's, whatever the reason.
        let deleted = Occurrence { reason: "SuccessfulDelete", ..created(&web, "Deleted pod: web-0") };
        assert!(c.correlate(&deleted, at(299)).is_none());
        // One token five minutes later; the dropped occurrences still counted.
        let later = c.correlate(&created(&web, "Created pod: web-40"), at(301)).expect("a refilled token");
        assert_eq!(count(&later), 16 + 15 + 1);
        assert!(c.correlate(&created(&web, "Created pod: web-41"), at(302)).is_none());
    }

    #[test]
    fn caches_keep_at_most_their_capacity() {
        let mut c = EventCorrelator::with_capacity("node-controller", 8);
        for i in 0..100 {
            let node = ObjectReference { kind: Some("Node".into()), name: Some(format!("n{i}")), ..Default::default() };
            let ev = c.correlate(&Occurrence { regarding: &node, type_: EventType::Normal, reason: "R", note: "x" }, at(i));
            // Cluster-scoped objects' events live in `default`.
            assert_eq!(ev.expect("event").metadata.namespace.as_deref(), Some("default"));
        }
        assert_eq!(c.cached_keys(), 8);
        // The least recently used key went first: the newest object still has its series.
        let n99 = ObjectReference { kind: Some("Node".into()), name: Some("n99".into()), ..Default::default() };
        let again = c.correlate(&Occurrence { regarding: &n99, type_: EventType::Normal, reason: "R", note: "x" }, at(100));
        assert_eq!(again.map(|e| count(&e)), Some(2));
        let n0 = ObjectReference { kind: Some("Node".into()), name: Some("n0".into()), ..Default::default() };
        let forgotten = c.correlate(&Occurrence { regarding: &n0, type_: EventType::Normal, reason: "R", note: "x" }, at(100));
        assert_eq!(forgotten.map(|e| count(&e)), Some(1));
    }

    #[test]
    fn names_stay_unique_when_the_clock_stands_still() {
        let mut c = EventCorrelator::new("replicaset-controller");
        let web = rs("web");
        let a = c.correlate(&created(&web, "a"), at(0)).and_then(|e| e.metadata.name);
        let b = c.correlate(&created(&web, "b"), at(0)).and_then(|e| e.metadata.name);
        assert!(a.is_some() && b.is_some() && a != b, "{a:?} {b:?}");
    }
}
