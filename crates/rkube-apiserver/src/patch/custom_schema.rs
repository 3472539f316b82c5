//! The merge schema of a custom resource, read from its CRD version's
//! OpenAPI schema, for server-side apply (structured-merge-diff reads the
//! same extensions of CRD schemas in upstream's apiextensions-apiserver):
//!
//! - `x-kubernetes-list-type: map` with `x-kubernetes-list-map-keys`: items
//!   matched by those keys ([`SsaList::Map`]);
//! - `x-kubernetes-list-type: set`: scalars matched by value ([`SsaList::Set`]);
//! - `atomic` or no list type: the list is replaced whole;
//! - `x-kubernetes-map-type: atomic` (or `granular`, the default) on an object.
//!
//! Each served row's shape is built once and kept for the process (rows are
//! process-global and leaked the same way).

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use rkube_api::registry::ResourceInfo;
use serde_json::Value;

use super::schema::{Field, ListSpec, MapKey, Shape, SmpList, SsaList, OBJECT_META};

/// Schemas nested deeper than this are merged as [`Shape::Any`] below it.
const MAX_DEPTH: usize = 64;

/// The root shape of `info`'s objects when it is a custom resource with a
/// schema; `None` otherwise.
pub(crate) fn root(info: &'static ResourceInfo) -> Option<&'static Shape> {
    let schema = info.custom?.schema.as_ref()?;
    static SHAPES: OnceLock<Mutex<HashMap<usize, &'static Shape>>> = OnceLock::new();
    let key = info as *const ResourceInfo as usize;
    let mut shapes = SHAPES.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
    Some(*shapes.entry(key).or_insert_with(|| leak(top(schema))))
}

fn leak<T>(v: T) -> &'static T {
    Box::leak(Box::new(v))
}

/// The object's root: its schema's properties, with `metadata` as ObjectMeta
/// and `spec`/`status` present in the zero object (as for built-in kinds).
fn top(schema: &Value) -> Shape {
    let mut fields: Vec<Field> = vec![Field { name: "metadata", shape: &OBJECT_META, value_struct: true }];
    for (name, prop) in properties(schema) {
        if matches!(name.as_str(), "metadata" | "apiVersion" | "kind") {
            continue;
        }
        let value_struct = matches!(name.as_str(), "spec" | "status");
        fields.push(Field { name: leak_str(name), shape: leak(shape_of(prop, 1)), value_struct });
    }
    Shape::Struct(Box::leak(fields.into_boxed_slice()))
}

fn leak_str(s: &str) -> &'static str {
    Box::leak(s.to_string().into_boxed_str())
}

fn properties(schema: &Value) -> impl Iterator<Item = (&String, &Value)> {
    schema.get("properties").and_then(Value::as_object).into_iter().flatten()
}

fn shape_of(schema: &Value, depth: usize) -> Shape {
    if depth > MAX_DEPTH {
        return Shape::Any;
    }
    let ext = |k: &str| schema.get(k).and_then(Value::as_str);
    match schema.get("type").and_then(Value::as_str) {
        Some("array") => {
            let items = schema.get("items").map_or(Shape::Any, |i| shape_of(i, depth + 1));
            let ssa = match ext("x-kubernetes-list-type") {
                Some("set") => SsaList::Set,
                Some("map") => {
                    let keys = schema.get("x-kubernetes-list-map-keys").and_then(Value::as_array);
                    let keys: Vec<MapKey> = keys.into_iter().flatten().filter_map(Value::as_str).map(|k| MapKey { name: leak_str(k), default: None }).collect();
                    if keys.is_empty() {
                        return Shape::Any;
                    }
                    SsaList::Map(Box::leak(keys.into_boxed_slice()))
                }
                _ if !matches!(items, Shape::Any) => SsaList::Atomic,
                _ => return Shape::Any,
            };
            Shape::List(leak(ListSpec { smp: SmpList::Replace, ssa, items: leak(items) }))
        }
        Some("object") if ext("x-kubernetes-map-type") == Some("atomic") => Shape::AtomicMap,
        Some("object") => {
            let fields: Vec<Field> = properties(schema)
                .map(|(name, prop)| Field { name: leak_str(name), shape: leak(shape_of(prop, depth + 1)), value_struct: false })
                .collect();
            if fields.is_empty() {
                return Shape::Any;
            }
            Shape::Struct(Box::leak(fields.into_boxed_slice()))
        }
        _ => Shape::Any,
    }
}

/// Whether `shape` is [`Shape::Any`] (for tests).
#[cfg(test)]
fn is_any(shape: &Shape) -> bool {
    matches!(shape, Shape::Any)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn list_and_map_types_become_merge_shapes() {
        let schema = json!({"type": "object", "properties": {
            "spec": {"type": "object", "properties": {
                "ports": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name", "protocol"],
                          "items": {"type": "object", "properties": {"name": {"type": "string"}, "port": {"type": "integer"}}}},
                "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
                "args": {"type": "array", "items": {"type": "string"}},
                "selector": {"type": "object", "x-kubernetes-map-type": "atomic", "properties": {"app": {"type": "string"}}}}}}});
        let root = top(&schema);
        let spec = root.child("spec");
        assert_eq!(spec.child("ports").ssa_list(), SsaList::Map(&[MapKey { name: "name", default: None }, MapKey { name: "protocol", default: None }]));
        assert_eq!(spec.child("tags").ssa_list(), SsaList::Set);
        assert_eq!(spec.child("args").ssa_list(), SsaList::Atomic);
        assert!(spec.child("selector").is_atomic_map());
        assert!(root.is_value_struct("spec") && root.is_value_struct("metadata"));
        assert!(is_any(spec.child("unknown")));
    }
}
