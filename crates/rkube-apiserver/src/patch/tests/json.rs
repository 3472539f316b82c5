//! JSON patch and JSON merge patch: results and upstream's error mapping.

use serde_json::{json, Value};

use super::{pod, status_of};
use crate::patch::{apply_patch, PatchError, PatchType, MAX_JSON_PATCH_OPERATIONS};

fn json_patch(original: &Value, ops: &Value) -> Result<Value, PatchError> {
    apply_patch(
        "Pod",
        PatchType::Json,
        Some(original),
        ops.to_string().as_bytes(),
        "m",
        false,
    )
}

fn merge_patch(original: &Value, body: &[u8]) -> Result<Value, PatchError> {
    apply_patch("Pod", PatchType::Merge, Some(original), body, "m", false)
}

#[test]
fn patch_type_from_content_type_ignores_parameters_and_case() {
    let cases = [
        ("application/json-patch+json", Some(PatchType::Json)),
        (
            "application/merge-patch+json; charset=utf-8",
            Some(PatchType::Merge),
        ),
        (
            "Application/Strategic-Merge-Patch+JSON",
            Some(PatchType::StrategicMerge),
        ),
        (
            "application/apply-patch+yaml;charset=utf-8",
            Some(PatchType::Apply),
        ),
        ("application/json", None),
        ("", None),
    ];
    for (ct, want) in cases {
        assert_eq!(PatchType::from_content_type(ct), want, "{ct}");
        if let Some(t) = want {
            assert_eq!(PatchType::from_content_type(t.content_type()), Some(t));
        }
    }
}

#[test]
fn json_patch_applies_operations_in_order() {
    let out = json_patch(
        &pod(),
        &json!([
            {"op": "test", "path": "/metadata/name", "value": "p"},
            {"op": "replace", "path": "/spec/containers/0/image", "value": "nginx:1.27"},
            {"op": "add", "path": "/metadata/labels/tier", "value": "fe"},
            {"op": "remove", "path": "/spec/tolerations"},
            {"op": "copy", "from": "/metadata/labels/app", "path": "/metadata/labels/copy"},
            {"op": "move", "from": "/metadata/labels/copy", "path": "/metadata/labels/moved"}
        ]),
    )
    .unwrap();
    assert_eq!(out["spec"]["containers"][0]["image"], "nginx:1.27");
    assert_eq!(
        out["metadata"]["labels"],
        json!({"app": "web", "tier": "fe", "moved": "web"})
    );
    assert!(out["spec"].get("tolerations").is_none());
}

#[test]
fn json_patch_failed_operation_is_422_with_generic_message() {
    for ops in [
        json!([{"op": "test", "path": "/metadata/name", "value": "other"}]),
        json!([{"op": "remove", "path": "/spec/nope"}]),
        json!([{"op": "replace", "path": "/spec/containers/9/image", "value": "x"}]),
        json!([{"op": "explode", "path": "/spec"}]),
        json!([{"op": "add"}]),
    ] {
        let st = status_of(json_patch(&pod(), &ops).unwrap_err());
        assert_eq!(st.code, 422, "{ops}");
        assert_eq!(st.reason, "Invalid");
        assert_eq!(
            st.message,
            "the server rejected our request due to an error in our request"
        );
        let causes = st.details.map(|d| d.causes).unwrap_or_default();
        assert_eq!(causes.len(), 1, "{ops}");
        assert_eq!(causes[0].reason, "UnexpectedServerResponse");
        assert!(!causes[0].message.is_empty());
    }
}

#[test]
fn json_patch_that_is_not_a_list_of_operations_is_400() {
    for body in [&b"{\"op\":\"add\"}"[..], b"not json", b"[1, "] {
        let err = apply_patch("Pod", PatchType::Json, Some(&pod()), body, "m", false).unwrap_err();
        let st = status_of(err);
        assert_eq!(
            (st.code, st.reason.as_str()),
            (400, "BadRequest"),
            "{}",
            String::from_utf8_lossy(body)
        );
    }
}

#[test]
fn json_patch_over_operation_limit_is_413() {
    let ops: Vec<Value> = (0..=MAX_JSON_PATCH_OPERATIONS)
        .map(|_| json!({"op": "test", "path": "/kind", "value": "Pod"}))
        .collect();
    let st = status_of(json_patch(&pod(), &Value::Array(ops)).unwrap_err());
    assert_eq!(
        (st.code, st.reason.as_str()),
        (413, "RequestEntityTooLarge")
    );
    assert_eq!(st.message, "Request entity too large: The allowed maximum operations in a JSON patch is 10000, got 10001");
}

#[test]
fn json_patch_replacing_the_root_with_a_scalar_is_invalid() {
    let st = status_of(
        json_patch(&pod(), &json!([{"op": "replace", "path": "", "value": 3}])).unwrap_err(),
    );
    assert_eq!((st.code, st.reason.as_str()), (422, "Invalid"));
    assert_eq!(st.details.unwrap().causes[0].field, "patch");
}

#[test]
fn merge_patch_sets_and_removes_fields() {
    let out = merge_patch(
        &pod(),
        br#"{"metadata":{"labels":{"app":null,"tier":"fe"}},"spec":{"containers":[{"name":"only"}]}}"#,
    )
    .unwrap();
    assert_eq!(out["metadata"]["labels"], json!({"tier": "fe"}));
    assert_eq!(
        out["spec"]["containers"],
        json!([{"name": "only"}]),
        "merge patch replaces lists"
    );
    assert_eq!(out["spec"]["restartPolicy"], "Always");
}

#[test]
fn merge_patch_keeps_field_order() {
    let out = merge_patch(&pod(), br#"{"metadata":{"namespace":null}}"#).unwrap();
    let keys: Vec<&String> = out["metadata"].as_object().unwrap().keys().collect();
    assert_eq!(
        keys,
        ["name", "uid", "resourceVersion", "labels", "finalizers"]
    );
}

#[test]
fn merge_patch_that_is_not_json_or_null_is_400() {
    for body in [&b"{"[..], b"null"] {
        let st = status_of(merge_patch(&pod(), body).unwrap_err());
        assert_eq!((st.code, st.message.as_str()), (400, "Invalid JSON Patch"));
    }
}

#[test]
fn merge_patch_that_is_an_array_is_invalid() {
    let st = status_of(merge_patch(&pod(), b"[1]").unwrap_err());
    assert_eq!((st.code, st.reason.as_str()), (422, "Invalid"));
}

#[test]
fn non_apply_patch_of_missing_object_is_not_found() {
    for t in [PatchType::Json, PatchType::Merge, PatchType::StrategicMerge] {
        let st = status_of(apply_patch("Pod", t, None, b"{}", "m", false).unwrap_err());
        assert_eq!((st.code, st.reason.as_str()), (404, "NotFound"));
    }
}

#[test]
fn a_test_for_null_passes_on_an_absent_member_as_upstream() {
    let doc = json!({"metadata": {"name": "a"}});
    let add = json!([{"op": "test", "path": "/metadata/finalizers", "value": null},
                     {"op": "add", "path": "/metadata/finalizers", "value": ["x/cleanup"]}]);
    let out = json_patch(&doc, &add).expect("patched");
    assert_eq!(out["metadata"]["finalizers"], json!(["x/cleanup"]));
    // A member that is there is compared as usual; a missing parent still fails.
    assert!(json_patch(&out, &add).is_err());
    assert!(json_patch(&doc, &json!([{"op": "test", "path": "/spec/missing/x", "value": null}])).is_err());
}
