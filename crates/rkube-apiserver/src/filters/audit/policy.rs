//! The audit policy (`--audit-policy-file`): an audit.k8s.io/v1 `Policy`
//! whose first matching rule sets a request's level and omitted stages
//! (upstream `staging/src/k8s.io/apiserver/pkg/audit/policy/checker.go`).
//!
//! ```yaml
//! apiVersion: audit.k8s.io/v1
//! kind: Policy
//! omitStages: ["RequestReceived"]
//! rules:
//! - level: None
//!   users: ["system:kube-proxy"]
//!   verbs: ["watch"]
//! - level: RequestResponse
//!   resources: [{group: "", resources: ["pods", "pods/status"], resourceNames: ["web"]}]
//!   namespaces: ["default"]
//! - level: Metadata
//!   nonResourceURLs: ["/healthz*", "/version"]
//! - level: Metadata
//! ```
//!
//! Rule fields: `users`, `userGroups`, `verbs`, `resources` (`group`,
//! `resources` with `*`, `pods/status`, `*/status`, `pods/*`, and
//! `resourceNames`), `namespaces` (`""` = cluster-scoped), `nonResourceURLs`
//! (exact or `prefix*`), `omitStages`, `omitManagedFields`. An empty list
//! matches everything; a rule with `resources` or `namespaces` matches only
//! resource requests, one with `nonResourceURLs` only non-resource requests.
//! No matching rule means level `None`.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::filters::authn::UserInfo;
use crate::filters::requestinfo::RequestAttributes;

/// Errors loading a policy.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// The file could not be read.
    #[error("reading audit policy {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// Not a valid Policy document.
    #[error("decoding audit policy: {0}")]
    Decode(String),
    /// A semantically invalid policy.
    #[error("invalid audit policy: {0}")]
    Invalid(String),
}

/// How much of a request is recorded, in increasing order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Level {
    /// Not recorded.
    None,
    /// User, timestamps, resource, verb; no bodies.
    Metadata,
    /// Metadata plus the request body.
    Request,
    /// Request plus the response body.
    RequestResponse,
}

impl Level {
    /// The level's name as it appears in policies and events.
    pub fn as_str(&self) -> &'static str {
        match self {
            Level::None => "None",
            Level::Metadata => "Metadata",
            Level::Request => "Request",
            Level::RequestResponse => "RequestResponse",
        }
    }
}

/// When an event is emitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Stage {
    /// As soon as the request is received, before the handler.
    RequestReceived,
    /// Response headers sent, body not yet (long-running requests: watches).
    ResponseStarted,
    /// The response is complete.
    ResponseComplete,
    /// The handler panicked.
    Panic,
}

/// One `resources` entry of a rule.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupResources {
    /// API group (`""` = core).
    #[serde(default)]
    pub group: String,
    /// Resources (empty = all of the group).
    #[serde(default)]
    pub resources: Vec<String>,
    /// Object names (empty = all).
    #[serde(default)]
    pub resource_names: Vec<String>,
}

/// One rule.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyRule {
    /// The level of matching requests.
    pub level: Level,
    /// User names (empty = all).
    #[serde(default)]
    pub users: Vec<String>,
    /// Groups, any of which matches (empty = all).
    #[serde(default)]
    pub user_groups: Vec<String>,
    /// Verbs (empty = all).
    #[serde(default)]
    pub verbs: Vec<String>,
    /// Resources.
    #[serde(default)]
    pub resources: Vec<GroupResources>,
    /// Namespaces (`""` = cluster-scoped).
    #[serde(default)]
    pub namespaces: Vec<String>,
    /// Non-resource URL paths.
    #[serde(default, rename = "nonResourceURLs")]
    pub non_resource_urls: Vec<String>,
    /// Stages not to emit (added to the policy's).
    #[serde(default)]
    pub omit_stages: Vec<Stage>,
    /// Drop `metadata.managedFields` from logged objects (overrides the policy's).
    #[serde(default)]
    pub omit_managed_fields: Option<bool>,
}

/// An audit.k8s.io/v1 Policy.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Policy {
    /// `audit.k8s.io/v1`.
    pub api_version: String,
    /// `Policy`.
    pub kind: String,
    /// Rules, first match wins.
    #[serde(default)]
    pub rules: Vec<PolicyRule>,
    /// Stages never emitted.
    #[serde(default)]
    pub omit_stages: Vec<Stage>,
    /// Drop `metadata.managedFields` from logged objects.
    #[serde(default)]
    pub omit_managed_fields: bool,
}

/// What the policy says about one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestAuditConfig {
    /// The level.
    pub level: Level,
    /// Stages not emitted.
    pub omit_stages: Vec<Stage>,
    /// Drop `metadata.managedFields` from logged objects.
    pub omit_managed_fields: bool,
}

impl Policy {
    /// Reads and validates `path`.
    pub fn load(path: &Path) -> Result<Policy, PolicyError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| PolicyError::Read { path: path.display().to_string(), source })?;
        Self::from_yaml(&text)
    }

    /// Parses and validates a YAML (or JSON) policy.
    pub fn from_yaml(text: &str) -> Result<Policy, PolicyError> {
        let p: Policy = serde_yaml::from_str(text).map_err(|e| PolicyError::Decode(e.to_string()))?;
        if p.kind != "Policy" {
            return Err(PolicyError::Invalid(format!("kind must be Policy, not {:?}", p.kind)));
        }
        if p.api_version != "audit.k8s.io/v1" {
            return Err(PolicyError::Invalid(format!("apiVersion must be audit.k8s.io/v1, not {:?}", p.api_version)));
        }
        if p.rules.is_empty() {
            return Err(PolicyError::Invalid("loaded illegal policy with 0 rules".into()));
        }
        for (i, r) in p.rules.iter().enumerate() {
            if !r.non_resource_urls.is_empty() && (!r.resources.is_empty() || !r.namespaces.is_empty()) {
                return Err(PolicyError::Invalid(format!(
                    "rules[{i}]: rules cannot apply to both regular resources and non-resource URLs"
                )));
            }
            for u in &r.non_resource_urls {
                if !u.starts_with('/') && u != "*" {
                    return Err(PolicyError::Invalid(format!("rules[{i}].nonResourceURLs: {u:?} must start with \"/\"")));
                }
                if u.trim_end_matches('*').contains('*') {
                    return Err(PolicyError::Invalid(format!("rules[{i}].nonResourceURLs: {u:?}: \"*\" only at the end")));
                }
            }
        }
        Ok(p)
    }

    /// The level and omitted stages for `user` doing `a` (no user: matches only
    /// rules without `users`/`userGroups`).
    pub fn evaluate(&self, a: &RequestAttributes, user: Option<&UserInfo>) -> RequestAuditConfig {
        for rule in &self.rules {
            if rule_matches(rule, a, user) {
                let mut omit = self.omit_stages.clone();
                for s in &rule.omit_stages {
                    if !omit.contains(s) {
                        omit.push(*s);
                    }
                }
                return RequestAuditConfig {
                    level: rule.level,
                    omit_stages: omit,
                    omit_managed_fields: rule.omit_managed_fields.unwrap_or(self.omit_managed_fields),
                };
            }
        }
        RequestAuditConfig { level: Level::None, omit_stages: self.omit_stages.clone(), omit_managed_fields: false }
    }
}

fn rule_matches(r: &PolicyRule, a: &RequestAttributes, user: Option<&UserInfo>) -> bool {
    if !r.users.is_empty() && !user.is_some_and(|u| r.users.contains(&u.username)) {
        return false;
    }
    if !r.user_groups.is_empty() && !user.is_some_and(|u| u.groups.iter().any(|g| r.user_groups.contains(g))) {
        return false;
    }
    if !r.verbs.is_empty() && !r.verbs.contains(&a.verb) {
        return false;
    }
    if !r.namespaces.is_empty() || !r.resources.is_empty() {
        return a.is_resource_request && namespace_matches(r, a) && resource_matches(r, a);
    }
    if !r.non_resource_urls.is_empty() {
        return !a.is_resource_request && non_resource_matches(r, &a.path);
    }
    true
}

fn namespace_matches(r: &PolicyRule, a: &RequestAttributes) -> bool {
    r.namespaces.is_empty() || r.namespaces.contains(&a.namespace)
}

fn resource_matches(r: &PolicyRule, a: &RequestAttributes) -> bool {
    if r.resources.is_empty() {
        return true;
    }
    let combined = a.combined_resource();
    r.resources.iter().filter(|gr| gr.group == a.api_group).any(|gr| {
        if gr.resources.is_empty() {
            return true;
        }
        if !gr.resource_names.is_empty() && !gr.resource_names.contains(&a.name) {
            return false;
        }
        gr.resources.iter().any(|res| {
            res == "*"
                || *res == combined
                || (!a.subresource.is_empty() && res.strip_prefix("*/") == Some(a.subresource.as_str()))
                || res.strip_suffix("/*") == Some(a.resource.as_str())
        })
    })
}

fn non_resource_matches(r: &PolicyRule, path: &str) -> bool {
    r.non_resource_urls.iter().any(|u| u == "*" || u == path || (u.ends_with('*') && path.starts_with(u.trim_end_matches('*'))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::{HeaderMap, Method};

    const POLICY: &str = r#"
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: None
  users: ["system:kube-proxy"]
- level: RequestResponse
  resources:
  - group: ""
    resources: ["configmaps"]
    resourceNames: ["special"]
- level: Request
  resources:
  - group: ""
    resources: ["pods", "*/status"]
  namespaces: ["default"]
  omitStages: ["ResponseStarted"]
- level: None
  nonResourceURLs: ["/healthz*"]
- level: Metadata
  userGroups: ["dev"]
- level: Metadata
  resources:
  - group: "apps"
"#;

    fn attrs(method: Method, uri: &str) -> RequestAttributes {
        RequestAttributes::new(&method, &uri.parse().unwrap(), &HeaderMap::new())
    }

    fn user(name: &str, groups: &[&str]) -> UserInfo {
        UserInfo { username: name.into(), uid: String::new(), groups: groups.iter().map(|s| s.to_string()).collect(), extra: Default::default() }
    }

    #[test]
    fn first_matching_rule_wins() {
        let p = Policy::from_yaml(POLICY).unwrap();
        let alice = user("alice", &["system:authenticated"]);
        let lvl = |m, u: &str, who: &UserInfo| p.evaluate(&attrs(m, u), Some(who)).level;
        assert_eq!(lvl(Method::GET, "/api/v1/namespaces/default/pods", &user("system:kube-proxy", &[])), Level::None);
        assert_eq!(lvl(Method::PUT, "/api/v1/namespaces/x/configmaps/special", &alice), Level::RequestResponse);
        assert_eq!(lvl(Method::PUT, "/api/v1/namespaces/x/configmaps/other", &alice), Level::None);
        assert_eq!(lvl(Method::POST, "/api/v1/namespaces/default/pods", &alice), Level::Request);
        assert_eq!(lvl(Method::PUT, "/api/v1/namespaces/default/services/s/status", &alice), Level::Request);
        assert_eq!(lvl(Method::POST, "/api/v1/namespaces/other/pods", &alice), Level::None);
        assert_eq!(lvl(Method::GET, "/healthz/etcd", &user("bob", &["dev"])), Level::None);
        assert_eq!(lvl(Method::GET, "/version", &user("bob", &["dev"])), Level::Metadata);
        assert_eq!(lvl(Method::GET, "/apis/apps/v1/deployments", &alice), Level::Metadata);
        assert_eq!(lvl(Method::GET, "/version", &alice), Level::None, "no rule: None");
    }

    #[test]
    fn omit_stages_combine_policy_and_rule() {
        let p = Policy::from_yaml(POLICY).unwrap();
        let c = p.evaluate(&attrs(Method::POST, "/api/v1/namespaces/default/pods"), Some(&user("a", &[])));
        assert_eq!(c.omit_stages, vec![Stage::RequestReceived, Stage::ResponseStarted]);
    }

    #[test]
    fn invalid_policies_are_rejected() {
        assert!(Policy::from_yaml("apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: []\n").is_err());
        assert!(Policy::from_yaml("apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Loud\n").is_err());
        assert!(Policy::from_yaml("apiVersion: v1\nkind: Policy\nrules:\n- level: None\n").is_err());
        let both = "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: None\n  nonResourceURLs: [\"/x\"]\n  namespaces: [\"a\"]\n";
        assert!(Policy::from_yaml(both).unwrap_err().to_string().contains("both regular resources and non-resource URLs"));
    }
}
