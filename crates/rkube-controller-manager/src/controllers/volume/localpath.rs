//! `local-path-provisioner-controller`: the dynamic provisioner k3s ships
//! (rancher's local-path-provisioner, provisioner name
//! `rancher.io/local-path`), inside the controller manager.
//!
//! For a claim the binder handed to this provisioner
//! (`volume.kubernetes.io/storage-provisioner: rancher.io/local-path`), of
//! a StorageClass with that provisioner, still unbound and, for a
//! `WaitForFirstConsumer` class, with a `volume.kubernetes.io/selected-node`,
//! it creates the directory `<root>/pvc-<claim uid>_<namespace>_<name>`
//! (mode 0777, as local-path-provisioner does) and a PersistentVolume
//! `pvc-<claim uid>`: `hostPath` (type `DirectoryOrCreate`) on that
//! directory, node affinity to the selected node's `kubernetes.io/hostname`,
//! the claim's storage request and access modes, the class's reclaim
//! policy, `pv.kubernetes.io/provisioned-by: rancher.io/local-path` and a
//! `claimRef` to the claim, which the binder then completes. Events:
//! `Provisioning` and `ProvisioningSucceeded` (or `ProvisioningFailed`).
//!
//! A `Released` volume of this provisioner with reclaim policy `Delete`
//! loses its directory, then the volume is deleted.
//!
//! Assumption: the controller manager runs on the machine whose disk the
//! volumes are on (one machine, as `rkube up --node`); it creates and
//! removes the directories itself instead of through a helper pod on the
//! node as local-path-provisioner does.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim};
use kube::api::{Api, DeleteParams, PostParams};
use kube::{Resource, ResourceExt};
use serde_json::json;

use super::matching::*;
use super::{is_stale, VolumeCaches};
use crate::context::ControllerContext;
use crate::events::EventSink;

/// The provisioner's name, as StorageClasses and volumes spell it.
pub const PROVISIONER: &str = "rancher.io/local-path";
/// The StorageClass `rkube up` creates for it.
pub const DEFAULT_CLASS: &str = "local-path";
/// `storageclass.kubernetes.io/is-default-class`: the cluster's default class.
pub const ANN_DEFAULT_CLASS: &str = "storageclass.kubernetes.io/is-default-class";

/// The default `local-path` StorageClass as k3s ships it: the default class,
/// `WaitForFirstConsumer`, reclaim policy `Delete`.
pub fn default_storage_class() -> serde_json::Value {
    json!({
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": DEFAULT_CLASS, "annotations": {ANN_DEFAULT_CLASS: "true"}},
        "provisioner": PROVISIONER,
        "volumeBindingMode": "WaitForFirstConsumer",
        "reclaimPolicy": "Delete",
    })
}

/// The directory of `claim`'s volume under `root`: `pvc-<uid>_<namespace>_<name>`.
pub fn volume_dir(root: &Path, claim: &PersistentVolumeClaim) -> PathBuf {
    root.join(format!(
        "{}_{}_{}",
        volume_name(claim),
        claim.namespace().unwrap_or_default(),
        claim.name_any()
    ))
}

/// The volume name of `claim`: `pvc-<uid>`.
pub fn volume_name(claim: &PersistentVolumeClaim) -> String {
    format!("pvc-{}", claim.uid().unwrap_or_default())
}

/// The PersistentVolume provisioned for `claim` on `node` (whose
/// `kubernetes.io/hostname` label is `hostname`) at `dir`, with `reclaim_policy`.
pub fn provisioned_volume(claim: &PersistentVolumeClaim, dir: &Path, hostname: &str, reclaim_policy: &str) -> serde_json::Value {
    let spec = claim.spec.clone().unwrap_or_default();
    let storage = spec.resources.as_ref().and_then(|r| r.requests.as_ref()).and_then(|r| r.get("storage")).map(|q| q.0.clone());
    let mut claim_ref = serde_json::to_value(claim.object_ref(&())).unwrap_or_default();
    if let Some(m) = claim_ref.as_object_mut() {
        m.remove("fieldPath");
    }
    json!({
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": volume_name(claim), "annotations": {ANN_PROVISIONED_BY: PROVISIONER}},
        "spec": {
            "capacity": {"storage": storage},
            "accessModes": spec.access_modes,
            "persistentVolumeReclaimPolicy": reclaim_policy,
            "storageClassName": claim_class(claim),
            "volumeMode": spec.volume_mode.as_deref().unwrap_or("Filesystem"),
            "hostPath": {"path": dir.display().to_string(), "type": "DirectoryOrCreate"},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": [hostname]},
            ]}]}},
            "claimRef": claim_ref,
        },
    })
}

/// Starts the provisioner with the root directory of the controller config.
pub fn start(ctx: ControllerContext) -> futures::future::BoxFuture<'static, anyhow::Result<()>> {
    let root = ctx.config.local_path_root.clone();
    let events = EventSink::new(ctx.client.clone(), PROVISIONER);
    Box::pin(super::run_passes(ctx, Provisioner { root, events }, |client, caches, p| Box::pin(p.pass(client, caches))))
}

struct Provisioner {
    root: PathBuf,
    events: EventSink,
}

impl Provisioner {
    async fn pass(&mut self, client: &kube::Client, caches: &VolumeCaches) -> bool {
        let volumes = caches.volumes_by_name();
        for claim in caches.claims.state() {
            if let Err(e) = self.provision(client, caches, &claim, &volumes).await {
                if !is_stale(&e) {
                    tracing::warn!(claim = %claim.name_any(), error = %e, "provisioning a local-path volume failed");
                }
            }
        }
        for pv in volumes.values() {
            if let Err(e) = self.delete(client, pv).await {
                if !is_stale(&e) {
                    tracing::warn!(volume = %pv.name_any(), error = %e, "deleting a local-path volume failed");
                }
            }
        }
        false
    }

    async fn provision(
        &self,
        client: &kube::Client,
        caches: &VolumeCaches,
        claim: &Arc<PersistentVolumeClaim>,
        volumes: &std::collections::HashMap<String, Arc<PersistentVolume>>,
    ) -> Result<(), kube::Error> {
        if claim.metadata.deletion_timestamp.is_some()
            || !claim_volume_name(claim).is_empty()
            || claim.annotations().get(ANN_STORAGE_PROVISIONER).map(String::as_str) != Some(PROVISIONER)
            || volumes.contains_key(&volume_name(claim))
        {
            return Ok(());
        }
        let Some(class) = caches.class(&claim_class(claim)).filter(|c| c.provisioner == PROVISIONER) else { return Ok(()) };
        let selected = claim.annotations().get(ANN_SELECTED_NODE).cloned();
        let Some(node) = selected else {
            if class.volume_binding_mode.as_deref() == Some("WaitForFirstConsumer") {
                return Ok(());
            }
            let note = "configuration error, no node was specified".to_string();
            self.events.warning(&claim.object_ref(&()), "ProvisioningFailed", note).await;
            return Ok(());
        };
        let key = format!("{}/{}", claim.namespace().unwrap_or_default(), claim.name_any());
        let reference = claim.object_ref(&());
        self.events.normal(&reference, "Provisioning", format!("External provisioner is provisioning volume for claim {key:?}")).await;
        let hostname = Api::<Node>::all(client.clone())
            .get_opt(&node)
            .await?
            .and_then(|n| n.labels().get("kubernetes.io/hostname").cloned())
            .unwrap_or_else(|| node.clone());
        let dir = volume_dir(&self.root, claim);
        if let Err(e) = create_dir(&dir) {
            let note = format!("failed to provision volume with StorageClass {:?}: creating {}: {e}", class.name_any(), dir.display());
            self.events.warning(&reference, "ProvisioningFailed", note).await;
            return Ok(());
        }
        let policy = class.reclaim_policy.clone().unwrap_or_else(|| "Delete".into());
        let pv: PersistentVolume = match serde_json::from_value(provisioned_volume(claim, &dir, &hostname, &policy)) {
            Ok(pv) => pv,
            Err(e) => {
                self.events.warning(&reference, "ProvisioningFailed", format!("failed to provision volume: {e}")).await;
                return Ok(());
            }
        };
        match Api::<PersistentVolume>::all(client.clone()).create(&PostParams::default(), &pv).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => return Ok(()),
            Err(e) => return Err(e),
        }
        self.events.normal(&reference, "ProvisioningSucceeded", format!("Successfully provisioned volume {}", pv.name_any())).await;
        Ok(())
    }

    /// A `Released` volume of this provisioner with policy `Delete`: its
    /// directory (only under the root), then the volume.
    async fn delete(&self, client: &kube::Client, pv: &PersistentVolume) -> Result<(), kube::Error> {
        if pv.annotations().get(ANN_PROVISIONED_BY).map(String::as_str) != Some(PROVISIONER)
            || volume_phase(pv) != "Released"
            || super::binder::reclaim_policy(pv) != "Delete"
            || pv.metadata.deletion_timestamp.is_some()
        {
            return Ok(());
        }
        let path = pv.spec.as_ref().and_then(|s| s.host_path.as_ref()).map(|h| PathBuf::from(&h.path));
        if let Some(path) = path.filter(|p| p.parent() == Some(self.root.as_path())) {
            if let Err(e) = std::fs::remove_dir_all(&path) {
                if e.kind() != std::io::ErrorKind::NotFound {
                    let note = format!("failed to delete volume {}: removing {}: {e}", pv.name_any(), path.display());
                    self.events.warning(&pv.object_ref(&()), "VolumeFailedDelete", note).await;
                    return Ok(());
                }
            }
        }
        let api: Api<PersistentVolume> = Api::all(client.clone());
        crate::pod_control::ignore_gone(api.delete(&pv.name_any(), &DeleteParams::default()).await.map(|_| ()))
    }
}

/// Creates `dir` (and its parents) writable by every user, as
/// local-path-provisioner's `mkdir -m 0777`.
fn create_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o777))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_provisioned_volume_is_a_host_path_on_the_selected_node_bound_to_its_claim() {
        let claim: PersistentVolumeClaim = serde_json::from_value(json!({
            "metadata": {"name": "data", "namespace": "db", "uid": "1234"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "2Gi"}}, "storageClassName": "local-path"},
        }))
        .unwrap();
        let dir = volume_dir(Path::new("/srv/storage"), &claim);
        assert_eq!(dir, Path::new("/srv/storage/pvc-1234_db_data"));
        let pv = provisioned_volume(&claim, &dir, "node-a", "Delete");
        assert_eq!(pv["metadata"]["name"], "pvc-1234");
        assert_eq!(pv["metadata"]["annotations"][ANN_PROVISIONED_BY], PROVISIONER);
        assert_eq!(pv["spec"]["hostPath"], json!({"path": "/srv/storage/pvc-1234_db_data", "type": "DirectoryOrCreate"}));
        assert_eq!(pv["spec"]["capacity"]["storage"], "2Gi");
        assert_eq!(pv["spec"]["accessModes"], json!(["ReadWriteOnce"]));
        assert_eq!(pv["spec"]["storageClassName"], "local-path");
        assert_eq!(pv["spec"]["persistentVolumeReclaimPolicy"], "Delete");
        assert_eq!(
            pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"][0],
            json!({"key": "kubernetes.io/hostname", "operator": "In", "values": ["node-a"]})
        );
        assert_eq!(pv["spec"]["claimRef"]["uid"], "1234");
        assert_eq!(pv["spec"]["claimRef"]["namespace"], "db");
        assert_eq!(pv["spec"]["claimRef"]["kind"], "PersistentVolumeClaim");
    }
}
