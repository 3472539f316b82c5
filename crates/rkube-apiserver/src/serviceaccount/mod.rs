//! ServiceAccount tokens: the keys that sign and verify them ([`keys`]),
//! their claims ([`claims`]), the authenticator that accepts them
//! ([`authenticator`]), and OpenID Connect issuer discovery
//! (`/.well-known/openid-configuration`, `/openid/v1/jwks`, upstream
//! `pkg/serviceaccount/openidmetadata.go`). The TokenRequest subresource
//! that issues them is [`crate::handlers::token_request`]; the admission
//! plugin that mounts them into pods is [`crate::admission::service_account`].
//!
//! Flags, as kube-apiserver's ([`ServiceAccountArgs`]):
//! `--service-account-issuer` (repeatable; the first signs),
//! `--service-account-signing-key-file`, `--service-account-key-file`
//! (repeatable), `--api-audiences` (default: the issuers) and
//! `--service-account-max-token-expiration`. Without a signing key and
//! issuer, `serviceaccounts/<name>/token` answers 404 saying what to set
//! (upstream does not install it then). `rkube up` signs with
//! `<data-dir>/pki/sa.key` (generated once) and issuer
//! [`DEFAULT_ISSUER`] unless told otherwise.

pub mod authenticator;
pub mod claims;
pub mod keys;

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

pub use authenticator::{CacheGetter, ObjectGetter, ServiceAccountAuthenticator};
pub use claims::TokenConfig;

/// The issuer `rkube up` uses by default (the in-cluster name of the API server, as kubeadm's default).
pub const DEFAULT_ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

/// kube-apiserver's ServiceAccount token flags; `#[command(flatten)]` them.
#[derive(clap::Args, Debug, Clone)]
pub struct ServiceAccountArgs {
    /// Identifier of the service account token issuer (the `iss` claim); repeatable: the first one signs new tokens, all are accepted.
    #[arg(long = "service-account-issuer")]
    pub issuers: Vec<String>,
    /// File with PEM-encoded public keys (or certificates, or private keys) that verify ServiceAccount tokens; repeatable. rkube supports ECDSA P-256 (ES256) keys. The signing key's public half is always accepted.
    #[arg(long = "service-account-key-file")]
    pub key_files: Vec<PathBuf>,
    /// File with the PEM-encoded PKCS#8 private key (ECDSA P-256) that signs ServiceAccount tokens; with --service-account-issuer it enables the TokenRequest API (serviceaccounts/<name>/token).
    #[arg(long = "service-account-signing-key-file")]
    pub signing_key_file: Option<PathBuf>,
    /// Identifiers of the API: tokens must name one of them in `aud` (default: the --service-account-issuer values).
    #[arg(long = "api-audiences", value_delimiter = ',')]
    pub api_audiences: Vec<String>,
    /// The longest lifetime of a token the TokenRequest API issues (Go duration, e.g. 24h; 0s: no limit); longer requests are shortened to it.
    #[arg(long = "service-account-max-token-expiration", default_value = "0s")]
    pub max_token_expiration: String,
}

impl Default for ServiceAccountArgs {
    /// The flags' defaults: no issuer, no keys, no audiences, no lifetime limit (`0s`).
    fn default() -> Self {
        ServiceAccountArgs {
            issuers: Vec::new(),
            key_files: Vec::new(),
            signing_key_file: None,
            api_audiences: Vec::new(),
            max_token_expiration: "0s".into(),
        }
    }
}

/// Errors turning [`ServiceAccountArgs`] into a [`TokenConfig`].
#[derive(Debug, thiserror::Error)]
pub enum ServiceAccountError {
    /// A key file.
    #[error(transparent)]
    Key(#[from] keys::KeyError),
    /// Flags that do not go together, or a value that does not parse.
    #[error("{0}")]
    Flags(String),
}

impl ServiceAccountArgs {
    /// `rkube up`'s settings: these flags, with `<data_dir>/pki/sa.key`
    /// (generated when missing) as the signing key and [`DEFAULT_ISSUER`]
    /// as the issuer when they are not given.
    pub fn with_up_defaults(&self, data_dir: &Path) -> Result<ServiceAccountArgs, ServiceAccountError> {
        let mut args = self.clone();
        if args.signing_key_file.is_none() {
            let (key, _) = keys::ensure_key_files(&data_dir.join("pki"))?;
            args.signing_key_file = Some(key);
        }
        if args.issuers.is_empty() {
            args.issuers = vec![DEFAULT_ISSUER.to_string()];
        }
        Ok(args)
    }

    /// The token settings, or `None` when no issuer is configured (no
    /// ServiceAccount tokens at all). Errors: a signing key without an
    /// issuer, an issuer with no key to verify with, unreadable or
    /// unsupported keys, a bad duration.
    pub fn load(&self) -> Result<Option<TokenConfig>, ServiceAccountError> {
        if self.issuers.is_empty() {
            if self.signing_key_file.is_some() || !self.key_files.is_empty() {
                return Err(ServiceAccountError::Flags(
                    "--service-account-signing-key-file and --service-account-key-file need --service-account-issuer".into(),
                ));
            }
            return Ok(None);
        }
        let signer = self.signing_key_file.as_deref().map(keys::load_signing_key).transpose()?;
        let mut verify: Vec<keys::PublicKey> = signer.iter().map(|s| s.public.clone()).collect();
        for f in &self.key_files {
            for k in keys::load_public_keys(f)? {
                if !verify.iter().any(|v| v.kid == k.kid) {
                    verify.push(k);
                }
            }
        }
        if verify.is_empty() {
            return Err(ServiceAccountError::Flags(
                "--service-account-issuer needs --service-account-signing-key-file or --service-account-key-file".into(),
            ));
        }
        let max = crate::filters::timeout::parse_go_duration(&self.max_token_expiration)
            .map_err(|e| ServiceAccountError::Flags(format!("invalid value for --service-account-max-token-expiration: {e}")))?;
        let max_expiration_seconds = (max.as_secs() > 0).then_some(max.as_secs() as i64);
        if max_expiration_seconds.is_some_and(|m| m < claims::MIN_EXPIRATION_SECONDS) {
            return Err(ServiceAccountError::Flags(
                "--service-account-max-token-expiration must be at least 10m0s".into(),
            ));
        }
        let api_audiences = if self.api_audiences.is_empty() { self.issuers.clone() } else { self.api_audiences.clone() };
        Ok(Some(TokenConfig { issuers: self.issuers.clone(), api_audiences, signer, keys: verify, max_expiration_seconds }))
    }
}

/// The OpenID provider configuration served at
/// `/.well-known/openid-configuration`.
pub fn openid_configuration(config: &TokenConfig) -> Value {
    let issuer = config.issuer().trim_end_matches('/');
    json!({
        "issuer": config.issuer(),
        "jwks_uri": format!("{issuer}/openid/v1/jwks"),
        "response_types_supported": ["id_token"],
        "subject_types_supported": ["public"],
        "id_token_signing_alg_values_supported": ["ES256"],
    })
}

/// The JSON Web Key Set served at `/openid/v1/jwks`: every verification key.
pub fn jwks(config: &TokenConfig) -> Value {
    json!({ "keys": config.keys.iter().map(keys::PublicKey::jwk).collect::<Vec<_>>() })
}

/// The answer to `GET /.well-known/openid-configuration` (`jwks` false,
/// `application/json`) or `GET /openid/v1/jwks` (`jwks` true,
/// `application/jwk-set+json`), cacheable for an hour as upstream's; 404
/// when no issuer is configured.
pub fn discovery_response(config: Option<&TokenConfig>, jwks_set: bool) -> axum::response::Response {
    use axum::response::IntoResponse as _;
    let Some(config) = config else {
        return crate::error::ApiError::path_not_found().into_response();
    };
    let (body, content_type) = if jwks_set {
        (jwks(config), "application/jwk-set+json")
    } else {
        (openid_configuration(config), "application/json")
    };
    (
        [(axum::http::header::CONTENT_TYPE, content_type), (axum::http::header::CACHE_CONTROL, "public, max-age=3600")],
        body.to_string(),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_issuer_means_no_tokens_and_keys_need_an_issuer() {
        assert!(ServiceAccountArgs::default().load().unwrap().is_none());
        let args = ServiceAccountArgs { signing_key_file: Some("k".into()), ..Default::default() };
        assert!(args.load().unwrap_err().to_string().contains("need --service-account-issuer"));
        let args = ServiceAccountArgs { issuers: vec!["https://x".into()], ..Default::default() };
        assert!(args.load().unwrap_err().to_string().contains("needs --service-account-signing-key-file"));
    }

    #[test]
    fn up_defaults_sign_with_a_generated_key_and_publish_it() {
        let dir = tempfile::tempdir().unwrap();
        let args = ServiceAccountArgs { max_token_expiration: "48h".into(), ..Default::default() };
        let config = args.with_up_defaults(dir.path()).unwrap().load().unwrap().unwrap();
        assert_eq!(config.issuers, vec![DEFAULT_ISSUER]);
        assert_eq!(config.api_audiences, vec![DEFAULT_ISSUER]);
        assert_eq!(config.max_expiration_seconds, Some(48 * 3600));
        assert!(dir.path().join("pki/sa.key").is_file() && dir.path().join("pki/sa.pub").is_file());
        let doc = openid_configuration(&config);
        assert_eq!(doc["jwks_uri"], format!("{DEFAULT_ISSUER}/openid/v1/jwks"));
        let set = jwks(&config);
        assert_eq!(set["keys"][0]["kid"], config.signer.as_ref().unwrap().public.kid.as_str());
        let aud = ServiceAccountArgs { api_audiences: vec!["vault".into(), "api".into()], ..Default::default() };
        let config = aud.with_up_defaults(dir.path()).unwrap().load().unwrap().unwrap();
        assert_eq!(config.api_audiences, vec!["vault", "api"], "--api-audiences replaces the issuer as audience");
        let short = ServiceAccountArgs { max_token_expiration: "1m".into(), ..Default::default() };
        assert!(short.with_up_defaults(dir.path()).unwrap().load().is_err());
    }
}
