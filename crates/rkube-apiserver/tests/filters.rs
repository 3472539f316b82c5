//! The filter chain end to end: a small fake API (no storage) behind
//! `rkube_apiserver::filters::apply`, served over real HTTPS on 127.0.0.1:0
//! with a self-signed PKI, driven by reqwest with tokens and client
//! certificates. Each test asserts what a client sees (code, headers, Status
//! body) or what an operator sees (audit file, /metrics, trace log).

use crate::log_support;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Router;
use log_support::{init_logging, logged, read_audit};
use rkube_apiserver::filters::authn::UserInfo;
use rkube_apiserver::filters::metrics::ApiserverMetrics;
use rkube_apiserver::filters::rbac::{bootstrap_policy, InMemoryRbac, RbacSource};
use rkube_apiserver::filters::requestinfo::RequestAttributes;
use rkube_apiserver::filters::tls::{self, Pki};
use rkube_apiserver::filters::{self, trace, FilterArgs, FilterChain};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::PrivateKeyDer;
use serde_json::{json, Value};
use tokio::sync::{oneshot, Notify};

// ---------------------------------------------------------------- fake API

/// The fake handler's shared state.
#[derive(Default)]
struct Fake {
    /// Requests for an object named `hold` wait for this.
    release: Notify,
    /// Requests for `hold` that have started.
    holding: std::sync::atomic::AtomicUsize,
}

/// Answers every request like a tiny API server: creates echo their body
/// with 201, watches stream two events, `slow` takes 400 ms, `hold` waits,
/// `boom` panics, everything else is a 200 JSON object naming the user.
async fn fake_api(State(fake): State<Arc<Fake>>, req: Request) -> Response {
    let a = RequestAttributes::new(req.method(), req.uri(), req.headers());
    let user = req.extensions().get::<UserInfo>().cloned().unwrap_or_default();
    match a.name.as_str() {
        "slow" => {
            trace::step("About to read from storage");
            tokio::time::sleep(Duration::from_millis(400)).await;
            trace::step_with("Read from storage done", vec![("count".into(), "1".into())]);
        }
        "hold" => {
            fake.holding.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            fake.release.notified().await;
        }
        "boom" => panic!("boom"),
        _ => {}
    }
    if a.verb == "watch" {
        let events = futures::stream::unfold(0, |i| async move {
            if i == 2 {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
            let line = format!("{{\"type\":\"ADDED\",\"object\":{{\"kind\":\"Pod\",\"metadata\":{{\"name\":\"p{i}\"}}}}}}\n");
            Some((Ok::<_, std::io::Error>(line), i + 1))
        });
        return Response::builder()
            .header("content-type", "application/json")
            .body(Body::from_stream(events))
            .unwrap_or_default();
    }
    if a.verb == "create" {
        let body = axum::body::to_bytes(req.into_body(), 1 << 20).await.unwrap_or_default();
        let mut obj: Value = serde_json::from_slice(&body).unwrap_or(json!({}));
        obj["metadata"]["uid"] = json!("uid-1");
        obj["metadata"]["resourceVersion"] = json!("7");
        return (StatusCode::CREATED, [("content-type", "application/json")], obj.to_string()).into_response();
    }
    let body = json!({"kind": "Fake", "user": user.username, "groups": user.groups, "verb": a.verb});
    ([("content-type", "application/json")], body.to_string()).into_response()
}

// ---------------------------------------------------------------- server

const TOKENS: &str = "admin-token,admin,1,\"system:masters\"\nalice-token,alice,2,\"dev\"\nbob-token,bob,3\nnode-token,system:node:n1,4,\"system:nodes\"\n";

const POLICY: &str = r#"apiVersion: audit.k8s.io/v1
kind: Policy
rules:
- level: None
  nonResourceURLs: ["/metrics", "/healthz*"]
- level: RequestResponse
  resources: [{group: "", resources: ["configmaps"]}]
- level: Request
  resources: [{group: "", resources: ["secrets"]}]
  omitStages: ["RequestReceived"]
- level: Metadata
"#;

/// RBAC objects: alice reads pods in `dev`; group `dev` reads pods in `dev`
/// too; plus upstream's bootstrap roles.
fn rbac() -> Arc<dyn RbacSource> {
    let r = InMemoryRbac::new();
    r.add_objects(&bootstrap_policy()).unwrap();
    r.add_objects(&[
        json!({"kind": "Role", "metadata": {"name": "pod-reader", "namespace": "dev"},
               "rules": [{"verbs": ["get", "list", "watch"], "apiGroups": [""], "resources": ["pods"]}]}),
        json!({"kind": "RoleBinding", "metadata": {"name": "alice-reads", "namespace": "dev"},
               "subjects": [{"kind": "User", "name": "alice", "apiGroup": "rbac.authorization.k8s.io"}],
               "roleRef": {"kind": "Role", "name": "pod-reader", "apiGroup": "rbac.authorization.k8s.io"}}),
        json!({"kind": "RoleBinding", "metadata": {"name": "dev-reads", "namespace": "dev"},
               "subjects": [{"kind": "Group", "name": "dev", "apiGroup": "rbac.authorization.k8s.io"}],
               "roleRef": {"kind": "Role", "name": "pod-reader", "apiGroup": "rbac.authorization.k8s.io"}}),
        json!({"kind": "ClusterRole", "metadata": {"name": "lease-writer"},
               "rules": [{"verbs": ["*"], "apiGroups": ["coordination.k8s.io"], "resources": ["leases"]}]}),
        json!({"kind": "ClusterRoleBinding", "metadata": {"name": "nodes-write-leases"},
               "subjects": [{"kind": "Group", "name": "system:nodes", "apiGroup": "rbac.authorization.k8s.io"}],
               "roleRef": {"kind": "ClusterRole", "name": "lease-writer", "apiGroup": "rbac.authorization.k8s.io"}}),
    ])
    .unwrap();
    Arc::new(r)
}

struct Server {
    base: String,
    pki: Pki,
    dir: tempfile::TempDir,
    chain: Arc<FilterChain>,
    fake: Arc<Fake>,
    stop: Option<oneshot::Sender<()>>,
    done: Option<tokio::task::JoinHandle<()>>,
}

impl Server {
    /// Starts the fake API behind the filters with kube-apiserver flags
    /// `extra` (on top of TLS, client CA, token file and RBAC).
    async fn start(extra: &[&str]) -> Server {
        init_logging();
        let dir = tempfile::tempdir().unwrap();
        let pki = tls::generate_self_signed(dir.path()).unwrap();
        let tokens = dir.path().join("tokens.csv");
        std::fs::write(&tokens, TOKENS).unwrap();
        let policy = dir.path().join("policy.yaml");
        std::fs::write(&policy, POLICY).unwrap();
        let mut argv: Vec<String> = vec![
            "test".into(),
            format!("--tls-cert-file={}", pki.serving_cert_path.display()),
            format!("--tls-private-key-file={}", pki.serving_key_path.display()),
            format!("--client-ca-file={}", pki.ca_cert_path.display()),
            format!("--token-auth-file={}", tokens.display()),
            "--authorization-mode=RBAC".into(),
            "--anonymous-auth=false".into(),
        ];
        for e in extra {
            argv.push(e.replace("{dir}", &dir.path().display().to_string()).replace("{policy}", &policy.display().to_string()));
        }
        #[derive(clap::Parser)]
        struct Cmd {
            #[command(flatten)]
            filters: FilterArgs,
        }
        let args = <Cmd as clap::Parser>::try_parse_from(&argv).unwrap().filters;
        let chain = Arc::new(FilterChain::build(args.load().unwrap(), Some(rbac()), Arc::new(ApiserverMetrics::new())).unwrap());
        let fake = Arc::new(Fake::default());
        let router = filters::apply(Router::new().fallback(fake_api).with_state(fake.clone()), &chain);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("https://127.0.0.1:{}", listener.local_addr().unwrap().port());
        let (stop, stopped) = oneshot::channel::<()>();
        let tls_cfg = chain.tls_server_config();
        let done = tokio::spawn(async move {
            filters::serve(listener, router, tls_cfg, async {
                let _ = stopped.await;
            })
            .await
            .unwrap();
        });
        Server { base, pki, dir, chain, fake, stop: Some(stop), done: Some(done) }
    }

    /// A client trusting the server's CA, presenting `cert` when given.
    fn client(&self, cert: Option<(&Path, &Path)>) -> reqwest::Client {
        let mut roots = rustls::RootCertStore::empty();
        for c in tls::load_certs(&self.pki.ca_cert_path).unwrap() {
            roots.add(c).unwrap();
        }
        let builder = rustls::ClientConfig::builder_with_provider(tls::provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots);
        let cfg = match cert {
            Some((c, k)) => builder
                .with_client_auth_cert(tls::load_certs(c).unwrap(), PrivateKeyDer::from_pem_file(k).unwrap())
                .unwrap(),
            None => builder.with_no_client_auth(),
        };
        reqwest::Client::builder().use_preconfigured_tls(cfg).timeout(Duration::from_secs(20)).build().unwrap()
    }

    async fn send(&self, client: &reqwest::Client, method: &str, path: &str, token: Option<&str>, body: Option<Value>) -> Answer {
        let mut rb = client.request(method.parse().unwrap(), format!("{}{path}", self.base));
        if let Some(t) = token {
            rb = rb.bearer_auth(t);
        }
        if let Some(b) = body {
            rb = rb.header("content-type", "application/json").body(b.to_string());
        }
        let resp = rb.send().await.unwrap();
        let code = resp.status().as_u16();
        let headers = resp.headers().clone();
        let text = resp.text().await.unwrap();
        let json = serde_json::from_str(&text).unwrap_or(Value::Null);
        Answer { code, headers, text, json }
    }

    /// A request with a bearer token and no client certificate.
    async fn as_token(&self, token: &str, method: &str, path: &str) -> Answer {
        self.send(&self.client(None), method, path, Some(token), None).await
    }

    async fn metrics_text(&self) -> String {
        self.as_token("admin-token", "GET", "/metrics").await.text
    }

    async fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        self.fake.release.notify_waiters();
        if let Some(d) = self.done.take() {
            let _ = tokio::time::timeout(Duration::from_secs(10), d).await;
        }
        self.chain.shutdown().await;
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        self.fake.release.notify_waiters();
    }
}

struct Answer {
    code: u16,
    headers: HeaderMap,
    text: String,
    json: Value,
}

/// A client certificate for `cn`/`o` signed by `ca_dir`'s CA (`pki/ca.crt`, `pki/ca.key`).
fn mint_client_cert(pki_dir: &Path, out: &Path, cn: &str, o: &str) -> (PathBuf, PathBuf) {
    let ca_key = rcgen::KeyPair::from_pem(&std::fs::read_to_string(pki_dir.join("ca.key")).unwrap()).unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.distinguished_name = rcgen::DistinguishedName::new();
    ca_params.distinguished_name.push(rcgen::DnType::CommonName, "rkube-ca");
    let issuer = rcgen::Issuer::new(ca_params, &ca_key);
    let key = rcgen::KeyPair::generate().unwrap();
    let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    p.distinguished_name = rcgen::DistinguishedName::new();
    p.distinguished_name.push(rcgen::DnType::OrganizationName, o);
    p.distinguished_name.push(rcgen::DnType::CommonName, cn);
    p.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    let cert = p.signed_by(&key, &issuer).unwrap();
    let (c, k) = (out.join(format!("{cn}.crt")), out.join(format!("{cn}.key")));
    std::fs::write(&c, cert.pem()).unwrap();
    std::fs::write(&k, key.serialize_pem()).unwrap();
    (c, k)
}

async fn eventually<F, Fut>(what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if f().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("timed out waiting for {what}");
}

// ---------------------------------------------------------------- tests

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_token_and_missing_credentials_are_401_unauthorized() {
    let s = Server::start(&[]).await;
    for token in [Some("wrong-token"), None] {
        let a = s.send(&s.client(None), "GET", "/api/v1/namespaces/dev/pods", token, None).await;
        assert_eq!(a.code, 401, "{}", a.text);
        assert_eq!(
            a.json,
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                   "message": "Unauthorized", "reason": "Unauthorized", "code": 401})
        );
    }
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unbound_user_gets_403_with_upstream_message() {
    let s = Server::start(&[]).await;
    let a = s.as_token("alice-token", "GET", "/api/v1/namespaces/default/pods").await;
    assert_eq!(a.code, 403, "{}", a.text);
    assert_eq!(
        a.json,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": "pods is forbidden: User \"alice\" cannot list resource \"pods\" in API group \"\" in the namespace \"default\"",
               "reason": "Forbidden", "details": {"kind": "pods"}, "code": 403})
    );
    let a = s.as_token("alice-token", "DELETE", "/api/v1/namespaces/dev/pods/web").await;
    assert_eq!(a.code, 403);
    assert_eq!(
        a.json["message"],
        "pods \"web\" is forbidden: User \"alice\" cannot delete resource \"pods\" in API group \"\" in the namespace \"dev\""
    );
    // The binding in dev does allow listing there.
    let a = s.as_token("alice-token", "GET", "/api/v1/namespaces/dev/pods").await;
    assert_eq!(a.code, 200, "{}", a.text);
    assert_eq!(a.json["user"], "alice");
    assert_eq!(a.json["groups"], json!(["dev", "system:authenticated"]));
    // Discovery is open to every authenticated user (bootstrap system:discovery).
    assert_eq!(s.as_token("bob-token", "GET", "/apis").await.code, 200);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn system_masters_are_allowed_everything() {
    let s = Server::start(&[]).await;
    for (method, path) in [("DELETE", "/api/v1/nodes/n1"), ("POST", "/apis/apps/v1/namespaces/x/deployments"), ("GET", "/metrics")] {
        let a = s.as_token("admin-token", method, path).await;
        assert!(a.code == 200 || a.code == 201, "{method} {path}: {} {}", a.code, a.text);
    }
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_certificates_authenticate_by_cn_and_o() {
    let s = Server::start(&[]).await;
    // The admin certificate of the generated PKI: CN=rkube-admin, O=system:masters.
    let admin = s.client(Some((&s.pki.admin_cert_path, &s.pki.admin_key_path)));
    let a = s.send(&admin, "DELETE", "/api/v1/nodes/n1", None, None).await;
    assert_eq!(a.code, 200, "{}", a.text);
    assert_eq!(a.json["user"], "rkube-admin");
    assert_eq!(a.json["groups"], json!(["system:masters", "system:authenticated"]));

    // A certificate for CN=carol, O=dev from the same CA: group dev may list pods in dev.
    let (c, k) = mint_client_cert(&s.dir.path().join("pki"), s.dir.path(), "carol", "dev");
    let carol = s.client(Some((&c, &k)));
    let a = s.send(&carol, "GET", "/api/v1/namespaces/dev/pods", None, None).await;
    assert_eq!(a.code, 200, "{}", a.text);
    assert_eq!(a.json["user"], "carol");
    let a = s.send(&carol, "GET", "/api/v1/namespaces/default/pods", None, None).await;
    assert_eq!(a.code, 403);
    assert!(a.json["message"].as_str().unwrap().contains("User \"carol\""));

    // A certificate from another CA is 401, not a failed handshake.
    let other = tempfile::tempdir().unwrap();
    tls::generate_self_signed(other.path()).unwrap();
    let (c, k) = mint_client_cert(&other.path().join("pki"), other.path(), "mallory", "system:masters");
    let a = s.send(&s.client(Some((&c, &k))), "GET", "/api/v1/nodes", None, None).await;
    assert_eq!(a.code, 401, "{}", a.text);
    s.stop().await;
}

fn events_of<'a>(events: &'a [Value], audit_id: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["auditID"] == audit_id).collect()
}

fn stages(evs: &[&Value]) -> Vec<String> {
    evs.iter().map(|e| e["stage"].as_str().unwrap_or("").to_string()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_log_records_each_request_at_its_policy_level() {
    let s = Server::start(&["--audit-log-path={dir}/audit/audit.log", "--audit-policy-file={policy}"]).await;
    let log = s.dir.path().join("audit/audit.log");
    let admin = s.client(None);

    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c1", "managedFields": [{"manager": "x"}]}, "data": {"k": "v"}});
    let created = s.send(&admin, "POST", "/api/v1/namespaces/default/configmaps", Some("admin-token"), Some(cm.clone())).await;
    assert_eq!(created.code, 201);
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s1"}});
    let sec = s.send(&admin, "POST", "/api/v1/namespaces/default/secrets", Some("admin-token"), Some(secret)).await;
    let metrics = s.as_token("admin-token", "GET", "/metrics").await;
    let denied = s.as_token("alice-token", "GET", "/api/v1/namespaces/default/pods").await;
    let watch = s.as_token("alice-token", "GET", "/api/v1/namespaces/dev/pods?watch=true").await;
    assert_eq!(watch.code, 200);
    assert_eq!(watch.text.lines().count(), 2, "{}", watch.text);
    let unauth = s.as_token("nope", "GET", "/api/v1/namespaces/dev/pods").await;
    let boom = s.as_token("admin-token", "GET", "/api/v1/namespaces/dev/pods/boom").await;
    assert_eq!(boom.code, 500);
    assert_eq!(boom.json["reason"], "InternalError");

    let id = |a: &Answer| a.headers.get("audit-id").and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
    for a in [&created, &sec, &metrics, &denied, &watch, &unauth, &boom] {
        assert_eq!(id(a).len(), 36, "every response has an Audit-Id: {:?}", a.headers);
    }
    let watch_id = id(&watch);
    eventually("all audit events", || {
        let log = log.clone();
        let watch_id = watch_id.clone();
        async move { read_audit(&log).iter().filter(|e| e["auditID"] == watch_id.as_str()).count() == 3 }
    })
    .await;
    s.chain.shutdown().await;
    let events = read_audit(&log);
    for e in &events {
        assert_eq!(e["kind"], "Event");
        assert_eq!(e["apiVersion"], "audit.k8s.io/v1");
        assert!(e["requestReceivedTimestamp"].as_str().unwrap().ends_with('Z'));
        assert_eq!(e["stageTimestamp"].as_str().unwrap().len(), "2024-01-01T00:00:00.000000Z".len());
    }

    // configmaps: RequestResponse, both stages, request and response objects.
    let cm_events = events_of(&events, &id(&created));
    assert_eq!(stages(&cm_events), ["RequestReceived", "ResponseComplete"]);
    let done = cm_events[1];
    assert_eq!(done["level"], "RequestResponse");
    assert_eq!(done["verb"], "create");
    assert_eq!(done["user"]["username"], "admin");
    assert_eq!(done["sourceIPs"], json!(["127.0.0.1"]));
    assert_eq!(done["objectRef"], json!({"resource": "configmaps", "namespace": "default", "name": "c1", "apiVersion": "v1"}));
    assert_eq!(done["responseStatus"], json!({"metadata": {}, "code": 201}));
    assert_eq!(done["requestObject"], cm);
    assert_eq!(done["responseObject"]["metadata"]["uid"], "uid-1");
    assert!(cm_events[0].get("requestObject").is_none());

    // secrets: Request level, RequestReceived omitted, no response object.
    let sec_events = events_of(&events, &id(&sec));
    assert_eq!(stages(&sec_events), ["ResponseComplete"]);
    assert_eq!(sec_events[0]["level"], "Request");
    assert_eq!(sec_events[0]["requestObject"]["kind"], "Secret");
    assert!(sec_events[0].get("responseObject").is_none());

    // /metrics: level None.
    assert!(events_of(&events, &id(&metrics)).is_empty());

    // Forbidden: Metadata level, the Status in responseStatus, the decision annotated.
    let d = events_of(&events, &id(&denied));
    assert_eq!(stages(&d), ["RequestReceived", "ResponseComplete"]);
    assert_eq!(d[1]["level"], "Metadata");
    assert_eq!(d[1]["responseStatus"]["code"], 403);
    assert_eq!(d[1]["responseStatus"]["reason"], "Forbidden");
    assert_eq!(d[1]["annotations"]["authorization.k8s.io/decision"], "forbid");
    assert!(d[1].get("requestObject").is_none() && d[1].get("responseObject").is_none());

    // Watch: RequestReceived, ResponseStarted, ResponseComplete.
    let w = events_of(&events, &watch_id);
    assert_eq!(stages(&w), ["RequestReceived", "ResponseStarted", "ResponseComplete"]);
    assert_eq!(w[2]["verb"], "watch");
    assert_eq!(w[2]["annotations"]["authorization.k8s.io/decision"], "allow");

    // Failed authentication: one ResponseStarted event with 401.
    let u = events_of(&events, &id(&unauth));
    assert_eq!(stages(&u), ["ResponseStarted"]);
    assert_eq!(u[0]["responseStatus"]["code"], 401);

    // Panic: a Panic stage event.
    let p = events_of(&events, &id(&boom));
    assert_eq!(stages(&p), ["RequestReceived", "Panic"]);
    assert_eq!(p[1]["responseStatus"]["code"], 500);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_audit_buffer_drops_events_and_counts_them() {
    let s = Server::start(&["--audit-log-path={dir}/audit.log", "--audit-policy-file={policy}", "--audit-log-batch-buffer-size=2"]).await;
    let auditor = s.chain.auditor().unwrap();
    let pause = auditor.backend.pause();
    let started = Instant::now();
    for _ in 0..6 {
        let a = s.as_token("alice-token", "GET", "/api/v1/namespaces/dev/pods").await;
        assert_eq!(a.code, 200, "requests are served while the log is stuck");
    }
    assert!(started.elapsed() < Duration::from_secs(5), "requests did not wait for the audit log");
    let dropped = s.chain.metrics().audit_error_count("log");
    assert!(dropped >= 6, "12 events, at most 3 buffered: {dropped} dropped");
    let text = s.metrics_text().await;
    assert!(text.contains(&format!("apiserver_audit_error_total{{plugin=\"log\"}} {}", s.chain.metrics().audit_error_count("log"))), "{text}");
    assert!(text.contains("apiserver_audit_event_total "), "{text}");
    drop(pause);
    s.chain.shutdown().await;
    let written = read_audit(&s.dir.path().join("audit.log")).len() as u64;
    assert_eq!(written + s.chain.metrics().audit_error_count("log"), s.chain.metrics().audit_event_count());
    s.stop().await;
}

/// Starts `n` reads of `hold` by alice, each keeping its in-flight slot (or
/// priority level seat) until `fake.release`, and returns once they all hold
/// one; each task gives its code.
async fn hold_read_slots(s: &Arc<Server>, n: usize) -> Vec<tokio::task::JoinHandle<u16>> {
    let held = (0..n)
        .map(|_| {
            let s = s.clone();
            tokio::spawn(async move { s.as_token("alice-token", "GET", "/api/v1/namespaces/dev/pods/hold").await.code })
        })
        .collect();
    let fake = s.fake.clone();
    eventually("the reads to hold their slots", || {
        let fake = fake.clone();
        async move { fake.holding.load(std::sync::atomic::Ordering::SeqCst) == n }
    })
    .await;
    held
}

/// Starts alice's read of `hold`, which keeps its in-flight slot until
/// `fake.release`, and returns once it holds it; the task gives its code.
async fn hold_a_read_slot(s: &Arc<Server>) -> tokio::task::JoinHandle<u16> {
    hold_read_slots(s, 1).await.remove(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inflight_limit_without_priority_and_fairness_answers_429_with_retry_after_at_once() {
    let s = Server::start(&["--max-requests-inflight=1", "--max-mutating-requests-inflight=1", "--enable-priority-and-fairness=false"]).await;
    let s = Arc::new(s);
    let held = hold_a_read_slot(&s).await;
    let a = s.as_token("alice-token", "GET", "/api/v1/namespaces/dev/pods").await;
    assert_eq!(a.code, 429, "{}", a.text);
    assert_eq!(a.headers.get("retry-after").and_then(|v| v.to_str().ok()), Some("1"));
    assert_eq!(a.json["reason"], "TooManyRequests");
    assert_eq!(a.json["details"]["retryAfterSeconds"], 1);
    // Watches are long-running: not limited.
    assert_eq!(s.as_token("alice-token", "GET", "/api/v1/namespaces/dev/pods?watch=1").await.code, 200);
    // Writes have their own pool.
    assert_eq!(s.as_token("admin-token", "POST", "/api/v1/namespaces/dev/configmaps").await.code, 201);
    // system:masters are never turned away.
    assert_eq!(s.as_token("admin-token", "GET", "/api/v1/namespaces/dev/pods").await.code, 200);
    let text = s.metrics_text().await;
    assert!(text.contains("apiserver_current_inflight_requests{request_kind=\"readOnly\"} 1"), "{text}");
    assert!(text.contains("apiserver_dropped_requests_total{request_kind=\"readOnly\"} 1"), "{text}");
    assert!(text.contains("code=\"429\",component=\"apiserver\",dry_run=\"\",group=\"\",resource=\"pods\",scope=\"namespace\",subresource=\"\",verb=\"LIST\",version=\"v1\"} 1"), "{text}");
    s.fake.release.notify_waiters();
    assert_eq!(held.await.unwrap(), 200);
    // The slot is free again.
    eventually("the slot to be released", || {
        let s = s.clone();
        async move { s.as_token("alice-token", "GET", "/api/v1/namespaces/dev/pods").await.code == 200 }
    })
    .await;
    if let Ok(s) = Arc::try_unwrap(s) {
        s.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inflight_limit_queues_a_request_until_a_slot_frees_and_429s_after_a_quarter_of_the_request_timeout() {
    // Priority and fairness (the default): a quarter of 4 s is a 1 s wait.
    let s = Arc::new(Server::start(&["--max-requests-inflight=1", "--request-timeout=4s"]).await);
    let held = hold_a_read_slot(&s).await;
    // Nobody frees the slot: the queued read is refused after its wait.
    let started = Instant::now();
    let a = s.as_token("alice-token", "GET", "/api/v1/namespaces/dev/pods").await;
    assert_eq!(a.code, 429, "{}", a.text);
    assert_eq!(a.json["reason"], "TooManyRequests");
    assert!(started.elapsed() >= Duration::from_millis(900), "answered after {:?}, before its wait ran out", started.elapsed());
    // A read queued behind the held one is served once the slot frees.
    let queued = {
        let s = s.clone();
        tokio::spawn(async move { s.as_token("alice-token", "GET", "/api/v1/namespaces/dev/pods").await.code })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!queued.is_finished(), "the second read waits for the slot");
    s.fake.release.notify_waiters();
    assert_eq!(held.await.unwrap(), 200);
    assert_eq!(queued.await.unwrap(), 200, "the queued read is served, not refused");
    let text = s.metrics_text().await;
    assert!(text.contains("apiserver_dropped_requests_total{request_kind=\"readOnly\"} 1"), "{text}");
    if let Ok(s) = Arc::try_unwrap(s) {
        s.stop().await;
    }
}

/// Installs upstream's bootstrap FlowSchemas and priority levels (with
/// `uid-<name>` UIDs) into the chain's priority and fairness classifier,
/// `edit` applied to them first; the real server's configuration
/// controller does the same from the watch cache.
fn install_bootstrap_flow_control(s: &Server, edit: impl FnOnce(&mut Vec<Value>, &mut Vec<Value>)) {
    let (mut schemas, mut levels) = rkube_apiserver::flowcontrol::bootstrap_objects();
    edit(&mut schemas, &mut levels);
    for o in schemas.iter_mut().chain(levels.iter_mut()) {
        let name = o["metadata"]["name"].as_str().unwrap().to_string();
        o["metadata"]["uid"] = json!(format!("uid-{name}"));
    }
    s.chain.flow_control().expect("priority and fairness is on").install(&schemas, &levels);
}

fn header<'a>(a: &'a Answer, name: &str) -> &'a str {
    a.headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or("")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn priority_levels_serve_node_leases_while_the_workload_level_is_full() {
    // 1 + 1 seats shared by the levels: each Limited level gets ceil(2 × shares / 245) = 1 seat;
    // global-default, workload-high and workload-low lend theirs (round(1 × 50 %, 50 %, 90 %)),
    // node-high (25 %) and system (33 %) keep theirs.
    let s = Arc::new(Server::start(&["--max-requests-inflight=1", "--max-mutating-requests-inflight=1", "--request-timeout=4s"]).await);
    install_bootstrap_flow_control(&s, |_, _| {});
    // alice (group dev) is global-default; her three held reads take every seat it may borrow.
    let held = hold_read_slots(&s, 3).await;
    let lease = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1";
    for method in ["PUT", "GET"] {
        let started = Instant::now();
        let a = s.as_token("node-token", method, lease).await;
        assert_eq!(a.code, 200, "{method}: {}", a.text);
        assert!(started.elapsed() < Duration::from_millis(900), "{method} waited {:?}", started.elapsed());
        assert_eq!(header(&a, "x-kubernetes-pf-flowschema-uid"), "uid-system-node-high");
        assert_eq!(header(&a, "x-kubernetes-pf-prioritylevel-uid"), "uid-node-high");
    }
    // Other requests of nodes are system-nodes / system (RBAC then denies this one).
    let a = s.as_token("node-token", "GET", "/api/v1/namespaces/default/pods").await;
    assert_eq!(header(&a, "x-kubernetes-pf-flowschema-uid"), "uid-system-nodes");
    assert_eq!(header(&a, "x-kubernetes-pf-prioritylevel-uid"), "uid-system");
    // Masters are exempt: served without a seat.
    let a = s.as_token("admin-token", "GET", "/api/v1/namespaces/dev/pods").await;
    assert_eq!(a.code, 200);
    assert_eq!(header(&a, "x-kubernetes-pf-prioritylevel-uid"), "uid-exempt");
    // Another global-default read waits a quarter of the request timeout in the queue, then 429.
    let started = Instant::now();
    let a = s.as_token("alice-token", "GET", "/api/v1/namespaces/dev/pods").await;
    assert_eq!(a.code, 429, "{}", a.text);
    assert!(started.elapsed() >= Duration::from_millis(900), "answered after {:?}", started.elapsed());
    assert_eq!(a.headers.get("retry-after").and_then(|v| v.to_str().ok()), Some("1"));
    assert_eq!(header(&a, "x-kubernetes-pf-flowschema-uid"), "uid-global-default");
    assert_eq!(s.chain.metrics().flowcontrol_rejected_count("global-default", "global-default", "time-out"), 1);
    let text = s.metrics_text().await;
    for line in [
        "apiserver_flowcontrol_dispatched_requests_total{flow_schema=\"system-node-high\",priority_level=\"node-high\"} 2",
        "apiserver_flowcontrol_rejected_requests_total{flow_schema=\"global-default\",priority_level=\"global-default\",reason=\"time-out\"} 1",
        "apiserver_flowcontrol_current_executing_requests{flow_schema=\"global-default\",priority_level=\"global-default\"} 3",
        "apiserver_flowcontrol_current_inqueue_requests{flow_schema=\"global-default\",priority_level=\"global-default\"} 0",
        "apiserver_flowcontrol_nominal_limit_seats{priority_level=\"node-high\"} 1",
    ] {
        assert!(text.contains(line), "missing {line:?} in:\n{text}");
    }
    s.fake.release.notify_waiters();
    for h in held {
        assert_eq!(h.await.unwrap(), 200);
    }
    if let Ok(s) = Arc::try_unwrap(s) {
        s.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reject_priority_level_answers_429_at_once_when_its_seats_are_taken() {
    let s = Arc::new(Server::start(&["--max-requests-inflight=1", "--max-mutating-requests-inflight=1", "--request-timeout=4s"]).await);
    install_bootstrap_flow_control(&s, |_, levels| {
        let gd = levels.iter_mut().find(|l| l["metadata"]["name"] == "global-default").unwrap();
        gd["spec"]["limited"]["limitResponse"] = json!({"type": "Reject"});
    });
    // Its own seat is lent; three reads take the lending pool.
    let held = hold_read_slots(&s, 3).await;
    let started = Instant::now();
    let a = s.as_token("alice-token", "GET", "/api/v1/namespaces/dev/pods").await;
    assert_eq!(a.code, 429, "{}", a.text);
    assert!(started.elapsed() < Duration::from_millis(900), "a Reject level does not queue: {:?}", started.elapsed());
    assert_eq!(a.json["reason"], "TooManyRequests");
    assert_eq!(header(&a, "x-kubernetes-pf-prioritylevel-uid"), "uid-global-default");
    assert_eq!(s.chain.metrics().flowcontrol_rejected_count("global-default", "global-default", "concurrency-limit"), 1);
    s.fake.release.notify_waiters();
    for h in held {
        assert_eq!(h.await.unwrap(), 200);
    }
    // The seats are free again.
    assert_eq!(s.as_token("alice-token", "GET", "/api/v1/namespaces/dev/pods").await.code, 200);
    if let Ok(s) = Arc::try_unwrap(s) {
        s.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_show_requests_with_upstream_labels() {
    let s = Server::start(&[]).await;
    for _ in 0..3 {
        assert_eq!(s.as_token("alice-token", "GET", "/api/v1/namespaces/dev/pods").await.code, 200);
    }
    assert_eq!(s.as_token("alice-token", "GET", "/api/v1/namespaces/default/pods").await.code, 403);
    assert_eq!(s.as_token("admin-token", "PATCH", "/apis/apps/v1/namespaces/dev/deployments/web?dryRun=All").await.code, 200);
    assert_eq!(s.as_token("alice-token", "GET", "/api/v1/namespaces/dev/pods?watch=true").await.code, 200);
    let a = s.as_token("admin-token", "GET", "/metrics").await;
    assert_eq!(a.headers.get("content-type").and_then(|v| v.to_str().ok()), Some("text/plain; version=0.0.4; charset=utf-8"));
    let text = a.text;
    for line in [
        "# TYPE apiserver_request_total counter",
        "apiserver_request_total{code=\"200\",component=\"apiserver\",dry_run=\"\",group=\"\",resource=\"pods\",scope=\"namespace\",subresource=\"\",verb=\"LIST\",version=\"v1\"} 3",
        "apiserver_request_total{code=\"403\",component=\"apiserver\",dry_run=\"\",group=\"\",resource=\"pods\",scope=\"namespace\",subresource=\"\",verb=\"LIST\",version=\"v1\"} 1",
        "apiserver_request_total{code=\"200\",component=\"apiserver\",dry_run=\"All\",group=\"apps\",resource=\"deployments\",scope=\"resource\",subresource=\"\",verb=\"PATCH\",version=\"v1\"} 1",
        "apiserver_request_total{code=\"200\",component=\"apiserver\",dry_run=\"\",group=\"\",resource=\"pods\",scope=\"namespace\",subresource=\"\",verb=\"WATCH\",version=\"v1\"} 1",
        "apiserver_request_duration_seconds_count{component=\"apiserver\",dry_run=\"\",group=\"\",resource=\"pods\",scope=\"namespace\",subresource=\"\",verb=\"LIST\",version=\"v1\"} 4",
        "apiserver_registered_watchers{group=\"\",kind=\"Pod\",version=\"v1\"} 0",
        "apiserver_longrunning_requests{component=\"apiserver\",group=\"\",resource=\"pods\",scope=\"namespace\",subresource=\"\",verb=\"WATCH\",version=\"v1\"} 0",
        "apiserver_current_inflight_requests{request_kind=\"mutating\"} 0",
        "# TYPE process_cpu_seconds_total counter",
    ] {
        assert!(text.contains(line), "missing {line:?} in:\n{text}");
    }
    for name in ["process_resident_memory_bytes ", "process_open_fds ", "process_start_time_seconds "] {
        assert!(text.contains(name), "missing {name}");
    }
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_request_logs_a_trace_with_its_slow_steps() {
    let s = Server::start(&["--request-trace-threshold=300ms"]).await;
    let a = s.as_token("admin-token", "GET", "/api/v1/namespaces/dev/configmaps/slow").await;
    assert_eq!(a.code, 200);
    let audit_id = a.headers.get("audit-id").unwrap().to_str().unwrap().to_string();
    let find = || {
        let text = logged();
        text.lines().skip_while(|l| !(l.contains("Trace[") && l.contains(&audit_id))).take(10).map(str::to_string).collect::<Vec<_>>()
    };
    eventually("the trace", || {
        let found = !find().is_empty();
        async move { found }
    })
    .await;
    let lines = find();
    let head = &lines[0];
    assert!(head.contains("\"Get\" accept:"), "{head}");
    assert!(head.contains("name:slow,resource:configmaps,scope:resource,url:/api/v1/namespaces/dev/configmaps/slow"), "{head}");
    assert!(head.contains("verb:GET"), "{head}");
    assert!(head.contains("(total time: "), "{head}");
    let id = head.split("Trace[").nth(1).unwrap().split(']').next().unwrap();
    let trace_lines: Vec<&String> = lines.iter().filter(|l| l.starts_with(&format!("Trace[{id}]: "))).collect();
    assert!(trace_lines.iter().any(|l| l.contains("---\"Read from storage done\" count:1 ")), "{lines:#?}");
    assert!(trace_lines.last().unwrap().ends_with("END"), "{lines:#?}");
    // A fast request logs nothing.
    let fast = s.as_token("admin-token", "GET", "/api/v1/namespaces/dev/configmaps/quick").await;
    let fast_id = fast.headers.get("audit-id").unwrap().to_str().unwrap().to_string();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!logged().contains(&fast_id));
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debug_flags_v_changes_verbosity_for_privileged_users_only() {
    let s = Server::start(&[]).await;
    let client = s.client(None);
    let put = |token: &'static str, body: &'static str| {
        let rb = client.put(format!("{}/debug/flags/v", s.base)).bearer_auth(token).body(body);
        async move {
            let r = rb.send().await.unwrap();
            (r.status().as_u16(), r.text().await.unwrap())
        }
    };
    let (code, text) = put("alice-token", "4").await;
    assert_eq!(code, 403);
    let status: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(status["message"], "forbidden: User \"alice\" cannot put path \"/debug/flags/v\"");
    assert_eq!(put("admin-token", "4").await, (200, "successfully set klog.logging.verbosity to 4\n".to_string()));
    assert_eq!(trace::verbosity(), 4);
    let (code, text) = put("admin-token", "loud").await;
    assert_eq!(code, 400);
    assert!(text.starts_with("failed set klog.logging.verbosity loud"), "{text}");
    assert_eq!(trace::verbosity(), 4);
    assert_eq!(put("admin-token", "0").await.0, 200);
    assert_eq!(trace::verbosity(), 0);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_timeout_answers_504_and_timeout_param_only_shortens_it() {
    let s = Server::start(&["--request-timeout=200ms"]).await;
    let a = s.as_token("admin-token", "GET", "/api/v1/namespaces/dev/configmaps/slow").await;
    assert_eq!(a.code, 504, "{}", a.text);
    assert_eq!(a.json["reason"], "Timeout");
    assert_eq!(a.json["message"], "Timeout: request did not complete within requested timeout - context deadline exceeded");
    let a = s.as_token("admin-token", "GET", "/api/v1/namespaces/dev/configmaps/quick?timeout=bogus").await;
    assert_eq!(a.code, 400);
    // Watches are not cut by the request timeout.
    assert_eq!(s.as_token("admin-token", "GET", "/api/v1/namespaces/dev/pods?watch=1").await.text.lines().count(), 2);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anonymous_requests_are_system_anonymous_when_enabled() {
    let s = Server::start(&["--anonymous-auth=true"]).await;
    let a = s.send(&s.client(None), "GET", "/healthz", None, None).await;
    assert_eq!(a.code, 200, "public-info-viewer lets anonymous read /healthz: {}", a.text);
    assert_eq!(a.json["user"], "system:anonymous");
    assert_eq!(a.json["groups"], json!(["system:unauthenticated"]));
    let a = s.send(&s.client(None), "GET", "/api/v1/pods", None, None).await;
    assert_eq!(a.code, 403);
    assert_eq!(
        a.json["message"],
        "pods is forbidden: User \"system:anonymous\" cannot list resource \"pods\" in API group \"\" at the cluster scope"
    );
    // A wrong token is still 401 with anonymous auth on.
    assert_eq!(s.as_token("wrong", "GET", "/healthz").await.code, 401);
    s.stop().await;
}
