//! VolumeBinding against a real API server: a pod with an unbound
//! `WaitForFirstConsumer` claim is bound after its claim gets
//! `volume.kubernetes.io/selected-node`; a pod whose claim is bound to a
//! local volume lands on that volume's node; an unbound `Immediate` claim
//! keeps the pod pending with upstream's message.

use crate::common;

use common::{bound_node, create_node, create_pod, eventually, TestServer};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, PostParams};
use rkube_scheduler::cli::{start, StartOptions};
use serde_json::json;

fn uses(claim: &str) -> serde_json::Value {
    json!({"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]})
}

async fn create<K>(api: &Api<K>, v: serde_json::Value) -> K
where
    K: kube::Resource + Clone + std::fmt::Debug + k8s_openapi::serde::de::DeserializeOwned + k8s_openapi::serde::Serialize,
{
    api.create(&PostParams::default(), &serde_json::from_value(v).expect("object")).await.expect("create")
}

fn claim(name: &str, class: &str) -> serde_json::Value {
    json!({"metadata": {"name": name}, "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": class,
        "resources": {"requests": {"storage": "1Gi"}}}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_follow_their_claims_volumes() {
    let server = TestServer::start().await;
    let client = server.client();
    create_node(&client, "n1", "2", json!({})).await;
    create_node(&client, "n2", "2", json!({})).await;
    let classes: Api<StorageClass> = Api::all(client.clone());
    create(&classes, json!({"metadata": {"name": "later"}, "provisioner": "rancher.io/local-path", "volumeBindingMode": "WaitForFirstConsumer"})).await;
    create(&classes, json!({"metadata": {"name": "now"}, "provisioner": "example.com/x"})).await;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
    create(&claims, claim("delayed", "later")).await;
    create(&claims, claim("immediate", "now")).await;
    let mut pinned = claim("pinned", "");
    pinned["spec"]["volumeName"] = json!("on-n2");
    create(&claims, pinned).await;
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    create(&pvs, json!({"metadata": {"name": "on-n2"}, "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
        "local": {"path": "/mnt/x"}, "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": ["n2"]}]}]}}}})).await;

    let sched = start(client.clone(), StartOptions::default()).await.expect("start");
    create_pod(&client, "wffc", "100m", uses("delayed")).await;
    let node = bound_node(&client, "wffc", 20).await;
    let c = claims.get("delayed").await.expect("claim");
    let selected = c.metadata.annotations.unwrap_or_default().get("volume.kubernetes.io/selected-node").cloned();
    assert_eq!(selected.as_deref(), Some(node.as_str()));

    for i in 0..4 {
        create_pod(&client, &format!("pinned-{i}"), "100m", uses("pinned")).await;
        assert_eq!(bound_node(&client, &format!("pinned-{i}"), 20).await, "n2");
    }

    create_pod(&client, "waits", "100m", uses("immediate")).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let message = eventually(20, "waits unschedulable", || {
        let pods = pods.clone();
        async move {
            let p = pods.get("waits").await.ok()?;
            let conds = p.status?.conditions?;
            conds.into_iter().find(|c| c.type_ == "PodScheduled" && c.status == "False")?.message
        }
    })
    .await;
    assert_eq!(
        message,
        "0/2 nodes are available: pod has unbound immediate PersistentVolumeClaims. \
         preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
    );
    sched.shutdown().await.expect("shutdown");
}
