//! LIST served from storage (upstream `etcd3/store.go` `GetList`): what the
//! cache falls back to, and what it delegates.
//!
//! Reads the resource's range at one revision, filtering with the
//! predicate, growing batches until `limit` matching objects are found or
//! the range ends. As upstream, `continue` is set when a key follows the last
//! *examined* one (so a final page may be empty when the rest does not
//! match), and `remainingItemCount` is counted only without selectors.

use std::sync::Arc;

use rkube_api::continue_token::ContinueToken;
use rkube_storage::{prefix_end, RangeRequest, StorageError};

use crate::cacher::Inner;
use crate::delegator::{ListResult, ServedFrom};
use crate::error::{CacheError, Result, EXPIRED_CONTINUE_MESSAGE, EXPIRED_LIST_MESSAGE};
use crate::filter::Predicate;
use crate::store::CachedObject;

/// Which revision a storage LIST reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StorageRead {
    /// The latest revision (`resourceVersion` "" or "0", or a continue token with rv < 0).
    Latest,
    /// The latest revision, which must be ≥ this (NotOlderThan N); else 504 too large.
    NotOlderThan(i64),
    /// Exactly this revision (Exact N, legacy exact, continue token rv > 0).
    Exact(i64),
}

/// Batch size when a LIST has no limit but selectors filter (and the floor for filtered batches).
const MIN_BATCH: usize = 500;
/// Largest batch while looking for more matching objects.
const MAX_BATCH: usize = 10_000;

/// Reads a page from storage. `start` is the relative key to start at
/// (continue token), `limit` 0 = everything. `from_continue` picks the 410
/// message for a compacted revision.
pub(crate) async fn list(
    inner: &Inner,
    pred: &Predicate,
    read: StorageRead,
    start: Option<&str>,
    limit: usize,
    from_continue: bool,
) -> Result<ListResult> {
    let prefix = &inner.config.resource_prefix;
    let (lo, hi) = match &pred.namespace {
        Some(ns) => (format!("{prefix}{ns}/"), prefix_end(&format!("{prefix}{ns}/"))),
        None => (prefix.clone(), prefix_end(prefix)),
    };
    let mut cursor = match start {
        Some(s) => {
            let s = format!("{prefix}{s}");
            if s > lo {
                s
            } else {
                lo.clone()
            }
        }
        None => lo.clone(),
    };
    let mut revision = match read {
        StorageRead::Exact(rv) => rv,
        _ => 0,
    };
    let count_remaining = pred.has_no_selectors();
    let mut items: Vec<Arc<CachedObject>> = Vec::new();
    let mut fetched = 0usize;
    let mut last_key: Option<String> = None;
    let mut has_more = false;
    let mut batch = if limit > 0 { limit.max(1) } else if pred.has_no_selectors() { 0 } else { MIN_BATCH };
    let map_err = |e: StorageError| match e {
        StorageError::Compacted { .. } => CacheError::Expired {
            message: if from_continue { EXPIRED_CONTINUE_MESSAGE } else { EXPIRED_LIST_MESSAGE }.to_string(),
        },
        StorageError::FutureRevision { requested, current } => {
            CacheError::TooLargeResourceVersion { requested, current }
        }
        other => CacheError::Storage(other),
    };
    'outer: loop {
        let resp = inner
            .storage
            .range(RangeRequest {
                start: cursor.clone(),
                end: hi.clone(),
                revision,
                // One more than needed, to know whether a key follows a full page.
                limit: if batch == 0 { 0 } else { batch + 1 },
                count_only: false,
            })
            .await
            .map_err(map_err)?;
        if revision == 0 {
            revision = resp.revision;
            if let StorageRead::NotOlderThan(min) = read {
                if revision < min {
                    return Err(CacheError::TooLargeResourceVersion { requested: min, current: revision });
                }
            }
        }
        let n = resp.kvs.len();
        for (i, kv) in resp.kvs.iter().enumerate() {
            if limit > 0 && items.len() >= limit {
                has_more = true;
                break 'outer;
            }
            if batch > 0 && i == batch {
                break; // the extra key: it starts the next batch
            }
            fetched += 1;
            let Some(key) = inner.relative_key(&kv.key) else { continue };
            last_key = Some(key.to_string());
            match CachedObject::decode(key, &kv.value, kv.mod_revision, inner.config.field_extractor) {
                Ok(obj) if pred.matches(&obj) => items.push(Arc::new(obj)),
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "skipping undecodable object in storage list"),
            }
        }
        let more_keys = resp.more || (batch > 0 && n > batch);
        if !more_keys {
            break;
        }
        if limit > 0 && items.len() >= limit {
            has_more = true;
            break;
        }
        match &last_key {
            Some(k) => cursor = format!("{prefix}{k}\0"),
            None => break,
        }
        batch = (batch * 2).clamp(MIN_BATCH, MAX_BATCH);
    }
    let mut remaining_item_count = None;
    let mut continue_token = None;
    if has_more {
        if let Some(k) = &last_key {
            continue_token = Some(ContinueToken::for_next_key(revision, k).encode());
            if count_remaining {
                let resp = inner
                    .storage
                    .range(RangeRequest {
                        start: format!("{prefix}{k}\0"),
                        end: hi.clone(),
                        revision,
                        limit: 0,
                        count_only: true,
                    })
                    .await
                    .map_err(map_err)?;
                remaining_item_count = Some(resp.count);
            }
        }
    }
    inner.metrics.storage_list(fetched, items.len());
    Ok(ListResult {
        items,
        resource_version: revision,
        continue_token,
        remaining_item_count,
        served_from: ServedFrom::Storage,
    })
}
