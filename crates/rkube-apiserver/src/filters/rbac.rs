//! RBAC: rbac.authorization.k8s.io/v1 objects and their evaluation (upstream
//! `plugin/pkg/auth/authorizer/rbac/rbac.go` and `pkg/apis/rbac/v1/evaluation_helpers.go`).
//!
//! [`RbacSource`] is how the authorizer reads Roles, ClusterRoles,
//! RoleBindings and ClusterRoleBindings. The API server uses
//! [`crate::filters::rbac_cache::RbacCache`] (decoded, indexed by subject,
//! kept by watches); [`StorageRbacSource`] reads them from rkube's storage
//! on each call (keys `<prefix>/roles/<ns>/<name>`,
//! `<prefix>/rolebindings/<ns>/<name>`, `<prefix>/clusterroles/<name>`,
//! `<prefix>/clusterrolebindings/<name>`, upstream's layout; the cache's
//! fallback until it has synced) and [`InMemoryRbac`] holds a fixed set
//! (tests).
//!
//! [`authorize`] allows a request when a rule of a role bound to the user
//! (through a ClusterRoleBinding, or a RoleBinding of the request's
//! namespace) matches it:
//!
//! - verbs: the request's verb or `*`;
//! - resource requests: apiGroups (`*` or the group), resources (`*`,
//!   `pods`, `pods/status`, `*/status`), resourceNames (empty = all);
//! - non-resource requests: nonResourceURLs (`*`, the path, or a `prefix*`),
//!   only through ClusterRoleBindings.
//!
//! Subjects: `User` by name, `Group` by membership, `ServiceAccount` as
//! `system:serviceaccount:<ns>:<name>`. Aggregated ClusterRoles are evaluated
//! with their stored rules, which [`crate::rbac_aggregation`] keeps filled.

use std::sync::{Arc, RwLock};

use rkube_storage::{RangeRequest, Storage};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::filters::authn::UserInfo;
use crate::filters::requestinfo::RequestAttributes;

/// The RBAC API group.
pub const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

/// Errors reading RBAC objects.
#[derive(Debug, thiserror::Error)]
pub enum RbacError {
    /// The source failed (storage unreachable, ...).
    #[error("{0}")]
    Source(String),
    /// A stored object is not valid JSON of its kind.
    #[error("decoding {kind} {name}: {message}")]
    Decode {
        /// The kind.
        kind: &'static str,
        /// The key or name.
        name: String,
        /// The decoder's message.
        message: String,
    },
}

/// `metadata` (name and namespace only).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Meta {
    /// The name.
    #[serde(default)]
    pub name: String,
    /// The namespace (empty for cluster-scoped kinds).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
}

/// `rbacv1.PolicyRule`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyRule {
    /// Verbs (`get`, `list`, ..., `*`).
    #[serde(default)]
    pub verbs: Vec<String>,
    /// API groups (`""` = core, `*`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub api_groups: Vec<String>,
    /// Resources (`pods`, `pods/status`, `*/status`, `*`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<String>,
    /// Object names (empty = all).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resource_names: Vec<String>,
    /// Non-resource URLs (`/healthz`, `/apis/*`, `*`).
    #[serde(default, rename = "nonResourceURLs", skip_serializing_if = "Vec::is_empty")]
    pub non_resource_urls: Vec<String>,
}

/// `rbacv1.Subject`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Subject {
    /// `User`, `Group` or `ServiceAccount`.
    pub kind: String,
    /// The name.
    pub name: String,
    /// ServiceAccount namespace (defaults to the binding's).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// `rbac.authorization.k8s.io` for users and groups, `""` for service accounts.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub api_group: String,
}

/// `rbacv1.RoleRef`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RoleRef {
    /// `rbac.authorization.k8s.io`.
    #[serde(default)]
    pub api_group: String,
    /// `Role` or `ClusterRole`.
    pub kind: String,
    /// The role's name.
    pub name: String,
}

/// A Role or ClusterRole.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Role {
    /// Name (and namespace for a Role).
    #[serde(default)]
    pub metadata: Meta,
    /// The rules.
    #[serde(default)]
    pub rules: Vec<PolicyRule>,
}

/// A RoleBinding or ClusterRoleBinding.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Binding {
    /// Name (and namespace for a RoleBinding).
    #[serde(default)]
    pub metadata: Meta,
    /// Who is bound.
    #[serde(default)]
    pub subjects: Vec<Subject>,
    /// The role granted.
    pub role_ref: RoleRef,
}

/// Where the authorizer reads RBAC objects. Implementations must be cheap
/// enough to call on every request (a cache, or a local store).
///
/// The four list-and-get methods are the contract; the `*_shared` and
/// `*_for` methods have defaults built on them and are overridden by
/// indexed sources ([`crate::filters::rbac_cache::RbacCache`]) so that
/// [`authorize`] neither clones roles nor scans other users' bindings.
#[async_trait::async_trait]
pub trait RbacSource: Send + Sync {
    /// The Role `namespace/name`.
    async fn role(&self, namespace: &str, name: &str) -> Result<Option<Role>, RbacError>;
    /// The ClusterRole `name`.
    async fn cluster_role(&self, name: &str) -> Result<Option<Role>, RbacError>;
    /// Every RoleBinding of `namespace`.
    async fn role_bindings(&self, namespace: &str) -> Result<Vec<Binding>, RbacError>;
    /// Every ClusterRoleBinding.
    async fn cluster_role_bindings(&self) -> Result<Vec<Binding>, RbacError>;

    /// The Role `namespace/name`, shared (no copy of its rules).
    async fn role_shared(&self, namespace: &str, name: &str) -> Result<Option<Arc<Role>>, RbacError> {
        Ok(self.role(namespace, name).await?.map(Arc::new))
    }
    /// The ClusterRole `name`, shared.
    async fn cluster_role_shared(&self, name: &str) -> Result<Option<Arc<Role>>, RbacError> {
        Ok(self.cluster_role(name).await?.map(Arc::new))
    }
    /// The RoleBindings of `namespace` with a subject naming `user`
    /// ([`subject_applies`]), in the order of [`RbacSource::role_bindings`]
    /// (an index: by name).
    async fn role_bindings_for(&self, namespace: &str, user: &UserInfo) -> Result<Vec<Arc<Binding>>, RbacError> {
        let all = self.role_bindings(namespace).await?;
        Ok(all.into_iter().filter(|b| b.subjects.iter().any(|s| subject_applies(s, user, namespace))).map(Arc::new).collect())
    }
    /// The ClusterRoleBindings with a subject naming `user`, in the order of
    /// [`RbacSource::cluster_role_bindings`] (an index: by name).
    async fn cluster_role_bindings_for(&self, user: &UserInfo) -> Result<Vec<Arc<Binding>>, RbacError> {
        let all = self.cluster_role_bindings().await?;
        Ok(all.into_iter().filter(|b| b.subjects.iter().any(|s| subject_applies(s, user, ""))).map(Arc::new).collect())
    }
    /// Waits until RBAC writes committed before the call are visible to this
    /// source (bounded; a cache waits for its watches). Sources that read
    /// storage or hold fixed objects return at once.
    async fn wait_fresh(&self) {}
}

/// RBAC objects held in memory.
#[derive(Debug, Default)]
pub struct InMemoryRbac {
    roles: RwLock<Vec<Role>>,
    cluster_roles: RwLock<Vec<Role>>,
    role_bindings: RwLock<Vec<Binding>>,
    cluster_role_bindings: RwLock<Vec<Binding>>,
}

impl InMemoryRbac {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds objects of kinds `Role`, `ClusterRole`, `RoleBinding`,
    /// `ClusterRoleBinding` (other kinds are ignored).
    pub fn add_objects(&self, objects: &[Value]) -> Result<(), RbacError> {
        for obj in objects {
            let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("");
            let name = obj.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("").to_string();
            match kind {
                "Role" | "ClusterRole" => {
                    let r: Role = serde_json::from_value(obj.clone())
                        .map_err(|e| RbacError::Decode { kind: "Role", name, message: e.to_string() })?;
                    let list = if kind == "Role" { &self.roles } else { &self.cluster_roles };
                    write(list).push(r);
                }
                "RoleBinding" | "ClusterRoleBinding" => {
                    let b: Binding = serde_json::from_value(obj.clone())
                        .map_err(|e| RbacError::Decode { kind: "RoleBinding", name, message: e.to_string() })?;
                    let list = if kind == "RoleBinding" { &self.role_bindings } else { &self.cluster_role_bindings };
                    write(list).push(b);
                }
                _ => {}
            }
        }
        Ok(())
    }
}

fn write<T>(l: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(|p| p.into_inner())
}

fn read<T>(l: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(|p| p.into_inner())
}

#[async_trait::async_trait]
impl RbacSource for InMemoryRbac {
    async fn role(&self, namespace: &str, name: &str) -> Result<Option<Role>, RbacError> {
        Ok(read(&self.roles).iter().find(|r| r.metadata.namespace == namespace && r.metadata.name == name).cloned())
    }
    async fn cluster_role(&self, name: &str) -> Result<Option<Role>, RbacError> {
        Ok(read(&self.cluster_roles).iter().find(|r| r.metadata.name == name).cloned())
    }
    async fn role_bindings(&self, namespace: &str) -> Result<Vec<Binding>, RbacError> {
        Ok(read(&self.role_bindings).iter().filter(|b| b.metadata.namespace == namespace).cloned().collect())
    }
    async fn cluster_role_bindings(&self) -> Result<Vec<Binding>, RbacError> {
        Ok(read(&self.cluster_role_bindings).clone())
    }
}

/// RBAC objects read from rkube's storage on each call.
pub struct StorageRbacSource {
    storage: Arc<dyn Storage>,
    prefix: String,
}

impl StorageRbacSource {
    /// Reads keys under `etcd_prefix` (`--etcd-prefix`, default `/registry`).
    pub fn new(storage: Arc<dyn Storage>, etcd_prefix: &str) -> Self {
        StorageRbacSource { storage, prefix: etcd_prefix.trim_end_matches('/').to_string() }
    }

    async fn get<T: serde::de::DeserializeOwned>(&self, key: String, kind: &'static str) -> Result<Option<T>, RbacError> {
        match self.storage.get(&key).await.map_err(|e| RbacError::Source(e.to_string()))? {
            None => Ok(None),
            Some(kv) => serde_json::from_slice(&kv.value)
                .map(Some)
                .map_err(|e| RbacError::Decode { kind, name: key, message: e.to_string() }),
        }
    }

    async fn list(&self, prefix: String) -> Result<Vec<Binding>, RbacError> {
        let resp = self.storage.range(RangeRequest::prefix(&prefix)).await.map_err(|e| RbacError::Source(e.to_string()))?;
        let mut out = Vec::with_capacity(resp.kvs.len());
        for kv in resp.kvs {
            match serde_json::from_slice::<Binding>(&kv.value) {
                Ok(b) => out.push(b),
                Err(e) => tracing::warn!(key = %kv.key, error = %e, "skipping undecodable RBAC binding"),
            }
        }
        Ok(out)
    }
}

#[async_trait::async_trait]
impl RbacSource for StorageRbacSource {
    async fn role(&self, namespace: &str, name: &str) -> Result<Option<Role>, RbacError> {
        self.get(format!("{}/roles/{namespace}/{name}", self.prefix), "Role").await
    }
    async fn cluster_role(&self, name: &str) -> Result<Option<Role>, RbacError> {
        self.get(format!("{}/clusterroles/{name}", self.prefix), "ClusterRole").await
    }
    async fn role_bindings(&self, namespace: &str) -> Result<Vec<Binding>, RbacError> {
        self.list(format!("{}/rolebindings/{namespace}/", self.prefix)).await
    }
    async fn cluster_role_bindings(&self) -> Result<Vec<Binding>, RbacError> {
        self.list(format!("{}/clusterrolebindings/", self.prefix)).await
    }
}

/// The outcome of RBAC evaluation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RbacDecision {
    /// Allowed; the reason names the binding and role.
    Allow(String),
    /// No rule allows it; the reason lists lookup errors (empty when none), as
    /// upstream's `RBAC: <errors>`.
    NoOpinion(String),
}

/// Whether binding subject `s` (of a binding in `binding_ns`, `""` for
/// ClusterRoleBindings) names `user` (upstream `appliesToUser`).
pub fn subject_applies(s: &Subject, user: &UserInfo, binding_ns: &str) -> bool {
    match s.kind.as_str() {
        "User" => s.name == user.username,
        "Group" => user.groups.contains(&s.name),
        "ServiceAccount" => {
            let ns = if s.namespace.is_empty() { binding_ns } else { &s.namespace };
            user.username == format!("system:serviceaccount:{ns}:{}", s.name)
        }
        _ => false,
    }
}

/// Whether `list` (verbs, apiGroups) holds `v` or `*` (upstream `VerbMatches`, `APIGroupMatches`).
pub(crate) fn has(list: &[String], v: &str) -> bool {
    list.iter().any(|x| x == "*" || x == v)
}

/// Whether a rule's `resources` match `combined` (`pods`, `pods/status`):
/// `*`, the exact name, or `*/<subresource>` (upstream `ResourceMatches`).
pub(crate) fn resource_matches(resources: &[String], combined: &str, subresource: Option<&str>) -> bool {
    resources.iter().any(|r| r == "*" || r == combined || (subresource.is_some() && r.strip_prefix("*/") == subresource))
}

/// Whether a rule's `nonResourceURLs` match `path`: `*`, the path, or a
/// `prefix*` (upstream `NonResourceURLMatches`).
pub(crate) fn url_matches(urls: &[String], path: &str) -> bool {
    urls.iter().any(|u| u == "*" || u == path || (u.ends_with('*') && path.starts_with(u.trim_end_matches('*'))))
}

/// Whether `rule` allows the request (upstream `RuleAllows`).
pub fn rule_allows(rule: &PolicyRule, a: &RequestAttributes) -> bool {
    if !has(&rule.verbs, &a.verb) {
        return false;
    }
    if a.is_resource_request {
        let sub = (!a.subresource.is_empty()).then_some(a.subresource.as_str());
        has(&rule.api_groups, &a.api_group)
            && resource_matches(&rule.resources, &a.combined_resource(), sub)
            && (rule.resource_names.is_empty() || rule.resource_names.contains(&a.name))
    } else {
        url_matches(&rule.non_resource_urls, &a.path)
    }
}

async fn role_rules(src: &dyn RbacSource, r: &RoleRef, ns: &str) -> Result<Option<Arc<Role>>, RbacError> {
    match r.kind.as_str() {
        "ClusterRole" => src.cluster_role_shared(&r.name).await,
        "Role" => src.role_shared(ns, &r.name).await,
        _ => Ok(None),
    }
}

fn describe_subject(s: &Subject, binding_ns: &str) -> String {
    match s.kind.as_str() {
        "ServiceAccount" => {
            let ns = if s.namespace.is_empty() { binding_ns } else { &s.namespace };
            format!("ServiceAccount \"{}/{ns}\"", s.name)
        }
        k => format!("{k} \"{}\"", s.name),
    }
}

/// Checks one binding whose subjects include `user`: `Ok(Some(reason))` when
/// its role allows `a`, `Err` when the role cannot be read.
fn check_binding(
    binding: &Binding,
    binding_ns: &str,
    role: Result<Option<Arc<Role>>, RbacError>,
    what: &str,
    user: &UserInfo,
    a: &RequestAttributes,
) -> Result<Option<String>, String> {
    let role = match role {
        Err(e) => return Err(e.to_string()),
        Ok(None) => {
            return Err(format!(
                "{}.{RBAC_GROUP} {:?} not found",
                binding.role_ref.kind.to_ascii_lowercase(),
                binding.role_ref.name
            ))
        }
        Ok(Some(role)) => role,
    };
    if !role.rules.iter().any(|r| rule_allows(r, a)) {
        return Ok(None);
    }
    let subject = binding
        .subjects
        .iter()
        .find(|s| subject_applies(s, user, binding_ns))
        .map(|s| describe_subject(s, binding_ns))
        .unwrap_or_default();
    let scope = if binding_ns.is_empty() { String::new() } else { format!(" in namespace {binding_ns:?}") };
    Ok(Some(format!(
        "RBAC: allowed by {what} {:?} of {} {:?} to {subject}{scope}",
        binding.metadata.name, binding.role_ref.kind, binding.role_ref.name
    )))
}

/// Evaluates RBAC for `user` doing `a` (see the module docs).
pub async fn authorize(src: &dyn RbacSource, user: &UserInfo, a: &RequestAttributes) -> RbacDecision {
    let mut errors: Vec<String> = Vec::new();
    match src.cluster_role_bindings_for(user).await {
        Err(e) => errors.push(e.to_string()),
        Ok(bindings) => {
            for b in &bindings {
                if b.role_ref.kind != "ClusterRole" {
                    continue;
                }
                let role = src.cluster_role_shared(&b.role_ref.name).await;
                match check_binding(b, "", role, "ClusterRoleBinding", user, a) {
                    Ok(Some(reason)) => return RbacDecision::Allow(reason),
                    Ok(None) => {}
                    Err(e) => errors.push(e),
                }
            }
        }
    }
    if a.is_resource_request && !a.namespace.is_empty() {
        match src.role_bindings_for(&a.namespace, user).await {
            Err(e) => errors.push(e.to_string()),
            Ok(bindings) => {
                for b in &bindings {
                    let role = role_rules(src, &b.role_ref, &a.namespace).await;
                    match check_binding(b, &a.namespace, role, "RoleBinding", user, a) {
                        Ok(Some(reason)) => return RbacDecision::Allow(reason),
                        Ok(None) => {}
                        Err(e) => errors.push(e),
                    }
                }
            }
        }
    }
    if errors.is_empty() {
        RbacDecision::NoOpinion(String::new())
    } else {
        RbacDecision::NoOpinion(format!("RBAC: {}", errors.join(", ")))
    }
}

/// Creates the [`bootstrap_policy`] objects missing from `storage` (keys of
/// [`StorageRbacSource`]), with a fresh `uid` and `creationTimestamp`, like
/// upstream's RBAC post-start hook. An existing ClusterRole gets the
/// bootstrap rules it lacks appended, as upstream's reconciliation does,
/// unless it is annotated `rbac.authorization.kubernetes.io/autoupdate:
/// "false"` or aggregated (its rules are the aggregation's); other existing
/// objects are left alone. Returns how many were created.
pub async fn ensure_bootstrap_policy(storage: &dyn Storage, etcd_prefix: &str) -> Result<usize, RbacError> {
    let prefix = etcd_prefix.trim_end_matches('/');
    let mut created = 0;
    for mut obj in bootstrap_policy() {
        let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("").to_ascii_lowercase();
        let name = obj.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("").to_string();
        let key = format!("{prefix}/{kind}s/{name}");
        if let Some(kv) = storage.get(&key).await.map_err(|e| RbacError::Source(e.to_string()))? {
            if kind == "clusterrole" {
                add_missing_rules(storage, &kv, &obj).await?;
            }
            continue;
        }
        obj["metadata"]["uid"] = Value::String(uuid::Uuid::new_v4().to_string());
        obj["metadata"]["creationTimestamp"] = Value::String(rkube_api::time::now_rfc3339());
        let bytes = serde_json::to_vec(&obj).map_err(|e| RbacError::Source(e.to_string()))?;
        match storage.create(&key, bytes.into()).await {
            Ok(_) => created += 1,
            Err(rkube_storage::StorageError::AlreadyExists { .. }) => {}
            Err(e) => return Err(RbacError::Source(e.to_string())),
        }
    }
    Ok(created)
}

/// Appends to the stored ClusterRole `kv` the rules of `bootstrap` it lacks
/// (see [`ensure_bootstrap_policy`]); a conflicting write is left for the
/// next start. Errors: storage failures.
async fn add_missing_rules(storage: &dyn Storage, kv: &rkube_storage::KeyValue, bootstrap: &Value) -> Result<(), RbacError> {
    let Ok(mut stored) = serde_json::from_slice::<Value>(&kv.value) else { return Ok(()) };
    let opted_out = stored.pointer("/metadata/annotations/rbac.authorization.kubernetes.io~1autoupdate").and_then(Value::as_str) == Some("false");
    if opted_out || stored.get("aggregationRule").is_some_and(|a| !a.is_null()) {
        return Ok(());
    }
    let decode = |v: &Value| serde_json::from_value::<PolicyRule>(v.clone()).ok();
    let have: Vec<PolicyRule> = stored["rules"].as_array().into_iter().flatten().filter_map(decode).collect();
    let missing: Vec<Value> =
        bootstrap["rules"].as_array().into_iter().flatten().filter(|r| decode(r).is_some_and(|r| !have.contains(&r))).cloned().collect();
    if missing.is_empty() {
        return Ok(());
    }
    match stored.get_mut("rules").and_then(Value::as_array_mut) {
        Some(rules) => rules.extend(missing),
        None => stored["rules"] = Value::Array(missing),
    }
    if let Some(m) = stored.pointer_mut("/metadata").and_then(Value::as_object_mut) {
        m.remove("resourceVersion");
    }
    let bytes = serde_json::to_vec(&stored).map_err(|e| RbacError::Source(e.to_string()))?;
    match storage.update(&kv.key, bytes.into(), kv.mod_revision).await {
        Ok(_) | Err(rkube_storage::StorageError::Conflict { .. }) => Ok(()),
        Err(e) => Err(RbacError::Source(e.to_string())),
    }
}

/// Upstream's bootstrap policy subset every cluster needs, as objects to
/// create at first start (`plugin/pkg/auth/authorizer/rbac/bootstrappolicy`):
/// ClusterRoles `cluster-admin`, `system:discovery`, `system:basic-user`,
/// `system:public-info-viewer`, `admin`, `edit`, `view` (aggregated like
/// upstream from `system:aggregate-to-{admin,edit,view}` through the
/// `rbac.authorization.k8s.io/aggregate-to-*` labels; `view` is aggregated
/// into `edit`, `edit` into `admin`), and the bindings
/// of `cluster-admin` to `system:masters`, `system:discovery` and
/// `system:basic-user` to `system:authenticated`, `system:public-info-viewer`
/// to `system:authenticated` and `system:unauthenticated`, and
/// `system:service-account-issuer-discovery` (the issuer discovery paths) to
/// `system:serviceaccounts`, and `system:kube-scheduler` (upstream's rules)
/// to the user `system:kube-scheduler`; metrics-server's
/// `system:aggregated-metrics-reader`, aggregated into `view`; and the
/// controllers' roles `system:controller:<name>` bound to the ServiceAccounts
/// `kube-system/<name>` ([`super::rbac_controllers`]).
pub fn bootstrap_policy() -> Vec<Value> {
    let cr = |name: &str, rules: Value| {
        serde_json::json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": name, "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
                         "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"}},
            "rules": rules,
        })
    };
    let crb = |name: &str, role: &str, groups: &[&str]| {
        let subjects: Vec<Value> = groups
            .iter()
            .map(|g| serde_json::json!({"apiGroup": RBAC_GROUP, "kind": "Group", "name": g}))
            .collect();
        serde_json::json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": name, "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
                         "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"}},
            "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": role},
            "subjects": subjects,
        })
    };
    let read = ["get", "list", "watch"];
    let write = ["create", "delete", "deletecollection", "patch", "update"];
    let all_rw: Vec<&str> = read.iter().chain(write.iter()).copied().collect();
    let groups = ["", "apps", "batch", "autoscaling", "networking.k8s.io", "policy", "discovery.k8s.io", "coordination.k8s.io", "events.k8s.io"];
    let read_rule = serde_json::json!({"apiGroups": groups, "resources": ["*"], "verbs": read});
    let write_rule = serde_json::json!({"apiGroups": groups, "resources": ["*"], "verbs": write});
    let rbac_rule = serde_json::json!({"apiGroups": [RBAC_GROUP], "resources": ["roles", "rolebindings"], "verbs": all_rw});
    let label = |to: &str| format!("{RBAC_GROUP}/aggregate-to-{to}");
    let metrics_rule = metrics_reader_rule();
    // A ClusterRole aggregating `aggregate-to-<selects>` roles, itself aggregated into `into`.
    let aggregated = |name: &str, into: &[&str], selects: &str, rules: Value| {
        let mut role = cr(name, rules);
        for i in into {
            role["metadata"]["labels"][label(i)] = Value::String("true".into());
        }
        role["aggregationRule"] = serde_json::json!({"clusterRoleSelectors": [{"matchLabels": {label(selects): "true"}}]});
        role
    };
    let aggregate_to = |to: &str, rules: Value| {
        let mut role = cr(&format!("system:aggregate-to-{to}"), rules);
        role["metadata"]["labels"][label(to)] = Value::String("true".into());
        role
    };
    vec![
        cr("cluster-admin", serde_json::json!([
            {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
            {"nonResourceURLs": ["*"], "verbs": ["*"]},
        ])),
        cr("system:discovery", serde_json::json!([
            {"nonResourceURLs": ["/api", "/api/*", "/apis", "/apis/*", "/healthz", "/livez", "/openapi", "/openapi/*", "/readyz", "/version", "/version/"], "verbs": ["get"]},
        ])),
        cr("system:basic-user", serde_json::json!([
            {"apiGroups": ["authorization.k8s.io"], "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"], "verbs": ["create"]},
            {"apiGroups": ["authentication.k8s.io"], "resources": ["selfsubjectreviews"], "verbs": ["create"]},
        ])),
        cr("system:public-info-viewer", serde_json::json!([
            {"nonResourceURLs": ["/healthz", "/livez", "/readyz", "/version", "/version/"], "verbs": ["get"]},
        ])),
        cr("system:service-account-issuer-discovery", serde_json::json!([
            {"nonResourceURLs": ["/.well-known/openid-configuration", "/.well-known/openid-configuration/", "/openid/v1/jwks", "/openid/v1/jwks/"], "verbs": ["get"]},
        ])),
        // admin ⊇ edit ⊇ view by aggregation, as upstream: the rules live in
        // system:aggregate-to-*; the initial rules are the aggregated result.
        aggregated("admin", &[], "admin", serde_json::json!([write_rule, metrics_rule, read_rule, rbac_rule])),
        aggregated("edit", &["admin"], "edit", serde_json::json!([write_rule, metrics_rule, read_rule])),
        aggregated("view", &["edit"], "view", serde_json::json!([read_rule, metrics_rule])),
        aggregate_to("admin", serde_json::json!([rbac_rule])),
        aggregate_to("edit", serde_json::json!([write_rule])),
        aggregate_to("view", serde_json::json!([read_rule])),
        crb("cluster-admin", "cluster-admin", &["system:masters"]),
        crb("system:discovery", "system:discovery", &["system:authenticated"]),
        crb("system:basic-user", "system:basic-user", &["system:authenticated"]),
        crb("system:public-info-viewer", "system:public-info-viewer", &["system:authenticated", "system:unauthenticated"]),
        crb("system:service-account-issuer-discovery", "system:service-account-issuer-discovery", &["system:serviceaccounts"]),
        metrics_reader(&cr, &label),
        cr("system:kube-scheduler", kube_scheduler_rules()),
        user_binding(crb("system:kube-scheduler", "system:kube-scheduler", &[]), "system:kube-scheduler"),
        kube_controller_manager_role(&cr),
        user_binding(crb(KUBE_CONTROLLER_MANAGER, KUBE_CONTROLLER_MANAGER, &[]), KUBE_CONTROLLER_MANAGER),
    ]
    .into_iter()
    .chain(super::rbac_controllers::controller_policy())
    .collect()
}

/// ClusterRole `system:aggregated-metrics-reader` of metrics-server's manifest: reading
/// `metrics.k8s.io` (served by rkube's API server itself), aggregated into `view`, `edit` and
/// `admin` so whoever may read pods may `kubectl top` them.
fn metrics_reader(cr: &dyn Fn(&str, Value) -> Value, label: &dyn Fn(&str) -> String) -> Value {
    let mut role = cr("system:aggregated-metrics-reader", serde_json::json!([metrics_reader_rule()]));
    for to in ["view", "edit", "admin"] {
        role["metadata"]["labels"][label(to)] = Value::String("true".into());
    }
    role
}

/// The one rule of `system:aggregated-metrics-reader`.
fn metrics_reader_rule() -> Value {
    serde_json::json!({"apiGroups": ["metrics.k8s.io"], "resources": ["pods", "nodes"], "verbs": ["get", "list", "watch"]})
}

/// `binding` with the one subject User `user`.
fn user_binding(mut binding: Value, user: &str) -> Value {
    binding["subjects"] = serde_json::json!([{"apiGroup": RBAC_GROUP, "kind": "User", "name": user}]);
    binding
}

/// The rules of upstream's `system:kube-scheduler` ClusterRole
/// (`bootstrappolicy/policy.go`): events, its Lease, reading what it
/// schedules against, binding pods and writing their status.
fn kube_scheduler_rules() -> Value {
    let read = ["get", "list", "watch"];
    serde_json::json!([
        {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch", "update"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": ["kube-scheduler"], "verbs": ["get", "update"]},
        {"apiGroups": [""], "resources": ["nodes"], "verbs": read},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["delete", "get", "list", "watch"]},
        {"apiGroups": [""], "resources": ["bindings", "pods/binding"], "verbs": ["create"]},
        {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["patch", "update"]},
        {"apiGroups": [""], "resources": ["replicationcontrollers", "services"], "verbs": read},
        {"apiGroups": ["apps", "extensions"], "resources": ["replicasets"], "verbs": read},
        {"apiGroups": ["apps"], "resources": ["statefulsets"], "verbs": read},
        {"apiGroups": ["policy"], "resources": ["poddisruptionbudgets"], "verbs": read},
        {"apiGroups": [""], "resources": ["persistentvolumeclaims", "persistentvolumes"], "verbs": read},
        {"apiGroups": [""], "resources": ["persistentvolumeclaims", "persistentvolumes"], "verbs": ["patch", "update"]},
        {"apiGroups": ["storage.k8s.io"], "resources": ["storageclasses"], "verbs": read},
        {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]},
        {"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"], "verbs": ["create"]},
        {"apiGroups": ["storage.k8s.io"], "resources": ["csinodes"], "verbs": read},
        {"apiGroups": [""], "resources": ["namespaces"], "verbs": read},
        {"apiGroups": ["storage.k8s.io"], "resources": ["csidrivers"], "verbs": read},
        {"apiGroups": ["storage.k8s.io"], "resources": ["csistoragecapacities"], "verbs": read},
    ])
}

/// The user `rkube up`'s controller manager authenticates as (upstream's
/// `user.KubeControllerManager`).
pub const KUBE_CONTROLLER_MANAGER: &str = "system:kube-controller-manager";

/// ClusterRole `system:kube-controller-manager`: upstream's (read every
/// resource, write events and leases) plus the writes of the controllers
/// rkube runs under that one identity (upstream grants those to
/// `system:controller:<name>` roles of per-controller ServiceAccounts with
/// `--use-service-account-credentials`): pods, ReplicaSets,
/// ReplicationControllers, Deployments, StatefulSets, DaemonSets and their
/// status, ControllerRevisions, StatefulSets' PersistentVolumeClaims, provisioned
/// PersistentVolumes; Endpoints and
/// EndpointSlices; and, for the garbage collector and the namespace
/// controller (`system:controller:generic-garbage-collector`,
/// `system:controller:namespace-controller`), updating and deleting any
/// object, including `namespaces/finalize` and `namespaces/status`.
///
/// With `--use-service-account-credentials` the controllers act as their
/// ServiceAccounts instead; the manager itself then only creates those
/// ServiceAccounts (in `kube-system`) and their tokens (`create` on
/// `serviceaccounts` and `serviceaccounts/token`, as upstream's role), holds
/// its Lease and reads. The broad writes stay because a controller manager
/// started without the flag (`rkube up --insecure` aside, which has no
/// authorization) runs every controller with this identity: upstream's
/// role alone would not let it work either, and upstream's deployments
/// that leave the flag off bind a broader role themselves.
fn kube_controller_manager_role(cr: &dyn Fn(&str, Value) -> Value) -> Value {
    cr(KUBE_CONTROLLER_MANAGER, serde_json::json!([
        {"apiGroups": ["*"], "resources": ["*"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch", "update"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create", "get", "update"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "delete", "patch", "update"]},
        {"apiGroups": [""], "resources": ["replicationcontrollers"], "verbs": ["patch", "update"]},
        {"apiGroups": [""], "resources": ["replicationcontrollers/status"], "verbs": ["patch", "update"]},
        {"apiGroups": ["apps", "extensions"], "resources": ["replicasets"], "verbs": ["create", "delete", "patch", "update"]},
        {"apiGroups": ["apps", "extensions"], "resources": ["replicasets/status", "deployments/status"], "verbs": ["patch", "update"]},
        {"apiGroups": ["apps", "extensions"], "resources": ["deployments", "deployments/finalizers", "replicasets/finalizers"], "verbs": ["patch", "update"]},
        {"apiGroups": [""], "resources": ["endpoints"], "verbs": ["create", "delete", "update"]},
        {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["create", "delete", "update"]},
        {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["create", "delete", "patch", "update"]},
        {"apiGroups": ["batch"], "resources": ["jobs/status", "cronjobs/status", "jobs/finalizers", "cronjobs/finalizers"], "verbs": ["patch", "update"]},
        {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["patch", "update"]},
        {"apiGroups": ["apps"], "resources": ["controllerrevisions"], "verbs": ["create"]},
        {"apiGroups": [""], "resources": ["persistentvolumeclaims", "persistentvolumes"], "verbs": ["create"]},
        {"apiGroups": ["*"], "resources": ["*"], "verbs": ["delete", "deletecollection", "patch", "update"]},
        {"apiGroups": [""], "resources": ["serviceaccounts", "serviceaccounts/token"], "verbs": ["create"]},
    ]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::{HeaderMap, Method};
    use serde_json::json;

    fn attrs(method: Method, uri: &str) -> RequestAttributes {
        RequestAttributes::new(&method, &uri.parse().unwrap(), &HeaderMap::new())
    }

    fn user(name: &str, groups: &[&str]) -> UserInfo {
        UserInfo { username: name.into(), uid: String::new(), groups: groups.iter().map(|g| g.to_string()).collect(), extra: Default::default() }
    }

    fn rule(v: Value) -> PolicyRule {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn rules_match_verbs_groups_resources_and_names() {
        let list_pods = attrs(Method::GET, "/api/v1/namespaces/default/pods");
        assert!(rule_allows(&rule(json!({"verbs": ["list"], "apiGroups": [""], "resources": ["pods"]})), &list_pods));
        assert!(rule_allows(&rule(json!({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]})), &list_pods));
        assert!(!rule_allows(&rule(json!({"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]})), &list_pods));
        assert!(!rule_allows(&rule(json!({"verbs": ["list"], "apiGroups": ["apps"], "resources": ["pods"]})), &list_pods));

        let status = attrs(Method::PUT, "/api/v1/namespaces/default/pods/web/status");
        assert!(!rule_allows(&rule(json!({"verbs": ["update"], "apiGroups": [""], "resources": ["pods"]})), &status));
        assert!(rule_allows(&rule(json!({"verbs": ["update"], "apiGroups": [""], "resources": ["pods/status"]})), &status));
        assert!(rule_allows(&rule(json!({"verbs": ["update"], "apiGroups": [""], "resources": ["*/status"]})), &status));
        assert!(rule_allows(
            &rule(json!({"verbs": ["update"], "apiGroups": [""], "resources": ["pods/status"], "resourceNames": ["web"]})),
            &status
        ));
        assert!(!rule_allows(
            &rule(json!({"verbs": ["update"], "apiGroups": [""], "resources": ["pods/status"], "resourceNames": ["db"]})),
            &status
        ));
    }

    #[test]
    fn non_resource_rules_match_paths_and_prefixes() {
        let put_v = attrs(Method::PUT, "/debug/flags/v");
        assert!(rule_allows(&rule(json!({"verbs": ["put"], "nonResourceURLs": ["/debug/flags/v"]})), &put_v));
        assert!(rule_allows(&rule(json!({"verbs": ["*"], "nonResourceURLs": ["/debug/*"]})), &put_v));
        assert!(!rule_allows(&rule(json!({"verbs": ["get"], "nonResourceURLs": ["/debug/flags/v"]})), &put_v));
        assert!(!rule_allows(&rule(json!({"verbs": ["put"], "apiGroups": ["*"], "resources": ["*"]})), &put_v));
    }

    async fn fixture() -> InMemoryRbac {
        let rbac = InMemoryRbac::new();
        rbac.add_objects(&bootstrap_policy()).unwrap();
        rbac.add_objects(&[
            json!({"kind": "Role", "metadata": {"name": "pod-reader", "namespace": "dev"},
                   "rules": [{"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods"]}]}),
            json!({"kind": "RoleBinding", "metadata": {"name": "alice-reads", "namespace": "dev"},
                   "subjects": [{"kind": "User", "name": "alice", "apiGroup": RBAC_GROUP}],
                   "roleRef": {"kind": "Role", "name": "pod-reader", "apiGroup": RBAC_GROUP}}),
            json!({"kind": "RoleBinding", "metadata": {"name": "sa-view", "namespace": "dev"},
                   "subjects": [{"kind": "ServiceAccount", "name": "builder"}],
                   "roleRef": {"kind": "ClusterRole", "name": "view", "apiGroup": RBAC_GROUP}}),
            json!({"kind": "RoleBinding", "metadata": {"name": "dangling", "namespace": "prod"},
                   "subjects": [{"kind": "User", "name": "alice", "apiGroup": RBAC_GROUP}],
                   "roleRef": {"kind": "Role", "name": "missing", "apiGroup": RBAC_GROUP}}),
        ])
        .unwrap();
        rbac
    }

    #[tokio::test]
    async fn role_binding_grants_only_in_its_namespace() {
        let rbac = fixture().await;
        let alice = user("alice", &["system:authenticated"]);
        let d = authorize(&rbac, &alice, &attrs(Method::GET, "/api/v1/namespaces/dev/pods")).await;
        assert_eq!(
            d,
            RbacDecision::Allow(
                "RBAC: allowed by RoleBinding \"alice-reads\" of Role \"pod-reader\" to User \"alice\" in namespace \"dev\"".into()
            )
        );
        let d = authorize(&rbac, &alice, &attrs(Method::GET, "/api/v1/namespaces/default/pods")).await;
        assert_eq!(d, RbacDecision::NoOpinion(String::new()));
        let d = authorize(&rbac, &alice, &attrs(Method::DELETE, "/api/v1/namespaces/dev/pods/x")).await;
        assert_eq!(d, RbacDecision::NoOpinion(String::new()));
    }

    #[tokio::test]
    async fn kube_controller_manager_writes_what_its_controllers_need_and_reads_everything() {
        let rbac = fixture().await;
        let kcm = user(KUBE_CONTROLLER_MANAGER, &["system:authenticated"]);
        let allowed = [
            (Method::POST, "/api/v1/namespaces/dev/pods"),
            (Method::DELETE, "/api/v1/namespaces/dev/pods/web-1"),
            (Method::PATCH, "/apis/apps/v1/namespaces/dev/replicasets/web-1/status"),
            (Method::POST, "/apis/apps/v1/namespaces/dev/replicasets"),
            (Method::PATCH, "/apis/apps/v1/namespaces/dev/deployments/web/status"),
            (Method::PATCH, "/api/v1/namespaces/dev/replicationcontrollers/rc/status"),
            (Method::POST, "/apis/events.k8s.io/v1/namespaces/dev/events"),
            (Method::GET, "/api/v1/secrets"),
            // The garbage collector and the namespace controller delete and
            // update any object.
            (Method::DELETE, "/apis/apps/v1/namespaces/dev/deployments/web"),
            (Method::PUT, "/api/v1/namespaces/dev/finalize"),
            (Method::POST, "/apis/discovery.k8s.io/v1/namespaces/dev/endpointslices"),
            (Method::POST, "/apis/batch/v1/namespaces/dev/jobs"),
            (Method::DELETE, "/apis/batch/v1/namespaces/dev/jobs/j"),
            (Method::PUT, "/apis/batch/v1/namespaces/dev/jobs/j/status"),
            (Method::PUT, "/apis/batch/v1/namespaces/dev/cronjobs/c/status"),
            (Method::PATCH, "/api/v1/namespaces/dev/pods/p/status"),
        ];
        for (m, path) in allowed {
            let d = authorize(&rbac, &kcm, &attrs(m.clone(), path)).await;
            assert!(matches!(d, RbacDecision::Allow(_)), "{m} {path}: {d:?}");
        }
        for (m, path) in [(Method::POST, "/apis/apps/v1/namespaces/dev/deployments"), (Method::POST, "/api/v1/namespaces/dev/secrets")] {
            let d = authorize(&rbac, &kcm, &attrs(m.clone(), path)).await;
            assert!(matches!(d, RbacDecision::NoOpinion(_)), "{m} {path}: {d:?}");
        }
    }

    #[tokio::test]
    async fn missing_roles_are_reported_in_the_reason() {
        let rbac = fixture().await;
        let alice = user("alice", &["system:authenticated"]);
        let d = authorize(&rbac, &alice, &attrs(Method::GET, "/api/v1/namespaces/prod/pods")).await;
        assert_eq!(d, RbacDecision::NoOpinion("RBAC: role.rbac.authorization.k8s.io \"missing\" not found".into()));
    }

    #[tokio::test]
    async fn service_accounts_groups_and_bootstrap_roles_apply() {
        let rbac = fixture().await;
        let sa = user("system:serviceaccount:dev:builder", &["system:serviceaccounts", "system:authenticated"]);
        assert!(matches!(authorize(&rbac, &sa, &attrs(Method::GET, "/apis/apps/v1/namespaces/dev/deployments")).await, RbacDecision::Allow(_)));
        let admin = user("root", &["system:masters", "system:authenticated"]);
        assert!(matches!(authorize(&rbac, &admin, &attrs(Method::DELETE, "/api/v1/nodes/n1")).await, RbacDecision::Allow(_)));
        let anyone = user("bob", &["system:authenticated"]);
        assert!(matches!(authorize(&rbac, &anyone, &attrs(Method::GET, "/apis")).await, RbacDecision::Allow(_)));
        assert!(matches!(authorize(&rbac, &anyone, &attrs(Method::GET, "/metrics")).await, RbacDecision::NoOpinion(_)));
        let anon = UserInfo::anonymous();
        assert!(matches!(authorize(&rbac, &anon, &attrs(Method::GET, "/healthz")).await, RbacDecision::Allow(_)));
        assert!(matches!(authorize(&rbac, &anon, &attrs(Method::GET, "/api")).await, RbacDecision::NoOpinion(_)));
    }

    #[tokio::test]
    async fn kube_scheduler_may_bind_pods_and_hold_only_its_lease() {
        let rbac = fixture().await;
        let sched = user("system:kube-scheduler", &["system:authenticated"]);
        let allowed = [
            (Method::POST, "/api/v1/namespaces/dev/pods/p/binding"),
            (Method::PATCH, "/api/v1/namespaces/dev/pods/p/status"),
            (Method::GET, "/api/v1/pods?watch=true"),
            (Method::GET, "/api/v1/nodes"),
            (Method::POST, "/apis/events.k8s.io/v1/namespaces/dev/events"),
            (Method::POST, "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases"),
            (Method::PUT, "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/kube-scheduler"),
        ];
        for (m, uri) in allowed {
            let d = authorize(&rbac, &sched, &attrs(m.clone(), uri)).await;
            assert!(matches!(d, RbacDecision::Allow(_)), "{m} {uri}: {d:?}");
        }
        let denied = [
            (Method::PUT, "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/kube-controller-manager"),
            (Method::GET, "/api/v1/namespaces/dev/secrets"),
            (Method::POST, "/api/v1/namespaces/dev/pods"),
        ];
        for (m, uri) in denied {
            let d = authorize(&rbac, &sched, &attrs(m.clone(), uri)).await;
            assert!(matches!(d, RbacDecision::NoOpinion(_)), "{m} {uri}: {d:?}");
        }
    }

    #[tokio::test]
    async fn storage_source_reads_upstream_keys() {
        let dir = tempfile::tempdir().unwrap();
        let storage: Arc<dyn Storage> = Arc::new(rkube_storage::embedded::EmbeddedStorage::open(dir.path()).unwrap());
        let role = json!({"kind": "ClusterRole", "metadata": {"name": "reader"}, "rules": [{"verbs": ["list"], "apiGroups": [""], "resources": ["pods"]}]});
        let crb = json!({"kind": "ClusterRoleBinding", "metadata": {"name": "carol-reads"},
                         "subjects": [{"kind": "User", "name": "carol"}], "roleRef": {"kind": "ClusterRole", "name": "reader"}});
        storage.create("/registry/clusterroles/reader", serde_json::to_vec(&role).unwrap().into()).await.unwrap();
        storage.create("/registry/clusterrolebindings/carol-reads", serde_json::to_vec(&crb).unwrap().into()).await.unwrap();
        let n = ensure_bootstrap_policy(storage.as_ref(), "/registry").await.unwrap();
        assert_eq!(n, bootstrap_policy().len());
        assert_eq!(ensure_bootstrap_policy(storage.as_ref(), "/registry").await.unwrap(), 0, "idempotent");
        let src = StorageRbacSource::new(storage, "/registry");
        let d = authorize(&src, &user("carol", &[]), &attrs(Method::GET, "/api/v1/pods")).await;
        assert!(matches!(d, RbacDecision::Allow(_)), "{d:?}");
        let d = authorize(&src, &user("dave", &["system:authenticated"]), &attrs(Method::GET, "/apis")).await;
        assert!(matches!(d, RbacDecision::Allow(ref r) if r.contains("system:discovery")), "{d:?}");
    }
}
