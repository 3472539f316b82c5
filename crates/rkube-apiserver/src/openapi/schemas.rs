//! Builds the OpenAPI definitions (Swagger 2.0 flavour, `#/definitions/...`
//! references) from the JSON schemas `k8s-openapi` generates with its
//! `schemars` feature.
//!
//! `k8s-openapi` names each schema like upstream (`io.k8s.api.core.v1.Pod`),
//! so the definitions keep upstream's names. On top of its output rkube adds
//! what the generated schemas lack: the `x-kubernetes-group-version-kind`
//! extension on each top-level kind, the list kinds (`PodList`, built from
//! the item kind), strategic-merge-patch extensions ([`super::patch_meta`]),
//! and it drops the `required: ["metadata"]` that `k8s-openapi` adds to
//! resource kinds (upstream's schema does not require `metadata`).

use std::collections::BTreeMap;

use k8s_openapi::schemars::generate::SchemaSettings;
use serde_json::{json, Map, Value};

use super::kinds::{self, KindSchema, KINDS, META};
use super::patch_meta::PATCH_META;

/// Definition name of `ListMeta`.
pub(crate) const LIST_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta";

/// All definitions, keyed by upstream name, with `#/definitions/<name>` references.
pub(crate) type Definitions = BTreeMap<String, Value>;

/// Generates every definition rkube publishes.
pub(crate) fn build() -> Definitions {
    let mut generator = SchemaSettings::draft07()
        .with(|s| {
            s.transforms.clear();
            s.meta_schema = None;
            s.inline_subschemas = false;
        })
        .into_generator();
    for k in KINDS.iter() {
        (k.add)(&mut generator);
    }
    for m in META {
        (m.add)(&mut generator);
    }
    let mut defs: Definitions = generator.take_definitions(false).into_iter().collect();
    // Upstream publishes the apiextensions "either" types
    // (`JSONSchemaPropsOrArray`, `...OrBool`, `...OrStringArray`, `JSON`) as
    // a description only; Swagger 2.0 (and its protobuf form) has no `oneOf`.
    for def in defs.values_mut() {
        if let Some(m) = def.as_object_mut() {
            m.remove("oneOf");
            m.remove("anyOf");
        }
    }

    for k in KINDS.iter() {
        if let Some(def) = defs.get_mut(&k.definition) {
            set_gvk(def, vec![gvk(k.group, k.version, k.kind)]);
            drop_required(def, "metadata");
        }
        if let Some((name, list)) = list_schema(k) {
            defs.insert(name, list);
        }
    }
    let all_gvs = kinds::group_versions();
    for m in META {
        if m.kind.is_empty() {
            continue;
        }
        if let Some(def) = defs.get_mut(m.definition) {
            let tags = if m.per_group_version {
                all_gvs.iter().map(|(g, v)| gvk(g, v, m.kind)).collect()
            } else {
                vec![gvk("", "v1", m.kind)]
            };
            set_gvk(def, tags);
        }
    }
    for (definition, property, strategy, key) in PATCH_META {
        let Some(prop) = defs
            .get_mut(*definition)
            .and_then(|d| d.get_mut("properties"))
            .and_then(|p| p.get_mut(*property))
            .and_then(Value::as_object_mut)
        else {
            continue;
        };
        prop.insert("x-kubernetes-patch-strategy".into(), Value::String((*strategy).into()));
        if !key.is_empty() {
            prop.insert("x-kubernetes-patch-merge-key".into(), Value::String((*key).into()));
        }
    }
    defs
}

/// One `x-kubernetes-group-version-kind` entry.
pub(crate) fn gvk(group: &str, version: &str, kind: &str) -> Value {
    json!({"group": group, "kind": kind, "version": version})
}

fn set_gvk(def: &mut Value, tags: Vec<Value>) {
    if let Some(obj) = def.as_object_mut() {
        obj.insert("x-kubernetes-group-version-kind".into(), Value::Array(tags));
    }
}

fn drop_required(def: &mut Value, field: &str) {
    let Some(obj) = def.as_object_mut() else { return };
    let now_empty = match obj.get_mut("required").and_then(Value::as_array_mut) {
        Some(required) => {
            required.retain(|r| r.as_str() != Some(field));
            required.is_empty()
        }
        None => false,
    };
    if now_empty {
        obj.remove("required");
    }
}

/// The list kind of `k` (e.g. `io.k8s.api.core.v1.PodList`), shaped like
/// upstream's: `apiVersion`, `items` (required), `kind`, `metadata` (ListMeta).
fn list_schema(k: &KindSchema) -> Option<(String, Value)> {
    let list_kind = k.list_kind?;
    let name = kinds::list_definition(k)?;
    let mut properties = Map::new();
    properties.insert(
        "apiVersion".into(),
        json!({
            "description": "APIVersion defines the versioned schema of this representation of an object.",
            "type": "string"
        }),
    );
    properties.insert(
        "items".into(),
        json!({
            "description": format!("List of {}.", k.kind),
            "type": "array",
            "items": {"$ref": format!("#/definitions/{}", k.definition)}
        }),
    );
    properties.insert(
        "kind".into(),
        json!({
            "description": "Kind is a string value representing the REST resource this object represents.",
            "type": "string"
        }),
    );
    properties.insert(
        "metadata".into(),
        json!({
            "description": "Standard list metadata.",
            "$ref": format!("#/definitions/{LIST_META}")
        }),
    );
    let schema = json!({
        "description": format!("{list_kind} is a list of {}.", k.kind),
        "type": "object",
        "properties": properties,
        "required": ["items"],
        "x-kubernetes-group-version-kind": [gvk(k.group, k.version, list_kind)]
    });
    Some((name, schema))
}

/// The definition name a `$ref` string points to (`#/definitions/X` or
/// `#/components/schemas/X` → `X`).
pub(crate) fn ref_name(reference: &str) -> Option<&str> {
    reference.strip_prefix("#/definitions/").or_else(|| reference.strip_prefix("#/components/schemas/"))
}

/// Collects, into `out`, the definition names `value` references, directly or
/// through other definitions (the transitive closure).
pub(crate) fn collect_refs(defs: &Definitions, value: &Value, out: &mut std::collections::BTreeSet<String>) {
    let mut stack = vec![value];
    while let Some(v) = stack.pop() {
        match v {
            Value::Object(map) => {
                if let Some(name) = map.get("$ref").and_then(Value::as_str).and_then(ref_name) {
                    if out.insert(name.to_string()) {
                        if let Some(def) = defs.get(name) {
                            stack.push(def);
                        }
                    }
                }
                stack.extend(map.values());
            }
            Value::Array(items) => stack.extend(items.iter()),
            _ => {}
        }
    }
}
