//! The RBAC rules that apply to a user in a namespace (upstream
//! `DefaultRuleResolver.RulesFor` in `pkg/registry/rbac/validation/rule.go`),
//! what a SelfSubjectRulesReview lists.
//!
//! Visit order is upstream's: the rules of every ClusterRoleBinding whose
//! subjects name the user (in binding order, each role's rules in order),
//! then, when `namespace` is not empty, those of the namespace's
//! RoleBindings. A binding whose role cannot be read contributes an error
//! (`clusterrole.rbac.authorization.k8s.io "x" not found`) instead of rules;
//! the other bindings are still visited. Rules come back as stored: no
//! de-duplication or merging (upstream does none either).

use crate::filters::authn::UserInfo;
use crate::filters::rbac::{subject_applies, Binding, PolicyRule, RbacSource, RBAC_GROUP};

/// The rules of the roles bound to `user` (cluster-wide, then in
/// `namespace`), and the errors met (listing bindings, reading roles).
pub async fn rules_for(src: &dyn RbacSource, user: &UserInfo, namespace: &str) -> (Vec<PolicyRule>, Vec<String>) {
    let mut rules = Vec::new();
    let mut errors = Vec::new();
    match src.cluster_role_bindings().await {
        Err(e) => errors.push(e.to_string()),
        Ok(bindings) => visit(src, user, &bindings, "", &mut rules, &mut errors).await,
    }
    if !namespace.is_empty() {
        match src.role_bindings(namespace).await {
            Err(e) => errors.push(e.to_string()),
            Ok(bindings) => visit(src, user, &bindings, namespace, &mut rules, &mut errors).await,
        }
    }
    (rules, errors)
}

/// Appends the rules of every binding in `bindings` (of `binding_ns`, `""`
/// for ClusterRoleBindings) that names `user`.
async fn visit(
    src: &dyn RbacSource,
    user: &UserInfo,
    bindings: &[Binding],
    binding_ns: &str,
    rules: &mut Vec<PolicyRule>,
    errors: &mut Vec<String>,
) {
    for b in bindings.iter().filter(|b| b.subjects.iter().any(|s| subject_applies(s, user, binding_ns))) {
        let role = match b.role_ref.kind.as_str() {
            "ClusterRole" => src.cluster_role(&b.role_ref.name).await,
            "Role" if !binding_ns.is_empty() => src.role(binding_ns, &b.role_ref.name).await,
            other => {
                errors.push(format!("unsupported role reference kind: {other:?}"));
                continue;
            }
        };
        match role {
            Ok(Some(role)) => rules.extend(role.rules),
            Ok(None) => errors.push(format!(
                "{}.{RBAC_GROUP} {:?} not found",
                b.role_ref.kind.to_ascii_lowercase(),
                b.role_ref.name
            )),
            Err(e) => errors.push(e.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filters::rbac::{bootstrap_policy, InMemoryRbac};
    use serde_json::json;

    fn user(name: &str, groups: &[&str]) -> UserInfo {
        UserInfo { username: name.into(), groups: groups.iter().map(|g| g.to_string()).collect(), ..Default::default() }
    }

    fn fixture() -> InMemoryRbac {
        let rbac = InMemoryRbac::new();
        rbac.add_objects(&bootstrap_policy()).unwrap();
        rbac.add_objects(&[
            json!({"kind": "Role", "metadata": {"name": "pod-reader", "namespace": "dev"},
                   "rules": [{"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods"], "resourceNames": ["web"]}]}),
            json!({"kind": "RoleBinding", "metadata": {"name": "alice-reads", "namespace": "dev"},
                   "subjects": [{"kind": "User", "name": "alice", "apiGroup": RBAC_GROUP}],
                   "roleRef": {"kind": "Role", "name": "pod-reader", "apiGroup": RBAC_GROUP}}),
            json!({"kind": "RoleBinding", "metadata": {"name": "dangling", "namespace": "prod"},
                   "subjects": [{"kind": "User", "name": "alice", "apiGroup": RBAC_GROUP}],
                   "roleRef": {"kind": "ClusterRole", "name": "missing", "apiGroup": RBAC_GROUP}}),
        ])
        .unwrap();
        rbac
    }

    #[tokio::test]
    async fn cluster_bindings_come_first_then_the_namespace_s_role_bindings() {
        let rbac = fixture();
        let (rules, errors) = rules_for(&rbac, &user("alice", &["system:authenticated"]), "dev").await;
        assert!(errors.is_empty(), "{errors:?}");
        // system:discovery, system:basic-user (2 rules), system:public-info-viewer, then pod-reader.
        let verbs: Vec<Vec<String>> = rules.iter().map(|r| r.verbs.clone()).collect();
        assert_eq!(verbs.len(), 5, "{rules:?}");
        assert_eq!(rules[1].resources, vec!["selfsubjectaccessreviews", "selfsubjectrulesreviews"]);
        assert_eq!(rules[2].resources, vec!["selfsubjectreviews"]);
        assert_eq!(rules[4].resource_names, vec!["web"]);
        assert_eq!(rules[4].verbs, vec!["get", "list"]);
    }

    #[tokio::test]
    async fn role_bindings_of_other_namespaces_do_not_apply() {
        let rbac = fixture();
        let (in_default, _) = rules_for(&rbac, &user("alice", &["system:authenticated"]), "default").await;
        assert_eq!(in_default.len(), 4);
        let (cluster_only, _) = rules_for(&rbac, &user("alice", &["system:authenticated"]), "").await;
        assert_eq!(cluster_only, in_default);
    }

    #[tokio::test]
    async fn unreadable_roles_are_errors_and_other_rules_still_count() {
        let rbac = fixture();
        let (rules, errors) = rules_for(&rbac, &user("alice", &["system:authenticated"]), "prod").await;
        assert_eq!(errors, vec!["clusterrole.rbac.authorization.k8s.io \"missing\" not found"]);
        assert_eq!(rules.len(), 4);
    }

    #[tokio::test]
    async fn masters_get_cluster_admin_s_wildcards_through_their_binding() {
        let rbac = fixture();
        let (rules, errors) = rules_for(&rbac, &user("root", &["system:masters", "system:authenticated"]), "dev").await;
        assert!(errors.is_empty());
        assert_eq!(rules[0], serde_json::from_value(json!({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]})).unwrap());
        assert_eq!(rules[1], serde_json::from_value(json!({"verbs": ["*"], "nonResourceURLs": ["*"]})).unwrap());
    }
}
