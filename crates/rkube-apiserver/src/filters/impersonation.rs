//! User impersonation: `kubectl --as=<user> --as-group=<group>` (upstream
//! `staging/src/k8s.io/apiserver/pkg/endpoints/filters/impersonation.go`).
//!
//! Headers read (and removed before the request goes on):
//!
//! - `Impersonate-User: <name>` — needs verb `impersonate` on `users`
//!   (API group `""`, name = the user), or on `serviceaccounts` (name and
//!   namespace of the account) for `system:serviceaccount:<ns>:<name>`;
//! - `Impersonate-Group: <group>` (repeatable) — `impersonate` on `groups`;
//! - `Impersonate-Uid: <uid>` — `impersonate` on `uids` in
//!   `authentication.k8s.io`;
//! - `Impersonate-Extra-<key>: <value>` (repeatable; `<key>` percent-decoded
//!   and lowercased) — `impersonate` on `userextras/<key>` in
//!   `authentication.k8s.io`, name = the value.
//!
//! Every check is asked of the request's authorizer for the *requesting*
//! user. Any denial answers 403 `Forbidden` with upstream's message, e.g.
//! `users "bob" is forbidden: User "alice" cannot impersonate resource "users" in API group "" at the cluster scope`.
//! Groups, uid or extras without `Impersonate-User` answer 500
//! `InternalError` like upstream.
//!
//! Once allowed, the request continues as the impersonated user: its groups
//! are the `Impersonate-Group` values, plus `system:serviceaccounts` and
//! `system:serviceaccounts:<ns>` for service accounts, plus
//! `system:authenticated` (or `system:unauthenticated` for
//! `system:anonymous`). The audit event of the request records it as
//! `impersonatedUser` (with `extra`), while `user` stays the requester.
//!
//! The filter runs after authentication and audit, before the inflight limit
//! and authorization (upstream's `DefaultBuildHandlerChain` order).

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::HeaderMap;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rkube_api::status::Status;
use serde::Serialize;

use crate::error::ApiError;
use crate::filters::audit::AuditImpersonation;
use crate::filters::authn::{UserInfo, ANONYMOUS_USER, AUTHENTICATED_GROUP, UNAUTHENTICATED_GROUP};
use crate::filters::authz::{forbidden, Authorizer, Decision};
use crate::filters::requestinfo::{context_of, RequestAttributes};

/// `Impersonate-User`.
pub const IMPERSONATE_USER: &str = "impersonate-user";
/// `Impersonate-Group`.
pub const IMPERSONATE_GROUP: &str = "impersonate-group";
/// `Impersonate-Uid`.
pub const IMPERSONATE_UID: &str = "impersonate-uid";
/// Prefix of `Impersonate-Extra-<key>`.
pub const IMPERSONATE_EXTRA_PREFIX: &str = "impersonate-extra-";

const SA_PREFIX: &str = "system:serviceaccount:";

/// Errors reading impersonation headers.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ImpersonationError {
    /// Groups, uid or extras without a user (upstream's wording).
    #[error("requested {0} without impersonating a user")]
    NoUser(String),
    /// A header value that is not visible ASCII / UTF-8.
    #[error("invalid value of header {0}")]
    BadHeader(String),
}

/// What the impersonation headers of a request ask for.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ImpersonatedUser {
    /// `Impersonate-User`.
    pub username: String,
    /// `Impersonate-Uid`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub uid: String,
    /// The final groups (headers plus the implied ones, once [`ImpersonatedUser::finish`]ed).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
    /// `Impersonate-Extra-<key>` values by lowercased key.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub extra: BTreeMap<String, Vec<String>>,
}

impl ImpersonatedUser {
    /// The request's impersonation, `Ok(None)` when it has no impersonation header.
    pub fn from_headers(headers: &HeaderMap) -> Result<Option<Self>, ImpersonationError> {
        let value = |name: &str, v: &axum::http::HeaderValue| {
            v.to_str().map(str::to_string).map_err(|_| ImpersonationError::BadHeader(name.to_string()))
        };
        let mut out = ImpersonatedUser::default();
        let mut has_user = false;
        let mut requested: Vec<String> = Vec::new();
        for (name, v) in headers {
            let n = name.as_str();
            if n == IMPERSONATE_USER {
                out.username = value(n, v)?;
                has_user = true;
            } else if n == IMPERSONATE_GROUP {
                let g = value(n, v)?;
                requested.push(format!("groups={g}"));
                out.groups.push(g);
            } else if n == IMPERSONATE_UID {
                out.uid = value(n, v)?;
                requested.push(format!("uid={}", out.uid));
            } else if let Some(key) = n.strip_prefix(IMPERSONATE_EXTRA_PREFIX) {
                let key = percent_decode(key).to_ascii_lowercase();
                let val = value(n, v)?;
                requested.push(format!("extra[{key}]={val}"));
                out.extra.entry(key).or_default().push(val);
            }
        }
        if !has_user {
            return if requested.is_empty() {
                Ok(None)
            } else {
                Err(ImpersonationError::NoUser(format!("[{}]", requested.join(" "))))
            };
        }
        Ok(Some(out))
    }

    /// The `(namespace, name)` of a service account user name.
    fn service_account(&self) -> Option<(&str, &str)> {
        let rest = self.username.strip_prefix(SA_PREFIX)?;
        let (ns, name) = rest.split_once(':')?;
        (!ns.is_empty() && !name.is_empty() && !name.contains(':')).then_some((ns, name))
    }

    /// The authorization checks the requester must pass, in upstream's order
    /// (user or service account, groups, extras, uid).
    pub fn checks(&self) -> Vec<RequestAttributes> {
        let attr = |group: &str, resource: &str, sub: &str, ns: &str, name: &str| RequestAttributes {
            is_resource_request: true,
            verb: "impersonate".into(),
            api_group: group.into(),
            api_version: "v1".into(),
            namespace: ns.into(),
            resource: resource.into(),
            subresource: sub.into(),
            name: name.into(),
            ..Default::default()
        };
        let mut out = Vec::new();
        match self.service_account() {
            Some((ns, name)) => out.push(attr("", "serviceaccounts", "", ns, name)),
            None => out.push(attr("", "users", "", "", &self.username)),
        }
        for g in &self.groups {
            out.push(attr("", "groups", "", "", g));
        }
        for (k, vals) in &self.extra {
            for v in vals {
                out.push(attr("authentication.k8s.io", "userextras", k, "", v));
            }
        }
        if !self.uid.is_empty() {
            out.push(attr("authentication.k8s.io", "uids", "", "", &self.uid));
        }
        out
    }

    /// Adds the implied groups (service account groups, then
    /// `system:authenticated` / `system:unauthenticated`).
    pub fn finish(mut self) -> Self {
        if let Some((ns, _)) = self.service_account() {
            let ns_group = format!("system:serviceaccounts:{ns}");
            if self.groups.is_empty() {
                self.groups = vec!["system:serviceaccounts".into(), ns_group];
            }
        }
        let implied = if self.username == ANONYMOUS_USER { UNAUTHENTICATED_GROUP } else { AUTHENTICATED_GROUP };
        if !self.groups.iter().any(|g| g == implied) {
            self.groups.push(implied.into());
        }
        self
    }

    /// The user the request runs as.
    pub fn user_info(&self) -> UserInfo {
        UserInfo { username: self.username.clone(), uid: self.uid.clone(), groups: self.groups.clone(), extra: self.extra.clone() }
    }
}

/// `%XX` decoding of an extra key (invalid escapes are kept as is).
fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            let hex = std::str::from_utf8(&b[i + 1..i + 3]).ok();
            if let Some(v) = hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Middleware applying impersonation headers (see the module docs).
pub async fn impersonation_middleware(State(authz): State<Arc<Authorizer>>, mut req: Request, next: Next) -> Response {
    let wanted = match ImpersonatedUser::from_headers(req.headers()) {
        Ok(None) => return next.run(req).await,
        Ok(Some(w)) => w,
        Err(e) => {
            let uri = req.uri().to_string();
            tracing::debug!(error = %e, "bad impersonation request");
            return ApiError::from(Status::new(500, "InternalError", format!("Internal Server Error: {uri:?}: {e}")))
                .into_response();
        }
    };
    let requester = req.extensions().get::<UserInfo>().cloned().unwrap_or_else(UserInfo::anonymous);
    for check in wanted.checks() {
        if let Decision::Deny(reason) = authz.authorize(&requester, &check).await {
            let ctx = context_of(&req);
            tracing::debug!(user = %requester.username, path = %ctx.attrs.path, resource = %check.resource, name = %check.name, "impersonation forbidden");
            return ApiError::from(forbidden(&requester, &check, &reason)).into_response();
        }
    }
    let wanted = wanted.finish();
    if let Some(slot) = req.extensions().get::<AuditImpersonation>() {
        slot.set(serde_json::to_value(&wanted).unwrap_or_default());
    }
    let headers = req.headers_mut();
    let names: Vec<_> = headers
        .keys()
        .filter(|n| {
            let n = n.as_str();
            n == IMPERSONATE_USER || n == IMPERSONATE_GROUP || n == IMPERSONATE_UID || n.starts_with(IMPERSONATE_EXTRA_PREFIX)
        })
        .cloned()
        .collect();
    for n in names {
        headers.remove(n);
    }
    req.extensions_mut().insert(wanted.user_info());
    next.run(req).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(axum::http::HeaderName::from_bytes(k.as_bytes()).unwrap(), v.parse().unwrap());
        }
        h
    }

    #[test]
    fn no_headers_is_no_impersonation_and_groups_need_a_user() {
        assert_eq!(ImpersonatedUser::from_headers(&HeaderMap::new()), Ok(None));
        let e = ImpersonatedUser::from_headers(&headers(&[("Impersonate-Group", "dev")])).unwrap_err();
        assert_eq!(e.to_string(), "requested [groups=dev] without impersonating a user");
    }

    #[test]
    fn checks_cover_user_groups_extras_and_uid() {
        let w = ImpersonatedUser::from_headers(&headers(&[
            ("Impersonate-User", "bob"),
            ("Impersonate-Group", "dev"),
            ("Impersonate-Uid", "42"),
            ("Impersonate-Extra-Acme.com%2Fproject", "p1"),
        ]))
        .unwrap()
        .unwrap();
        let c: Vec<String> = w.checks().iter().map(|a| format!("{}/{}/{}", a.api_group, a.combined_resource(), a.name)).collect();
        assert_eq!(c, vec!["/users/bob", "/groups/dev", "authentication.k8s.io/userextras/acme.com/project/p1", "authentication.k8s.io/uids/42"]);
        let u = w.finish().user_info();
        assert_eq!(u.groups, vec!["dev", AUTHENTICATED_GROUP]);
    }

    #[test]
    fn service_accounts_are_checked_in_their_namespace_and_get_their_groups() {
        let w = ImpersonatedUser::from_headers(&headers(&[("Impersonate-User", "system:serviceaccount:ns1:builder")]))
            .unwrap()
            .unwrap();
        let c = &w.checks()[0];
        assert_eq!((c.resource.as_str(), c.namespace.as_str(), c.name.as_str()), ("serviceaccounts", "ns1", "builder"));
        assert_eq!(
            w.finish().groups,
            vec!["system:serviceaccounts", "system:serviceaccounts:ns1", AUTHENTICATED_GROUP]
        );
        let anon = ImpersonatedUser::from_headers(&headers(&[("Impersonate-User", ANONYMOUS_USER)])).unwrap().unwrap();
        assert_eq!(anon.finish().groups, vec![UNAUTHENTICATED_GROUP]);
    }

    #[test]
    fn forbidden_impersonation_names_the_target() {
        let w = ImpersonatedUser::from_headers(&headers(&[("Impersonate-User", "bob")])).unwrap().unwrap();
        let alice = UserInfo { username: "alice".into(), uid: String::new(), groups: vec![], extra: Default::default() };
        let s = forbidden(&alice, &w.checks()[0], "");
        assert_eq!(
            s.message,
            "users \"bob\" is forbidden: User \"alice\" cannot impersonate resource \"users\" in API group \"\" at the cluster scope"
        );
    }
}
