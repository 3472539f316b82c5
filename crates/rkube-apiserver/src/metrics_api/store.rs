//! The scraped samples and the usage computed from them, as metrics-server's storage keeps them
//! (upstream `sigs.k8s.io/metrics-server/pkg/storage`): the last two samples of each node and
//! each container; a CPU rate needs both (cumulative CPU seconds over the time between them), so
//! a node or container seen once has no usage yet.

use std::collections::HashMap;
use std::sync::RwLock;

/// One reading of a node or container.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Point {
    /// When it was read, ms since the epoch.
    pub ts_ms: i64,
    /// Cumulative CPU time, seconds.
    pub cpu_seconds: f64,
    /// Working set, bytes.
    pub memory_bytes: f64,
    /// The container's start time (seconds since the epoch); a change means a restart, whose
    /// counter starts over.
    pub start: Option<f64>,
}

/// The last two readings of one series.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Series {
    /// The reading before `last` (none after the first scrape or a restart).
    pub prev: Option<Point>,
    /// The newest reading.
    pub last: Point,
}

/// Usage over one window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    /// The newest reading's time, ms since the epoch (`timestamp`).
    pub ts_ms: i64,
    /// Time between the two readings, ms (`window`).
    pub window_ms: i64,
    /// CPU rate, nanocores.
    pub nano_cores: u64,
    /// Working set of the newest reading, bytes.
    pub memory_bytes: u64,
}

impl Series {
    /// The series after `p` is read: `p` becomes the newest reading, the old newest the one
    /// before it (unless `p` is no newer, or the container restarted).
    pub fn push(old: Option<&Series>, p: Point) -> Series {
        match old {
            Some(o) if o.last.ts_ms >= p.ts_ms => *o,
            Some(o) if o.last.start == p.start => Series { prev: Some(o.last), last: p },
            _ => Series { prev: None, last: p },
        }
    }

    /// Usage between the two readings; `None` with a single reading or a counter that went back.
    pub fn usage(&self) -> Option<Usage> {
        let prev = self.prev?;
        let window_ms = self.last.ts_ms - prev.ts_ms;
        let used = self.last.cpu_seconds - prev.cpu_seconds;
        if window_ms <= 0 || used < 0.0 {
            return None;
        }
        let nano_cores = (used * 1e9 / (window_ms as f64 / 1e3)).round();
        Some(Usage {
            ts_ms: self.last.ts_ms,
            window_ms,
            nano_cores: nano_cores as u64,
            memory_bytes: self.last.memory_bytes.max(0.0) as u64,
        })
    }
}

/// A container by namespace, pod and container name.
pub type ContainerKey = (String, String, String);

/// What one scrape of a node's `/metrics/resource` yielded.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeScrape {
    /// The node's own reading, if the page had one.
    pub node: Option<Point>,
    /// Each container's reading.
    pub containers: HashMap<ContainerKey, Point>,
}

#[derive(Debug, Default)]
struct NodeEntry {
    node: Option<Series>,
    containers: HashMap<ContainerKey, Series>,
}

/// Samples of every node scraped, by node name. Shared by the scraper (writes) and the handlers
/// (reads).
#[derive(Debug, Default)]
pub struct MetricsStore {
    nodes: RwLock<HashMap<String, NodeEntry>>,
}

impl MetricsStore {
    /// Records one scrape of `node`; containers it no longer lists are forgotten.
    pub fn record(&self, node: &str, scrape: NodeScrape) {
        let mut nodes = self.nodes.write().unwrap_or_else(|p| p.into_inner());
        let old = nodes.remove(node).unwrap_or_default();
        let entry = NodeEntry {
            node: match scrape.node {
                Some(p) => Some(Series::push(old.node.as_ref(), p)),
                None => old.node,
            },
            containers: scrape
                .containers
                .into_iter()
                .map(|(k, p)| {
                    let s = Series::push(old.containers.get(&k), p);
                    (k, s)
                })
                .collect(),
        };
        nodes.insert(node.to_string(), entry);
    }

    /// Forgets nodes not in `keep` (deleted or no longer Ready).
    pub fn retain_nodes(&self, keep: &[String]) {
        self.nodes.write().unwrap_or_else(|p| p.into_inner()).retain(|n, _| keep.contains(n));
    }

    /// The usage of node `name`, once two readings exist.
    pub fn node_usage(&self, name: &str) -> Option<Usage> {
        self.nodes.read().unwrap_or_else(|p| p.into_inner()).get(name)?.node?.usage()
    }

    /// The usage of each container of pod `namespace/name`, by container name, sorted; `None`
    /// unless every container the pod was last seen with has two readings (as metrics-server,
    /// which leaves out pods with a container it cannot measure yet).
    pub fn pod_usage(&self, namespace: &str, name: &str) -> Option<Vec<(String, Usage)>> {
        let nodes = self.nodes.read().unwrap_or_else(|p| p.into_inner());
        let mut out = Vec::new();
        for entry in nodes.values() {
            for ((ns, pod, container), series) in &entry.containers {
                if ns == namespace && pod == name {
                    out.push((container.clone(), series.usage()?));
                }
            }
        }
        if out.is_empty() {
            return None;
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(ts_ms: i64, cpu_seconds: f64, start: f64) -> Point {
        Point { ts_ms, cpu_seconds, memory_bytes: 2048.0, start: Some(start) }
    }

    #[test]
    fn usage_needs_two_readings_and_is_a_rate_over_the_window() {
        let store = MetricsStore::default();
        let key = ("ns".to_string(), "p".to_string(), "c".to_string());
        let scrape = |ts, cpu| NodeScrape {
            node: Some(p(ts, cpu, 0.0)),
            containers: HashMap::from([(key.clone(), p(ts, cpu / 2.0, 100.0))]),
        };
        store.record("n1", scrape(10_000, 4.0));
        assert_eq!(store.node_usage("n1"), None);
        assert_eq!(store.pod_usage("ns", "p"), None);
        store.record("n1", scrape(12_000, 5.0));
        let u = store.node_usage("n1").expect("two readings");
        assert_eq!(u, Usage { ts_ms: 12_000, window_ms: 2_000, nano_cores: 500_000_000, memory_bytes: 2048 });
        let pod = store.pod_usage("ns", "p").expect("pod");
        assert_eq!(pod, vec![("c".to_string(), Usage { ts_ms: 12_000, window_ms: 2_000, nano_cores: 250_000_000, memory_bytes: 2048 })]);
        // A restart (new start time) starts the container over.
        let restarted = NodeScrape { node: None, containers: HashMap::from([(key.clone(), p(14_000, 0.1, 200.0))]) };
        store.record("n1", restarted);
        assert_eq!(store.pod_usage("ns", "p"), None);
        store.retain_nodes(&[]);
        assert_eq!(store.node_usage("n1"), None);
    }
}
