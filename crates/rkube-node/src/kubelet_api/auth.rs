//! Authentication and authorization of the kubelet API (upstream `pkg/kubelet/server/auth.go`
//! and the kubelet's `--authentication-*`/`--authorization-*` options).
//!
//! Authentication: a client certificate that chains to `--client-ca-file` (checked in the TLS
//! handshake; CN = user, O = groups), else a bearer token checked by a TokenReview at the API
//! server (successes and failures cached for [`TOKEN_CACHE_TTL`]), else anonymous
//! (`system:anonymous` in `system:unauthenticated`) when `--anonymous-auth`, else 401.
//! Authorization: `AlwaysAllow`, or `Webhook` — a SubjectAccessReview for the node resource
//! `nodes/<subresource>` named after this node, the subresource from the request path
//! ([`path_attributes`]), the verb from the method.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec};
use kube::api::PostParams;
use kube::Api;

/// How long a TokenReview answer is reused (kubelet `--authentication-token-webhook-cache-ttl`, 2m).
pub const TOKEN_CACHE_TTL: Duration = Duration::from_secs(120);

/// Who sent a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct User {
    /// User name.
    pub name: String,
    /// Groups.
    pub groups: Vec<String>,
    /// UID (tokens only).
    pub uid: Option<String>,
}

/// The kubelet's `--authorization-mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuthorizationMode {
    /// Every authenticated request is allowed.
    AlwaysAllow,
    /// SubjectAccessReview at the API server.
    Webhook,
}

impl std::str::FromStr for AuthorizationMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "AlwaysAllow" => Ok(Self::AlwaysAllow),
            "Webhook" => Ok(Self::Webhook),
            other => Err(format!("unknown authorization mode {other:?} (AlwaysAllow or Webhook)")),
        }
    }
}

/// The authorization attributes of a kubelet API request: verb, and the node subresources
/// to try in order (the first allowed one wins; upstream's fine-grained kubelet authorization,
/// on by default in 1.33, tries `nodes/healthz` and `nodes/pods` before `nodes/proxy`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attributes {
    /// `get`, `create`, `update`, `patch` or `delete` (from the HTTP method).
    pub verb: &'static str,
    /// Subresources of `nodes` to check, in order.
    pub subresources: Vec<&'static str>,
}

fn under(path: &str, prefix: &str) -> bool {
    path == prefix || path.strip_prefix(prefix).is_some_and(|rest| rest.starts_with('/'))
}

/// Maps a method and path to authorization attributes as upstream `auth.go`:
/// `/stats` → `stats`, `/metrics` → `metrics`, `/logs` → `log`, `/checkpoint` → `checkpoint`,
/// `/configz` → `configz` then `proxy`, `/healthz` → `healthz` then `proxy`, `/pods` and
/// `/runningpods` → `pods` then `proxy`, everything else (`/containerLogs`, `/exec`, `/run`, ...) → `proxy`.
pub fn path_attributes(method: &http::Method, path: &str) -> Attributes {
    let verb = match *method {
        http::Method::POST => "create",
        http::Method::PUT => "update",
        http::Method::PATCH => "patch",
        http::Method::DELETE => "delete",
        _ => "get",
    };
    let subresources = if under(path, "/stats") {
        vec!["stats"]
    } else if under(path, "/metrics") {
        vec!["metrics"]
    } else if under(path, "/logs") {
        vec!["log"]
    } else if under(path, "/checkpoint") {
        vec!["checkpoint"]
    } else if under(path, "/configz") {
        vec!["configz", "proxy"]
    } else if under(path, "/healthz") {
        vec!["healthz", "proxy"]
    } else if under(path, "/pods") || under(path, "/runningpods") {
        vec!["pods", "proxy"]
    } else {
        vec!["proxy"]
    };
    Attributes { verb, subresources }
}

/// Errors of a review call.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ReviewError(String);

/// Authenticates and authorizes kubelet API requests through the API server.
pub struct Authorizer {
    client: kube::Client,
    node_name: String,
    anonymous: bool,
    mode: AuthorizationMode,
    tokens: Mutex<HashMap<String, (Instant, Option<User>)>>,
}

impl std::fmt::Debug for Authorizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authorizer").field("node_name", &self.node_name).field("mode", &self.mode).finish_non_exhaustive()
    }
}

impl Authorizer {
    /// An authorizer for node `node_name` using `client` for reviews.
    pub fn new(client: kube::Client, node_name: String, anonymous: bool, mode: AuthorizationMode) -> Self {
        Self { client, node_name, anonymous, mode, tokens: Mutex::new(HashMap::new()) }
    }

    /// The user of a request: `cert_user` (from a verified client certificate), else the bearer
    /// token's (TokenReview), else anonymous when allowed; `Ok(None)` means 401.
    ///
    /// # Errors
    /// The TokenReview call failed.
    pub async fn authenticate(&self, cert_user: Option<User>, bearer: Option<&str>) -> Result<Option<User>, ReviewError> {
        if let Some(u) = cert_user {
            return Ok(Some(u));
        }
        if let Some(token) = bearer {
            return self.review_token(token).await;
        }
        if self.anonymous {
            return Ok(Some(User {
                name: "system:anonymous".into(),
                groups: vec!["system:unauthenticated".into()],
                uid: None,
            }));
        }
        Ok(None)
    }

    async fn review_token(&self, token: &str) -> Result<Option<User>, ReviewError> {
        if let Ok(cache) = self.tokens.lock() {
            if let Some((at, user)) = cache.get(token) {
                if at.elapsed() < TOKEN_CACHE_TTL {
                    return Ok(user.clone());
                }
            }
        }
        let api: Api<TokenReview> = Api::all(self.client.clone());
        let review = TokenReview {
            spec: TokenReviewSpec { token: Some(token.to_string()), audiences: None },
            ..Default::default()
        };
        let answer = api.create(&PostParams::default(), &review).await.map_err(|e| ReviewError(format!("TokenReview: {e}")))?;
        let status = answer.status.unwrap_or_default();
        let user = if status.authenticated == Some(true) {
            status.user.map(|u| User { name: u.username.unwrap_or_default(), groups: u.groups.unwrap_or_default(), uid: u.uid })
        } else {
            None
        };
        if let Ok(mut cache) = self.tokens.lock() {
            cache.retain(|_, (at, _)| at.elapsed() < TOKEN_CACHE_TTL);
            cache.insert(token.to_string(), (Instant::now(), user.clone()));
        }
        Ok(user)
    }

    /// Whether `user` may do `attrs` on this node: `Ok(None)` when allowed, else the
    /// subresource that was refused (the last one tried).
    ///
    /// # Errors
    /// The SubjectAccessReview call failed.
    pub async fn authorize(&self, user: &User, attrs: &Attributes) -> Result<Option<&'static str>, ReviewError> {
        if self.mode == AuthorizationMode::AlwaysAllow {
            return Ok(None);
        }
        let api: Api<SubjectAccessReview> = Api::all(self.client.clone());
        let mut refused = "proxy";
        for sub in &attrs.subresources {
            let review = SubjectAccessReview {
                spec: SubjectAccessReviewSpec {
                    user: Some(user.name.clone()),
                    groups: Some(user.groups.clone()),
                    uid: user.uid.clone(),
                    resource_attributes: Some(ResourceAttributes {
                        verb: Some(attrs.verb.to_string()),
                        resource: Some("nodes".into()),
                        subresource: Some((*sub).to_string()),
                        name: Some(self.node_name.clone()),
                        version: Some("v1".into()),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                ..Default::default()
            };
            let answer = api
                .create(&PostParams::default(), &review)
                .await
                .map_err(|e| ReviewError(format!("SubjectAccessReview: {e}")))?;
            if answer.status.is_some_and(|s| s.allowed) {
                return Ok(None);
            }
            refused = sub;
        }
        Ok(Some(refused))
    }
}

/// The user of a verified client certificate (DER): CN = name, O = groups.
pub fn cert_user(der: &[u8]) -> Option<User> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let subject = cert.subject();
    let name = subject.iter_common_name().next().and_then(|c| c.as_str().ok())?.to_string();
    let groups = subject.iter_organization().filter_map(|o| o.as_str().ok().map(str::to_string)).collect();
    Some(User { name, groups, uid: None })
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Method;

    #[test]
    fn paths_map_to_node_subresources_as_upstream_kubelet() {
        let sub = |m: &Method, p: &str| path_attributes(m, p);
        assert_eq!(sub(&Method::GET, "/containerLogs/ns/pod/c"), Attributes { verb: "get", subresources: vec!["proxy"] });
        assert_eq!(sub(&Method::GET, "/logs/messages").subresources, ["log"]);
        assert_eq!(sub(&Method::GET, "/stats/summary").subresources, ["stats"]);
        assert_eq!(sub(&Method::GET, "/metrics/cadvisor").subresources, ["metrics"]);
        assert_eq!(sub(&Method::GET, "/healthz").subresources, ["healthz", "proxy"]);
        assert_eq!(sub(&Method::GET, "/pods").subresources, ["pods", "proxy"]);
        assert_eq!(sub(&Method::GET, "/runningpods/").subresources, ["pods", "proxy"]);
        assert_eq!(sub(&Method::GET, "/configz").subresources, ["configz", "proxy"]);
        assert_eq!(sub(&Method::POST, "/exec/ns/pod/c").verb, "create");
        assert_eq!(sub(&Method::GET, "/statsx").subresources, ["proxy"], "a prefix must end at a segment");
        assert_eq!(sub(&Method::DELETE, "/x").verb, "delete");
        assert_eq!(sub(&Method::PUT, "/x").verb, "update");
        assert_eq!(sub(&Method::PATCH, "/x").verb, "patch");
    }

    #[test]
    fn authorization_mode_parses_kubelet_names() {
        assert_eq!("Webhook".parse::<AuthorizationMode>(), Ok(AuthorizationMode::Webhook));
        assert_eq!("AlwaysAllow".parse::<AuthorizationMode>(), Ok(AuthorizationMode::AlwaysAllow));
        assert!("RBAC".parse::<AuthorizationMode>().is_err());
    }
}
