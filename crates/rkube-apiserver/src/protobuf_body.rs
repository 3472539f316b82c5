//! Responses in `application/vnd.kubernetes.protobuf`, the encoding
//! client-go's typed clients ask for first (upstream
//! `apimachinery/pkg/runtime/serializer/protobuf`, `handlers/watch.go`):
//!
//! - GET: `k8s\0` + `runtime.Unknown{typeMeta, raw: <object message>}`;
//! - LIST: the same envelope around `<Kind>List{metadata: ListMeta, items}`,
//!   spliced from each item's message bytes and streamed in chunks of the
//!   JSON body's size;
//! - WATCH (`;stream=watch`): one length-prefixed `metav1.WatchEvent` frame
//!   per event, whose object is a whole enveloped body.
//!
//! An object's message bytes are made from its cached JSON once and kept
//! beside it ([`rkube_cache::Encodings`]), so every later GET, LIST page and
//! watcher reuses them. Built-in kinds only: custom resources and kinds
//! without a schema answer JSON, as upstream serves them.

use bytes::Bytes;
use rkube_api::protobuf as pb;
use rkube_api::registry::ResourceInfo;
use rkube_cache::{CachedObject, ListResult, WatchEvent};
use serde_json::{Map, Value};

use crate::error::{ApiError, ApiResult};

/// The media type of protobuf responses.
pub const CONTENT_TYPE: &str = "application/vnd.kubernetes.protobuf";

/// The media type of protobuf watch streams.
pub const WATCH_CONTENT_TYPE: &str = "application/vnd.kubernetes.protobuf;stream=watch";

/// The protobuf message of `info`'s objects (e.g. `api.core.v1.Pod`), `None`
/// for custom resources and kinds rkube has no schema for.
pub fn message(info: &ResourceInfo) -> Option<String> {
    if info.custom.is_some() {
        return None;
    }
    pb::message_name(&info.api_version(), info.kind)
}

/// Whether `info`'s objects (and lists) can be answered in protobuf.
pub fn supported(info: &ResourceInfo) -> bool {
    message(info).is_some_and(|_| pb::message_name(&info.api_version(), info.list_kind).is_some())
}

fn encode_error(e: pb::ProtobufError) -> ApiError {
    ApiError::internal(format!("unable to encode the object as protobuf: {e}"))
}

/// The message bytes of a cached object of `info` (made once, then shared).
///
/// Errors: 500 when its JSON does not fit the schema.
pub fn object_message(info: &ResourceInfo, obj: &CachedObject) -> ApiResult<Bytes> {
    let name = message(info).ok_or_else(|| ApiError::internal(format!("no protobuf message for {}", info.kind)))?;
    obj.encodings.protobuf(|| {
        let v: Value = serde_json::from_slice(&obj.json)
            .map_err(|e| ApiError::internal(format!("cached object is not JSON: {e}")))?;
        pb::encode_message(&name, &v).map(Bytes::from).map_err(encode_error)
    })
}

/// The whole GET body of one cached object.
pub fn object_body(info: &ResourceInfo, obj: &CachedObject) -> ApiResult<Bytes> {
    let raw = object_message(info, obj)?;
    Ok(Bytes::from(pb::envelope(&info.api_version(), info.kind, &raw)))
}

/// Any JSON object (with `apiVersion` and `kind`) as a protobuf body;
/// `Ok(None)` when its kind has no schema (the caller answers JSON).
///
/// Errors: 500 when the JSON does not fit the schema.
pub fn value_body(value: &Value) -> ApiResult<Option<Vec<u8>>> {
    match pb::encode_object(value) {
        Ok(b) => Ok(Some(b)),
        Err(pb::ProtobufError::UnknownKind { .. }) => Ok(None),
        Err(e) => Err(encode_error(e)),
    }
}

/// The message bytes of every item of a LIST page, in order (made for the
/// items that have none yet).
///
/// Errors: 500 when an item does not fit the schema.
pub fn list_items(info: &ResourceInfo, page: &ListResult) -> ApiResult<Vec<Bytes>> {
    page.items.iter().map(|o| object_message(info, o)).collect()
}

/// A LIST body in protobuf from its items' message bytes
/// ([`list_items`]): `(total length, chunks of about chunk_bytes)`, the
/// chunks made as the connection asks for them.
///
/// Errors: 500 when `list_meta` does not fit `ListMeta`.
pub fn list_chunks(
    info: &ResourceInfo,
    items: Vec<Bytes>,
    list_meta: Map<String, Value>,
    chunk_bytes: usize,
) -> ApiResult<(usize, impl Iterator<Item = Bytes> + Send + 'static)> {
    let meta = pb::encode_message("apimachinery.pkg.apis.meta.v1.ListMeta", &Value::Object(list_meta))
        .map_err(encode_error)?;
    let mut opening = pb::field_header(1, meta.len());
    opening.extend_from_slice(&meta);
    let items_len: usize = items.iter().map(|b| 1 + pb::varint_len(b.len() as u64) + b.len()).sum();
    let raw_len = opening.len() + items_len;
    let mut head = pb::envelope_head(&info.api_version(), info.list_kind, raw_len);
    head.extend_from_slice(&opening);
    let total = head.len() + items_len + pb::ENVELOPE_TAIL.len();

    let prefix = |_: usize, len: usize, out: &mut bytes::BytesMut| out.extend_from_slice(&pb::field_header(2, len));
    fn raw(b: &Bytes) -> &[u8] {
        b
    }
    let chunks = crate::body_chunks::splice(head, items, raw, prefix, pb::ENVELOPE_TAIL, chunk_bytes.min(total));
    Ok((total, chunks))
}

/// One watch event as a protobuf frame.
///
/// Errors: 500 when the object does not fit the schema (the caller ends
/// the stream, as upstream's watch server does on an encode error).
pub fn watch_frame(info: &ResourceInfo, api_version: &str, ev: &WatchEvent) -> ApiResult<Bytes> {
    let body = match ev {
        WatchEvent::Added(o) | WatchEvent::Modified(o) | WatchEvent::Deleted(o) => {
            pb::envelope(api_version, info.kind, &object_message(info, o)?)
        }
        WatchEvent::Bookmark(_) | WatchEvent::Error(_) => {
            // The JSON line's object, encoded: a bookmark carries only
            // metadata, an error a `Status`.
            let line = ev.to_json_line(info.kind, api_version);
            let v: Value = serde_json::from_slice(&line).map_err(|e| ApiError::internal(e.to_string()))?;
            value_body(&v["object"])?.ok_or_else(|| ApiError::internal("watch event object has no protobuf form"))?
        }
    };
    Ok(Bytes::from(pb::watch_event_frame(ev.type_name(), &body)))
}
