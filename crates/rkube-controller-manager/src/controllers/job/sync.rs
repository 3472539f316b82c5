//! One job sync (upstream's `syncJob`): count terminated pods through
//! `uncountedTerminatedPods`, decide conditions, create or delete pods.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::batch::v1::{Job, JobCondition, JobStatus, UncountedTerminatedPods};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::controller::Action;
use kube::ResourceExt;

use super::decide::{self, Failure, Scale};
use super::failure_policy::{self, Verdict};
use super::{per_index, pods};
use super::{State, SyncError};
use crate::expectations::Seen;
use crate::{pod_control, pod_util};

/// Whether `status` has a condition `type_` with status `True`.
pub fn has_condition(status: &JobStatus, type_: &str) -> bool {
    status.conditions.iter().flatten().any(|c| c.type_ == type_ && c.status == "True")
}

fn condition(type_: &str, status: &str, reason: &str, message: &str, now: Timestamp) -> JobCondition {
    JobCondition {
        type_: type_.into(),
        status: status.into(),
        reason: Some(reason.into()),
        message: Some(message.into()),
        last_probe_time: Some(Time(now)),
        last_transition_time: Some(Time(now)),
    }
}

/// Sets condition `c` in `status`: replaces one of the same type when its
/// status, reason or message differ (keeping the transition time when the
/// status is the same), adds it otherwise.
fn set_condition(status: &mut JobStatus, c: JobCondition) {
    let conds = status.conditions.get_or_insert_with(Vec::new);
    match conds.iter_mut().find(|x| x.type_ == c.type_) {
        Some(old) if old.status == c.status && old.reason == c.reason && old.message == c.message => {}
        Some(old) => {
            let keep = (old.status == c.status).then(|| old.last_transition_time.clone()).flatten();
            *old = c;
            if keep.is_some() {
                old.last_transition_time = keep;
            }
        }
        None => conds.push(c),
    }
}

fn uncounted(status: &JobStatus) -> (Vec<String>, Vec<String>) {
    let u = status.uncounted_terminated_pods.clone().unwrap_or_default();
    (u.succeeded.unwrap_or_default(), u.failed.unwrap_or_default())
}

async fn write_status(state: &State, job: &Job, status: JobStatus) -> Result<(), SyncError> {
    let mut next = job.clone();
    next.status = Some(status);
    let api: Api<Job> = Api::namespaced(state.client.clone(), &job.namespace().unwrap_or_default());
    match api.replace_status(&job.name_any(), &PostParams::default(), &next).await {
        Ok(_) => Ok(()),
        Err(e) if pod_control::is_not_found(&e) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Syncs one Job.
pub(super) async fn reconcile(job: Arc<Job>, state: Arc<State>) -> Result<Action, SyncError> {
    if tokio::time::timeout(Duration::from_secs(1), state.pods.wait_until_ready()).await.is_err() {
        return Ok(Action::requeue(Duration::from_millis(500)));
    }
    let Some(owner_ref) = pod_control::controller_ref(job.as_ref()) else { return Ok(Action::await_change()) };
    let Some(spec) = job.spec.as_ref() else { return Ok(Action::await_change()) };
    let ns = job.namespace().unwrap_or_default();
    let key = format!("{ns}/{}", job.name_any());
    let uid = owner_ref.uid.clone();
    let pods_api: Api<Pod> = Api::namespaced(state.client.clone(), &ns);
    let mine: Vec<Arc<Pod>> = state
        .pods
        .state()
        .into_iter()
        .filter(|p| p.namespace().as_deref() == Some(ns.as_str()))
        .filter(|p| pod_control::controller_of(&p.metadata).is_some_and(|r| r.uid == uid))
        .collect();
    let mut status = job.status.clone().unwrap_or_default();
    let finished = has_condition(&status, "Complete") || has_condition(&status, "Failed");
    if finished || job.metadata.deletion_timestamp.is_some() {
        for p in mine.iter().filter(|p| pods::has_tracking_finalizer(p)) {
            pods::remove_tracking_finalizer(&pods_api, p).await?;
        }
        return Ok(Action::await_change());
    }
    let now = Timestamp::now();
    let indexed = spec.completion_mode.as_deref() == Some("Indexed");
    let completions = spec.completions;
    let only_replace_failed = only_replaces_failed_pods(spec);
    let index_limit = per_index::limit(spec);

    // Step 1: newly terminated pods go to uncountedTerminatedPods.
    let (mut unc_succ, mut unc_fail) = uncounted(&status);
    let mut new_succ = 0;
    let mut new_fail = 0;
    let mut fail_job: Option<Failure> = None;
    let mut failed_now: BTreeSet<i32> = BTreeSet::new();
    // Under a per-index limit, a counted failure may end its index.
    let mut index_fails = |p: &Pod, fail_index: bool| {
        if let (Some(limit), Some(i)) = (index_limit, pods::completion_index(p)) {
            if fail_index || per_index::exhausts(p, limit) {
                failed_now.insert(i);
            }
        }
    };
    for p in mine.iter().filter(|p| pods::has_tracking_finalizer(p)) {
        let puid = p.metadata.uid.clone().unwrap_or_default();
        if unc_succ.contains(&puid) || unc_fail.contains(&puid) || state.is_counted(&puid) {
            continue;
        }
        match pods::phase(p) {
            "Succeeded" => {
                unc_succ.push(puid);
                new_succ += 1;
            }
            "Failed" => match failure_policy::evaluate(spec.pod_failure_policy.as_ref(), p) {
                Verdict::Ignore => pods::remove_tracking_finalizer(&pods_api, p).await?,
                verdict @ (Verdict::Count | Verdict::FailIndex) => {
                    unc_fail.push(puid);
                    new_fail += 1;
                    index_fails(p, verdict == Verdict::FailIndex);
                }
                Verdict::FailJob(message) => {
                    unc_fail.push(puid);
                    new_fail += 1;
                    fail_job.get_or_insert(Failure { reason: "PodFailurePolicy", message });
                }
            },
            // A pod deleted before it finished counts as failed, unless only
            // failed pods are replaced: then it counts once it has failed.
            _ if p.metadata.deletion_timestamp.is_some() && !only_replace_failed => {
                unc_fail.push(puid);
                new_fail += 1;
                index_fails(p, false);
            }
            _ => {}
        }
    }
    if new_succ + new_fail > 0 {
        state.record(&uid, new_fail, new_succ);
        status.uncounted_terminated_pods = Some(UncountedTerminatedPods { succeeded: Some(unc_succ), failed: Some(unc_fail) });
        if !failed_now.is_empty() {
            let mut failed = decide::parse_indexes(status.failed_indexes.as_deref().unwrap_or(""), completions.unwrap_or(0));
            failed.extend(failed_now);
            status.failed_indexes = Some(decide::format_indexes(&failed));
        }
        if let Some(f) = fail_job {
            if !has_condition(&status, "FailureTarget") && !has_condition(&status, "SuccessCriteriaMet") {
                set_condition(&mut status, condition("FailureTarget", "True", f.reason, &f.message, now));
            }
        }
        write_status(&state, &job, status).await?;
        return Ok(Action::requeue(Duration::from_secs(1)));
    }

    // Step 2: counted pods lose their finalizer and move into the counters.
    let completed_before = status.completed_indexes.clone().unwrap_or_default();
    let mut completed = decide::parse_indexes(&completed_before, completions.unwrap_or(0));
    if indexed {
        for p in mine.iter().filter(|p| pods::phase(p) == "Succeeded") {
            let uid_p = p.metadata.uid.as_deref().unwrap_or("");
            let counted = !pods::has_tracking_finalizer(p) || unc_succ.iter().any(|u| u == uid_p);
            if let Some(i) = pods::completion_index(p).filter(|i| *i < completions.unwrap_or(0)) {
                if counted {
                    completed.insert(i);
                }
            }
        }
    }
    if !unc_succ.is_empty() || !unc_fail.is_empty() {
        // Every finalizer comes off before the pods count: a pod counted
        // with its finalizer left on would never be looked at again (it
        // stays terminating, and the job never finishes).
        for p in mine.iter() {
            let puid = p.metadata.uid.as_deref().unwrap_or("");
            if unc_succ.iter().chain(unc_fail.iter()).any(|u| u == puid) {
                pods::remove_tracking_finalizer(&pods_api, p).await?;
            }
        }
        state.mark_counted(unc_succ.iter().chain(unc_fail.iter()));
        let count = |v: &Vec<String>| i32::try_from(v.len()).unwrap_or(i32::MAX);
        status.succeeded = Some(status.succeeded.unwrap_or(0).saturating_add(count(&unc_succ)));
        status.failed = Some(status.failed.unwrap_or(0).saturating_add(count(&unc_fail)));
        status.uncounted_terminated_pods = Some(UncountedTerminatedPods { succeeded: Some(vec![]), failed: Some(vec![]) });
        if indexed {
            status.completed_indexes = Some(decide::format_indexes(&completed));
        }
        write_status(&state, &job, status).await?;
        return Ok(Action::requeue(Duration::from_secs(1)));
    }

    // Step 3: conditions and pods.
    let succeeded = if indexed { i32::try_from(completed.len()).unwrap_or(i32::MAX) } else { status.succeeded.unwrap_or(0) };
    let failed = status.failed.unwrap_or(0);
    let active: Vec<&Pod> = mine.iter().map(|p| p.as_ref()).filter(|p| pod_util::is_active(p)).collect();
    let terminating_pods: Vec<&Pod> = mine.iter().map(|p| p.as_ref()).filter(|p| p.metadata.deletion_timestamp.is_some() && !pods::is_terminal(p)).collect();
    let terminating = terminating_pods.len();
    // Pods still terminating hold their place when only failed pods are replaced.
    let holding: &[&Pod] = if only_replace_failed { &terminating_pods } else { &[] };
    let ready = active.iter().filter(|p| pod_util::is_ready(p)).count();
    let suspended = spec.suspend == Some(true);
    let failed_indexes = decide::parse_indexes(status.failed_indexes.as_deref().unwrap_or(""), completions.unwrap_or(0));
    if index_limit.is_some() && status.failed_indexes.is_none() {
        status.failed_indexes = Some(String::new());
    }
    let regarding = pod_control::object_ref(job.as_ref());
    let mut requeue = Duration::from_secs(300);

    if suspended {
        if !has_condition(&status, "Suspended") {
            set_condition(&mut status, condition("Suspended", "True", "JobSuspended", "Job suspended", now));
            state.events.normal(&regarding, "Suspended", "Job suspended".into()).await;
        }
        status.start_time = None;
    } else {
        if has_condition(&status, "Suspended") {
            set_condition(&mut status, condition("Suspended", "False", "JobResumed", "Job resumed", now));
            state.events.normal(&regarding, "Resumed", "Job resumed".into()).await;
            status.start_time = None;
        }
        if status.start_time.is_none() {
            status.start_time = Some(Time(now));
        }
    }

    let mut target = status.conditions.iter().flatten().find(|c| c.status == "True" && (c.type_ == "FailureTarget" || c.type_ == "SuccessCriteriaMet")).cloned();
    if target.is_none() && !suspended {
        let start = status.start_time.as_ref().map(|t| t.0.as_second());
        let failure = match decide::past_deadline(start, spec.active_deadline_seconds, now.as_second()) {
            Err(f) => Some(f),
            Ok(left) => {
                if let Some(left) = left {
                    requeue = requeue.min(left + Duration::from_millis(100));
                }
                decide::backoff_limit_exceeded(failed, spec.backoff_limit.unwrap_or(6))
                    .or_else(|| index_limit.and_then(|_| per_index::failure(spec, &failed_indexes, &completed)))
            }
        };
        let rules = spec.success_policy.as_ref().map(|p| p.rules.as_slice()).filter(|_| indexed).unwrap_or_default();
        let c = if let Some(f) = failure {
            Some(condition("FailureTarget", "True", f.reason, &f.message, now))
        } else if let Some(message) = decide::success_policy_met(rules, completions.unwrap_or(0), &completed) {
            Some(condition("SuccessCriteriaMet", "True", "SuccessPolicy", &message, now))
        } else if decide::success_reached(completions, succeeded, active.len()) {
            Some(condition("SuccessCriteriaMet", "True", "CompletionsReached", "Reached expected number of succeeded pods", now))
        } else {
            None
        };
        if let Some(c) = c {
            set_condition(&mut status, c.clone());
            target = Some(c);
        }
    }

    let seen = mine.iter().map(|p| Seen {
        name: p.metadata.name.as_deref().unwrap_or(""),
        uid: p.metadata.uid.as_deref().unwrap_or(""),
        terminating: p.metadata.deletion_timestamp.is_some(),
    });
    let may_manage = state.expectations.satisfied(&key, seen);
    if let Some(t) = &target {
        // The job is done: stop what runs, then record the terminal condition.
        if may_manage && !active.is_empty() {
            delete_pods(&state, &key, &pods_api, &regarding, &active).await?;
        }
        if active.is_empty() && terminating == 0 {
            let (reason, message) = (t.reason.clone().unwrap_or_default(), t.message.clone().unwrap_or_default());
            if t.type_ == "SuccessCriteriaMet" {
                set_condition(&mut status, condition("Complete", "True", &reason, &message, now));
                status.completion_time = Some(Time(now));
                state.events.normal(&regarding, "Completed", "Job completed".into()).await;
            } else {
                set_condition(&mut status, condition("Failed", "True", &reason, &message, now));
                state.events.warning(&regarding, &reason, message).await;
            }
        }
    } else if may_manage {
        let backoff_left = state.backoff_remaining(&uid);
        if indexed {
            let scope = IndexedScope { active: &active, holding, completed: &completed, failed: &failed_indexes, all: &mine, per_index: index_limit.is_some() };
            requeue = requeue.min(manage_indexed(&state, &job, &key, &pods_api, &regarding, scope, backoff_left, suspended).await?);
        } else {
            let scale = match decide::scale(suspended, spec.parallelism.unwrap_or(1), completions, succeeded, active.len()) {
                Scale::Create(n) => n.checked_sub(holding.len()).filter(|n| *n > 0).map_or(Scale::Steady, Scale::Create),
                other => other,
            };
            match scale {
                Scale::Steady => {}
                Scale::Create(_) if !backoff_left.is_zero() => requeue = requeue.min(backoff_left),
                Scale::Create(n) => create_pods(&state, &job, &key, &pods_api, &regarding, vec![(None, None); n]).await?,
                Scale::Delete(n) => {
                    let mut ranked = active.clone();
                    pod_util::sort_for_deletion(&mut ranked, &active, now);
                    delete_pods(&state, &key, &pods_api, &regarding, &ranked[..n.min(ranked.len())]).await?;
                }
            }
        }
    }

    status.active = Some(i32::try_from(active.len()).unwrap_or(i32::MAX));
    status.ready = Some(i32::try_from(ready).unwrap_or(i32::MAX));
    status.terminating = Some(i32::try_from(terminating).unwrap_or(i32::MAX));
    status.succeeded = Some(status.succeeded.unwrap_or(0));
    status.failed = Some(failed);
    if indexed {
        status.completed_indexes = Some(decide::format_indexes(&completed));
    }
    if Some(&status) != job.status.as_ref() {
        write_status(&state, &job, status).await?;
    }
    Ok(Action::requeue(requeue))
}

/// Whether a Job replaces a pod only once it has failed, not while it
/// terminates (`podReplacementPolicy: Failed`, which the API server
/// defaults when a `podFailurePolicy` is set; upstream's
/// `onlyReplaceFailedPods`, KEP-3939).
pub fn only_replaces_failed_pods(spec: &k8s_openapi::api::batch::v1::JobSpec) -> bool {
    spec.pod_replacement_policy.as_deref() == Some("Failed")
}

/// The pods an Indexed job's management looks at.
struct IndexedScope<'a> {
    /// Active pods (not terminating, not terminal).
    active: &'a [&'a Pod],
    /// Terminating pods that keep their index until they fail
    /// (`podReplacementPolicy: Failed`); empty otherwise.
    holding: &'a [&'a Pod],
    /// Succeeded indexes.
    completed: &'a BTreeSet<i32>,
    /// Indexes failed past their per-index limit (never started again).
    failed: &'a BTreeSet<i32>,
    /// Every pod of the job (for the per-index failure counts).
    all: &'a [Arc<Pod>],
    /// Whether the job retries per index (`backoffLimitPerIndex`).
    per_index: bool,
}

/// Creates or deletes an Indexed job's pods: extra pods of an index and
/// pods of indexes out of range go; missing indexes get a pod (after the
/// backoff), except those a terminating pod still holds. Returns when to
/// look again.
#[allow(clippy::too_many_arguments)]
async fn manage_indexed(
    state: &State,
    job: &Job,
    key: &str,
    pods_api: &Api<Pod>,
    regarding: &k8s_openapi::api::core::v1::ObjectReference,
    scope: IndexedScope<'_>,
    backoff_left: Duration,
    suspended: bool,
) -> Result<Duration, SyncError> {
    let IndexedScope { active, holding, completed, failed, all, per_index } = scope;
    let spec = job.spec.as_ref();
    let completions = spec.and_then(|s| s.completions).unwrap_or(0);
    let parallelism = spec.and_then(|s| s.parallelism).unwrap_or(1);
    let mut seen = BTreeSet::new();
    let mut extra: Vec<&Pod> = Vec::new();
    for p in active {
        match pods::completion_index(p) {
            Some(i) if i < completions && !completed.contains(&i) && !failed.contains(&i) && !suspended && seen.insert(i) => {}
            _ => extra.push(p),
        }
    }
    if !extra.is_empty() {
        delete_pods(state, key, pods_api, regarding, &extra).await?;
        return Ok(Duration::from_secs(300));
    }
    let mut occupied = seen.clone();
    occupied.extend(holding.iter().filter_map(|p| pods::completion_index(p)));
    let done: BTreeSet<i32> = completed.union(failed).copied().collect();
    let missing = decide::missing_indexes(completions, parallelism, &done, &occupied, seen.len() + holding.len(), suspended);
    if missing.is_empty() {
        return Ok(Duration::from_secs(300));
    }
    if !backoff_left.is_zero() {
        return Ok(backoff_left);
    }
    let counts = if per_index { per_index::next_failure_counts(all.iter().map(|p| p.as_ref()), &missing) } else { Default::default() };
    let wanted = missing.into_iter().map(|i| (Some(i), counts.get(&i).copied())).collect();
    create_pods(state, job, key, pods_api, regarding, wanted).await?;
    Ok(Duration::from_secs(300))
}

async fn create_pods(
    state: &State,
    job: &Job,
    key: &str,
    pods_api: &Api<Pod>,
    regarding: &k8s_openapi::api::core::v1::ObjectReference,
    indexes: Vec<(Option<i32>, Option<i32>)>,
) -> Result<(), SyncError> {
    let Some(owner) = pod_control::controller_ref(job) else { return Ok(()) };
    let pp = PostParams::default();
    let wanted: Vec<Pod> = indexes.into_iter().filter_map(|(i, count)| pods::pod_for(job, owner.clone(), i, count)).collect();
    let results = futures::future::join_all(wanted.iter().map(|p| pods_api.create(&pp, p))).await;
    let mut created = Vec::new();
    let mut failure = None;
    for r in results {
        match r {
            Ok(p) => created.push(p.name_any()),
            Err(e) => failure = Some(e),
        }
    }
    state.expectations.expect_creations(key, created.clone());
    for name in created {
        state.events.normal(regarding, "SuccessfulCreate", format!("Created pod: {name}")).await;
    }
    if let Some(e) = failure {
        let message = match &e {
            kube::Error::Api(s) => s.message.clone(),
            other => other.to_string(),
        };
        state.events.warning(regarding, "FailedCreate", format!("Error creating: {message}")).await;
        return Err(e.into());
    }
    Ok(())
}

async fn delete_pods(
    state: &State,
    key: &str,
    pods_api: &Api<Pod>,
    regarding: &k8s_openapi::api::core::v1::ObjectReference,
    victims: &[&Pod],
) -> Result<(), SyncError> {
    state.expectations.expect_deletions(key, victims.iter().filter_map(|p| p.metadata.uid.clone()));
    let dp = DeleteParams::default();
    for p in victims {
        match pods_api.delete(&p.name_any(), &dp).await {
            Ok(_) => state.events.normal(regarding, "SuccessfulDelete", format!("Deleted pod: {}", p.name_any())).await,
            Err(e) if pod_control::is_not_found(&e) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}
