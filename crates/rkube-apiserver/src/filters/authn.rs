//! Authentication: who sent a request (upstream
//! `staging/src/k8s.io/apiserver/pkg/endpoints/filters/authentication.go`
//! and the authenticators it unions).
//!
//! Methods, tried in upstream's order:
//!
//! 1. **Client certificates** (`--client-ca-file`): the TLS layer asks for a
//!    certificate but does not require one; the chain is verified here
//!    against the client CA, then `CN` is the user name and each `O` a group
//!    (upstream `x509.CommonNameUserConversion`).
//! 2. **Static tokens** (`--token-auth-file`): `Authorization: Bearer <token>`
//!    looked up in a CSV file of `token,user,uid,"group1,group2"` lines
//!    (upstream `tokenfile`).
//! 3. **ServiceAccount tokens**: bound (TokenRequest) and legacy Secret JWTs
//!    this server signed, while the objects they name exist
//!    ([`crate::serviceaccount::authenticator`]).
//! 4. **Anonymous** (`--anonymous-auth`, upstream default on): a request
//!    with no credentials at all is `system:anonymous` in group
//!    `system:unauthenticated`.
//!
//! Every authenticated user also gets group `system:authenticated`.
//! Credentials that were presented but are not valid, or no credentials with
//! anonymous auth off, are answered 401 `Unauthorized` (a `Status` with
//! message `Unauthorized`), even when anonymous auth is on (upstream
//! `union.NewFailOnError`). The `Authorization` header is removed once used.
//! [`authn_middleware`] stores the [`UserInfo`] in the request extensions.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use axum::extract::{ConnectInfo, Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rkube_api::status::Status;
use rustls::server::danger::ClientCertVerifier;
use rustls_pki_types::{CertificateDer, UnixTime};
use serde::Serialize;

use crate::error::ApiError;
use crate::filters::tls::ConnInfo;
use crate::filters::x509;

/// User name of unauthenticated requests.
pub const ANONYMOUS_USER: &str = "system:anonymous";
/// Group of unauthenticated requests.
pub const UNAUTHENTICATED_GROUP: &str = "system:unauthenticated";
/// Group every authenticated user is in.
pub const AUTHENTICATED_GROUP: &str = "system:authenticated";
/// The all-powerful group (upstream `user.SystemPrivilegedGroup`).
pub const MASTERS_GROUP: &str = "system:masters";

/// Errors loading authentication configuration.
#[derive(Debug, thiserror::Error)]
pub enum AuthnError {
    /// The token file could not be read.
    #[error("reading token file {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// A record has fewer than three columns.
    #[error("token file '{path}' must have at least 3 columns (token, user name, user uid), found {found}")]
    Columns {
        /// The file.
        path: String,
        /// Columns found on the offending record.
        found: usize,
    },
    /// A quoted field is not closed.
    #[error("token file '{path}': line {line}: unterminated quoted field")]
    Quote {
        /// The file.
        path: String,
        /// 1-based line number.
        line: usize,
    },
}

/// An authenticated user (upstream `user.Info`), as audit events show it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct UserInfo {
    /// The user name.
    pub username: String,
    /// The user's UID, when known.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub uid: String,
    /// Groups, including `system:authenticated` or `system:unauthenticated`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
    /// Extra attributes (`user.Info.GetExtra`), e.g. a ServiceAccount token's
    /// `authentication.kubernetes.io/pod-name`; keys sorted.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub extra: std::collections::BTreeMap<String, Vec<String>>,
}

impl UserInfo {
    /// The anonymous user.
    pub fn anonymous() -> Self {
        UserInfo { username: ANONYMOUS_USER.into(), uid: String::new(), groups: vec![UNAUTHENTICATED_GROUP.into()], extra: Default::default() }
    }

    /// True when the user is in `system:masters`.
    pub fn is_master(&self) -> bool {
        self.groups.iter().any(|g| g == MASTERS_GROUP)
    }

    fn authenticated(mut self) -> Self {
        if !self.groups.iter().any(|g| g == AUTHENTICATED_GROUP) {
            self.groups.push(AUTHENTICATED_GROUP.into());
        }
        self
    }
}

/// The users of a `--token-auth-file`, by token.
#[derive(Debug, Clone, Default)]
pub struct TokenFile {
    tokens: HashMap<String, UserInfo>,
}

impl TokenFile {
    /// Reads `path`.
    pub fn load(path: &Path) -> Result<Self, AuthnError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| AuthnError::Read { path: path.display().to_string(), source })?;
        Self::parse(&text, &path.display().to_string())
    }

    /// Parses CSV records `token,user,uid[,"group1,group2"]`. Blank lines
    /// and records with an empty token are skipped; a later duplicate token wins.
    pub fn parse(text: &str, path: &str) -> Result<Self, AuthnError> {
        let mut tokens = HashMap::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim_end_matches('\r');
            if line.trim().is_empty() {
                continue;
            }
            let record = parse_csv_line(line).ok_or(AuthnError::Quote { path: path.into(), line: i + 1 })?;
            if record.len() < 3 {
                return Err(AuthnError::Columns { path: path.into(), found: record.len() });
            }
            if record[0].is_empty() {
                tracing::warn!(path, line = i + 1, "empty token in token file");
                continue;
            }
            let groups = match record.get(3) {
                Some(g) if !g.is_empty() => g.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect(),
                _ => Vec::new(),
            };
            let user = UserInfo { username: record[1].clone(), uid: record[2].clone(), groups, extra: Default::default() };
            if tokens.insert(record[0].clone(), user).is_some() {
                tracing::warn!(path, line = i + 1, "duplicate token in token file");
            }
        }
        Ok(TokenFile { tokens })
    }

    /// The user of `token`.
    pub fn lookup(&self, token: &str) -> Option<&UserInfo> {
        self.tokens.get(token)
    }

    /// Number of tokens.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// True when the file had no token.
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }
}

/// One CSV record (RFC 4180 quoting); `None` on an unterminated quote.
fn parse_csv_line(line: &str) -> Option<Vec<String>> {
    let mut fields = Vec::new();
    let mut cur = String::new();
    let mut chars = line.chars().peekable();
    let mut quoted = false;
    let mut at_start = true;
    while let Some(c) = chars.next() {
        if quoted {
            if c == '"' {
                if chars.peek() == Some(&'"') {
                    chars.next();
                    cur.push('"');
                } else {
                    quoted = false;
                }
            } else {
                cur.push(c);
            }
            continue;
        }
        match c {
            '"' if at_start => {
                quoted = true;
                at_start = false;
            }
            ',' => {
                fields.push(std::mem::take(&mut cur));
                at_start = true;
            }
            c => {
                cur.push(c);
                at_start = false;
            }
        }
    }
    if quoted {
        return None;
    }
    fields.push(cur);
    Some(fields)
}

/// Why a request was not authenticated (logged, never sent to the client).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthnFailure {
    /// No credentials and anonymous auth is off.
    NoCredentials,
    /// A bearer token that no authenticator knows.
    InvalidToken,
    /// A ServiceAccount token of this server that is no longer (or not) valid.
    InvalidServiceAccountToken(String),
    /// A client certificate that does not chain to the client CA.
    InvalidCertificate(String),
}

/// The authenticator chain (see the module docs).
#[derive(Debug, Default)]
pub struct Authenticator {
    /// `--token-auth-file` users.
    pub tokens: Option<TokenFile>,
    /// Verifies client certificates against `--client-ca-file`.
    pub client_ca: Option<Arc<dyn ClientCertVerifier>>,
    /// `--anonymous-auth`.
    pub anonymous: bool,
    /// ServiceAccount tokens (`--service-account-*` flags).
    pub service_accounts: Option<Arc<crate::serviceaccount::ServiceAccountAuthenticator>>,
}

impl Authenticator {
    /// Authenticates a request with `authorization` (the header value) from a
    /// peer that presented `peer_certs` (end entity first).
    pub async fn authenticate(
        &self,
        authorization: Option<&str>,
        peer_certs: Option<&[CertificateDer<'static>]>,
    ) -> Result<UserInfo, AuthnFailure> {
        let mut failure = None;
        if let (Some(verifier), Some(certs)) = (&self.client_ca, peer_certs) {
            if let Some((end, intermediates)) = certs.split_first() {
                match verifier.verify_client_cert(end, intermediates, UnixTime::now()) {
                    Ok(_) => match x509::subject(end.as_ref()) {
                        Ok(s) if !s.common_name.is_empty() => {
                            return Ok(UserInfo { username: s.common_name, uid: String::new(), groups: s.organizations, extra: Default::default() }
                                .authenticated())
                        }
                        Ok(_) => failure = Some(AuthnFailure::InvalidCertificate("no common name".into())),
                        Err(e) => failure = Some(AuthnFailure::InvalidCertificate(e.to_string())),
                    },
                    Err(e) => failure = Some(AuthnFailure::InvalidCertificate(e.to_string())),
                }
            }
        }
        if let Some(token) = authorization.and_then(bearer_token) {
            return self.authenticate_token(token, &[]).await.map(|(user, _)| user);
        }
        if let Some(f) = failure {
            return Err(f);
        }
        if self.anonymous {
            Ok(UserInfo::anonymous())
        } else {
            Err(AuthnFailure::NoCredentials)
        }
    }
}

impl Authenticator {
    /// The user of bearer token `token` and the audiences it is valid for
    /// (upstream's `authenticator.Token`, which TokenReview uses too):
    /// a `--token-auth-file` token is audience-agnostic (valid for the API
    /// audiences that `audiences` names, [`agnostic_audiences`]); else a
    /// ServiceAccount token valid for one of `audiences` (the API audiences
    /// when empty). `Err(InvalidToken)` for a token no authenticator knows or
    /// one that is not a single header-safe value.
    pub async fn authenticate_token(&self, token: &str, audiences: &[String]) -> Result<(UserInfo, Vec<String>), AuthnFailure> {
        if token.is_empty() || token.trim() != token || token.contains(['\r', '\n']) {
            return Err(AuthnFailure::InvalidToken);
        }
        if let Some(user) = self.tokens.as_ref().and_then(|t| t.lookup(token)) {
            let api = self.service_accounts.as_ref().map(|sa| sa.api_audiences()).unwrap_or_default();
            return match agnostic_audiences(&api, audiences) {
                Some(aud) => Ok((user.clone().authenticated(), aud)),
                None => Err(AuthnFailure::InvalidToken),
            };
        }
        if let Some(sa) = &self.service_accounts {
            return match sa.authenticate(token, audiences).await {
                Ok((user, aud)) => Ok((user.authenticated(), aud)),
                Err(crate::serviceaccount::claims::TokenError::NotOurs) => Err(AuthnFailure::InvalidToken),
                Err(crate::serviceaccount::claims::TokenError::Invalid(m)) => Err(AuthnFailure::InvalidServiceAccountToken(m)),
            };
        }
        Err(AuthnFailure::InvalidToken)
    }
}

/// The audiences an audience-agnostic authenticator (a static token)
/// answers with (upstream `authenticator.WrapAudienceAgnosticToken`): with
/// no target audiences, none; otherwise those of `implicit` (the server's
/// API audiences) that are targeted, `None` (not authenticated) when none are.
pub fn agnostic_audiences(implicit: &[String], target: &[String]) -> Option<Vec<String>> {
    if target.is_empty() {
        return Some(Vec::new());
    }
    let both: Vec<String> = implicit.iter().filter(|a| target.contains(a)).cloned().collect();
    (!both.is_empty()).then_some(both)
}

/// The token of an `Authorization: Bearer <token>` header (scheme case-insensitive).
fn bearer_token(header: &str) -> Option<&str> {
    let mut parts = header.trim().splitn(2, ' ');
    let scheme = parts.next()?;
    let token = parts.next()?.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// The 401 answer.
pub fn unauthorized() -> Response {
    ApiError::from(Status::unauthorized("Unauthorized")).into_response()
}

/// State of [`authn_middleware`].
#[derive(Clone)]
pub struct AuthnState {
    /// The authenticators.
    pub authenticator: Arc<Authenticator>,
    /// Audits failed authentications (upstream `WithFailedAuthenticationAudit`).
    pub audit: Option<Arc<crate::filters::audit::Auditor>>,
}

/// Middleware authenticating every request; inserts [`UserInfo`] or answers 401.
pub async fn authn_middleware(State(st): State<AuthnState>, mut req: Request, next: Next) -> Response {
    let authorization = req.headers().get("authorization").and_then(|v| v.to_str().ok()).map(str::to_string);
    let certs = req.extensions().get::<ConnectInfo<ConnInfo>>().and_then(|c| c.0.peer_certs.clone());
    match st.authenticator.authenticate(authorization.as_deref(), certs.as_deref().map(|v| v.as_slice())).await {
        Ok(user) => {
            req.headers_mut().remove("authorization");
            req.extensions_mut().insert(user);
            next.run(req).await
        }
        Err(why) => {
            let ctx = crate::filters::requestinfo::context_of(&req);
            tracing::debug!(path = %ctx.attrs.path, reason = ?why, "unable to authenticate the request");
            if let Some(a) = &st.audit {
                a.log_failed_authentication(&ctx).await;
            }
            unauthorized()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "secret-admin,admin,1,\"system:masters\"\nsecret-alice,alice,2,\"dev,ops\"\n\nsecret-bob,bob,3\n,nobody,4\n";

    fn authn(anonymous: bool) -> Authenticator {
        Authenticator { tokens: Some(TokenFile::parse(FILE, "tokens.csv").unwrap()), client_ca: None, anonymous, service_accounts: None }
    }

    #[test]
    fn token_file_records_parse_with_quoted_groups() {
        let t = TokenFile::parse(FILE, "tokens.csv").unwrap();
        assert_eq!(t.len(), 3);
        let alice = t.lookup("secret-alice").unwrap();
        assert_eq!((alice.username.as_str(), alice.uid.as_str()), ("alice", "2"));
        assert_eq!(alice.groups, vec!["dev", "ops"]);
        assert!(t.lookup("secret-bob").unwrap().groups.is_empty());
    }

    #[test]
    fn short_records_and_open_quotes_are_rejected() {
        let e = TokenFile::parse("tok,user\n", "f.csv").unwrap_err();
        assert_eq!(e.to_string(), "token file 'f.csv' must have at least 3 columns (token, user name, user uid), found 2");
        assert!(matches!(TokenFile::parse("tok,user,1,\"a,b\n", "f.csv"), Err(AuthnError::Quote { line: 1, .. })));
    }

    #[tokio::test]
    async fn bearer_tokens_authenticate_and_add_the_authenticated_group() {
        let u = authn(false).authenticate(Some("Bearer secret-alice"), None).await.unwrap();
        assert_eq!(u.username, "alice");
        assert_eq!(u.groups, vec!["dev", "ops", AUTHENTICATED_GROUP]);
        let u = authn(false).authenticate(Some("bearer secret-admin"), None).await.unwrap();
        assert!(u.is_master());
    }

    #[tokio::test]
    async fn bad_token_fails_even_with_anonymous_auth() {
        assert_eq!(authn(true).authenticate(Some("Bearer nope"), None).await, Err(AuthnFailure::InvalidToken));
    }

    #[tokio::test]
    async fn bare_tokens_authenticate_like_bearer_headers_and_never_as_anonymous() {
        let (u, _) = authn(true).authenticate_token("secret-alice", &[]).await.unwrap();
        assert_eq!((u.username.as_str(), u.uid.as_str()), ("alice", "2"));
        assert_eq!(u.groups, vec!["dev", "ops", AUTHENTICATED_GROUP]);
        for bad in ["nope", "", " ", " secret-alice", "secret-alice\n"] {
            assert_eq!(authn(true).authenticate_token(bad, &[]).await, Err(AuthnFailure::InvalidToken), "{bad:?}");
        }
        // A static token knows no audience: asked for one the API does not have, it is refused.
        assert_eq!(authn(true).authenticate_token("secret-alice", &["vault".to_string()]).await, Err(AuthnFailure::InvalidToken));
    }

    #[test]
    fn agnostic_tokens_get_the_targeted_api_audiences() {
        let implicit = vec!["rkube".to_string()];
        assert_eq!(agnostic_audiences(&implicit, &[]), Some(vec![]));
        assert_eq!(agnostic_audiences(&implicit, &["rkube".to_string(), "other".to_string()]), Some(vec!["rkube".to_string()]));
        assert_eq!(agnostic_audiences(&implicit, &["other".to_string()]), None);
        assert_eq!(agnostic_audiences(&[], &["other".to_string()]), None);
    }

    #[tokio::test]
    async fn no_credentials_is_anonymous_only_when_enabled() {
        assert_eq!(authn(true).authenticate(None, None).await.unwrap(), UserInfo::anonymous());
        assert_eq!(authn(false).authenticate(None, None).await, Err(AuthnFailure::NoCredentials));
        // A non-bearer scheme is no credential.
        assert_eq!(authn(true).authenticate(Some("Basic abc"), None).await.unwrap().username, ANONYMOUS_USER);
    }
}
