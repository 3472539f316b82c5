//! Server-side Tables (`meta.k8s.io/v1` `Table`) for `kubectl get`.
//!
//! kubectl asks for lists and objects with
//! `Accept: application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json`
//! and prints the `columnDefinitions` as headers and `rows[].cells` as lines
//! (priority-1 columns only with `-o wide`). [`is_table_request`] parses that
//! header (and `?includeObject=`); [`to_table`] renders the items.
//!
//! Columns and cell values come from the printer the resource's row names
//! ([`ResourceInfo::printer`], defined in [`rkube_api::printers`] after
//! upstream's `pkg/printers/internalversion/printers.go`); rows naming none
//! print NAME AGE, and custom resources print their
//! `additionalPrinterColumns` ([`custom`]). Ages are rendered like
//! apimachinery's `HumanDuration` ([`human_duration`]). Column descriptions
//! come from the published OpenAPI schemas where upstream uses the API field
//! docs.

pub mod custom;

#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use chrono::{DateTime, Utc};
use serde_json::{json, Map, Value};

use rkube_api::printers::{self, Desc, Printer};
use rkube_api::registry::ResourceInfo;

pub use printers::human_duration;

/// `Content-Type` of a `meta.k8s.io/v1` Table response.
pub const CONTENT_TYPE_TABLE_V1: &str = "application/json;as=Table;v=v1;g=meta.k8s.io";
/// `Content-Type` of a `meta.k8s.io/v1beta1` Table response.
pub const CONTENT_TYPE_TABLE_V1BETA1: &str = "application/json;as=Table;v=v1beta1;g=meta.k8s.io";

/// Errors of Table requests.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TableError {
    /// `?includeObject=` had a value other than `None`, `Metadata`, `Object`
    /// (upstream answers 400 `BadRequest`).
    #[error("unsupported includeObject value {0:?}: must be one of None, Metadata, Object")]
    InvalidIncludeObject(String),
}

/// What each row's `object` holds (`?includeObject=`, default [`IncludeObject::Metadata`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IncludeObject {
    /// `object: null`.
    None,
    /// `object` is a `meta.k8s.io/v1` `PartialObjectMetadata` (the default).
    #[default]
    Metadata,
    /// `object` is the full object.
    Object,
}

impl IncludeObject {
    /// Parses `?includeObject=`; absent or empty means [`IncludeObject::Metadata`].
    pub fn from_query(value: Option<&str>) -> Result<Self, TableError> {
        match value {
            None | Some("") | Some("Metadata") => Ok(IncludeObject::Metadata),
            Some("None") => Ok(IncludeObject::None),
            Some("Object") => Ok(IncludeObject::Object),
            Some(other) => Err(TableError::InvalidIncludeObject(other.to_string())),
        }
    }
}

/// The Table version a client asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableVersion {
    /// `meta.k8s.io/v1` (kubectl ≥ 1.15 asks for it first).
    V1,
    /// `meta.k8s.io/v1beta1`.
    V1Beta1,
}

impl TableVersion {
    /// `apiVersion` of the Table.
    pub fn api_version(self) -> &'static str {
        match self {
            TableVersion::V1 => "meta.k8s.io/v1",
            TableVersion::V1Beta1 => "meta.k8s.io/v1beta1",
        }
    }

    /// `Content-Type` of the response.
    pub fn content_type(self) -> &'static str {
        match self {
            TableVersion::V1 => CONTENT_TYPE_TABLE_V1,
            TableVersion::V1Beta1 => CONTENT_TYPE_TABLE_V1BETA1,
        }
    }
}

/// A request for a Table: which version and what rows carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableRequest {
    /// Table version to answer with.
    pub version: TableVersion,
    /// What each row's `object` holds.
    pub include_object: IncludeObject,
}

/// Parses an `Accept` header: `Ok(Some(..))` when the first media range the
/// server can produce is a Table (`application/json;as=Table;g=meta.k8s.io;v=v1`
/// or `v=v1beta1`), `Ok(None)` when it is plain JSON/YAML (or nothing
/// usable is listed; the caller negotiates that). Ranges the server cannot
/// produce (protobuf, other `as=` kinds) are skipped, as upstream's
/// negotiation does. `include_object` is the `?includeObject=` value; an
/// invalid one is an error only when a Table was asked for.
pub fn is_table_request(accept: &str, include_object: Option<&str>) -> Result<Option<TableRequest>, TableError> {
    for range in accept.split(',') {
        let mut parts = range.split(';');
        let essence = parts.next().unwrap_or("").trim().to_ascii_lowercase();
        let mut as_kind = None;
        let mut group = None;
        let mut version = None;
        for p in parts {
            if let Some((k, v)) = p.split_once('=') {
                let v = v.trim().trim_matches('"');
                match k.trim().to_ascii_lowercase().as_str() {
                    "as" => as_kind = Some(v.to_string()),
                    "g" => group = Some(v.to_string()),
                    "v" => version = Some(v.to_string()),
                    _ => {}
                }
            }
        }
        let json_like = matches!(essence.as_str(), "application/json" | "application/*" | "*/*");
        match (as_kind.as_deref(), json_like) {
            (None, true) => return Ok(None),
            (None, false) if essence == "application/yaml" => return Ok(None),
            (Some("Table"), true) if group.as_deref() == Some("meta.k8s.io") => {
                let version = match version.as_deref() {
                    Some("v1") => TableVersion::V1,
                    Some("v1beta1") => TableVersion::V1Beta1,
                    _ => continue,
                };
                let include_object = IncludeObject::from_query(include_object)?;
                return Ok(Some(TableRequest { version, include_object }));
            }
            _ => continue,
        }
    }
    Ok(None)
}

/// A `meta.k8s.io/v1` `Table` of `items` (objects of the row `info`,
/// printed with its [`ResourceInfo::printer`]), rendered now. `list_meta` becomes the Table's
/// `metadata` (a ListMeta: `resourceVersion`, `continue`,
/// `remainingItemCount`). Every column is filled, including the `-o wide`
/// (priority 1) ones.
pub fn to_table(info: &ResourceInfo, items: &[Value], include_object: IncludeObject, list_meta: Option<Value>) -> Value {
    to_table_at(info.printer, items, include_object, list_meta, Utc::now())
}

/// [`to_table`] with an explicit printer and clock (ages are computed against `now`).
pub fn to_table_at(
    printer: &Printer,
    items: &[Value],
    include_object: IncludeObject,
    list_meta: Option<Value>,
    now: DateTime<Utc>,
) -> Value {
    let rows: Vec<Value> = items
        .iter()
        .map(|item| {
            let mut row = Map::new();
            row.insert("cells".into(), Value::Array((printer.cells)(item, now)));
            if let Some(conditions) = printer.conditions.and_then(|f| f(item)) {
                row.insert("conditions".into(), conditions);
            }
            let object = match include_object {
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
        "columnDefinitions": column_definitions(printer),
        "rows": rows,
    })
}

/// Re-labels a Table rendered by [`to_table`] for the version the client
/// asked for (`meta.k8s.io/v1beta1` has the same shape).
pub fn set_version(table: &mut Value, version: TableVersion) {
    if let Some(m) = table.as_object_mut() {
        m.insert("apiVersion".into(), version.api_version().into());
    }
}

/// `PartialObjectMetadata` of an object: its `metadata` only.
pub fn partial_object_metadata(obj: &Value) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj.get("metadata").cloned().unwrap_or_else(|| json!({})),
    })
}

/// The `columnDefinitions` of a resource, built once per printer (the cache
/// is keyed by the printer's static column list, so it stays small whatever
/// resource names callers pass).
fn column_definitions(printer: &Printer) -> Value {
    static CACHE: OnceLock<Mutex<HashMap<usize, Value>>> = OnceLock::new();
    let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
    let columns = printer.columns;
    let key = columns.as_ptr() as usize;
    if let Ok(map) = cache.lock() {
        if let Some(v) = map.get(&key) {
            return v.clone();
        }
    }
    let defs: Vec<Value> = columns
        .iter()
        .map(|c| {
            let description = match c.description {
                Desc::Text(t) => t,
                Desc::Schema(def, prop) => crate::openapi::property_description(def, prop).unwrap_or(""),
            };
            json!({
                "name": c.name,
                "type": c.ty,
                "format": c.format,
                "description": description,
                "priority": c.priority,
            })
        })
        .collect();
    let value = Value::Array(defs);
    if let Ok(mut map) = cache.lock() {
        map.insert(key, value.clone());
    }
    value
}
