//! `rkube scheduler` against a real rkube API server (in process, plain
//! HTTP): pods land on nodes that fit, unschedulable pods wait with
//! upstream's `FailedScheduling` event and `PodScheduled=False`, taints,
//! tolerations and node selectors steer pods.

use crate::common;

use std::time::Duration;

use common::{bound_node, create_node, create_pod, eventually, TestServer};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams};
use rkube_scheduler::cli::{start, StartOptions};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_bind_to_the_node_that_fits_and_back_to_back_pods_see_each_other() {
    let server = TestServer::start().await;
    let client = server.client();
    create_node(&client, "small", "1", json!({})).await;
    create_node(&client, "big", "4", json!({})).await;
    let sched = start(client.clone(), StartOptions::default())
        .await
        .expect("start");
    create_pod(&client, "needs-two", "2", json!({})).await;
    assert_eq!(bound_node(&client, "needs-two", 20).await, "big");
    // 1.5 cpu each: big has 2 left, small 1, so exactly one of them fits
    // (on big); the second must count the first, assumed, before its binding
    // is observed.
    for name in ["a", "b"] {
        create_pod(&client, name, "1500m", json!({})).await;
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let (placed, pending) = eventually(20, "one of a, b bound and the other unschedulable", || {
        let pods = pods.clone();
        async move {
            let mut bound = Vec::new();
            let mut refused = Vec::new();
            for name in ["a", "b"] {
                let p = pods.get(name).await.ok()?;
                if let Some(n) = p.spec.as_ref().and_then(|s| s.node_name.clone()) {
                    bound.push((name, n));
                }
                let cond = p.status.and_then(|s| s.conditions).unwrap_or_default();
                if cond
                    .iter()
                    .any(|c| c.type_ == "PodScheduled" && c.status == "False")
                {
                    refused.push(name);
                }
            }
            (bound.len() == 1 && refused.len() == 1).then(|| (bound.remove(0), refused[0]))
        }
    })
    .await;
    assert_eq!(placed.1, "big");
    assert_ne!(placed.0, pending);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let still: Pod = pods.get(pending).await.expect("get");
    assert_eq!(
        still.spec.and_then(|s| s.node_name),
        None,
        "{pending} stays pending"
    );
    sched.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unschedulable_pod_waits_with_failed_scheduling_and_binds_when_a_node_fits() {
    let server = TestServer::start().await;
    let client = server.client();
    create_node(&client, "small", "1", json!({})).await;
    let sched = start(client.clone(), StartOptions::default())
        .await
        .expect("start");
    create_pod(&client, "huge", "8", json!({})).await;
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let want = "0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod.";
    let ev = eventually(20, "FailedScheduling event", || {
        let events = events.clone();
        async move {
            let list = events.list(&ListParams::default()).await.ok()?;
            list.items
                .into_iter()
                .find(|e| e.reason.as_deref() == Some("FailedScheduling"))
        }
    })
    .await;
    assert_eq!(ev.note.as_deref(), Some(want));
    assert_eq!(ev.type_.as_deref(), Some("Warning"));
    assert_eq!(ev.action.as_deref(), Some("Scheduling"));
    assert_eq!(
        ev.reporting_controller.as_deref(),
        Some("default-scheduler")
    );
    assert_eq!(
        ev.regarding.as_ref().and_then(|r| r.name.as_deref()),
        Some("huge")
    );
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let cond = eventually(20, "PodScheduled=False", || {
        let pods = pods.clone();
        async move {
            let p = pods.get("huge").await.ok()?;
            p.status?
                .conditions?
                .into_iter()
                .find(|c| c.type_ == "PodScheduled")
        }
    })
    .await;
    assert_eq!(
        (
            cond.status.as_str(),
            cond.reason.as_deref(),
            cond.message.as_deref()
        ),
        ("False", Some("Unschedulable"), Some(want))
    );
    let still: Pod = pods.get("huge").await.expect("get");
    assert_eq!(still.spec.and_then(|s| s.node_name), None, "stays pending");
    // A node that fits appears: the pod is scheduled there.
    create_node(&client, "large", "16", json!({})).await;
    assert_eq!(bound_node(&client, "huge", 20).await, "large");
    let bound: Pod = pods.get("huge").await.expect("get");
    let cond = bound
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.type_ == "PodScheduled");
    assert_eq!(
        cond.map(|c| c.status),
        Some("True".to_string()),
        "the binding sets PodScheduled=True"
    );
    let scheduled = eventually(20, "Scheduled event", || {
        let events = events.clone();
        async move {
            let list = events.list(&ListParams::default()).await.ok()?;
            list.items
                .into_iter()
                .find(|e| e.reason.as_deref() == Some("Scheduled"))
        }
    })
    .await;
    assert_eq!(
        scheduled.note.as_deref(),
        Some("Successfully assigned default/huge to large")
    );
    assert_eq!(scheduled.type_.as_deref(), Some("Normal"));
    sched.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn taints_tolerations_and_node_selectors_steer_pods() {
    let server = TestServer::start().await;
    let client = server.client();
    let taint = json!({"spec": {"taints": [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]},
                       "metadata": {"labels": {"accelerator": "gpu"}}});
    create_node(&client, "gpu", "4", taint).await;
    create_node(&client, "plain", "1", json!({})).await;
    let sched = start(client.clone(), StartOptions::default())
        .await
        .expect("start");
    // Without a toleration the tainted (emptier) node is out.
    create_pod(&client, "plain-pod", "100m", json!({})).await;
    assert_eq!(bound_node(&client, "plain-pod", 20).await, "plain");
    // Tolerating and selecting the gpu node.
    let gpu = json!({"tolerations": [{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}],
                     "nodeSelector": {"accelerator": "gpu"}});
    create_pod(&client, "gpu-pod", "100m", gpu).await;
    assert_eq!(bound_node(&client, "gpu-pod", 20).await, "gpu");
    // Selecting the gpu node without tolerating it: nowhere.
    create_pod(
        &client,
        "stuck",
        "100m",
        json!({"nodeSelector": {"accelerator": "gpu"}}),
    )
    .await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let msg = eventually(20, "stuck pod condition", || {
        let pods = pods.clone();
        async move {
            let p = pods.get("stuck").await.ok()?;
            p.status?
                .conditions?
                .into_iter()
                .find(|c| c.type_ == "PodScheduled")?
                .message
        }
    })
    .await;
    assert_eq!(
        msg,
        "0/2 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, 1 node(s) had untolerated taint {dedicated: gpu}. \
         preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    sched.shutdown().await.expect("shutdown");
}

/// A burst of pods is placed from reused snapshots, each pod placed counted in the next one's:
/// 20 pods of one cpu on four nodes of four cpus fill every node exactly and leave four pending,
/// none over any node's capacity.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_pods_fills_nodes_exactly_without_overcommitting_any() {
    let server = TestServer::start().await;
    let client = server.client();
    for n in ["n1", "n2", "n3", "n4"] {
        create_node(&client, n, "4", json!({})).await;
    }
    let sched = start(client.clone(), StartOptions::default())
        .await
        .expect("start");
    for i in 0..20 {
        create_pod(&client, &format!("p{i:02}"), "1", json!({})).await;
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let per_node = eventually(30, "16 pods bound and 4 refused", || {
        let pods = pods.clone();
        async move {
            let list = pods.list(&ListParams::default()).await.ok()?;
            let mut per_node = std::collections::BTreeMap::<String, usize>::new();
            let mut refused = 0;
            for p in &list.items {
                if let Some(n) = p.spec.as_ref().and_then(|s| s.node_name.clone()) {
                    *per_node.entry(n).or_default() += 1;
                }
                let conds = p
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.clone())
                    .unwrap_or_default();
                if conds
                    .iter()
                    .any(|c| c.type_ == "PodScheduled" && c.status == "False")
                {
                    refused += 1;
                }
            }
            (per_node.values().sum::<usize>() == 16 && refused == 4).then_some(per_node)
        }
    })
    .await;
    assert_eq!(
        per_node.values().copied().collect::<Vec<_>>(),
        [4, 4, 4, 4],
        "{per_node:?}"
    );
    sched.shutdown().await.expect("shutdown");
}
