//! The scheduler's cache of nodes and the pods counted against them, kept
//! up to date by informer events and copied into the cycle's [`Snapshot`]
//! node by node (upstream `pkg/scheduler/backend/cache/cache.go`,
//! `UpdateSnapshot`).
//!
//! Every change to a node's [`NodeInfo`] (the Node itself, a pod added,
//! updated or removed, a pod assumed or forgotten) stamps the node with a
//! new generation. A [`Snapshot`] remembers the generation it reflects, so
//! [`Cache::update_snapshot`] copies only the nodes stamped after it: a
//! scheduling cycle costs what changed since the previous one, not what the
//! cluster holds. Adding or removing a node rebuilds the snapshot's node
//! list (it stays in name order).
//!
//! The cache holds what a snapshot built from scratch ([`Snapshot::new`]
//! over every pod, the assumed ones in place of their pending versions,
//! then [`Snapshot::with_nominated`]) would hold:
//! - pods assigned to a node and not finished, with the node's sums;
//! - pods this scheduler assumed on a node and has not yet seen bound (an
//!   update of the still-pending pod keeps the assumed version; its bound
//!   version, its deletion or [`Cache::forget`] ends the assumption);
//! - pods on a node the cache has no Node for yet (counted once it comes);
//! - pending pods nominated to a node by a preemption, not being deleted.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::snapshot::{is_assigned_and_running, NodeInfo, Snapshot};

/// `namespace/name` of a pod.
pub fn pod_key(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or(""),
        pod.metadata.name.as_deref().unwrap_or("")
    )
}

/// `spec.nodeName`, empty when unassigned.
fn node_name_of(pod: &Pod) -> &str {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .unwrap_or("")
}

/// Whether a pending pod keeps room on a node: unassigned, not being
/// deleted, with `status.nominatedNodeName` (the test of [`Snapshot::with_nominated`]).
fn is_nominated(pod: &Pod) -> bool {
    node_name_of(pod).is_empty()
        && pod.metadata.deletion_timestamp.is_none()
        && pod
            .status
            .as_ref()
            .and_then(|s| s.nominated_node_name.as_deref())
            .is_some_and(|n| !n.is_empty())
}

/// One node of the cache.
#[derive(Debug)]
struct CachedNode {
    /// The node and its pods; a placeholder Node (name only) while `known` is false.
    info: NodeInfo,
    /// Whether the Node object is known (only then is it in snapshots).
    known: bool,
    /// The generation of its last change.
    generation: u64,
}

/// A pod counted against a node.
#[derive(Debug)]
struct CachedPod {
    node: String,
    assumed: bool,
}

/// Nodes with the pods counted against them, and the nominated pods (see the module docs).
#[derive(Debug, Default)]
pub struct Cache {
    nodes: HashMap<String, CachedNode>,
    /// Counted pods by `namespace/name`: the node they are counted on.
    pods: HashMap<String, CachedPod>,
    /// Pending pods nominated to a node, by `namespace/name`.
    nominated: BTreeMap<String, Arc<Pod>>,
    /// The last generation handed out.
    generation: u64,
    /// Node names by the generation of their last change (each node once).
    by_generation: BTreeMap<u64, String>,
    /// The generation of the last node added to or removed from the snapshot's list.
    membership: u64,
    /// The generation of the last change to the nominated pods a snapshot sees.
    nominated_generation: u64,
}

impl Cache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many Nodes the cache knows.
    pub fn node_count(&self) -> usize {
        self.nodes.values().filter(|n| n.known).count()
    }

    /// Whether `key` is assumed (placed by this scheduler, not yet seen bound).
    pub fn is_assumed(&self, key: &str) -> bool {
        self.pods.get(key).is_some_and(|p| p.assumed)
    }

    fn next_generation(&mut self) -> u64 {
        self.generation += 1;
        self.generation
    }

    /// Stamps node `name` changed.
    fn touch(&mut self, name: &str) {
        let generation = self.next_generation();
        if let Some(n) = self.nodes.get_mut(name) {
            self.by_generation.remove(&n.generation);
            n.generation = generation;
            self.by_generation.insert(generation, name.to_string());
        }
    }

    /// The entry of node `name`, a placeholder if the Node is not known yet.
    fn node_entry(&mut self, name: &str) -> &mut CachedNode {
        self.nodes
            .entry(name.to_string())
            .or_insert_with(|| CachedNode {
                info: NodeInfo::new(Arc::new(Node {
                    metadata: ObjectMeta {
                        name: Some(name.to_string()),
                        ..ObjectMeta::default()
                    },
                    ..Node::default()
                })),
                known: false,
                generation: 0,
            })
    }

    /// Drops node `name`'s entry if it is a placeholder without pods.
    fn drop_if_empty(&mut self, name: &str) {
        if self
            .nodes
            .get(name)
            .is_some_and(|n| !n.known && n.info.pods.is_empty())
        {
            if let Some(n) = self.nodes.remove(name) {
                self.by_generation.remove(&n.generation);
            }
        }
    }

    /// Counts `pod` (assigned) on its node as `key`, replacing what `key` was.
    fn put(&mut self, key: &str, pod: Arc<Pod>, assumed: bool) {
        self.remove(key);
        let node = node_name_of(&pod).to_string();
        self.node_entry(&node).info.add_pod(pod);
        self.touch(&node);
        self.pods
            .insert(key.to_string(), CachedPod { node, assumed });
    }

    /// Stops counting `key`.
    fn remove(&mut self, key: &str) {
        let Some(old) = self.pods.remove(key) else {
            return;
        };
        let (ns, name) = key.split_once('/').unwrap_or(("", key));
        if let Some(n) = self.nodes.get_mut(&old.node) {
            n.info.remove_pod(ns, name);
        }
        self.touch(&old.node);
        self.drop_if_empty(&old.node);
    }

    /// Sets whether `key` is a nominated pending pod (`pod`, or none).
    fn set_nominated(&mut self, key: &str, pod: Option<Arc<Pod>>) {
        let changed = match pod {
            Some(p) => {
                self.nominated.insert(key.to_string(), p);
                true
            }
            None => self.nominated.remove(key).is_some(),
        };
        if changed {
            self.nominated_generation = self.next_generation();
        }
    }

    /// A pod was added or updated (an informer's Apply).
    pub fn apply_pod(&mut self, pod: Arc<Pod>) {
        let key = pod_key(&pod);
        if node_name_of(&pod).is_empty() {
            // Pending: an assumed version stays until the pod is seen bound or deleted.
            if !self.is_assumed(&key) {
                self.remove(&key);
            }
            let nominated = is_nominated(&pod).then(|| Arc::clone(&pod));
            if nominated.is_some() || self.nominated.contains_key(&key) {
                self.set_nominated(&key, nominated);
            }
            return;
        }
        if self.nominated.contains_key(&key) {
            self.set_nominated(&key, None);
        }
        if is_assigned_and_running(&pod) {
            self.put(&key, pod, false);
        } else {
            self.remove(&key);
        }
    }

    /// A pod was deleted (an informer's Delete).
    pub fn delete_pod(&mut self, pod: &Pod) {
        let key = pod_key(pod);
        self.remove(&key);
        if self.nominated.contains_key(&key) {
            self.set_nominated(&key, None);
        }
    }

    /// Counts `placed` (a pending pod with the chosen `spec.nodeName`) on
    /// its node until its bound version is seen, it is deleted or
    /// [`Cache::forget`] is called (upstream `AssumePod`).
    pub fn assume(&mut self, placed: Arc<Pod>) {
        let key = pod_key(&placed);
        if self.nominated.contains_key(&key) {
            // An assumed pod is not pending: it no longer keeps its nominated room.
            self.nominated_generation = self.next_generation();
        }
        if is_assigned_and_running(&placed) {
            self.put(&key, placed, true);
        }
    }

    /// Undoes [`Cache::assume`] of `key` (its binding failed); a pod seen
    /// bound meanwhile stays.
    pub fn forget(&mut self, key: &str) {
        if self.is_assumed(key) {
            self.remove(key);
            if self.nominated.contains_key(key) {
                self.nominated_generation = self.next_generation();
            }
        }
    }

    /// A Node was added or updated.
    pub fn apply_node(&mut self, node: Arc<Node>) {
        let name = node.metadata.name.clone().unwrap_or_default();
        let entry = self.node_entry(&name);
        entry.info.set_node(node);
        let added = !entry.known;
        entry.known = true;
        self.touch(&name);
        if added {
            self.membership = self.generation;
        }
    }

    /// A Node was deleted; the pods still counted on it wait for their own deletes.
    pub fn delete_node(&mut self, name: &str) {
        let Some(entry) = self.nodes.get_mut(name) else {
            return;
        };
        if !entry.known {
            return;
        }
        entry.known = false;
        self.touch(name);
        self.membership = self.generation;
        self.drop_if_empty(name);
    }

    /// Makes the pods what `pods` says (an informer's relist: pods missing
    /// from it were deleted meanwhile); assumed pods still pending in it stay.
    pub fn resync_pods(&mut self, pods: impl IntoIterator<Item = Arc<Pod>>) {
        let pods: HashMap<String, Arc<Pod>> = pods.into_iter().map(|p| (pod_key(&p), p)).collect();
        let gone: Vec<String> = self
            .pods
            .keys()
            .chain(self.nominated.keys())
            .filter(|k| !pods.contains_key(*k))
            .cloned()
            .collect();
        for key in gone {
            self.remove(&key);
            if self.nominated.contains_key(&key) {
                self.set_nominated(&key, None);
            }
        }
        for pod in pods.into_values() {
            self.apply_pod(pod);
        }
    }

    /// Makes the Nodes what `nodes` says (an informer's relist).
    pub fn resync_nodes(&mut self, nodes: impl IntoIterator<Item = Arc<Node>>) {
        let nodes: Vec<Arc<Node>> = nodes.into_iter().collect();
        let names: std::collections::HashSet<&str> = nodes
            .iter()
            .filter_map(|n| n.metadata.name.as_deref())
            .collect();
        let gone: Vec<String> = self
            .nodes
            .iter()
            .filter(|(name, n)| n.known && !names.contains(name.as_str()))
            .map(|(name, _)| name.clone())
            .collect();
        for name in gone {
            self.delete_node(&name);
        }
        for node in nodes {
            self.apply_node(node);
        }
    }

    /// Brings `snapshot`'s nodes and nominated pods up to this cache's
    /// generation: the nodes changed since `snapshot.generation` are copied
    /// (every node when one was added or removed since), the nominated pods
    /// when they changed. The rest of the snapshot (namespaces, volumes,
    /// PodDisruptionBudgets) is the caller's.
    pub fn update_snapshot(&self, snapshot: &mut Snapshot) {
        let since = snapshot.generation;
        if since == self.generation && since != 0 {
            return;
        }
        if since == 0 || self.membership > since {
            let mut nodes: Vec<NodeInfo> = self
                .nodes
                .values()
                .filter(|n| n.known)
                .map(|n| n.info.clone())
                .collect();
            nodes.sort_by(|a, b| a.name.cmp(&b.name));
            snapshot.nodes = nodes;
        } else {
            for name in self.by_generation.range(since + 1..).map(|(_, n)| n) {
                let Some(n) = self.nodes.get(name).filter(|n| n.known) else {
                    continue;
                };
                if let Some(i) = snapshot.position(name) {
                    snapshot.nodes[i] = n.info.clone();
                }
            }
        }
        if since == 0 || self.nominated_generation > since {
            snapshot.nominated = self
                .nominated
                .iter()
                .filter(|(k, _)| !self.is_assumed(k))
                .map(|(_, p)| Arc::clone(p))
                .collect();
        }
        snapshot.generation = self.generation;
    }
}

#[cfg(test)]
#[path = "cache_tests.rs"]
mod tests;
