//! The cluster as one scheduling cycle sees it (upstream
//! `pkg/scheduler/backend/cache/snapshot.go` and `framework.NodeInfo`): every
//! node with the pods assigned to it (bound, or assumed by this scheduler and
//! not yet seen bound) and the sums the plugins need.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Namespace, Node, Pod};

use crate::resources::{self, Resource};

/// A host port a pod uses on its node (`hostIP` empty = every address).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPort {
    /// `TCP`, `UDP` or `SCTP`.
    pub protocol: String,
    /// The host IP (`0.0.0.0` or empty: all).
    pub ip: String,
    /// The port.
    pub port: i32,
}

impl HostPort {
    /// Whether two uses of host ports clash: same protocol and port, and the
    /// same IP or either on every address.
    pub fn conflicts(&self, o: &HostPort) -> bool {
        let any = |ip: &str| ip.is_empty() || ip == "0.0.0.0";
        self.protocol == o.protocol
            && self.port == o.port
            && (self.ip == o.ip || any(&self.ip) || any(&o.ip))
    }
}

/// The host ports of `pod`'s containers.
pub fn host_ports(pod: &Pod) -> Vec<HostPort> {
    let Some(spec) = pod.spec.as_ref() else {
        return Vec::new();
    };
    spec.containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .flat_map(|c| c.ports.iter().flatten())
        .filter_map(|p| {
            let port = p.host_port.filter(|hp| *hp > 0)?;
            Some(HostPort {
                protocol: p.protocol.clone().unwrap_or_else(|| "TCP".into()),
                ip: p.host_ip.clone().unwrap_or_default(),
                port,
            })
        })
        .collect()
}

/// One node and what is assigned to it.
#[derive(Debug, Clone)]
pub struct NodeInfo {
    /// The Node.
    pub node: Arc<Node>,
    /// Its name.
    pub name: String,
    /// Pods assigned to it.
    pub pods: Vec<Arc<Pod>>,
    /// Those of [`NodeInfo::pods`] with required pod anti-affinity terms
    /// (upstream `NodeInfo.PodsWithRequiredAntiAffinity`): the only placed
    /// pods every scheduling cycle must look at.
    pub pods_with_required_anti_affinity: Vec<Arc<Pod>>,
    /// Sum of the pods' requests.
    pub requested: Resource,
    /// Sum of the pods' requests with defaults for missing cpu/memory (scoring).
    pub non_zero_requested: Resource,
    /// `status.allocatable`.
    pub allocatable: Resource,
    /// Host ports in use.
    pub used_ports: Vec<HostPort>,
}

impl NodeInfo {
    /// A node with no pods.
    pub fn new(node: Arc<Node>) -> Self {
        NodeInfo {
            name: node.metadata.name.clone().unwrap_or_default(),
            allocatable: resources::allocatable(&node),
            node,
            pods: Vec::new(),
            pods_with_required_anti_affinity: Vec::new(),
            requested: Resource::default(),
            non_zero_requested: Resource::default(),
            used_ports: Vec::new(),
        }
    }

    /// Counts `pod` as assigned here.
    pub fn add_pod(&mut self, pod: Arc<Pod>) {
        self.requested.add(&resources::pod_requests(&pod, false));
        self.non_zero_requested
            .add(&resources::pod_requests(&pod, true));
        self.used_ports.extend(host_ports(&pod));
        if !crate::plugins::interpod::required(&pod, true).is_empty() {
            self.pods_with_required_anti_affinity.push(Arc::clone(&pod));
        }
        self.pods.push(pod);
    }

    /// Stops counting the pod `namespace/name` here (undoing its
    /// [`NodeInfo::add_pod`]): its requests, host ports and anti-affinity
    /// entry go with it. Returns the pod, `None` when it was not counted.
    pub fn remove_pod(&mut self, namespace: &str, name: &str) -> Option<Arc<Pod>> {
        let is_it = |p: &Arc<Pod>| {
            p.metadata.namespace.as_deref().unwrap_or("") == namespace
                && p.metadata.name.as_deref().unwrap_or("") == name
        };
        let at = self.pods.iter().position(is_it)?;
        let pod = self.pods.swap_remove(at);
        self.requested.sub(&resources::pod_requests(&pod, false));
        self.non_zero_requested
            .sub(&resources::pod_requests(&pod, true));
        for port in host_ports(&pod) {
            if let Some(i) = self.used_ports.iter().position(|u| *u == port) {
                self.used_ports.swap_remove(i);
            }
        }
        if let Some(i) = self.pods_with_required_anti_affinity.iter().position(is_it) {
            self.pods_with_required_anti_affinity.swap_remove(i);
        }
        Some(pod)
    }

    /// Replaces the Node (a newer version of the same node): its
    /// allocatable is read again; the pods stay.
    pub fn set_node(&mut self, node: Arc<Node>) {
        self.allocatable = resources::allocatable(&node);
        self.node = node;
    }

    /// The node's labels.
    pub fn labels(&self) -> Option<&BTreeMap<String, String>> {
        self.node.metadata.labels.as_ref()
    }

    /// The value of label `key`.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels().and_then(|l| l.get(key)).map(String::as_str)
    }
}

/// Whether `pod` counts against its node: assigned and not finished
/// (phase `Succeeded`/`Failed` pods hold no resources).
pub fn is_assigned_and_running(pod: &Pod) -> bool {
    let assigned = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .is_some_and(|n| !n.is_empty());
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    assigned && !matches!(phase, Some("Succeeded" | "Failed"))
}

/// Nodes with their pods, and namespace labels (for affinity namespace selectors).
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Every node, in name order.
    pub nodes: Vec<NodeInfo>,
    /// Labels of each namespace by name.
    pub namespace_labels: HashMap<String, BTreeMap<String, String>>,
    /// Pending pods nominated to a node by a preemption
    /// (`status.nominatedNodeName`), whose room is kept for them.
    pub nominated: Vec<Arc<Pod>>,
    /// PersistentVolumeClaims, PersistentVolumes and StorageClasses (VolumeBinding).
    pub volumes: Arc<crate::plugins::volumes::VolumeState>,
    /// PodDisruptionBudgets (preemption avoids victims whose eviction would break one).
    pub pdbs: Vec<Arc<k8s_openapi::api::policy::v1::PodDisruptionBudget>>,
    /// The [`crate::cache::Cache`] generation this snapshot reflects (0 for
    /// one built by [`Snapshot::new`]): [`crate::cache::Cache::update_snapshot`]
    /// copies only the nodes changed after it.
    pub generation: u64,
}

impl Snapshot {
    /// Builds a snapshot; pods not assigned (or finished, or on unknown nodes) are skipped.
    pub fn new(
        nodes: impl IntoIterator<Item = Arc<Node>>,
        pods: impl IntoIterator<Item = Arc<Pod>>,
        namespaces: impl IntoIterator<Item = Arc<Namespace>>,
    ) -> Snapshot {
        let mut infos: Vec<NodeInfo> = nodes.into_iter().map(NodeInfo::new).collect();
        infos.sort_by(|a, b| a.name.cmp(&b.name));
        let index: HashMap<String, usize> = infos
            .iter()
            .enumerate()
            .map(|(i, n)| (n.name.clone(), i))
            .collect();
        for pod in pods {
            if !is_assigned_and_running(&pod) {
                continue;
            }
            let node = pod
                .spec
                .as_ref()
                .and_then(|s| s.node_name.clone())
                .unwrap_or_default();
            if let Some(i) = index.get(&node) {
                infos[*i].add_pod(pod);
            }
        }
        let namespace_labels = namespace_labels(namespaces);
        Snapshot {
            nodes: infos,
            namespace_labels,
            nominated: Vec::new(),
            volumes: Default::default(),
            pdbs: Vec::new(),
            generation: 0,
        }
    }

    /// Keeps room for the pods of `pending` nominated to a node (see [`Snapshot::nominated`]).
    pub fn with_nominated(mut self, pending: impl IntoIterator<Item = Arc<Pod>>) -> Snapshot {
        self.nominated = pending
            .into_iter()
            .filter(|p| {
                p.spec
                    .as_ref()
                    .and_then(|s| s.node_name.as_deref())
                    .is_none_or(str::is_empty)
            })
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter(|p| {
                p.status
                    .as_ref()
                    .and_then(|s| s.nominated_node_name.as_deref())
                    .is_some_and(|n| !n.is_empty())
            })
            .collect();
        self
    }

    /// `node` as `pod` sees it: with the pods nominated there whose priority
    /// is at least `pod`'s (other than `pod`), as upstream's
    /// `addNominatedPods`; `None` when there are none.
    pub fn with_nominated_for(&self, pod: &Pod, node: &NodeInfo) -> Option<NodeInfo> {
        let prio = |p: &Pod| p.spec.as_ref().and_then(|s| s.priority).unwrap_or(0);
        let own = pod.metadata.uid.as_deref();
        let mut extra = self
            .nominated
            .iter()
            .filter(|n| {
                n.status
                    .as_ref()
                    .and_then(|s| s.nominated_node_name.as_deref())
                    == Some(node.name.as_str())
            })
            .filter(|n| n.metadata.uid.as_deref() != own && prio(n) >= prio(pod))
            .peekable();
        extra.peek()?;
        let mut info = node.clone();
        for n in extra {
            info.add_pod(Arc::clone(n));
        }
        Some(info)
    }

    /// Where the node named `name` is in [`Snapshot::nodes`] (kept in name
    /// order, so a binary search).
    pub fn position(&self, name: &str) -> Option<usize> {
        self.nodes
            .binary_search_by(|n| n.name.as_str().cmp(name))
            .ok()
    }

    /// The node named `name`.
    pub fn node(&self, name: &str) -> Option<&NodeInfo> {
        self.position(name).map(|i| &self.nodes[i])
    }
}

/// Each namespace's labels by its name (what namespace selectors of pod
/// affinity terms and topology spread read).
pub fn namespace_labels(
    namespaces: impl IntoIterator<Item = Arc<Namespace>>,
) -> HashMap<String, BTreeMap<String, String>> {
    namespaces
        .into_iter()
        .filter_map(|ns| {
            Some((
                ns.metadata.name.clone()?,
                ns.metadata.labels.clone().unwrap_or_default(),
            ))
        })
        .collect()
}
