//! What a pod sync must do, decided from the pod spec and the runtime's status alone (a pure
//! function; upstream `kuberuntime_manager.go` `computePodActions`).
//!
//! Rules:
//! - no Ready sandbox → (remove the dead one and) create a sandbox with the next attempt, unless
//!   `restartPolicy: Never` and containers already ran (the pod is finished, not restarted);
//! - init containers run one at a time, in order; a failed one is retried with back-off, or
//!   fails the pod under `Never`;
//! - then every regular container: none yet → create and start; created but not started →
//!   start *that* container (never a second one: a created container is not restarted, which
//!   is what duplicated containers upstream, kubernetes#120942); exited → restart per
//!   `restartPolicy`: the first restart at once, then after CrashLoopBackOff (10 s doubling to
//!   300 s, kubelet's `MaxContainerBackOff`; a run of 10 min starts over);
//! - ephemeral containers (`kubectl debug`) start as soon as the sandbox is ready, even while
//!   init containers run, once each: never restarted, not even in a new sandbox;
//! - a pod in a terminal phase gets its sandbox stopped and nothing started.

use std::collections::HashMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Pod};
use rkube_runtime::cri;

use super::phase::{pod_phase, restart_policy, Phase, RestartPolicy};
use crate::pleg::status::container_name;
use crate::pleg::{PlegState, PodStatus, Timestamp};

/// CrashLoopBackOff parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    /// First delay (kubelet: 10 s).
    pub initial: Duration,
    /// Cap (kubelet `MaxContainerBackOff`: 300 s).
    pub max: Duration,
    /// A run at least this long resets the delay (kubelet: 10 min).
    pub reset_after: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Self { initial: Duration::from_secs(10), max: Duration::from_secs(300), reset_after: Duration::from_secs(600) }
    }
}

impl Backoff {
    /// The wait before restarting a container whose `attempt`-th run (0-based) lasted `ran`:
    /// the first restart is immediate, then `initial`, doubling, capped at `max`; a run of at
    /// least `reset_after` makes the next restart immediate again (upstream's back-off entry
    /// expires).
    pub fn delay(&self, attempt: u32, ran: Duration) -> Duration {
        if attempt == 0 || ran >= self.reset_after {
            return Duration::ZERO;
        }
        let factor = 1u32.checked_shl((attempt - 1).min(20)).unwrap_or(u32::MAX);
        self.initial.saturating_mul(factor).min(self.max)
    }
}

/// A container to create (and start) in the current sandbox.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToCreate {
    /// Container name in the spec.
    pub name: String,
    /// From `initContainers`.
    pub init: bool,
    /// From `ephemeralContainers` (started once, never restarted).
    pub ephemeral: bool,
    /// Restart count; the CRI attempt.
    pub attempt: u32,
}

/// The plan of one sync.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodActions {
    /// Remove this (dead) sandbox and its containers before anything else.
    pub remove_sandbox: Option<String>,
    /// Create a sandbox with this attempt.
    pub create_sandbox: Option<u32>,
    /// Created-but-not-started containers to start (by id).
    pub start: Vec<String>,
    /// Containers to create and start, in order.
    pub create: Vec<ToCreate>,
    /// Old exited containers to remove (all but the latest two attempts of a name).
    pub prune: Vec<String>,
    /// Stop the sandbox (the pod reached a terminal phase).
    pub stop_sandbox: Option<String>,
    /// Sync again at this time (a back-off expires).
    pub wake_at: Option<Timestamp>,
    /// Containers waiting in CrashLoopBackOff: name → restart time.
    pub backing_off: HashMap<String, Timestamp>,
}

impl PodActions {
    /// True if the sync changes nothing in the runtime.
    pub fn is_noop(&self) -> bool {
        self.remove_sandbox.is_none()
            && self.create_sandbox.is_none()
            && self.start.is_empty()
            && self.create.is_empty()
            && self.prune.is_empty()
            && self.stop_sandbox.is_none()
    }
}

/// Containers of the newest sandbox, newest first (only those created after it, should an old
/// sandbox still be around).
pub fn current_containers(status: &PodStatus) -> Vec<&cri::ContainerStatus> {
    let since = status.newest_sandbox().map(|s| s.created_at).unwrap_or(i64::MIN);
    status.container_statuses.iter().filter(|c| c.created_at >= since).collect()
}

fn latest<'a>(containers: &[&'a cri::ContainerStatus], name: &str) -> Option<&'a cri::ContainerStatus> {
    containers.iter().copied().find(|c| container_name(c) == name)
}

fn attempt_of(c: &cri::ContainerStatus) -> u32 {
    c.metadata.as_ref().map(|m| m.attempt).unwrap_or(0)
}

fn should_restart(policy: RestartPolicy, exit_code: i32) -> bool {
    match policy {
        RestartPolicy::Always => true,
        RestartPolicy::OnFailure => exit_code != 0,
        RestartPolicy::Never => false,
    }
}

/// Next attempt for a container with no status in the current sandbox: one after the highest
/// attempt ever seen for that name (`seen_attempts`), else 0.
fn next_attempt(name: &str, seen_attempts: &HashMap<String, u32>) -> u32 {
    seen_attempts.get(name).map(|a| a + 1).unwrap_or(0)
}

enum Step {
    /// The container needs nothing now.
    Done,
    /// Started, running or waiting: later containers (init) must wait.
    Busy,
}

/// Plans a restart or a wait for an exited container.
fn plan_exited(
    c: &cri::ContainerStatus,
    name: &str,
    init: bool,
    now: Timestamp,
    backoff: &Backoff,
    actions: &mut PodActions,
) {
    let ran = Duration::from_nanos(u64::try_from(c.finished_at.saturating_sub(c.started_at)).unwrap_or(0));
    let delay = backoff.delay(attempt_of(c), ran);
    let due = c.finished_at.saturating_add(i64::try_from(delay.as_nanos()).unwrap_or(i64::MAX));
    if now.0 >= due {
        actions.create.push(ToCreate { name: name.to_string(), init, ephemeral: false, attempt: attempt_of(c) + 1 });
    } else {
        actions.backing_off.insert(name.to_string(), Timestamp(due));
        actions.wake_at = Some(actions.wake_at.map_or(Timestamp(due), |w| w.min(Timestamp(due))));
    }
}

/// The plan for `pod` given the runtime's `status`. `seen_attempts` is the highest attempt the
/// worker has seen per container name (it survives sandbox re-creation); `terminal` is the
/// phase the pod already reached, if terminal (phases never leave Succeeded/Failed).
pub fn compute_pod_actions(
    pod: &Pod,
    status: &PodStatus,
    seen_attempts: &HashMap<String, u32>,
    terminal: Option<Phase>,
    now: Timestamp,
    backoff: &Backoff,
) -> PodActions {
    let mut actions = PodActions::default();
    let Some(spec) = pod.spec.as_ref() else { return actions };
    let policy = restart_policy(pod);
    let sandbox = status.newest_sandbox();
    let sandbox_ready = sandbox.is_some_and(|s| PlegState::from_sandbox(s.state) == PlegState::Running);
    let phase = terminal.unwrap_or_else(|| pod_phase(pod, status));

    if matches!(phase, Phase::Succeeded | Phase::Failed) {
        if sandbox_ready {
            actions.stop_sandbox = sandbox.map(|s| s.id.clone());
        }
        return actions;
    }

    if !sandbox_ready {
        if policy == RestartPolicy::Never && !status.container_statuses.is_empty() {
            return actions; // finished pod: its phase is settled by the containers
        }
        actions.remove_sandbox = sandbox.map(|s| s.id.clone());
        let attempt = sandbox.and_then(|s| s.metadata.as_ref()).map(|m| m.attempt + 1).unwrap_or(0);
        actions.create_sandbox = Some(attempt);
        // Start the first init container, or every container, in the new sandbox.
        let inits = spec.init_containers.as_deref().unwrap_or(&[]);
        if let Some(first) = inits.first() {
            actions.create.push(ToCreate { name: first.name.clone(), init: true, ephemeral: false, attempt: next_attempt(&first.name, seen_attempts) });
        } else {
            for c in &spec.containers {
                actions.create.push(ToCreate { name: c.name.clone(), init: false, ephemeral: false, attempt: next_attempt(&c.name, seen_attempts) });
            }
        }
        return actions;
    }

    let current = current_containers(status);
    let plan_one = |c: &Container, init: bool, actions: &mut PodActions| -> Step {
        match latest(&current, &c.name) {
            None => {
                actions.create.push(ToCreate { name: c.name.clone(), init, ephemeral: false, attempt: next_attempt(&c.name, seen_attempts) });
                Step::Busy
            }
            Some(s) => match PlegState::from_container(s.state) {
                PlegState::Running => Step::Busy,
                PlegState::Exited if init && s.exit_code == 0 => Step::Done,
                PlegState::Exited => {
                    if init && policy == RestartPolicy::Never {
                        return Step::Busy; // the pod failed; the phase says so
                    }
                    if init || should_restart(policy, s.exit_code) {
                        plan_exited(s, &c.name, init, now, backoff, actions);
                        return Step::Busy;
                    }
                    Step::Done
                }
                // Created (or unknown): start this very container, never create another.
                _ => {
                    if s.state == cri::ContainerState::ContainerCreated as i32 {
                        actions.start.push(s.id.clone());
                    }
                    Step::Busy
                }
            },
        }
    };

    // Ephemeral containers: started once, whatever the init containers do; one that ever ran
    // (in any sandbox) or that this worker already created is never started again.
    for ec in spec.ephemeral_containers.iter().flatten() {
        let ran = status.container_statuses.iter().any(|c| container_name(c) == ec.name);
        if !ran && !seen_attempts.contains_key(&ec.name) {
            actions.create.push(ToCreate { name: ec.name.clone(), init: false, ephemeral: true, attempt: 0 });
        }
    }

    for c in spec.init_containers.iter().flatten() {
        if let Step::Busy = plan_one(c, true, &mut actions) {
            return actions;
        }
    }
    for c in &spec.containers {
        let _ = plan_one(c, false, &mut actions);
    }

    // Keep the latest two attempts per name (the running one and its last termination).
    let mut kept: HashMap<&str, usize> = HashMap::new();
    for c in status.container_statuses.iter() {
        let n = kept.entry(container_name(c)).or_default();
        *n += 1;
        if *n > 2 && PlegState::from_container(c.state) == PlegState::Exited {
            actions.prune.push(c.id.clone());
        }
    }
    actions
}
