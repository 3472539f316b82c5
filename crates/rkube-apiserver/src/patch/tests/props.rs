//! Property tests: no patch of any type, on any object, panics; every
//! failure is a `PatchError` that maps to a client-visible Status.

use proptest::prelude::*;
use serde_json::{json, Map, Value};

use super::{pod, NOW};
use crate::patch::fieldpath::{ignored_top_level, stripped_fields, FieldSet};
use crate::patch::schema::Shape;
use crate::patch::typed::{encodes_config, to_field_set, CreatedBy};
use crate::patch::{apply_patch, apply_patch_at, update_managed_fields, PatchType};

const KINDS: [&str; 6] = ["Pod", "Deployment", "Service", "Node", "ConfigMap", "Job"];

/// Keys that steer values into the merge-keyed paths and directives.
fn arb_key() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => prop::sample::select(vec![
            "metadata", "spec", "status", "template", "containers", "initContainers", "name", "image", "env",
            "value", "ports", "containerPort", "protocol", "volumes", "finalizers", "labels", "conditions", "type",
            "ownerReferences", "uid", "managedFields", "apiVersion", "kind", "strategy", "data", "selector",
            "$patch", "$retainKeys", "$setElementOrder/containers", "$setElementOrder/env",
            "$setElementOrder/finalizers", "$deleteFromPrimitiveList/finalizers", "$setElementOrder",
            "$deleteFromPrimitiveList", "$other",
        ]).prop_map(str::to_string),
        1 => "[a-z$/.]{0,5}",
    ]
}

fn arb_scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        // Binary fractions: they survive serde_json's default (not
        // `float_roundtrip`) float parsing exactly.
        any::<i32>().prop_map(|i| json!(f64::from(i) / 8.0)),
        prop::sample::select(vec!["replace", "delete", "merge", "web", "TCP", "a", ""])
            .prop_map(Value::from),
        "[a-z0-9~/]{0,6}".prop_map(Value::from),
    ]
}

fn arb_value() -> impl Strategy<Value = Value> {
    arb_scalar().prop_recursive(5, 64, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::vec((arb_key(), inner), 0..6)
                .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// RFC 7396 merge of `patch` into `doc` (to perturb realistic objects).
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

fn without_nulls(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, v)| !v.is_null() && !k.starts_with('$'))
                .map(|(k, v)| (k.clone(), without_nulls(v)))
                .collect(),
        ),
        // Typed decoding refuses `null` list items (e.g. `env: [null]`), so
        // stored objects have none either.
        Value::Array(items) => Value::Array(items.iter().filter(|i| !i.is_null()).map(without_nulls).collect()),
        other => other.clone(),
    }
}

/// A pod with random fields merged in at random depths.
fn arb_pod_variant() -> impl Strategy<Value = Value> {
    (arb_value(), arb_value()).prop_map(|(top, spec)| {
        let mut p = pod();
        if top.is_object() {
            perturb(&mut p, &top);
        }
        if let (Some(c), true) = (p.pointer_mut("/spec/containers/0"), spec.is_object()) {
            perturb(c, &spec);
        }
        p
    })
}

fn arb_object() -> impl Strategy<Value = Value> {
    prop_oneof![
        1 => Just(pod()),
        2 => arb_pod_variant(),
        2 => prop::collection::vec((arb_key(), arb_value()), 0..6)
            .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>())),
    ]
}

fn arb_pointer() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof![
            prop::sample::select(vec![
                "spec",
                "containers",
                "0",
                "1",
                "-",
                "metadata",
                "labels",
                "~1",
                "~0",
                "",
                "name"
            ])
            .prop_map(str::to_string),
            "[a-z0-9]{0,3}",
        ],
        0..5,
    )
    .prop_map(|segs| segs.iter().map(|s| format!("/{s}")).collect())
}

fn arb_json_patch() -> impl Strategy<Value = Value> {
    prop::collection::vec(
        (
            prop::sample::select(vec!["add", "remove", "replace", "move", "copy", "test", "bogus"]),
            arb_pointer(),
            arb_pointer(),
            arb_value(),
        )
            .prop_map(|(op, path, from, value)| json!({"op": op, "path": path, "from": from, "value": value})),
        0..6,
    )
    .prop_map(Value::Array)
}

/// Every error must become a Status with a real code.
fn check(result: Result<Value, crate::patch::PatchError>) {
    if let Err(e) = result {
        let st = rkube_api::status::Status::from(e);
        assert!((400..=500).contains(&st.code), "{st:?}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 192, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn random_json_patches_never_panic(original in arb_object(), patch in arb_json_patch()) {
        check(apply_patch("Pod", PatchType::Json, Some(&original), patch.to_string().as_bytes(), "m", false));
    }

    #[test]
    fn random_merge_patches_never_panic(original in arb_object(), patch in arb_value()) {
        check(apply_patch("Pod", PatchType::Merge, Some(&original), patch.to_string().as_bytes(), "m", false));
    }

    #[test]
    fn random_strategic_patches_never_panic(
        kind in prop::sample::select(KINDS.to_vec()),
        original in arb_object(),
        patch in arb_value(),
    ) {
        check(apply_patch(kind, PatchType::StrategicMerge, Some(&original), patch.to_string().as_bytes(), "m", false));
    }

    #[test]
    fn random_applies_never_panic(
        kind in prop::sample::select(KINDS.to_vec()),
        original in prop::option::of(arb_object()),
        config in prop_oneof![arb_value(), arb_object()],
        force in any::<bool>(),
        manager in prop::sample::select(vec!["kubectl", "creator", "other"]),
    ) {
        let live = original.map(|mut o| {
            update_managed_fields("creator", "Update", "v1", None, &mut o);
            o
        });
        // Match apiVersion and kind so most cases get past the header checks.
        let mut config = config;
        if let Value::Object(m) = &mut config {
            m.insert("apiVersion".into(), json!("v1"));
            m.insert("kind".into(), json!(kind));
        }
        let first = apply_patch_at(kind, Some("v1"), PatchType::Apply, live.as_ref(), config.to_string().as_bytes(), manager, force, NOW);
        if let Ok(applied) = &first {
            // Applying again is possible and changes nothing but may prune.
            check(apply_patch_at(kind, Some("v1"), PatchType::Apply, Some(applied), config.to_string().as_bytes(), manager, force, NOW));
        }
        check(first);
    }

    #[test]
    fn random_updates_record_managed_fields_without_panic(old in prop::option::of(arb_object()), new in arb_object()) {
        let mut new = new;
        update_managed_fields("m", "Update", "v1", old.as_ref(), &mut new);
    }

    #[test]
    fn random_fields_v1_decodes_without_panic(v in arb_value()) {
        if let Ok(set) = FieldSet::from_fields_v1(&v) {
            prop_assert_eq!(FieldSet::from_fields_v1(&set.to_fields_v1()), Ok(set));
        }
    }
}

fn arb_yaml() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop::sample::select(vec![
            "apiVersion: v1\n",
            "kind: ConfigMap\n",
            "metadata:\n",
            "  name: x\n",
            "data:\n",
            "  a: b\n",
            "- ",
            "  ",
            ": ",
            "[",
            "]",
            "{",
            "}",
            "&a ",
            "*a",
            "!!str ",
            "---\n",
            "? ",
            "\"",
            "'",
            "\t",
            "\n",
            "1: 2\n",
            "~",
        ]),
        0..24,
    )
    .prop_map(|parts| parts.concat())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn random_yaml_apply_bodies_never_panic(body in arb_yaml(), create in any::<bool>()) {
        let live = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}});
        let original = if create { None } else { Some(&live) };
        check(apply_patch_at("ConfigMap", Some("v1"), PatchType::Apply, original, body.as_bytes(), "m", false, NOW));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    /// Server-side apply is idempotent: applying the configuration that
    /// produced an object again changes nothing (object, owners, times).
    #[test]
    fn reapplying_the_same_configuration_is_a_noop(
        original in prop::option::of(arb_pod_variant()),
        config in arb_pod_variant(),
    ) {
        let live = original.map(|mut o| {
            update_managed_fields("creator", "Update", "v1", None, &mut o);
            o
        });
        let body = config.to_string();
        if let Ok(first) = apply_patch_at("Pod", Some("v1"), PatchType::Apply, live.as_ref(), body.as_bytes(), "tool", true, NOW) {
            let second = apply_patch_at("Pod", Some("v1"), PatchType::Apply, Some(&first), body.as_bytes(), "tool", false, NOW);
            prop_assert_eq!(second.as_ref().map(Value::to_string), Ok(first.to_string()));
        }
    }

    /// A strategic merge patch that only restates live values changes nothing.
    #[test]
    fn strategic_patch_of_live_values_is_a_noop(live in arb_pod_variant()) {
        // In a patch `null` means delete and `$` keys are directives, so
        // restate only values a stored object can have.
        let live = without_nulls(&live);
        // Only objects typed decoding accepts can be stored (no `env: [""]`).
        prop_assume!(serde_json::from_value::<k8s_openapi::api::core::v1::Pod>(live.clone()).is_ok());
        let mut patch = json!({});
        for pointer in ["/spec/containers", "/metadata/labels", "/metadata/finalizers", "/status/conditions"] {
            if let Some(v) = live.pointer(pointer) {
                let (parent, field) = pointer.rsplit_once('/').unwrap_or_default();
                let section = parent.trim_start_matches('/');
                patch.as_object_mut().unwrap().entry(section).or_insert(json!({}))[field] = v.clone();
            }
        }
        if let Ok(out) = apply_patch("Pod", PatchType::StrategicMerge, Some(&live), patch.to_string().as_bytes(), "m", false) {
            prop_assert_eq!(out.to_string(), live.to_string());
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, failure_persistence: None, ..ProptestConfig::default() })]

    /// Merging a configuration into nothing by value (a create) gives what
    /// the copying merge gives, for every kind's shape.
    #[test]
    fn merging_into_nothing_by_value_is_the_copying_merge(config in arb_object(), kind in prop::sample::select(KINDS.to_vec())) {
        let api_version = match kind {
            "Deployment" => "apps/v1",
            "Job" => "batch/v1",
            _ => "v1",
        };
        let shape = crate::patch::schema::root_for(api_version, kind);
        let copied = crate::patch::typed::merge(None, &config, shape);
        let moved = crate::patch::typed::merge_into_absent(config, shape);
        prop_assert_eq!(moved.to_string(), copied.to_string());
    }
}

/// Merging as it was done before [`crate::patch::typed::merge_into`]: each
/// map built again, `lhs`'s fields in their order (those `rhs` names
/// merged, the others copied), then those only `rhs` has; granular lists
/// by the list merge, its items merged by this function; anything else
/// replaced by `rhs` without its null fields.
fn merge_by_rebuilding(lhs: Option<&Value>, rhs: &Value, shape: &Shape) -> Value {
    use crate::patch::typed::{is_granular_list, merge_list, without_nulls};
    match rhs {
        Value::Object(r) if !shape.is_atomic_map() => {
            let empty = Map::new();
            let l = match lhs {
                Some(Value::Object(l)) => l,
                _ => &empty,
            };
            let mut out = Map::new();
            for (k, lv) in l {
                match r.get(k) {
                    Some(Value::Null) => {}
                    Some(rv) => {
                        out.insert(k.clone(), merge_by_rebuilding(Some(lv), rv, shape.child(k)));
                    }
                    None => {
                        out.insert(k.clone(), lv.clone());
                    }
                }
            }
            for (k, rv) in r {
                if !rv.is_null() && !l.contains_key(k) {
                    out.insert(k.clone(), merge_by_rebuilding(None, rv, shape.child(k)));
                }
            }
            Value::Object(out)
        }
        Value::Array(r) if is_granular_list(shape) => {
            let l = lhs.and_then(Value::as_array).map_or(&[][..], Vec::as_slice);
            Value::Array(merge_list(l, r, shape, &merge_by_rebuilding))
        }
        _ => without_nulls(rhs),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, failure_persistence: None, ..ProptestConfig::default() })]

    /// Merging in place gives what building every map again gives, and says
    /// it changed something exactly when the result differs from the live
    /// object (also when the configuration restates it, or its variant);
    /// merging over the live object with the configuration's own nodes
    /// (`merge_over`) gives the same bytes and says the same.
    #[test]
    fn merging_in_place_is_merging_by_rebuilding(
        live in arb_object(),
        config in arb_object(),
        restate in 0u8..4,
        kind in prop::sample::select(KINDS.to_vec()),
    ) {
        let api_version = match kind {
            "Deployment" => "apps/v1",
            "Job" => "batch/v1",
            _ => "v1",
        };
        let shape = crate::patch::schema::root_for(api_version, kind);
        let config = match restate {
            0 => config,
            1 => without_nulls(&live),
            2 => reversed(&without_nulls(&live)),
            _ => {
                let mut variant = without_nulls(&live);
                perturb(&mut variant, &config);
                variant
            }
        };
        let mut merged = live.clone();
        let changed = crate::patch::typed::merge_into(&mut merged, &config, shape);
        prop_assert_eq!(merged.to_string(), merge_by_rebuilding(Some(&live), &config, shape).to_string());
        prop_assert_eq!(changed, merged != live);
        let (over, over_changed) = crate::patch::typed::merge_over(&live, config, shape);
        prop_assert_eq!(over.to_string(), merged.to_string());
        prop_assert_eq!(over_changed, changed);
    }
}

/// Atomic values written again in another key order, and `-0.0` over
/// `0.0`, are written as the configuration has them (as merging by
/// rebuilding does) but count as unchanged.
#[test]
fn merging_in_place_writes_the_configuration_s_bytes() {
    let shape = crate::patch::schema::root_for("v1", "Service");
    let live = json!({"spec": {"selector": {"a": "1", "b": "2"}, "x": 0.0, "ports": [{"port": 80, "protocol": "TCP"}]}});
    let config = json!({"spec": {"selector": {"b": "2", "a": "1"}, "x": -0.0, "ports": [{"protocol": "TCP", "port": 80}]}});
    let mut merged = live.clone();
    let changed = crate::patch::typed::merge_into(&mut merged, &config, shape);
    assert!(!changed);
    assert_eq!(merged.to_string(), merge_by_rebuilding(Some(&live), &config, shape).to_string());
    assert_eq!(merged.to_string(), r#"{"spec":{"selector":{"b":"2","a":"1"},"x":-0.0,"ports":[{"port":80,"protocol":"TCP"}]}}"#);
    let (over, over_changed) = crate::patch::typed::merge_over(&live, config, shape);
    assert!(!over_changed);
    assert_eq!(over.to_string(), merged.to_string());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    /// Comparing while skipping `metadata.managedFields` finds what comparing
    /// copies without them finds.
    #[test]
    fn comparing_without_managed_fields_is_comparing_copies_without_them(
        old in prop::option::of(arb_object()),
        new in arb_object(),
        old_managed in prop::option::of(arb_value()),
        new_managed in prop::option::of(arb_value()),
    ) {
        use crate::patch::managed::without_managed_fields;
        use crate::patch::typed::{compare, compare_without_managed_fields};
        let with = |mut o: Value, m: Option<Value>| {
            if let (Some(Value::Object(meta)), Some(m)) = (o.get_mut("metadata"), m) {
                meta.insert("managedFields".into(), m);
            }
            o
        };
        let old = old.map(|o| with(o, old_managed));
        let new = with(new, new_managed);
        let shape = crate::patch::schema::root_for("v1", "Pod");
        let plain_old = old.as_ref().map(|o| without_managed_fields(o).into_owned());
        let plain_new = without_managed_fields(&new).into_owned();
        let want = compare(plain_old.as_ref(), Some(&plain_new), shape);
        let got = compare_without_managed_fields(old.as_ref(), Some(&new), shape);
        prop_assert_eq!(got.added, want.added);
        prop_assert_eq!(got.modified, want.modified);
        prop_assert_eq!(got.removed, want.removed);
    }
}

/// `v` with every object's keys in reverse order.
fn reversed(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(m.iter().rev().map(|(k, v)| (k.clone(), reversed(v))).collect()),
        Value::Array(items) => Value::Array(items.iter().map(reversed).collect()),
        other => other.clone(),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    /// Comparing and merging walk two objects side by side while their keys
    /// keep one order and look keys up after: the same results whatever
    /// the order (each object against its variant, in its order and
    /// reversed, so both ways are taken).
    #[test]
    fn comparing_and_merging_do_not_depend_on_key_order(
        a in arb_pod_variant(),
        b in arb_pod_variant(),
        kind in prop::sample::select(KINDS.to_vec()),
    ) {
        use crate::patch::typed::{compare, merge};
        let shape = crate::patch::schema::root_for("v1", kind);
        let b_rev = reversed(&b);
        let want = compare(Some(&a), Some(&b_rev), shape);
        let got = compare(Some(&a), Some(&b), shape);
        prop_assert_eq!(&got.added, &want.added);
        prop_assert_eq!(&got.modified, &want.modified);
        prop_assert_eq!(&got.removed, &want.removed);
        prop_assert_eq!(merge(Some(&a), &b, shape), merge(Some(&a), &b_rev, shape));
        prop_assert_eq!(merge(Some(&a), &a, shape), merge(Some(&a), &reversed(&a), shape));
        prop_assert_eq!(crate::object::values_equal(&a, &b), a == b);
        prop_assert!(crate::object::values_equal(&a, &reversed(&a)));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    /// Recording an `Update` by editing the encoded entries in place gives,
    /// byte for byte, what decoding and encoding every entry gives, over a
    /// chain of small and large updates by several managers (a client's own
    /// managedFields included).
    #[test]
    fn recording_in_place_is_recording_by_decoding(
        first in arb_object(),
        steps in prop::collection::vec(
            (arb_value(), 0usize..3, any::<bool>(), prop::option::of((0usize..5, arb_value()))),
            1..6,
        ),
    ) {
        use crate::patch::managed::record_update_with;
        use crate::patch::UpdateRecord;
        let managers = ["kubectl", "controller", "operator"];
        let record = |manager: &str, subresource: &str, now: &str, old: Option<&Value>, new: &mut Value, shortcuts: bool| {
            let rec = UpdateRecord { manager, api_version: "v1", subresource, now };
            record_update_with(&rec, old, new, shortcuts);
        };
        let mut current = first.clone();
        record("creator", "", NOW, None, &mut current, false);
        for (step, (patch, who, status, client_managed)) in steps.into_iter().enumerate() {
            // Each step at its own time, so a missed `time` update shows.
            let now = format!("2024-02-01T00:00:0{step}Z");
            let mut next = current.clone();
            if patch.is_object() {
                perturb(&mut next, &patch);
            }
            // A client's own managedFields: arbitrary, or the stored entries
            // sent back (as `kubectl edit` does) as they are or changed.
            let stored = current.pointer("/metadata/managedFields").cloned().unwrap_or(Value::Null);
            let client_managed = client_managed.map(|(how, arbitrary)| {
                let mut sent = stored.clone();
                let first = sent.get_mut(0).and_then(Value::as_object_mut);
                match (how, first) {
                    (0, _) => return arbitrary,
                    (2, Some(e)) => drop(e.insert("fieldsV1".into(), Value::Null)),
                    (3, Some(e)) => drop(e.shift_remove("fieldsV1")),
                    (4, Some(e)) => drop(e.insert("manager".into(), "someone-else".into())),
                    _ => {}
                }
                sent
            });
            if let (Some(m), Some(Value::Object(meta))) = (client_managed, next.get_mut("metadata")) {
                meta.insert("managedFields".into(), m);
            }
            let subresource = if status { "status" } else { "" };
            let (mut in_place, mut decoded) = (next.clone(), next);
            record(managers[who], subresource, &now, Some(&current), &mut in_place, true);
            record(managers[who], subresource, &now, Some(&current), &mut decoded, false);
            prop_assert_eq!(in_place.to_string(), decoded.to_string());
            current = in_place;
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    /// The sole owner's re-apply shortcut gives what the general apply
    /// gives, over applies of the same and of changed configurations (times
    /// differ per step, so a missed time update shows).
    #[test]
    fn sole_owner_reapply_shortcut_is_the_general_apply(
        first in arb_pod_variant(),
        steps in prop::collection::vec((prop::option::of(arb_value()), any::<bool>()), 1..5),
    ) {
        use crate::patch::apply::{server_side_apply_with, ApplyRequest};
        let apply = |live: Option<&Value>, config: &Value, manager: &str, now: &str, shortcut: bool| {
            let body = config.to_string();
            let req = ApplyRequest {
                kind: "Pod", api_version: Some("v1"), original: live, body: body.as_bytes(),
                manager, force: true, now,
            };
            server_side_apply_with(&req, shortcut).map(|v| v.to_string()).map_err(|e| format!("{e:?}"))
        };
        let Ok(mut current) = apply(None, &first, "tool", NOW, false) else { return Ok(()) };
        let mut config = first;
        for (step, (change, kubectl)) in steps.into_iter().enumerate() {
            if let Some(change) = change.filter(Value::is_object) {
                perturb(&mut config, &change);
            }
            let live: Value = serde_json::from_str(&current).expect("JSON");
            let now = format!("2024-03-01T00:00:0{step}Z");
            let manager = if kubectl { "kubectl" } else { "tool" };
            let fast = apply(Some(&live), &config, manager, &now, true);
            let general = apply(Some(&live), &config, manager, &now, false);
            prop_assert_eq!(&fast, &general);
            if let Ok(next) = fast {
                current = next;
            }
        }
    }
}

/// Keys of the object-only configurations below: top-level and `metadata`
/// fields that are stripped or ignored, and plain ones.
fn arb_field_key() -> impl Strategy<Value = String> {
    prop::sample::select(vec![
        "metadata", "status", "apiVersion", "kind", "name", "namespace", "resourceVersion", "labels", "data", "spec",
        "a", "b", "k1", "k10", "k2",
    ])
    .prop_map(str::to_string)
}

/// Objects whose values are scalars or objects, now and then an empty
/// object or a list (which `encodes_config` leaves to the field set).
fn arb_object_config() -> impl Strategy<Value = Value> {
    arb_config_of(arb_config_leaf())
}

/// Scalars, now and then an empty object or a list.
fn arb_config_leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        12 => arb_scalar(),
        1 => Just(json!({})),
        1 => Just(json!(["x"])),
    ]
}

/// Objects of `leaf` values and of non-empty objects.
fn arb_config_of(leaf: impl Strategy<Value = Value> + 'static) -> impl Strategy<Value = Value> {
    arb_config_with(arb_field_key().boxed(), arb_field_key().boxed(), leaf)
}

/// Objects of `leaf` values and of non-empty objects, their top-level keys
/// from `top` and the others from `key`.
fn arb_config_with(
    top: BoxedStrategy<String>,
    key: BoxedStrategy<String>,
    leaf: impl Strategy<Value = Value> + 'static,
) -> impl Strategy<Value = Value> {
    let value = leaf.prop_recursive(3, 24, 4, move |inner| {
        prop::collection::vec((key.clone(), inner), 1..4).prop_map(|kv| Value::Object(kv.into_iter().collect()))
    });
    prop::collection::vec((top, value), 0..6).prop_map(|kv| Value::Object(kv.into_iter().collect()))
}

/// The fields a server-side apply of `config` by its sole owner records (the
/// set `sole_owner_reapplies` compares), and their `FieldsV1` encoding.
fn applied_fields(config: &Value, shape: &Shape) -> (FieldSet, Map<String, Value>) {
    let set = to_field_set(config, shape).difference(&stripped_fields()).without_top_level(ignored_top_level(""));
    let Value::Object(encoded) = set.to_fields_v1() else { unreachable!("FieldsV1 is an object") };
    (set, encoded)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1024, failure_persistence: None, ..ProptestConfig::default() })]

    /// `encodes_config` answers what building the field set and comparing
    /// its encoding answers, whenever it answers: for the encoding of the
    /// configuration itself (with or without a top-level `"."`) and for
    /// that of another one.
    #[test]
    fn encodes_config_agrees_with_the_field_set(
        config in arb_object_config(),
        other in arb_object_config(),
        kind in prop::sample::select(vec!["ConfigMap", "Pod"]),
        marked in any::<bool>(),
    ) {
        let shape = crate::patch::schema::root_for("v1", kind);
        let strip = stripped_fields();
        let ignored = ignored_top_level("");
        let (set, own) = applied_fields(&config, shape);
        for mut stored in [own, applied_fields(&other, shape).1] {
            if marked {
                stored.shift_insert(0, ".".to_string(), json!({}));
            }
            let want = !set.is_empty() && crate::patch::fields_v1::encodes(&stored, &set);
            if let Some(got) = encodes_config(&stored, &config, shape, &strip, ignored) {
                prop_assert_eq!(got, want, "config {} stored {}", config, Value::Object(stored.clone()));
            }
        }
    }

    /// A configuration of non-empty objects and scalars is always walked:
    /// its own encoding is found to be its fields (unless it has none).
    #[test]
    fn encodes_config_answers_for_objects_of_scalars(config in arb_config_of(arb_scalar())) {
        let shape = crate::patch::schema::root_for("v1", "ConfigMap");
        let (strip, ignored) = (stripped_fields(), ignored_top_level(""));
        let (set, stored) = applied_fields(&config, shape);
        prop_assert_eq!(encodes_config(&stored, &config, shape, &strip, ignored), Some(!set.is_empty()));
    }
}

#[test]
fn encodes_config_follows_objects_of_scalars() {
    let shape = crate::patch::schema::root_for("v1", "ConfigMap");
    let strip = stripped_fields();
    // Keys out of their order in the encoding (`k10` sorts before `k2`).
    let config = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "labels": {"a": "1"}},
        "data": {"k2": "v2", "k10": "v10", "k1": "v1"}, "status": {"s": 1}});
    let (_, stored) = applied_fields(&config, shape);
    assert_eq!(encodes_config(&stored, &config, shape, &strip, "status"), Some(true));
    // One key more, one key less, one key other, a node less: other fields.
    for changed in [
        json!({"metadata": {"name": "x", "labels": {"a": "1"}}, "data": {"k1": "v1", "k10": "", "k2": "", "k3": ""}}),
        json!({"metadata": {"name": "x", "labels": {"a": "1"}}, "data": {"k1": "v1", "k2": "v2"}}),
        json!({"metadata": {"name": "x", "labels": {"b": "1"}}, "data": {"k1": "v1", "k10": "", "k2": "v2"}}),
        json!({"metadata": {"name": "x"}, "data": {"k1": "v1", "k10": "", "k2": "v2"}}),
        json!({"metadata": {"name": "x", "labels": {"a": "1"}}, "data": {"k1": {"z": 1}, "k10": "", "k2": "v2"}}),
    ] {
        assert_eq!(encodes_config(&stored, &changed, shape, &strip, "status"), Some(false), "{changed}");
    }
    // Values do not count, only which fields are set.
    let values = json!({"metadata": {"name": "y", "labels": {"a": "2"}}, "data": {"k10": 1, "k2": "w", "k1": null}});
    assert_eq!(encodes_config(&stored, &values, shape, &strip, "status"), Some(true));
    // Encodings the walk must not take: a `"."` on an object node, a key
    // that is not a field's.
    let mut dotted = stored.clone();
    if let Some(Value::Object(data)) = dotted.get_mut("f:data") {
        data.shift_insert(0, ".".to_string(), json!({}));
    }
    assert_eq!(encodes_config(&dotted, &config, shape, &strip, "status"), Some(false));
    let mut indexed = stored.clone();
    if let Some(Value::Object(data)) = indexed.get_mut("f:data") {
        data.insert("i:0".to_string(), json!({}));
    }
    assert_eq!(encodes_config(&indexed, &config, shape, &strip, "status"), Some(false));
    // Lists and empty objects are left to the field set.
    assert_eq!(encodes_config(&stored, &json!({"data": {"k1": ["x"]}}), shape, &strip, "status"), None);
    assert_eq!(encodes_config(&stored, &json!({"data": {"k1": {}}}), shape, &strip, "status"), None);
}

/// Found by `encodes_config_agrees_with_the_field_set`: an empty object under
/// a stripped `metadata` field is a stripped leaf, so the set has no
/// `metadata` node; the walk must not take its absence for a difference.
#[test]
fn encodes_config_leaves_stripped_empty_objects_to_the_field_set() {
    let shape = crate::patch::schema::root_for("v1", "ConfigMap");
    let strip = stripped_fields();
    let config = json!({"metadata": {"name": {}}, "apiVersion": {"metadata": null}});
    let (set, stored) = applied_fields(&config, shape);
    assert!(crate::patch::fields_v1::encodes(&stored, &set));
    assert_ne!(encodes_config(&stored, &config, shape, &strip, "status"), Some(false));
}

/// Records the `Update` of a create of `obj` by `creator` at [`NOW`], with
/// or without the shortcuts, and gives the object's JSON text.
fn created(obj: &Value, subresource: &str, shortcuts: bool) -> String {
    let rec = crate::patch::UpdateRecord { manager: "creator", api_version: "v1", subresource, now: NOW };
    let mut new = obj.clone();
    crate::patch::managed::record_update_with(&rec, None, &mut new, shortcuts);
    new.to_string()
}

/// Objects for the create walk: objects of scalars, now and then an empty
/// object or a list, under a kind's `apiVersion` and `kind`. The keys add to
/// [`arb_field_key`]'s the fields of atomic maps (a Service's
/// `spec.selector`), of nested value structs (a Deployment's
/// `spec.template`) and of lists of set or map items (`finalizers`,
/// `containers`), which the walk leaves to the set.
fn arb_created() -> impl Strategy<Value = Value> {
    let key = prop_oneof![
        3 => arb_field_key(),
        1 => prop::sample::select(vec!["selector", "template", "finalizers", "containers", "app"]).prop_map(str::to_string),
    ]
    .boxed();
    let kinds = vec![("v1", "ConfigMap"), ("v1", "Pod"), ("apps/v1", "Deployment"), ("v1", "Service"), ("v1", "Unknown")];
    let top = prop_oneof![3 => arb_field_key(), 1 => Just("spec".to_string())].boxed();
    (arb_config_with(top, key, arb_config_leaf()), prop::sample::select(kinds)).prop_map(|(mut obj, (api_version, kind))| {
        if let Value::Object(m) = &mut obj {
            m.insert("apiVersion".into(), api_version.into());
            m.insert("kind".into(), kind.into());
        }
        obj
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1024, failure_persistence: None, ..ProptestConfig::default() })]

    /// The text walk writes, byte for byte, what encoding the map walk's
    /// map gives: for both entries, for objects the walk follows and for
    /// those it leaves.
    #[test]
    fn the_text_walk_writes_the_map_walk_encoded(
        obj in prop_oneof![
            3 => arb_created(),
            1 => arb_object(),
            // A node left out: `metadata` of stripped fields only.
            1 => arb_created().prop_map(|mut o| {
                o["metadata"] = json!({"name": "a", "uid": "u", "resourceVersion": "1"});
                o
            }),
        ],
        apply in any::<bool>(),
    ) {
        use crate::patch::typed::{created_fields_v1, created_fields_v1_text};
        let text = |k: &str| obj.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        let shape = crate::patch::schema::root_for(&text("apiVersion"), &text("kind"));
        let by = if apply { CreatedBy::Apply } else { CreatedBy::Update };
        let strip = stripped_fields();
        let built = created_fields_v1(&obj, shape, &strip, "status", by).map(|m| Value::Object(m).to_string());
        prop_assert_eq!(created_fields_v1_text(&obj, shape, &strip, "status", by), built);
    }

    /// A create recorded through the walk gives, byte for byte, what
    /// comparing with nothing and encoding the set gives: for objects the
    /// walk follows and for realistic ones (pods with lists) it leaves.
    #[test]
    fn recording_a_create_by_the_walk_is_recording_by_the_set(
        obj in prop_oneof![3 => arb_created(), 1 => arb_object()],
        status in any::<bool>(),
    ) {
        let subresource = if status { "status" } else { "" };
        prop_assert_eq!(created(&obj, subresource, true), created(&obj, subresource, false));
    }

    /// Server-side apply creating an object from a configuration the walk
    /// follows gives, byte for byte, what building the applier's field set
    /// gives (after the create path writes the entries): for the same
    /// configurations as the create walk's, by a tool and by kubectl.
    #[test]
    fn applying_a_create_by_the_walk_is_applying_by_the_set(
        config in prop_oneof![3 => arb_created(), 1 => arb_object()],
        kubectl in any::<bool>(),
    ) {
        use crate::patch::apply::{server_side_apply_with, ApplyRequest};
        let text = |k: &str| config.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        let (kind, api_version) = (text("kind"), text("apiVersion"));
        let body = config.to_string();
        let manager = if kubectl { "kubectl" } else { "tool" };
        let req = ApplyRequest {
            kind: &kind, api_version: Some(&api_version), original: None, body: body.as_bytes(),
            manager, force: false, now: NOW,
        };
        let apply = |shortcut: bool| server_side_apply_with(&req, shortcut).map(|v| v.to_string()).map_err(|e| format!("{e:?}"));
        prop_assert_eq!(apply(true), apply(false));
    }

    /// A create's `Update` entry kept apart as text
    /// ([`crate::patch::UnwrittenEntries::created`]) is stored as the bytes
    /// of recording it into the object and encoding that; it is kept as
    /// text whenever the walk finds fields and the object has a `metadata`
    /// object.
    #[test]
    fn a_create_entry_kept_as_text_is_stored_as_recorded(
        obj in prop_oneof![3 => arb_created(), 1 => arb_object()],
        status in any::<bool>(),
    ) {
        use crate::patch::UnwrittenEntries;
        use rkube_api::wire::to_typed_json;
        let subresource = if status { "status" } else { "" };
        let rec = crate::patch::UpdateRecord { manager: "creator", api_version: "v1", subresource, now: NOW };
        let mut recorded = obj.clone();
        crate::patch::record_update(&rec, None, &mut recorded);
        let want = String::from_utf8(to_typed_json(&recorded, true).unwrap()).unwrap();
        let Some(entries) = UnwrittenEntries::created(&rec, &obj) else {
            let shape = crate::patch::schema::root_for(obj["apiVersion"].as_str().unwrap_or(""), obj["kind"].as_str().unwrap_or(""));
            let walked = crate::patch::typed::created_fields_v1_text(&obj, shape, &stripped_fields(), ignored_top_level(subresource), CreatedBy::Update);
            let carries_entries = obj.pointer("/metadata/managedFields").is_some();
            prop_assert!(carries_entries || walked.is_none_or(|w| w == "{}"), "kept apart whenever the walk writes fields");
            return Ok(());
        };
        prop_assert!(!entries.is_empty());
        let got = match entries.encode_stored(&obj) {
            Some(encoded) => {
                let (bytes, nesting) = encoded.unwrap();
                prop_assert_eq!(nesting, rkube_api::wire::text_nesting(&bytes));
                bytes
            }
            None => {
                prop_assert!(!obj["metadata"].is_object(), "stored as text");
                let mut written = obj.clone();
                entries.write_into(&mut written);
                to_typed_json(&written, true).unwrap()
            }
        };
        prop_assert_eq!(String::from_utf8(got).unwrap(), want);
    }

    /// Server-side apply creating an object stores, with its entry kept as
    /// text, the bytes of writing the entry and encoding the object.
    #[test]
    fn an_apply_entry_kept_as_text_is_stored_as_written(config in prop_oneof![3 => arb_created(), 1 => arb_object()]) {
        use rkube_api::wire::to_typed_json;
        let text = |k: &str| config.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        let body = config.to_string();
        let Ok((obj, entries)) = crate::patch::apply_create_at(&text("kind"), &text("apiVersion"), body.as_bytes(), "tool", false, NOW) else {
            return Ok(());
        };
        let stored = entries.encode_stored(&obj).map(Result::unwrap).map(|(bytes, nesting)| {
            assert_eq!(nesting, rkube_api::wire::text_nesting(&bytes));
            bytes
        });
        let mut written = obj;
        entries.write_into(&mut written);
        let want = to_typed_json(&written, true).unwrap();
        prop_assert_eq!(String::from_utf8(stored.unwrap_or_else(|| want.clone())).unwrap(), String::from_utf8(want).unwrap());
    }

    /// The Apply walk answers for every configuration of scalars and
    /// non-empty objects, and encodes no object node as a member.
    #[test]
    fn the_apply_walk_answers_for_objects_of_scalars(config in arb_config_of(arb_scalar())) {
        let shape = crate::patch::schema::root_for("v1", "ConfigMap");
        let walked = crate::patch::typed::created_fields_v1(&config, shape, &stripped_fields(), ignored_top_level(""), CreatedBy::Apply);
        let Value::Object(m) = &config else { unreachable!("configurations are objects") };
        prop_assert_eq!(walked.is_some(), !m.is_empty(), "{}", config);
        prop_assert!(!Value::Object(walked.unwrap_or_default()).to_string().contains(r#"".""#));
    }

    /// The walk answers for every object of scalars and non-empty objects:
    /// the shortcut is taken, not only never wrong.
    #[test]
    fn the_create_walk_answers_for_objects_of_scalars(config in arb_config_of(arb_scalar())) {
        for kind in ["ConfigMap", "Pod"] {
            let shape = crate::patch::schema::root_for("v1", kind);
            let walked = crate::patch::typed::created_fields_v1(&config, shape, &stripped_fields(), ignored_top_level(""), CreatedBy::Update);
            let Value::Object(m) = &config else { unreachable!("configurations are objects") };
            prop_assert_eq!(walked.is_some(), !m.is_empty(), "{} {}", kind, config);
        }
    }
}

/// Server-side apply creating a ConfigMap keeps its entry as text, and
/// stores it as the bytes of writing it; so does a create.
#[test]
fn creates_of_a_config_map_store_their_entry_as_text() {
    use rkube_api::wire::to_typed_json;
    let config = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "labels": {"l": "1"}},
        "data": {"k\"1": "v", "k2": "w"}});
    let (obj, entries) = crate::patch::apply_create_at("ConfigMap", "v1", config.to_string().as_bytes(), "tool", false, NOW).unwrap();
    let (stored, nesting) = entries.encode_stored(&obj).expect("kept as text").unwrap();
    assert_eq!(nesting, 8, "object, metadata, managedFields, entry, fieldsV1, f:metadata, f:labels, f:l");
    let mut written = obj.clone();
    entries.write_into(&mut written);
    assert_eq!(String::from_utf8(stored).unwrap(), String::from_utf8(to_typed_json(&written, true).unwrap()).unwrap());
    assert_eq!(written["metadata"]["managedFields"][0]["fieldsV1"], json!({"f:data": {"f:k\"1": {}, "f:k2": {}}, "f:metadata": {"f:labels": {"f:l": {}}}}));

    let rec = crate::patch::UpdateRecord { manager: "creator", api_version: "v1", subresource: "", now: NOW };
    let entries = crate::patch::UnwrittenEntries::created(&rec, &config).expect("kept as text");
    let (stored, _) = entries.encode_stored(&config).expect("kept as text").unwrap();
    let mut recorded = config.clone();
    crate::patch::record_update(&rec, None, &mut recorded);
    assert_eq!(String::from_utf8(stored).unwrap(), String::from_utf8(to_typed_json(&recorded, true).unwrap()).unwrap());
}

/// Keys that JSON escapes are escaped in the text walk as in the map's
/// encoding; keys outside ASCII are written as they are.
#[test]
fn the_text_walk_escapes_keys_as_json_does() {
    use crate::patch::typed::{created_fields_v1, created_fields_v1_text};
    let shape = crate::patch::schema::root_for("v1", "ConfigMap");
    let obj = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"},
        "data": {"q\"q": "1", "b\\s": "2", "c\u{1}": "3", "t\tb": "4", "é": "5", "\u{7f}": "6"}});
    for by in [CreatedBy::Update, CreatedBy::Apply] {
        let built = created_fields_v1(&obj, shape, &stripped_fields(), "status", by).map(|m| Value::Object(m).to_string());
        let written = created_fields_v1_text(&obj, shape, &stripped_fields(), "status", by);
        assert_eq!(written, built);
        assert!(written.is_some_and(|t| t.contains(r#""f:q\"q""#) && t.contains(r#""f:c\u0001""#) && t.contains("\"f:é\"")));
    }
}

/// A configuration nested up to the body's limit writes fields one level
/// deeper than itself: past what JSON decoding takes, the entry is built
/// from the field set instead of the text, and the apply gives the same
/// object either way, its entry included.
#[test]
fn a_create_applied_at_the_nesting_limit_keeps_its_entry() {
    use crate::patch::apply::{server_side_apply_with, ApplyRequest};
    let mut applied_at = Vec::new();
    for depth in 120..=130 {
        // `{"apiVersion":…,"x":{"a":{…{"a":1}…}}}`: the object and `depth - 1` levels under it.
        let body = format!(
            r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"a"}},"x":{}1{}}}"#,
            r#"{"a":"#.repeat(depth - 1),
            "}".repeat(depth - 1)
        );
        let req = ApplyRequest {
            kind: "ConfigMap", api_version: Some("v1"), original: None, body: body.as_bytes(),
            manager: "tool", force: false, now: NOW,
        };
        let Ok(walked) = server_side_apply_with(&req, true) else { continue };
        assert_eq!(Some(&walked), server_side_apply_with(&req, false).ok().as_ref(), "depth {depth}");
        assert!(walked.pointer("/metadata/managedFields/0/fieldsV1/f:x").is_some(), "depth {depth}: {walked}");
        applied_at.push(depth);
    }
    assert!(applied_at.contains(&127), "applied at depths {applied_at:?}");
}

/// The fields of a created ConfigMap, as upstream records them: `data` is
/// a member (`"."`) holding its keys in byte order, `metadata` (a value
/// struct) is not, its identifying fields are left out, `status` is not
/// owned by a main-resource write. A Service's `spec.selector` (an atomic
/// map) is one member; a pod's containers (a list keyed by name) are left
/// to the set.
#[test]
fn the_create_walk_encodes_a_config_map() {
    let shape = crate::patch::schema::root_for("v1", "ConfigMap");
    let strip = stripped_fields();
    let obj = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "x", "namespace": "d", "labels": {"a": "1"}},
        "data": {"k2": "v2", "k10": "v10", "k1": "v1"}, "binaryData": {"b": "AA=="}, "status": {"s": 1}});
    let walked = crate::patch::typed::created_fields_v1(&obj, shape, &strip, "status", CreatedBy::Update).expect("walked");
    let want = json!({
        "f:binaryData": {".": {}, "f:b": {}},
        "f:data": {".": {}, "f:k1": {}, "f:k10": {}, "f:k2": {}},
        "f:metadata": {"f:labels": {".": {}, "f:a": {}}},
    });
    assert_eq!(Value::Object(walked).to_string(), want.to_string());
    // Nothing left to own: no fields at all.
    let bare = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}});
    assert_eq!(crate::patch::typed::created_fields_v1(&bare, shape, &strip, "status", CreatedBy::Update), Some(Map::new()));
    let service = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"},
        "spec": {"selector": {"app": "x"}, "type": "ClusterIP"}});
    let service_shape = crate::patch::schema::root_for("v1", "Service");
    let walked = crate::patch::typed::created_fields_v1(&service, service_shape, &strip, "status", CreatedBy::Update).expect("walked");
    assert_eq!(Value::Object(walked), json!({"f:spec": {"f:selector": {}, "f:type": {}}}));
    assert_eq!(created(&service, "", true), created(&service, "", false));
    let pod_shape = crate::patch::schema::root_for("v1", "Pod");
    assert_eq!(crate::patch::typed::created_fields_v1(&pod(), pod_shape, &strip, "status", CreatedBy::Update), None);
    assert_eq!(created(&pod(), "", true), created(&pod(), "", false));
}
