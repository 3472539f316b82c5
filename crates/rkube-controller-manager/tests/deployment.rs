//! The Deployment controller (with the ReplicaSet controller and a
//! stand-in kubelet that makes pods Ready) against a real rkube API server.

use crate::workload_support as common;

use common::{eventually, Env};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::ResourceExt;
use serde_json::{json, Value};

const CONTROLLERS: &[&str] = &["deployment", "replicaset"];

fn deployment(name: &str, replicas: i32, strategy: Value, extra: Value) -> Deployment {
    let mut v = json!({
        "metadata": {"name": name},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}}, "strategy": strategy,
                 "template": {"metadata": {"labels": {"app": name}},
                              "spec": {"containers": [{"name": "c", "image": "busybox:1", "command": ["sleep", "3600"]}]}}},
    });
    if let (Some(spec), Some(more)) = (v["spec"].as_object_mut(), extra.as_object()) {
        for (k, x) in more {
            spec.insert(k.clone(), x.clone());
        }
    }
    serde_json::from_value(v).expect("deployment")
}

fn rolling(surge: Value, unavailable: Value) -> Value {
    json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": surge, "maxUnavailable": unavailable}})
}

/// (name, spec.replicas, revision) of the ReplicaSets with `app=<app>`, sorted by revision.
async fn replica_sets(env: &Env, ns: &str, app: &str) -> Vec<(String, i32, String)> {
    let api: Api<ReplicaSet> = Api::namespaced(env.client.clone(), ns);
    let list = api.list(&ListParams::default().labels(&format!("app={app}"))).await.expect("list");
    let mut out: Vec<(String, i32, String)> = list
        .items
        .iter()
        .filter(|rs| rs.metadata.deletion_timestamp.is_none())
        .map(|rs| {
            let rev = rs.annotations().get("deployment.kubernetes.io/revision").cloned().unwrap_or_default();
            (rs.name_any(), rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(-1), rev)
        })
        .collect();
    out.sort_by_key(|r| r.2.parse::<i64>().unwrap_or(0));
    out
}

async fn rolled_out(api: &Api<Deployment>, name: &str, replicas: i32) -> Option<Deployment> {
    let d = api.get(name).await.ok()?;
    let s = d.status.clone()?;
    let done = s.observed_generation >= d.metadata.generation
        && s.updated_replicas == Some(replicas)
        && s.replicas == Some(replicas)
        && s.available_replicas == Some(replicas);
    done.then_some(d)
}

fn condition(d: &Deployment, type_: &str) -> Option<(String, String)> {
    let c = d.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == type_)?;
    Some((c.status.clone(), c.reason.clone().unwrap_or_default()))
}

async fn set_image(api: &Api<Deployment>, name: &str, image: &str) {
    let patch = json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": image, "command": ["sleep", "3600"]}]}}}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await.expect("set image");
}

#[tokio::test]
async fn a_deployment_creates_a_replica_set_named_by_its_template_hash_and_becomes_available() {
    let env = Env::start(CONTROLLERS, true).await;
    env.namespace("d1").await;
    let api: Api<Deployment> = Api::namespaced(env.client.clone(), "d1");
    api.create(&PostParams::default(), &deployment("web", 3, rolling(json!(1), json!(0)), json!({}))).await.expect("create");
    let d = eventually("rolled out", || rolled_out(&api, "web", 3)).await;
    let rss = replica_sets(&env, "d1", "web").await;
    assert_eq!(rss.len(), 1, "{rss:?}");
    let (name, replicas, rev) = &rss[0];
    assert_eq!((*replicas, rev.as_str()), (3, "1"));
    let rs = Api::<ReplicaSet>::namespaced(env.client.clone(), "d1").get(name).await.expect("rs");
    let hash = rs.labels().get("pod-template-hash").cloned().expect("pod-template-hash label");
    assert_eq!(name, &format!("web-{hash}"));
    let sel = rs.spec.as_ref().map(|s| s.selector.clone()).unwrap_or_default();
    assert_eq!(sel.match_labels.unwrap_or_default().get("pod-template-hash"), Some(&hash));
    let owner = rs.owner_references().first().cloned().expect("owner");
    assert_eq!((owner.kind.as_str(), owner.name.as_str(), owner.controller), ("Deployment", "web", Some(true)));
    assert_eq!(rs.annotations().get("deployment.kubernetes.io/desired-replicas").map(String::as_str), Some("3"));
    assert_eq!(rs.annotations().get("deployment.kubernetes.io/max-replicas").map(String::as_str), Some("4"));
    assert_eq!(d.annotations().get("deployment.kubernetes.io/revision").map(String::as_str), Some("1"));
    assert_eq!(condition(&d, "Available"), Some(("True".into(), "MinimumReplicasAvailable".into())));
    let progressing = eventually("NewReplicaSetAvailable", || async {
        let d = api.get("web").await.ok()?;
        condition(&d, "Progressing").filter(|c| c.1 == "NewReplicaSetAvailable")
    })
    .await;
    assert_eq!(progressing.0, "True");
    let events: Api<Event> = Api::namespaced(env.client.clone(), "d1");
    let notes = eventually("ScalingReplicaSet", || async {
        let list = events.list(&ListParams::default()).await.ok()?;
        let notes: Vec<String> = list.items.into_iter().filter(|e| e.reason.as_deref() == Some("ScalingReplicaSet")).filter_map(|e| e.note).collect();
        (!notes.is_empty()).then_some(notes)
    })
    .await;
    assert_eq!(notes, vec![format!("Scaled up replica set {name} from 0 to 3")]);
    env.stop().await;
}

#[tokio::test]
async fn rolling_update_replaces_pods_within_max_surge_and_keeps_availability() {
    let env = Env::start(CONTROLLERS, true).await;
    env.namespace("d2").await;
    let api: Api<Deployment> = Api::namespaced(env.client.clone(), "d2");
    api.create(&PostParams::default(), &deployment("web", 4, rolling(json!(1), json!(0)), json!({}))).await.expect("create");
    eventually("first rollout", || rolled_out(&api, "web", 4)).await;
    env.seen.lock().unwrap_or_else(|e| e.into_inner()).max_live = 0;
    set_image(&api, "web", "busybox:2").await;
    eventually("second rollout", || async {
        let d = rolled_out(&api, "web", 4).await?;
        (d.metadata.generation == Some(2)).then_some(d)
    })
    .await;
    let rss = replica_sets(&env, "d2", "web").await;
    assert_eq!(rss.iter().map(|r| (r.1, r.2.as_str())).collect::<Vec<_>>(), vec![(0, "1"), (4, "2")], "{rss:?}");
    let max_live = env.seen.lock().unwrap_or_else(|e| e.into_inner()).max_live;
    assert!(max_live <= 5, "at most replicas + maxSurge pods at once, saw {max_live}");
    assert!(max_live >= 5, "the surge pod was used, saw {max_live}");
    eventually("old pods gone", || async { Some(env.live_pods("d2", "web").await).filter(|p| p.len() == 4) }).await;
    env.stop().await;
}

#[tokio::test]
async fn recreate_stops_every_old_pod_before_starting_new_ones() {
    let env = Env::start(CONTROLLERS, true).await;
    env.namespace("d3").await;
    let api: Api<Deployment> = Api::namespaced(env.client.clone(), "d3");
    api.create(&PostParams::default(), &deployment("web", 2, json!({"type": "Recreate"}), json!({}))).await.expect("create");
    eventually("first rollout", || rolled_out(&api, "web", 2)).await;
    set_image(&api, "web", "busybox:2").await;
    eventually("second rollout", || async {
        let d = rolled_out(&api, "web", 2).await?;
        (d.metadata.generation == Some(2)).then_some(d)
    })
    .await;
    let seen = env.seen.lock().unwrap_or_else(|e| e.into_inner()).live_hashes.clone();
    assert!(seen.iter().all(|h| h.len() <= 1), "never pods of two templates at once: {seen:?}");
    assert!(seen.iter().filter(|h| h.len() == 1).count() >= 2, "both templates ran: {seen:?}");
    env.stop().await;
}

#[tokio::test]
async fn a_paused_deployment_does_not_roll_out_until_resumed() {
    let env = Env::start(CONTROLLERS, true).await;
    env.namespace("d4").await;
    let api: Api<Deployment> = Api::namespaced(env.client.clone(), "d4");
    api.create(&PostParams::default(), &deployment("web", 2, rolling(json!(1), json!(0)), json!({}))).await.expect("create");
    eventually("first rollout", || rolled_out(&api, "web", 2)).await;
    api.patch("web", &PatchParams::default(), &Patch::Merge(json!({"spec": {"paused": true}}))).await.expect("pause");
    eventually("DeploymentPaused", || async {
        let d = api.get("web").await.ok()?;
        condition(&d, "Progressing").filter(|c| c == &("Unknown".to_string(), "DeploymentPaused".to_string()))
    })
    .await;
    set_image(&api, "web", "busybox:2").await;
    // Scaling still works while paused; no new ReplicaSet appears.
    api.patch("web", &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 3}}))).await.expect("scale");
    eventually("scaled while paused", || async { Some(replica_sets(&env, "d4", "web").await).filter(|r| r.len() == 1 && r[0].1 == 3) }).await;
    eventually("observed", || async {
        let d = api.get("web").await.ok()?;
        (d.status.as_ref()?.observed_generation == d.metadata.generation).then_some(())
    })
    .await;
    assert_eq!(replica_sets(&env, "d4", "web").await.len(), 1);
    api.patch("web", &PatchParams::default(), &Patch::Merge(json!({"spec": {"paused": false}}))).await.expect("resume");
    eventually("rolled out after resume", || async {
        let rss = replica_sets(&env, "d4", "web").await;
        (rss.len() == 2 && rss[1].1 == 3 && rss[0].1 == 0).then_some(())
    })
    .await;
    env.stop().await;
}

#[tokio::test]
async fn revision_history_limit_deletes_the_oldest_replica_sets() {
    let env = Env::start(CONTROLLERS, true).await;
    env.namespace("d5").await;
    let api: Api<Deployment> = Api::namespaced(env.client.clone(), "d5");
    api.create(&PostParams::default(), &deployment("web", 1, rolling(json!(1), json!(0)), json!({"revisionHistoryLimit": 1}))).await.expect("create");
    eventually("rollout 1", || rolled_out(&api, "web", 1)).await;
    for (i, image) in ["busybox:2", "busybox:3", "busybox:4"].iter().enumerate() {
        set_image(&api, "web", image).await;
        let generation = i64::try_from(i).unwrap_or(0) + 2;
        eventually("rollout", || async { rolled_out(&api, "web", 1).await.filter(|d| d.metadata.generation == Some(generation)) }).await;
    }
    let rss = eventually("history trimmed to 1", || async { Some(replica_sets(&env, "d5", "web").await).filter(|r| r.len() == 2) }).await;
    assert_eq!(rss.iter().map(|r| (r.1, r.2.as_str())).collect::<Vec<_>>(), vec![(0, "3"), (1, "4")], "{rss:?}");
    env.stop().await;
}

#[tokio::test]
async fn rolling_back_to_an_old_template_reuses_its_replica_set_at_a_new_revision() {
    let env = Env::start(CONTROLLERS, true).await;
    env.namespace("d6").await;
    let api: Api<Deployment> = Api::namespaced(env.client.clone(), "d6");
    api.create(&PostParams::default(), &deployment("web", 2, rolling(json!(1), json!(0)), json!({}))).await.expect("create");
    eventually("rollout 1", || rolled_out(&api, "web", 2)).await;
    let first = replica_sets(&env, "d6", "web").await[0].0.clone();
    set_image(&api, "web", "busybox:2").await;
    eventually("rollout 2", || async { rolled_out(&api, "web", 2).await.filter(|d| d.metadata.generation == Some(2)) }).await;
    set_image(&api, "web", "busybox:1").await;
    eventually("rollout 3", || async { rolled_out(&api, "web", 2).await.filter(|d| d.metadata.generation == Some(3)) }).await;
    let rss = replica_sets(&env, "d6", "web").await;
    assert_eq!(rss.len(), 2, "{rss:?}");
    assert_eq!(rss[1], (first.clone(), 2, "3".to_string()), "{rss:?}");
    let rs = Api::<ReplicaSet>::namespaced(env.client.clone(), "d6").get(&first).await.expect("rs");
    assert_eq!(rs.annotations().get("deployment.kubernetes.io/revision-history").map(String::as_str), Some("1"));
    let d = api.get("web").await.expect("d");
    assert_eq!(d.annotations().get("deployment.kubernetes.io/revision").map(String::as_str), Some("3"));
    env.stop().await;
}

#[tokio::test]
async fn a_rollout_without_ready_pods_exceeds_its_progress_deadline() {
    let env = Env::start(CONTROLLERS, true).await;
    env.namespace("d7").await;
    let api: Api<Deployment> = Api::namespaced(env.client.clone(), "d7");
    let mut d = deployment("web", 1, rolling(json!(1), json!(0)), json!({"progressDeadlineSeconds": 2}));
    if let Some(meta) = d.spec.as_mut().and_then(|s| s.template.metadata.as_mut()) {
        meta.labels.get_or_insert_with(Default::default).insert("never-ready".into(), "yes".into());
    }
    api.create(&PostParams::default(), &d).await.expect("create");
    let cond = eventually("ProgressDeadlineExceeded", || async {
        let d = api.get("web").await.ok()?;
        let c = d.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == "Progressing")?.clone();
        (c.reason.as_deref() == Some("ProgressDeadlineExceeded")).then_some(c)
    })
    .await;
    assert_eq!(cond.status, "False");
    let rs = replica_sets(&env, "d7", "web").await[0].0.clone();
    assert_eq!(cond.message, Some(format!("ReplicaSet {rs:?} has timed out progressing.")));
    let d = api.get("web").await.expect("d");
    assert_eq!(condition(&d, "Available"), Some(("False".into(), "MinimumReplicasUnavailable".into())));
    env.stop().await;
}

#[tokio::test]
async fn scaling_through_the_scale_subresource_resizes_the_replica_set() {
    let env = Env::start(CONTROLLERS, true).await;
    env.namespace("d8").await;
    let api: Api<Deployment> = Api::namespaced(env.client.clone(), "d8");
    api.create(&PostParams::default(), &deployment("web", 2, rolling(json!(1), json!(0)), json!({}))).await.expect("create");
    eventually("rollout", || rolled_out(&api, "web", 2)).await;
    api.patch_scale("web", &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 5}}))).await.expect("scale");
    eventually("5 replicas", || rolled_out(&api, "web", 5)).await;
    eventually("5 pods", || async { Some(env.live_pods("d8", "web").await).filter(|p| p.len() == 5) }).await;
    let scale = api.get_scale("web").await.expect("scale");
    assert_eq!(scale.status.map(|s| s.replicas), Some(5));
    env.stop().await;
}

#[tokio::test]
async fn resizing_a_stalled_rollout_scales_both_replica_sets_proportionally() {
    let env = Env::start(CONTROLLERS, true).await;
    env.namespace("d9").await;
    let api: Api<Deployment> = Api::namespaced(env.client.clone(), "d9");
    api.create(&PostParams::default(), &deployment("web", 10, rolling(json!(3), json!(0)), json!({}))).await.expect("create");
    eventually("rollout", || rolled_out(&api, "web", 10)).await;
    // The new template's pods never become ready: the rollout stalls at 10 old + 3 new.
    let patch = json!({"spec": {"template": {"metadata": {"labels": {"app": "web", "never-ready": "yes"}}}}});
    api.patch("web", &PatchParams::default(), &Patch::Merge(&patch)).await.expect("new template");
    eventually("stalled at 10 + 3", || async {
        let rss = replica_sets(&env, "d9", "web").await;
        (rss.iter().map(|r| r.1).collect::<Vec<_>>() == [10, 3]).then_some(())
    })
    .await;
    api.patch_scale("web", &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 20}}))).await.expect("scale");
    // 13 → 23 (20 + maxSurge 3): old 10·23/13 ≈ 18, new 3·23/13 ≈ 5.
    let sizes = eventually("proportional sizes", || async {
        let rss = replica_sets(&env, "d9", "web").await;
        let sizes: Vec<i32> = rss.iter().map(|r| r.1).collect();
        (sizes.iter().sum::<i32>() == 23).then_some(sizes)
    })
    .await;
    assert_eq!(sizes, vec![18, 5]);
    env.stop().await;
}
