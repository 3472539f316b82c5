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
//! `--tls-cert-file`/`--tls-private-key-file` replace the generated serving
//! certificate; the kubeconfig then trusts the last certificate of that file
//! (kube-apiserver's convention puts the CA after the serving certificate;
//! a lone certificate is trusted itself), and still authenticates with the
//! generated admin certificate. Audit, inflight, timeout and trace flags are
//! kube-apiserver's ([`FilterArgs`]) and pass through unchanged.
//!
//! With `--insecure` it serves plain HTTP on 127.0.0.1 only, everyone is
//! allowed (`AlwaysAllow`, anonymous auth on) and the kubeconfig has no
//! credentials: the old behaviour, for throwaway local experiments.

use std::path::Path;

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

/// The filter flags of a secure `rkube up` when no flag is given:
/// kube-apiserver's defaults except `--anonymous-auth=false` and
/// `--authorization-mode=RBAC` (what [`crate::cli::UpArgs`] parses to).
pub fn up_default_filter_args() -> FilterArgs {
    FilterArgs { anonymous_auth: false, authorization_mode: vec!["RBAC".into()], ..FilterArgs::default() }
}

/// The filter flags of `rkube up --insecure`: `flags`' audit, inflight,
/// timeout and trace settings, with no TLS, no credentials, anonymous access
/// and `AlwaysAllow` (clap refuses the access-control flags with `--insecure`).
pub fn insecure_filter_args(flags: &FilterArgs) -> FilterArgs {
    FilterArgs {
        tls_cert_file: None,
        tls_private_key_file: None,
        client_ca_file: None,
        token_auth_file: None,
        anonymous_auth: true,
        authorization_mode: vec!["AlwaysAllow".into()],
        ..flags.clone()
    }
}

/// Default port of `rkube up` over HTTPS (kube-apiserver's `--secure-port` default).
pub const SECURE_PORT: u16 = 6443;
/// Default port of `rkube up --insecure` (kube-apiserver's old insecure port).
pub const INSECURE_PORT: u16 = 8080;

/// What [`secure_filter_args`] set up.
#[derive(Debug, Clone)]
pub struct SecureUp {
    /// The filter flags to serve with (TLS, client CA, tokens, anonymous,
    /// authorization, and the caller's audit, inflight, timeout and trace flags).
    pub filters: FilterArgs,
    /// The generated PKI (its admin certificate authenticates the kubeconfig).
    pub pki: tls::Pki,
    /// PEM of the certificate the kubeconfig trusts: the generated CA, or
    /// the last certificate of `--tls-cert-file` when that is given.
    pub server_ca_pem: String,
}

impl SecureUp {
    /// The PKI to write the kubeconfig from ([`tls::write_kubeconfig`]):
    /// the generated one, trusting [`SecureUp::server_ca_pem`].
    pub fn kubeconfig_pki(&self) -> tls::Pki {
        tls::Pki { ca_cert_pem: self.server_ca_pem.clone(), ..self.pki.clone() }
    }
}

/// The last PEM `CERTIFICATE` block of `pem` (the CA kube-apiserver's
/// `--tls-cert-file` convention concatenates after the serving certificate,
/// or the serving certificate itself when it is alone), with a final newline.
pub fn last_certificate_pem(pem: &str) -> Option<String> {
    const BEGIN: &str = "-----BEGIN CERTIFICATE-----";
    const END: &str = "-----END CERTIFICATE-----";
    let start = pem.rfind(BEGIN)?;
    let len = pem[start..].find(END)? + END.len();
    Some(format!("{}\n", &pem[start..start + len]))
}

/// Generates (or reuses) the PKI in `<data_dir>/pki` and returns the filter
/// flags of a secure `rkube up` from the command's `flags`. With
/// `--client-ca-file`, the client CA is the bundle
/// `<data_dir>/pki/client-ca-bundle.crt` (the generated CA, then that file),
/// rewritten on every start. With `--tls-cert-file`/`--tls-private-key-file`
/// those serve HTTPS instead of the generated serving certificate, and the
/// kubeconfig trusts the file's last certificate.
pub fn secure_filter_args(data_dir: &Path, flags: &FilterArgs) -> Result<SecureUp, UpAuthError> {
    let auth = flags;
    let pki = tls::generate_self_signed(data_dir)?;
    let (serving_cert, serving_key, server_ca_pem) = match (&flags.tls_cert_file, &flags.tls_private_key_file) {
        (Some(cert), Some(key)) => {
            // Fails early (and clearly) on a missing file, no certificate or a key that does not load.
            tls::TlsConfig::load(cert, key)?;
            let pem = std::fs::read_to_string(cert).map_err(|source| UpAuthError::File {
                what: "reading --tls-cert-file",
                path: cert.display().to_string(),
                source,
            })?;
            let trusted = last_certificate_pem(&pem).ok_or_else(|| TlsError::NoCertificate(cert.display().to_string()))?;
            tracing::info!(cert = %cert.display(), "serving with --tls-cert-file; the kubeconfig trusts its last certificate");
            (cert.clone(), key.clone(), trusted)
        }
        (None, None) => (pki.serving_cert_path.clone(), pki.serving_key_path.clone(), pki.ca_cert_pem.clone()),
        _ => return Err(TlsError::Incomplete.into()),
    };
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
        tls_cert_file: Some(serving_cert),
        tls_private_key_file: Some(serving_key),
        client_ca_file: Some(client_ca),
        ..flags.clone()
    };
    Ok(SecureUp { filters, pki, server_ca_pem })
}

/// The control-plane components `rkube up` runs in its own process, each
/// talking to the server as its upstream user through a kubeconfig in the
/// data dir: (file name, user). Each user is bound to its bootstrap
/// ClusterRole (`system:kube-scheduler`, ...) by
/// [`crate::filters::rbac::bootstrap_policy`].
pub const UP_COMPONENTS: &[(&str, &str)] =
    &[("scheduler.kubeconfig", "system:kube-scheduler"), ("controller-manager.kubeconfig", "system:kube-controller-manager")];

/// Writes, for each of [`UP_COMPONENTS`], `<data_dir>/<file>`: a kubeconfig
/// for `server_url` trusting `up`'s server CA and authenticating with a
/// fresh client certificate (`CN=<user>`, no groups, client auth, valid
/// from last year for 10 years) signed by the generated CA
/// (`<data_dir>/pki/ca.key`). Errors: the CA cannot be read or a file
/// cannot be written.
pub fn write_component_kubeconfigs(data_dir: &Path, server_url: &str, up: &SecureUp) -> Result<(), UpAuthError> {
    for (file, user) in UP_COMPONENTS {
        let (cert, key) = sign_client_certificate(data_dir, up, user, &[])?;
        let pki = tls::Pki { admin_cert_pem: cert, admin_key_pem: key, ..up.kubeconfig_pki() };
        tls::write_kubeconfig(&data_dir.join(file), server_url, &pki)?;
    }
    Ok(())
}

/// A new client certificate and key (PEM) for `CN=<user>`, `O=` each of
/// `groups`, client auth, valid from a year ago for 10 years, signed by the
/// generated CA of `up` (its key in `<data_dir>/pki/ca.key`). Errors: the
/// CA key cannot be read, or signing fails.
fn sign_client_certificate(data_dir: &Path, up: &SecureUp, user: &str, groups: &[&str]) -> Result<(String, String), UpAuthError> {
    use rcgen::{CertificateParams, DnType, ExtendedKeyUsagePurpose, Issuer, KeyPair, KeyUsagePurpose};
    let key_path = data_dir.join("pki").join("ca.key");
    let ca_key_pem = std::fs::read_to_string(&key_path).map_err(|source| UpAuthError::File {
        what: "reading",
        path: key_path.display().to_string(),
        source,
    })?;
    let ca_key = KeyPair::from_pem(&ca_key_pem).map_err(TlsError::from)?;
    let issuer = Issuer::from_ca_cert_pem(&up.pki.ca_cert_pem, &ca_key).map_err(TlsError::from)?;
    let key = KeyPair::generate().map_err(TlsError::from)?;
    let mut params = CertificateParams::new(Vec::<String>::new()).map_err(TlsError::from)?;
    params.distinguished_name = rcgen::DistinguishedName::new();
    params.distinguished_name.push(DnType::CommonName, user);
    for group in groups {
        params.distinguished_name.push(DnType::OrganizationName, *group);
    }
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    params.use_authority_key_identifier_extension = true;
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - time::Duration::days(365);
    params.not_after = now + time::Duration::days(3650);
    let cert = params.signed_by(&key, &issuer).map_err(TlsError::from)?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// The user of the API server's kubelet client certificate: kubeadm's name, in
/// `system:masters`, so kubelets' SubjectAccessReviews allow it (upstream binds the same user
/// to `system:kubelet-api-admin` instead when it is not a master).
pub const KUBELET_CLIENT_USER: &str = "kube-apiserver-kubelet-client";

/// Writes `<data_dir>/pki/apiserver-kubelet-client.crt` and `.key` (`CN=`[`KUBELET_CLIENT_USER`],
/// `O=system:masters`, client auth, signed by the generated CA, valid 10 years) and returns the
/// kubelet client flags that use them, trusting the generated CA for kubelet serving
/// certificates (`rkube up --node` signs its kubelet's with it). Errors: the CA cannot be read or
/// a file cannot be written.
pub fn write_kubelet_client_cert(data_dir: &Path, up: &SecureUp) -> Result<crate::kubelet_client::KubeletClientArgs, UpAuthError> {
    let pki = data_dir.join("pki");
    let (cert, key) = sign_client_certificate(data_dir, up, KUBELET_CLIENT_USER, &["system:masters"])?;
    let (cert_path, key_file) = (pki.join("apiserver-kubelet-client.crt"), pki.join("apiserver-kubelet-client.key"));
    let write = |path: &Path, text: String| {
        std::fs::write(path, text).map_err(|source| UpAuthError::File { what: "writing", path: path.display().to_string(), source })
    };
    write(&cert_path, cert)?;
    write(&key_file, key)?;
    {
        use std::os::unix::fs::PermissionsExt as _;
        let _ = std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(0o600));
    }
    Ok(crate::kubelet_client::KubeletClientArgs {
        kubelet_client_certificate: Some(cert_path),
        kubelet_client_key: Some(key_file),
        kubelet_certificate_authority: Some(up.pki.ca_cert_path.clone()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filters::authz::AuthorizationMode;

    #[test]
    fn secure_up_serves_tls_without_anonymous_access_under_rbac() {
        let dir = tempfile::tempdir().unwrap();
        let up = secure_filter_args(dir.path(), &up_default_filter_args()).unwrap();
        let cfg = up.filters.load().unwrap();
        assert!(cfg.tls.is_some(), "HTTPS");
        assert_eq!(cfg.client_ca.as_ref().map(Vec::len), Some(1), "the generated CA only");
        assert!(!cfg.anonymous);
        assert_eq!(cfg.authorization_modes, vec![AuthorizationMode::Rbac]);
        assert!(cfg.tokens.is_none());
        // Restarting reuses the PKI.
        let again = secure_filter_args(dir.path(), &up_default_filter_args()).unwrap();
        assert_eq!(again.pki.ca_cert_pem, up.pki.ca_cert_pem);
    }

    #[test]
    fn client_ca_file_is_trusted_besides_the_generated_ca() {
        let dir = tempfile::tempdir().unwrap();
        let other = tempfile::tempdir().unwrap();
        let other_pki = tls::generate_self_signed(other.path()).unwrap();
        let tokens = dir.path().join("tokens.csv");
        std::fs::write(&tokens, "t1,alice,1\n").unwrap();
        let auth = FilterArgs {
            client_ca_file: Some(other_pki.ca_cert_path.clone()),
            token_auth_file: Some(tokens),
            ..up_default_filter_args()
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
        let auth = FilterArgs { client_ca_file: Some(empty), ..up_default_filter_args() };
        assert!(matches!(secure_filter_args(dir.path(), &auth), Err(UpAuthError::Tls(TlsError::NoCertificate(_)))));
        let missing = FilterArgs { client_ca_file: Some(dir.path().join("nope.crt")), ..up_default_filter_args() };
        assert!(matches!(secure_filter_args(dir.path(), &missing), Err(UpAuthError::File { .. })));
    }

    #[test]
    fn given_serving_certificate_replaces_the_generated_one_and_the_kubeconfig_trusts_its_last_certificate() {
        let dir = tempfile::tempdir().unwrap();
        let other = tempfile::tempdir().unwrap();
        let other_pki = tls::generate_self_signed(other.path()).unwrap();
        // A chain as kube-apiserver documents it: serving certificate, then its CA.
        let chain = other.path().join("chain.crt");
        let serving_pem = std::fs::read_to_string(&other_pki.serving_cert_path).unwrap();
        std::fs::write(&chain, format!("{serving_pem}{}", other_pki.ca_cert_pem)).unwrap();
        let flags = FilterArgs {
            tls_cert_file: Some(chain.clone()),
            tls_private_key_file: Some(other_pki.serving_key_path.clone()),
            audit_log_maxbackup: 3,
            max_requests_inflight: 7,
            ..up_default_filter_args()
        };
        let up = secure_filter_args(dir.path(), &flags).unwrap();
        assert_eq!(up.filters.tls_cert_file.as_deref(), Some(chain.as_path()));
        assert_eq!((up.filters.audit_log_maxbackup, up.filters.max_requests_inflight), (3, 7), "other flags kept");
        assert_eq!(up.server_ca_pem.trim(), other_pki.ca_cert_pem.trim());
        let kc = up.kubeconfig_pki();
        assert_eq!(kc.ca_cert_pem, up.server_ca_pem);
        assert_eq!(kc.admin_cert_pem, up.pki.admin_cert_pem, "still the generated admin credentials");
        assert!(up.filters.load().unwrap().tls.is_some());
        // Only the certificate: the kubeconfig trusts it.
        let alone = Some(other_pki.serving_cert_path.clone());
        let up = secure_filter_args(dir.path(), &FilterArgs { tls_cert_file: alone, ..flags.clone() }).unwrap();
        assert_eq!(up.server_ca_pem.trim(), serving_pem.trim());
        // Without the flags: the generated serving certificate and CA.
        let up = secure_filter_args(dir.path(), &up_default_filter_args()).unwrap();
        assert_eq!(up.filters.tls_cert_file.as_ref(), Some(&up.pki.serving_cert_path));
        assert_eq!(up.server_ca_pem, up.pki.ca_cert_pem);
    }

    #[test]
    fn component_kubeconfigs_authenticate_as_the_upstream_user_signed_by_the_up_ca() {
        let dir = tempfile::tempdir().unwrap();
        let up = secure_filter_args(dir.path(), &up_default_filter_args()).unwrap();
        write_component_kubeconfigs(dir.path(), "https://127.0.0.1:6443", &up).unwrap();
        for (file, user) in UP_COMPONENTS {
        let kc: serde_json::Value = serde_yaml::from_str(&std::fs::read_to_string(dir.path().join(file)).unwrap()).unwrap();
        assert_eq!(kc["clusters"][0]["cluster"]["server"], "https://127.0.0.1:6443");
        use base64::Engine as _;
        let pem = base64::engine::general_purpose::STANDARD
            .decode(kc["users"][0]["user"]["client-certificate-data"].as_str().unwrap())
            .unwrap();
        let (_, pem) = x509_parser::pem::parse_x509_pem(&pem).unwrap();
        let cert = pem.parse_x509().unwrap();
        let cn: Vec<&str> = cert.subject().iter_common_name().filter_map(|c| c.as_str().ok()).collect();
        assert_eq!(cn, vec![*user]);
        assert_eq!(cert.subject().iter_organization().count(), 0, "no groups");
        let ca_der = up.pki.ca_certs().unwrap();
        let (_, ca) = x509_parser::parse_x509_certificate(ca_der[0].as_ref()).unwrap();
        assert!(cert.verify_signature(Some(ca.public_key())).is_ok(), "signed by the up CA");
        }
        assert!(UP_COMPONENTS.iter().any(|(_, u)| *u == "system:kube-controller-manager"));
    }

    #[test]
    fn kubelet_client_certificate_is_a_master_signed_by_the_up_ca_and_trusts_it_for_kubelets() {
        let dir = tempfile::tempdir().unwrap();
        let up = secure_filter_args(dir.path(), &up_default_filter_args()).unwrap();
        let args = write_kubelet_client_cert(dir.path(), &up).unwrap();
        assert_eq!(args.kubelet_certificate_authority.as_ref(), Some(&up.pki.ca_cert_path));
        let pem = std::fs::read(args.kubelet_client_certificate.as_ref().unwrap()).unwrap();
        let (_, pem) = x509_parser::pem::parse_x509_pem(&pem).unwrap();
        let cert = pem.parse_x509().unwrap();
        let subject = crate::filters::x509::subject(&pem.contents).unwrap();
        assert_eq!(subject.common_name, KUBELET_CLIENT_USER);
        assert_eq!(subject.organizations, vec!["system:masters".to_string()]);
        let ca_der = up.pki.ca_certs().unwrap();
        let (_, ca) = x509_parser::parse_x509_certificate(ca_der[0].as_ref()).unwrap();
        assert!(cert.verify_signature(Some(ca.public_key())).is_ok(), "signed by the up CA");
        assert!(crate::kubelet_client::KubeletClient::from_args(&args).is_ok(), "the files load as a kubelet client");
    }

    #[test]
    fn insecure_keeps_operability_flags_and_drops_access_control() {
        let flags = FilterArgs {
            audit_log_path: Some("-".into()),
            request_trace_threshold: "1s".into(),
            ..up_default_filter_args()
        };
        let f = insecure_filter_args(&flags);
        assert_eq!(f.audit_log_path.as_deref(), Some("-"));
        assert_eq!(f.request_trace_threshold, "1s");
        assert!(f.anonymous_auth);
        assert_eq!(f.authorization_mode, vec!["AlwaysAllow".to_string()]);
    }
}
