//! `job-controller`: runs a Job's pods to completion, as upstream's
//! `pkg/controller/job` (Kubernetes 1.33): `parallelism`/`completions`
//! (NonIndexed and Indexed), `backoffLimit` with exponential pod-creation
//! backoff, `activeDeadlineSeconds`, `podFailurePolicy`, `suspend`, pod
//! tracking with the `batch.kubernetes.io/job-tracking` finalizer and
//! `status.uncountedTerminatedPods`, and the `SuccessCriteriaMet` /
//! `FailureTarget` conditions that precede `Complete` / `Failed`.
//!
//! A sync goes in three steps, each ending in one status write (a full
//! `replace_status` guarded by the Job's resourceVersion, so a stale cache
//! never counts a pod twice): record newly terminated pods in
//! `uncountedTerminatedPods`; remove their finalizers and move them into
//! `succeeded`/`failed`; then decide conditions and create or delete pods.

pub mod decide;
pub mod failure_policy;
pub mod per_index;
pub mod pods;
mod sync;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::ResourceExt;

use crate::context::ControllerContext;
use crate::events::EventSink;
use crate::expectations::Expectations;
use crate::pod_control;

/// The reporting controller name of the job controller's events.
pub const CONTROLLER: &str = "job-controller";

/// Tunables of the job controller that upstream fixes in code.
#[derive(Debug, Clone, Copy)]
pub struct JobOptions {
    /// Pod-creation delay after the first failure (upstream 10s), doubled
    /// per further consecutive failure.
    pub backoff_base: Duration,
    /// Cap of that delay (upstream 6 minutes).
    pub backoff_max: Duration,
}

impl Default for JobOptions {
    fn default() -> Self {
        JobOptions { backoff_base: decide::DEFAULT_BACKOFF, backoff_max: decide::MAX_BACKOFF }
    }
}

/// Consecutive failures of one job since its last success (upstream's backoff record).
#[derive(Debug, Clone, Copy)]
struct BackoffRecord {
    failures: u32,
    last_failure: Instant,
}

pub(crate) struct State {
    client: kube::Client,
    pods: Store<Pod>,
    expectations: Expectations,
    events: EventSink,
    options: JobOptions,
    backoff: Mutex<HashMap<String, BackoffRecord>>,
    /// UIDs of pods counted in a job's status whose finalizer removal the
    /// pod cache may not show yet (upstream's finalizer expectations): a
    /// lagging cache must not count them again.
    counted: Mutex<std::collections::HashSet<String>>,
}

impl State {
    /// Records newly observed failures (`failed`) and successes of the job `uid`.
    fn record(&self, uid: &str, failed: usize, succeeded: usize) {
        let mut m = self.backoff.lock().unwrap_or_else(|e| e.into_inner());
        if failed > 0 {
            let r = m.entry(uid.to_string()).or_insert(BackoffRecord { failures: 0, last_failure: Instant::now() });
            r.failures = r.failures.saturating_add(u32::try_from(failed).unwrap_or(u32::MAX));
            r.last_failure = Instant::now();
        } else if succeeded > 0 {
            m.remove(uid);
        }
    }

    /// Remembers that the pods `uids` were counted and lose their finalizer.
    fn mark_counted<'a>(&self, uids: impl IntoIterator<Item = &'a String>) {
        self.counted.lock().unwrap_or_else(|e| e.into_inner()).extend(uids.into_iter().cloned());
    }

    /// Whether pod `uid` was counted already (its finalizer is being removed).
    fn is_counted(&self, uid: &str) -> bool {
        self.counted.lock().unwrap_or_else(|e| e.into_inner()).contains(uid)
    }

    /// Forgets counted pods the cache shows without the finalizer (or not at all).
    fn prune_counted(&self, pods: &Store<Pod>) {
        let with: std::collections::HashSet<String> =
            pods.state().iter().filter(|p| pods::has_tracking_finalizer(p)).filter_map(|p| p.metadata.uid.clone()).collect();
        self.counted.lock().unwrap_or_else(|e| e.into_inner()).retain(|u| with.contains(u));
    }

    /// How long pod creation for job `uid` must still wait.
    fn backoff_remaining(&self, uid: &str) -> Duration {
        let m = self.backoff.lock().unwrap_or_else(|e| e.into_inner());
        let Some(r) = m.get(uid) else { return Duration::ZERO };
        let delay = decide::backoff_delay(r.failures, self.options.backoff_base, self.options.backoff_max);
        delay.saturating_sub(r.last_failure.elapsed())
    }
}

/// Errors a sync ends with (it is retried).
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    /// The API server refused a request.
    #[error(transparent)]
    Api(#[from] kube::Error),
}

/// Starts the job controller with upstream's backoff.
pub fn start(ctx: ControllerContext) -> futures::future::BoxFuture<'static, anyhow::Result<()>> {
    Box::pin(run(ctx, JobOptions::default()))
}

/// Runs the job controller with `options` until `ctx` says stop.
pub async fn run(ctx: ControllerContext, options: JobOptions) -> anyhow::Result<()> {
    let client = ctx.client.clone();
    let (pods, writer) = reflector::store::<Pod>();
    let pod_events = reflector::reflector(writer, watcher(Api::<Pod>::all(client.clone()), watcher::Config::default()))
        .default_backoff()
        .touched_objects();
    let controller = Controller::new(Api::<Job>::all(client.clone()), watcher::Config::default());
    let jobs = controller.store();
    let state = Arc::new(State {
        client: client.clone(),
        pods: pods.clone(),
        expectations: Expectations::default(),
        events: EventSink::new(client.clone(), CONTROLLER),
        options,
        backoff: Mutex::new(HashMap::new()),
        counted: Mutex::new(Default::default()),
    });
    let sweeper = tokio::spawn(release_orphans(client, pods, jobs, state.clone(), ctx.clone()));
    let stop = ctx.clone();
    controller
        .watches_stream(pod_events, |pod: Pod| job_of_pod(&pod))
        .graceful_shutdown_on(async move { stop.stopped().await })
        .run(sync::reconcile, error_policy, state)
        .for_each(|r| async move {
            if let Err(err) = r {
                tracing::debug!(%err, "job sync");
            }
        })
        .await;
    sweeper.abort();
    Ok(())
}

/// The Job a pod event concerns: its controller when that is a Job.
fn job_of_pod(pod: &Pod) -> Option<ObjectRef<Job>> {
    let r = pod_control::controller_of(&pod.metadata)?;
    (r.kind == "Job" && r.api_version.starts_with("batch/")).then(|| ObjectRef::new(&r.name).within(&pod.namespace().unwrap_or_default()))
}

fn error_policy(_job: Arc<Job>, err: &SyncError, _state: Arc<State>) -> Action {
    tracing::debug!(%err, "job sync failed; retrying");
    Action::requeue(Duration::from_secs(1))
}

/// Removes the tracking finalizer from pods whose Job is gone (upstream
/// does this when it observes a Job's deletion), so a deleted Job's pods
/// (and the namespace holding them) can go.
async fn release_orphans(client: kube::Client, pods: Store<Pod>, jobs: Store<Job>, state: Arc<State>, ctx: ControllerContext) {
    let stopped = ctx.stopped();
    tokio::pin!(stopped);
    loop {
        tokio::select! {
            _ = &mut stopped => return,
            _ = tokio::time::sleep(Duration::from_secs(2)) => {}
        }
        if pods.wait_until_ready().await.is_err() || jobs.wait_until_ready().await.is_err() {
            continue;
        }
        state.prune_counted(&pods);
        let live: std::collections::HashSet<String> = jobs.state().iter().filter_map(|j| j.metadata.uid.clone()).collect();
        for pod in pods.state().iter().filter(|p| pods::has_tracking_finalizer(p)) {
            let Some(owner) = pod_control::controller_of(&pod.metadata) else { continue };
            if owner.kind != "Job" || live.contains(&owner.uid) {
                continue;
            }
            // Confirm with the server: the cache may not have seen a new Job yet.
            let ns = pod.namespace().unwrap_or_default();
            let api: Api<Job> = Api::namespaced(client.clone(), &ns);
            match api.get_opt(&owner.name).await {
                Ok(Some(j)) if j.metadata.uid.as_deref() == Some(owner.uid.as_str()) => continue,
                Ok(_) => {}
                Err(_) => continue,
            }
            let pod_api: Api<Pod> = Api::namespaced(client.clone(), &ns);
            if let Err(err) = pods::remove_tracking_finalizer(&pod_api, pod).await {
                tracing::debug!(%err, pod = %pod.name_any(), "could not remove the job tracking finalizer");
            }
        }
    }
}
