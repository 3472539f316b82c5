//! The garbage collector against a real API server: background, foreground
//! (with `blockOwnerDeletion` order) and orphan propagation, with ConfigMaps
//! owning ConfigMaps.

use crate::common;

use std::time::Duration;

use common::{configmap, eventually, owned_by, Cluster};
use kube::api::{DeleteParams, Patch, PatchParams, PropagationPolicy};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(30);

fn policy(p: PropagationPolicy) -> DeleteParams {
    DeleteParams { propagation_policy: Some(p), ..DeleteParams::default() }
}

#[tokio::test]
async fn background_deletion_removes_the_dependents_of_a_deleted_owner() {
    let c = Cluster::start("garbagecollector").await;
    let cms = c.configmaps("default");
    let owner = c.create(&cms, configmap("owner")).await;
    for n in ["dep-a", "dep-b"] {
        let mut d = configmap(n);
        d["metadata"]["ownerReferences"] = json!([owned_by(&owner, false)]);
        c.create(&cms, d).await;
    }
    // A dependent of another, live owner stays.
    let keeper = c.create(&cms, configmap("keeper")).await;
    let mut shared = configmap("shared");
    shared["metadata"]["ownerReferences"] = json!([owned_by(&owner, false), owned_by(&keeper, false)]);
    c.create(&cms, shared).await;

    cms.delete("owner", &policy(PropagationPolicy::Background)).await.expect("delete owner");
    assert!(cms.get_opt("owner").await.expect("get").is_none(), "background deletion removes the owner at once");
    eventually(WAIT, "dependents deleted", || async {
        let a = cms.get_opt("dep-a").await.expect("get");
        let b = cms.get_opt("dep-b").await.expect("get");
        (a.is_none() && b.is_none()).then_some(())
    })
    .await;
    let shared = eventually(WAIT, "reference to the deleted owner dropped", || async {
        let s = cms.get("shared").await.expect("shared stays");
        (s.metadata.owner_references.as_ref().map(Vec::len) == Some(1)).then_some(s)
    })
    .await;
    assert_eq!(shared.metadata.owner_references.unwrap()[0].name, "keeper");
    c.stop().await;
}

#[tokio::test]
async fn a_dependent_whose_owner_never_existed_is_deleted() {
    let c = Cluster::start("garbagecollector").await;
    let cms = c.configmaps("default");
    let mut d = configmap("orphaned-at-birth");
    d["metadata"]["ownerReferences"] =
        json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "ghost", "uid": "00000000-0000-0000-0000-000000000001"}]);
    c.create(&cms, d).await;
    eventually(WAIT, "dangling dependent deleted", || async {
        cms.get_opt("orphaned-at-birth").await.expect("get").is_none().then_some(())
    })
    .await;
    c.stop().await;
}

#[tokio::test]
async fn foreground_deletion_deletes_blocking_dependents_before_the_owner() {
    let c = Cluster::start("garbagecollector").await;
    let cms = c.configmaps("default");
    let owner = c.create(&cms, configmap("owner")).await;
    let mut blocker = configmap("blocker");
    blocker["metadata"]["ownerReferences"] = json!([owned_by(&owner, true)]);
    // Held by a finalizer so the order can be seen.
    blocker["metadata"]["finalizers"] = json!(["example.com/hold"]);
    c.create(&cms, blocker).await;
    let mut free = configmap("free");
    free["metadata"]["ownerReferences"] = json!([owned_by(&owner, false)]);
    c.create(&cms, free).await;

    cms.delete("owner", &policy(PropagationPolicy::Foreground)).await.expect("delete owner");
    let o = cms.get("owner").await.expect("owner stays while dependents go");
    assert!(o.metadata.deletion_timestamp.is_some());
    assert_eq!(o.metadata.finalizers, Some(vec!["foregroundDeletion".to_string()]));

    eventually(WAIT, "non-blocking dependent deleted and blocker terminating", || async {
        let free = cms.get_opt("free").await.expect("get");
        let b = cms.get("blocker").await.expect("blocker held");
        (free.is_none() && b.metadata.deletion_timestamp.is_some()).then_some(())
    })
    .await;
    // The owner waits for its blocking dependent.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let o = cms.get("owner").await.expect("owner still waits for the blocking dependent");
    assert_eq!(o.metadata.finalizers, Some(vec!["foregroundDeletion".to_string()]));

    let release = json!({"metadata": {"finalizers": null}});
    cms.patch("blocker", &PatchParams::default(), &Patch::Merge(&release)).await.expect("release blocker");
    eventually(WAIT, "owner deleted after its blocking dependent", || async {
        cms.get_opt("owner").await.expect("get").is_none().then_some(())
    })
    .await;
    assert!(cms.get_opt("blocker").await.expect("get").is_none());
    c.stop().await;
}

#[tokio::test]
async fn orphan_deletion_keeps_dependents_and_removes_their_owner_references() {
    let c = Cluster::start("garbagecollector").await;
    let cms = c.configmaps("default");
    let owner = c.create(&cms, configmap("owner")).await;
    for n in ["kid-a", "kid-b"] {
        let mut d = configmap(n);
        d["metadata"]["ownerReferences"] = json!([owned_by(&owner, true)]);
        c.create(&cms, d).await;
    }
    cms.delete("owner", &policy(PropagationPolicy::Orphan)).await.expect("delete owner");
    let o = cms.get("owner").await.expect("owner kept until orphaning is done");
    assert_eq!(o.metadata.finalizers, Some(vec!["orphan".to_string()]));
    eventually(WAIT, "owner deleted after orphaning", || async {
        cms.get_opt("owner").await.expect("get").is_none().then_some(())
    })
    .await;
    // Give a wrong background deletion time to happen.
    tokio::time::sleep(Duration::from_secs(1)).await;
    for n in ["kid-a", "kid-b"] {
        let kid = cms.get(n).await.expect("orphaned dependent stays");
        assert_eq!(kid.metadata.owner_references, None, "{n} lost its reference to the owner");
    }
    c.stop().await;
}
