//! kube-proxy's metrics (prefix `kubeproxy_`), following upstream
//! `pkg/proxy/metrics/metrics.go`: names, types and buckets are upstream's.
//!
//! Counters are registered without the `_total` suffix; the text encoder adds
//! it (`kubeproxy_sync_proxy_rules_iptables_restore_failures_total`).

use std::sync::atomic::AtomicU64;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use crate::engine::machine::SyncKind;
use crate::engine::SyncReport;

/// Label set `{table="nat"|"filter"}`.
type TableLabels = Vec<(String, String)>;

/// All proxy metrics and their registry.
pub struct Metrics {
    registry: Registry,
    /// `sync_proxy_rules_duration_seconds`: every sync.
    pub sync_duration: Histogram,
    /// `sync_full_proxy_rules_duration_seconds`.
    pub sync_full_duration: Histogram,
    /// `sync_partial_proxy_rules_duration_seconds`.
    pub sync_partial_duration: Histogram,
    /// `sync_proxy_rules_last_timestamp_seconds`: last successful sync.
    pub last_sync_timestamp: Gauge<f64, AtomicU64>,
    /// `sync_proxy_rules_last_queued_timestamp_seconds`: last time a change queued a sync.
    pub last_queued_timestamp: Gauge<f64, AtomicU64>,
    /// `network_programming_duration_seconds`: EndpointSlice trigger time → rules programmed.
    pub network_programming_duration: Histogram,
    /// `sync_proxy_rules_iptables_restore_failures_total`.
    pub restore_failures: Counter,
    /// `sync_proxy_rules_iptables_partial_restore_failures_total`.
    pub partial_restore_failures: Counter,
    /// `sync_proxy_rules_iptables_total{table}`: rules kube-proxy owns.
    pub iptables_total: Family<TableLabels, Gauge>,
    /// `sync_proxy_rules_iptables_last{table}`: rules written by the last sync.
    pub iptables_last: Family<TableLabels, Gauge>,
    /// `sync_proxy_rules_service_changes_total`.
    pub service_changes: Counter,
    /// `sync_proxy_rules_endpoint_changes_total`.
    pub endpoint_changes: Counter,
}

/// Upstream network-programming buckets: 0.25, 0.5, 1…59, 60…115 by 5, 120…300 by 30 (seconds).
fn network_programming_buckets() -> Vec<f64> {
    let mut b = vec![0.25, 0.5];
    b.extend((1..=59).map(f64::from));
    b.extend((0..12).map(|i| 60.0 + 5.0 * f64::from(i)));
    b.extend((0..7).map(|i| 120.0 + 30.0 * f64::from(i)));
    b
}

fn seconds_since_epoch(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}

impl Metrics {
    /// Create and register every metric.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("kubeproxy");
        let sync_buckets = || exponential_buckets(0.001, 2.0, 15);
        let m = Metrics {
            sync_duration: Histogram::new(sync_buckets()),
            sync_full_duration: Histogram::new(sync_buckets()),
            sync_partial_duration: Histogram::new(sync_buckets()),
            last_sync_timestamp: Gauge::default(),
            last_queued_timestamp: Gauge::default(),
            network_programming_duration: Histogram::new(network_programming_buckets()),
            restore_failures: Counter::default(),
            partial_restore_failures: Counter::default(),
            iptables_total: Family::default(),
            iptables_last: Family::default(),
            service_changes: Counter::default(),
            endpoint_changes: Counter::default(),
            registry: Registry::default(),
        };
        registry.register("sync_proxy_rules_duration_seconds", "SyncProxyRules latency in seconds", m.sync_duration.clone());
        registry.register("sync_full_proxy_rules_duration_seconds", "SyncProxyRules latency in seconds for full resyncs", m.sync_full_duration.clone());
        registry.register("sync_partial_proxy_rules_duration_seconds", "SyncProxyRules latency in seconds for partial resyncs", m.sync_partial_duration.clone());
        registry.register("sync_proxy_rules_last_timestamp_seconds", "The last time proxy rules were successfully synced", m.last_sync_timestamp.clone());
        registry.register("sync_proxy_rules_last_queued_timestamp_seconds", "The last time a sync of proxy rules was queued", m.last_queued_timestamp.clone());
        registry.register("network_programming_duration_seconds", "In Cluster Network Programming Latency in seconds", m.network_programming_duration.clone());
        registry.register("sync_proxy_rules_iptables_restore_failures", "Cumulative proxy iptables restore failures", m.restore_failures.clone());
        registry.register("sync_proxy_rules_iptables_partial_restore_failures", "Cumulative proxy iptables partial restore failures", m.partial_restore_failures.clone());
        registry.register("sync_proxy_rules_iptables_total", "Total number of iptables rules owned by kube-proxy", m.iptables_total.clone());
        registry.register("sync_proxy_rules_iptables_last", "Number of iptables rules written by kube-proxy in last sync", m.iptables_last.clone());
        registry.register("sync_proxy_rules_service_changes", "Cumulative proxy rules Service changes", m.service_changes.clone());
        registry.register("sync_proxy_rules_endpoint_changes", "Cumulative proxy rules Endpoint changes", m.endpoint_changes.clone());
        Metrics { registry, ..m }
    }

    /// Record a finished sync; `now` is the wall time it ended.
    pub fn observe_sync(&self, report: &SyncReport, now: SystemTime) {
        let secs = report.duration.as_secs_f64();
        self.sync_duration.observe(secs);
        match report.kind {
            SyncKind::Full(_) => self.sync_full_duration.observe(secs),
            SyncKind::Partial => self.sync_partial_duration.observe(secs),
        }
        if report.result.is_err() {
            self.restore_failures.inc();
            if report.kind == SyncKind::Partial {
                self.partial_restore_failures.inc();
            }
            return;
        }
        let table = |t: &str| vec![("table".to_string(), t.to_string())];
        self.iptables_total.get_or_create(&table("nat")).set(i64::try_from(report.nat_rules_total).unwrap_or(i64::MAX));
        self.iptables_total.get_or_create(&table("filter")).set(i64::try_from(report.filter_rules).unwrap_or(i64::MAX));
        self.iptables_last.get_or_create(&table("nat")).set(i64::try_from(report.nat_rules_written).unwrap_or(i64::MAX));
        self.iptables_last.get_or_create(&table("filter")).set(i64::try_from(report.filter_rules).unwrap_or(i64::MAX));
        for t in &report.trigger_times {
            let latency = now.duration_since(*t).unwrap_or(Duration::ZERO);
            self.network_programming_duration.observe(latency.as_secs_f64());
        }
        self.last_sync_timestamp.set(seconds_since_epoch(now));
    }

    /// Record that a change queued a sync at `now`.
    pub fn observe_queued(&self, now: SystemTime) {
        self.last_queued_timestamp.set(seconds_since_epoch(now));
    }

    /// The Prometheus text exposition of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Encoding into a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        out
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::machine::FullReason;

    fn report(kind: SyncKind, ok: bool) -> SyncReport {
        SyncReport {
            kind,
            result: if ok { Ok(()) } else { Err(crate::engine::Error::Poisoned) },
            duration: Duration::from_millis(20),
            generation: Duration::from_millis(5),
            restore: Duration::ZERO,
            bytes: 100,
            services_written: 1,
            chains_deleted: 0,
            nat_rules_total: 12,
            nat_rules_written: 7,
            filter_rules: 3,
            trigger_times: vec![SystemTime::now() - Duration::from_secs(2)],
        }
    }

    #[test]
    fn exposition_uses_kube_proxy_metric_names() {
        let m = Metrics::new();
        m.observe_sync(&report(SyncKind::Full(FullReason::FirstSync), true), SystemTime::now());
        m.observe_sync(&report(SyncKind::Partial, false), SystemTime::now());
        let text = m.encode();
        for name in [
            "kubeproxy_sync_proxy_rules_duration_seconds_bucket",
            "kubeproxy_sync_full_proxy_rules_duration_seconds_count 1",
            "kubeproxy_sync_partial_proxy_rules_duration_seconds_count 1",
            "kubeproxy_sync_proxy_rules_iptables_partial_restore_failures_total 1",
            "kubeproxy_sync_proxy_rules_iptables_restore_failures_total 1",
            "kubeproxy_sync_proxy_rules_last_timestamp_seconds",
            "kubeproxy_network_programming_duration_seconds_count 1",
            "kubeproxy_sync_proxy_rules_iptables_total{table=\"nat\"} 12",
        ] {
            assert!(text.contains(name), "missing {name} in:\n{text}");
        }
    }
}
