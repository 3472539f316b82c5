//! `persistentvolumeclaim-protection-controller` and
//! `persistentvolume-protection-controller` (upstream
//! `pkg/controller/volume/pvcprotection` and `pvprotection`).
//!
//! Every claim gets the finalizer `kubernetes.io/pvc-protection` and every
//! volume `kubernetes.io/pv-protection` (upstream's admission plugin
//! `StorageObjectInUseProtection` adds them at creation; rkube's controllers
//! add them to the objects that lack them, as upstream's do too). A claim
//! being deleted keeps its finalizer while a pod that has not finished
//! (phase other than `Succeeded`/`Failed`) uses it; a volume being deleted
//! keeps its finalizer while it is `Bound`. So deleting a claim under a
//! running pod waits for the pod, and its volume (and, for the local-path
//! provisioner, its data) stays until then. Pods are not watched: while a
//! deleted claim is in use, its namespace's pods are listed again every
//! second.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use kube::api::{Api, ListParams, PostParams};
use kube::ResourceExt;

use super::matching::volume_phase;
use super::{is_stale, VolumeCaches};
use crate::context::ControllerContext;

/// The finalizer of claims.
pub const PVC_PROTECTION: &str = "kubernetes.io/pvc-protection";
/// The finalizer of volumes.
pub const PV_PROTECTION: &str = "kubernetes.io/pv-protection";

/// What a protection controller does to an object's finalizer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinalizerAction {
    /// Nothing to do.
    Keep,
    /// Add the finalizer (a live object without it).
    Add,
    /// Remove the finalizer (a deleted object no longer in use).
    Remove,
}

/// The action for an object with `finalizers`, deleted or not, in use or not.
pub fn decide(finalizers: &[String], finalizer: &str, deleting: bool, in_use: bool) -> FinalizerAction {
    let has = finalizers.iter().any(|f| f == finalizer);
    match (deleting, has) {
        (false, false) => FinalizerAction::Add,
        (true, true) if !in_use => FinalizerAction::Remove,
        _ => FinalizerAction::Keep,
    }
}

/// Whether `pod` (not finished) mounts claim `name` of its namespace.
pub fn pod_uses_claim(pod: &Pod, name: &str) -> bool {
    let finished = matches!(pod.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded" | "Failed"));
    !finished
        && pod
            .spec
            .as_ref()
            .and_then(|s| s.volumes.as_ref())
            .is_some_and(|vs| vs.iter().any(|v| v.persistent_volume_claim.as_ref().is_some_and(|c| c.claim_name == name)))
}

/// Starts the claim protection controller.
pub fn start_pvc(ctx: ControllerContext) -> futures::future::BoxFuture<'static, anyhow::Result<()>> {
    Box::pin(super::run_passes(ctx, (), |client, caches, _| Box::pin(pvc_pass(client, caches))))
}

/// Starts the volume protection controller.
pub fn start_pv(ctx: ControllerContext) -> futures::future::BoxFuture<'static, anyhow::Result<()>> {
    Box::pin(super::run_passes(ctx, (), |client, caches, _| Box::pin(pv_pass(client, caches))))
}

fn with_finalizer<K: kube::Resource + Clone>(obj: &K, finalizer: &str, action: FinalizerAction) -> K {
    let mut obj = obj.clone();
    let list = obj.meta_mut().finalizers.get_or_insert_with(Vec::new);
    match action {
        FinalizerAction::Add => list.push(finalizer.to_string()),
        FinalizerAction::Remove => list.retain(|f| f != finalizer),
        FinalizerAction::Keep => {}
    }
    obj
}

/// Returns whether a deleted claim waits for its pods (the pass then runs
/// again soon: pods are not watched).
async fn pvc_pass(client: &kube::Client, caches: &VolumeCaches) -> bool {
    let mut waiting = false;
    for claim in caches.claims.state() {
        match sync_claim(client, &claim).await {
            Ok(in_use) => waiting |= in_use,
            Err(e) if !is_stale(&e) => tracing::warn!(claim = %claim.name_any(), error = %e, "pvc-protection sync failed"),
            Err(_) => {}
        }
    }
    waiting
}

/// Syncs one claim's finalizer; `Ok(true)` when it is deleted but still in use.
async fn sync_claim(client: &kube::Client, claim: &Arc<PersistentVolumeClaim>) -> Result<bool, kube::Error> {
    let deleting = claim.metadata.deletion_timestamp.is_some();
    let finalizers = claim.finalizers();
    let ns = claim.namespace().unwrap_or_default();
    let in_use = if deleting && finalizers.iter().any(|f| f == PVC_PROTECTION) {
        let pods = Api::<Pod>::namespaced(client.clone(), &ns).list(&ListParams::default()).await?.items;
        pods.iter().any(|p| pod_uses_claim(p, &claim.name_any()))
    } else {
        false
    };
    let action = decide(finalizers, PVC_PROTECTION, deleting, in_use);
    if action == FinalizerAction::Keep {
        return Ok(in_use);
    }
    let api: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
    api.replace(&claim.name_any(), &PostParams::default(), &with_finalizer(claim.as_ref(), PVC_PROTECTION, action)).await?;
    Ok(false)
}

async fn pv_pass(client: &kube::Client, caches: &VolumeCaches) -> bool {
    for pv in caches.volumes.state() {
        let action = decide(pv.finalizers(), PV_PROTECTION, pv.metadata.deletion_timestamp.is_some(), volume_phase(&pv) == "Bound");
        if action == FinalizerAction::Keep {
            continue;
        }
        let api: Api<PersistentVolume> = Api::all(client.clone());
        if let Err(e) = api.replace(&pv.name_any(), &PostParams::default(), &with_finalizer(pv.as_ref(), PV_PROTECTION, action)).await {
            if !is_stale(&e) {
                tracing::warn!(volume = %pv.name_any(), error = %e, "pv-protection sync failed");
            }
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn finalizers_are_added_to_live_objects_and_removed_once_unused() {
        let none: Vec<String> = vec![];
        let has = vec![PVC_PROTECTION.to_string()];
        assert_eq!(decide(&none, PVC_PROTECTION, false, false), FinalizerAction::Add);
        assert_eq!(decide(&has, PVC_PROTECTION, false, true), FinalizerAction::Keep);
        assert_eq!(decide(&has, PVC_PROTECTION, true, true), FinalizerAction::Keep);
        assert_eq!(decide(&has, PVC_PROTECTION, true, false), FinalizerAction::Remove);
        assert_eq!(decide(&none, PVC_PROTECTION, true, false), FinalizerAction::Keep);
    }

    #[test]
    fn only_unfinished_pods_mounting_the_claim_use_it() {
        let pod = |phase: &str, claim: &str| -> Pod {
            serde_json::from_value(json!({"spec": {"containers": [], "volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": claim}}]},
                "status": {"phase": phase}}))
            .unwrap()
        };
        assert!(pod_uses_claim(&pod("Running", "data"), "data"));
        assert!(pod_uses_claim(&pod("Pending", "data"), "data"));
        assert!(!pod_uses_claim(&pod("Succeeded", "data"), "data"));
        assert!(!pod_uses_claim(&pod("Running", "other"), "data"));
    }
}
