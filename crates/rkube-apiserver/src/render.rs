//! Rendering objects and lists in the negotiated representation: JSON,
//! YAML, server-side `Table` (via [`crate::table`]) or
//! `PartialObjectMetadata(List)`.

use axum::http::HeaderValue;
use axum::response::Response;
use rkube_api::registry::ResourceInfo;
use serde_json::{json, Map, Value};

use crate::media::{self, IncludeObjectPolicy, Output, TableVersion};

/// How to render a response.
#[derive(Debug, Clone, Copy)]
pub struct Render {
    /// The negotiated representation.
    pub output: Output,
    /// `?includeObject=` for tables.
    pub include: IncludeObjectPolicy,
}

/// The server-side Table of `items` (objects of `info`) in `version`, with
/// `list_meta` as its metadata (rendered by [`crate::table`]).
pub fn table(
    info: &ResourceInfo,
    version: TableVersion,
    items: &[Value],
    include: IncludeObjectPolicy,
    list_meta: Option<Value>,
) -> Value {
    let mut t = match info.custom {
        Some(custom) => crate::table::custom::to_table(custom, items, include, list_meta, chrono::Utc::now()),
        None => crate::table::to_table(info, items, include, list_meta),
    };
    crate::table::set_version(&mut t, version);
    t
}

/// `PartialObjectMetadata` of `obj`.
pub fn partial_metadata(obj: &Value) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj.get("metadata").cloned().unwrap_or_else(|| json!({})),
    })
}

/// Renders one object with HTTP `code`, adding `Warning` headers. Its keys
/// go in typed order ([`rkube_api::wire::order_object_keys`]), also for
/// objects never stored (dry runs).
pub fn object(info: &ResourceInfo, r: Render, code: u16, obj: &Value, warnings: &[String]) -> Response {
    let body = match r.output {
        Output::Table(v) => table(info, v, std::slice::from_ref(obj), r.include, None),
        Output::PartialMetadata => partial_metadata(obj),
        _ => {
            let mut body = obj.clone();
            rkube_api::wire::order_object_keys(&mut body);
            body
        }
    };
    with_warnings(media::respond(code, r.output, &body), warnings)
}

/// Renders a list: `list_meta` is the list's `metadata` (resourceVersion, continue, ...).
pub fn list(info: &ResourceInfo, r: Render, items: Vec<Value>, list_meta: Map<String, Value>) -> Response {
    let body = match r.output {
        Output::Table(v) => table(info, v, &items, r.include, Some(Value::Object(list_meta))),
        Output::PartialMetadata => json!({
            "kind": "PartialObjectMetadataList",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": list_meta,
            "items": items.iter().map(partial_metadata).collect::<Vec<_>>(),
        }),
        _ => plain_list(info, items, list_meta),
    };
    media::respond(200, r.output, &body)
}

/// `{"kind": "<Kind>List", "apiVersion": ..., "metadata": ..., "items": [...]}`.
pub fn plain_list(info: &ResourceInfo, items: Vec<Value>, list_meta: Map<String, Value>) -> Value {
    json!({
        "kind": info.list_kind,
        "apiVersion": info.api_version(),
        "metadata": list_meta,
        "items": items,
    })
}

/// Adds one `Warning: 299 - "<text>"` header per warning (upstream's format).
pub fn with_warnings(mut resp: Response, warnings: &[String]) -> Response {
    for w in warnings {
        let escaped = w.replace('\\', "\\\\").replace('"', "\\\"");
        if let Ok(v) = HeaderValue::from_str(&format!("299 - \"{escaped}\"")) {
            resp.headers_mut().append("warning", v);
        }
    }
    resp
}
