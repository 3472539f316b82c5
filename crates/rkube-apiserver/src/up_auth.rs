//! Access control of `rkube up`: secure by default.
//!
//! Without `--insecure`, `rkube up` serves HTTPS with the self-signed PKI of
//! [`crate::filters::tls::generate_self_signed`] (`<data-dir>/pki`, generated
//! once and reused on every restart), authenticates client certificates
//! signed by that CA (plus any `--client-ca-file` bundle) and the tokens of
//! `--token-auth-file`, refuses anonymous requests (`--anonymous-auth`,
//! default false here, unlike kube-apiserver) and authorizes with RBAC
//! (`--authorization-mode`, default `RBAC`). The kubeconfig it writes trusts
//! the CA and carries the admin client certificate (`CN=rkube-admin`,
//! `O=system:masters`).
//!
//! With `--insecure` it serves plain HTTP on 127.0.0.1 only, everyone is
//! allowed (`AlwaysAllow`, anonymous auth on) and the kubeconfig has no
//! credentials: the old behaviour, for throwaway local experiments.

use std::path::{Path, PathBuf};

use crate::filters::tls::{self, TlsError};
use crate::filters::FilterArgs;

/// Errors setting up the access control of `rkube up`.
#[derive(Debug, thiserror::Error)]
pub enum UpAuthError {
    /// Generating or reading the PKI, or writing the kubeconfig.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// Reading `--client-ca-file` or writing the combined client CA bundle.
    #[error("{what} {path}: {source}")]
    File {
        /// What was being done.
        what: &'static str,
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
}

/// Authentication and authorization flags of `rkube up` (kube-apiserver's
/// names; defaults secure). `#[command(flatten)]` into [`crate::cli::UpArgs`].
#[derive(clap::Args, Debug, Clone)]
pub struct UpAuthArgs {
    /// Static bearer tokens (CSV: token,user,uid,"group1,group2"), like kube-apiserver's --token-auth-file.
    #[arg(long = "token-auth-file")]
    pub token_auth_file: Option<PathBuf>,
    /// Extra CA bundle for client certificates (CN = user, O = groups), trusted besides the CA in <data-dir>/pki.
    #[arg(long = "client-ca-file")]
    pub client_ca_file: Option<PathBuf>,
    /// Allow requests without credentials as system:anonymous (off by default in `rkube up`).
    #[arg(long = "anonymous-auth", default_value_t = false, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub anonymous_auth: bool,
    /// Ordered list of authorizers: AlwaysAllow, AlwaysDeny, RBAC (`rkube up` default RBAC; system:masters may do anything).
    #[arg(long = "authorization-mode", default_value = "RBAC", value_delimiter = ',')]
    pub authorization_mode: Vec<String>,
}

impl Default for UpAuthArgs {
    fn default() -> Self {
        UpAuthArgs { token_auth_file: None, client_ca_file: None, anonymous_auth: false, authorization_mode: vec!["RBAC".into()] }
    }
}

/// Default port of `rkube up` over HTTPS (kube-apiserver's `--secure-port` default).
pub const SECURE_PORT: u16 = 6443;
/// Default port of `rkube up --insecure` (kube-apiserver's old insecure port).
pub const INSECURE_PORT: u16 = 8080;

/// What [`secure_filter_args`] set up.
#[derive(Debug, Clone)]
pub struct SecureUp {
    /// The filter flags to serve with (TLS, client CA, tokens, anonymous, authorization).
    pub filters: FilterArgs,
    /// The generated PKI.
    pub pki: tls::Pki,
}

/// Generates (or reuses) the PKI in `<data_dir>/pki` and returns the filter
/// flags of a secure `rkube up`. With `--client-ca-file`, the client CA is
/// the bundle `<data_dir>/pki/client-ca-bundle.crt` (the generated CA, then
/// that file), rewritten on every start.
pub fn secure_filter_args(data_dir: &Path, auth: &UpAuthArgs) -> Result<SecureUp, UpAuthError> {
    let pki = tls::generate_self_signed(data_dir)?;
    let client_ca = match &auth.client_ca_file {
        None => pki.ca_cert_path.clone(),
        Some(extra) => {
            let extra_pem = std::fs::read_to_string(extra).map_err(|source| UpAuthError::File {
                what: "reading --client-ca-file",
                path: extra.display().to_string(),
                source,
            })?;
            // Fails early (and clearly) when the file holds no certificate.
            tls::load_certs(extra)?;
            let bundle = data_dir.join("pki").join("client-ca-bundle.crt");
            let mut text = pki.ca_cert_pem.clone();
            if !text.ends_with('\n') {
                text.push('\n');
            }
            text.push_str(&extra_pem);
            std::fs::write(&bundle, text).map_err(|source| UpAuthError::File {
                what: "writing",
                path: bundle.display().to_string(),
                source,
            })?;
            bundle
        }
    };
    let filters = FilterArgs {
        tls_cert_file: Some(pki.serving_cert_path.clone()),
        tls_private_key_file: Some(pki.serving_key_path.clone()),
        client_ca_file: Some(client_ca),
        token_auth_file: auth.token_auth_file.clone(),
        anonymous_auth: auth.anonymous_auth,
        authorization_mode: auth.authorization_mode.clone(),
        ..FilterArgs::default()
    };
    Ok(SecureUp { filters, pki })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filters::authz::AuthorizationMode;

    #[test]
    fn secure_up_serves_tls_without_anonymous_access_under_rbac() {
        let dir = tempfile::tempdir().unwrap();
        let up = secure_filter_args(dir.path(), &UpAuthArgs::default()).unwrap();
        let cfg = up.filters.load().unwrap();
        assert!(cfg.tls.is_some(), "HTTPS");
        assert_eq!(cfg.client_ca.as_ref().map(Vec::len), Some(1), "the generated CA only");
        assert!(!cfg.anonymous);
        assert_eq!(cfg.authorization_modes, vec![AuthorizationMode::Rbac]);
        assert!(cfg.tokens.is_none());
        // Restarting reuses the PKI.
        let again = secure_filter_args(dir.path(), &UpAuthArgs::default()).unwrap();
        assert_eq!(again.pki.ca_cert_pem, up.pki.ca_cert_pem);
    }

    #[test]
    fn client_ca_file_is_trusted_besides_the_generated_ca() {
        let dir = tempfile::tempdir().unwrap();
        let other = tempfile::tempdir().unwrap();
        let other_pki = tls::generate_self_signed(other.path()).unwrap();
        let tokens = dir.path().join("tokens.csv");
        std::fs::write(&tokens, "t1,alice,1\n").unwrap();
        let auth = UpAuthArgs {
            client_ca_file: Some(other_pki.ca_cert_path.clone()),
            token_auth_file: Some(tokens),
            ..UpAuthArgs::default()
        };
        let cfg = secure_filter_args(dir.path(), &auth).unwrap().filters.load().unwrap();
        assert_eq!(cfg.client_ca.as_ref().map(Vec::len), Some(2));
        assert_eq!(cfg.tokens.as_ref().map(|t| t.len()), Some(1));
    }

    #[test]
    fn client_ca_file_without_certificates_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty.crt");
        std::fs::write(&empty, "").unwrap();
        let auth = UpAuthArgs { client_ca_file: Some(empty), ..UpAuthArgs::default() };
        assert!(matches!(secure_filter_args(dir.path(), &auth), Err(UpAuthError::Tls(TlsError::NoCertificate(_)))));
        let missing = UpAuthArgs { client_ca_file: Some(dir.path().join("nope.crt")), ..UpAuthArgs::default() };
        assert!(matches!(secure_filter_args(dir.path(), &missing), Err(UpAuthError::File { .. })));
    }
}
