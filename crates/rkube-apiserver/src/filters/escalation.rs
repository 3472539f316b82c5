//! RBAC escalation prevention (upstream `pkg/registry/rbac/validation`
//! `ConfirmNoEscalation`, and the policy-based role and binding storages of
//! `pkg/registry/rbac/{role,clusterrole,rolebinding,clusterrolebinding}/policybased`).
//!
//! Creating or updating (PUT, PATCH, apply) a Role or ClusterRole is allowed
//! when the requester
//!
//! - is in `system:masters`, or
//! - is authorized for verb `escalate` on that role, or
//! - already holds every permission the role grants (in the role's
//!   namespace, or cluster-wide for a ClusterRole); a ClusterRole with an
//!   `aggregationRule` additionally needs `*` on everything
//!   (`must have cluster-admin privileges to use the aggregationRule`).
//!
//! Creating or updating a RoleBinding or ClusterRoleBinding is allowed when
//! the requester is in `system:masters`, is authorized for verb `bind` on
//! the referenced role (`roles` or `clusterroles`, by name, in the binding's
//! namespace), or holds every permission of the referenced role (404 when
//! that role does not exist).
//!
//! Otherwise the answer is 403 `Forbidden`:
//! `clusterroles.rbac.authorization.k8s.io "x" is forbidden: user "alice" (groups=["dev" "system:authenticated"]) is attempting to grant RBAC permissions not currently held:`
//! followed by one line per missing permission in upstream's compact form
//! (`{APIGroups:[""], Resources:["secrets"], Verbs:["get"]}`).
//!
//! Wiring: [`escalation_middleware`] (innermost filter, after authorization)
//! makes the requester, the authorizer and the RBAC objects available to the
//! request's task; the create and update handlers call [`confirm`] with the
//! object about to be stored. Without RBAC (no source) nothing is checked.
//! After a successful RBAC write (create, update, patch, delete,
//! deletecollection) it waits for the source to see it
//! ([`RbacSource::wait_fresh`]), so a client's next request is authorized
//! with the change applied.

use std::collections::BTreeSet;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use rkube_api::field_error::go_quote;
use rkube_api::status::{Status, StatusDetails};
use serde_json::Value;

use crate::error::ApiError;
use crate::filters::authn::UserInfo;
use crate::filters::authz::{Authorizer, Decision};
use crate::filters::rbac::{
    has, resource_matches, url_matches, PolicyRule, RbacSource, RoleRef, RBAC_GROUP,
};
use crate::filters::requestinfo::{context_of, RequestAttributes};

/// Errors of escalation checks.
#[derive(Debug, thiserror::Error)]
pub enum EscalationError {
    /// The object being written is not a valid RBAC object.
    #[error("decoding {kind}: {message}")]
    Decode {
        /// The kind.
        kind: String,
        /// The decoder's message.
        message: String,
    },
}

/// Who is writing, and how to check it; present in the task of RBAC writes.
#[derive(Clone)]
struct Guard {
    user: UserInfo,
    authz: Arc<Authorizer>,
    rbac: Arc<dyn RbacSource>,
}

tokio::task_local! {
    static GUARD: Guard;
}

/// State of [`escalation_middleware`].
#[derive(Clone)]
pub struct EscalationState {
    /// The request authorizer (asked for `escalate` and `bind`).
    pub authz: Arc<Authorizer>,
    /// Where the requester's roles are read; `None` disables the checks.
    pub rbac: Option<Arc<dyn RbacSource>>,
}

/// Makes the requester available to [`confirm`] for writes of RBAC objects.
pub async fn escalation_middleware(State(st): State<EscalationState>, req: Request, next: Next) -> Response {
    let ctx = context_of(&req);
    let a = &ctx.attrs;
    let on_rbac = a.is_resource_request
        && a.api_group == RBAC_GROUP
        && matches!(a.resource.as_str(), "roles" | "clusterroles" | "rolebindings" | "clusterrolebindings");
    let writes_rbac = on_rbac && matches!(a.verb.as_str(), "create" | "update" | "patch");
    let changes_rbac = on_rbac && matches!(a.verb.as_str(), "create" | "update" | "patch" | "delete" | "deletecollection");
    let Some(rbac) = &st.rbac else { return next.run(req).await };
    let resp = if writes_rbac {
        let user = req.extensions().get::<UserInfo>().cloned().unwrap_or_else(UserInfo::anonymous);
        let guard = Guard { user, authz: st.authz.clone(), rbac: rbac.clone() };
        GUARD.scope(guard, next.run(req)).await
    } else {
        next.run(req).await
    };
    // Read-your-writes: the writer's next request sees the change.
    if changes_rbac && resp.status().is_success() {
        rbac.wait_fresh().await;
    }
    resp
}

#[derive(serde::Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct RbacObject {
    #[serde(default)]
    metadata: crate::filters::rbac::Meta,
    #[serde(default)]
    rules: Vec<PolicyRule>,
    #[serde(default)]
    aggregation_rule: Option<Value>,
    #[serde(default)]
    role_ref: Option<RoleRef>,
}

fn has_aggregation(o: &RbacObject) -> bool {
    o.aggregation_rule
        .as_ref()
        .and_then(|a| a.get("clusterRoleSelectors"))
        .and_then(Value::as_array)
        .is_some_and(|s| !s.is_empty())
}

fn forbidden_status(resource: &str, name: &str, message: &str) -> ApiError {
    ApiError::from(
        Status::new(403, "Forbidden", format!("{resource}.{RBAC_GROUP} {} is forbidden: {message}", go_quote(name)))
            .with_details(StatusDetails {
                name: name.to_string(),
                group: RBAC_GROUP.to_string(),
                kind: resource.to_string(),
                ..StatusDetails::default()
            }),
    )
}

/// Checks that writing `obj` (of API group `group`, kind `kind`) does not
/// escalate the requester's privileges (see the module docs). `old` is the
/// stored object for updates. `Ok` for other kinds and outside an RBAC write.
pub async fn confirm(group: &str, kind: &str, obj: &Value, old: Option<&Value>) -> Result<(), ApiError> {
    if group != RBAC_GROUP {
        return Ok(());
    }
    let Ok(guard) = GUARD.try_with(Guard::clone) else { return Ok(()) };
    if guard.user.is_master() {
        return Ok(());
    }
    let decode = |v: &Value| {
        serde_json::from_value::<RbacObject>(v.clone())
            .map_err(|e| ApiError::bad_request(EscalationError::Decode { kind: kind.into(), message: e.to_string() }.to_string()))
    };
    let o = decode(obj)?;
    let ns = o.metadata.namespace.clone();
    let name = o.metadata.name.clone();
    let resource = match kind {
        "Role" => "roles",
        "ClusterRole" => "clusterroles",
        "RoleBinding" => "rolebindings",
        "ClusterRoleBinding" => "clusterrolebindings",
        _ => return Ok(()),
    };
    match kind {
        "Role" | "ClusterRole" => {
            if guard.allowed("escalate", resource, &ns, &name).await {
                return Ok(());
            }
            guard.confirm_no_escalation(&ns, &o.rules).await.map_err(|m| forbidden_status(resource, &name, &m))?;
            let old_aggregation = match old {
                Some(v) => {
                    let old = decode(v)?;
                    has_aggregation(&old) && old.aggregation_rule == o.aggregation_rule
                }
                None => false,
            };
            if kind == "ClusterRole" && has_aggregation(&o) && !old_aggregation {
                let full: Vec<PolicyRule> = vec![
                    PolicyRule { verbs: vec!["*".into()], api_groups: vec!["*".into()], resources: vec!["*".into()], ..Default::default() },
                    PolicyRule { verbs: vec!["*".into()], non_resource_urls: vec!["*".into()], ..Default::default() },
                ];
                if guard.confirm_no_escalation("", &full).await.is_err() {
                    return Err(forbidden_status(resource, &name, "must have cluster-admin privileges to use the aggregationRule"));
                }
            }
            Ok(())
        }
        _ => {
            let Some(role_ref) = o.role_ref else { return Ok(()) };
            let ref_resource = match role_ref.kind.as_str() {
                "Role" => "roles",
                "ClusterRole" => "clusterroles",
                _ => return Ok(()), // validation rejects other kinds
            };
            if guard.allowed("bind", ref_resource, &ns, &role_ref.name).await {
                return Ok(());
            }
            let role = match ref_resource {
                "roles" => guard.rbac.role_shared(&ns, &role_ref.name).await,
                _ => guard.rbac.cluster_role_shared(&role_ref.name).await,
            };
            let role = match role {
                Ok(Some(r)) => r,
                Ok(None) => {
                    let msg = format!("{ref_resource}.{RBAC_GROUP} {} not found", go_quote(&role_ref.name));
                    return Err(ApiError::from(Status::new(404, "NotFound", msg).with_details(StatusDetails {
                        name: role_ref.name.clone(),
                        group: RBAC_GROUP.into(),
                        kind: ref_resource.into(),
                        ..StatusDetails::default()
                    })));
                }
                Err(e) => return Err(ApiError::from(Status::new(500, "InternalError", e.to_string()))),
            };
            guard.confirm_no_escalation(&ns, &role.rules).await.map_err(|m| forbidden_status(resource, &name, &m))
        }
    }
}

impl Guard {
    /// Whether the authorizer allows `verb` on the RBAC `resource` `name`.
    async fn allowed(&self, verb: &str, resource: &str, ns: &str, name: &str) -> bool {
        let a = RequestAttributes {
            is_resource_request: true,
            verb: verb.into(),
            api_group: RBAC_GROUP.into(),
            api_version: "v1".into(),
            namespace: ns.into(),
            resource: resource.into(),
            name: name.into(),
            ..Default::default()
        };
        matches!(self.authz.authorize(&self.user, &a).await, Decision::Allow(_))
    }

    /// Every rule the user holds in `ns` (cluster-wide only for `""`), and the
    /// errors met resolving them (upstream `RulesFor`).
    async fn rules_for(&self, ns: &str) -> (Vec<PolicyRule>, Vec<String>) {
        let mut rules = Vec::new();
        let mut errors = Vec::new();
        match self.rbac.cluster_role_bindings_for(&self.user).await {
            Err(e) => errors.push(e.to_string()),
            Ok(bindings) => {
                for b in &bindings {
                    match self.rbac.cluster_role_shared(&b.role_ref.name).await {
                        Ok(Some(r)) => rules.extend(r.rules.iter().cloned()),
                        Ok(None) => errors.push(format!("clusterrole.{RBAC_GROUP} {:?} not found", b.role_ref.name)),
                        Err(e) => errors.push(e.to_string()),
                    }
                }
            }
        }
        if !ns.is_empty() {
            match self.rbac.role_bindings_for(ns, &self.user).await {
                Err(e) => errors.push(e.to_string()),
                Ok(bindings) => {
                    for b in &bindings {
                        let role = match b.role_ref.kind.as_str() {
                            "Role" => self.rbac.role_shared(ns, &b.role_ref.name).await,
                            _ => self.rbac.cluster_role_shared(&b.role_ref.name).await,
                        };
                        match role {
                            Ok(Some(r)) => rules.extend(r.rules.iter().cloned()),
                            Ok(None) => errors.push(format!(
                                "{}.{RBAC_GROUP} {:?} not found",
                                b.role_ref.kind.to_ascii_lowercase(),
                                b.role_ref.name
                            )),
                            Err(e) => errors.push(e.to_string()),
                        }
                    }
                }
            }
        }
        (rules, errors)
    }

    /// `Err(message)` when `wanted` holds a permission the user lacks in `ns`.
    async fn confirm_no_escalation(&self, ns: &str, wanted: &[PolicyRule]) -> Result<(), String> {
        let (owned, errors) = self.rules_for(ns).await;
        let missing = uncovered(&owned, wanted);
        if missing.is_empty() {
            return Ok(());
        }
        let groups: Vec<String> = self.user.groups.iter().map(|g| go_quote(g)).collect();
        let mut msg = format!(
            "user {} (groups=[{}]) is attempting to grant RBAC permissions not currently held:\n{}",
            go_quote(&self.user.username),
            groups.join(" "),
            missing.into_iter().collect::<Vec<_>>().join("\n")
        );
        if !errors.is_empty() {
            msg.push_str(&format!("; resolution errors: [{}]", errors.join(" ")));
        }
        Err(msg)
    }
}

/// Splits `rule` into rules of one verb, group, resource and name (or one
/// verb and URL), upstream `BreakdownRule`.
pub fn breakdown(rule: &PolicyRule) -> Vec<PolicyRule> {
    let mut out = Vec::new();
    let one = |s: &String| vec![s.clone()];
    for verb in &rule.verbs {
        for group in &rule.api_groups {
            for resource in &rule.resources {
                if rule.resource_names.is_empty() {
                    out.push(PolicyRule { verbs: one(verb), api_groups: one(group), resources: one(resource), ..Default::default() });
                }
                for name in &rule.resource_names {
                    out.push(PolicyRule {
                        verbs: one(verb),
                        api_groups: one(group),
                        resources: one(resource),
                        resource_names: one(name),
                        ..Default::default()
                    });
                }
            }
        }
        for url in &rule.non_resource_urls {
            out.push(PolicyRule { verbs: one(verb), non_resource_urls: one(url), ..Default::default() });
        }
    }
    out
}

/// Whether `owner` grants the atomic rule `s` (upstream `ruleCovers`), with
/// the matching of [`crate::filters::rbac::rule_allows`].
fn covers(owner: &PolicyRule, s: &PolicyRule) -> bool {
    let (Some(verb), true) = (s.verbs.first(), s.verbs.len() == 1) else { return false };
    if !has(&owner.verbs, verb) {
        return false;
    }
    if let Some(url) = s.non_resource_urls.first() {
        return url_matches(&owner.non_resource_urls, url);
    }
    let (Some(group), Some(resource)) = (s.api_groups.first(), s.resources.first()) else { return false };
    let sub = resource.split_once('/').map(|(_, sub)| sub);
    let resource_ok = resource_matches(&owner.resources, resource, sub);
    let name_ok = owner.resource_names.is_empty()
        || s.resource_names.first().is_some_and(|n| owner.resource_names.contains(n));
    has(&owner.api_groups, group) && resource_ok && name_ok
}

/// The permissions of `wanted` no rule of `owned` grants, in upstream's
/// compact form, sorted (empty: `owned` covers `wanted`).
pub fn uncovered(owned: &[PolicyRule], wanted: &[PolicyRule]) -> BTreeSet<String> {
    wanted
        .iter()
        .flat_map(breakdown)
        .filter(|s| !owned.iter().any(|o| covers(o, s)))
        .map(|s| compact(&s))
        .collect()
}

/// Upstream's `CompactString` of a rule: `{APIGroups:[""], Resources:["pods"], Verbs:["get"]}`.
pub fn compact(r: &PolicyRule) -> String {
    let list = |v: &[String]| format!("[{}]", v.iter().map(|s| go_quote(s)).collect::<Vec<_>>().join(" "));
    let mut parts = Vec::new();
    for (label, v) in [
        ("APIGroups", &r.api_groups),
        ("Resources", &r.resources),
        ("NonResourceURLs", &r.non_resource_urls),
        ("ResourceNames", &r.resource_names),
        ("Verbs", &r.verbs),
    ] {
        if !v.is_empty() {
            parts.push(format!("{label}:{}", list(v)));
        }
    }
    format!("{{{}}}", parts.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rule(v: Value) -> PolicyRule {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn owned_rules_cover_subsets_and_report_the_rest() {
        let owned = vec![
            rule(json!({"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods", "*/status"]})),
            rule(json!({"verbs": ["get"], "nonResourceURLs": ["/healthz*"]})),
            rule(json!({"verbs": ["update"], "apiGroups": ["apps"], "resources": ["deployments"], "resourceNames": ["web"]})),
        ];
        let ok = vec![
            rule(json!({"verbs": ["get"], "apiGroups": [""], "resources": ["pods", "services/status"]})),
            rule(json!({"verbs": ["get"], "nonResourceURLs": ["/healthz/ping"]})),
            rule(json!({"verbs": ["update"], "apiGroups": ["apps"], "resources": ["deployments"], "resourceNames": ["web"]})),
        ];
        assert!(uncovered(&owned, &ok).is_empty());
        let bad = vec![
            rule(json!({"verbs": ["get", "delete"], "apiGroups": [""], "resources": ["pods"]})),
            rule(json!({"verbs": ["update"], "apiGroups": ["apps"], "resources": ["deployments"]})),
            rule(json!({"verbs": ["*"], "apiGroups": [""], "resources": ["pods"]})),
        ];
        let missing: Vec<String> = uncovered(&owned, &bad).into_iter().collect();
        assert_eq!(
            missing,
            vec![
                "{APIGroups:[\"\"], Resources:[\"pods\"], Verbs:[\"*\"]}",
                "{APIGroups:[\"\"], Resources:[\"pods\"], Verbs:[\"delete\"]}",
                "{APIGroups:[\"apps\"], Resources:[\"deployments\"], Verbs:[\"update\"]}",
            ]
        );
    }

    #[test]
    fn compact_form_matches_upstream() {
        let r = rule(json!({"verbs": ["get"], "apiGroups": [""], "resources": ["secrets"], "resourceNames": ["s1"]}));
        assert_eq!(compact(&r), "{APIGroups:[\"\"], Resources:[\"secrets\"], ResourceNames:[\"s1\"], Verbs:[\"get\"]}");
        let r = rule(json!({"verbs": ["get", "post"], "nonResourceURLs": ["/x"]}));
        assert_eq!(compact(&r), "{NonResourceURLs:[\"/x\"], Verbs:[\"get\" \"post\"]}");
    }

    #[tokio::test]
    async fn outside_an_rbac_write_nothing_is_checked() {
        let obj = json!({"kind": "ClusterRole", "metadata": {"name": "x"}, "rules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}]});
        assert!(confirm(RBAC_GROUP, "ClusterRole", &obj, None).await.is_ok());
    }
}
