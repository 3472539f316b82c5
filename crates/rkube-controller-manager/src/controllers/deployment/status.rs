//! Deployment status and conditions (upstream's
//! `pkg/controller/deployment/sync.go` `calculateStatus`,
//! `progress.go` `syncRolloutStatus`, and the condition helpers of
//! `util/deployment_util.go`).

use k8s_openapi::api::apps::v1::{Deployment, DeploymentCondition, DeploymentStatus, ReplicaSet};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use super::util::{self, max_unavailable, replicas, rs_status};

/// `Available` condition type.
pub const AVAILABLE: &str = "Available";
/// `Progressing` condition type.
pub const PROGRESSING: &str = "Progressing";

/// A condition stamped `now` (both times).
pub fn condition(type_: &str, status: &str, reason: &str, message: String, now: Timestamp) -> DeploymentCondition {
    DeploymentCondition {
        type_: type_.into(),
        status: status.into(),
        reason: Some(reason.into()),
        message: Some(message),
        last_update_time: Some(Time(now)),
        last_transition_time: Some(Time(now)),
    }
}

/// The condition of `type_` in `status`.
pub fn get_condition<'a>(status: &'a DeploymentStatus, type_: &str) -> Option<&'a DeploymentCondition> {
    status.conditions.as_ref()?.iter().find(|c| c.type_ == type_)
}

/// Sets `cond` (upstream's `SetDeploymentCondition`): unchanged when one of
/// its type has the same status and reason; keeps the transition time when
/// only the reason changes.
pub fn set_condition(status: &mut DeploymentStatus, mut cond: DeploymentCondition) {
    if let Some(cur) = get_condition(status, &cond.type_) {
        if cur.status == cond.status && cur.reason == cond.reason {
            return;
        }
        if cur.status == cond.status {
            cond.last_transition_time = cur.last_transition_time.clone();
        }
    }
    remove_condition(status, &cond.type_);
    status.conditions.get_or_insert_with(Vec::new).push(cond);
}

/// Removes the condition of `type_`.
pub fn remove_condition(status: &mut DeploymentStatus, type_: &str) {
    if let Some(cs) = status.conditions.as_mut() {
        cs.retain(|c| c.type_ != type_);
        if cs.is_empty() {
            status.conditions = None;
        }
    }
}

/// Counts from the ReplicaSets and the `Available` condition (upstream's `calculateStatus`).
pub fn calculate_status(d: &Deployment, all: &[&ReplicaSet], new_rs: Option<&ReplicaSet>, now: Timestamp) -> DeploymentStatus {
    let sum = |f: fn((i32, i32, i32)) -> i32| all.iter().map(|rs| f(rs_status(rs))).sum::<i32>();
    let available = sum(|s| s.2);
    let total = sum(|s| s.0);
    // Unavailable counts against the replicas asked for (spec), as upstream.
    let wanted: i32 = all.iter().map(|rs| util::rs_replicas(rs)).sum();
    let current = d.status.clone().unwrap_or_default();
    let mut status = DeploymentStatus {
        observed_generation: d.metadata.generation,
        replicas: Some(total),
        updated_replicas: Some(new_rs.map(|rs| rs_status(rs).0).unwrap_or(0)),
        ready_replicas: Some(sum(|s| s.1)),
        available_replicas: Some(available),
        unavailable_replicas: Some((wanted - available).max(0)),
        collision_count: current.collision_count,
        conditions: current.conditions.clone(),
        terminating_replicas: None,
    };
    if available >= replicas(d) - max_unavailable(d) {
        let c = condition(AVAILABLE, "True", "MinimumReplicasAvailable", "Deployment has minimum availability.".into(), now);
        set_condition(&mut status, c);
    } else {
        let c = condition(AVAILABLE, "False", "MinimumReplicasUnavailable", "Deployment does not have minimum availability.".into(), now);
        set_condition(&mut status, c);
    }
    status
}

/// Whether the rollout is done: every replica updated and available and
/// the latest generation observed (upstream's `DeploymentComplete`).
pub fn complete(d: &Deployment, s: &DeploymentStatus) -> bool {
    let want = replicas(d);
    s.updated_replicas == Some(want)
        && s.replicas == Some(want)
        && s.available_replicas == Some(want)
        && s.observed_generation >= d.metadata.generation
}

/// Whether `new` shows progress over the Deployment's current status
/// (upstream's `DeploymentProgressing`).
pub fn progressing(d: &Deployment, new: &DeploymentStatus) -> bool {
    let old = d.status.clone().unwrap_or_default();
    let n = |v: Option<i32>| v.unwrap_or(0);
    let old_old = n(old.replicas) - n(old.updated_replicas);
    let new_old = n(new.replicas) - n(new.updated_replicas);
    n(new.updated_replicas) > n(old.updated_replicas)
        || new_old < old_old
        || n(new.ready_replicas) > n(old.ready_replicas)
        || n(new.available_replicas) > n(old.available_replicas)
}

/// `spec.progressDeadlineSeconds` when it is set and not MaxInt32.
pub fn progress_deadline(d: &Deployment) -> Option<i32> {
    d.spec.as_ref()?.progress_deadline_seconds.filter(|s| *s != i32::MAX)
}

/// Whether the rollout has exceeded its progress deadline at `now`
/// (upstream's `DeploymentTimedOut`).
pub fn timed_out(d: &Deployment, s: &DeploymentStatus, now: Timestamp) -> bool {
    let Some(deadline) = progress_deadline(d) else { return false };
    let Some(c) = get_condition(s, PROGRESSING) else { return false };
    match c.reason.as_deref() {
        Some("NewReplicaSetAvailable") => false,
        Some("ProgressDeadlineExceeded") => true,
        _ => c.last_update_time.as_ref().is_some_and(|t| t.0.as_second() + i64::from(deadline) < now.as_second()),
    }
}

/// The rollout status with `Progressing` updated (upstream's
/// `syncRolloutStatus`): `NewReplicaSetAvailable` when complete,
/// `ReplicaSetUpdated` on progress, `ProgressDeadlineExceeded` past the deadline.
pub fn rollout_status(d: &Deployment, all: &[&ReplicaSet], new_rs: Option<&ReplicaSet>, now: Timestamp) -> DeploymentStatus {
    let mut s = calculate_status(d, all, new_rs, now);
    if progress_deadline(d).is_none() {
        remove_condition(&mut s, PROGRESSING);
    }
    let cur = get_condition(&s, PROGRESSING).cloned();
    let is_complete = s.replicas == s.updated_replicas
        && cur.as_ref().and_then(|c| c.reason.as_deref()) == Some("NewReplicaSetAvailable");
    if progress_deadline(d).is_some() && !is_complete {
        let name = new_rs.and_then(|rs| rs.metadata.name.clone());
        if complete(d, &s) {
            let msg = match &name {
                Some(n) => format!("ReplicaSet {n:?} has successfully progressed."),
                None => "Deployment has successfully progressed.".into(),
            };
            set_condition(&mut s, condition(PROGRESSING, "True", "NewReplicaSetAvailable", msg, now));
        } else if progressing(d, &s) {
            let msg = match &name {
                Some(n) => format!("ReplicaSet {n:?} is progressing."),
                None => "Deployment is progressing.".into(),
            };
            let mut c = condition(PROGRESSING, "True", "ReplicaSetUpdated", msg, now);
            if let Some(cur) = cur.as_ref().filter(|c| c.status == "True") {
                c.last_transition_time = cur.last_transition_time.clone();
            }
            remove_condition(&mut s, PROGRESSING);
            set_condition(&mut s, c);
        } else if timed_out(d, &s, now) {
            let msg = match &name {
                Some(n) => format!("ReplicaSet {n:?} has timed out progressing."),
                None => "Deployment has timed out progressing.".into(),
            };
            set_condition(&mut s, condition(PROGRESSING, "False", "ProgressDeadlineExceeded", msg, now));
        }
    }
    s
}

/// How long until a stuck rollout's deadline passes, to check again then
/// (upstream's `requeueStuckDeployment`).
pub fn requeue_after(d: &Deployment, s: &DeploymentStatus, now: Timestamp) -> Option<std::time::Duration> {
    let deadline = progress_deadline(d)?;
    let c = get_condition(s, PROGRESSING)?;
    if complete(d, s) || timed_out(d, s, now) || c.reason.as_deref() == Some("DeploymentPaused") {
        return None;
    }
    let at = c.last_update_time.as_ref()?.0.as_second() + i64::from(deadline);
    let left = (at - now.as_second()).max(1);
    Some(std::time::Duration::from_secs(u64::try_from(left).unwrap_or(1)))
}

/// `Progressing` while paused (`DeploymentPaused`) or just resumed
/// (`DeploymentResumed`), as upstream's `checkPausedConditions`; `None`
/// when nothing changes.
pub fn paused_condition(d: &Deployment, now: Timestamp) -> Option<DeploymentStatus> {
    progress_deadline(d)?;
    let mut s = d.status.clone().unwrap_or_default();
    let cur = get_condition(&s, PROGRESSING);
    let paused = d.spec.as_ref().and_then(|sp| sp.paused).unwrap_or(false);
    let reason = cur.and_then(|c| c.reason.as_deref());
    if paused && reason != Some("DeploymentPaused") {
        set_condition(&mut s, condition(PROGRESSING, "Unknown", "DeploymentPaused", "Deployment is paused".into(), now));
        Some(s)
    } else if !paused && reason == Some("DeploymentPaused") {
        set_condition(&mut s, condition(PROGRESSING, "Unknown", "DeploymentResumed", "Deployment is resumed".into(), now));
        Some(s)
    } else {
        None
    }
}


/// Whether `util` revision bookkeeping is needed: the Deployment's revision
/// annotation differs from `rev`.
pub fn deployment_revision_differs(d: &Deployment, rev: i64) -> bool {
    d.metadata.annotations.as_ref().and_then(|a| a.get(util::REVISION)).map(String::as_str) != Some(rev.to_string().as_str())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rs(spec: i32, replicas: i32, ready: i32, available: i32) -> ReplicaSet {
        serde_json::from_value(json!({"spec": {"replicas": spec, "selector": {}},
            "status": {"replicas": replicas, "readyReplicas": ready, "availableReplicas": available}}))
        .unwrap()
    }

    fn deployment(replicas: i32, deadline: Option<i32>, status: serde_json::Value) -> Deployment {
        serde_json::from_value(json!({"metadata": {"generation": 2}, "spec": {"replicas": replicas, "selector": {},
            "progressDeadlineSeconds": deadline, "template": {}}, "status": status}))
        .unwrap()
    }

    #[test]
    fn status_counts_and_the_available_condition_follow_the_replica_sets() {
        let now: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let d = deployment(4, Some(600), json!({}));
        let (old, new) = (rs(2, 2, 2, 2), rs(3, 2, 1, 1));
        let s = calculate_status(&d, &[&old, &new], Some(&new), now);
        assert_eq!((s.replicas, s.updated_replicas, s.ready_replicas, s.available_replicas), (Some(4), Some(2), Some(3), Some(3)));
        assert_eq!(s.unavailable_replicas, Some(2), "5 asked for, 3 available");
        assert_eq!(s.observed_generation, Some(2));
        let c = get_condition(&s, AVAILABLE).unwrap();
        assert_eq!((c.status.as_str(), c.reason.as_deref()), ("True", Some("MinimumReplicasAvailable")), "4 - maxUnavailable 1 = 3");
        let s = calculate_status(&d, &[&rs(4, 4, 1, 1)], None, now);
        let c = get_condition(&s, AVAILABLE).unwrap();
        assert_eq!((c.status.as_str(), c.reason.as_deref()), ("False", Some("MinimumReplicasUnavailable")));
    }

    #[test]
    fn progressing_reports_updates_completion_and_the_deadline() {
        let t0: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let later: Timestamp = "2026-01-01T00:00:30Z".parse().unwrap();
        let d = deployment(2, Some(10), json!({"observedGeneration": 2, "replicas": 2, "updatedReplicas": 0}));
        let new = rs(1, 1, 0, 0);
        let s = rollout_status(&d, &[&rs(2, 2, 2, 2), &new], Some(&new), t0);
        let c = get_condition(&s, PROGRESSING).unwrap().clone();
        assert_eq!(c.reason.as_deref(), Some("ReplicaSetUpdated"));
        // No progress for longer than the deadline.
        let stuck = Deployment { status: Some(s.clone()), ..d.clone() };
        let s2 = rollout_status(&stuck, &[&rs(2, 2, 2, 2), &new], Some(&new), later);
        let c = get_condition(&s2, PROGRESSING).unwrap();
        assert_eq!((c.status.as_str(), c.reason.as_deref()), ("False", Some("ProgressDeadlineExceeded")));
        assert_eq!(requeue_after(&stuck, &s, t0), Some(std::time::Duration::from_secs(10)));
        // Complete.
        let done = rs(2, 2, 2, 2);
        let s3 = rollout_status(&stuck, &[&rs(0, 0, 0, 0), &done], Some(&done), later);
        let c = get_condition(&s3, PROGRESSING).unwrap();
        assert_eq!((c.status.as_str(), c.reason.as_deref()), ("True", Some("NewReplicaSetAvailable")));
        // Without a deadline there is no Progressing condition.
        let none = deployment(2, Some(i32::MAX), json!({}));
        assert!(get_condition(&rollout_status(&none, &[&done], Some(&done), later), PROGRESSING).is_none());
    }

    #[test]
    fn pausing_and_resuming_set_progressing_unknown() {
        let now: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let mut d = deployment(1, Some(600), json!({}));
        d.spec.as_mut().unwrap().paused = Some(true);
        let s = paused_condition(&d, now).unwrap();
        assert_eq!(get_condition(&s, PROGRESSING).unwrap().reason.as_deref(), Some("DeploymentPaused"));
        d.status = Some(s);
        assert!(paused_condition(&d, now).is_none(), "already paused");
        d.spec.as_mut().unwrap().paused = Some(false);
        let s = paused_condition(&d, now).unwrap();
        assert_eq!(get_condition(&s, PROGRESSING).unwrap().reason.as_deref(), Some("DeploymentResumed"));
    }
}
