//! One CronJob sync (upstream's `syncCronJob`).

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use k8s_openapi::api::batch::v1::{CronJob, CronJobStatus, Job, JobSpec};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, PostParams, PropagationPolicy};
use kube::runtime::controller::Action;
use kube::ResourceExt;

use super::history::{self, Finished};
use super::schedule::{self, Schedule, TOO_MANY_MISSED};
use super::{State, SyncError, SCHEDULED_TIMESTAMP};
use crate::pod_control;

fn to_chrono(t: &Time) -> DateTime<Utc> {
    DateTime::from_timestamp(t.0.as_second(), 0).unwrap_or_default()
}

fn to_time(t: DateTime<Utc>) -> Time {
    Time(Timestamp::from_second(t.timestamp()).unwrap_or(Timestamp::UNIX_EPOCH))
}

fn job_ref(job: &Job) -> ObjectReference {
    ObjectReference {
        api_version: Some("batch/v1".into()),
        kind: Some("Job".into()),
        name: job.metadata.name.clone(),
        namespace: job.metadata.namespace.clone(),
        uid: job.metadata.uid.clone(),
        resource_version: job.metadata.resource_version.clone(),
        ..ObjectReference::default()
    }
}

/// Upstream's RFC1123Z layout (`Mon, 02 Jan 2006 15:04:05 -0700`).
fn rfc1123z(t: DateTime<Utc>) -> String {
    t.format("%a, %d %b %Y %H:%M:%S %z").to_string()
}

/// The Job for schedule time `at` from the CronJob's `jobTemplate` (upstream's `getJobFromTemplate2`).
fn job_for(cj: &CronJob, sched: &Schedule, at: DateTime<Utc>) -> Option<Job> {
    let template = cj.spec.as_ref()?.job_template.clone();
    let meta = template.metadata.unwrap_or_default();
    let mut annotations = meta.annotations.unwrap_or_default();
    annotations.insert(SCHEDULED_TIMESTAMP.into(), sched.format_in_zone(at));
    Some(Job {
        metadata: ObjectMeta {
            name: Some(schedule::job_name(&cj.name_any(), at)),
            namespace: cj.namespace(),
            labels: meta.labels,
            annotations: Some(annotations),
            owner_references: Some(vec![pod_control::controller_ref(cj)?]),
            ..ObjectMeta::default()
        },
        spec: template.spec.or_else(|| Some(JobSpec::default())),
        status: None,
    })
}

/// Syncs one CronJob.
pub(super) async fn reconcile(cj: Arc<CronJob>, state: Arc<State>) -> Result<Action, SyncError> {
    if tokio::time::timeout(Duration::from_secs(1), state.jobs.wait_until_ready()).await.is_err() {
        return Ok(Action::requeue(Duration::from_millis(500)));
    }
    let Some(spec) = cj.spec.as_ref() else { return Ok(Action::await_change()) };
    let ns = cj.namespace().unwrap_or_default();
    let uid = cj.metadata.uid.clone().unwrap_or_default();
    let regarding = pod_control::object_ref(cj.as_ref());
    let jobs_api: Api<Job> = Api::namespaced(state.client.clone(), &ns);
    let now = (state.clock)();
    let mine: Vec<Arc<Job>> = state
        .jobs
        .state()
        .into_iter()
        .filter(|j| j.namespace().as_deref() == Some(ns.as_str()))
        .filter(|j| pod_control::controller_of(&j.metadata).is_some_and(|r| r.uid == uid))
        .collect();
    let mut status = cj.status.clone().unwrap_or_default();
    let mut active: Vec<ObjectReference> = status.active.clone().unwrap_or_default();

    // The active list against the Jobs that exist.
    for j in &mine {
        let j_uid = j.metadata.uid.clone().unwrap_or_default();
        let listed = active.iter().any(|r| r.uid.as_deref() == Some(j_uid.as_str()));
        match history::finished(j) {
            // Warned about, not adopted into the active list (as upstream):
            // e.g. `kubectl create job --from=cronjob/<name>`.
            None if !listed && j.metadata.deletion_timestamp.is_none() => {
                state.events.warning(&regarding, "UnexpectedJob", format!("Saw a job that the controller did not create or forgot: {}", j.name_any())).await;
            }
            Some(how) if listed => {
                active.retain(|r| r.uid.as_deref() != Some(j_uid.as_str()));
                state.events.normal(&regarding, "SawCompletedJob", format!("Saw completed job: {}, condition: {how}", j.name_any())).await;
                if how == "Complete" {
                    let done = j.status.as_ref().and_then(|s| s.completion_time.clone());
                    if let Some(done) = done {
                        if status.last_successful_time.as_ref().is_none_or(|t| t.0 < done.0) {
                            status.last_successful_time = Some(done);
                        }
                    }
                }
            }
            _ => {}
        }
    }
    active.retain(|r| mine.iter().any(|j| j.metadata.uid == r.uid));

    let mut requeue = None;
    if cj.metadata.deletion_timestamp.is_none() {
        cleanup_history(&state, &cj, &mine, &jobs_api, &regarding).await;
        match Schedule::parse(&spec.schedule, spec.time_zone.as_deref()) {
            Err(e) => state.events.warning(&regarding, e.reason, e.message).await,
            Ok(sched) if spec.suspend != Some(true) => {
                requeue = start_due_job(&state, &cj, &sched, now, &mut status, &mut active, &jobs_api, &regarding).await?;
            }
            Ok(sched) => requeue = sched.next_after(now),
        }
    }

    status.active = (!active.is_empty()).then_some(active);
    if Some(&status) != cj.status.as_ref() && !(cj.status.is_none() && status == CronJobStatus::default()) {
        let mut next = (*cj).clone();
        next.status = Some(status);
        let api: Api<CronJob> = Api::namespaced(state.client.clone(), &ns);
        match api.replace_status(&cj.name_any(), &PostParams::default(), &next).await {
            Ok(_) => {}
            Err(e) if pod_control::is_not_found(&e) => return Ok(Action::await_change()),
            Err(e) => return Err(e.into()),
        }
    }
    Ok(match requeue {
        Some(t) => Action::requeue((t - now).to_std().unwrap_or(Duration::ZERO) + Duration::from_millis(100)),
        None => Action::await_change(),
    })
}

/// Starts the Job of the most recent unmet schedule time, if any and the
/// concurrency policy allows; returns the next time to look.
#[allow(clippy::too_many_arguments)]
async fn start_due_job(
    state: &State,
    cj: &CronJob,
    sched: &Schedule,
    now: DateTime<Utc>,
    status: &mut CronJobStatus,
    active: &mut Vec<ObjectReference>,
    jobs_api: &Api<Job>,
    regarding: &ObjectReference,
) -> Result<Option<DateTime<Utc>>, SyncError> {
    let spec = cj.spec.as_ref();
    let next = sched.next_after(now);
    let since = status.last_schedule_time.as_ref().or(cj.metadata.creation_timestamp.as_ref()).map(to_chrono).unwrap_or(now);
    let missed = schedule::missed(sched, since, now, spec.and_then(|s| s.starting_deadline_seconds));
    if missed.count > TOO_MANY_MISSED {
        state
            .events
            .warning(regarding, "TooManyMissedTimes", format!("too many missed start times: {}. Set or decrease .spec.startingDeadlineSeconds or check clock skew", missed.count))
            .await;
    }
    let Some(at) = missed.most_recent else { return Ok(next) };
    if let Some(sds) = spec.and_then(|s| s.starting_deadline_seconds) {
        if at + chrono::Duration::seconds(sds) < now {
            state.events.warning(regarding, "MissSchedule", format!("Missed scheduled time to start a job: {}", rfc1123z(at))).await;
            return Ok(next);
        }
    }
    let name = schedule::job_name(&cj.name_any(), at);
    if active.iter().any(|r| r.name.as_deref() == Some(name.as_str())) {
        return Ok(next);
    }
    match spec.and_then(|s| s.concurrency_policy.as_deref()).unwrap_or("Allow") {
        "Forbid" if !active.is_empty() => {
            state
                .events
                .normal(regarding, "JobAlreadyActive", "Not starting job because prior execution is running and concurrency policy is Forbid".into())
                .await;
            return Ok(next);
        }
        "Replace" => {
            for r in active.drain(..) {
                let Some(old) = r.name.as_deref() else { continue };
                match jobs_api.delete(old, &DeleteParams { propagation_policy: Some(PropagationPolicy::Background), ..DeleteParams::default() }).await {
                    Ok(_) => state.events.normal(regarding, "SuccessfulDelete", format!("Deleted job {old}")).await,
                    Err(e) if pod_control::is_not_found(&e) => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
        _ => {}
    }
    let Some(job) = job_for(cj, sched, at) else { return Ok(next) };
    match jobs_api.create(&PostParams::default(), &job).await {
        Ok(created) => {
            state.events.normal(regarding, "SuccessfulCreate", format!("Created job {}", created.name_any())).await;
            active.push(job_ref(&created));
        }
        // Already created by an earlier sync whose status write was lost.
        Err(e) if pod_control::is_conflict(&e) => {
            if let Some(existing) = state.jobs.state().iter().find(|j| j.namespace() == cj.namespace() && j.name_any() == name) {
                let ours = pod_control::controller_of(&existing.metadata).is_some_and(|r| Some(&r.uid) == cj.metadata.uid.as_ref());
                if ours && history::finished(existing).is_none() && !active.iter().any(|r| r.uid == existing.metadata.uid) {
                    active.push(job_ref(existing));
                }
            }
        }
        Err(e) => {
            let message = match &e {
                kube::Error::Api(s) => s.message.clone(),
                other => other.to_string(),
            };
            state.events.warning(regarding, "FailedCreate", format!("Error creating job: {message}")).await;
            return Err(e.into());
        }
    }
    status.last_schedule_time = Some(to_time(at));
    Ok(next)
}

/// Deletes finished Jobs beyond the history limits (background propagation).
async fn cleanup_history(state: &State, cj: &CronJob, mine: &[Arc<Job>], jobs_api: &Api<Job>, regarding: &ObjectReference) {
    let spec = cj.spec.as_ref();
    let done: Vec<Finished> = mine
        .iter()
        .filter(|j| j.metadata.deletion_timestamp.is_none())
        .filter_map(|j| {
            let how = history::finished(j)?;
            let started = j.status.as_ref().and_then(|s| s.start_time.as_ref()).or(j.metadata.creation_timestamp.as_ref()).map(|t| t.0.as_second()).unwrap_or(0);
            Some(Finished { name: j.name_any(), succeeded: how == "Complete", started })
        })
        .collect();
    let victims = history::to_delete(&done, spec.and_then(|s| s.successful_jobs_history_limit), spec.and_then(|s| s.failed_jobs_history_limit));
    let dp = DeleteParams { propagation_policy: Some(PropagationPolicy::Background), ..DeleteParams::default() };
    for name in victims {
        match jobs_api.delete(&name, &dp).await {
            Ok(_) => state.events.normal(regarding, "SuccessfulDelete", format!("Deleted job {name}")).await,
            Err(e) => tracing::debug!(%e, job = %name, "could not delete a finished job"),
        }
    }
}
