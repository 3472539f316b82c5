//! The garbage collector's dependency graph and its decisions, without a
//! server: nodes are objects (by UID) with their ownerReferences, edges go
//! from each owner UID to its dependents, and [`Graph::plan`] says what to do
//! given what is known about owners missing from the graph.
//!
//! Rules (upstream `pkg/controller/garbagecollector/garbagecollector.go`,
//! `attemptToDeleteItem`, `processDeletingDependentsItem`,
//! `orphanDependents`):
//! - a dependent's owner is *solid* (exists), *dangling* (gone, or its UID
//!   differs) or *waiting* (being deleted with `foregroundDeletion`);
//! - a dependent with a solid owner loses its references to dangling and
//!   waiting owners; one with no solid owner is deleted: in the foreground
//!   when a waiting owner is behind it and it has dependents of its own
//!   (its references to the waiting owners no longer block them), else with
//!   the policy its own GC finalizers say (`orphan`, `foregroundDeletion`),
//!   else in the background;
//! - an owner being deleted with `foregroundDeletion` loses that finalizer
//!   once no dependent with `blockOwnerDeletion: true` refers to it;
//! - an owner being deleted with `orphan` has its references removed from
//!   every dependent, then loses that finalizer.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::discovery::ApiResource;

/// `foregroundDeletion` (upstream `metav1.FinalizerDeleteDependents`).
pub const FOREGROUND: &str = "foregroundDeletion";
/// `orphan` (upstream `metav1.FinalizerOrphanDependents`).
pub const ORPHAN: &str = "orphan";

/// One object in the graph.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    /// The resource serving it (apiVersion, kind, plural).
    pub resource: Arc<ApiResource>,
    /// `metadata.name`.
    pub name: String,
    /// `metadata.namespace` (`None`: cluster-scoped).
    pub namespace: Option<String>,
    /// `metadata.uid`.
    pub uid: String,
    /// `metadata.resourceVersion` (the precondition of patches).
    pub resource_version: String,
    /// `metadata.ownerReferences`.
    pub owners: Vec<OwnerReference>,
    /// `metadata.finalizers`.
    pub finalizers: Vec<String>,
    /// `metadata.deletionTimestamp` is set.
    pub deleting: bool,
}

impl Node {
    fn has_finalizer(&self, f: &str) -> bool {
        self.finalizers.iter().any(|x| x == f)
    }
    /// Being deleted and waiting for its blocking dependents.
    pub fn deleting_dependents(&self) -> bool {
        self.deleting && self.has_finalizer(FOREGROUND)
    }
    /// Being deleted and waiting for its dependents to be orphaned.
    pub fn orphaning(&self) -> bool {
        self.deleting && self.has_finalizer(ORPHAN)
    }
}

/// What is known about an owner UID that is not in the graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Absent {
    /// Confirmed gone from the server (404 or another UID under that name).
    Gone,
    /// The server has it (the graph lags, or its kind is not watched).
    Exists,
}

/// The propagation policy of a delete the collector issues.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// `propagationPolicy: Background`.
    Background,
    /// `propagationPolicy: Foreground`.
    Foreground,
    /// `propagationPolicy: Orphan`.
    Orphan,
}

/// One step for the collector to take on the server. UIDs name graph nodes.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// GET an owner missing from the graph to learn whether it exists.
    Verify {
        /// The dependent naming it (its namespace is the owner's).
        dependent: String,
        /// The reference to check.
        owner: OwnerReference,
    },
    /// Delete a dependent, with a UID precondition.
    Delete {
        /// The dependent.
        uid: String,
        /// The propagation policy of the delete.
        policy: Policy,
        /// Owners whose references first get `blockOwnerDeletion: false`.
        unblock: Vec<String>,
    },
    /// Drop references from a dependent's ownerReferences.
    RemoveOwnerRefs {
        /// The dependent.
        uid: String,
        /// The owner UIDs whose references go.
        owners: Vec<String>,
    },
    /// Remove a GC finalizer from an owner whose dependents are done.
    RemoveFinalizer {
        /// The owner.
        uid: String,
        /// [`FOREGROUND`] or [`ORPHAN`].
        finalizer: &'static str,
    },
    /// Remove the references to an owner from its dependents, then its
    /// `orphan` finalizer.
    Orphan {
        /// The owner.
        uid: String,
        /// Its dependents.
        dependents: Vec<String>,
    },
}

/// The dependency graph.
#[derive(Debug, Default)]
pub struct Graph {
    nodes: HashMap<String, Node>,
    dependents: HashMap<String, BTreeSet<String>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OwnerState {
    Solid,
    Dangling,
    Waiting,
    Unknown,
}

impl Graph {
    /// The node with `uid`.
    pub fn get(&self, uid: &str) -> Option<&Node> {
        self.nodes.get(uid)
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// True when the graph has no node.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// UIDs of the nodes served by `resource` (for relists).
    pub fn uids_of(&self, resource: &ApiResource) -> Vec<String> {
        self.nodes.values().filter(|n| *n.resource == *resource).map(|n| n.uid.clone()).collect()
    }

    /// Adds or replaces a node.
    pub fn upsert(&mut self, node: Node) {
        self.unlink(&node.uid);
        for o in &node.owners {
            self.dependents.entry(o.uid.clone()).or_default().insert(node.uid.clone());
        }
        self.nodes.insert(node.uid.clone(), node);
    }

    /// Removes a node (its dependents keep their references to it).
    pub fn remove(&mut self, uid: &str) {
        self.unlink(uid);
        self.nodes.remove(uid);
    }

    fn unlink(&mut self, uid: &str) {
        if let Some(old) = self.nodes.get(uid) {
            for o in &old.owners {
                if let Some(set) = self.dependents.get_mut(&o.uid) {
                    set.remove(uid);
                    if set.is_empty() {
                        self.dependents.remove(&o.uid);
                    }
                }
            }
        }
    }

    /// The nodes whose ownerReferences name `uid`.
    pub fn dependents_of(&self, uid: &str) -> impl Iterator<Item = &Node> {
        self.dependents.get(uid).into_iter().flatten().filter_map(|d| self.nodes.get(d))
    }

    fn owner_state(&self, r: &OwnerReference, absent: &HashMap<String, Absent>) -> OwnerState {
        match self.nodes.get(&r.uid) {
            Some(o) if o.deleting_dependents() => OwnerState::Waiting,
            Some(_) => OwnerState::Solid,
            None => match absent.get(&r.uid) {
                Some(Absent::Gone) => OwnerState::Dangling,
                Some(Absent::Exists) => OwnerState::Solid,
                None => OwnerState::Unknown,
            },
        }
    }

    /// Every step to take now, given what is known of owners outside the
    /// graph (`absent`, by owner UID). Owners neither in the graph nor in
    /// `absent` yield [`Decision::Verify`] and hold their dependent's other
    /// decisions until known.
    pub fn plan(&self, absent: &HashMap<String, Absent>) -> Vec<Decision> {
        let mut out = Vec::new();
        let mut uids: Vec<&String> = self.nodes.keys().collect();
        uids.sort();
        for uid in uids {
            let Some(n) = self.nodes.get(uid) else { continue };
            if n.deleting_dependents() {
                let blocking = self.dependents_of(uid).any(|d| {
                    d.owners.iter().any(|r| r.uid == *uid && r.block_owner_deletion == Some(true))
                });
                if !blocking {
                    out.push(Decision::RemoveFinalizer { uid: uid.clone(), finalizer: FOREGROUND });
                }
            } else if n.orphaning() {
                out.push(Decision::Orphan { uid: uid.clone(), dependents: self.dependents_of(uid).map(|d| d.uid.clone()).collect() });
            }
            if n.owners.is_empty() || n.deleting {
                continue;
            }
            let mut unknown = false;
            let (mut solid, mut dangling, mut waiting) = (0, Vec::new(), Vec::new());
            for r in &n.owners {
                match self.owner_state(r, absent) {
                    OwnerState::Solid => solid += 1,
                    OwnerState::Dangling => dangling.push(r.uid.clone()),
                    OwnerState::Waiting => waiting.push(r.uid.clone()),
                    OwnerState::Unknown => {
                        unknown = true;
                        out.push(Decision::Verify { dependent: uid.clone(), owner: r.clone() });
                    }
                }
            }
            if unknown || (dangling.is_empty() && waiting.is_empty()) {
                continue;
            }
            if solid > 0 {
                let mut owners = dangling;
                owners.extend(waiting);
                out.push(Decision::RemoveOwnerRefs { uid: uid.clone(), owners });
            } else if !waiting.is_empty() && self.dependents_of(uid).next().is_some() {
                out.push(Decision::Delete { uid: uid.clone(), policy: Policy::Foreground, unblock: waiting });
            } else {
                let policy = if n.has_finalizer(ORPHAN) {
                    Policy::Orphan
                } else if n.has_finalizer(FOREGROUND) {
                    Policy::Foreground
                } else {
                    Policy::Background
                };
                out.push(Decision::Delete { uid: uid.clone(), policy, unblock: Vec::new() });
            }
        }
        out
    }

    /// Owner UIDs referenced by some node but not in the graph.
    pub fn missing_owners(&self) -> HashSet<String> {
        self.dependents.keys().filter(|u| !self.nodes.contains_key(*u)).cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ar() -> Arc<ApiResource> {
        Arc::new(ApiResource {
            group: String::new(),
            version: "v1".into(),
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            plural: "configmaps".into(),
        })
    }

    fn node(uid: &str, owners: &[(&str, bool)]) -> Node {
        Node {
            resource: ar(),
            name: uid.into(),
            namespace: Some("ns".into()),
            uid: uid.into(),
            resource_version: "1".into(),
            owners: owners
                .iter()
                .map(|(o, block)| OwnerReference {
                    api_version: "v1".into(),
                    kind: "ConfigMap".into(),
                    name: (*o).into(),
                    uid: (*o).into(),
                    block_owner_deletion: Some(*block),
                    controller: None,
                })
                .collect(),
            finalizers: Vec::new(),
            deleting: false,
        }
    }

    fn deleting(mut n: Node, finalizer: &str) -> Node {
        n.deleting = true;
        n.finalizers.push(finalizer.into());
        n
    }

    #[test]
    fn dependents_of_a_live_owner_are_left_alone() {
        let mut g = Graph::default();
        g.upsert(node("owner", &[]));
        g.upsert(node("dep", &[("owner", false)]));
        assert_eq!(g.plan(&HashMap::new()), vec![]);
    }

    #[test]
    fn an_owner_missing_from_the_graph_is_verified_before_anything_is_deleted() {
        let mut g = Graph::default();
        g.upsert(node("dep", &[("owner", false)]));
        let plan = g.plan(&HashMap::new());
        assert!(matches!(&plan[..], [Decision::Verify { dependent, owner }] if dependent == "dep" && owner.uid == "owner"));
        let exists = HashMap::from([("owner".to_string(), Absent::Exists)]);
        assert_eq!(g.plan(&exists), vec![]);
    }

    #[test]
    fn background_deletion_deletes_dependents_of_a_gone_owner() {
        let mut g = Graph::default();
        g.upsert(node("dep", &[("owner", false)]));
        let gone = HashMap::from([("owner".to_string(), Absent::Gone)]);
        assert_eq!(g.plan(&gone), vec![Decision::Delete { uid: "dep".into(), policy: Policy::Background, unblock: vec![] }]);
    }

    #[test]
    fn a_dependent_with_another_live_owner_only_loses_the_reference() {
        let mut g = Graph::default();
        g.upsert(node("alive", &[]));
        g.upsert(node("dep", &[("gone", false), ("alive", false)]));
        let gone = HashMap::from([("gone".to_string(), Absent::Gone)]);
        assert_eq!(g.plan(&gone), vec![Decision::RemoveOwnerRefs { uid: "dep".into(), owners: vec!["gone".into()] }]);
    }

    #[test]
    fn foreground_deletion_deletes_dependents_and_waits_only_for_blocking_ones() {
        let mut g = Graph::default();
        g.upsert(deleting(node("owner", &[]), FOREGROUND));
        g.upsert(node("blocker", &[("owner", true)]));
        g.upsert(node("free", &[("owner", false)]));
        let plan = g.plan(&HashMap::new());
        assert_eq!(
            plan,
            vec![
                Decision::Delete { uid: "blocker".into(), policy: Policy::Background, unblock: vec![] },
                Decision::Delete { uid: "free".into(), policy: Policy::Background, unblock: vec![] },
            ]
        );
        // The blocking dependent is still there (being deleted): the owner waits.
        g.upsert(deleting(node("blocker", &[("owner", true)]), "example.com/hold"));
        g.remove("free");
        assert_eq!(g.plan(&HashMap::new()), vec![]);
        g.remove("blocker");
        assert_eq!(g.plan(&HashMap::new()), vec![Decision::RemoveFinalizer { uid: "owner".into(), finalizer: FOREGROUND }]);
    }

    #[test]
    fn a_dependent_with_its_own_dependents_is_deleted_in_the_foreground_and_unblocks_its_owner() {
        let mut g = Graph::default();
        g.upsert(deleting(node("owner", &[]), FOREGROUND));
        g.upsert(node("mid", &[("owner", true)]));
        g.upsert(node("leaf", &[("mid", true)]));
        assert_eq!(
            g.plan(&HashMap::new()),
            vec![Decision::Delete { uid: "mid".into(), policy: Policy::Foreground, unblock: vec!["owner".into()] }]
        );
    }

    #[test]
    fn orphan_deletion_frees_every_dependent_then_the_owner() {
        let mut g = Graph::default();
        g.upsert(deleting(node("owner", &[]), ORPHAN));
        g.upsert(node("a", &[("owner", true)]));
        g.upsert(node("b", &[("owner", false)]));
        assert_eq!(g.plan(&HashMap::new()), vec![Decision::Orphan { uid: "owner".into(), dependents: vec!["a".into(), "b".into()] }]);
    }

    #[test]
    fn removing_a_node_drops_its_edges() {
        let mut g = Graph::default();
        g.upsert(node("dep", &[("owner", false)]));
        assert_eq!(g.missing_owners(), HashSet::from(["owner".to_string()]));
        g.remove("dep");
        assert!(g.missing_owners().is_empty());
        assert!(g.is_empty());
    }
}
