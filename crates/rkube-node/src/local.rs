//! A whole node in one process, for `rkube up --node`: `rkube runtime` on a socket under the
//! data directory and the node agent. Pods reach this node through the scheduler
//! (`rkube-scheduler`, which `rkube up` runs in process).

use std::path::{Path, PathBuf};

use crate::agent::{self, AgentHandle, NodeConfig};

/// A running local node.
#[derive(Debug)]
pub struct NodeHandle {
    runtime: rkube_runtime::RuntimeHandle,
    agent: AgentHandle,
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

    /// Stops the agent, then the runtime (killing every container).
    pub async fn shutdown(self) {
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

/// Starts `rkube runtime` (socket `<data_dir>/node/cri.sock`), the node agent (evented PLEG,
/// pod logs under `<data_dir>/node/pods`, healthz on an ephemeral loopback port) for the API
/// server of `kubeconfig_path`. The node is named after the host.
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
    Ok(NodeHandle { runtime, agent, node_name })
}
