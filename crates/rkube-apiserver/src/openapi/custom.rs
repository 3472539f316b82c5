//! OpenAPI for custom resources (upstream's
//! `apiextensions-apiserver/pkg/controller/openapi/builder`): each served
//! version of an established CRD publishes its kind, named like upstream
//! (`com.example.v1.Widget` for `example.com/v1` `Widget`), with the
//! version's `openAPIV3Schema`, `metadata` pointing at `ObjectMeta`, the
//! `x-kubernetes-group-version-kind` tag, its list kind, and the same paths
//! as a built-in resource. The v3 index lists each custom group version;
//! the v2 document is the built-in one with the custom definitions and paths
//! added. Documents with custom resources are rebuilt when the resource
//! table changes ([`rkube_api::registry::generation`]).

use std::sync::{Arc, Mutex};

use rkube_api::registry::{self, ResourceInfo};
use serde_json::{json, Map, Value};

use super::paths::{self, Flavor, PathItem};
use super::schemas;

const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";
const LIST_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta";

/// The rows of custom resources served now.
fn custom_rows() -> Vec<&'static ResourceInfo> {
    registry::every().into_iter().filter(|r| r.custom.is_some()).collect()
}

/// Upstream's definition name of `group`/`version` `kind`: the group's
/// labels reversed, then version and kind (`com.example.v1.Widget`).
pub(crate) fn definition_name(group: &str, version: &str, kind: &str) -> String {
    let mut parts: Vec<&str> = group.split('.').collect();
    parts.reverse();
    format!("{}.{version}.{kind}", parts.join("."))
}

/// Removes what Swagger 2.0 cannot say (`nullable`) from a schema, recursively.
fn to_v2(schema: &Value) -> Value {
    match schema {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| k.as_str() != "nullable")
                .map(|(k, v)| {
                    let v = match k.as_str() {
                        // Data, not schemas.
                        "enum" | "default" | "example" => v.clone(),
                        _ if k.starts_with("x-") => v.clone(),
                        // Property names are data; their values are schemas.
                        "properties" | "patternProperties" => match v.as_object() {
                            Some(p) => Value::Object(p.iter().map(|(name, s)| (name.clone(), to_v2(s))).collect()),
                            None => v.clone(),
                        },
                        _ => to_v2(v),
                    };
                    (k.clone(), v)
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(to_v2).collect()),
        other => other.clone(),
    }
}

/// The kind and list definitions of a custom resource row.
fn definitions_of(r: &ResourceInfo) -> Vec<(String, Value)> {
    let schema = r.custom.and_then(|c| c.schema.clone()).unwrap_or_else(|| json!({"type": "object"}));
    let mut kind = to_v2(&schema);
    if let Some(m) = kind.as_object_mut() {
        let props = m.entry("properties").or_insert_with(|| json!({}));
        if let Some(p) = props.as_object_mut() {
            p.insert("apiVersion".into(), json!({"description": "APIVersion defines the versioned schema of this representation of an object.", "type": "string"}));
            p.insert("kind".into(), json!({"description": "Kind is a string value representing the REST resource this object represents.", "type": "string"}));
            p.insert("metadata".into(), json!({"description": "Standard object's metadata.", "$ref": format!("#/definitions/{OBJECT_META}")}));
        }
        m.insert("x-kubernetes-group-version-kind".into(), json!([schemas::gvk(r.group, r.version, r.kind)]));
    }
    let def = definition_name(r.group, r.version, r.kind);
    let list = json!({
        "description": format!("{} is a list of {}", r.list_kind, r.kind),
        "type": "object",
        "required": ["items"],
        "properties": {
            "apiVersion": {"description": "APIVersion defines the versioned schema of this representation of an object.", "type": "string"},
            "items": {"description": format!("List of {}.", r.resource), "type": "array", "items": {"$ref": format!("#/definitions/{def}")}},
            "kind": {"description": "Kind is a string value representing the REST resource this object represents.", "type": "string"},
            "metadata": {"description": "Standard list metadata.", "$ref": format!("#/definitions/{LIST_META}")}
        },
        "x-kubernetes-group-version-kind": [schemas::gvk(r.group, r.version, r.list_kind)]
    });
    vec![(def, kind), (definition_name(r.group, r.version, r.list_kind), list)]
}

fn path_items_of(rows: &[&'static ResourceInfo]) -> Vec<PathItem> {
    let mut items = Vec::new();
    for r in rows {
        let prefix = format!("/{}", super::kinds::group_version_path(r.group, r.version));
        let def = definition_name(r.group, r.version, r.kind);
        let list = definition_name(r.group, r.version, r.list_kind);
        paths::resource_paths_with(r, &prefix, def, Some(list), &mut items);
    }
    items
}

/// The custom group versions served, as v3 index paths (`apis/<g>/<v>`).
pub(crate) fn group_version_paths() -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for r in custom_rows() {
        let p = super::kinds::group_version_path(r.group, r.version);
        if !out.contains(&p) {
            out.push(p);
        }
    }
    out
}

/// The OpenAPI 3.0 document of a custom group version (`apis/<g>/<v>`), if served.
pub(crate) fn v3_document(path: &str) -> Option<Value> {
    let rows: Vec<&'static ResourceInfo> =
        custom_rows().into_iter().filter(|r| super::kinds::group_version_path(r.group, r.version) == path).collect();
    if rows.is_empty() {
        return None;
    }
    let items = path_items_of(&rows);
    let rendered = paths::render(items.iter(), Flavor::V2);
    let own: Vec<(String, Value)> = rows.iter().flat_map(|r| definitions_of(r)).collect();
    let builtin = super::definitions();
    let mut wanted = std::collections::BTreeSet::new();
    schemas::collect_refs(builtin, &Value::Object(rendered), &mut wanted);
    for (_, d) in &own {
        schemas::collect_refs(builtin, d, &mut wanted);
    }
    for m in super::kinds::META {
        wanted.insert(m.definition.to_string());
    }
    let roots: Vec<Value> = wanted.iter().filter_map(|n| builtin.get(n)).cloned().collect();
    for root in &roots {
        schemas::collect_refs(builtin, root, &mut wanted);
    }
    let mut components: Map<String, Value> =
        wanted.iter().filter_map(|n| builtin.get(n).map(|d| (n.clone(), super::v3::to_v3_schema(d)))).collect();
    for (name, d) in own {
        components.insert(name, super::v3::to_v3_schema(&d));
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": super::INFO_TITLE, "version": super::INFO_VERSION},
        "paths": paths::render(items.iter(), Flavor::V3),
        "components": {"schemas": components},
    }))
}

/// The Swagger 2.0 document with the custom resources added to `base`.
fn v2_with_custom(base: &Value) -> Value {
    let rows = custom_rows();
    let mut doc = base.clone();
    let items = path_items_of(&rows);
    if let Some(p) = doc.get_mut("paths").and_then(Value::as_object_mut) {
        p.extend(paths::render(items.iter(), Flavor::V2));
    }
    if let Some(d) = doc.get_mut("definitions").and_then(Value::as_object_mut) {
        for r in &rows {
            d.extend(definitions_of(r));
        }
    }
    doc
}

/// The v2 documents (JSON, protobuf) of one state of the resource table.
struct V2Docs {
    generation: u64,
    json: Arc<Vec<u8>>,
    protobuf: Arc<Vec<u8>>,
}

/// The v2 document as `(JSON, protobuf)` bytes with the custom resources
/// served now, or `None` when there are none (the static document applies).
pub(crate) fn v2_documents() -> Option<super::V2Bytes> {
    static CACHE: Mutex<Option<V2Docs>> = Mutex::new(None);
    if custom_rows().is_empty() {
        return None;
    }
    let generation = registry::generation();
    let mut cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(c) = cache.as_ref().filter(|c| c.generation == generation) {
        return Some((c.json.clone(), c.protobuf.clone()));
    }
    let doc = v2_with_custom(super::v2_value());
    let json = Arc::new(super::log_failure("the OpenAPI v2 JSON document", serde_json::to_vec(&doc).map_err(Into::into)));
    let protobuf = Arc::new(super::log_failure("the OpenAPI v2 protobuf document", super::v2::to_protobuf(&doc)));
    *cache = Some(V2Docs { generation, json: json.clone(), protobuf: protobuf.clone() });
    Some((json, protobuf))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn definition_names_reverse_the_group() {
        assert_eq!(definition_name("example.com", "v1", "Widget"), "com.example.v1.Widget");
        assert_eq!(definition_name("stable.example.com", "v1beta1", "CronTab"), "com.example.stable.v1beta1.CronTab");
    }

    #[test]
    fn nullable_is_dropped_for_swagger_2() {
        let v2 = to_v2(&json!({"type": "object", "properties": {"a": {"type": "string", "nullable": true, "default": {"nullable": 1}}}}));
        assert_eq!(v2, json!({"type": "object", "properties": {"a": {"type": "string", "default": {"nullable": 1}}}}));
    }
}
