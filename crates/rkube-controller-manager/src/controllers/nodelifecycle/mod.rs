//! `node-lifecycle-controller` and `taint-eviction-controller` (upstream
//! `pkg/controller/nodelifecycle` and, split from it in 1.29,
//! `pkg/controller/tainteviction`).
//!
//! The node lifecycle controller looks at every node each
//! `--node-monitor-period` (5 s):
//! - a node whose kubelet has not renewed its Lease in `kube-node-lease`
//!   nor its Ready heartbeat for `--node-monitor-grace-period` (50 s;
//!   `--node-startup-grace-period`, 1 min, for a node that never posted
//!   Ready) gets its Ready, MemoryPressure, DiskPressure and PIDPressure
//!   conditions set to `Unknown` ([`plan::unknown_conditions`]), a
//!   `NodeNotReady` event, and its pods' Ready conditions set to False (a
//!   `NodeNotReady` event on each), so Endpoints drop them;
//! - taints follow the conditions ([`plan::wanted_taints`]): NoSchedule
//!   `not-ready`, `unreachable`, `memory-pressure`, `disk-pressure`,
//!   `pid-pressure`, `network-unavailable`, `unschedulable`, and NoExecute
//!   `not-ready`/`unreachable` with their `timeAdded`. When every node is
//!   not Ready, NoExecute taints are lifted and none is added (upstream's
//!   full-disruption mode, so a lone node's restart evicts nothing).
//!   Unlike upstream, tainting is not rate-limited per zone
//!   (`--node-eviction-rate`): rkube treats the cluster as one zone.
//!
//! The taint eviction controller deletes pods on nodes with NoExecute
//! taints they do not tolerate, at once, or when their shortest matching
//! `tolerationSeconds` runs out ([`plan::eviction_due`]; the
//! `DefaultTolerationSeconds` admission plugin gives every pod 300 s): a
//! `DisruptionTarget` condition (reason `DeletionByTaintManager`), a
//! `TaintManagerEviction` event, then a graceful delete.

pub mod plan;

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::ResourceExt;
use serde_json::json;

use crate::context::ControllerContext;
use crate::events::EventSink;
use crate::pod_control;

/// Timing of the node lifecycle controller (kube-controller-manager's flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeLifecycleOptions {
    /// `--node-monitor-period`: how often nodes are checked (5 s).
    pub monitor_period: Duration,
    /// `--node-monitor-grace-period`: silence before a node is Unknown (50 s).
    pub monitor_grace: Duration,
    /// `--node-startup-grace-period`: the same for a node that never posted Ready (1 min).
    pub startup_grace: Duration,
}

impl Default for NodeLifecycleOptions {
    fn default() -> Self {
        NodeLifecycleOptions {
            monitor_period: Duration::from_secs(5),
            monitor_grace: Duration::from_secs(50),
            startup_grace: Duration::from_secs(60),
        }
    }
}

/// Starts the node lifecycle controller with the configured timing.
pub fn start(ctx: ControllerContext) -> futures::future::BoxFuture<'static, anyhow::Result<()>> {
    let options = ctx.config.node_lifecycle;
    Box::pin(run(ctx, options))
}

/// Starts the taint eviction controller.
pub fn start_taint_eviction(ctx: ControllerContext) -> futures::future::BoxFuture<'static, anyhow::Result<()>> {
    Box::pin(run_taint_eviction(ctx, Duration::from_secs(1)))
}

/// What was last seen of a node's kubelet, and when (by this process's clock).
struct Probe {
    heartbeat: (Option<String>, Option<String>),
    at: Instant,
}

/// Runs the node lifecycle controller until `ctx` says stop.
pub async fn run(ctx: ControllerContext, options: NodeLifecycleOptions) -> anyhow::Result<()> {
    let events = EventSink::new(ctx.client.clone(), "node-controller");
    let mut probes: HashMap<String, Probe> = HashMap::new();
    let mut stopped_evictions = false;
    let stopped = ctx.stopped();
    tokio::pin!(stopped);
    loop {
        match monitor_once(&ctx.client, &events, options, &mut probes, &mut stopped_evictions).await {
            Ok(()) => {}
            Err(err) => tracing::debug!(%err, "node lifecycle pass"),
        }
        tokio::select! {
            _ = &mut stopped => return Ok(()),
            _ = tokio::time::sleep(options.monitor_period) => {}
        }
    }
}

async fn monitor_once(
    client: &kube::Client,
    events: &EventSink,
    options: NodeLifecycleOptions,
    probes: &mut HashMap<String, Probe>,
    stopped_evictions: &mut bool,
) -> Result<(), kube::Error> {
    let nodes_api: Api<Node> = Api::all(client.clone());
    let mut nodes = nodes_api.list(&ListParams::default()).await?.items;
    let leases: HashMap<String, String> = Api::<Lease>::namespaced(client.clone(), "kube-node-lease")
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter_map(|l| Some((l.name_any(), l.spec?.renew_time?.0.to_string())))
        .collect();
    let names: HashSet<String> = nodes.iter().map(|n| n.name_any()).collect();
    probes.retain(|n, _| names.contains(n));
    let now = Instant::now();

    for node in &mut nodes {
        let name = node.name_any();
        let hb = plan::heartbeat(node, leases.get(&name).map(String::as_str));
        let probe = probes.entry(name.clone()).or_insert_with(|| Probe { heartbeat: hb.clone(), at: now });
        if probe.heartbeat != hb {
            *probe = Probe { heartbeat: hb, at: now };
        }
        let grace = if plan::ready_status(node).is_none() { options.startup_grace } else { options.monitor_grace };
        if now.duration_since(probe.at) <= grace {
            continue;
        }
        let Some(conditions) = plan::unknown_conditions(node, Timestamp::now()) else { continue };
        tracing::info!(node = %name, "kubelet stopped posting node status; conditions set to Unknown");
        let patch = json!({"status": {"conditions": conditions}});
        match nodes_api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch)).await {
            Ok(updated) => *node = updated,
            Err(e) if pod_control::is_not_found(&e) => continue,
            Err(e) => return Err(e),
        }
        let note = format!("Node {name} status is now: NodeNotReady");
        events.normal(&pod_control::object_ref(&*node), "NodeNotReady", note).await;
    }

    // Upstream's full disruption: with every node down, stop evicting.
    let all_down = !nodes.is_empty() && nodes.iter().all(|n| plan::ready_status(n) != Some("True"));
    if all_down != *stopped_evictions {
        if all_down {
            tracing::warn!("every node is not Ready: entering full disruption mode, no evictions");
        } else {
            tracing::info!("a node is Ready again: leaving full disruption mode");
        }
        *stopped_evictions = all_down;
    }

    for node in &nodes {
        let name = node.name_any();
        if let Some(taints) = plan::wanted_taints(node, all_down, Timestamp::now()) {
            // resourceVersion makes the replace of the list conditional: a
            // concurrent `kubectl taint` is kept (the next pass redoes this).
            let patch = json!({"metadata": {"resourceVersion": node.resource_version()}, "spec": {"taints": taints}});
            match nodes_api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await {
                Ok(_) => {}
                Err(e) if pod_control::is_gone(&e) => {}
                Err(e) => return Err(e),
            }
        }
        if plan::ready_status(node) != Some("True") {
            mark_pods_not_ready(client, events, &name).await?;
        }
    }
    Ok(())
}

/// Sets the Ready condition of every running pod on `node` to False
/// (upstream's `MarkPodsNotReady`), with a `NodeNotReady` event on each.
async fn mark_pods_not_ready(client: &kube::Client, events: &EventSink, node: &str) -> Result<(), kube::Error> {
    let pods = pods_on(client, node).await?;
    for pod in pods.iter().filter(|p| plan::needs_not_ready(p)) {
        let api: Api<Pod> = Api::namespaced(client.clone(), &pod.namespace().unwrap_or_default());
        let patch = json!({"status": {"conditions": [
            {"type": "Ready", "status": "False", "lastTransitionTime": Timestamp::now().to_string()}
        ]}});
        match api.patch_status(&pod.name_any(), &PatchParams::default(), &Patch::Strategic(&patch)).await {
            Ok(_) => events.warning(&pod_control::object_ref(pod), "NodeNotReady", "Node is not ready".into()).await,
            Err(e) if pod_control::is_gone(&e) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

async fn pods_on(client: &kube::Client, node: &str) -> Result<Vec<Pod>, kube::Error> {
    let lp = ListParams::default().fields(&format!("spec.nodeName={node}"));
    Ok(Api::<Pod>::all(client.clone()).list(&lp).await?.items)
}

/// Runs the taint eviction controller, looking every `period`, until `ctx` says stop.
pub async fn run_taint_eviction(ctx: ControllerContext, period: Duration) -> anyhow::Result<()> {
    let events = EventSink::new(ctx.client.clone(), "taint-eviction-controller");
    let mut evicted: HashSet<String> = HashSet::new();
    let stopped = ctx.stopped();
    tokio::pin!(stopped);
    loop {
        if let Err(err) = evict_once(&ctx.client, &events, &mut evicted).await {
            tracing::debug!(%err, "taint eviction pass");
        }
        tokio::select! {
            _ = &mut stopped => return Ok(()),
            _ = tokio::time::sleep(period) => {}
        }
    }
}

async fn evict_once(client: &kube::Client, events: &EventSink, evicted: &mut HashSet<String>) -> Result<(), kube::Error> {
    let nodes = Api::<Node>::all(client.clone()).list(&ListParams::default()).await?.items;
    let mut live = HashSet::new();
    let now = Timestamp::now();
    for node in &nodes {
        let taints = node.spec.as_ref().and_then(|s| s.taints.clone()).unwrap_or_default();
        if !taints.iter().any(|t| t.effect == "NoExecute") {
            continue;
        }
        for pod in pods_on(client, &node.name_any()).await? {
            let uid = pod.uid().unwrap_or_default();
            live.insert(uid.clone());
            if plan::gone_or_going(&pod) || evicted.contains(&uid) {
                continue;
            }
            if plan::eviction_due(&pod, &taints, now).is_none_or(|due| due > now) {
                continue;
            }
            evict(client, events, &pod).await?;
            evicted.insert(uid);
        }
    }
    evicted.retain(|uid| live.contains(uid));
    Ok(())
}

async fn evict(client: &kube::Client, events: &EventSink, pod: &Pod) -> Result<(), kube::Error> {
    let (ns, name) = (pod.namespace().unwrap_or_default(), pod.name_any());
    let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
    tracing::info!(pod = %format!("{ns}/{name}"), "evicting a pod that does not tolerate its node's NoExecute taint");
    events.normal(&pod_control::object_ref(pod), "TaintManagerEviction", format!("Marking for deletion Pod {ns}/{name}")).await;
    let condition = json!({"status": {"conditions": [{
        "type": "DisruptionTarget", "status": "True", "reason": "DeletionByTaintManager",
        "message": "Taint manager: deleting due to NoExecute taint", "lastTransitionTime": Timestamp::now().to_string(),
    }]}});
    pod_control::ignore_gone(api.patch_status(&name, &PatchParams::default(), &Patch::Strategic(&condition)).await.map(|_| ()))?;
    pod_control::ignore_gone(api.delete(&name, &DeleteParams::default()).await.map(|_| ()))
}
