//! Pod phase from the spec and the runtime's status (upstream `kubelet_pods.go` `getPhase`).
//!
//! - an init container that failed under `restartPolicy: Never` → Failed;
//! - init containers not all succeeded → Pending;
//! - any regular container waiting for its first start → Pending;
//! - any running → Running;
//! - all stopped: `Always` → Running (they restart); all succeeded → Succeeded; `Never` →
//!   Failed; `OnFailure` → Running (the failed ones restart).
//!
//! A container created again after exiting (a restart) counts as stopped, as upstream counts a
//! waiting container with a last termination state.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::Pod;

use super::actions::current_containers;
use crate::pleg::status::container_name;
use crate::pleg::{PlegState, PodStatus};

/// `status.phase`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Not all containers started yet.
    Pending,
    /// At least one container running or restarting.
    Running,
    /// All containers exited 0 and will not restart.
    Succeeded,
    /// All containers exited, at least one not 0, and will not restart.
    Failed,
}

impl Phase {
    /// The API string.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Pending => "Pending",
            Phase::Running => "Running",
            Phase::Succeeded => "Succeeded",
            Phase::Failed => "Failed",
        }
    }

    /// Succeeded or Failed.
    pub fn is_terminal(self) -> bool {
        matches!(self, Phase::Succeeded | Phase::Failed)
    }
}

/// `spec.restartPolicy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RestartPolicy {
    /// Restart always (the default).
    Always,
    /// Restart on non-zero exit.
    OnFailure,
    /// Never restart.
    Never,
}

/// The pod's restart policy (`Always` when unset or unknown).
pub fn restart_policy(pod: &Pod) -> RestartPolicy {
    match pod.spec.as_ref().and_then(|s| s.restart_policy.as_deref()) {
        Some("Never") => RestartPolicy::Never,
        Some("OnFailure") => RestartPolicy::OnFailure,
        _ => RestartPolicy::Always,
    }
}

/// The phase the runtime status implies.
pub fn pod_phase(pod: &Pod, status: &PodStatus) -> Phase {
    pod_phase_with_lost(pod, status, &HashMap::new())
}

/// [`pod_phase`], where `lost` names regular containers the runtime no longer has but the last
/// API status reported as run (a restarted runtime lost them) → whether that run succeeded.
/// They count as stopped, not waiting, as upstream `getPhase` counts a waiting container with a
/// last termination: a `Never` pod whose running container was lost is `Failed`, not `Pending`
/// (and is not started again).
pub fn pod_phase_with_lost(pod: &Pod, status: &PodStatus, lost: &HashMap<String, bool>) -> Phase {
    let Some(spec) = pod.spec.as_ref() else { return Phase::Pending };
    let policy = restart_policy(pod);
    let current = current_containers(status);
    let latest = |name: &str| current.iter().copied().find(|c| container_name(c) == name);

    let mut init_pending = false;
    for ic in spec.init_containers.iter().flatten() {
        match latest(&ic.name) {
            Some(c) if PlegState::from_container(c.state) == PlegState::Exited => {
                if c.exit_code != 0 {
                    if policy == RestartPolicy::Never {
                        return Phase::Failed;
                    }
                    init_pending = true;
                }
            }
            _ => init_pending = true,
        }
    }
    if init_pending {
        return Phase::Pending;
    }

    let (mut waiting, mut running, mut stopped, mut succeeded) = (0, 0, 0, 0);
    for c in &spec.containers {
        match latest(&c.name) {
            None => match lost.get(&c.name) {
                Some(ok) => {
                    stopped += 1;
                    succeeded += usize::from(*ok);
                }
                None => waiting += 1,
            },
            Some(s) => match PlegState::from_container(s.state) {
                PlegState::Running => running += 1,
                PlegState::Exited => {
                    stopped += 1;
                    if s.exit_code == 0 {
                        succeeded += 1;
                    }
                }
                _ if s.metadata.as_ref().is_some_and(|m| m.attempt > 0) => stopped += 1,
                _ => waiting += 1,
            },
        }
    }
    if waiting > 0 {
        return Phase::Pending;
    }
    if running > 0 {
        return Phase::Running;
    }
    if stopped > 0 {
        return match policy {
            RestartPolicy::Always => Phase::Running,
            _ if stopped == succeeded => Phase::Succeeded,
            RestartPolicy::Never => Phase::Failed,
            RestartPolicy::OnFailure => Phase::Running,
        };
    }
    Phase::Pending
}
