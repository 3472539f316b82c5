//! The scheduling loop (upstream `pkg/scheduler/scheduler.go`,
//! `schedule_one.go`, `eventhandlers.go`).
//!
//! kube-rs reflectors keep pods, nodes, namespaces, PersistentVolumeClaims,
//! PersistentVolumes and StorageClasses; their events feed the
//! [`SchedulingQueue`] (pending pods of `schedulerName: default-scheduler`
//! without `schedulingGates`) and wake unschedulable pods on cluster events.
//! The same events keep a [`Cache`] of the nodes and their pods (bound pods
//! plus the pods this scheduler assumed but has not seen bound yet, so
//! back-to-back pods see each other's requests). One loop pops a pod, brings
//! its [`Snapshot`] up to date from the cache (copying only the nodes that
//! changed since the last cycle), runs [`schedule_pod_from`], and then either assumes the
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
    Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::{Event as KubeEvent, EventType, Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::Resource as _;
use tokio::sync::{mpsc, watch};

use crate::cache::Cache;
pub use crate::writes::{bind, evict, mark_unschedulable, select_node_for_claims};
use crate::framework::schedule_pod_from;
use crate::metrics::SchedulerMetrics;
use crate::queue::SchedulingQueue;
use crate::snapshot::Snapshot;

/// The only profile: pods whose `spec.schedulerName` is this (or unset).
pub const DEFAULT_SCHEDULER: &str = "default-scheduler";

/// What the loop hears from the reflectors and the binding tasks.
enum Msg {
    PodApplied(Arc<Pod>),
    PodDeleted(Arc<Pod>),
    /// The pod reflector (re)listed: its store holds every pod.
    PodsListed,
    NodeApplied(Arc<Node>),
    NodeDeleted(Arc<Node>),
    /// The node reflector (re)listed: its store holds every node.
    NodesListed,
    /// A claim, volume or StorageClass changed: pods waiting on volumes may fit now.
    VolumesChanged,
    /// What the snapshot takes from a store other than pods and nodes changed
    /// (or was relisted): it is read again at the next cycle.
    Stale(Part),
    Bound {
        pod: Arc<Pod>,
        node: String,
        attempts: u32,
        initial: Instant,
        started: Instant,
        result: Result<(), String>,
    },
}

/// The parts of a [`Snapshot`] read whole from their stores when they change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Part {
    Namespaces,
    Volumes,
    Pdbs,
}

use crate::cache::pod_key as key_of;

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
        Event::InitDone => vec![Msg::PodsListed],
        Event::Init => Vec::new(),
    }
}

fn node_msgs(ev: Event<Node>) -> Vec<Msg> {
    match ev {
        Event::Apply(n) | Event::InitApply(n) => vec![Msg::NodeApplied(Arc::new(n))],
        Event::Delete(n) => vec![Msg::NodeDeleted(Arc::new(n))],
        Event::InitDone => vec![Msg::NodesListed],
        Event::Init => Vec::new(),
    }
}

fn namespace_msgs(ev: Event<Namespace>) -> Vec<Msg> {
    match ev {
        Event::Init | Event::InitApply(_) => Vec::new(),
        _ => vec![Msg::Stale(Part::Namespaces)],
    }
}

fn pdb_msgs(ev: Event<PodDisruptionBudget>) -> Vec<Msg> {
    match ev {
        Event::Init | Event::InitApply(_) => Vec::new(),
        _ => vec![Msg::Stale(Part::Pdbs)],
    }
}

fn volume_msgs<K>(ev: Event<K>) -> Vec<Msg> {
    match ev {
        Event::Apply(_) | Event::Delete(_) => vec![Msg::VolumesChanged],
        Event::InitDone => vec![Msg::Stale(Part::Volumes)],
        Event::Init | Event::InitApply(_) => Vec::new(),
    }
}

/// The loop's state.
struct Scheduler {
    client: kube::Client,
    metrics: Arc<SchedulerMetrics>,
    reporter: Reporter,
    /// One event recorder per pod with events in flight, by `namespace/name`
    /// (see [`Scheduler::publish`]).
    recorders: HashMap<String, Recorder>,
    pods: Store<Pod>,
    nodes: Store<Node>,
    namespaces: Store<Namespace>,
    claims: Store<PersistentVolumeClaim>,
    volumes: Store<PersistentVolume>,
    classes: Store<StorageClass>,
    pdbs: Store<PodDisruptionBudget>,
    queue: SchedulingQueue,
    /// Nodes and the pods counted on them, assumed pods included.
    cache: Cache,
    /// Pods known to be bound (their add or delete is a cluster event).
    bound: HashSet<String>,
    gated: HashSet<String>,
    node_prints: HashMap<String, String>,
    tx: mpsc::UnboundedSender<Msg>,
    /// The cycles' view of the cluster: brought up to date from [`Scheduler::cache`]
    /// before each cycle (only the nodes changed since the last one are copied).
    snapshot: Snapshot,
    /// Parts of the snapshot to read again from their stores before the next cycle.
    stale: HashSet<Part>,
    /// Where the next cycle starts filtering nodes (upstream `nextStartNodeIndex`).
    next_start_node_index: usize,
}

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
    let (namespaces, t3) = spawn_reflector(
        Api::<Namespace>::all(client.clone()),
        tx.clone(),
        namespace_msgs,
    );
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
        pdb_msgs,
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
        reporter,
        recorders: HashMap::new(),
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
        cache: Cache::new(),
        bound: HashSet::new(),
        gated: HashSet::new(),
        node_prints: HashMap::new(),
        tx,
        snapshot: Snapshot::default(),
        stale: [Part::Namespaces, Part::Volumes, Part::Pdbs].into_iter().collect(),
        next_start_node_index: 0,
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
                self.cache.apply_pod(Arc::clone(&pod));
                if assigned(&pod) {
                    self.queue.delete(&key);
                    self.gated.remove(&key);
                    self.recorders.remove(&key);
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
                self.recorders.remove(&key);
                let was_assumed = self.cache.is_assumed(&key);
                self.cache.delete_pod(&pod);
                if self.bound.remove(&key) || was_assumed {
                    self.queue.move_all(now);
                }
            }
            Msg::PodsListed => self.cache.resync_pods(self.pods.state()),
            Msg::NodeApplied(node) => {
                self.cache.apply_node(Arc::clone(&node));
                let name = node.metadata.name.clone().unwrap_or_default();
                let print = node_fingerprint(&node);
                if self.node_prints.insert(name, print.clone()).as_ref() != Some(&print) {
                    self.queue.move_all(now);
                }
            }
            Msg::NodeDeleted(node) => {
                let name = node.metadata.name.clone().unwrap_or_default();
                self.cache.delete_node(&name);
                self.node_prints.remove(&name);
            }
            Msg::NodesListed => self.cache.resync_nodes(self.nodes.state()),
            Msg::VolumesChanged => {
                self.stale.insert(Part::Volumes);
                self.queue.move_all(now);
            }
            Msg::Stale(part) => {
                self.stale.insert(part);
            }
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
                        self.cache.forget(&key);
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

    /// Brings [`Scheduler::snapshot`] up to date: nodes and pods from the
    /// cache, and the parts marked stale read again from their stores.
    fn refresh_snapshot(&mut self) {
        self.cache.update_snapshot(&mut self.snapshot);
        for part in std::mem::take(&mut self.stale) {
            match part {
                Part::Namespaces => {
                    self.snapshot.namespace_labels = crate::snapshot::namespace_labels(self.namespaces.state());
                }
                Part::Pdbs => self.snapshot.pdbs = self.pdbs.state(),
                Part::Volumes => {
                    self.snapshot.volumes = Arc::new(crate::plugins::volumes::VolumeState {
                        claims: self
                            .claims
                            .state()
                            .into_iter()
                            .map(|c| {
                                let ns = c.metadata.namespace.as_deref().unwrap_or("");
                                let name = c.metadata.name.as_deref().unwrap_or("");
                                (format!("{ns}/{name}"), c)
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
                }
            }
        }
    }

    fn schedule_one(&mut self, qp: crate::queue::QueuedPod) {
        let started = Instant::now();
        let (ns, name) = qp.key.split_once('/').unwrap_or(("", &qp.key));
        let Some(pod) = self.pods.get(&ObjectRef::new(name).within(ns)) else {
            self.queue.done(&qp.key);
            return;
        };
        if !wants(&pod) || gated(&pod) || self.cache.is_assumed(&qp.key) {
            self.queue.done(&qp.key);
            return;
        }
        self.refresh_snapshot();
        let snapshot = &self.snapshot;
        match schedule_pod_from(&pod, snapshot, &mut self.next_start_node_index) {
            Ok(node) => {
                let to_select = crate::plugins::volumes::claims_to_select(&pod, snapshot, &node);
                let mut placed = (*pod).clone();
                placed.spec.get_or_insert_with(Default::default).node_name = Some(node.clone());
                self.cache.assume(Arc::new(placed));
                let (client, tx) = (self.client.clone(), self.tx.clone());
                let (attempts, initial) = (qp.attempts, qp.initial);
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
                    match crate::preemption::eligible(&pod, snapshot) {
                        Err(why) => message = format!("{} preemption: {why}", fit.nodes_message()),
                        Ok(()) => {
                            if let Some(candidate) = crate::preemption::find(&pod, snapshot, fit) {
                                message = fit.nodes_message();
                                self.preempt(&pod, candidate);
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
    }

    /// Evicts `candidate.victims` for `pod` and nominates `candidate.node`
    /// (upstream's `prepareCandidate`), in a task: each victim gets the
    /// `DisruptionTarget` condition, then a `Preempted` event and a graceful
    /// delete.
    fn preempt(&mut self, pod: &Arc<Pod>, candidate: crate::preemption::Candidate) {
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

    /// Publishes an event about `pod` in a task (best effort: a failure is logged).
    ///
    /// kube-runtime's [`Recorder`] folds a repeated event (same object, reason
    /// and action) into a series, and scans every event it has published in the
    /// last minutes on each publish; one recorder for the whole scheduler made
    /// each event cost what the last minutes' tens of thousands of pods did. Each
    /// pod gets its own recorder instead, so a pod's repeated `FailedScheduling`
    /// still folds into one series; it is dropped once the pod is `Scheduled`,
    /// bound or deleted.
    fn publish(&mut self, pod: &Pod, type_: EventType, reason: &str, action: &str, note: String) {
        let key = key_of(pod);
        let recorder = if reason == "Scheduled" {
            self.recorders.remove(&key)
        } else {
            self.recorders.get(&key).cloned()
        };
        let recorder = recorder.unwrap_or_else(|| {
            let r = Recorder::new(self.client.clone(), self.reporter.clone());
            if reason != "Scheduled" {
                self.recorders.insert(key, r.clone());
            }
            r
        });
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
