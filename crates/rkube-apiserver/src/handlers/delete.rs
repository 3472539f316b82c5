//! DELETE and DELETE-collection (upstream `Store.Delete`,
//! `BeforeDelete`, `handlers/delete.go`).
//!
//! - `DeleteOptions` come from the body (JSON or YAML) or the query
//!   (`gracePeriodSeconds`, `propagationPolicy`, `dryRun`); preconditions on
//!   `uid` / `resourceVersion` that do not hold are 409 `Conflict`.
//! - An object with finalizers is marked (`deletionTimestamp`,
//!   `deletionGracePeriodSeconds: 0`) and answered with 202; the update that
//!   removes its last finalizer deletes it.
//! - A pod bound to a node (and not finished) is deleted gracefully: marked
//!   with `deletionTimestamp = now + grace` and kept until a delete with grace 0
//!   (the node agent's); an unbound pod goes at once, as upstream.
//! - Deleting a namespace marks it `Terminating`, deletes everything in it and
//!   then the namespace itself (objects held by finalizers keep it
//!   terminating until they are gone).
//! - The answer is the deleted object for pods, services and namespaces (and
//!   deployments), else a `Success` Status, like upstream's `ReturnDeletedObject`.

use axum::response::Response;
use rkube_api::registry::{self, ResourceInfo};
use rkube_api::status::{Status, StatusDetails};
use rkube_storage::{RangeRequest, StorageError};
use serde_json::{json, Map, Value};

use super::write::encode_stored;
use super::Ctx;
use crate::error::{ApiError, ApiResult};
use crate::filters::trace::{self, steps};
use crate::media;
use crate::object;
use crate::render;
use crate::source::{decode_stored, set_resource_version};

/// Attempts of the guarded delete before giving up with 409.
const MAX_ATTEMPTS: usize = 5;

/// Parsed `DeleteOptions`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DeleteOptions {
    /// `gracePeriodSeconds`.
    pub grace_period_seconds: Option<i64>,
    /// `preconditions.uid`.
    pub uid: Option<String>,
    /// `preconditions.resourceVersion`.
    pub resource_version: Option<String>,
    /// `propagationPolicy` (`Orphan`, `Background`, `Foreground`).
    pub propagation_policy: Option<String>,
    /// `dryRun: [All]`.
    pub dry_run: bool,
}

fn parse_options(ctx: &Ctx, body: &[u8]) -> ApiResult<DeleteOptions> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return options_from_value(ctx, None);
    }
    let v = media::decode_object(&media::content_type(&ctx.headers), body)?;
    options_from_value(ctx, Some(&v))
}

/// `DeleteOptions` from a decoded body (`None`: no body) and the query.
pub(super) fn options_from_value(ctx: &Ctx, v: Option<&Value>) -> ApiResult<DeleteOptions> {
    let mut o = DeleteOptions::default();
    if let Some(v) = v {
        if let Some(k) = v.get("kind").and_then(Value::as_str) {
            if k != "DeleteOptions" {
                return Err(ApiError::bad_request(format!(
                    "the kind in the data ({k}) does not match the expected kind (DeleteOptions)"
                )));
            }
        }
        o.grace_period_seconds = v.get("gracePeriodSeconds").and_then(Value::as_i64);
        o.uid = v.pointer("/preconditions/uid").and_then(Value::as_str).map(str::to_string);
        o.resource_version = v.pointer("/preconditions/resourceVersion").and_then(Value::as_str).map(str::to_string);
        o.propagation_policy = v.get("propagationPolicy").and_then(Value::as_str).map(str::to_string);
        if v.get("orphanDependents").and_then(Value::as_bool) == Some(true) && o.propagation_policy.is_none() {
            o.propagation_policy = Some("Orphan".into());
        }
        if let Some(dr) = v.get("dryRun").and_then(Value::as_array) {
            for d in dr {
                match d.as_str() {
                    Some("All") => o.dry_run = true,
                    other => {
                        return Err(ApiError::bad_request(format!(
                            "Invalid dry run value: {}: supported values: \"All\"",
                            other.unwrap_or("")
                        )))
                    }
                }
            }
        }
    }
    if let Some(g) = ctx.q("gracePeriodSeconds") {
        o.grace_period_seconds =
            Some(g.parse().map_err(|_| ApiError::bad_request(format!("invalid gracePeriodSeconds: {g:?}")))?);
    }
    if let Some(p) = ctx.q("propagationPolicy") {
        o.propagation_policy = Some(p.to_string());
    }
    if ctx.dry_run()? {
        o.dry_run = true;
    }
    if let Some(p) = &o.propagation_policy {
        if !matches!(p.as_str(), "Orphan" | "Background" | "Foreground") {
            let cause = rkube_api::field_error::FieldError::not_supported(
                "propagationPolicy",
                p,
                &["Foreground", "Background", "Orphan", "nil"],
            );
            return Err(Status::new(422, "Invalid", format!("DeleteOptions.meta.k8s.io \"\" is invalid: {cause}"))
                .with_details(StatusDetails {
                    group: "meta.k8s.io".into(),
                    kind: "DeleteOptions".into(),
                    causes: vec![cause.into()],
                    ..StatusDetails::default()
                })
                .into());
        }
    }
    if o.grace_period_seconds.is_some_and(|g| g < 0) {
        o.grace_period_seconds = Some(1);
    }
    Ok(o)
}

/// Kinds whose DELETE answers the object instead of a `Success` Status.
fn returns_deleted_object(info: &ResourceInfo) -> bool {
    matches!(info.kind, "Pod" | "Service" | "Namespace" | "Deployment")
}

/// What one delete did.
pub(super) enum Outcome {
    /// Removed from storage (the object's last state, resourceVersion = delete revision).
    Deleted(Value),
    /// Marked for deletion and kept (finalizers or graceful pod deletion).
    Pending(Value),
}

/// Deletes (or marks) the object `name` of the request's resource; used by
/// DELETE, DELETE-collection and the namespace cascade.
pub(super) async fn delete_one(
    ctx: &Ctx,
    info: &'static ResourceInfo,
    ns: &str,
    name: &str,
    opts: &DeleteOptions,
) -> ApiResult<Outcome> {
    let key = info.object_key(ctx.st.prefix(), ns, name);
    for _ in 0..MAX_ATTEMPTS {
        let kv = ctx.st.storage.get(&key).await.map_err(|e| ApiError::from_storage(e, info, name))?;
        let Some(kv) = kv else { return Err(ApiError::not_found(info, name)) };
        let obj =
            decode_stored(&kv.key, &kv.value, kv.mod_revision).map_err(|e| ApiError::from_storage(e, info, name))?;
        let obj = info.to_served(obj);
        if let Some(uid) = &opts.uid {
            let have = object::meta_str(&obj, "uid");
            if uid != have {
                return Err(ApiError::conflict(
                    info,
                    name,
                    &format!("Precondition failed: UID in precondition: {uid}, UID in object meta: {have}"),
                ));
            }
        }
        if let Some(rv) = &opts.resource_version {
            if *rv != kv.mod_revision.to_string() {
                return Err(ApiError::conflict(
                    info,
                    name,
                    &format!(
                        "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                        kv.mod_revision
                    ),
                ));
            }
        }
        let mut marked = obj.clone();
        let pending = if let Some(grace) = pod_grace(info, &obj, opts) {
            // Graceful pod deletion: only ever shorten an existing grace period.
            let current = obj.pointer("/metadata/deletionGracePeriodSeconds").and_then(Value::as_i64);
            if object::is_terminating(&obj) && current.is_some_and(|c| c <= grace) {
                return Ok(Outcome::Pending(obj));
            }
            let at = chrono::Utc::now() + chrono::Duration::seconds(grace);
            object::set_meta(&mut marked, "deletionTimestamp", json!(rkube_api::time::format_rfc3339(at)));
            object::set_meta(&mut marked, "deletionGracePeriodSeconds", json!(grace));
            true
        } else if !object::finalizers(&obj).is_empty() || info.kind == "Namespace" {
            if object::is_terminating(&obj) && info.kind != "Namespace" {
                return Ok(Outcome::Pending(obj));
            }
            if !object::is_terminating(&obj) {
                object::set_meta(&mut marked, "deletionTimestamp", json!(rkube_api::time::now_rfc3339()));
                object::set_meta(&mut marked, "deletionGracePeriodSeconds", json!(0));
            }
            if info.kind == "Namespace" {
                if let Some(m) = marked.as_object_mut() {
                    let status = m.entry("status").or_insert_with(|| json!({}));
                    if let Some(s) = status.as_object_mut() {
                        s.insert("phase".into(), json!("Terminating"));
                    }
                }
            }
            !object::finalizers(&obj).is_empty() || info.kind == "Namespace"
        } else {
            false
        };
        if opts.dry_run {
            return Ok(if pending { Outcome::Pending(marked) } else { Outcome::Deleted(obj) });
        }
        if pending {
            if object::same_ignoring_rv(&obj, &marked) {
                return Ok(Outcome::Pending(obj));
            }
            let bytes = encode_stored(info, &marked)?;
            match ctx.st.storage.update(&key, bytes, kv.mod_revision).await {
                Ok(kv) => {
                    set_resource_version(&mut marked, kv.mod_revision);
                    return Ok(Outcome::Pending(marked));
                }
                Err(StorageError::Conflict { .. }) => continue,
                Err(e) => return Err(ApiError::from_storage(e, info, name)),
            }
        }
        match ctx.st.storage.delete(&key, Some(kv.mod_revision)).await {
            Ok((_, rev)) => {
                let mut last = obj;
                set_resource_version(&mut last, rev);
                return Ok(Outcome::Deleted(last));
            }
            Err(StorageError::Conflict { .. }) => continue,
            Err(StorageError::NotFound { .. }) => return Err(ApiError::not_found(info, name)),
            Err(e) => return Err(ApiError::from_storage(e, info, name)),
        }
    }
    Err(ApiError::stale(info, name))
}

/// The grace period of a graceful pod deletion, or `None` for an immediate
/// delete (not a pod, unbound, finished, or grace 0) — upstream
/// `podStrategy.CheckGracefulDelete`.
fn pod_grace(info: &ResourceInfo, obj: &Value, opts: &DeleteOptions) -> Option<i64> {
    if info.kind != "Pod" {
        return None;
    }
    let node = obj.pointer("/spec/nodeName").and_then(Value::as_str).unwrap_or("");
    let phase = obj.pointer("/status/phase").and_then(Value::as_str).unwrap_or("");
    if node.is_empty() || phase == "Succeeded" || phase == "Failed" {
        return None;
    }
    let grace = opts
        .grace_period_seconds
        .or_else(|| obj.pointer("/spec/terminationGracePeriodSeconds").and_then(Value::as_i64))
        .unwrap_or(30);
    (grace > 0).then_some(grace)
}

/// DELETE one object.
pub async fn delete(ctx: &Ctx, body: &[u8]) -> ApiResult<Response> {
    let info = ctx.ri.info;
    let name = ctx.name().to_string();
    let opts = parse_options(ctx, body)?;
    trace::step(steps::DELETE_OPTIONS);
    trace::step(steps::DELETE_START);
    let outcome = delete_one(ctx, info, ctx.namespace(), &name, &opts).await?;
    let outcome = if info.kind == "Namespace" && !opts.dry_run {
        finish_namespace(ctx, &name).await?.unwrap_or(outcome)
    } else {
        outcome
    };
    trace::step(steps::DELETED);
    trace::step(steps::ABOUT_TO_WRITE);
    let (code, obj) = match outcome {
        Outcome::Deleted(o) => (200, o),
        Outcome::Pending(o) => (202, o),
    };
    if returns_deleted_object(info) || code == 202 {
        return Ok(render::object(info, ctx.render, code, &obj, &[]));
    }
    let mut s = Status::success();
    s.code = 0;
    s.details = Some(StatusDetails {
        name,
        group: info.group.to_string(),
        kind: info.resource.to_string(),
        uid: object::meta_str(&obj, "uid").to_string(),
        ..StatusDetails::default()
    });
    Ok(media::respond(200, ctx.render.output, &s.to_json()))
}

/// Deletes everything in namespace `ns`, then the namespace when nothing is
/// left. Returns the namespace's deletion outcome when it was removed.
async fn finish_namespace(ctx: &Ctx, ns: &str) -> ApiResult<Option<Outcome>> {
    let opts = DeleteOptions::default();
    let mut remaining = 0usize;
    for info in registry::stored().filter(|r| r.namespaced) {
        let prefix = info.list_prefix(ctx.st.prefix(), Some(ns));
        let resp = ctx
            .st
            .storage
            .range(RangeRequest::prefix(&prefix))
            .await
            .map_err(|e| ApiError::from_storage(e, info, ""))?;
        for kv in resp.kvs {
            let name = kv.key.rsplit('/').next().unwrap_or("").to_string();
            let mut pod_opts = opts.clone();
            if info.kind == "Pod" {
                pod_opts.grace_period_seconds = Some(0);
            }
            match delete_one(ctx, info, ns, &name, &pod_opts).await {
                Ok(Outcome::Deleted(_)) => {}
                Ok(Outcome::Pending(_)) => remaining += 1,
                Err(e) if e.code() == 404 => {}
                Err(e) => return Err(e),
            }
        }
    }
    if remaining > 0 {
        spawn_namespace_finalizer(ctx, ns);
        return Ok(None);
    }
    remove_namespace(ctx, ns).await
}

async fn remove_namespace(ctx: &Ctx, ns: &str) -> ApiResult<Option<Outcome>> {
    let ns_info = ctx.ri.info;
    let key = ns_info.object_key(ctx.st.prefix(), "", ns);
    let Some((obj, kv)) = ctx.load(&key, ns).await? else { return Ok(None) };
    if !object::finalizers(&obj).is_empty() {
        return Ok(None);
    }
    match ctx.st.storage.delete(&key, Some(kv.mod_revision)).await {
        Ok((_, rev)) => {
            let mut last = obj;
            set_resource_version(&mut last, rev);
            Ok(Some(Outcome::Deleted(last)))
        }
        Err(StorageError::NotFound { .. }) | Err(StorageError::Conflict { .. }) => Ok(None),
        Err(e) => Err(ApiError::from_storage(e, ns_info, ns)),
    }
}

/// Keeps retrying the cascade in the background until the namespace is gone
/// (objects held by finalizers disappear when their finalizers are removed).
fn spawn_namespace_finalizer(ctx: &Ctx, ns: &str) {
    let ctx2 = Ctx {
        st: ctx.st.clone(),
        ri: ctx.ri.clone(),
        query: Vec::new(),
        raw_query: String::new(),
        headers: Default::default(),
        render: ctx.render,
        user: ctx.user.clone(),
    };
    let ns = ns.to_string();
    tokio::spawn(async move {
        for _ in 0..3600 {
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            match Box::pin(finish_namespace_once(&ctx2, &ns)).await {
                Ok(true) => return,
                Ok(false) => continue,
                Err(e) => tracing::warn!(namespace = %ns, error = %e, "namespace cleanup failed"),
            }
        }
    });
}

async fn finish_namespace_once(ctx: &Ctx, ns: &str) -> ApiResult<bool> {
    let key = ctx.ri.info.object_key(ctx.st.prefix(), "", ns);
    if ctx.load(&key, ns).await?.is_none() {
        return Ok(true);
    }
    for info in registry::stored().filter(|r| r.namespaced) {
        let prefix = info.list_prefix(ctx.st.prefix(), Some(ns));
        let resp = ctx
            .st
            .storage
            .range(RangeRequest { count_only: true, ..RangeRequest::prefix(&prefix) })
            .await
            .map_err(|e| ApiError::from_storage(e, info, ""))?;
        if resp.count > 0 {
            return Ok(false);
        }
    }
    Ok(remove_namespace(ctx, ns).await?.is_some())
}

/// DELETE a collection: every object matching the selectors, each with the
/// single-delete semantics; answers the list of deleted (or marked) objects.
pub async fn delete_collection(ctx: &Ctx, body: &[u8]) -> ApiResult<Response> {
    let info = ctx.ri.info;
    let opts = parse_options(ctx, body)?;
    trace::step(steps::DELETE_OPTIONS);
    // Everything the selectors match now (a consistent read, whatever the
    // request's resourceVersion or limit), each deleted as a single DELETE.
    let mut list_opts = super::read::list_options(ctx)?;
    list_opts.resource_version = None;
    list_opts.resource_version_match = None;
    list_opts.limit = 0;
    list_opts.continue_token = None;
    let page = ctx.st.cache.list(info, ctx.ri.namespace.as_deref(), &list_opts).await?;
    trace::step_with(steps::LIST_DONE, trace::count(page.items.len()));
    let mut items = Vec::new();
    for obj in &page.items {
        let ns = obj.namespace.as_deref().unwrap_or("");
        match delete_one(ctx, info, ns, &obj.name, &opts).await {
            Ok(Outcome::Deleted(o)) | Ok(Outcome::Pending(o)) => items.push(o),
            Err(e) if e.code() == 404 => {}
            Err(e) => return Err(e),
        }
    }
    trace::step_with(steps::DELETED, trace::count(items.len()));
    let mut meta = Map::new();
    meta.insert("resourceVersion".into(), json!(page.resource_version.to_string()));
    trace::step(steps::ABOUT_TO_WRITE);
    Ok(render::list(info, ctx.render, items, meta))
}
