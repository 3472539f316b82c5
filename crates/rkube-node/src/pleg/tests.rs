//! PLEG tests on scripted runtimes and recorded event sequences.
//!
//! Timelines in comments use runtime nanoseconds: `t=100` is `created_at = 100`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rkube_runtime::cri::{ContainerEventType as Ev, ContainerState as S};
use tokio::sync::mpsc;

use super::fake::{container, event_for, sandbox, FakeRuntime};
use super::*;
use crate::pleg::cache::Freshness;
use crate::pleg::metrics::CacheSource;
use PodLifecycleEventType::*;

struct Rig {
    fake: FakeRuntime,
    cache: Arc<PodCache>,
    metrics: PlegMetrics,
    generic: Arc<GenericPleg>,
    evented: Arc<EventedPleg>,
    rx: mpsc::Receiver<PodLifecycleEvent>,
}

fn rig() -> Rig {
    let fake = FakeRuntime::default();
    let cache = PodCache::new();
    let metrics = PlegMetrics::new();
    let (tx, rx) = mpsc::channel(PLEG_CHANNEL_CAPACITY);
    let rt: Arc<dyn crate::cri::RuntimeApi> = Arc::new(fake.clone());
    let generic = GenericPleg::new(Arc::clone(&rt), Arc::clone(&cache), tx.clone(), metrics.clone());
    let evented = EventedPleg::new(rt, Arc::clone(&cache), tx, metrics.clone(), Arc::clone(&generic));
    Rig { fake, cache, metrics, generic, evented, rx }
}

impl Rig {
    fn drain(&mut self) -> Vec<(PodLifecycleEventType, String)> {
        let mut out = Vec::new();
        while let Ok(ev) = self.rx.try_recv() {
            out.push((ev.r#type, ev.data));
        }
        out
    }

    fn event(&self, uid: &str, cid: &str, kind: Ev, at: i64) -> rkube_runtime::cri::ContainerEventResponse {
        self.fake.with(|w| event_for(w, uid, cid, kind, at))
    }

    fn set_container(&self, id: &str, state: S) {
        self.fake.with(|w| {
            if let Some(c) = w.containers.iter_mut().find(|c| c.id == id) {
                c.state = state as i32;
            }
        });
    }

    /// The runtime forgets every sandbox and container (a restart with no records).
    fn clear_runtime(&self) {
        self.fake.with(|w| {
            w.sandboxes.clear();
            w.containers.clear();
        });
    }

    /// [`Rig::drain`], sorted.
    fn drain_sorted(&mut self) -> Vec<(PodLifecycleEventType, String)> {
        let mut evs = self.drain();
        evs.sort();
        evs
    }
}

/// [`one_pod`], known only from events: the relist ran before the pod existed (under the
/// evented PLEG the next is 300 s away), then its container started and only the evented PLEG
/// heard of it (STARTED at t=70, processed). Events drained.
async fn one_pod_known_only_from_events(r: &mut Rig) {
    r.generic.relist().await.expect("relist");
    one_pod(r);
    r.set_container("c1", S::ContainerRunning);
    assert!(r.evented.process_event(&r.event("uid1", "c1", Ev::ContainerStartedEvent, 70), Timestamp(71)));
    r.drain();
}

/// What a relist reports when [`one_pod`]'s sandbox and container vanish: both died and removed.
fn one_pod_gone() -> Vec<(PodLifecycleEventType, String)> {
    vec![
        (ContainerDied, "c1".into()),
        (ContainerDied, "sb1".into()),
        (ContainerRemoved, "c1".into()),
        (ContainerRemoved, "sb1".into()),
    ]
}

fn one_pod(r: &Rig) {
    r.fake.with(|w| {
        w.sandboxes.push(sandbox("sb1", "uid1", true, 10));
        w.containers.push(container("c1", "sb1", "main", S::ContainerCreated, 11));
        w.now = 50;
    });
}

// ----- evented: recorded sequences -----

#[test]
fn created_started_stopped_sequence_yields_started_then_died() {
    let mut r = rig();
    one_pod(&r);
    // t=60 CREATED, t=70 STARTED, t=80 STOPPED
    assert!(r.evented.process_event(&r.event("uid1", "c1", Ev::ContainerCreatedEvent, 60), Timestamp(61)));
    r.set_container("c1", S::ContainerRunning);
    assert!(r.evented.process_event(&r.event("uid1", "c1", Ev::ContainerStartedEvent, 70), Timestamp(71)));
    r.set_container("c1", S::ContainerExited);
    assert!(r.evented.process_event(&r.event("uid1", "c1", Ev::ContainerStoppedEvent, 80), Timestamp(81)));
    assert_eq!(r.drain(), vec![(ContainerStarted, "c1".into()), (ContainerDied, "c1".into())]);
    let read = r.cache.get("uid1");
    assert_eq!(read.modified, Some(Timestamp(80)));
    assert_eq!(read.status.state_of("c1"), PlegState::Exited);
    assert_eq!(r.metrics.cache_updates_by(CacheSource::Event), 3);
}

#[test]
fn stale_event_after_reconnect_does_not_overwrite_newer_relist_status() {
    let mut r = rig();
    one_pod(&r);
    // Relist at t=200 saw c1 exited; a buffered STARTED event from t=100 arrives afterwards.
    r.set_container("c1", S::ContainerExited);
    r.fake.with(|w| w.now = 199);
    let relist_status = {
        let ev = r.event("uid1", "c1", Ev::ContainerStoppedEvent, 200);
        PodStatus::from_event(&ev).expect("status")
    };
    assert!(r.cache.set("uid1", relist_status, None, Timestamp(200)));
    r.set_container("c1", S::ContainerRunning);
    let stale = r.event("uid1", "c1", Ev::ContainerStartedEvent, 100);
    assert!(!r.evented.process_event(&stale, Timestamp(300)));
    assert_eq!(r.cache.get("uid1").status.state_of("c1"), PlegState::Exited, "newer status kept");
    assert!(r.drain().is_empty(), "a stale event wakes no pod worker");
}

#[test]
fn sandbox_created_and_started_events_update_the_cache_but_wake_no_worker() {
    let mut r = rig();
    r.fake.with(|w| w.sandboxes.push(sandbox("sb1", "uid1", true, 10)));
    assert!(r.evented.process_event(&r.event("uid1", "sb1", Ev::ContainerCreatedEvent, 10), Timestamp(11)));
    assert!(r.evented.process_event(&r.event("uid1", "sb1", Ev::ContainerStartedEvent, 12), Timestamp(13)));
    assert!(r.drain().is_empty());
    assert_eq!(r.cache.get("uid1").status.newest_sandbox().map(|s| s.id.as_str()), Some("sb1"));
    assert_eq!(r.cache.get("uid1").status.ips, vec!["10.0.0.1".to_string()]);
}

#[test]
fn deleted_after_stopped_sends_only_removed_and_sandbox_deletion_forgets_the_pod() {
    let mut r = rig();
    one_pod(&r);
    r.set_container("c1", S::ContainerExited);
    r.evented.process_event(&r.event("uid1", "c1", Ev::ContainerStoppedEvent, 60), Timestamp(61));
    r.fake.with(|w| w.containers.clear());
    r.evented.process_event(&r.event("uid1", "c1", Ev::ContainerDeletedEvent, 70), Timestamp(71));
    assert_eq!(r.drain(), vec![(ContainerDied, "c1".into()), (ContainerRemoved, "c1".into())]);
    let gone = r.event("uid1", "sb1", Ev::ContainerDeletedEvent, 80);
    r.evented.process_event(&gone, Timestamp(81));
    assert_eq!(r.cache.modified("uid1"), None, "pod forgotten with its last sandbox");
    // Kept the IP of the dead pod? Nothing is cached any more; the event itself had it.
    assert_eq!(r.drain(), vec![(ContainerDied, "sb1".into()), (ContainerRemoved, "sb1".into())]);
}

#[tokio::test]
async fn event_without_sandbox_status_triggers_a_relist_instead_of_being_dropped() {
    let r = rig();
    one_pod(&r);
    r.generic.set_relist(EVENTED_RELIST);
    let (trigger, shutdown) = crate::shutdown::channel();
    let run = tokio::spawn(Arc::clone(&r.generic).run(shutdown));
    wait_until(|| r.metrics.relists.get() >= 1).await;
    let mut ev = r.event("uid1", "c1", Ev::ContainerStartedEvent, 60);
    ev.pod_sandbox_status = None; // containerd#7785
    assert!(!r.evented.process_event(&ev, Timestamp(61)));
    wait_until(|| r.metrics.relists.get() >= 2).await;
    trigger.fire();
    run.await.expect("relist loop");
}

// ----- generic relist -----

#[tokio::test]
async fn relist_reports_changes_and_inspects_only_changed_pods() {
    let mut r = rig();
    one_pod(&r);
    r.fake.with(|w| {
        w.sandboxes.push(sandbox("sb2", "uid2", true, 20));
        w.containers.push(container("c2", "sb2", "main", S::ContainerRunning, 21));
    });
    let first = r.generic.relist().await.expect("relist");
    assert_eq!(first.inspected, 2);
    let mut evs = r.drain();
    evs.sort();
    // c1 is created (ContainerChanged is not sent), sandboxes and c2 started.
    assert_eq!(
        evs,
        vec![(ContainerStarted, "c2".into()), (ContainerStarted, "sb1".into()), (ContainerStarted, "sb2".into())]
    );
    r.set_container("c1", S::ContainerRunning);
    let inspections = r.fake.with(|w| w.inspections);
    let second = r.generic.relist().await.expect("relist");
    assert_eq!(second.inspected, 1, "only uid1 changed");
    assert_eq!(r.fake.with(|w| w.inspections), inspections + 1);
    assert_eq!(
        second.changes,
        vec![generic::ContainerChange { pod: "uid1".into(), container: "c1".into(), old: PlegState::Unknown, new: PlegState::Running }]
    );
    assert_eq!(r.drain(), vec![(ContainerStarted, "c1".into())]);
    assert!(r.cache.global_time().is_some_and(|g| g >= second.started));
}

#[tokio::test]
async fn failed_inspection_is_retried_and_the_change_reported_once_it_succeeds() {
    let mut r = rig();
    one_pod(&r);
    r.generic.relist().await.expect("relist");
    r.drain();
    r.set_container("c1", S::ContainerExited);
    r.fake.with(|w| w.failing.push("sb1".into()));
    let failed = r.generic.relist().await.expect("relist");
    assert!(failed.changes.is_empty() && r.drain().is_empty());
    r.fake.with(|w| w.failing.clear());
    let retried = r.generic.relist().await.expect("relist");
    assert_eq!(retried.changes.len(), 1);
    assert_eq!(r.drain(), vec![(ContainerDied, "c1".into())]);
}

#[tokio::test]
async fn relist_does_not_repeat_events_an_event_already_delivered() {
    let mut r = rig();
    one_pod(&r);
    r.generic.relist().await.expect("relist");
    r.drain();
    // The runtime's STOPPED event at t=1000 arrives before the relist inspects (t≈51).
    r.set_container("c1", S::ContainerExited);
    r.evented.process_event(&r.event("uid1", "c1", Ev::ContainerStoppedEvent, 1000), Timestamp(1001));
    assert_eq!(r.drain(), vec![(ContainerDied, "c1".into())]);
    let report = r.generic.relist().await.expect("relist");
    assert_eq!(report.changes.len(), 1, "the relist still sees the change");
    assert!(r.drain().is_empty(), "but the cache refused the older status, so no second ContainerDied");
    assert_eq!(r.cache.modified("uid1"), Some(Timestamp(1000)));
}

#[tokio::test]
async fn pod_gone_from_the_runtime_is_deleted_from_the_cache() {
    let mut r = rig();
    one_pod(&r);
    r.generic.relist().await.expect("relist");
    r.clear_runtime();
    r.drain();
    r.generic.relist().await.expect("relist");
    assert_eq!(r.drain_sorted(), one_pod_gone());
    assert_eq!(r.cache.modified("uid1"), None);
}

#[tokio::test]
async fn pod_known_only_from_events_and_lost_by_a_restarted_runtime_is_reported_removed() {
    let mut r = rig();
    one_pod_known_only_from_events(&mut r).await;
    // The runtime restarts with no records (its processes died with it).
    r.clear_runtime();
    let report = r.generic.relist().await.expect("relist");
    assert_eq!(r.drain_sorted(), one_pod_gone());
    assert_eq!(report.changes.len(), 2, "{:?}", report.changes);
    assert_eq!(r.cache.modified("uid1"), None, "the cache no longer says the container runs");
    // Nothing is reported twice.
    r.generic.relist().await.expect("relist");
    assert!(r.drain().is_empty());
}

#[tokio::test]
async fn pod_known_only_from_events_is_not_reported_again_by_a_relist_that_agrees() {
    let mut r = rig();
    one_pod_known_only_from_events(&mut r).await;
    let report = r.generic.relist().await.expect("relist");
    assert!(report.changes.is_empty(), "the cached status already says so: {:?}", report.changes);
    assert!(r.drain().is_empty());
}

#[tokio::test]
async fn health_fails_before_the_first_relist_and_after_the_threshold() {
    let r = rig();
    assert!(r.generic.healthy().is_err());
    r.generic.relist().await.expect("relist");
    let now = Instant::now();
    assert!(r.generic.healthy_at(now).is_ok());
    assert!(r.generic.healthy_at(now + Duration::from_secs(179)).is_ok());
    assert!(r.generic.healthy_at(now + Duration::from_secs(181)).is_err(), "3 min generic threshold");
    r.generic.set_relist(EVENTED_RELIST);
    assert!(r.generic.healthy_at(now + Duration::from_secs(181)).is_ok(), "10 min while evented");
    assert!(r.generic.healthy_at(now + Duration::from_secs(601)).is_err());
}

// ----- evented connection driver on the fake -----

#[tokio::test]
async fn unimplemented_runtime_falls_back_to_generic_relisting() {
    let r = rig();
    r.fake.with(|w| w.no_events = true);
    let (trigger, shutdown) = crate::shutdown::channel();
    let mut conn = r.evented.connection();
    let run = tokio::spawn(Arc::clone(&r.evented).run(shutdown));
    let state = tokio::time::timeout(Duration::from_secs(2), conn.wait_for(|s| *s == connection::ConnectionState::Relisting))
        .await
        .expect("falls back")
        .map(|s| *s)
        .expect("state");
    assert_eq!(state, connection::ConnectionState::Relisting);
    assert_eq!(r.generic.relist_duration(), GENERIC_RELIST);
    assert_eq!(r.metrics.connection_errors.get(), 1);
    trigger.fire();
    run.await.expect("run");
}

#[tokio::test]
async fn stream_end_relists_at_1s_then_reconnects_and_returns_to_300s() {
    let r = rig();
    let feed = r.fake.next_stream();
    let (trigger, shutdown) = crate::shutdown::channel();
    let mut conn = r.evented.connection();
    let run = tokio::spawn(Arc::clone(&r.evented).run(shutdown));
    conn.wait_for(|s| s.is_streaming()).await.expect("streaming");
    assert_eq!(r.generic.relist_duration(), EVENTED_RELIST);
    let _second = r.fake.next_stream(); // the retry "at once" will find this one
    drop(feed); // stream ends
    conn.wait_for(|s| !s.is_streaming()).await.expect("backing off");
    tokio::time::timeout(Duration::from_secs(2), conn.wait_for(|s| s.is_streaming()))
        .await
        .expect("reconnected at once")
        .expect("state");
    assert_eq!(r.metrics.connection_successes.get(), 2);
    assert_eq!(r.metrics.connection_errors.get(), 1);
    assert_eq!(r.generic.relist_duration(), EVENTED_RELIST);
    trigger.fire();
    run.await.expect("run");
}

// ----- duplicate-container guard: what a pod worker gets from the cache -----

#[tokio::test]
async fn global_timestamp_release_is_marked_so_workers_do_not_trust_a_pre_action_status() {
    // kubernetes#123087: worker starts c1 at t=100; the global tick (t=150) comes before the
    // STARTED event (t=120 arriving late). The read must say it was released by the global
    // timestamp, and its status still shows c1 created.
    let r = rig();
    one_pod(&r);
    let created = r.event("uid1", "c1", Ev::ContainerCreatedEvent, 90);
    r.evented.process_event(&created, Timestamp(91));
    let waiter = {
        let cache = Arc::clone(&r.cache);
        tokio::spawn(async move { cache.get_newer_than("uid1", Timestamp(100)).await })
    };
    tokio::time::sleep(Duration::from_millis(10)).await;
    r.cache.update_time(Timestamp(150));
    let read = waiter.await.expect("released");
    assert_eq!(read.freshness, Freshness::Global);
    assert_eq!(read.status.state_of("c1"), PlegState::Unknown);
}

async fn wait_until(cond: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(3);
    while !cond() {
        assert!(Instant::now() < deadline, "condition not met in time");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
