//! DELETE and DELETE-collection (upstream `Store.Delete`,
//! `BeforeDelete`, `handlers/delete.go`).
//!
//! - `DeleteOptions` come from the body (JSON or YAML) or the query
//!   (`gracePeriodSeconds`, `propagationPolicy`, `dryRun`); preconditions on
//!   `uid` / `resourceVersion` that do not hold are 409 `Conflict`.
//! - An object with finalizers is marked (`deletionTimestamp`,
//!   `deletionGracePeriodSeconds: 0`) and kept; the update that removes its
//!   last finalizer deletes it.
//! - What else a DELETE does comes from the row's strategy
//!   ([`rkube_api::strategy::DeleteRules`]): graceful deletion (pods bound to
//!   a node are marked with `deletionTimestamp = now + grace` and kept until
//!   a delete with grace 0, the node agent's) and a lifecycle (namespaces are
//!   marked `Terminating` and kept until the `finalize` subresource has
//!   emptied `spec.finalizers`; `default`, `kube-system` and `kube-public`
//!   cannot be deleted: 403, as upstream's `NamespaceLifecycle`).
//! - `propagationPolicy: Orphan` / `orphanDependents: true` add the `orphan`
//!   finalizer and `Foreground` adds `foregroundDeletion` (the object is then
//!   marked, not removed) for the garbage collector, as upstream's
//!   `deletionFinalizersForGarbageCollection`.
//! - The answer (upstream `handlers/delete.go` and `Store.Delete`): an
//!   object that was only marked is answered with itself; a removed one with
//!   itself when the row says so ([`ResourceInfo::return_deleted_object`],
//!   upstream `ReturnDeletedObject`), else with a `Success` Status naming
//!   it. The code is 200, except 202 for an object only marked by a request
//!   with `orphanDependents: false`.

use axum::response::Response;
use rkube_api::registry::ResourceInfo;
use rkube_api::status::{Status, StatusDetails};
use rkube_storage::StorageError;
use serde_json::{json, Map, Value};

use super::write::encode_stored;
use super::{Ctx, Keep};
use crate::error::{ApiError, ApiResult};
use crate::filters::trace::{self, steps};
use crate::media;
use crate::object;
use crate::render;
use crate::source::set_resource_version;

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
    /// The deprecated `orphanDependents`, as given (it also sets
    /// `propagation_policy`); `Some(false)` makes a pending delete answer 202.
    pub orphan_dependents: Option<bool>,
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
    let mut orphan_dependents = None;
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
        orphan_dependents = v.get("orphanDependents").and_then(Value::as_bool);
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
    if let Some(orphan) = orphan_dependents {
        if let Some(p) = &o.propagation_policy {
            // Upstream `ValidateDeleteOptions`.
            let cause = rkube_api::field_error::FieldError::invalid(
                "propagationPolicy",
                p,
                "orphanDependents and deletionPropagation cannot be both set",
            );
            return Err(invalid_delete_options(cause));
        }
        // The deprecated `orphanDependents` means Orphan (true) or no
        // orphaning (false).
        o.orphan_dependents = Some(orphan);
        o.propagation_policy = Some(if orphan { "Orphan" } else { "Background" }.into());
    }
    if let Some(p) = &o.propagation_policy {
        if !matches!(p.as_str(), "Orphan" | "Background" | "Foreground") {
            let cause = rkube_api::field_error::FieldError::not_supported(
                "propagationPolicy",
                p,
                &["Foreground", "Background", "Orphan", "nil"],
            );
            return Err(invalid_delete_options(cause));
        }
    }
    if o.grace_period_seconds.is_some_and(|g| g < 0) {
        o.grace_period_seconds = Some(1);
    }
    Ok(o)
}

/// 422 `Invalid` for `DeleteOptions` with one cause.
fn invalid_delete_options(cause: rkube_api::field_error::FieldError) -> ApiError {
    Status::new(422, "Invalid", format!("DeleteOptions.meta.k8s.io \"\" is invalid: {cause}"))
        .with_details(StatusDetails {
            group: "meta.k8s.io".into(),
            kind: "DeleteOptions".into(),
            causes: vec![cause.into()],
            ..StatusDetails::default()
        })
        .into()
}

/// What one delete did.
pub(super) enum Outcome {
    /// Removed from storage at `revision`: the object's last state, as
    /// read (its resourceVersion is the one it was stored at; the answer's
    /// is `revision`, [`Outcome::into_object`]).
    Deleted { last: std::sync::Arc<Value>, revision: i64 },
    /// Marked for deletion and kept (finalizers or graceful pod deletion).
    Pending(Value),
}

/// The object being marked: `marked`, or a copy of `obj` put there first.
fn mark<'a>(marked: &'a mut Option<Value>, obj: &Value) -> &'a mut Value {
    marked.get_or_insert_with(|| obj.clone())
}

impl Outcome {
    /// The object to answer with: a removed one with its resourceVersion
    /// set to the delete's revision (upstream's `conditionalDelete`
    /// decodes the last state at the delete's header revision).
    fn into_object(self) -> Value {
        match self {
            Outcome::Deleted { last, revision } => {
                let mut obj = std::sync::Arc::unwrap_or_clone(last);
                set_resource_version(&mut obj, revision);
                obj
            }
            Outcome::Pending(obj) => obj,
        }
    }
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
        // Shared, not copied: a large object is copied only to be marked.
        let Some((obj, kv)) = ctx.load_as(info, &key, name, Keep::Not).await? else {
            return Err(ApiError::not_found(info, name));
        };
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
        // Validating admission webhooks (upstream `deleteValidation`); an
        // eviction's delete is admitted as the eviction's CREATE instead.
        if ctx.ri.subresource.is_none() {
            let attrs = crate::admission::webhook::Attributes::for_delete(ctx, ns, name, &obj)?;
            crate::admission::webhook::validate(&ctx.st, &attrs).await?;
        }
        // The object as marked, copied at its first change.
        let mut marked: Option<Value> = None;
        let finalizers = gc_finalizers(&obj, opts);
        let finalizers_changed = finalizers != object::finalizers(&obj);
        if finalizers_changed {
            set_finalizers(mark(&mut marked, &obj), &finalizers);
        }
        let rules = info.strategy.delete;
        let pending = if let Some(grace) = rules.graceful.and_then(|f| f(&obj, opts.grace_period_seconds)) {
            // Graceful deletion: only ever shorten an existing grace period.
            let current = obj.pointer("/metadata/deletionGracePeriodSeconds").and_then(Value::as_i64);
            if object::is_terminating(&obj) && current.is_some_and(|c| c <= grace) && !finalizers_changed {
                return Ok(Outcome::Pending(Value::clone(&obj)));
            }
            if current.is_none_or(|c| c > grace) {
                let at = chrono::Utc::now() + chrono::Duration::seconds(grace);
                object::set_meta(mark(&mut marked, &obj), "deletionTimestamp", json!(rkube_api::time::format_rfc3339(at)));
                object::set_meta(mark(&mut marked, &obj), "deletionGracePeriodSeconds", json!(grace));
            }
            true
        } else if let Some(lifecycle) = rules.lifecycle {
            // The first DELETE only marks the object; once its spec let it
            // go, a DELETE removes it (when no metadata finalizer holds it).
            if object::is_terminating(&obj) && !(lifecycle.held)(&obj) && finalizers.is_empty() {
                false
            } else {
                if !object::is_terminating(&obj) {
                    object::set_meta(mark(&mut marked, &obj), "deletionTimestamp", json!(rkube_api::time::now_rfc3339()));
                    object::set_meta(mark(&mut marked, &obj), "deletionGracePeriodSeconds", json!(0));
                }
                (lifecycle.mark)(mark(&mut marked, &obj));
                true
            }
        } else if !finalizers.is_empty() {
            if object::is_terminating(&obj) && !finalizers_changed {
                return Ok(Outcome::Pending(Value::clone(&obj)));
            }
            if !object::is_terminating(&obj) {
                object::set_meta(mark(&mut marked, &obj), "deletionTimestamp", json!(rkube_api::time::now_rfc3339()));
                object::set_meta(mark(&mut marked, &obj), "deletionGracePeriodSeconds", json!(0));
            }
            true
        } else {
            false
        };
        if opts.dry_run {
            return Ok(match pending {
                true => Outcome::Pending(marked.unwrap_or_else(|| Value::clone(&obj))),
                false => Outcome::Deleted { last: obj, revision: kv.mod_revision },
            });
        }
        if pending {
            let mut marked = match marked {
                Some(m) if !object::same_ignoring_rv(&obj, &m) => m,
                // Nothing to mark: it is kept as it is.
                _ => return Ok(Outcome::Pending(Value::clone(&obj))),
            };
            // A deletion mark adds shallow fields to an object already
            // stored: not held to the depth limit of client writes, so an
            // object stored deeper before that limit can still be deleted.
            let (bytes, _) = encode_stored(&ctx.st, info, &marked).await?;
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
            Ok((_, rev)) => return Ok(Outcome::Deleted { last: obj, revision: rev }),
            Err(StorageError::Conflict { .. }) => continue,
            Err(StorageError::NotFound { .. }) => return Err(ApiError::not_found(info, name)),
            Err(e) => return Err(ApiError::from_storage(e, info, name)),
        }
    }
    Err(ApiError::stale(info, name))
}

/// 403 for deleting an object the row's lifecycle keeps forever, as
/// upstream's `NamespaceLifecycle`: `namespaces "default" is forbidden: this
/// namespace may not be deleted`.
fn forbidden_delete(info: &ResourceInfo, name: &str, message: &str) -> Status {
    Status::new(403, "Forbidden", format!("{} {name:?} is forbidden: {message}", crate::error::qualified(info)))
        .with_details(StatusDetails {
            name: name.to_string(),
            group: info.group.to_string(),
            kind: info.resource.to_string(),
            ..StatusDetails::default()
        })
}

/// `orphan`: the garbage collector removes the owner's references from its
/// dependents, then this finalizer (upstream `metav1.FinalizerOrphanDependents`).
pub const FINALIZER_ORPHAN: &str = "orphan";
/// `foregroundDeletion`: the garbage collector deletes the dependents that
/// block owner deletion first (upstream `metav1.FinalizerDeleteDependents`).
pub const FINALIZER_FOREGROUND: &str = "foregroundDeletion";

/// The object's finalizers after a DELETE with `opts`, as upstream's
/// `deletionFinalizersForGarbageCollection`: `orphan` for
/// `propagationPolicy: Orphan` (or `orphanDependents: true`),
/// `foregroundDeletion` for `Foreground`, neither for `Background`; with no
/// policy given, the GC finalizers the object already has stay. rkube serves
/// no kind whose default policy is to orphan (upstream's
/// `DefaultGarbageCollectionPolicy` orphans only for legacy extensions/v1beta1
/// and apps/v1beta1/v1beta2 kinds), so the default is background.
pub fn gc_finalizers(obj: &Value, opts: &DeleteOptions) -> Vec<String> {
    let current = object::finalizers(obj);
    let has = |f: &str| current.iter().any(|c| c == f);
    let (orphan, foreground) = match opts.propagation_policy.as_deref() {
        Some("Orphan") => (true, false),
        Some("Foreground") => (false, true),
        Some(_) => (false, false),
        None => (has(FINALIZER_ORPHAN), has(FINALIZER_FOREGROUND) && !has(FINALIZER_ORPHAN)),
    };
    let mut out: Vec<String> =
        current.iter().filter(|f| *f != FINALIZER_ORPHAN && *f != FINALIZER_FOREGROUND).cloned().collect();
    if orphan {
        out.push(FINALIZER_ORPHAN.to_string());
    }
    if foreground {
        out.push(FINALIZER_FOREGROUND.to_string());
    }
    out
}

fn set_finalizers(obj: &mut Value, finalizers: &[String]) {
    if finalizers.is_empty() {
        object::remove_meta(obj, "finalizers");
    } else {
        object::set_meta(obj, "finalizers", json!(finalizers));
    }
}

/// DELETE one object.
pub async fn delete(ctx: &Ctx, body: &[u8]) -> ApiResult<Response> {
    let info = ctx.ri.info;
    let name = ctx.name().to_string();
    let opts = parse_options(ctx, body)?;
    trace::step(steps::DELETE_OPTIONS);
    trace::step(steps::DELETE_START);
    if let Some(lifecycle) = info.strategy.delete.lifecycle {
        if lifecycle.undeletable.contains(&name.as_str()) {
            return Err(forbidden_delete(info, &name, lifecycle.undeletable_message).into());
        }
    }
    let outcome = delete_one(ctx, info, ctx.namespace(), &name, &opts).await?;
    trace::step(steps::DELETED);
    trace::step(steps::ABOUT_TO_WRITE);
    let obj = match outcome {
        Outcome::Pending(o) => {
            // Upstream answers 202 only when the client asked not to orphan
            // with the deprecated `orphanDependents: false`.
            let code = if opts.orphan_dependents == Some(false) { 202 } else { 200 };
            return Ok(render::object(info, ctx.render, code, &o, &[]));
        }
        deleted @ Outcome::Deleted { .. } if info.return_deleted_object => {
            return Ok(render::object(info, ctx.render, 200, &deleted.into_object(), &[]));
        }
        Outcome::Deleted { last, .. } => last,
    };
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
            Ok(outcome) => items.push(outcome.into_object()),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn with(finalizers: &[&str]) -> Value {
        json!({"metadata": {"name": "x", "finalizers": finalizers}})
    }

    fn policy(p: Option<&str>) -> DeleteOptions {
        DeleteOptions { propagation_policy: p.map(str::to_string), ..DeleteOptions::default() }
    }

    #[test]
    fn propagation_policy_sets_exactly_one_gc_finalizer_and_keeps_others() {
        let obj = with(&["example.com/hold", "orphan"]);
        assert_eq!(gc_finalizers(&obj, &policy(Some("Foreground"))), vec!["example.com/hold", "foregroundDeletion"]);
        assert_eq!(gc_finalizers(&obj, &policy(Some("Background"))), vec!["example.com/hold"]);
        assert_eq!(gc_finalizers(&with(&[]), &policy(Some("Orphan"))), vec!["orphan"]);
    }

    #[test]
    fn without_a_policy_the_objects_own_gc_finalizers_decide() {
        assert_eq!(gc_finalizers(&with(&["orphan"]), &policy(None)), vec!["orphan"]);
        assert_eq!(gc_finalizers(&with(&["foregroundDeletion"]), &policy(None)), vec!["foregroundDeletion"]);
        assert!(gc_finalizers(&with(&[]), &policy(None)).is_empty());
    }
}
