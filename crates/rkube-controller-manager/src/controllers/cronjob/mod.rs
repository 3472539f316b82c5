//! `cronjob-controller`: starts a Job for each schedule time of a CronJob,
//! as upstream's `pkg/controller/cronjob` (`cronjob_controllerv2.go`):
//! `startingDeadlineSeconds`, `concurrencyPolicy` Allow/Forbid/Replace,
//! `suspend`, Job names `<cronjob>-<minutes since the epoch>`, the
//! `batch.kubernetes.io/cronjob-scheduled-timestamp` annotation, history
//! limits, and `status.active`, `lastScheduleTime`, `lastSuccessfulTime`.
//!
//! The controller reads the time through a [`Clock`] so tests can move it.

pub mod history;
pub mod schedule;
mod sync;

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::StreamExt;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use kube::api::Api;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::ResourceExt;

use crate::context::ControllerContext;
use crate::events::EventSink;
use crate::pod_control;

/// The reporting controller name of the cronjob controller's events.
pub const CONTROLLER: &str = "cronjob-controller";
/// Annotation on a created Job: its schedule time (RFC 3339, in the CronJob's zone).
pub const SCHEDULED_TIMESTAMP: &str = "batch.kubernetes.io/cronjob-scheduled-timestamp";

/// The time source of the controller (the system clock by default).
pub type Clock = Arc<dyn Fn() -> DateTime<Utc> + Send + Sync>;

pub(crate) struct State {
    client: kube::Client,
    jobs: Store<Job>,
    events: EventSink,
    clock: Clock,
}

/// Errors a sync ends with (it is retried).
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    /// The API server refused a request.
    #[error(transparent)]
    Api(#[from] kube::Error),
}

/// Starts the cronjob controller on the system clock.
pub fn start(ctx: ControllerContext) -> futures::future::BoxFuture<'static, anyhow::Result<()>> {
    Box::pin(run(ctx, Arc::new(Utc::now)))
}

/// Runs the cronjob controller reading the time from `clock` until `ctx` says stop.
pub async fn run(ctx: ControllerContext, clock: Clock) -> anyhow::Result<()> {
    let client = ctx.client.clone();
    let (jobs, writer) = reflector::store::<Job>();
    let job_events = reflector::reflector(writer, watcher(Api::<Job>::all(client.clone()), watcher::Config::default()))
        .default_backoff()
        .touched_objects();
    let controller = Controller::new(Api::<CronJob>::all(client.clone()), watcher::Config::default());
    let state = Arc::new(State { client: client.clone(), jobs, events: EventSink::new(client, CONTROLLER), clock });
    let stop = ctx.clone();
    controller
        .watches_stream(job_events, |job: Job| cronjob_of_job(&job))
        .graceful_shutdown_on(async move { stop.stopped().await })
        .run(sync::reconcile, error_policy, state)
        .for_each(|r| async move {
            if let Err(err) = r {
                tracing::debug!(%err, "cronjob sync");
            }
        })
        .await;
    Ok(())
}

fn cronjob_of_job(job: &Job) -> Option<ObjectRef<CronJob>> {
    let r = pod_control::controller_of(&job.metadata)?;
    (r.kind == "CronJob").then(|| ObjectRef::new(&r.name).within(&job.namespace().unwrap_or_default()))
}

fn error_policy(_cj: Arc<CronJob>, err: &SyncError, _state: Arc<State>) -> Action {
    tracing::debug!(%err, "cronjob sync failed; retrying");
    Action::requeue(Duration::from_secs(2))
}
