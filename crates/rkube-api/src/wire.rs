//! Body bytes as kube-apiserver writes them.
//!
//! kube-apiserver encodes typed objects with Go's `encoding/json` through a
//! `json.Encoder` (`k8s.io/apimachinery/pkg/runtime/serializer/json/json.go`):
//!
//! - object keys come in Go struct order: `TypeMeta` first (`kind`, then
//!   `apiVersion`), then `metadata`, the type's own fields, and `status`
//!   last; `ObjectMeta`'s keys in its struct order
//!   (`k8s.io/apimachinery/pkg/apis/meta/v1/types.go`);
//! - every encoded value is followed by `\n` ([`JSON_TERMINATOR`]): object,
//!   list and `Status` bodies alike, and each line of a watch stream.
//!
//! rkube keeps the JSON a client sent, so [`order_object_keys`] puts the
//! top-level and `metadata` keys in that order where objects are prepared for
//! storage and where they are decoded from it (objects written before the
//! order was kept come out right too). Fields below the top level keep the
//! client's order. Custom resources, which upstream encodes as unstructured
//! maps with sorted keys (`apiVersion` before `kind`), are not served yet.

use serde_json::{Map, Value};

/// What Go's `json.Encoder.Encode` writes after every value.
pub const JSON_TERMINATOR: u8 = b'\n';

/// `ObjectMeta`'s JSON keys in struct order.
pub const OBJECT_META_ORDER: &[&str] = &[
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
];

/// Rank of a top-level key: `kind`, `apiVersion`, `metadata`, the rest (in
/// their present order), `status`.
fn top_rank(key: &str) -> u8 {
    match key {
        "kind" => 0,
        "apiVersion" => 1,
        "metadata" => 2,
        "status" => 4,
        _ => 3,
    }
}

/// Rank of a `metadata` key: its place in [`OBJECT_META_ORDER`]; unknown
/// keys after them, in their present order.
fn meta_rank(key: &str) -> usize {
    OBJECT_META_ORDER.iter().position(|k| *k == key).unwrap_or(OBJECT_META_ORDER.len())
}

/// Reorders `map`'s keys by `rank` (stable: equal ranks keep their order).
/// Values are moved, not copied; nothing is rebuilt when already in order.
/// Returns whether anything moved.
fn reorder<R: Ord>(map: &mut Map<String, Value>, rank: impl Fn(&str) -> R) -> bool {
    let sorted = map.keys().zip(map.keys().skip(1)).all(|(a, b)| rank(a) <= rank(b));
    if sorted {
        return false;
    }
    let mut entries: Vec<(String, Value)> = std::mem::take(map).into_iter().collect();
    entries.sort_by_key(|(k, _)| rank(k));
    map.extend(entries);
    true
}

/// Puts `obj`'s top-level keys in typed-object order (`kind`, `apiVersion`,
/// `metadata`, other fields as they are, `status`) and its `metadata` keys
/// in `ObjectMeta` order. Returns whether anything moved (a caller holding
/// the object's serialized bytes re-encodes only then). Non-objects are left
/// alone.
pub fn order_object_keys(obj: &mut Value) -> bool {
    let Value::Object(map) = obj else { return false };
    let mut moved = reorder(map, top_rank);
    if let Some(Value::Object(meta)) = map.get_mut("metadata") {
        moved |= reorder(meta, meta_rank);
    }
    moved
}

/// `value` serialized as a response body: compact JSON followed by
/// [`JSON_TERMINATOR`], as `json.Encoder` writes it.
pub fn to_json_body<T: serde::Serialize + ?Sized>(value: &T) -> serde_json::Result<Vec<u8>> {
    let mut out = serde_json::to_vec(value)?;
    out.push(JSON_TERMINATOR);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn keys(v: &Value) -> Vec<&str> {
        v.as_object().unwrap().keys().map(String::as_str).collect()
    }

    #[test]
    fn kubectl_sorted_body_gets_typed_order() {
        let mut obj = json!({
            "apiVersion": "v1", "data": {"b": "1", "a": "2"}, "kind": "ConfigMap",
            "metadata": {"annotations": {}, "labels": {"x": "y"}, "name": "cm", "namespace": "default",
                         "uid": "u", "creationTimestamp": "t", "resourceVersion": "7"},
        });
        assert!(order_object_keys(&mut obj));
        assert_eq!(
            serde_json::to_string(&obj).unwrap(),
            r#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"cm","namespace":"default","uid":"u","resourceVersion":"7","creationTimestamp":"t","labels":{"x":"y"},"annotations":{}},"data":{"b":"1","a":"2"}}"#
        );
        assert!(!order_object_keys(&mut obj), "a second pass moves nothing");
    }

    #[test]
    fn status_goes_last_and_other_fields_keep_their_order() {
        let mut obj = json!({"status": {}, "spec": {}, "kind": "Pod", "extra": 1, "apiVersion": "v1"});
        order_object_keys(&mut obj);
        assert_eq!(keys(&obj), ["kind", "apiVersion", "spec", "extra", "status"]);
        let mut not_object = json!([1, 2]);
        assert!(!order_object_keys(&mut not_object));
    }

    #[test]
    fn bodies_end_with_a_newline() {
        assert_eq!(to_json_body(&json!({"kind": "Status"})).unwrap(), b"{\"kind\":\"Status\"}\n");
    }
}
