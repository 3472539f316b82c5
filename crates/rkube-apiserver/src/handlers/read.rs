//! GET and LIST. Every routing decision (cache, snapshot or storage,
//! resourceVersion semantics, not-ready rules) is the watch-cache layer's
//! ([`rkube_cache::CacheLayer::get`], [`rkube_cache::CacheLayer::list`];
//! upstream `cacher/delegator.go`); this module parses the request and
//! encodes the answer:
//!
//! - LIST: with JSON output the body is assembled from the cached bytes of
//!   each item (`{"kind":..,"apiVersion":..,"metadata":..,"items":[<bytes>,..]}`),
//!   never re-serializing an object; Table / PartialObjectMetadata / YAML
//!   outputs decode the items and go through [`render::list`].
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
    trace::step(steps::ABOUT_TO_WRITE);
    if ctx.render.output == Output::Json {
        // The cached bytes plus the `\n` kube-apiserver ends every body with.
        let mut body = BytesMut::with_capacity(obj.json.len() + 1);
        body.put_slice(&obj.json);
        body.put_u8(rkube_api::wire::JSON_TERMINATOR);
        return Ok(json_response(body.freeze()));
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

/// `{"kind":..,"apiVersion":..,"metadata":..,"items":[..]}\n` from the items' bytes.
pub fn list_json(info: &ResourceInfo, page: &ListResult) -> Bytes {
    let head = json!({"kind": info.list_kind, "apiVersion": info.api_version()});
    let head = serde_json::to_vec(&head).unwrap_or_default();
    let meta = serde_json::to_vec(&Value::Object(list_meta(page))).unwrap_or_default();
    let items_len: usize = page.items.iter().map(|o| o.json.len() + 1).sum();
    let mut out = BytesMut::with_capacity(head.len() + meta.len() + items_len + 33);
    // `head` is `{"kind":..,"apiVersion":..}`: reopen it.
    out.put_slice(&head[..head.len().saturating_sub(1)]);
    out.put_slice(b",\"metadata\":");
    out.put_slice(&meta);
    out.put_slice(b",\"items\":[");
    for (i, item) in page.items.iter().enumerate() {
        if i > 0 {
            out.put_u8(b',');
        }
        out.put_slice(&item.json);
    }
    out.put_slice(b"]}");
    out.put_u8(rkube_api::wire::JSON_TERMINATOR);
    out.freeze()
}

/// LIST a collection.
pub async fn list(ctx: &Ctx) -> ApiResult<Response> {
    trace::step(steps::LIST_START);
    let info = ctx.ri.info;
    let opts = list_options(ctx)?;
    let page = ctx.st.cache.list(info, ctx.ri.namespace.as_deref(), &opts).await;
    trace::step_with(steps::LIST_DONE, trace::count(page.as_ref().map_or(0, |p| p.items.len())));
    let page = page?;
    trace::step(steps::ABOUT_TO_WRITE);
    if ctx.render.output == Output::Json {
        return Ok(json_response(list_json(info, &page)));
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
        let body = list_json(info, &page);
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
        assert_eq!(serde_json::from_slice::<Value>(&list_json(info, &empty)).unwrap()["items"], json!([]));
    }
}
