//! Preemption against a real rkube API server: a pod no node fits evicts
//! pods of lower priority (upstream DefaultPreemption), is nominated to
//! their node, and is scheduled there once they are gone; a pod with
//! `preemptionPolicy: Never` waits instead.

use crate::common;

use common::{bound_node, create_node, create_pod, eventually, TestServer};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, ListParams};
use rkube_scheduler::cli::{start, StartOptions};
use serde_json::json;

async fn event_note(events: &Api<Event>, reason: &str, regarding: &str) -> String {
    eventually(20, &format!("a {reason} event for {regarding}"), || {
        let events = events.clone();
        async move {
            let list = events.list(&ListParams::default()).await.ok()?;
            list.items
                .into_iter()
                .find(|e| e.reason.as_deref() == Some(reason) && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(regarding))
                .and_then(|e| e.note)
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_higher_priority_pod_preempts_a_lower_one_and_takes_its_place() {
    let server = TestServer::start().await;
    let client = server.client();
    create_node(&client, "only", "2", json!({})).await;
    let sched = start(client.clone(), StartOptions::default()).await.expect("start");
    create_pod(&client, "low", "1500m", json!({"priority": 10})).await;
    assert_eq!(bound_node(&client, "low", 20).await, "only");
    create_pod(&client, "polite", "1500m", json!({"priority": 500, "preemptionPolicy": "Never"})).await;
    let urgent = create_pod(&client, "urgent", "1", json!({"priority": 1000})).await;

    // The victim: a DisruptionTarget condition, a Preempted event, a graceful delete.
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let victim = eventually(20, "low marked and terminating", || {
        let pods = pods.clone();
        async move {
            let p = pods.get("low").await.ok()?;
            p.metadata.deletion_timestamp.as_ref()?;
            Some(p)
        }
    })
    .await;
    let cond = victim.status.and_then(|s| s.conditions).unwrap_or_default().into_iter().find(|c| c.type_ == "DisruptionTarget").expect("condition");
    assert_eq!((cond.status.as_str(), cond.reason.as_deref()), ("True", Some("PreemptionByScheduler")));
    assert_eq!(cond.message.as_deref(), Some("default-scheduler: preempting to accommodate a higher priority pod"));
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let uid = urgent.metadata.uid.clone().unwrap_or_default();
    assert_eq!(event_note(&events, "Preempted", "low").await, format!("Preempted by pod {uid} on node only"));
    assert_eq!(event_note(&events, "FailedScheduling", "urgent").await, "0/1 nodes are available: 1 Insufficient cpu.");
    let nominated = eventually(20, "urgent nominated", || {
        let pods = pods.clone();
        async move { pods.get("urgent").await.ok()?.status?.nominated_node_name }
    })
    .await;
    assert_eq!(nominated, "only");
    // `polite` (preemptionPolicy Never) may not preempt, and says so.
    assert_eq!(
        event_note(&events, "FailedScheduling", "polite").await,
        "0/1 nodes are available: 1 Insufficient cpu. preemption: not eligible due to preemptionPolicy=Never."
    );

    // The kubelet would finish the victim; here it is removed at once.
    pods.delete("low", &DeleteParams { grace_period_seconds: Some(0), ..Default::default() }).await.expect("finish the victim");
    assert_eq!(bound_node(&client, "urgent", 20).await, "only");
    let polite: Pod = pods.get("polite").await.expect("polite");
    assert_eq!(polite.spec.and_then(|s| s.node_name), None, "the Never pod still waits: the node has room for only one of the two");
    sched.shutdown().await.expect("shutdown");
}
