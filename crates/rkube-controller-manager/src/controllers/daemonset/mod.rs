//! `daemonset-controller`: one pod of each DaemonSet on every node that
//! should run it, as upstream's `pkg/controller/daemon`.
//!
//! Daemon pods are created without `spec.nodeName`, pinned to their node by
//! required node affinity on `metadata.name`, and placed by the scheduler
//! (upstream since 1.12). Built on kube-runtime: a `Controller` over
//! DaemonSets, triggered by pod, node and ControllerRevision reflectors
//! whose stores the sync reads. Decisions are pure functions in [`plan`];
//! [`Expectations`] keep a lagging pod cache from creating a second pod on
//! a node (pod names are generated, unlike a StatefulSet's).

pub mod plan;
mod sync;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::Api;
use kube::core::Selector;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::ResourceExt;

use crate::context::ControllerContext;
use crate::events::EventSink;
use crate::expectations::Expectations;
use crate::pod_control;

/// The reporting controller name of events.
pub const CONTROLLER: &str = "daemonset-controller";

/// What every sync shares.
pub struct State {
    /// The client.
    pub client: kube::Client,
    /// Every pod.
    pub pods: Store<Pod>,
    /// Every node.
    pub nodes: Store<Node>,
    /// Every ControllerRevision.
    pub revisions: Store<ControllerRevision>,
    /// Creations and deletions not yet seen in `pods`.
    pub expectations: Expectations,
    /// Where events go.
    pub events: EventSink,
}

/// The selector of `ds`, `None` when empty or invalid (selects nothing).
pub fn selector(ds: &DaemonSet) -> Option<Selector> {
    let sel = Selector::try_from(ds.spec.as_ref()?.selector.clone()).ok()?;
    (!sel.selects_all()).then_some(sel)
}

/// Starts the controller (a row of [`crate::controllers::CONTROLLERS`]).
pub fn start(ctx: ControllerContext) -> futures::future::BoxFuture<'static, anyhow::Result<()>> {
    Box::pin(run(ctx))
}

/// Runs the DaemonSet controller until `ctx` says stop.
pub async fn run(ctx: ControllerContext) -> anyhow::Result<()> {
    let client = ctx.client.clone();
    let (pods, pod_writer) = reflector::store::<Pod>();
    let pod_events = reflector::reflector(pod_writer, watcher(Api::<Pod>::all(client.clone()), watcher::Config::default()))
        .default_backoff()
        .touched_objects();
    let (nodes, node_writer) = reflector::store::<Node>();
    let node_events = reflector::reflector(node_writer, watcher(Api::<Node>::all(client.clone()), watcher::Config::default()))
        .default_backoff()
        .touched_objects();
    let (revisions, rev_writer) = reflector::store::<ControllerRevision>();
    let rev_events =
        reflector::reflector(rev_writer, watcher(Api::<ControllerRevision>::all(client.clone()), watcher::Config::default()))
            .default_backoff()
            .touched_objects();
    let controller = Controller::new(Api::<DaemonSet>::all(client.clone()), watcher::Config::default());
    let sets = controller.store();
    let every = sets.clone();
    let state = Arc::new(State {
        client: client.clone(),
        pods,
        nodes,
        revisions,
        expectations: Expectations::default(),
        events: EventSink::new(client, CONTROLLER),
    });
    let stop = ctx.clone();
    controller
        .watches_stream(pod_events, move |pod: Pod| daemon_sets_of(&pod, &sets))
        .watches_stream(node_events, move |_node: Node| every.state().iter().map(|d| ObjectRef::from_obj(d.as_ref())).collect::<Vec<_>>())
        .watches_stream(rev_events, |rev: ControllerRevision| owner_of(&rev.metadata))
        .graceful_shutdown_on(async move { stop.stopped().await })
        .run(reconcile, error_policy, state)
        .for_each(|r| async move {
            if let Err(err) = r {
                tracing::debug!(%err, "daemonset sync");
            }
        })
        .await;
    Ok(())
}

fn owner_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> Option<ObjectRef<DaemonSet>> {
    let r = pod_control::controller_of(meta).filter(|r| r.kind == "DaemonSet")?;
    Some(ObjectRef::new(&r.name).within(meta.namespace.as_deref().unwrap_or("")))
}

/// The DaemonSets a pod event concerns: its controller, or for an orphan
/// every DaemonSet of its namespace selecting it.
fn daemon_sets_of(pod: &Pod, sets: &Store<DaemonSet>) -> Vec<ObjectRef<DaemonSet>> {
    if pod_control::controller_of(&pod.metadata).is_some() {
        return owner_of(&pod.metadata).into_iter().collect();
    }
    let ns = pod.namespace().unwrap_or_default();
    sets.state()
        .iter()
        .filter(|d| d.namespace().as_deref() == Some(ns.as_str()))
        .filter(|d| pod_control::selects(selector(d).as_ref(), pod.labels()))
        .map(|d| ObjectRef::from_obj(d.as_ref()))
        .collect()
}

fn error_policy(_d: Arc<DaemonSet>, err: &kube::Error, _state: Arc<State>) -> Action {
    tracing::debug!(%err, "daemonset sync failed; retrying");
    Action::requeue(Duration::from_secs(2))
}

async fn reconcile(ds: Arc<DaemonSet>, state: Arc<State>) -> Result<Action, kube::Error> {
    let ready = async {
        state.pods.wait_until_ready().await?;
        state.nodes.wait_until_ready().await?;
        state.revisions.wait_until_ready().await
    };
    if !matches!(tokio::time::timeout(Duration::from_secs(1), ready).await, Ok(Ok(()))) {
        return Ok(Action::requeue(Duration::from_millis(500)));
    }
    sync::sync_daemon_set(ds.as_ref(), &state).await
}
