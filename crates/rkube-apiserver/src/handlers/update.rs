//! PUT, PATCH and `pods/binding` through one read-modify-write loop, like
//! upstream's `GuaranteedUpdate` (`storage/etcd3/store.go`): read the latest
//! object, compute the new one, write guarded by the read `mod_revision`, and
//! start over (a few times) when another writer got in between. A client that
//! named a `resourceVersion` gets 409 `Conflict` instead of a retry.
//!
//! - The main resource of a kind with a `status` subresource ignores status
//!   changes; `<resource>/status` changes only status.
//! - `metadata.uid`, `creationTimestamp`, deletion fields and `generation`
//!   are the server's; `generation` is bumped when the spec changes.
//! - A no-op update writes nothing and keeps the resourceVersion.
//! - An update that removes the last finalizer of an object being deleted
//!   deletes it.
//! - A PUT of a missing object creates it (201) when the resource allows
//!   create on update ([`ResourceInfo::allow_create_on_update`]); otherwise 404.

use axum::response::Response;
use rkube_api::field_error::FieldError;
use rkube_api::registry::ResourceInfo;
use rkube_api::status::{Status, StatusDetails};
use rkube_storage::{KeyValue, StorageError};
use serde_json::{json, Value};

use super::create::{prepare_new, NewManaged, NewObject};
use super::write::{assign_cluster_ip, assign_node_ports, check_namespace, check_type_meta, encode_stored};
use super::Ctx;
use crate::error::{ApiError, ApiResult};
use crate::filters::trace::{self, steps};
use crate::media;
use crate::object;
use crate::render;
use crate::source::set_resource_version;
use crate::validate::{self, FieldValidation};

/// Attempts of the read-modify-write loop before giving up with 409.
pub(super) const MAX_ATTEMPTS: usize = 5;

/// The kinds of patch (by `Content-Type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchKind {
    /// `application/json-patch+json` (RFC 6902).
    Json,
    /// `application/merge-patch+json` (RFC 7396).
    Merge,
    /// `application/strategic-merge-patch+json`.
    StrategicMerge,
    /// `application/apply-patch+yaml` (server-side apply).
    Apply,
}

impl From<PatchKind> for crate::patch::PatchType {
    fn from(k: PatchKind) -> Self {
        match k {
            PatchKind::Json => crate::patch::PatchType::Json,
            PatchKind::Merge => crate::patch::PatchType::Merge,
            PatchKind::StrategicMerge => crate::patch::PatchType::StrategicMerge,
            PatchKind::Apply => crate::patch::PatchType::Apply,
        }
    }
}

/// Patch media types accepted.
const PATCH_TYPES: &[&str] = &[
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
    "application/apply-patch+yaml",
];

pub(super) fn patch_kind(content_type: &str) -> ApiResult<PatchKind> {
    match content_type {
        "application/json-patch+json" => Ok(PatchKind::Json),
        "application/merge-patch+json" => Ok(PatchKind::Merge),
        "application/strategic-merge-patch+json" => Ok(PatchKind::StrategicMerge),
        "application/apply-patch+yaml" => Ok(PatchKind::Apply),
        other => Err(ApiError::unsupported_media_type(other, PATCH_TYPES)),
    }
}

/// Which part of an object a request may change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    /// Everything (kinds without a status subresource).
    All,
    /// Everything but `status` (main resource of a kind with a status subresource).
    WithoutStatus,
    /// Only the value at this JSON pointer: the subresource's
    /// [`rkube_api::registry::SubresourceInfo::updates`] (`/status` for
    /// `status`, `/spec/finalizers` for `namespaces/finalize`,
    /// `/status/conditions` for `certificatesigningrequests/approval`,
    /// `/spec/ephemeralContainers` for `pods/ephemeralcontainers`; upstream's
    /// subresource strategies' `PrepareForUpdate`).
    Only(&'static str),
}

/// What a request may change of the stored object.
fn part(ctx: &Ctx) -> Part {
    let info = ctx.ri.info;
    match ctx.ri.subresource.as_deref().and_then(|s| info.subresource(s)) {
        Some(sub) if !sub.updates.is_empty() => Part::Only(sub.updates),
        _ if info.has_status_subresource() => Part::WithoutStatus,
        _ => Part::All,
    }
}

/// Sets the value at `pointer` in `dst` to the one in `src` (removing it
/// when `src` has none); creates parent objects as needed.
fn copy_at(dst: &mut Value, src: &Value, pointer: &str) {
    let parts: Vec<&str> = pointer.trim_start_matches('/').split('/').collect();
    let Some((last, parents)) = parts.split_last() else { return };
    let mut cur = dst;
    for p in parents {
        if !cur.get(*p).is_some_and(Value::is_object) {
            if let Some(m) = cur.as_object_mut() {
                m.insert((*p).to_string(), json!({}));
            }
        }
        match cur.get_mut(*p) {
            Some(next) => cur = next,
            None => return,
        }
    }
    if let Some(m) = cur.as_object_mut() {
        match src.pointer(pointer) {
            Some(v) => m.insert((*last).to_string(), v.clone()),
            None => m.remove(*last),
        };
    }
}

/// How managedFields are recorded for an update.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Managed {
    /// Record an `Update` by the request's manager.
    Update,
    /// Already recorded (server-side apply did it).
    AlreadyRecorded,
}

/// Turns `new` (what the client wants, based on `old`) into the object to store.
async fn prepare_update(
    ctx: &Ctx,
    old: &std::sync::Arc<Value>,
    mut new: Value,
    managed_mode: Managed,
    keys: Option<&crate::strict::KeyScan>,
) -> ApiResult<(Value, Vec<String>)> {
    let info = ctx.ri.info;
    check_type_meta(&ctx.st, info, info.kind, &mut new).await?;
    let path_name = ctx.name();
    match object::name(&new) {
        "" => object::set_meta(&mut new, "name", json!(path_name)),
        n if n != path_name => {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({n}) does not match the name on the URL ({path_name})"
            )))
        }
        _ => {}
    }
    check_namespace(ctx, &mut new)?;
    let mode = FieldValidation::parse(ctx.q("fieldValidation"))?;
    let warnings = validate::check_typed_body(info, &mut new, mode, keys)?;
    crate::config_data::merge_string_data(info.kind, &mut new);
    let part = part(ctx);
    match part {
        Part::Only(pointer) => {
            // Only that part (and the resourceVersion precondition) come from the request.
            let mut merged = Value::clone(old);
            copy_at(&mut merged, &new, pointer);
            if let Some(mf) = new.pointer("/metadata/managedFields").cloned() {
                object::set_meta(&mut merged, "managedFields", mf);
            }
            new = merged;
        }
        Part::WithoutStatus => {
            if let Some(m) = new.as_object_mut() {
                match old.get("status") {
                    Some(s) => m.insert("status".into(), s.clone()),
                    None => m.remove("status"),
                };
            }
        }
        Part::All => {}
    }
    if crate::csr::is_csr(info) {
        crate::csr::prepare_for_request(ctx, old, &mut new)?;
    }
    object::keep_immutable_meta(old, &mut new);
    if new.pointer("/metadata/managedFields").is_none() {
        if let Some(mf) = old.pointer("/metadata/managedFields").cloned() {
            object::set_meta(&mut new, "managedFields", mf);
        }
    }
    info.strategy.apply_defaults(&mut new);
    let subresource_write = matches!(part, Part::Only(_));
    if info.kind == "Service" && !subresource_write {
        assign_cluster_ip(ctx, &mut new, Some(old)).await?;
        assign_node_ports(ctx, &mut new, Some(old)).await?;
    }
    if !subresource_write {
        object::bump_generation(old, &mut new, info.has_spec);
        info.strategy.prepare_update(&mut new, old);
    }
    if managed_mode == Managed::Update {
        let manager = ctx.field_manager()?;
        let now = rkube_api::time::now_rfc3339();
        let api_version = info.api_version();
        let subresource = ctx.ri.subresource.as_deref().unwrap_or("");
        let rec = crate::patch::UpdateRecord { manager: &manager, api_version: &api_version, subresource, now: &now };
        crate::patch::record_update(&rec, Some(old), &mut new);
    }
    let mut attrs = crate::admission::webhook::Attributes::for_write(ctx, "UPDATE", &new, Some(old.clone()))?;
    let redefault = |o: &mut Value| info.strategy.apply_defaults(o);
    let mut warnings = warnings;
    warnings.extend(crate::admission::webhook::mutate(&ctx.st, &mut attrs, &mut new, &redefault).await?);
    let sub_validate = ctx.ri.subresource.as_deref().and_then(|s| info.subresource(s)).and_then(|s| s.validate_update);
    let causes = validate::validate_with(info, sub_validate, &new, Some(old));
    if !causes.is_empty() {
        return Err(ApiError::invalid(info, object::name(&new), causes));
    }
    warnings.extend((info.strategy.warnings)(&new, Some(old)));
    crate::filters::escalation::confirm(info.group, info.kind, &new, Some(old)).await?;
    crate::admission::cluster_trust_bundle_attest::admit(ctx, &new, Some(old)).await?;
    if crate::csr::is_csr(info) {
        crate::csr::admit_update(ctx, old, &new).await?;
    }
    attrs.object = Some(new);
    let validated = crate::admission::webhook::validate(&ctx.st, &attrs).await;
    let new = attrs.object.take().unwrap_or_default();
    warnings.extend(validated?);
    if ctx.st.config.admission.resource_quota && ctx.ri.subresource.is_none() {
        let dry_run = ctx.dry_run()?;
        let name = object::name(&new).to_string();
        crate::admission::resource_quota::admit(&ctx.st, info, ctx.namespace(), &name, &new, Some(old), dry_run).await?;
    }
    Ok((new, warnings))
}

/// Result of one guarded write attempt.
pub(super) enum Commit {
    /// Done: the object to return, and when it was written, the bytes
    /// stored for it and their revision (a JSON answer splices them:
    /// [`render::stored_object`]).
    Done(Value, Option<(bytes::Bytes, i64)>),
    /// Nothing to write: the new object is the stored one (the caller
    /// answers with the stored object, as upstream answers a no-op update).
    Unchanged,
    /// Another writer won; read again.
    Retry,
}

/// Writes `new` over `old` (read at `kv`), guarded by its mod_revision.
pub(super) async fn commit(
    ctx: &Ctx,
    key: &str,
    old: &Value,
    kv: &KeyValue,
    mut new: Value,
    dry_run: bool,
) -> ApiResult<Commit> {
    let info = ctx.ri.info;
    let name = object::name(&new).to_string();
    if object::same_ignoring_rv(old, &new) {
        return Ok(Commit::Unchanged);
    }
    let grace = new.pointer("/metadata/deletionGracePeriodSeconds").and_then(Value::as_i64).unwrap_or(0);
    // An object with a lifecycle also waits for its spec to let it go (a
    // namespace's `spec.finalizers`, emptied through `finalize`), as
    // upstream's `ShouldDeleteNamespaceDuringUpdate`.
    let spec_held = info.strategy.delete.lifecycle.is_some_and(|l| (l.held)(&new));
    let deletes = object::is_terminating(&new) && object::finalizers(&new).is_empty() && grace == 0 && !spec_held;
    if dry_run {
        // Refused as the write would refuse it (a delete stores nothing).
        if !deletes {
            super::write::stored_nesting(crate::patch::json::nesting_depth(&new), Some(old))?;
        }
        return Ok(Commit::Done(new, None));
    }
    if deletes {
        return match ctx.st.storage.delete(key, Some(kv.mod_revision)).await {
            Ok((_, rev)) => {
                set_resource_version(&mut new, rev);
                Ok(Commit::Done(new, None))
            }
            Err(StorageError::Conflict { .. }) => Ok(Commit::Retry),
            Err(e) => Err(ApiError::from_storage(e, info, &name)),
        };
    }
    let (bytes, nesting) = encode_stored(&ctx.st, info, &new).await?;
    super::write::stored_nesting(nesting, Some(old))?;
    match ctx.st.storage.update(key, bytes.clone(), kv.mod_revision).await {
        Ok(kv) => {
            set_resource_version(&mut new, kv.mod_revision);
            Ok(Commit::Done(new, Some((bytes, kv.mod_revision))))
        }
        Err(StorageError::Conflict { .. }) => Ok(Commit::Retry),
        Err(e) => Err(ApiError::from_storage(e, info, &name)),
    }
}

/// The resourceVersion a client asked to update from (`None` = unconditional).
fn requested_rv(obj: &Value) -> ApiResult<Option<i64>> {
    match object::meta_str(obj, "resourceVersion") {
        "" => Ok(None),
        rv => {
            rv.parse::<i64>().map(Some).map_err(|_| ApiError::bad_request(format!("invalid resourceVersion: {rv:?}")))
        }
    }
}

/// PUT an object (or its status).
pub async fn update(ctx: &Ctx, body: &[u8]) -> ApiResult<Response> {
    let info = ctx.ri.info;
    let name = ctx.name().to_string();
    let key = ctx.key(&name);
    trace::step(steps::CONVERT_START);
    let content_type = media::content_type(&ctx.headers);
    let (body_obj, keys) = media::decode_body(&content_type, body)?;
    trace::step(steps::CONVERT_DONE);
    let want_rv = requested_rv(&body_obj)?;
    let dry_run = ctx.dry_run()?;
    trace::step(steps::STORE_START);
    // The decoded body, taken by the first attempt; a retry (another writer
    // won) decodes it again rather than every attempt copying it.
    let mut decoded = Some((body_obj, keys));
    for _ in 0..MAX_ATTEMPTS {
        let (body_obj, keys) = match decoded.take() {
            Some(d) => d,
            None => media::decode_body(&content_type, body)?,
        };
        let Some((old, kv)) = ctx.load(&key, &name).await? else {
            trace::step(steps::READ_CURRENT);
            if !info.allow_create_on_update || ctx.ri.subresource.is_some() {
                return Err(ApiError::not_found(info, &name));
            }
            match create_on_update(ctx, &key, &name, body_obj, keys, dry_run).await? {
                Some(resp) => return Ok(resp),
                None => continue,
            }
        };
        trace::step(steps::READ_CURRENT);
        if let Some(rv) = want_rv {
            if rv != kv.mod_revision {
                return Err(ApiError::stale(info, &name));
            }
        }
        let (new, warnings) = prepare_update(ctx, &old, body_obj, Managed::Update, keys.as_ref()).await?;
        trace::step(steps::ADMISSION_DONE);
        let committed = commit(ctx, &key, &old, &kv, new, dry_run).await?;
        trace::step(steps::STORED);
        match committed {
            Commit::Done(obj, stored) => return Ok(written_done(ctx, &key, obj, stored, &warnings)),
            Commit::Unchanged => {
                let stored = Some((kv.value.clone(), kv.mod_revision));
                return Ok(written_stored(info, ctx, &old, stored, false, &warnings));
            }
            Commit::Retry if want_rv.is_some() => return Err(ApiError::stale(info, &name)),
            Commit::Retry => continue,
        }
    }
    Err(ApiError::stale(info, &name))
}

/// PUT of a missing object of a resource whose strategy allows create on
/// update (upstream `Store.Update` with `AllowCreateOnUpdate()`): the body goes
/// through the create path and answers 201. A `resourceVersion` in the body is
/// ignored like upstream does (there is nothing to compare it with). `None`
/// when another writer created the object meanwhile (the caller reads again
/// and updates it).
async fn create_on_update(
    ctx: &Ctx,
    key: &str,
    name: &str,
    mut body_obj: Value,
    keys: Option<crate::strict::KeyScan>,
    dry_run: bool,
) -> ApiResult<Option<Response>> {
    let info = ctx.ri.info;
    match object::name(&body_obj) {
        "" => object::set_meta(&mut body_obj, "name", json!(name)),
        n if n != name => {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({n}) does not match the name on the URL ({name})"
            )))
        }
        _ => {}
    }
    let mut prepared = prepare_new(ctx, NewObject { obj: body_obj, managed: NewManaged::Update, keys }).await?;
    trace::step(steps::ADMISSION_DONE);
    if dry_run {
        return prepared.dry_run_answer(ctx, 201).map(Some);
    }
    let bytes = prepared.encode(ctx).await?;
    match ctx.st.storage.create(key, bytes.clone()).await {
        Ok(kv) => {
            trace::step(steps::STORED);
            Ok(Some(prepared.answer(ctx, key, 201, bytes, kv.mod_revision)))
        }
        Err(StorageError::AlreadyExists { .. }) => Ok(None),
        Err(e) => Err(ApiError::from_storage(e, info, name)),
    }
}

/// PATCH an object (or its status); server-side apply may create it.
pub async fn patch(ctx: &Ctx, body: &[u8]) -> ApiResult<Response> {
    let info = ctx.ri.info;
    let name = ctx.name().to_string();
    let key = ctx.key(&name);
    let kind = patch_kind(&media::content_type(&ctx.headers))?;
    let force = match ctx.q("force") {
        None | Some("") | Some("false") => false,
        Some("true") => true,
        Some(other) => return Err(ApiError::bad_request(format!("invalid force value: {other:?}"))),
    };
    let manager_param = ctx.q("fieldManager").unwrap_or("").to_string();
    if kind == PatchKind::Apply && manager_param.is_empty() {
        return Err(patch_options_invalid(
            "fieldManager",
            FieldError::required("fieldManager", "is required for apply patch"),
        ));
    }
    if kind != PatchKind::Apply && force {
        return Err(patch_options_invalid(
            "force",
            FieldError::forbidden("force", "may not be specified for non-apply patch"),
        ));
    }
    let manager = ctx.field_manager()?;
    let dry_run = ctx.dry_run()?;
    trace::step(steps::PATCH_START);
    for _ in 0..MAX_ATTEMPTS {
        let current = ctx.load(&key, &name).await?;
        trace::step(steps::READ_CURRENT);
        let Some((old, kv)) = current else {
            if kind != PatchKind::Apply {
                return Err(ApiError::not_found(info, &name));
            }
            let (applied, entries) = apply_create(info, body, &manager, force)?;
            trace::step(steps::PATCH_APPLIED);
            let new = NewObject { obj: applied, managed: NewManaged::Apply(entries), keys: None };
            let mut prepared = prepare_new(ctx, new).await?;
            trace::step(steps::ADMISSION_DONE);
            let named = object::name(prepared.object_but_managed_fields());
            if named != name {
                return Err(ApiError::bad_request(format!(
                    "the name of the object ({named}) does not match the name on the URL ({name})"
                )));
            }
            if dry_run {
                return prepared.dry_run_answer(ctx, 201);
            }
            let bytes = prepared.encode(ctx).await?;
            match ctx.st.storage.create(&key, bytes.clone()).await {
                Ok(kv) => {
                    trace::step(steps::STORED);
                    return Ok(prepared.answer(ctx, &key, 201, bytes, kv.mod_revision));
                }
                Err(StorageError::AlreadyExists { .. }) => continue,
                Err(e) => return Err(ApiError::from_storage(e, info, &name)),
            }
        };
        let patched = apply_patch(info, kind, Some(&old), body, &manager, force)?;
        trace::step(steps::PATCH_APPLIED);
        let want_rv = requested_rv(&patched)?;
        if let Some(rv) = want_rv {
            if rv != kv.mod_revision {
                return Err(ApiError::stale(info, &name));
            }
        }
        let mode = if kind == PatchKind::Apply { Managed::AlreadyRecorded } else { Managed::Update };
        let (new, warnings) = prepare_update(ctx, &old, patched, mode, None).await?;
        trace::step(steps::ADMISSION_DONE);
        // A resourceVersion in the patch itself is a precondition; the one carried over is not.
        let explicit_rv = patch_names_rv(kind, body);
        let committed = commit(ctx, &key, &old, &kv, new, dry_run).await?;
        trace::step(steps::STORED);
        match committed {
            Commit::Done(obj, stored) => return Ok(written_done(ctx, &key, obj, stored, &warnings)),
            Commit::Unchanged => {
                let stored = Some((kv.value.clone(), kv.mod_revision));
                return Ok(written_stored(info, ctx, &old, stored, false, &warnings));
            }
            Commit::Retry if explicit_rv => return Err(ApiError::stale(info, &name)),
            Commit::Retry => continue,
        }
    }
    Err(ApiError::stale(info, &name))
}

/// The response of a write that succeeded (after the `ABOUT_TO_WRITE` trace step).
fn written(info: &ResourceInfo, ctx: &Ctx, code: u16, obj: &Value, warnings: &[String]) -> Response {
    trace::step(steps::ABOUT_TO_WRITE);
    render::object(info, ctx.render, code, obj, warnings)
}

/// The 200 answer of an update or patch: `obj`, answered as `stored` (its
/// storage bytes and revision) when given: the bytes just written
/// (`fresh`), or for a write that changed nothing the bytes already stored
/// ([`render::Stored`]); `None` for a dry run.
fn written_stored(
    info: &ResourceInfo,
    ctx: &Ctx,
    obj: &Value,
    stored: Option<(bytes::Bytes, i64)>,
    fresh: bool,
    warnings: &[String],
) -> Response {
    match stored {
        Some((bytes, revision)) => {
            trace::step(steps::ABOUT_TO_WRITE);
            let stored = match fresh {
                true => render::Stored::Written(&bytes),
                false => render::Stored::ReadBack(&bytes),
            };
            render::stored_object(info, ctx.render, 200, obj, stored, revision, warnings)
        }
        None => written(info, ctx, 200, obj, warnings),
    }
}

/// The answer of a committed update or patch ([`written_stored`]); the
/// object written is then kept decoded for the next update of the key
/// ([`Ctx::remember_written`]).
fn written_done(ctx: &Ctx, key: &str, obj: Value, stored: Option<(bytes::Bytes, i64)>, warnings: &[String]) -> Response {
    let resp = written_stored(ctx.ri.info, ctx, &obj, stored.clone(), true, warnings);
    if let Some((bytes, revision)) = stored {
        ctx.remember_written(key, obj, bytes, revision);
    }
    resp
}

/// True when the patch body itself mentions a resourceVersion.
fn patch_names_rv(kind: PatchKind, body: &[u8]) -> bool {
    kind != PatchKind::Json && String::from_utf8_lossy(body).contains("resourceVersion")
}

/// 422 on `PatchOptions` (upstream `ValidatePatchOptions`).
fn patch_options_invalid(_field: &str, err: FieldError) -> ApiError {
    let cause: rkube_api::status::StatusCause = err.clone().into();
    let msg = format!("PatchOptions.meta.k8s.io \"\" is invalid: {err}");
    Status::new(422, "Invalid", msg)
        .with_details(StatusDetails {
            group: "meta.k8s.io".into(),
            kind: "PatchOptions".into(),
            causes: vec![cause],
            ..StatusDetails::default()
        })
        .into()
}

/// Applies a patch with the patch engine ([`crate::patch`]); its errors become Statuses.
fn apply_patch(
    info: &ResourceInfo,
    kind: PatchKind,
    original: Option<&Value>,
    body: &[u8],
    manager: &str,
    force: bool,
) -> ApiResult<Value> {
    let patch_type: crate::patch::PatchType = kind.into();
    let api_version = info.api_version();
    let now = rkube_api::time::now_rfc3339();
    crate::patch::apply_patch_at(info.kind, Some(&api_version), patch_type, original, body, manager, force, &now)
        .map_err(|e| ApiError::from(e.status()))
}

/// Server-side apply creating the object ([`crate::patch::apply_create_at`]):
/// the object and its managedFields entries, which [`prepare_new`] writes;
/// errors become Statuses.
fn apply_create(
    info: &ResourceInfo,
    body: &[u8],
    manager: &str,
    force: bool,
) -> ApiResult<(Value, crate::patch::UnwrittenEntries)> {
    let now = rkube_api::time::now_rfc3339();
    crate::patch::apply_create_at(info.kind, &info.api_version(), body, manager, force, &now)
        .map_err(|e| ApiError::from(e.status()))
}

/// POST `pods/<name>/binding`: sets `spec.nodeName` once (409 when already
/// bound or being deleted), adds the `PodScheduled` condition, answers 201
/// with a `Success` Status (upstream `BindingREST.Create`).
pub async fn binding(ctx: &Ctx, body: &[u8]) -> ApiResult<Response> {
    let info = ctx.ri.info;
    let name = ctx.name().to_string();
    let key = ctx.key(&name);
    trace::step(steps::CONVERT_START);
    let mut b = media::decode_object(&media::content_type(&ctx.headers), body)?;
    trace::step(steps::CONVERT_DONE);
    let binding_info = ResourceInfo { kind: "Binding", ..*info };
    check_type_meta(&ctx.st, &binding_info, "Binding", &mut b).await?;
    let body_ns = object::namespace(&b);
    if !body_ns.is_empty() && body_ns != ctx.namespace() {
        return Err(ApiError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        ));
    }
    let bname = object::name(&b);
    if !bname.is_empty() && bname != name {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({bname}) does not match the name on the URL ({name})"
        )));
    }
    let target_kind = b.pointer("/target/kind").and_then(Value::as_str).unwrap_or("");
    let node = b.pointer("/target/name").and_then(Value::as_str).unwrap_or("").to_string();
    if !target_kind.is_empty() && target_kind != "Node" {
        let causes = vec![FieldError::not_supported("target.kind", target_kind, &["Node", "<empty>"]).into()];
        return Err(ApiError::invalid(&binding_info, &name, causes));
    }
    if node.is_empty() {
        return Err(ApiError::invalid(&binding_info, &name, vec![FieldError::required("target.name", "").into()]));
    }
    let binding_conflict = |why: String| -> ApiError { Status::conflict("", "pods/binding", &name, why).into() };
    let dry_run = ctx.dry_run()?;
    trace::step(steps::STORE_START);
    for _ in 0..MAX_ATTEMPTS {
        let Some((old, kv)) = ctx.load(&key, &name).await? else {
            return Err(ApiError::not_found(info, &name));
        };
        trace::step(steps::READ_CURRENT);
        if object::is_terminating(&old) {
            return Err(binding_conflict(format!("pod {name} is being deleted, cannot be assigned to a host")));
        }
        let current = old.pointer("/spec/nodeName").and_then(Value::as_str).unwrap_or("");
        if !current.is_empty() {
            return Err(binding_conflict(format!("pod {name} is already assigned to node {current:?}")));
        }
        let mut new = Value::clone(&old);
        if let Some(spec) = new.get_mut("spec").and_then(Value::as_object_mut) {
            spec.insert("nodeName".into(), json!(node));
        }
        let status =
            new.as_object_mut().map(|m| m.entry("status").or_insert_with(|| json!({}))).and_then(Value::as_object_mut);
        if let Some(status) = status {
            let conds = status.entry("conditions").or_insert_with(|| json!([]));
            if let Some(list) = conds.as_array_mut() {
                list.retain(|c| c.get("type").and_then(Value::as_str) != Some("PodScheduled"));
                list.push(json!({
                    "type": "PodScheduled",
                    "status": "True",
                    "lastProbeTime": null,
                    "lastTransitionTime": rkube_api::time::now_rfc3339(),
                }));
            }
        }
        let committed = commit(ctx, &key, &old, &kv, new, dry_run).await?;
        trace::step(steps::STORED);
        match committed {
            Commit::Done(..) | Commit::Unchanged => {
                trace::step(steps::ABOUT_TO_WRITE);
                let mut s = Status::success();
                s.code = 201;
                return Ok(media::respond(201, ctx.render.output, &s.to_json()));
            }
            Commit::Retry => continue,
        }
    }
    Err(ApiError::stale(info, &name))
}
