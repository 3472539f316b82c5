//! GET and LIST. Every routing decision (cache, snapshot or storage,
//! resourceVersion semantics, not-ready rules) is the watch-cache layer's
//! ([`rkube_cache::CacheLayer::get`], [`rkube_cache::CacheLayer::list`];
//! upstream `cacher/delegator.go`); this module parses the request and
//! encodes the answer:
//!
//! - LIST: with JSON output the body is spliced from the cached bytes of
//!   each item (`{"kind":..,"apiVersion":..,"metadata":..,"items":[<bytes>,..]}`),
//!   never re-serializing an object, and streamed in chunks of about 64 KiB
//!   built as the connection takes them ([`list_chunks`]), so a client that
//!   reads slowly pins references to cached objects, not a copy of the body;
//!   Table / PartialObjectMetadata / YAML outputs decode the items and go
//!   through [`render::list`].
//! - GET: the object's bytes (JSON), or decoded and rendered.

use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::{BufMut, Bytes, BytesMut};
use rkube_api::list_options::ListOptions;
use rkube_api::registry::ResourceInfo;
use rkube_cache::ListResult;
use serde_json::{json, Map, Value};

use super::Ctx;
use crate::error::{ApiError, ApiResult};
use crate::filters::trace::{self, steps};
use crate::media::Output;
use crate::protobuf_body;
use crate::render;

/// Decodes a cached object's JSON (for non-JSON outputs).
pub(crate) fn decode(bytes: &[u8]) -> ApiResult<Value> {
    serde_json::from_slice(bytes).map_err(|e| ApiError::internal(format!("cached object is not JSON: {e}")))
}

fn json_response(body: Bytes) -> Response {
    let mut resp = (StatusCode::OK, body).into_response();
    resp.headers_mut().insert("content-type", HeaderValue::from_static("application/json"));
    resp
}

/// GET one object (or its `status` subresource, which is the same object),
/// honouring `resourceVersion`.
pub async fn get(ctx: &Ctx) -> ApiResult<Response> {
    trace::step(steps::GET_START);
    let info = ctx.ri.info;
    let name = ctx.name();
    let namespace = ctx.ri.namespace.as_deref().unwrap_or("");
    let found = ctx.st.cache.get(info, namespace, name, ctx.q("resourceVersion")).await;
    trace::step(steps::GET_DONE);
    let obj = found?.ok_or_else(|| ApiError::not_found(info, name))?;
    let obj = match crate::crd_conversion::by_webhook(info) {
        true => crate::crd_conversion::served_objects(&ctx.st, info, vec![obj], false).await?.pop().ok_or_else(|| ApiError::internal("conversion returned no object"))?,
        false => obj,
    };
    trace::step(steps::ABOUT_TO_WRITE);
    if ctx.render.output == Output::Json {
        // The cached bytes plus the `\n` kube-apiserver ends every body with.
        let mut body = BytesMut::with_capacity(obj.json.len() + 1);
        body.put_slice(&obj.json);
        body.put_u8(rkube_api::wire::JSON_TERMINATOR);
        return Ok(json_response(body.freeze()));
    }
    if ctx.render.output == Output::Protobuf {
        let body = protobuf_body::object_body(info, &obj)?;
        return Ok(typed_response(body.len(), std::iter::once(body), protobuf_body::CONTENT_TYPE));
    }
    Ok(render::object(info, ctx.render, 200, &decode(&obj.json)?, &[]))
}

/// Parses the LIST/WATCH query; checks that every field of the field
/// selector is selectable on the resource (400 `field label not supported`).
/// `GET .../pods/<name>?watch=true` adds `metadata.name=<name>` to the field selector.
pub fn list_options(ctx: &Ctx) -> ApiResult<ListOptions> {
    let mut opts = ListOptions::from_query(&ctx.raw_query).map_err(ApiError::from)?;
    check_fields(ctx.ri.info, &opts)?;
    if let Some(name) = &ctx.ri.name {
        let mut reqs = opts.field_selector.requirements().to_vec();
        reqs.push(rkube_api::selector::FieldSelector::one_term("metadata.name", name).requirements()[0].clone());
        opts.field_selector = rkube_api::selector::FieldSelector::from_requirements(reqs);
    }
    Ok(opts)
}

fn check_fields(info: &ResourceInfo, opts: &ListOptions) -> ApiResult<()> {
    for f in opts.field_selector.fields() {
        if !info.field_labels().any(|l| l == f) {
            return Err(ApiError::bad_request(format!("field label not supported: {f}")));
        }
    }
    Ok(())
}

/// The list's `metadata` (`resourceVersion`, `continue`, `remainingItemCount`).
fn list_meta(page: &ListResult) -> Map<String, Value> {
    let mut meta = Map::new();
    meta.insert("resourceVersion".into(), Value::String(page.resource_version.to_string()));
    if let Some(token) = &page.continue_token {
        meta.insert("continue".into(), Value::String(token.clone()));
        if let Some(rem) = page.remaining_item_count.filter(|r| *r > 0) {
            meta.insert("remainingItemCount".into(), Value::from(rem));
        }
    }
    meta
}

/// Bytes of one streamed LIST chunk: small enough that a client that stops
/// reading pins little besides the cached objects themselves, large enough
/// that copying into it costs no throughput (one copy per byte, as before).
pub const LIST_CHUNK_BYTES: usize = 64 * 1024;

/// The JSON body of a LIST page, produced lazily: `{"kind":..,"apiVersion":..,
/// "metadata":..,"items":[<cached bytes>,..]}\n`, spliced from each item's
/// cached bytes (never re-serialized) into chunks of about
/// [`LIST_CHUNK_BYTES`], built only when the connection asks for the next
/// one. A response therefore holds the page's references to cached objects
/// plus one chunk, not a copy of the whole body. Yields `(total_len, chunks)`.
pub fn list_chunks(info: &ResourceInfo, page: ListResult) -> (usize, impl Iterator<Item = Bytes> + Send + 'static) {
    let head = json!({"kind": info.list_kind, "apiVersion": info.api_version()});
    let head = serde_json::to_vec(&head).unwrap_or_default();
    let meta = serde_json::to_vec(&Value::Object(list_meta(&page))).unwrap_or_default();
    let mut opening = Vec::with_capacity(head.len() + meta.len() + 24);
    // `head` is `{"kind":..,"apiVersion":..}`: reopen it.
    opening.extend_from_slice(&head[..head.len().saturating_sub(1)]);
    opening.extend_from_slice(b",\"metadata\":");
    opening.extend_from_slice(&meta);
    opening.extend_from_slice(b",\"items\":[");
    const CLOSING: &[u8] = b"]}\n";
    let items_len: usize = page.items.iter().map(|o| o.json.len()).sum::<usize>() + page.items.len().saturating_sub(1);
    let total = opening.len() + items_len + CLOSING.len();

    let prefix = |i: usize, _: usize, out: &mut BytesMut| {
        if i > 0 {
            out.put_u8(b',');
        }
    };
    fn json(o: &std::sync::Arc<rkube_cache::CachedObject>) -> &[u8] {
        &o.json
    }
    let chunks = crate::body_chunks::splice(opening, page.items, json, prefix, CLOSING, LIST_CHUNK_BYTES.min(total));
    (total, chunks)
}

/// The whole LIST body at once (tests and small callers); see [`list_chunks`].
pub fn list_json(info: &ResourceInfo, page: ListResult) -> Bytes {
    let (total, chunks) = list_chunks(info, page);
    let mut out = BytesMut::with_capacity(total);
    for c in chunks {
        out.put_slice(&c);
    }
    out.freeze()
}

/// A `200 application/json` response streaming `chunks` (`total` bytes, sent
/// as `Content-Length`).
fn streamed_json(total: usize, chunks: impl Iterator<Item = Bytes> + Send + 'static) -> Response {
    typed_response(total, chunks, "application/json")
}

/// A `200` response of `content_type` streaming `chunks` (`total` bytes,
/// sent as `Content-Length`).
fn typed_response(
    total: usize,
    chunks: impl Iterator<Item = Bytes> + Send + 'static,
    content_type: &'static str,
) -> Response {
    let stream = futures::stream::iter(chunks.map(Ok::<Bytes, std::convert::Infallible>));
    let mut resp = (StatusCode::OK, axum::body::Body::from_stream(stream)).into_response();
    resp.headers_mut().insert("content-type", HeaderValue::from_static(content_type));
    resp.headers_mut().insert(axum::http::header::CONTENT_LENGTH, HeaderValue::from(total));
    resp
}

/// LIST a collection.
pub async fn list(ctx: &Ctx) -> ApiResult<Response> {
    trace::step(steps::LIST_START);
    let info = ctx.ri.info;
    let opts = list_options(ctx)?;
    let page = ctx.st.cache.list(info, ctx.ri.namespace.as_deref(), &opts).await;
    trace::step_with(steps::LIST_DONE, trace::count(page.as_ref().map_or(0, |p| p.items.len())));
    let mut page = page?;
    page.items = crate::crd_conversion::served_objects(&ctx.st, info, std::mem::take(&mut page.items), true).await?;
    trace::step(steps::ABOUT_TO_WRITE);
    if ctx.render.output == Output::Json {
        let (total, chunks) = list_chunks(info, page);
        return Ok(streamed_json(total, chunks));
    }
    if ctx.render.output == Output::Protobuf {
        // Items not yet encoded are encoded here: hand the worker over for large pages.
        let items = crate::media::off_the_workers(page.items.len() * 1024, || protobuf_body::list_items(info, &page))?;
        let (total, chunks) = protobuf_body::list_chunks(info, items, list_meta(&page), LIST_CHUNK_BYTES)?;
        return Ok(typed_response(total, chunks, protobuf_body::CONTENT_TYPE));
    }
    let items = page.items.iter().map(|o| decode(&o.json)).collect::<ApiResult<Vec<Value>>>()?;
    Ok(render::list(info, ctx.render, items, list_meta(&page)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    use rkube_cache::{CachedObject, ServedFrom};

    fn raw(json: &'static [u8]) -> Arc<CachedObject> {
        Arc::new(CachedObject {
            key: String::new(),
            namespace: None,
            name: String::new(),
            resource_version: 1,
            json: Bytes::from_static(json),
            labels: Default::default(),
            fields: Vec::new(),
            encodings: Default::default(),
        })
    }

    #[test]
    fn list_json_splices_cached_item_bytes() {
        let info = rkube_api::registry::lookup("", "v1", "configmaps").unwrap();
        let page = ListResult {
            items: vec![raw(br#"{"a":1}"#), raw(br#"{"b":2}"#)],
            resource_version: 7,
            continue_token: Some("tok".into()),
            remaining_item_count: Some(3),
            served_from: ServedFrom::Cache,
        };
        let body = list_json(info, page);
        assert_eq!(body.last(), Some(&b'\n'));
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            v,
            json!({"kind": "ConfigMapList", "apiVersion": "v1",
                   "metadata": {"resourceVersion": "7", "continue": "tok", "remainingItemCount": 3},
                   "items": [{"a": 1}, {"b": 2}]})
        );
        let empty = ListResult {
            items: Vec::new(),
            resource_version: 1,
            continue_token: None,
            remaining_item_count: None,
            served_from: ServedFrom::Cache,
        };
        assert_eq!(serde_json::from_slice::<Value>(&list_json(info, empty)).unwrap()["items"], json!([]));
    }

    /// A large LIST comes out in chunks of about `LIST_CHUNK_BYTES`, built one
    /// at a time, whose concatenation is the exact body and whose announced
    /// length is right.
    #[test]
    fn large_lists_stream_in_bounded_chunks() {
        let info = rkube_api::registry::lookup("", "v1", "configmaps").unwrap();
        let item = format!(r#"{{"data":{{"k":"{}"}}}}"#, "x".repeat(1000));
        let item: &'static [u8] = Box::leak(item.into_bytes().into_boxed_slice());
        let page = || ListResult {
            items: (0..1000).map(|_| raw(item)).collect(),
            resource_version: 9,
            continue_token: None,
            remaining_item_count: None,
            served_from: ServedFrom::Cache,
        };
        let (total, chunks) = list_chunks(info, page());
        let chunks: Vec<Bytes> = chunks.collect();
        assert!(chunks.len() >= 15, "about 1 MB in 64 KiB chunks: {}", chunks.len());
        assert!(chunks.iter().all(|c| c.len() <= LIST_CHUNK_BYTES + 64), "chunk sizes bounded");
        let joined: Vec<u8> = chunks.concat();
        assert_eq!(joined.len(), total);
        assert_eq!(&joined[..], &list_json(info, page())[..]);
        let v: Value = serde_json::from_slice(&joined).unwrap();
        assert_eq!(v["items"].as_array().unwrap().len(), 1000);
        assert_eq!(v["metadata"]["resourceVersion"], "9");
    }
}
