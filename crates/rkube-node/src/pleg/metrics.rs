//! PLEG metrics with kubelet's names (`pkg/kubelet/metrics/metrics.go`) and KEP-3386's
//! `kube_pod_missed_events`.
//!
//! Kubernetes counters carry no `_total` suffix unless their name has one; prometheus-client
//! would append it, so upstream-named counters use [`ExactCounter`], which is exposed under
//! exactly the registered name with `# TYPE ... counter`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, EncodeMetric, LabelValueEncoder, MetricEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::metrics::{MetricType, TypedMetric};
use prometheus_client::registry::Registry;

/// A monotonically increasing counter exposed under its exact name.
#[derive(Clone, Debug, Default)]
pub struct ExactCounter(Arc<AtomicU64>);

impl ExactCounter {
    /// Adds one.
    pub fn inc(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }

    /// The current value.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

impl TypedMetric for ExactCounter {
    const TYPE: MetricType = MetricType::Counter;
}

impl EncodeMetric for ExactCounter {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        // A gauge sample line carries no suffix; the TYPE line says counter.
        encoder.encode_gauge(&(self.get() as i64))
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Counter
    }
}

/// Which path wrote a pod status into the cache.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub enum CacheSource {
    /// A `GetContainerEvents` event (evented PLEG).
    Event,
    /// A relist's inspection (generic PLEG).
    Relist,
    /// A pod worker's own inspection.
    Inspect,
}

impl EncodeLabelValue for CacheSource {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        use std::fmt::Write;
        encoder.write_str(match self {
            CacheSource::Event => "event",
            CacheSource::Relist => "relist",
            CacheSource::Inspect => "inspect",
        })
    }
}

/// Label set of `rkube_pleg_cache_updates`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CacheSourceLabel {
    /// The writer.
    pub source: CacheSource,
}

/// All PLEG metrics; clone freely (handles share the values).
#[derive(Clone, Debug)]
pub struct PlegMetrics {
    /// `kubelet_pleg_relist_duration_seconds`: time a relist took.
    pub relist_duration: Histogram,
    /// `kubelet_pleg_relist_interval_seconds`: time between the starts of two relists.
    pub relist_interval: Histogram,
    /// `kubelet_pleg_discard_events`: events dropped because the channel was full.
    pub discard_events: ExactCounter,
    /// `kubelet_pleg_last_seen_seconds`: Unix time of the last completed relist.
    pub last_seen: Gauge<f64, AtomicU64>,
    /// `kubelet_evented_pleg_connection_error_count`.
    pub connection_errors: ExactCounter,
    /// `kubelet_evented_pleg_connection_success_count`.
    pub connection_successes: ExactCounter,
    /// `kubelet_evented_pleg_connection_latency_seconds`: event `created_at` → receipt.
    pub connection_latency: Histogram,
    /// `kube_pod_missed_events` (alias `kubelet_pleg_missed_events_total`): state changes a
    /// relist found that no event reported while the stream was up.
    pub missed_events: ExactCounter,
    /// `rkube_pleg_cache_updates_total{source}`: cache writes by path (not an upstream metric;
    /// shows whether statuses arrive by event or by relist).
    pub cache_updates: Family<CacheSourceLabel, Counter>,
    /// `rkube_pleg_relists_total`: completed relists.
    pub relists: Counter,
}

impl Default for PlegMetrics {
    fn default() -> Self {
        Self::new()
    }
}

fn duration_buckets() -> Histogram {
    // 1 ms .. ~65 s, doubling (close to kubelet's DefBuckets range).
    Histogram::new(exponential_buckets(0.001, 2.0, 17))
}

impl PlegMetrics {
    /// Fresh metrics.
    pub fn new() -> Self {
        Self {
            relist_duration: duration_buckets(),
            relist_interval: duration_buckets(),
            discard_events: ExactCounter::default(),
            last_seen: Gauge::default(),
            connection_errors: ExactCounter::default(),
            connection_successes: ExactCounter::default(),
            connection_latency: duration_buckets(),
            missed_events: ExactCounter::default(),
            cache_updates: Family::default(),
            relists: Counter::default(),
        }
    }

    /// Counts a cache write by `source`.
    pub fn cache_update(&self, source: CacheSource) {
        self.cache_updates.get_or_create(&CacheSourceLabel { source }).inc();
    }

    /// Cache writes so far by `source`.
    pub fn cache_updates_by(&self, source: CacheSource) -> u64 {
        self.cache_updates.get_or_create(&CacheSourceLabel { source }).get()
    }

    /// Registers every metric under its upstream name.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "kubelet_pleg_relist_duration_seconds",
            "Duration in seconds for relisting pods in PLEG",
            self.relist_duration.clone(),
        );
        registry.register(
            "kubelet_pleg_relist_interval_seconds",
            "Interval in seconds between relisting in PLEG",
            self.relist_interval.clone(),
        );
        registry.register(
            "kubelet_pleg_discard_events",
            "The number of discard events in PLEG",
            self.discard_events.clone(),
        );
        registry.register(
            "kubelet_pleg_last_seen_seconds",
            "Timestamp in seconds when PLEG was last seen active",
            self.last_seen.clone(),
        );
        registry.register(
            "kubelet_evented_pleg_connection_error_count",
            "The number of errors encountered during the establishment of streaming connection with the CRI runtime",
            self.connection_errors.clone(),
        );
        registry.register(
            "kubelet_evented_pleg_connection_success_count",
            "The number of times a streaming client was obtained to receive CRI Events",
            self.connection_successes.clone(),
        );
        registry.register(
            "kubelet_evented_pleg_connection_latency_seconds",
            "The latency of streaming connection with the CRI runtime, measured in seconds",
            self.connection_latency.clone(),
        );
        registry.register(
            "kube_pod_missed_events",
            "Pod state changes found by relisting that no container event reported (KEP-3386)",
            self.missed_events.clone(),
        );
        registry.register(
            "kubelet_pleg_missed_events_total",
            "Alias of kube_pod_missed_events",
            self.missed_events.clone(),
        );
        registry.register(
            "rkube_pleg_cache_updates",
            "Pod status cache writes by source (event, relist, inspect)",
            self.cache_updates.clone(),
        );
        registry.register("rkube_pleg_relists", "Completed PLEG relists", self.relists.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_counter_names_are_exposed_without_a_total_suffix() {
        let metrics = PlegMetrics::new();
        metrics.missed_events.inc();
        metrics.connection_errors.inc();
        metrics.cache_update(CacheSource::Event);
        let mut registry = Registry::default();
        metrics.register(&mut registry);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
        for line in [
            "# TYPE kube_pod_missed_events counter",
            "kube_pod_missed_events 1",
            "kubelet_pleg_missed_events_total 1",
            "kubelet_evented_pleg_connection_error_count 1",
            "kubelet_evented_pleg_connection_success_count 0",
            "kubelet_pleg_discard_events 0",
            "rkube_pleg_cache_updates_total{source=\"event\"} 1",
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line:?} in\n{text}");
        }
        assert!(text.contains("kubelet_pleg_relist_duration_seconds_bucket"));
        assert!(text.contains("kubelet_evented_pleg_connection_latency_seconds_count"));
    }
}
