//! `rkube up` is secure by default, seen through the real binary and the real
//! kubectl (1.27 and 1.33): HTTPS with the CA it generates in
//! `<data-dir>/pki` (reused on restart), the kubeconfig it writes
//! authenticates as an admin, bad credentials are 401 `Unauthorized`, users
//! of `--token-auth-file` and of client certificates from `--client-ca-file`
//! are 403 `Forbidden` (naming user, verb and resource) until RBAC bindings
//! made with kubectl allow them; `--insecure` serves plain HTTP with no
//! access control.

use crate::common;

use std::path::{Path, PathBuf};

use common::kubeconfig::HttpClient;
use common::{Backend, Cluster, Credentials, Stop};

/// A CA for test users (not rkube's), and client certificates it signs.
struct UserCa {
    params: rcgen::CertificateParams,
    key: rcgen::KeyPair,
    cert_pem: String,
}

impl UserCa {
    fn new(common_name: &str) -> UserCa {
        let key = rcgen::KeyPair::generate().expect("CA key");
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, common_name);
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::DigitalSignature,
        ];
        let cert_pem = params.self_signed(&key).expect("self-signed CA").pem();
        UserCa {
            params,
            key,
            cert_pem,
        }
    }

    /// A client certificate for `user` in `groups` (CN and O).
    fn client_cert(&self, user: &str, groups: &[&str]) -> Credentials {
        let key = rcgen::KeyPair::generate().expect("client key");
        let mut params =
            rcgen::CertificateParams::new(Vec::<String>::new()).expect("client params");
        params.distinguished_name = rcgen::DistinguishedName::new();
        for g in groups {
            params
                .distinguished_name
                .push(rcgen::DnType::OrganizationName, *g);
        }
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, user);
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        let issuer = rcgen::Issuer::new(self.params.clone(), &self.key);
        let cert = params
            .signed_by(&key, &issuer)
            .expect("sign client certificate");
        Credentials::Cert {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        }
    }

    fn write(&self, dir: &Path) -> PathBuf {
        let p = dir.join("users-ca.crt");
        std::fs::write(&p, &self.cert_pem).expect("write CA");
        p
    }
}

/// What kubectl prints for a 401 whose `Status` it decodes (message `Unauthorized`).
const UNAUTHORIZED: &str = "error: You must be logged in to the server (Unauthorized)";
/// What kubectl prints when discovery (its first request) gets a 401: client-go's
/// discovery client reports the generic 401 text, not the Status message, as
/// against kube-apiserver.
const UNAUTHORIZED_IN_DISCOVERY: &str =
    "error: You must be logged in to the server (the server has asked for the client to provide credentials)";

/// Asserts that `kubectl` is refused with 401 both in discovery (`get pods`)
/// and on a plain REST call (`get --raw`, where kubectl shows the Status message).
#[track_caller]
fn assert_kubectl_unauthorized(kubectl: &common::Kubectl) {
    let f = kubectl.run(&["get", "pods"]);
    assert_eq!(f.code, Some(1), "{}", f.stderr);
    assert_eq!(
        f.stderr.trim_end().lines().last(),
        Some(UNAUTHORIZED_IN_DISCOVERY),
        "{}",
        f.stderr
    );
    kubectl.fails_with(
        &["get", "--raw", "/api/v1/namespaces/default/pods"],
        UNAUTHORIZED,
    );
}

fn up_kubeconfig_authenticates_as_admin_over_https_and_pki_survives_restart(version: &str) {
    let mut cluster = Cluster::start(Backend::Embedded);
    let info = cluster.kubeconfig_info();
    assert!(
        info.server.starts_with("https://127.0.0.1:"),
        "{}",
        info.server
    );
    assert!(
        info.ca_pem
            .as_deref()
            .is_some_and(|c| c.contains("BEGIN CERTIFICATE")),
        "kubeconfig trusts a CA"
    );
    assert!(
        matches!(info.credentials, Credentials::Cert { .. }),
        "admin client certificate: {:?}",
        info.credentials
    );
    {
        use std::os::unix::fs::PermissionsExt;
        let written = cluster.data_dir().join("kubeconfig");
        let mode = std::fs::metadata(&written)
            .expect("<data-dir>/kubeconfig")
            .permissions()
            .mode();
        assert_eq!(
            mode & 0o777,
            0o600,
            "the kubeconfig holds the admin key: owner-only"
        );
    }
    for f in [
        "ca.crt",
        "ca.key",
        "apiserver.crt",
        "apiserver.key",
        "admin.crt",
        "admin.key",
    ] {
        assert!(
            cluster.pki_dir().join(f).is_file(),
            "{f} generated in <data-dir>/pki"
        );
    }

    let kubectl = cluster.kubectl(version);
    kubectl.ok(&["create", "namespace", "shop"]);
    kubectl.ok(&[
        "create",
        "configmap",
        "web",
        "-n",
        "shop",
        "--from-literal=a=1",
    ]);
    let ns = kubectl.json(&["get", "namespace", "shop"]);
    assert_eq!(common::str_at(&ns, "/metadata/name"), "shop");

    // Plain HTTP gets no answer from the HTTPS port.
    let plain = HttpClient::plain(cluster.port).get("/api/v1/namespaces");
    assert!(
        !matches!(plain, Ok((200, _))),
        "plain HTTP must not be served: {plain:?}"
    );
    // TLS without credentials: anonymous access is off, even for /readyz.
    for path in ["/api/v1/namespaces", "/readyz"] {
        let (code, body) = cluster
            .http_get_as(path, &Credentials::None)
            .expect("TLS GET");
        assert_eq!(code, 401, "{path}: {body}");
        assert!(body.contains("Unauthorized"), "{path}: {body}");
    }

    let ca_before = std::fs::read_to_string(cluster.pki_dir().join("ca.crt")).expect("ca.crt");
    cluster.stop(Stop::Term);
    cluster.restart();
    let ca_after = std::fs::read_to_string(cluster.pki_dir().join("ca.crt")).expect("ca.crt");
    assert_eq!(ca_before, ca_after, "the CA is reused on restart");
    let kubectl = cluster.kubectl(version);
    let cm = kubectl.json(&["get", "configmap", "web", "-n", "shop"]);
    assert_eq!(common::str_at(&cm, "/data/a"), "1");
}

fn wrong_token_or_untrusted_certificate_is_unauthorized(version: &str) {
    let cluster = Cluster::start(Backend::Embedded);
    let bad_token =
        cluster.write_kubeconfig_for("intruder", &Credentials::Token("not-a-token".into()));
    assert_kubectl_unauthorized(&cluster.kubectl_with(version, &bad_token));

    let stranger = UserCa::new("someone-else-ca").client_cert("mallory", &["system:masters"]);
    let untrusted = cluster.write_kubeconfig_for("mallory", &stranger);
    assert_kubectl_unauthorized(&cluster.kubectl_with(version, &untrusted));
    let (code, body) = cluster
        .http_get_as("/api/v1/pods", &stranger)
        .expect("TLS GET");
    assert_eq!(code, 401, "{body}");
    assert!(body.contains("\"reason\":\"Unauthorized\""), "{body}");
}

fn token_user_is_forbidden_until_a_role_binding_allows_it(version: &str) {
    let fixtures = tempfile::tempdir().expect("tempdir");
    let tokens = fixtures.path().join("tokens.csv");
    std::fs::write(&tokens, "alice-secret,alice,1001,\"dev\"\n").expect("token file");
    let cluster = Cluster::builder(Backend::Embedded)
        .arg(format!("--token-auth-file={}", tokens.display()))
        .start();
    let admin = cluster.kubectl(version);
    let alice = cluster.kubectl_with(
        version,
        &cluster.write_kubeconfig_for("alice", &Credentials::Token("alice-secret".into())),
    );

    alice.fails_with(
        &["get", "pods"],
        r#"Error from server (Forbidden): pods is forbidden: User "alice" cannot list resource "pods" in API group "" in the namespace "default""#,
    );

    admin.ok(&["run", "web", "--image=nginx"]);
    admin.ok(&[
        "create",
        "role",
        "pod-reader",
        "-n",
        "default",
        "--verb=get,list,watch",
        "--resource=pods",
    ]);
    admin.ok(&[
        "create",
        "rolebinding",
        "alice-reads-pods",
        "-n",
        "default",
        "--role=pod-reader",
        "--user=alice",
    ]);

    let names = alice.ok(&["get", "pods", "-o", "name"]);
    assert_eq!(names.stdout.trim(), "pod/web");
    // The binding grants reading pods in `default` only.
    alice.fails_with(
        &["delete", "pod", "web"],
        r#"Error from server (Forbidden): pods "web" is forbidden: User "alice" cannot delete resource "pods" in API group "" in the namespace "default""#,
    );
    alice.fails_with(
        &["get", "pods", "-n", "kube-system"],
        r#"Error from server (Forbidden): pods is forbidden: User "alice" cannot list resource "pods" in API group "" in the namespace "kube-system""#,
    );
    // A RoleBinding to a ClusterRole (the README's example) opens another namespace.
    admin.ok(&[
        "create",
        "rolebinding",
        "alice-view",
        "--clusterrole=view",
        "--user=alice",
        "-n",
        "kube-system",
    ]);
    let f = alice.ok(&["get", "pods", "-n", "kube-system"]);
    assert_eq!(
        f.stderr.trim(),
        "No resources found in kube-system namespace.",
        "stdout: {}",
        f.stdout
    );
}

fn client_certificate_user_is_forbidden_until_a_cluster_role_binding_allows_its_group(
    version: &str,
) {
    let fixtures = tempfile::tempdir().expect("tempdir");
    let users_ca = UserCa::new("test-users-ca");
    let ca_file = users_ca.write(fixtures.path());
    let cluster = Cluster::builder(Backend::Embedded)
        .arg(format!("--client-ca-file={}", ca_file.display()))
        .start();
    let admin = cluster.kubectl(version);
    let carol = cluster.kubectl_with(
        version,
        &cluster.write_kubeconfig_for("carol", &users_ca.client_cert("carol", &["qa"])),
    );

    carol.fails_with(
        &["get", "nodes"],
        r#"Error from server (Forbidden): nodes is forbidden: User "carol" cannot list resource "nodes" in API group "" at the cluster scope"#,
    );

    admin.ok(&[
        "create",
        "clusterrole",
        "node-reader",
        "--verb=get,list,watch",
        "--resource=nodes",
    ]);
    admin.ok(&[
        "create",
        "clusterrolebinding",
        "qa-reads-nodes",
        "--clusterrole=node-reader",
        "--group=qa",
    ]);

    let f = carol.ok(&["get", "nodes"]);
    assert_eq!(
        f.stderr.trim(),
        "No resources found",
        "stdout: {}",
        f.stdout
    );
    carol.fails_with(
        &["create", "namespace", "qa"],
        r#"Error from server (Forbidden): namespaces is forbidden: User "carol" cannot create resource "namespaces" in API group "" at the cluster scope"#,
    );
}

per_kubectl_version!(
    up_kubeconfig_authenticates_as_admin_over_https_and_pki_survives_restart,
    wrong_token_or_untrusted_certificate_is_unauthorized,
    token_user_is_forbidden_until_a_role_binding_allows_it,
    client_certificate_user_is_forbidden_until_a_cluster_role_binding_allows_its_group,
);

#[test]
fn insecure_up_serves_plain_http_on_loopback_without_access_control() {
    let cluster = Cluster::builder(Backend::Embedded).insecure().start();
    let info = cluster.kubeconfig_info();
    assert!(
        info.server.starts_with("http://127.0.0.1:"),
        "{}",
        info.server
    );
    assert_eq!(info.credentials, Credentials::None);
    assert!(!cluster.pki_dir().join("ca.crt").exists(), "no TLS PKI with --insecure");
    cluster.kubectl("1.33").ok(&["create", "namespace", "open"]);
    let (code, body) = HttpClient::plain(cluster.port)
        .get("/api/v1/namespaces/open")
        .expect("plain GET");
    assert_eq!(code, 200, "{body}");
}

/// A serving certificate for 127.0.0.1 signed by a test CA (not rkube's):
/// (chain PEM = leaf then CA, key PEM, leaf DER, CA PEM).
fn own_serving_certificate() -> (String, String, Vec<u8>, String) {
    let ca = UserCa::new("my-own-ca");
    let key = rcgen::KeyPair::generate().expect("serving key");
    let mut params =
        rcgen::CertificateParams::new(vec!["localhost".to_string()]).expect("serving params");
    params.subject_alt_names.push(rcgen::SanType::IpAddress(
        std::net::Ipv4Addr::LOCALHOST.into(),
    ));
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "my-own-apiserver");
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    let issuer = rcgen::Issuer::new(ca.params.clone(), &ca.key);
    let cert = params
        .signed_by(&key, &issuer)
        .expect("sign serving certificate");
    (
        format!("{}{}", cert.pem(), ca.cert_pem),
        key.serialize_pem(),
        cert.der().to_vec(),
        ca.cert_pem.clone(),
    )
}

/// The leaf certificate 127.0.0.1:`port` serves, verified against `ca_pem` only.
fn served_leaf_certificate(port: u16, ca_pem: &str) -> Vec<u8> {
    use rustls::pki_types::pem::PemObject as _;
    use std::io::Write as _;
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls::pki_types::CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(c.expect("CA PEM")).expect("CA");
    }
    let config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("TLS versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    let name = rustls::pki_types::ServerName::IpAddress(
        std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST).into(),
    );
    let mut conn = rustls::ClientConnection::new(std::sync::Arc::new(config), name).expect("TLS");
    let mut tcp =
        std::net::TcpStream::connect((std::net::Ipv4Addr::LOCALHOST, port)).expect("connect");
    tcp.set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .expect("timeout");
    while conn.is_handshaking() {
        conn.complete_io(&mut tcp)
            .expect("TLS handshake verified against the given CA");
    }
    let _ = tcp.flush();
    conn.peer_certificates()
        .and_then(|c| c.first())
        .map(|c| c.to_vec())
        .expect("a served certificate")
}

#[test]
fn up_serves_the_given_tls_certificate_and_its_kubeconfig_trusts_the_chains_ca() {
    let fixtures = tempfile::tempdir().expect("tempdir");
    let (chain_pem, key_pem, leaf_der, ca_pem) = own_serving_certificate();
    let cert_file = fixtures.path().join("serving.crt");
    let key_file = fixtures.path().join("serving.key");
    std::fs::write(&cert_file, &chain_pem).expect("write cert");
    std::fs::write(&key_file, &key_pem).expect("write key");
    let cluster = Cluster::builder(Backend::Embedded)
        .arg(format!("--tls-cert-file={}", cert_file.display()))
        .arg(format!("--tls-private-key-file={}", key_file.display()))
        .start();

    let info = cluster.kubeconfig_info();
    assert!(
        info.server.starts_with("https://127.0.0.1:"),
        "{}",
        info.server
    );
    assert_eq!(
        info.ca_pem.as_deref().map(str::trim),
        Some(ca_pem.trim()),
        "the kubeconfig trusts the last certificate of --tls-cert-file"
    );
    assert!(
        matches!(info.credentials, Credentials::Cert { .. }),
        "still the generated admin certificate: {:?}",
        info.credentials
    );
    assert_eq!(
        served_leaf_certificate(cluster.port, &ca_pem),
        leaf_der,
        "the server presents the given certificate"
    );

    let kubectl = cluster.kubectl("1.33");
    kubectl.ok(&["create", "namespace", "own-cert"]);
    let ns = kubectl.json(&["get", "namespace", "own-cert"]);
    assert_eq!(common::str_at(&ns, "/metadata/name"), "own-cert");
}

#[test]
fn up_audit_log_records_kubectl_get_pods_at_the_policys_metadata_level() {
    let fixtures = tempfile::tempdir().expect("tempdir");
    let log = fixtures.path().join("audit.log");
    let policy = fixtures.path().join("policy.yaml");
    std::fs::write(
        &policy,
        "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n",
    )
    .expect("write policy");
    let cluster = Cluster::builder(Backend::Embedded)
        .arg(format!("--audit-log-path={}", log.display()))
        .arg(format!("--audit-policy-file={}", policy.display()))
        .arg("--audit-log-maxbackup=2")
        .start();
    cluster.kubectl("1.33").ok(&["get", "pods"]);

    // kubectl's request (the controllers `rkube up` runs also list pods, in
    // every namespace).
    let is_get_pods = |e: &serde_json::Value| {
        e["stage"] == "ResponseComplete"
            && e["verb"] == "list"
            && e["objectRef"]["resource"] == "pods"
            && e["user"]["username"] == "rkube-admin"
            && e["requestURI"].as_str().is_some_and(|u| u.starts_with("/api/v1/namespaces/default/pods"))
    };
    // The writer is asynchronous (a bounded buffer): give it a moment.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let event = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let found = text
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find(|e| is_get_pods(e));
        if let Some(e) = found {
            break e;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no ResponseComplete list pods event by rkube-admin in {}:\n{text}",
            log.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert_eq!(event["apiVersion"], "audit.k8s.io/v1", "{event}");
    assert_eq!(event["kind"], "Event", "{event}");
    assert_eq!(event["level"], "Metadata", "{event}");
    assert_eq!(event["objectRef"]["namespace"], "default", "{event}");
    assert_eq!(event["responseStatus"]["code"], 200, "{event}");
    assert!(
        event.get("responseObject").is_none() && event.get("requestObject").is_none(),
        "Metadata level logs no bodies: {event}"
    );
}
