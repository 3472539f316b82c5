//! Unknown-field detection for server-side field validation
//! (`fieldValidation=Strict|Warn`, KEP-2885).
//!
//! Upstream decodes the body strictly into the Go type and reports each field
//! the type has no place for as `unknown field "<path>"`, with paths like
//! `spec.containers[0].imagee`. rkube walks the JSON object against the
//! published schema instead, which knows the same fields.

use serde_json::Value;

use super::schemas::{self, Definitions};

/// True for strategic-merge-patch directive keys (`$patch`, `$retainKeys`,
/// `$setElementOrder/<list>`, `$deleteFromPrimitiveList/<list>`), which are
/// not fields: a patch body checked before it is applied must not report them.
fn is_patch_directive(key: &str) -> bool {
    key == "$patch"
        || key == "$retainKeys"
        || key.starts_with("$setElementOrder/")
        || key.starts_with("$deleteFromPrimitiveList/")
}

/// Nesting depth past which the walk stops (the served schemas are far
/// shallower; this bounds the work on hostile input).
const MAX_DEPTH: usize = 100;

/// Paths of the fields of `obj` that the schema of `group`/`kind` does not
/// know, in document order (e.g. `["spec.containers[0].imagee"]`).
///
/// `metadata` is checked against `ObjectMeta`; maps (`additionalProperties`)
/// and free-form values (`x-kubernetes-preserve-unknown-fields`, schemas with
/// neither properties nor additionalProperties) accept anything.
/// Strategic-merge-patch directives (`$setElementOrder/...`, `$patch`, ...)
/// are skipped, so a patch body may be checked as well as a patched object
/// (upstream checks the patched object). A kind
/// without a published schema yields no paths. Type mismatches are not
/// reported here (decoding reports them).
pub fn unknown_fields(kind: &str, group: &str, obj: &Value) -> Vec<String> {
    let defs = super::definitions();
    let Some(k) = super::kinds::lookup(group, kind) else { return Vec::new() };
    let Some(schema) = defs.get(&k.definition) else { return Vec::new() };
    let mut out = Vec::new();
    let mut path = String::new();
    walk(defs, schema, obj, &mut path, &mut out, 0);
    out
}

/// The message upstream puts in the 400 `BadRequest` Status (and, one per
/// field, in `Warning` headers for `fieldValidation=Warn`):
/// `strict decoding error: unknown field "a", unknown field "b"`.
pub fn strict_decoding_message(paths: &[String]) -> String {
    let fields: Vec<String> = paths.iter().map(|p| unknown_field_message(p)).collect();
    format!("strict decoding error: {}", fields.join(", "))
}

/// `unknown field "<path>"`, the text of one field's warning.
pub fn unknown_field_message(path: &str) -> String {
    format!("unknown field \"{path}\"")
}

/// Follows `$ref` and single-element `allOf` wrappers to the schema that
/// describes the value.
fn resolve<'a>(defs: &'a Definitions, mut schema: &'a Value) -> &'a Value {
    for _ in 0..32 {
        if let Some(name) = schema.get("$ref").and_then(Value::as_str).and_then(schemas::ref_name) {
            match defs.get(name) {
                Some(target) => {
                    schema = target;
                    continue;
                }
                None => return schema,
            }
        }
        if let Some(first) = schema.get("allOf").and_then(Value::as_array).and_then(|a| a.first()) {
            schema = first;
            continue;
        }
        return schema;
    }
    schema
}

fn push_field(path: &mut String, field: &str) -> usize {
    let len = path.len();
    if !path.is_empty() {
        path.push('.');
    }
    path.push_str(field);
    len
}

fn walk(defs: &Definitions, schema: &Value, obj: &Value, path: &mut String, out: &mut Vec<String>, depth: usize) {
    if depth > MAX_DEPTH {
        return;
    }
    let schema = resolve(defs, schema);
    if schema.get("x-kubernetes-preserve-unknown-fields").and_then(Value::as_bool) == Some(true) {
        return;
    }
    match obj {
        Value::Object(fields) => {
            let properties = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties");
            for (name, value) in fields {
                if is_patch_directive(name) {
                    continue;
                }
                let len = push_field(path, name);
                match (properties.and_then(|p| p.get(name)), additional) {
                    (Some(sub), _) => walk(defs, sub, value, path, out, depth + 1),
                    (None, Some(Value::Bool(false))) => out.push(path.clone()),
                    (None, Some(sub @ Value::Object(_))) => walk(defs, sub, value, path, out, depth + 1),
                    (None, Some(_)) => {}
                    // A struct type: every field must be declared.
                    (None, None) if properties.is_some() => out.push(path.clone()),
                    // No properties and no additionalProperties: free-form.
                    (None, None) => {}
                }
                path.truncate(len);
            }
        }
        Value::Array(items) => {
            let Some(item_schema) = schema.get("items") else { return };
            for (i, item) in items.iter().enumerate() {
                let len = path.len();
                path.push_str(&format!("[{i}]"));
                walk(defs, item_schema, item, path, out, depth + 1);
                path.truncate(len);
            }
        }
        _ => {}
    }
}
