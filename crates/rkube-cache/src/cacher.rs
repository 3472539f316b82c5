//! [`Cacher`]: the public handle of one resource's cache, its configuration,
//! and the state its parts share. The work lives in the other modules:
//! [`crate::reflector`] fills it, [`crate::delegator`] serves LISTs,
//! [`crate::watch`] serves WATCHes, [`crate::dispatcher`] fans events out.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

use rkube_api::list_options::ListOptions;
use rkube_storage::{ProgressRequester, Storage};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use crate::cache_state::CacheState;
use crate::clock::{Clock, TokioClock};
use crate::delegator::{self, ListResult};
use crate::dispatcher::{DispatchMsg, DispatchPolicy, Dispatcher};
use crate::error::{CacheError, Result};
use crate::history::Sizing;
use crate::metrics::{CacheMetrics, ResourceMetrics};
use crate::ready::{ReadyState, Readiness};
use crate::store::{CachedObject, FieldExtractor};
use crate::watch::CacheWatch;
use crate::watchers::Registry;

/// Feature gates that change how the cache serves (upstream names, 1.35 defaults: all on).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FeatureGates {
    /// `ListFromCacheSnapshot` (KEP-4988): Exact / continue LISTs from snapshots.
    pub list_from_cache_snapshot: bool,
    /// `ConsistentListFromCache` (KEP-2340): `resourceVersion=""` LISTs from the cache.
    pub consistent_list_from_cache: bool,
    /// `ResilientWatchCacheInitialization` (KEP-4568): 429 instead of waiting while not ready.
    pub resilient_watch_cache_initialization: bool,
    /// `WatchList` (KEP-3157): `sendInitialEvents` on watches.
    pub watch_list: bool,
}

impl Default for FeatureGates {
    fn default() -> Self {
        FeatureGates {
            list_from_cache_snapshot: true,
            consistent_list_from_cache: true,
            resilient_watch_cache_initialization: true,
            watch_list: true,
        }
    }
}

/// Timings and sizes, defaults following upstream.
#[derive(Debug, Clone, Copy)]
pub struct Tuning {
    /// Keys per storage range while (re)listing.
    pub list_page_size: usize,
    /// Events buffered per watcher before it counts as blocked.
    pub watcher_buffer: usize,
    /// A blocked watcher making no progress this long is terminated (spec: ≤ 100 ms).
    pub slow_watcher_budget: Duration,
    /// A watcher with more events queued beyond its buffer is terminated at once.
    pub max_overflow: usize,
    /// Longest wait for the cache to reach a resourceVersion (upstream `blockTimeout`, 3 s).
    pub freshness_timeout: Duration,
    /// Period of progress requests while someone waits (upstream 100 ms).
    pub progress_request_interval: Duration,
    /// First retry delay after a broken list/watch (client-go reflector: 800 ms, doubling, ≤ 30 s;
    /// each delay gets up to as much again of jitter, [`crate::backoff`]).
    pub initial_backoff: Duration,
    /// Longest retry delay.
    pub max_backoff: Duration,
}

impl Default for Tuning {
    fn default() -> Self {
        Tuning {
            list_page_size: 10_000,
            watcher_buffer: 1_000,
            slow_watcher_budget: Duration::from_millis(100),
            max_overflow: 10_000,
            freshness_timeout: Duration::from_secs(3),
            progress_request_interval: Duration::from_millis(100),
            initial_backoff: Duration::from_millis(800),
            max_backoff: Duration::from_secs(30),
        }
    }
}

/// How one resource is cached.
#[derive(Debug, Clone)]
pub struct CacherConfig {
    /// Storage key prefix of the resource, ending in `/` (e.g. `/registry/pods/`).
    pub resource_prefix: String,
    /// API group (`""` for core), for metric labels.
    pub group: String,
    /// Resource (plural, e.g. `pods`), for metric labels.
    pub resource: String,
    /// The resource's selectable fields besides `metadata.name` / `metadata.namespace`.
    pub field_extractor: FieldExtractor,
    /// Index by `spec.nodeName` (pods): node LISTs and node-scoped watcher routing.
    pub index_node_name: bool,
    /// History size: `None` = dynamic (100 .. 102,400 against 75 s); `Some(n)`
    /// = fixed (`--watch-cache-sizes=resource#n`); `Some(0)` disables the
    /// cache: every read goes to storage.
    pub history_size: Option<usize>,
    /// Feature gates.
    pub gates: FeatureGates,
    /// Time source.
    pub clock: Arc<dyn Clock>,
    /// Metric families (register them once with [`CacheMetrics::register`]).
    pub metrics: Arc<CacheMetrics>,
    /// Timings and sizes.
    pub tuning: Tuning,
}

impl CacherConfig {
    /// Defaults for `resource_prefix` (must end in `/`): dynamic history, all
    /// gates on, no extra fields, no node index, unregistered metrics.
    pub fn new(resource_prefix: impl Into<String>, group: impl Into<String>, resource: impl Into<String>) -> Self {
        CacherConfig {
            resource_prefix: resource_prefix.into(),
            group: group.into(),
            resource: resource.into(),
            field_extractor: FieldExtractor::None,
            index_node_name: false,
            history_size: None,
            gates: FeatureGates::default(),
            clock: Arc::new(TokioClock),
            metrics: CacheMetrics::unregistered(),
            tuning: Tuning::default(),
        }
    }

    /// True when `--watch-cache-sizes` set this resource to 0.
    pub fn cache_disabled(&self) -> bool {
        self.history_size == Some(0)
    }

    fn sizing(&self) -> Sizing {
        match self.history_size {
            None | Some(0) => Sizing::Dynamic,
            Some(n) => Sizing::Fixed(n),
        }
    }
}

/// What the parts of a cacher share.
pub(crate) struct Inner {
    pub storage: Arc<dyn Storage>,
    pub config: CacherConfig,
    /// The data; written only by the reflector.
    pub state: RwLock<CacheState>,
    /// The cache's resourceVersion, published after each change of `state`.
    pub rv: watch::Sender<i64>,
    pub ready: Readiness,
    /// Lock order: `state` before `registry`.
    pub registry: Arc<Mutex<Registry>>,
    pub dispatch: mpsc::Sender<DispatchMsg>,
    /// Progress requests go to the current storage watch.
    pub progress: Mutex<Option<Arc<dyn ProgressRequester>>>,
    /// The storage watch is known to be caught up, so requested progress
    /// notifications can be trusted (always, when the storage says they are reliable).
    pub watch_synced: AtomicBool,
    pub metrics: ResourceMetrics,
}

impl Inner {
    pub fn read_state(&self) -> RwLockReadGuard<'_, CacheState> {
        self.state.read().unwrap_or_else(|e| e.into_inner())
    }

    pub fn write_state(&self) -> RwLockWriteGuard<'_, CacheState> {
        self.state.write().unwrap_or_else(|e| e.into_inner())
    }

    /// The key relative to the resource prefix, or None for foreign keys.
    pub fn relative_key<'a>(&self, key: &'a str) -> Option<&'a str> {
        key.strip_prefix(self.config.resource_prefix.as_str())
    }

    /// Whether a consistent read may be served from the cache: gate on, and
    /// requested progress notifications can be trusted (etcd < 3.4.31 /
    /// 3.5.13 only once the watch is synced; upstream delegates to etcd otherwise).
    pub fn consistent_read_supported(&self) -> bool {
        self.config.gates.consistent_list_from_cache
            && (self.storage.progress_notify_reliable() || self.watch_synced.load(Ordering::Acquire))
    }

    /// `NotReady` with the Retry-After for the current downtime, when not ready.
    pub fn check_ready(&self) -> Result<()> {
        let state = self.ready.get();
        match state.retry_after_secs(self.config.clock.now()) {
            None => Ok(()),
            Some(retry_after_secs) => Err(CacheError::NotReady { retry_after_secs }),
        }
    }

    pub fn request_progress(&self) {
        let p = self.progress.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if let Some(p) = p {
            p.request_progress();
        }
    }

    /// Waits until the cache reaches `rv` (upstream `waitUntilFreshAndBlock`),
    /// asking storage for progress notifications meanwhile when `request_progress`.
    /// Errors: `TooLargeResourceVersion` after the freshness timeout (3 s).
    pub async fn wait_until_fresh(&self, rv: i64, request_progress: bool) -> Result<()> {
        let mut rx = self.rv.subscribe();
        if *rx.borrow_and_update() >= rv {
            return Ok(());
        }
        let started = tokio::time::Instant::now();
        let tuning = self.config.tuning;
        let mut tick = tokio::time::interval(tuning.progress_request_interval);
        let timeout = tokio::time::sleep(tuning.freshness_timeout);
        tokio::pin!(timeout);
        let result = {
            let reached = rx.wait_for(|v| *v >= rv);
            tokio::pin!(reached);
            loop {
                tokio::select! {
                    r = &mut reached => break r.map(|_| ()).map_err(|_| CacheError::Stopped),
                    _ = &mut timeout => {
                        let current = *self.rv.borrow();
                        break Err(CacheError::TooLargeResourceVersion { requested: rv, current });
                    }
                    _ = tick.tick(), if request_progress => self.request_progress(),
                }
            }
        };
        self.metrics.read_wait(started.elapsed().as_secs_f64());
        result
    }
}

/// The watch cache of one resource. Create it with [`Cacher::new`] inside a
/// tokio runtime; it starts listing and watching storage at once. Dropping
/// it stops its tasks and ends every watch.
pub struct Cacher {
    inner: Arc<Inner>,
    tasks: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for Cacher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cacher")
            .field("resource_prefix", &self.inner.config.resource_prefix)
            .field("ready", &self.inner.ready.get())
            .finish_non_exhaustive()
    }
}

impl Cacher {
    /// Creates the cache and spawns its reflector and dispatcher tasks
    /// (none when the cache is disabled by `history_size: Some(0)`).
    pub fn new(storage: Arc<dyn Storage>, config: CacherConfig) -> Arc<Cacher> {
        let now = config.clock.now();
        let metrics = ResourceMetrics::new(config.metrics.clone(), &config.group, &config.resource);
        let state = CacheState::new(config.sizing(), config.index_node_name, config.gates.list_from_cache_snapshot);
        metrics.capacity(0, state.history.capacity());
        let registry = Arc::new(Mutex::new(Registry::new(now)));
        let (dispatch, dispatch_rx) = mpsc::channel(1024);
        let policy = DispatchPolicy {
            budget: config.tuning.slow_watcher_budget,
            max_overflow: config.tuning.max_overflow,
        };
        let dispatcher = Dispatcher::new(registry.clone(), metrics.clone(), config.clock.clone(), policy);
        let disabled = config.cache_disabled();
        let inner = Arc::new(Inner {
            storage,
            state: RwLock::new(state),
            rv: watch::Sender::new(0),
            ready: Readiness::new(now),
            registry,
            dispatch,
            progress: Mutex::new(None),
            watch_synced: AtomicBool::new(false),
            metrics,
            config,
        });
        let mut tasks = Vec::new();
        if !disabled {
            tasks.push(tokio::spawn(dispatcher.run(dispatch_rx)));
            tasks.push(tokio::spawn(crate::reflector::run(inner.clone())));
        }
        Arc::new(Cacher { inner, tasks })
    }

    /// The configuration.
    pub fn config(&self) -> &CacherConfig {
        &self.inner.config
    }

    /// LIST (upstream `CacheDelegator.GetList`): served from the cache, a
    /// snapshot or storage as upstream's `shouldDelegateList` decides. `namespace` None = all.
    /// Errors: `NotReady` (429), `TooLargeResourceVersion` (504), storage
    /// errors (410 `Expired` for compacted revisions), `BadRequest`.
    pub async fn list(&self, namespace: Option<&str>, opts: &ListOptions) -> Result<ListResult> {
        delegator::list(&self.inner, namespace, opts).await
    }

    /// LIST straight from storage, whatever the cache's state (the storage
    /// read `opts` ask for; used while a cache that is not ready is handled
    /// as before KEP-4568). Errors as [`Cacher::list`].
    pub async fn list_from_storage(&self, namespace: Option<&str>, opts: &ListOptions) -> Result<ListResult> {
        delegator::list_from_storage(&self.inner, namespace, opts).await
    }

    /// WATCH from the cache (upstream `Cacher.Watch`). Errors returned here are HTTP
    /// errors (`NotReady` 429, `TooLargeResourceVersion` 504 after 3 s,
    /// `BadRequest`); a too old resourceVersion is an `ERROR` event (410) in the stream.
    pub async fn watch(&self, namespace: Option<&str>, opts: &ListOptions) -> Result<CacheWatch> {
        crate::watch::watch(&self.inner, namespace, opts).await
    }

    /// GET one object by key relative to the resource prefix (`ns/name`).
    ///
    /// `resource_version` None or `""` reads storage (consistent, as
    /// upstream); otherwise the cache at least as fresh as it (≤ 3 s wait,
    /// then 504). While the cache is not ready, reads storage (KEP-4568).
    pub async fn get(&self, key: &str, resource_version: Option<&str>) -> Result<Option<Arc<CachedObject>>> {
        let inner = &self.inner;
        let from_cache = match resource_version {
            None | Some("") => None,
            Some(rv) => Some(rkube_api::list_options::parse_resource_version(rv).map_err(|s| CacheError::BadRequest(s.message().to_string()))?),
        };
        match from_cache {
            Some(rv) if inner.ready.get().is_ready() && !inner.config.cache_disabled() => {
                inner.wait_until_fresh(rv, inner.consistent_read_supported()).await?;
                Ok(inner.read_state().store.get(key).cloned())
            }
            _ => {
                let full = format!("{}{}", inner.config.resource_prefix, key);
                let Some(kv) = inner.storage.get(&full).await? else { return Ok(None) };
                Ok(CachedObject::decode(key, &kv.value, kv.mod_revision, inner.config.field_extractor)
                    .ok()
                    .map(Arc::new))
            }
        }
    }

    /// The readiness state (Pending / Ready / Reinitializing).
    pub fn ready_state(&self) -> ReadyState {
        self.inner.ready.get()
    }

    /// A receiver notified on every readiness change (for `/readyz` hooks).
    pub fn subscribe_ready(&self) -> watch::Receiver<ReadyState> {
        self.inner.ready.subscribe()
    }

    /// The cache's current resourceVersion (0 before the first list).
    pub fn resource_version(&self) -> i64 {
        *self.inner.rv.borrow()
    }

    /// Number of objects in the cache.
    pub fn len(&self) -> usize {
        self.inner.read_state().store.len()
    }

    /// True when the cache holds no object.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Number of registered watchers.
    pub fn watcher_count(&self) -> usize {
        self.inner.registry.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Number of snapshots kept.
    pub fn snapshot_count(&self) -> usize {
        self.inner.read_state().snapshots.len()
    }

    /// Current history capacity.
    pub fn history_capacity(&self) -> usize {
        self.inner.read_state().history.capacity()
    }

    /// Storage was compacted at `revision` (from the `compact_rev_key` watch):
    /// snapshots below it are dropped.
    pub fn on_compaction(&self, revision: i64) {
        self.inner.write_state().compacted(revision);
    }

    /// Drops every snapshot and serves Exact/continue LISTs from storage
    /// until the next re-list (a failed consistency check, KEP-4988).
    pub fn purge_snapshots(&self) {
        self.inner.write_state().snapshots.purge();
    }

    /// Serves Exact/continue LISTs from snapshots again after
    /// [`Cacher::purge_snapshots`] (the next successful consistency check,
    /// KEP-4988): snapshots restart from the current state at the cache's
    /// resourceVersion; earlier revisions keep going to storage. No-op when
    /// the `ListFromCacheSnapshot` gate is off.
    pub fn resume_snapshots(&self) {
        if !self.inner.config.gates.list_from_cache_snapshot {
            return;
        }
        let mut state = self.inner.write_state();
        let (rv, store) = (state.resource_version, state.store.clone());
        state.snapshots.reset();
        state.snapshots.add(rv, store);
    }

    /// This resource's metrics.
    pub fn metrics(&self) -> &ResourceMetrics {
        &self.inner.metrics
    }
}

impl Drop for Cacher {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
        // Close every watch now (their senders live in the registry).
        self.inner.registry.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send<T: Send>(_: &T) {}

    /// The server awaits these inside `Send` handlers (axum): no lock guard
    /// may live across an await.
    #[allow(dead_code)]
    fn public_futures_are_send(c: &Cacher, o: &ListOptions) {
        assert_send(&c.list(None, o));
        assert_send(&c.watch(None, o));
        assert_send(&c.get("ns/a", None));
    }

    #[test]
    fn watch_stream_and_cacher_can_move_between_tasks() {
        fn send_static<T: Send + Sync + 'static>() {}
        send_static::<Cacher>();
        fn send_only<T: Send + 'static>() {}
        send_only::<CacheWatch>();
    }
}
