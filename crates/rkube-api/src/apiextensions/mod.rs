//! CustomResourceDefinitions (`apiextensions.k8s.io/v1`,
//! upstream `staging/src/k8s.io/apiextensions-apiserver`).
//!
//! - [`crd`]: the CRD resource's own strategy: defaults, create-time
//!   preparation (the `customresourcecleanup.apiextensions.k8s.io`
//!   finalizer, `status.storedVersions`) and validation
//!   (`pkg/apis/apiextensions/validation/validation.go`);
//! - [`schema`]: structural schemas applied to custom resources: validation
//!   with kube-openapi's messages, pruning of unknown fields and defaulting
//!   (`pkg/apiserver/schema/{pruning,defaulting}`, `pkg/apiserver/validation`);
//! - [`rows_for`]: the resource-table rows an established CRD serves, one
//!   per served version, each carrying a [`CustomResource`].

pub mod cel;
pub mod crd;
pub mod schema;

use serde_json::Value;

use crate::registry::{status, FieldType, ResourceInfo, SelectableField, SubresourceInfo, ALL_VERBS, BASE, SCALE};

/// The finalizer every CRD gets on create; the API server removes it once
/// the CRD's custom resources are deleted (upstream's `finalizer` controller).
pub const CLEANUP_FINALIZER: &str = "customresourcecleanup.apiextensions.k8s.io";

/// One `additionalPrinterColumns` entry of a CRD version: a column of the
/// server-side Table (`kubectl get`).
#[derive(Debug, Clone, PartialEq)]
pub struct PrinterColumn {
    /// Column header (`name`).
    pub name: String,
    /// OpenAPI type: `integer`, `number`, `string`, `boolean` or `date`.
    pub column_type: String,
    /// OpenAPI format (`""` when unset).
    pub format: String,
    /// Column description (`""` when unset).
    pub description: String,
    /// 0 for standard view columns, more for `-o wide`.
    pub priority: i64,
    /// JSONPath inside the object, e.g. `.spec.replicas`.
    pub json_path: String,
}

/// The `scale` subresource of a CRD version (`subresources.scale`): JSON
/// paths (`.spec.replicas`) of the fields `/scale` reads and writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScalePaths {
    /// `specReplicasPath`.
    pub spec_replicas: String,
    /// `statusReplicasPath`.
    pub status_replicas: String,
    /// `labelSelectorPath`, when set.
    pub label_selector: Option<String>,
}

/// What a custom resource's row knows of its CRD version.
#[derive(Debug, Clone, PartialEq)]
pub struct CustomResource {
    /// The CRD's name, `<plural>.<group>`.
    pub crd_name: String,
    /// The version's `schema.openAPIV3Schema` (`None`: no schema).
    pub schema: Option<Value>,
    /// `additionalPrinterColumns`.
    pub columns: Vec<PrinterColumn>,
    /// `subresources.scale`.
    pub scale: Option<ScalePaths>,
    /// The CRD's `spec.conversion.webhook` (`clientConfig`,
    /// `conversionReviewVersions`) when its conversion strategy is
    /// `Webhook`; `None` otherwise.
    pub conversion_webhook: Option<Value>,
}

fn leak(s: &str) -> &'static str {
    Box::leak(s.to_string().into_boxed_str())
}

fn leak_strs(v: &Value) -> &'static [&'static str] {
    let items: Vec<&'static str> = v.as_array().into_iter().flatten().filter_map(Value::as_str).map(leak).collect();
    Box::leak(items.into_boxed_slice())
}

fn str_of<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

/// The printer columns of a CRD version (`additionalPrinterColumns`).
pub fn printer_columns(version: &Value) -> Vec<PrinterColumn> {
    let columns = version.get("additionalPrinterColumns").and_then(Value::as_array);
    columns
        .into_iter()
        .flatten()
        .map(|c| PrinterColumn {
            name: str_of(c, "/name").to_string(),
            column_type: str_of(c, "/type").to_string(),
            format: str_of(c, "/format").to_string(),
            description: str_of(c, "/description").to_string(),
            priority: c.get("priority").and_then(Value::as_i64).unwrap_or(0),
            json_path: str_of(c, "/jsonPath").to_string(),
        })
        .collect()
}

/// The [`CustomResource`] of version `version` (one `spec.versions[]` entry) of `crd`.
pub fn custom_resource(crd: &Value, version: &Value) -> CustomResource {
    let scale = version.pointer("/subresources/scale").filter(|s| s.is_object()).map(|s| ScalePaths {
        spec_replicas: str_of(s, "/specReplicasPath").to_string(),
        status_replicas: str_of(s, "/statusReplicasPath").to_string(),
        label_selector: s.get("labelSelectorPath").and_then(Value::as_str).map(str::to_string),
    });
    CustomResource {
        crd_name: str_of(crd, "/metadata/name").to_string(),
        schema: version.pointer("/schema/openAPIV3Schema").cloned(),
        columns: printer_columns(version),
        scale,
        conversion_webhook: conversion_webhook(crd).cloned(),
    }
}

/// The version's `selectableFields` (CRD field selectors, GA in 1.32): each
/// `jsonPath` (`.spec.color`) becomes the field label `spec.color`, typed by
/// the schema (`integer`, `boolean`, else string). Leaks its strings, as
/// [`rows_for`] does.
pub fn selectable_fields(version: &Value) -> &'static [SelectableField] {
    let schema = version.pointer("/schema/openAPIV3Schema").cloned().unwrap_or(Value::Null);
    let fields: Vec<SelectableField> = version
        .get("selectableFields")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|f| f.get("jsonPath").and_then(Value::as_str))
        .map(|p| p.trim_start_matches('.'))
        .filter(|p| !p.is_empty())
        .map(|path| {
            let mut node = &schema;
            for seg in path.split('.') {
                node = node.pointer(&format!("/properties/{seg}")).unwrap_or(&Value::Null);
            }
            let field_type = match node.get("type").and_then(Value::as_str) {
                Some("integer") => FieldType::Int,
                Some("boolean") => FieldType::Bool,
                _ => FieldType::Str,
            };
            let path = leak(path);
            SelectableField { label: path, path, field_type }
        })
        .collect();
    Box::leak(fields.into_boxed_slice())
}

/// `spec.conversion.webhook` of `crd` when its strategy is `Webhook`.
pub fn conversion_webhook(crd: &Value) -> Option<&Value> {
    let webhook = crd.pointer("/spec/conversion/strategy").and_then(Value::as_str) == Some("Webhook");
    crd.pointer("/spec/conversion/webhook").filter(|_| webhook)
}

/// How the versions of `crd`'s custom resource convert: `None` (no
/// conversion) when it lists and has stored one version only; else every
/// row converts to and from the storage version
/// ([`crate::registry::conversion::custom_resource`]), through the CRD's
/// conversion webhook when its strategy is `Webhook`.
fn version_conversion(crd: &Value, group: &'static str) -> Option<crate::registry::Conversion> {
    let versions = crd.pointer("/spec/versions").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    let stored = crd.pointer("/status/storedVersions").and_then(Value::as_array).map_or(0, Vec::len);
    if versions.len() <= 1 && stored <= 1 {
        return None;
    }
    let storage = versions.iter().find(|v| v.get("storage").and_then(Value::as_bool) == Some(true))?;
    let by_webhook = conversion_webhook(crd).is_some();
    Some(crate::registry::conversion::custom_resource(group, leak(str_of(storage, "/name")), by_webhook))
}

/// The rows `crd` (a CRD object) serves: one per served version, named by
/// its `status.acceptedNames` (so only once names are accepted), stored
/// under `<group>/<plural>` as upstream's `customresource` storage. Each
/// call leaks the rows' strings: callers register rows only when the CRD
/// changed. A CRD with several versions converts between them
/// ([`ResourceInfo::conversion`]).
pub fn rows_for(crd: &Value) -> Vec<ResourceInfo> {
    let names = crd.pointer("/status/acceptedNames").cloned().unwrap_or(Value::Null);
    let (plural, kind) = (str_of(&names, "/plural"), str_of(&names, "/kind"));
    let group = str_of(crd, "/spec/group");
    if plural.is_empty() || kind.is_empty() || group.is_empty() {
        return Vec::new();
    }
    let list_kind = match str_of(&names, "/listKind") {
        "" => format!("{kind}List"),
        l => l.to_string(),
    };
    let singular = match str_of(&names, "/singular") {
        "" => kind.to_lowercase(),
        s => s.to_string(),
    };
    let (group, plural, kind) = (leak(group), leak(plural), leak(kind));
    let (list_kind, singular) = (leak(&list_kind), leak(&singular));
    let short_names = leak_strs(names.get("shortNames").unwrap_or(&Value::Null));
    let categories = leak_strs(names.get("categories").unwrap_or(&Value::Null));
    let storage_prefix = leak(&format!("{group}/{plural}"));
    let namespaced = str_of(crd, "/spec/scope") != "Cluster";
    let versions = crd.pointer("/spec/versions").and_then(Value::as_array);
    let conversion = version_conversion(crd, group);
    versions
        .into_iter()
        .flatten()
        .filter(|v| v.get("served").and_then(Value::as_bool).unwrap_or(false))
        .map(|v| {
            let mut subresources: Vec<SubresourceInfo> = Vec::new();
            if v.pointer("/subresources/status").is_some_and(Value::is_object) {
                subresources.push(status(kind));
            }
            if v.pointer("/subresources/scale").is_some_and(Value::is_object) {
                subresources.push(SCALE);
            }
            ResourceInfo {
                group,
                version: leak(str_of(v, "/name")),
                resource: plural,
                kind,
                list_kind,
                singular,
                namespaced,
                short_names,
                verbs: ALL_VERBS,
                categories,
                subresources: Box::leak(subresources.into_boxed_slice()),
                storage_prefix,
                has_spec: true,
                fields: selectable_fields(v),
                custom: Some(Box::leak(Box::new(custom_resource(crd, v)))),
                conversion,
                ..BASE
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn established_crds_serve_one_row_per_served_version() {
        let crd = json!({
            "metadata": {"name": "widgets.example.com"},
            "spec": {"group": "example.com", "scope": "Namespaced", "names": {"plural": "widgets", "kind": "Widget"},
                     "versions": [
                        {"name": "v1", "served": true, "storage": true,
                         "subresources": {"status": {}, "scale": {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas"}},
                         "additionalPrinterColumns": [{"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas"}]},
                        {"name": "v0", "served": false, "storage": false}]},
            "status": {"acceptedNames": {"plural": "widgets", "kind": "Widget", "singular": "widget", "listKind": "WidgetList",
                                         "shortNames": ["wd"], "categories": ["all"]}}
        });
        let rows = rows_for(&crd);
        assert_eq!(rows.len(), 1);
        let r = &rows[0];
        assert_eq!((r.group, r.version, r.resource, r.kind, r.list_kind), ("example.com", "v1", "widgets", "Widget", "WidgetList"));
        assert_eq!(r.object_key("/registry", "ns", "a"), "/registry/example.com/widgets/ns/a");
        assert_eq!((r.short_names, r.categories), (&["wd"][..], &["all"][..]));
        let subs: Vec<&str> = r.subresources.iter().map(|s| s.name).collect();
        assert_eq!(subs, ["status", "scale"]);
        let custom = r.custom.expect("custom");
        assert_eq!(custom.columns[0].json_path, ".spec.replicas");
        assert_eq!(custom.scale.as_ref().map(|s| s.spec_replicas.as_str()), Some(".spec.replicas"));
    }

    #[test]
    fn crds_without_accepted_names_serve_nothing() {
        let crd = json!({"spec": {"group": "example.com", "versions": [{"name": "v1", "served": true}]}});
        assert!(rows_for(&crd).is_empty());
    }
}
