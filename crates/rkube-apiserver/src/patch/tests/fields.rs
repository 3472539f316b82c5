//! Field paths, field sets and the `FieldsV1` format.

use serde_json::json;

use crate::patch::fieldpath::{path_string, FieldSet, PathElement};
use crate::patch::schema;
use crate::patch::typed::{compare, to_field_set};

fn f(name: &str) -> PathElement {
    PathElement::field(name)
}

#[test]
fn path_string_formats_like_upstream() {
    let cases = vec![
        (vec![f("spec"), f("replicas")], ".spec.replicas"),
        (
            vec![
                f("spec"),
                f("containers"),
                PathElement::key(vec![("name".into(), json!("web"))]),
                f("image"),
            ],
            ".spec.containers[name=\"web\"].image",
        ),
        (
            vec![
                f("ports"),
                PathElement::key(vec![
                    ("protocol".into(), json!("TCP")),
                    ("containerPort".into(), json!(80)),
                ]),
            ],
            ".ports[containerPort=80,protocol=\"TCP\"]",
        ),
        (
            vec![
                f("metadata"),
                f("finalizers"),
                PathElement::value(&json!("x")),
            ],
            ".metadata.finalizers[=\"x\"]",
        ),
        (vec![f("list"), PathElement::Index(3)], ".list[3]"),
    ];
    for (path, want) in cases {
        assert_eq!(path_string(&path), want);
    }
}

#[test]
fn fields_v1_round_trips_and_marks_member_nodes_with_dot() {
    let text = json!({
        "f:metadata": {"f:labels": {".": {}, "f:app": {}}, "f:finalizers": {".": {}, "v:\"a\"": {}}},
        "f:spec": {"f:containers": {"k:{\"name\":\"web\"}": {".": {}, "f:image": {}, "f:name": {}}}}
    });
    let set = FieldSet::from_fields_v1(&text).unwrap();
    assert!(set.has(&[f("metadata"), f("labels")]));
    assert!(set.has(&[f("metadata"), f("labels"), f("app")]));
    assert!(!set.has(&[f("metadata")]));
    assert!(set.has(&[
        f("spec"),
        f("containers"),
        PathElement::key(vec![("name".into(), json!("web"))])
    ]));
    assert_eq!(set.to_fields_v1(), text);
    assert_eq!(set.paths().len(), 7);
}

#[test]
fn fields_v1_rejects_malformed_keys() {
    for bad in [
        json!({"x:foo": {}}),
        json!({"f:a": 1}),
        json!({"k:notjson": {}}),
        json!([]),
    ] {
        assert!(FieldSet::from_fields_v1(&bad).is_err(), "{bad}");
    }
}

#[test]
fn field_set_algebra_is_path_by_path() {
    let a = FieldSet::from_fields_v1(&json!({"f:a": {".": {}, "f:b": {}}, "f:c": {}})).unwrap();
    let b = FieldSet::from_fields_v1(&json!({"f:a": {}, "f:d": {}})).unwrap();
    assert_eq!(
        a.clone().difference(&b).to_fields_v1(),
        json!({"f:a": {"f:b": {}}, "f:c": {}})
    );
    assert_eq!(a.intersection(&b).to_fields_v1(), json!({"f:a": {}}));
    assert_eq!(
        a.clone().union(&b).to_fields_v1(),
        json!({"f:a": {".": {}, "f:b": {}}, "f:c": {}, "f:d": {}})
    );
    assert!(a.clone().difference(&a).is_empty());
}

#[test]
fn applied_field_set_keys_lists_and_defaults_protocol() {
    let config = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "labels": {"app": "x"}},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "x"}},
                 "template": {"spec": {"containers": [{"name": "web", "image": "i", "ports": [{"containerPort": 80}], "resources": {}}]}}}});
    let set = to_field_set(&config, schema::root("Deployment"));
    assert_eq!(
        set.to_fields_v1(),
        json!({
            "f:apiVersion": {}, "f:kind": {},
            "f:metadata": {"f:labels": {"f:app": {}}, "f:name": {}},
            "f:spec": {"f:replicas": {}, "f:selector": {}, "f:template": {"f:spec": {"f:containers": {
                "k:{\"name\":\"web\"}": {".": {}, "f:image": {}, "f:name": {},
                    "f:ports": {"k:{\"containerPort\":80,\"protocol\":\"TCP\"}": {".": {}, "f:containerPort": {}}},
                    "f:resources": {}}}}}}
        })
    );
}

#[test]
fn compare_reports_added_modified_removed() {
    let shape = schema::root("ConfigMap");
    let old = json!({"kind": "ConfigMap", "data": {"a": "1", "b": "2"}});
    let new = json!({"kind": "ConfigMap", "data": {"a": "9", "c": "3"}, "metadata": {"labels": {"x": "y"}}});
    let cmp = compare(Some(&old), Some(&new), shape);
    assert_eq!(cmp.modified.to_fields_v1(), json!({"f:data": {"f:a": {}}}));
    assert_eq!(
        cmp.added.to_fields_v1(),
        json!({"f:data": {"f:c": {}}, "f:metadata": {"f:labels": {".": {}, "f:x": {}}}})
    );
    assert_eq!(cmp.removed.to_fields_v1(), json!({"f:data": {"f:b": {}}}));
}

#[test]
fn members_joined_at_once_equal_members_inserted_one_by_one() {
    let names: Vec<String> = (0..300).map(|i| format!("k{}", (i * 7919) % 250)).collect();
    let prefix = [f("data")];
    let mut one_by_one = FieldSet::new();
    for n in &names {
        one_by_one.insert(&[f("data"), f(n)]);
    }
    let mut at_once = FieldSet::new();
    at_once.insert_members(&prefix, names.iter().map(|n| f(n)).collect());
    assert_eq!(at_once, one_by_one);
    assert_eq!(at_once.to_fields_v1(), one_by_one.to_fields_v1());
    // Joined to a node that has members, small and large batches alike.
    at_once.insert_members(&prefix, vec![f("a"), f("k1")]);
    one_by_one.insert(&[f("data"), f("a")]);
    assert_eq!(at_once, one_by_one);
    let more: Vec<PathElement> = (0..1000).map(|i| f(&format!("m{i}"))).collect();
    at_once.insert_members(&prefix, more.clone());
    for pe in &more {
        one_by_one.insert(&[f("data"), pe.clone()]);
    }
    assert_eq!(at_once, one_by_one);
    // Nothing to add leaves no empty node behind.
    let mut empty = FieldSet::new();
    empty.insert_members(&prefix, Vec::new());
    assert!(empty.is_empty());
    assert_eq!(empty, FieldSet::new());
}

#[test]
fn union_is_the_same_whichever_side_is_larger() {
    let big = FieldSet::from_fields_v1(&json!({"f:data": (0..500).map(|i| (format!("f:k{i}"), json!({}))).collect::<serde_json::Map<_, _>>()}))
        .unwrap();
    let small = FieldSet::from_fields_v1(&json!({"f:data": {"f:k1": {}, "f:z": {}}, "f:kind": {}})).unwrap();
    let expected = {
        let mut m = big.to_fields_v1();
        m["f:data"]["f:z"] = json!({});
        m["f:kind"] = json!({});
        m
    };
    assert_eq!(big.clone().union(&small).to_fields_v1(), expected);
    assert_eq!(small.clone().union(&big).to_fields_v1(), expected);
    assert_eq!(big.clone().union(&small), small.union(&big));
}

#[test]
fn compare_handles_fields_that_turn_from_scalar_to_nested_and_back() {
    let shape = schema::root("ConfigMap");
    let old = json!({"kind": "ConfigMap", "data": {"s": "1", "n": null, "o": {"x": 1}, "e": {}, "gone": "g", "same": "v"},
        "metadata": {"labels": {"a": "1"}}});
    let new = json!({"kind": "ConfigMap", "data": {"s": {"y": 2}, "n": "now", "o": "flat", "e": [], "same": "v", "new": 0},
        "metadata": {"labels": {"a": "1"}}});
    let cmp = compare(Some(&old), Some(&new), shape);
    // A field whose value changes kind is a modified leaf, not a node whose fields come or go.
    assert_eq!(cmp.added.to_fields_v1(), json!({"f:data": {"f:new": {}}}));
    assert_eq!(cmp.modified.to_fields_v1(), json!({"f:data": {"f:e": {}, "f:n": {}, "f:o": {}, "f:s": {}}}));
    assert_eq!(cmp.removed.to_fields_v1(), json!({"f:data": {"f:gone": {}}}));
    // Against nothing (a create): every field is added, and every node but
    // `metadata` (a struct every object has).
    let created = compare(None, Some(&new), shape);
    assert_eq!(
        created.added.to_fields_v1(),
        json!({"f:data": {".": {}, "f:e": {}, "f:n": {}, "f:new": {}, "f:o": {}, "f:s": {".": {}, "f:y": {}}, "f:same": {}},
            "f:kind": {}, "f:metadata": {"f:labels": {".": {}, "f:a": {}}}})
    );
    assert!(created.modified.is_empty() && created.removed.is_empty());
}
