//! The scraper: every `--metric-resolution`, each Ready node's kubelet `/metrics/resource` is read
//! through the API server's kubelet client and recorded in the [`MetricsStore`] (upstream
//! metrics-server's `pkg/scraper`, which does the same from its own deployment).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use rkube_storage::RangeRequest;
use serde_json::Value;

use super::store::{MetricsStore, NodeScrape, Point};
use crate::handlers::pod_log::{kubelet_client, kubelet_host_port};
use crate::source::decode_stored;
use crate::state::ApiState;

/// metrics-server's default `--metric-resolution` in its release manifests.
pub const DEFAULT_METRIC_RESOLUTION: Duration = Duration::from_secs(15);

/// metrics-server's flag, on `rkube apiserver` and `rkube up`.
#[derive(clap::Args, Debug, Clone)]
pub struct MetricsArgs {
    /// How often each Ready node's kubelet `/metrics/resource` is scraped for the
    /// `metrics.k8s.io` API (metrics-server's flag; a Go duration, at least 1s). CPU usage is
    /// the rate between the last two scrapes, so `kubectl top` answers after the second one.
    #[arg(long = "metric-resolution", default_value = "15s")]
    pub metric_resolution: String,
}

impl MetricsArgs {
    /// The scrape period.
    ///
    /// # Errors
    /// Not a Go duration, or under one second.
    pub fn resolution(&self) -> anyhow::Result<Duration> {
        let d = crate::filters::timeout::parse_go_duration(&self.metric_resolution)
            .map_err(|e| anyhow::anyhow!("--metric-resolution: {e}"))?;
        if d < Duration::from_secs(1) {
            anyhow::bail!("--metric-resolution: must be at least 1s, got {}", self.metric_resolution);
        }
        Ok(d)
    }
}

/// The longest one node's scrape may take (metrics-server's `--kubelet-request-timeout`
/// default is 10 s; a shorter resolution shortens it).
const MAX_SCRAPE_TIMEOUT: Duration = Duration::from_secs(10);

/// Reads one `/metrics/resource` page (Prometheus text) into a [`NodeScrape`]: the node's
/// `node_cpu_usage_seconds_total` and `node_memory_working_set_bytes`, each container's
/// `container_cpu_usage_seconds_total`, `container_memory_working_set_bytes` and
/// `container_start_time_seconds`. Samples without a timestamp take `now_ms`; a container
/// without both CPU and memory is left out.
pub fn parse_resource_metrics(page: &str, now_ms: i64) -> NodeScrape {
    let lines = page.lines().map(|l| Ok(l.to_string()));
    let Ok(scrape) = prometheus_parse::Scrape::parse(lines) else { return NodeScrape::default() };
    let mut node_cpu = None;
    let mut node_mem = None;
    let mut cpu: HashMap<(String, String, String), (f64, i64)> = HashMap::new();
    let mut mem: HashMap<(String, String, String), f64> = HashMap::new();
    let mut start: HashMap<(String, String, String), f64> = HashMap::new();
    for s in scrape.samples {
        let v = match s.value {
            prometheus_parse::Value::Counter(v) | prometheus_parse::Value::Gauge(v) | prometheus_parse::Value::Untyped(v) => v,
            _ => continue,
        };
        let ts = s.timestamp.timestamp_millis();
        let ts = if ts > 0 { ts } else { now_ms };
        let key = || {
            Some((s.labels.get("namespace")?.to_string(), s.labels.get("pod")?.to_string(), s.labels.get("container")?.to_string()))
        };
        match s.metric.as_str() {
            "node_cpu_usage_seconds_total" => node_cpu = Some((v, ts)),
            "node_memory_working_set_bytes" => node_mem = Some(v),
            "container_cpu_usage_seconds_total" => {
                if let Some(k) = key() {
                    cpu.insert(k, (v, ts));
                }
            }
            "container_memory_working_set_bytes" => {
                if let Some(k) = key() {
                    mem.insert(k, v);
                }
            }
            "container_start_time_seconds" => {
                if let Some(k) = key() {
                    start.insert(k, v);
                }
            }
            _ => {}
        }
    }
    let node = match (node_cpu, node_mem) {
        (Some((cpu_seconds, ts_ms)), Some(memory_bytes)) => Some(Point { ts_ms, cpu_seconds, memory_bytes, start: None }),
        _ => None,
    };
    let containers = cpu
        .into_iter()
        .filter_map(|(k, (cpu_seconds, ts_ms))| {
            let memory_bytes = *mem.get(&k)?;
            let start = start.get(&k).copied();
            Some((k, Point { ts_ms, cpu_seconds, memory_bytes, start }))
        })
        .collect();
    NodeScrape { node, containers }
}

/// Whether a Node's `Ready` condition is `True`.
pub fn node_ready(node: &Value) -> bool {
    node["status"]["conditions"].as_array().is_some_and(|cs| cs.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"))
}

/// The stored Nodes.
async fn list_nodes(st: &ApiState) -> Vec<Value> {
    let Some(nodes) = rkube_api::registry::lookup("", "v1", "nodes") else { return Vec::new() };
    let prefix = nodes.list_prefix(st.prefix(), None);
    let Ok(listed) = st.storage.range(RangeRequest::prefix(&prefix)).await else { return Vec::new() };
    listed.kvs.iter().filter_map(|kv| decode_stored(&kv.key, &kv.value, kv.mod_revision).ok()).collect()
}

/// One round: scrapes every Ready node at once and records what each answered.
pub async fn scrape_once(st: &ApiState, store: &MetricsStore, timeout: Duration) {
    let Ok(client) = kubelet_client(st) else { return };
    let ready: Vec<(String, String)> = list_nodes(st)
        .await
        .iter()
        .filter(|n| node_ready(n))
        .filter_map(|n| Some((n["metadata"]["name"].as_str()?.to_string(), kubelet_host_port(n)?)))
        .collect();
    let scrapes = ready.iter().map(|(name, host_port)| {
        let url = format!("https://{host_port}/metrics/resource");
        let request = client.http.get(url).timeout(timeout).send();
        async move {
            let page = match request.await {
                Ok(r) if r.status().is_success() => r.text().await.ok(),
                Ok(r) => {
                    tracing::debug!(node = %name, status = %r.status(), "scraping the kubelet's resource metrics");
                    None
                }
                Err(err) => {
                    tracing::debug!(node = %name, %err, "scraping the kubelet's resource metrics");
                    None
                }
            };
            (name.clone(), page)
        }
    });
    let now_ms = chrono::Utc::now().timestamp_millis();
    for (name, page) in futures::future::join_all(scrapes).await {
        if let Some(page) = page {
            store.record(&name, parse_resource_metrics(&page, now_ms));
        }
    }
    let names: Vec<String> = ready.into_iter().map(|(n, _)| n).collect();
    store.retain_nodes(&names);
}

/// Scrapes every `resolution` until `shutdown` turns true.
pub async fn run(st: ApiState, store: Arc<MetricsStore>, resolution: Duration, mut shutdown: tokio::sync::watch::Receiver<bool>) {
    let resolution = resolution.max(Duration::from_millis(100));
    let timeout = resolution.min(MAX_SCRAPE_TIMEOUT);
    let mut tick = tokio::time::interval(resolution);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => scrape_once(&st, &store, timeout).await,
            _ = shutdown.changed() => return,
        }
        if *shutdown.borrow() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kubelet_page_yields_node_and_container_points() {
        let page = "# HELP container_cpu_usage_seconds_total [STABLE] x\n# TYPE container_cpu_usage_seconds_total counter\n\
container_cpu_usage_seconds_total{container=\"c\",namespace=\"ns\",pod=\"p\"} 1.5 2000\n\
# TYPE container_memory_working_set_bytes gauge\ncontainer_memory_working_set_bytes{container=\"c\",namespace=\"ns\",pod=\"p\"} 4096 2000\n\
# TYPE container_start_time_seconds gauge\ncontainer_start_time_seconds{container=\"c\",namespace=\"ns\",pod=\"p\"} 1.5\n\
container_cpu_usage_seconds_total{container=\"nomem\",namespace=\"ns\",pod=\"p\"} 1 2000\n\
# TYPE node_cpu_usage_seconds_total counter\nnode_cpu_usage_seconds_total 7 3000\n\
# TYPE node_memory_working_set_bytes gauge\nnode_memory_working_set_bytes 1048576 3000\nscrape_error 0\n";
        let s = parse_resource_metrics(page, 99);
        assert_eq!(s.node, Some(Point { ts_ms: 3000, cpu_seconds: 7.0, memory_bytes: 1_048_576.0, start: None }));
        let key = ("ns".to_string(), "p".to_string(), "c".to_string());
        assert_eq!(s.containers.get(&key), Some(&Point { ts_ms: 2000, cpu_seconds: 1.5, memory_bytes: 4096.0, start: Some(1.5) }));
        assert_eq!(s.containers.len(), 1, "a container without memory is left out");
    }
}
