//! `replicaset-controller` and `replicationcontroller-controller`: keep
//! `spec.replicas` pods from the template running for every ReplicaSet
//! (apps/v1) and ReplicationController (v1), as upstream's
//! `pkg/controller/replicaset` (which runs both kinds with one sync).
//!
//! Built on kube-runtime: a `Controller` over the owners, triggered by a
//! pod reflector whose store the sync reads; [`Expectations`] keep a
//! lagging pod cache from causing a second round of creates or deletes.

pub mod status;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec, ReplicationController};
use k8s_openapi::jiff::Timestamp;
use k8s_openapi::NamespaceResourceScope;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::core::Selector;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use self::status::{calculate_status, manage, slow_start_batches, Condition, Manage, ManageError, ReplicaStatus};
use crate::context::ControllerContext;
use crate::events::EventSink;
use crate::expectations::{Expectations, Seen};
use crate::pod_control::{self, Claim};
use crate::pod_util;

/// A kind whose objects own `spec.replicas` pods from `spec.template`.
pub trait ReplicaOwner:
    Resource<DynamicType = (), Scope = NamespaceResourceScope>
    + Clone
    + DeserializeOwned
    + Serialize
    + std::fmt::Debug
    + Send
    + Sync
    + 'static
{
    /// The reporting controller name (`replicaset-controller`).
    const CONTROLLER: &'static str;
    /// `spec.replicas` (defaulted to 1 by the API server).
    fn replicas(&self) -> i32;
    /// `spec.minReadySeconds`.
    fn min_ready_seconds(&self) -> i32;
    /// `spec.template`.
    fn template(&self) -> Option<&PodTemplateSpec>;
    /// `spec.selector`; `None` when it is empty or invalid (selects nothing).
    fn selector(&self) -> Option<Selector>;
}

impl ReplicaOwner for ReplicaSet {
    const CONTROLLER: &'static str = "replicaset-controller";
    fn replicas(&self) -> i32 {
        self.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
    }
    fn min_ready_seconds(&self) -> i32 {
        self.spec.as_ref().and_then(|s| s.min_ready_seconds).unwrap_or(0)
    }
    fn template(&self) -> Option<&PodTemplateSpec> {
        self.spec.as_ref()?.template.as_ref()
    }
    fn selector(&self) -> Option<Selector> {
        let sel = Selector::try_from(self.spec.as_ref()?.selector.clone()).ok()?;
        (!sel.selects_all()).then_some(sel)
    }
}

impl ReplicaOwner for ReplicationController {
    const CONTROLLER: &'static str = "replicationcontroller-controller";
    fn replicas(&self) -> i32 {
        self.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
    }
    fn min_ready_seconds(&self) -> i32 {
        self.spec.as_ref().and_then(|s| s.min_ready_seconds).unwrap_or(0)
    }
    fn template(&self) -> Option<&PodTemplateSpec> {
        self.spec.as_ref()?.template.as_ref()
    }
    fn selector(&self) -> Option<Selector> {
        let map = self.spec.as_ref()?.selector.clone().filter(|m| !m.is_empty())?;
        Some(map.into_iter().collect())
    }
}

/// The status an owner reports now, read from its JSON (both kinds use the
/// same field names).
pub fn current_status<K: Serialize>(owner: &K) -> ReplicaStatus {
    let v = serde_json::to_value(owner).unwrap_or(Value::Null);
    let s = &v["status"];
    let int = |k: &str| s[k].as_i64().and_then(|n| i32::try_from(n).ok()).unwrap_or(0);
    let text = |c: &Value, k: &str| c[k].as_str().unwrap_or("").to_string();
    let conditions = s["conditions"]
        .as_array()
        .map(|cs| {
            cs.iter()
                .map(|c| Condition {
                    type_: text(c, "type"),
                    status: text(c, "status"),
                    reason: text(c, "reason"),
                    message: text(c, "message"),
                    last_transition_time: c["lastTransitionTime"].as_str().map(String::from),
                })
                .collect()
        })
        .unwrap_or_default();
    ReplicaStatus {
        replicas: int("replicas"),
        fully_labeled_replicas: int("fullyLabeledReplicas"),
        ready_replicas: int("readyReplicas"),
        available_replicas: int("availableReplicas"),
        observed_generation: s["observedGeneration"].as_i64().unwrap_or(0),
        conditions,
    }
}

struct State<K: ReplicaOwner> {
    client: kube::Client,
    pods: Store<Pod>,
    owners: Store<K>,
    expectations: Expectations,
    events: EventSink,
    _kind: std::marker::PhantomData<K>,
}

/// Errors a sync ends with (it is retried).
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    /// The API server refused a request.
    #[error(transparent)]
    Api(#[from] kube::Error),
    /// Creating or deleting pods failed (reported in `ReplicaFailure`).
    #[error("{0}")]
    Manage(String),
}

/// Starts the ReplicaSet controller.
pub fn start_replicasets(ctx: ControllerContext) -> futures::future::BoxFuture<'static, anyhow::Result<()>> {
    Box::pin(run::<ReplicaSet>(ctx))
}

/// Starts the ReplicationController controller.
pub fn start_replication_controllers(ctx: ControllerContext) -> futures::future::BoxFuture<'static, anyhow::Result<()>> {
    Box::pin(run::<ReplicationController>(ctx))
}

/// Runs the controller for kind `K` until `ctx` says stop.
pub async fn run<K: ReplicaOwner>(ctx: ControllerContext) -> anyhow::Result<()> {
    let client = ctx.client.clone();
    let (pods, writer) = reflector::store::<Pod>();
    let pod_events = reflector::reflector(writer, watcher(Api::<Pod>::all(client.clone()), watcher::Config::default()))
        .default_backoff()
        .touched_objects();
    let controller = Controller::new(Api::<K>::all(client.clone()), watcher::Config::default());
    let owners = controller.store();
    let state = Arc::new(State::<K> {
        client: client.clone(),
        pods,
        owners: owners.clone(),
        expectations: Expectations::default(),
        events: EventSink::new(client, K::CONTROLLER),
        _kind: std::marker::PhantomData,
    });
    let stop = ctx.clone();
    controller
        .watches_stream(pod_events, move |pod: Pod| owners_of_pod(&pod, &owners))
        .graceful_shutdown_on(async move { stop.stopped().await })
        .run(reconcile::<K>, error_policy::<K>, state)
        .for_each(|r| async move {
            if let Err(err) = r {
                tracing::debug!(%err, "replica sync");
            }
        })
        .await;
    Ok(())
}

/// The owners a pod event concerns: its controller when that is a `K`, or
/// for an orphan every `K` in its namespace selecting it (a candidate to adopt it).
fn owners_of_pod<K: ReplicaOwner>(pod: &Pod, owners: &Store<K>) -> Vec<ObjectRef<K>> {
    let ns = pod.namespace().unwrap_or_default();
    match pod_control::controller_of(&pod.metadata) {
        Some(r) if r.kind == K::kind(&()) => vec![ObjectRef::new(&r.name).within(&ns)],
        Some(_) => vec![],
        None => {
            let labels = pod.labels();
            owners
                .state()
                .iter()
                .filter(|o| o.namespace().as_deref() == Some(ns.as_str()))
                .filter(|o| pod_control::selects(o.selector().as_ref(), labels))
                .map(|o| ObjectRef::from_obj(o.as_ref()))
                .collect()
        }
    }
}

fn error_policy<K: ReplicaOwner>(_owner: Arc<K>, err: &SyncError, _state: Arc<State<K>>) -> Action {
    tracing::debug!(%err, kind = %K::kind(&()), "sync failed; retrying");
    Action::requeue(Duration::from_secs(2))
}

async fn reconcile<K: ReplicaOwner>(owner: Arc<K>, state: Arc<State<K>>) -> Result<Action, SyncError> {
    if tokio::time::timeout(Duration::from_secs(1), state.pods.wait_until_ready()).await.is_err() {
        return Ok(Action::requeue(Duration::from_millis(500)));
    }
    let ns = owner.namespace().unwrap_or_default();
    let key = format!("{ns}/{}", owner.name_any());
    let Some(owner_ref) = pod_control::controller_ref(owner.as_ref()) else { return Ok(Action::await_change()) };
    let deleting = owner.meta().deletion_timestamp.is_some();
    let selector = owner.selector();
    let in_ns: Vec<Arc<Pod>> = state.pods.state().into_iter().filter(|p| p.namespace().as_deref() == Some(ns.as_str())).collect();
    let pods_api: Api<Pod> = Api::namespaced(state.client.clone(), &ns);

    // Claim: keep ours, adopt matching orphans, release the unmatched.
    let mut mine: Vec<Arc<Pod>> = Vec::new();
    for p in in_ns.iter().filter(|p| pod_util::is_active(p)) {
        let decision = pod_control::claim(&owner_ref.uid, deleting, pod_control::selects(selector.as_ref(), p.labels()), &p.metadata);
        match decision {
            Claim::Keep => mine.push(p.clone()),
            Claim::Adopt => match pod_control::apply_claim(&pods_api, p.as_ref(), &decision, &owner_ref).await {
                Ok(()) => mine.push(p.clone()),
                Err(e) if pod_control::is_gone(&e) => {}
                Err(e) => return Err(e.into()),
            },
            Claim::Release => match pod_control::apply_claim(&pods_api, p.as_ref(), &decision, &owner_ref).await {
                Ok(()) => {}
                Err(e) if pod_control::is_gone(&e) => {}
                Err(e) => return Err(e.into()),
            },
            Claim::Ignore => {}
        }
    }

    let seen = in_ns.iter().map(|p| Seen {
        name: p.metadata.name.as_deref().unwrap_or(""),
        uid: p.metadata.uid.as_deref().unwrap_or(""),
        terminating: p.metadata.deletion_timestamp.is_some(),
    });
    let needs_sync = state.expectations.satisfied(&key, seen);
    let mut manage_err = None;
    if needs_sync && !deleting && matches!(manage(mine.len(), owner.replicas()), Manage::Create(_)) {
        if let Some(lagging) = unseen_candidate(&pods_api, selector.as_ref(), &owner_ref.uid, &in_ns).await? {
            tracing::debug!(%key, pod = %lagging, "pod cache lags behind the API server; creating later");
            return Ok(Action::requeue(Duration::from_millis(200)));
        }
    }
    if needs_sync && !deleting {
        let related = related_pods(owner.as_ref(), &in_ns, &state.owners);
        manage_err = manage_replicas(owner.as_ref(), &owner_ref, &key, &mine, &related, &pods_api, &state).await.err();
    }

    let now = Timestamp::now();
    let template_labels: BTreeMap<String, String> =
        owner.template().and_then(|t| t.metadata.as_ref()).and_then(|m| m.labels.clone()).unwrap_or_default();
    let current = current_status(owner.as_ref());
    let refs: Vec<&Pod> = mine.iter().map(|p| p.as_ref()).collect();
    let generation = owner.meta().generation.unwrap_or(0);
    let next = calculate_status(&current, &refs, &template_labels, owner.min_ready_seconds(), generation, manage_err.as_ref(), now);
    if next != current {
        let api: Api<K> = Api::namespaced(state.client.clone(), &ns);
        let patch = serde_json::json!({"status": next.to_json()});
        match api.patch_status(&owner.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await {
            Ok(_) => {}
            Err(e) if pod_control::is_not_found(&e) => return Ok(Action::await_change()),
            Err(e) => return Err(e.into()),
        }
    }
    if let Some(e) = manage_err {
        return Err(SyncError::Manage(e.message));
    }
    let min_ready = owner.min_ready_seconds();
    if min_ready > 0 && next.ready_replicas == next.replicas && next.available_replicas != next.replicas {
        return Ok(Action::requeue(Duration::from_secs(u64::try_from(min_ready).unwrap_or(1))));
    }
    Ok(Action::requeue(Duration::from_secs(300)))
}

/// The name of an active pod that `selector` selects, orphaned or
/// controlled by `owner_uid`, which the API server has and the pod cache
/// (`in_ns`) does not show yet, if any.
///
/// Checked before creating replicas: the pod watch and the owner watch are
/// separate streams, so a pod created just before its owner (an orphan to
/// adopt) can reach the cache after the owner's first sync. Upstream's
/// `manageReplicas` trusts its informer and would create a surplus replica,
/// then delete one (possibly the orphan) on the next sync; one LIST by label
/// selector, only when replicas are missing, avoids that.
async fn unseen_candidate(pods_api: &Api<Pod>, selector: Option<&Selector>, owner_uid: &str, in_ns: &[Arc<Pod>]) -> Result<Option<String>, SyncError> {
    let Some(selector) = selector.filter(|s| !s.selects_all()) else { return Ok(None) };
    let live = pods_api.list(&kube::api::ListParams::default().labels(&selector.to_string())).await?;
    let cached: std::collections::HashSet<&str> = in_ns.iter().filter_map(|p| p.metadata.uid.as_deref()).collect();
    Ok(live
        .items
        .iter()
        .filter(|p| pod_util::is_active(p) && pod_control::selects(Some(selector), p.labels()))
        .filter(|p| pod_control::controller_of(&p.metadata).is_none_or(|r| r.uid == owner_uid))
        .find(|p| p.metadata.uid.as_deref().is_some_and(|uid| !cached.contains(uid)))
        .map(|p| p.name_any()))
}

/// Pods whose controller is `owner` or another owner with the same
/// controller as `owner` (the other ReplicaSets of its Deployment), which
/// the deletion ranking counts per node (upstream's `getIndirectlyRelatedPods`).
fn related_pods<'a, K: ReplicaOwner>(owner: &K, in_ns: &'a [Arc<Pod>], owners: &Store<K>) -> Vec<&'a Pod> {
    let own_uid = owner.meta().uid.clone().unwrap_or_default();
    let mut uids = vec![own_uid];
    if let Some(parent) = pod_control::controller_of(owner.meta()) {
        let ns = owner.namespace();
        uids.extend(
            owners
                .state()
                .iter()
                .filter(|o| o.namespace() == ns)
                .filter(|o| pod_control::controller_of(o.meta()).is_some_and(|r| r.uid == parent.uid))
                .filter_map(|o| o.meta().uid.clone()),
        );
    }
    in_ns
        .iter()
        .filter(|p| pod_control::controller_of(&p.metadata).is_some_and(|r| uids.contains(&r.uid)))
        .map(|p| p.as_ref())
        .collect()
}

/// Creates or deletes pods so `mine` reaches `spec.replicas` (upstream's `manageReplicas`).
async fn manage_replicas<K: ReplicaOwner>(
    owner: &K,
    owner_ref: &k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference,
    key: &str,
    mine: &[Arc<Pod>],
    related: &[&Pod],
    pods_api: &Api<Pod>,
    state: &State<K>,
) -> Result<(), ManageError> {
    let regarding = pod_control::object_ref(owner);
    match manage(mine.len(), owner.replicas()) {
        Manage::Steady => Ok(()),
        Manage::Create(n) => {
            let Some(template) = owner.template() else {
                return Err(ManageError { creating: true, message: "spec.template is missing".into() });
            };
            let pod = pod_control::pod_from_template(template, &owner.name_any(), owner_ref.clone());
            for batch in slow_start_batches(n) {
                let pp = PostParams::default();
                let results = futures::future::join_all((0..batch).map(|_| pods_api.create(&pp, &pod))).await;
                let mut failed = None;
                let mut created = Vec::new();
                for r in results {
                    match r {
                        Ok(p) => created.push(p.name_any()),
                        Err(e) => failed = Some(e),
                    }
                }
                state.expectations.expect_creations(key, created.clone());
                for name in created {
                    state.events.normal(&regarding, "SuccessfulCreate", format!("Created pod: {name}")).await;
                }
                if let Some(e) = failed {
                    let message = api_message(&e);
                    state.events.warning(&regarding, "FailedCreate", format!("Error creating: {message}")).await;
                    return Err(ManageError { creating: true, message });
                }
            }
            Ok(())
        }
        Manage::Delete(n) => {
            let mut ranked: Vec<&Pod> = mine.iter().map(|p| p.as_ref()).collect();
            pod_util::sort_for_deletion(&mut ranked, related, Timestamp::now());
            let victims = &ranked[..n.min(ranked.len())];
            state.expectations.expect_deletions(key, victims.iter().filter_map(|p| p.metadata.uid.clone()));
            let dp = DeleteParams::default();
            let results = futures::future::join_all(victims.iter().map(|p| pods_api.delete(p.metadata.name.as_deref().unwrap_or(""), &dp))).await;
            let mut failed = None;
            for (p, r) in victims.iter().zip(results) {
                let name = p.name_any();
                match r {
                    Ok(_) => state.events.normal(&regarding, "SuccessfulDelete", format!("Deleted pod: {name}")).await,
                    Err(e) if pod_control::is_not_found(&e) => {}
                    Err(e) => {
                        let message = api_message(&e);
                        state.events.warning(&regarding, "FailedDelete", format!("Error deleting: {message}")).await;
                        failed = Some(message);
                    }
                }
            }
            match failed {
                Some(message) => Err(ManageError { creating: false, message }),
                None => Ok(()),
            }
        }
    }
}

/// The API server's message for `err` (its `Status.message`), else the error text.
pub fn api_message(err: &kube::Error) -> String {
    match err {
        kube::Error::Api(s) => s.message.clone(),
        other => other.to_string(),
    }
}
