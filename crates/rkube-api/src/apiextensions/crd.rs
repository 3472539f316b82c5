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
