//! Authorization: may this user do this request (upstream
//! `staging/src/k8s.io/apiserver/pkg/endpoints/filters/authorization.go`,
//! `pkg/kubeapiserver/authorizer/config.go`).
//!
//! `--authorization-mode` is a comma-separated list of `AlwaysAllow`,
//! `AlwaysDeny` and `RBAC` (upstream default `AlwaysAllow`), asked in order;
//! the first mode with an opinion decides. Members of `system:masters` are
//! allowed before any mode is asked (upstream's privileged-groups authorizer).
//!
//! A denial is 403 `Forbidden` with upstream's message, e.g.
//! `pods is forbidden: User "alice" cannot list resource "pods" in API group "" in the namespace "default"`,
//! `... at the cluster scope` for cluster-wide requests, `pods "web" is forbidden: ...`
//! for one object, `forbidden: User "bob" cannot get path "/metrics"` for
//! non-resource paths, with `: RBAC: <errors>` appended when RBAC could not
//! read a role. Decisions are recorded as the audit annotations
//! `authorization.k8s.io/decision` and `authorization.k8s.io/reason`.

use std::str::FromStr;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rkube_api::field_error::go_quote;
use rkube_api::status::{Status, StatusDetails};

use crate::error::ApiError;
use crate::filters::audit::AuditAnnotations;
use crate::filters::authn::UserInfo;
use crate::filters::rbac::{self, RbacDecision, RbacSource};
use crate::filters::requestinfo::{context_of, RequestAttributes};

/// Errors configuring authorization.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AuthzError {
    /// A mode rkube does not implement (`Node`, `ABAC`, `Webhook`) or a typo.
    #[error("authorization mode {0:?} is not supported: use AlwaysAllow, AlwaysDeny or RBAC")]
    UnknownMode(String),
    /// `RBAC` without a source of RBAC objects.
    #[error("--authorization-mode=RBAC needs a source of RBAC objects")]
    NoRbacSource,
}

/// One `--authorization-mode` entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthorizationMode {
    /// Allow everything.
    AlwaysAllow,
    /// Deny everything.
    AlwaysDeny,
    /// Role-based access control over rbac.authorization.k8s.io/v1 objects.
    Rbac,
}

impl FromStr for AuthorizationMode {
    type Err = AuthzError;

    fn from_str(s: &str) -> Result<Self, AuthzError> {
        match s.trim() {
            "AlwaysAllow" => Ok(AuthorizationMode::AlwaysAllow),
            "AlwaysDeny" => Ok(AuthorizationMode::AlwaysDeny),
            "RBAC" => Ok(AuthorizationMode::Rbac),
            other => Err(AuthzError::UnknownMode(other.to_string())),
        }
    }
}

/// An authorization decision and its reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Allowed.
    Allow(String),
    /// Denied (by `AlwaysDeny`, or no mode allowed it).
    Deny(String),
}

/// The authorizer chain.
pub struct Authorizer {
    modes: Vec<AuthorizationMode>,
    rbac: Option<Arc<dyn RbacSource>>,
}

impl std::fmt::Debug for Authorizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authorizer").field("modes", &self.modes).finish_non_exhaustive()
    }
}

impl Authorizer {
    /// An authorizer asking `modes` in order; `rbac` is required when RBAC is one of them.
    pub fn new(modes: Vec<AuthorizationMode>, rbac: Option<Arc<dyn RbacSource>>) -> Result<Self, AuthzError> {
        if modes.contains(&AuthorizationMode::Rbac) && rbac.is_none() {
            return Err(AuthzError::NoRbacSource);
        }
        Ok(Authorizer { modes, rbac })
    }

    /// An authorizer that allows everything.
    pub fn always_allow() -> Self {
        Authorizer { modes: vec![AuthorizationMode::AlwaysAllow], rbac: None }
    }

    /// Decides whether `user` may do `a`: a request nothing allows is denied.
    pub async fn authorize(&self, user: &UserInfo, a: &RequestAttributes) -> Decision {
        match self.review(user, a).await {
            (ReviewDecision::Allow, reason) => Decision::Allow(reason),
            (ReviewDecision::Deny | ReviewDecision::NoOpinion, reason) => Decision::Deny(reason),
        }
    }

    /// The chain's decision with upstream's three outcomes (union
    /// authorizer): `Allow` or `Deny` from the first mode with an opinion,
    /// else `NoOpinion` with every mode's reason (`; `-joined). What a
    /// SubjectAccessReview reports as `allowed` / `denied` / `reason`.
    pub async fn review(&self, user: &UserInfo, a: &RequestAttributes) -> (ReviewDecision, String) {
        if user.is_master() {
            return (ReviewDecision::Allow, String::new());
        }
        let mut reasons: Vec<String> = Vec::new();
        for mode in &self.modes {
            match mode {
                AuthorizationMode::AlwaysAllow => return (ReviewDecision::Allow, String::new()),
                AuthorizationMode::AlwaysDeny => return (ReviewDecision::Deny, "Everything is forbidden.".into()),
                AuthorizationMode::Rbac => {
                    let Some(src) = &self.rbac else { continue };
                    match rbac::authorize(src.as_ref(), user, a).await {
                        RbacDecision::Allow(reason) => return (ReviewDecision::Allow, reason),
                        RbacDecision::NoOpinion(reason) if !reason.is_empty() => reasons.push(reason),
                        RbacDecision::NoOpinion(_) => {}
                    }
                }
            }
        }
        (ReviewDecision::NoOpinion, reasons.join("; "))
    }

    /// The rules that let `user` act in `namespace`, from every mode that
    /// resolves rules (upstream's union `RuleResolver`, what a
    /// SelfSubjectRulesReview reports): `AlwaysAllow` gives `*` on every
    /// resource and non-resource URL, `AlwaysDeny` nothing, RBAC the rules of
    /// the roles bound to the user ([`crate::filters::rbac_rules`]). As
    /// upstream, `system:masters` adds no rules of its own (its authorizer is
    /// not a rule resolver): masters see what RBAC's `cluster-admin` binding gives.
    pub async fn rules_for(&self, user: &UserInfo, namespace: &str) -> UserRules {
        let mut out = UserRules::default();
        for mode in &self.modes {
            match mode {
                AuthorizationMode::AlwaysAllow => {
                    let all = vec!["*".to_string()];
                    out.resource_rules.push(rbac::PolicyRule {
                        verbs: all.clone(),
                        api_groups: all.clone(),
                        resources: all.clone(),
                        ..Default::default()
                    });
                    out.non_resource_rules.push(rbac::PolicyRule {
                        verbs: all.clone(),
                        non_resource_urls: all,
                        ..Default::default()
                    });
                }
                AuthorizationMode::AlwaysDeny => {}
                AuthorizationMode::Rbac => {
                    let Some(src) = &self.rbac else { continue };
                    let (rules, errors) = crate::filters::rbac_rules::rules_for(src.as_ref(), user, namespace).await;
                    for rule in rules {
                        if !rule.resources.is_empty() {
                            out.resource_rules.push(rbac::PolicyRule { non_resource_urls: Vec::new(), ..rule.clone() });
                        }
                        if !rule.non_resource_urls.is_empty() {
                            out.non_resource_rules.push(rbac::PolicyRule {
                                verbs: rule.verbs,
                                non_resource_urls: rule.non_resource_urls,
                                ..Default::default()
                            });
                        }
                    }
                    out.errors.extend(errors);
                }
            }
        }
        out
    }
}

/// One authorizer outcome as upstream's `authorizer.Decision`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReviewDecision {
    /// A mode allowed the request.
    Allow,
    /// A mode denied it outright (`AlwaysDeny`).
    Deny,
    /// No mode had an opinion (the request is forbidden, but not denied).
    NoOpinion,
}

/// The rules [`Authorizer::rules_for`] found: resource rules (verbs,
/// apiGroups, resources, resourceNames set), non-resource rules (verbs and
/// nonResourceURLs set), and the errors met reading roles and bindings
/// (upstream `RulesFor`'s aggregate error).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UserRules {
    /// Rules over resources.
    pub resource_rules: Vec<rbac::PolicyRule>,
    /// Rules over non-resource URLs.
    pub non_resource_rules: Vec<rbac::PolicyRule>,
    /// Lookup errors, e.g. `clusterrole.rbac.authorization.k8s.io "x" not found`.
    pub errors: Vec<String>,
}

/// The 403 `Forbidden` Status for `user` denied `a` with `reason` (upstream
/// `responsewriters.ForbiddenStatusError`).
pub fn forbidden(user: &UserInfo, a: &RequestAttributes, reason: &str) -> Status {
    let msg = if a.is_resource_request {
        let scope = if a.namespace.is_empty() {
            "at the cluster scope".to_string()
        } else {
            format!("in the namespace {}", go_quote(&a.namespace))
        };
        format!(
            "User {} cannot {} resource {} in API group {} {scope}",
            go_quote(&user.username),
            a.verb,
            go_quote(&a.combined_resource()),
            go_quote(&a.api_group)
        )
    } else {
        format!("User {} cannot {} path {}", go_quote(&user.username), a.verb, go_quote(&a.path))
    };
    let err = if reason.is_empty() { msg } else { format!("{msg}: {reason}") };
    let (group, resource, name) =
        if a.is_resource_request { (a.api_group.as_str(), a.resource.as_str(), a.name.as_str()) } else { ("", "", "") };
    let qualified = if group.is_empty() { resource.to_string() } else { format!("{resource}.{group}") };
    let message = if qualified.is_empty() {
        format!("forbidden: {err}")
    } else if name.is_empty() {
        format!("{qualified} is forbidden: {err}")
    } else {
        format!("{qualified} {} is forbidden: {err}", go_quote(name))
    };
    Status::new(403, "Forbidden", message).with_details(StatusDetails {
        name: name.to_string(),
        group: group.to_string(),
        kind: resource.to_string(),
        ..StatusDetails::default()
    })
}

/// Middleware authorizing every request; 403 on denial. Needs the
/// [`UserInfo`] from authentication (without it the request is anonymous).
pub async fn authz_middleware(State(authz): State<Arc<Authorizer>>, req: Request, next: Next) -> Response {
    let ctx = context_of(&req);
    let user = req.extensions().get::<UserInfo>().cloned().unwrap_or_else(UserInfo::anonymous);
    let decision = authz.authorize(&user, &ctx.attrs).await;
    let annotations = req.extensions().get::<AuditAnnotations>().cloned();
    match decision {
        Decision::Allow(reason) => {
            if let Some(an) = annotations {
                an.set("authorization.k8s.io/decision", "allow");
                an.set("authorization.k8s.io/reason", &reason);
            }
            next.run(req).await
        }
        Decision::Deny(reason) => {
            if let Some(an) = annotations {
                an.set("authorization.k8s.io/decision", "forbid");
                an.set("authorization.k8s.io/reason", &reason);
            }
            tracing::debug!(user = %user.username, path = %ctx.attrs.path, verb = %ctx.attrs.verb, %reason, "forbidden");
            ApiError::from(forbidden(&user, &ctx.attrs, &reason)).into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::{HeaderMap, Method};

    fn attrs(method: Method, uri: &str) -> RequestAttributes {
        RequestAttributes::new(&method, &uri.parse().unwrap(), &HeaderMap::new())
    }

    fn alice() -> UserInfo {
        UserInfo { username: "alice".into(), uid: String::new(), groups: vec!["system:authenticated".into()], extra: Default::default() }
    }

    #[test]
    fn forbidden_messages_match_upstream() {
        let s = forbidden(&alice(), &attrs(Method::GET, "/api/v1/namespaces/default/pods"), "");
        assert_eq!(
            s.message,
            "pods is forbidden: User \"alice\" cannot list resource \"pods\" in API group \"\" in the namespace \"default\""
        );
        assert_eq!((s.code, s.reason.as_str()), (403, "Forbidden"));
        let d = s.details.unwrap();
        assert_eq!((d.kind.as_str(), d.group.as_str(), d.name.as_str()), ("pods", "", ""));

        let s = forbidden(&alice(), &attrs(Method::GET, "/apis/apps/v1/deployments"), "");
        assert_eq!(
            s.message,
            "deployments.apps is forbidden: User \"alice\" cannot list resource \"deployments\" in API group \"apps\" at the cluster scope"
        );
        let s = forbidden(&alice(), &attrs(Method::PUT, "/api/v1/namespaces/ns/pods/web/status"), "RBAC: x");
        assert_eq!(
            s.message,
            "pods \"web\" is forbidden: User \"alice\" cannot update resource \"pods/status\" in API group \"\" in the namespace \"ns\": RBAC: x"
        );
        let s = forbidden(&alice(), &attrs(Method::PUT, "/debug/flags/v"), "");
        assert_eq!(s.message, "forbidden: User \"alice\" cannot put path \"/debug/flags/v\"");
        assert_eq!(serde_json::to_value(&s).unwrap()["details"], serde_json::json!({}));
    }

    #[tokio::test]
    async fn masters_pass_every_mode_and_modes_are_ordered() {
        let deny = Authorizer::new(vec![AuthorizationMode::AlwaysDeny], None).unwrap();
        let a = attrs(Method::DELETE, "/api/v1/nodes/n1");
        assert!(matches!(deny.authorize(&alice(), &a).await, Decision::Deny(_)));
        let root = UserInfo { username: "root".into(), uid: String::new(), groups: vec!["system:masters".into()], extra: Default::default() };
        assert!(matches!(deny.authorize(&root, &a).await, Decision::Allow(_)));
        let rbac: Arc<dyn RbacSource> = Arc::new(rbac::InMemoryRbac::new());
        let chain = Authorizer::new(vec![AuthorizationMode::Rbac, AuthorizationMode::AlwaysAllow], Some(rbac)).unwrap();
        assert!(matches!(chain.authorize(&alice(), &a).await, Decision::Allow(_)));
    }

    #[test]
    fn modes_parse_and_rbac_needs_a_source() {
        assert_eq!("RBAC".parse::<AuthorizationMode>(), Ok(AuthorizationMode::Rbac));
        assert_eq!("Node".parse::<AuthorizationMode>(), Err(AuthzError::UnknownMode("Node".into())));
        assert_eq!(Authorizer::new(vec![AuthorizationMode::Rbac], None).unwrap_err(), AuthzError::NoRbacSource);
    }
}
