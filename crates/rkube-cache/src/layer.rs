//! The watch-cache layer of one API server: one [`Cacher`] per resource of
//! the resource table ([`Caches`]), added at start for every row of
//! [`registry::stored`] (create-only rows such as the review APIs have no
//! objects to cache) and later with [`CacheLayer::add_resource`] (rows added
//! while the server runs, e.g. CRDs), plus the background parts that keep
//! them honest: the `storage-readiness` post-start hook
//! ([`crate::storage_readiness`]), the storage compactor
//! ([`rkube_storage::compactor`]) and the `compact_rev_key` watch
//! ([`crate::compaction`]), and the consistency checker ([`crate::consistency`]).
//!
//! `--watch-cache=false` gives every resource a cacher of size 0, and
//! `--watch-cache-sizes=<r>#0` gives that resource one: such a cacher keeps
//! no state and serves every read from storage through the same code
//! (upstream `staging/src/k8s.io/apiserver/pkg/storage/cacher/delegator.go`
//! delegating everything).
//!
//! Metrics: the cache's families ([`CacheMetrics`]) and
//! `apiserver_storage_consistency_checks_total`, rendered by
//! [`CacheLayer::render_metrics`] in the Prometheus text format 0.0.4.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use rkube_api::list_options::ListOptions;
use rkube_api::registry::{self, ResourceInfo};
use rkube_storage::{Revision, Storage};

use crate::cacher::{Cacher, CacherConfig, FeatureGates};
use crate::consistency::ConsistencyMetrics;
use crate::delegator::ListResult;
use crate::error::{CacheError, Result};
use crate::store::CachedObject;
use crate::watch::CacheWatch;
use crate::metrics::CacheMetrics;
use crate::storage_readiness::StorageReadiness;
use crate::store::FieldExtractor;

/// Settings of the layer (kube-apiserver's flags; parsed by the API server).
#[derive(Debug, Clone, PartialEq)]
pub struct CacheLayerOptions {
    /// `--etcd-prefix` (e.g. `/registry`).
    pub etcd_prefix: String,
    /// `--watch-cache`: false gives every resource a cacher of size 0.
    pub enabled: bool,
    /// `--watch-cache-sizes`: `resource[.group]` → history size (0 = no cache).
    pub sizes: BTreeMap<String, usize>,
    /// The gates the cachers follow.
    pub gates: FeatureGates,
    /// Gate `WatchCacheInitializationPostStartHook`: the `storage-readiness` hook is registered.
    pub post_start_hook: bool,
    /// Gate `DetectCacheInconsistency`: the consistency checker runs.
    pub detect_cache_inconsistency: bool,
    /// `--storage-initialization-timeout`.
    pub storage_initialization_timeout: Duration,
    /// `--etcd-compaction-interval` (zero: no compaction).
    pub compaction_interval: Duration,
    /// Base period of the consistency check (upstream: 5 min).
    pub consistency_check_period: Duration,
}

impl Default for CacheLayerOptions {
    fn default() -> Self {
        CacheLayerOptions {
            etcd_prefix: "/registry".to_string(),
            enabled: true,
            sizes: BTreeMap::new(),
            gates: FeatureGates::default(),
            post_start_hook: true,
            detect_cache_inconsistency: true,
            storage_initialization_timeout: Duration::from_secs(60),
            compaction_interval: Duration::from_secs(300),
            consistency_check_period: Duration::from_secs(300),
        }
    }
}

/// The history size `sizes` gives `resource` of `group`: `None` = dynamic.
/// Events default to 0, not cached (upstream `DefaultWatchCacheSizes`).
pub fn size_of(sizes: &BTreeMap<String, usize>, group: &str, resource: &str) -> Option<usize> {
    let n = if group.is_empty() { sizes.get(resource) } else { sizes.get(&format!("{resource}.{group}")) };
    n.copied().or((resource == "events").then_some(0))
}

/// One resource's cache.
pub struct CacheEntry {
    /// The resource.
    pub info: &'static ResourceInfo,
    /// Its cacher (size 0 when `--watch-cache=false` or `--watch-cache-sizes=<r>#0`).
    pub cacher: Arc<Cacher>,
    /// Snapshots were purged by a failed consistency check and not resumed yet.
    pub(crate) purged: AtomicBool,
}

impl CacheEntry {
    /// True when the resource is really cached (its cacher's size is not 0).
    pub fn enabled(&self) -> bool {
        !self.cacher.config().cache_disabled()
    }
}

/// The entries in the order they were added, and their index by group and resource.
#[derive(Default)]
struct Entries {
    list: Vec<Arc<CacheEntry>>,
    by_resource: HashMap<(&'static str, &'static str), usize>,
}

/// Every cache of one server, keyed by group and resource.
#[derive(Default)]
pub struct Caches {
    /// Lock order: taken alone; entries are `Arc`s so no lock is held while serving.
    entries: RwLock<Entries>,
    /// The highest compacted revision learnt from `compact_rev_key` (0: none).
    compacted: AtomicI64,
}

impl Caches {
    /// The entries, in the order they were added.
    pub fn entries(&self) -> Vec<Arc<CacheEntry>> {
        self.entries.read().unwrap_or_else(|e| e.into_inner()).list.clone()
    }

    /// The entry of `info`'s group and resource.
    pub fn find(&self, info: &ResourceInfo) -> Option<Arc<CacheEntry>> {
        let entries = self.entries.read().unwrap_or_else(|e| e.into_inner());
        entries.by_resource.get(&(info.group, info.resource)).map(|i| entries.list[*i].clone())
    }

    /// Adds `entry` unless its resource has one; returns the entry in place.
    fn insert(&self, entry: CacheEntry) -> (Arc<CacheEntry>, bool) {
        let mut entries = self.entries.write().unwrap_or_else(|e| e.into_inner());
        let key = (entry.info.group, entry.info.resource);
        if let Some(i) = entries.by_resource.get(&key) {
            return (entries.list[*i].clone(), false);
        }
        let entry = Arc::new(entry);
        let index = entries.list.len();
        entries.list.push(entry.clone());
        entries.by_resource.insert(key, index);
        drop(entries);
        let compacted = self.compacted_revision();
        if compacted > 0 {
            entry.cacher.on_compaction(compacted);
        }
        (entry, true)
    }

    /// The highest compacted revision seen on `compact_rev_key`.
    pub fn compacted_revision(&self) -> Revision {
        self.compacted.load(Ordering::Acquire)
    }

    /// Storage was compacted at `revision`: every cache drops snapshots below it.
    pub fn on_compaction(&self, revision: Revision) {
        let before = self.compacted.fetch_max(revision, Ordering::AcqRel);
        if revision > before {
            for e in self.entries() {
                e.cacher.on_compaction(revision);
            }
        }
    }
}

/// The watch-cache layer of one server (see the module docs). Dropping it
/// stops its background tasks; the cachers stop when the last reader drops them.
pub struct CacheLayer {
    storage: Arc<dyn Storage>,
    caches: Arc<Caches>,
    options: CacheLayerOptions,
    metrics: Arc<CacheMetrics>,
    /// Present when the consistency checker runs.
    consistency: Option<Arc<ConsistencyMetrics>>,
    registry: prometheus_client::registry::Registry,
    /// Set once the start-up resources have their cacher.
    readiness: std::sync::OnceLock<Arc<StorageReadiness>>,
    /// Whether background tasks can be started (a tokio runtime was there at start).
    runtime: bool,
    tasks: Mutex<Vec<tokio::task::AbortHandle>>,
}

impl std::fmt::Debug for CacheLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CacheLayer").field("caches", &self.caches.entries().len()).finish_non_exhaustive()
    }
}

impl Drop for CacheLayer {
    fn drop(&mut self) {
        for t in self.tasks.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            t.abort();
        }
    }
}

impl CacheLayer {
    /// Builds a cacher for every stored row ([`registry::stored`]) and starts the
    /// readiness hook (gate `WatchCacheInitializationPostStartHook`), the
    /// compactor (unless the interval is 0), the `compact_rev_key` watch and
    /// the consistency checker (gate `DetectCacheInconsistency`, or env
    /// `KUBE_WATCHCACHE_CONSISTENCY_CHECKER`). Without a tokio runtime
    /// every cacher has size 0 and nothing runs in the background.
    pub fn start(storage: Arc<dyn Storage>, mut options: CacheLayerOptions) -> Arc<CacheLayer> {
        let runtime = tokio::runtime::Handle::try_current().is_ok();
        if !runtime {
            tracing::warn!("no tokio runtime: the watch cache and compaction are not started");
            options.enabled = false;
        }
        let mut registry = prometheus_client::registry::Registry::default();
        let mut tasks = Vec::new();
        if runtime && !options.compaction_interval.is_zero() {
            let compactor = rkube_storage::compactor::spawn_compactor(storage.clone(), options.compaction_interval);
            tasks.push(compactor.abort_handle());
        }
        // With `--watch-cache=false` no cache family is exposed, as upstream.
        let metrics = if options.enabled { CacheMetrics::register(&mut registry) } else { CacheMetrics::unregistered() };
        let checker_runs =
            options.enabled && (options.detect_cache_inconsistency || crate::consistency::abort_on_mismatch());
        // Without the checker the family is not exposed at all (upstream
        // shows no series for a counter vector nobody incremented).
        let consistency = checker_runs.then(|| ConsistencyMetrics::register(&mut registry));
        let caches = Arc::new(Caches::default());
        if options.enabled {
            let watch = crate::compaction::spawn_compaction_watch(storage.clone(), caches.clone());
            tasks.push(watch.abort_handle());
        }
        let layer = Arc::new(CacheLayer {
            storage,
            caches,
            options,
            metrics,
            consistency,
            registry,
            readiness: std::sync::OnceLock::new(),
            runtime,
            tasks: Mutex::new(tasks),
        });
        for info in registry::stored() {
            layer.add_resource(info);
        }
        // The hook starts once every start-up resource has its cacher.
        let readiness = if layer.options.enabled && layer.options.post_start_hook {
            let timeout = layer.options.storage_initialization_timeout;
            let (r, task) = crate::storage_readiness::spawn_hook(layer.caches.clone(), timeout);
            layer.tasks.lock().unwrap_or_else(|e| e.into_inner()).push(task.abort_handle());
            r
        } else {
            StorageReadiness::passed()
        };
        let _ = layer.readiness.set(readiness);
        layer
    }

    /// Adds a cacher for `info` (a row added to the resource table while the
    /// server runs, e.g. a CRD's), sized and gated like the others, with its
    /// consistency check. Returns it; a resource that already has one keeps it.
    /// A row serving another row's objects ([`ResourceInfo::conversion`])
    /// shares that row's cacher.
    pub fn add_resource(&self, info: &'static ResourceInfo) -> Arc<CacheEntry> {
        let info = info.storage_row();
        if let Some(e) = self.caches.find(info) {
            return e;
        }
        let mut c = CacherConfig::new(info.list_prefix(&self.options.etcd_prefix, None), info.group, info.resource);
        c.field_extractor = FieldExtractor::Resource(info);
        c.index_node_name = info.group.is_empty() && info.resource == "pods";
        c.history_size =
            if self.options.enabled { size_of(&self.options.sizes, info.group, info.resource) } else { Some(0) };
        c.gates = self.options.gates;
        c.metrics = self.metrics.clone();
        let cacher = Cacher::new(self.storage.clone(), c);
        let (entry, added) = self.caches.insert(CacheEntry { info, cacher, purged: AtomicBool::new(false) });
        if let (true, true, Some(metrics)) = (added, entry.enabled(), &self.consistency) {
            let task = crate::consistency::spawn_entry_checker(
                self.storage.clone(),
                entry.clone(),
                self.options.consistency_check_period,
                metrics.clone(),
            );
            self.tasks.lock().unwrap_or_else(|e| e.into_inner()).push(task.abort_handle());
        }
        entry
    }

    /// The caches.
    pub fn caches(&self) -> &Arc<Caches> {
        &self.caches
    }

    /// The settings.
    pub fn options(&self) -> &CacheLayerOptions {
        &self.options
    }

    /// The storage the cachers fill themselves from.
    pub fn storage(&self) -> &Arc<dyn Storage> {
        &self.storage
    }

    /// Whether a tokio runtime was there at start (background tasks run).
    pub fn has_runtime(&self) -> bool {
        self.runtime
    }

    /// The `poststarthook/storage-readiness` check: true once every cache was
    /// ready or `--storage-initialization-timeout` passed; then true forever.
    pub fn storage_ready(&self) -> bool {
        self.readiness.get().is_none_or(|r| r.passed_now())
    }

    /// Whether the `storage-readiness` post-start hook is registered (gate
    /// `WatchCacheInitializationPostStartHook`), i.e. whether the health
    /// endpoints list `poststarthook/storage-readiness`.
    pub fn storage_readiness_hook_registered(&self) -> bool {
        self.options.post_start_hook
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

/// Longest wait for a cache to become ready when `ResilientWatchCacheInitialization`
/// is off (kube-apiserver's default request timeout).
pub const NOT_READY_WAIT: Duration = Duration::from_secs(60);

/// Reads: every GET, LIST and WATCH of every resource goes through these
/// (upstream `cacher/delegator.go`); a resource with a cacher of size 0 is
/// served from storage by the same code.
///
/// | request | served by |
/// |---|---|
/// | GET, `resourceVersion` unset | storage (consistent read) |
/// | GET, `resourceVersion` set | cache once at least that fresh; storage while the cache is not ready |
/// | LIST | [`Cacher::list`]: cache, snapshot or storage per the delegation rules ([`crate::delegator`]); not ready → storage for `limit` without selectors, else 429 |
/// | WATCH | [`Cacher::watch`]: from the cache; not ready → 429; below the compacted revision → `ERROR` 410 |
/// | cacher of size 0 | storage: paged LIST ([`crate::storage_list`]), storage watch ([`crate::watch`]) |
///
/// With `ResilientWatchCacheInitialization` off, a cache that is not ready
/// is handled as kube-apiserver did before KEP-4568: LISTs at
/// `resourceVersion=0` go to storage; WATCHes, other LISTs and GETs at a
/// resourceVersion > 0 wait for it (up to [`NOT_READY_WAIT`], then 503
/// `ServiceUnavailable`); never 429.
impl CacheLayer {
    /// The cache of `info`'s storage (the stored row's for a converted row,
    /// [`ResourceInfo::storage_row`]); one is added for a row the layer has not seen yet.
    fn entry(&self, info: &'static ResourceInfo) -> Arc<CacheEntry> {
        match self.caches.find(info.storage_row()) {
            Some(e) => e,
            None => self.add_resource(info),
        }
    }

    fn resilient(&self) -> bool {
        self.options.gates.resilient_watch_cache_initialization
    }

    /// With `ResilientWatchCacheInitialization` off: waits for the cache
    /// instead of answering 429, at most [`NOT_READY_WAIT`]; a cache still
    /// not ready then is [`CacheError::NotReadyTimeout`] (503, upstream's
    /// `ready.wait` failing).
    async fn wait_ready_if_not_resilient(&self, entry: &CacheEntry) -> Result<()> {
        if self.resilient() || !entry.enabled() {
            return Ok(());
        }
        let mut rx = entry.cacher.subscribe_ready();
        let ready = matches!(tokio::time::timeout(NOT_READY_WAIT, rx.wait_for(|s| s.is_ready())).await, Ok(Ok(_)));
        if ready {
            Ok(())
        } else {
            Err(CacheError::NotReadyTimeout)
        }
    }

    /// GET `name` (in `namespace`, ignored for cluster-scoped resources) of
    /// `info`, honouring `resourceVersion` ([`Cacher::get`]), in `info`'s
    /// form ([`crate::convert`]). `Ok(None)`: not found.
    pub async fn get(
        &self,
        info: &'static ResourceInfo,
        namespace: &str,
        name: &str,
        resource_version: Option<&str>,
    ) -> Result<Option<Arc<CachedObject>>> {
        let entry = self.entry(info);
        let key = if info.namespaced { format!("{namespace}/{name}") } else { name.to_string() };
        // Pre-KEP-4568 (gate off): a GET at a resourceVersion > 0 waits for
        // the cache; resourceVersion unset or "0" reads storage while it is not ready.
        if resource_version.is_some_and(|rv| !rv.is_empty() && rv != "0") {
            self.wait_ready_if_not_resilient(&entry).await?;
        }
        let found = entry.cacher.get(&key, resource_version).await?;
        Ok(found.map(|o| crate::convert::served(info, o)))
    }

    /// LIST `info` in `namespace` (None = all) with the request's options
    /// ([`Cacher::list`]), in `info`'s form: its field selector labels and
    /// its objects are converted ([`crate::convert`]).
    pub async fn list(&self, info: &'static ResourceInfo, namespace: Option<&str>, opts: &ListOptions) -> Result<ListResult> {
        let mut page = self.list_stored(info, namespace, &crate::convert::stored_options(info, opts)).await?;
        if crate::convert::converts(info) {
            page.items = page.items.into_iter().map(|o| crate::convert::served(info, o)).collect();
        }
        Ok(page)
    }

    async fn list_stored(&self, info: &'static ResourceInfo, namespace: Option<&str>, opts: &ListOptions) -> Result<ListResult> {
        let entry = self.entry(info);
        if !self.resilient() && entry.enabled() && !entry.cacher.ready_state().is_ready() {
            // Pre-KEP-4568 (gate off): resourceVersion "0" goes to storage
            // while the cache is not ready; everything else waits for it.
            if opts.resource_version.as_deref() == Some("0") {
                return entry.cacher.list_from_storage(namespace, opts).await;
            }
            self.wait_ready_if_not_resilient(&entry).await?;
        }
        entry.cacher.list(namespace, opts).await
    }

    /// WATCH `info` in `namespace` (None = all) with the request's options
    /// ([`Cacher::watch`]), in `info`'s form ([`crate::convert`]).
    pub async fn watch(&self, info: &'static ResourceInfo, namespace: Option<&str>, opts: &ListOptions) -> Result<CacheWatch> {
        let opts = crate::convert::stored_options(info, opts);
        Ok(self.watch_stored(info, namespace, &opts).await?.served_as(info))
    }

    async fn watch_stored(&self, info: &'static ResourceInfo, namespace: Option<&str>, opts: &ListOptions) -> Result<CacheWatch> {
        let entry = self.entry(info);
        self.wait_ready_if_not_resilient(&entry).await?;
        // A watch from below the compacted revision sees what etcd would say
        // (410), even if the cache's history still holds those events.
        let requested = opts.resource_version_number();
        let compacted = self.caches.compacted_revision();
        if entry.enabled() && requested > 0 && requested + 1 < compacted && opts.send_initial_events != Some(true) {
            return Ok(CacheWatch::error(CacheError::TooOldResourceVersion { requested, oldest: compacted }));
        }
        entry.cacher.watch(namespace, opts).await
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openmetrics_counters_are_renamed_for_text_format() {
        let om = "# HELP x_total_test a.\n# TYPE a counter\n# HELP a A.\na_total{k=\"v\"} 1\n# EOF\n";
        let t = openmetrics_to_text(om);
        assert!(t.contains("# TYPE a_total counter"), "{t}");
        assert!(t.contains("# HELP a_total A."), "{t}");
        assert!(!t.contains("# EOF"));
    }

    #[test]
    fn watch_cache_sizes_name_resource_and_group() {
        let sizes = BTreeMap::from([("pods".to_string(), 1000), ("deployments.apps".to_string(), 0)]);
        assert_eq!(size_of(&sizes, "", "pods"), Some(1000));
        assert_eq!(size_of(&sizes, "apps", "deployments"), Some(0));
        assert_eq!(size_of(&sizes, "", "configmaps"), None);
        assert_eq!(size_of(&sizes, "", "events"), Some(0), "events are not cached by default");
    }
}
