//! The pod index by `spec.nodeName` (upstream `pod.Indexers()` /
//! `NodeNameIndexFunc`, used by the cacher for LISTs with
//! `fieldSelector=spec.nodeName=X`): node name → keys of its pods.
//!
//! Maintained on the latest state only (LISTs at an exact resourceVersion
//! scan their snapshot, as upstream, whose snapshots have no indexes).
//! Pods without a node are indexed under `""`.

use std::collections::{BTreeSet, HashMap};

use crate::filter::NODE_NAME_FIELD;
use crate::store::{CachedObject, Store};

/// node name → keys (relative) of the objects on it.
#[derive(Debug, Default, Clone)]
pub struct NodeIndex {
    by_node: HashMap<String, BTreeSet<String>>,
}

impl NodeIndex {
    /// An empty index.
    pub fn new() -> Self {
        NodeIndex::default()
    }

    /// Builds the index of every object in `store`.
    pub fn build(store: &Store) -> Self {
        let mut idx = NodeIndex::new();
        for obj in store.iter() {
            idx.update(None, Some(obj));
        }
        idx
    }

    /// The node an object is on (`""` when unscheduled or not a pod).
    pub fn node_of(obj: &CachedObject) -> &str {
        obj.field(NODE_NAME_FIELD).unwrap_or("")
    }

    /// Moves `key` from its old node to its new one (either may be absent).
    pub fn update(&mut self, old: Option<&CachedObject>, new: Option<&CachedObject>) {
        if let Some(o) = old {
            let node = Self::node_of(o);
            if let Some(set) = self.by_node.get_mut(node) {
                set.remove(&o.key);
                if set.is_empty() {
                    self.by_node.remove(node);
                }
            }
        }
        if let Some(n) = new {
            self.by_node.entry(Self::node_of(n).to_string()).or_default().insert(n.key.clone());
        }
    }

    /// Keys of the objects on `node`, in key order.
    pub fn keys(&self, node: &str) -> impl Iterator<Item = &String> {
        self.by_node.get(node).into_iter().flatten()
    }

    /// Number of nodes with at least one object.
    pub fn node_count(&self) -> usize {
        self.by_node.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn pod_fields(v: &Value) -> Vec<(String, String)> {
        let node = v.pointer("/spec/nodeName").and_then(Value::as_str).unwrap_or("");
        vec![(NODE_NAME_FIELD.to_string(), node.to_string())]
    }

    fn pod(name: &str, node: &str) -> CachedObject {
        let json = format!(r#"{{"metadata":{{"name":"{name}","namespace":"d"}},"spec":{{"nodeName":"{node}"}}}}"#);
        CachedObject::decode(&format!("d/{name}"), json.as_bytes(), 1, crate::store::FieldExtractor::Fn(pod_fields)).unwrap()
    }

    #[test]
    fn index_follows_creates_moves_and_deletes() {
        let mut idx = NodeIndex::new();
        let a1 = pod("a", "n1");
        let b1 = pod("b", "n1");
        idx.update(None, Some(&a1));
        idx.update(None, Some(&b1));
        assert_eq!(idx.keys("n1").cloned().collect::<Vec<_>>(), ["d/a", "d/b"]);
        let a2 = pod("a", "n2");
        idx.update(Some(&a1), Some(&a2));
        assert_eq!(idx.keys("n1").cloned().collect::<Vec<_>>(), ["d/b"]);
        assert_eq!(idx.keys("n2").cloned().collect::<Vec<_>>(), ["d/a"]);
        idx.update(Some(&b1), None);
        assert_eq!(idx.keys("n1").count(), 0);
        assert_eq!(idx.node_count(), 1);
    }
}
