//! The disruption controller against a real rkube API server in this
//! process: a PodDisruptionBudget's status follows its pods' readiness, and
//! the eviction API (which reads that status) allows one eviction of two
//! pods under `minAvailable: 1` and refuses the next with 429.

use crate::common;

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, EvictParams, Patch, PatchParams, PostParams};
use serde_json::json;

async fn ready_pod(pods: &Api<Pod>, name: &str) {
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }))
    .expect("pod");
    pods.create(&PostParams::default(), &pod).await.expect("create pod");
    let status = json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}});
    pods.patch_status(name, &PatchParams::default(), &Patch::Merge(&status)).await.expect("pod status");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn budget_status_follows_ready_pods_and_limits_evictions() {
    let cluster = common::Cluster::start("disruption-controller").await;
    let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), "default");
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(cluster.client.clone(), "default");
    ready_pod(&pods, "web-a").await;
    ready_pod(&pods, "web-b").await;
    let pdb: PodDisruptionBudget =
        serde_json::from_value(json!({"metadata": {"name": "web"}, "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}}}))
            .expect("pdb");
    pdbs.create(&PostParams::default(), &pdb).await.expect("create pdb");

    let status = common::eventually(Duration::from_secs(20), "status with one disruption allowed", || async {
        let s = pdbs.get("web").await.ok()?.status?;
        (s.disruptions_allowed == 1).then_some(s)
    })
    .await;
    assert_eq!((status.expected_pods, status.current_healthy, status.desired_healthy), (2, 2, 1));
    assert_eq!(status.observed_generation, Some(1));
    let condition = &status.conditions.expect("conditions")[0];
    assert_eq!((condition.type_.as_str(), condition.status.as_str(), condition.reason.as_str()), ("DisruptionAllowed", "True", "SufficientPods"));

    pods.evict("web-a", &EvictParams::default()).await.expect("the first eviction is allowed");
    common::eventually(Duration::from_secs(20), "no disruption allowed after the eviction", || async {
        let s = pdbs.get("web").await.ok()?.status?;
        (s.disruptions_allowed == 0 && s.current_healthy == 1).then_some(())
    })
    .await;
    // kube-rs retries 429s by default; this client shows the first answer.
    let mut config = cluster.client_config.clone();
    config.default_retry = false;
    let once: Api<Pod> = Api::namespaced(kube::Client::try_from(config).expect("client"), "default");
    let refused = once.evict("web-b", &EvictParams::default()).await.expect_err("the second eviction is refused");
    match refused {
        kube::Error::Api(s) => assert_eq!((s.code, s.reason.as_str()), (429, "TooManyRequests"), "{s:?}"),
        other => panic!("unexpected error: {other}"),
    }
    cluster.stop().await;
}
