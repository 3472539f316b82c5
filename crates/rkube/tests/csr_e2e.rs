//! CertificateSigningRequests on `rkube up`, seen through the real binary
//! and the real kubectl (1.27 and 1.33): `kubectl create -f` of a CSR made
//! in the test, `kubectl certificate approve` (403 for a user without
//! `approve` on `signers`), the signer issuing a certificate from the CA in
//! `<data-dir>/pki`, and that certificate authenticating as its common name
//! (403 naming the user, then allowed after a binding); `kubectl
//! certificate deny` leaves a CSR without a certificate.

use crate::common;

use std::time::{Duration, Instant};

use base64::Engine as _;
use common::{Backend, Cluster, Credentials};

const SIGNER: &str = "kubernetes.io/kube-apiserver-client";

/// A key and the CSR YAML for `name` asking for a client certificate of `cn`.
fn csr_yaml(name: &str, cn: &str) -> (rcgen::KeyPair, String) {
    let key = rcgen::KeyPair::generate().expect("key");
    let mut params = rcgen::CertificateParams::default();
    params.distinguished_name.push(rcgen::DnType::CommonName, cn);
    params.distinguished_name.push(rcgen::DnType::OrganizationName, "qa");
    let pem = params.serialize_request(&key).expect("csr").pem().expect("csr pem");
    let request = base64::engine::general_purpose::STANDARD.encode(pem);
    let yaml = format!(
        "apiVersion: certificates.k8s.io/v1\nkind: CertificateSigningRequest\nmetadata:\n  name: {name}\nspec:\n  request: {request}\n  signerName: {SIGNER}\n  expirationSeconds: 86400\n  usages:\n  - client auth\n"
    );
    (key, yaml)
}

/// The CSR's `status.certificate` (PEM) once the signer set it.
fn wait_for_certificate(kubectl: &common::Kubectl, name: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let csr = kubectl.json(&["get", "csr", name, "-o", "json"]);
        if let Some(b64) = csr.pointer("/status/certificate").and_then(serde_json::Value::as_str) {
            let pem = base64::engine::general_purpose::STANDARD.decode(b64).expect("base64 certificate");
            return String::from_utf8(pem).expect("PEM text");
        }
        assert!(Instant::now() < deadline, "no certificate for {name}: {csr}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn approved_csr_certificate_authenticates_as_its_common_name(version: &str) {
    let fixtures = tempfile::tempdir().expect("tempdir");
    let tokens = fixtures.path().join("tokens.csv");
    std::fs::write(&tokens, "dave-secret,dave,1002\n").expect("token file");
    let cluster = Cluster::builder(Backend::Embedded).arg(format!("--token-auth-file={}", tokens.display())).start();
    let admin = cluster.kubectl(version);

    let (key, yaml) = csr_yaml("erin", "erin");
    let file = cluster.write_file("csr.yaml", &yaml);
    let f = admin.ok(&["create", "-f", &file.display().to_string()]);
    assert_eq!(f.stdout.trim(), "certificatesigningrequest.certificates.k8s.io/erin created");
    let csr = admin.json(&["get", "csr", "erin", "-o", "json"]);
    assert_eq!(common::str_at(&csr, "/spec/username"), "rkube-admin", "the requester is the admin of the kubeconfig");

    // dave may write CSR approvals but may not approve for the signer.
    let role = "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: csr-approval-writer\nrules:\n- apiGroups: [certificates.k8s.io]\n  resources: [certificatesigningrequests, certificatesigningrequests/approval]\n  verbs: [get, list, update]\n";
    let role_file = cluster.write_file("role.yaml", role);
    admin.ok(&["apply", "-f", &role_file.display().to_string()]);
    admin.ok(&["create", "clusterrolebinding", "dave-approval", "--clusterrole=csr-approval-writer", "--user=dave"]);
    let dave = cluster.kubectl_with(version, &cluster.write_kubeconfig_for("dave", &Credentials::Token("dave-secret".into())));
    let f = dave.run(&["certificate", "approve", "erin"]);
    assert_eq!(f.code, Some(1), "{}", f.stdout);
    let want = format!(
        "certificatesigningrequests.certificates.k8s.io \"erin\" is forbidden: user not permitted to approve requests with signerName \"{SIGNER}\""
    );
    assert!(f.stderr.contains(&want), "{}", f.stderr);
    assert!(f.stderr.contains("Forbidden") || f.stderr.contains("forbidden"), "{}", f.stderr);

    let f = admin.ok(&["certificate", "approve", "erin"]);
    assert_eq!(f.stdout.trim(), "certificatesigningrequest.certificates.k8s.io/erin approved");
    let cert_pem = wait_for_certificate(&admin, "erin");
    let table = admin.ok(&["get", "csr", "erin"]);
    let header: Vec<&str> = table.stdout.lines().next().unwrap_or("").split_whitespace().collect();
    assert_eq!(header, ["NAME", "AGE", "SIGNERNAME", "REQUESTOR", "REQUESTEDDURATION", "CONDITION"], "{}", table.stdout);
    let cells: Vec<&str> = table.stdout.lines().nth(1).unwrap_or("").split_whitespace().collect();
    assert_eq!((cells[0], cells[2], cells[3], cells[4], cells[5]), ("erin", SIGNER, "rkube-admin", "24h", "Approved,Issued"), "{}", table.stdout);
    assert!(cert_pem.starts_with("-----BEGIN CERTIFICATE-----"), "{cert_pem}");

    let erin = cluster.kubectl_with(
        version,
        &cluster.write_kubeconfig_for("erin", &Credentials::Cert { cert_pem, key_pem: key.serialize_pem() }),
    );
    erin.fails_with(
        &["get", "pods"],
        r#"Error from server (Forbidden): pods is forbidden: User "erin" cannot list resource "pods" in API group "" in the namespace "default""#,
    );
    admin.ok(&["create", "rolebinding", "erin-view", "--clusterrole=view", "--user=erin", "-n", "default"]);
    let f = erin.ok(&["get", "pods"]);
    assert_eq!(f.stderr.trim(), "No resources found in default namespace.", "stdout: {}", f.stdout);
}

fn denied_csr_gets_no_certificate(version: &str) {
    let cluster = Cluster::start(Backend::Embedded);
    let admin = cluster.kubectl(version);
    let (_, yaml) = csr_yaml("frank", "frank");
    let file = cluster.write_file("csr.yaml", &yaml);
    admin.ok(&["create", "-f", &file.display().to_string()]);
    let f = admin.ok(&["certificate", "deny", "frank"]);
    assert_eq!(f.stdout.trim(), "certificatesigningrequest.certificates.k8s.io/frank denied");
    // A CSR approved after it, signed, shows the signer has looked since.
    let (_, yaml) = csr_yaml("grace", "grace");
    let file = cluster.write_file("csr2.yaml", &yaml);
    admin.ok(&["create", "-f", &file.display().to_string()]);
    admin.ok(&["certificate", "approve", "grace"]);
    wait_for_certificate(&admin, "grace");
    let csr = admin.json(&["get", "csr", "frank", "-o", "json"]);
    assert!(csr.pointer("/status/certificate").is_none(), "{csr}");
    assert_eq!(common::str_at(&csr, "/status/conditions/0/type"), "Denied");
    assert_eq!(common::str_at(&csr, "/status/conditions/0/reason"), "KubectlDeny");
    // Approving a denied CSR is refused by kubectl.
    let f = admin.run(&["certificate", "approve", "frank"]);
    assert_eq!(f.code, Some(1), "{}", f.stdout);
}

per_kubectl_version!(approved_csr_certificate_authenticates_as_its_common_name, denied_csr_gets_no_certificate);
