//! One StatefulSet sync: claim pods, settle the revisions, apply the
//! [`plan`](super::plan), report status, trim history (upstream's
//! `StatefulSetControl.UpdateStatefulSet` and `StatefulPodControl`).

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{ControllerRevision, StatefulSet};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use serde_json::{json, Value};

use super::plan::{self, PodView, SetView, Step, Which, Why};
use super::{selector, State};
use crate::controllers::replicaset::api_message;
use crate::history;
use crate::pod_control;
use crate::pod_util;

/// Label naming a StatefulSet pod (`statefulset.kubernetes.io/pod-name`).
pub const POD_NAME_LABEL: &str = "statefulset.kubernetes.io/pod-name";
/// Label giving a pod's ordinal (`apps.kubernetes.io/pod-index`, gate `PodIndexLabel`).
pub const POD_INDEX_LABEL: &str = "apps.kubernetes.io/pod-index";

/// Syncs `set` once; the returned action requeues it while pods wait out
/// `minReadySeconds`. Errors: the API server's (the sync is retried).
pub async fn sync_stateful_set(set: &StatefulSet, state: &State) -> Result<Action, kube::Error> {
    let Some(owner) = pod_control::controller_ref(set) else {
        return Ok(Action::await_change());
    };
    let ns = set.namespace().unwrap_or_default();
    let name = set.name_any();
    let spec = set.spec.clone().unwrap_or_default();
    let status = set.status.clone().unwrap_or_default();
    let pods_api: Api<Pod> = Api::namespaced(state.client.clone(), &ns);
    let deleting = set.meta().deletion_timestamp.is_some();

    // Claim members: pods named `<set>-<n>` that the selector matches.
    let sel = selector(set);
    let pods = state.pods.state();
    let members: Vec<&Pod> = pods
        .iter()
        .filter(|p| p.namespace().as_deref() == Some(ns.as_str()))
        .filter(|p| plan::ordinal_of(&name, &p.name_any()).is_some())
        .map(|p| p.as_ref())
        .collect();
    let mine = pod_control::claim_pods(&pods_api, &owner, deleting, sel.as_ref(), &members).await?;
    for p in mine
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
    {
        if let Some(patch) =
            plan::ordinal_of(&name, &p.name_any()).and_then(|o| identity_repair(p, o))
        {
            match pods_api
                .patch(
                    &p.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await
            {
                Ok(_) => {}
                Err(e) if pod_control::is_gone(&e) => {}
                Err(e) => return Err(e),
            }
        }
    }

    // Storage: a live member whose claims are gone gets them again (upstream's
    // `storageMatches` and `createPersistentVolumeClaims` in `UpdateStatefulPod`).
    let templates = claim_templates(set);
    if !deleting && !templates.is_empty() {
        let claims: Api<PersistentVolumeClaim> = Api::namespaced(state.client.clone(), &ns);
        let present: std::collections::BTreeSet<String> = claims
            .list_metadata(&kube::api::ListParams::default())
            .await?
            .items
            .into_iter()
            .filter_map(|c| c.metadata.name)
            .collect();
        let regarding = pod_control::object_ref(set);
        for p in mine
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
        {
            let Some(ordinal) = plan::ordinal_of(&name, &p.name_any()) else {
                continue;
            };
            if templates
                .iter()
                .any(|t| !present.contains(&claim_name(t, set, ordinal)))
            {
                create_claims(set, &owner, ordinal, state, &regarding).await?;
            }
        }
    }

    // Revisions: the template now, and the one pods below the partition keep.
    let rev_api: Api<ControllerRevision> = Api::namespaced(state.client.clone(), &ns);
    let existing = history::owned(&state.revisions.state(), &owner.uid);
    let template = serde_json::to_value(&spec.template).unwrap_or(Value::Null);
    let template_labels = spec
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    let settled = history::ensure(
        &rev_api,
        &owner,
        &template_labels,
        &template,
        &existing,
        status.collision_count.unwrap_or(0),
    )
    .await?;
    let update = settled.update;
    let current = status
        .current_revision
        .as_deref()
        .and_then(|n| existing.iter().find(|r| r.name_any() == n))
        .cloned()
        .unwrap_or_else(|| update.clone());

    let min_ready = spec.min_ready_seconds.unwrap_or(0);
    let now = Timestamp::now();
    let strategy = spec.update_strategy.clone().unwrap_or_default();
    let rolling = strategy.type_.as_deref() != Some("OnDelete");
    let view = SetView {
        replicas: spec.replicas.unwrap_or(1),
        start: spec.ordinals.as_ref().and_then(|o| o.start).unwrap_or(0),
        ordered_ready: spec.pod_management_policy.as_deref() != Some("Parallel"),
        rolling_update: rolling,
        partition: strategy
            .rolling_update
            .as_ref()
            .and_then(|r| r.partition)
            .unwrap_or(0),
        current_revision: current.name_any(),
        update_revision: update.name_any(),
        deleting,
    };
    let views: Vec<PodView> = mine
        .iter()
        .filter_map(|p| pod_view(&name, p, min_ready, now))
        .collect();

    let regarding = pod_control::object_ref(set);
    for step in plan::plan(&view, &views) {
        match step {
            Step::Create { ordinal, which } => {
                let rev = if which == Which::Current {
                    &current
                } else {
                    &update
                };
                let template = if which == Which::Current {
                    history::template_of(rev).unwrap_or(template.clone())
                } else {
                    template.clone()
                };
                create_claims(set, &owner, ordinal, state, &regarding).await?;
                let pod = member_pod(set, &owner, ordinal, &template, &rev.name_any());
                let pod_name = format!("{name}-{ordinal}");
                match pods_api.create(&PostParams::default(), &pod).await {
                    Ok(_) => {
                        let note =
                            format!("create Pod {pod_name} in StatefulSet {name} successful");
                        state
                            .events
                            .normal(&regarding, "SuccessfulCreate", note)
                            .await;
                    }
                    Err(e) if matches!(&e, kube::Error::Api(s) if s.code == 409) => {}
                    Err(e) => {
                        let note = format!(
                            "create Pod {pod_name} in StatefulSet {name} failed error: {}",
                            api_message(&e)
                        );
                        state.events.warning(&regarding, "FailedCreate", note).await;
                        return Err(e);
                    }
                }
            }
            Step::Delete {
                name: pod_name,
                why,
            } => {
                if why == Why::Finished {
                    let note =
                        format!("StatefulSet {ns}/{name} is recreating failed Pod {pod_name}");
                    state
                        .events
                        .warning(&regarding, "RecreatingFailedPod", note)
                        .await;
                }
                if why == Why::Condemned {
                    if let Some(p) = mine.iter().find(|p| p.name_any() == pod_name) {
                        release_claims_on_scale_down(set, p, state).await?;
                    }
                }
                match pods_api.delete(&pod_name, &DeleteParams::default()).await {
                    Ok(_) => {
                        let note =
                            format!("delete Pod {pod_name} in StatefulSet {name} successful");
                        state
                            .events
                            .normal(&regarding, "SuccessfulDelete", note)
                            .await;
                    }
                    Err(e) if pod_control::is_not_found(&e) => {}
                    Err(e) => {
                        let note = format!(
                            "delete Pod {pod_name} in StatefulSet {name} failed error: {}",
                            api_message(&e)
                        );
                        state.events.warning(&regarding, "FailedDelete", note).await;
                        return Err(e);
                    }
                }
            }
        }
    }

    // Status, from the pods as they were at the start of this sync (the
    // next event brings the steps' effects).
    let counts = plan::count(&view, &views);
    let (mut current_name, mut current_replicas) =
        (view.current_revision.clone(), counts.current_replicas);
    if plan::rolling_update_complete(&view, &counts) {
        current_name = view.update_revision.clone();
        current_replicas = counts.updated_replicas;
    }
    let next = json!({
        "observedGeneration": set.meta().generation.unwrap_or(0),
        "replicas": counts.replicas,
        "readyReplicas": counts.ready_replicas,
        "availableReplicas": counts.available_replicas,
        "currentReplicas": current_replicas,
        "updatedReplicas": counts.updated_replicas,
        "currentRevision": current_name,
        "updateRevision": view.update_revision,
        "collisionCount": settled.collision_count,
    });
    let before = serde_json::to_value(&status).unwrap_or(Value::Null);
    let changed = next.as_object().is_some_and(|m| {
        m.iter()
            .any(|(k, v)| before.get(k).unwrap_or(&json!(0)) != v)
    });
    if changed && !deleting {
        let api: Api<StatefulSet> = Api::namespaced(state.client.clone(), &ns);
        match api
            .patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(&json!({"status": next})),
            )
            .await
        {
            Ok(_) => {}
            Err(e) if pod_control::is_not_found(&e) => return Ok(Action::await_change()),
            Err(e) => return Err(e),
        }
    }

    // History: keep what pods and the status name, and `revisionHistoryLimit` more.
    let mut live: Vec<String> = views.iter().map(|v| v.revision.clone()).collect();
    live.extend([current_name, view.update_revision.clone()]);
    let all = history::owned(&state.revisions.state(), &owner.uid);
    history::truncate(
        &rev_api,
        &all,
        &live,
        spec.revision_history_limit
            .unwrap_or(history::DEFAULT_HISTORY_LIMIT),
    )
    .await?;

    if min_ready > 0 && views.iter().any(|v| v.running_ready && !v.available) {
        return Ok(Action::requeue(Duration::from_secs(
            u64::try_from(min_ready).unwrap_or(1),
        )));
    }
    Ok(Action::requeue(Duration::from_secs(300)))
}

/// The merge patch restoring the identity labels of member `pod` of
/// `ordinal` (`statefulset.kubernetes.io/pod-name`, `apps.kubernetes.io/pod-index`)
/// when a client changed or removed them, upstream's `identityMatches` and
/// `updateIdentity`; `None` when they are right.
pub fn identity_repair(pod: &Pod, ordinal: i32) -> Option<Value> {
    let labels = pod.labels();
    let (name, index) = (pod.name_any(), ordinal.to_string());
    let right =
        labels.get(POD_NAME_LABEL) == Some(&name) && labels.get(POD_INDEX_LABEL) == Some(&index);
    (!right)
        .then(|| json!({"metadata": {"labels": {POD_NAME_LABEL: name, POD_INDEX_LABEL: index}}}))
}

/// What the planner needs of a member pod.
fn pod_view(set: &str, p: &Pod, min_ready: i32, now: Timestamp) -> Option<PodView> {
    let ordinal = plan::ordinal_of(set, &p.name_any())?;
    let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
    let running_ready = phase == Some("Running") && pod_util::is_ready(p);
    Some(PodView {
        name: p.name_any(),
        ordinal,
        revision: p
            .labels()
            .get(history::POD_REVISION_LABEL)
            .cloned()
            .unwrap_or_default(),
        terminating: p.metadata.deletion_timestamp.is_some(),
        running_ready,
        available: running_ready && pod_util::is_available(p, min_ready, now),
        finished: matches!(phase, Some("Failed") | Some("Succeeded")),
    })
}

/// The pod of `ordinal` from `template` (JSON of a `PodTemplateSpec`), as
/// upstream's `newVersionedStatefulSetPod`: name `<set>-<ordinal>`, the
/// template's labels plus the pod-name, pod-index and revision labels,
/// hostname = name, subdomain = `spec.serviceName`, and one
/// `persistentVolumeClaim` volume per claim template.
pub fn member_pod(
    set: &StatefulSet,
    owner: &OwnerReference,
    ordinal: i32,
    template: &Value,
    revision: &str,
) -> Pod {
    let name = format!("{}-{ordinal}", set.name_any());
    let meta = &template["metadata"];
    let mut labels: BTreeMap<String, Value> = meta["labels"]
        .as_object()
        .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default();
    labels.insert(POD_NAME_LABEL.into(), json!(name));
    labels.insert(POD_INDEX_LABEL.into(), json!(ordinal.to_string()));
    labels.insert(history::POD_REVISION_LABEL.into(), json!(revision));
    let mut spec = template["spec"].clone();
    if !spec.is_object() {
        spec = json!({});
    }
    spec["hostname"] = json!(name);
    let service = set
        .spec
        .as_ref()
        .map(|s| s.service_name.clone())
        .unwrap_or_default();
    if let Some(service) = service.filter(|s| !s.is_empty()) {
        spec["subdomain"] = json!(service);
    }
    let claims = claim_templates(set);
    if !claims.is_empty() {
        let mut volumes: Vec<Value> = spec["volumes"].as_array().cloned().unwrap_or_default();
        for (volume, claim) in claims
            .iter()
            .map(|c| (c.name_any(), claim_name(c, set, ordinal)))
        {
            volumes.retain(|v| v["name"].as_str() != Some(volume.as_str()));
            volumes.push(json!({"name": volume, "persistentVolumeClaim": {"claimName": claim}}));
        }
        spec["volumes"] = Value::Array(volumes);
    }
    let pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": labels,
            "annotations": meta["annotations"],
            "finalizers": meta["finalizers"],
            "ownerReferences": [owner],
        },
        "spec": spec,
    });
    serde_json::from_value(pod).unwrap_or_default()
}

fn claim_templates(set: &StatefulSet) -> Vec<PersistentVolumeClaim> {
    set.spec
        .as_ref()
        .and_then(|s| s.volume_claim_templates.clone())
        .unwrap_or_default()
}

/// `<claim template>-<set>-<ordinal>` (upstream's `getPersistentVolumeClaimName`).
pub fn claim_name(template: &PersistentVolumeClaim, set: &StatefulSet, ordinal: i32) -> String {
    format!("{}-{}-{ordinal}", template.name_any(), set.name_any())
}

/// `persistentVolumeClaimRetentionPolicy` (`whenDeleted`, `whenScaled`), each
/// `Retain` unless `Delete`.
fn retention(set: &StatefulSet) -> (bool, bool) {
    let p = set
        .spec
        .as_ref()
        .and_then(|s| s.persistent_volume_claim_retention_policy.as_ref());
    let delete = |v: Option<&String>| v.map(String::as_str) == Some("Delete");
    (
        delete(p.and_then(|p| p.when_deleted.as_ref())),
        delete(p.and_then(|p| p.when_scaled.as_ref())),
    )
}

/// Creates the claims of `ordinal` that do not exist yet (upstream's
/// `createPersistentVolumeClaims`): the template's labels plus the set's
/// `matchLabels`, owned by the set when `whenDeleted: Delete`.
async fn create_claims(
    set: &StatefulSet,
    owner: &OwnerReference,
    ordinal: i32,
    state: &State,
    regarding: &k8s_openapi::api::core::v1::ObjectReference,
) -> Result<(), kube::Error> {
    let templates = claim_templates(set);
    if templates.is_empty() {
        return Ok(());
    }
    let ns = set.namespace().unwrap_or_default();
    let api: Api<PersistentVolumeClaim> = Api::namespaced(state.client.clone(), &ns);
    let (when_deleted, _) = retention(set);
    let match_labels = set
        .spec
        .as_ref()
        .and_then(|s| s.selector.match_labels.clone())
        .unwrap_or_default();
    for t in &templates {
        let claim = claim_name(t, set, ordinal);
        if api.get_opt(&claim).await?.is_some() {
            continue;
        }
        let mut pvc = t.clone();
        pvc.metadata.name = Some(claim.clone());
        pvc.metadata.namespace = None;
        pvc.metadata.resource_version = None;
        pvc.metadata.uid = None;
        let mut labels = pvc.metadata.labels.take().unwrap_or_default();
        labels.extend(match_labels.clone());
        pvc.metadata.labels = Some(labels);
        pvc.status = None;
        if when_deleted {
            let mut r = owner.clone();
            r.controller = None;
            pvc.metadata.owner_references = Some(vec![r]);
        }
        let pod = format!("{}-{ordinal}", set.name_any());
        match api.create(&PostParams::default(), &pvc).await {
            Ok(_) => {
                let note = format!(
                    "create Claim {claim} Pod {pod} in StatefulSet {} success",
                    set.name_any()
                );
                state
                    .events
                    .normal(regarding, "SuccessfulCreate", note)
                    .await;
            }
            Err(e) if matches!(&e, kube::Error::Api(s) if s.code == 409) => {}
            Err(e) => {
                let note = format!(
                    "create Claim {claim} for Pod {pod} in StatefulSet {} failed error: {}",
                    set.name_any(),
                    api_message(&e)
                );
                state.events.warning(regarding, "FailedCreate", note).await;
                return Err(e);
            }
        }
    }
    Ok(())
}

/// With `whenScaled: Delete`, makes the condemned pod own its claims so
/// the garbage collector removes them with it (upstream's
/// `updateClaimOwnerRefForSetAndPod`).
async fn release_claims_on_scale_down(
    set: &StatefulSet,
    pod: &Pod,
    state: &State,
) -> Result<(), kube::Error> {
    let (_, when_scaled) = retention(set);
    let (Some(uid), true) = (pod.metadata.uid.clone(), when_scaled) else {
        return Ok(());
    };
    let Some(ordinal) = plan::ordinal_of(&set.name_any(), &pod.name_any()) else {
        return Ok(());
    };
    let api: Api<PersistentVolumeClaim> =
        Api::namespaced(state.client.clone(), &set.namespace().unwrap_or_default());
    let pod_ref = OwnerReference {
        api_version: "v1".into(),
        kind: "Pod".into(),
        name: pod.name_any(),
        uid,
        controller: None,
        block_owner_deletion: None,
    };
    for t in claim_templates(set) {
        let Some(pvc) = api.get_opt(&claim_name(&t, set, ordinal)).await? else {
            continue;
        };
        let mut refs = pvc.metadata.owner_references.clone().unwrap_or_default();
        if refs.iter().any(|r| r.uid == pod_ref.uid) {
            continue;
        }
        refs.push(pod_ref.clone());
        let patch = json!({"metadata": {"ownerReferences": refs, "resourceVersion": pvc.resource_version()}});
        match api
            .patch(
                &pvc.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
        {
            Ok(_) => {}
            Err(e) if pod_control::is_gone(&e) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn member_pods_get_identity_labels_hostname_subdomain_and_claim_volumes() {
        let set: StatefulSet = serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "ns", "uid": "u1"},
            "spec": {"serviceName": "nginx", "selector": {"matchLabels": {"app": "web"}},
                     "template": {}, "volumeClaimTemplates": [{"metadata": {"name": "www"}, "spec": {}}]},
        }))
        .unwrap();
        let owner = pod_control::controller_ref(&set).unwrap();
        let template = json!({"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "c"}], "volumes": [{"name": "www", "emptyDir": {}}]}});
        let pod = member_pod(&set, &owner, 2, &template, "web-abc");
        let labels = pod.labels();
        assert_eq!(pod.name_any(), "web-2");
        assert_eq!(labels.get("app").map(String::as_str), Some("web"));
        assert_eq!(
            labels.get(POD_NAME_LABEL).map(String::as_str),
            Some("web-2")
        );
        assert_eq!(labels.get(POD_INDEX_LABEL).map(String::as_str), Some("2"));
        assert_eq!(
            labels.get(history::POD_REVISION_LABEL).map(String::as_str),
            Some("web-abc")
        );
        let spec = pod.spec.unwrap();
        assert_eq!(
            (spec.hostname.as_deref(), spec.subdomain.as_deref()),
            (Some("web-2"), Some("nginx"))
        );
        let vols = spec.volumes.unwrap();
        assert_eq!(vols.len(), 1);
        assert_eq!(
            vols[0]
                .persistent_volume_claim
                .as_ref()
                .map(|c| c.claim_name.as_str()),
            Some("www-web-2")
        );
        assert_eq!(pod.metadata.owner_references.unwrap()[0].uid, "u1");
    }
}
