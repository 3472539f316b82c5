//! ServiceAccount token claims: issuing bound tokens (TokenRequest) and
//! legacy Secret tokens, and checking a token's signature, issuer,
//! audiences and times (upstream `pkg/serviceaccount/claims.go`,
//! `pkg/serviceaccount/legacy.go`, `pkg/serviceaccount/jwt.go`).
//!
//! A bound token carries `iss`, `sub` (`system:serviceaccount:<ns>:<name>`),
//! `aud` (a string when there is one audience, an array otherwise, as
//! go-jose writes it), `exp`, `iat`, `nbf`, `jti`, and the private claim
//! `kubernetes.io` = `{namespace, serviceaccount{name, uid}, pod{…} |
//! secret{…} | node{…}, warnafter}`. A legacy token (issuer
//! `kubernetes/serviceaccount`) has no audience or expiry and names its
//! Secret in flat `kubernetes.io/serviceaccount/*` claims.
//!
//! Times are checked with upstream's one minute of leeway. Whether the
//! objects a token names still exist is checked by
//! [`crate::serviceaccount::authenticator`].

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, Header, Validation};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use super::keys::{PublicKey, SigningKey};

/// Issuer of legacy Secret-based tokens.
pub const LEGACY_ISSUER: &str = "kubernetes/serviceaccount";

/// Clock skew allowed on `exp`, `nbf` and `iat`, seconds (go-jose's `DefaultLeeway`).
pub const LEEWAY_SECONDS: u64 = 60;

/// Shortest TokenRequest `expirationSeconds` (upstream validation: 10 minutes).
pub const MIN_EXPIRATION_SECONDS: i64 = 600;

/// Longest TokenRequest `expirationSeconds` (upstream: 2^32).
pub const MAX_EXPIRATION_SECONDS: i64 = 1 << 32;

/// A named object with its UID, as the `kubernetes.io` claim holds them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectRef {
    /// The object's name.
    #[serde(default)]
    pub name: String,
    /// The object's UID.
    #[serde(default)]
    pub uid: String,
}

/// The `kubernetes.io` private claim of a bound token.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KubernetesClaims {
    /// The ServiceAccount's namespace.
    #[serde(default)]
    pub namespace: String,
    /// The Node the token is bound to, or the node of the bound Pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<ObjectRef>,
    /// The Pod the token is bound to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<ObjectRef>,
    /// The Secret the token is bound to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<ObjectRef>,
    /// The ServiceAccount.
    #[serde(default)]
    pub serviceaccount: ObjectRef,
    /// For tokens whose expiry was extended: when a client should have
    /// refreshed it (Unix seconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warnafter: Option<i64>,
}

/// The claims of a bound (TokenRequest) token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BoundClaims {
    /// Audiences.
    #[serde(serialize_with = "audience_out", deserialize_with = "audience_in")]
    pub aud: Vec<String>,
    /// Expiry, Unix seconds.
    pub exp: i64,
    /// Issued at, Unix seconds.
    pub iat: i64,
    /// Issuer.
    pub iss: String,
    /// Token ID (a UUID).
    #[serde(default)]
    pub jti: String,
    /// The private claim.
    #[serde(rename = "kubernetes.io")]
    pub kubernetes: KubernetesClaims,
    /// Not before, Unix seconds.
    pub nbf: i64,
    /// `system:serviceaccount:<ns>:<name>`.
    pub sub: String,
}

/// The claims of a legacy Secret-based token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LegacyClaims {
    /// Always [`LEGACY_ISSUER`].
    pub iss: String,
    /// The ServiceAccount's namespace.
    #[serde(rename = "kubernetes.io/serviceaccount/namespace")]
    pub namespace: String,
    /// The Secret holding the token.
    #[serde(rename = "kubernetes.io/serviceaccount/secret.name")]
    pub secret_name: String,
    /// The ServiceAccount's name.
    #[serde(rename = "kubernetes.io/serviceaccount/service-account.name")]
    pub service_account_name: String,
    /// The ServiceAccount's UID.
    #[serde(rename = "kubernetes.io/serviceaccount/service-account.uid")]
    pub service_account_uid: String,
    /// `system:serviceaccount:<ns>:<name>`.
    pub sub: String,
}

fn audience_out<S: Serializer>(aud: &[String], s: S) -> Result<S::Ok, S::Error> {
    match aud {
        [one] => s.serialize_str(one),
        many => many.serialize(s),
    }
}

fn audience_in<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Aud {
        One(String),
        Many(Vec<String>),
    }
    Ok(match Aud::deserialize(d)? {
        Aud::One(a) => vec![a],
        Aud::Many(a) => a,
    })
}

/// The user name of ServiceAccount `name` in `namespace`.
pub fn service_account_username(namespace: &str, name: &str) -> String {
    format!("system:serviceaccount:{namespace}:{name}")
}

/// What a bound token is for (the TokenRequest, validated).
#[derive(Debug, Clone, Default)]
pub struct TokenSpec {
    /// The ServiceAccount's namespace.
    pub namespace: String,
    /// The ServiceAccount.
    pub service_account: ObjectRef,
    /// Audiences (never empty: the API audiences by default).
    pub audiences: Vec<String>,
    /// Lifetime, seconds.
    pub expiration_seconds: i64,
    /// Bound Pod, Secret or Node.
    pub pod: Option<ObjectRef>,
    /// Bound Secret.
    pub secret: Option<ObjectRef>,
    /// Bound Node, or the node of the bound Pod.
    pub node: Option<ObjectRef>,
}

/// Why a token was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// Not a ServiceAccount token of this server (another issuer, not a JWT):
    /// other authenticators may know it.
    #[error("not a service account token of this issuer")]
    NotOurs,
    /// A token of this issuer that is not valid now.
    #[error("{0}")]
    Invalid(String),
}

/// The signing and verification settings of ServiceAccount tokens
/// (`--service-account-issuer`, `--api-audiences`,
/// `--service-account-signing-key-file`, `--service-account-key-file`,
/// `--service-account-max-token-expiration`).
#[derive(Debug, Clone)]
pub struct TokenConfig {
    /// Accepted issuers; the first one goes into new tokens.
    pub issuers: Vec<String>,
    /// Audiences the API accepts (default: the issuers).
    pub api_audiences: Vec<String>,
    /// Signs new tokens (`None`: TokenRequest is not served).
    pub signer: Option<SigningKey>,
    /// Verify tokens (the signer's public key is one of them).
    pub keys: Vec<PublicKey>,
    /// Longest lifetime of a requested token, seconds (`None`: no limit but
    /// [`MAX_EXPIRATION_SECONDS`]).
    pub max_expiration_seconds: Option<i64>,
}

/// Decoded payload of a JWT, without verifying it (to route by issuer).
fn peek_payload(token: &str) -> Option<Value> {
    let mut parts = token.split('.');
    let (_, payload, _) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload.trim_end_matches('=')).ok()?).ok()
}

impl TokenConfig {
    /// The issuer new tokens carry.
    pub fn issuer(&self) -> &str {
        self.issuers.first().map(String::as_str).unwrap_or_default()
    }

    /// Signs a bound token for `spec`, issued now; returns it and its expiry (Unix seconds).
    pub fn issue(&self, spec: &TokenSpec) -> Result<(String, i64), String> {
        let signer = self.signer.as_ref().ok_or("no --service-account-signing-key-file")?;
        let now = chrono::Utc::now().timestamp();
        let exp = now + spec.expiration_seconds;
        let claims = BoundClaims {
            aud: spec.audiences.clone(),
            exp,
            iat: now,
            iss: self.issuer().to_string(),
            jti: uuid::Uuid::new_v4().to_string(),
            kubernetes: KubernetesClaims {
                namespace: spec.namespace.clone(),
                node: spec.node.clone(),
                pod: spec.pod.clone(),
                secret: spec.secret.clone(),
                serviceaccount: spec.service_account.clone(),
                warnafter: None,
            },
            nbf: now,
            sub: service_account_username(&spec.namespace, &spec.service_account.name),
        };
        Ok((self.sign(signer, &claims)?, exp))
    }

    /// Signs a legacy token for the Secret `secret_name` of ServiceAccount
    /// `service_account` in `namespace`.
    pub fn issue_legacy(&self, namespace: &str, service_account: &ObjectRef, secret_name: &str) -> Result<String, String> {
        let signer = self.signer.as_ref().ok_or("no --service-account-signing-key-file")?;
        let claims = LegacyClaims {
            iss: LEGACY_ISSUER.to_string(),
            namespace: namespace.to_string(),
            secret_name: secret_name.to_string(),
            service_account_name: service_account.name.clone(),
            service_account_uid: service_account.uid.clone(),
            sub: service_account_username(namespace, &service_account.name),
        };
        self.sign(signer, &claims)
    }

    fn sign<C: Serialize>(&self, signer: &SigningKey, claims: &C) -> Result<String, String> {
        let header = Header { alg: Algorithm::ES256, kid: Some(signer.public.kid.clone()), ..Header::default() };
        jsonwebtoken::encode(&header, claims, &signer.encoding).map_err(|e| e.to_string())
    }

    /// The keys to try for a token whose header names `kid`: that key when
    /// known, else every key.
    fn keys_for(&self, kid: Option<&str>) -> Vec<&PublicKey> {
        let named: Vec<&PublicKey> = self.keys.iter().filter(|k| Some(k.kid.as_str()) == kid).collect();
        if named.is_empty() {
            self.keys.iter().collect()
        } else {
            named
        }
    }

    fn verify<C: serde::de::DeserializeOwned>(&self, token: &str, validation: &Validation) -> Result<C, TokenError> {
        let header = jsonwebtoken::decode_header(token).map_err(|_| TokenError::NotOurs)?;
        if header.alg != Algorithm::ES256 {
            return Err(TokenError::Invalid(format!("unsupported signing algorithm {:?}", header.alg)));
        }
        let mut last = TokenError::Invalid("no key verifies the token".to_string());
        for key in self.keys_for(header.kid.as_deref()) {
            match jsonwebtoken::decode::<C>(token, &key.decoding, validation) {
                Ok(data) => return Ok(data.claims),
                Err(e) => {
                    last = TokenError::Invalid(match e.kind() {
                        ErrorKind::ExpiredSignature => "service account token has expired".to_string(),
                        ErrorKind::ImmatureSignature => "service account token is not valid yet".to_string(),
                        ErrorKind::InvalidAudience => "token audiences are invalid for the target audiences".to_string(),
                        ErrorKind::InvalidSignature => "invalid signature".to_string(),
                        other => format!("invalid token: {other:?}"),
                    });
                    if !matches!(e.kind(), ErrorKind::InvalidSignature) {
                        return Err(last);
                    }
                }
            }
        }
        Err(last)
    }

    /// Checks a bound token's signature, issuer, times and audiences (it must
    /// name one of `audiences`). [`TokenError::NotOurs`] when another issuer
    /// wrote it or it is not a JWT.
    pub fn verify_bound(&self, token: &str, audiences: &[String]) -> Result<BoundClaims, TokenError> {
        let iss = peek_payload(token).and_then(|p| p.get("iss").and_then(Value::as_str).map(str::to_string));
        match iss {
            Some(i) if self.issuers.contains(&i) => {}
            _ => return Err(TokenError::NotOurs),
        }
        let mut v = Validation::new(Algorithm::ES256);
        v.leeway = LEEWAY_SECONDS;
        v.validate_nbf = true;
        v.set_issuer(&self.issuers);
        v.set_audience(audiences);
        v.set_required_spec_claims(&["exp", "iss", "sub", "aud"]);
        self.verify(token, &v)
    }

    /// Checks a legacy token's signature and issuer.
    pub fn verify_legacy(&self, token: &str) -> Result<LegacyClaims, TokenError> {
        let iss = peek_payload(token).and_then(|p| p.get("iss").and_then(Value::as_str).map(str::to_string));
        if iss.as_deref() != Some(LEGACY_ISSUER) {
            return Err(TokenError::NotOurs);
        }
        let mut v = Validation::new(Algorithm::ES256);
        v.validate_exp = false;
        v.validate_aud = false;
        v.set_issuer(&[LEGACY_ISSUER]);
        v.set_required_spec_claims(&["iss", "sub"]);
        self.verify(token, &v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serviceaccount::keys;

    fn config() -> TokenConfig {
        let dir = tempfile::tempdir().unwrap();
        let (key, _) = keys::ensure_key_files(dir.path()).unwrap();
        let signer = keys::load_signing_key(&key).unwrap();
        TokenConfig {
            issuers: vec!["https://kubernetes.default.svc.cluster.local".into()],
            api_audiences: vec!["https://kubernetes.default.svc.cluster.local".into()],
            keys: vec![signer.public.clone()],
            signer: Some(signer),
            max_expiration_seconds: None,
        }
    }

    fn spec(aud: &[&str]) -> TokenSpec {
        TokenSpec {
            namespace: "dev".into(),
            service_account: ObjectRef { name: "builder".into(), uid: "u-1".into() },
            audiences: aud.iter().map(|s| s.to_string()).collect(),
            expiration_seconds: 3600,
            pod: Some(ObjectRef { name: "web".into(), uid: "p-1".into() }),
            ..TokenSpec::default()
        }
    }

    #[test]
    fn bound_tokens_carry_upstream_claims_and_verify() {
        let c = config();
        let (token, exp) = c.issue(&spec(&["https://kubernetes.default.svc.cluster.local"])).unwrap();
        let payload = peek_payload(&token).unwrap();
        assert_eq!(payload["sub"], "system:serviceaccount:dev:builder");
        assert_eq!(payload["aud"], "https://kubernetes.default.svc.cluster.local", "one audience is a string");
        assert_eq!(payload["kubernetes.io"]["pod"]["name"], "web");
        assert_eq!(payload["kubernetes.io"]["serviceaccount"]["uid"], "u-1");
        assert_eq!(payload["exp"].as_i64(), Some(exp));
        assert!(payload["kubernetes.io"].get("secret").is_none());
        let claims = c.verify_bound(&token, &c.api_audiences).unwrap();
        assert_eq!(claims.kubernetes.namespace, "dev");
        assert_eq!(jsonwebtoken::decode_header(&token).unwrap().kid, Some(c.keys[0].kid.clone()));
    }

    #[test]
    fn audiences_must_intersect() {
        let c = config();
        let (token, _) = c.issue(&spec(&["vault", "other"])).unwrap();
        assert_eq!(peek_payload(&token).unwrap()["aud"], serde_json::json!(["vault", "other"]));
        assert!(matches!(c.verify_bound(&token, &c.api_audiences), Err(TokenError::Invalid(m)) if m.contains("audiences")));
        assert!(c.verify_bound(&token, &["vault".to_string()]).is_ok());
    }

    #[test]
    fn expired_tokens_foreign_issuers_and_other_keys_are_refused() {
        let c = config();
        let signer = c.signer.clone().unwrap();
        let now = chrono::Utc::now().timestamp();
        let mut claims = BoundClaims {
            aud: c.api_audiences.clone(),
            exp: now - 2 * LEEWAY_SECONDS as i64,
            iat: now - 4000,
            iss: c.issuer().into(),
            jti: "j".into(),
            kubernetes: KubernetesClaims::default(),
            nbf: now - 4000,
            sub: "system:serviceaccount:a:b".into(),
        };
        let expired = c.sign(&signer, &claims).unwrap();
        assert_eq!(c.verify_bound(&expired, &c.api_audiences), Err(TokenError::Invalid("service account token has expired".into())));
        claims.exp = now + 600;
        claims.iss = "https://elsewhere".into();
        let foreign = c.sign(&signer, &claims).unwrap();
        assert_eq!(c.verify_bound(&foreign, &c.api_audiences), Err(TokenError::NotOurs));
        // Signed by another key: no key of ours verifies it.
        let other = config();
        let (token, _) = other.issue(&spec(&["https://kubernetes.default.svc.cluster.local"])).unwrap();
        assert!(matches!(c.verify_bound(&token, &c.api_audiences), Err(TokenError::Invalid(_))));
        assert_eq!(c.verify_bound("not-a-jwt", &c.api_audiences), Err(TokenError::NotOurs));
    }

    #[test]
    fn legacy_tokens_verify_without_expiry() {
        let c = config();
        let sa = ObjectRef { name: "builder".into(), uid: "u-1".into() };
        let token = c.issue_legacy("dev", &sa, "builder-token").unwrap();
        let claims = c.verify_legacy(&token).unwrap();
        assert_eq!(claims.secret_name, "builder-token");
        assert_eq!(claims.sub, "system:serviceaccount:dev:builder");
        assert_eq!(c.verify_bound(&token, &c.api_audiences), Err(TokenError::NotOurs));
        let (bound, _) = c.issue(&spec(&["https://kubernetes.default.svc.cluster.local"])).unwrap();
        assert_eq!(c.verify_legacy(&bound), Err(TokenError::NotOurs));
    }
}
