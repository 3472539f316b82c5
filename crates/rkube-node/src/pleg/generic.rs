//! Generic PLEG: periodic relisting (upstream `pkg/kubelet/pleg/generic.go`).
//!
//! Each relist lists sandboxes and containers, diffs every container's (and sandbox's)
//! [`PlegState`] against the previous relist, inspects the pods that changed
//! (`PodSandboxStatus` per sandbox; the runtime's timestamp stamps the status), writes the cache
//! with the newer-only setter, and sends [`PodLifecycleEvent`]s. A pod whose inspection fails
//! keeps its old record, so the change is found again next time. When the cache refuses a
//! status because a newer one is there (an event got it first), the events are not sent
//! again (as upstream does under `EventedPLEG`).
//!
//! The relist loop runs at the period set by [`GenericPleg::set_relist`] (1 s alone, 300 s under
//! the evented PLEG) and relists at once on [`GenericPleg::request_relist`].

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Instant;

use tokio::sync::{mpsc, watch, Notify};

use super::metrics::{CacheSource, PlegMetrics};
use super::{generate_events, PlegState, PodCache, PodLifecycleEvent, PodLifecycleEventType, PodStatus};
use super::{RelistDuration, Timestamp, GENERIC_RELIST};
use crate::cri::{CriError, RuntimeApi, LABEL_POD_UID};
use crate::shutdown::Shutdown;

/// Errors of a relist.
#[derive(Debug, thiserror::Error)]
pub enum RelistError {
    /// Listing sandboxes or containers failed; nothing was changed.
    #[error("relist: {0}")]
    List(#[from] CriError),
}

/// A container (or sandbox) whose state differs from the previous relist.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContainerChange {
    /// Pod uid.
    pub pod: String,
    /// Container or sandbox id.
    pub container: String,
    /// State at the previous relist.
    pub old: PlegState,
    /// State now.
    pub new: PlegState,
}

/// What one relist did.
#[derive(Clone, Debug, Default)]
pub struct RelistReport {
    /// State changes found (for pods whose record was updated).
    pub changes: Vec<ContainerChange>,
    /// Pods inspected.
    pub inspected: usize,
    /// Pods whose cache entry was written.
    pub cache_writes: usize,
    /// Agent time the relist started.
    pub started: Timestamp,
}

/// Receives every completed relist's report (the evented PLEG's missed-event detection).
pub trait RelistObserver: Send + Sync + 'static {
    /// Called after each successful relist.
    fn relist_done(&self, report: &RelistReport);
}

/// One pod as a relist saw it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct RelistPod {
    sandboxes: Vec<String>,
    states: BTreeMap<String, PlegState>,
}

#[derive(Debug, Default)]
struct RelistState {
    /// Pod uid → what the last successful relist recorded.
    records: HashMap<String, RelistPod>,
    /// Pods whose inspection failed; retried next relist.
    reinspect: HashSet<String>,
    /// Start of the previous relist (interval metric).
    last_start: Option<Instant>,
}

/// The relist record a cached status amounts to (sandboxes and containers with their states).
fn record_of(status: &PodStatus) -> RelistPod {
    let mut pod = RelistPod::default();
    for s in &status.sandbox_statuses {
        pod.sandboxes.push(s.id.clone());
        pod.states.insert(s.id.clone(), PlegState::from_sandbox(s.state));
    }
    for c in &status.container_statuses {
        pod.states.insert(c.id.clone(), PlegState::from_container(c.state));
    }
    pod
}

/// The generic PLEG. Share as `Arc<GenericPleg>`.
pub struct GenericPleg {
    runtime: Arc<dyn RuntimeApi>,
    cache: Arc<PodCache>,
    events: mpsc::Sender<PodLifecycleEvent>,
    metrics: PlegMetrics,
    /// Serializes relists (upstream `relistLock`).
    state: tokio::sync::Mutex<RelistState>,
    /// Start of the last successful relist (health).
    relist_time: Mutex<Option<Instant>>,
    relist: watch::Sender<RelistDuration>,
    relist_now: Notify,
    /// Container/sandbox id → pod uid, as of the last relist.
    owners: Mutex<HashMap<String, String>>,
    /// Weak: the observer (the evented PLEG) owns this generic PLEG.
    observer: OnceLock<Weak<dyn RelistObserver>>,
}

impl std::fmt::Debug for GenericPleg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GenericPleg").field("relist", &*self.relist.borrow()).finish_non_exhaustive()
    }
}

impl GenericPleg {
    /// A generic PLEG relisting every second until told otherwise.
    pub fn new(
        runtime: Arc<dyn RuntimeApi>,
        cache: Arc<PodCache>,
        events: mpsc::Sender<PodLifecycleEvent>,
        metrics: PlegMetrics,
    ) -> Arc<Self> {
        Arc::new(Self {
            runtime,
            cache,
            events,
            metrics,
            state: tokio::sync::Mutex::new(RelistState::default()),
            relist_time: Mutex::new(None),
            relist: watch::channel(GENERIC_RELIST).0,
            relist_now: Notify::new(),
            owners: Mutex::new(HashMap::new()),
            observer: OnceLock::new(),
        })
    }

    /// Installs the observer of relist reports (once; held weakly).
    pub fn set_observer(&self, observer: Weak<dyn RelistObserver>) {
        let _ = self.observer.set(observer);
    }

    /// Changes the relist period and health threshold (upstream `Update`).
    pub fn set_relist(&self, d: RelistDuration) {
        self.relist.send_if_modified(|cur| {
            let changed = *cur != d;
            *cur = d;
            changed
        });
    }

    /// The current relist period and threshold.
    pub fn relist_duration(&self) -> RelistDuration {
        *self.relist.borrow()
    }

    /// Asks the loop to relist at once (coalesces).
    pub fn request_relist(&self) {
        self.relist_now.notify_one();
    }

    /// The pod uid owning a container or sandbox id, as of the last relist.
    pub fn owner_of(&self, id: &str) -> Option<String> {
        self.owners.lock().unwrap_or_else(|p| p.into_inner()).get(id).cloned()
    }

    /// Health at `now` (upstream `Healthy`): fails before the first relist and when the last
    /// one started longer ago than the threshold. Updates `kubelet_pleg_last_seen_seconds`.
    pub fn healthy_at(&self, now: Instant) -> Result<(), String> {
        let last = *self.relist_time.lock().unwrap_or_else(|p| p.into_inner());
        let Some(last) = last else { return Err("pleg has yet to be successful".into()) };
        let elapsed = now.saturating_duration_since(last);
        let threshold = self.relist.borrow().relist_threshold;
        if elapsed > threshold {
            return Err(format!("pleg was last seen active {elapsed:?} ago; threshold is {threshold:?}"));
        }
        Ok(())
    }

    /// [`Self::healthy_at`] now.
    pub fn healthy(&self) -> Result<(), String> {
        self.healthy_at(Instant::now())
    }

    fn send(&self, ev: PodLifecycleEvent) {
        if self.events.try_send(ev).is_err() {
            self.metrics.discard_events.inc();
            tracing::error!("PLEG event channel is full, discarding relist event");
        }
    }

    /// Inspects a pod: `PodSandboxStatus` of each of its sandboxes (falling back to
    /// `ContainerStatus` calls when the runtime sends no container statuses).
    pub async fn inspect(&self, uid: &str, sandboxes: &[String]) -> Result<PodStatus, CriError> {
        let fallback = Timestamp::now();
        let mut inspections = Vec::new();
        for id in sandboxes {
            let resp = match self.runtime.pod_sandbox_status(id).await {
                Ok(r) => r,
                Err(e) if e.is_not_found() => continue, // removed since the list
                Err(e) => return Err(e),
            };
            let Some(status) = resp.status else { continue };
            let containers = if resp.timestamp == 0 && resp.containers_statuses.is_empty() {
                // An older runtime (containerd 1.6): no containers in PodSandboxStatus.
                self.runtime.sandbox_container_statuses(id).await?
            } else {
                resp.containers_statuses
            };
            inspections.push((status, containers, resp.timestamp));
        }
        Ok(PodStatus::from_inspections(uid, inspections, fallback))
    }

    /// One relist (upstream `Relist`).
    pub async fn relist(&self) -> Result<RelistReport, RelistError> {
        let mut st = self.state.lock().await;
        let start = Instant::now();
        let started = Timestamp::now();
        if let Some(prev) = st.last_start {
            self.metrics.relist_interval.observe(start.duration_since(prev).as_secs_f64());
        }
        st.last_start = Some(start);
        let listed = async {
            let sandboxes = self.runtime.list_pod_sandbox().await?;
            let containers = self.runtime.list_containers().await?;
            Ok::<_, CriError>((sandboxes, containers))
        }
        .await;
        let (sandboxes, containers) = match listed {
            Ok(l) => l,
            Err(e) => {
                self.metrics.relist_duration.observe(start.elapsed().as_secs_f64());
                return Err(e.into());
            }
        };
        *self.relist_time.lock().unwrap_or_else(|p| p.into_inner()) = Some(start);
        self.metrics.last_seen.set(started.as_secs_f64());

        // Group by pod uid: sandboxes by metadata, containers through their sandbox.
        let mut current: HashMap<String, RelistPod> = HashMap::new();
        let mut owners: HashMap<String, String> = HashMap::new();
        for s in &sandboxes {
            let uid = s
                .metadata
                .as_ref()
                .map(|m| m.uid.clone())
                .or_else(|| s.labels.get(LABEL_POD_UID).cloned())
                .unwrap_or_default();
            owners.insert(s.id.clone(), uid.clone());
            let pod = current.entry(uid).or_default();
            pod.sandboxes.push(s.id.clone());
            pod.states.insert(s.id.clone(), PlegState::from_sandbox(s.state));
        }
        for c in &containers {
            let uid = owners.get(&c.pod_sandbox_id).cloned().or_else(|| c.labels.get(LABEL_POD_UID).cloned());
            let Some(uid) = uid else { continue };
            owners.insert(c.id.clone(), uid.clone());
            current.entry(uid).or_default().states.insert(c.id.clone(), PlegState::from_container(c.state));
        }

        let mut report = RelistReport { started, ..Default::default() };
        let mut reinspect_next = HashSet::new();
        // Pods only events told about (under the evented PLEG the relist runs every 300 s, so
        // it may never have recorded them): their cached status stands in for the missing
        // record. Without it, a restarted runtime that lost such pods would change nothing here,
        // and the cache would keep their containers running forever.
        let known: HashMap<String, RelistPod> = self
            .cache
            .get_all()
            .into_iter()
            .filter(|s| !st.records.contains_key(&s.id))
            .map(|s| (s.id.clone(), record_of(&s)))
            .filter(|(_, pod)| !pod.states.is_empty())
            .collect();
        let pods: BTreeSet<String> =
            st.records.keys().chain(current.keys()).chain(known.keys()).cloned().collect();
        for uid in pods {
            let old = st.records.get(&uid).or_else(|| known.get(&uid));
            let new = current.get(&uid);
            let ids: BTreeSet<&String> =
                old.iter().chain(new.iter()).flat_map(|p| p.states.keys()).collect();
            let mut events = Vec::new();
            let mut changes = Vec::new();
            for cid in ids {
                let o = old.and_then(|p| p.states.get(cid)).copied().unwrap_or(PlegState::NonExistent);
                let n = new.and_then(|p| p.states.get(cid)).copied().unwrap_or(PlegState::NonExistent);
                if o != n {
                    changes.push(ContainerChange { pod: uid.clone(), container: cid.clone(), old: o, new: n });
                    events.extend(generate_events(&uid, cid, o, n));
                }
            }
            if events.is_empty() && !st.reinspect.contains(&uid) {
                continue;
            }
            let updated = match new {
                None => {
                    self.cache.delete(&uid);
                    true
                }
                Some(pod) => {
                    report.inspected += 1;
                    match self.inspect(&uid, &pod.sandboxes).await {
                        Ok(status) => {
                            let ts = status.timestamp;
                            let written = self.cache.set(&uid, status, None, ts);
                            if written {
                                self.metrics.cache_update(CacheSource::Relist);
                                report.cache_writes += 1;
                            }
                            written
                        }
                        Err(err) => {
                            tracing::warn!(pod = %uid, %err, "PLEG: ignoring events for pod, inspection failed");
                            reinspect_next.insert(uid.clone());
                            continue;
                        }
                    }
                }
            };
            match new {
                Some(pod) => st.records.insert(uid.clone(), pod.clone()),
                None => st.records.remove(&uid),
            };
            report.changes.extend(changes);
            if updated {
                for ev in events {
                    if ev.r#type != PodLifecycleEventType::ContainerChanged {
                        self.send(ev);
                    }
                }
            }
        }
        // Pods without changes keep their record (it equals the current one).
        st.reinspect = reinspect_next;
        *self.owners.lock().unwrap_or_else(|p| p.into_inner()) = owners;
        // Everything changed up to `started` is in the cache now.
        self.cache.update_time(started);
        self.metrics.relist_duration.observe(start.elapsed().as_secs_f64());
        self.metrics.relists.inc();
        drop(st);
        if let Some(observer) = self.observer.get().and_then(Weak::upgrade) {
            observer.relist_done(&report);
        }
        Ok(report)
    }

    /// Relists now and then at the current period (re-read whenever it changes), and at once on
    /// [`Self::request_relist`], until `shutdown` fires.
    pub async fn run(self: Arc<Self>, mut shutdown: Shutdown) {
        let mut period_rx = self.relist.subscribe();
        loop {
            if let Err(err) = self.relist().await {
                tracing::warn!(%err, "GenericPLEG: unable to relist");
            }
            let last = Instant::now();
            loop {
                let period = period_rx.borrow_and_update().relist_period;
                tokio::select! {
                    _ = tokio::time::sleep_until((last + period).into()) => break,
                    _ = self.relist_now.notified() => break,
                    changed = period_rx.changed() => {
                        if changed.is_err() { return; }
                        continue;
                    }
                    _ = shutdown.wait() => return,
                }
            }
        }
    }
}
