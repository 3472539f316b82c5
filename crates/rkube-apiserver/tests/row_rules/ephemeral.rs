//! `pods/ephemeralcontainers`: GET, PUT and the three PATCH types change
//! only `spec.ephemeralContainers`; ephemeral containers are added, never
//! removed or changed; upstream's 422 messages for what they may not set.

use serde_json::{json, Value};

use crate::common::{pod, TestServer};

const PODS: &str = "/api/v1/namespaces/default/pods";
const EC: &str = "/api/v1/namespaces/default/pods/p/ephemeralcontainers";

fn debugger(name: &str) -> Value {
    json!({"name": name, "image": "busybox", "targetContainerName": "c", "stdin": true, "tty": true})
}

/// A server with pod `p` (one container `c`).
async fn with_pod() -> TestServer {
    let s = TestServer::embedded().await;
    let r = s.post(PODS, &pod("p")).await;
    assert_eq!(r.code, 201, "{}", r.text);
    s
}

/// The pod as the subresource answers it, with `ephemeralContainers` set to `ecs`.
async fn with_ephemeral(s: &TestServer, ecs: Value) -> Value {
    let r = s.get(EC).await;
    assert_eq!(r.code, 200, "{}", r.text);
    let mut p = r.body;
    p["spec"]["ephemeralContainers"] = ecs;
    p
}

fn ec_names(p: &Value) -> Vec<String> {
    p["spec"]["ephemeralContainers"]
        .as_array()
        .map(|a| a.iter().map(|c| c["name"].as_str().unwrap_or("").to_string()).collect())
        .unwrap_or_default()
}

#[tokio::test]
async fn the_subresource_answers_the_pod_and_adds_ephemeral_containers_with_put_and_every_patch_type() {
    let s = with_pod().await;
    let g = s.get(EC).await;
    assert_eq!((g.code, g.body["kind"].as_str()), (200, Some("Pod")), "{}", g.text);

    let put = s.put(EC, &with_ephemeral(&s, json!([debugger("dbg-put")])).await).await;
    assert_eq!(put.code, 200, "{}", put.text);
    assert_eq!(ec_names(&put.body), ["dbg-put"]);
    // Container defaults apply to ephemeral containers too.
    assert_eq!(put.body["spec"]["ephemeralContainers"][0]["terminationMessagePolicy"], "File");

    // kubectl debug (1.27 and 1.33) sends a strategic merge patch; merging
    // by name puts the patch's new entry first, as upstream's merge does
    // without a `$setElementOrder` directive.
    let smp = json!({"spec": {"ephemeralContainers": [debugger("dbg-smp")]}}).to_string();
    let r = s.patch(EC, "application/strategic-merge-patch+json", &smp).await;
    assert_eq!(r.code, 200, "{}", r.text);
    assert_eq!(ec_names(&r.body), ["dbg-smp", "dbg-put"]);

    let merge = json!({"spec": {"ephemeralContainers": [
        r.body["spec"]["ephemeralContainers"][0], r.body["spec"]["ephemeralContainers"][1], debugger("dbg-merge")]}})
    .to_string();
    let r = s.patch(EC, "application/merge-patch+json", &merge).await;
    assert_eq!(r.code, 200, "{}", r.text);
    assert_eq!(ec_names(&r.body), ["dbg-smp", "dbg-put", "dbg-merge"]);

    let jp = json!([{"op": "add", "path": "/spec/ephemeralContainers/-", "value": debugger("dbg-json")}]).to_string();
    let r = s.patch(EC, "application/json-patch+json", &jp).await;
    assert_eq!(r.code, 200, "{}", r.text);
    assert_eq!(ec_names(&r.body), ["dbg-smp", "dbg-put", "dbg-merge", "dbg-json"]);

    let stored = s.get(&format!("{PODS}/p")).await;
    assert_eq!(ec_names(&stored.body), ["dbg-smp", "dbg-put", "dbg-merge", "dbg-json"]);
}

#[tokio::test]
async fn other_changes_sent_to_the_subresource_are_ignored() {
    let s = with_pod().await;
    let mut p = with_ephemeral(&s, json!([debugger("dbg")])).await;
    p["metadata"]["labels"] = json!({"app": "changed"});
    p["spec"]["containers"][0]["image"] = json!("nginx:9");
    p["spec"]["activeDeadlineSeconds"] = json!(5);
    let r = s.put(EC, &p).await;
    assert_eq!(r.code, 200, "{}", r.text);
    let stored = s.get(&format!("{PODS}/p")).await.body;
    assert_eq!(stored["metadata"]["labels"], json!({"app": "web"}));
    assert_eq!(stored["spec"]["containers"][0]["image"], "nginx:1.25");
    assert!(stored["spec"]["activeDeadlineSeconds"].is_null(), "{stored}");
    assert_eq!(ec_names(&stored), ["dbg"]);
}

#[tokio::test]
async fn existing_ephemeral_containers_may_not_be_removed() {
    let s = with_pod().await;
    assert_eq!(s.put(EC, &with_ephemeral(&s, json!([debugger("dbg")])).await).await.code, 200);
    let r = s.put(EC, &with_ephemeral(&s, json!([])).await).await;
    r.assert_status(422, "Invalid");
    assert_eq!(
        r.message(),
        "Pod \"p\" is invalid: spec.ephemeralContainers: Forbidden: existing ephemeral containers \"dbg\" may not be removed\n"
    );
    assert_eq!(r.body["details"]["causes"][0]["field"], "spec.ephemeralContainers");
    assert_eq!(r.body["details"]["causes"][0]["reason"], "FieldValueForbidden");
}

#[tokio::test]
async fn existing_ephemeral_containers_may_not_be_changed() {
    let s = with_pod().await;
    assert_eq!(s.put(EC, &with_ephemeral(&s, json!([debugger("dbg")])).await).await.code, 200);
    let smp = json!({"spec": {"ephemeralContainers": [{"name": "dbg", "image": "alpine"}]}}).to_string();
    let r = s.patch(EC, "application/strategic-merge-patch+json", &smp).await;
    r.assert_status(422, "Invalid");
    assert_eq!(
        r.message(),
        "Pod \"p\" is invalid: spec.ephemeralContainers[dbg]: Forbidden: existing ephemeral containers \"dbg\" may not be changed\n"
    );
}

#[tokio::test]
async fn ephemeral_container_names_are_unique_across_all_containers() {
    let s = with_pod().await;
    let r = s.put(EC, &with_ephemeral(&s, json!([{"name": "c", "image": "busybox"}])).await).await;
    r.assert_status(422, "Invalid");
    assert_eq!(r.message(), "Pod \"p\" is invalid: spec.ephemeralContainers[0].name: Duplicate value: \"c\"");
}

#[tokio::test]
async fn the_target_container_must_be_a_regular_or_init_container() {
    let s = with_pod().await;
    let r = s.put(EC, &with_ephemeral(&s, json!([{"name": "dbg", "image": "busybox", "targetContainerName": "nope"}])).await).await;
    r.assert_status(422, "Invalid");
    assert_eq!(r.message(), "Pod \"p\" is invalid: spec.ephemeralContainers[0].targetContainerName: Not found: \"nope\"");
}

#[tokio::test]
async fn ephemeral_containers_may_not_set_ports_probes_lifecycle_or_resources() {
    let s = with_pod().await;
    let ec = json!({"name": "dbg", "image": "busybox",
        "ports": [{"containerPort": 80}],
        "resources": {"limits": {"cpu": "1"}},
        "livenessProbe": {"exec": {"command": ["true"]}},
        "lifecycle": {"preStop": {"exec": {"command": ["true"]}}}});
    let r = s.put(EC, &with_ephemeral(&s, json!([ec])).await).await;
    r.assert_status(422, "Invalid");
    let forbidden = "Forbidden: cannot be set for an Ephemeral Container";
    assert_eq!(
        r.message(),
        format!(
            "Pod \"p\" is invalid: [spec.ephemeralContainers[0].ports: {forbidden}, spec.ephemeralContainers[0].resources: {forbidden}, \
             spec.ephemeralContainers[0].livenessProbe: {forbidden}, spec.ephemeralContainers[0].lifecycle: {forbidden}]"
        )
    );
}

#[tokio::test]
async fn the_pods_update_may_not_change_ephemeral_containers() {
    let s = with_pod().await;
    let mut p = s.get(&format!("{PODS}/p")).await.body;
    p["spec"]["ephemeralContainers"] = json!([debugger("dbg")]);
    let r = s.put(&format!("{PODS}/p"), &p).await;
    r.assert_status(422, "Invalid");
    assert!(
        r.message().starts_with("Pod \"p\" is invalid: spec: Forbidden: pod updates may not change fields other than"),
        "{}",
        r.message()
    );
    assert!(s.get(&format!("{PODS}/p")).await.body["spec"]["ephemeralContainers"].is_null());
}

#[tokio::test]
async fn pods_may_not_be_created_with_ephemeral_containers() {
    let s = TestServer::embedded().await;
    let mut p = pod("p");
    p["spec"]["ephemeralContainers"] = json!([debugger("dbg")]);
    let r = s.post(PODS, &p).await;
    r.assert_status(422, "Invalid");
    assert_eq!(r.message(), "Pod \"p\" is invalid: spec.ephemeralContainers: Forbidden: cannot be set on create");
}

#[tokio::test]
async fn discovery_lists_the_subresource_with_its_verbs_and_kind() {
    let s = TestServer::embedded().await;
    let r = s.get("/api/v1").await;
    let found = r.body["resources"]
        .as_array()
        .and_then(|a| a.iter().find(|x| x["name"] == "pods/ephemeralcontainers"))
        .cloned()
        .unwrap_or(Value::Null);
    assert_eq!(found["kind"], "Pod", "{}", r.text);
    assert_eq!(found["verbs"], json!(["get", "patch", "update"]));
    assert_eq!(found["namespaced"], true);
}
