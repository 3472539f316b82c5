//! Property-based fuzzing of the four patch types (JSON patch, merge patch,
//! strategic merge patch, server-side apply): random patch documents applied
//! to random objects, first to the patch engine, then through the real
//! handler (router in process, embedded store).
//!
//! Properties:
//! - nothing panics, whatever the patch and the object;
//! - every error is the Status upstream gives for that patch type: 400
//!   `BadRequest` (malformed), 422 `Invalid` (cannot apply), 413
//!   `RequestEntityTooLarge` (more than 10,000 JSON patch operations), 409
//!   `Conflict` (apply conflicts), and upstream's reason-less 500 only for an
//!   apply configuration that cannot be typed;
//! - a successful patch gives an object that storage can decode again (JSON
//!   nesting within serde_json's limit), so it stays readable;
//! - through the handler: a failed PATCH leaves storage unchanged (same
//!   resourceVersion), a successful one can be read back.
//!
//! Hostile shapes are tested directly too: JSON patch `copy` amplification
//! (upstream's `JSONPatchMaxCopyBytes`, 3 MiB) and nesting built up with
//! `add`/`copy` operations.
//!
//! Case count: `PROPTEST_CASES` (default small, for CI). Run long with
//! `PROPTEST_CASES=20000 cargo test -p rkube-apiserver --test integration fuzz_patch::` (the
//! properties through the handler run a tenth of that).

use crate::fuzz_support;

use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::Request;
use fuzz_support::{cases, depth, handler_cases, server};
use http_body_util::BodyExt;
use proptest::prelude::*;
use rkube_api::Status;
use rkube_apiserver::patch::{apply_patch, apply_patch_at, update_managed_fields, PatchError, PatchType};
use rkube_apiserver::ApiState;
use serde_json::{json, Map, Value};
use tower::ServiceExt;

const NOW: &str = "2024-05-01T12:00:00Z";
const KINDS: [&str; 6] = ["Pod", "Deployment", "Service", "Node", "ConfigMap", "Job"];

// ------------------------------------------------------------------ strategies

fn arb_key() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => prop::sample::select(vec![
            "metadata", "spec", "status", "template", "containers", "initContainers", "name", "image", "env",
            "value", "ports", "containerPort", "protocol", "volumes", "finalizers", "labels", "annotations",
            "conditions", "type", "ownerReferences", "uid", "managedFields", "apiVersion", "kind", "strategy",
            "data", "resourceVersion", "namespace", "generation", "selector", "replicas", "volumeMounts",
            "mountPath", "fieldsV1", "manager", "operation",
            "$patch", "$retainKeys", "$setElementOrder/containers", "$setElementOrder/env",
            "$setElementOrder/ports", "$setElementOrder/finalizers", "$deleteFromPrimitiveList/finalizers",
            "$setElementOrder", "$deleteFromPrimitiveList", "$other",
        ]).prop_map(str::to_string),
        1 => "\\PC{0,6}",
    ]
}

fn arb_scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<i32>().prop_map(|i| json!(f64::from(i) / 8.0)),
        prop::sample::select(vec!["replace", "delete", "merge", "retainKeys", "web", "TCP", "a", "", "v1", "Pod"])
            .prop_map(Value::from),
        "\\PC{0,8}".prop_map(Value::from),
    ]
}

fn arb_value() -> impl Strategy<Value = Value> {
    arb_scalar().prop_recursive(6, 96, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::vec((arb_key(), inner), 0..6)
                .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// RFC 7396 merge (to perturb realistic objects).
fn perturb(doc: &mut Value, patch: &Value) {
    match (doc, patch) {
        (Value::Object(d), Value::Object(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    d.shift_remove(k);
                } else {
                    perturb(d.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        (d, p) => *d = p.clone(),
    }
}

fn pod(name: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": "web"}, "finalizers": ["a/b"]},
        "spec": {
            "containers": [
                {"name": "c", "image": "nginx:1.25", "ports": [{"containerPort": 80, "protocol": "TCP"}],
                 "env": [{"name": "A", "value": "1"}]},
                {"name": "d", "image": "busybox"}
            ],
            "volumes": [{"name": "v", "emptyDir": {}}]
        },
        "status": {"conditions": [{"type": "Ready", "status": "True"}]}
    })
}

/// Realistic objects with random fields merged in, and random objects.
fn arb_object() -> impl Strategy<Value = Value> {
    prop_oneof![
        1 => Just(pod("p")),
        3 => (arb_value(), arb_value()).prop_map(|(top, c)| {
            let mut p = pod("p");
            if top.is_object() {
                perturb(&mut p, &top);
            }
            if let (Some(slot), true) = (p.pointer_mut("/spec/containers/0"), c.is_object()) {
                perturb(slot, &c);
            }
            p
        }),
        1 => prop::collection::vec((arb_key(), arb_value()), 0..6)
            .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>())),
    ]
}

fn arb_pointer() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof![
            4 => prop::sample::select(vec![
                "spec", "containers", "0", "1", "2", "-", "metadata", "labels", "finalizers", "~1", "~0", "~",
                "", "name", "env", "ports", "status", "01", "-1", "99999999999999999999",
            ]).prop_map(str::to_string),
            1 => "\\PC{0,3}",
        ],
        0..6,
    )
    .prop_map(|segs| segs.iter().map(|s| format!("/{s}")).collect())
}

fn arb_json_patch() -> impl Strategy<Value = Value> {
    let op = (
        prop::sample::select(vec!["add", "remove", "replace", "move", "copy", "test", "bogus"]),
        arb_pointer(),
        prop::option::of(arb_pointer()),
        prop::option::of(arb_value()),
    )
        .prop_map(|(op, path, from, value)| {
            let mut o = json!({"op": op, "path": path});
            if let Some(f) = from {
                o["from"] = json!(f);
            }
            if let Some(v) = value {
                o["value"] = v;
            }
            o
        });
    prop_oneof![
        8 => prop::collection::vec(op, 0..8).prop_map(Value::Array),
        1 => arb_value(),
    ]
}

/// Raw bodies: valid JSON of the generated shape, or bytes that are not.
fn arb_body(doc: impl Strategy<Value = Value>) -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        6 => doc.prop_map(|v| v.to_string().into_bytes()),
        1 => prop::collection::vec(any::<u8>(), 0..64),
        1 => "\\PC{0,64}".prop_map(String::into_bytes),
    ]
}

fn arb_apply_body() -> impl Strategy<Value = Vec<u8>> {
    (arb_value(), prop::sample::select(KINDS.to_vec()), any::<bool>(), any::<bool>()).prop_map(
        |(config, kind, header, yaml)| {
            let mut config = config;
            if header {
                if let Value::Object(m) = &mut config {
                    m.insert("apiVersion".into(), json!(if kind == "Deployment" { "apps/v1" } else { "v1" }));
                    m.insert("kind".into(), json!(kind));
                }
            }
            if yaml {
                serde_yaml::to_string(&config).unwrap_or_default().into_bytes()
            } else {
                config.to_string().into_bytes()
            }
        },
    )
}

// ------------------------------------------------------------------ checks

/// What the storage round trip needs: an object serde_json decodes again.
fn check_storable(v: &Value) -> Result<(), TestCaseError> {
    prop_assert!(v.is_object(), "patched document is not an object: {}", v);
    prop_assert!(depth(v) < 128, "patched object nests {} levels", depth(v));
    let bytes = serde_json::to_vec(v).map_err(|e| TestCaseError::fail(e.to_string()))?;
    let back: Result<Value, _> = serde_json::from_slice(&bytes);
    prop_assert!(back.is_ok(), "stored bytes do not decode: {:?}", back.err());
    Ok(())
}

/// An error must be the Status upstream gives for `patch_type`.
fn check_error(patch_type: PatchType, e: &PatchError) -> Result<(), TestCaseError> {
    let st: Status = e.status();
    prop_assert_eq!(st.code, e.code());
    prop_assert_eq!(st.reason.as_str(), e.reason());
    prop_assert!(!st.message.is_empty());
    match st.code {
        400 => prop_assert_eq!(st.reason.as_str(), "BadRequest"),
        422 => {
            prop_assert_eq!(st.reason.as_str(), "Invalid");
            let causes = st.details.as_ref().map(|d| d.causes.len()).unwrap_or(0);
            prop_assert!(causes > 0, "422 without causes: {:?}", st);
        }
        413 => prop_assert!(patch_type == PatchType::Json && st.reason == "RequestEntityTooLarge"),
        409 => prop_assert!(patch_type == PatchType::Apply && st.reason == "Conflict"),
        500 => prop_assert!(
            patch_type == PatchType::Apply && st.reason.is_empty() && matches!(e, PatchError::TypedConversion(_)),
            "500 from {:?}: {:?}",
            patch_type,
            st
        ),
        other => prop_assert!(false, "unexpected code {} from {:?}: {:?}", other, patch_type, st),
    }
    Ok(())
}

fn check(patch_type: PatchType, r: &Result<Value, PatchError>) -> Result<(), TestCaseError> {
    match r {
        Ok(v) => check_storable(v),
        Err(e) => check_error(patch_type, e),
    }
}

// ------------------------------------------------------------------ engine

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(256), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn fuzz_json_patch_engine(original in arb_object(), body in arb_body(arb_json_patch())) {
        let r = apply_patch("Pod", PatchType::Json, Some(&original), &body, "m", false);
        check(PatchType::Json, &r)?;
    }

    #[test]
    fn fuzz_merge_patch_engine(original in arb_object(), body in arb_body(arb_value())) {
        let r = apply_patch("Pod", PatchType::Merge, Some(&original), &body, "m", false);
        check(PatchType::Merge, &r)?;
    }

    #[test]
    fn fuzz_strategic_merge_patch_engine(
        kind in prop::sample::select(KINDS.to_vec()),
        original in arb_object(),
        body in arb_body(arb_value()),
    ) {
        let r = apply_patch(kind, PatchType::StrategicMerge, Some(&original), &body, "m", false);
        check(PatchType::StrategicMerge, &r)?;
    }

    #[test]
    fn fuzz_apply_patch_engine(
        kind in prop::sample::select(KINDS.to_vec()),
        original in prop::option::of(arb_object()),
        body in prop_oneof![4 => arb_apply_body(), 1 => arb_body(arb_value())],
        force in any::<bool>(),
        manager in prop::sample::select(vec!["kubectl", "creator", "other"]),
    ) {
        let live = original.map(|mut o| {
            update_managed_fields("creator", "Update", "v1", None, &mut o);
            o
        });
        let av = if kind == "Deployment" { "apps/v1" } else { "v1" };
        let r = apply_patch_at(kind, Some(av), PatchType::Apply, live.as_ref(), &body, manager, force, NOW);
        check(PatchType::Apply, &r)?;
    }
}

// ------------------------------------------------------------------ hostile shapes

/// A JSON patch doubling the document with `copy` must stop at upstream's
/// 3 MiB accumulated copy limit (422), not exhaust memory.
#[test]
fn json_patch_copy_amplification_stops_at_the_copy_limit() {
    let original = json!({"metadata": {"name": "p"}, "data": {"x": "y".repeat(1000)}});
    // Each op copies everything so far: 2^40 KB without a limit.
    let ops: Vec<Value> = (0..40).map(|i| json!({"op": "copy", "from": "/data", "path": format!("/data/c{i}")})).collect();
    let started = Instant::now();
    let err = apply_patch("ConfigMap", PatchType::Json, Some(&original), Value::Array(ops).to_string().as_bytes(), "m", false)
        .expect_err("amplification must fail");
    assert!(started.elapsed() < Duration::from_secs(10), "took {:?}", started.elapsed());
    assert_eq!(err.code(), 422, "{err:?}");
    assert!(err.message().contains("the server rejected our request"), "{err:?}");
    let cause = &err.status().details.expect("details").causes[0];
    assert!(cause.message.contains("accumulated size increase of copy"), "{cause:?}");
}

/// Copies within the limit still work.
#[test]
fn json_patch_small_copies_are_applied() {
    let original = json!({"metadata": {"name": "p"}, "data": {"x": "y"}});
    let ops = json!([{"op": "copy", "from": "/data/x", "path": "/data/z"}, {"op": "copy", "from": "/data", "path": "/more"}]);
    let out = apply_patch("ConfigMap", PatchType::Json, Some(&original), ops.to_string().as_bytes(), "m", false).unwrap();
    assert_eq!(out["data"]["z"], "y");
    assert_eq!(out["more"], json!({"x": "y", "z": "y"}));
}

/// Values nested one level below the limit, added one inside the other,
/// would make an object storage cannot decode (and a stack overflow when
/// deep enough): 422, not a stored object nobody can read.
#[test]
fn json_patch_cannot_nest_objects_beyond_the_decodable_depth() {
    let original = json!({"metadata": {"name": "p"}, "data": {}});
    let deep = |n: usize| (0..n).fold(json!("x"), |v, _| json!({"a": v}));
    let mut ops = Vec::new();
    let mut path = String::from("/data");
    for _ in 0..400 {
        ops.push(json!({"op": "add", "path": format!("{path}/a"), "value": deep(100)}));
        path.push_str(&"/a".repeat(100));
    }
    let err = apply_patch("ConfigMap", PatchType::Json, Some(&original), Value::Array(ops).to_string().as_bytes(), "m", false)
        .expect_err("too deep");
    assert_eq!(err.code(), 422, "{err:?}");

    // Doubling the depth with a copy of a chain into its own end: same answer.
    let ops = json!([
        {"op": "add", "path": "/data/a", "value": deep(70)},
        {"op": "copy", "from": "/data/a", "path": format!("/data{}", "/a".repeat(70))},
    ]);
    let err = apply_patch("ConfigMap", PatchType::Json, Some(&original), ops.to_string().as_bytes(), "m", false)
        .expect_err("too deep");
    assert_eq!(err.code(), 422, "{err:?}");
    assert!(err.status().details.expect("details").causes[0].message.starts_with("operation '/1' failed"));

    // Just within the limit is fine.
    let ops = json!([{"op": "add", "path": "/data/a", "value": deep(120)}]);
    let out = apply_patch("ConfigMap", PatchType::Json, Some(&original), ops.to_string().as_bytes(), "m", false).unwrap();
    assert!(depth(&out) < 128);
}

/// Deeply nested bodies of every patch type are a 400, without a stack overflow.
#[test]
fn deeply_nested_patch_bodies_are_bad_requests() {
    let original = pod("p");
    let deep_obj = format!("{}{}", "{\"a\":".repeat(10_000), "}".repeat(10_000));
    let deep_arr = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
    let deep_yaml = format!("{}x", (0..10_000).map(|i| format!("{}a:\n", " ".repeat(i))).collect::<String>());
    for (t, body) in [
        (PatchType::Json, deep_arr.as_str()),
        (PatchType::Merge, deep_obj.as_str()),
        (PatchType::StrategicMerge, deep_obj.as_str()),
        (PatchType::Apply, deep_obj.as_str()),
        (PatchType::Apply, deep_yaml.as_str()),
    ] {
        let err = apply_patch("Pod", t, Some(&original), body.as_bytes(), "m", false).expect_err("too deep");
        assert_eq!(err.code(), 400, "{t:?}: {err:?}");
    }
}

// ------------------------------------------------------------------ through the handler

async fn call(st: &ApiState, method: &str, uri: &str, ct: &str, body: Vec<u8>) -> (u16, Value) {
    let req = Request::builder().method(method).uri(uri).header("content-type", ct).body(Body::from(body)).expect("request");
    let resp = rkube_apiserver::router(st.clone()).oneshot(req).await.expect("infallible");
    let code = resp.status().as_u16();
    let bytes = resp.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
    (code, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

/// The stored revision of `key`, straight from storage.
async fn revision(st: &ApiState, key: &str) -> Option<i64> {
    st.storage.get(key).await.ok().flatten().map(|kv| kv.mod_revision)
}

fn http_patch(patch_type: PatchType, object: Value, body: Vec<u8>) -> Result<(), TestCaseError> {
    let srv = server();
    srv.rt.block_on(async {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let name = format!("p{}", NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
        let (kind, coll) = if object.get("kind") == Some(&json!("ConfigMap")) {
            ("configmaps", "/api/v1/namespaces/default/configmaps")
        } else {
            ("pods", "/api/v1/namespaces/default/pods")
        };
        let mut object = object;
        object["metadata"]["name"] = json!(name);
        let (code, created) = call(&srv.st, "POST", coll, "application/json", object.to_string().into_bytes()).await;
        prop_assert_eq!(code, 201, "{}", created);
        let key = format!("/registry/{kind}/default/{name}");
        let before = revision(&srv.st, &key).await;
        prop_assert!(before.is_some(), "no object at {}", key);
        let uri = format!("{coll}/{name}?fieldManager=fuzz");
        let (code, resp) = call(&srv.st, "PATCH", &uri, patch_type.content_type(), body).await;
        let after = revision(&srv.st, &key).await;
        match code {
            200 => {
                let (code, got) = call(&srv.st, "GET", &format!("{coll}/{name}"), "application/json", vec![]).await;
                prop_assert_eq!(code, 200, "patched object cannot be read back: {}", got);
            }
            400 | 404 | 409 | 413 | 422 => {
                prop_assert_eq!(&resp["kind"], "Status", "{}", resp);
                prop_assert_eq!(&resp["code"], code);
                prop_assert_eq!(before, after, "a failed PATCH ({}) changed storage: {}", code, resp);
            }
            500 if patch_type == PatchType::Apply && resp["reason"] == "" => {
                prop_assert_eq!(before, after);
            }
            other => prop_assert!(false, "unexpected {} from {:?}: {}", other, patch_type, resp),
        }
        let _ = call(&srv.st, "DELETE", &format!("{coll}/{name}?gracePeriodSeconds=0"), "application/json", vec![]).await;
        Ok(())
    })
}

/// Objects the handler will create: a pod or configmap with random extras.
fn arb_live() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(pod("p")),
        Just(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "p", "labels": {"a": "b"}}, "data": {"k": "v"}})),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: handler_cases(48), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn fuzz_json_patch_through_the_handler(live in arb_live(), body in arb_body(arb_json_patch())) {
        http_patch(PatchType::Json, live, body)?;
    }

    #[test]
    fn fuzz_merge_patch_through_the_handler(live in arb_live(), body in arb_body(arb_value())) {
        http_patch(PatchType::Merge, live, body)?;
    }

    #[test]
    fn fuzz_strategic_merge_patch_through_the_handler(live in arb_live(), body in arb_body(arb_value())) {
        http_patch(PatchType::StrategicMerge, live, body)?;
    }

    #[test]
    fn fuzz_apply_patch_through_the_handler(live in arb_live(), body in arb_apply_body()) {
        http_patch(PatchType::Apply, live, body)?;
    }
}

/// An apply configuration at the edge of the nesting limit: YAML decodes one
/// level deeper than JSON, and must not produce an object JSON cannot read.
#[test]
fn apply_configurations_at_the_nesting_limit_stay_decodable() {
    for n in 124..132 {
        let config = format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: p\nx: {}{}\n",
            "[".repeat(n - 1),
            "]".repeat(n - 1)
        );
        match apply_patch_at("ConfigMap", Some("v1"), PatchType::Apply, None, config.as_bytes(), "m", false, NOW) {
            Ok(v) => {
                assert!(depth(&v) <= 127, "depth {n}: {} levels", depth(&v));
                assert!(serde_json::from_slice::<Value>(&serde_json::to_vec(&v).unwrap()).is_ok());
            }
            Err(e) => assert_eq!(e.code(), 400, "depth {n}: {e:?}"),
        }
    }
}
