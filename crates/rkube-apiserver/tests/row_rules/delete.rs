//! What a DELETE answers, from the row (upstream 1.33 `ReturnDeletedObject`
//! of each `pkg/registry/*/storage`, `Store.Delete` and `handlers/delete.go`):
//! a removed object of a row that returns deleted objects comes back
//! itself, any other removed object as a `Success` Status naming it; an
//! object that was only marked (finalizers, graceful deletion, namespace
//! lifecycle) comes back itself with 200, or 202 when the request said
//! `orphanDependents: false`.

use serde_json::{json, Value};

use crate::common::{configmap, pod, TestServer};

const NS: &str = "/api/v1/namespaces/default";

fn deployment(name: &str) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
        "spec": {"selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}})
}

/// Asserts `r` is upstream's `Success` Status for the removed `name` of `resource` in `group`.
fn assert_success_status(r: &crate::common::Resp, group: &str, resource: &str, name: &str, uid: &Value) {
    assert_eq!(r.code, 200, "{}", r.text);
    assert_eq!(r.body["kind"], "Status", "{}", r.text);
    assert_eq!(r.body["status"], "Success");
    assert_eq!(r.body["details"]["name"], name);
    assert_eq!(r.body["details"]["kind"], resource);
    assert_eq!(r.body["details"]["group"].as_str().unwrap_or(""), group);
    assert_eq!(&r.body["details"]["uid"], uid);
}

#[tokio::test]
async fn rows_that_return_deleted_objects_answer_the_object_and_others_a_success_status() {
    let s = TestServer::embedded().await;
    // Upstream ReturnDeletedObject: true (pods, serviceaccounts, ...).
    assert_eq!(s.post(&format!("{NS}/pods"), &pod("p")).await.code, 201);
    let r = s.delete(&format!("{NS}/pods/p"), None).await;
    assert_eq!((r.code, r.body["kind"].as_str()), (200, Some("Pod")), "{}", r.text);
    let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "sa"}});
    assert_eq!(s.post(&format!("{NS}/serviceaccounts"), &sa).await.code, 201);
    let r = s.delete(&format!("{NS}/serviceaccounts/sa"), None).await;
    assert_eq!((r.code, r.body["kind"].as_str()), (200, Some("ServiceAccount")), "{}", r.text);

    // Everything else: a Success Status (configmaps; deployments too).
    let cm = s.post(&format!("{NS}/configmaps"), &configmap("cm")).await;
    let r = s.delete(&format!("{NS}/configmaps/cm"), None).await;
    assert_success_status(&r, "", "configmaps", "cm", &cm.body["metadata"]["uid"]);
    let d = s.post("/apis/apps/v1/namespaces/default/deployments", &deployment("d")).await;
    assert_eq!(d.code, 201, "{}", d.text);
    let r = s.delete("/apis/apps/v1/namespaces/default/deployments/d", None).await;
    assert_success_status(&r, "apps", "deployments", "d", &d.body["metadata"]["uid"]);
}

#[tokio::test]
async fn a_delete_that_only_marks_the_object_answers_it_with_200() {
    let s = TestServer::embedded().await;
    let mut cm = configmap("held");
    cm["metadata"]["finalizers"] = json!(["example.com/hold"]);
    assert_eq!(s.post(&format!("{NS}/configmaps"), &cm).await.code, 201);
    let r = s.delete(&format!("{NS}/configmaps/held"), None).await;
    assert_eq!(r.code, 200, "{}", r.text);
    assert_eq!(r.body["kind"], "ConfigMap");
    assert!(r.body["metadata"]["deletionTimestamp"].is_string(), "{}", r.text);
}

#[tokio::test]
async fn orphan_dependents_false_answers_202_while_the_object_stays() {
    let s = TestServer::embedded().await;
    let mut cm = configmap("held");
    cm["metadata"]["finalizers"] = json!(["example.com/hold"]);
    assert_eq!(s.post(&format!("{NS}/configmaps"), &cm).await.code, 201);
    let opts = json!({"kind": "DeleteOptions", "apiVersion": "v1", "orphanDependents": false});
    let r = s.delete(&format!("{NS}/configmaps/held"), Some(&opts)).await;
    assert_eq!(r.code, 202, "{}", r.text);
    assert_eq!(r.body["kind"], "ConfigMap");
    // A removed object answers 200 whatever orphanDependents says.
    assert_eq!(s.post(&format!("{NS}/configmaps"), &configmap("free")).await.code, 201);
    let r = s.delete(&format!("{NS}/configmaps/free"), Some(&opts)).await;
    assert_eq!((r.code, r.body["kind"].as_str()), (200, Some("Status")), "{}", r.text);
}

#[tokio::test]
async fn a_bound_pod_is_deleted_gracefully_and_answered_with_200() {
    let s = TestServer::embedded().await;
    let mut p = pod("bound");
    p["spec"]["nodeName"] = json!("node-1");
    p["spec"]["terminationGracePeriodSeconds"] = json!(7);
    assert_eq!(s.post(&format!("{NS}/pods"), &p).await.code, 201);
    let r = s.delete(&format!("{NS}/pods/bound"), None).await;
    assert_eq!(r.code, 200, "{}", r.text);
    assert_eq!(r.body["metadata"]["deletionGracePeriodSeconds"], 7);
    assert_eq!(s.get(&format!("{NS}/pods/bound")).await.code, 200);
}

#[tokio::test]
async fn namespaces_are_marked_terminating_and_immortal_ones_refused() {
    let s = TestServer::embedded().await;
    s.namespace("doomed").await;
    let r = s.delete("/api/v1/namespaces/doomed", None).await;
    assert_eq!(r.code, 200, "{}", r.text);
    assert_eq!(r.body["status"]["phase"], "Terminating");
    let r = s.delete("/api/v1/namespaces/kube-system", None).await;
    r.assert_status(403, "Forbidden");
    assert_eq!(r.message(), "namespaces \"kube-system\" is forbidden: this namespace may not be deleted");
}
