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
    if matches!(r.output, Output::Json) {
        // Written in typed order straight from `obj`, without a copy.
        return match rkube_api::wire::to_typed_json(obj, false) {
            Ok(body) => json_answer(code, body, warnings),
            Err(e) => axum::response::IntoResponse::into_response(crate::error::ApiError::internal(e)),
        };
    }
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

/// An object's storage bytes (which lack `metadata.resourceVersion`), by
/// where they come from.
#[derive(Clone, Copy)]
pub enum Stored<'a> {
    /// Encoded and written by this request
    /// ([`crate::handlers::write::encode_stored`]): only their head is read
    /// ([`rkube_api::wire::RawObject::parse_head`]), so the answer costs no
    /// scan of a large object's body.
    Written(&'a [u8]),
    /// Read back from storage for a write that changed nothing (perhaps
    /// another writer's): read in full ([`rkube_api::wire::RawObject::parse`]).
    ReadBack(&'a [u8]),
}

/// [`object`] of `obj`, stored as `stored` at `resource_version`. A JSON
/// answer for a resource stored in the form it is served in is the stored
/// bytes with the resourceVersion spliced in, what a GET of it answers too;
/// for bytes [`rkube_api::wire::to_typed_json`] wrote (every rkube write),
/// the same bytes as encoding `obj` again, without a second encoding.
pub fn stored_object(
    info: &ResourceInfo,
    r: Render,
    code: u16,
    obj: &Value,
    stored: Stored<'_>,
    resource_version: i64,
    warnings: &[String],
) -> Response {
    stored_answer(info, r, code, stored, resource_version, warnings).unwrap_or_else(|| object(info, r, code, obj, warnings))
}

/// [`stored_object`]'s answer when it is the stored bytes (spliced), else
/// `None`: the caller answers with the object ([`object`]).
pub fn stored_answer(
    info: &ResourceInfo,
    r: Render,
    code: u16,
    stored: Stored<'_>,
    resource_version: i64,
    warnings: &[String],
) -> Option<Response> {
    spliced(info, r, stored, resource_version).map(|body| json_answer(code, body, warnings))
}

/// The stored bytes with `metadata.resourceVersion` set to
/// `resource_version`, when the answer is JSON of the stored form and the
/// bytes can be spliced.
fn spliced(info: &ResourceInfo, r: Render, stored: Stored<'_>, resource_version: i64) -> Option<Vec<u8>> {
    if !matches!(r.output, Output::Json) || info.conversion.is_some() {
        return None;
    }
    let rv = resource_version.to_string();
    let (bytes, body) = match stored {
        Stored::Written(b) => (b, rkube_api::wire::RawObject::parse_head(b)?.with_resource_version(&rv)),
        Stored::ReadBack(b) => (b, rkube_api::wire::RawObject::parse(b)?.with_resource_version(&rv)),
    };
    Some(body.unwrap_or_else(|| {
        // With room for the terminator, as a splice leaves.
        let mut out = Vec::with_capacity(bytes.len() + 1);
        out.extend_from_slice(bytes);
        out
    }))
}

/// A JSON answer of `code`: `body` (one encoded object) followed by the
/// [`rkube_api::wire::JSON_TERMINATOR`], with `warnings`.
fn json_answer(code: u16, mut body: Vec<u8>, warnings: &[String]) -> Response {
    body.push(rkube_api::wire::JSON_TERMINATOR);
    with_warnings(media::respond_bytes(code, body, "application/json"), warnings)
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

#[cfg(test)]
mod tests {
    use super::*;

    async fn body(resp: Response) -> Vec<u8> {
        axum::body::to_bytes(resp.into_body(), usize::MAX).await.unwrap().to_vec()
    }

    /// The answer spliced from the stored bytes is the answer encoded from
    /// the object.
    #[tokio::test]
    async fn a_stored_object_answers_the_bytes_of_its_encoding() {
        let info = rkube_api::registry::lookup("", "v1", "configmaps").unwrap();
        let r = Render { output: Output::Json, include: IncludeObjectPolicy::default() };
        let mut obj = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "namespace": "d", "uid": "u", "creationTimestamp": "t", "labels": {"x": "y"}},
            "data": {"k": "v \" é"}});
        let stored = crate::handlers::encode_for_storage(&obj).unwrap();
        crate::source::set_resource_version(&mut obj, 17);
        let want = body(object(info, r, 201, &obj, &[])).await;
        let got = body(stored_object(info, r, 201, &obj, Stored::ReadBack(&stored), 17, &["w".into()])).await;
        assert_eq!(String::from_utf8(got).unwrap(), String::from_utf8(want.clone()).unwrap());
        assert!(want.ends_with(b"\"resourceVersion\":\"17\",\"creationTimestamp\":\"t\",\"labels\":{\"x\":\"y\"}},\"data\":{\"k\":\"v \\\" \xc3\xa9\"}}\n"));
        let got = body(stored_object(info, r, 201, &obj, Stored::Written(&stored), 17, &[])).await;
        assert_eq!(String::from_utf8(got).unwrap(), String::from_utf8(want).unwrap(), "reading the head only");
        // Bytes read back from storage are read in full: keys out of typed
        // order after `metadata` (another writer's) are answered re-encoded.
        let foreign = br#"{"metadata":{"name":"a","namespace":"d","uid":"u","creationTimestamp":"t","labels":{"x":"y"}},"data":{"k":"v"},"kind":"ConfigMap","apiVersion":"v1"}"#;
        let got = body(stored_object(info, r, 201, &obj, Stored::ReadBack(foreign), 17, &[])).await;
        assert_eq!(String::from_utf8(got).unwrap(), String::from_utf8(body(object(info, r, 201, &obj, &[])).await).unwrap());
    }
}
