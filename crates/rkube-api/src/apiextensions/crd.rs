//! The strategy of the CustomResourceDefinition resource itself
//! (upstream `pkg/apis/apiextensions/v1/defaults.go`,
//! `pkg/registry/customresourcedefinition/strategy.go` and
//! `pkg/apis/apiextensions/validation/validation.go`).

use serde_json::{json, Value};

use super::schema::structural_errors;
use super::CLEANUP_FINALIZER;
use crate::field_error::FieldError;
use crate::strategy::{child, default_field, Object, Strategy};
use crate::validation::{is_dns1035_label, is_dns1123_subdomain};

/// The CRD strategy: [`defaults`], [`prepare_for_create`], [`validate`].
pub const CUSTOM_RESOURCE_DEFINITION: Strategy = Strategy {
    defaults,
    prepare_for_create,
    validate,
    name_is_label: false,
    validate_name: None,
    scale: None,
    delete: crate::strategy::DeleteRules::NONE,
    warnings,
    prepare_for_update: Strategy::NO_UPDATE_PREPARATION,
};

/// What rkube will not do as the CRD says, so its author knows: validation
/// rules of each version's schema it cannot enforce
/// ([`super::cel::unevaluable_rules`]).
pub fn warnings(obj: &Value, _old: Option<&Value>) -> Vec<String> {
    let versions = obj.pointer("/spec/versions").and_then(Value::as_array);
    versions
        .into_iter()
        .flatten()
        .enumerate()
        .filter_map(|(i, v)| Some((i, v.pointer("/schema/openAPIV3Schema")?)))
        .flat_map(|(i, schema)| super::cel::unevaluable_rules(schema, &format!("spec.versions[{i}].schema.openAPIV3Schema")))
        .collect()
}

/// `SetDefaults_CustomResourceDefinitionSpec`: `names.singular` is the
/// lower-cased kind, `names.listKind` is `<kind>List`, `conversion.strategy`
/// is `None`; a webhook service's port is 443.
pub fn defaults(obj: &mut Object) {
    let spec = child(obj, "spec");
    let names = child(spec, "names");
    let kind = names.get("kind").and_then(Value::as_str).unwrap_or("").to_string();
    if !kind.is_empty() {
        default_field(names, "singular", json!(kind.to_lowercase()));
        default_field(names, "listKind", json!(format!("{kind}List")));
    }
    default_field(spec, "conversion", json!({"strategy": "None"}));
    if let Some(svc) = spec.get_mut("conversion").and_then(|c| c.pointer_mut("/webhook/clientConfig/service")).and_then(Value::as_object_mut) {
        default_field(svc, "port", json!(443));
    }
}

/// `PrepareForCreate`: the status starts empty but for `storedVersions`
/// (the storage version), and the cleanup finalizer is added so deleting
/// the CRD first deletes its custom resources. (Upstream adds the finalizer
/// on the first DELETE; adding it on create gives the same deletion order.)
pub fn prepare_for_create(obj: &mut Object) {
    let storage: Vec<Value> = obj
        .get("spec")
        .and_then(|s| s.get("versions"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|v| v.get("storage").and_then(Value::as_bool).unwrap_or(false))
        .filter_map(|v| v.get("name").cloned())
        .take(1)
        .collect();
    obj.insert("status".into(), json!({"storedVersions": storage}));
    let meta = child(obj, "metadata");
    let finalizers = meta.entry("finalizers").or_insert_with(|| json!([]));
    if !finalizers.is_array() {
        *finalizers = json!([]);
    }
    if let Some(list) = finalizers.as_array_mut() {
        if !list.iter().any(|f| f.as_str() == Some(CLEANUP_FINALIZER)) {
            list.push(json!(CLEANUP_FINALIZER));
        }
    }
}

fn s<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

/// True when the CRD's `Established` condition is `True`.
pub fn is_established(crd: &Value) -> bool {
    crd.pointer("/status/conditions").and_then(Value::as_array).into_iter().flatten().any(|c| {
        c.get("type").and_then(Value::as_str) == Some("Established") && c.get("status").and_then(Value::as_str) == Some("True")
    })
}

fn label_errors(value: &str, field: &str, mixed_case: bool, errs: &mut Vec<FieldError>) {
    if value.is_empty() {
        return;
    }
    let msgs = is_dns1035_label(&if mixed_case { value.to_lowercase() } else { value.to_string() });
    if !msgs.is_empty() {
        let detail = if mixed_case {
            format!("may have mixed case, but should otherwise match: {}", msgs.join(","))
        } else {
            msgs.join(",")
        };
        errs.push(FieldError::invalid(field, value, detail));
    }
}

/// `ValidateCustomResourceDefinition` (and `...Update` when `old` is set).
pub fn validate(obj: &Value, old: Option<&Value>, errs: &mut Vec<FieldError>) {
    let group = s(obj, "/spec/group");
    let plural = s(obj, "/spec/names/plural");
    let name = s(obj, "/metadata/name");
    if name != format!("{plural}.{group}") {
        errs.push(FieldError::invalid("metadata.name", name, "must be spec.names.plural+\".\"+spec.group"));
    }
    if group.is_empty() {
        errs.push(FieldError::required("spec.group", ""));
    } else {
        let msgs = is_dns1123_subdomain(group);
        if !msgs.is_empty() {
            errs.push(FieldError::invalid("spec.group", group, msgs.join(",")));
        } else if !group.contains('.') {
            errs.push(FieldError::invalid("spec.group", group, "should be a domain with at least one dot"));
        }
    }
    match s(obj, "/spec/scope") {
        "" => errs.push(FieldError::required("spec.scope", "")),
        "Cluster" | "Namespaced" => {}
        other => errs.push(FieldError::not_supported("spec.scope", other, &["Cluster", "Namespaced"])),
    }
    validate_versions(obj, errs);
    for (field, required) in [("plural", true), ("singular", true), ("kind", true), ("listKind", true)] {
        if required && s(obj, &format!("/spec/names/{field}")).is_empty() {
            errs.push(FieldError::required(&format!("spec.names.{field}"), ""));
        }
    }
    label_errors(plural, "spec.names.plural", false, errs);
    label_errors(s(obj, "/spec/names/singular"), "spec.names.singular", false, errs);
    let (kind, list_kind) = (s(obj, "/spec/names/kind"), s(obj, "/spec/names/listKind"));
    label_errors(kind, "spec.names.kind", true, errs);
    label_errors(list_kind, "spec.names.listKind", true, errs);
    for key in ["shortNames", "categories"] {
        let items = obj.pointer(&format!("/spec/names/{key}")).and_then(Value::as_array);
        for (i, v) in items.into_iter().flatten().enumerate() {
            label_errors(v.as_str().unwrap_or(""), &format!("spec.names.{key}[{i}]"), false, errs);
        }
    }
    if !kind.is_empty() && kind == list_kind {
        errs.push(FieldError::invalid("spec.names.listKind", list_kind, "kind and listKind may not be the same"));
    }
    match s(obj, "/spec/conversion/strategy") {
        "" | "None" | "Webhook" => {}
        other => errs.push(FieldError::not_supported("spec.conversion.strategy", other, &["None", "Webhook"])),
    }
    if let Some(old) = old {
        for (pointer, field) in [("/spec/group", "spec.group"), ("/spec/names/plural", "spec.names.plural")] {
            crate::strategy::immutable(obj, Some(old), pointer, field, errs);
        }
        if super::crd::is_established(old) {
            for (pointer, field) in [("/spec/scope", "spec.scope"), ("/spec/names/kind", "spec.names.kind")] {
                crate::strategy::immutable(obj, Some(old), pointer, field, errs);
            }
        }
    }
}

fn validate_versions(obj: &Value, errs: &mut Vec<FieldError>) {
    let versions: Vec<Value> = obj.pointer("/spec/versions").and_then(Value::as_array).cloned().unwrap_or_default();
    let mut seen = std::collections::HashSet::new();
    let mut unique = true;
    let mut storage = 0;
    for (i, v) in versions.iter().enumerate() {
        let vname = s(v, "/name");
        if v.get("storage").and_then(Value::as_bool).unwrap_or(false) {
            storage += 1;
        }
        unique &= seen.insert(vname.to_string());
        label_errors(vname, &format!("spec.versions[{i}].name"), false, errs);
        if vname.is_empty() {
            errs.push(FieldError::invalid(&format!("spec.versions[{i}].name"), vname, is_dns1035_label("").join(",")));
        }
        let schema_field = format!("spec.versions[{i}].schema.openAPIV3Schema");
        match v.pointer("/schema/openAPIV3Schema") {
            Some(schema) if schema.is_object() => {
                errs.extend(structural_errors(schema, &schema_field));
                errs.extend(super::cel::estimate::cost_errors(schema, &schema_field));
            }
            _ => errs.push(FieldError::required(&schema_field, "schemas are required")),
        }
        if let Some(fields) = v.get("selectableFields").and_then(Value::as_array).filter(|f| !f.is_empty()) {
            let field = format!("spec.versions[{i}].selectableFields");
            match v.pointer("/schema/openAPIV3Schema").filter(|s| s.is_object()) {
                Some(schema) => validate_selectable_fields(fields, schema, &field, errs),
                None => errs.push(FieldError::invalid(
                    &field,
                    "",
                    "selectableFields may only be set when version.schema.openAPIV3Schema is not included",
                )),
            }
        }
        if let Some(scale) = v.pointer("/subresources/scale").filter(|x| x.is_object()) {
            let field = format!("spec.versions[{i}].subresources.scale");
            for (key, prefix) in [("specReplicasPath", ".spec."), ("statusReplicasPath", ".status.")] {
                let p = s(scale, &format!("/{key}"));
                if p.is_empty() {
                    errs.push(FieldError::required(&format!("{field}.{key}"), ""));
                } else if !p.starts_with(prefix) {
                    errs.push(FieldError::invalid(&format!("{field}.{key}"), p, format!("should be a json path under {}", prefix.trim_end_matches('.'))));
                }
            }
        }
    }
    let rendered = serde_json::to_string(&versions).unwrap_or_default();
    if !unique {
        errs.push(FieldError::invalid_rendered("spec.versions", rendered.clone(), "must contain unique version names"));
    }
    if storage != 1 {
        errs.push(FieldError::invalid_rendered("spec.versions", rendered, "must have exactly one version marked as storage version"));
    }
}

/// Upstream's `MaxSelectableFields`: the most distinct fields one version may make selectable.
pub const MAX_SELECTABLE_FIELDS: usize = 8;

/// `ValidateCustomResourceSelectableFields`: each `jsonPath` is required,
/// must be a simple path ([`schema_field_path`], no array notation) to a
/// field of the schema of type `string`, `boolean` or `integer` outside
/// `metadata`, and must not repeat; at most [`MAX_SELECTABLE_FIELDS`].
fn validate_selectable_fields(fields: &[Value], schema: &Value, field: &str, errs: &mut Vec<FieldError>) {
    let mut unique: Vec<String> = Vec::new();
    for (i, f) in fields.iter().enumerate() {
        let at = format!("{field}[{i}].jsonPath");
        let json_path = s(f, "/jsonPath");
        if json_path.is_empty() {
            errs.push(FieldError::required(&at, ""));
            continue;
        }
        let (path, found) = match schema_field_path(json_path, schema) {
            Ok(found) => found,
            Err(e) => {
                errs.push(FieldError::invalid(&at, json_path, format!("is an invalid path: {e}")));
                continue;
            }
        };
        if path.first().map(String::as_str) == Some("metadata") {
            errs.push(FieldError::invalid(&at, json_path, "must not point to fields in metadata"));
        }
        let scalar = matches!(found.and_then(|f| f.get("type")).and_then(Value::as_str), Some("string" | "boolean" | "integer"));
        if !scalar {
            errs.push(FieldError::invalid(
                &at,
                json_path,
                "must point to a field of type string, boolean or integer. Enum string fields and strings with formats are allowed.",
            ));
        }
        let key = path.join(".");
        if unique.contains(&key) {
            errs.push(FieldError::duplicate(&at, json_path));
        } else {
            unique.push(key);
        }
    }
    if unique.len() > MAX_SELECTABLE_FIELDS {
        errs.push(FieldError::too_many(field, unique.len(), MAX_SELECTABLE_FIELDS));
    }
}

/// The field names `json_path` (`.spec.color`) walks through `schema`,
/// and the schema it reaches (`None` past an `additionalProperties: true`),
/// as upstream's `cel.ValidFieldPath` without array notation: the path is
/// `.`-separated names, each a property of an object with `properties`
/// (or any key of one with `additionalProperties`). Errors are worded as
/// upstream's: `does not refer to a valid field`, `unexpected end of JSON
/// path`, `expected [ or . but got: <token>`, `array notation is not allowed`.
pub fn schema_field_path<'a>(json_path: &str, schema: &'a Value) -> Result<(Vec<String>, Option<&'a Value>), String> {
    let mut node = Some(schema);
    let mut names = Vec::new();
    let mut tokens = path_tokens(json_path).into_iter();
    while let Some(tok) = tokens.next() {
        match tok {
            "[" => return Err("array notation is not allowed".into()),
            "." => {
                let Some(name) = tokens.next() else { return Err("unexpected end of JSON path".into()) };
                let current = node.ok_or("does not refer to a valid field")?;
                node = if let Some(props) = current.get("properties").and_then(Value::as_object) {
                    Some(props.get(name).ok_or("does not refer to a valid field")?)
                } else if let Some(extra) = current.get("additionalProperties").filter(|a| a.is_object() || a.is_boolean()) {
                    extra.is_object().then_some(extra)
                } else {
                    return Err("does not refer to a valid field".into());
                };
                names.push(name.to_string());
            }
            other => return Err(format!("expected [ or . but got: {other}")),
        }
    }
    Ok((names, node))
}

/// `path` split at `.`, `[` and `]` (each its own token) with the text
/// between as tokens; a token starting with `'` runs to the next unescaped
/// `'`, as upstream's scanner.
fn path_tokens(path: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let bytes = path.as_bytes();
    let mut start = 0;
    while start < bytes.len() {
        let rest = &bytes[start..];
        let len = if rest[0] == b'\'' {
            (1..rest.len()).find(|&i| rest[i] == b'\'' && rest[i - 1] != b'\\').map_or(rest.len(), |i| i + 1)
        } else if matches!(rest[0], b'.' | b'[' | b']') {
            1
        } else {
            rest.iter().position(|b| matches!(b, b'.' | b'[' | b']')).unwrap_or(rest.len())
        };
        out.push(&path[start..start + len]);
        start += len;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crd() -> Value {
        json!({
            "metadata": {"name": "widgets.example.com"},
            "spec": {"group": "example.com", "scope": "Namespaced",
                     "names": {"plural": "widgets", "kind": "Widget"},
                     "versions": [{"name": "v1", "served": true, "storage": true,
                                   "schema": {"openAPIV3Schema": {"type": "object"}}}]}
        })
    }

    fn errors_of(mut obj: Value) -> Vec<String> {
        if let Some(m) = obj.as_object_mut() {
            defaults(m);
        }
        let mut errs = Vec::new();
        validate(&obj, None, &mut errs);
        errs.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn a_well_formed_crd_is_valid_and_defaulted() {
        let mut obj = crd();
        let m = obj.as_object_mut().unwrap();
        defaults(m);
        prepare_for_create(m);
        assert_eq!(obj["spec"]["names"]["singular"], "widget");
        assert_eq!(obj["spec"]["names"]["listKind"], "WidgetList");
        assert_eq!(obj["spec"]["conversion"]["strategy"], "None");
        assert_eq!(obj["status"]["storedVersions"], json!(["v1"]));
        assert_eq!(obj["metadata"]["finalizers"], json!([CLEANUP_FINALIZER]));
        assert!(errors_of(crd()).is_empty());
    }

    #[test]
    fn the_name_must_be_plural_dot_group() {
        let mut obj = crd();
        obj["metadata"]["name"] = json!("gadgets.example.com");
        assert_eq!(errors_of(obj), ["metadata.name: Invalid value: \"gadgets.example.com\": must be spec.names.plural+\".\"+spec.group"]);
    }

    #[test]
    fn names_must_be_lowercase_dns_labels() {
        let mut obj = crd();
        obj["spec"]["names"]["plural"] = json!("Widgets");
        obj["metadata"]["name"] = json!("Widgets.example.com");
        let errs = errors_of(obj);
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(errs[0].starts_with("spec.names.plural: Invalid value: \"Widgets\": a DNS-1035 label must consist of lower case"), "{errs:?}");
    }

    #[test]
    fn exactly_one_storage_version() {
        let mut obj = crd();
        obj["spec"]["versions"][0]["storage"] = json!(false);
        let errs = errors_of(obj);
        assert!(errs[0].starts_with("spec.versions: Invalid value: ") && errs[0].ends_with("must have exactly one version marked as storage version"), "{errs:?}");
    }

    #[test]
    fn scope_is_namespaced_or_cluster() {
        let mut obj = crd();
        obj["spec"]["scope"] = json!("Global");
        assert_eq!(errors_of(obj), ["spec.scope: Unsupported value: \"Global\": supported values: \"Cluster\", \"Namespaced\""]);
    }

    #[test]
    fn groups_need_a_dot() {
        let mut obj = crd();
        obj["spec"]["group"] = json!("example");
        obj["metadata"]["name"] = json!("widgets.example");
        assert_eq!(errors_of(obj), ["spec.group: Invalid value: \"example\": should be a domain with at least one dot"]);
    }

    #[test]
    fn v1_needs_a_structural_schema() {
        let mut obj = crd();
        obj["spec"]["versions"][0]["schema"] = json!(null);
        assert_eq!(errors_of(obj.clone()), ["spec.versions[0].schema.openAPIV3Schema: Required value: schemas are required"]);
        obj["spec"]["versions"][0]["schema"] = json!({"openAPIV3Schema": {"type": "object", "properties": {"spec": {}}}});
        assert_eq!(
            errors_of(obj),
            ["spec.versions[0].schema.openAPIV3Schema.properties[spec].type: Required value: must not be empty for specified object fields"]
        );
    }

    fn with_selectable_fields(paths: &[&str]) -> Value {
        let mut obj = crd();
        obj["spec"]["versions"][0]["schema"]["openAPIV3Schema"] = json!({"type": "object", "properties": {
            "metadata": {"type": "object"},
            "spec": {"type": "object", "properties": {
                "color": {"type": "string", "enum": ["red", "blue"]},
                "replicas": {"type": "integer"}, "ready": {"type": "boolean"}, "ratio": {"type": "number"},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "items": {"type": "array", "items": {"type": "string"}}}}}});
        obj["spec"]["versions"][0]["selectableFields"] = paths.iter().map(|p| json!({"jsonPath": p})).collect();
        obj
    }

    #[test]
    fn selectable_fields_point_to_scalar_fields_of_the_schema() {
        assert!(errors_of(with_selectable_fields(&[".spec.color", ".spec.replicas", ".spec.ready", ".spec.labels.app"])).is_empty());
        let field = "spec.versions[0].selectableFields";
        assert_eq!(
            errors_of(with_selectable_fields(&["", ".spec.missing", "spec.color", ".spec.", ".spec.items[0]", ".spec.color.x"])),
            [
                format!("{field}[0].jsonPath: Required value"),
                format!("{field}[1].jsonPath: Invalid value: \".spec.missing\": is an invalid path: does not refer to a valid field"),
                format!("{field}[2].jsonPath: Invalid value: \"spec.color\": is an invalid path: expected [ or . but got: spec"),
                format!("{field}[3].jsonPath: Invalid value: \".spec.\": is an invalid path: unexpected end of JSON path"),
                format!("{field}[4].jsonPath: Invalid value: \".spec.items[0]\": is an invalid path: array notation is not allowed"),
                format!("{field}[5].jsonPath: Invalid value: \".spec.color.x\": is an invalid path: does not refer to a valid field"),
            ]
        );
        let scalar = "must point to a field of type string, boolean or integer. Enum string fields and strings with formats are allowed.";
        assert_eq!(
            errors_of(with_selectable_fields(&[".spec.ratio", ".spec.items", ".metadata"])),
            [
                format!("{field}[0].jsonPath: Invalid value: \".spec.ratio\": {scalar}"),
                format!("{field}[1].jsonPath: Invalid value: \".spec.items\": {scalar}"),
                format!("{field}[2].jsonPath: Invalid value: \".metadata\": must not point to fields in metadata"),
                format!("{field}[2].jsonPath: Invalid value: \".metadata\": {scalar}"),
            ]
        );
    }

    #[test]
    fn selectable_fields_are_unique_and_at_most_eight() {
        let field = "spec.versions[0].selectableFields";
        assert_eq!(
            errors_of(with_selectable_fields(&[".spec.color", ".spec.replicas", ".spec.color"])),
            [format!("{field}[2].jsonPath: Duplicate value: \".spec.color\"")]
        );
        let nine: Vec<String> = (0..9).map(|i| format!(".spec.labels.l{i}")).collect();
        let nine: Vec<&str> = nine.iter().map(String::as_str).collect();
        assert_eq!(errors_of(with_selectable_fields(&nine)), [format!("{field}: Too many: 9: must have at most 8 items")]);
        assert!(errors_of(with_selectable_fields(&nine[..8])).is_empty());
    }

    #[test]
    fn selectable_fields_need_a_schema() {
        let mut obj = with_selectable_fields(&[".spec.color"]);
        obj["spec"]["versions"][0]["schema"] = json!(null);
        let errs = errors_of(obj);
        assert!(
            errs.contains(&"spec.versions[0].selectableFields: Invalid value: \"\": selectableFields may only be set when version.schema.openAPIV3Schema is not included".to_string()),
            "{errs:?}"
        );
    }

    #[test]
    fn group_and_plural_are_immutable() {
        let old = crd();
        let mut new = crd();
        new["spec"]["group"] = json!("other.io");
        new["metadata"]["name"] = json!("widgets.other.io");
        let mut errs = Vec::new();
        validate(&new, Some(&old), &mut errs);
        assert!(errs.iter().any(|e| e.to_string() == "spec.group: Invalid value: \"other.io\": field is immutable"), "{errs:?}");
    }
}
