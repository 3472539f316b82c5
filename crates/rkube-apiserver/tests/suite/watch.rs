//! WATCH semantics over HTTP, run against every backend.

use serde_json::json;

use crate::common::{configmap, TestServer};

const CMS: &str = "/api/v1/namespaces/default/configmaps";

pub async fn watch_from_resource_version_streams_later_changes(s: &TestServer) {
    let list = s.get(CMS).await;
    let mut w = s.watch(&format!("{CMS}?watch=true&resourceVersion={}", list.rv())).await;
    assert_eq!(w.code, 200);
    assert_eq!(w.headers["content-type"], "application/json");
    let created = s.post(CMS, &configmap("w")).await;
    let e = w.next().await;
    assert_eq!(e["type"], "ADDED");
    assert_eq!(e["object"]["metadata"]["name"], "w");
    assert_eq!(e["object"]["metadata"]["resourceVersion"], created.body["metadata"]["resourceVersion"]);
    s.patch(&format!("{CMS}/w"), "application/merge-patch+json", r#"{"data":{"k":"2"}}"#).await;
    let e = w.next().await;
    assert_eq!(e["type"], "MODIFIED");
    assert_eq!(e["object"]["data"]["k"], "2");
    let d = s.delete(&format!("{CMS}/w"), None).await;
    assert_eq!(d.code, 200);
    let e = w.next().await;
    assert_eq!(e["type"], "DELETED");
    assert_eq!(e["object"]["metadata"]["name"], "w");
    let rv: i64 = e["object"]["metadata"]["resourceVersion"].as_str().unwrap().parse().unwrap();
    assert!(rv > created.rv().parse::<i64>().unwrap());
}

pub async fn watch_at_zero_sends_synthetic_added_first(s: &TestServer) {
    s.post(CMS, &configmap("pre-1")).await;
    s.post(CMS, &configmap("pre-2")).await;
    let mut w = s.watch(&format!("{CMS}?watch=true&resourceVersion=0")).await;
    let a = w.next().await;
    let b = w.next().await;
    assert_eq!((a["type"].as_str(), b["type"].as_str()), (Some("ADDED"), Some("ADDED")));
    assert_eq!(a["object"]["metadata"]["name"], "pre-1");
    assert_eq!(b["object"]["metadata"]["name"], "pre-2");
    s.post(CMS, &configmap("post")).await;
    let c = w.next().await;
    assert_eq!(c["type"], "ADDED");
    assert_eq!(c["object"]["metadata"]["name"], "post");
}

pub async fn watch_one_object_by_name_like_kubectl_get_w(s: &TestServer) {
    s.post(CMS, &configmap("mine")).await;
    s.post(CMS, &configmap("other")).await;
    let mut w = s.watch(&format!("{CMS}?fieldSelector=metadata.name%3Dmine&resourceVersion=0&watch=true")).await;
    let e = w.next().await;
    assert_eq!(e["object"]["metadata"]["name"], "mine");
    s.patch(&format!("{CMS}/other"), "application/merge-patch+json", r#"{"data":{"z":"1"}}"#).await;
    s.patch(&format!("{CMS}/mine"), "application/merge-patch+json", r#"{"data":{"z":"1"}}"#).await;
    let e = w.next().await;
    assert_eq!(e["type"], "MODIFIED");
    assert_eq!(e["object"]["metadata"]["name"], "mine");
}

pub async fn watch_selector_turns_unmatching_into_deleted_and_matching_into_added(s: &TestServer) {
    let mut cm = configmap("flip");
    cm["metadata"]["labels"] = json!({"tier": "front"});
    let c = s.post(CMS, &cm).await;
    let mut w = s.watch(&format!("{CMS}?watch=true&labelSelector=tier%3Dfront&resourceVersion={}", c.rv())).await;
    s.patch(&format!("{CMS}/flip"), "application/merge-patch+json", r#"{"metadata":{"labels":{"tier":"back"}}}"#).await;
    let e = w.next().await;
    assert_eq!(e["type"], "DELETED");
    assert_eq!(e["object"]["metadata"]["labels"]["tier"], "front", "the last matching state");
    s.patch(&format!("{CMS}/flip"), "application/merge-patch+json", r#"{"metadata":{"labels":{"tier":"front"}}}"#)
        .await;
    let e = w.next().await;
    assert_eq!(e["type"], "ADDED");
    assert_eq!(e["object"]["metadata"]["labels"]["tier"], "front");
}

pub async fn watch_timeout_seconds_ends_the_stream(s: &TestServer) {
    let mut w = s.watch(&format!("{CMS}?watch=true&timeoutSeconds=1")).await;
    assert_eq!(w.code, 200);
    assert!(w.ended_within(5).await, "stream ended after timeoutSeconds");
}

pub async fn watch_from_compacted_revision_gets_410_error_event(s: &TestServer) {
    let a = s.post(CMS, &configmap("c1")).await;
    s.post(CMS, &configmap("c2")).await;
    s.post(CMS, &configmap("c3")).await;
    let current = s.storage.current_revision().await.unwrap();
    s.storage.compact(current).await.unwrap();
    let old: i64 = a.rv().parse().unwrap();
    let mut w = s.watch(&format!("{CMS}?watch=true&resourceVersion={}", old - 1)).await;
    assert_eq!(w.code, 200);
    let e = w.next().await;
    assert_eq!(e["type"], "ERROR");
    assert_eq!(e["object"]["kind"], "Status");
    assert_eq!(e["object"]["code"], 410);
    assert_eq!(e["object"]["reason"], "Expired");
}

pub async fn watch_list_ends_initial_events_with_annotated_bookmark(s: &TestServer) {
    s.post(CMS, &configmap("init")).await;
    let mut w = s
        .watch(&format!(
            "{CMS}?watch=true&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan"
        ))
        .await;
    assert_eq!(w.code, 200);
    let a = w.next().await;
    assert_eq!(a["type"], "ADDED");
    let b = w.next().await;
    assert_eq!(b["type"], "BOOKMARK");
    assert_eq!(b["object"]["kind"], "ConfigMap");
    assert_eq!(b["object"]["apiVersion"], "v1");
    assert_eq!(b["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"], "true");
    assert!(b["object"]["metadata"]["resourceVersion"].as_str().unwrap().parse::<i64>().unwrap() > 0);
}

pub async fn legacy_watch_path_streams_events(s: &TestServer) {
    let list = s.get(CMS).await;
    let mut w = s.watch(&format!("/api/v1/watch/namespaces/default/configmaps?resourceVersion={}", list.rv())).await;
    assert_eq!(w.code, 200);
    s.post(CMS, &configmap("legacy")).await;
    assert_eq!(w.next().await["type"], "ADDED");
}

pub async fn watch_all_namespaces_sees_every_namespace(s: &TestServer) {
    s.namespace("ns2").await;
    let list = s.get("/api/v1/configmaps").await;
    let mut w = s.watch(&format!("/api/v1/configmaps?watch=true&resourceVersion={}", list.rv())).await;
    s.post(CMS, &configmap("one")).await;
    s.post("/api/v1/namespaces/ns2/configmaps", &configmap("two")).await;
    let a = w.next().await;
    let b = w.next().await;
    assert_eq!(a["object"]["metadata"]["namespace"], "default");
    assert_eq!(b["object"]["metadata"]["namespace"], "ns2");
}
