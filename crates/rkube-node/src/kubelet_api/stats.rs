//! The kubelet's resource endpoints: `GET /pods`, `GET /stats/summary`, `GET /metrics/resource`
//! and `GET /metrics` (upstream `pkg/kubelet/server/server.go`, `pkg/kubelet/server/stats` and
//! `pkg/kubelet/metrics/collectors/resource_metrics.go`).
//!
//! The figures come from the runtime's CRI stats (`ListPodSandboxStats`, the containers' own
//! accounting) and, for the node, from `/proc/stat` and `/proc/meminfo`
//! ([`rkube_runtime::stats::host_usage`]), as kubelet's CRI stats provider combines the
//! runtime's stats with cAdvisor's root cgroup.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use k8s_openapi::jiff::Timestamp;
use rkube_runtime::cri;
use rkube_runtime::stats::{host_usage, RateTracker};
use serde_json::{json, Map, Value};

use super::{text, Ctx};
use crate::cri::{RuntimeApi as _, LABEL_POD_NAME, LABEL_POD_NAMESPACE, LABEL_POD_UID};

/// Key of the node's own CPU samples in the rate tracker (never a sandbox id: those are hex).
const NODE_KEY: &str = "node";

/// What the resource endpoints read besides the runtime.
#[derive(Clone)]
pub struct StatsDeps {
    /// The node's name (`node.nodeName` of the summary).
    pub node_name: String,
    /// The pods bound to this node as the agent knows them (`/pods`).
    pub pods: crate::pod::manager::PodStore,
    /// The agent's own metrics (`/metrics`).
    pub registry: Arc<prometheus_client::registry::Registry>,
    /// The node's previous CPU sample (`usageNanoCores`).
    pub rates: Arc<RateTracker>,
}

/// CRI nanoseconds since the epoch as a `metav1.Time` (RFC 3339, whole seconds).
fn time(ns: i64) -> String {
    Timestamp::from_second(ns.div_euclid(1_000_000_000)).map(|t| t.to_string()).unwrap_or_default()
}

fn value(v: &Option<cri::UInt64Value>) -> Option<u64> {
    v.as_ref().map(|v| v.value)
}

/// A stats/v1alpha1 `CPUStats` object.
fn cpu_json(c: &cri::CpuUsage) -> Value {
    let mut o = Map::new();
    o.insert("time".into(), json!(time(c.timestamp)));
    if let Some(n) = value(&c.usage_nano_cores) {
        o.insert("usageNanoCores".into(), json!(n));
    }
    if let Some(n) = value(&c.usage_core_nano_seconds) {
        o.insert("usageCoreNanoSeconds".into(), json!(n));
    }
    Value::Object(o)
}

/// A stats/v1alpha1 `MemoryStats` object.
fn memory_json(m: &cri::MemoryUsage) -> Value {
    let mut o = Map::new();
    o.insert("time".into(), json!(time(m.timestamp)));
    for (key, v) in [
        ("availableBytes", &m.available_bytes),
        ("usageBytes", &m.usage_bytes),
        ("workingSetBytes", &m.working_set_bytes),
        ("rssBytes", &m.rss_bytes),
        ("pageFaults", &m.page_faults),
        ("majorPageFaults", &m.major_page_faults),
    ] {
        if let Some(n) = value(v) {
            o.insert(key.into(), json!(n));
        }
    }
    Value::Object(o)
}

/// One pod's figures, gathered from the runtime.
#[derive(Debug, Clone)]
pub struct PodUsage {
    /// The pod's namespace.
    pub namespace: String,
    /// Pod name.
    pub name: String,
    /// Pod uid.
    pub uid: String,
    /// The sandbox's creation, CRI ns.
    pub start_ns: i64,
    /// The sandbox's stats (sum of its containers) with each running container's.
    pub stats: cri::LinuxPodSandboxStats,
    /// Creation time (CRI ns) of each container, by container id.
    pub container_start_ns: HashMap<String, i64>,
}

/// The node's and the pods' figures at one instant.
#[derive(Debug, Clone)]
pub struct Usage {
    /// When the node was read, CRI ns.
    pub at_ns: i64,
    /// The host's usage; `None` when `/proc` could not be read.
    pub node: Option<rkube_runtime::stats::HostUsage>,
    /// Node CPU rate since the previous read, nanocores.
    pub node_nano_cores: Option<u64>,
    /// The newest Ready sandbox of each pod.
    pub pods: Vec<PodUsage>,
    /// False when the runtime could not be asked.
    pub runtime_ok: bool,
}

/// Reads the node's usage and every pod's from the runtime.
pub(crate) async fn gather(ctx: &Ctx) -> Usage {
    let at_ns = rkube_runtime::clock::wall_ns();
    let node = tokio::task::spawn_blocking(host_usage).await.ok().and_then(Result::ok);
    let node_nano_cores = node.and_then(|n| ctx.stats.rates.rate(NODE_KEY, at_ns, n.cpu_ns));
    let (sandboxes, stats, containers) =
        tokio::join!(ctx.cri.list_pod_sandbox(), ctx.cri.list_pod_sandbox_stats(), ctx.cri.list_containers());
    let (Ok(sandboxes), Ok(stats), Ok(containers)) = (sandboxes, stats, containers) else {
        return Usage { at_ns, node, node_nano_cores, pods: Vec::new(), runtime_ok: false };
    };
    let container_start_ns: HashMap<String, i64> = containers.iter().map(|c| (c.id.clone(), c.created_at)).collect();
    // The newest Ready sandbox of each pod uid (older attempts are history).
    let mut newest: HashMap<String, &cri::PodSandbox> = HashMap::new();
    for s in sandboxes.iter().filter(|s| s.state == cri::PodSandboxState::SandboxReady as i32) {
        let uid = s.labels.get(LABEL_POD_UID).cloned().or_else(|| s.metadata.as_ref().map(|m| m.uid.clone())).unwrap_or_default();
        if newest.get(&uid).is_none_or(|o| o.created_at < s.created_at) {
            newest.insert(uid, s);
        }
    }
    let mut pods: Vec<PodUsage> = stats
        .into_iter()
        .filter_map(|st| {
            let attrs = st.attributes?;
            let (uid, sandbox) = newest.iter().find(|(_, s)| s.id == attrs.id)?;
            let meta = sandbox.metadata.clone().unwrap_or_default();
            let label = |k: &str, fallback: &str| attrs.labels.get(k).cloned().unwrap_or_else(|| fallback.to_string());
            Some(PodUsage {
                namespace: label(LABEL_POD_NAMESPACE, &meta.namespace),
                name: label(LABEL_POD_NAME, &meta.name),
                uid: uid.clone(),
                start_ns: sandbox.created_at,
                container_start_ns: st
                    .linux
                    .iter()
                    .flat_map(|l| &l.containers)
                    .filter_map(|c| c.attributes.as_ref())
                    .map(|a| (a.id.clone(), container_start_ns.get(&a.id).copied().unwrap_or(0)))
                    .collect(),
                stats: st.linux?,
            })
        })
        .collect();
    pods.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    Usage { at_ns, node, node_nano_cores, pods, runtime_ok: true }
}

fn container_name(c: &cri::ContainerStats) -> String {
    c.attributes.as_ref().and_then(|a| a.metadata.as_ref()).map(|m| m.name.clone()).unwrap_or_default()
}

/// The stats/v1alpha1 `Summary` of `usage` for node `node_name` (upstream
/// `k8s.io/kubelet/pkg/apis/stats/v1alpha1/types.go`): `node` with `nodeName`, `startTime` (boot
/// time), `cpu` and `memory`; `pods` with `podRef`, `startTime`, `containers` (name, startTime,
/// cpu, memory), and the pod's `cpu` and `memory`.
pub fn summary(node_name: &str, usage: &Usage) -> Value {
    let mut node = json!({"nodeName": node_name, "systemContainers": []});
    if let Some(boot) = rkube_runtime::stats::boot_time_secs() {
        node["startTime"] = json!(time(i64::try_from(boot).unwrap_or(0).saturating_mul(1_000_000_000)));
    }
    if let Some(n) = usage.node {
        let cpu = cri::CpuUsage {
            timestamp: usage.at_ns,
            usage_core_nano_seconds: Some(cri::UInt64Value { value: n.cpu_ns }),
            usage_nano_cores: usage.node_nano_cores.map(|value| cri::UInt64Value { value }),
        };
        node["cpu"] = cpu_json(&cpu);
        node["memory"] = json!({
            "time": time(usage.at_ns),
            "availableBytes": n.memory_available_bytes,
            "usageBytes": n.memory_usage_bytes,
            "workingSetBytes": n.memory_working_set_bytes,
            "rssBytes": n.memory_rss_bytes,
        });
    }
    let pods: Vec<Value> = usage
        .pods
        .iter()
        .map(|p| {
            let containers: Vec<Value> = p
                .stats
                .containers
                .iter()
                .map(|c| {
                    let id = c.attributes.as_ref().map(|a| a.id.as_str()).unwrap_or("");
                    let mut o = json!({"name": container_name(c), "startTime": time(p.container_start_ns.get(id).copied().unwrap_or(0))});
                    if let Some(cpu) = &c.cpu {
                        o["cpu"] = cpu_json(cpu);
                    }
                    if let Some(m) = &c.memory {
                        o["memory"] = memory_json(m);
                    }
                    o
                })
                .collect();
            let mut o = json!({
                "podRef": {"name": p.name, "namespace": p.namespace, "uid": p.uid},
                "startTime": time(p.start_ns),
                "containers": containers,
            });
            if let Some(cpu) = &p.stats.cpu {
                o["cpu"] = cpu_json(cpu);
            }
            if let Some(m) = &p.stats.memory {
                o["memory"] = memory_json(m);
            }
            o
        })
        .collect();
    json!({"node": node, "pods": pods})
}

/// Appends one metric family: `# HELP`, `# TYPE` and its samples (`labels`, value, timestamp
/// in ms), in the Prometheus text format.
fn family(out: &mut String, name: &str, kind: &str, help: &str, samples: &[(String, f64, i64)]) {
    use std::fmt::Write as _;
    let _ = writeln!(out, "# HELP {name} [STABLE] {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
    for (labels, v, ts) in samples {
        let labels = if labels.is_empty() { String::new() } else { format!("{{{labels}}}") };
        if *ts > 0 {
            let _ = writeln!(out, "{name}{labels} {v} {ts}");
        } else {
            let _ = writeln!(out, "{name}{labels} {v}");
        }
    }
}

/// A label value escaped as the text format wants (`\\`, `\"`, `\n`).
fn esc(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// The `/metrics/resource` page of `usage`: kubelet's resource metrics with upstream's names,
/// help texts and labels, each sample stamped with its reading's time (ms since the epoch):
/// `container_cpu_usage_seconds_total`, `container_memory_working_set_bytes`,
/// `container_start_time_seconds` (labels `container`, `namespace`, `pod`),
/// `node_cpu_usage_seconds_total`, `node_memory_working_set_bytes`,
/// `pod_cpu_usage_seconds_total`, `pod_memory_working_set_bytes` (labels `namespace`, `pod`),
/// and `scrape_error` / `resource_scrape_error` (1 when the runtime could not be read).
///
/// Written by hand rather than through `prometheus-client`, whose encoder has no per-sample
/// timestamps; metrics-server reads those to compute rates.
pub fn resource_metrics(usage: &Usage) -> String {
    let ms = |ns: i64| ns / 1_000_000;
    let secs = |ns: u64| ns as f64 / 1e9;
    let mut c_cpu = Vec::new();
    let mut c_mem = Vec::new();
    let mut c_start = Vec::new();
    let mut p_cpu = Vec::new();
    let mut p_mem = Vec::new();
    for p in &usage.pods {
        let pod_labels = format!("namespace=\"{}\",pod=\"{}\"", esc(&p.namespace), esc(&p.name));
        for c in &p.stats.containers {
            let labels = format!("container=\"{}\",{pod_labels}", esc(&container_name(c)));
            if let Some(cpu) = &c.cpu {
                if let Some(n) = value(&cpu.usage_core_nano_seconds) {
                    c_cpu.push((labels.clone(), secs(n), ms(cpu.timestamp)));
                }
            }
            if let Some(m) = &c.memory {
                if let Some(n) = value(&m.working_set_bytes) {
                    c_mem.push((labels.clone(), n as f64, ms(m.timestamp)));
                }
            }
            let id = c.attributes.as_ref().map(|a| a.id.as_str()).unwrap_or("");
            if let Some(start) = p.container_start_ns.get(id).filter(|s| **s > 0) {
                c_start.push((labels, *start as f64 / 1e9, 0));
            }
        }
        if let Some(cpu) = &p.stats.cpu {
            if let Some(n) = value(&cpu.usage_core_nano_seconds) {
                p_cpu.push((pod_labels.clone(), secs(n), ms(cpu.timestamp)));
            }
        }
        if let Some(m) = &p.stats.memory {
            if let Some(n) = value(&m.working_set_bytes) {
                p_mem.push((pod_labels, n as f64, ms(m.timestamp)));
            }
        }
    }
    let mut out = String::new();
    family(&mut out, "container_cpu_usage_seconds_total", "counter", "Cumulative cpu time consumed by the container in core-seconds", &c_cpu);
    family(&mut out, "container_memory_working_set_bytes", "gauge", "Current working set of the container in bytes", &c_mem);
    family(&mut out, "container_start_time_seconds", "gauge", "Start time of the container since unix epoch in seconds", &c_start);
    let (n_cpu, n_mem) = match usage.node {
        Some(n) => (vec![(String::new(), secs(n.cpu_ns), ms(usage.at_ns))], vec![(String::new(), n.memory_working_set_bytes as f64, ms(usage.at_ns))]),
        None => (Vec::new(), Vec::new()),
    };
    family(&mut out, "node_cpu_usage_seconds_total", "counter", "Cumulative cpu time consumed by the node in core-seconds", &n_cpu);
    family(&mut out, "node_memory_working_set_bytes", "gauge", "Current working set of the node in bytes", &n_mem);
    family(&mut out, "pod_cpu_usage_seconds_total", "counter", "Cumulative cpu time consumed by the pod in core-seconds", &p_cpu);
    family(&mut out, "pod_memory_working_set_bytes", "gauge", "Current working set of the pod in bytes", &p_mem);
    let failed = if usage.runtime_ok && usage.node.is_some() { 0.0 } else { 1.0 };
    let help = "1 if there was an error while getting container metrics, 0 otherwise";
    family(&mut out, "resource_scrape_error", "gauge", help, &[(String::new(), failed, 0)]);
    family(&mut out, "scrape_error", "gauge", help, &[(String::new(), failed, 0)]);
    out
}

/// The `/metrics/cadvisor` page of `usage`: the cAdvisor container metrics that the agent's
/// `/proc` accounting can give, with cAdvisor's names and labels (`container`, `id` (the
/// container id), `image`, `name`, `namespace`, `pod`; CPU also `cpu="total"`), each sample
/// stamped with its reading's time in ms: `container_cpu_usage_seconds_total`,
/// `container_memory_working_set_bytes`, `container_memory_rss`, `container_start_time_seconds`,
/// and the machine's `machine_cpu_cores` and `machine_memory_bytes`. cAdvisor's other families
/// (file system, network, per-CPU, cgroup throttling) are not served: rkube's runtime keeps no
/// per-container cgroups.
///
/// `images` maps `(namespace, pod, container)` to the container's image (from the pods the
/// agent runs); a container it lacks has an empty `image` label.
pub fn cadvisor_metrics(usage: &Usage, images: &ContainerImages, cpu_cores: usize, memory_bytes: Option<u64>) -> String {
    let ms = |ns: i64| ns / 1_000_000;
    let (mut cpu, mut working, mut rss, mut start) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for p in &usage.pods {
        for c in &p.stats.containers {
            let attrs = c.attributes.as_ref();
            let id = attrs.map(|a| a.id.as_str()).unwrap_or("");
            let name = container_name(c);
            let key = (p.namespace.clone(), p.name.clone(), name.clone());
            let image = images.get(&key).map(String::as_str).unwrap_or("");
            let labels = format!(
                "container=\"{}\",id=\"/{}\",image=\"{}\",name=\"{}\",namespace=\"{}\",pod=\"{}\"",
                esc(&name),
                esc(id),
                esc(image),
                esc(id),
                esc(&p.namespace),
                esc(&p.name)
            );
            if let Some(n) = c.cpu.as_ref().and_then(|u| value(&u.usage_core_nano_seconds).map(|n| (n, u.timestamp))) {
                cpu.push((format!("{labels},cpu=\"total\""), n.0 as f64 / 1e9, ms(n.1)));
            }
            if let Some(m) = &c.memory {
                if let Some(n) = value(&m.working_set_bytes) {
                    working.push((labels.clone(), n as f64, ms(m.timestamp)));
                }
                if let Some(n) = value(&m.rss_bytes) {
                    rss.push((labels.clone(), n as f64, ms(m.timestamp)));
                }
            }
            if let Some(at) = p.container_start_ns.get(id).filter(|s| **s > 0) {
                start.push((labels, *at as f64 / 1e9, 0));
            }
        }
    }
    let mut out = String::new();
    family(&mut out, "container_cpu_usage_seconds_total", "counter", "Cumulative cpu time consumed in seconds.", &cpu);
    family(&mut out, "container_memory_rss", "gauge", "Size of RSS in bytes.", &rss);
    family(&mut out, "container_memory_working_set_bytes", "gauge", "Current working set in bytes.", &working);
    family(&mut out, "container_start_time_seconds", "gauge", "Start time of the container since unix epoch in seconds.", &start);
    family(&mut out, "machine_cpu_cores", "gauge", "Number of logical CPU cores.", &[(String::new(), cpu_cores as f64, 0)]);
    let memory: Vec<(String, f64, i64)> = memory_bytes.map(|b| (String::new(), b as f64, 0)).into_iter().collect();
    family(&mut out, "machine_memory_bytes", "gauge", "Amount of memory installed on the machine.", &memory);
    // cAdvisor's help texts carry no stability marker.
    out.replace(" [STABLE] ", " ")
}

/// Container images by `(namespace, pod, container)`.
pub type ContainerImages = std::collections::HashMap<(String, String, String), String>;

/// `GET /metrics/cadvisor` (Prometheus text, version 0.0.4; see [`cadvisor_metrics`]).
pub(crate) async fn metrics_cadvisor(State(ctx): State<Ctx>) -> Response {
    let usage = gather(&ctx).await;
    let mut images = ContainerImages::new();
    for pod in ctx.stats.pods.list() {
        let (ns, name) = (pod.metadata.namespace.clone().unwrap_or_default(), pod.metadata.name.clone().unwrap_or_default());
        for c in pod.spec.iter().flat_map(|s| s.containers.iter().chain(s.init_containers.iter().flatten())) {
            images.insert((ns.clone(), name.clone(), c.name.clone()), c.image.clone().unwrap_or_default());
        }
    }
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let memory = std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| {
        let line = m.lines().find(|l| l.starts_with("MemTotal:"))?.to_string();
        line.split_whitespace().nth(1)?.parse::<u64>().ok().map(|kb| kb * 1024)
    });
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], cadvisor_metrics(&usage, &images, cores, memory)).into_response()
}

/// `GET /stats/summary` (JSON `Summary`).
pub(crate) async fn stats_summary(State(ctx): State<Ctx>) -> Response {
    let usage = gather(&ctx).await;
    if !usage.runtime_ok {
        return text(StatusCode::INTERNAL_SERVER_ERROR, "failed to get pod stats from the container runtime");
    }
    axum::Json(summary(&ctx.stats.node_name, &usage)).into_response()
}

/// `GET /metrics/resource` (Prometheus text, version 0.0.4).
pub(crate) async fn metrics_resource(State(ctx): State<Ctx>) -> Response {
    let usage = gather(&ctx).await;
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], resource_metrics(&usage)).into_response()
}

/// `GET /metrics`: the agent's own metrics (the PLEG's), OpenMetrics text.
pub(crate) async fn metrics(State(ctx): State<Ctx>) -> Response {
    let mut out = String::new();
    match prometheus_client::encoding::text::encode(&mut out, &ctx.stats.registry) {
        Ok(()) => ([(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], out).into_response(),
        Err(_) => text(StatusCode::INTERNAL_SERVER_ERROR, "encoding metrics failed"),
    }
}

/// `GET /pods`: a `PodList` (`apiVersion: v1`) of the pods bound to this node as the agent last
/// received them.
pub(crate) async fn pods(State(ctx): State<Ctx>) -> Response {
    let items: Vec<Value> = ctx.stats.pods.list().iter().filter_map(|p| serde_json::to_value(p.as_ref()).ok()).collect();
    axum::Json(json!({"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items})).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage() -> Usage {
        let attrs = |id: &str, name: &str| cri::ContainerAttributes {
            id: id.into(),
            metadata: Some(cri::ContainerMetadata { name: name.into(), attempt: 0 }),
            ..Default::default()
        };
        let u = |v: u64| Some(cri::UInt64Value { value: v });
        let container = cri::ContainerStats {
            attributes: Some(attrs("c1", "burn")),
            cpu: Some(cri::CpuUsage { timestamp: 2_000_000_000, usage_core_nano_seconds: u(1_500_000_000), usage_nano_cores: u(900_000_000) }),
            memory: Some(cri::MemoryUsage { timestamp: 2_000_000_000, working_set_bytes: u(4096), rss_bytes: u(4096), ..Default::default() }),
            ..Default::default()
        };
        let stats = cri::LinuxPodSandboxStats {
            cpu: container.cpu,
            memory: container.memory,
            containers: vec![container],
            ..Default::default()
        };
        Usage {
            at_ns: 3_000_000_000,
            node: Some(rkube_runtime::stats::HostUsage { cpu_ns: 7_000_000_000, memory_working_set_bytes: 1 << 20, ..Default::default() }),
            node_nano_cores: None,
            pods: vec![PodUsage {
                namespace: "ns".into(),
                name: "p\"1".into(),
                uid: "u1".into(),
                start_ns: 1_000_000_000,
                stats,
                container_start_ns: HashMap::from([("c1".to_string(), 1_500_000_000)]),
            }],
            runtime_ok: true,
        }
    }

    #[test]
    fn resource_metrics_use_upstream_names_labels_and_millisecond_timestamps() {
        let page = resource_metrics(&usage());
        for line in [
            "# TYPE container_cpu_usage_seconds_total counter",
            "container_cpu_usage_seconds_total{container=\"burn\",namespace=\"ns\",pod=\"p\\\"1\"} 1.5 2000",
            "container_memory_working_set_bytes{container=\"burn\",namespace=\"ns\",pod=\"p\\\"1\"} 4096 2000",
            "container_start_time_seconds{container=\"burn\",namespace=\"ns\",pod=\"p\\\"1\"} 1.5",
            "node_cpu_usage_seconds_total 7 3000",
            "node_memory_working_set_bytes 1048576 3000",
            "pod_cpu_usage_seconds_total{namespace=\"ns\",pod=\"p\\\"1\"} 1.5 2000",
            "pod_memory_working_set_bytes{namespace=\"ns\",pod=\"p\\\"1\"} 4096 2000",
            "scrape_error 0",
        ] {
            assert!(page.lines().any(|l| l == line), "missing {line:?} in\n{page}");
        }
    }

    #[test]
    fn cadvisor_metrics_use_cadvisors_names_and_labels() {
        let images = ContainerImages::from([(("ns".into(), "p\"1".into(), "burn".into()), "busybox:1.36".into())]);
        let page = cadvisor_metrics(&usage(), &images, 2, Some(1 << 30));
        let labels = "container=\"burn\",id=\"/c1\",image=\"busybox:1.36\",name=\"c1\",namespace=\"ns\",pod=\"p\\\"1\"";
        for line in [
            "# TYPE container_cpu_usage_seconds_total counter".to_string(),
            format!("container_cpu_usage_seconds_total{{{labels},cpu=\"total\"}} 1.5 2000"),
            format!("container_memory_working_set_bytes{{{labels}}} 4096 2000"),
            format!("container_memory_rss{{{labels}}} 4096 2000"),
            format!("container_start_time_seconds{{{labels}}} 1.5"),
            "machine_cpu_cores 2".to_string(),
            "machine_memory_bytes 1073741824".to_string(),
            "# HELP machine_cpu_cores Number of logical CPU cores.".to_string(),
        ] {
            assert!(page.lines().any(|l| l == line), "missing {line:?} in\n{page}");
        }
    }

    #[test]
    fn summary_has_the_stats_v1alpha1_shape() {
        let s = summary("n1", &usage());
        assert_eq!(s["node"]["nodeName"], "n1");
        assert_eq!(s["node"]["cpu"]["usageCoreNanoSeconds"], 7_000_000_000u64);
        assert_eq!(s["node"]["memory"]["workingSetBytes"], 1u64 << 20);
        let pod = &s["pods"][0];
        assert_eq!(pod["podRef"], json!({"name": "p\"1", "namespace": "ns", "uid": "u1"}));
        assert_eq!(pod["startTime"], "1970-01-01T00:00:01Z");
        assert_eq!(pod["containers"][0]["name"], "burn");
        assert_eq!(pod["containers"][0]["cpu"]["usageNanoCores"], 900_000_000u64);
        assert_eq!(pod["containers"][0]["memory"]["workingSetBytes"], 4096);
        assert_eq!(pod["cpu"]["time"], "1970-01-01T00:00:02Z");
    }
}
