//! Server-side apply (`application/apply-patch+yaml`), after
//! structured-merge-diff's `merge.Updater.Apply` and the apiserver's field
//! manager stack (`k8s.io/apimachinery/pkg/util/managedfields/internal`):
//!
//! 1. the applied configuration (YAML or JSON) is merged into the live
//!    object ([`typed::merge`]);
//! 2. the applier's `Apply` entry becomes exactly the fields of the
//!    configuration;
//! 3. fields the applier owned before, no longer applies and nobody else
//!    owns are removed;
//! 4. fields the result changes that another manager owns are conflicts:
//!    409 unless `force`, which moves them to the applier;
//! 5. fields removed from the object leave every other manager.
//!
//! `status` is merged like any field but never owned: the main resource's
//! strategy resets it (upstream's reset fields); the caller does that.
//!
//! Upstream extras also done here: an object without managedFields first
//! gets a `before-first-apply` manager owning everything; the `kubectl`
//! manager may take over fields whose value still matches the
//! `kubectl.kubernetes.io/last-applied-configuration` annotation without a
//! conflict, and keeps that annotation in sync (`lastappliedmanager.go`,
//! `lastappliedupdater.go`).

use std::borrow::Cow;

use serde_json::Value;

use super::fieldpath::{ignored_top_level, path_string, stripped_fields, FieldSet};
use super::fields_v1;
use super::managed::{self, ManagedEntry, UnwrittenEntries, OPERATION_APPLY, OPERATION_UPDATE};
use super::schema::{self, Shape};
use super::typed::{
    compare, created_fields_v1_text, encodes_config, merge, merge_into_absent, merge_over, remove_items, to_field_set,
    validate_applied, CreatedBy,
};
use super::{ApplyConflict, PatchError};

/// Annotation kubectl's client-side apply keeps the applied configuration in.
pub const LAST_APPLIED_ANNOTATION: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Manager that owns the fields of an object applied to for the first time
/// without managedFields (upstream `beforeFirstApplyManager`).
const BEFORE_FIRST_APPLY: &str = "before-first-apply";

/// Everything one apply request needs.
pub(crate) struct ApplyRequest<'a> {
    pub kind: &'a str,
    /// The request's group/version; taken from the live object when `None`.
    pub api_version: Option<&'a str>,
    pub original: Option<&'a Value>,
    pub body: &'a [u8],
    pub manager: &'a str,
    pub force: bool,
    pub now: &'a str,
}

/// Decodes the request body: JSON, else YAML (one document).
fn decode_body(body: &[u8]) -> Result<Value, PatchError> {
    let value = match crate::json_value::from_slice(body) {
        Ok(v) => v,
        Err(_) => {
            // Held to the JSON decoder's depth, before parsing (linear cost).
            crate::media::off_the_workers(body.len(), || crate::media::yaml_to_json(body))
                .map_err(|e| PatchError::BadRequest(format!("error decoding YAML: {e}")))?
        }
    };
    match value {
        Value::Object(_) => Ok(value),
        Value::Null => Ok(Value::Object(serde_json::Map::new())),
        other => Err(PatchError::BadRequest(format!(
            "error decoding YAML: error unmarshaling JSON: while decoding JSON: json: cannot unmarshal {} into Go value of type map[string]interface {{}}",
            match other {
                Value::Array(_) => "array",
                Value::String(_) => "string",
                Value::Number(_) => "number",
                _ => "bool",
            }
        ))),
    }
}

fn str_at<'v>(v: &'v Value, pointer: &str) -> &'v str {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

/// `ns/name; group/version, Kind=kind`, as upstream's `objectGVKNN`.
fn describe(config: &Value, kind: &str) -> String {
    let api_version = str_at(config, "/apiVersion");
    let gv = if api_version.contains('/') {
        api_version.to_string()
    } else {
        format!("/{api_version}")
    };
    format!(
        "{}/{}; {gv}, Kind={kind}",
        str_at(config, "/metadata/namespace"),
        str_at(config, "/metadata/name")
    )
}

/// Applies `req.body` for `req.manager`; returns the new object with its
/// managedFields.
pub(crate) fn server_side_apply(req: &ApplyRequest<'_>) -> Result<Value, PatchError> {
    server_side_apply_with(req, true)
}

/// [`server_side_apply`], taking [`reapply_as_sole_owner`]'s shortcut and,
/// for a create, the create walk ([`created_fields_v1_text`]) when `shortcut`
/// (the tests compare both ways).
pub(crate) fn server_side_apply_with(req: &ApplyRequest<'_>, shortcut: bool) -> Result<Value, PatchError> {
    let (mut obj, unwritten) = apply_leaving_create_entries(req, shortcut)?;
    unwritten.write_into(&mut obj);
    Ok(obj)
}

/// [`server_side_apply_with`], except that an apply that creates the object
/// from the configuration alone (nothing live, no last-applied annotation
/// to rewrite) leaves its entries unwritten ([`UnwrittenEntries`]; the
/// create path writes them); every other apply writes them.
pub(crate) fn apply_leaving_create_entries(
    req: &ApplyRequest<'_>,
    shortcut: bool,
) -> Result<(Value, UnwrittenEntries), PatchError> {
    let config = decode_body(req.body)?;
    if !matches!(
        config.pointer("/metadata/managedFields"),
        None | Some(Value::Null)
    ) {
        return Err(PatchError::BadRequest(
            "metadata.managedFields must be nil".to_string(),
        ));
    }
    let expected_version = req
        .api_version
        .or_else(|| req.original.map(|o| str_at(o, "/apiVersion")));
    if let Some(expected) = expected_version.filter(|v| !v.is_empty()) {
        let got = str_at(&config, "/apiVersion");
        if got != expected {
            return Err(PatchError::BadRequest(format!(
                "Incorrect version specified in apply patch. Specified patch version: {got}, expected: {expected}"
            )));
        }
    }
    let got_kind = str_at(&config, "/kind");
    if !got_kind.is_empty() && got_kind != req.kind {
        return Err(PatchError::BadRequest(format!(
            "Incorrect kind specified in apply patch. Specified patch kind: {got_kind}, expected: {}",
            req.kind
        )));
    }
    let applied_version = req.api_version.filter(|v| !v.is_empty()).unwrap_or(str_at(&config, "/apiVersion"));
    let shape = schema::root_for(applied_version, req.kind);
    validate_applied(&config, shape).map_err(|e| {
        PatchError::TypedConversion(format!(
            "failed to create typed patch object ({}): {e}",
            describe(&config, req.kind)
        ))
    })?;
    let api_version = expected_version
        .filter(|v| !v.is_empty())
        .unwrap_or(str_at(&config, "/apiVersion"));

    if let (Some(original), true) = (req.original, shortcut) {
        if let Some(entry) = sole_owner_reapplies(req, original, &config, shape, api_version) {
            // (`api_version` may borrow from the configuration moved here.)
            let api_version = api_version.to_string();
            return Ok((reapply_as_sole_owner(req, original, config, shape, &api_version, entry), UnwrittenEntries::default()));
        }
    }
    let live = req.original.map(managed::without_managed_fields);
    let mut entries = match req.original {
        Some(o) => managed::decode(o).unwrap_or_default(),
        None => Vec::new(),
    };
    let strip = stripped_fields();
    if let (Some(live), true) = (&live, entries.is_empty()) {
        let all = compare(None, Some(live), shape)
            .added
            .difference(&strip)
            .without_top_level(ignored_top_level(""));
        entries.push(ManagedEntry {
            manager: BEFORE_FIRST_APPLY.to_string(),
            operation: OPERATION_UPDATE.to_string(),
            api_version: api_version.to_string(),
            time: Some(req.now.to_string()),
            subresource: String::new(),
            fields: all,
        });
    }

    // Creating the object (nothing live, so no other manager and no
    // conflict to retry): the configuration is merged by value, unless
    // kubectl's last-applied annotation is to be rewritten from it.
    if live.is_none() && !(req.manager == "kubectl" && has_last_applied(&config)) {
        // (`api_version` may borrow from the configuration moved here.)
        let api_version = api_version.to_string();
        // The applier's entry is the only one and owns the configuration's
        // fields: written as text in one walk when the walk can
        // ([`created_fields_v1_text`]), with the time of a changed object.
        if shortcut {
            if let Some(fields) = created_fields_v1_text(&config, shape, &strip, ignored_top_level(""), CreatedBy::Apply) {
                let result = merge_into_absent(config, shape);
                return Ok((result, UnwrittenEntries::sole_apply(req.manager, &api_version, req.now, fields)));
            }
        }
        let (result, entries) = apply_once(Cow::Owned(config), None, entries, shape, req, &api_version, req.force)
            .map_err(|(e, _)| e)?;
        return Ok((result, UnwrittenEntries::new(entries)));
    }
    let first = apply_once(
        Cow::Borrowed(&config),
        live.as_deref(),
        entries,
        shape,
        req,
        api_version,
        req.force,
    );
    let (mut result, entries) = match first {
        Err((PatchError::Conflicts(conflicts), entries))
            if req.manager == "kubectl"
                && conflicts_allowed_by_last_applied(&conflicts, live.as_deref(), shape) =>
        {
            apply_once(
                Cow::Borrowed(&config),
                live.as_deref(),
                entries,
                shape,
                req,
                api_version,
                true,
            )
            .map_err(|(e, _)| e)?
        }
        other => other.map_err(|(e, _)| e)?,
    };
    if req.manager == "kubectl" {
        sync_last_applied(&mut result, &config);
    }
    managed::encode(&mut result, entries);
    Ok((result, UnwrittenEntries::default()))
}

/// A repeated apply by the one manager that owns the object, of a
/// configuration with exactly the fields it applied before (what GitOps
/// tools and operators send again and again): nothing is pruned and nobody
/// can conflict, so the result is the merge, and the manager's entry is the
/// stored one, its time set when the object changes. This finds whether
/// `config` is such an apply: its entry's time and encoded fields, or
/// `None` in every other case, which [`apply_once`] handles. When the
/// fields differ, the check is spent for nothing: one sort of each object's
/// keys for a configuration made of objects and scalars
/// ([`encodes_config`]), else that walk, as far as it went, and the field
/// set built here (a few percent).
fn sole_owner_reapplies<'o>(
    req: &ApplyRequest<'_>,
    original: &'o Value,
    config: &Value,
    shape: &Shape,
    api_version: &str,
) -> Option<SoleEntry<'o>> {
    if config.pointer("/metadata/managedFields").is_some() {
        return None;
    }
    let (time, stored) = managed::sole_apply_entry(original, req.manager, api_version)?;
    let strip = stripped_fields();
    let ignored = ignored_top_level("");
    let same = encodes_config(stored, config, shape, &strip, ignored).unwrap_or_else(|| {
        let new_set = to_field_set(config, shape).difference(&strip).without_top_level(ignored);
        !new_set.is_empty() && fields_v1::encodes(stored, &new_set)
    });
    same.then_some((time, stored))
}

/// The stored `Apply` entry of the object's sole manager: its time and its
/// encoded fields ([`managed::sole_apply_entry`]).
type SoleEntry<'o> = (Option<&'o str>, &'o serde_json::Map<String, Value>);

/// The result of an apply [`sole_owner_reapplies`] found: the same result as
/// [`apply_once`], without decoding the stored entry into a [`FieldSet`]
/// and encoding it again (for a ConfigMap of 100,000 keys, about a seventh
/// of the apply's CPU). The configuration is merged over the stored object
/// ([`merge_over`], which also says whether anything changed), so the maps
/// it restates are its own, not copies of the stored ones; the stored
/// entry, which the configuration never names, is copied once with the
/// rest of the stored object and its fields are then moved, not copied
/// again, into the result's entry.
fn reapply_as_sole_owner(
    req: &ApplyRequest<'_>,
    original: &Value,
    config: Value,
    shape: &Shape,
    api_version: &str,
    (time, stored): SoleEntry<'_>,
) -> Value {
    let last_applied = (req.manager == "kubectl" && (has_last_applied(&config) || has_last_applied(original)))
        .then(|| last_applied_text(&config));
    let (mut merged, changed) = merge_over(original, config, shape);
    let time = match time {
        Some(t) if !changed => t.to_string(),
        _ => req.now.to_string(),
    };
    if let Some(text) = last_applied {
        set_last_applied(&mut merged, text);
    }
    // Removed and written again last in metadata, as the general path does.
    let fields = managed::remove_sole_entry_fields(&mut merged).unwrap_or_else(|| stored.clone());
    managed::write_sole_apply_entry(&mut merged, req.manager, api_version, Some(time), fields);
    merged
}

/// Whether `config` carries kubectl's last-applied annotation.
fn has_last_applied(config: &Value) -> bool {
    config.pointer("/metadata/annotations").and_then(|a| a.get(LAST_APPLIED_ANNOTATION)).is_some()
}

/// One pass of merge, prune and conflict detection; a `config` given by
/// value is merged into an absent object without being copied. On an
/// error, `entries` come back as they were given (a retry reuses them).
fn apply_once(
    config: Cow<'_, Value>,
    live: Option<&Value>,
    mut entries: Vec<ManagedEntry>,
    shape: &Shape,
    req: &ApplyRequest<'_>,
    api_version: &str,
    force: bool,
) -> Result<(Value, Vec<ManagedEntry>), (PatchError, Vec<ManagedEntry>)> {
    let strip = stripped_fields();
    let ignored = ignored_top_level("");
    let new_set = to_field_set(&config, shape)
        .difference(&strip)
        .without_top_level(ignored);
    let idx = entries
        .iter()
        .position(|e| e.is(req.manager, OPERATION_APPLY, api_version, ""));
    let applier = ManagedEntry {
        manager: req.manager.to_string(),
        operation: OPERATION_APPLY.to_string(),
        api_version: api_version.to_string(),
        time: idx.and_then(|i| entries[i].time.clone()),
        subresource: String::new(),
        fields: new_set,
    };
    // The applier's previous entry, moved out (put back on a conflict).
    let (applier_idx, previous) = match idx {
        Some(i) => (i, Some(std::mem::replace(&mut entries[i], applier))),
        None => {
            entries.push(applier);
            (entries.len() - 1, None)
        }
    };
    let empty = FieldSet::new();
    let last_set = previous.as_ref().map_or(&empty, |e| &e.fields);

    let mut merged = match (live, config) {
        (None, Cow::Owned(config)) => merge_into_absent(config, shape),
        (live, config) => merge(live, &config, shape),
    };
    // Prune what the applier let go of and nobody holds, keeping nodes that
    // still hold owned fields (the applier's previous set may name a map or
    // list itself, `"."`, where its new set names only the items: after
    // kubectl's client-side-apply migration, for example).
    // (Nothing is released when the applier owned nothing, a first apply,
    // or still owns all it did, as a repeated apply of the same fields.)
    if !last_set.is_subset(&entries[applier_idx].fields) {
        let owned = entries
            .iter()
            .fold(FieldSet::new(), |acc, e| acc.union(&e.fields));
        let released = last_set.clone().difference(&owned).without_ancestors_of(&owned);
        remove_items(&mut merged, &released, shape);
    }

    // What the result changed matters only to the other managers: conflicts
    // with their fields, and fields that leave them. With none (a first
    // apply creating the object), the comparison is skipped.
    if entries.len() > 1 {
        let cmp = compare(live, Some(&merged), shape);
        let changed = cmp.modified.union(&cmp.added).without_top_level(ignored);
        let removed = cmp.removed.without_top_level(ignored);
        let mut conflicts = Vec::new();
        for (i, e) in entries.iter().enumerate() {
            if i == applier_idx {
                continue;
            }
            for path in e.fields.intersection(&changed).paths() {
                conflicts.push(ApplyConflict {
                    manager: e.printed(),
                    path: path_string(&path),
                });
            }
        }
        if !force && !conflicts.is_empty() {
            conflicts.sort_by(|a, b| a.manager.cmp(&b.manager));
            match previous {
                Some(entry) => entries[applier_idx] = entry,
                None => {
                    entries.pop();
                }
            }
            return Err((PatchError::Conflicts(conflicts), entries));
        }
        for (i, e) in entries.iter_mut().enumerate() {
            if i != applier_idx {
                e.fields = std::mem::take(&mut e.fields).difference(&changed).difference(&removed);
            }
        }
    }
    let object_changed = live.is_none_or(|l| !crate::object::values_equal(l, &merged));
    let applier = &mut entries[applier_idx];
    if object_changed || applier.time.is_none() || applier.fields != *last_set {
        applier.time = Some(req.now.to_string());
    }
    Ok((merged, entries))
}

/// Upstream's `lastAppliedManager`: conflicts are waived when every
/// conflicting field is in the last-applied configuration with the value the
/// live object still has (the object was managed by client-side apply).
fn conflicts_allowed_by_last_applied(
    conflicts: &[ApplyConflict],
    live: Option<&Value>,
    shape: &Shape,
) -> bool {
    let Some(live) = live else { return false };
    let annotation = live
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(LAST_APPLIED_ANNOTATION));
    let Some(text) = annotation.and_then(Value::as_str).filter(|s| !s.is_empty()) else {
        return false;
    };
    let Ok(last_applied) = serde_json::from_str::<Value>(text) else {
        return false;
    };
    if str_at(&last_applied, "/apiVersion") != str_at(live, "/apiVersion")
        || validate_applied(&last_applied, shape).is_err()
    {
        return false;
    }
    let cmp = compare(Some(&last_applied), Some(live), shape);
    let allowed = to_field_set(&last_applied, shape)
        .difference(&cmp.modified)
        .difference(&cmp.added)
        .difference(&cmp.removed);
    let allowed_paths: std::collections::HashSet<String> =
        allowed.paths().iter().map(|p| path_string(p)).collect();
    conflicts.iter().all(|c| allowed_paths.contains(&c.path))
}

/// Upstream's `lastAppliedUpdater`: a `kubectl` apply to an object that has
/// the last-applied annotation rewrites it to the configuration just applied.
fn sync_last_applied(result: &mut Value, config: &Value) {
    if has_last_applied(result) {
        set_last_applied(result, last_applied_text(config));
    }
}

/// The last-applied annotation's text for `config`: its JSON without that
/// annotation.
fn last_applied_text(config: &Value) -> String {
    let mut applied = config.clone();
    if let Some(Value::Object(annotations)) = applied.pointer_mut("/metadata/annotations") {
        annotations.shift_remove(LAST_APPLIED_ANNOTATION);
    }
    applied.to_string()
}

/// Sets `result`'s last-applied annotation to `text` when it has one.
fn set_last_applied(result: &mut Value, text: String) {
    if let Some(Value::Object(annotations)) = result.pointer_mut("/metadata/annotations") {
        if let Some(slot) = annotations.get_mut(LAST_APPLIED_ANNOTATION) {
            *slot = Value::String(text);
        }
    }
}
