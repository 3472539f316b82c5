//! Evented PLEG (KEP-3386; upstream `pkg/kubelet/pleg/evented.go`).
//!
//! Drives the [`connection`](super::connection) state machine against `GetContainerEvents`,
//! turns each event into a cache write stamped with the runtime's `created_at` and into
//! [`PodLifecycleEvent`]s, runs the [`GenericPleg`] as the safety net (300 s while streaming,
//! 1 s otherwise), advances the cache's global timestamp every
//! [`GLOBAL_CACHE_UPDATE_PERIOD`](super::GLOBAL_CACHE_UPDATE_PERIOD), and counts missed events.
//!
//! Differences from upstream, each fixing a known bug:
//! - events whose sandbox status is missing are not dropped (containerd#7785): a relist is
//!   requested so the change is found at once;
//! - a sandbox's own CREATED/STARTED events update the cache but wake no pod worker (a worker
//!   woken then would see the sandbox but not yet its containers);
//! - the cache reports when a read was released only by the global timestamp, so pod workers
//!   never act on a status that predates their own last action (kubernetes#120942, #123087).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use futures::StreamExt;
use rkube_runtime::cri;
use rkube_runtime::cri::ContainerEventType as Ev;
use tokio::sync::{mpsc, watch};

use super::connection::{self, ConnectionState, Effect, Failure, Input};
use super::generic::{GenericPleg, RelistObserver, RelistReport};
use super::metrics::{CacheSource, PlegMetrics};
use super::missed::{MissedEvents, EVENT_GRACE};
use super::GLOBAL_CACHE_UPDATE_PERIOD;
use super::{PlegState, PodCache, PodLifecycleEvent, PodLifecycleEventType, PodStatus, Timestamp};
use crate::cri::{CriError, EventStream, RuntimeApi};
use crate::shutdown::Shutdown;

/// Whether the stream was up at a relist (only changes found between two relists of one
/// unbroken stream count as missed events).
#[derive(Debug, Default, Clone, Copy)]
struct RelistMark {
    epoch: u64,
    streaming: bool,
}

/// The evented PLEG. Share as `Arc<EventedPleg>`.
pub struct EventedPleg {
    runtime: Arc<dyn RuntimeApi>,
    cache: Arc<PodCache>,
    events: mpsc::Sender<PodLifecycleEvent>,
    metrics: PlegMetrics,
    generic: Arc<GenericPleg>,
    missed: Arc<Mutex<MissedEvents>>,
    state: watch::Sender<ConnectionState>,
    /// Incremented on every successful connection.
    epoch: AtomicU64,
    last_relist: Mutex<RelistMark>,
}

impl std::fmt::Debug for EventedPleg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventedPleg").field("state", &*self.state.borrow()).finish_non_exhaustive()
    }
}

fn classify(err: &CriError) -> Failure {
    if err.is_unimplemented() {
        Failure::Unimplemented
    } else {
        Failure::Other
    }
}

impl EventedPleg {
    /// An evented PLEG over `generic` (which it drives and observes).
    pub fn new(
        runtime: Arc<dyn RuntimeApi>,
        cache: Arc<PodCache>,
        events: mpsc::Sender<PodLifecycleEvent>,
        metrics: PlegMetrics,
        generic: Arc<GenericPleg>,
    ) -> Arc<Self> {
        let pleg = Arc::new(Self {
            runtime,
            cache,
            events,
            metrics,
            generic: Arc::clone(&generic),
            missed: Arc::new(Mutex::new(MissedEvents::default())),
            state: watch::channel(connection::initial().next).0,
            epoch: AtomicU64::new(0),
            last_relist: Mutex::new(RelistMark::default()),
        });
        let observer: std::sync::Weak<dyn RelistObserver> = Arc::downgrade(&pleg) as std::sync::Weak<EventedPleg>;
        generic.set_observer(observer);
        pleg
    }

    /// The generic PLEG underneath.
    pub fn generic(&self) -> &Arc<GenericPleg> {
        &self.generic
    }

    /// Watch the connection state.
    pub fn connection(&self) -> watch::Receiver<ConnectionState> {
        self.state.subscribe()
    }

    /// True while events are flowing (upstream `isEventedPLEGInUse`).
    pub fn in_use(&self) -> bool {
        self.state.borrow().is_streaming()
    }

    /// Health: the generic relist's health at the current threshold, and room in the event
    /// channel (upstream declares evented PLEG unhealthy when the channel is full).
    pub fn healthy(&self) -> Result<(), String> {
        if self.events.capacity() == 0 {
            return Err(format!(
                "EventedPLEG: pleg event channel capacity is full with {} events",
                self.events.max_capacity()
            ));
        }
        self.generic.healthy()
    }

    fn send(&self, ev: PodLifecycleEvent) {
        if self.events.try_send(ev).is_err() {
            self.metrics.discard_events.inc();
            tracing::error!("Evented PLEG: event channel is full, discarded pod lifecycle event");
        }
    }

    fn lock_missed(&self) -> std::sync::MutexGuard<'_, MissedEvents> {
        self.missed.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Applies one runtime event: cache write (newer-only, stamped `created_at`) and lifecycle
    /// events. `received` is the agent's clock at receipt (latency metric). Returns whether the
    /// cache took it (stale events change nothing and wake nobody).
    pub fn process_event(&self, event: &cri::ContainerEventResponse, received: Timestamp) -> bool {
        let latency = (received.as_nanos() - event.created_at).max(0) as f64 / 1e9;
        self.metrics.connection_latency.observe(latency);
        let cid = event.container_id.as_str();
        let kind = Ev::try_from(event.container_event_type).ok();
        let Some(mut status) = PodStatus::from_event(event) else {
            // containerd#7785: do not drop it silently; let a relist catch the change.
            tracing::warn!(container = cid, owner = ?self.generic.owner_of(cid), "Evented PLEG: event without sandbox status; relisting");
            self.generic.request_relist();
            return false;
        };
        let uid = status.id.clone();
        let is_sandbox = status.sandbox_statuses.first().is_some_and(|s| s.id == cid);
        let state = match kind {
            Some(Ev::ContainerDeletedEvent) => PlegState::NonExistent,
            _ => match status.state_of(cid) {
                PlegState::NonExistent => match kind {
                    Some(Ev::ContainerStartedEvent) => PlegState::Running,
                    Some(Ev::ContainerStoppedEvent) => PlegState::Exited,
                    _ => PlegState::Unknown,
                },
                s => s,
            },
        };
        let previous = self.lock_missed().record_event(cid, state);

        // Keep the pod IP once the sandbox is gone (upstream getPodIPs).
        if status.ips.is_empty() {
            let old = self.cache.get(&uid);
            status.ips = old.status.ips.clone();
        }

        let updated = if kind == Some(Ev::ContainerDeletedEvent) && is_sandbox {
            let cached = self.cache.get(&uid);
            if cached.status.newest_sandbox().is_none_or(|s| s.id == cid) {
                self.cache.delete(&uid);
            }
            true
        } else {
            let written = self.cache.set(&uid, status, None, Timestamp(event.created_at));
            if written {
                self.metrics.cache_update(CacheSource::Event);
            }
            written
        };
        if !updated {
            return false;
        }
        let ev = |t| PodLifecycleEvent { id: uid.clone(), r#type: t, data: cid.to_string() };
        match kind {
            Some(Ev::ContainerStartedEvent) if !is_sandbox => self.send(ev(PodLifecycleEventType::ContainerStarted)),
            Some(Ev::ContainerStoppedEvent) => self.send(ev(PodLifecycleEventType::ContainerDied)),
            Some(Ev::ContainerDeletedEvent) => {
                if previous != PlegState::Exited {
                    self.send(ev(PodLifecycleEventType::ContainerDied));
                }
                self.send(ev(PodLifecycleEventType::ContainerRemoved));
            }
            _ => {} // CREATED (and a sandbox's STARTED): cache only.
        }
        true
    }

    fn apply(&self, effects: &[Effect]) {
        for effect in effects {
            match effect {
                Effect::OpenStream => {} // the Connecting state makes the call
                Effect::SetRelist(d) => self.generic.set_relist(*d),
                Effect::RelistNow => self.generic.request_relist(),
                Effect::CountSuccess => {
                    self.epoch.fetch_add(1, Ordering::SeqCst);
                    self.metrics.connection_successes.inc();
                }
                Effect::CountError => self.metrics.connection_errors.inc(),
            }
        }
    }

    /// Runs everything until `shutdown`: the connection loop, the generic relist loop, the
    /// global cache timestamp ticker.
    pub async fn run(self: Arc<Self>, shutdown: Shutdown) {
        let relist = tokio::spawn(Arc::clone(&self.generic).run(shutdown.clone()));
        let ticker = tokio::spawn(tick_global(Arc::clone(&self.cache), shutdown.clone()));
        self.connect_loop(shutdown).await;
        let _ = relist.await;
        let _ = ticker.await;
    }

    async fn connect_loop(&self, mut shutdown: Shutdown) {
        let first = connection::initial();
        let mut state = first.next;
        self.apply(&first.effects);
        let mut stream: Option<EventStream> = None;
        loop {
            let input = match state {
                ConnectionState::Connecting { .. } => {
                    tokio::select! {
                        res = self.runtime.get_container_events() => match res {
                            Ok(s) => { stream = Some(s); Input::Connected }
                            Err(err) => {
                                tracing::info!(%err, "Evented PLEG: cannot get container events");
                                Input::Failed(classify(&err))
                            }
                        },
                        _ = shutdown.wait() => return,
                    }
                }
                ConnectionState::Streaming { .. } => match stream.as_mut() {
                    None => Input::Failed(Failure::Other),
                    Some(s) => tokio::select! {
                        item = s.next() => match item {
                            Some(Ok(event)) => {
                                self.process_event(&event, Timestamp::now());
                                continue;
                            }
                            Some(Err(err)) => {
                                tracing::info!(%err, "Evented PLEG: container event stream failed");
                                stream = None;
                                Input::Failed(classify(&err))
                            }
                            None => {
                                tracing::info!("Evented PLEG: container event stream ended");
                                stream = None;
                                Input::Failed(Failure::Other)
                            }
                        },
                        _ = shutdown.wait() => return,
                    },
                },
                ConnectionState::BackingOff { retry_at, .. } => {
                    tokio::select! {
                        _ = tokio::time::sleep_until(retry_at.into()) => Input::RetryDue,
                        _ = shutdown.wait() => return,
                    }
                }
                ConnectionState::Relisting => {
                    shutdown.wait().await;
                    return;
                }
            };
            let step = connection::step(&state, input, Instant::now());
            state = step.next;
            // send_replace: `send` drops the value when nobody subscribed, and `in_use` reads it.
            self.state.send_replace(state);
            self.apply(&step.effects);
        }
    }
}

/// Advances the cache's global timestamp periodically so no pod worker waits forever on an
/// event that never comes (KEP-3386 *Risks and Mitigations*).
async fn tick_global(cache: Arc<PodCache>, mut shutdown: Shutdown) {
    let mut interval = tokio::time::interval(GLOBAL_CACHE_UPDATE_PERIOD);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = interval.tick() => cache.update_time(Timestamp::now()),
            _ = shutdown.wait() => return,
        }
    }
}

impl RelistObserver for EventedPleg {
    fn relist_done(&self, report: &RelistReport) {
        let mark = RelistMark { epoch: self.epoch.load(Ordering::SeqCst), streaming: self.in_use() };
        let prev = std::mem::replace(&mut *self.last_relist.lock().unwrap_or_else(|p| p.into_inner()), mark);
        let covered = prev.streaming && mark.streaming && prev.epoch == mark.epoch;
        if !covered || report.changes.is_empty() {
            return;
        }
        self.lock_missed().relist_found(&report.changes, Instant::now());
        // Settle after the grace period: events in flight during the relist still count.
        let metrics = self.metrics.clone();
        let missed = Arc::clone(&self.missed);
        tokio::spawn(async move {
            tokio::time::sleep(EVENT_GRACE).await;
            let n = missed.lock().unwrap_or_else(|p| p.into_inner()).settle(Instant::now());
            for _ in 0..n {
                metrics.missed_events.inc();
            }
        });
    }
}
