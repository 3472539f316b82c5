//! The pod row: READY, STATUS and RESTARTS computed from container states the
//! way kubectl shows them (upstream `printPod` in
//! `pkg/printers/internalversion/printers.go`).
//!
//! STATUS starts from `status.reason` or `status.phase`; an init container
//! that has not finished turns it into `Init:<reason>`/`Init:N/M`; otherwise
//! the last container with a waiting or terminated reason names it
//! (`ContainerCreating`, `CrashLoopBackOff`, `Completed`, `Error`,
//! `ExitCode:N`, ...), with `Completed` turned back into `Running` (or
//! `NotReady`) while another container still runs. A pod being deleted shows
//! `Terminating` (or `Unknown` when its node is lost) unless it already
//! finished.

use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use super::format::{age, array_at, int_at, since, str_at, timestamp};

/// `status.reason` the node lifecycle controller sets on pods of a lost node.
const NODE_UNREACHABLE_POD_REASON: &str = "NodeLost";

fn is_restartable_init_container(pod: &Value, name: &str) -> bool {
    array_at(pod, "/spec/initContainers")
        .iter()
        .any(|c| str_at(c, "/name") == name && str_at(c, "/restartPolicy") == "Always")
}

fn condition_true(pod: &Value, ty: &str) -> bool {
    array_at(pod, "/status/conditions").iter().any(|c| str_at(c, "/type") == ty && str_at(c, "/status") == "True")
}

fn terminated_reason(terminated: &Value, prefix: &str) -> String {
    let reason = str_at(terminated, "/reason");
    if !reason.is_empty() {
        return format!("{prefix}{reason}");
    }
    let signal = int_at(terminated, "/signal");
    if signal != 0 {
        format!("{prefix}Signal:{signal}")
    } else {
        format!("{prefix}ExitCode:{}", int_at(terminated, "/exitCode"))
    }
}

/// Keeps the later of `current` and the container's last termination time.
fn track_last_restart(current: &mut Option<DateTime<Utc>>, status: &Value) {
    if let Some(finished) = timestamp(status.pointer("/lastState/terminated/finishedAt")) {
        if current.is_none_or(|c| c < finished) {
            *current = Some(finished);
        }
    }
}

/// The cells of one pod: NAME READY STATUS RESTARTS AGE IP NODE NOMINATED-NODE READINESS-GATES.
pub fn cells(pod: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let phase = str_at(pod, "/status/phase");
    let mut reason = match str_at(pod, "/status/reason") {
        "" => phase.to_string(),
        r => r.to_string(),
    };
    if array_at(pod, "/status/conditions")
        .iter()
        .any(|c| str_at(c, "/type") == "PodScheduled" && str_at(c, "/reason") == "SchedulingGated")
    {
        reason = "SchedulingGated".to_string();
    }

    let init_specs = array_at(pod, "/spec/initContainers");
    let total = array_at(pod, "/spec/containers").len()
        + init_specs.iter().filter(|c| str_at(c, "/restartPolicy") == "Always").count();
    let mut ready = 0usize;
    let mut restarts = 0i64;
    let mut last_restart: Option<DateTime<Utc>> = None;
    let mut sidecar_restarts = 0i64;
    let mut sidecar_last_restart: Option<DateTime<Utc>> = None;

    let mut initializing = false;
    for (i, cs) in array_at(pod, "/status/initContainerStatuses").iter().enumerate() {
        let restart_count = int_at(cs, "/restartCount");
        restarts += restart_count;
        track_last_restart(&mut last_restart, cs);
        let name = str_at(cs, "/name");
        let sidecar = is_restartable_init_container(pod, name);
        if sidecar {
            sidecar_restarts += restart_count;
            track_last_restart(&mut sidecar_last_restart, cs);
        }
        let terminated = cs.pointer("/state/terminated");
        let waiting_reason = str_at(cs, "/state/waiting/reason");
        if terminated.is_some_and(|t| int_at(t, "/exitCode") == 0) {
            continue;
        }
        if sidecar && cs.get("started").and_then(Value::as_bool) == Some(true) {
            if cs.get("ready").and_then(Value::as_bool) == Some(true) {
                ready += 1;
            }
            continue;
        }
        reason = match terminated {
            Some(t) => terminated_reason(t, "Init:"),
            None if !waiting_reason.is_empty() && waiting_reason != "PodInitializing" => format!("Init:{waiting_reason}"),
            None => format!("Init:{i}/{}", init_specs.len()),
        };
        initializing = true;
        break;
    }

    if !initializing || condition_true(pod, "Initialized") {
        restarts = sidecar_restarts;
        last_restart = sidecar_last_restart;
        let mut has_running = false;
        for cs in array_at(pod, "/status/containerStatuses").iter().rev() {
            restarts += int_at(cs, "/restartCount");
            track_last_restart(&mut last_restart, cs);
            let waiting_reason = str_at(cs, "/state/waiting/reason");
            let terminated = cs.pointer("/state/terminated");
            if !waiting_reason.is_empty() {
                reason = waiting_reason.to_string();
            } else if let Some(t) = terminated {
                reason = terminated_reason(t, "");
            } else if cs.get("ready").and_then(Value::as_bool) == Some(true) && cs.pointer("/state/running").is_some() {
                has_running = true;
                ready += 1;
            }
        }
        if reason == "Completed" && has_running {
            reason = if condition_true(pod, "Ready") { "Running".to_string() } else { "NotReady".to_string() };
        }
    }

    let deleting = pod.pointer("/metadata/deletionTimestamp").is_some_and(|v| !v.is_null());
    if deleting && str_at(pod, "/status/reason") == NODE_UNREACHABLE_POD_REASON {
        reason = "Unknown".to_string();
    } else if deleting && phase != "Succeeded" && phase != "Failed" {
        reason = "Terminating".to_string();
    }

    let restarts_cell = match last_restart {
        Some(t) if restarts != 0 => format!("{restarts} ({} ago)", since(Some(t), now)),
        _ => restarts.to_string(),
    };

    let ip = array_at(pod, "/status/podIPs")
        .first()
        .map(|p| str_at(p, "/ip"))
        .filter(|s| !s.is_empty())
        .or_else(|| Some(str_at(pod, "/status/podIP")).filter(|s| !s.is_empty()))
        .unwrap_or("<none>");
    let none_if_empty = |s: &str| if s.is_empty() { "<none>".to_string() } else { s.to_string() };
    let gates = array_at(pod, "/spec/readinessGates");
    let readiness_gates = if gates.is_empty() {
        "<none>".to_string()
    } else {
        let conditions = array_at(pod, "/status/conditions");
        let true_count = gates
            .iter()
            .filter(|g| {
                let ty = str_at(g, "/conditionType");
                conditions.iter().find(|c| str_at(c, "/type") == ty).is_some_and(|c| str_at(c, "/status") == "True")
            })
            .count();
        format!("{true_count}/{}", gates.len())
    };

    vec![
        json!(str_at(pod, "/metadata/name")),
        json!(format!("{ready}/{total}")),
        json!(reason),
        json!(restarts_cell),
        json!(age(pod, now)),
        json!(ip),
        json!(none_if_empty(str_at(pod, "/spec/nodeName"))),
        json!(none_if_empty(str_at(pod, "/status/nominatedNodeName"))),
        json!(readiness_gates),
    ]
}

/// Row conditions upstream attaches to finished pods (`Completed` = True),
/// which clients may use to dim or hide finished rows.
pub fn conditions(pod: &Value) -> Option<Value> {
    match str_at(pod, "/status/phase") {
        "Succeeded" => Some(json!([{"type": "Completed", "status": "True", "reason": "Succeeded", "message": "The pod completed successfully."}])),
        "Failed" => Some(json!([{"type": "Completed", "status": "True", "reason": "Failed", "message": "The pod failed."}])),
        _ => None,
    }
}
