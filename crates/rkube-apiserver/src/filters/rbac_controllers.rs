//! The bootstrap ClusterRoles `system:controller:<name>` and their
//! ClusterRoleBindings to the ServiceAccounts `kube-system/<name>`, which
//! the controller manager's controllers act as with
//! `--use-service-account-credentials` (upstream's
//! `plugin/pkg/auth/authorizer/rbac/bootstrappolicy/controller_policy.go`),
//! for every controller rkube runs.
//!
//! Each role holds upstream's rules for that controller, plus, listed apart
//! in [`CONTROLLER_ROLES`] as `extra`, what rkube's implementation of the
//! controller needs beyond them:
//!
//! - reads (`get`, `list`, `watch`) of what the controller's own reflectors
//!   follow: upstream's controllers read through informers shared by the
//!   whole manager and started with its own identity (hence
//!   `list`/`watch` on everything in `system:kube-controller-manager`),
//!   while each rkube controller watches with its own client;
//! - `patch` where rkube writes a status (or an annotation) with a JSON
//!   merge patch and upstream with an `update`.
//!
//! Nothing beyond that: a controller's ServiceAccount may not, for
//! example, create Secrets.

use serde_json::{json, Value};

use super::rbac::RBAC_GROUP;

/// The prefix of every controller role's name (upstream's `saRolePrefix`).
pub const CONTROLLER_ROLE_PREFIX: &str = "system:controller:";

/// The namespace of the controllers' ServiceAccounts.
pub const CONTROLLER_NAMESPACE: &str = "kube-system";

/// `(verbs, apiGroups, resources)` of one PolicyRule.
type Rule = (&'static [&'static str], &'static [&'static str], &'static [&'static str]);

/// One controller's role: its ServiceAccount's name (upstream's
/// `ClientOrDie("<name>")`), upstream's rules and rkube's additions.
#[derive(Debug)]
pub struct ControllerRole {
    /// The ServiceAccount in `kube-system`, and the role's name after
    /// [`CONTROLLER_ROLE_PREFIX`].
    pub name: &'static str,
    /// Upstream's rules (without the events rule every role has).
    pub upstream: &'static [Rule],
    /// What rkube's controller needs beyond them (see the module doc).
    pub extra: &'static [Rule],
    /// Whether the role has upstream's events rule (create, update and
    /// patch of core and events.k8s.io Events).
    pub events: bool,
}

const READ: &[&str] = &["get", "list", "watch"];
const CORE: &[&str] = &[""];
const APPS: &[&str] = &["apps", "extensions"];
const BATCH: &[&str] = &["batch"];

/// The roles of the controllers rkube's controller manager runs, by
/// ServiceAccount name.
pub static CONTROLLER_ROLES: &[ControllerRole] = &[
    ControllerRole {
        name: "replicaset-controller",
        upstream: &[
            (&["get", "list", "watch", "update"], APPS, &["replicasets"]),
            (&["update"], APPS, &["replicasets/status"]),
            (&["update"], APPS, &["replicasets/finalizers"]),
            (&["list", "watch", "patch", "create", "delete"], CORE, &["pods"]),
        ],
        extra: &[(&["patch"], APPS, &["replicasets/status"])],
        events: true,
    },
    ControllerRole {
        name: "replication-controller",
        upstream: &[
            (&["get", "list", "watch", "update"], CORE, &["replicationcontrollers"]),
            (&["update"], CORE, &["replicationcontrollers/status"]),
            (&["update"], CORE, &["replicationcontrollers/finalizers"]),
            (&["list", "watch", "patch", "create", "delete"], CORE, &["pods"]),
        ],
        extra: &[(&["patch"], CORE, &["replicationcontrollers/status"])],
        events: true,
    },
    ControllerRole {
        name: "deployment-controller",
        upstream: &[
            (&["get", "list", "watch", "update"], APPS, &["deployments"]),
            (&["update"], APPS, &["deployments/status"]),
            (&["update"], APPS, &["deployments/finalizers"]),
            (&["get", "list", "watch", "create", "update", "patch", "delete"], APPS, &["replicasets"]),
            (&["get", "list", "watch", "update"], CORE, &["pods"]),
        ],
        extra: &[(&["patch"], APPS, &["deployments", "deployments/status"])],
        events: true,
    },
    ControllerRole {
        name: "generic-garbage-collector",
        upstream: &[(&["get", "list", "watch", "patch", "update", "delete"], &["*"], &["*"])],
        extra: &[],
        events: true,
    },
    ControllerRole {
        name: "namespace-controller",
        upstream: &[
            (&["get", "list", "watch", "delete"], CORE, &["namespaces"]),
            (&["update"], CORE, &["namespaces/finalize", "namespaces/status"]),
            (&["get", "list", "watch", "delete", "deletecollection"], &["*"], &["*"]),
        ],
        extra: &[(&["patch"], CORE, &["namespaces/status"])],
        events: false,
    },
    ControllerRole {
        name: "endpoint-controller",
        upstream: &[
            (READ, CORE, &["services", "pods"]),
            (&["get", "list", "watch", "create", "update", "delete"], CORE, &["endpoints"]),
            (&["create"], CORE, &["endpoints/restricted"]),
        ],
        extra: &[],
        events: true,
    },
    ControllerRole {
        name: "endpointslice-controller",
        upstream: &[
            (READ, CORE, &["services", "pods", "nodes"]),
            (&["update"], CORE, &["services/finalizers"]),
            (&["get", "list", "watch", "create", "update", "delete"], &["discovery.k8s.io"], &["endpointslices"]),
        ],
        extra: &[],
        events: true,
    },
    ControllerRole {
        name: "disruption-controller",
        upstream: &[
            (READ, APPS, &["deployments"]),
            (READ, APPS, &["replicasets"]),
            (READ, CORE, &["replicationcontrollers"]),
            (READ, &["policy"], &["poddisruptionbudgets"]),
            (READ, &["apps"], &["statefulsets"]),
            (&["update"], &["policy"], &["poddisruptionbudgets/status"]),
            (&["patch", "update"], CORE, &["pods/status"]),
            (&["get"], &["*"], &["*/scale"]),
        ],
        extra: &[(READ, CORE, &["pods"]), (&["patch"], &["policy"], &["poddisruptionbudgets/status"])],
        events: true,
    },
    ControllerRole {
        name: "statefulset-controller",
        upstream: &[
            (&["list", "watch"], CORE, &["pods"]),
            (READ, &["apps"], &["statefulsets"]),
            (&["update"], &["apps"], &["statefulsets/status"]),
            (&["update"], &["apps"], &["statefulsets/finalizers"]),
            (&["get", "create", "delete", "update", "patch"], CORE, &["pods"]),
            (&["get", "create", "delete", "update", "patch", "list", "watch"], &["apps"], &["controllerrevisions"]),
            (&["get", "create", "list", "watch"], CORE, &["persistentvolumeclaims"]),
            (&["update", "delete"], CORE, &["persistentvolumeclaims"]),
            (&["update"], CORE, &["pods/finalizers"]),
        ],
        extra: &[(&["patch"], &["apps"], &["statefulsets/status"]), (&["patch"], CORE, &["persistentvolumeclaims"])],
        events: true,
    },
    ControllerRole {
        name: "daemon-set-controller",
        upstream: &[
            (READ, APPS, &["daemonsets"]),
            (&["update"], APPS, &["daemonsets/status"]),
            (&["update"], APPS, &["daemonsets/finalizers"]),
            (&["list", "watch"], CORE, &["nodes"]),
            (&["list", "watch", "create", "delete", "patch"], CORE, &["pods"]),
            (&["create"], CORE, &["pods/binding"]),
            (&["get", "list", "watch", "create", "delete", "update", "patch"], &["apps"], &["controllerrevisions"]),
        ],
        extra: &[(&["patch"], APPS, &["daemonsets/status"])],
        events: true,
    },
    ControllerRole {
        name: "job-controller",
        upstream: &[
            (&["get", "list", "watch", "update", "patch"], BATCH, &["jobs"]),
            (&["update"], BATCH, &["jobs/status"]),
            (&["update"], BATCH, &["jobs/finalizers"]),
            (&["list", "watch", "create", "delete", "patch"], CORE, &["pods"]),
        ],
        extra: &[],
        events: true,
    },
    ControllerRole {
        name: "cronjob-controller",
        upstream: &[
            (&["get", "list", "watch", "update"], BATCH, &["cronjobs"]),
            (&["get", "list", "watch", "create", "update", "delete", "patch"], BATCH, &["jobs"]),
            (&["update"], BATCH, &["cronjobs/status"]),
            (&["update"], BATCH, &["cronjobs/finalizers"]),
            (&["list", "watch", "delete"], CORE, &["pods"]),
        ],
        extra: &[],
        events: true,
    },
    ControllerRole {
        name: "ttl-after-finished-controller",
        upstream: &[(&["get", "list", "watch", "delete"], BATCH, &["jobs"])],
        extra: &[],
        events: true,
    },
    ControllerRole {
        name: "pod-garbage-collector",
        upstream: &[
            (&["list", "watch", "delete"], CORE, &["pods"]),
            (READ, CORE, &["nodes"]),
            (&["patch"], CORE, &["pods/status"]),
        ],
        extra: &[],
        events: false,
    },
    // The node lifecycle and taint eviction controllers share it, as upstream.
    ControllerRole {
        name: "node-controller",
        upstream: &[
            (&["get", "list", "watch", "update", "delete", "patch"], CORE, &["nodes"]),
            (&["patch", "update"], CORE, &["nodes/status"]),
            (&["patch", "update"], CORE, &["pods/status"]),
            (&["list", "watch", "get", "delete"], CORE, &["pods"]),
        ],
        extra: &[(READ, &["coordination.k8s.io"], &["leases"]), (READ, &["apps"], &["daemonsets"])],
        events: true,
    },
    ControllerRole {
        name: "resourcequota-controller",
        upstream: &[(&["list", "watch"], &["*"], &["*"]), (&["update"], CORE, &["resourcequotas/status"])],
        extra: &[],
        events: true,
    },
    ControllerRole {
        name: "persistent-volume-binder",
        upstream: &[
            (&["get", "list", "watch", "update", "create", "delete"], CORE, &["persistentvolumes"]),
            (&["update"], CORE, &["persistentvolumes/status"]),
            (&["get", "list", "watch", "update"], CORE, &["persistentvolumeclaims"]),
            (&["update"], CORE, &["persistentvolumeclaims/status"]),
            (&["list", "watch", "get", "create", "delete"], CORE, &["pods"]),
            (READ, &["storage.k8s.io"], &["storageclasses"]),
            (&["list", "watch"], CORE, &["nodes"]),
            (&["watch"], CORE, &["events"]),
            (&["get"], CORE, &["services"]),
        ],
        extra: &[
            (&["patch"], CORE, &["persistentvolumeclaims", "persistentvolumes/status", "persistentvolumeclaims/status"]),
            (&["get"], CORE, &["nodes"]),
        ],
        events: true,
    },
    ControllerRole {
        name: "pvc-protection-controller",
        upstream: &[(&["get", "list", "watch", "update"], CORE, &["persistentvolumeclaims"]), (&["list", "watch", "get"], CORE, &["pods"])],
        // rkube's volume controllers share one cache of claims, volumes and classes.
        extra: &[(READ, CORE, &["persistentvolumes"]), (READ, &["storage.k8s.io"], &["storageclasses"])],
        events: true,
    },
    ControllerRole {
        name: "pv-protection-controller",
        upstream: &[(&["get", "list", "watch", "update"], CORE, &["persistentvolumes"])],
        extra: &[(READ, CORE, &["persistentvolumeclaims"]), (READ, &["storage.k8s.io"], &["storageclasses"])],
        events: true,
    },
    // Not upstream's: k3s runs local-path-provisioner as an add-on with
    // its own ServiceAccount; these are the rules of its ClusterRole that
    // rkube's provisioner uses.
    ControllerRole {
        name: "local-path-provisioner",
        upstream: &[],
        extra: &[
            (READ, CORE, &["nodes", "persistentvolumeclaims", "pods"]),
            (&["get", "list", "watch", "create", "patch", "update", "delete"], CORE, &["persistentvolumes"]),
            (READ, &["storage.k8s.io"], &["storageclasses"]),
        ],
        events: true,
    },
];

fn rule(r: &Rule) -> Value {
    let (verbs, groups, resources) = r;
    json!({"apiGroups": groups, "resources": resources, "verbs": verbs})
}

/// Upstream's `eventsRule()`.
fn events_rule() -> Value {
    json!({"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "update", "patch"]})
}

impl ControllerRole {
    /// The ClusterRole `system:controller:<name>` and the ClusterRoleBinding
    /// of the same name to ServiceAccount `kube-system/<name>`, labelled
    /// and annotated as upstream's bootstrap policy
    /// (`kubernetes.io/bootstrapping: rbac-defaults`,
    /// `rbac.authorization.kubernetes.io/autoupdate: "true"`).
    pub fn objects(&self) -> [Value; 2] {
        let name = format!("{CONTROLLER_ROLE_PREFIX}{}", self.name);
        let metadata = json!({"name": name, "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
                              "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"}});
        let mut rules: Vec<Value> = self.upstream.iter().map(rule).collect();
        if self.events {
            rules.push(events_rule());
        }
        rules.extend(self.extra.iter().map(rule));
        let role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": metadata, "rules": rules});
        let binding = json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": metadata,
            "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": self.name, "namespace": CONTROLLER_NAMESPACE}],
        });
        [role, binding]
    }
}

/// Every controller role and binding, for the bootstrap policy.
pub fn controller_policy() -> Vec<Value> {
    CONTROLLER_ROLES.iter().flat_map(ControllerRole::objects).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filters::authn::UserInfo;
    use crate::filters::rbac::{authorize, bootstrap_policy, InMemoryRbac, RbacDecision};
    use crate::filters::requestinfo::RequestAttributes;
    use axum::http::{HeaderMap, Method};

    fn sa(name: &str) -> UserInfo {
        UserInfo {
            username: format!("system:serviceaccount:kube-system:{name}"),
            groups: vec!["system:serviceaccounts".into(), "system:serviceaccounts:kube-system".into(), "system:authenticated".into()],
            ..Default::default()
        }
    }

    async fn allowed(rbac: &InMemoryRbac, who: &UserInfo, method: Method, uri: &str) -> bool {
        let a = RequestAttributes::new(&method, &uri.parse().unwrap(), &HeaderMap::new());
        matches!(authorize(rbac, who, &a).await, RbacDecision::Allow(_))
    }

    #[test]
    fn every_controller_role_is_bound_to_its_service_account_in_kube_system() {
        let policy = controller_policy();
        assert_eq!(policy.len(), 2 * CONTROLLER_ROLES.len());
        let names: std::collections::BTreeSet<&str> = CONTROLLER_ROLES.iter().map(|r| r.name).collect();
        assert_eq!(names.len(), CONTROLLER_ROLES.len(), "one role per ServiceAccount");
        let binding = &CONTROLLER_ROLES[0].objects()[1];
        assert_eq!(binding["metadata"]["name"], "system:controller:replicaset-controller");
        assert_eq!(binding["roleRef"]["name"], "system:controller:replicaset-controller");
        assert_eq!(binding["subjects"][0], json!({"kind": "ServiceAccount", "name": "replicaset-controller", "namespace": "kube-system"}));
    }

    #[tokio::test]
    async fn a_controller_may_write_what_it_manages_and_nothing_else() {
        let rbac = InMemoryRbac::new();
        rbac.add_objects(&bootstrap_policy()).unwrap();
        let deployments = sa("deployment-controller");
        for (m, uri) in [
            (Method::POST, "/apis/apps/v1/namespaces/dev/replicasets"),
            (Method::PATCH, "/apis/apps/v1/namespaces/dev/deployments/web/status"),
            (Method::GET, "/apis/apps/v1/replicasets?watch=true"),
            (Method::POST, "/apis/events.k8s.io/v1/namespaces/dev/events"),
        ] {
            assert!(allowed(&rbac, &deployments, m.clone(), uri).await, "{m} {uri}");
        }
        for (m, uri) in [
            (Method::POST, "/api/v1/namespaces/dev/secrets"),
            (Method::GET, "/api/v1/namespaces/dev/secrets"),
            (Method::POST, "/api/v1/namespaces/dev/pods"),
            (Method::POST, "/apis/batch/v1/namespaces/dev/jobs"),
        ] {
            assert!(!allowed(&rbac, &deployments, m.clone(), uri).await, "{m} {uri}");
        }
        let gc = sa("generic-garbage-collector");
        assert!(allowed(&rbac, &gc, Method::DELETE, "/apis/apps/v1/namespaces/dev/deployments/web").await);
        assert!(!allowed(&rbac, &gc, Method::POST, "/api/v1/namespaces/dev/configmaps").await);
        let ns = sa("namespace-controller");
        assert!(allowed(&rbac, &ns, Method::PUT, "/api/v1/namespaces/dev/finalize").await);
        assert!(allowed(&rbac, &ns, Method::DELETE, "/api/v1/namespaces/dev/secrets?labelSelector=x").await);
        let nodes = sa("node-controller");
        assert!(allowed(&rbac, &nodes, Method::GET, "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases").await);
        assert!(!allowed(&rbac, &nodes, Method::PUT, "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1").await);
        // The ServiceAccount of another namespace gets nothing.
        let other = UserInfo { username: "system:serviceaccount:dev:deployment-controller".into(), ..sa("x") };
        assert!(!allowed(&rbac, &other, Method::POST, "/apis/apps/v1/namespaces/dev/replicasets").await);
    }

    #[tokio::test]
    async fn bootstrap_roles_of_an_older_data_dir_get_the_rules_they_lack_unless_opted_out() {
        use crate::filters::rbac::{ensure_bootstrap_policy, KUBE_CONTROLLER_MANAGER};
        use rkube_storage::Storage;
        let dir = tempfile::tempdir().unwrap();
        let storage = rkube_storage::embedded::EmbeddedStorage::open(dir.path()).unwrap();
        let old_rule = json!({"apiGroups": ["*"], "resources": ["*"], "verbs": ["get", "list", "watch"]});
        let older = |name: &str, annotations: Value| {
            json!({"kind": "ClusterRole", "metadata": {"name": name, "annotations": annotations}, "rules": [old_rule]})
        };
        let kcm = format!("/registry/clusterroles/{KUBE_CONTROLLER_MANAGER}");
        let kept = "/registry/clusterroles/system:controller:job-controller";
        storage.create(&kcm, serde_json::to_vec(&older(KUBE_CONTROLLER_MANAGER, json!({}))).unwrap().into()).await.unwrap();
        let opted_out = older("system:controller:job-controller", json!({"rbac.authorization.kubernetes.io/autoupdate": "false"}));
        storage.create(kept, serde_json::to_vec(&opted_out).unwrap().into()).await.unwrap();
        ensure_bootstrap_policy(&storage, "/registry").await.unwrap();
        let read = |v: Option<rkube_storage::KeyValue>| serde_json::from_slice::<Value>(&v.unwrap().value).unwrap();
        let role = read(storage.get(&kcm).await.unwrap());
        let rules = role["rules"].as_array().unwrap();
        assert_eq!(rules[0], old_rule, "stored rules stay first");
        assert!(
            rules.contains(&json!({"apiGroups": [""], "resources": ["serviceaccounts", "serviceaccounts/token"], "verbs": ["create"]})),
            "{rules:?}"
        );
        assert_eq!(read(storage.get(kept).await.unwrap())["rules"], json!([old_rule]));
        let before = storage.get(&kcm).await.unwrap().unwrap().mod_revision;
        ensure_bootstrap_policy(&storage, "/registry").await.unwrap();
        assert_eq!(storage.get(&kcm).await.unwrap().unwrap().mod_revision, before, "nothing left to add");
    }
}
