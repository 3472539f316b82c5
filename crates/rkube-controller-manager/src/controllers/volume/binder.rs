//! `persistentvolume-binder-controller`: upstream's
//! `pkg/controller/volume/persistentvolume/pv_controller.go`.
//!
//! Claims (`syncClaim`):
//! - an unbound claim binds to the volume [`find_best_match`] picks: the
//!   volume gets `spec.claimRef` (and `pv.kubernetes.io/bound-by-controller`),
//!   phase `Bound`; the claim `spec.volumeName`,
//!   `pv.kubernetes.io/bind-completed` (and bound-by-controller), phase
//!   `Bound` with the volume's capacity and access modes;
//! - without a match it stays `Pending`: a `WaitForFirstConsumer` claim
//!   without `volume.kubernetes.io/selected-node` waits (event
//!   `WaitForFirstConsumer`); a claim of a class with a provisioner gets
//!   `volume.kubernetes.io/storage-provisioner` (event `ExternalProvisioning`);
//!   a claim without a class gets `FailedBinding`;
//! - a claim whose volume is gone is `Lost` (event `ClaimLost`).
//!
//! Volumes (`syncVolume`): no `claimRef` is `Available`; a claim bound to
//! it makes it `Bound`; a claim gone (or replaced by one with another UID)
//! makes it `Released`, and then by `persistentVolumeReclaimPolicy`:
//! `Retain` keeps it; `Delete` deletes it, except volumes of an external
//! provisioner (`pv.kubernetes.io/provisioned-by`), which that provisioner
//! deletes with their data; a volume the controller bound to a claim that
//! bound elsewhere is unbound.
//!
//! Deviation: upstream leaves binding `WaitForFirstConsumer` claims to
//! pre-existing volumes to the scheduler; rkube's scheduler only sets
//! `selected-node`, and this controller then binds the claim to a volume
//! whose node affinity admits that node (or has it provisioned).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, ObjectReference, PersistentVolume, PersistentVolumeClaim};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Resource, ResourceExt};
use serde_json::json;

use super::matching::*;
use super::{is_stale, VolumeCaches};
use crate::context::ControllerContext;
use crate::events::EventSink;

/// The reporting controller of the binder's events.
pub const CONTROLLER: &str = "persistentvolume-controller";
/// `FailedBinding`'s message for a claim without a class that no volume satisfies.
pub const NO_VOLUMES_NO_CLASS: &str = "no persistent volumes available for this claim and no storage class is set";
/// `WaitForFirstConsumer`'s message.
pub const WAITING_FOR_CONSUMER: &str = "waiting for first consumer to be created before binding";

/// Starts the controller.
pub fn start(ctx: ControllerContext) -> futures::future::BoxFuture<'static, anyhow::Result<()>> {
    let events = EventSink::new(ctx.client.clone(), CONTROLLER);
    Box::pin(super::run_passes(ctx, Binder { events, reported: HashMap::new() }, |client, caches, b| Box::pin(b.pass(client, caches))))
}

/// The binder's memory between passes.
struct Binder {
    events: EventSink,
    /// The last event reason and message published per claim or volume UID
    /// (a pending claim is reported once per state, not every resync).
    reported: HashMap<String, (String, String)>,
}

/// Whether a claim of `class` waits for its first consumer (`volumeBindingMode: WaitForFirstConsumer`).
pub fn is_delay_binding(caches: &VolumeCaches, class: &str) -> bool {
    !class.is_empty() && caches.class(class).is_some_and(|c| c.volume_binding_mode.as_deref() == Some("WaitForFirstConsumer"))
}

impl Binder {
    async fn pass(&mut self, client: &kube::Client, caches: &VolumeCaches) -> bool {
        let mut volumes: Vec<Arc<PersistentVolume>> = caches.volumes.state();
        volumes.sort_by_key(|v| v.name_any());
        let mut claims = caches.claims.state();
        claims.sort_by_key(|c| (c.namespace(), c.name_any()));
        for claim in &claims {
            if let Err(e) = self.sync_claim(client, caches, claim, &mut volumes).await {
                if !is_stale(&e) {
                    tracing::warn!(claim = %format!("{}/{}", claim.namespace().unwrap_or_default(), claim.name_any()), error = %e, "syncing a claim failed");
                }
            }
        }
        for pv in caches.volumes.state() {
            if let Err(e) = self.sync_volume(client, caches, &pv).await {
                if !is_stale(&e) {
                    tracing::warn!(volume = %pv.name_any(), error = %e, "syncing a volume failed");
                }
            }
        }
        let live: std::collections::HashSet<String> =
            claims.iter().filter_map(|c| c.uid()).chain(caches.volumes.state().iter().filter_map(|v| v.uid())).collect();
        self.reported.retain(|uid, _| live.contains(uid));
        false
    }

    /// Publishes an event about `obj` unless the same one was its last.
    async fn report<K: Resource<DynamicType = ()>>(&mut self, obj: &K, warning: bool, reason: &str, note: String) {
        let uid = obj.meta().uid.clone().unwrap_or_default();
        let key = (reason.to_string(), note.clone());
        if self.reported.get(&uid) == Some(&key) {
            return;
        }
        self.reported.insert(uid, key);
        let r: ObjectReference = obj.object_ref(&());
        if warning {
            self.events.warning(&r, reason, note).await;
        } else {
            self.events.normal(&r, reason, note).await;
        }
    }

    async fn sync_claim(
        &mut self,
        client: &kube::Client,
        caches: &VolumeCaches,
        claim: &Arc<PersistentVolumeClaim>,
        volumes: &mut [Arc<PersistentVolume>],
    ) -> Result<(), kube::Error> {
        if claim.metadata.deletion_timestamp.is_some() {
            return Ok(());
        }
        let volume_name = claim_volume_name(claim).to_string();
        if volume_name.is_empty() {
            return self.sync_unbound_claim(client, caches, claim, volumes).await;
        }
        let Some(pv) = volumes.iter().find(|v| v.name_any() == volume_name).cloned() else {
            if claim_phase(claim) == "Bound" || claim.annotations().contains_key(ANN_BIND_COMPLETED) {
                set_claim_phase(client, claim, "Lost", None).await?;
                let note = "Bound claim has lost its PersistentVolume. Data on the volume is lost!".to_string();
                self.report(claim.as_ref(), true, "ClaimLost", note).await;
            } else {
                set_claim_phase(client, claim, "Pending", None).await?;
            }
            return Ok(());
        };
        let claim_ref = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref());
        if claim_ref.is_none() || is_volume_bound_to_claim(&pv, claim) {
            if claim_ref.is_none() {
                if let Err(why) = check_volume_satisfies_claim(&pv, claim) {
                    set_claim_phase(client, claim, "Pending", None).await?;
                    self.report(claim.as_ref(), true, "FailedBinding", format!("Cannot bind to requested volume {volume_name:?}: {why}")).await;
                    return Ok(());
                }
            }
            let bound = bind(client, &pv, claim).await?;
            replace(volumes, bound);
        } else if claim.annotations().contains_key(ANN_BIND_COMPLETED) {
            set_claim_phase(client, claim, "Lost", None).await?;
            self.report(claim.as_ref(), true, "ClaimMisbound", "Two claims are bound to the same volume, this one is bound incorrectly".into()).await;
        } else {
            set_claim_phase(client, claim, "Pending", None).await?;
            self.report(claim.as_ref(), true, "FailedBinding", format!("volume {volume_name:?} already bound to a different claim.")).await;
        }
        Ok(())
    }

    async fn sync_unbound_claim(
        &mut self,
        client: &kube::Client,
        caches: &VolumeCaches,
        claim: &Arc<PersistentVolumeClaim>,
        volumes: &mut [Arc<PersistentVolume>],
    ) -> Result<(), kube::Error> {
        let class = claim_class(claim);
        let delay = is_delay_binding(caches, &class);
        let selected = claim.annotations().get(ANN_SELECTED_NODE).cloned();
        let node = match (&selected, delay) {
            (Some(n), true) => Some(node_labels(client, n).await?),
            _ => None,
        };
        let node_ref = match (&selected, &node) {
            (Some(n), Some(l)) => Some((n.as_str(), l)),
            _ => None,
        };
        if let Some(pv) = find_best_match(claim, volumes, delay, node_ref) {
            let bound = bind(client, &pv, claim).await?;
            replace(volumes, bound);
            return Ok(());
        }
        if claim_phase(claim) != "Pending" {
            set_claim_phase(client, claim, "Pending", None).await?;
        }
        if delay && selected.is_none() {
            self.report(claim.as_ref(), false, "WaitForFirstConsumer", WAITING_FOR_CONSUMER.into()).await;
            return Ok(());
        }
        if class.is_empty() {
            self.report(claim.as_ref(), false, "FailedBinding", NO_VOLUMES_NO_CLASS.into()).await;
            return Ok(());
        }
        let Some(sc) = caches.class(&class) else {
            self.report(claim.as_ref(), true, "ProvisioningFailed", format!("storageclass.storage.k8s.io {class:?} not found")).await;
            return Ok(());
        };
        let provisioner = sc.provisioner.clone();
        if claim.annotations().get(ANN_STORAGE_PROVISIONER) != Some(&provisioner) {
            let api: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &claim.namespace().unwrap_or_default());
            let patch = json!({"metadata": {"annotations": {ANN_STORAGE_PROVISIONER: provisioner, ANN_BETA_STORAGE_PROVISIONER: provisioner}}});
            api.patch(&claim.name_any(), &PatchParams::default(), &Patch::Merge(patch)).await?;
        }
        let note = format!(
            "Waiting for a volume to be created either by the external provisioner '{provisioner}' or manually by the system administrator. \
             If volume creation is delayed, please verify that the provisioner is running and correctly registered."
        );
        self.report(claim.as_ref(), false, "ExternalProvisioning", note).await;
        Ok(())
    }

    async fn sync_volume(&mut self, client: &kube::Client, caches: &VolumeCaches, pv: &Arc<PersistentVolume>) -> Result<(), kube::Error> {
        // A volume being deleted is still synced: its phase tells
        // pv-protection when it may go.
        let Some(r) = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref()) else {
            return set_volume_phase(client, pv, "Available").await;
        };
        if r.uid.as_deref().unwrap_or("").is_empty() {
            // Pre-bound by a user to a claim that does not exist yet.
            return set_volume_phase(client, pv, "Available").await;
        }
        let claim = caches
            .claim(r.namespace.as_deref().unwrap_or(""), r.name.as_deref().unwrap_or(""))
            .filter(|c| c.uid().as_deref() == r.uid.as_deref());
        let claim = match claim {
            Some(c) => Some(c),
            // The cache may lag behind a claim created a moment ago: ask the server.
            None => {
                let api: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), r.namespace.as_deref().unwrap_or(""));
                api.get_opt(r.name.as_deref().unwrap_or("")).await?.filter(|c| c.uid().as_deref() == r.uid.as_deref()).map(Arc::new)
            }
        };
        match claim {
            None => self.reclaim(client, pv).await,
            Some(c) if claim_volume_name(&c).is_empty() => Ok(()),
            Some(c) if claim_volume_name(&c) == pv.name_any() => set_volume_phase(client, pv, "Bound").await,
            Some(_) => {
                let provisioned = pv.annotations().contains_key(ANN_PROVISIONED_BY);
                if provisioned && reclaim_policy(pv) == "Delete" {
                    self.reclaim(client, pv).await
                } else if pv.annotations().contains_key(ANN_BOUND_BY_CONTROLLER) {
                    unbind(client, pv).await
                } else {
                    Ok(())
                }
            }
        }
    }

    /// The claim of `pv` is gone: `Released`, then its reclaim policy.
    async fn reclaim(&mut self, client: &kube::Client, pv: &Arc<PersistentVolume>) -> Result<(), kube::Error> {
        if !matches!(volume_phase(pv), "Released" | "Failed") {
            set_volume_phase(client, pv, "Released").await?;
        }
        match reclaim_policy(pv) {
            "Delete" if pv.annotations().contains_key(ANN_PROVISIONED_BY) => Ok(()),
            "Delete" if pv.metadata.deletion_timestamp.is_some() => Ok(()),
            "Delete" => {
                let api: Api<PersistentVolume> = Api::all(client.clone());
                crate::pod_control::ignore_gone(api.delete(&pv.name_any(), &Default::default()).await.map(|_| ()))
            }
            "Recycle" => {
                self.report(pv.as_ref(), true, "VolumeFailedRecycle", "No recycler plugin found for the volume!".into()).await;
                Ok(())
            }
            _ => Ok(()),
        }
    }
}

/// `spec.persistentVolumeReclaimPolicy` (`Retain` when unset, as the API defaults it).
pub fn reclaim_policy(pv: &PersistentVolume) -> &str {
    pv.spec.as_ref().and_then(|s| s.persistent_volume_reclaim_policy.as_deref()).unwrap_or("Retain")
}

fn replace(volumes: &mut [Arc<PersistentVolume>], pv: Arc<PersistentVolume>) {
    if let Some(slot) = volumes.iter_mut().find(|v| v.name_any() == pv.name_any()) {
        *slot = pv;
    }
}

async fn node_labels(client: &kube::Client, name: &str) -> Result<BTreeMap<String, String>, kube::Error> {
    let node = Api::<Node>::all(client.clone()).get_opt(name).await?;
    Ok(node.and_then(|n| n.metadata.labels).unwrap_or_default())
}

/// Binds `pv` and `claim` both ways (upstream's `bind`), skipping the steps
/// already done; returns the volume as stored. Writes carry the cached
/// resourceVersion, so two passes never bind one volume twice.
pub async fn bind(client: &kube::Client, pv: &PersistentVolume, claim: &PersistentVolumeClaim) -> Result<Arc<PersistentVolume>, kube::Error> {
    let ns = claim.namespace().unwrap_or_default();
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    let mut pv = pv.clone();
    let current_ref = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref());
    if current_ref.and_then(|r| r.uid.as_deref()) != claim.uid().as_deref() {
        if current_ref.is_none() {
            pv.annotations_mut().insert(ANN_BOUND_BY_CONTROLLER.into(), "yes".into());
        }
        let mut r = claim.object_ref(&());
        r.field_path = None;
        pv.spec.get_or_insert_with(Default::default).claim_ref = Some(r);
        pv = pvs.replace(&pv.name_any(), &PostParams::default(), &pv).await?;
    }
    if volume_phase(&pv) != "Bound" {
        pv = pvs.patch_status(&pv.name_any(), &PatchParams::default(), &Patch::Merge(json!({"status": {"phase": "Bound"}}))).await?;
    }
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
    let mut claim = claim.clone();
    if claim_volume_name(&claim) != pv.name_any() || !claim.annotations().contains_key(ANN_BIND_COMPLETED) {
        if claim_volume_name(&claim).is_empty() {
            claim.annotations_mut().insert(ANN_BOUND_BY_CONTROLLER.into(), "yes".into());
        }
        claim.annotations_mut().insert(ANN_BIND_COMPLETED.into(), "yes".into());
        claim.spec.get_or_insert_with(Default::default).volume_name = Some(pv.name_any());
        claim = claims.replace(&claim.name_any(), &PostParams::default(), &claim).await?;
    }
    set_claim_phase(client, &claim, "Bound", Some(&pv)).await?;
    Ok(Arc::new(pv))
}

/// Sets the claim's phase (with `Bound`, the volume's capacity and access
/// modes too) when it differs.
async fn set_claim_phase(client: &kube::Client, claim: &PersistentVolumeClaim, phase: &str, pv: Option<&PersistentVolume>) -> Result<(), kube::Error> {
    let mut status = json!({"phase": phase});
    if let Some(spec) = pv.and_then(|p| p.spec.as_ref()) {
        status["capacity"] = json!(spec.capacity);
        status["accessModes"] = json!(spec.access_modes);
    }
    let same = claim.status.as_ref().is_some_and(|s| {
        s.phase.as_deref() == Some(phase)
            && pv.and_then(|p| p.spec.as_ref()).is_none_or(|spec| s.capacity == spec.capacity && s.access_modes == spec.access_modes)
    });
    if same {
        return Ok(());
    }
    let api: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &claim.namespace().unwrap_or_default());
    api.patch_status(&claim.name_any(), &PatchParams::default(), &Patch::Merge(json!({"status": status}))).await?;
    Ok(())
}

async fn set_volume_phase(client: &kube::Client, pv: &PersistentVolume, phase: &str) -> Result<(), kube::Error> {
    if volume_phase(pv) == phase {
        return Ok(());
    }
    let api: Api<PersistentVolume> = Api::all(client.clone());
    api.patch_status(&pv.name_any(), &PatchParams::default(), &Patch::Merge(json!({"status": {"phase": phase}}))).await?;
    Ok(())
}

/// Clears the `claimRef` the controller set (upstream's `unbindVolume`): the
/// volume is `Available` again.
async fn unbind(client: &kube::Client, pv: &PersistentVolume) -> Result<(), kube::Error> {
    let mut pv = pv.clone();
    pv.annotations_mut().remove(ANN_BOUND_BY_CONTROLLER);
    if let Some(spec) = pv.spec.as_mut() {
        spec.claim_ref = None;
    }
    let api: Api<PersistentVolume> = Api::all(client.clone());
    let pv = api.replace(&pv.name_any(), &PostParams::default(), &pv).await?;
    set_volume_phase(client, &pv, "Available").await
}
