//! GET and LIST.
//!
//! LIST resourceVersion semantics (served from the [`ReadSource`]; upstream
//! `storage/etcd3/store.go` `GetList` and `cacher/delegator.go`):
//!
//! | request | read at |
//! |---|---|
//! | `resourceVersion` unset or `""` | latest (consistent read) |
//! | `resourceVersion=0` | latest |
//! | `RV=N`, `resourceVersionMatch=Exact`, or legacy exact (`limit>0`, no match) | revision N (410 `Expired` when compacted) |
//! | `RV=N`, `NotOlderThan` (or no match and no limit) | latest, which must be ≥ N (504 too large otherwise) |
//! | `continue=<token>` | the token's revision (latest when negative), from its key |
//!
//! [`ReadSource`]: crate::source::ReadSource

use axum::response::Response;
use rkube_api::continue_token::ContinueToken;
use rkube_api::list_options::{ListOptions, ResourceVersionMatch};
use rkube_api::registry::ResourceInfo;
use rkube_api::status::Status;
use rkube_cache::error::{storage_status, StorageOp, Target};
use rkube_storage::Revision;
use serde_json::{Map, Value};

use super::Ctx;
use crate::error::{ApiError, ApiResult};
use crate::filters::trace;
use crate::render;
use crate::source::{ListRequest, Predicate};

/// GET one object (or its `status` subresource, which is the same object).
pub async fn get(ctx: &Ctx) -> ApiResult<Response> {
    trace::step(trace::steps::GET_START);
    if let Some(r) = crate::cached_read::get(ctx).await {
        return r;
    }
    let info = ctx.ri.info;
    let name = ctx.name();
    let key = ctx.key(name);
    let obj = ctx.st.source.get(&key).await;
    trace::step(trace::steps::GET_DONE);
    let obj = obj.map_err(|e| ApiError::from_storage(e, info, name))?.ok_or_else(|| ApiError::not_found(info, name))?;
    trace::step(trace::steps::ABOUT_TO_WRITE);
    Ok(render::object(info, ctx.render, 200, &obj, &[]))
}

/// Parses the LIST/WATCH query and the selectors; checks that every field of
/// the field selector is selectable on `info` (400 `field label not supported`).
pub fn list_options(ctx: &Ctx) -> ApiResult<(ListOptions, Predicate)> {
    let opts = ListOptions::from_query(&ctx.raw_query).map_err(ApiError::from)?;
    check_fields(ctx.ri.info, &opts)?;
    let mut predicate = Predicate { label: opts.label_selector.clone(), field: opts.field_selector.clone() };
    // `GET .../pods/<name>?watch=true` is a watch on that one object.
    if let Some(name) = &ctx.ri.name {
        let mut reqs = predicate.field.requirements().to_vec();
        reqs.push(rkube_api::selector::FieldSelector::one_term("metadata.name", name).requirements()[0].clone());
        predicate.field = rkube_api::selector::FieldSelector::from_requirements(reqs);
    }
    Ok((opts, predicate))
}

fn check_fields(info: &ResourceInfo, opts: &ListOptions) -> ApiResult<()> {
    for f in opts.field_selector.fields() {
        if !info.field_labels().any(|l| l == f) {
            return Err(ApiError::bad_request(format!("field label not supported: {f}")));
        }
    }
    Ok(())
}

/// Parses a non-empty resourceVersion (400 on garbage).
pub fn parse_rv(rv: &str) -> ApiResult<Revision> {
    rv.parse::<Revision>()
        .ok()
        .filter(|v| *v >= 0)
        .ok_or_else(|| Status::bad_request(format!("invalid resource version: {rv:?}")).into())
}

/// LIST a collection.
pub async fn list(ctx: &Ctx) -> ApiResult<Response> {
    trace::step(trace::steps::LIST_START);
    if let Some(r) = crate::cached_read::list(ctx).await {
        return r;
    }
    let info = ctx.ri.info;
    let (opts, predicate) = list_options(ctx)?;
    let prefix = info.list_prefix(ctx.st.prefix(), ctx.ri.namespace.as_deref());
    let limit = if opts.limit > 0 { opts.limit as usize } else { 0 };
    let rv = opts.resource_version.as_deref().unwrap_or("");

    let mut revision: Revision = 0;
    let mut start_key = None;
    let mut min_revision: Revision = 0;
    if let Some(token) = opts.continue_token.as_deref().filter(|t| !t.is_empty()) {
        if !rv.is_empty() && rv != "0" {
            return Err(ApiError::bad_request("specifying resource version is not allowed when using continue"));
        }
        let t = ContinueToken::decode(token).map_err(ApiError::from)?;
        if t.resource_version > 0 {
            revision = t.resource_version;
        }
        start_key = Some(format!("{prefix}{}", t.start_key));
    } else if !rv.is_empty() && rv != "0" {
        let n = parse_rv(rv)?;
        let exact = match opts.resource_version_match {
            Some(ResourceVersionMatch::Exact) => true,
            Some(ResourceVersionMatch::NotOlderThan) => false,
            None => limit > 0,
        };
        if exact {
            revision = n;
        } else {
            min_revision = n;
        }
    }

    let page = ctx
        .st
        .source
        .list(ListRequest { info, prefix: prefix.clone(), revision, start_key, limit, predicate: &predicate })
        .await;
    trace::step_with(trace::steps::LIST_DONE, trace::count(page.as_ref().map_or(0, |p| p.items.len())));
    let page = page.map_err(|e| {
        let op = if opts.continue_token.is_some() { StorageOp::Continue } else { StorageOp::List };
        ApiError::from(storage_status(e, Target { group: info.group, resource: info.resource, name: "" }, op))
    })?;
    if min_revision > page.revision {
        return Err(Status::too_large_resource_version(min_revision, page.revision).into());
    }
    let mut meta = Map::new();
    meta.insert("resourceVersion".into(), Value::String(page.revision.to_string()));
    if let Some(last) = &page.last_key {
        let relative = last.strip_prefix(&prefix).unwrap_or(last);
        let token = ContinueToken::for_next_key(page.revision, relative).encode();
        meta.insert("continue".into(), Value::String(token));
        if let Some(rem) = page.remaining.filter(|r| *r > 0) {
            meta.insert("remainingItemCount".into(), Value::from(rem));
        }
    }
    trace::step(trace::steps::ABOUT_TO_WRITE);
    Ok(render::list(info, ctx.render, page.items, meta))
}
