//! CustomResourceDefinitions through the HTTP API of a real in-process
//! server: creating a CRD gets it `Established` and serves its custom
//! resources (CRUD, LIST, WATCH, discovery, OpenAPI, schema validation,
//! pruning and defaulting, `status`), name conflicts are reported, deleting a
//! CRD deletes its objects, and stored CRDs are served right after a restart.
//!
//! Every test uses its own API group: the resource table is process-global.

use crate::common;
use crate::pb_support;

use std::time::Duration;

use common::TestServer;
use serde_json::{json, Value};

const CRDS: &str = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";

fn widget_crd(group: &str) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("widgets.{group}")},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": "widgets", "kind": "Widget", "shortNames": ["wdg"], "categories": ["all"]},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "spec": {"type": "object", "required": ["size"], "properties": {
                            "size": {"type": "string", "enum": ["small", "large"]},
                            "replicas": {"type": "integer", "minimum": 0, "default": 1}
                        }},
                        "status": {"type": "object", "properties": {"ready": {"type": "boolean"}}}
                    }
                }}
            }]
        }
    })
}

fn widget(group: &str, name: &str, spec: Value) -> Value {
    json!({"apiVersion": format!("{group}/v1"), "kind": "Widget", "metadata": {"name": name}, "spec": spec})
}

/// Polls the CRD until `Established` is `True` (5 s at most); returns it.
async fn established(s: &TestServer, name: &str) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let crd = s.get(&format!("{CRDS}/{name}")).await.body;
        let conds = crd.pointer("/status/conditions").and_then(Value::as_array).cloned().unwrap_or_default();
        if conds.iter().any(|c| c["type"] == "Established" && c["status"] == "True") {
            return crd;
        }
        assert!(tokio::time::Instant::now() < deadline, "not established within 5 s: {crd}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_created_crd_is_established_with_its_names_accepted() {
    let s = TestServer::embedded().await;
    let created = s.post(CRDS, &widget_crd("est.example.com")).await;
    assert_eq!(created.code, 201, "{}", created.text);
    assert_eq!(created.body["metadata"]["finalizers"], json!(["customresourcecleanup.apiextensions.k8s.io"]));
    assert_eq!(created.body["spec"]["names"]["listKind"], "WidgetList");
    assert_eq!(created.body["spec"]["conversion"], json!({"strategy": "None"}));
    let crd = established(&s, "widgets.est.example.com").await;
    assert_eq!(crd["status"]["acceptedNames"]["plural"], "widgets");
    assert_eq!(crd["status"]["acceptedNames"]["shortNames"], json!(["wdg"]));
    assert_eq!(crd["status"]["storedVersions"], json!(["v1"]));
    let conds = crd["status"]["conditions"].as_array().unwrap();
    assert_eq!((conds[0]["type"].as_str(), conds[0]["reason"].as_str()), (Some("NamesAccepted"), Some("NoConflicts")));
    assert_eq!(conds[0]["message"], "no conflicts found");
    assert_eq!((conds[1]["type"].as_str(), conds[1]["reason"].as_str()), (Some("Established"), Some("InitialNamesAccepted")));
    // The CRD resource itself in discovery: short names crd, crds.
    let list = s.get("/apis/apiextensions.k8s.io/v1").await;
    let row = list.body["resources"].as_array().unwrap().iter().find(|r| r["name"] == "customresourcedefinitions").cloned().unwrap();
    assert_eq!(row["shortNames"], json!(["crd", "crds"]));
    assert_eq!(row["namespaced"], false);
}

/// CRDs are built-in objects: client-go's protobuf clients read them in
/// protobuf (schemas included). Custom resources are JSON only: a client
/// accepting only protobuf gets 406, one that also accepts JSON gets JSON.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crds_are_served_in_protobuf_and_custom_resources_in_json() {
    let s = TestServer::embedded().await;
    let g = "pb.example.com";
    assert_eq!(s.post(CRDS, &widget_crd(g)).await.code, 201);
    let crd = established(&s, &format!("widgets.{g}")).await;
    let url = format!("{}{CRDS}/widgets.{g}", s.base);
    let pb = pb_support::send(&s.client, "GET", &url, None).await;
    assert_eq!((pb.code, pb.content_type.as_str()), (200, pb_support::PROTOBUF));
    assert_eq!(pb_support::to_json(&pb.body), pb_support::go_json(&crd));
    let list = pb_support::send(&s.client, "GET", &format!("{}{CRDS}", s.base), None).await;
    assert_eq!((list.code, list.content_type.as_str()), (200, pb_support::PROTOBUF));
    assert_eq!(pb_support::to_json(&list.body)["items"][0]["spec"], pb_support::go_json(&crd["spec"]));

    let widgets = format!("/apis/{g}/v1/namespaces/default/widgets");
    assert_eq!(s.post(&widgets, &widget(g, "w", json!({"size": "small"}))).await.code, 201);
    let r = s.get_as(&widgets, "application/vnd.kubernetes.protobuf").await;
    r.assert_status(406, "NotAcceptable");
    assert_eq!(r.message(), "only the following media types are accepted: application/json, application/yaml");
    let r = s.get_as(&widgets, pb_support::CLIENT_GO_ACCEPT).await;
    assert_eq!((r.code, r.headers["content-type"].to_str().unwrap()), (200, "application/json"));
    assert_eq!(r.body["items"][0]["metadata"]["name"], "w");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_crds_are_422_with_field_paths() {
    let s = TestServer::embedded().await;
    let mut crd = widget_crd("bad.example.com");
    crd["metadata"]["name"] = json!("gadgets.bad.example.com");
    crd["spec"]["versions"][0]["storage"] = json!(false);
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["free"] = json!({});
    let r = s.post(CRDS, &crd).await;
    r.assert_status(422, "Invalid");
    let fields: Vec<&str> = r.body["details"]["causes"].as_array().unwrap().iter().filter_map(|c| c["field"].as_str()).collect();
    assert!(fields.contains(&"metadata.name"), "{fields:?}");
    assert!(fields.contains(&"spec.versions"), "{fields:?}");
    assert!(fields.contains(&"spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[free].type"), "{fields:?}");
    assert!(r.message().starts_with("CustomResourceDefinition.apiextensions.k8s.io \"gadgets.bad.example.com\" is invalid: "), "{}", r.message());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_resources_are_served_with_crud_list_watch_and_schemas() {
    crud_list_watch_and_schemas(TestServer::embedded().await, "crud.example.com").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_resources_are_served_with_crud_list_watch_and_schemas_on_etcd() {
    crud_list_watch_and_schemas(TestServer::etcd().await, "crud-etcd.example.com").await;
}

async fn crud_list_watch_and_schemas(s: TestServer, g: &str) {
    assert_eq!(s.post(CRDS, &widget_crd(g)).await.code, 201);
    established(&s, &format!("widgets.{g}")).await;
    let coll = format!("/apis/{g}/v1/namespaces/default/widgets");

    // Create: defaulted, unknown fields pruned with a warning.
    let mut body = widget(g, "w1", json!({"size": "small", "color": "red"}));
    body["extra"] = json!(1);
    body["metadata"]["bogus"] = json!("x");
    let created = s.post(&coll, &body).await;
    assert_eq!(created.code, 201, "{}", created.text);
    assert_eq!(created.body["spec"], json!({"size": "small", "replicas": 1}));
    assert!(created.body.get("extra").is_none());
    assert_eq!(created.body["metadata"]["generation"], 1);
    let warning = created.headers.get_all("warning").iter().map(|v| v.to_str().unwrap_or("").to_string()).collect::<Vec<_>>().join("\n");
    assert!(warning.contains(r#"unknown field \"spec.color\""#), "{warning}");
    assert!(warning.contains(r#"unknown field \"metadata.bogus\""#), "{warning}");
    assert!(created.body["metadata"].get("bogus").is_none());
    // Metadata is validated like any object's.
    let mut bad_name = widget(g, "Not_A_Name", json!({"size": "small"}));
    bad_name["metadata"]["labels"] = json!({"ok": "fine"});
    let r = s.post(&coll, &bad_name).await;
    r.assert_status(422, "Invalid");
    assert_eq!(r.body["details"]["causes"][0]["field"], "metadata.name");

    // Read and list.
    let got = s.get(&format!("{coll}/w1")).await;
    assert_eq!(got.code, 200);
    assert_eq!(got.body["kind"], "Widget");
    let list = s.get(&coll).await;
    assert_eq!(list.body["kind"], "WidgetList");
    assert_eq!(list.body["apiVersion"], format!("{g}/v1"));
    assert_eq!(list.body["items"][0]["metadata"]["name"], "w1");
    assert_eq!(s.get(&format!("/apis/{g}/v1/widgets")).await.body["items"].as_array().map(Vec::len), Some(1));

    // Watch sees the update.
    let mut watch = s.watch(&format!("{coll}?watch=true&resourceVersion={}", created.rv())).await;
    assert_eq!(watch.code, 200);
    let patched = s.patch(&format!("{coll}/w1"), "application/merge-patch+json", r#"{"spec":{"replicas":3}}"#).await;
    assert_eq!(patched.code, 200, "{}", patched.text);
    assert_eq!(patched.body["metadata"]["generation"], 2);
    let ev = watch.next().await;
    assert_eq!(ev["type"], "MODIFIED");
    assert_eq!(ev["object"]["spec"]["replicas"], 3);

    // Schema violations: 422 naming the fields, upstream's messages.
    let bad = s.post(&coll, &widget(g, "w2", json!({"size": "huge", "replicas": "three"}))).await;
    bad.assert_status(422, "Invalid");
    let causes = bad.body["details"]["causes"].as_array().unwrap();
    let msgs: Vec<String> = causes.iter().map(|c| format!("{}: {}", c["field"].as_str().unwrap(), c["message"].as_str().unwrap())).collect();
    assert!(msgs.contains(&"spec.replicas: Invalid value: \"string\": spec.replicas in body must be of type integer: \"string\"".to_string()), "{msgs:?}");
    assert!(msgs.contains(&"spec.size: Unsupported value: \"huge\": supported values: \"small\", \"large\"".to_string()), "{msgs:?}");
    assert!(bad.message().starts_with(&format!("Widget.{g} \"w2\" is invalid: ")), "{}", bad.message());
    let missing = s.post(&coll, &widget(g, "w3", json!({}))).await;
    missing.assert_status(422, "Invalid");
    assert_eq!(missing.body["details"]["causes"][0]["field"], "spec.size");
    assert_eq!(missing.body["details"]["causes"][0]["reason"], "FieldValueRequired");

    // Status: ignored on the main resource, the only change on /status.
    let mut with_status = s.get(&format!("{coll}/w1")).await.body;
    with_status["status"] = json!({"ready": true});
    let put = s.put(&format!("{coll}/w1"), &with_status).await;
    assert_eq!(put.code, 200, "{}", put.text);
    assert!(put.body.get("status").is_none_or(|st| st.get("ready").is_none()), "{}", put.text);
    let mut status_put = put.body.clone();
    status_put["status"] = json!({"ready": true});
    status_put["spec"]["replicas"] = json!(9);
    let st = s.put(&format!("{coll}/w1/status"), &status_put).await;
    assert_eq!(st.code, 200, "{}", st.text);
    assert_eq!(st.body["status"]["ready"], true);
    assert_eq!(st.body["spec"]["replicas"], 3, "spec changes are ignored on /status");
    assert_eq!(st.body["metadata"]["generation"], 2, "status changes do not bump generation");

    // Delete.
    assert_eq!(s.delete(&format!("{coll}/w1"), None).await.code, 200);
    assert_eq!(s.get(&format!("{coll}/w1")).await.code, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_resources_appear_in_discovery_and_openapi() {
    let s = TestServer::embedded().await;
    let g = "disco.example.com";
    assert_eq!(s.post(CRDS, &widget_crd(g)).await.code, 201);
    established(&s, &format!("widgets.{g}")).await;

    let apis = s.get("/apis").await;
    let group = apis.body["groups"].as_array().unwrap().iter().find(|x| x["name"] == g).cloned().expect("group listed");
    assert_eq!(group["preferredVersion"]["groupVersion"], format!("{g}/v1"));
    let list = s.get(&format!("/apis/{g}/v1")).await;
    assert_eq!(list.code, 200);
    let names: Vec<&str> = list.body["resources"].as_array().unwrap().iter().filter_map(|r| r["name"].as_str()).collect();
    assert_eq!(names, ["widgets", "widgets/status"]);
    let w = &list.body["resources"][0];
    assert_eq!((w["kind"].as_str(), w["singularName"].as_str(), w["namespaced"].as_bool()), (Some("Widget"), Some("widget"), Some(true)));
    assert_eq!((w["shortNames"].clone(), w["categories"].clone()), (json!(["wdg"]), json!(["all"])));

    let agg = s.get_as("/apis", "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList").await;
    let item = agg.body["items"].as_array().unwrap().iter().find(|x| x["metadata"]["name"] == g).cloned().expect("aggregated group");
    let res = &item["versions"][0]["resources"][0];
    assert_eq!(res["resource"], "widgets");
    assert_eq!(res["responseKind"], json!({"group": g, "version": "v1", "kind": "Widget"}));
    assert_eq!(res["subresources"][0]["subresource"], "status");

    let index = s.get("/openapi/v3").await;
    let url = index.body["paths"][format!("apis/{g}/v1")]["serverRelativeURL"].as_str().expect("v3 index lists the group version").to_string();
    let doc = s.get(&url).await;
    assert_eq!(doc.code, 200);
    let def = &doc.body["components"]["schemas"]["com.example.disco.v1.Widget"];
    assert_eq!(def["x-kubernetes-group-version-kind"], json!([{"group": g, "version": "v1", "kind": "Widget"}]));
    assert_eq!(def["properties"]["spec"]["properties"]["size"]["enum"], json!(["small", "large"]));
    assert!(doc.body["components"]["schemas"]["io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"].is_object());
    let patch = &doc.body["paths"][format!("/apis/{g}/v1/namespaces/{{namespace}}/widgets/{{name}}")]["patch"];
    assert_eq!(patch["x-kubernetes-group-version-kind"]["kind"], "Widget");
    let v2 = s.get("/openapi/v2").await;
    assert!(v2.body["definitions"]["com.example.disco.v1.Widget"].is_object());
    assert!(v2.body["definitions"]["io.k8s.api.core.v1.Pod"].is_object());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kind_taken_in_the_group_is_not_accepted() {
    let s = TestServer::embedded().await;
    let g = "conflict.example.com";
    assert_eq!(s.post(CRDS, &widget_crd(g)).await.code, 201);
    established(&s, &format!("widgets.{g}")).await;
    let mut other = widget_crd(g);
    other["metadata"]["name"] = json!(format!("gadgets.{g}"));
    other["spec"]["names"] = json!({"plural": "gadgets", "singular": "gadget", "kind": "Widget", "listKind": "GadgetList"});
    assert_eq!(s.post(CRDS, &other).await.code, 201);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let cond = loop {
        let crd = s.get(&format!("{CRDS}/gadgets.{g}")).await.body;
        if let Some(c) = crd.pointer("/status/conditions/0").cloned() {
            break c;
        }
        assert!(tokio::time::Instant::now() < deadline, "no conditions: {crd}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(cond["type"], "NamesAccepted");
    assert_eq!(cond["status"], "False");
    assert_eq!(cond["reason"], "KindConflict");
    assert_eq!(cond["message"], "\"Widget\" is already in use");
    assert_eq!(s.get(&format!("/apis/{g}/v1/gadgets")).await.code, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_crd_deletes_its_custom_resources_first() {
    let s = TestServer::embedded().await;
    let g = "cleanup.example.com";
    assert_eq!(s.post(CRDS, &widget_crd(g)).await.code, 201);
    established(&s, &format!("widgets.{g}")).await;
    let coll = format!("/apis/{g}/v1/namespaces/default/widgets");
    for n in ["a", "b"] {
        assert_eq!(s.post(&coll, &widget(g, n, json!({"size": "small"}))).await.code, 201);
    }
    // One object is held by a finalizer of its own: the CRD waits for it.
    let mut held = widget(g, "held", json!({"size": "small"}));
    held["metadata"]["finalizers"] = json!(["example.com/hold"]);
    assert_eq!(s.post(&coll, &held).await.code, 201);
    let deleted = s.delete(&format!("{CRDS}/widgets.{g}"), None).await;
    // Pending on its finalizer: answered with the object and 200, as
    // upstream's CRD `Delete` and `handlers/delete.go` (202 only for
    // `orphanDependents: false`).
    assert_eq!(deleted.code, 200, "{}", deleted.text);
    assert!(deleted.body["metadata"]["deletionTimestamp"].is_string(), "held by the cleanup finalizer: {}", deleted.text);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let crd = loop {
        let crd = s.get(&format!("{CRDS}/widgets.{g}")).await.body;
        let held = s.get(&format!("{coll}/held")).await.body;
        let gone = s.get(&format!("{coll}/a")).await.code == 404;
        if gone && held["metadata"]["deletionTimestamp"].is_string() && crd.pointer("/status/conditions/2").is_some() {
            break crd;
        }
        assert!(tokio::time::Instant::now() < deadline, "no progress after 10 s: {crd}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let terminating = &crd["status"]["conditions"][2];
    assert_eq!((terminating["type"].as_str(), terminating["status"].as_str()), (Some("Terminating"), Some("True")), "{crd}");
    assert_eq!(terminating["reason"], "InstanceDeletionInProgress");
    assert_eq!(terminating["message"], "CustomResource deletion is in progress");
    let refused = s.post(&coll, &widget(g, "late", json!({"size": "small"}))).await;
    refused.assert_status(405, "MethodNotAllowed");
    assert_eq!(refused.message(), "create not allowed while custom resource definition is terminating");
    // Releasing the held object lets the CRD go.
    let released = s.patch(&format!("{coll}/held"), "application/merge-patch+json", r#"{"metadata":{"finalizers":null}}"#).await;
    assert_eq!(released.code, 200, "{}", released.text);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while s.get(&format!("{CRDS}/widgets.{g}")).await.code != 404 {
        assert!(tokio::time::Instant::now() < deadline, "the CRD is still there after 10 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(s.get(&coll).await.code, 404, "its resource is no longer served");
    let left = s.storage.range(rkube_storage::RangeRequest::prefix(&format!("/registry/{g}/widgets/"))).await.unwrap();
    assert!(left.kvs.is_empty(), "custom resources left in storage: {}", left.kvs.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stored_crds_are_served_as_soon_as_the_server_starts() {
    let g = "restart.example.com";
    let dir = tempfile::tempdir().unwrap();
    {
        // What a previous run left: an established CRD.
        let storage = rkube_storage::embedded::EmbeddedStorage::open(dir.path()).unwrap();
        let mut crd = widget_crd(g);
        crd["spec"]["names"]["singular"] = json!("widget");
        crd["spec"]["names"]["listKind"] = json!("WidgetList");
        crd["status"] = json!({
            "acceptedNames": crd["spec"]["names"].clone(),
            "conditions": [{"type": "NamesAccepted", "status": "True", "reason": "NoConflicts", "message": "no conflicts found", "lastTransitionTime": "2024-01-01T00:00:00Z"},
                           {"type": "Established", "status": "True", "reason": "InitialNamesAccepted", "message": "the initial names have been accepted", "lastTransitionTime": "2024-01-01T00:00:00Z"}],
            "storedVersions": ["v1"]
        });
        let key = format!("/registry/apiextensions.k8s.io/customresourcedefinitions/widgets.{g}");
        rkube_storage::Storage::create(&storage, &key, serde_json::to_vec(&crd).unwrap().into()).await.unwrap();
    }
    let server = rkube_apiserver::testing::InProcessServer::start(dir.path(), Default::default()).await;
    let client = common::http_client(Some(Duration::from_secs(10)));
    let r = client.get(format!("{}/apis/{g}/v1/namespaces/default/widgets", server.base)).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200, "served on the first request");
    let list: Value = r.json().await.unwrap();
    assert_eq!(list["kind"], "WidgetList");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scale_and_printer_columns_follow_the_crd() {
    let s = TestServer::embedded().await;
    let g = "scale.example.com";
    let mut crd = widget_crd(g);
    let v = &mut crd["spec"]["versions"][0];
    v["subresources"]["scale"] = json!({"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas", "labelSelectorPath": ".status.selector"});
    v["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]["replicas"] = json!({"type": "integer"});
    v["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]["selector"] = json!({"type": "string"});
    v["additionalPrinterColumns"] = json!([
        {"name": "Size", "type": "string", "jsonPath": ".spec.size"},
        {"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas", "description": "desired"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}
    ]);
    assert_eq!(s.post(CRDS, &crd).await.code, 201);
    established(&s, &format!("widgets.{g}")).await;
    let coll = format!("/apis/{g}/v1/namespaces/default/widgets");
    assert_eq!(s.post(&coll, &widget(g, "w", json!({"size": "large", "replicas": 2}))).await.code, 201);

    // Discovery lists scale as autoscaling/v1 Scale.
    let list = s.get(&format!("/apis/{g}/v1")).await;
    let scale_row = list.body["resources"].as_array().unwrap().iter().find(|r| r["name"] == "widgets/scale").cloned().expect("widgets/scale");
    assert_eq!((scale_row["group"].as_str(), scale_row["version"].as_str(), scale_row["kind"].as_str()), (Some("autoscaling"), Some("v1"), Some("Scale")));

    // /status sets the status replicas and selector the Scale reports.
    let mut obj = s.get(&format!("{coll}/w")).await.body;
    obj["status"] = json!({"replicas": 2, "selector": "app=w"});
    assert_eq!(s.put(&format!("{coll}/w/status"), &obj).await.code, 200);
    let scale = s.get(&format!("{coll}/w/scale")).await;
    assert_eq!(scale.code, 200, "{}", scale.text);
    assert_eq!(scale.body["kind"], "Scale");
    assert_eq!(scale.body["spec"]["replicas"], 2);
    assert_eq!(scale.body["status"], json!({"replicas": 2, "selector": "app=w"}));
    let scaled = s.patch(&format!("{coll}/w/scale"), "application/merge-patch+json", r#"{"spec":{"replicas":5}}"#).await;
    assert_eq!(scaled.code, 200, "{}", scaled.text);
    assert_eq!(scaled.body["spec"]["replicas"], 5);
    let after = s.get(&format!("{coll}/w")).await.body;
    assert_eq!(after["spec"]["replicas"], 5);
    assert_eq!(after["metadata"]["generation"], 2);

    // Tables: Name, then the printer columns in order.
    let t = s.get_as(&coll, "application/json;as=Table;v=v1;g=meta.k8s.io").await;
    assert_eq!(t.code, 200, "{}", t.text);
    let names: Vec<&str> = t.body["columnDefinitions"].as_array().unwrap().iter().filter_map(|c| c["name"].as_str()).collect();
    assert_eq!(names, ["Name", "Size", "Replicas", "Age"]);
    assert_eq!(t.body["columnDefinitions"][2]["description"], "desired");
    let cells = t.body["rows"][0]["cells"].as_array().unwrap();
    assert_eq!((&cells[0], &cells[1], &cells[2]), (&json!("w"), &json!("large"), &json!(5)));
    assert!(cells[3].as_str().is_some_and(|a| a.ends_with('s')), "an age: {}", cells[3]);
}

/// `x-kubernetes-validations` rules are evaluated on create and update:
/// a failing rule is a 422 naming the field and the rule's message, and a
/// transition rule (`oldSelf`) compares with the stored object.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn validation_rules_refuse_objects_that_break_them() {
    let s = TestServer::embedded().await;
    let g = "cel.example.com";
    let mut crd = widget_crd(g);
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["x-kubernetes-validations"] = json!([
        {"rule": "self.replicas <= 5", "message": "at most 5 replicas"},
        {"rule": "self.size == oldSelf.size", "message": "size is immutable"}
    ]);
    assert_eq!(s.post(CRDS, &crd).await.code, 201);
    established(&s, &format!("widgets.{g}")).await;
    let widgets = format!("/apis/{g}/v1/namespaces/default/widgets");
    let r = s.post(&widgets, &widget(g, "big", json!({"size": "small", "replicas": 6}))).await;
    r.assert_status(422, "Invalid");
    assert_eq!(r.message(), format!("Widget.{g} \"big\" is invalid: spec: Invalid value: \"object\": at most 5 replicas"));
    assert_eq!(r.body["details"]["causes"][0], json!({"reason": "FieldValueInvalid", "message": "Invalid value: \"object\": at most 5 replicas", "field": "spec"}));

    let created = s.post(&widgets, &widget(g, "ok", json!({"size": "small", "replicas": 2}))).await;
    assert_eq!(created.code, 201, "{}", created.text);
    let mut changed = created.body.clone();
    changed["spec"]["size"] = json!("large");
    let r = s.put(&format!("{widgets}/ok"), &changed).await;
    r.assert_status(422, "Invalid");
    assert_eq!(r.message(), format!("Widget.{g} \"ok\" is invalid: spec: Invalid value: \"object\": size is immutable"));
    let mut scaled = created.body.clone();
    scaled["spec"]["replicas"] = json!(4);
    assert_eq!(s.put(&format!("{widgets}/ok"), &scaled).await.code, 200);
}

/// `selectableFields` make custom resource fields usable in field selectors
/// (from the watch cache and from storage); other fields are still refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn selectable_fields_filter_custom_resources() {
    let s = TestServer::embedded().await;
    let g = "fields.example.com";
    let mut crd = widget_crd(g);
    crd["spec"]["versions"][0]["selectableFields"] = json!([{"jsonPath": ".spec.size"}, {"jsonPath": ".spec.replicas"}]);
    assert_eq!(s.post(CRDS, &crd).await.code, 201);
    established(&s, &format!("widgets.{g}")).await;
    let widgets = format!("/apis/{g}/v1/namespaces/default/widgets");
    for (name, size, replicas) in [("a", "small", 1), ("b", "large", 2), ("c", "small", 3)] {
        assert_eq!(s.post(&widgets, &widget(g, name, json!({"size": size, "replicas": replicas}))).await.code, 201);
    }
    let names = |v: &Value| -> Vec<String> {
        v["items"].as_array().unwrap().iter().filter_map(|i| i["metadata"]["name"].as_str().map(String::from)).collect()
    };
    for rv in ["", "&resourceVersion=0"] {
        let r = s.get(&format!("{widgets}?fieldSelector=spec.size%3Dsmall{rv}")).await;
        assert_eq!(r.code, 200, "{}", r.text);
        assert_eq!(names(&r.body), ["a", "c"]);
        let r = s.get(&format!("{widgets}?fieldSelector=spec.replicas%3D2{rv}")).await;
        assert_eq!(names(&r.body), ["b"]);
    }
    let r = s.get(&format!("{widgets}?fieldSelector=spec.color%3Dred")).await;
    r.assert_status(400, "BadRequest");
    assert_eq!(r.message(), "field label not supported: spec.color");
}

/// `selectableFields` are checked when the CRD is written, as upstream:
/// a path into the schema, to a string, boolean or integer field outside
/// `metadata`, not repeated, at most eight: else 422 Invalid naming the
/// entry, on create and on update.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_selectable_fields_are_422_on_create_and_update() {
    let s = TestServer::embedded().await;
    let g = "badfields.example.com";
    let mut crd = widget_crd(g);
    crd["spec"]["versions"][0]["selectableFields"] =
        json!([{"jsonPath": ".spec.size"}, {"jsonPath": ".spec.colour"}, {"jsonPath": ".spec"}, {"jsonPath": ".spec.size"}]);
    let r = s.post(CRDS, &crd).await;
    r.assert_status(422, "Invalid");
    let causes = r.body["details"]["causes"].as_array().unwrap();
    let at = "spec.versions[0].selectableFields";
    assert_eq!(
        causes.iter().map(|c| (c["field"].as_str().unwrap(), c["reason"].as_str().unwrap())).collect::<Vec<_>>(),
        [
            (format!("{at}[1].jsonPath").as_str(), "FieldValueInvalid"),
            (format!("{at}[2].jsonPath").as_str(), "FieldValueInvalid"),
            (format!("{at}[3].jsonPath").as_str(), "FieldValueDuplicate"),
        ]
    );
    assert_eq!(causes[0]["message"], "Invalid value: \".spec.colour\": is an invalid path: does not refer to a valid field");
    assert_eq!(
        causes[1]["message"],
        "Invalid value: \".spec\": must point to a field of type string, boolean or integer. Enum string fields and strings with formats are allowed."
    );
    assert_eq!(causes[2]["message"], "Duplicate value: \".spec.size\"");

    crd["spec"]["versions"][0]["selectableFields"] = json!([{"jsonPath": ".spec.size"}]);
    let created = s.post(CRDS, &crd).await;
    assert_eq!(created.code, 201, "{}", created.text);
    let mut changed = created.body.clone();
    changed["spec"]["versions"][0]["selectableFields"] = json!([{"jsonPath": ".status.ready"}, {"jsonPath": ".metadata.name"}]);
    // Unconditional: the CRD controller may have updated the status since
    // the create (a 409 for the create's resourceVersion then).
    changed["metadata"].as_object_mut().unwrap().remove("resourceVersion");
    let r = s.put(&format!("{CRDS}/widgets.{g}"), &changed).await;
    r.assert_status(422, "Invalid");
    assert_eq!(
        r.message(),
        format!("CustomResourceDefinition.apiextensions.k8s.io \"widgets.{g}\" is invalid: {at}[1].jsonPath: Invalid value: \".metadata.name\": is an invalid path: does not refer to a valid field")
    );
}

/// A CRD whose rules call what rkube's CEL lacks is accepted, and its
/// author is told, in a Warning, which rules will not be enforced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rules_rkube_cannot_enforce_are_named_in_a_warning() {
    let s = TestServer::embedded().await;
    let mut crd = widget_crd("celwarn.example.com");
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["x-kubernetes-validations"] =
        json!([{"rule": "self.replicas >= 0"}, {"rule": "cel.bind(s, self.size, s != '')"}]);
    let r = s.post(CRDS, &crd).await;
    assert_eq!(r.code, 201, "{}", r.text);
    let warnings: Vec<&str> = r.headers.get_all("warning").iter().filter_map(|v| v.to_str().ok()).collect();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].contains("spec.versions[0].schema.openAPIV3Schema.properties[spec].x-kubernetes-validations[1]: rule \\\"cel.bind(s, self.size, s != '')\\\" calls bind which rkube's CEL lacks; it is not enforced"),
        "{warnings:?}"
    );
}

/// [`widget_crd`] serving `v1` (storage) and `v2`, with the same schema.
fn two_version_crd(g: &str) -> Value {
    let mut crd = widget_crd(g);
    let v1 = crd["spec"]["versions"][0].clone();
    let mut v2 = v1.clone();
    v2["name"] = json!("v2");
    v2["storage"] = json!(false);
    crd["spec"]["versions"] = json!([v1, v2]);
    crd
}

/// The `Warning` header values of `r`.
fn warnings_of(r: &common::Resp) -> Vec<String> {
    r.headers.get_all("warning").iter().filter_map(|v| v.to_str().ok()).map(str::to_string).collect()
}

/// A CRD with two versions (`None` conversion, upstream's default): objects
/// are stored in the storage version and served in the version asked for,
/// changing `apiVersion` only, in GET, LIST, WATCH and write answers; after
/// the storage version changes, objects stored before are served in either.
#[tokio::test]
async fn custom_resources_are_served_in_every_version_of_their_crd() {
    let s = TestServer::embedded().await;
    let g = "versions.example.com";
    let crd = two_version_crd(g);
    let r = s.post(CRDS, &crd).await;
    assert_eq!(r.code, 201, "{}", r.text);
    assert!(warnings_of(&r).is_empty(), "{:?}", warnings_of(&r));
    established(&s, &format!("widgets.{g}")).await;
    let (p1, p2) = (format!("/apis/{g}/v1/namespaces/default/widgets"), format!("/apis/{g}/v2/namespaces/default/widgets"));
    for _ in 0..50 {
        if s.get(&p2).await.code == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut watch = s.watch(&format!("{p2}?watch=true")).await;
    let (av1, av2) = (format!("{g}/v1"), format!("{g}/v2"));

    // Written through v1, read through v2 (and back).
    let r = s.post(&p1, &widget(g, "a", json!({"size": "small"}))).await;
    assert_eq!((r.code, r.body["apiVersion"].as_str()), (201, Some(av1.as_str())), "{}", r.text);
    assert_eq!(s.get(&format!("{p2}/a")).await.body["apiVersion"], av2);
    assert_eq!(s.get(&format!("{p1}/a")).await.body["apiVersion"], av1);
    let ev = watch.next().await;
    assert_eq!((ev["type"].as_str(), ev["object"]["apiVersion"].as_str()), (Some("ADDED"), Some(av2.as_str())));

    // Written through v2 (its body in v2), answered in v2; listed in either version.
    let mut b = widget(g, "b", json!({"size": "large"}));
    b["apiVersion"] = json!(av2);
    let r = s.post(&p2, &b).await;
    assert_eq!((r.code, r.body["apiVersion"].as_str()), (201, Some(av2.as_str())), "{}", r.text);
    for (path, av) in [(&p1, &av1), (&p2, &av2)] {
        let list = s.get(path).await.body;
        let versions: Vec<&str> = list["items"].as_array().into_iter().flatten().filter_map(|i| i["apiVersion"].as_str()).collect();
        assert_eq!(versions, [av.as_str(), av.as_str()], "{list}");
    }

    // The storage version moves to v2: what v1 stored is still served in both.
    let mut current = s.get(&format!("{CRDS}/widgets.{g}")).await.body;
    current["spec"]["versions"][0]["storage"] = json!(false);
    current["spec"]["versions"][1]["storage"] = json!(true);
    let r = s.put(&format!("{CRDS}/widgets.{g}"), &current).await;
    assert_eq!(r.code, 200, "{}", r.text);
    for _ in 0..50 {
        let stored = s.get(&format!("{CRDS}/widgets.{g}")).await.body;
        if stored["status"]["storedVersions"].as_array().is_some_and(|v| v.len() == 2) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let r = s.post(&p1, &widget(g, "c", json!({"size": "small"}))).await;
    assert_eq!((r.code, r.body["apiVersion"].as_str()), (201, Some(av1.as_str())), "{}", r.text);
    for name in ["a", "b", "c"] {
        assert_eq!(s.get(&format!("{p2}/{name}")).await.body["apiVersion"], av2, "{name}");
        assert_eq!(s.get(&format!("{p1}/{name}")).await.body["apiVersion"], av1, "{name}");
    }
}

/// Server-side apply merges a custom resource's lists as its CRD schema
/// says: `x-kubernetes-list-type: map` items by their keys and `set` items
/// by value, so two managers each own their items; an untyped list stays
/// atomic (the last applier's).
#[tokio::test]
async fn server_side_apply_merges_lists_by_the_crds_list_types() {
    let s = TestServer::embedded().await;
    let g = "ssalists.example.com";
    let mut crd = widget_crd(g);
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["ports"] = json!({
        "type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
        "items": {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}, "port": {"type": "integer"}}}});
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["tags"] =
        json!({"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}});
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["args"] =
        json!({"type": "array", "items": {"type": "string"}});
    assert_eq!(s.post(CRDS, &crd).await.code, 201);
    established(&s, &format!("widgets.{g}")).await;
    let path = format!("/apis/{g}/v1/namespaces/default/widgets/w");
    let apply = |manager: &'static str, spec: Value| {
        let body = json!({"apiVersion": format!("{g}/v1"), "kind": "Widget", "metadata": {"name": "w"}, "spec": spec}).to_string();
        let path = format!("{path}?fieldManager={manager}");
        let s = &s;
        async move { s.patch(&path, "application/apply-patch+yaml", &body).await }
    };
    let mut r = apply("alice", json!({"size": "small", "ports": [{"name": "http", "port": 80}], "tags": ["a"], "args": ["x"]})).await;
    for _ in 0..50 {
        if r.code != 404 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        r = apply("alice", json!({"size": "small", "ports": [{"name": "http", "port": 80}], "tags": ["a"], "args": ["x"]})).await;
    }
    assert_eq!(r.code, 201, "{}", r.text);
    let r = apply("bob", json!({"ports": [{"name": "metrics", "port": 9090}], "tags": ["b"], "args": ["y"]})).await;
    assert_eq!(r.code, 409, "bob's args conflict with alice's atomic list: {}", r.text);
    let r = apply("bob", json!({"ports": [{"name": "metrics", "port": 9090}], "tags": ["b"]})).await;
    assert_eq!(r.code, 200, "{}", r.text);
    let spec = &r.body["spec"];
    assert_eq!(spec["ports"], json!([{"name": "http", "port": 80}, {"name": "metrics", "port": 9090}]));
    assert_eq!(spec["tags"], json!(["a", "b"]));
    assert_eq!(spec["args"], json!(["x"]));
    let bob = r.body["metadata"]["managedFields"].as_array().into_iter().flatten().find(|m| m["manager"] == "bob").cloned().expect("bob's entry");
    let owned = bob["fieldsV1"]["f:spec"].clone();
    assert!(owned["f:ports"].get("k:{\"name\":\"metrics\"}").is_some(), "{owned}");
    assert!(owned["f:tags"].get("v:\"b\"").is_some(), "{owned}");
    // Alice drops her port: only hers goes.
    let r = apply("alice", json!({"size": "small", "tags": ["a"], "args": ["x"]})).await;
    assert_eq!(r.code, 200, "{}", r.text);
    assert_eq!(r.body["spec"]["ports"], json!([{"name": "metrics", "port": 9090}]));
}

/// A custom resource nested close to the body limit keeps its fields, and
/// its managedFields nest them deeper: a create (POST, apply, dry run) or
/// a patch whose stored form would nest past 124 levels is refused with
/// 400, and every object stored stays readable (GET as a Table, a merge
/// patch, a LIST, a watch), also by a client decoding with serde_json.
/// Before, objects nested 123 levels or more were stored and then answered
/// a Table GET and a merge patch with 500 "cannot decode object", and
/// their Tables, LISTs and watch events were too deep for serde_json.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_resources_too_deep_to_store_with_their_managed_fields_are_refused() {
    let s = TestServer::embedded().await;
    let g = "deep.crds.example.com";
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("deeps.{g}")},
        "spec": {"group": g, "scope": "Namespaced", "names": {"plural": "deeps", "kind": "Deep"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}
    });
    assert_eq!(s.post(CRDS, &crd).await.code, 201);
    established(&s, &format!("deeps.{g}")).await;
    let path = format!("/apis/{g}/v1/namespaces/default/deeps");
    let mut watch = s.watch(&format!("{path}?watch=true")).await;
    // `x` holds `levels` maps, the last one a string: stored with its
    // entry, root, metadata, managedFields, the entry, fieldsV1, `f:x`'s
    // set and one set per map nest `levels + 6` levels.
    let chain = |n: usize| (0..n).fold(json!("x"), |v, _| json!({"a": v}));
    let deep = |name: &str, levels: usize| {
        json!({"apiVersion": format!("{g}/v1"), "kind": "Deep", "metadata": {"name": name}, "x": chain(levels)})
    };
    let storable = |levels: usize| levels + 6 <= 124;
    let refused = |r: &common::Resp, levels: usize| {
        let want = format!(
            "the object cannot be stored: with its managedFields it nests {} levels deep, deeper than the 124 levels stored objects may nest",
            levels + 6
        );
        (r.code, r.reason(), r.message()) == (400, "BadRequest", want.as_str())
    };
    let table = "application/json;as=Table;v=v1;g=meta.k8s.io";
    let mut stored = 0;
    for levels in [100usize, 116, 117, 118, 119, 120, 125] {
        for how in ["post", "apply", "dry-run"] {
            let name = format!("d{levels}-{how}");
            let obj = deep(&name, levels);
            let r = match how {
                "post" => s.post(&path, &obj).await,
                "dry-run" => s.post(&format!("{path}?dryRun=All"), &obj).await,
                _ => s.patch(&format!("{path}/{name}?fieldManager=t"), "application/apply-patch+yaml", &obj.to_string()).await,
            };
            if !storable(levels) {
                assert!(refused(&r, levels), "{levels} {how}: {} {}", r.code, r.text);
                continue;
            }
            assert_eq!(r.code, 201, "{levels} {how}: {}", r.text);
            if how == "dry-run" {
                continue;
            }
            stored += 1;
            let r = s.get_as(&format!("{path}/{name}"), table).await;
            assert_eq!(r.code, 200, "{levels} {how}: Table {}", r.text);
            assert_eq!(r.body["rows"].as_array().map(Vec::len), Some(1), "{levels} {how}: Table {}", r.text);
            let r = s.patch(&format!("{path}/{name}"), "application/merge-patch+json", r#"{"metadata":{"labels":{"l":"1"}}}"#).await;
            assert_eq!(r.code, 200, "{levels} {how}: merge patch {}", r.text);
            // A patch nesting the object one level deeper is stored when
            // its managedFields stay within the limit (an `Update` entry
            // already owning the leaf made a map is not deepened), else
            // refused; a dry run answers as the write does.
            let deeper = json!({"x": chain(levels + 1)}).to_string();
            let dry = s.patch(&format!("{path}/{name}?dryRun=All"), "application/merge-patch+json", &deeper).await;
            let r = s.patch(&format!("{path}/{name}"), "application/merge-patch+json", &deeper).await;
            assert_eq!((dry.code, dry.message()), (r.code, r.message()), "{levels} {how}: deeper patch, dry run {}", dry.text);
            let too_deep = r.message().starts_with("the object cannot be stored: with its managedFields it nests ");
            assert!(r.code == 200 || (r.code == 400 && too_deep), "{levels} {how}: deeper patch {} {}", r.code, r.text);
            let r = s.get_as(&format!("{path}/{name}"), table).await;
            assert_eq!(r.body["rows"].as_array().map(Vec::len), Some(1), "{levels} {how}: Table after patches {}", r.text);
        }
    }
    assert_eq!(stored, 2 * 4, "levels 100 to 118, by POST and by apply");
    // Lists and watch events stay within what serde_json decodes (kube-rs
    // reads them so): this client's decoder reads them.
    let r = s.get(&path).await;
    assert_eq!(r.code, 200, "{}", r.text);
    assert_eq!(r.body["items"].as_array().map(Vec::len), Some(stored), "every object stored is listed");
    let mut added = 0;
    while let Some(event) = watch.next_within(5).await {
        added += usize::from(event["type"] == "ADDED");
        if added == stored {
            break;
        }
    }
    assert_eq!(added, stored, "every stored object was watched");
}
