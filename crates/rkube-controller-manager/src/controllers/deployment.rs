//! `deployment-controller`: rolls Deployments out through ReplicaSets named
//! `<deployment>-<pod-template-hash>`, as upstream's
//! `pkg/controller/deployment` (`deployment_controller.go`, `sync.go`,
//! `rolling.go`, `recreate.go`, `progress.go`).
//!
//! Built on kube-runtime: a `Controller` over Deployments, triggered by a
//! ReplicaSet reflector whose store the sync reads. The replica arithmetic
//! and status are pure functions in [`util`] and [`status`]; [`sync`] applies them.

pub mod status;
pub mod sync;
pub mod util;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use kube::api::Api;
use kube::core::Selector;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::ResourceExt;

use crate::context::ControllerContext;
use crate::events::EventSink;
use crate::pod_control;

/// The reporting controller name of events.
pub const CONTROLLER: &str = "deployment-controller";

/// What every sync shares.
pub struct State {
    /// The client.
    pub client: kube::Client,
    /// Every ReplicaSet, from the reflector.
    pub replica_sets: Store<ReplicaSet>,
    /// Where events go.
    pub events: EventSink,
}

/// The selector of `d`, `None` when empty or invalid.
pub fn selector(d: &Deployment) -> Option<Selector> {
    let sel = Selector::try_from(d.spec.as_ref()?.selector.clone()).ok()?;
    (!sel.selects_all()).then_some(sel)
}

/// Starts the controller (a row of [`crate::controllers::CONTROLLERS`]).
pub fn start(ctx: ControllerContext) -> futures::future::BoxFuture<'static, anyhow::Result<()>> {
    Box::pin(run(ctx))
}

/// Runs the Deployment controller until `ctx` says stop.
pub async fn run(ctx: ControllerContext) -> anyhow::Result<()> {
    let client = ctx.client.clone();
    let (replica_sets, writer) = reflector::store::<ReplicaSet>();
    let rs_events = reflector::reflector(writer, watcher(Api::<ReplicaSet>::all(client.clone()), watcher::Config::default()))
        .default_backoff()
        .touched_objects();
    let controller = Controller::new(Api::<Deployment>::all(client.clone()), watcher::Config::default());
    let deployments = controller.store();
    let state = Arc::new(State { client: client.clone(), replica_sets, events: EventSink::new(client, CONTROLLER) });
    let stop = ctx.clone();
    controller
        .watches_stream(rs_events, move |rs: ReplicaSet| deployments_of(&rs, &deployments))
        .graceful_shutdown_on(async move { stop.stopped().await })
        .run(reconcile, error_policy, state)
        .for_each(|r| async move {
            if let Err(err) = r {
                tracing::debug!(%err, "deployment sync");
            }
        })
        .await;
    Ok(())
}

/// The Deployments a ReplicaSet event concerns: its controller, or for an
/// orphan every Deployment of its namespace selecting it.
fn deployments_of(rs: &ReplicaSet, deployments: &Store<Deployment>) -> Vec<ObjectRef<Deployment>> {
    let ns = rs.namespace().unwrap_or_default();
    match pod_control::controller_of(&rs.metadata) {
        Some(r) if r.kind == "Deployment" => vec![ObjectRef::new(&r.name).within(&ns)],
        Some(_) => vec![],
        None => deployments
            .state()
            .iter()
            .filter(|d| d.namespace().as_deref() == Some(ns.as_str()))
            .filter(|d| pod_control::selects(selector(d).as_ref(), rs.labels()))
            .map(|d| ObjectRef::from_obj(d.as_ref()))
            .collect(),
    }
}

fn error_policy(_d: Arc<Deployment>, err: &kube::Error, _state: Arc<State>) -> Action {
    tracing::debug!(%err, "deployment sync failed; retrying");
    Action::requeue(Duration::from_secs(2))
}

async fn reconcile(d: Arc<Deployment>, state: Arc<State>) -> Result<Action, kube::Error> {
    if tokio::time::timeout(Duration::from_secs(1), state.replica_sets.wait_until_ready()).await.is_err() {
        return Ok(Action::requeue(Duration::from_millis(500)));
    }
    sync::sync_deployment(d.as_ref().clone(), &state).await
}
