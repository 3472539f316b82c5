//! The DaemonSet controller against a real rkube API server: one pod per
//! fitting node, following nodes as they come, change and go, and rolling
//! updates, as a client sees them.

use crate::workload_support as common;

use std::collections::BTreeMap;

use common::{eventually, Env};
use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::ResourceExt;
use serde_json::json;

fn daemon_set(name: &str) -> DaemonSet {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}},
                              "spec": {"nodeSelector": {"role": "worker"},
                                       "containers": [{"name": "c", "image": "busybox", "command": ["sleep", "3600"]}]}}},
    }))
    .expect("daemon set")
}

async fn add_node(env: &Env, name: &str, labels: serde_json::Value, taints: serde_json::Value) {
    let api: Api<Node> = Api::all(env.client.clone());
    let node = serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}, "spec": {"taints": taints}})).expect("node");
    api.create(&PostParams::default(), &node).await.expect("create node");
}

/// Live pods of `app` by the node their affinity pins them to.
async fn pods_by_node(env: &Env, ns: &str, app: &str) -> BTreeMap<String, Vec<Pod>> {
    let mut out: BTreeMap<String, Vec<Pod>> = BTreeMap::new();
    for p in env.live_pods(ns, app).await {
        let v = serde_json::to_value(&p.spec).unwrap_or_default();
        let term = &v["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0];
        let node = term["matchFields"][0]["values"][0].as_str().unwrap_or("").to_string();
        out.entry(node).or_default().push(p);
    }
    out
}

fn node_names(m: &BTreeMap<String, Vec<Pod>>) -> Vec<String> {
    m.keys().cloned().collect()
}

#[tokio::test]
async fn one_pod_per_fitting_node_pinned_by_affinity_with_daemon_tolerations() {
    let env = Env::start(&["daemonset"], true).await;
    env.namespace("ds1").await;
    add_node(&env, "n1", json!({"role": "worker"}), json!([])).await;
    add_node(&env, "n2", json!({"role": "worker"}), json!([{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}])).await;
    add_node(&env, "n3", json!({"role": "worker"}), json!([{"key": "dedicated", "value": "db", "effect": "NoSchedule"}])).await;
    add_node(&env, "n4", json!({"role": "control-plane"}), json!([])).await;
    let api: Api<DaemonSet> = Api::namespaced(env.client.clone(), "ds1");
    api.create(&PostParams::default(), &daemon_set("agent")).await.expect("create");
    let status = eventually("2 available", || async {
        api.get("agent").await.ok()?.status.filter(|s| s.number_available == Some(2) && s.updated_number_scheduled == Some(2))
    })
    .await;
    assert_eq!(
        (status.desired_number_scheduled, status.current_number_scheduled, status.number_misscheduled, status.number_ready),
        (2, 2, 0, 2)
    );
    assert_eq!(status.number_unavailable.unwrap_or(0), 0);
    assert_eq!(status.observed_generation, Some(1));
    let pods = pods_by_node(&env, "ds1", "agent").await;
    assert_eq!(node_names(&pods), ["n1", "n2"]);
    let pod = &pods["n1"][0];
    assert!(pod.name_any().starts_with("agent-"), "{}", pod.name_any());
    assert_eq!(pod.owner_references()[0].kind, "DaemonSet");
    let tolerations = pod.spec.as_ref().and_then(|s| s.tolerations.clone()).unwrap_or_default();
    let keys: Vec<String> = tolerations.iter().filter_map(|t| t.key.clone()).collect();
    for k in ["node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable", "node.kubernetes.io/unschedulable"] {
        assert!(keys.iter().any(|x| x == k), "{keys:?}");
    }
    let revs: Api<ControllerRevision> = Api::namespaced(env.client.clone(), "ds1");
    let list = revs.list(&ListParams::default()).await.expect("revisions").items;
    assert_eq!(list.len(), 1);
    let hash = list[0].labels().get("controller.kubernetes.io/hash").cloned();
    assert_eq!(pod.labels().get("controller-revision-hash"), hash.as_ref());
    assert_eq!(pod.labels().get("pod-template-generation").map(String::as_str), Some("1"));
    assert_eq!(list[0].name_any(), format!("agent-{}", hash.unwrap_or_default()));
    let events: Api<Event> = Api::namespaced(env.client.clone(), "ds1");
    let notes: Vec<String> = events.list(&ListParams::default()).await.expect("events").items.into_iter().filter_map(|e| e.note).collect();
    assert!(notes.iter().any(|n| n.starts_with("Created pod: agent-")), "{notes:?}");
    env.stop().await;
}

#[tokio::test]
async fn daemon_pods_follow_nodes_that_join_change_and_leave() {
    let env = Env::start(&["daemonset"], true).await;
    env.namespace("ds2").await;
    add_node(&env, "n1", json!({"role": "worker"}), json!([])).await;
    let api: Api<DaemonSet> = Api::namespaced(env.client.clone(), "ds2");
    api.create(&PostParams::default(), &daemon_set("agent")).await.expect("create");
    eventually("pod on n1", || async { Some(pods_by_node(&env, "ds2", "agent").await).filter(|m| node_names(m) == ["n1"]) }).await;
    add_node(&env, "n2", json!({"role": "worker"}), json!([])).await;
    eventually("pods on n1 and n2", || async { Some(pods_by_node(&env, "ds2", "agent").await).filter(|m| node_names(m) == ["n1", "n2"]) }).await;
    let nodes: Api<Node> = Api::all(env.client.clone());
    nodes.patch("n1", &PatchParams::default(), &Patch::Merge(&json!({"metadata": {"labels": {"role": "db"}}}))).await.expect("relabel");
    eventually("pod left n1", || async { Some(pods_by_node(&env, "ds2", "agent").await).filter(|m| node_names(m) == ["n2"]) }).await;
    nodes.delete("n2", &DeleteParams::default()).await.expect("delete node");
    eventually("no pods", || async { Some(pods_by_node(&env, "ds2", "agent").await).filter(|m| m.is_empty()) }).await;
    let s = eventually("status 0 desired", || async {
        api.get("agent").await.ok()?.status.filter(|s| s.desired_number_scheduled == 0 && s.current_number_scheduled == 0)
    })
    .await;
    assert_eq!(s.number_misscheduled, 0);
    env.stop().await;
}

#[tokio::test]
async fn rolling_update_replaces_every_daemon_pod_and_keeps_the_history() {
    let env = Env::start(&["daemonset"], true).await;
    env.namespace("ds3").await;
    for n in ["n1", "n2", "n3"] {
        add_node(&env, n, json!({"role": "worker"}), json!([])).await;
    }
    let api: Api<DaemonSet> = Api::namespaced(env.client.clone(), "ds3");
    api.create(&PostParams::default(), &daemon_set("agent")).await.expect("create");
    eventually("3 available", || async { api.get("agent").await.ok()?.status.filter(|s| s.number_available == Some(3)) }).await;
    let before: Vec<String> = env.live_pods("ds3", "agent").await.iter().map(|p| p.name_any()).collect();
    let patch = json!({"spec": {"template": {"metadata": {"annotations": {"rev": "2"}}}}});
    api.patch("agent", &PatchParams::default(), &Patch::Merge(&patch)).await.expect("update");
    let s = eventually("rolled out", || async {
        let ds = api.get("agent").await.ok()?;
        let s = ds.status?;
        (s.observed_generation == Some(2) && s.updated_number_scheduled == Some(3) && s.number_available == Some(3)).then_some(s)
    })
    .await;
    assert_eq!(s.desired_number_scheduled, 3);
    let after = env.live_pods("ds3", "agent").await;
    assert_eq!(after.len(), 3);
    for p in &after {
        assert!(!before.contains(&p.name_any()), "{} survived the update", p.name_any());
        assert_eq!(p.annotations().get("rev").map(String::as_str), Some("2"));
        assert_eq!(p.labels().get("pod-template-generation").map(String::as_str), Some("2"));
    }
    let revs: Api<ControllerRevision> = Api::namespaced(env.client.clone(), "ds3");
    let mut list = revs.list(&ListParams::default()).await.expect("revisions").items;
    list.sort_by_key(|r| r.revision);
    assert_eq!(list.iter().map(|r| r.revision).collect::<Vec<_>>(), [1, 2]);
    env.stop().await;
}
