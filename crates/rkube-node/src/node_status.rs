//! The Node object and its heartbeats (upstream `kubelet_node_status.go`,
//! `pkg/kubelet/nodelease`): registration, status with the `Ready` condition (false while PLEG
//! is unhealthy, as kubelet's `PLEG is not healthy` runtime error), and a Lease in
//! `kube-node-lease` renewed every 10 s (a quarter of the 40 s lease duration).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{DaemonEndpoint, Node, NodeAddress, NodeDaemonEndpoints, NodeCondition, NodeStatus, NodeSystemInfo};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference, Time};
use k8s_openapi::jiff;
use kube::api::{Patch, PatchParams, PostParams};
use kube::Api;

use crate::shutdown::Shutdown;

/// Lease duration (kubelet `nodeLeaseDurationSeconds`).
pub const LEASE_DURATION_SECONDS: i32 = 40;
/// Lease renew interval (a quarter of the duration, as kubelet).
pub const LEASE_RENEW_INTERVAL: Duration = Duration::from_secs(10);
/// How often the node status is recomputed (kubelet `nodeStatusUpdateFrequency`).
pub const NODE_STATUS_UPDATE_FREQUENCY: Duration = Duration::from_secs(10);
/// How often an unchanged node status is still reported (kubelet `nodeStatusReportFrequency`).
pub const NODE_STATUS_REPORT_FREQUENCY: Duration = Duration::from_secs(300);
/// The version rkube's node agent reports (the kubelet API level it follows).
pub const KUBELET_VERSION: &str = "v1.33.0-rkube";

/// Errors talking to the API server about the node.
#[derive(Debug, thiserror::Error)]
pub enum NodeStatusError {
    /// An API call failed.
    #[error("{op}: {source}")]
    Api {
        /// What was being done.
        op: &'static str,
        /// The client error.
        source: kube::Error,
    },
}

/// Static facts about this node.
#[derive(Clone, Debug)]
pub struct NodeInfo {
    /// Node name.
    pub name: String,
    /// Internal IP.
    pub ip: String,
    /// `<runtime name>://<runtime version>`.
    pub container_runtime_version: String,
    /// Port of the kubelet API (`status.daemonEndpoints.kubeletEndpoint.port`).
    pub kubelet_port: u16,
}

fn now_time() -> Time {
    Time(jiff::Timestamp::from_nanosecond(i128::from(crate::pleg::Timestamp::now().0)).unwrap_or(jiff::Timestamp::UNIX_EPOCH))
}

fn read_trimmed(path: &str) -> String {
    std::fs::read_to_string(path).map(|s| s.trim().to_string()).unwrap_or_default()
}

fn memory_kib() -> u64 {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn os_image() -> String {
    let text = std::fs::read_to_string("/etc/os-release").unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix("PRETTY_NAME="))
        .map(|v| v.trim_matches('"').to_string())
        .unwrap_or_else(|| "Linux".into())
}

/// The node's capacity (also its allocatable: nothing is reserved): cpu
/// cores, memory from `/proc/meminfo`, 110 pods.
pub fn capacity() -> BTreeMap<String, Quantity> {
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    BTreeMap::from([
        ("cpu".to_string(), Quantity(cpus.to_string())),
        ("memory".to_string(), Quantity(format!("{}Ki", memory_kib()))),
        ("pods".to_string(), Quantity("110".into())),
    ])
}

fn condition(ty: &str, ok_status: &str, reason: &str, message: &str, old: Option<&NodeStatus>) -> NodeCondition {
    let now = now_time();
    let previous = old
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == ty))
        .filter(|c| c.status == ok_status)
        .and_then(|c| c.last_transition_time.clone());
    NodeCondition {
        type_: ty.into(),
        status: ok_status.into(),
        reason: Some(reason.into()),
        message: Some(message.into()),
        last_heartbeat_time: Some(now.clone()),
        last_transition_time: previous.or(Some(now)),
    }
}

/// The node status; `runtime_error` (e.g. an unhealthy PLEG) makes `Ready` false.
pub fn node_status(info: &NodeInfo, runtime_error: Option<&str>, old: Option<&NodeStatus>) -> NodeStatus {
    let ready = match runtime_error {
        None => condition("Ready", "True", "KubeletReady", "kubelet is posting ready status", old),
        Some(err) => condition("Ready", "False", "KubeletNotReady", err, old),
    };
    let hostname = read_trimmed("/proc/sys/kernel/hostname");
    NodeStatus {
        conditions: Some(vec![
            condition("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available", old),
            condition("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure", old),
            condition("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available", old),
            ready,
        ]),
        addresses: Some(vec![
            NodeAddress { type_: "InternalIP".into(), address: info.ip.clone() },
            NodeAddress { type_: "Hostname".into(), address: if hostname.is_empty() { info.name.clone() } else { hostname } },
        ]),
        daemon_endpoints: Some(NodeDaemonEndpoints {
            kubelet_endpoint: Some(DaemonEndpoint { port: i32::from(info.kubelet_port) }),
        }),
        capacity: Some(capacity()),
        allocatable: Some(capacity()),
        node_info: Some(NodeSystemInfo {
            architecture: std::env::consts::ARCH.replace("x86_64", "amd64").replace("aarch64", "arm64"),
            operating_system: "linux".into(),
            kernel_version: read_trimmed("/proc/sys/kernel/osrelease"),
            os_image: os_image(),
            container_runtime_version: info.container_runtime_version.clone(),
            kubelet_version: KUBELET_VERSION.into(),
            kube_proxy_version: KUBELET_VERSION.into(),
            machine_id: read_trimmed("/etc/machine-id"),
            system_uuid: read_trimmed("/etc/machine-id"),
            boot_id: read_trimmed("/proc/sys/kernel/random/boot_id"),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Creates the Node if missing (labels `kubernetes.io/hostname`, `kubernetes.io/os`,
/// `kubernetes.io/arch`) and writes its status; returns the Node.
pub async fn register(client: &kube::Client, info: &NodeInfo) -> Result<Node, NodeStatusError> {
    let nodes: Api<Node> = Api::all(client.clone());
    let arch = std::env::consts::ARCH.replace("x86_64", "amd64").replace("aarch64", "arm64");
    let node = Node {
        metadata: ObjectMeta {
            name: Some(info.name.clone()),
            labels: Some(BTreeMap::from([
                ("kubernetes.io/hostname".to_string(), info.name.clone()),
                ("kubernetes.io/os".to_string(), "linux".to_string()),
                ("kubernetes.io/arch".to_string(), arch),
            ])),
            ..Default::default()
        },
        ..Default::default()
    };
    match nodes.create(&PostParams::default(), &node).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(source) => return Err(NodeStatusError::Api { op: "create node", source }),
    }
    update_status(client, info, None).await
}

/// Writes the node status (merge patch on `nodes/status`).
pub async fn update_status(client: &kube::Client, info: &NodeInfo, runtime_error: Option<&str>) -> Result<Node, NodeStatusError> {
    let nodes: Api<Node> = Api::all(client.clone());
    let current = nodes.get(&info.name).await.map_err(|source| NodeStatusError::Api { op: "get node", source })?;
    let status = node_status(info, runtime_error, current.status.as_ref());
    let patch = serde_json::json!({ "status": status });
    nodes
        .patch_status(&info.name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|source| NodeStatusError::Api { op: "update node status", source })
}

/// Creates or renews the node's Lease.
pub async fn renew_lease(client: &kube::Client, node: &Node) -> Result<Lease, NodeStatusError> {
    let name = node.metadata.name.clone().unwrap_or_default();
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let now = MicroTime(now_time().0);
    let spec = LeaseSpec {
        holder_identity: Some(name.clone()),
        lease_duration_seconds: Some(LEASE_DURATION_SECONDS),
        renew_time: Some(now),
        ..Default::default()
    };
    match leases.get_opt(&name).await.map_err(|source| NodeStatusError::Api { op: "get lease", source })? {
        Some(mut lease) => {
            lease.spec = Some(spec);
            leases
                .replace(&name, &PostParams::default(), &lease)
                .await
                .map_err(|source| NodeStatusError::Api { op: "renew lease", source })
        }
        None => {
            let owner = node.metadata.uid.clone().map(|uid| OwnerReference {
                api_version: "v1".into(),
                kind: "Node".into(),
                name: name.clone(),
                uid,
                ..Default::default()
            });
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(name.clone()),
                    namespace: Some("kube-node-lease".into()),
                    owner_references: owner.map(|o| vec![o]),
                    ..Default::default()
                },
                spec: Some(spec),
            };
            leases
                .create(&PostParams::default(), &lease)
                .await
                .map_err(|source| NodeStatusError::Api { op: "create lease", source })
        }
    }
}

/// Keeps the lease fresh and the node status current until `shutdown` (registering the node
/// first unless `registered` is given). `health` reports the runtime error that makes the node
/// NotReady (PLEG health).
pub async fn heartbeat(
    client: kube::Client,
    info: NodeInfo,
    registered: Option<Node>,
    health: Arc<dyn Fn() -> Result<(), String> + Send + Sync>,
    mut shutdown: Shutdown,
) {
    let mut node: Option<Node> = registered;
    let mut lease_tick = tokio::time::interval(LEASE_RENEW_INTERVAL);
    let mut status_tick = tokio::time::interval(NODE_STATUS_UPDATE_FREQUENCY);
    let mut last_error: Option<Option<String>> = None;
    let mut last_report = tokio::time::Instant::now();
    loop {
        tokio::select! {
            _ = lease_tick.tick() => {
                if node.is_none() {
                    match register(&client, &info).await {
                        Ok(n) => node = Some(n),
                        Err(err) => { tracing::warn!(%err, "registering node failed"); continue; }
                    }
                }
                if let Some(n) = &node {
                    if let Err(err) = renew_lease(&client, n).await {
                        tracing::warn!(%err, "renewing node lease failed");
                    }
                }
            }
            _ = status_tick.tick() => {
                if node.is_none() { continue; }
                let err = health().err().map(|e| format!("PLEG is not healthy: {e}"));
                let changed = last_error.as_ref() != Some(&err);
                if changed || last_report.elapsed() >= NODE_STATUS_REPORT_FREQUENCY {
                    match update_status(&client, &info, err.as_deref()).await {
                        Ok(n) => { node = Some(n); last_error = Some(err); last_report = tokio::time::Instant::now(); }
                        Err(e) => tracing::warn!(%e, "updating node status failed"),
                    }
                }
            }
            _ = shutdown.wait() => return,
        }
    }
}
