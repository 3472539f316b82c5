//! Server-side apply: create-or-merge, ownership, pruning, conflicts.

use serde_json::{json, Value};

use super::{ssa, status_of, NOW};
use crate::patch::{
    apply_create_at, apply_patch_at, record_update, PatchType, UpdateRecord, LAST_APPLIED_ANNOTATION,
};

fn cm_config(data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": "default"}, "data": data})
}

/// A stored ConfigMap created by `manager` with an Update (e.g. `kubectl create`).
fn created_by(manager: &str, data: Value) -> Value {
    let mut obj = cm_config(data);
    obj["metadata"]["uid"] = json!("u1");
    obj["metadata"]["resourceVersion"] = json!("5");
    record_update(
        &UpdateRecord {
            manager,
            api_version: "v1",
            subresource: "",
            now: NOW,
        },
        None,
        &mut obj,
    );
    obj
}

fn managed(obj: &Value) -> Vec<Value> {
    obj.pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

fn entry<'a>(entries: &'a [Value], manager: &str, operation: &str) -> Option<&'a Value> {
    entries
        .iter()
        .find(|e| e["manager"] == manager && e["operation"] == operation)
}

#[test]
fn apply_creates_object_with_apply_entry() {
    let config = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "cm", "namespace": "default", "labels": {"x": "y"}}, "data": {"a": "1"}});
    let out = ssa("ConfigMap", "v1", None, &config, "kubectl", false).unwrap();
    assert_eq!(out["data"], json!({"a": "1"}));
    assert_eq!(out["metadata"]["name"], "cm");
    assert_eq!(
        managed(&out),
        vec![
            json!({"manager": "kubectl", "operation": "Apply", "apiVersion": "v1", "time": NOW,
            "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {"f:a": {}}, "f:metadata": {"f:labels": {"f:x": {}}}}})
        ]
    );
}

/// An apply creating an object from its configuration gives the object
/// without managedFields and the entries apart; written into it, they make
/// the object `apply_patch_at` answers. One that rewrites kubectl's
/// last-applied annotation writes its entries itself and leaves none.
#[test]
fn apply_create_leaves_its_entries_for_the_create_path() {
    let last_applied = json!({"kubectl.kubernetes.io/last-applied-configuration": "{}"});
    let cases = [
        ("ConfigMap", "v1", "m", json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "cm", "labels": {"x": "y"}}, "data": {"a": "1", "b": null}})),
        ("Deployment", "apps/v1", "m", json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "d"}, "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "a"}},
            "template": {"metadata": {"labels": {"app": "a"}}, "spec": {"containers": [{"name": "c", "image": "i",
            "ports": [{"containerPort": 80, "protocol": "TCP"}]}]}}}})),
        ("ConfigMap", "v1", "kubectl", json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "cm", "annotations": last_applied}, "data": {"a": "1"}})),
    ];
    for (kind, api_version, manager, config) in cases {
        let body = config.to_string();
        let written = apply_patch_at(kind, Some(api_version), PatchType::Apply, None, body.as_bytes(), manager, false, NOW)
            .unwrap();
        let (mut obj, entries) = apply_create_at(kind, api_version, body.as_bytes(), manager, false, NOW).unwrap();
        let rewrites_last_applied = manager == "kubectl";
        assert_eq!(obj.pointer("/metadata/managedFields").is_some(), rewrites_last_applied, "{kind} {manager}");
        assert_eq!(format!("{entries:?}").contains("Apply"), !rewrites_last_applied, "{kind} {manager}");
        entries.write_into(&mut obj);
        assert!(obj.pointer("/metadata/managedFields").is_some(), "{kind} {manager}");
        assert_eq!(obj.to_string(), written.to_string(), "{kind} {manager}");
    }
}

#[test]
fn apply_body_may_be_yaml() {
    let yaml = b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\ndata:\n  a: \"1\"\n";
    let out = apply_patch_at(
        "ConfigMap",
        Some("v1"),
        PatchType::Apply,
        None,
        yaml,
        "m",
        false,
        NOW,
    )
    .unwrap();
    assert_eq!(out["data"]["a"], "1");
}

#[test]
fn apply_merges_into_live_object_keeping_other_fields() {
    let live = created_by("kubectl-create", json!({"a": "1", "b": "2"}));
    let out = ssa(
        "ConfigMap",
        "v1",
        Some(&live),
        &cm_config(json!({"c": "3"})),
        "tool",
        false,
    )
    .unwrap();
    assert_eq!(out["data"], json!({"a": "1", "b": "2", "c": "3"}));
    assert_eq!(out["metadata"]["uid"], "u1", "server-set metadata is kept");
    let e = managed(&out);
    assert_eq!(
        entry(&e, "tool", "Apply").unwrap()["fieldsV1"],
        json!({"f:data": {"f:c": {}}})
    );
    assert!(entry(&e, "kubectl-create", "Update").is_some());
}

#[test]
fn apply_conflict_with_other_manager_is_409() {
    let live = created_by("kubectl-create", json!({"a": "1"}));
    let err = ssa(
        "ConfigMap",
        "v1",
        Some(&live),
        &cm_config(json!({"a": "2"})),
        "tool",
        false,
    )
    .unwrap_err();
    let st = status_of(err);
    assert_eq!((st.code, st.reason.as_str()), (409, "Conflict"));
    assert_eq!(
        st.message,
        "Apply failed with 1 conflict: conflict with \"kubectl-create\" using v1: .data.a"
    );
    let causes = st.details.unwrap().causes;
    assert_eq!(causes.len(), 1);
    assert_eq!(causes[0].reason, "FieldManagerConflict");
    assert_eq!(
        causes[0].message,
        "conflict with \"kubectl-create\" using v1"
    );
    assert_eq!(causes[0].field, ".data.a");
}

#[test]
fn apply_conflicts_are_grouped_by_manager() {
    let mut live = created_by("first", json!({"a": "1", "b": "1"}));
    let mut next = live.clone();
    next["data"]["c"] = json!("1");
    record_update(
        &UpdateRecord {
            manager: "second",
            api_version: "v1",
            subresource: "",
            now: NOW,
        },
        Some(&live),
        &mut next,
    );
    live = next;
    let err = ssa(
        "ConfigMap",
        "v1",
        Some(&live),
        &cm_config(json!({"a": "2", "b": "2", "c": "2"})),
        "tool",
        false,
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "Apply failed with 3 conflicts: conflicts with \"first\" using v1:\n- .data.a\n- .data.b\nconflicts with \"second\" using v1:\n- .data.c"
    );
}

#[test]
fn apply_same_value_shares_ownership_without_conflict() {
    let live = created_by("kubectl-create", json!({"a": "1"}));
    let out = ssa(
        "ConfigMap",
        "v1",
        Some(&live),
        &cm_config(json!({"a": "1"})),
        "tool",
        false,
    )
    .unwrap();
    let e = managed(&out);
    assert_eq!(
        entry(&e, "tool", "Apply").unwrap()["fieldsV1"],
        json!({"f:data": {"f:a": {}}})
    );
    assert_eq!(
        entry(&e, "kubectl-create", "Update").unwrap()["fieldsV1"]["f:data"],
        json!({".": {}, "f:a": {}})
    );
}

#[test]
fn apply_force_takes_ownership() {
    let live = created_by("kubectl-create", json!({"a": "1", "b": "1"}));
    let out = ssa(
        "ConfigMap",
        "v1",
        Some(&live),
        &cm_config(json!({"a": "2"})),
        "tool",
        true,
    )
    .unwrap();
    assert_eq!(out["data"], json!({"a": "2", "b": "1"}));
    let e = managed(&out);
    assert_eq!(
        entry(&e, "tool", "Apply").unwrap()["fieldsV1"],
        json!({"f:data": {"f:a": {}}})
    );
    assert_eq!(
        entry(&e, "kubectl-create", "Update").unwrap()["fieldsV1"]["f:data"],
        json!({".": {}, "f:b": {}}),
        "the forced field left the other manager"
    );
}

#[test]
fn apply_removes_fields_no_longer_applied() {
    let first = ssa(
        "ConfigMap",
        "v1",
        None,
        &cm_config(json!({"a": "1", "b": "2"})),
        "tool",
        false,
    )
    .unwrap();
    let out = ssa(
        "ConfigMap",
        "v1",
        Some(&first),
        &cm_config(json!({"a": "1"})),
        "tool",
        false,
    )
    .unwrap();
    assert_eq!(out["data"], json!({"a": "1"}));
    assert_eq!(managed(&out)[0]["fieldsV1"], json!({"f:data": {"f:a": {}}}));
}

#[test]
fn apply_keeps_field_no_longer_applied_that_another_manager_owns() {
    let first = ssa(
        "ConfigMap",
        "v1",
        None,
        &cm_config(json!({"a": "1", "b": "2"})),
        "tool",
        false,
    )
    .unwrap();
    let second = ssa(
        "ConfigMap",
        "v1",
        Some(&first),
        &cm_config(json!({"b": "2"})),
        "other",
        false,
    )
    .unwrap();
    let out = ssa(
        "ConfigMap",
        "v1",
        Some(&second),
        &cm_config(json!({"a": "1"})),
        "tool",
        false,
    )
    .unwrap();
    assert_eq!(out["data"], json!({"a": "1", "b": "2"}));
}

/// kubectl's client-side-apply migration (`csaupgrade`) gives the `kubectl`
/// Apply entry the client-side entry's fields, which name maps and lists
/// themselves (`"."`). Re-applying the same configuration, whose set names
/// only their items, keeps the maps and lists (upstream `prune` adds owned
/// items back).
#[test]
fn apply_after_migrated_entry_owning_the_map_itself_keeps_its_items() {
    let config = cm_config(json!({"a": "1"}));
    let mut live = ssa("ConfigMap", "v1", None, &config, "kubectl", false).unwrap();
    live["metadata"]["labels"] = json!({"app": "web"});
    live["metadata"]["managedFields"][0]["fieldsV1"] = json!({
        "f:data": {".": {}, "f:a": {}},
        "f:metadata": {"f:labels": {".": {}, "f:app": {}}}
    });
    let mut config = config;
    config["metadata"]["labels"] = json!({"app": "web"});
    let out = ssa("ConfigMap", "v1", Some(&live), &config, "kubectl", false).unwrap();
    assert_eq!(out["data"], json!({"a": "1"}));
    assert_eq!(out["metadata"]["labels"], json!({"app": "web"}));
    assert_eq!(
        managed(&out)[0]["fieldsV1"],
        json!({"f:data": {"f:a": {}}, "f:metadata": {"f:labels": {"f:app": {}}}})
    );
    // What the applier stops applying under such a map still goes.
    let out = ssa("ConfigMap", "v1", Some(&live), &cm_config(json!({"a": "1"})), "kubectl", false).unwrap();
    assert_eq!(out["metadata"].get("labels").and_then(|l| l.get("app")), None);
}

#[test]
fn apply_removes_list_items_no_longer_applied() {
    let deploy = |containers: Value| {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
               "spec": {"template": {"spec": {"containers": containers}}}})
    };
    let first = ssa(
        "Deployment",
        "apps/v1",
        None,
        &deploy(json!([{"name": "a", "image": "a:1"}, {"name": "b", "image": "b:1"}])),
        "tool",
        false,
    )
    .unwrap();
    let out = ssa(
        "Deployment",
        "apps/v1",
        Some(&first),
        &deploy(json!([{"name": "b", "image": "b:2"}])),
        "tool",
        false,
    )
    .unwrap();
    assert_eq!(
        out["spec"]["template"]["spec"]["containers"],
        json!([{"name": "b", "image": "b:2"}])
    );
}

#[test]
fn apply_merges_associative_lists_by_key() {
    let live = super::pod();
    let mut live = live;
    record_update(
        &UpdateRecord {
            manager: "creator",
            api_version: "v1",
            subresource: "",
            now: NOW,
        },
        None,
        &mut live,
    );
    let config = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
        "spec": {"containers": [{"name": "sidecar", "env": [{"name": "X", "value": "1"}]},
                                {"name": "extra", "image": "e:1", "ports": [{"containerPort": 9090}]}]}});
    let out = ssa("Pod", "v1", Some(&live), &config, "tool", false).unwrap();
    let containers = &out["spec"]["containers"];
    assert_eq!(
        super::names(&out, "/spec/containers"),
        ["web", "sidecar", "extra"]
    );
    assert_eq!(containers[1]["env"], json!([{"name": "X", "value": "1"}]));
    assert_eq!(containers[1]["image"], "busybox:1");
    let tool = managed(&out)
        .into_iter()
        .find(|e| e["manager"] == "tool")
        .unwrap();
    assert_eq!(
        tool["fieldsV1"]["f:spec"]["f:containers"],
        json!({
            "k:{\"name\":\"extra\"}": {".": {}, "f:image": {}, "f:name": {},
                "f:ports": {"k:{\"containerPort\":9090,\"protocol\":\"TCP\"}": {".": {}, "f:containerPort": {}}}},
            "k:{\"name\":\"sidecar\"}": {".": {}, "f:env": {"k:{\"name\":\"X\"}": {".": {}, "f:name": {}, "f:value": {}}}, "f:name": {}}
        })
    );
}

#[test]
fn apply_records_set_items_as_values() {
    let config = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "finalizers": ["x/y"]}});
    let out = ssa("ConfigMap", "v1", None, &config, "tool", false).unwrap();
    assert_eq!(
        managed(&out)[0]["fieldsV1"],
        json!({"f:metadata": {"f:finalizers": {"v:\"x/y\"": {}}}})
    );
}

#[test]
fn apply_list_item_without_key_is_500_typed_error() {
    let config = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns"},
        "spec": {"containers": [{"image": "x"}]}});
    let st = status_of(ssa("Pod", "v1", None, &config, "tool", false).unwrap_err());
    assert_eq!((st.code, st.reason.as_str()), (500, ""));
    assert_eq!(
        st.message,
        "failed to create typed patch object (ns/p; /v1, Kind=Pod): .spec.containers: element 0: associative list with keys has an element that omits key field \"name\" (and doesn't have default value)"
    );
}

#[test]
fn apply_duplicate_list_keys_is_500_typed_error() {
    let config = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"},
        "spec": {"ports": [{"port": 80}, {"port": 80, "protocol": "TCP"}]}});
    let st = status_of(ssa("Service", "v1", None, &config, "tool", false).unwrap_err());
    assert_eq!(st.code, 500);
    assert!(
        st.message
            .ends_with(".spec.ports: duplicate entries for key [port=80,protocol=\"TCP\"]"),
        "{}",
        st.message
    );
}

#[test]
fn apply_rejects_malformed_requests_with_400() {
    let mut with_managed = cm_config(json!({}));
    with_managed["metadata"]["managedFields"] = json!([]);
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (
            cm_config(json!({}))
                .to_string()
                .replace("\"v1\"", "\"v2\"")
                .into_bytes(),
            "Incorrect version specified in apply patch. Specified patch version: v2, expected: v1",
        ),
        (
            with_managed.to_string().into_bytes(),
            "metadata.managedFields must be nil",
        ),
        (b"a: [".to_vec(), "error decoding YAML"),
        (b"[1, 2]".to_vec(), "error decoding YAML"),
        (
            json!({"apiVersion": "v1", "kind": "Secret"})
                .to_string()
                .into_bytes(),
            "Incorrect kind specified in apply patch",
        ),
    ];
    for (body, fragment) in cases {
        let err = apply_patch_at(
            "ConfigMap",
            Some("v1"),
            PatchType::Apply,
            None,
            &body,
            "m",
            false,
            NOW,
        )
        .unwrap_err();
        let st = status_of(err);
        assert_eq!(
            (st.code, st.reason.as_str()),
            (400, "BadRequest"),
            "{}",
            String::from_utf8_lossy(&body)
        );
        assert!(st.message.contains(fragment), "{}", st.message);
    }
}

#[test]
fn apply_to_object_without_managed_fields_conflicts_with_before_first_apply() {
    let live = cm_config(json!({"a": "1"}));
    let st = status_of(
        ssa(
            "ConfigMap",
            "v1",
            Some(&live),
            &cm_config(json!({"a": "2"})),
            "tool",
            false,
        )
        .unwrap_err(),
    );
    assert_eq!(
        st.message,
        "Apply failed with 1 conflict: conflict with \"before-first-apply\" using v1: .data.a"
    );
}

#[test]
fn apply_by_kubectl_takes_over_fields_matching_last_applied_configuration() {
    let last_applied = cm_config(json!({"a": "1"})).to_string();
    let mut live = cm_config(json!({"a": "1"}));
    live["metadata"]["annotations"] = json!({LAST_APPLIED_ANNOTATION: last_applied});
    record_update(
        &UpdateRecord {
            manager: "kubectl-client-side-apply",
            api_version: "v1",
            subresource: "",
            now: NOW,
        },
        None,
        &mut live,
    );
    let config = cm_config(json!({"a": "2"}));
    // Another manager name gets the conflict...
    assert_eq!(
        ssa("ConfigMap", "v1", Some(&live), &config, "other", false)
            .unwrap_err()
            .status()
            .code,
        409
    );
    // ...kubectl upgrades from client-side apply without one.
    let out = ssa("ConfigMap", "v1", Some(&live), &config, "kubectl", false).unwrap();
    assert_eq!(out["data"]["a"], "2");
    let annotation: Value = serde_json::from_str(
        out["metadata"]["annotations"][LAST_APPLIED_ANNOTATION]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        annotation, config,
        "the last-applied annotation follows the applied configuration"
    );
}

#[test]
fn apply_noop_keeps_time() {
    let first = ssa(
        "ConfigMap",
        "v1",
        None,
        &cm_config(json!({"a": "1"})),
        "tool",
        false,
    )
    .unwrap();
    let again = apply_patch_at(
        "ConfigMap",
        Some("v1"),
        PatchType::Apply,
        Some(&first),
        cm_config(json!({"a": "1"})).to_string().as_bytes(),
        "tool",
        false,
        "2030-01-01T00:00:00Z",
    )
    .unwrap();
    assert_eq!(again, first);
}

#[test]
fn apply_list_key_that_is_not_a_scalar_is_500_typed_error() {
    // Found by the idempotence property: a non-scalar key cannot identify an item.
    let config = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
        "spec": {"containers": [{"name": {"metadata": null}, "image": "x"}]}});
    let st = status_of(ssa("Pod", "v1", None, &config, "tool", false).unwrap_err());
    assert_eq!(st.code, 500);
    assert!(
        st.message.contains("key field \"name\" is not a scalar"),
        "{}",
        st.message
    );
}
