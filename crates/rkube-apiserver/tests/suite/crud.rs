//! CRUD semantics over HTTP, run against every backend.

use serde_json::{json, Value};

use crate::common::{configmap, pod, TestServer};

const PODS: &str = "/api/v1/namespaces/default/pods";
const CMS: &str = "/api/v1/namespaces/default/configmaps";

pub async fn create_sets_server_fields_and_defaults(s: &TestServer) {
    let r = s.post(&format!("{PODS}?fieldManager=kubectl-create"), &pod("web")).await;
    assert_eq!(r.code, 201, "{}", r.text);
    let o = &r.body;
    assert_eq!(o["metadata"]["namespace"], "default");
    assert_eq!(o["metadata"]["uid"].as_str().unwrap().len(), 36);
    assert!(o["metadata"]["creationTimestamp"].as_str().unwrap().ends_with('Z'));
    assert!(r.rv().parse::<i64>().unwrap() > 0);
    assert_eq!(o["metadata"]["generation"], 1);
    assert_eq!(o["metadata"]["managedFields"][0]["manager"], "kubectl-create");
    assert_eq!(o["metadata"]["managedFields"][0]["operation"], "Update", "upstream records creates as Update");
    assert_eq!(o["metadata"]["managedFields"][0]["fieldsType"], "FieldsV1");
    assert!(o["metadata"]["managedFields"][0]["fieldsV1"]["f:spec"].is_object());
    assert_eq!(o["spec"]["restartPolicy"], "Always");
    assert_eq!(o["spec"]["dnsPolicy"], "ClusterFirst");
    assert_eq!(o["spec"]["schedulerName"], "default-scheduler");
    assert_eq!(o["spec"]["terminationGracePeriodSeconds"], 30);
    assert_eq!(o["spec"]["containers"][0]["imagePullPolicy"], "IfNotPresent");
    assert_eq!(o["spec"]["containers"][0]["terminationMessagePath"], "/dev/termination-log");
    assert_eq!(o["status"]["phase"], "Pending");
    // GET returns the same object at the same resourceVersion.
    let g = s.get(&format!("{PODS}/web")).await;
    assert_eq!(g.code, 200);
    assert_eq!(g.rv(), r.rv());
    assert_eq!(g.body["metadata"]["uid"], o["metadata"]["uid"]);
}

pub async fn create_duplicate_is_409_already_exists(s: &TestServer) {
    assert_eq!(s.post(CMS, &configmap("dup")).await.code, 201);
    let r = s.post(CMS, &configmap("dup")).await;
    r.assert_status(409, "AlreadyExists");
    assert_eq!(r.message(), "configmaps \"dup\" already exists");
    assert_eq!(r.body["details"]["name"], "dup");
    assert_eq!(r.body["details"]["kind"], "configmaps");
}

pub async fn create_in_missing_namespace_is_404(s: &TestServer) {
    let r = s.post("/api/v1/namespaces/nope/configmaps", &configmap("a")).await;
    r.assert_status(404, "NotFound");
    assert_eq!(r.message(), "namespaces \"nope\" not found");
}

pub async fn create_with_mismatched_namespace_is_400(s: &TestServer) {
    let mut cm = configmap("a");
    cm["metadata"]["namespace"] = json!("kube-system");
    let r = s.post(CMS, &cm).await;
    r.assert_status(400, "BadRequest");
    assert_eq!(r.message(), "the namespace of the provided object does not match the namespace sent on the request");
    assert_eq!(s.get(&format!("{CMS}/a")).await.code, 404, "nothing was created");
}

pub async fn create_with_invalid_name_is_422_with_causes(s: &TestServer) {
    let r = s.post(CMS, &configmap("Bad_Name")).await;
    r.assert_status(422, "Invalid");
    assert!(
        r.message().starts_with("ConfigMap \"Bad_Name\" is invalid: metadata.name: Invalid value: \"Bad_Name\""),
        "{}",
        r.message()
    );
    let cause = &r.body["details"]["causes"][0];
    assert_eq!(cause["reason"], "FieldValueInvalid");
    assert_eq!(cause["field"], "metadata.name");
    assert_eq!(r.body["details"]["kind"], "ConfigMap");
}

pub async fn create_pod_without_image_is_422(s: &TestServer) {
    let mut p = pod("noimg");
    p["spec"]["containers"][0].as_object_mut().unwrap().remove("image");
    let r = s.post(PODS, &p).await;
    r.assert_status(422, "Invalid");
    assert_eq!(r.body["details"]["causes"][0]["field"], "spec.containers[0].image");
    assert_eq!(r.body["details"]["causes"][0]["reason"], "FieldValueRequired");
}

pub async fn create_with_generate_name_adds_suffix(s: &TestServer) {
    let body = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generateName": "gen-"}});
    let a = s.post(CMS, &body).await;
    let b = s.post(CMS, &body).await;
    assert_eq!((a.code, b.code), (201, 201));
    let (na, nb) = (a.body["metadata"]["name"].as_str().unwrap(), b.body["metadata"]["name"].as_str().unwrap());
    assert!(na.starts_with("gen-") && na.len() == 9, "{na}");
    assert_ne!(na, nb);
}

pub async fn create_with_wrong_kind_or_version_is_400(s: &TestServer) {
    let mut cm = configmap("k");
    cm["kind"] = json!("Secret");
    s.post(CMS, &cm).await.assert_status(400, "BadRequest");
    let mut cm = configmap("k");
    cm["apiVersion"] = json!("apps/v1");
    s.post(CMS, &cm).await.assert_status(400, "BadRequest");
}

pub async fn create_with_wrong_field_type_is_400(s: &TestServer) {
    let mut p = pod("typed");
    p["spec"]["containers"] = json!("not-a-list");
    let r = s.post(PODS, &p).await;
    r.assert_status(400, "BadRequest");
    assert!(r.message().starts_with("Pod in version \"v1\" cannot be handled as a Pod"), "{}", r.message());
}

pub async fn strict_field_validation_rejects_unknown_fields(s: &TestServer) {
    let mut cm = configmap("strict");
    cm["bogus"] = json!(1);
    let r = s.post(&format!("{CMS}?fieldValidation=Strict"), &cm).await;
    r.assert_status(400, "BadRequest");
    assert_eq!(
        r.message(),
        "ConfigMap in version \"v1\" cannot be handled as a ConfigMap: strict decoding error: unknown field \"bogus\""
    );
    // Warn (default) drops the field and says so in a Warning header.
    let r = s.post(CMS, &cm).await;
    assert_eq!(r.code, 201);
    assert!(r.body.get("bogus").is_none());
    let w = r.headers.get("warning").unwrap().to_str().unwrap();
    assert_eq!(w, "299 - \"unknown field \\\"bogus\\\"\"");
}

pub async fn dry_run_create_stores_nothing(s: &TestServer) {
    let r = s.post(&format!("{CMS}?dryRun=All"), &configmap("dry")).await;
    assert_eq!(r.code, 201);
    assert_eq!(r.body["metadata"]["name"], "dry");
    s.get(&format!("{CMS}/dry")).await.assert_status(404, "NotFound");
}

/// A create's managedFields entry is in every answer: JSON (spliced from
/// the stored bytes), YAML and a dry run (the object), the object read
/// back, server-side apply creating an object; the next update of the
/// object starts from it.
pub async fn created_objects_answer_with_their_managed_fields(s: &TestServer) {
    let cm = |name: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"b": "2", "a": "1"}});
    let entry = |manager: &str, operation: &str, time: &Value, fields: Value| {
        json!([{"manager": manager, "operation": operation, "apiVersion": "v1", "time": time, "fieldsType": "FieldsV1", "fieldsV1": fields}])
    };
    let created = json!({"f:data": {".": {}, "f:a": {}, "f:b": {}}});
    let r = s.post(&format!("{CMS}?fieldManager=creator"), &cm("mf-json")).await;
    assert_eq!(r.code, 201, "{}", r.text);
    let time = &r.body["metadata"]["managedFields"][0]["time"];
    assert_eq!(r.body["metadata"]["managedFields"], entry("creator", "Update", time, created.clone()), "{}", r.text);
    let read = s.get(&format!("{CMS}/mf-json")).await;
    assert_eq!(read.text, r.text, "read back as answered");

    let r = s.send("POST", CMS, Some("application/json"), Some("application/yaml"), Some(cm("mf-yaml").to_string().into())).await;
    assert_eq!(r.code, 201, "{}", r.text);
    for line in ["managedFields:", "manager: ", "fieldsV1:", "f:data:", "f:a: {}", "f:b: {}"] {
        assert!(r.text.contains(line), "{line} in {}", r.text);
    }

    let r = s.post(&format!("{CMS}?dryRun=All&fieldManager=creator"), &cm("mf-dry")).await;
    assert_eq!(r.code, 201, "{}", r.text);
    let time = &r.body["metadata"]["managedFields"][0]["time"];
    assert_eq!(r.body["metadata"]["managedFields"], entry("creator", "Update", time, created.clone()), "{}", r.text);

    let apply = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "mf-apply"}, "data": {"a": "1"}}).to_string();
    let r = s.patch(&format!("{CMS}/mf-apply?fieldManager=applier"), "application/apply-patch+yaml", &apply).await;
    assert_eq!(r.code, 201, "{}", r.text);
    let time = &r.body["metadata"]["managedFields"][0]["time"];
    assert_eq!(r.body["metadata"]["managedFields"], entry("applier", "Apply", time, json!({"f:data": {"f:a": {}}})), "{}", r.text);
    assert_eq!(s.get(&format!("{CMS}/mf-apply")).await.text, r.text, "read back as answered");

    // Another manager's update takes the field it changed.
    let mut changed = read.body.clone();
    changed["data"]["a"] = json!("changed");
    let r = s.put(&format!("{CMS}/mf-json?fieldManager=editor"), &changed).await;
    assert_eq!(r.code, 200, "{}", r.text);
    let entries = r.body["metadata"]["managedFields"].as_array().expect("entries").clone();
    assert_eq!(entries.len(), 2, "{}", r.text);
    assert_eq!(entries[0]["manager"], "creator");
    assert_eq!(entries[0]["fieldsV1"], json!({"f:data": {".": {}, "f:b": {}}}));
    assert_eq!(entries[1]["manager"], "editor");
    assert_eq!(entries[1]["fieldsV1"], json!({"f:data": {"f:a": {}}}));
}

pub async fn yaml_bodies_and_yaml_responses(s: &TestServer) {
    let yaml = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: from-yaml\ndata:\n  a: b\n";
    let r = s.send("POST", CMS, Some("application/yaml"), Some("application/yaml"), Some(yaml.into())).await;
    assert_eq!(r.code, 201, "{}", r.text);
    assert_eq!(r.headers["content-type"], "application/yaml");
    assert!(r.text.contains("name: from-yaml"), "{}", r.text);
}

pub async fn body_over_3mib_is_413(s: &TestServer) {
    let big = "x".repeat(3 * 1024 * 1024 + 10);
    let body = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "big"}, "data": {"a": big}});
    let r = s.post(CMS, &body).await;
    r.assert_status(413, "RequestEntityTooLarge");
    s.get(&format!("{CMS}/big")).await.assert_status(404, "NotFound");
}

pub async fn malformed_json_is_400(s: &TestServer) {
    let r = s.send("POST", CMS, Some("application/json"), None, Some(b"{\"kind\": ".to_vec())).await;
    r.assert_status(400, "BadRequest");
    assert!(!r.message().is_empty());
}

pub async fn unsupported_content_type_is_415(s: &TestServer) {
    let r = s.send("POST", CMS, Some("text/plain"), None, Some(configmap("t").to_string().into())).await;
    r.assert_status(415, "UnsupportedMediaType");
    let r = s.patch(&format!("{CMS}/t"), "application/json", "{}").await;
    r.assert_status(415, "UnsupportedMediaType");
}

/// Built-in kinds are served in protobuf; a Table in protobuf is not, so
/// an `Accept` naming only that is 406 (upstream lists its media types).
pub async fn protobuf_tables_only_accept_is_406(s: &TestServer) {
    let r = s.get_as(CMS, "application/vnd.kubernetes.protobuf").await;
    assert_eq!((r.code, r.headers["content-type"].to_str().unwrap()), (200, "application/vnd.kubernetes.protobuf"));
    let r = s.get_as(CMS, "application/vnd.kubernetes.protobuf;as=Table;v=v1;g=meta.k8s.io").await;
    r.assert_status(406, "NotAcceptable");
    assert_eq!(
        r.message(),
        "only the following media types are accepted: application/json, application/yaml, application/vnd.kubernetes.protobuf"
    );
    let r = s.get_as(CMS, "application/vnd.kubernetes.protobuf;as=Table;v=v1;g=meta.k8s.io, application/json").await;
    assert_eq!((r.code, r.headers["content-type"].to_str().unwrap()), (200, "application/json"));
}

pub async fn get_missing_is_404_not_found(s: &TestServer) {
    let r = s.get(&format!("{PODS}/ghost")).await;
    r.assert_status(404, "NotFound");
    assert_eq!(r.message(), "pods \"ghost\" not found");
    assert_eq!(r.body["details"], json!({"name": "ghost", "kind": "pods"}));
    let r = s.get("/apis/apps/v1/namespaces/default/deployments/ghost").await;
    assert_eq!(r.message(), "deployments.apps \"ghost\" not found");
    assert_eq!(r.body["details"]["group"], "apps");
}

pub async fn list_has_kind_api_version_and_resource_version(s: &TestServer) {
    s.post(PODS, &pod("a")).await;
    let r = s.get(PODS).await;
    assert_eq!(r.code, 200);
    assert_eq!(r.body["kind"], "PodList");
    assert_eq!(r.body["apiVersion"], "v1");
    assert!(r.rv().parse::<i64>().unwrap() > 0);
    assert_eq!(r.body["items"].as_array().unwrap().len(), 1);
    let r = s.get("/apis/apps/v1/deployments").await;
    assert_eq!(r.body["kind"], "DeploymentList");
    assert_eq!(r.body["apiVersion"], "apps/v1");
}

pub async fn list_filters_by_label_and_field_selectors(s: &TestServer) {
    for (name, app) in [("a", "web"), ("b", "db"), ("c", "web")] {
        let mut p = pod(name);
        p["metadata"]["labels"]["app"] = json!(app);
        assert_eq!(s.post(PODS, &p).await.code, 201);
    }
    let names = |r: &crate::common::Resp| -> Vec<String> {
        r.body["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["metadata"]["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(names(&s.get(&format!("{PODS}?labelSelector=app%3Dweb")).await), vec!["a", "c"]);
    assert_eq!(names(&s.get(&format!("{PODS}?labelSelector=app%20in%20(db)")).await), vec!["b"]);
    assert_eq!(names(&s.get(&format!("{PODS}?fieldSelector=metadata.name%3Dc")).await), vec!["c"]);
    assert_eq!(
        names(&s.get(&format!("{PODS}?fieldSelector=status.phase%3DPending,metadata.name!%3Da")).await),
        vec!["b", "c"]
    );
    let r = s.get(&format!("{PODS}?fieldSelector=spec.bogus%3Dx")).await;
    r.assert_status(400, "BadRequest");
    assert_eq!(r.message(), "field label not supported: spec.bogus");
}

pub async fn list_paginates_with_limit_and_continue(s: &TestServer) {
    for i in 0..5 {
        assert_eq!(s.post(CMS, &configmap(&format!("cm-{i}"))).await.code, 201);
    }
    // The bootstrap leaves no configmaps, so there are exactly 5.
    let first = s.get(&format!("{CMS}?limit=2")).await;
    assert_eq!(first.body["items"].as_array().unwrap().len(), 2);
    assert_eq!(first.body["metadata"]["remainingItemCount"], 3);
    let token = first.body["metadata"]["continue"].as_str().unwrap().to_string();
    // A write between pages does not show: pages are read at the first page's revision.
    s.post(CMS, &configmap("cm-late")).await;
    let mut names: Vec<String> = first.body["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    let mut token = Some(token);
    while let Some(t) = token {
        let r = s.get(&format!("{CMS}?limit=2&continue={t}")).await;
        assert_eq!(r.code, 200, "{}", r.text);
        assert_eq!(r.rv(), first.rv());
        names.extend(
            r.body["items"].as_array().unwrap().iter().map(|i| i["metadata"]["name"].as_str().unwrap().to_string()),
        );
        token = r.body["metadata"]["continue"].as_str().map(str::to_string);
    }
    assert_eq!(names, vec!["cm-0", "cm-1", "cm-2", "cm-3", "cm-4"]);
    s.get(&format!("{CMS}?limit=2&continue=garbage")).await.assert_status(400, "BadRequest");
}

pub async fn list_with_selector_pages_without_remaining_count(s: &TestServer) {
    for i in 0..4 {
        let mut cm = configmap(&format!("sel-{i}"));
        cm["metadata"]["labels"] = json!({"even": (i % 2 == 0).to_string()});
        s.post(CMS, &cm).await;
    }
    let r = s.get(&format!("{CMS}?limit=1&labelSelector=even%3Dtrue")).await;
    assert_eq!(r.body["items"][0]["metadata"]["name"], "sel-0");
    assert!(r.body["metadata"].get("remainingItemCount").is_none());
    let t = r.body["metadata"]["continue"].as_str().unwrap();
    let r = s.get(&format!("{CMS}?limit=1&labelSelector=even%3Dtrue&continue={t}")).await;
    assert_eq!(r.body["items"][0]["metadata"]["name"], "sel-2");
}

pub async fn list_all_namespaces(s: &TestServer) {
    s.namespace("other").await;
    s.post(CMS, &configmap("here")).await;
    s.post("/api/v1/namespaces/other/configmaps", &configmap("there")).await;
    let r = s.get("/api/v1/configmaps").await;
    let items = r.body["items"].as_array().unwrap();
    let pairs: Vec<(String, String)> = items
        .iter()
        .map(|i| (i["metadata"]["namespace"].as_str().unwrap().into(), i["metadata"]["name"].as_str().unwrap().into()))
        .collect();
    assert!(pairs.contains(&("default".into(), "here".into())));
    assert!(pairs.contains(&("other".into(), "there".into())));
}

pub async fn list_at_compacted_revision_is_410_expired(s: &TestServer) {
    let a = s.post(CMS, &configmap("old")).await;
    let rv: i64 = a.rv().parse().unwrap();
    s.put(
        &format!("{CMS}/old"),
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "old"}, "data": {"x": "1"}}),
    )
    .await;
    s.post(CMS, &configmap("newer")).await;
    let current = s.storage.current_revision().await.unwrap();
    s.storage.compact(current).await.unwrap();
    let r = s.get(&format!("{CMS}?resourceVersion={rv}&resourceVersionMatch=Exact")).await;
    r.assert_status(410, "Expired");
    // Latest reads still work.
    assert_eq!(s.get(CMS).await.code, 200);
}

pub async fn update_with_stale_resource_version_is_409(s: &TestServer) {
    let created = s.post(CMS, &configmap("u")).await;
    let mut v1 = created.body.clone();
    v1["data"]["k"] = json!("v1");
    let r1 = s.put(&format!("{CMS}/u"), &v1).await;
    assert_eq!(r1.code, 200, "{}", r1.text);
    assert_ne!(r1.rv(), created.rv());
    // The same stale object again.
    v1["data"]["k"] = json!("v2");
    let r2 = s.put(&format!("{CMS}/u"), &v1).await;
    r2.assert_status(409, "Conflict");
    assert_eq!(
        r2.message(),
        "Operation cannot be fulfilled on configmaps \"u\": the object has been modified; please apply your changes to the latest version and try again"
    );
    // Without a resourceVersion the update is unconditional.
    v1["metadata"].as_object_mut().unwrap().remove("resourceVersion");
    let r3 = s.put(&format!("{CMS}/u"), &v1).await;
    assert_eq!(r3.code, 200);
    assert_eq!(r3.body["data"]["k"], "v2");
}

pub async fn update_keeps_immutable_metadata_and_bumps_generation_on_spec_change(s: &TestServer) {
    let created = s.post(PODS, &pod("g")).await;
    let mut p = created.body.clone();
    p["metadata"]["uid"] = json!("forged");
    p["metadata"]["creationTimestamp"] = json!("2000-01-01T00:00:00Z");
    p["metadata"]["labels"]["extra"] = json!("1");
    let r = s.put(&format!("{PODS}/g"), &p).await;
    assert_eq!(r.code, 200, "{}", r.text);
    assert_eq!(r.body["metadata"]["uid"], created.body["metadata"]["uid"]);
    assert_eq!(r.body["metadata"]["creationTimestamp"], created.body["metadata"]["creationTimestamp"]);
    assert_eq!(r.body["metadata"]["generation"], 1, "label change leaves generation");
    let mut p = r.body.clone();
    p["spec"]["containers"][0]["image"] = json!("nginx:1.26");
    let r = s.put(&format!("{PODS}/g"), &p).await;
    assert_eq!(r.code, 200, "{}", r.text);
    assert_eq!(r.body["metadata"]["generation"], 2);
}

pub async fn noop_update_keeps_resource_version(s: &TestServer) {
    let created = s.post(CMS, &configmap("same")).await;
    let r = s.put(&format!("{CMS}/same"), &created.body).await;
    assert_eq!(r.code, 200);
    assert_eq!(r.rv(), created.rv());
}

pub async fn status_subresource_separates_spec_and_status(s: &TestServer) {
    let created = s.post(PODS, &pod("st")).await;
    // The main resource ignores status changes.
    let mut p = created.body.clone();
    p["status"]["phase"] = json!("Running");
    let r = s.put(&format!("{PODS}/st"), &p).await;
    assert_eq!(r.body["status"]["phase"], "Pending");
    // The status subresource changes only status.
    let mut p = r.body.clone();
    p["status"]["phase"] = json!("Running");
    p["spec"]["containers"][0]["image"] = json!("ignored:1");
    p["metadata"].as_object_mut().unwrap().remove("resourceVersion");
    let r = s.put(&format!("{PODS}/st/status"), &p).await;
    assert_eq!(r.code, 200, "{}", r.text);
    assert_eq!(r.body["status"]["phase"], "Running");
    assert_eq!(r.body["spec"]["containers"][0]["image"], "nginx:1.25");
    let g = s.get(&format!("{PODS}/st/status")).await;
    assert_eq!(g.body["status"]["phase"], "Running");
    let r = s
        .patch(&format!("{PODS}/st/status"), "application/merge-patch+json", r#"{"status":{"podIP":"10.1.2.3"}}"#)
        .await;
    assert_eq!(r.body["status"]["podIP"], "10.1.2.3");
}

pub async fn patch_types_apply_to_the_stored_object(s: &TestServer) {
    s.post(CMS, &configmap("p")).await;
    let path = format!("{CMS}/p");
    let r = s.patch(&path, "application/merge-patch+json", r#"{"data":{"m":"1"}}"#).await;
    assert_eq!(r.code, 200, "{}", r.text);
    assert_eq!(r.body["data"]["m"], "1");
    let r = s.patch(&path, "application/json-patch+json", r#"[{"op":"add","path":"/data/j","value":"2"}]"#).await;
    assert_eq!(r.code, 200, "{}", r.text);
    assert_eq!(r.body["data"]["j"], "2");
    let r = s.patch(&path, "application/strategic-merge-patch+json", r#"{"data":{"s":"3"}}"#).await;
    assert_eq!(r.code, 200, "{}", r.text);
    assert_eq!(r.body["data"], json!({"k": "v", "m": "1", "j": "2", "s": "3"}));
    let r = s.patch(&format!("{CMS}/missing"), "application/merge-patch+json", "{}").await;
    r.assert_status(404, "NotFound");
}

pub async fn patch_with_stale_resource_version_is_409(s: &TestServer) {
    let c = s.post(CMS, &configmap("pr")).await;
    s.patch(&format!("{CMS}/pr"), "application/merge-patch+json", r#"{"data":{"a":"1"}}"#).await;
    let body = format!(r#"{{"metadata":{{"resourceVersion":"{}"}},"data":{{"b":"2"}}}}"#, c.rv());
    s.patch(&format!("{CMS}/pr"), "application/merge-patch+json", &body).await.assert_status(409, "Conflict");
}

pub async fn server_side_apply_creates_then_updates(s: &TestServer) {
    let path = format!("{CMS}/applied?fieldManager=kubectl&force=false");
    let yaml = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: applied\ndata:\n  a: \"1\"\n";
    let r = s.patch(&path, "application/apply-patch+yaml", yaml).await;
    assert_eq!(r.code, 201, "{}", r.text);
    let mf = r.body["metadata"]["managedFields"].as_array().unwrap();
    assert!(mf.iter().any(|m| m["manager"] == "kubectl" && m["operation"] == "Apply"), "{mf:?}");
    let r = s.patch(&path, "application/apply-patch+yaml", &yaml.replace("\"1\"", "\"2\"")).await;
    assert_eq!(r.code, 200, "{}", r.text);
    assert_eq!(r.body["data"]["a"], "2");
    // Apply needs a field manager.
    let r = s.patch(&format!("{CMS}/applied"), "application/apply-patch+yaml", yaml).await;
    assert_eq!(r.code, 422, "{}", r.text);
}

pub async fn delete_answers_object_or_status_like_upstream(s: &TestServer) {
    s.post(PODS, &pod("d")).await;
    let r = s.delete(&format!("{PODS}/d"), None).await;
    assert_eq!(r.code, 200, "{}", r.text);
    assert_eq!(r.body["kind"], "Pod");
    s.get(&format!("{PODS}/d")).await.assert_status(404, "NotFound");
    let c = s.post(CMS, &configmap("d")).await;
    let r = s.delete(&format!("{CMS}/d"), None).await;
    assert_eq!(r.code, 200);
    assert_eq!(r.body["kind"], "Status");
    assert_eq!(r.body["status"], "Success");
    assert_eq!(r.body["details"]["uid"], c.body["metadata"]["uid"]);
    s.delete(&format!("{CMS}/d"), None).await.assert_status(404, "NotFound");
}

pub async fn delete_preconditions_conflict(s: &TestServer) {
    let c = s.post(CMS, &configmap("pre")).await;
    let opts = json!({"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"uid": "not-the-uid"}});
    let r = s.delete(&format!("{CMS}/pre"), Some(&opts)).await;
    r.assert_status(409, "Conflict");
    assert!(r.message().contains("Precondition failed: UID in precondition: not-the-uid"), "{}", r.message());
    let opts = json!({"preconditions": {"resourceVersion": "1"}});
    s.delete(&format!("{CMS}/pre"), Some(&opts)).await.assert_status(409, "Conflict");
    let opts = json!({"preconditions": {"uid": c.body["metadata"]["uid"], "resourceVersion": c.rv()}});
    assert_eq!(s.delete(&format!("{CMS}/pre"), Some(&opts)).await.code, 200);
}

pub async fn finalizers_defer_deletion_until_removed(s: &TestServer) {
    let mut cm = configmap("fin");
    cm["metadata"]["finalizers"] = json!(["example.com/hold"]);
    s.post(CMS, &cm).await;
    let r = s.delete(&format!("{CMS}/fin"), None).await;
    // Marked, not removed: the object with 200 (upstream answers 202 only
    // when `orphanDependents: false` was asked).
    assert_eq!(r.code, 200, "{}", r.text);
    assert_eq!(r.body["kind"], "ConfigMap", "{}", r.text);
    let g = s.get(&format!("{CMS}/fin")).await;
    assert_eq!(g.code, 200, "still there");
    assert!(g.body["metadata"]["deletionTimestamp"].is_string());
    assert_eq!(g.body["metadata"]["deletionGracePeriodSeconds"], 0);
    let r = s.patch(&format!("{CMS}/fin"), "application/merge-patch+json", r#"{"metadata":{"finalizers":null}}"#).await;
    assert_eq!(r.code, 200, "{}", r.text);
    s.get(&format!("{CMS}/fin")).await.assert_status(404, "NotFound");
}

/// Upstream behaviour (the namespace REST storage): DELETE only marks the
/// namespace Terminating; its content stays until the namespace controller
/// (not run by this bare server) removes it and empties `spec.finalizers`
/// through `finalize`, which removes the namespace.
pub async fn deleting_a_namespace_marks_it_terminating_until_finalized(s: &TestServer) {
    s.namespace("doomed").await;
    s.post("/api/v1/namespaces/doomed/configmaps", &configmap("a")).await;
    let r = s.delete("/api/v1/namespaces/doomed", None).await;
    assert_eq!(r.code, 200, "{}", r.text);
    assert_eq!(r.body["kind"], "Namespace");
    assert_eq!(r.body["status"]["phase"], "Terminating");
    assert_eq!(r.body["spec"]["finalizers"], json!(["kubernetes"]));
    assert!(r.body["metadata"]["deletionTimestamp"].is_string(), "{}", r.text);
    let again = s.delete("/api/v1/namespaces/doomed", None).await;
    assert_eq!(again.code, 200, "{}", again.text);
    assert_eq!(s.get("/api/v1/namespaces/doomed").await.body["status"]["phase"], "Terminating");
    assert_eq!(s.get("/api/v1/namespaces/doomed/configmaps/a").await.code, 200, "content is the controller's to remove");
    let mut ns = s.get("/api/v1/namespaces/doomed").await.body;
    ns["spec"]["finalizers"] = json!([]);
    let f = s.put("/api/v1/namespaces/doomed/finalize", &ns).await;
    assert_eq!(f.code, 200, "{}", f.text);
    s.get("/api/v1/namespaces/doomed").await.assert_status(404, "NotFound");
}

pub async fn system_namespaces_may_not_be_deleted(s: &TestServer) {
    for name in ["default", "kube-system", "kube-public"] {
        let r = s.delete(&format!("/api/v1/namespaces/{name}"), None).await;
        r.assert_status(403, "Forbidden");
        assert_eq!(r.message(), format!("namespaces \"{name}\" is forbidden: this namespace may not be deleted"));
        assert_eq!(s.get(&format!("/api/v1/namespaces/{name}")).await.body["status"]["phase"], "Active");
    }
}

pub async fn foreground_and_orphan_deletes_add_gc_finalizers(s: &TestServer) {
    for (n, policy, want) in [
        ("fg", "Foreground", json!(["foregroundDeletion"])),
        ("or", "Orphan", json!(["orphan"])),
    ] {
        s.post(CMS, &configmap(n)).await;
        let body = json!({"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": policy});
        let r = s.delete(&format!("{CMS}/{n}"), Some(&body)).await;
        assert!(r.code == 200 || r.code == 202, "{}", r.text);
        let g = s.get(&format!("{CMS}/{n}")).await;
        assert_eq!(g.code, 200, "kept for the garbage collector: {}", g.text);
        assert_eq!(g.body["metadata"]["finalizers"], want);
        assert!(g.body["metadata"]["deletionTimestamp"].is_string());
    }
    // orphanDependents: true is the deprecated spelling of Orphan.
    s.post(CMS, &configmap("od")).await;
    s.delete(&format!("{CMS}/od"), Some(&json!({"orphanDependents": true}))).await;
    assert_eq!(s.get(&format!("{CMS}/od")).await.body["metadata"]["finalizers"], json!(["orphan"]));
    let both = json!({"orphanDependents": true, "propagationPolicy": "Foreground"});
    let r = s.delete(&format!("{CMS}/od"), Some(&both)).await;
    r.assert_status(422, "Invalid");
    assert_eq!(
        r.message(),
        "DeleteOptions.meta.k8s.io \"\" is invalid: propagationPolicy: Invalid value: \"Foreground\": orphanDependents and deletionPropagation cannot be both set"
    );
    // Background (and no policy) deletes at once.
    s.post(CMS, &configmap("bg")).await;
    s.delete(&format!("{CMS}/bg?propagationPolicy=Background"), None).await;
    s.get(&format!("{CMS}/bg")).await.assert_status(404, "NotFound");
}

pub async fn creating_in_a_terminating_namespace_is_403(s: &TestServer) {
    s.namespace("held").await;
    s.delete("/api/v1/namespaces/held", None).await;
    let ns = s.get("/api/v1/namespaces/held").await;
    assert_eq!(ns.body["status"]["phase"], "Terminating");
    let r = s.post("/api/v1/namespaces/held/configmaps", &configmap("new")).await;
    r.assert_status(403, "Forbidden");
    assert_eq!(
        r.message(),
        "configmaps \"new\" is forbidden: unable to create new content in namespace held because it is being terminated"
    );
    assert_eq!(r.body["details"]["causes"][0]["reason"], "NamespaceTerminating");
}

pub async fn delete_collection_honours_label_selector(s: &TestServer) {
    for (n, l) in [("x1", "a"), ("x2", "a"), ("x3", "b")] {
        let mut cm = configmap(n);
        cm["metadata"]["labels"] = json!({"grp": l});
        s.post(CMS, &cm).await;
    }
    let r = s.delete(&format!("{CMS}?labelSelector=grp%3Da"), None).await;
    assert_eq!(r.code, 200, "{}", r.text);
    assert_eq!(r.body["kind"], "ConfigMapList");
    assert_eq!(r.body["items"].as_array().unwrap().len(), 2);
    let left: Vec<Value> = s.get(CMS).await.body["items"].as_array().unwrap().clone();
    assert_eq!(left.len(), 1);
    assert_eq!(left[0]["metadata"]["name"], "x3");
}

pub async fn pod_binding_sets_node_once(s: &TestServer) {
    s.post(PODS, &pod("b")).await;
    let binding = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "b"}, "target": {"kind": "Node", "name": "node-1"}});
    let r = s.post(&format!("{PODS}/b/binding"), &binding).await;
    assert_eq!(r.code, 201, "{}", r.text);
    assert_eq!(r.body["status"], "Success");
    let g = s.get(&format!("{PODS}/b")).await;
    assert_eq!(g.body["spec"]["nodeName"], "node-1");
    let r = s.post(&format!("{PODS}/b/binding"), &binding).await;
    r.assert_status(409, "Conflict");
    assert!(r.message().contains("is already assigned to node \"node-1\""), "{}", r.message());
    // A bound pod is deleted gracefully: marked, kept until grace 0.
    let r = s.delete(&format!("{PODS}/b"), None).await;
    assert_eq!(r.code, 200, "{}", r.text);
    assert_eq!(r.body["metadata"]["deletionGracePeriodSeconds"], 30);
    assert_eq!(s.get(&format!("{PODS}/b")).await.code, 200);
    let r = s.delete(&format!("{PODS}/b?gracePeriodSeconds=0"), None).await;
    assert_eq!(r.code, 200, "{}", r.text);
    s.get(&format!("{PODS}/b")).await.assert_status(404, "NotFound");
}

pub async fn services_get_cluster_ips_and_defaults(s: &TestServer) {
    let svc = |n: &str| json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": n}, "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}});
    let a = s.post("/api/v1/namespaces/default/services", &svc("a")).await;
    let b = s.post("/api/v1/namespaces/default/services", &svc("b")).await;
    assert_eq!((a.code, b.code), (201, 201), "{}", a.text);
    let ip_a = a.body["spec"]["clusterIP"].as_str().unwrap();
    let ip_b = b.body["spec"]["clusterIP"].as_str().unwrap();
    assert!(ip_a.starts_with("10.") && ip_a != ip_b);
    let oct: Vec<u8> = ip_a.split('.').map(|x| x.parse().unwrap()).collect();
    assert!(oct[0] == 10 && (96..112).contains(&oct[1]), "{ip_a} in 10.96.0.0/12");
    assert_eq!(a.body["spec"]["clusterIPs"], json!([ip_a]));
    assert_eq!(a.body["spec"]["type"], "ClusterIP");
    assert_eq!(a.body["spec"]["ports"][0]["protocol"], "TCP");
    assert_eq!(a.body["spec"]["ports"][0]["targetPort"], 80);
    // Asking for a live IP is refused.
    let mut c = svc("c");
    c["spec"]["clusterIP"] = json!(ip_a);
    s.post("/api/v1/namespaces/default/services", &c).await.assert_status(422, "Invalid");
    // An update without clusterIP keeps it.
    let mut upd = a.body.clone();
    upd["spec"].as_object_mut().unwrap().remove("clusterIP");
    upd["spec"].as_object_mut().unwrap().remove("clusterIPs");
    let r = s.put("/api/v1/namespaces/default/services/a", &upd).await;
    assert_eq!(r.body["spec"]["clusterIP"], ip_a, "{}", r.text);
}

pub async fn endpointslice_ports_are_defaulted(s: &TestServer) {
    let es = json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "metadata": {"name": "es"}, "addressType": "IPv4", "ports": [{"port": 80}], "endpoints": [{"addresses": ["10.0.0.1"]}]});
    let r = s.post("/apis/discovery.k8s.io/v1/namespaces/default/endpointslices", &es).await;
    assert_eq!(r.code, 201, "{}", r.text);
    assert_eq!(r.body["ports"][0]["name"], "");
    assert_eq!(r.body["ports"][0]["protocol"], "TCP");
}

pub async fn unknown_paths_are_404_and_wrong_methods_405(s: &TestServer) {
    s.get("/api/v1/widgets").await.assert_status(404, "NotFound");
    s.get("/nothing/here").await.assert_status(404, "NotFound");
    s.send("PUT", PODS, Some("application/json"), None, Some(b"{}".to_vec()))
        .await
        .assert_status(405, "MethodNotAllowed");
    s.send("POST", "/version", None, None, None).await.assert_status(405, "MethodNotAllowed");
    s.send("DELETE", "/api/v1/namespaces", None, None, None).await.assert_status(405, "MethodNotAllowed");
}

pub async fn protobuf_bodies_from_kubectl_1_33_are_accepted(s: &TestServer) {
    // Bodies captured from `kubectl.1.33 create configmap|deployment` (which send protobuf).
    let cm = include_bytes!("../fixtures/configmap.pb").to_vec();
    // kubectl's Accept gets the created object back in protobuf.
    let resp = s
        .client
        .post(format!("{}{CMS}", s.base))
        .header("content-type", "application/vnd.kubernetes.protobuf")
        .header("accept", "application/vnd.kubernetes.protobuf,application/json")
        .body(cm)
        .send()
        .await
        .expect("request");
    assert_eq!(resp.status().as_u16(), 201);
    assert_eq!(resp.headers()["content-type"], "application/vnd.kubernetes.protobuf");
    let created = rkube_api::protobuf::decode_object(&resp.bytes().await.expect("body")).expect("protobuf answer");
    assert_eq!(created["data"], json!({"a": "1", "b": "two"}));
    let accept = Some("application/json");
    let d = include_bytes!("../fixtures/deployment.pb").to_vec();
    let r = s
        .send(
            "POST",
            "/apis/apps/v1/namespaces/default/deployments",
            Some("application/vnd.kubernetes.protobuf"),
            accept,
            Some(d),
        )
        .await;
    assert_eq!(r.code, 201, "{}", r.text);
    assert_eq!(r.body["spec"]["template"]["spec"]["containers"][0]["image"], "nginx:1.25");
    let r =
        s.send("POST", CMS, Some("application/vnd.kubernetes.protobuf"), accept, Some(b"k8s\x00\x12".to_vec())).await;
    r.assert_status(400, "BadRequest");
}

pub async fn deployment_scale_subresource_reads_and_sets_replicas(s: &TestServer) {
    let deploy = json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}
    });
    let path = "/apis/apps/v1/namespaces/default/deployments/web";
    assert_eq!(s.post("/apis/apps/v1/namespaces/default/deployments", &deploy).await.code, 201);
    let g = s.get(&format!("{path}/scale")).await;
    assert_eq!(g.body["kind"], "Scale");
    assert_eq!(g.body["apiVersion"], "autoscaling/v1");
    assert_eq!(g.body["spec"]["replicas"], 2);
    assert_eq!(g.body["status"]["selector"], "app=web");
    // kubectl scale: a merge patch on the scale subresource.
    let r = s.patch(&format!("{path}/scale"), "application/merge-patch+json", r#"{"spec":{"replicas":5}}"#).await;
    assert_eq!(r.code, 200, "{}", r.text);
    assert_eq!(r.body["spec"]["replicas"], 5);
    let d = s.get(path).await;
    assert_eq!(d.body["spec"]["replicas"], 5);
    assert_eq!(d.body["metadata"]["generation"], 2);
}

pub async fn nodeport_services_get_node_ports_from_the_range(s: &TestServer) {
    let svc = |n: &str, node_port: Option<i64>| {
        let mut port = json!({"port": 80});
        if let Some(np) = node_port {
            port["nodePort"] = json!(np);
        }
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": n}, "spec": {"type": "NodePort", "ports": [port]}})
    };
    let a = s.post("/api/v1/namespaces/default/services", &svc("np-a", None)).await;
    assert_eq!(a.code, 201, "{}", a.text);
    let np = a.body["spec"]["ports"][0]["nodePort"].as_i64().unwrap();
    assert!((30000..=32767).contains(&np), "{np}");
    assert_eq!(a.body["spec"]["externalTrafficPolicy"], "Cluster");
    let dup = s.post("/api/v1/namespaces/default/services", &svc("np-b", Some(np))).await;
    dup.assert_status(422, "Invalid");
    assert_eq!(dup.body["details"]["causes"][0]["field"], "spec.ports[0].nodePort");
    s.post("/api/v1/namespaces/default/services", &svc("np-c", Some(80))).await.assert_status(422, "Invalid");
    // An update that drops nodePort keeps the allocated one.
    let mut upd = a.body.clone();
    upd["spec"]["ports"][0].as_object_mut().unwrap().remove("nodePort");
    let r = s.put("/api/v1/namespaces/default/services/np-a", &upd).await;
    assert_eq!(r.body["spec"]["ports"][0]["nodePort"], np, "{}", r.text);
}
