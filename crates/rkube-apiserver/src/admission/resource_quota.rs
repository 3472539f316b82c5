//! The `ResourceQuota` admission plugin (upstream
//! `plugin/pkg/admission/resourcequota` and
//! `staging/src/k8s.io/apiserver/pkg/admission/plugin/resourcequota`), on
//! create of any namespaced object:
//!
//! - a quota matches when its `status.hard` names a resource the object
//!   counts towards ([`rkube_api::quota::matching_resources`]) and its
//!   scopes select the object; quotas whose status the controller has not
//!   written yet (no `status.hard`) do not match, as upstream;
//! - for pods, a matching quota on cpu/memory requires every container to
//!   name it: 403 `failed quota: <quota>: must specify <res> for: <containers>`;
//! - a matching resource without `status.used`: 403 `status unknown for
//!   quota: <quota>, resources: <names>`;
//! - usage beyond `status.hard`: 403 `exceeded quota: <quota>, requested:
//!   <r>=<q>, used: …, limited: …` (only the exceeded resources, sorted);
//! - otherwise the object's usage is added to each matching quota's
//!   `status.used` in storage before the object is written, guarded by the
//!   quota's revision (quotas are read from storage; the watch cache only
//!   tells whether the namespace has any); on a conflict the remaining
//!   quotas are read and checked again (so two racing creates cannot both take the last unit).
//!   Dry runs are checked but not charged.
//!
//! Updates of Services and PersistentVolumeClaims are charged the
//! difference from the old object (a Service becoming a NodePort, a bigger
//! storage request); other updates and subresource writes are not, as
//! upstream. Messages are wrapped as `<resource> "<name>" is forbidden:
//! <reason>`.

use std::collections::BTreeSet;

use rkube_api::quota::{self, ResourceList};
use rkube_api::list_options::ListOptions;
use rkube_api::registry::{self, ResourceInfo};
use rkube_storage::{RangeRequest, StorageError};
use serde_json::Value;

use crate::error::{ApiError, ApiResult};
use crate::source::decode_stored;
use crate::state::ApiState;

/// How many times quotas are re-read after a conflicting status write.
const ATTEMPTS: usize = 10;

fn forbidden(info: &ResourceInfo, name: &str, reason: String) -> ApiError {
    super::forbidden(info.group, info.resource, name, &reason)
}

/// One quota as read from storage.
struct StoredQuota {
    key: String,
    revision: rkube_storage::Revision,
    obj: Value,
}

impl StoredQuota {
    fn name(&self) -> &str {
        self.obj.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("")
    }
}

/// The namespace's quotas, from the watch cache or from storage. A cache
/// that is (re)initializing (KEP-4568) is passed over for storage, so a write
/// is not refused while the quota cacher catches up.
async fn read_quotas(st: &ApiState, quotas: &'static ResourceInfo, ns: &str, from_cache: bool) -> ApiResult<Vec<StoredQuota>> {
    if from_cache {
        let opts = ListOptions { resource_version: Some("0".into()), ..Default::default() };
        match st.cache.list(quotas, Some(ns), &opts).await {
            Ok(page) => {
                return Ok(page
                    .items
                    .iter()
                    .filter_map(|item| {
                        let obj = serde_json::from_slice::<Value>(&item.json).ok()?;
                        Some(StoredQuota { key: quotas.object_key(st.prefix(), ns, &item.name), revision: item.resource_version, obj })
                    })
                    .collect())
            }
            Err(e) if !e.is_not_ready() => return Err(e.into()),
            Err(_) => {} // (re)initializing: read storage below
        }
    }
    let prefix = quotas.list_prefix(st.prefix(), Some(ns));
    let resp = st.storage.range(RangeRequest::prefix(&prefix)).await.map_err(|e| ApiError::from_storage(e, quotas, ""))?;
    resp.kvs
        .iter()
        .map(|kv| {
            let obj = decode_stored(&kv.key, &kv.value, kv.mod_revision).map_err(|e| ApiError::from_storage(e, quotas, ""))?;
            Ok(StoredQuota { key: kv.key.clone(), revision: kv.mod_revision, obj })
        })
        .collect()
}

/// The new `status.used` of each quota that `obj` is charged to, or the
/// 403 that refuses it (upstream `checkRequest`).
fn check(info: &ResourceInfo, name: &str, obj: &Value, old: Option<&Value>, quotas: &[StoredQuota]) -> ApiResult<Vec<(usize, ResourceList)>> {
    let mut interesting = Vec::new();
    for (i, q) in quotas.iter().enumerate() {
        let Some(restricted) = quota::quota_matches(&q.obj, info.group, info.resource, obj) else { continue };
        if info.group.is_empty() && info.resource == "pods" {
            if let Err(e) = quota::pods::constraints(&restricted, obj) {
                return Err(forbidden(info, name, format!("failed quota: {}: {e}", q.name())));
            }
        }
        let used = quota::parse_list(q.obj.pointer("/status/used"));
        if restricted.iter().any(|r| !used.contains_key(r)) {
            let names: BTreeSet<&String> = restricted.iter().collect();
            let names: Vec<&str> = names.into_iter().map(String::as_str).collect();
            return Err(forbidden(info, name, format!("status unknown for quota: {}, resources: {}", q.name(), names.join(","))));
        }
        interesting.push(i);
    }
    if interesting.is_empty() {
        return Ok(Vec::new());
    }
    let delta = quota::usage(info.group, info.resource, obj);
    let negative = quota::negative(&delta);
    if !negative.is_empty() {
        let names: Vec<&str> = negative.iter().map(String::as_str).collect();
        return Err(forbidden(info, name, format!("quota usage is negative for resource(s): {}", names.join(","))));
    }
    let delta = match old {
        Some(old) => quota::subtract(&delta, &quota::usage(info.group, info.resource, old)),
        None => delta,
    };
    if delta.values().all(|q| q.milli == 0) {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for i in interesting {
        let q = &quotas[i];
        let hard = quota::parse_list(q.obj.pointer("/status/hard"));
        let used = quota::parse_list(q.obj.pointer("/status/used"));
        let requested = quota::mask(&delta, hard.keys());
        let new_used = quota::add(&used, &requested);
        let exceeded: Vec<String> = requested
            .keys()
            .filter(|r| match (new_used.get(*r), hard.get(*r)) {
                (Some(n), Some(h)) => n.milli > h.milli,
                _ => false,
            })
            .cloned()
            .collect();
        if !exceeded.is_empty() {
            return Err(forbidden(
                info,
                name,
                format!(
                    "exceeded quota: {}, requested: {}, used: {}, limited: {}",
                    q.name(),
                    quota::pretty(&quota::mask(&requested, &exceeded)),
                    quota::pretty(&quota::mask(&used, &exceeded)),
                    quota::pretty(&quota::mask(&hard, &exceeded)),
                ),
            ));
        }
        out.push((i, new_used));
    }
    Ok(out)
}

/// Checks the creation of `obj` (an object of `info` named `name` in `ns`),
/// or its update from `old`, against the namespace's quotas and, unless
/// `dry_run`, charges it to them. Errors: 403 as the module docs say; a
/// storage error reading or writing quotas; 409 when quota writes keep
/// conflicting.
pub async fn admit(st: &ApiState, info: &ResourceInfo, ns: &str, name: &str, obj: &Value, old: Option<&Value>, dry_run: bool) -> ApiResult<()> {
    if ns.is_empty() || !info.namespaced || (old.is_some() && !quota::charges_updates(info.group, info.resource)) {
        return Ok(());
    }
    let quotas_info = registry::lookup("", "v1", "resourcequotas").ok_or_else(|| ApiError::internal("resourcequotas are not served"))?;
    let mut charged: BTreeSet<String> = BTreeSet::new();
    let mut last_conflict = None;
    // The cache answers the common case (no quota in the namespace) without
    // a storage round trip; the check itself reads storage, so a status
    // the cache has not caught up with yet is never missed.
    if read_quotas(st, quotas_info, ns, true).await?.is_empty() {
        return Ok(());
    }
    for _ in 0..ATTEMPTS {
        let mut quotas = read_quotas(st, quotas_info, ns, false).await?;
        quotas.retain(|q| !charged.contains(q.name()));
        let updates = check(info, name, obj, old, &quotas)?;
        if dry_run || updates.is_empty() {
            return Ok(());
        }
        let mut conflicted = false;
        for (i, used) in updates {
            let q = &quotas[i];
            let mut updated = q.obj.clone();
            if let Some(status) = updated.as_object_mut().map(|m| m.entry("status").or_insert_with(|| Value::Object(Default::default()))) {
                if let Some(status) = status.as_object_mut() {
                    status.insert("used".into(), quota::list_to_json(&used));
                }
            }
            let bytes = crate::handlers::write::encode_for_storage(&updated)?;
            match st.storage.update(&q.key, bytes, q.revision).await {
                Ok(_) => {
                    charged.insert(q.name().to_string());
                }
                Err(e @ StorageError::Conflict { .. }) => {
                    conflicted = true;
                    last_conflict = Some(ApiError::from_storage(e, quotas_info, q.name()));
                }
                Err(e) => return Err(ApiError::from_storage(e, quotas_info, q.name())),
            }
        }
        if !conflicted {
            return Ok(());
        }
    }
    Err(last_conflict.unwrap_or_else(|| ApiError::internal("resource quota updates kept conflicting")))
}
