//! The pod's API status (`pods/status`) from the spec, the runtime's status and the last plan
//! (upstream `kubelet_pods.go` `generateAPIPodStatus` / `convertToAPIContainerStatuses`).

use std::collections::HashMap;

use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
    ContainerStatus, HostIP, Pod, PodCondition, PodIP, PodStatus as ApiPodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff;
use rkube_runtime::cri;

use super::phase::Phase;
use crate::pleg::status::container_name;
use crate::pleg::{PlegState, PodStatus, Timestamp};

/// A runtime timestamp (ns) as an API time (`None` for 0).
pub fn api_time(ns: i64) -> Option<Time> {
    if ns <= 0 {
        return None;
    }
    jiff::Timestamp::from_nanosecond(i128::from(ns))
        .ok()
        .map(Time)
}

/// Everything besides spec and runtime status that the API status needs.
#[derive(Clone, Debug)]
pub struct StatusContext<'a> {
    /// The phase to report (already made sticky for terminal phases by the caller).
    pub phase: Phase,
    /// Containers in CrashLoopBackOff: name → when they restart.
    pub backing_off: &'a HashMap<String, Timestamp>,
    /// Containers whose configuration failed: name → error
    /// (`CreateContainerConfigError`).
    pub config_errors: &'a HashMap<String, String>,
    /// Containers whose image could not be had: name → (waiting reason, message):
    /// `ErrImagePull`, `ImagePullBackOff` or `ErrImageNeverPull`.
    pub image_errors: &'a HashMap<String, (String, String)>,
    /// Probe results of running containers: name → (ready, started); a
    /// container not listed is ready and started while it runs.
    pub probe_results: &'a HashMap<String, (bool, bool)>,
    /// Node IP (`status.hostIP`).
    pub host_ip: &'a str,
    /// Runtime name for container ids (`<name>://<id>`).
    pub runtime_name: &'a str,
    /// Now (transition times, start time).
    pub now: Timestamp,
}

fn terminated(c: &cri::ContainerStatus, runtime: &str) -> ContainerStateTerminated {
    ContainerStateTerminated {
        exit_code: c.exit_code,
        reason: (!c.reason.is_empty()).then(|| c.reason.clone()),
        message: (!c.message.is_empty()).then(|| c.message.clone()),
        started_at: api_time(c.started_at),
        finished_at: api_time(c.finished_at),
        container_id: Some(format!("{runtime}://{}", c.id)),
        signal: None,
    }
}

fn waiting(reason: &str, message: Option<String>) -> ContainerState {
    ContainerState {
        waiting: Some(ContainerStateWaiting {
            reason: Some(reason.into()),
            message,
        }),
        ..Default::default()
    }
}

/// A last termination of reason `ContainerStatusUnknown`, exit code 137 (upstream's wording).
fn status_unknown(message: &str) -> ContainerState {
    let terminated = ContainerStateTerminated {
        exit_code: 137,
        reason: Some("ContainerStatusUnknown".into()),
        message: Some(message.into()),
        ..Default::default()
    };
    ContainerState {
        terminated: Some(terminated),
        ..Default::default()
    }
}

/// The status of a container the runtime no longer has (a restarted runtime lost it), from the
/// last API status in `pod` (upstream `convertToAPIContainerStatuses`): a reported termination
/// stays as it was; a container that was running gets a last termination `ContainerStatusUnknown`
/// (exit code 137) and one more restart, and is waiting to be created again — or, once the pod
/// is `terminal`, terminated `ContainerStatusUnknown` itself. `None` when it never ran.
fn lost_container_status(pod: &Pod, name: &str, terminal: bool) -> Option<ContainerStatus> {
    let old = pod.status.as_ref()?;
    let old = old
        .container_statuses
        .iter()
        .chain(old.init_container_statuses.iter())
        .chain(old.ephemeral_container_statuses.iter())
        .flatten()
        .find(|s| s.name == name)?;
    let state = old.state.as_ref()?;
    if state.terminated.is_some() {
        return Some(old.clone());
    }
    let (last_state, restart_count) = if state.running.is_some() {
        let msg = "The container could not be located when the pod was deleted.  The container used to be Running";
        (status_unknown(msg), old.restart_count.saturating_add(1))
    } else if old
        .last_state
        .as_ref()
        .is_some_and(|l| l.terminated.is_some())
    {
        (
            old.last_state.clone().unwrap_or_default(),
            old.restart_count,
        ) // lost earlier
    } else {
        return None;
    };
    let state = if terminal {
        status_unknown("The container could not be located when the pod was terminated")
    } else {
        waiting("ContainerCreating", None)
    };
    Some(ContainerStatus {
        state: Some(state),
        last_state: Some(last_state),
        restart_count,
        ready: false,
        started: Some(false),
        ..old.clone()
    })
}

/// Regular containers of `pod` the runtime no longer has although its last API status reported
/// them as run, each with whether that run succeeded (for [`super::phase::pod_phase_with_lost`]).
pub fn lost_containers(pod: &Pod, status: &PodStatus) -> HashMap<String, bool> {
    let spec = pod
        .spec
        .as_ref()
        .map(|s| s.containers.as_slice())
        .unwrap_or_default();
    spec.iter()
        .filter(|c| {
            !status
                .container_statuses
                .iter()
                .any(|s| container_name(s) == c.name)
        })
        .filter_map(|c| {
            let kept = lost_container_status(pod, &c.name, false)?;
            let ok = kept
                .state
                .and_then(|s| s.terminated)
                .is_some_and(|t| t.exit_code == 0);
            Some((c.name.clone(), ok))
        })
        .collect()
}

fn container_status(
    pod: &Pod,
    spec: &k8s_openapi::api::core::v1::Container,
    history: &[&cri::ContainerStatus],
    init_pending: bool,
    ctx: &StatusContext<'_>,
) -> ContainerStatus {
    if history.is_empty() {
        if let Some(kept) = lost_container_status(pod, &spec.name, ctx.phase.is_terminal()) {
            return kept;
        }
    }
    let latest = history.first().copied();
    let prev = history.get(1).copied();
    let last_state = |c: Option<&cri::ContainerStatus>| {
        c.filter(|c| PlegState::from_container(c.state) == PlegState::Exited)
            .map(|c| ContainerState {
                terminated: Some(terminated(c, ctx.runtime_name)),
                ..Default::default()
            })
    };
    let config_error = ctx.config_errors.get(&spec.name).cloned();
    // The runtime no longer has the previous instance (it or the agent
    // restarted): the last termination comes from the reported status.
    let last_state = |c: Option<&cri::ContainerStatus>| {
        let from_runtime = last_state(c);
        let restarted = latest
            .and_then(|l| l.metadata.as_ref())
            .is_some_and(|m| m.attempt > 0);
        if from_runtime.is_some() || c.is_some() || !restarted {
            return from_runtime;
        }
        let latest_id = latest.map(|l| format!("{}://{}", ctx.runtime_name, l.id));
        let reported = pod.status.as_ref().and_then(|s| {
            s.container_statuses
                .iter()
                .chain(s.init_container_statuses.iter())
                .chain(s.ephemeral_container_statuses.iter())
                .flatten()
                .find(|s| s.name == spec.name)
        })?;
        if reported.container_id.is_some() && reported.container_id == latest_id {
            reported
                .last_state
                .clone()
                .filter(|l| l.terminated.is_some())
        } else {
            lost_container_status(pod, &spec.name, false)
                .and_then(|s| s.last_state)
                .filter(|l| l.terminated.is_some())
        }
    };
    let image_error = ctx.image_errors.get(&spec.name).cloned();
    let (state, last, running) = match latest {
        None if image_error.is_some() => {
            let (reason, message) = image_error.unwrap_or_default();
            (waiting(&reason, Some(message)), None, false)
        }
        None if config_error.is_some() => (
            waiting("CreateContainerConfigError", config_error),
            None,
            false,
        ),
        None => {
            let reason = if init_pending {
                "PodInitializing"
            } else {
                "ContainerCreating"
            };
            (waiting(reason, None), None, false)
        }
        Some(c) => match PlegState::from_container(c.state) {
            PlegState::Running => (
                ContainerState {
                    running: Some(ContainerStateRunning {
                        started_at: api_time(c.started_at),
                    }),
                    ..Default::default()
                },
                last_state(prev),
                true,
            ),
            PlegState::Exited if config_error.is_some() => (
                waiting("CreateContainerConfigError", config_error),
                last_state(Some(c)),
                false,
            ),
            PlegState::Exited => match ctx.backing_off.get(&spec.name) {
                Some(until) => {
                    let secs = (until.0 - c.finished_at).max(0) / 1_000_000_000;
                    let (name, namespace, uid) = super::cri_config::pod_identity(pod);
                    let msg = format!(
                        "back-off {secs}s restarting failed container={} pod={name}_{namespace}({uid})",
                        spec.name
                    );
                    (
                        waiting("CrashLoopBackOff", Some(msg)),
                        last_state(Some(c)),
                        false,
                    )
                }
                None => (
                    ContainerState {
                        terminated: Some(terminated(c, ctx.runtime_name)),
                        ..Default::default()
                    },
                    last_state(prev),
                    false,
                ),
            },
            _ => (waiting("ContainerCreating", None), last_state(prev), false),
        },
    };
    ContainerStatus {
        name: spec.name.clone(),
        image: spec.image.clone().unwrap_or_default(),
        image_id: latest.map(|c| c.image_ref.clone()).unwrap_or_default(),
        container_id: latest.map(|c| format!("{}://{}", ctx.runtime_name, c.id)),
        ready: running && ctx.probe_results.get(&spec.name).is_none_or(|r| r.0),
        started: Some(running && ctx.probe_results.get(&spec.name).is_none_or(|r| r.1)),
        restart_count: latest
            .and_then(|c| c.metadata.as_ref())
            .map(|m| i32::try_from(m.attempt).unwrap_or(i32::MAX))
            .unwrap_or(0),
        state: Some(state),
        last_state: Some(last.unwrap_or_default()),
        ..Default::default()
    }
}

fn condition(
    old: Option<&ApiPodStatus>,
    ty: &str,
    ok: bool,
    reason: Option<&str>,
    message: Option<String>,
    now: Timestamp,
) -> PodCondition {
    let status = if ok { "True" } else { "False" };
    let previous = old
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == ty))
        .filter(|c| c.status == status)
        .and_then(|c| c.last_transition_time.clone());
    PodCondition {
        type_: ty.into(),
        status: status.into(),
        reason: if ok { None } else { reason.map(str::to_string) },
        message: if ok { None } else { message },
        last_transition_time: previous.or_else(|| api_time(now.0)),
        last_probe_time: None,
        observed_generation: None,
    }
}

/// The API status of `pod` given the runtime's `status`.
pub fn api_pod_status(pod: &Pod, status: &PodStatus, ctx: &StatusContext<'_>) -> ApiPodStatus {
    let old = pod.status.as_ref();
    let (containers, inits) = match pod.spec.as_ref() {
        Some(s) => (
            s.containers.as_slice(),
            s.init_containers.as_deref().unwrap_or_default(),
        ),
        None => (&[][..], &[][..]),
    };
    let by_name = |name: &str| -> Vec<&cri::ContainerStatus> {
        status
            .container_statuses
            .iter()
            .filter(|c| container_name(c) == name)
            .collect()
    };
    let init_statuses: Vec<ContainerStatus> = inits
        .iter()
        .map(|c| container_status(pod, c, &by_name(&c.name), false, ctx))
        .collect();
    let pending_inits: Vec<String> = inits
        .iter()
        .filter(|c| {
            !by_name(&c.name).first().is_some_and(|s| {
                PlegState::from_container(s.state) == PlegState::Exited && s.exit_code == 0
            })
        })
        .map(|c| c.name.clone())
        .collect();
    let statuses: Vec<ContainerStatus> = containers
        .iter()
        .map(|c| container_status(pod, c, &by_name(&c.name), !pending_inits.is_empty(), ctx))
        .collect();
    let unready: Vec<String> = statuses
        .iter()
        .filter(|s| !s.ready)
        .map(|s| s.name.clone())
        .collect();
    // Ephemeral containers count for nothing in readiness or phase; they are never ready.
    let ephemeral_statuses: Vec<ContainerStatus> = super::ephemeral::containers(pod)
        .iter()
        .map(|c| ContainerStatus {
            ready: false,
            ..container_status(pod, c, &by_name(&c.name), false, ctx)
        })
        .collect();
    let sandbox_ready = status
        .newest_sandbox()
        .is_some_and(|s| PlegState::from_sandbox(s.state) == PlegState::Running);
    let completed = ctx.phase == Phase::Succeeded;
    let not_ready_reason = if completed {
        "PodCompleted"
    } else {
        "ContainersNotReady"
    };
    let unready_msg = format!("containers with unready status: [{}]", unready.join(" "));
    let scheduled = old
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "PodScheduled"))
        .cloned()
        .unwrap_or_else(|| condition(None, "PodScheduled", true, None, None, ctx.now));
    let conditions = vec![
        condition(
            old,
            "PodReadyToStartContainers",
            sandbox_ready,
            None,
            None,
            ctx.now,
        ),
        condition(
            old,
            "Initialized",
            pending_inits.is_empty(),
            Some("ContainersNotInitialized"),
            Some(format!(
                "containers with incomplete status: [{}]",
                pending_inits.join(" ")
            )),
            ctx.now,
        ),
        condition(
            old,
            "Ready",
            unready.is_empty(),
            Some(not_ready_reason),
            Some(unready_msg.clone()),
            ctx.now,
        ),
        condition(
            old,
            "ContainersReady",
            unready.is_empty(),
            Some(not_ready_reason),
            Some(unready_msg),
            ctx.now,
        ),
        scheduled,
    ];
    // Host-network pods have the node's IP when the runtime reports none (upstream
    // `generateAPIPodStatus`; containerd reports no IP for them).
    let mut ips = status.ips.clone();
    if ips.is_empty() && super::cri_config::is_host_network(pod) && !ctx.host_ip.is_empty() {
        ips.push(ctx.host_ip.to_string());
    }
    let pod_ips: Vec<PodIP> = ips.iter().map(|ip| PodIP { ip: ip.clone() }).collect();
    ApiPodStatus {
        phase: Some(ctx.phase.as_str().into()),
        conditions: Some(conditions),
        host_ip: Some(ctx.host_ip.into()),
        host_ips: Some(vec![HostIP {
            ip: ctx.host_ip.into(),
        }]),
        pod_ip: ips.first().cloned(),
        pod_ips: (!pod_ips.is_empty()).then_some(pod_ips),
        start_time: old
            .and_then(|s| s.start_time.clone())
            .or_else(|| api_time(ctx.now.0)),
        init_container_statuses: (!init_statuses.is_empty()).then_some(init_statuses),
        container_statuses: Some(statuses),
        ephemeral_container_statuses: (!ephemeral_statuses.is_empty())
            .then_some(ephemeral_statuses),
        qos_class: old.and_then(|s| s.qos_class.clone()),
        ..Default::default()
    }
}
