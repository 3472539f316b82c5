use super::*;
use base64::Engine as _;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose, SanType};

const NOW: i64 = 1_800_000_000;

fn ca() -> (String, String) {
    let key = KeyPair::generate().unwrap();
    let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
    p.distinguished_name.push(DnType::CommonName, "test-ca");
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    p.not_before = time::OffsetDateTime::from_unix_timestamp(NOW - 3600).unwrap();
    p.not_after = time::OffsetDateTime::from_unix_timestamp(NOW + 3 * 365 * 86400).unwrap();
    (p.self_signed(&key).unwrap().pem(), key.serialize_pem())
}

fn request(cn: &str, orgs: &[&str], sans: Vec<SanType>) -> String {
    let key = KeyPair::generate().unwrap();
    let mut p = CertificateParams::default();
    p.distinguished_name.push(DnType::CommonName, cn);
    for o in orgs {
        p.distinguished_name.push(DnType::OrganizationName, *o);
    }
    p.subject_alt_names = sans;
    p.serialize_request(&key).unwrap().pem().unwrap()
}

fn csr(
    signer: &str,
    pem: &str,
    usages: &[&str],
    conditions: Value,
    expiration: Option<i64>,
) -> Value {
    let mut spec = json!({
        "signerName": signer,
        "request": base64::engine::general_purpose::STANDARD.encode(pem),
        "usages": usages,
    });
    if let Some(e) = expiration {
        spec["expirationSeconds"] = json!(e);
    }
    json!({"metadata": {"name": "c"}, "spec": spec, "status": {"conditions": conditions}})
}

fn approved() -> Value {
    json!([{"type": "Approved", "status": "True", "reason": "KubectlApprove"}])
}

fn issued(out: &Value) -> Vec<u8> {
    let b64 = out
        .pointer("/status/certificate")
        .and_then(Value::as_str)
        .expect("a certificate");
    let pem = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .unwrap();
    api_csr::check_certificate_pem(&pem).unwrap();
    x509_parser::pem::Pem::iter_from_buffer(&pem)
        .next()
        .unwrap()
        .unwrap()
        .contents
}

#[test]
fn an_approved_client_csr_gets_a_pem_certificate_for_its_subject_signed_by_the_ca() {
    let (ca_pem, ca_key) = ca();
    let signer = Signer::new(&ca_pem, &ca_key, DEFAULT_SIGNING_DURATION).unwrap();
    let req = request("alice", &["devs"], vec![]);
    let c = csr(
        KUBE_APISERVER_CLIENT,
        &req,
        &["client auth", "digital signature"],
        approved(),
        None,
    );
    let out = signer.handle(&c, NOW).expect("signed");
    let der = issued(&out);
    let (_, cert) = x509_parser::parse_x509_certificate(&der).unwrap();
    let cn: Vec<&str> = cert
        .subject()
        .iter_common_name()
        .filter_map(|a| a.as_str().ok())
        .collect();
    let o: Vec<&str> = cert
        .subject()
        .iter_organization()
        .filter_map(|a| a.as_str().ok())
        .collect();
    assert_eq!((cn, o), (vec!["alice"], vec!["devs"]));
    assert_eq!(
        cert.issuer()
            .iter_common_name()
            .next()
            .and_then(|a| a.as_str().ok()),
        Some("test-ca")
    );
    let eku = cert.extended_key_usage().unwrap().unwrap().value;
    assert!(eku.client_auth && !eku.server_auth);
    assert!(cert.key_usage().unwrap().unwrap().value.digital_signature());
    // Default duration (one year, 8h or longer): backdated 5 minutes at both ends.
    assert_eq!(cert.validity().not_before.timestamp(), NOW - 300);
    assert_eq!(
        cert.validity().not_after.timestamp(),
        NOW + 8760 * 3600 - 300
    );
    // The CA's key signed it.
    let ca_der = x509_parser::pem::Pem::iter_from_buffer(ca_pem.as_bytes())
        .next()
        .unwrap()
        .unwrap()
        .contents;
    let (_, ca_cert) = x509_parser::parse_x509_certificate(&ca_der).unwrap();
    cert.verify_signature(Some(ca_cert.public_key())).unwrap();
    // Already signed: nothing more to do.
    assert!(signer.handle(&out, NOW).is_none());
}

#[test]
fn expiration_seconds_shortens_the_lifetime_but_not_below_ten_minutes_nor_past_the_maximum() {
    let max = Duration::from_secs(24 * 3600);
    assert_eq!(lifetime(max, None), max);
    assert_eq!(lifetime(max, Some(3600)), Duration::from_secs(3600));
    assert_eq!(lifetime(max, Some(60)), Duration::from_secs(600));
    assert_eq!(lifetime(max, Some(48 * 3600)), max);
    let (ca_pem, ca_key) = ca();
    let signer = Signer::new(&ca_pem, &ca_key, max).unwrap();
    let req = request("bob", &[], vec![]);
    let c = csr(
        KUBE_APISERVER_CLIENT,
        &req,
        &["client auth"],
        approved(),
        Some(3600),
    );
    let der = issued(&signer.handle(&c, NOW).unwrap());
    let (_, cert) = x509_parser::parse_x509_certificate(&der).unwrap();
    // Short-lived (< 8h): the end is not backdated.
    assert_eq!(cert.validity().not_after.timestamp(), NOW + 3600);
    // Never past the CA's own notAfter.
    let long = Signer::new(&ca_pem, &ca_key, Duration::from_secs(10 * 365 * 86400)).unwrap();
    let der = issued(
        &long
            .handle(
                &csr(
                    KUBE_APISERVER_CLIENT,
                    &req,
                    &["client auth"],
                    approved(),
                    None,
                ),
                NOW,
            )
            .unwrap(),
    );
    let (_, cert) = x509_parser::parse_x509_certificate(&der).unwrap();
    assert_eq!(cert.validity().not_after.timestamp(), NOW + 3 * 365 * 86400);
}

fn failure(out: &Value) -> (String, String) {
    let c = api_csr::conditions(out)
        .iter()
        .find(|c| api_csr::condition_type(c) == "Failed")
        .expect("Failed");
    assert_eq!(c["status"], "True");
    (
        c["reason"].as_str().unwrap().to_string(),
        c["message"].as_str().unwrap().to_string(),
    )
}

#[test]
fn usages_a_signer_refuses_fail_the_csr_with_signer_validation_failure() {
    let (ca_pem, ca_key) = ca();
    let signer = Signer::new(&ca_pem, &ca_key, DEFAULT_SIGNING_DURATION).unwrap();
    let req = request("alice", &[], vec![]);
    let out = signer
        .handle(
            &csr(
                KUBE_APISERVER_CLIENT,
                &req,
                &["server auth", "client auth"],
                approved(),
                None,
            ),
            NOW,
        )
        .unwrap();
    assert_eq!(
        failure(&out),
        (
            "SignerValidationFailure".into(),
            "invalid usage for client certificate: server auth".into()
        )
    );
    assert!(out.pointer("/status/certificate").is_none());
    assert!(
        signer.handle(&out, NOW).is_none(),
        "a failed CSR is left alone"
    );
    let out = signer
        .handle(
            &csr(
                KUBE_APISERVER_CLIENT,
                &req,
                &["digital signature"],
                approved(),
                None,
            ),
            NOW,
        )
        .unwrap();
    assert_eq!(
        failure(&out).1,
        "missing required usage for client certificate: client auth"
    );
}

#[test]
fn kubelet_client_csrs_need_system_node_names_in_system_nodes_and_no_sans() {
    let usages = ["digital signature", "client auth"];
    let ok = request("system:node:n1", &["system:nodes"], vec![]);
    let der = api_csr::request_der(ok.as_bytes()).unwrap();
    let owned = |u: &[&str]| u.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(
        signer_usages_ok(&der, &owned(&usages), KUBE_APISERVER_CLIENT_KUBELET),
        Ok(())
    );
    let with_ke = owned(&["key encipherment", "digital signature", "client auth"]);
    assert_eq!(
        signer_usages_ok(&der, &with_ke, KUBE_APISERVER_CLIENT_KUBELET),
        Ok(())
    );
    assert_eq!(
        signer_usages_ok(
            &der,
            &owned(&["client auth"]),
            KUBE_APISERVER_CLIENT_KUBELET
        )
        .unwrap_err(),
        "usages did not match [client auth digital signature key encipherment]"
    );
    let cases = [
        (
            request("system:node:n1", &["devs"], vec![]),
            "subject organization is not system:nodes",
        ),
        (
            request("alice", &["system:nodes"], vec![]),
            "subject common name does not begin with system:node:",
        ),
        (
            request(
                "system:node:n1",
                &["system:nodes"],
                vec![SanType::DnsName("n1".try_into().unwrap())],
            ),
            "DNS subjectAltNames are not allowed",
        ),
    ];
    for (pem, want) in cases {
        let der = api_csr::request_der(pem.as_bytes()).unwrap();
        assert_eq!(
            signer_usages_ok(&der, &owned(&usages), KUBE_APISERVER_CLIENT_KUBELET).unwrap_err(),
            want
        );
    }
}

#[test]
fn kubelet_serving_csrs_need_system_node_names_dns_or_ip_sans_and_server_usages() {
    let owned = |u: &[&str]| u.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let usages = owned(&["digital signature", "server auth"]);
    let sans = || {
        vec![
            SanType::DnsName("n1".try_into().unwrap()),
            SanType::IpAddress([127, 0, 0, 1].into()),
        ]
    };
    let ok = request("system:node:n1", &["system:nodes"], sans());
    let der = api_csr::request_der(ok.as_bytes()).unwrap();
    assert_eq!(signer_usages_ok(&der, &usages, KUBELET_SERVING), Ok(()));
    let with_ke = owned(&["key encipherment", "digital signature", "server auth"]);
    assert_eq!(signer_usages_ok(&der, &with_ke, KUBELET_SERVING), Ok(()));
    assert_eq!(
        signer_usages_ok(
            &der,
            &owned(&["digital signature", "client auth"]),
            KUBELET_SERVING
        )
        .unwrap_err(),
        "usages did not match [digital signature key encipherment server auth]"
    );
    let cases = [
        (
            request("system:node:n1", &["devs"], sans()),
            "subject organization is not system:nodes",
        ),
        (
            request("system:node:n1", &["system:nodes"], vec![]),
            "DNS or IP subjectAltName is required",
        ),
        (
            request(
                "system:node:n1",
                &["system:nodes"],
                vec![
                    SanType::DnsName("n1".try_into().unwrap()),
                    SanType::Rfc822Name("a@b.c".try_into().unwrap()),
                ],
            ),
            "Email subjectAltNames are not allowed",
        ),
        (
            request("alice", &["system:nodes"], sans()),
            "subject common name does not begin with system:node:",
        ),
    ];
    for (pem, want) in cases {
        let der = api_csr::request_der(pem.as_bytes()).unwrap();
        assert_eq!(
            signer_usages_ok(&der, &usages, KUBELET_SERVING).unwrap_err(),
            want
        );
    }
    // Approved, it is signed with its names.
    let (ca_pem, ca_key) = ca();
    let signer = Signer::new(&ca_pem, &ca_key, DEFAULT_SIGNING_DURATION).unwrap();
    let out = signer
        .handle(
            &csr(
                KUBELET_SERVING,
                &ok,
                &["digital signature", "server auth"],
                approved(),
                None,
            ),
            NOW,
        )
        .expect("signed");
    let der = issued(&out);
    let (_, cert) = x509_parser::parse_x509_certificate(&der).unwrap();
    let san = cert
        .subject_alternative_name()
        .unwrap()
        .expect("SANs")
        .value;
    assert_eq!(san.general_names.len(), 2, "{san:?}");
}

#[test]
fn only_approved_undenied_csrs_of_its_signers_are_handled() {
    let (ca_pem, ca_key) = ca();
    let signer = Signer::new(&ca_pem, &ca_key, DEFAULT_SIGNING_DURATION).unwrap();
    let req = request("alice", &[], vec![]);
    let u = ["client auth"];
    assert!(
        signer
            .handle(&csr(KUBE_APISERVER_CLIENT, &req, &u, json!([]), None), NOW)
            .is_none(),
        "pending"
    );
    let denied = json!([{"type": "Denied", "status": "True"}]);
    assert!(
        signer
            .handle(&csr(KUBE_APISERVER_CLIENT, &req, &u, denied, None), NOW)
            .is_none(),
        "denied"
    );
    assert!(
        signer
            .handle(&csr("example.com/other", &req, &u, approved(), None), NOW)
            .is_none(),
        "another signer"
    );
}

#[test]
fn a_signing_ca_that_does_not_parse_is_an_error() {
    let (ca_pem, ca_key) = ca();
    assert!(Signer::new("nope", &ca_key, DEFAULT_SIGNING_DURATION).is_err());
    assert!(Signer::new(&ca_pem, "nope", DEFAULT_SIGNING_DURATION).is_err());
}
