//! The [`ReadSource`] serving GET / LIST / WATCH from the watch-cache layer
//! ([`rkube_cache::CacheLayer`]: one cacher per resource, the readiness
//! hook, compaction and the consistency checker).
//!
//! Routing (spec `watch-cache.md`; the cacher does the work):
//!
//! | request | served by |
//! |---|---|
//! | GET, `resourceVersion` unset | storage (consistent read) |
//! | GET, `resourceVersion` set | cache once at least that fresh; storage while the cache is not ready |
//! | LIST | [`Cacher::list`]: cache, snapshot or storage per spec section 1; not ready → delegation rules or 429 |
//! | WATCH | [`Cacher::watch`]: from the cache; not ready → 429; below the compacted revision → `ERROR` 410 |
//! | resource with `--watch-cache-sizes=<r>#0` | LIST/GET: storage (counted in `apiserver_storage_list_total`); WATCH: storage watch of [`crate::watch`] |
//!
//! With `ResilientWatchCacheInitialization` off, a cache that is not ready
//! is handled as kube-apiserver did before KEP-4568: LISTs at
//! `resourceVersion=0` go to storage; WATCHes, other LISTs and GETs at a
//! resourceVersion > 0 wait for it (up to [`NOT_READY_WAIT`], then 503); never 429.
//!

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use rkube_api::list_options::ListOptions;
use rkube_api::registry::ResourceInfo;
use rkube_api::status::Status;
use rkube_cache::{CacheEntry, CacheError, CacheLayer, CacheWatch};
use rkube_storage::{Revision, Storage};
use serde_json::Value;

use crate::cached_read::RawList;
use crate::source::{ListPage, ListRequest, ReadSource, SourceResult, SourceWatch, StorageSource};

/// Longest wait for a cache to become ready when `ResilientWatchCacheInitialization`
/// is off (kube-apiserver's default request timeout).
pub const NOT_READY_WAIT: Duration = Duration::from_secs(60);

/// The read source of `layer`: the caches, or straight storage with `--watch-cache=false`.
pub fn read_source(layer: &Arc<CacheLayer>, storage: Arc<dyn Storage>) -> Arc<dyn ReadSource> {
    if layer.options().enabled {
        Arc::new(CacheSource { storage: StorageSource::new(storage), layer: layer.clone() })
    } else {
        Arc::new(StorageSource::new(storage))
    }
}

/// [`ReadSource`] over the caches. The storage-shaped methods (used by
/// read-modify-write paths and cascades) read storage; the `*_by_options`
/// methods route through the caches.
pub struct CacheSource {
    storage: StorageSource,
    layer: Arc<CacheLayer>,
}

impl CacheSource {
    fn entry(&self, info: &ResourceInfo) -> Option<Arc<CacheEntry>> {
        self.layer.caches().find(info)
    }

    /// With `ResilientWatchCacheInitialization` off: wait for the cache
    /// instead of answering 429 (bounded by [`NOT_READY_WAIT`]); a cache
    /// still not ready then is 503 `ServiceUnavailable`, as upstream's
    /// `ready.wait` failing.
    async fn wait_ready_if_not_resilient(&self, entry: &CacheEntry) -> Result<(), Status> {
        if self.resilient() || !entry.enabled() {
            return Ok(());
        }
        let mut rx = entry.cacher.subscribe_ready();
        let ready = matches!(tokio::time::timeout(NOT_READY_WAIT, rx.wait_for(|s| s.is_ready())).await, Ok(Ok(_)));
        if ready {
            Ok(())
        } else {
            Err(Status::service_unavailable("storage is (re)initializing"))
        }
    }

    fn resilient(&self) -> bool {
        self.layer.options().gates.resilient_watch_cache_initialization
    }
}

fn status(e: CacheError) -> Status {
    Status::from(e)
}

#[async_trait::async_trait]
impl ReadSource for CacheSource {
    async fn get(&self, key: &str) -> SourceResult<Option<Value>> {
        self.storage.get(key).await
    }

    async fn list(&self, req: ListRequest<'_>) -> SourceResult<ListPage> {
        self.storage.list(req).await
    }

    async fn watch(&self, prefix: &str, after_revision: Revision) -> SourceResult<SourceWatch> {
        self.storage.watch(prefix, after_revision).await
    }

    async fn current_revision(&self) -> SourceResult<Revision> {
        self.storage.current_revision().await
    }

    fn progress_reliable(&self) -> bool {
        self.storage.progress_reliable()
    }

    async fn get_by_options(
        &self,
        info: &'static ResourceInfo,
        key: &str,
        resource_version: Option<&str>,
    ) -> Option<Result<Option<Bytes>, Status>> {
        let entry = self.entry(info)?;
        let prefix = entry.cacher.config().resource_prefix.as_str();
        let relative = key.strip_prefix(prefix)?;
        // Pre-KEP-4568 (gate off): a GET at a resourceVersion > 0 waits for
        // the cache; resourceVersion unset or "0" reads storage while it is not ready.
        let rv_set = resource_version.is_some_and(|rv| !rv.is_empty() && rv != "0");
        if rv_set {
            if let Err(s) = self.wait_ready_if_not_resilient(&entry).await {
                return Some(Err(s));
            }
        }
        Some(entry.cacher.get(relative, resource_version).await.map(|o| o.map(|o| o.json.clone())).map_err(status))
    }

    async fn list_by_options(
        &self,
        info: &'static ResourceInfo,
        namespace: Option<&str>,
        opts: &ListOptions,
    ) -> Option<Result<RawList, Status>> {
        let entry = self.entry(info)?;
        if !self.resilient() && entry.enabled() && !entry.cacher.ready_state().is_ready() {
            // Pre-KEP-4568 (gate off): resourceVersion "0" goes to storage
            // while the cache is not ready; everything else waits for it.
            if opts.resource_version.as_deref() == Some("0") {
                return None;
            }
            if let Err(s) = self.wait_ready_if_not_resilient(&entry).await {
                return Some(Err(s));
            }
        }
        let r = entry.cacher.list(namespace, opts).await.map_err(status);
        Some(r.map(|page| RawList {
            items: page.items.iter().map(|o| o.json.clone()).collect(),
            resource_version: page.resource_version,
            continue_token: page.continue_token,
            remaining_item_count: page.remaining_item_count,
        }))
    }

    async fn watch_by_options(
        &self,
        info: &'static ResourceInfo,
        namespace: Option<&str>,
        opts: &ListOptions,
    ) -> Option<Result<CacheWatch, Status>> {
        let entry = self.entry(info)?;
        if !entry.enabled() {
            // Served by the storage watch of `crate::watch` (bookmarks included).
            return None;
        }
        if let Err(s) = self.wait_ready_if_not_resilient(&entry).await {
            return Some(Err(s));
        }
        // A watch from below the compacted revision sees what etcd would say
        // (410), even if the cache's history still holds those events.
        let requested = opts.resource_version_number();
        let compacted = self.layer.caches().compacted_revision();
        if requested > 0 && requested + 1 < compacted && opts.send_initial_events != Some(true) {
            return Some(Ok(CacheWatch::error(CacheError::TooOldResourceVersion { requested, oldest: compacted })));
        }
        let mut opts = opts.clone();
        if opts.send_initial_events == Some(false) && requested == 0 {
            // Upstream: sendInitialEvents=false at RV ""/"0" starts from the
            // cache's current revision, without initial events.
            opts.resource_version = Some(entry.cacher.resource_version().max(1).to_string());
        }
        Some(entry.cacher.watch(namespace, &opts).await.map_err(status))
    }
}
