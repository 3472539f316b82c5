//! core/v1 Event validation (upstream `ValidateEventCreate` and
//! `ValidateEventUpdate` for request version v1: `legacyValidateEvent`
//! only), sharing its rules with events.k8s.io/v1.

use serde_json::{json, Value};

use crate::common::TestServer;

const EVENTS: &str = "/api/v1/namespaces/default/events";

/// An old-style event (no `eventTime`) about a pod in `default`.
fn old_style(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": name},
        "involvedObject": {"kind": "Pod", "name": "p", "namespace": "default"},
        "reason": "Started", "message": "started", "type": "Normal", "source": {"component": "kubelet"}})
}

/// A new-style event (`eventTime` set) with every field it needs.
fn new_style(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": name},
        "involvedObject": {"kind": "Pod", "name": "p", "namespace": "default"},
        "eventTime": "2024-05-01T12:00:00.000000Z", "reportingComponent": "example.com/ctl",
        "reportingInstance": "ctl-1", "action": "Start", "reason": "Started", "type": "Normal"})
}

#[tokio::test]
async fn old_style_events_name_their_own_namespace_or_none_in_default() {
    let s = TestServer::embedded().await;
    assert_eq!(s.post(EVENTS, &old_style("ok")).await.code, 201);
    let mut node_event = old_style("node");
    node_event["involvedObject"] = json!({"kind": "Node", "name": "n1"});
    assert_eq!(s.post(EVENTS, &node_event).await.code, 201);

    let mut other = old_style("other");
    other["involvedObject"]["namespace"] = json!("elsewhere");
    let r = s.post(EVENTS, &other).await;
    r.assert_status(422, "Invalid");
    assert_eq!(r.message(), "Event \"other\" is invalid: involvedObject.namespace: Invalid value: \"elsewhere\": does not match event.namespace");

    s.namespace("ns1").await;
    let r = s.post("/api/v1/namespaces/ns1/events", &node_event).await;
    r.assert_status(422, "Invalid");
    assert_eq!(r.message(), "Event \"node\" is invalid: involvedObject.namespace: Invalid value: \"\": does not match event.namespace");
}

#[tokio::test]
async fn new_style_core_events_need_their_reporting_fields() {
    let s = TestServer::embedded().await;
    assert_eq!(s.post(EVENTS, &new_style("ok")).await.code, 201);
    let mut bare = new_style("bare");
    for key in ["reportingInstance", "action", "reason"] {
        bare.as_object_mut().map(|m| m.remove(key));
    }
    let r = s.post(EVENTS, &bare).await;
    r.assert_status(422, "Invalid");
    assert_eq!(
        r.message(),
        "Event \"bare\" is invalid: [reportingInstance: Required value, action: Required value, reason: Required value]"
    );
    let mut no_component = new_style("nc");
    no_component["reportingComponent"] = json!("");
    let r = s.post(EVENTS, &no_component).await;
    r.assert_status(422, "Invalid");
    assert_eq!(r.body["details"]["causes"][0]["field"], "reportingComponent");
    assert_eq!(r.body["details"]["causes"][0]["reason"], "FieldValueRequired");
}

#[tokio::test]
async fn new_style_core_event_fields_have_upstreams_length_limits() {
    let s = TestServer::embedded().await;
    let mut long = new_style("long");
    long["reason"] = json!("r".repeat(129));
    long["message"] = json!("m".repeat(1025));
    let r = s.post(EVENTS, &long).await;
    r.assert_status(422, "Invalid");
    assert_eq!(
        r.message(),
        "Event \"long\" is invalid: [reason: Invalid value: \"\": can have at most 128 characters, message: Invalid value: \"\": can have at most 1024 characters]"
    );
}

#[tokio::test]
async fn core_event_updates_pass_the_same_rules() {
    let s = TestServer::embedded().await;
    let created = s.post(EVENTS, &old_style("e")).await;
    assert_eq!(created.code, 201, "{}", created.text);
    let mut e = created.body;
    e["count"] = json!(2);
    assert_eq!(s.put(&format!("{EVENTS}/e"), &e).await.code, 200);
    let mut moved = s.get(&format!("{EVENTS}/e")).await.body;
    moved["involvedObject"]["namespace"] = json!("elsewhere");
    let r = s.put(&format!("{EVENTS}/e"), &moved).await;
    r.assert_status(422, "Invalid");
    assert_eq!(r.message(), "Event \"e\" is invalid: involvedObject.namespace: Invalid value: \"elsewhere\": does not match event.namespace");
}
