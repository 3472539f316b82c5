//! The watch-cache layer of one API server: one [`Cacher`] per built-in
//! resource of the registry, the [`ReadSource`] serving GET / LIST / WATCH
//! from them ([`CacheSource`]), and the background parts that keep them
//! honest: the `storage-readiness` post-start hook ([`crate::readiness`]),
//! compaction and the `compact_rev_key` watch ([`crate::compaction`]), and the
//! consistency checker ([`crate::consistency`]).
//!
//! Routing (upstream `storage/cacher/delegator.go` and KEP-4988; the cacher does the work):
//!
//! | request | served by |
//! |---|---|
//! | GET, `resourceVersion` unset | storage (consistent read) |
//! | GET, `resourceVersion` set | cache once at least that fresh; storage while the cache is not ready |
//! | LIST | [`Cacher::list`]: cache, snapshot or storage as upstream's `shouldDelegateList`; not ready → delegation rules or 429 |
//! | WATCH | [`Cacher::watch`]: from the cache; not ready → 429; below the compacted revision → `ERROR` 410 |
//! | resource with `--watch-cache-sizes=<r>#0` | LIST/GET: storage (counted in `apiserver_storage_list_total`); WATCH: storage watch of [`crate::watch`] |
//!
//! With `ResilientWatchCacheInitialization` off, a cache that is not ready
//! is handled as kube-apiserver did before KEP-4568: LISTs at
//! `resourceVersion=0` go to storage; WATCHes, other LISTs and GETs at a
//! resourceVersion > 0 wait for it (up to [`NOT_READY_WAIT`], then 503); never 429.
//!
//! Metrics: the cache's families ([`CacheMetrics`]) and
//! `apiserver_storage_consistency_checks_total`, rendered by
//! [`CacheLayer::render_metrics`] in the Prometheus text format 0.0.4 and
//! appended to the server's `/metrics` ([`crate::state::ApiState::metrics`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use rkube_api::list_options::ListOptions;
use rkube_api::registry::{self, ResourceInfo};
use rkube_api::status::Status;
use rkube_cache::{CacheError, CacheMetrics, CacheWatch, Cacher, CacherConfig, FieldExtractor};
use rkube_storage::{Revision, Storage};
use serde_json::Value;

use crate::cache_options::WatchCacheOptions;
use crate::cached_read::RawList;
use crate::consistency::ConsistencyMetrics;
use crate::readiness::StorageReadiness;
use crate::source::{ListPage, ListRequest, ReadSource, SourceResult, SourceWatch, StorageSource};
use crate::state::ServerConfig;

/// Longest wait for a cache to become ready when `ResilientWatchCacheInitialization`
/// is off (kube-apiserver's default request timeout).
pub const NOT_READY_WAIT: Duration = Duration::from_secs(60);

/// One resource's cache.
pub struct CacheEntry {
    /// The resource.
    pub info: &'static ResourceInfo,
    /// Its cacher (disabled when its `--watch-cache-sizes` is 0).
    pub cacher: Arc<Cacher>,
    /// Snapshots were purged by a failed consistency check and not resumed yet.
    pub(crate) purged: AtomicBool,
}

impl CacheEntry {
    /// True when the resource is really cached (not `--watch-cache-sizes=<r>#0`).
    pub fn enabled(&self) -> bool {
        !self.cacher.config().cache_disabled()
    }
}

/// Every cache of one server.
pub struct Caches {
    entries: Vec<CacheEntry>,
    by_resource: HashMap<(&'static str, &'static str), usize>,
    options: WatchCacheOptions,
    /// The highest compacted revision learnt from `compact_rev_key` (0: none).
    compacted: AtomicI64,
}

impl Caches {
    /// The entries, in registry order.
    pub fn entries(&self) -> &[CacheEntry] {
        &self.entries
    }

    /// The entry of `info`, if it is cached.
    pub fn find(&self, info: &ResourceInfo) -> Option<&CacheEntry> {
        self.by_resource.get(&(info.group, info.resource)).map(|i| &self.entries[*i])
    }

    /// The settings.
    pub fn options(&self) -> &WatchCacheOptions {
        &self.options
    }

    /// The highest compacted revision seen on `compact_rev_key`.
    pub fn compacted_revision(&self) -> Revision {
        self.compacted.load(Ordering::Acquire)
    }

    /// Storage was compacted at `revision`: every cache drops snapshots below it.
    pub fn on_compaction(&self, revision: Revision) {
        let before = self.compacted.fetch_max(revision, Ordering::AcqRel);
        if revision > before {
            for e in &self.entries {
                e.cacher.on_compaction(revision);
            }
        }
    }
}

/// The selectable fields of registry resource `I` (a `fn` pointer per
/// resource, as [`FieldExtractor`] takes no state).
fn fields_at<const I: usize>(v: &Value) -> Vec<(String, String)> {
    registry::all().get(I).map(|info| fields_of(info, v)).unwrap_or_default()
}

/// The selectable fields of the resource named by the object's `apiVersion`
/// and `kind` (for registries longer than [`EXTRACTORS`]).
fn fields_by_kind(v: &Value) -> Vec<(String, String)> {
    let s = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("");
    registry::lookup_kind(s("apiVersion"), s("kind")).map(|info| fields_of(info, v)).unwrap_or_default()
}

fn fields_of(info: &ResourceInfo, v: &Value) -> Vec<(String, String)> {
    info.fields
        .iter()
        .filter_map(|f| registry::field_value(info, v, f.label).map(|val| (f.label.to_string(), val)))
        .collect()
}

macro_rules! extractors {
    ($($i:literal)*) => { [$(fields_at::<$i> as FieldExtractor),*] };
}

/// One extractor per registry index.
const EXTRACTORS: [FieldExtractor; 64] = extractors!(
    0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31
    32 33 34 35 36 37 38 39 40 41 42 43 44 45 46 47 48 49 50 51 52 53 54 55 56 57 58 59 60 61 62 63
);

fn extractor_for(index: usize) -> FieldExtractor {
    EXTRACTORS.get(index).copied().unwrap_or(fields_by_kind)
}

/// The watch-cache layer of one server (see the module docs). Dropping it
/// stops its background tasks; the cachers stop when the last reader drops them.
pub struct CacheLayer {
    caches: Option<Arc<Caches>>,
    registry: prometheus_client::registry::Registry,
    readiness: Arc<StorageReadiness>,
    /// The `storage-readiness` post-start hook is registered (gate
    /// `WatchCacheInitializationPostStartHook` on): its check is listed.
    hook_registered: bool,
    tasks: Vec<tokio::task::AbortHandle>,
}

impl std::fmt::Debug for CacheLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CacheLayer").field("caches", &self.caches.as_ref().map(|c| c.entries.len())).finish()
    }
}

impl Drop for CacheLayer {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl CacheLayer {
    /// No caches, no background tasks; `storage-readiness` passes.
    pub fn none() -> Arc<CacheLayer> {
        Arc::new(CacheLayer {
            caches: None,
            registry: Default::default(),
            readiness: StorageReadiness::passed(),
            hook_registered: false,
            tasks: Vec::new(),
        })
    }

    /// Builds the caches (unless `--watch-cache=false`) and starts the
    /// readiness hook, the compactor (unless the interval is 0), the
    /// `compact_rev_key` watch and the consistency checker (gate
    /// `DetectCacheInconsistency`). Needs a tokio runtime; without one it
    /// logs and serves from storage only.
    pub fn start(storage: Arc<dyn Storage>, config: &ServerConfig) -> Arc<CacheLayer> {
        if tokio::runtime::Handle::try_current().is_err() {
            tracing::warn!("no tokio runtime: the watch cache and compaction are not started");
            return CacheLayer::none();
        }
        let options = config.watch_cache.clone();
        let mut registry = prometheus_client::registry::Registry::default();
        let mut tasks = Vec::new();
        if !options.compaction_interval.is_zero() {
            tasks.push(crate::compaction::spawn_compactor(storage.clone(), options.compaction_interval).abort_handle());
        }
        let hook_registered = options.gates.watch_cache_initialization_post_start_hook;
        if !options.enabled {
            let readiness = StorageReadiness::passed();
            return Arc::new(CacheLayer { caches: None, registry, readiness, hook_registered, tasks });
        }
        let metrics = CacheMetrics::register(&mut registry);
        let checker_runs = options.gates.detect_cache_inconsistency || crate::consistency::abort_on_mismatch();
        // Without the checker the family is not exposed at all (upstream
        // shows no series for a counter vector nobody incremented).
        let consistency = if checker_runs {
            ConsistencyMetrics::register(&mut registry)
        } else {
            Arc::new(ConsistencyMetrics::default())
        };
        let mut entries = Vec::new();
        let mut by_resource = HashMap::new();
        for (i, info) in registry::all().iter().enumerate() {
            let mut c = CacherConfig::new(info.list_prefix(&config.etcd_prefix, None), info.group, info.resource);
            c.field_extractor = extractor_for(i);
            c.index_node_name = info.group.is_empty() && info.resource == "pods";
            c.history_size = options.size_of(info.group, info.resource);
            c.gates = options.gates.cache_gates();
            c.metrics = metrics.clone();
            by_resource.insert((info.group, info.resource), entries.len());
            entries.push(CacheEntry { info, cacher: Cacher::new(storage.clone(), c), purged: AtomicBool::new(false) });
        }
        let caches =
            Arc::new(Caches { entries, by_resource, options: options.clone(), compacted: AtomicI64::new(0) });
        let readiness = if options.gates.watch_cache_initialization_post_start_hook {
            let (r, task) = crate::readiness::spawn_hook(caches.clone(), options.storage_initialization_timeout);
            tasks.push(task.abort_handle());
            r
        } else {
            StorageReadiness::passed()
        };
        tasks.push(crate::compaction::spawn_compaction_watch(storage.clone(), caches.clone()).abort_handle());
        if checker_runs {
            let task = crate::consistency::spawn_checker(
                storage,
                caches.clone(),
                options.consistency_check_period,
                consistency,
            );
            tasks.push(task.abort_handle());
        }
        Arc::new(CacheLayer { caches: Some(caches), registry, readiness, hook_registered, tasks })
    }

    /// The read source: the caches, or straight storage when there are none.
    pub fn read_source(&self, storage: Arc<dyn Storage>) -> Arc<dyn ReadSource> {
        match &self.caches {
            Some(caches) => Arc::new(CacheSource { storage: StorageSource::new(storage), caches: caches.clone() }),
            None => Arc::new(StorageSource::new(storage)),
        }
    }

    /// The caches (None with `--watch-cache=false`).
    pub fn caches(&self) -> Option<&Arc<Caches>> {
        self.caches.as_ref()
    }

    /// The `poststarthook/storage-readiness` check: true once every cache was
    /// ready or `--storage-initialization-timeout` passed; then true forever.
    pub fn storage_ready(&self) -> bool {
        self.readiness.passed_now()
    }

    /// Whether the `storage-readiness` post-start hook is registered (gate
    /// `WatchCacheInitializationPostStartHook`), i.e. whether the health
    /// endpoints list `poststarthook/storage-readiness`.
    pub fn storage_readiness_hook_registered(&self) -> bool {
        self.hook_registered
    }

    /// The layer's metrics in the Prometheus text format 0.0.4 (no `# EOF`),
    /// ready to be appended to the server's `/metrics` body.
    pub fn render_metrics(&self) -> String {
        let mut out = String::new();
        if prometheus_client::encoding::text::encode_registry(&mut out, &self.registry).is_err() {
            return String::new();
        }
        openmetrics_to_text(&out)
    }
}

/// OpenMetrics text → Prometheus text 0.0.4: counters' `# HELP` / `# TYPE`
/// name the `_total` series, no `# UNIT` or `# EOF` lines.
fn openmetrics_to_text(openmetrics: &str) -> String {
    let counters: std::collections::HashSet<&str> = openmetrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(openmetrics.len() + 64);
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let renamed = ["# HELP ", "# TYPE "].iter().find_map(|prefix| {
            let rest = line.strip_prefix(prefix)?;
            let name = rest.split(' ').next()?;
            counters.contains(name).then(|| format!("{prefix}{name}_total{}", &rest[name.len()..]))
        });
        out.push_str(renamed.as_deref().unwrap_or(line));
        out.push('\n');
    }
    out
}

/// [`ReadSource`] over the caches. The storage-shaped methods (used by
/// read-modify-write paths and cascades) read storage; the `*_by_options`
/// methods route through the caches.
pub struct CacheSource {
    storage: StorageSource,
    caches: Arc<Caches>,
}

impl CacheSource {
    fn entry(&self, info: &ResourceInfo) -> Option<&CacheEntry> {
        self.caches.find(info)
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
        self.caches.options.gates.resilient_watch_cache_initialization
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
            if let Err(s) = self.wait_ready_if_not_resilient(entry).await {
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
            if let Err(s) = self.wait_ready_if_not_resilient(entry).await {
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
        if let Err(s) = self.wait_ready_if_not_resilient(entry).await {
            return Some(Err(s));
        }
        // A watch from below the compacted revision sees what etcd would say
        // (410), even if the cache's history still holds those events.
        let requested = opts.resource_version_number();
        let compacted = self.caches.compacted_revision();
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn field_extractors_read_each_resources_selectable_fields() {
        let pods_idx = registry::all().iter().position(|r| r.resource == "pods" && r.group.is_empty()).unwrap();
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}});
        let got = extractor_for(pods_idx)(&pod);
        assert!(got.contains(&("spec.nodeName".to_string(), "n1".to_string())), "{got:?}");
        assert!(got.contains(&("status.phase".to_string(), "Running".to_string())), "{got:?}");
        assert_eq!(fields_by_kind(&pod), got);
        assert!(registry::all().len() <= EXTRACTORS.len(), "grow EXTRACTORS");
    }

    #[test]
    fn openmetrics_counters_are_renamed_for_text_format() {
        let om = "# HELP x_total_test a.\n# TYPE a counter\n# HELP a A.\na_total{k=\"v\"} 1\n# EOF\n";
        let t = openmetrics_to_text(om);
        assert!(t.contains("# TYPE a_total counter"), "{t}");
        assert!(t.contains("# HELP a_total A."), "{t}");
        assert!(!t.contains("# EOF"));
    }
}
