//! The scheduling loop (upstream `pkg/scheduler/scheduler.go`,
//! `schedule_one.go`, `eventhandlers.go`).
//!
//! kube-rs reflectors keep pods, nodes, namespaces, PersistentVolumeClaims,
//! PersistentVolumes and StorageClasses; their events feed the
//! [`SchedulingQueue`] (pending pods of `schedulerName: default-scheduler`
//! without `schedulingGates`) and wake unschedulable pods on cluster events.
//! One loop pops a pod, takes a [`Snapshot`] (bound pods plus the pods this
//! scheduler assumed but has not seen bound yet, so back-to-back pods see
//! each other's requests), runs [`schedule_pod`], and then either assumes the
//! pod on the chosen node and binds it through `pods/binding` in a separate
//! task, or records why it is unschedulable: a `FailedScheduling` event and
//! the pod condition `PodScheduled=False` (reason `Unschedulable`).
//! Events are published with kube-runtime's `Recorder` (events.k8s.io/v1,
//! reportingController `default-scheduler`). A pod no node fits may preempt
//! lower-priority pods ([`crate::preemption`]): the victims get a
//! `DisruptionTarget` condition (reason `PreemptionByScheduler`), a
//! `Preempted` event and a graceful delete, and the pod's
//! `status.nominatedNodeName` names the node; it is scheduled once they are gone.
//! Before binding a pod with unbound `WaitForFirstConsumer` claims, the
//! claims get `volume.kubernetes.io/selected-node` (see [`crate::plugins::volumes`]).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{
    Binding, Namespace, Node, ObjectReference, PersistentVolume, PersistentVolumeClaim, Pod,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event as KubeEvent, EventType, Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::Resource as _;
use tokio::sync::{mpsc, watch};

use crate::framework::schedule_pod;
use crate::metrics::SchedulerMetrics;
use crate::queue::SchedulingQueue;
use crate::snapshot::Snapshot;

/// The only profile: pods whose `spec.schedulerName` is this (or unset).
pub const DEFAULT_SCHEDULER: &str = "default-scheduler";

/// What the loop hears from the reflectors and the binding tasks.
enum Msg {
    PodApplied(Arc<Pod>),
    PodDeleted(Arc<Pod>),
    NodeApplied(Arc<Node>),
    /// A claim, volume or StorageClass changed: pods waiting on volumes may fit now.
    VolumesChanged,
    Bound {
        pod: Arc<Pod>,
        node: String,
        attempts: u32,
        initial: Instant,
        started: Instant,
        result: Result<(), String>,
    },
}

fn key_of(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or(""),
        pod.metadata.name.as_deref().unwrap_or("")
    )
}

fn assigned(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .is_some_and(|n| !n.is_empty())
}

/// Whether this scheduler should place `pod`: unassigned, not deleting,
/// not finished, and for `default-scheduler`.
fn wants(pod: &Pod) -> bool {
    let spec = pod.spec.as_ref();
    let ours = spec
        .and_then(|s| s.scheduler_name.as_deref())
        .unwrap_or(DEFAULT_SCHEDULER)
        == DEFAULT_SCHEDULER;
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    ours && !assigned(pod)
        && pod.metadata.deletion_timestamp.is_none()
        && !matches!(phase, Some("Succeeded" | "Failed"))
}

fn gated(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.scheduling_gates.as_ref())
        .is_some_and(|g| !g.is_empty())
}

/// What about a node can make a pending pod fit: labels, taints,
/// `unschedulable`, allocatable.
fn node_fingerprint(node: &Node) -> String {
    let spec = node.spec.as_ref();
    serde_json::json!([
        node.metadata.labels,
        spec.and_then(|s| s.taints.as_ref()),
        spec.and_then(|s| s.unschedulable),
        node.status.as_ref().and_then(|s| s.allocatable.as_ref()),
    ])
    .to_string()
}

/// Forwards a reflector's events to the loop.
fn spawn_reflector<K>(
    api: Api<K>,
    tx: mpsc::UnboundedSender<Msg>,
    wrap: fn(Event<K>) -> Vec<Msg>,
) -> (Store<K>, tokio::task::JoinHandle<()>)
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + k8s_openapi::serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let (store, writer) = reflector::store();
    let stream = reflector::reflector(writer, watcher::watcher(api, watcher::Config::default()))
        .default_backoff();
    let task = tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(ev) => {
                    for m in wrap(ev) {
                        if tx.send(m).is_err() {
                            return;
                        }
                    }
                }
                Err(e) => tracing::warn!(error = %e, "watch failed; retrying"),
            }
        }
    });
    (store, task)
}

fn pod_msgs(ev: Event<Pod>) -> Vec<Msg> {
    match ev {
        Event::Apply(p) | Event::InitApply(p) => vec![Msg::PodApplied(Arc::new(p))],
        Event::Delete(p) => vec![Msg::PodDeleted(Arc::new(p))],
        Event::Init | Event::InitDone => Vec::new(),
    }
}

fn node_msgs(ev: Event<Node>) -> Vec<Msg> {
    match ev {
        Event::Apply(n) | Event::InitApply(n) => vec![Msg::NodeApplied(Arc::new(n))],
        _ => Vec::new(),
    }
}

fn no_msgs<K>(_: Event<K>) -> Vec<Msg> {
    Vec::new()
}

fn volume_msgs<K>(ev: Event<K>) -> Vec<Msg> {
    match ev {
        Event::Apply(_) | Event::Delete(_) => vec![Msg::VolumesChanged],
        _ => Vec::new(),
    }
}

/// The loop's state.
struct Scheduler {
    client: kube::Client,
    metrics: Arc<SchedulerMetrics>,
    recorder: Recorder,
    pods: Store<Pod>,
    nodes: Store<Node>,
    namespaces: Store<Namespace>,
    claims: Store<PersistentVolumeClaim>,
    volumes: Store<PersistentVolume>,
    classes: Store<StorageClass>,
    pdbs: Store<PodDisruptionBudget>,
    queue: SchedulingQueue,
    /// Pods placed by this scheduler and not yet seen bound, by key.
    assumed: HashMap<String, Arc<Pod>>,
    /// Pods known to be bound (their add or delete is a cluster event).
    bound: HashSet<String>,
    gated: HashSet<String>,
    node_prints: HashMap<String, String>,
    tx: mpsc::UnboundedSender<Msg>,
    /// The snapshot of recent cycles and when it was built (see [`SNAPSHOT_REUSE`]).
    cached: Option<(Snapshot, Instant)>,
}

/// How long one snapshot serves successive scheduling cycles. Building one reads every pod and
/// node (O(pods)); within this window each pod placed is added to it instead, as upstream's
/// scheduler cache assumes pods, so a cycle costs O(nodes). A pod that fits nowhere in a
/// reused snapshot is tried again on a fresh one before it is reported unschedulable, and a
/// failed binding drops the snapshot, so staleness can only delay a placement by this much,
/// never refuse one.
const SNAPSHOT_REUSE: std::time::Duration = std::time::Duration::from_millis(500);

/// Runs the scheduler with `client` until `stop` turns true (or its sender
/// is dropped). Errors only if the reflectors end before they are ready.
pub async fn run(
    client: kube::Client,
    metrics: Arc<SchedulerMetrics>,
    mut stop: watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let (pods, t1) = spawn_reflector(Api::<Pod>::all(client.clone()), tx.clone(), pod_msgs);
    let (nodes, t2) = spawn_reflector(Api::<Node>::all(client.clone()), tx.clone(), node_msgs);
    let (namespaces, t3) =
        spawn_reflector(Api::<Namespace>::all(client.clone()), tx.clone(), no_msgs);
    let (claims, t4) = spawn_reflector(
        Api::<PersistentVolumeClaim>::all(client.clone()),
        tx.clone(),
        volume_msgs,
    );
    let (volumes, t5) = spawn_reflector(
        Api::<PersistentVolume>::all(client.clone()),
        tx.clone(),
        volume_msgs,
    );
    let (classes, t6) = spawn_reflector(
        Api::<StorageClass>::all(client.clone()),
        tx.clone(),
        volume_msgs,
    );
    let (pdbs, t7) = spawn_reflector(
        Api::<PodDisruptionBudget>::all(client.clone()),
        tx.clone(),
        no_msgs,
    );
    let tasks = [t1, t2, t3, t4, t5, t6, t7];
    let host = rkube_component::leader::default_identity();
    let host = host
        .rsplit_once('_')
        .map(|(h, _)| h.to_string())
        .unwrap_or_default();
    let reporter = Reporter {
        controller: DEFAULT_SCHEDULER.into(),
        instance: Some(format!("{DEFAULT_SCHEDULER}-{host}")),
    };
    let mut s = Scheduler {
        recorder: Recorder::new(client.clone(), reporter),
        client,
        metrics,
        pods,
        nodes,
        namespaces,
        claims,
        volumes,
        classes,
        pdbs,
        queue: SchedulingQueue::new(),
        assumed: HashMap::new(),
        bound: HashSet::new(),
        gated: HashSet::new(),
        node_prints: HashMap::new(),
        tx,
        cached: None,
    };
    let ready = async {
        s.pods.wait_until_ready().await?;
        s.nodes.wait_until_ready().await?;
        s.claims.wait_until_ready().await?;
        s.volumes.wait_until_ready().await?;
        s.classes.wait_until_ready().await?;
        s.pdbs.wait_until_ready().await?;
        s.namespaces.wait_until_ready().await
    };
    let ready_result = tokio::select! {
        r = ready => r.map_err(|e| anyhow::anyhow!("caches did not sync: {e}")),
        _ = rkube_component::leader::stopped(&mut stop) => Ok(()),
    };
    if ready_result.is_ok() && !*stop.borrow() {
        tracing::info!("scheduler caches synced; scheduling");
        loop {
            while let Ok(m) = rx.try_recv() {
                s.handle(m);
            }
            s.metrics.pending(s.queue.counts(), s.gated.len() as i64);
            if let Some(qp) = s.queue.pop(Instant::now()) {
                s.schedule_one(qp);
                continue;
            }
            let wake = s.queue.next_wake().map(tokio::time::Instant::from_std);
            let sleep = async move {
                match wake {
                    Some(t) => tokio::time::sleep_until(t).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                m = rx.recv() => match m {
                    Some(m) => s.handle(m),
                    None => break,
                },
                _ = sleep => {}
                _ = rkube_component::leader::stopped(&mut stop) => break,
            }
        }
    }
    for t in tasks {
        t.abort();
    }
    ready_result
}

impl Scheduler {
    fn handle(&mut self, m: Msg) {
        let now = Instant::now();
        match m {
            Msg::PodApplied(pod) => {
                let key = key_of(&pod);
                if assigned(&pod) {
                    self.queue.delete(&key);
                    self.gated.remove(&key);
                    self.assumed.remove(&key);
                    // Newly bound, or finished (its resources freed): a cluster event.
                    let running = crate::snapshot::is_assigned_and_running(&pod);
                    let changed = if running {
                        self.bound.insert(key.clone())
                    } else {
                        self.bound.remove(&key)
                    };
                    if changed {
                        self.queue.move_all(now);
                    }
                } else if wants(&pod) && gated(&pod) {
                    self.queue.delete(&key);
                    self.gated.insert(key);
                } else if wants(&pod) {
                    self.gated.remove(&key);
                    self.queue.add_or_update(
                        &key,
                        pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0),
                        now,
                    );
                } else {
                    self.gated.remove(&key);
                    self.queue.delete(&key);
                }
            }
            Msg::PodDeleted(pod) => {
                let key = key_of(&pod);
                self.queue.delete(&key);
                self.gated.remove(&key);
                let was_assumed = self.assumed.remove(&key).is_some();
                if self.bound.remove(&key) || was_assumed {
                    self.queue.move_all(now);
                }
            }
            Msg::NodeApplied(node) => {
                let name = node.metadata.name.clone().unwrap_or_default();
                let print = node_fingerprint(&node);
                if self.node_prints.insert(name, print.clone()).as_ref() != Some(&print) {
                    self.queue.move_all(now);
                }
            }
            Msg::VolumesChanged => self.queue.move_all(now),
            Msg::Bound {
                pod,
                node,
                attempts,
                initial,
                started,
                result,
            } => {
                let key = key_of(&pod);
                match result {
                    Ok(()) => {
                        self.queue.done(&key);
                        self.metrics.attempt(
                            DEFAULT_SCHEDULER,
                            "scheduled",
                            started.elapsed().as_secs_f64(),
                        );
                        self.metrics
                            .bound(attempts, initial.elapsed().as_secs_f64());
                        let note = format!("Successfully assigned {key} to {node}");
                        self.publish(&pod, EventType::Normal, "Scheduled", "Binding", note);
                    }
                    Err(err) => {
                        tracing::warn!(pod = %key, %node, %err, "binding failed");
                        self.assumed.remove(&key);
                        self.cached = None;
                        self.queue.failed(&key, now);
                        self.metrics.attempt(
                            DEFAULT_SCHEDULER,
                            "error",
                            started.elapsed().as_secs_f64(),
                        );
                        self.publish(
                            &pod,
                            EventType::Warning,
                            "FailedScheduling",
                            "Scheduling",
                            format!("Binding rejected: {err}"),
                        );
                    }
                }
            }
        }
    }

    fn snapshot(&mut self) -> Snapshot {
        let mut pods: HashMap<String, Arc<Pod>> = self
            .pods
            .state()
            .into_iter()
            .map(|p| (key_of(&p), p))
            .collect();
        self.assumed
            .retain(|k, _| pods.get(k).is_some_and(|p| !assigned(p)));
        for (k, p) in &self.assumed {
            pods.insert(k.clone(), Arc::clone(p));
        }
        let pending: Vec<Arc<Pod>> = pods.values().filter(|p| !assigned(p)).cloned().collect();
        let mut snapshot = Snapshot::new(
            self.nodes.state(),
            pods.into_values(),
            self.namespaces.state(),
        )
        .with_nominated(pending);
        snapshot.pdbs = self.pdbs.state();
        snapshot.volumes = Arc::new(crate::plugins::volumes::VolumeState {
            claims: self
                .claims
                .state()
                .into_iter()
                .map(|c| {
                    (
                        format!(
                            "{}/{}",
                            c.metadata.namespace.as_deref().unwrap_or(""),
                            c.metadata.name.as_deref().unwrap_or("")
                        ),
                        c,
                    )
                })
                .collect(),
            volumes: self
                .volumes
                .state()
                .into_iter()
                .map(|v| (v.metadata.name.clone().unwrap_or_default(), v))
                .collect(),
            classes: self
                .classes
                .state()
                .into_iter()
                .map(|c| (c.metadata.name.clone().unwrap_or_default(), c))
                .collect(),
        });
        snapshot
    }

    fn schedule_one(&mut self, qp: crate::queue::QueuedPod) {
        let started = Instant::now();
        let (ns, name) = qp.key.split_once('/').unwrap_or(("", &qp.key));
        let Some(pod) = self.pods.get(&ObjectRef::new(name).within(ns)) else {
            self.queue.done(&qp.key);
            return;
        };
        if !wants(&pod) || gated(&pod) || self.assumed.contains_key(&qp.key) {
            self.queue.done(&qp.key);
            return;
        }
        let (mut snapshot, mut built, reused) = match self.cached.take() {
            Some((snap, at)) if at.elapsed() < SNAPSHOT_REUSE => (snap, at, true),
            _ => (self.snapshot(), Instant::now(), false),
        };
        let mut result = schedule_pod(&pod, &snapshot);
        if result.is_err() && reused {
            // Fits nowhere in a reused snapshot: look again at the cluster as it is now.
            snapshot = self.snapshot();
            built = Instant::now();
            result = schedule_pod(&pod, &snapshot);
        }
        let mut keep = true;
        match result {
            Ok(node) => {
                let mut placed = (*pod).clone();
                placed.spec.get_or_insert_with(Default::default).node_name = Some(node.clone());
                let placed = Arc::new(placed);
                if let Some(info) = snapshot.nodes.iter_mut().find(|n| n.name == node) {
                    info.add_pod(Arc::clone(&placed));
                }
                self.assumed.insert(qp.key.clone(), placed);
                let (client, tx) = (self.client.clone(), self.tx.clone());
                let (attempts, initial) = (qp.attempts, qp.initial);
                let to_select = crate::plugins::volumes::claims_to_select(&pod, &snapshot, &node);
                tokio::spawn(async move {
                    let result =
                        match select_node_for_claims(&client, &pod, &to_select, &node).await {
                            Ok(()) => bind(&client, &pod, &node).await.map_err(|e| e.to_string()),
                            Err(e) => Err(e.to_string()),
                        };
                    let _ = tx.send(Msg::Bound {
                        pod,
                        node,
                        attempts,
                        initial,
                        started,
                        result,
                    });
                });
            }
            Err(err) => {
                let mut message = err.to_string();
                if let crate::framework::ScheduleError::Fit(fit) = &err {
                    match crate::preemption::eligible(&pod, &snapshot) {
                        Err(why) => message = format!("{} preemption: {why}", fit.nodes_message()),
                        Ok(()) => {
                            if let Some(candidate) = crate::preemption::find(&pod, &snapshot, fit) {
                                message = fit.nodes_message();
                                self.preempt(&pod, candidate);
                                keep = false;
                            }
                        }
                    }
                }
                tracing::info!(pod = %qp.key, %message, "unable to schedule pod; no fit; waiting");
                self.queue.unschedulable(&qp.key, Instant::now());
                self.metrics.attempt(
                    DEFAULT_SCHEDULER,
                    "unschedulable",
                    started.elapsed().as_secs_f64(),
                );
                self.publish(
                    &pod,
                    EventType::Warning,
                    "FailedScheduling",
                    "Scheduling",
                    message.clone(),
                );
                let client = self.client.clone();
                tokio::spawn(async move {
                    if let Err(e) = mark_unschedulable(&client, &pod, &message).await {
                        tracing::warn!(error = %e, "updating the PodScheduled condition failed");
                    }
                });
            }
        }
        if keep {
            self.cached = Some((snapshot, built));
        }
    }

    /// Evicts `candidate.victims` for `pod` and nominates `candidate.node`
    /// (upstream's `prepareCandidate`), in a task: each victim gets the
    /// `DisruptionTarget` condition, then a `Preempted` event and a graceful
    /// delete.
    fn preempt(&self, pod: &Arc<Pod>, candidate: crate::preemption::Candidate) {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        tracing::info!(pod = %key_of(pod), node = %candidate.node, victims = candidate.victims.len(), "preempting");
        for victim in &candidate.victims {
            self.publish(
                victim,
                EventType::Normal,
                "Preempted",
                "Preempting",
                format!("Preempted by pod {uid} on node {}", candidate.node),
            );
        }
        let (client, pod) = (self.client.clone(), Arc::clone(pod));
        tokio::spawn(async move {
            for victim in &candidate.victims {
                if let Err(e) = evict(&client, victim).await {
                    tracing::warn!(error = %e, victim = %key_of(victim), "preempting a pod failed");
                }
            }
            let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
            let api: Api<Pod> = Api::namespaced(client, ns);
            let patch = serde_json::json!({"status": {"nominatedNodeName": candidate.node}});
            if let Err(e) = api
                .patch_status(
                    pod.metadata.name.as_deref().unwrap_or(""),
                    &PatchParams::default(),
                    &Patch::Merge(patch),
                )
                .await
            {
                tracing::warn!(error = %e, "nominating a node failed");
            }
        });
    }

    fn publish(&self, pod: &Pod, type_: EventType, reason: &str, action: &str, note: String) {
        let recorder = self.recorder.clone();
        let reference = pod.object_ref(&());
        let ev = KubeEvent {
            type_,
            reason: reason.into(),
            note: Some(note),
            action: action.into(),
            secondary: None,
        };
        tokio::spawn(async move {
            if let Err(e) = recorder.publish(&ev, &reference).await {
                tracing::warn!(error = %e, "publishing an event failed");
            }
        });
    }
}

/// Marks `victim` with the `DisruptionTarget` condition (reason
/// `PreemptionByScheduler`) and deletes it gracefully. A victim already
/// gone is not an error.
pub async fn evict(client: &kube::Client, victim: &Pod) -> Result<(), kube::Error> {
    let ns = victim.metadata.namespace.as_deref().unwrap_or("default");
    let name = victim.metadata.name.as_deref().unwrap_or("");
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let now = k8s_openapi::jiff::Timestamp::now()
        .round(k8s_openapi::jiff::Unit::Second)
        .map(|t| t.to_string())
        .unwrap_or_default();
    let patch = serde_json::json!({"status": {"conditions": [{
        "type": "DisruptionTarget", "status": "True", "reason": crate::preemption::PREEMPTION_BY_SCHEDULER,
        "message": format!("{DEFAULT_SCHEDULER}: preempting to accommodate a higher priority pod"), "lastTransitionTime": now,
    }]}});
    let gone = |e: &kube::Error| matches!(e, kube::Error::Api(s) if s.code == 404);
    match api
        .patch_status(name, &PatchParams::default(), &Patch::Strategic(patch))
        .await
    {
        Err(e) if gone(&e) => return Ok(()),
        Err(e) => return Err(e),
        Ok(_) => {}
    }
    match api.delete(name, &Default::default()).await {
        Err(e) if gone(&e) => Ok(()),
        Err(e) => Err(e),
        Ok(_) => Ok(()),
    }
}

/// Annotates the claims `names` (in `pod`'s namespace) with
/// `volume.kubernetes.io/selected-node: <node>` (upstream VolumeBinding's
/// PreBind for claims to provision), so their volume is made for `node`.
pub async fn select_node_for_claims(
    client: &kube::Client,
    pod: &Pod,
    names: &[String],
    node: &str,
) -> Result<(), kube::Error> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let api: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    for name in names {
        let patch = serde_json::json!({"metadata": {"annotations": {crate::plugins::volumes::SELECTED_NODE: node}}});
        api.patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await?;
    }
    Ok(())
}

/// POSTs the Binding of `pod` to `node` (`pods/binding`, with the pod's UID).
pub async fn bind(client: &kube::Client, pod: &Pod, node: &str) -> Result<(), kube::Error> {
    let name = pod.metadata.name.clone().unwrap_or_default();
    let namespace = pod
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    let binding = Binding {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(namespace.clone()),
            uid: pod.metadata.uid.clone(),
            ..ObjectMeta::default()
        },
        target: ObjectReference {
            kind: Some("Node".into()),
            name: Some(node.into()),
            api_version: Some("v1".into()),
            ..ObjectReference::default()
        },
    };
    let api: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    let _: serde_json::Value = api
        .create_subresource("binding", &name, &PostParams::default(), &binding)
        .await?;
    Ok(())
}

/// Sets `PodScheduled=False`, reason `Unschedulable`, with `message` on the
/// pod's status (a strategic merge patch of `pods/status`), unless the pod
/// already has that condition; `lastTransitionTime` changes only with the status.
pub async fn mark_unschedulable(
    client: &kube::Client,
    pod: &Pod,
    message: &str,
) -> Result<(), kube::Error> {
    let current = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "PodScheduled"));
    if current.is_some_and(|c| {
        c.status == "False"
            && c.reason.as_deref() == Some("Unschedulable")
            && c.message.as_deref() == Some(message)
    }) {
        return Ok(());
    }
    let transition = match current {
        Some(c) if c.status == "False" => c.last_transition_time.as_ref().map(|t| t.0.to_string()),
        _ => None,
    }
    .unwrap_or_else(|| {
        k8s_openapi::jiff::Timestamp::now()
            .round(k8s_openapi::jiff::Unit::Second)
            .map(|t| t.to_string())
            .unwrap_or_default()
    });
    let patch = serde_json::json!({"status": {"conditions": [{
        "type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message,
        "lastProbeTime": null, "lastTransitionTime": transition,
    }]}});
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    api.patch_status(
        pod.metadata.name.as_deref().unwrap_or(""),
        &PatchParams::default(),
        &Patch::Strategic(patch),
    )
    .await?;
    Ok(())
}
