//! The in-memory RBAC index behind [`crate::filters::rbac_cache::RbacCache`]:
//! decoded Roles and ClusterRoles by name, and RoleBindings and
//! ClusterRoleBindings by subject, so authorizing a request costs lookups
//! for the requester's own name and groups, not a scan of every binding
//! (upstream answers from informer caches too; its `RoleBindingLister`s scan,
//! rkube indexes).
//!
//! Subject keys follow [`crate::filters::rbac::subject_applies`] exactly:
//!
//! - a `User` subject is found under its name;
//! - a `ServiceAccount` subject under the user name it authenticates as,
//!   `system:serviceaccount:<namespace>:<name>` (namespace defaulting to the
//!   binding's, empty for a ClusterRoleBinding);
//! - a `Group` subject under the group's name;
//! - subjects of other kinds match nobody and are not indexed.
//!
//! Bindings found for a user come back sorted by name, one each, the order
//! storage lists them in (so the allowing binding a reason names is the
//! same as when they were listed from storage).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use serde_json::Value;

use crate::filters::authn::UserInfo;
use crate::filters::rbac::{Binding, Role};

/// The four RBAC kinds, with their storage directory (`<prefix>/<resource>/`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RbacKind {
    /// `roles` (namespaced).
    Role,
    /// `clusterroles`.
    ClusterRole,
    /// `rolebindings` (namespaced).
    RoleBinding,
    /// `clusterrolebindings`.
    ClusterRoleBinding,
}

impl RbacKind {
    /// Every kind.
    pub const ALL: [RbacKind; 4] = [RbacKind::Role, RbacKind::ClusterRole, RbacKind::RoleBinding, RbacKind::ClusterRoleBinding];

    /// The resource (storage directory) name.
    pub fn resource(self) -> &'static str {
        match self {
            RbacKind::Role => "roles",
            RbacKind::ClusterRole => "clusterroles",
            RbacKind::RoleBinding => "rolebindings",
            RbacKind::ClusterRoleBinding => "clusterrolebindings",
        }
    }

    /// Position in [`RbacKind::ALL`].
    pub fn index(self) -> usize {
        match self {
            RbacKind::Role => 0,
            RbacKind::ClusterRole => 1,
            RbacKind::RoleBinding => 2,
            RbacKind::ClusterRoleBinding => 3,
        }
    }
}

/// A stored ClusterRole: decoded for evaluation, and as stored (labels,
/// `aggregationRule`) with its key and `mod_revision`, for the aggregation
/// controller's guarded writes.
#[derive(Debug, Clone)]
pub struct StoredClusterRole {
    /// The decoded role.
    pub role: Arc<Role>,
    /// The object as stored.
    pub object: Arc<Value>,
    /// Its storage key.
    pub key: String,
    /// Its storage `mod_revision` (resourceVersion).
    pub mod_revision: i64,
}

/// Bindings of one scope (one namespace, or the cluster) by name and by subject.
#[derive(Debug, Default)]
struct BindingSet {
    by_name: BTreeMap<String, Arc<Binding>>,
    /// User name (User subjects, ServiceAccounts as their user name) → binding names.
    users: HashMap<String, BTreeSet<String>>,
    /// Group name → binding names.
    groups: HashMap<String, BTreeSet<String>>,
}

/// The index key of a subject of a binding in `binding_ns`: user name or group.
enum SubjectKey {
    User(String),
    Group(String),
}

fn subject_keys(b: &Binding, binding_ns: &str) -> Vec<SubjectKey> {
    b.subjects
        .iter()
        .filter_map(|s| match s.kind.as_str() {
            "User" => Some(SubjectKey::User(s.name.clone())),
            "Group" => Some(SubjectKey::Group(s.name.clone())),
            "ServiceAccount" => {
                let ns = if s.namespace.is_empty() { binding_ns } else { &s.namespace };
                Some(SubjectKey::User(format!("system:serviceaccount:{ns}:{}", s.name)))
            }
            _ => None,
        })
        .collect()
}

impl BindingSet {
    fn insert(&mut self, b: Arc<Binding>, binding_ns: &str) {
        let name = b.metadata.name.clone();
        self.remove(&name, binding_ns);
        for k in subject_keys(&b, binding_ns) {
            let map = match k {
                SubjectKey::User(u) => self.users.entry(u),
                SubjectKey::Group(g) => self.groups.entry(g),
            };
            map.or_default().insert(name.clone());
        }
        self.by_name.insert(name, b);
    }

    fn remove(&mut self, name: &str, binding_ns: &str) {
        let Some(old) = self.by_name.remove(name) else { return };
        for k in subject_keys(&old, binding_ns) {
            let (map, key) = match k {
                SubjectKey::User(u) => (&mut self.users, u),
                SubjectKey::Group(g) => (&mut self.groups, g),
            };
            if let Some(set) = map.get_mut(&key) {
                set.remove(name);
                if set.is_empty() {
                    map.remove(&key);
                }
            }
        }
    }

    /// The bindings naming `user` (by name or a group), sorted by name.
    fn for_user(&self, user: &UserInfo) -> Vec<Arc<Binding>> {
        let mut names: Vec<&String> = Vec::new();
        if let Some(s) = self.users.get(&user.username) {
            names.extend(s);
        }
        for g in &user.groups {
            if let Some(s) = self.groups.get(g) {
                names.extend(s);
            }
        }
        names.sort();
        names.dedup();
        names.into_iter().filter_map(|n| self.by_name.get(n).cloned()).collect()
    }
}

/// Every RBAC object of one store, decoded and indexed (see the module docs).
#[derive(Debug, Default)]
pub struct RbacIndex {
    roles: HashMap<String, HashMap<String, Arc<Role>>>,
    cluster_roles: BTreeMap<String, StoredClusterRole>,
    role_bindings: HashMap<String, BindingSet>,
    cluster_role_bindings: BindingSet,
}

/// Splits a key below `<prefix>/<resource>/` into namespace and name
/// (namespace empty for cluster-scoped kinds). `None` for a malformed key.
fn split_key(kind: RbacKind, rest: &str) -> Option<(&str, &str)> {
    match kind {
        RbacKind::Role | RbacKind::RoleBinding => rest.split_once('/').filter(|(ns, n)| !ns.is_empty() && !n.is_empty()),
        RbacKind::ClusterRole | RbacKind::ClusterRoleBinding => (!rest.is_empty() && !rest.contains('/')).then_some(("", rest)),
    }
}

impl RbacIndex {
    /// An empty index.
    pub fn new() -> Self {
        Self::default()
    }

    /// Drops every object of `kind` (before a fresh list is applied).
    pub fn clear(&mut self, kind: RbacKind) {
        match kind {
            RbacKind::Role => self.roles.clear(),
            RbacKind::ClusterRole => self.cluster_roles.clear(),
            RbacKind::RoleBinding => self.role_bindings.clear(),
            RbacKind::ClusterRoleBinding => self.cluster_role_bindings = BindingSet::default(),
        }
    }

    /// Stores the object of `kind` at `key` (`rest` = the key below
    /// `<prefix>/<resource>/`: `<ns>/<name>` or `<name>`) from its stored
    /// JSON. An object that does not decode is dropped (and any previous
    /// state of the key with it) and reported as `Err(message)`.
    pub fn put(&mut self, kind: RbacKind, key: &str, rest: &str, value: &[u8], mod_revision: i64) -> Result<(), String> {
        let Some((ns, name)) = split_key(kind, rest) else { return Err(format!("unexpected key {key}")) };
        let decoded = match kind {
            RbacKind::Role => serde_json::from_slice::<Role>(value).map(|r| {
                self.roles.entry(ns.to_string()).or_default().insert(name.to_string(), Arc::new(r));
            }),
            RbacKind::ClusterRole => serde_json::from_slice::<Value>(value)
                .and_then(|v| serde_json::from_value::<Role>(v.clone()).map(|r| (r, v)))
                .map(|(r, v)| {
                    let stored = StoredClusterRole { role: Arc::new(r), object: Arc::new(v), key: key.to_string(), mod_revision };
                    self.cluster_roles.insert(name.to_string(), stored);
                }),
            RbacKind::RoleBinding => serde_json::from_slice::<Binding>(value).map(|mut b| {
                b.metadata.name = name.to_string();
                b.metadata.namespace = ns.to_string();
                self.role_bindings.entry(ns.to_string()).or_default().insert(Arc::new(b), ns);
            }),
            RbacKind::ClusterRoleBinding => serde_json::from_slice::<Binding>(value).map(|mut b| {
                b.metadata.name = name.to_string();
                self.cluster_role_bindings.insert(Arc::new(b), "");
            }),
        };
        decoded.map_err(|e| {
            self.delete(kind, rest);
            format!("decoding {key}: {e}")
        })
    }

    /// Removes the object of `kind` at `rest` (see [`RbacIndex::put`]).
    pub fn delete(&mut self, kind: RbacKind, rest: &str) {
        let Some((ns, name)) = split_key(kind, rest) else { return };
        match kind {
            RbacKind::Role => {
                if let Some(m) = self.roles.get_mut(ns) {
                    m.remove(name);
                    if m.is_empty() {
                        self.roles.remove(ns);
                    }
                }
            }
            RbacKind::ClusterRole => {
                self.cluster_roles.remove(name);
            }
            RbacKind::RoleBinding => {
                if let Some(set) = self.role_bindings.get_mut(ns) {
                    set.remove(name, ns);
                    if set.by_name.is_empty() {
                        self.role_bindings.remove(ns);
                    }
                }
            }
            RbacKind::ClusterRoleBinding => self.cluster_role_bindings.remove(name, ""),
        }
    }

    /// The Role `namespace/name`.
    pub fn role(&self, namespace: &str, name: &str) -> Option<Arc<Role>> {
        self.roles.get(namespace)?.get(name).cloned()
    }

    /// The ClusterRole `name`.
    pub fn cluster_role(&self, name: &str) -> Option<Arc<Role>> {
        self.cluster_roles.get(name).map(|c| c.role.clone())
    }

    /// Every ClusterRole as stored, by name.
    pub fn stored_cluster_roles(&self) -> BTreeMap<String, StoredClusterRole> {
        self.cluster_roles.clone()
    }

    /// Every RoleBinding of `namespace`, sorted by name.
    pub fn role_bindings(&self, namespace: &str) -> Vec<Arc<Binding>> {
        self.role_bindings.get(namespace).map(|s| s.by_name.values().cloned().collect()).unwrap_or_default()
    }

    /// Every ClusterRoleBinding, sorted by name.
    pub fn cluster_role_bindings(&self) -> Vec<Arc<Binding>> {
        self.cluster_role_bindings.by_name.values().cloned().collect()
    }

    /// The RoleBindings of `namespace` with a subject naming `user`, sorted by name.
    pub fn role_bindings_for(&self, namespace: &str, user: &UserInfo) -> Vec<Arc<Binding>> {
        self.role_bindings.get(namespace).map(|s| s.for_user(user)).unwrap_or_default()
    }

    /// The ClusterRoleBindings with a subject naming `user`, sorted by name.
    pub fn cluster_role_bindings_for(&self, user: &UserInfo) -> Vec<Arc<Binding>> {
        self.cluster_role_bindings.for_user(user)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filters::rbac::subject_applies;
    use serde_json::json;

    fn user(name: &str, groups: &[&str]) -> UserInfo {
        UserInfo { username: name.into(), uid: String::new(), groups: groups.iter().map(|g| g.to_string()).collect(), extra: Default::default() }
    }

    fn put_binding(idx: &mut RbacIndex, kind: RbacKind, ns: &str, name: &str, subjects: serde_json::Value) {
        let obj = json!({"metadata": {"name": name, "namespace": ns}, "subjects": subjects,
                         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"}});
        let rest = if ns.is_empty() { name.to_string() } else { format!("{ns}/{name}") };
        let key = format!("/registry/{}/{rest}", kind.resource());
        idx.put(kind, &key, &rest, &serde_json::to_vec(&obj).unwrap(), 1).unwrap();
    }

    fn names(v: &[Arc<Binding>]) -> Vec<&str> {
        v.iter().map(|b| b.metadata.name.as_str()).collect()
    }

    #[test]
    fn a_user_finds_only_bindings_naming_them() {
        let mut idx = RbacIndex::new();
        for i in 0..500 {
            put_binding(&mut idx, RbacKind::ClusterRoleBinding, "", &format!("other-{i:03}"), json!([{"kind": "User", "name": format!("user-{i}")}]));
        }
        put_binding(&mut idx, RbacKind::ClusterRoleBinding, "", "b-alice", json!([{"kind": "User", "name": "alice"}]));
        put_binding(&mut idx, RbacKind::ClusterRoleBinding, "", "a-alice", json!([{"kind": "User", "name": "bob"}, {"kind": "User", "name": "alice"}]));
        let alice = user("alice", &[]);
        assert_eq!(names(&idx.cluster_role_bindings_for(&alice)), vec!["a-alice", "b-alice"], "sorted by name");
        assert_eq!(names(&idx.cluster_role_bindings_for(&user("user-7", &[]))), vec!["other-007"]);
        assert!(idx.cluster_role_bindings_for(&user("carol", &[])).is_empty());
        assert_eq!(idx.cluster_role_bindings().len(), 502);
    }

    #[test]
    fn groups_match_by_membership_once_per_binding() {
        let mut idx = RbacIndex::new();
        put_binding(&mut idx, RbacKind::ClusterRoleBinding, "", "devs", json!([{"kind": "Group", "name": "dev"}, {"kind": "Group", "name": "ops"}]));
        put_binding(&mut idx, RbacKind::ClusterRoleBinding, "", "everyone", json!([{"kind": "Group", "name": "system:authenticated"}]));
        let u = user("alice", &["dev", "ops", "system:authenticated"]);
        assert_eq!(names(&idx.cluster_role_bindings_for(&u)), vec!["devs", "everyone"]);
        assert_eq!(names(&idx.cluster_role_bindings_for(&user("bob", &["system:authenticated"]))), vec!["everyone"]);
        // A group is not a user name.
        assert!(idx.cluster_role_bindings_for(&user("dev", &[])).is_empty());
    }

    #[test]
    fn service_accounts_match_by_namespace_and_name() {
        let mut idx = RbacIndex::new();
        // Namespace defaults to the RoleBinding's.
        put_binding(&mut idx, RbacKind::RoleBinding, "dev", "builder", json!([{"kind": "ServiceAccount", "name": "builder"}]));
        put_binding(&mut idx, RbacKind::RoleBinding, "dev", "other-ns", json!([{"kind": "ServiceAccount", "name": "builder", "namespace": "prod"}]));
        put_binding(&mut idx, RbacKind::ClusterRoleBinding, "", "sa-crb", json!([{"kind": "ServiceAccount", "name": "builder", "namespace": "prod"}]));
        let dev_sa = user("system:serviceaccount:dev:builder", &["system:serviceaccounts"]);
        let prod_sa = user("system:serviceaccount:prod:builder", &["system:serviceaccounts"]);
        assert_eq!(names(&idx.role_bindings_for("dev", &dev_sa)), vec!["builder"]);
        assert_eq!(names(&idx.role_bindings_for("dev", &prod_sa)), vec!["other-ns"]);
        assert!(idx.role_bindings_for("prod", &prod_sa).is_empty(), "bindings are per namespace");
        assert_eq!(names(&idx.cluster_role_bindings_for(&prod_sa)), vec!["sa-crb"]);
        assert!(idx.cluster_role_bindings_for(&dev_sa).is_empty());
        // The index agrees with subject_applies on every binding.
        for (ns, u) in [("dev", &dev_sa), ("dev", &prod_sa)] {
            let scanned: Vec<String> = idx
                .role_bindings(ns)
                .iter()
                .filter(|b| b.subjects.iter().any(|s| subject_applies(s, u, ns)))
                .map(|b| b.metadata.name.clone())
                .collect();
            assert_eq!(names(&idx.role_bindings_for(ns, u)), scanned);
        }
    }

    #[test]
    fn updates_and_deletes_leave_no_stale_subjects() {
        let mut idx = RbacIndex::new();
        put_binding(&mut idx, RbacKind::ClusterRoleBinding, "", "b", json!([{"kind": "User", "name": "alice"}]));
        put_binding(&mut idx, RbacKind::RoleBinding, "dev", "rb", json!([{"kind": "Group", "name": "dev"}]));
        let alice = user("alice", &["dev"]);
        assert_eq!(names(&idx.cluster_role_bindings_for(&alice)), vec!["b"]);
        // The binding moves to bob: alice loses it.
        put_binding(&mut idx, RbacKind::ClusterRoleBinding, "", "b", json!([{"kind": "User", "name": "bob"}]));
        assert!(idx.cluster_role_bindings_for(&alice).is_empty());
        assert_eq!(names(&idx.cluster_role_bindings_for(&user("bob", &[]))), vec!["b"]);
        idx.delete(RbacKind::ClusterRoleBinding, "b");
        assert!(idx.cluster_role_bindings_for(&user("bob", &[])).is_empty());
        assert!(idx.cluster_role_bindings().is_empty());
        assert!(idx.cluster_role_bindings.users.is_empty(), "no empty index entries are kept");
        idx.delete(RbacKind::RoleBinding, "dev/rb");
        assert!(idx.role_bindings_for("dev", &alice).is_empty());
        assert!(idx.role_bindings.is_empty());
    }

    #[test]
    fn roles_are_decoded_once_and_bad_objects_are_dropped() {
        let mut idx = RbacIndex::new();
        let role = json!({"metadata": {"name": "reader", "namespace": "dev"}, "rules": [{"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}]});
        idx.put(RbacKind::Role, "/registry/roles/dev/reader", "dev/reader", &serde_json::to_vec(&role).unwrap(), 5).unwrap();
        assert_eq!(idx.role("dev", "reader").unwrap().rules[0].verbs, vec!["get".to_string()]);
        assert!(idx.role("prod", "reader").is_none());
        let err = idx.put(RbacKind::Role, "/registry/roles/dev/reader", "dev/reader", b"{not json", 6).unwrap_err();
        assert!(err.starts_with("decoding /registry/roles/dev/reader"), "{err}");
        assert!(idx.role("dev", "reader").is_none(), "an undecodable update drops the old state");
        let cr = json!({"metadata": {"name": "view", "labels": {"a": "b"}}, "rules": []});
        idx.put(RbacKind::ClusterRole, "/registry/clusterroles/view", "view", &serde_json::to_vec(&cr).unwrap(), 7).unwrap();
        let stored = idx.stored_cluster_roles();
        assert_eq!((stored["view"].mod_revision, stored["view"].object["metadata"]["labels"]["a"].as_str()), (7, Some("b")));
        assert!(idx.put(RbacKind::ClusterRole, "/registry/clusterroles/a/b", "a/b", b"{}", 8).is_err(), "malformed key");
    }
}
