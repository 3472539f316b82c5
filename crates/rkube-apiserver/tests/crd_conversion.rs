//! CRD conversion webhooks (`spec.conversion.strategy: Webhook`) through
//! the HTTP API of a real in-process server, calling a real HTTPS webhook
//! started by each test (rustls, its own CA: [`webhook_support`]). The CRD
//! stores `v1` (`spec.size`) and serves `v2` too, where the webhook renames
//! the field to `spec.dimension`.
//!
//! Every test uses its own API group: the resource table is process-global.

use crate::common;
use crate::webhook_support;

use std::time::Duration;

use common::TestServer;
use serde_json::{json, Value};
use webhook_support::{WebhookServer, CONVERTED_LABEL};

const CRDS: &str = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";

/// A Widget CRD: `v1` (storage, `spec.size`) and `v2` (`spec.dimension`),
/// converted by the webhook at `client_config` speaking `review_versions`.
fn crd(group: &str, client_config: Value, review_versions: Value) -> Value {
    let schema = |field: &str| {
        json!({"openAPIV3Schema": {"type": "object", "properties": {
            "spec": {"type": "object", "properties": {field: {"type": "string"}}}}}})
    };
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("widgets.{group}")},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": "widgets", "kind": "Widget"},
            "versions": [
                {"name": "v1", "served": true, "storage": true, "schema": schema("size")},
                {"name": "v2", "served": true, "storage": false, "schema": schema("dimension")},
            ],
            "conversion": {"strategy": "Webhook", "webhook": {"clientConfig": client_config, "conversionReviewVersions": review_versions}},
        }
    })
}

fn widget(group: &str, version: &str, name: &str, spec: Value) -> Value {
    json!({"apiVersion": format!("{group}/{version}"), "kind": "Widget", "metadata": {"name": name}, "spec": spec})
}

fn path(group: &str, version: &str) -> String {
    format!("/apis/{group}/{version}/namespaces/default/widgets")
}

/// Creates the CRD (answered without a Warning) and waits until its custom
/// resources are served (5 s at most).
async fn install(s: &TestServer, crd: &Value) {
    let r = s.post(CRDS, crd).await;
    assert_eq!(r.code, 201, "{}", r.text);
    assert!(r.headers.get("warning").is_none(), "a Webhook CRD is served as it says: {:?}", r.headers.get("warning"));
    let group = crd["spec"]["group"].as_str().unwrap_or("");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while s.get(&path(group, "v1")).await.code != 200 {
        assert!(tokio::time::Instant::now() < deadline, "custom resources not served within 5 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The ConversionReviews the webhook received on `path`.
fn reviews(server: &WebhookServer, path: &str) -> Vec<Value> {
    server.requests(path)
}

/// Objects written in `v2` are stored in `v1` through the webhook; reads,
/// LISTs and WATCHes in `v2` show the webhook's field, one review per LIST
/// (the objects not in `v2` yet, batched), none when the version already
/// matches; the webhook's labels are kept and the rest of its metadata is not.
#[tokio::test]
async fn the_webhook_converts_writes_reads_lists_and_watches() {
    let s = TestServer::embedded().await;
    let hook = WebhookServer::start(&[]);
    let g = "convhook.example.com";
    install(&s, &crd(g, json!({"url": hook.url("/convert"), "caBundle": hook.ca_bundle()}), json!(["v1", "v1beta1"]))).await;
    let (p1, p2) = (path(g, "v1"), path(g, "v2"));

    let r = s.post(&p2, &widget(g, "v2", "a", json!({"dimension": "large"}))).await;
    assert_eq!(r.code, 201, "{}", r.text);
    let sent = reviews(&hook, "/convert");
    assert_eq!(sent.len(), 1, "the write is converted to the storage version once: {sent:?}");
    let review = &sent[0];
    assert_eq!(review["apiVersion"], "apiextensions.k8s.io/v1");
    assert_eq!(review["kind"], "ConversionReview");
    assert_eq!(review["request"]["desiredAPIVersion"], format!("{g}/v1"));
    assert!(review["request"]["uid"].as_str().is_some_and(|u| !u.is_empty()), "{review}");
    assert_eq!(review["request"]["objects"][0]["spec"], json!({"dimension": "large"}));

    let v1 = s.get(&format!("{p1}/a")).await;
    assert_eq!(v1.code, 200, "{}", v1.text);
    assert_eq!(v1.body["apiVersion"], format!("{g}/v1"));
    assert_eq!(v1.body["spec"], json!({"size": "large"}), "stored by the webhook as v1: {}", v1.text);
    assert_eq!(v1.body["metadata"]["labels"][CONVERTED_LABEL], "v1", "the webhook's labels are kept");
    assert_ne!(v1.body["metadata"]["generation"], 1000, "metadata but labels and annotations is the API server's");
    assert_eq!(reviews(&hook, "/convert").len(), 1, "reading the storage version calls no webhook");

    let v2 = s.get(&format!("{p2}/a")).await;
    assert_eq!(v2.code, 200, "{}", v2.text);
    assert_eq!((v2.body["apiVersion"].as_str(), &v2.body["spec"]), (Some(format!("{g}/v2").as_str()), &json!({"dimension": "large"})));
    assert_eq!(v2.body["metadata"]["labels"][CONVERTED_LABEL], "v2");
    assert_eq!(v2.body["metadata"]["uid"], v1.body["metadata"]["uid"]);
    assert_eq!(v2.body["metadata"]["resourceVersion"], v1.body["metadata"]["resourceVersion"]);

    // A second object, written in v1 (no conversion), then a LIST in v2: one review of both.
    assert_eq!(s.post(&p1, &widget(g, "v1", "b", json!({"size": "small"}))).await.code, 201);
    let before = reviews(&hook, "/convert").len();
    assert_eq!(before, 2, "one review per read in another version so far");
    let list = s.get(&p2).await;
    assert_eq!(list.code, 200, "{}", list.text);
    assert_eq!(list.body["apiVersion"], format!("{g}/v2"));
    let specs: Vec<&Value> = list.body["items"].as_array().into_iter().flatten().map(|i| &i["spec"]).collect();
    assert_eq!(specs, [&json!({"dimension": "large"}), &json!({"dimension": "small"})], "{}", list.text);
    let sent = reviews(&hook, "/convert");
    assert_eq!(sent.len(), before + 1, "a LIST is converted in one review");
    assert_eq!(sent[before]["request"]["objects"].as_array().map(Vec::len), Some(2));
    assert_eq!(sent[before]["request"]["desiredAPIVersion"], format!("{g}/v2"));

    // A WATCH in v2 sees a change made in v1 in v2.
    let rv = list.rv();
    let mut watch = s.watch(&format!("{p2}?watch=true&resourceVersion={rv}")).await;
    assert_eq!(watch.code, 200);
    let mut b = s.get(&format!("{p1}/b")).await.body;
    b["spec"]["size"] = json!("large");
    let r = s.put(&format!("{p1}/b"), &b).await;
    assert_eq!(r.code, 200, "{}", r.text);
    let ev = watch.next().await;
    assert_eq!(ev["type"], "MODIFIED", "{ev}");
    assert_eq!((ev["object"]["apiVersion"].as_str(), &ev["object"]["spec"]), (Some(format!("{g}/v2").as_str()), &json!({"dimension": "large"})));
}

/// A conversion webhook nobody answers: objects in the storage version are
/// still written and read, any other version is a 500 `InternalError`
/// naming the webhook failure, for GET, LIST and writes.
#[tokio::test]
async fn a_webhook_that_is_down_is_a_500_naming_the_failure() {
    let s = TestServer::embedded().await;
    let hook = WebhookServer::start(&[]);
    let port = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).unwrap_or(1);
    let url = format!("https://127.0.0.1:{port}/convert");
    let g = "convdown.example.com";
    install(&s, &crd(g, json!({"url": url, "caBundle": hook.ca_bundle()}), json!(["v1"]))).await;
    let (p1, p2) = (path(g, "v1"), path(g, "v2"));
    let r = s.post(&p1, &widget(g, "v1", "a", json!({"size": "small"}))).await;
    assert_eq!(r.code, 201, "{}", r.text);
    assert_eq!(s.get(&format!("{p1}/a")).await.code, 200);

    let r = s.get(&format!("{p2}/a")).await;
    r.assert_status(500, "InternalError");
    let expected = format!("Internal error occurred: conversion webhook for {g}/v1, Kind=Widget failed: Post \"{url}?timeout=30s\": ");
    assert!(r.message().starts_with(&expected), "{}", r.message());
    let r = s.get(&p2).await;
    r.assert_status(500, "InternalError");
    assert!(r.message().starts_with(&format!("Internal error occurred: conversion webhook for {g}/v1, Kind=WidgetList failed: ")), "{}", r.message());
    let r = s.post(&p2, &widget(g, "v2", "b", json!({"dimension": "small"}))).await;
    r.assert_status(500, "InternalError");
    assert!(r.message().starts_with(&format!("Internal error occurred: conversion webhook for {g}/v2, Kind=Widget failed: ")), "{}", r.message());
    assert_eq!(s.get(&format!("{p1}/b")).await.code, 404, "nothing stored when the conversion failed");
}

/// Answers that are not a conversion of what was sent are errors: another
/// uid, fewer objects, a `Failure` result (its message). `v1beta1` reviews
/// are sent when the CRD lists no version rkube knows before it.
#[tokio::test]
async fn wrong_answers_from_the_webhook_are_errors() {
    let s = TestServer::embedded().await;
    let hook = WebhookServer::start(&[]);
    let cases = [
        ("convuid.example.com", "/convert-wrong-uid", json!(["v1"]), "failed: expected response.uid="),
        ("convdrop.example.com", "/convert-drop", json!(["v1"]), "returned 0 objects, expected 1"),
        ("convfail.example.com", "/convert-fail", json!(["v9", "v1beta1"]), "failed: cannot convert"),
    ];
    for (g, hook_path, versions, why) in cases {
        install(&s, &crd(g, json!({"url": hook.url(hook_path), "caBundle": hook.ca_bundle()}), versions)).await;
        let r = s.post(&path(g, "v1"), &widget(g, "v1", "a", json!({"size": "small"}))).await;
        assert_eq!(r.code, 201, "{}", r.text);
        let r = s.get(&format!("{}/a", path(g, "v2"))).await;
        r.assert_status(500, "InternalError");
        let expected = format!("Internal error occurred: conversion webhook for {g}/v1, Kind=Widget {why}");
        assert!(r.message().starts_with(&expected), "{hook_path}: {}", r.message());
    }
    let sent = reviews(&hook, "/convert-fail");
    assert_eq!(sent.first().map(|r| r["apiVersion"].clone()), Some(json!("apiextensions.k8s.io/v1beta1")), "{sent:?}");
}
