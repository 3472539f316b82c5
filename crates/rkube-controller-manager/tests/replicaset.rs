//! The ReplicaSet and ReplicationController controllers against a real
//! rkube API server: what a client sees of pods, status and events.

use crate::workload_support as common;

use std::collections::BTreeSet;

use common::{eventually, Env};
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{Pod, ReplicationController};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::ResourceExt;
use serde_json::json;

fn replica_set(name: &str, replicas: i32) -> ReplicaSet {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}},
                              "spec": {"containers": [{"name": "c", "image": "busybox", "command": ["sleep", "3600"]}]}}},
    }))
    .expect("replica set")
}

fn names(pods: &[Pod]) -> BTreeSet<String> {
    pods.iter().map(|p| p.name_any()).collect()
}

async fn events_of(env: &Env, ns: &str, reason: &str) -> Vec<String> {
    let api: Api<Event> = Api::namespaced(env.client.clone(), ns);
    let list = api.list(&ListParams::default()).await.expect("events");
    list.items.into_iter().filter(|e| e.reason.as_deref() == Some(reason)).filter_map(|e| e.note).collect()
}

#[tokio::test]
async fn replica_set_creates_owned_pods_and_replaces_a_deleted_one() {
    let env = Env::start(&["replicaset"], false).await;
    env.namespace("rs1").await;
    let api: Api<ReplicaSet> = Api::namespaced(env.client.clone(), "rs1");
    let rs = api.create(&PostParams::default(), &replica_set("web", 3)).await.expect("create");
    let pods = eventually("3 pods", || async { Some(env.live_pods("rs1", "web").await).filter(|p| p.len() == 3) }).await;
    for p in &pods {
        let refs = p.owner_references();
        assert_eq!(refs.len(), 1);
        assert_eq!((refs[0].kind.as_str(), refs[0].name.as_str(), refs[0].uid.as_str()), ("ReplicaSet", "web", rs.uid().unwrap_or_default().as_str()));
        assert_eq!((refs[0].controller, refs[0].block_owner_deletion), (Some(true), Some(true)));
        assert!(p.name_any().starts_with("web-"), "{}", p.name_any());
    }
    let status = eventually("status.replicas 3", || async {
        let rs = api.get("web").await.ok()?;
        rs.status.filter(|s| s.replicas == 3)
    })
    .await;
    assert_eq!((status.fully_labeled_replicas, status.ready_replicas.unwrap_or(0), status.observed_generation), (Some(3), 0, Some(1)));

    let before = names(&pods);
    let victim = pods[0].name_any();
    Api::<Pod>::namespaced(env.client.clone(), "rs1").delete(&victim, &DeleteParams::default()).await.expect("delete pod");
    let after = eventually("a replacement pod", || async {
        let pods = env.live_pods("rs1", "web").await;
        (pods.len() == 3 && !names(&pods).contains(&victim)).then(|| names(&pods))
    })
    .await;
    assert_eq!(after.intersection(&before).count(), 2, "the two others kept: {before:?} → {after:?}");
    let created = eventually("4 SuccessfulCreate events", || async { Some(events_of(&env, "rs1", "SuccessfulCreate").await).filter(|e| e.len() >= 4) }).await;
    assert_eq!(created.len(), 4, "{created:?}");
    assert!(created.iter().all(|n| n.starts_with("Created pod: web-")), "{created:?}");
    env.stop().await;
}

/// Twelve creates of one ReplicaSet are not twelve Events: the first nine
/// have their own, the tenth starts upstream's aggregate Event and the next
/// two count in its series (client-go's EventCorrelator).
#[tokio::test]
async fn similar_create_events_of_a_replica_set_are_aggregated() {
    let env = Env::start(&["replicaset"], false).await;
    env.namespace("rs4").await;
    let api: Api<ReplicaSet> = Api::namespaced(env.client.clone(), "rs4");
    api.create(&PostParams::default(), &replica_set("web", 12)).await.expect("create");
    eventually("12 pods", || async { Some(env.live_pods("rs4", "web").await).filter(|p| p.len() == 12) }).await;
    let events: Api<Event> = Api::namespaced(env.client.clone(), "rs4");
    let created = eventually("the aggregate event counting 3", || async {
        let list = events.list(&ListParams::default()).await.ok()?.items;
        let created: Vec<Event> = list.into_iter().filter(|e| e.reason.as_deref() == Some("SuccessfulCreate")).collect();
        let aggregate = created.iter().find(|e| e.note.as_deref().is_some_and(|n| n.starts_with("(combined from similar events): Created pod: web-")))?;
        (aggregate.series.as_ref()?.count == 3).then_some(created)
    })
    .await;
    assert_eq!(created.len(), 10, "{created:?}");
    let own: Vec<&Event> = created.iter().filter(|e| e.note.as_deref().is_some_and(|n| n.starts_with("Created pod: web-"))).collect();
    assert_eq!(own.len(), 9);
    assert!(own.iter().all(|e| e.series.is_none()), "{own:?}");
    env.stop().await;
}

#[tokio::test]
async fn scaling_a_replica_set_down_deletes_the_unready_pods_first() {
    let env = Env::start(&["replicaset"], false).await;
    env.namespace("rs2").await;
    let api: Api<ReplicaSet> = Api::namespaced(env.client.clone(), "rs2");
    api.create(&PostParams::default(), &replica_set("web", 3)).await.expect("create");
    let pods = eventually("3 pods", || async { Some(env.live_pods("rs2", "web").await).filter(|p| p.len() == 3) }).await;
    // Two pods become Running and Ready; the third stays Pending.
    let pod_api: Api<Pod> = Api::namespaced(env.client.clone(), "rs2");
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    for p in &pods[..2] {
        let status = json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": now}]}});
        pod_api.patch_status(&p.name_any(), &PatchParams::default(), &Patch::Merge(&status)).await.expect("status");
    }
    eventually("readyReplicas 2", || async { api.get("web").await.ok()?.status.filter(|s| s.ready_replicas == Some(2) && s.available_replicas == Some(2)) }).await;
    let pending = pods[2].name_any();
    api.patch("web", &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 2}}))).await.expect("scale");
    let left = eventually("2 pods", || async { Some(env.live_pods("rs2", "web").await).filter(|p| p.len() == 2) }).await;
    assert!(!names(&left).contains(&pending), "the Pending pod goes first: {:?}", names(&left));
    let deleted = eventually("a SuccessfulDelete event", || async { Some(events_of(&env, "rs2", "SuccessfulDelete").await).filter(|e| !e.is_empty()) }).await;
    assert_eq!(deleted, vec![format!("Deleted pod: {pending}")]);
    let status = eventually("status after scale down", || async {
        api.get("web").await.ok()?.status.filter(|s| s.replicas == 2 && s.observed_generation == Some(2))
    })
    .await;
    assert_eq!(status.ready_replicas, Some(2));
    env.stop().await;
}

#[tokio::test]
async fn matching_orphans_are_adopted_and_unmatched_children_released() {
    let env = Env::start(&["replicaset"], false).await;
    env.namespace("rs3").await;
    let pod_api: Api<Pod> = Api::namespaced(env.client.clone(), "rs3");
    let orphan: Pod = serde_json::from_value(json!({
        "metadata": {"name": "orphan", "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }))
    .expect("pod");
    pod_api.create(&PostParams::default(), &orphan).await.expect("orphan");
    let api: Api<ReplicaSet> = Api::namespaced(env.client.clone(), "rs3");
    api.create(&PostParams::default(), &replica_set("web", 2)).await.expect("create");
    let pods = eventually("2 pods", || async { Some(env.live_pods("rs3", "web").await).filter(|p| p.len() == 2) }).await;
    assert!(names(&pods).contains("orphan"), "the orphan counts as a replica: {:?}", names(&pods));
    let adopted = pod_api.get("orphan").await.expect("orphan");
    assert_eq!(adopted.owner_references().first().map(|r| (r.name.as_str(), r.controller)), Some(("web", Some(true))));

    // Relabelled out of the selector: released, and replaced.
    pod_api.patch("orphan", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"app": "other"}}}))).await.expect("relabel");
    eventually("the relabelled pod released", || async {
        let p = pod_api.get("orphan").await.ok()?;
        p.owner_references().is_empty().then_some(())
    })
    .await;
    eventually("a replacement", || async { Some(env.live_pods("rs3", "web").await).filter(|p| p.len() == 2 && !names(p).contains("orphan")) }).await;
    env.stop().await;
}

#[tokio::test]
async fn replication_controller_keeps_its_replicas_like_a_replica_set() {
    let env = Env::start(&["replicationcontroller"], false).await;
    env.namespace("rc1").await;
    let api: Api<ReplicationController> = Api::namespaced(env.client.clone(), "rc1");
    let rc: ReplicationController = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"replicas": 2, "selector": {"app": "web"},
                 "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}},
    }))
    .expect("rc");
    api.create(&PostParams::default(), &rc).await.expect("create");
    let pods = eventually("2 pods", || async { Some(env.live_pods("rc1", "web").await).filter(|p| p.len() == 2) }).await;
    assert!(pods.iter().all(|p| p.owner_references().first().map(|r| r.kind.as_str()) == Some("ReplicationController")));
    eventually("status.replicas 2", || async { api.get("web").await.ok()?.status.filter(|s| s.replicas == 2 && s.observed_generation == Some(1)) }).await;
    api.patch("web", &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 0}}))).await.expect("scale");
    eventually("no pods", || async { Some(env.live_pods("rc1", "web").await).filter(|p| p.is_empty()) }).await;
    env.stop().await;
}

#[tokio::test]
async fn a_failing_create_sets_replica_failure_and_a_failed_create_event() {
    // The ServiceAccount admission plugin refuses pods of a missing ServiceAccount.
    let admission = rkube_apiserver::admission::AdmissionConfig { service_account: true, ..Default::default() };
    let config = rkube_apiserver::ServerConfig { admission, ..Default::default() };
    let env = Env::start_with(&["replicaset"], false, config).await;
    env.namespace("rs4").await;
    let api: Api<ReplicaSet> = Api::namespaced(env.client.clone(), "rs4");
    let mut rs = replica_set("web", 10);
    if let Some(spec) = rs.spec.as_mut().and_then(|s| s.template.as_mut()).and_then(|t| t.spec.as_mut()) {
        spec.service_account_name = Some("missing".into());
    }
    api.create(&PostParams::default(), &rs).await.expect("create");
    let cond = eventually("ReplicaFailure", || async {
        let s = api.get("web").await.ok()?.status?;
        s.conditions?.into_iter().find(|c| c.type_ == "ReplicaFailure")
    })
    .await;
    assert_eq!((cond.status.as_str(), cond.reason.as_deref()), ("True", Some("FailedCreate")));
    let failed = eventually("FailedCreate", || async { Some(events_of(&env, "rs4", "FailedCreate").await).filter(|e| !e.is_empty()) }).await;
    let why = "is forbidden: error looking up service account rs4/missing: serviceaccount \"missing\" not found";
    assert!(failed[0].starts_with("Error creating: pods \"web-") && failed[0].ends_with(why), "{failed:?}");
    let message = cond.message.unwrap_or_default();
    assert!(message.starts_with("pods \"web-") && message.ends_with(why), "{message}");
    // Slow start: each sync stops after its first failed batch (of 1), so
    // the first syncs report a handful of failures, not 10 each.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let failed = events_of(&env, "rs4", "FailedCreate").await;
    assert!(failed.len() < 5, "one failed create per sync, not one per replica: {failed:?}");
    env.stop().await;
}
