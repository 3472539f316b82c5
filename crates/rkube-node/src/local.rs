//! A whole node in one process, for `rkube up --node`: `rkube runtime` on a socket under the
//! data directory, the node agent, and a binder that assigns pods without `spec.nodeName` to
//! this node through `pods/binding` (there is no scheduler in rkube).

use std::path::{Path, PathBuf};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Binding, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::PostParams;
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::Api;
use tokio::task::JoinHandle;

use crate::agent::{self, AgentHandle, NodeConfig};
use crate::shutdown::{self, Shutdown, Trigger};

/// A running local node.
#[derive(Debug)]
pub struct NodeHandle {
    runtime: rkube_runtime::RuntimeHandle,
    agent: AgentHandle,
    binder_stop: Trigger,
    binder: JoinHandle<()>,
    /// The Node's name.
    pub node_name: String,
}

impl NodeHandle {
    /// The agent (metrics, cache, PLEG).
    pub fn agent(&self) -> &AgentHandle {
        &self.agent
    }

    /// The runtime (records, processes).
    pub fn runtime(&self) -> &rkube_runtime::RuntimeHandle {
        &self.runtime
    }

    /// The runtime's CRI endpoint.
    pub fn runtime_endpoint(&self) -> String {
        self.runtime.endpoint()
    }

    /// Stops binder and agent, then the runtime (killing every container).
    pub async fn shutdown(self) {
        self.binder_stop.fire();
        let _ = self.binder.await;
        self.agent.shutdown().await;
        self.runtime.shutdown().await;
    }
}

/// A DNS-1123 node name from the host name (`rkube-node` if there is none).
pub fn default_node_name() -> String {
    let raw = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let name: String = raw
        .trim()
        .to_ascii_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '.' { c } else { '-' })
        .collect();
    let name = name.trim_matches(|c| c == '-' || c == '.').to_string();
    if name.is_empty() {
        "rkube-node".into()
    } else {
        name
    }
}

/// A kube client from a kubeconfig file.
pub async fn client_from_kubeconfig(path: &Path) -> anyhow::Result<kube::Client> {
    let kubeconfig = kube::config::Kubeconfig::read_from(path)?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &kube::config::KubeConfigOptions::default()).await?;
    Ok(kube::Client::try_from(config)?)
}

/// Binds every unscheduled pod (default scheduler) to `node` until `shutdown`.
pub async fn run_binder(client: kube::Client, node: String, mut shutdown: Shutdown) {
    let api: Api<Pod> = Api::all(client.clone());
    let config = watcher::Config::default().fields("spec.nodeName=");
    let mut pods = watcher::watcher(api, config).default_backoff().boxed();
    loop {
        let ev = tokio::select! {
            ev = pods.next() => ev,
            _ = shutdown.wait() => return,
        };
        let pod = match ev {
            Some(Ok(Event::Apply(p) | Event::InitApply(p))) => p,
            Some(Ok(_)) => continue,
            Some(Err(err)) => {
                tracing::warn!(%err, "unscheduled pod watch failed; retrying");
                continue;
            }
            None => return,
        };
        let spec = pod.spec.as_ref();
        let scheduler = spec.and_then(|s| s.scheduler_name.as_deref()).unwrap_or("default-scheduler");
        if pod.metadata.deletion_timestamp.is_some()
            || spec.and_then(|s| s.node_name.as_deref()).is_some_and(|n| !n.is_empty())
            || scheduler != "default-scheduler"
        {
            continue;
        }
        if let Err(err) = bind(&client, &pod, &node).await {
            tracing::warn!(%err, pod = ?pod.metadata.name, "binding pod failed");
        }
    }
}

/// POSTs a Binding of `pod` to `node`.
pub async fn bind(client: &kube::Client, pod: &Pod, node: &str) -> anyhow::Result<()> {
    let name = pod.metadata.name.clone().unwrap_or_default();
    let namespace = pod.metadata.namespace.clone().unwrap_or_else(|| "default".into());
    let binding = Binding {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(namespace.clone()),
            uid: pod.metadata.uid.clone(),
            ..Default::default()
        },
        target: ObjectReference { kind: Some("Node".into()), name: Some(node.into()), api_version: Some("v1".into()), ..Default::default() },
    };
    let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    let _: serde_json::Value = pods.create_subresource("binding", &name, &PostParams::default(), &binding).await?;
    Ok(())
}

/// Starts `rkube runtime` (socket `<data_dir>/node/cri.sock`), the node agent (evented PLEG,
/// pod logs under `<data_dir>/node/pods`, healthz on an ephemeral loopback port) and the binder,
/// for the API server of `kubeconfig_path`. The node is named after the host.
pub async fn run_local_node(kubeconfig_path: impl AsRef<Path>, data_dir: impl AsRef<Path>) -> anyhow::Result<NodeHandle> {
    let root: PathBuf = data_dir.as_ref().join("node");
    std::fs::create_dir_all(&root)?;
    let runtime_config = rkube_runtime::RuntimeConfig::new(root.join("runtime"));
    std::fs::create_dir_all(&runtime_config.root_dir)?;
    let runtime = rkube_runtime::serve(&root.join("cri.sock"), runtime_config).await?;
    let client = client_from_kubeconfig(kubeconfig_path.as_ref()).await?;
    let node_name = default_node_name();
    let mut config = NodeConfig::new(node_name.clone(), runtime.endpoint());
    config.pod_logs_dir = root.join("pods");
    config.root_dir = root.join("kubelet");
    config.healthz_addr = ([127, 0, 0, 1], 0).into();
    let agent = match agent::start(config, client.clone()).await {
        Ok(a) => a,
        Err(err) => {
            runtime.shutdown().await;
            return Err(err);
        }
    };
    let (binder_stop, sd) = shutdown::channel();
    let binder = tokio::spawn(run_binder(client, node_name.clone(), sd));
    Ok(NodeHandle { runtime, agent, binder_stop, binder, node_name })
}
