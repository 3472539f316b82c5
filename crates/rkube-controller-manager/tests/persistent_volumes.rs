//! persistentvolume-binder-controller and local-path-provisioner-controller
//! against a real API server: claims bind to the smallest matching volume,
//! phases follow upstream, pending claims say why, and the local-path
//! provisioner creates and deletes hostPath volumes and their directories.

use crate::common;

use std::time::Duration;

use common::{eventually, Cluster};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::ResourceExt;
use serde_json::json;

const WAIT: Duration = Duration::from_secs(20);

fn pv(name: &str, size: &str, extra: serde_json::Value) -> PersistentVolume {
    let mut v = json!({
        "metadata": {"name": name},
        "spec": {"capacity": {"storage": size}, "accessModes": ["ReadWriteOnce"], "hostPath": {"path": format!("/tmp/{name}")},
                 "persistentVolumeReclaimPolicy": "Retain"},
    });
    if let (Some(spec), Some(more)) = (v["spec"].as_object_mut(), extra.as_object()) {
        spec.extend(more.clone());
    }
    serde_json::from_value(v).unwrap()
}

fn pvc(name: &str, size: &str, class: Option<&str>) -> PersistentVolumeClaim {
    let mut v = json!({
        "metadata": {"name": name},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}},
    });
    if let Some(c) = class {
        v["spec"]["storageClassName"] = json!(c);
    }
    serde_json::from_value(v).unwrap()
}

async fn phase_of_claim(api: &Api<PersistentVolumeClaim>, name: &str, want: &str) -> Option<PersistentVolumeClaim> {
    let c = api.get_opt(name).await.ok()??;
    (c.status.as_ref()?.phase.as_deref() == Some(want)).then_some(c)
}

async fn phase_of_volume(api: &Api<PersistentVolume>, name: &str, want: &str) -> Option<PersistentVolume> {
    let v = api.get_opt(name).await.ok()??;
    (v.status.as_ref()?.phase.as_deref() == Some(want)).then_some(v)
}

async fn notes(client: &kube::Client, ns: &str, reason: &str) -> Vec<String> {
    let api: Api<Event> = Api::namespaced(client.clone(), ns);
    let list = api.list(&Default::default()).await.map(|l| l.items).unwrap_or_default();
    list.into_iter().filter(|e| e.reason.as_deref() == Some(reason)).filter_map(|e| e.note).collect()
}

#[tokio::test]
async fn a_claim_binds_to_the_smallest_matching_volume_and_releases_it_on_delete() {
    let c = Cluster::start("persistentvolume-binder-controller").await;
    let pvs: Api<PersistentVolume> = Api::all(c.client.clone());
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(c.client.clone(), "default");
    let pp = PostParams::default();
    for v in [pv("big", "10Gi", json!({})), pv("small", "2Gi", json!({})), pv("tiny", "500Mi", json!({})), pv("gold", "1Gi", json!({"storageClassName": "gold"}))] {
        pvs.create(&pp, &v).await.unwrap();
    }
    eventually(WAIT, "volumes Available", || async { phase_of_volume(&pvs, "small", "Available").await }).await;
    claims.create(&pp, &pvc("data", "1Gi", None)).await.unwrap();
    let claim = eventually(WAIT, "claim Bound", || async { phase_of_claim(&claims, "data", "Bound").await }).await;
    assert_eq!(claim.spec.as_ref().unwrap().volume_name.as_deref(), Some("small"));
    assert_eq!(claim.annotations().get("pv.kubernetes.io/bind-completed").map(String::as_str), Some("yes"));
    assert_eq!(claim.annotations().get("pv.kubernetes.io/bound-by-controller").map(String::as_str), Some("yes"));
    assert_eq!(claim.status.as_ref().unwrap().capacity.as_ref().unwrap()["storage"].0, "2Gi");
    let small = eventually(WAIT, "volume Bound", || async { phase_of_volume(&pvs, "small", "Bound").await }).await;
    let r = small.spec.as_ref().unwrap().claim_ref.as_ref().unwrap();
    assert_eq!((r.namespace.as_deref(), r.name.as_deref(), r.uid.as_deref()), (Some("default"), Some("data"), claim.uid().as_deref()));
    assert_eq!(small.annotations().get("pv.kubernetes.io/bound-by-controller").map(String::as_str), Some("yes"));
    let big = eventually(WAIT, "big Available", || async { phase_of_volume(&pvs, "big", "Available").await }).await;
    assert_eq!(big.spec.unwrap().claim_ref, None);

    claims.delete("data", &Default::default()).await.unwrap();
    eventually(WAIT, "Retain volume Released", || async { phase_of_volume(&pvs, "small", "Released").await }).await;
    // A Released volume is not bound again.
    claims.create(&pp, &pvc("again", "1Gi", None)).await.unwrap();
    let again = eventually(WAIT, "second claim Bound", || async { phase_of_claim(&claims, "again", "Bound").await }).await;
    assert_eq!(again.spec.as_ref().unwrap().volume_name.as_deref(), Some("big"));
    c.stop().await;
}

#[tokio::test]
async fn pre_bound_claims_and_volumes_bind_to_each_other_only() {
    let c = Cluster::start("persistentvolume-binder-controller").await;
    let pvs: Api<PersistentVolume> = Api::all(c.client.clone());
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(c.client.clone(), "default");
    let pp = PostParams::default();
    pvs.create(&pp, &pv("reserved", "1Gi", json!({"claimRef": {"namespace": "default", "name": "owner"}}))).await.unwrap();
    pvs.create(&pp, &pv("named", "5Gi", json!({}))).await.unwrap();
    pvs.create(&pp, &pv("free", "1Gi", json!({}))).await.unwrap();
    let mut wants_named = pvc("wants-named", "1Gi", None);
    wants_named.spec.as_mut().unwrap().volume_name = Some("named".into());
    claims.create(&pp, &wants_named).await.unwrap();
    claims.create(&pp, &pvc("owner", "1Gi", None)).await.unwrap();
    let owner = eventually(WAIT, "owner Bound", || async { phase_of_claim(&claims, "owner", "Bound").await }).await;
    assert_eq!(owner.spec.as_ref().unwrap().volume_name.as_deref(), Some("reserved"));
    let named = eventually(WAIT, "wants-named Bound", || async { phase_of_claim(&claims, "wants-named", "Bound").await }).await;
    assert_eq!(named.spec.as_ref().unwrap().volume_name.as_deref(), Some("named"));
    // A user pre-binding is not marked bound-by-controller on the claim.
    assert_eq!(named.annotations().get("pv.kubernetes.io/bound-by-controller"), None);
    let free = eventually(WAIT, "free Available", || async { phase_of_volume(&pvs, "free", "Available").await }).await;
    assert_eq!(free.spec.unwrap().claim_ref, None);
    c.stop().await;
}

#[tokio::test]
async fn pending_claims_report_why_with_upstreams_events() {
    let c = Cluster::start("persistentvolume-binder-controller").await;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(c.client.clone(), "default");
    let classes: Api<StorageClass> = Api::all(c.client.clone());
    let pp = PostParams::default();
    let wffc: StorageClass = serde_json::from_value(json!({"metadata": {"name": "later"}, "provisioner": "example.com/x", "volumeBindingMode": "WaitForFirstConsumer"})).unwrap();
    classes.create(&pp, &wffc).await.unwrap();
    let now: StorageClass = serde_json::from_value(json!({"metadata": {"name": "now"}, "provisioner": "example.com/x"})).unwrap();
    classes.create(&pp, &now).await.unwrap();
    claims.create(&pp, &pvc("nothing", "1Gi", None)).await.unwrap();
    claims.create(&pp, &pvc("waiting", "1Gi", Some("later"))).await.unwrap();
    claims.create(&pp, &pvc("external", "1Gi", Some("now"))).await.unwrap();
    let fb = eventually(WAIT, "FailedBinding event", || async { Some(notes(&c.client, "default", "FailedBinding").await).filter(|n| !n.is_empty()) }).await;
    assert_eq!(fb, vec!["no persistent volumes available for this claim and no storage class is set"]);
    let w = eventually(WAIT, "WaitForFirstConsumer event", || async { Some(notes(&c.client, "default", "WaitForFirstConsumer").await).filter(|n| !n.is_empty()) }).await;
    assert_eq!(w, vec!["waiting for first consumer to be created before binding"]);
    let ext = eventually(WAIT, "ExternalProvisioning event", || async { Some(notes(&c.client, "default", "ExternalProvisioning").await).filter(|n| !n.is_empty()) }).await;
    assert!(ext[0].starts_with("Waiting for a volume to be created either by the external provisioner 'example.com/x'"), "{ext:?}");
    let external = claims.get("external").await.unwrap();
    assert_eq!(external.annotations().get("volume.kubernetes.io/storage-provisioner").map(String::as_str), Some("example.com/x"));
    assert_eq!(external.status.unwrap().phase.as_deref(), Some("Pending"));
    // The waiting claim is not handed to its provisioner before a node is selected.
    assert_eq!(claims.get("waiting").await.unwrap().annotations().get("volume.kubernetes.io/storage-provisioner"), None);
    c.stop().await;
}

#[tokio::test]
async fn local_path_provisions_a_host_path_volume_on_the_selected_node_and_deletes_it_with_its_claim() {
    let root = tempfile::tempdir().unwrap();
    let config = rkube_controller_manager::context::ControllerConfig { local_path_root: root.path().to_path_buf(), ..Default::default() };
    let c = Cluster::start_with("persistentvolume-binder-controller,local-path-provisioner-controller", config).await;
    let pvs: Api<PersistentVolume> = Api::all(c.client.clone());
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(c.client.clone(), "default");
    let classes: Api<StorageClass> = Api::all(c.client.clone());
    let pp = PostParams::default();
    let sc: StorageClass = serde_json::from_value(rkube_controller_manager::controllers::volume::localpath::default_storage_class()).unwrap();
    classes.create(&pp, &sc).await.unwrap();
    let claim = claims.create(&pp, &pvc("data", "1Gi", Some("local-path"))).await.unwrap();
    eventually(WAIT, "WaitForFirstConsumer event", || async { Some(notes(&c.client, "default", "WaitForFirstConsumer").await).filter(|n| !n.is_empty()) }).await;
    let patch = json!({"metadata": {"annotations": {"volume.kubernetes.io/selected-node": "node-1"}}});
    claims.patch("data", &PatchParams::default(), &Patch::Merge(patch)).await.unwrap();
    let bound = eventually(WAIT, "claim Bound", || async { phase_of_claim(&claims, "data", "Bound").await }).await;
    let uid = claim.uid().unwrap();
    let name = format!("pvc-{uid}");
    assert_eq!(bound.spec.as_ref().unwrap().volume_name.as_deref(), Some(name.as_str()));
    let dir = root.path().join(format!("pvc-{uid}_default_data"));
    let volume = eventually(WAIT, "volume Bound", || async { phase_of_volume(&pvs, &name, "Bound").await }).await;
    let spec = volume.spec.as_ref().unwrap();
    assert_eq!(spec.host_path.as_ref().unwrap().path, dir.display().to_string());
    assert_eq!(spec.host_path.as_ref().unwrap().type_.as_deref(), Some("DirectoryOrCreate"));
    assert_eq!(spec.persistent_volume_reclaim_policy.as_deref(), Some("Delete"));
    let term = &spec.node_affinity.as_ref().unwrap().required.as_ref().unwrap().node_selector_terms[0];
    assert_eq!(term.match_expressions.as_ref().unwrap()[0].values.as_deref(), Some(&["node-1".to_string()][..]));
    assert_eq!(volume.annotations().get("pv.kubernetes.io/provisioned-by").map(String::as_str), Some("rancher.io/local-path"));
    assert!(dir.is_dir());
    let ok = notes(&c.client, "default", "ProvisioningSucceeded").await;
    assert_eq!(ok, vec![format!("Successfully provisioned volume {name}")]);
    std::fs::write(dir.join("f"), b"x").unwrap();

    claims.delete("data", &Default::default()).await.unwrap();
    eventually(WAIT, "volume deleted", || async { pvs.get_opt(&name).await.ok().and_then(|v| v.is_none().then_some(())) }).await;
    assert!(!dir.exists(), "the volume's directory is removed");
    c.stop().await;
}

#[tokio::test]
async fn a_claim_in_use_by_a_pod_and_its_bound_volume_outlive_their_deletion_until_the_pod_is_gone() {
    let c = Cluster::start("persistentvolume-binder-controller,pvc-protection,pv-protection").await;
    let pvs: Api<PersistentVolume> = Api::all(c.client.clone());
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(c.client.clone(), "default");
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(c.client.clone(), "default");
    let pp = PostParams::default();
    pvs.create(&pp, &pv("vol", "1Gi", json!({}))).await.unwrap();
    claims.create(&pp, &pvc("data", "1Gi", None)).await.unwrap();
    let pod = json!({"metadata": {"name": "user"}, "spec": {"containers": [{"name": "c", "image": "busybox"}],
        "volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": "data"}}]}});
    pods.create(&pp, &serde_json::from_value(pod).unwrap()).await.unwrap();
    eventually(WAIT, "claim Bound with its finalizer", || async {
        let c = phase_of_claim(&claims, "data", "Bound").await?;
        c.finalizers().iter().any(|f| f == "kubernetes.io/pvc-protection").then_some(())
    })
    .await;
    eventually(WAIT, "volume finalizer", || async {
        let v = pvs.get_opt("vol").await.ok()??;
        v.finalizers().iter().any(|f| f == "kubernetes.io/pv-protection").then_some(())
    })
    .await;
    claims.delete("data", &Default::default()).await.unwrap();
    pvs.delete("vol", &Default::default()).await.unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let kept = claims.get("data").await.expect("the claim in use is kept");
    assert!(kept.metadata.deletion_timestamp.is_some());
    assert!(pvs.get("vol").await.expect("the bound volume is kept").metadata.deletion_timestamp.is_some());

    pods.delete("user", &kube::api::DeleteParams { grace_period_seconds: Some(0), ..Default::default() }).await.unwrap();
    // The controller lists the claim's pods again every second; the volume follows once Released.
    eventually(Duration::from_secs(5), "claim gone", || async { claims.get_opt("data").await.ok().and_then(|c| c.is_none().then_some(())) }).await;
    eventually(Duration::from_secs(10), "volume gone", || async { pvs.get_opt("vol").await.ok().and_then(|v| v.is_none().then_some(())) }).await;
    c.stop().await;
}

#[tokio::test]
async fn a_claim_whose_volume_vanishes_is_lost_and_a_delete_policy_volume_goes_with_its_claim() {
    let c = Cluster::start("persistentvolume-binder-controller").await;
    let pvs: Api<PersistentVolume> = Api::all(c.client.clone());
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(c.client.clone(), "default");
    let pp = PostParams::default();
    pvs.create(&pp, &pv("doomed", "1Gi", json!({"accessModes": ["ReadWriteMany"]}))).await.unwrap();
    pvs.create(&pp, &pv("deletable", "1Gi", json!({"persistentVolumeReclaimPolicy": "Delete"}))).await.unwrap();
    let mut shared = pvc("shared", "1Gi", None);
    shared.spec.as_mut().unwrap().access_modes = Some(vec!["ReadWriteMany".into()]);
    claims.create(&pp, &shared).await.unwrap();
    claims.create(&pp, &pvc("scratch", "1Gi", None)).await.unwrap();
    let s = eventually(WAIT, "shared Bound", || async { phase_of_claim(&claims, "shared", "Bound").await }).await;
    assert_eq!(s.spec.unwrap().volume_name.as_deref(), Some("doomed"));
    let t = eventually(WAIT, "scratch Bound", || async { phase_of_claim(&claims, "scratch", "Bound").await }).await;
    assert_eq!(t.spec.unwrap().volume_name.as_deref(), Some("deletable"));

    pvs.delete("doomed", &Default::default()).await.unwrap();
    eventually(WAIT, "shared Lost", || async { phase_of_claim(&claims, "shared", "Lost").await }).await;
    let lost = eventually(WAIT, "ClaimLost event", || async { Some(notes(&c.client, "default", "ClaimLost").await).filter(|n| !n.is_empty()) }).await;
    assert_eq!(lost, vec!["Bound claim has lost its PersistentVolume. Data on the volume is lost!"]);

    claims.delete("scratch", &Default::default()).await.unwrap();
    eventually(WAIT, "deletable deleted", || async { pvs.get_opt("deletable").await.ok().and_then(|v| v.is_none().then_some(())) }).await;
    c.stop().await;
}
