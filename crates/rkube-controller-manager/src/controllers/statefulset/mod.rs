//! `statefulset-controller`: pods with stable names (`<set>-<ordinal>`),
//! hostnames and PersistentVolumeClaims, created, scaled and updated in
//! ordinal order, as upstream's `pkg/controller/statefulset`.
//!
//! Built on kube-runtime: a `Controller` over StatefulSets, triggered by pod
//! and ControllerRevision reflectors whose stores the sync reads. The
//! decisions are pure functions in [`plan`]; [`sync`] applies them and
//! keeps the template history in ControllerRevisions ([`crate::history`]).
//! Pod names are deterministic, so a lagging pod cache at worst repeats a
//! create the API server refuses with 409; no expectations are needed.

pub mod plan;
pub mod sync;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{ControllerRevision, StatefulSet};
use k8s_openapi::api::core::v1::Pod;
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
pub const CONTROLLER: &str = "statefulset-controller";

/// What every sync shares.
pub struct State {
    /// The client.
    pub client: kube::Client,
    /// Every pod, from the reflector.
    pub pods: Store<Pod>,
    /// Every ControllerRevision, from the reflector.
    pub revisions: Store<ControllerRevision>,
    /// Where events go.
    pub events: EventSink,
}

/// The selector of `set`, `None` when empty or invalid (selects nothing).
pub fn selector(set: &StatefulSet) -> Option<Selector> {
    let sel = Selector::try_from(set.spec.as_ref()?.selector.clone()).ok()?;
    (!sel.selects_all()).then_some(sel)
}

/// Starts the controller (a row of [`crate::controllers::CONTROLLERS`]).
pub fn start(ctx: ControllerContext) -> futures::future::BoxFuture<'static, anyhow::Result<()>> {
    Box::pin(run(ctx))
}

/// Runs the StatefulSet controller until `ctx` says stop.
pub async fn run(ctx: ControllerContext) -> anyhow::Result<()> {
    let client = ctx.client.clone();
    let (pods, pod_writer) = reflector::store::<Pod>();
    let pod_events = reflector::reflector(pod_writer, watcher(Api::<Pod>::all(client.clone()), watcher::Config::default()))
        .default_backoff()
        .touched_objects();
    let (revisions, rev_writer) = reflector::store::<ControllerRevision>();
    let rev_events =
        reflector::reflector(rev_writer, watcher(Api::<ControllerRevision>::all(client.clone()), watcher::Config::default()))
            .default_backoff()
            .touched_objects();
    let controller = Controller::new(Api::<StatefulSet>::all(client.clone()), watcher::Config::default());
    let sets = controller.store();
    let state = Arc::new(State { client: client.clone(), pods, revisions, events: EventSink::new(client, CONTROLLER) });
    let stop = ctx.clone();
    controller
        .watches_stream(pod_events, move |pod: Pod| sets_of(&pod.metadata, pod.labels(), &sets))
        .watches_stream(rev_events, |rev: ControllerRevision| owner_ref_of(&rev.metadata))
        .graceful_shutdown_on(async move { stop.stopped().await })
        .run(reconcile, error_policy, state)
        .for_each(|r| async move {
            if let Err(err) = r {
                tracing::debug!(%err, "statefulset sync");
            }
        })
        .await;
    Ok(())
}

/// The StatefulSet that controls an object, if one does.
fn owner_ref_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> Option<ObjectRef<StatefulSet>> {
    let r = pod_control::controller_of(meta).filter(|r| r.kind == "StatefulSet")?;
    Some(ObjectRef::new(&r.name).within(meta.namespace.as_deref().unwrap_or("")))
}

/// The sets a pod event concerns: its controller, or for an orphan named
/// like a member every set of its namespace selecting it.
fn sets_of(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    labels: &std::collections::BTreeMap<String, String>,
    sets: &Store<StatefulSet>,
) -> Vec<ObjectRef<StatefulSet>> {
    if pod_control::controller_of(meta).is_some() {
        return owner_ref_of(meta).into_iter().collect();
    }
    let ns = meta.namespace.as_deref().unwrap_or("");
    let name = meta.name.as_deref().unwrap_or("");
    sets.state()
        .iter()
        .filter(|s| s.namespace().as_deref() == Some(ns))
        .filter(|s| plan::ordinal_of(&s.name_any(), name).is_some())
        .filter(|s| pod_control::selects(selector(s).as_ref(), labels))
        .map(|s| ObjectRef::from_obj(s.as_ref()))
        .collect()
}

fn error_policy(_s: Arc<StatefulSet>, err: &kube::Error, _state: Arc<State>) -> Action {
    tracing::debug!(%err, "statefulset sync failed; retrying");
    Action::requeue(Duration::from_secs(2))
}

async fn reconcile(set: Arc<StatefulSet>, state: Arc<State>) -> Result<Action, kube::Error> {
    let ready = async {
        state.pods.wait_until_ready().await?;
        state.revisions.wait_until_ready().await
    };
    if !matches!(tokio::time::timeout(Duration::from_secs(1), ready).await, Ok(Ok(()))) {
        return Ok(Action::requeue(Duration::from_millis(500)));
    }
    sync::sync_stateful_set(set.as_ref(), &state).await
}
