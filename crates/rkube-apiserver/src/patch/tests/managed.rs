//! managedFields bookkeeping of Update operations (create, update, patch).

use serde_json::{json, Value};

use super::NOW;
use crate::patch::{record_update, update_managed_fields, UpdateRecord};

fn record(manager: &str, old: Option<&Value>, new: &mut Value, now: &str) {
    record_update(
        &UpdateRecord {
            manager,
            api_version: "v1",
            subresource: "",
            now,
        },
        old,
        new,
    );
}

fn configmap(data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": "cm", "namespace": "default", "uid": "u", "resourceVersion": "1",
                        "creationTimestamp": "2024-01-01T00:00:00Z", "labels": {"app": "x"}},
           "data": data})
}

fn entries(obj: &Value) -> Vec<Value> {
    obj.pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

#[test]
fn create_records_every_set_field_except_identity_metadata() {
    let mut obj = configmap(json!({"a": "1"}));
    record("kubectl-create", None, &mut obj, NOW);
    assert_eq!(
        entries(&obj),
        vec![json!({
            "manager": "kubectl-create", "operation": "Update", "apiVersion": "v1", "time": NOW,
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:data": {".": {}, "f:a": {}}, "f:metadata": {"f:labels": {".": {}, "f:app": {}}}}
        })]
    );
    // Exact wire order: `.` first, fields sorted.
    assert_eq!(
        obj["metadata"]["managedFields"][0]["fieldsV1"].to_string(),
        r#"{"f:data":{".":{},"f:a":{}},"f:metadata":{"f:labels":{".":{},"f:app":{}}}}"#
    );
}

#[test]
fn create_of_deployment_does_not_own_zero_value_struct_nodes() {
    let mut d = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
        "spec": {"replicas": 1, "strategy": {"type": "Recreate"},
                 "template": {"metadata": {"labels": {"app": "d"}},
                              "spec": {"containers": [{"name": "web", "image": "i", "ports": [{"containerPort": 80, "protocol": "TCP"}]}]}}}});
    update_managed_fields(
        "kubectl-client-side-apply",
        "Create",
        "apps/v1",
        None,
        &mut d,
    );
    let f = &d["metadata"]["managedFields"][0]["fieldsV1"];
    assert_eq!(
        *f,
        json!({"f:spec": {"f:replicas": {}, "f:strategy": {"f:type": {}},
            "f:template": {"f:metadata": {"f:labels": {".": {}, "f:app": {}}},
                           "f:spec": {"f:containers": {"k:{\"name\":\"web\"}": {".": {}, "f:image": {}, "f:name": {},
                               "f:ports": {".": {}, "k:{\"containerPort\":80,\"protocol\":\"TCP\"}": {".": {}, "f:containerPort": {}, "f:protocol": {}}}}}}}}})
    );
    assert_eq!(
        d["metadata"]["managedFields"][0]["manager"],
        "kubectl-client-side-apply"
    );
    assert_eq!(d["metadata"]["managedFields"][0]["operation"], "Update");
}

#[test]
fn update_moves_changed_fields_to_the_updater() {
    let mut v1 = configmap(json!({"a": "1", "b": "2"}));
    record("creator", None, &mut v1, NOW);
    let mut v2 = v1.clone();
    v2["data"]["a"] = json!("9");
    record("editor", Some(&v1), &mut v2, "2024-05-02T00:00:00Z");
    let e = entries(&v2);
    assert_eq!(e.len(), 2);
    assert_eq!(e[0]["manager"], "creator");
    assert_eq!(
        e[0]["fieldsV1"],
        json!({"f:data": {".": {}, "f:b": {}}, "f:metadata": {"f:labels": {".": {}, "f:app": {}}}})
    );
    assert_eq!(e[1]["manager"], "editor");
    assert_eq!(e[1]["time"], "2024-05-02T00:00:00Z");
    assert_eq!(e[1]["fieldsV1"], json!({"f:data": {"f:a": {}}}));
}

#[test]
fn update_drops_removed_fields_and_empty_entries() {
    let mut v1 = configmap(json!({"a": "1"}));
    record("creator", None, &mut v1, NOW);
    let mut v2 = v1.clone();
    v2.as_object_mut().unwrap().shift_remove("data");
    v2["metadata"]
        .as_object_mut()
        .unwrap()
        .shift_remove("labels");
    record("editor", Some(&v1), &mut v2, NOW);
    assert!(v2["metadata"].get("managedFields").is_none(), "{v2}");
}

#[test]
fn update_that_changes_nothing_keeps_entries_and_times() {
    let mut v1 = configmap(json!({"a": "1"}));
    record("creator", None, &mut v1, NOW);
    let mut v2 = v1.clone();
    v2["metadata"]["resourceVersion"] = json!("2");
    record("editor", Some(&v1), &mut v2, "2030-01-01T00:00:00Z");
    assert_eq!(entries(&v2), entries(&v1));
}

#[test]
fn update_of_own_fields_merges_into_the_existing_entry() {
    let mut v1 = configmap(json!({"a": "1"}));
    record("kubectl-edit", None, &mut v1, NOW);
    let mut v2 = v1.clone();
    v2["data"]["b"] = json!("2");
    record("kubectl-edit", Some(&v1), &mut v2, "2024-06-01T00:00:00Z");
    let e = entries(&v2);
    assert_eq!(e.len(), 1);
    assert_eq!(e[0]["time"], "2024-06-01T00:00:00Z");
    assert_eq!(
        e[0]["fieldsV1"]["f:data"],
        json!({".": {}, "f:a": {}, "f:b": {}})
    );
}

#[test]
fn client_supplied_managed_fields_replace_the_stored_ones() {
    let mut v1 = configmap(json!({"a": "1"}));
    record("creator", None, &mut v1, NOW);
    let mut v2 = v1.clone();
    v2["metadata"]["managedFields"] = json!([{"manager": "someone", "operation": "Update", "apiVersion": "v1",
        "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {"f:a": {}}}}]);
    record("editor", Some(&v1), &mut v2, NOW);
    let e = entries(&v2);
    assert_eq!(e.len(), 1);
    assert_eq!(e[0]["manager"], "someone");
}

#[test]
fn undecodable_managed_fields_fall_back_to_stored_ones() {
    let mut v1 = configmap(json!({"a": "1"}));
    record("creator", None, &mut v1, NOW);
    let mut v2 = v1.clone();
    v2["metadata"]["managedFields"] =
        json!([{"manager": "x", "fieldsType": "FieldsV2", "fieldsV1": {}}]);
    v2["data"]["a"] = json!("2");
    record("editor", Some(&v1), &mut v2, NOW);
    let managers: Vec<Value> = entries(&v2).iter().map(|e| e["manager"].clone()).collect();
    assert_eq!(managers, [json!("creator"), json!("editor")]);
}

#[test]
fn entries_are_sorted_apply_first_then_by_time() {
    let mut v1 = configmap(json!({"a": "1"}));
    v1["metadata"]["managedFields"] = json!([
        {"manager": "z", "operation": "Update", "apiVersion": "v1", "time": "2024-01-02T00:00:00Z", "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {"f:a": {}}}},
        {"manager": "y", "operation": "Update", "apiVersion": "v1", "time": "2024-01-01T00:00:00Z", "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:labels": {"f:app": {}}}}},
        {"manager": "x", "operation": "Apply", "apiVersion": "v1", "time": "2024-01-03T00:00:00Z", "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {"f:a": {}}}}
    ]);
    let mut v2 = v1.clone();
    v2["metadata"]["resourceVersion"] = json!("3");
    record("noop", Some(&v1), &mut v2, NOW);
    let managers: Vec<Value> = entries(&v2).iter().map(|e| e["manager"].clone()).collect();
    assert_eq!(managers, [json!("x"), json!("y"), json!("z")]);
}

#[test]
fn main_resource_writes_never_own_status_and_status_writes_never_own_spec() {
    let mut pod = super::pod();
    record("creator", None, &mut pod, NOW);
    let fields = &pod["metadata"]["managedFields"][0]["fieldsV1"];
    assert!(fields.get("f:spec").is_some());
    assert!(fields.get("f:status").is_none(), "{fields}");

    let mut next = pod.clone();
    next["status"]["phase"] = json!("Succeeded");
    next["spec"]["restartPolicy"] = json!("Never");
    record_update(
        &UpdateRecord {
            manager: "kubelet",
            api_version: "v1",
            subresource: "status",
            now: NOW,
        },
        Some(&pod),
        &mut next,
    );
    let kubelet = entries(&next)
        .into_iter()
        .find(|e| e["manager"] == "kubelet")
        .unwrap();
    assert_eq!(kubelet["subresource"], "status");
    assert_eq!(kubelet["fieldsV1"], json!({"f:status": {"f:phase": {}}}));
}

/// `"f:k0":{},"f:k1":{},"f:k10":{},...`: the `FieldsV1` entries of keys
/// `k0`..`k<n-1>`, sorted as strings.
fn sorted_fields_text(n: usize) -> String {
    let mut names: Vec<String> = (0..n).map(|i| format!("k{i}")).collect();
    names.sort();
    let entries: Vec<String> = names.iter().map(|k| format!(r#""f:{k}":{{}}"#)).collect();
    entries.join(",")
}

#[test]
fn a_large_map_is_recorded_key_by_key_in_wire_order_by_create_and_apply() {
    let n = 5000;
    let data: serde_json::Map<String, Value> = (0..n).map(|i| (format!("k{i}"), json!(format!("v{i}")))).collect();
    let mut obj = configmap(Value::Object(data.clone()));
    record("creator", None, &mut obj, NOW);
    let keys = sorted_fields_text(n);
    let expected = format!(r#"{{"f:data":{{".":{{}},{keys}}},"f:metadata":{{"f:labels":{{".":{{}},"f:app":{{}}}}}}}}"#);
    assert_eq!(obj["metadata"]["managedFields"][0]["fieldsV1"].to_string(), expected);

    let config = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}, "data": data});
    let applied = super::ssa("ConfigMap", "v1", None, &config, "applier", false).unwrap();
    let expected = format!(r#"{{"f:data":{{{keys}}}}}"#);
    assert_eq!(applied["metadata"]["managedFields"][0]["fieldsV1"].to_string(), expected);
    assert_eq!(applied["data"], config["data"]);
}
