//! OpenAPI 3.0 documents: the discovery index (`GET /openapi/v3`) and one
//! document per group version (`GET /openapi/v3/api/v1`,
//! `/openapi/v3/apis/apps/v1`, ...), each holding that group version's paths
//! and every schema they reference (transitively), so a client can resolve
//! all `$ref`s within one document.

use std::collections::BTreeSet;

use serde_json::{json, Map, Value};

use super::kinds::{self, KINDS, META};
use super::paths::{self, Flavor, PathItem};
use super::schemas::{self, Definitions};
use super::{INFO_TITLE, INFO_VERSION};

/// The OpenAPI 3.0 document of one group version.
pub(crate) fn group_version_document(defs: &Definitions, items: &[PathItem], group: &str, version: &str) -> Value {
    let own: Vec<&PathItem> = items.iter().filter(|i| i.group_version == (group, version)).collect();
    let rendered = paths::render(own.iter().copied(), Flavor::V2);

    // Schemas: the group version's kinds, their lists, the meta types, and
    // everything those and the paths reference.
    let mut wanted = BTreeSet::new();
    for k in KINDS.iter().filter(|k| k.group == group && k.version == version) {
        wanted.insert(k.definition.to_string());
        if let Some(list) = kinds::list_definition(k) {
            wanted.insert(list);
        }
    }
    for m in META {
        wanted.insert(m.definition.to_string());
    }
    schemas::collect_refs(defs, &Value::Object(rendered), &mut wanted);
    let roots: Vec<Value> = wanted.iter().filter_map(|n| defs.get(n)).cloned().collect();
    for root in &roots {
        schemas::collect_refs(defs, root, &mut wanted);
    }
    let components: Map<String, Value> =
        wanted.iter().filter_map(|n| defs.get(n).map(|d| (n.clone(), to_v3_schema(d)))).collect();

    json!({
        "openapi": "3.0.0",
        "info": {"title": INFO_TITLE, "version": INFO_VERSION},
        "paths": paths::render(own, Flavor::V3),
        "components": {"schemas": components},
    })
}

/// Rewrites a Swagger 2.0 schema into OpenAPI 3.0 form: references point to
/// `#/components/schemas/`, and a reference with sibling keywords
/// (`description`, extensions) becomes `allOf: [{$ref}]` beside them, as
/// OpenAPI 3.0 ignores siblings of `$ref`.
pub(crate) fn to_v3_schema(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut out = Map::new();
            let mut reference = None;
            for (k, val) in m {
                if k == "$ref" {
                    if let Some(name) = val.as_str().and_then(schemas::ref_name) {
                        reference = Some(format!("#/components/schemas/{name}"));
                    }
                    continue;
                }
                // Keys below are data, not schemas: copy them verbatim.
                if k == "enum" || k == "default" || k == "example" || k.starts_with("x-") {
                    out.insert(k.clone(), val.clone());
                } else if k == "properties" {
                    let props = val
                        .as_object()
                        .map(|p| p.iter().map(|(name, s)| (name.clone(), to_v3_schema(s))).collect::<Map<_, _>>())
                        .unwrap_or_default();
                    out.insert(k.clone(), Value::Object(props));
                } else {
                    out.insert(k.clone(), to_v3_schema(val));
                }
            }
            match reference {
                Some(r) if out.is_empty() => json!({"$ref": r}),
                Some(r) => {
                    out.insert("allOf".into(), json!([{"$ref": r}]));
                    Value::Object(out)
                }
                None => Value::Object(out),
            }
        }
        Value::Array(items) => Value::Array(items.iter().map(to_v3_schema).collect()),
        other => other.clone(),
    }
}
