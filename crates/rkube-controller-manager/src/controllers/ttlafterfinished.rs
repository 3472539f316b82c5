//! `ttl-after-finished-controller`: deletes a finished Job
//! `spec.ttlSecondsAfterFinished` seconds after it completed or failed,
//! with foreground propagation, as upstream's `pkg/controller/ttlafterfinished`.
//! The finish time is the `lastTransitionTime` of the Job's `Complete` or
//! `Failed` condition.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Preconditions, PropagationPolicy};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::ResourceExt;

use crate::context::ControllerContext;
use crate::pod_control;

/// What the TTL says about a Job at some instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ttl {
    /// No TTL, or the Job has not finished: nothing to do.
    NotApplicable,
    /// Expires after this long.
    ExpiresIn(Duration),
    /// Expired: delete it.
    Expired,
}

/// The finish time of `job` (seconds since the epoch): when its `Complete`
/// or `Failed` condition turned `True`.
pub fn finish_time(job: &Job) -> Option<i64> {
    let conds = job.status.as_ref()?.conditions.as_ref()?;
    conds
        .iter()
        .find(|c| c.status == "True" && (c.type_ == "Complete" || c.type_ == "Failed"))
        .and_then(|c| c.last_transition_time.as_ref())
        .map(|t| t.0.as_second())
}

/// Upstream's `timeLeft`: `finished + ttl - now` (seconds since the epoch and seconds).
pub fn ttl_state(ttl: Option<i32>, finished: Option<i64>, now: i64) -> Ttl {
    let (Some(ttl), Some(finished)) = (ttl, finished) else { return Ttl::NotApplicable };
    let left = finished + i64::from(ttl) - now;
    if left <= 0 {
        Ttl::Expired
    } else {
        Ttl::ExpiresIn(Duration::from_secs(u64::try_from(left).unwrap_or(0)))
    }
}

fn state_of(job: &Job, now: i64) -> Ttl {
    if job.metadata.deletion_timestamp.is_some() {
        return Ttl::NotApplicable;
    }
    ttl_state(job.spec.as_ref().and_then(|s| s.ttl_seconds_after_finished), finish_time(job), now)
}

/// Starts the controller.
pub fn start(ctx: ControllerContext) -> futures::future::BoxFuture<'static, anyhow::Result<()>> {
    Box::pin(run(ctx))
}

/// Runs the controller until `ctx` says stop.
pub async fn run(ctx: ControllerContext) -> anyhow::Result<()> {
    let client = ctx.client.clone();
    let stop = ctx.clone();
    Controller::new(Api::<Job>::all(client.clone()), watcher::Config::default())
        .graceful_shutdown_on(async move { stop.stopped().await })
        .run(reconcile, |_, _: &kube::Error, _| Action::requeue(Duration::from_secs(2)), Arc::new(client))
        .for_each(|r| async move {
            if let Err(err) = r {
                tracing::debug!(%err, "ttl-after-finished sync");
            }
        })
        .await;
    Ok(())
}

async fn reconcile(job: Arc<Job>, client: Arc<kube::Client>) -> Result<Action, kube::Error> {
    match state_of(&job, Timestamp::now().as_second()) {
        Ttl::NotApplicable => return Ok(Action::await_change()),
        Ttl::ExpiresIn(d) => return Ok(Action::requeue(d + Duration::from_millis(100))),
        Ttl::Expired => {}
    }
    // The cache may be stale: check the Job the server has before deleting.
    let api: Api<Job> = Api::namespaced((*client).clone(), &job.namespace().unwrap_or_default());
    let Some(fresh) = api.get_opt(&job.name_any()).await? else { return Ok(Action::await_change()) };
    if state_of(&fresh, Timestamp::now().as_second()) != Ttl::Expired {
        return Ok(Action::requeue(Duration::from_secs(1)));
    }
    let dp = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Foreground),
        preconditions: Some(Preconditions { resource_version: fresh.metadata.resource_version.clone(), uid: fresh.metadata.uid.clone() }),
        ..DeleteParams::default()
    };
    match api.delete(&fresh.name_any(), &dp).await {
        Ok(_) => tracing::info!(job = %fresh.name_any(), "deleted a finished job past its TTL"),
        Err(e) if pod_control::is_gone(&e) => {}
        Err(e) => return Err(e),
    }
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finished_jobs_expire_ttl_seconds_after_finishing() {
        assert_eq!(ttl_state(None, Some(100), 500), Ttl::NotApplicable);
        assert_eq!(ttl_state(Some(10), None, 500), Ttl::NotApplicable);
        assert_eq!(ttl_state(Some(10), Some(100), 105), Ttl::ExpiresIn(Duration::from_secs(5)));
        assert_eq!(ttl_state(Some(10), Some(100), 110), Ttl::Expired);
        assert_eq!(ttl_state(Some(0), Some(100), 100), Ttl::Expired);
    }

    #[test]
    fn the_finish_time_is_when_the_terminal_condition_turned_true() {
        let job: Job = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "j"},
            "status": {"conditions": [
                {"type": "SuccessCriteriaMet", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"},
                {"type": "Complete", "status": "True", "lastTransitionTime": "2026-01-01T00:00:05Z"},
            ]},
        }))
        .unwrap();
        assert_eq!(finish_time(&job), Some(1_767_225_605));
    }
}
