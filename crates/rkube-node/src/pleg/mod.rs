//! Pod Lifecycle Event Generator (PLEG): turns runtime state changes into [`PodLifecycleEvent`]s
//! and keeps the [`cache::PodCache`] of pod statuses that pod workers read.
//!
//! Two generators, as in kubelet (`pkg/kubelet/pleg/`):
//! - [`generic::GenericPleg`] relists (`ListPodSandbox` + `ListContainers`) every second,
//!   diffs against the previous relist and inspects pods that changed (`generic.go`).
//! - [`evented::EventedPleg`] (KEP-3386, feature gate `EventedPLEG`) consumes
//!   `GetContainerEvents`, stamps each cache update with the runtime's `created_at`, keeps the
//!   generic relist as a 300 s safety net, counts relist-found changes no event reported
//!   (`kube_pod_missed_events`), and falls back to 1 s relisting when the runtime answers
//!   `UNIMPLEMENTED` or while the stream is down. Its connection lifecycle is the pure state
//!   machine in [`connection`].
//!
//! Time: every timestamp here is a [`Timestamp`] (ns since the Unix epoch). Statuses are stamped
//! by the runtime (`PodSandboxStatusResponse.timestamp`, `ContainerEventResponse.created_at`) so
//! both generators compare on one clock (the upstream mismatch of kubernetes#127814 and the
//! seconds-vs-nanoseconds mix-up fixed in kubernetes#124297 cannot happen); only runtimes that
//! send no timestamp (containerd 1.6) get the agent's clock, read before the inspection.

pub mod cache;
pub mod connection;
pub mod evented;
pub mod generic;
pub mod metrics;
pub mod missed;
pub mod status;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub use cache::PodCache;
pub use evented::EventedPleg;
pub use generic::GenericPleg;
pub use metrics::PlegMetrics;
pub use status::PodStatus;

/// A point in time: nanoseconds since the Unix epoch (the CRI's unit for every timestamp).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(pub i64);

impl Timestamp {
    /// The agent's wall clock now.
    pub fn now() -> Self {
        Self::from_system(SystemTime::now())
    }

    /// A `SystemTime` in ns (0 before 1970).
    pub fn from_system(t: SystemTime) -> Self {
        Timestamp(t.duration_since(UNIX_EPOCH).map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)).unwrap_or(0))
    }

    /// Nanoseconds since the epoch.
    pub fn as_nanos(self) -> i64 {
        self.0
    }

    /// Seconds since the epoch as a float (metrics).
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / 1e9
    }

    /// `self - d`, saturating.
    pub fn minus(self, d: Duration) -> Self {
        Timestamp(self.0.saturating_sub(i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)))
    }
}

/// Kind of a [`PodLifecycleEvent`] (upstream `pleg.PodLifeCycleEventType`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PodLifecycleEventType {
    /// A container (or sandbox) is running.
    ContainerStarted,
    /// A container (or sandbox) exited.
    ContainerDied,
    /// A container is gone from the runtime.
    ContainerRemoved,
    /// A container moved to an unknown/created state (not sent to pod workers, as upstream).
    ContainerChanged,
    /// Something about the pod changed; resync it.
    PodSync,
}

/// One event for a pod worker (upstream `pleg.PodLifecycleEvent`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodLifecycleEvent {
    /// The pod's uid.
    pub id: String,
    /// What happened.
    pub r#type: PodLifecycleEventType,
    /// The container (or sandbox) id the event is about; empty for `PodSync`.
    pub data: String,
}

/// Relist period and health threshold (upstream `pleg.RelistDuration`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RelistDuration {
    /// Time between relists.
    pub relist_period: Duration,
    /// `/healthz` fails when no relist completed for this long.
    pub relist_threshold: Duration,
}

/// Generic PLEG: relist every 1 s, unhealthy after 3 min (kubelet `genericPlegRelistPeriod`,
/// `genericPlegRelistThreshold`).
pub const GENERIC_RELIST: RelistDuration =
    RelistDuration { relist_period: Duration::from_secs(1), relist_threshold: Duration::from_secs(180) };

/// Evented PLEG: the generic relist every 300 s, unhealthy after 10 min (kubelet
/// `eventedPlegRelistPeriod`, `eventedPlegRelistThreshold`).
pub const EVENTED_RELIST: RelistDuration =
    RelistDuration { relist_period: Duration::from_secs(300), relist_threshold: Duration::from_secs(600) };

/// Capacity of the PLEG → pod worker channel (kubelet `plegChannelCapacity`).
pub const PLEG_CHANNEL_CAPACITY: usize = 1000;

/// How often the evented PLEG advances the cache's global timestamp so no pod worker waits
/// forever on a missed event (upstream `globalCacheUpdatePeriod`, made equal to the generic
/// relist period by kubernetes#124297's follow-ups).
pub const GLOBAL_CACHE_UPDATE_PERIOD: Duration = Duration::from_secs(1);

/// A container's state as PLEG compares it (upstream `plegContainerState`): CRI `CREATED` and
/// `UNKNOWN` are both `Unknown`; a sandbox counts as a container (Ready = running).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PlegState {
    /// Running (or a Ready sandbox).
    Running,
    /// Exited (or a NotReady sandbox).
    Exited,
    /// Created-not-started or unknown.
    Unknown,
    /// Not present in the runtime.
    NonExistent,
}

impl PlegState {
    /// From a CRI `ContainerState` value.
    pub fn from_container(state: i32) -> Self {
        use rkube_runtime::cri::ContainerState as S;
        match S::try_from(state) {
            Ok(S::ContainerRunning) => PlegState::Running,
            Ok(S::ContainerExited) => PlegState::Exited,
            _ => PlegState::Unknown,
        }
    }

    /// From a CRI `PodSandboxState` value.
    pub fn from_sandbox(state: i32) -> Self {
        use rkube_runtime::cri::PodSandboxState as S;
        match S::try_from(state) {
            Ok(S::SandboxReady) => PlegState::Running,
            _ => PlegState::Exited,
        }
    }
}

/// The lifecycle events for one container moving from `old` to `new` (upstream
/// `generateEvents`): running → `ContainerStarted`; exited → `ContainerDied`; unknown →
/// `ContainerChanged`; gone → `ContainerRemoved`, preceded by `ContainerDied` unless it was
/// already reported exited.
pub fn generate_events(pod: &str, cid: &str, old: PlegState, new: PlegState) -> Vec<PodLifecycleEvent> {
    if old == new {
        return vec![];
    }
    let ev = |t| PodLifecycleEvent { id: pod.to_string(), r#type: t, data: cid.to_string() };
    match new {
        PlegState::Running => vec![ev(PodLifecycleEventType::ContainerStarted)],
        PlegState::Exited => vec![ev(PodLifecycleEventType::ContainerDied)],
        PlegState::Unknown => vec![ev(PodLifecycleEventType::ContainerChanged)],
        PlegState::NonExistent if old == PlegState::Exited => vec![ev(PodLifecycleEventType::ContainerRemoved)],
        PlegState::NonExistent => {
            vec![ev(PodLifecycleEventType::ContainerDied), ev(PodLifecycleEventType::ContainerRemoved)]
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use PlegState::*;
    use PodLifecycleEventType::*;

    fn kinds(old: PlegState, new: PlegState) -> Vec<PodLifecycleEventType> {
        generate_events("p", "c", old, new).into_iter().map(|e| e.r#type).collect()
    }

    #[test]
    fn state_transitions_map_to_upstream_event_kinds() {
        // (old, new, expected) — the table of generic.go's generateEvents.
        let table = [
            (Running, Running, vec![]),
            (NonExistent, Running, vec![ContainerStarted]),
            (Unknown, Running, vec![ContainerStarted]),
            (Running, Exited, vec![ContainerDied]),
            (Running, Unknown, vec![ContainerChanged]),
            (Exited, NonExistent, vec![ContainerRemoved]),
            (Running, NonExistent, vec![ContainerDied, ContainerRemoved]),
            (Unknown, NonExistent, vec![ContainerDied, ContainerRemoved]),
        ];
        for (old, new, want) in table {
            assert_eq!(kinds(old, new), want, "{old:?} -> {new:?}");
        }
    }
}

#[cfg(test)]
mod fake;
#[cfg(test)]
#[path = "tests.rs"]
mod pleg_tests;
