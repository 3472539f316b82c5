//! `pod-garbage-collector-controller`: upstream's `pkg/controller/podgc`.
//! Every check period it
//! - deletes the oldest terminated (`Succeeded`/`Failed`) pods beyond
//!   `--terminated-pod-gc-threshold` (disabled when `<= 0`);
//! - marks pods bound to a node that no longer exists `Failed` with a
//!   `DisruptionTarget` condition (reason `DeletionByPodGC`) and
//!   force-deletes them (grace period 0), terminating ones included, once
//!   the node has been missing for the quarantine time and the API server
//!   confirms it is gone;
//! - force-deletes terminating pods that were never scheduled.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::ResourceExt;
use serde_json::json;

use crate::context::ControllerContext;
use crate::pod_control;

/// Timing of the pod garbage collector (upstream fixes these in code).
#[derive(Debug, Clone, Copy)]
pub struct PodGcOptions {
    /// How often it looks (upstream `gcCheckPeriod`, 20s).
    pub check_period: Duration,
    /// How long a node must be missing before its pods go (upstream `quarantineTime`, 40s).
    pub quarantine: Duration,
}

impl Default for PodGcOptions {
    fn default() -> Self {
        PodGcOptions { check_period: Duration::from_secs(20), quarantine: Duration::from_secs(40) }
    }
}

/// Names (`namespace`, `name`) of the terminated pods to delete so at most
/// `threshold` remain, oldest (by creation time) first; none when
/// `threshold <= 0` (upstream's `gcTerminated`).
pub fn terminated_to_delete(pods: &[Pod], threshold: i32) -> Vec<(String, String)> {
    if threshold <= 0 {
        return Vec::new();
    }
    let mut terminated: Vec<&Pod> = pods
        .iter()
        .filter(|p| matches!(p.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded") | Some("Failed")))
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect();
    let excess = terminated.len().saturating_sub(usize::try_from(threshold).unwrap_or(0));
    terminated.sort_by_key(|p| p.metadata.creation_timestamp.as_ref().map(|t| t.0));
    terminated[..excess].iter().map(|p| (p.namespace().unwrap_or_default(), p.name_any())).collect()
}

/// Pods bound to a node outside `nodes` (upstream's orphaned pods).
pub fn orphaned<'a>(pods: &'a [Pod], nodes: &HashSet<String>) -> Vec<&'a Pod> {
    pods.iter()
        .filter(|p| {
            let node = p.spec.as_ref().and_then(|s| s.node_name.as_deref()).unwrap_or("");
            !node.is_empty() && !nodes.contains(node)
        })
        .collect()
}

/// Terminating pods that were never scheduled (upstream's `gcUnscheduledTerminating`).
pub fn unscheduled_terminating(pods: &[Pod]) -> Vec<&Pod> {
    pods.iter()
        .filter(|p| p.metadata.deletion_timestamp.is_some())
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()).unwrap_or("").is_empty())
        .collect()
}

/// Starts the controller with upstream's timing.
pub fn start(ctx: ControllerContext) -> futures::future::BoxFuture<'static, anyhow::Result<()>> {
    Box::pin(run(ctx, PodGcOptions::default()))
}

/// Runs the controller with `options` until `ctx` says stop.
pub async fn run(ctx: ControllerContext, options: PodGcOptions) -> anyhow::Result<()> {
    let threshold = ctx.config.terminated_pod_gc_threshold;
    let mut missing_since: HashMap<String, Instant> = HashMap::new();
    let stopped = ctx.stopped();
    tokio::pin!(stopped);
    loop {
        if let Err(err) = gc_once(&ctx.client, threshold, options.quarantine, &mut missing_since).await {
            tracing::debug!(%err, "pod garbage collection");
        }
        tokio::select! {
            _ = &mut stopped => return Ok(()),
            _ = tokio::time::sleep(options.check_period) => {}
        }
    }
}

async fn gc_once(client: &kube::Client, threshold: i32, quarantine: Duration, missing_since: &mut HashMap<String, Instant>) -> Result<(), kube::Error> {
    let pods = Api::<Pod>::all(client.clone()).list(&ListParams::default()).await?.items;
    let nodes: HashSet<String> = Api::<Node>::all(client.clone()).list(&ListParams::default()).await?.items.iter().map(|n| n.name_any()).collect();

    for (ns, name) in terminated_to_delete(&pods, threshold) {
        let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
        tracing::info!(pod = %format!("{ns}/{name}"), "deleting a terminated pod beyond the threshold");
        pod_control::ignore_gone(api.delete(&name, &DeleteParams::default()).await.map(|_| ()))?;
    }

    let orphans = orphaned(&pods, &nodes);
    let now = Instant::now();
    let missing: HashSet<String> = orphans.iter().filter_map(|p| p.spec.as_ref()?.node_name.clone()).collect();
    missing_since.retain(|n, _| missing.contains(n));
    for n in &missing {
        missing_since.entry(n.clone()).or_insert(now);
    }
    let mut confirmed: HashMap<String, bool> = HashMap::new();
    for p in orphans {
        let node = p.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default();
        if missing_since.get(&node).is_none_or(|t| t.elapsed() < quarantine) {
            continue;
        }
        let gone = match confirmed.get(&node) {
            Some(g) => *g,
            None => {
                let g = Api::<Node>::all(client.clone()).get_opt(&node).await?.is_none();
                confirmed.insert(node.clone(), g);
                g
            }
        };
        if gone {
            tracing::info!(pod = %p.name_any(), node = %node, "force-deleting a pod of a node that no longer exists");
            fail_and_force_delete(client, p, "PodGC: node no longer exists").await?;
        }
    }

    for p in unscheduled_terminating(&pods) {
        let api: Api<Pod> = Api::namespaced(client.clone(), &p.namespace().unwrap_or_default());
        pod_control::ignore_gone(api.delete(&p.name_any(), &DeleteParams { grace_period_seconds: Some(0), ..DeleteParams::default() }).await.map(|_| ()))?;
    }
    Ok(())
}

/// Upstream's `markFailedAndDeletePodWithCondition`: a non-terminal pod
/// becomes `Failed` with a `DisruptionTarget` condition, then the pod is
/// deleted with grace period 0.
async fn fail_and_force_delete(client: &kube::Client, pod: &Pod, message: &str) -> Result<(), kube::Error> {
    let api: Api<Pod> = Api::namespaced(client.clone(), &pod.namespace().unwrap_or_default());
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("");
    if !matches!(phase, "Succeeded" | "Failed") {
        let now = Timestamp::now().to_string();
        let status = json!({"status": {"phase": "Failed", "conditions": [
            {"type": "DisruptionTarget", "status": "True", "reason": "DeletionByPodGC", "message": message, "lastTransitionTime": now},
        ]}});
        pod_control::ignore_gone(api.patch_status(&pod.name_any(), &PatchParams::default(), &Patch::Strategic(&status)).await.map(|_| ()))?;
    }
    pod_control::ignore_gone(api.delete(&pod.name_any(), &DeleteParams { grace_period_seconds: Some(0), ..DeleteParams::default() }).await.map(|_| ()))
}


#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, node: &str, phase: &str, created: &str, deleting: bool) -> Pod {
        let mut v = json!({
            "metadata": {"name": name, "namespace": "ns", "creationTimestamp": created},
            "spec": {"nodeName": node, "containers": []},
            "status": {"phase": phase},
        });
        if deleting {
            v["metadata"]["deletionTimestamp"] = json!("2026-01-01T01:00:00Z");
        }
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn the_oldest_terminated_pods_beyond_the_threshold_go() {
        let pods = [
            pod("new-ok", "n", "Succeeded", "2026-01-01T00:03:00Z", false),
            pod("old-failed", "n", "Failed", "2026-01-01T00:01:00Z", false),
            pod("running", "n", "Running", "2026-01-01T00:00:00Z", false),
            pod("mid-ok", "n", "Succeeded", "2026-01-01T00:02:00Z", false),
        ];
        let names = |v: Vec<(String, String)>| v.into_iter().map(|(_, n)| n).collect::<Vec<_>>();
        assert_eq!(names(terminated_to_delete(&pods, 1)), vec!["old-failed", "mid-ok"]);
        assert_eq!(names(terminated_to_delete(&pods, 3)), Vec::<String>::new());
        assert_eq!(names(terminated_to_delete(&pods, 0)), Vec::<String>::new());
    }

    #[test]
    fn pods_on_missing_nodes_are_orphans_and_unscheduled_terminating_pods_go() {
        let pods = [
            pod("on-live", "live", "Running", "2026-01-01T00:00:00Z", false),
            pod("on-gone", "gone", "Running", "2026-01-01T00:00:00Z", true),
            pod("unscheduled", "", "Pending", "2026-01-01T00:00:00Z", false),
            pod("unscheduled-deleting", "", "Pending", "2026-01-01T00:00:00Z", true),
        ];
        let nodes: HashSet<String> = ["live".to_string()].into();
        let o: Vec<_> = orphaned(&pods, &nodes).iter().map(|p| p.name_any()).collect();
        assert_eq!(o, vec!["on-gone"]);
        let u: Vec<_> = unscheduled_terminating(&pods).iter().map(|p| p.name_any()).collect();
        assert_eq!(u, vec!["unscheduled-deleting"]);
    }
}
