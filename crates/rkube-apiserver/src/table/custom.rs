//! Tables of custom resources (upstream
//! `apiextensions-apiserver/pkg/registry/customresource/tableconvertor`):
//! a `Name` column, then the CRD version's `additionalPrinterColumns`; a
//! version without any gets upstream's default `Age` column
//! (`.metadata.creationTimestamp`), so `AGE` comes last. Each cell is the
//! column's JSONPath evaluated on the object (`null` when it finds
//! nothing); `date` cells are shown as ages, as upstream's
//! `ConvertToHumanReadableDateType`.

use chrono::{DateTime, Utc};
use rkube_api::apiextensions::{CustomResource, PrinterColumn};
use serde_json::{json, Map, Value};

use rkube_api::printers as format;

use super::{partial_object_metadata, IncludeObject};

/// The columns shown for `custom`: its printer columns, or `Age` when none.
fn columns(custom: &CustomResource) -> Vec<PrinterColumn> {
    if !custom.columns.is_empty() {
        return custom.columns.clone();
    }
    vec![PrinterColumn {
        name: "Age".into(),
        column_type: "date".into(),
        format: String::new(),
        description: crate::openapi::property_description("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta", "creationTimestamp")
            .unwrap_or("")
            .into(),
        priority: 0,
        json_path: ".metadata.creationTimestamp".into(),
    }]
}

/// One step of a JSONPath.
enum Step {
    Field(String),
    Index(usize),
    /// `[*]`.
    All,
    /// `[?(@.a.b=="x")]`.
    Filter(Vec<String>, Value),
}

/// Parses the JSONPath subset printer columns use: `.a.b`, `[0]`, `[*]`,
/// `[?(@.type=="Ready")]`, `{...}` braces. `None` for anything else.
fn parse(path: &str) -> Option<Vec<Step>> {
    let p = path.trim().trim_start_matches('{').trim_end_matches('}');
    let mut steps = Vec::new();
    let mut rest = p.trim_start_matches('$');
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            if end > 0 {
                steps.push(Step::Field(r[..end].to_string()));
            }
            rest = &r[end..];
        } else if let Some(r) = rest.strip_prefix('[') {
            let end = r.find(']')?;
            let inner = r[..end].trim();
            rest = &r[end + 1..];
            if inner == "*" {
                steps.push(Step::All);
            } else if let Ok(i) = inner.parse::<usize>() {
                steps.push(Step::Index(i));
            } else if let Some(f) = inner.strip_prefix("?(@.").and_then(|f| f.strip_suffix(')')) {
                let (lhs, rhs) = f.split_once("==")?;
                let field: Vec<String> = lhs.trim().split('.').map(str::to_string).collect();
                let rhs = rhs.trim();
                let value = match rhs.strip_prefix('"').and_then(|v| v.strip_suffix('"')) {
                    Some(s) => json!(s),
                    None => match rhs.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')) {
                        Some(s) => json!(s),
                        None => serde_json::from_str(rhs).ok()?,
                    },
                };
                steps.push(Step::Filter(field, value));
            } else {
                steps.push(Step::Field(inner.trim_matches(['\'', '"']).to_string()));
            }
        } else {
            return None;
        }
    }
    Some(steps)
}

/// The values `path` finds in `obj`.
fn find<'a>(obj: &'a Value, path: &str) -> Vec<&'a Value> {
    let Some(steps) = parse(path) else { return Vec::new() };
    let mut cur = vec![obj];
    for step in &steps {
        let mut next = Vec::new();
        for v in cur {
            match step {
                Step::Field(f) => next.extend(v.get(f)),
                Step::Index(i) => next.extend(v.get(*i)),
                Step::All => match v {
                    Value::Array(a) => next.extend(a.iter()),
                    Value::Object(m) => next.extend(m.values()),
                    _ => {}
                },
                Step::Filter(field, want) => {
                    for item in v.as_array().into_iter().flatten() {
                        if field.iter().try_fold(item, |x, f| x.get(f)) == Some(want) {
                            next.push(item);
                        }
                    }
                }
            }
        }
        cur = next;
    }
    cur
}

/// The cell of `column` for `obj`.
fn cell(column: &PrinterColumn, obj: &Value, now: DateTime<Utc>) -> Value {
    let found = find(obj, &column.json_path);
    let Some(first) = found.first().copied() else { return Value::Null };
    if column.column_type == "date" {
        return json!(format::since(format::timestamp(Some(first)), now));
    }
    match (column.column_type.as_str(), first) {
        (_, Value::Object(_) | Value::Array(_)) => json!(first.to_string()),
        ("string", Value::String(_)) | ("integer" | "number", Value::Number(_)) | ("boolean", Value::Bool(_)) => first.clone(),
        (_, Value::String(s)) => json!(s),
        (_, other) => json!(other.to_string()),
    }
}

/// The Table of `items`, objects of a custom resource whose CRD version is `custom`.
pub fn to_table(custom: &CustomResource, items: &[Value], include: IncludeObject, list_meta: Option<Value>, now: DateTime<Utc>) -> Value {
    let columns = columns(custom);
    let name_description = crate::openapi::property_description("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta", "name").unwrap_or("");
    let mut defs = vec![json!({"name": "Name", "type": "string", "format": "name", "description": name_description, "priority": 0})];
    defs.extend(columns.iter().map(|c| {
        json!({"name": c.name, "type": c.column_type, "format": c.format, "description": c.description, "priority": c.priority})
    }));
    let rows: Vec<Value> = items
        .iter()
        .map(|item| {
            let mut cells = vec![json!(crate::object::name(item))];
            cells.extend(columns.iter().map(|c| cell(c, item, now)));
            let mut row = Map::new();
            row.insert("cells".into(), Value::Array(cells));
            let object = match include {
                IncludeObject::None => Value::Null,
                IncludeObject::Metadata => partial_object_metadata(item),
                IncludeObject::Object => item.clone(),
            };
            row.insert("object".into(), object);
            Value::Object(row)
        })
        .collect();
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_meta.unwrap_or_else(|| json!({})),
        "columnDefinitions": defs,
        "rows": rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn column(name: &str, ty: &str, path: &str) -> PrinterColumn {
        PrinterColumn { name: name.into(), column_type: ty.into(), format: String::new(), description: String::new(), priority: 0, json_path: path.into() }
    }

    #[test]
    fn printer_columns_read_json_paths() {
        let obj = json!({"metadata": {"name": "w"}, "spec": {"replicas": 3, "size": "small"},
                         "status": {"conditions": [{"type": "Synced", "status": "False"}, {"type": "Ready", "status": "True"}]}});
        let now = Utc::now();
        assert_eq!(cell(&column("Replicas", "integer", ".spec.replicas"), &obj, now), json!(3));
        assert_eq!(cell(&column("Size", "string", ".spec.size"), &obj, now), json!("small"));
        assert_eq!(cell(&column("Ready", "string", ".status.conditions[?(@.type==\"Ready\")].status"), &obj, now), json!("True"));
        assert_eq!(cell(&column("First", "string", ".status.conditions[0].type"), &obj, now), json!("Synced"));
        assert_eq!(cell(&column("Missing", "string", ".spec.nothing"), &obj, now), Value::Null);
    }

    #[test]
    fn versions_without_columns_show_name_and_age() {
        let custom = CustomResource { crd_name: "w.example.com".into(), schema: None, columns: vec![], scale: None, conversion_webhook: None };
        let now = Utc::now();
        let created = (now - chrono::Duration::minutes(5)).to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        let t = to_table(&custom, &[json!({"metadata": {"name": "a", "creationTimestamp": created}})], IncludeObject::None, None, now);
        let names: Vec<&str> = t["columnDefinitions"].as_array().unwrap().iter().filter_map(|c| c["name"].as_str()).collect();
        assert_eq!(names, ["Name", "Age"]);
        assert_eq!(t["rows"][0]["cells"], json!(["a", "5m"]));
    }
}
