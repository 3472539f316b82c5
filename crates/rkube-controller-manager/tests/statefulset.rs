//! The StatefulSet controller against a real rkube API server: ordered pod
//! identities, claims, scaling, rolling updates and ControllerRevisions as a
//! client sees them.

use crate::workload_support as common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::{eventually, Env};
use k8s_openapi::api::apps::v1::{ControllerRevision, StatefulSet};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::ResourceExt;
use serde_json::{json, Value};

fn stateful_set(name: &str, replicas: i32, extra_labels: Value, policy: &str) -> StatefulSet {
    let mut labels = json!({"app": name});
    if let (Some(l), Some(extra)) = (labels.as_object_mut(), extra_labels.as_object()) {
        l.extend(extra.clone());
    }
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"replicas": replicas, "serviceName": name, "podManagementPolicy": policy,
                 "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": labels},
                              "spec": {"containers": [{"name": "c", "image": "busybox", "command": ["sleep", "3600"]}]}}},
    }))
    .expect("stateful set")
}

fn names(pods: &[Pod]) -> BTreeSet<String> {
    pods.iter().map(|p| p.name_any()).collect()
}

fn set_of(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|s| s.to_string()).collect()
}

async fn notes(env: &Env, ns: &str, reason: &str) -> Vec<String> {
    let api: Api<Event> = Api::namespaced(env.client.clone(), ns);
    let list = api.list(&ListParams::default()).await.expect("events");
    let mut events: Vec<Event> = list
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .collect();
    // In the order they were written.
    events.sort_by_key(|e| e.resource_version().and_then(|v| v.parse::<u64>().ok()));
    events.into_iter().filter_map(|e| e.note).collect()
}

#[tokio::test]
async fn ordered_ready_creates_named_pods_one_by_one_and_reports_one_revision() {
    let env = Env::start(&["statefulset"], true).await;
    env.namespace("sts1").await;
    let api: Api<StatefulSet> = Api::namespaced(env.client.clone(), "sts1");
    api.create(
        &PostParams::default(),
        &stateful_set("web", 3, json!({}), "OrderedReady"),
    )
    .await
    .expect("create");
    let status = eventually("3 ready replicas", || async {
        api.get("web")
            .await
            .ok()?
            .status
            .filter(|s| s.ready_replicas == Some(3) && s.current_revision.is_some())
    })
    .await;
    let pods = env.live_pods("sts1", "web").await;
    assert_eq!(names(&pods), set_of(&["web-0", "web-1", "web-2"]));
    // Created in ordinal order: each after the previous one was ready.
    let mut by_time: Vec<&Pod> = pods.iter().collect();
    by_time.sort_by_key(|p| {
        (
            p.metadata.creation_timestamp.clone().map(|t| t.0),
            p.resource_version().and_then(|v| v.parse::<u64>().ok()),
        )
    });
    assert_eq!(
        by_time.iter().map(|p| p.name_any()).collect::<Vec<_>>(),
        ["web-0", "web-1", "web-2"]
    );
    for (i, p) in by_time.iter().enumerate() {
        let labels = p.labels();
        assert_eq!(
            labels.get("statefulset.kubernetes.io/pod-name"),
            Some(&p.name_any())
        );
        assert_eq!(
            labels.get("apps.kubernetes.io/pod-index"),
            Some(&i.to_string())
        );
        assert_eq!(
            labels.get("controller-revision-hash"),
            status.update_revision.as_ref()
        );
        let spec = p.spec.as_ref().expect("spec");
        assert_eq!(
            (spec.hostname.as_deref(), spec.subdomain.as_deref()),
            (Some(p.name_any().as_str()), Some("web"))
        );
        assert_eq!(p.owner_references()[0].kind, "StatefulSet");
    }
    assert_eq!(status.current_revision, status.update_revision);
    assert_eq!(
        (
            status.replicas,
            status.current_replicas,
            status.updated_replicas
        ),
        (3, Some(3), Some(3))
    );
    assert_eq!(status.observed_generation, Some(1));
    let revs: Api<ControllerRevision> = Api::namespaced(env.client.clone(), "sts1");
    let list = revs.list(&ListParams::default()).await.expect("revisions");
    assert_eq!(list.items.len(), 1);
    assert_eq!(Some(list.items[0].name_any()), status.update_revision);
    assert_eq!(list.items[0].revision, 1);
    let created = notes(&env, "sts1", "SuccessfulCreate").await;
    assert!(
        created.contains(&"create Pod web-0 in StatefulSet web successful".to_string()),
        "{created:?}"
    );
    env.stop().await;
}

#[tokio::test]
async fn ordered_ready_waits_for_a_pod_that_never_gets_ready_but_parallel_does_not() {
    let env = Env::start(&["statefulset"], true).await;
    env.namespace("sts2").await;
    let api: Api<StatefulSet> = Api::namespaced(env.client.clone(), "sts2");
    api.create(
        &PostParams::default(),
        &stateful_set("slow", 3, json!({"never-ready": "1"}), "OrderedReady"),
    )
    .await
    .expect("create");
    api.create(
        &PostParams::default(),
        &stateful_set("fast", 3, json!({"never-ready": "1"}), "Parallel"),
    )
    .await
    .expect("create");
    eventually("3 parallel pods", || async {
        Some(env.live_pods("sts2", "fast").await).filter(|p| p.len() == 3)
    })
    .await;
    eventually("slow-0", || async {
        Some(env.live_pods("sts2", "slow").await).filter(|p| !p.is_empty())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        names(&env.live_pods("sts2", "slow").await),
        set_of(&["slow-0"])
    );
    env.stop().await;
}

#[tokio::test]
async fn scaling_down_removes_the_highest_ordinals_and_claims_come_from_templates() {
    let env = Env::start(&["statefulset"], true).await;
    env.namespace("sts3").await;
    let api: Api<StatefulSet> = Api::namespaced(env.client.clone(), "sts3");
    let mut set = stateful_set("db", 3, json!({}), "OrderedReady");
    let claim = json!([{"metadata": {"name": "data", "labels": {"tier": "storage"}},
                        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]);
    if let Some(spec) = set.spec.as_mut() {
        spec.volume_claim_templates = serde_json::from_value(claim).expect("claims");
    }
    api.create(&PostParams::default(), &set)
        .await
        .expect("create");
    eventually("3 ready", || async {
        api.get("db")
            .await
            .ok()?
            .status
            .filter(|s| s.ready_replicas == Some(3))
    })
    .await;
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(env.client.clone(), "sts3");
    let list = pvcs.list(&ListParams::default()).await.expect("claims");
    let claim_names: BTreeSet<String> = list.items.iter().map(|c| c.name_any()).collect();
    assert_eq!(
        claim_names,
        set_of(&["data-db-0", "data-db-1", "data-db-2"])
    );
    for c in &list.items {
        assert_eq!(c.labels().get("tier").map(String::as_str), Some("storage"));
        assert_eq!(c.labels().get("app").map(String::as_str), Some("db"));
    }
    let pod = Api::<Pod>::namespaced(env.client.clone(), "sts3")
        .get("db-1")
        .await
        .expect("pod");
    let volumes = pod.spec.and_then(|s| s.volumes).unwrap_or_default();
    let data = volumes
        .iter()
        .find(|v| v.name == "data")
        .and_then(|v| v.persistent_volume_claim.as_ref());
    assert_eq!(data.map(|c| c.claim_name.as_str()), Some("data-db-1"));

    api.patch(
        "db",
        &PatchParams::default(),
        &Patch::Merge(&json!({"spec": {"replicas": 1}})),
    )
    .await
    .expect("scale");
    eventually("1 pod", || async {
        Some(env.live_pods("sts3", "db").await).filter(|p| p.len() == 1)
    })
    .await;
    assert_eq!(names(&env.live_pods("sts3", "db").await), set_of(&["db-0"]));
    let deleted = eventually("2 delete events", || async {
        Some(notes(&env, "sts3", "SuccessfulDelete").await).filter(|n| n.len() == 2)
    })
    .await;
    assert!(
        deleted.contains(&"delete Pod db-2 in StatefulSet db successful".to_string()),
        "{deleted:?}"
    );
    // Claims stay (the default retention policy is Retain).
    assert_eq!(
        pvcs.list(&ListParams::default())
            .await
            .expect("claims")
            .items
            .len(),
        3
    );
    env.stop().await;
}

#[tokio::test]
async fn rolling_update_replaces_every_pod_and_records_a_second_revision() {
    let env = Env::start(&["statefulset"], true).await;
    env.namespace("sts4").await;
    let api: Api<StatefulSet> = Api::namespaced(env.client.clone(), "sts4");
    api.create(
        &PostParams::default(),
        &stateful_set("web", 3, json!({}), "OrderedReady"),
    )
    .await
    .expect("create");
    let first = eventually("3 ready", || async {
        api.get("web")
            .await
            .ok()?
            .status
            .filter(|s| s.ready_replicas == Some(3) && s.current_revision.is_some())
    })
    .await;
    let patch = json!({"spec": {"template": {"metadata": {"annotations": {"rev": "2"}}}}});
    api.patch("web", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("update template");
    let done = eventually("rolled out", || async {
        let s = api.get("web").await.ok()?.status?;
        (s.update_revision != first.update_revision
            && s.current_revision == s.update_revision
            && s.updated_replicas == Some(3)
            && s.ready_replicas == Some(3))
        .then_some(s)
    })
    .await;
    let pods = env.live_pods("sts4", "web").await;
    assert_eq!(names(&pods), set_of(&["web-0", "web-1", "web-2"]));
    for p in &pods {
        assert_eq!(
            p.labels().get("controller-revision-hash"),
            done.update_revision.as_ref()
        );
        assert_eq!(p.annotations().get("rev").map(String::as_str), Some("2"));
    }
    let revs: Api<ControllerRevision> = Api::namespaced(env.client.clone(), "sts4");
    let mut list = revs
        .list(&ListParams::default())
        .await
        .expect("revisions")
        .items;
    list.sort_by_key(|r| r.revision);
    assert_eq!(
        list.iter().map(|r| r.revision).collect::<Vec<_>>(),
        vec![1, 2]
    );
    assert_eq!(Some(list[1].name_any()), done.update_revision);
    let data = list[0]
        .data
        .as_ref()
        .map(|d| d.0.clone())
        .unwrap_or_default();
    assert_eq!(data["spec"]["template"]["$patch"], "replace");
    // Replaced from the highest ordinal down.
    let deleted = notes(&env, "sts4", "SuccessfulDelete").await;
    assert_eq!(
        deleted.first().map(String::as_str),
        Some("delete Pod web-2 in StatefulSet web successful"),
        "{deleted:?}"
    );
    env.stop().await;
}

/// A member pod whose identity labels a client removed or changed gets them
/// back (upstream's `identityMatches`/`updateIdentity`), keeping its name.
#[tokio::test]
async fn a_member_pods_identity_labels_are_restored() {
    let env = Env::start(&["statefulset"], true).await;
    env.namespace("sts9").await;
    let api: Api<StatefulSet> = Api::namespaced(env.client.clone(), "sts9");
    api.create(
        &PostParams::default(),
        &stateful_set("db", 2, json!({}), "Parallel"),
    )
    .await
    .expect("create");
    eventually("2 ready replicas", || async {
        api.get("db")
            .await
            .ok()?
            .status
            .filter(|s| s.ready_replicas == Some(2))
    })
    .await;
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), "sts9");
    let uid = pods.get("db-1").await.expect("db-1").uid();
    let patch = json!({"metadata": {"labels": {"statefulset.kubernetes.io/pod-name": null, "apps.kubernetes.io/pod-index": "7"}}});
    pods.patch("db-1", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("relabel");
    let p = eventually("identity restored", || async {
        let p = pods.get("db-1").await.ok()?;
        let labels = p.labels();
        (labels
            .get("statefulset.kubernetes.io/pod-name")
            .map(String::as_str)
            == Some("db-1")
            && labels
                .get("apps.kubernetes.io/pod-index")
                .map(String::as_str)
                == Some("1"))
        .then_some(p)
    })
    .await;
    assert_eq!(p.uid(), uid, "repaired in place, not replaced");
    env.stop().await;
}

/// A live member whose claim was deleted gets it back (upstream's `storageMatches` and
/// `createPersistentVolumeClaims`), from the template, without replacing the pod.
#[tokio::test]
async fn a_live_members_deleted_claim_is_made_again() {
    let env = Env::start(&["statefulset"], true).await;
    env.namespace("sts10").await;
    let api: Api<StatefulSet> = Api::namespaced(env.client.clone(), "sts10");
    let mut set = stateful_set("db", 1, json!({}), "OrderedReady");
    let claim = json!([{"metadata": {"name": "data"},
                        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]);
    if let Some(spec) = set.spec.as_mut() {
        spec.volume_claim_templates = serde_json::from_value(claim).expect("claims");
    }
    api.create(&PostParams::default(), &set)
        .await
        .expect("create");
    eventually("1 ready", || async {
        api.get("db")
            .await
            .ok()?
            .status
            .filter(|s| s.ready_replicas == Some(1))
    })
    .await;
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(env.client.clone(), "sts10");
    let first = pvcs.get("data-db-0").await.expect("claim").uid();
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), "sts10");
    let pod_uid = pods.get("db-0").await.expect("db-0").uid();
    pvcs.delete("data-db-0", &Default::default())
        .await
        .expect("delete claim");
    // The next sync (any change of the set brings one) sees it gone and makes it again.
    let bump = json!({"metadata": {"annotations": {"test/bump": "1"}}});
    api.patch("db", &PatchParams::default(), &Patch::Merge(&bump))
        .await
        .expect("bump");
    let again = eventually("claim made again", || async {
        pvcs.get_opt("data-db-0")
            .await
            .ok()?
            .filter(|c| c.uid() != first && c.metadata.deletion_timestamp.is_none())
    })
    .await;
    assert_eq!(
        again.spec.and_then(|s| s.access_modes),
        Some(vec!["ReadWriteOnce".to_string()])
    );
    assert_eq!(
        pods.get("db-0").await.expect("db-0").uid(),
        pod_uid,
        "the pod is kept"
    );
    env.stop().await;
}
