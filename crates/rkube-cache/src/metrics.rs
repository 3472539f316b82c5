//! Prometheus metrics of the watch cache, with upstream names and labels
//! (`cacher/metrics/metrics.go`, `storage/etcd3/metrics/metrics.go`).
//!
//! One [`CacheMetrics`] is registered once into the server's
//! [`Registry`] and shared by every cacher; each cacher records through a
//! [`ResourceMetrics`] that fills in its `group` / `resource` labels.
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `apiserver_cache_list_total` | counter | group, resource, index |
//! | `apiserver_cache_list_fetched_objects_total` | counter | group, resource, index |
//! | `apiserver_cache_list_returned_objects_total` | counter | group, resource |
//! | `apiserver_watch_cache_events_received_total` | counter | group, resource |
//! | `apiserver_watch_cache_events_dispatched_total` | counter | group, resource |
//! | `apiserver_watch_cache_resource_version` | gauge | group, resource |
//! | `apiserver_watch_cache_initializations_total` | counter | group, resource |
//! | `apiserver_watch_cache_read_wait_seconds` | histogram | group, resource |
//! | `apiserver_watch_cache_consistent_read_total` | counter | group, resource, success, fallback |
//! | `apiserver_terminated_watchers_total` | counter | group, resource |
//! | `watch_cache_capacity` | gauge | group, resource |
//! | `watch_cache_capacity_increase_total`, `watch_cache_capacity_decrease_total` | counter | group, resource |
//! | `apiserver_registered_watchers` | gauge | group, resource |
//! | `apiserver_storage_list_total` (+ `_fetched_objects_total`, `_returned_objects_total`) | counter | group, resource |
//!
//! The `apiserver_storage_list_*` family counts LISTs this crate serves from
//! storage (fallbacks and delegated requests): it is how a benchmark shows
//! that a paged walk did no storage range read.

use std::sync::Arc;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

type Labels = Vec<(&'static str, String)>;
type HistogramFamily = Family<Labels, Histogram, fn() -> Histogram>;

fn read_wait_histogram() -> Histogram {
    Histogram::new([0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2.0, 3.0])
}

/// Every metric family of the cache.
#[derive(Debug)]
pub struct CacheMetrics {
    list_total: Family<Labels, Counter>,
    list_fetched: Family<Labels, Counter>,
    list_returned: Family<Labels, Counter>,
    events_received: Family<Labels, Counter>,
    events_dispatched: Family<Labels, Counter>,
    resource_version: Family<Labels, Gauge>,
    initializations: Family<Labels, Counter>,
    read_wait: HistogramFamily,
    consistent_read: Family<Labels, Counter>,
    terminated_watchers: Family<Labels, Counter>,
    capacity: Family<Labels, Gauge>,
    capacity_increase: Family<Labels, Counter>,
    capacity_decrease: Family<Labels, Counter>,
    registered_watchers: Family<Labels, Gauge>,
    storage_list_total: Family<Labels, Counter>,
    storage_list_fetched: Family<Labels, Counter>,
    storage_list_returned: Family<Labels, Counter>,
}

impl Default for CacheMetrics {
    fn default() -> Self {
        CacheMetrics {
            list_total: Family::default(),
            list_fetched: Family::default(),
            list_returned: Family::default(),
            events_received: Family::default(),
            events_dispatched: Family::default(),
            resource_version: Family::default(),
            initializations: Family::default(),
            read_wait: Family::new_with_constructor(read_wait_histogram),
            consistent_read: Family::default(),
            terminated_watchers: Family::default(),
            capacity: Family::default(),
            capacity_increase: Family::default(),
            capacity_decrease: Family::default(),
            registered_watchers: Family::default(),
            storage_list_total: Family::default(),
            storage_list_fetched: Family::default(),
            storage_list_returned: Family::default(),
        }
    }
}

impl CacheMetrics {
    /// Metrics not exposed anywhere (tests, or a server without `/metrics`).
    pub fn unregistered() -> Arc<Self> {
        Arc::new(CacheMetrics::default())
    }

    /// Creates the families and registers them into `registry` (once per server).
    /// Counter names are given without `_total`, which the encoder appends.
    pub fn register(registry: &mut Registry) -> Arc<Self> {
        let m = CacheMetrics::default();
        registry.register("apiserver_cache_list", "Number of LIST requests served from watch cache", m.list_total.clone());
        registry.register(
            "apiserver_cache_list_fetched_objects",
            "Number of objects read from watch cache in the course of serving a LIST request",
            m.list_fetched.clone(),
        );
        registry.register(
            "apiserver_cache_list_returned_objects",
            "Number of objects returned for a LIST request from watch cache",
            m.list_returned.clone(),
        );
        registry.register(
            "apiserver_watch_cache_events_received",
            "Counter of events received in watch cache broken by resource type.",
            m.events_received.clone(),
        );
        registry.register(
            "apiserver_watch_cache_events_dispatched",
            "Counter of events dispatched in watch cache broken by resource type.",
            m.events_dispatched.clone(),
        );
        registry.register(
            "apiserver_watch_cache_resource_version",
            "Current resource version of watch cache broken by resource type.",
            m.resource_version.clone(),
        );
        registry.register(
            "apiserver_watch_cache_initializations",
            "Counter of watch cache initializations broken by resource type.",
            m.initializations.clone(),
        );
        registry.register(
            "apiserver_watch_cache_read_wait_seconds",
            "Histogram of time spent waiting for a watch cache to become fresh.",
            m.read_wait.clone(),
        );
        registry.register(
            "apiserver_watch_cache_consistent_read",
            "Counter for consistent reads from cache.",
            m.consistent_read.clone(),
        );
        registry.register(
            "apiserver_terminated_watchers",
            "Counter of watchers closed due to unresponsiveness broken by resource type.",
            m.terminated_watchers.clone(),
        );
        registry.register("watch_cache_capacity", "Total capacity of watch cache broken by resource type.", m.capacity.clone());
        registry.register(
            "watch_cache_capacity_increase",
            "Total number of watch cache capacity increase events broken by resource type.",
            m.capacity_increase.clone(),
        );
        registry.register(
            "watch_cache_capacity_decrease",
            "Total number of watch cache capacity decrease events broken by resource type.",
            m.capacity_decrease.clone(),
        );
        registry.register(
            "apiserver_registered_watchers",
            "Number of currently registered watchers for a given resources",
            m.registered_watchers.clone(),
        );
        registry.register("apiserver_storage_list", "Number of LIST requests served from storage", m.storage_list_total.clone());
        registry.register(
            "apiserver_storage_list_fetched_objects",
            "Number of objects read from storage in the course of serving a LIST request",
            m.storage_list_fetched.clone(),
        );
        registry.register(
            "apiserver_storage_list_returned_objects",
            "Number of objects returned for a LIST request from storage",
            m.storage_list_returned.clone(),
        );
        Arc::new(m)
    }
}

/// The metrics of one resource (labels `group`, `resource` filled in).
///
/// The label sets it records with are built once, when the cacher starts,
/// and shared by its clones (one per watch): recording allocates nothing.
#[derive(Debug, Clone)]
pub struct ResourceMetrics {
    m: Arc<CacheMetrics>,
    labels: Arc<LabelSets>,
}

/// Every label set one resource records with.
#[derive(Debug)]
struct LabelSets {
    /// `group`, `resource`.
    gr: Labels,
    /// `gr` + `index=""` (a LIST scanning the store).
    index_none: Labels,
    /// `gr` + `index="spec.nodeName"` (a LIST using the pod node index).
    index_node: Labels,
    /// `gr` + `success`, `fallback`, at `[success as usize * 2 + fallback as usize]`.
    consistent: [Labels; 4],
}

impl ResourceMetrics {
    /// Records for `group` / `resource`.
    pub fn new(m: Arc<CacheMetrics>, group: &str, resource: &str) -> Self {
        let gr: Labels = vec![("group", group.to_string()), ("resource", resource.to_string())];
        let with = |extra: &[(&'static str, &str)]| -> Labels {
            let mut l = gr.clone();
            l.extend(extra.iter().map(|(k, v)| (*k, v.to_string())));
            l
        };
        let consistent = |success: bool, fallback: bool| with(&[("success", bool_str(success)), ("fallback", bool_str(fallback))]);
        let labels = LabelSets {
            index_none: with(&[("index", "")]),
            index_node: with(&[("index", crate::filter::NODE_NAME_FIELD)]),
            consistent: [consistent(false, false), consistent(false, true), consistent(true, false), consistent(true, true)],
            gr,
        };
        ResourceMetrics { m, labels: Arc::new(labels) }
    }

    fn gr(&self) -> &Labels {
        &self.labels.gr
    }

    /// The labels of `apiserver_cache_list_*` for `index`.
    fn index_labels(&self, index: &str) -> std::borrow::Cow<'_, Labels> {
        use std::borrow::Cow;
        match index {
            "" => Cow::Borrowed(&self.labels.index_none),
            crate::filter::NODE_NAME_FIELD => Cow::Borrowed(&self.labels.index_node),
            other => {
                let mut l = self.labels.gr.clone();
                l.push(("index", other.to_string()));
                Cow::Owned(l)
            }
        }
    }

    fn consistent_labels(&self, success: bool, fallback: bool) -> &Labels {
        &self.labels.consistent[usize::from(success) * 2 + usize::from(fallback)]
    }

    /// A LIST served from the cache (`index` = `spec.nodeName` or "").
    pub fn cache_list(&self, index: &str, fetched: usize, returned: usize) {
        let l = self.index_labels(index);
        self.m.list_total.get_or_create(&l).inc();
        self.m.list_fetched.get_or_create(&l).inc_by(fetched as u64);
        self.m.list_returned.get_or_create(self.gr()).inc_by(returned as u64);
    }

    /// A LIST served from storage.
    pub fn storage_list(&self, fetched: usize, returned: usize) {
        self.m.storage_list_total.get_or_create(self.gr()).inc();
        self.m.storage_list_fetched.get_or_create(self.gr()).inc_by(fetched as u64);
        self.m.storage_list_returned.get_or_create(self.gr()).inc_by(returned as u64);
    }

    /// LISTs served from storage so far (for tests and benchmarks).
    pub fn storage_list_count(&self) -> u64 {
        self.m.storage_list_total.get_or_create(self.gr()).get()
    }

    /// LISTs served from the cache so far, all indexes.
    pub fn cache_list_count(&self) -> u64 {
        ["", crate::filter::NODE_NAME_FIELD]
            .iter()
            .map(|i| self.m.list_total.get_or_create(&self.index_labels(i)).get())
            .sum()
    }

    /// Events received from storage.
    pub fn events_received(&self, n: u64) {
        self.m.events_received.get_or_create(self.gr()).inc_by(n);
    }

    /// Events sent to watchers.
    pub fn events_dispatched(&self, n: u64) {
        self.m.events_dispatched.get_or_create(self.gr()).inc_by(n);
    }

    /// The cache's resourceVersion (15 least significant digits, as upstream).
    pub fn resource_version(&self, rv: i64) {
        self.m.resource_version.get_or_create(self.gr()).set(rv % 1_000_000_000_000_000);
    }

    /// A completed (re)initialization.
    pub fn initialized(&self) {
        self.m.initializations.get_or_create(self.gr()).inc();
    }

    /// Time a read waited for the cache to become fresh.
    pub fn read_wait(&self, secs: f64) {
        self.m.read_wait.get_or_create(self.gr()).observe(secs);
    }

    /// A consistent read: served (`success`) and whether it fell back to storage.
    pub fn consistent_read(&self, success: bool, fallback: bool) {
        self.m.consistent_read.get_or_create(self.consistent_labels(success, fallback)).inc();
    }

    /// Consistent reads so far with these labels.
    pub fn consistent_read_count(&self, success: bool, fallback: bool) -> u64 {
        self.m.consistent_read.get_or_create(self.consistent_labels(success, fallback)).get()
    }

    /// A watcher closed for being too slow.
    pub fn terminated_watcher(&self) {
        self.m.terminated_watchers.get_or_create(self.gr()).inc();
    }

    /// Watchers terminated so far.
    pub fn terminated_watchers(&self) -> u64 {
        self.m.terminated_watchers.get_or_create(self.gr()).get()
    }

    /// The history's capacity changed from `old` to `new` (`old == new`: initial value).
    pub fn capacity(&self, old: usize, new: usize) {
        self.m.capacity.get_or_create(self.gr()).set(new as i64);
        if new > old {
            self.m.capacity_increase.get_or_create(self.gr()).inc();
        } else if new < old {
            self.m.capacity_decrease.get_or_create(self.gr()).inc();
        }
    }

    /// Adds `delta` to the number of registered watchers.
    pub fn registered_watchers(&self, delta: i64) {
        self.m.registered_watchers.get_or_create(self.gr()).inc_by(delta);
    }
}

fn bool_str(b: bool) -> &'static str {
    if b {
        "true"
    } else {
        "false"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registered_metrics_use_upstream_names() {
        let mut reg = Registry::default();
        let m = CacheMetrics::register(&mut reg);
        let r = ResourceMetrics::new(m, "", "pods");
        r.cache_list("", 10, 3);
        r.terminated_watcher();
        r.consistent_read(true, false);
        r.capacity(100, 200);
        r.resource_version(42);
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &reg).unwrap();
        for want in [
            r#"apiserver_cache_list_total{group="",resource="pods",index=""} 1"#,
            r#"apiserver_cache_list_fetched_objects_total{group="",resource="pods",index=""} 10"#,
            r#"apiserver_cache_list_returned_objects_total{group="",resource="pods"} 3"#,
            r#"apiserver_terminated_watchers_total{group="",resource="pods"} 1"#,
            r#"apiserver_watch_cache_consistent_read_total{group="",resource="pods",success="true",fallback="false"} 1"#,
            r#"watch_cache_capacity{group="",resource="pods"} 200"#,
            r#"apiserver_watch_cache_resource_version{group="",resource="pods"} 42"#,
        ] {
            assert!(out.contains(want), "missing {want} in\n{out}");
        }
    }
}
