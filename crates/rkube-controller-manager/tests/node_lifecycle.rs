//! The node lifecycle and taint eviction controllers against a real rkube
//! API server, with short grace periods: a node whose kubelet goes silent
//! becomes Unknown and tainted, its pods not ready, and the pods that do not
//! tolerate it are evicted; a node that keeps renewing its Lease is left
//! alone; with every node down, nothing is evicted.

use crate::workload_support as common;

use std::time::Duration;

use common::{eventually, Env};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use rkube_controller_manager::controllers::nodelifecycle::{self, NodeLifecycleOptions};
use serde_json::json;

const OPTIONS: NodeLifecycleOptions = NodeLifecycleOptions {
    monitor_period: Duration::from_millis(200),
    monitor_grace: Duration::from_millis(1500),
    startup_grace: Duration::from_millis(1500),
};

async fn add_node(env: &Env, name: &str) {
    let nodes: Api<Node> = Api::all(env.client.clone());
    let node: Node = serde_json::from_value(json!({"metadata": {"name": name}})).expect("node");
    nodes.create(&PostParams::default(), &node).await.expect("node");
    let status = json!({"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
        "lastHeartbeatTime": Timestamp::now().to_string(), "lastTransitionTime": Timestamp::now().to_string()}]}});
    nodes.patch_status(name, &PatchParams::default(), &Patch::Merge(&status)).await.expect("node status");
}

/// Renews `node`'s Lease in `kube-node-lease` (what a live kubelet does every 10 s).
async fn renew(env: &Env, node: &str) {
    let leases: Api<Lease> = Api::namespaced(env.client.clone(), "kube-node-lease");
    let lease = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": node},
        "spec": {"holderIdentity": node, "leaseDurationSeconds": 40, "renewTime": Timestamp::now().strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()}});
    let pp = PatchParams::apply("test-kubelet").force();
    leases.patch(node, &pp, &Patch::Apply(&lease)).await.expect("lease");
}

async fn add_pod(env: &Env, name: &str, node: &str, tolerations: serde_json::Value) {
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), "default");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}], "tolerations": tolerations},
    }))
    .expect("pod");
    pods.create(&PostParams::default(), &pod).await.expect("pod");
    let status = json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}});
    pods.patch_status(name, &PatchParams::default(), &Patch::Merge(&status)).await.expect("pod status");
}

fn taints(node: &Node) -> Vec<(String, String)> {
    node.spec.as_ref().and_then(|s| s.taints.clone()).unwrap_or_default().into_iter().map(|t| (t.key, t.effect)).collect()
}

fn ready(node: &Node) -> Option<String> {
    nodelifecycle::plan::ready_status(node).map(str::to_string)
}

#[tokio::test]
async fn a_silent_node_goes_unknown_is_tainted_and_its_intolerant_pods_are_evicted() {
    let mut env = Env::start(&[], false).await;
    env.spawn(|ctx| nodelifecycle::run(ctx, OPTIONS));
    env.spawn(|ctx| nodelifecycle::run_taint_eviction(ctx, Duration::from_millis(200)));
    add_node(&env, "alive").await;
    add_node(&env, "silent").await;
    renew(&env, "alive").await;
    renew(&env, "silent").await;
    add_pod(&env, "intolerant", "silent", json!([])).await;
    let waits = json!([{"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}]);
    add_pod(&env, "patient", "silent", waits).await;
    add_pod(&env, "elsewhere", "alive", json!([])).await;

    // Only "alive" keeps renewing its Lease.
    let keep_alive = {
        let client = env.client.clone();
        tokio::spawn(async move {
            let leases: Api<Lease> = Api::namespaced(client, "kube-node-lease");
            loop {
                let renew = json!({"spec": {"renewTime": Timestamp::now().strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()}});
                let _ = leases.patch("alive", &PatchParams::default(), &Patch::Merge(&renew)).await;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
    };

    let nodes: Api<Node> = Api::all(env.client.clone());
    let silent = eventually("the silent node is Unknown and tainted NoExecute", || async {
        let n = nodes.get("silent").await.ok()?;
        (ready(&n).as_deref() == Some("Unknown") && taints(&n).len() == 2).then_some(n)
    })
    .await;
    assert_eq!(
        taints(&silent),
        [
            ("node.kubernetes.io/unreachable".to_string(), "NoSchedule".to_string()),
            ("node.kubernetes.io/unreachable".to_string(), "NoExecute".to_string())
        ]
    );
    let cond = silent.status.as_ref().unwrap().conditions.as_ref().unwrap().iter().find(|c| c.type_ == "Ready").cloned().unwrap();
    assert_eq!(cond.reason.as_deref(), Some("NodeStatusUnknown"));
    assert_eq!(cond.message.as_deref(), Some("Kubelet stopped posting node status."));

    let pods: Api<Pod> = Api::namespaced(env.client.clone(), "default");
    eventually("the intolerant pod is evicted", || async {
        let p = pods.get("intolerant").await.ok()?;
        p.metadata.deletion_timestamp.is_some().then_some(())
    })
    .await;
    let evicted = pods.get("intolerant").await.expect("pod is terminating (no kubelet finishes it)");
    let target = evicted.status.as_ref().unwrap().conditions.as_ref().unwrap().iter().find(|c| c.type_ == "DisruptionTarget").cloned();
    assert_eq!(target.and_then(|c| c.reason), Some("DeletionByTaintManager".to_string()));

    let patient = eventually("the tolerating pod is marked not ready", || async {
        let p = pods.get("patient").await.ok()?;
        let ready = p.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == "Ready")?.status.clone();
        (ready == "False").then_some(p)
    })
    .await;
    assert!(patient.metadata.deletion_timestamp.is_none(), "a pod tolerating the taint for 300 s stays");

    let alive = nodes.get("alive").await.expect("node");
    assert_eq!(ready(&alive).as_deref(), Some("True"), "a node renewing its Lease stays Ready");
    assert!(taints(&alive).is_empty());
    assert!(pods.get("elsewhere").await.expect("pod").metadata.deletion_timestamp.is_none());

    let events: Api<Event> = Api::namespaced(env.client.clone(), "default");
    let reasons: Vec<String> =
        events.list(&ListParams::default()).await.expect("events").items.into_iter().filter_map(|e| e.reason).collect();
    assert!(reasons.iter().any(|r| r == "TaintManagerEviction"), "{reasons:?}");
    assert!(reasons.iter().any(|r| r == "NodeNotReady"), "{reasons:?}");

    // The kubelet comes back: Ready again, the taints go.
    keep_alive.abort();
    let back = json!({"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
        "lastHeartbeatTime": Timestamp::now().to_string(), "lastTransitionTime": Timestamp::now().to_string()}]}});
    nodes.patch_status("silent", &PatchParams::default(), &Patch::Merge(&back)).await.expect("status");
    renew(&env, "silent").await;
    eventually("taints lifted once the node is Ready", || async {
        let n = nodes.get("silent").await.ok()?;
        taints(&n).is_empty().then_some(())
    })
    .await;
    env.stop().await;
}

#[tokio::test]
async fn with_every_node_down_nothing_is_evicted() {
    let mut env = Env::start(&[], false).await;
    env.spawn(|ctx| nodelifecycle::run(ctx, OPTIONS));
    env.spawn(|ctx| nodelifecycle::run_taint_eviction(ctx, Duration::from_millis(200)));
    add_node(&env, "only").await;
    add_pod(&env, "p", "only", json!([])).await;
    let nodes: Api<Node> = Api::all(env.client.clone());
    let n = eventually("the lone node is Unknown and NoSchedule-tainted", || async {
        let n = nodes.get("only").await.ok()?;
        (ready(&n).as_deref() == Some("Unknown") && !taints(&n).is_empty()).then_some(n)
    })
    .await;
    assert_eq!(taints(&n), [("node.kubernetes.io/unreachable".to_string(), "NoSchedule".to_string())]);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), "default");
    assert!(pods.get("p").await.expect("pod").metadata.deletion_timestamp.is_none(), "full disruption: no eviction");
    env.stop().await;
}

/// With kube-apiserver's default admission plugins, a new pod tolerates
/// `not-ready` and `unreachable` for 300 s (`DefaultTolerationSeconds`), so a
/// node going Unknown does not evict it at once.
#[tokio::test]
async fn pods_get_default_toleration_seconds_and_outlive_a_short_outage() {
    let admission = rkube_apiserver::admission::AdmissionArgs::default().load().expect("defaults");
    let config = rkube_apiserver::ServerConfig {
        admission: rkube_apiserver::admission::AdmissionConfig { service_account: false, ..admission },
        ..rkube_apiserver::ServerConfig::default()
    };
    let mut env = Env::start_with(&[], false, config).await;
    env.spawn(|ctx| nodelifecycle::run(ctx, OPTIONS));
    env.spawn(|ctx| nodelifecycle::run_taint_eviction(ctx, Duration::from_millis(200)));
    add_node(&env, "alive").await;
    add_node(&env, "silent").await;
    add_pod(&env, "p", "silent", serde_json::Value::Null).await;
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), "default");
    let pod = pods.get("p").await.expect("pod");
    let tolerations: Vec<(String, i64)> = pod
        .spec
        .unwrap()
        .tolerations
        .unwrap_or_default()
        .into_iter()
        .map(|t| (t.key.unwrap_or_default(), t.toleration_seconds.unwrap_or(-1)))
        .collect();
    assert_eq!(
        tolerations,
        [("node.kubernetes.io/not-ready".to_string(), 300), ("node.kubernetes.io/unreachable".to_string(), 300)]
    );
    let keep_alive = {
        let client = env.client.clone();
        tokio::spawn(async move {
            let leases: Api<Lease> = Api::namespaced(client, "kube-node-lease");
            loop {
                let lease = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "alive"},
                    "spec": {"holderIdentity": "alive", "renewTime": Timestamp::now().strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()}});
                let _ = leases.patch("alive", &PatchParams::apply("test-kubelet").force(), &Patch::Apply(&lease)).await;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
    };
    let nodes: Api<Node> = Api::all(env.client.clone());
    eventually("the silent node is tainted NoExecute", || async {
        let n = nodes.get("silent").await.ok()?;
        taints(&n).iter().any(|(_, e)| e == "NoExecute").then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(pods.get("p").await.expect("pod").metadata.deletion_timestamp.is_none(), "300 s are not over");
    keep_alive.abort();
    env.stop().await;
}
