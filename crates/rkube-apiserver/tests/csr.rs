//! CertificateSigningRequests against the real API server (embedded store,
//! HTTPS, token and client-certificate authentication, RBAC from storage)
//! with the signer running on the server's CA: the requester recorded on
//! create, validation, the `approve` check of `/approval`, the `sign` check
//! of `/status`, what each write path may change, and an issued certificate
//! authenticating as its common name.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use rkube_apiserver::csr::signer::{Signer, DEFAULT_SIGNING_DURATION};
use rkube_apiserver::filters::metrics::ApiserverMetrics;
use rkube_apiserver::filters::rbac::{ensure_bootstrap_policy, RbacSource, StorageRbacSource};
use rkube_apiserver::filters::tls::{self, Pki};
use rkube_apiserver::filters::{FilterArgs, FilterChain};
use serde_json::{json, Value};
use tokio::sync::oneshot;

const TOKENS: &str = "admin-token,admin,1,\"system:masters\"\nalice-token,alice,2,\"dev\"\nbob-token,bob,3\n";
const CSRS: &str = "/apis/certificates.k8s.io/v1/certificatesigningrequests";
const CLIENT: &str = "kubernetes.io/kube-apiserver-client";

struct Server {
    base: String,
    pki: Pki,
    _dir: tempfile::TempDir,
    stop: Option<oneshot::Sender<()>>,
    _stop_signer: tokio::sync::watch::Sender<bool>,
}

struct Answer {
    code: u16,
    json: Value,
}

impl Server {
    async fn start() -> Server {
        let dir = tempfile::tempdir().unwrap();
        let storage: Arc<dyn rkube_storage::Storage> =
            Arc::new(rkube_storage::embedded::EmbeddedStorage::open(&dir.path().join("data")).unwrap());
        let st = rkube_apiserver::server::default_state(storage.clone());
        rkube_apiserver::bootstrap(&st).await.unwrap();
        ensure_bootstrap_policy(storage.as_ref(), "/registry").await.unwrap();
        let pki = tls::generate_self_signed(dir.path()).unwrap();
        let tokens = dir.path().join("tokens.csv");
        std::fs::write(&tokens, TOKENS).unwrap();
        let args = FilterArgs {
            tls_cert_file: Some(pki.serving_cert_path.clone()),
            tls_private_key_file: Some(pki.serving_key_path.clone()),
            client_ca_file: Some(pki.ca_cert_path.clone()),
            token_auth_file: Some(tokens),
            anonymous_auth: false,
            authorization_mode: vec!["RBAC".into()],
            ..FilterArgs::default()
        };
        let rbac: Arc<dyn RbacSource> = Arc::new(StorageRbacSource::new(storage.clone(), "/registry"));
        let chain = FilterChain::build(args.load().unwrap(), Some(rbac), Arc::new(ApiserverMetrics::new())).unwrap();
        let signer = Signer::load(&pki.ca_cert_path, &dir.path().join("pki/ca.key"), DEFAULT_SIGNING_DURATION).unwrap();
        let (stop_signer, signer_stopped) = tokio::sync::watch::channel(false);
        tokio::spawn(rkube_apiserver::csr::signer::run(signer, storage.clone(), "/registry".into(), signer_stopped));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("https://127.0.0.1:{}", listener.local_addr().unwrap().port());
        let (stop, stopped) = oneshot::channel::<()>();
        tokio::spawn(async move {
            rkube_apiserver::server::serve_api(listener, st, &chain, async {
                let _ = stopped.await;
            })
            .await
        });
        Server { base, pki, _dir: dir, stop: Some(stop), _stop_signer: stop_signer }
    }

    /// A client trusting the server's CA, optionally presenting a client certificate (PEMs).
    fn client(&self, identity: Option<(&str, &rcgen::KeyPair)>) -> reqwest::Client {
        let mut roots = rustls::RootCertStore::empty();
        for c in tls::load_certs(&self.pki.ca_cert_path).unwrap() {
            roots.add(c).unwrap();
        }
        let b = rustls::ClientConfig::builder_with_provider(tls::provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots);
        let cfg = match identity {
            None => b.with_no_client_auth(),
            Some((cert_pem, key)) => {
                let der = x509_parser::pem::Pem::iter_from_buffer(cert_pem.as_bytes()).next().unwrap().unwrap().contents;
                let key = rustls_pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into());
                b.with_client_auth_cert(vec![der.into()], key).unwrap()
            }
        };
        reqwest::Client::builder().use_preconfigured_tls(cfg).timeout(Duration::from_secs(20)).build().unwrap()
    }

    async fn send(&self, token: &str, method: &str, path: &str, body: Option<Value>) -> Answer {
        let mut rb = self.client(None).request(method.parse().unwrap(), format!("{}{path}", self.base)).bearer_auth(token);
        if let Some(b) = body {
            rb = rb.header("content-type", "application/json").body(b.to_string());
        }
        let resp = rb.send().await.unwrap();
        let code = resp.status().as_u16();
        let text = resp.text().await.unwrap();
        Answer { code, json: serde_json::from_str(&text).unwrap_or(Value::Null) }
    }

    async fn grant(&self, user: &str, name: &str, rules: Value) {
        let role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": name}, "rules": rules});
        assert_eq!(self.send("admin-token", "POST", "/apis/rbac.authorization.k8s.io/v1/clusterroles", Some(role)).await.code, 201);
        let binding = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": name},
            "subjects": [{"kind": "User", "name": user, "apiGroup": "rbac.authorization.k8s.io"}],
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name}});
        let r = self.send("admin-token", "POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", Some(binding)).await;
        assert_eq!(r.code, 201, "{}", r.json);
    }

    /// Waits for the CSR to get a certificate or a Failed condition.
    async fn settled(&self, name: &str) -> Value {
        for _ in 0..100 {
            let r = self.send("admin-token", "GET", &format!("{CSRS}/{name}"), None).await;
            let done = r.json.pointer("/status/certificate").is_some()
                || r.json.pointer("/status/conditions").and_then(Value::as_array).is_some_and(|c| c.iter().any(|c| c["type"] == "Failed"));
            if done {
                return r.json;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("csr {name} was not handled by the signer");
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

fn request(cn: &str) -> (String, rcgen::KeyPair) {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut p = rcgen::CertificateParams::default();
    p.distinguished_name.push(rcgen::DnType::CommonName, cn);
    p.distinguished_name.push(rcgen::DnType::OrganizationName, "testers");
    (p.serialize_request(&key).unwrap().pem().unwrap(), key)
}

fn csr(name: &str, pem: &str, usages: &[&str]) -> Value {
    json!({"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest", "metadata": {"name": name},
        "spec": {"request": base64::engine::general_purpose::STANDARD.encode(pem), "signerName": CLIENT, "usages": usages,
                 "username": "mallory", "groups": ["system:masters"]}})
}

fn with_condition(obj: &Value, t: &str) -> Value {
    let mut o = obj.clone();
    o["status"]["conditions"] = json!([{"type": t, "status": "True", "reason": "Test", "message": "by the test"}]);
    o
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn csrs_record_the_requester_need_approve_on_signers_and_issued_certificates_authenticate() {
    let s = Server::start().await;
    s.grant("alice", "csr-requester", json!([{"apiGroups": ["certificates.k8s.io"], "resources": ["certificatesigningrequests"], "verbs": ["create", "get"]}])).await;
    s.grant("bob", "csr-approval-writer", json!([{"apiGroups": ["certificates.k8s.io"], "resources": ["certificatesigningrequests", "certificatesigningrequests/approval", "certificatesigningrequests/status"], "verbs": ["get", "update", "patch"]}])).await;

    // Create: the requester is alice whatever the body says.
    let (pem, key) = request("carol");
    let created = s.send("alice-token", "POST", CSRS, Some(csr("carol", &pem, &["client auth", "digital signature"]))).await;
    assert_eq!(created.code, 201, "{}", created.json);
    assert_eq!(created.json["spec"]["username"], "alice");
    assert_eq!(created.json["spec"]["groups"], json!(["dev", "system:authenticated"]));
    assert_eq!(created.json["status"], json!({}));

    // Approval without `approve` on signers: 403 with upstream's message.
    let denied = s.send("bob-token", "PUT", &format!("{CSRS}/carol/approval"), Some(with_condition(&created.json, "Approved"))).await;
    assert_eq!(denied.code, 403, "{}", denied.json);
    assert_eq!(
        denied.json["message"],
        format!("certificatesigningrequests.certificates.k8s.io \"carol\" is forbidden: user not permitted to approve requests with signerName \"{CLIENT}\"")
    );
    // Signing through /status without `sign`: 403 too.
    let mut signed = created.json.clone();
    signed["status"]["certificate"] = json!(base64::engine::general_purpose::STANDARD.encode(s.pki.ca_cert_pem.as_bytes()));
    let r = s.send("bob-token", "PUT", &format!("{CSRS}/carol/status"), Some(signed)).await;
    assert_eq!(r.code, 403, "{}", r.json);
    assert!(r.json["message"].as_str().unwrap().ends_with(&format!("user not permitted to sign requests with signerName \"{CLIENT}\"")));
    // /status may not add an approval condition.
    let r = s.send("admin-token", "PUT", &format!("{CSRS}/carol/status"), Some(with_condition(&created.json, "Approved"))).await;
    assert_eq!(r.code, 422, "{}", r.json);
    assert!(r.json["message"].as_str().unwrap().contains("updates may not add a condition of type \"Approved\""), "{}", r.json);

    // With `approve` on `kubernetes.io/*` bob approves; the signer issues a certificate.
    s.grant("bob", "csr-approver", json!([{"apiGroups": ["certificates.k8s.io"], "resources": ["signers"], "resourceNames": ["kubernetes.io/*"], "verbs": ["approve"]}])).await;
    let ok = s.send("bob-token", "PUT", &format!("{CSRS}/carol/approval"), Some(with_condition(&created.json, "Approved"))).await;
    assert_eq!(ok.code, 200, "{}", ok.json);
    assert!(ok.json["status"]["conditions"][0]["lastUpdateTime"].is_string());
    let done = s.settled("carol").await;
    let cert = base64::engine::general_purpose::STANDARD.decode(done["status"]["certificate"].as_str().unwrap()).unwrap();
    let cert = String::from_utf8(cert).unwrap();
    assert!(cert.starts_with("-----BEGIN CERTIFICATE-----"), "{cert}");
    // Approved and Denied together are refused; removing Approved too.
    let both = {
        let mut o = done.clone();
        o["status"]["conditions"].as_array_mut().unwrap().push(json!({"type": "Denied", "status": "True"}));
        o
    };
    let r = s.send("admin-token", "PUT", &format!("{CSRS}/carol/approval"), Some(both)).await;
    assert_eq!(r.code, 422);
    assert!(r.json["message"].as_str().unwrap().contains("Approved and Denied conditions are mutually exclusive"), "{}", r.json);
    let mut removed = done.clone();
    removed["status"]["conditions"] = json!([]);
    let r = s.send("admin-token", "PUT", &format!("{CSRS}/carol/approval"), Some(removed)).await;
    assert_eq!(r.code, 422);
    assert!(r.json["message"].as_str().unwrap().contains("updates may not remove a condition of type \"Approved\""), "{}", r.json);

    // The certificate authenticates as carol: 403 naming her, then 200 after a binding.
    let carol = s.client(Some((&cert, &key)));
    let pods = format!("{}/api/v1/namespaces/default/pods", s.base);
    let r = carol.get(&pods).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 403);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["message"], "pods is forbidden: User \"carol\" cannot list resource \"pods\" in API group \"\" in the namespace \"default\"");
    s.grant("carol", "carol-pods", json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}])).await;
    let mut code = 0;
    for _ in 0..50 {
        code = carol.get(&pods).send().await.unwrap().status().as_u16();
        if code == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(code, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_csrs_are_refused_and_refused_usages_fail_with_signer_validation_failure() {
    let s = Server::start().await;
    let (pem, _) = request("dave");
    let mut bad = csr("bad", &pem, &["client auth"]);
    bad["spec"]["request"] = json!(base64::engine::general_purpose::STANDARD.encode("not a pem"));
    bad["spec"]["expirationSeconds"] = json!(60);
    bad["spec"]["usages"] = json!(["client auth", "flying"]);
    let r = s.send("admin-token", "POST", CSRS, Some(bad)).await;
    assert_eq!(r.code, 422, "{}", r.json);
    let causes: Vec<String> = r.json["details"]["causes"].as_array().unwrap().iter().map(|c| format!("{}: {}", c["field"].as_str().unwrap(), c["message"].as_str().unwrap())).collect();
    assert!(causes.contains(&"spec.request: Invalid value: \"<request data>\": PEM block type must be CERTIFICATE REQUEST".to_string()), "{causes:?}");
    assert!(causes.contains(&"spec.expirationSeconds: Invalid value: 60: may not specify a duration less than 600 seconds (10 minutes)".to_string()), "{causes:?}");
    assert!(causes.iter().any(|c| c.starts_with("spec.usages[1]: Unsupported value: \"flying\"")), "{causes:?}");

    // Server auth is not for the client signer: Failed, no certificate.
    let created = s.send("admin-token", "POST", CSRS, Some(csr("dave", &pem, &["server auth", "client auth"]))).await;
    assert_eq!(created.code, 201, "{}", created.json);
    let r = s.send("admin-token", "PUT", &format!("{CSRS}/dave/approval"), Some(with_condition(&created.json, "Approved"))).await;
    assert_eq!(r.code, 200, "{}", r.json);
    let done = s.settled("dave").await;
    let failed = done["status"]["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "Failed").unwrap().clone();
    assert_eq!((failed["reason"].as_str(), failed["message"].as_str()), (Some("SignerValidationFailure"), Some("invalid usage for client certificate: server auth")));
    assert!(done.pointer("/status/certificate").is_none());

    // The main resource keeps its spec: a changed username is ignored.
    let mut changed = done.clone();
    changed["spec"]["username"] = json!("mallory");
    changed["metadata"]["labels"] = json!({"x": "y"});
    let r = s.send("admin-token", "PUT", &format!("{CSRS}/dave"), Some(changed)).await;
    assert_eq!(r.code, 200, "{}", r.json);
    assert_eq!((r.json["spec"]["username"].as_str(), r.json["metadata"]["labels"]["x"].as_str()), (Some("admin"), Some("y")));
}
