//! LIST routing (upstream `cacher/delegator.go` `GetList` /
//! `shouldDelegateList`, and KEP-4568's not-ready rules):
//!
//! | request | [`Route`] | served from |
//! |---|---|---|
//! | `resourceVersion=""` | `Consistent` | cache once it reached storage's current revision (progress requests every 100 ms, 3 s cap), else storage |
//! | `resourceVersion="0"` | `Latest` | cache, latest state, `limit` ignored |
//! | `RV=N` + `NotOlderThan`, or `RV=N` without match and limit | `Latest` | cache after it reached N (3 s, else 504); `limit` + continue |
//! | `RV=N` + `Exact`, or `RV=N` + `limit` without match | `Exact` | snapshot with greatest revision ≤ N, list RV = N; storage when none |
//! | `continue` with rv > 0 | `Exact` | snapshot at rv, after the token's key |
//! | `continue` with rv < 0 | `Consistent` | consistent read after the token's key |
//!
//! While the cache is not ready: `limit > 0` without selectors → storage;
//! anything else that needs the cache → 429 (`NotReady`).

use std::sync::Arc;

use rkube_api::continue_token::ContinueToken;
use rkube_api::list_options::{ListOptions, ResourceVersionMatch};

use crate::cacher::Inner;
use crate::error::{CacheError, Result};
use crate::filter::{Predicate, NODE_NAME_FIELD};
use crate::store::{read_page, CachedObject, Page, Store};
use crate::storage_list::{self, StorageRead};

/// Where a LIST was answered from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServedFrom {
    /// The cache's latest state.
    Cache,
    /// A snapshot of the cache at an earlier revision.
    Snapshot,
    /// Storage (delegated or fallen back).
    Storage,
}

/// One page of a LIST.
#[derive(Debug, Clone)]
pub struct ListResult {
    /// The objects, in key order.
    pub items: Vec<Arc<CachedObject>>,
    /// The list's `metadata.resourceVersion`.
    pub resource_version: i64,
    /// `metadata.continue`, when more items follow.
    pub continue_token: Option<String>,
    /// `metadata.remainingItemCount` (only when paging without selectors).
    pub remaining_item_count: Option<i64>,
    /// Where it came from.
    pub served_from: ServedFrom,
}

/// The routing decision for a LIST.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// Storage, unconditionally.
    Storage(StorageRead),
    /// The latest cached state once it is at least `min_rv`; `honour_limit`
    /// is false for `resourceVersion="0"`.
    Latest {
        /// The resourceVersion to wait for (0: none).
        min_rv: i64,
        /// Whether `limit` applies.
        honour_limit: bool,
    },
    /// A consistent read, starting at `start` (a continue token with rv < 0).
    Consistent {
        /// Relative key to start at.
        start: Option<String>,
    },
    /// The state at exactly `rv`, starting at `start`.
    Exact {
        /// The revision.
        rv: i64,
        /// Relative key to start at (continue token).
        start: Option<String>,
        /// True when it comes from a continue token.
        from_continue: bool,
    },
}

/// Picks the route for `opts` (pure; upstream `shouldDelegateList`).
/// `consistent_supported`: the gate is on and progress notifications can be trusted.
pub fn route(opts: &ListOptions, snapshots_gate: bool, consistent_supported: bool) -> Result<Route> {
    let rv_str = opts.resource_version.as_deref();
    let rv = opts.resource_version_number();
    let exact = |rv: i64, start: Option<String>, from_continue: bool| {
        if snapshots_gate {
            Route::Exact { rv, start, from_continue }
        } else {
            Route::Storage(StorageRead::Exact(rv))
        }
    };
    match opts.resource_version_match {
        Some(ResourceVersionMatch::Exact) => return Ok(exact(rv, None, false)),
        Some(ResourceVersionMatch::NotOlderThan) => {
            return Ok(Route::Latest { min_rv: rv, honour_limit: rv_str != Some("0") })
        }
        None => {}
    }
    if let Some(token) = &opts.continue_token {
        let t = ContinueToken::decode(token).map_err(|s| CacheError::BadRequest(s.message().to_string()))?;
        return Ok(if t.resource_version > 0 {
            exact(t.resource_version, Some(t.start_key), true)
        } else if consistent_supported {
            Route::Consistent { start: Some(t.start_key) }
        } else {
            Route::Storage(StorageRead::Latest)
        });
    }
    match rv_str {
        None => Ok(if consistent_supported {
            Route::Consistent { start: None }
        } else {
            Route::Storage(StorageRead::Latest)
        }),
        Some("0") => Ok(Route::Latest { min_rv: 0, honour_limit: false }),
        Some(_) if opts.limit > 0 => Ok(exact(rv, None, false)),
        Some(_) => Ok(Route::Latest { min_rv: rv, honour_limit: true }),
    }
}

fn limit_of(opts: &ListOptions) -> usize {
    usize::try_from(opts.limit).unwrap_or(0)
}

/// Serves a LIST (see the module docs).
pub(crate) async fn list(inner: &Inner, namespace: Option<&str>, opts: &ListOptions) -> Result<ListResult> {
    if inner.config.cache_disabled() {
        return list_from_storage(inner, namespace, opts).await;
    }
    let pred = Predicate::from_list_options(namespace, opts);
    let limit = limit_of(opts);
    let route = route(opts, inner.config.gates.list_from_cache_snapshot, inner.consistent_read_supported())?;
    let pred_ref = &pred;
    let from_storage = |read: Option<StorageRead>| async move {
        let pred = pred_ref;
        let (default_read, start, from_continue) = storage_read_for(opts)?;
        let read = read.unwrap_or(default_read);
        storage_list::list(inner, pred, read, start.as_deref(), limit, from_continue).await
    };
    let route = match route {
        Route::Storage(read) => return from_storage(Some(read)).await,
        r => r,
    };
    if let Err(not_ready) = inner.check_ready() {
        if limit > 0 && pred.has_no_selectors() {
            return from_storage(None).await;
        }
        return Err(not_ready);
    }
    match route {
        Route::Storage(read) => from_storage(Some(read)).await,
        Route::Latest { min_rv, honour_limit } => {
            if min_rv > 0 {
                inner.wait_until_fresh(min_rv, inner.consistent_read_supported()).await?;
            }
            Ok(serve_latest(inner, &pred, None, if honour_limit { limit } else { 0 }))
        }
        Route::Consistent { start } => consistent(inner, &pred, start, limit).await,
        Route::Exact { rv, start, from_continue } => exact(inner, &pred, rv, start, limit, from_continue).await,
    }
}

/// Serves a LIST from storage whatever the cache's state (pre-KEP-4568
/// `resourceVersion=0` while the cache is not ready): the storage read
/// equivalent to `opts`.
pub(crate) async fn list_from_storage(inner: &Inner, namespace: Option<&str>, opts: &ListOptions) -> Result<ListResult> {
    let pred = Predicate::from_list_options(namespace, opts);
    let (read, start, from_continue) = storage_read_for(opts)?;
    storage_list::list(inner, &pred, read, start.as_deref(), limit_of(opts), from_continue).await
}

/// The storage read equivalent to `opts` (for delegation and the not-ready path).
fn storage_read_for(opts: &ListOptions) -> Result<(StorageRead, Option<String>, bool)> {
    if let Some(token) = &opts.continue_token {
        let t = ContinueToken::decode(token).map_err(|s| CacheError::BadRequest(s.message().to_string()))?;
        let read = if t.resource_version > 0 { StorageRead::Exact(t.resource_version) } else { StorageRead::Latest };
        return Ok((read, Some(t.start_key), true));
    }
    let rv = opts.resource_version_number();
    let read = match (opts.resource_version_match, opts.resource_version.as_deref()) {
        (Some(ResourceVersionMatch::Exact), _) => StorageRead::Exact(rv),
        (Some(ResourceVersionMatch::NotOlderThan), _) => StorageRead::NotOlderThan(rv),
        (None, None | Some("0")) => StorageRead::Latest,
        (None, Some(_)) if opts.limit > 0 => StorageRead::Exact(rv),
        (None, Some(_)) => StorageRead::NotOlderThan(rv),
    };
    Ok((read, None, false))
}

/// A page read at list revision `list_rv` as a LIST result: the continue
/// token names the page's last key, `remainingItemCount` is kept only when
/// more items follow. Returns it with the number of objects examined.
fn into_result(page: Page, list_rv: i64) -> (ListResult, usize) {
    let continue_token = (page.more)
        .then(|| page.items.last().map(|o| ContinueToken::for_next_key(list_rv, &o.key).encode()))
        .flatten();
    let result = ListResult {
        items: page.items,
        resource_version: list_rv,
        continue_token,
        remaining_item_count: if page.more { page.remaining } else { None },
        served_from: ServedFrom::Cache,
    };
    (result, page.fetched)
}

/// Reads a page from `store` at list revision `list_rv`, with the continue
/// token; returns it with the number of objects examined.
fn page_result(store: &Store, pred: &Predicate, start: Option<&str>, limit: usize, list_rv: i64) -> (ListResult, usize) {
    let count_remaining = limit > 0 && pred.has_no_selectors();
    let page = read_page(store.range(pred.namespace.as_deref(), start), pred, limit, count_remaining);
    into_result(page, list_rv)
}

/// The latest state, using the node index for `spec.nodeName=X`.
fn serve_latest(inner: &Inner, pred: &Predicate, start: Option<&str>, limit: usize) -> ListResult {
    let state = inner.read_state();
    let list_rv = state.resource_version;
    if let (Some(node), Some(index)) = (pred.node_name(), state.node_index.as_ref()) {
        let objects = index
            .keys(node)
            .filter(|k| start.is_none_or(|s| k.as_str() >= s))
            .filter_map(|k| state.store.get(k));
        // Without remaining-item counting, `remainingItemCount` stays unset.
        let page = read_page(objects, pred, limit, false);
        drop(state);
        let (result, fetched) = into_result(page, list_rv);
        inner.metrics.cache_list(NODE_NAME_FIELD, fetched, result.items.len());
        return result;
    }
    // O(1) clone, then read without holding the lock.
    let store = state.store.clone();
    drop(state);
    let (result, fetched) = page_result(&store, pred, start, limit, list_rv);
    inner.metrics.cache_list("", fetched, result.items.len());
    result
}

/// A consistent read: wait for storage's current revision, or fall back to storage.
async fn consistent(inner: &Inner, pred: &Predicate, start: Option<String>, limit: usize) -> Result<ListResult> {
    let target = match inner.storage.current_revision().await {
        Ok(r) => r,
        Err(e) => {
            inner.metrics.consistent_read(false, false);
            return Err(e.into());
        }
    };
    match inner.wait_until_fresh(target, true).await {
        Ok(()) => {
            inner.metrics.consistent_read(true, false);
            Ok(serve_latest(inner, pred, start.as_deref(), limit))
        }
        Err(CacheError::TooLargeResourceVersion { .. }) => {
            let r = storage_list::list(inner, pred, StorageRead::Latest, start.as_deref(), limit, start.is_some()).await;
            inner.metrics.consistent_read(r.is_ok(), true);
            r
        }
        Err(e) => {
            inner.metrics.consistent_read(false, false);
            Err(e)
        }
    }
}

/// The state at exactly `rv` from a snapshot; storage when none covers it.
async fn exact(
    inner: &Inner,
    pred: &Predicate,
    rv: i64,
    start: Option<String>,
    limit: usize,
    from_continue: bool,
) -> Result<ListResult> {
    let cache_rv = inner.read_state().resource_version;
    if rv > cache_rv {
        // A future revision needs a consistent read to be confirmed (upstream
        // delegates when consistent reads from cache are unsupported).
        if !inner.consistent_read_supported() {
            return storage_list::list(inner, pred, StorageRead::Exact(rv), start.as_deref(), limit, from_continue).await;
        }
        inner.wait_until_fresh(rv, true).await?;
    }
    let snapshot = inner.read_state().snapshots.get_less_or_equal(rv).map(|(_, s)| s.clone());
    let Some(store) = snapshot else {
        return storage_list::list(inner, pred, StorageRead::Exact(rv), start.as_deref(), limit, from_continue).await;
    };
    let (mut result, fetched) = page_result(&store, pred, start.as_deref(), limit, rv);
    inner.metrics.cache_list("", fetched, result.items.len());
    result.served_from = ServedFrom::Snapshot;
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(q: &str) -> ListOptions {
        ListOptions::from_query(q).unwrap()
    }

    fn token(rv: i64, start: &str) -> String {
        ContinueToken { resource_version: rv, start_key: start.to_string() }.encode()
    }

    #[test]
    fn list_routing_follows_spec_section_1() {
        let latest = |min_rv, honour_limit| Route::Latest { min_rv, honour_limit };
        let exact = |rv| Route::Exact { rv, start: None, from_continue: false };
        // (query, snapshots gate, consistent supported, route)
        let cases: Vec<(String, bool, bool, Route)> = vec![
            ("".into(), true, true, Route::Consistent { start: None }),
            ("".into(), true, false, Route::Storage(StorageRead::Latest)),
            ("limit=500".into(), true, true, Route::Consistent { start: None }),
            ("resourceVersion=0".into(), true, true, latest(0, false)),
            ("resourceVersion=0&limit=5".into(), true, true, latest(0, false)),
            ("resourceVersion=7".into(), true, true, latest(7, true)),
            ("resourceVersion=7&resourceVersionMatch=NotOlderThan&limit=5".into(), true, true, latest(7, true)),
            ("resourceVersion=7&resourceVersionMatch=Exact".into(), true, true, exact(7)),
            ("resourceVersion=7&limit=5".into(), true, true, exact(7)),
            ("resourceVersion=7&limit=5".into(), false, true, Route::Storage(StorageRead::Exact(7))),
            (
                format!("continue={}", token(9, "ns/a\u{0}")),
                true,
                true,
                Route::Exact { rv: 9, start: Some("ns/a\u{0}".into()), from_continue: true },
            ),
            (
                format!("continue={}", token(-1, "ns/a\u{0}")),
                true,
                true,
                Route::Consistent { start: Some("ns/a\u{0}".into()) },
            ),
            (format!("continue={}", token(-1, "ns/a\u{0}")), true, false, Route::Storage(StorageRead::Latest)),
        ];
        for (q, gate, cons, want) in cases {
            assert_eq!(route(&opts(&q), gate, cons).unwrap(), want, "query {q:?}");
        }
    }
}
