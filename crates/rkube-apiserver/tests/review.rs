//! The review APIs (authentication.k8s.io/v1 TokenReview and
//! SelfSubjectReview; authorization.k8s.io/v1 SubjectAccessReview,
//! LocalSubjectAccessReview, SelfSubjectAccessReview, SelfSubjectRulesReview)
//! against the real API server over HTTPS with `--token-auth-file` and
//! `--authorization-mode=RBAC` reading roles from storage: answers are 201
//! with `status` filled, never stored, and follow RBAC, impersonation and
//! upstream's validation.

use std::sync::Arc;
use std::time::Duration;

use rkube_apiserver::filters::metrics::ApiserverMetrics;
use rkube_apiserver::filters::rbac::{ensure_bootstrap_policy, RbacSource, StorageRbacSource};
use rkube_apiserver::filters::tls;
use rkube_apiserver::filters::{FilterArgs, FilterChain};
use rkube_storage::{RangeRequest, Storage};
use serde_json::{json, Value};
use tokio::sync::oneshot;

const TOKENS: &str = "admin-token,admin,1,\"system:masters\"\nalice-token,alice,2,\"dev\"\nbob-token,bob,3\n";
const RBAC: &str = "rbac.authorization.k8s.io";
const AUTHN: &str = "/apis/authentication.k8s.io/v1";
const AUTHZ: &str = "/apis/authorization.k8s.io/v1";

struct Server {
    base: String,
    storage: Arc<dyn Storage>,
    client: reqwest::Client,
    stop: Option<oneshot::Sender<()>>,
    _dir: tempfile::TempDir,
}

struct Answer {
    code: u16,
    json: Value,
}

impl Server {
    async fn start() -> Server {
        let dir = tempfile::tempdir().unwrap();
        let storage: Arc<dyn Storage> =
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
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("https://127.0.0.1:{}", listener.local_addr().unwrap().port());
        let (stop, stopped) = oneshot::channel::<()>();
        tokio::spawn(async move {
            rkube_apiserver::server::serve_api(listener, st, &chain, async {
                let _ = stopped.await;
            })
            .await
        });
        let mut roots = rustls::RootCertStore::empty();
        for c in tls::load_certs(&pki.ca_cert_path).unwrap() {
            roots.add(c).unwrap();
        }
        let cfg = rustls::ClientConfig::builder_with_provider(tls::provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let client = reqwest::Client::builder().use_preconfigured_tls(cfg).timeout(Duration::from_secs(20)).build().unwrap();
        Server { base, storage, client, stop: Some(stop), _dir: dir }
    }

    async fn send(&self, token: &str, method: &str, path: &str, headers: &[(&str, &str)], body: Option<Value>) -> Answer {
        let mut rb = self.client.request(method.parse().unwrap(), format!("{}{path}", self.base)).bearer_auth(token);
        for (k, v) in headers {
            rb = rb.header(*k, *v);
        }
        if let Some(b) = body {
            rb = rb.header("content-type", "application/json").body(b.to_string());
        }
        let resp = rb.send().await.unwrap();
        let code = resp.status().as_u16();
        let text = resp.text().await.unwrap();
        Answer { code, json: serde_json::from_str(&text).unwrap_or(Value::Null) }
    }

    async fn post(&self, token: &str, path: &str, body: Value) -> Answer {
        self.send(token, "POST", path, &[], Some(body)).await
    }

    /// Keys under `/registry/` whose path names a review resource.
    async fn review_keys(&self) -> Vec<String> {
        let all = self.storage.range(RangeRequest::prefix("/registry/")).await.unwrap();
        all.kvs.into_iter().map(|kv| kv.key).filter(|k| k.contains("review")).collect()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

fn sar(user: &str, groups: &[&str], attrs: Value) -> Value {
    json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
           "spec": {"user": user, "groups": groups, "resourceAttributes": attrs}})
}

/// alice may get and list pods in `default` (Role + RoleBinding made by admin).
async fn grant_alice_pods(s: &Server) {
    let role = json!({"apiVersion": format!("{RBAC}/v1"), "kind": "Role", "metadata": {"name": "pod-reader", "namespace": "default"},
                      "rules": [{"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods"]}]});
    assert_eq!(s.post("admin-token", "/apis/rbac.authorization.k8s.io/v1/namespaces/default/roles", role).await.code, 201);
    let rb = json!({"apiVersion": format!("{RBAC}/v1"), "kind": "RoleBinding", "metadata": {"name": "alice-reads", "namespace": "default"},
                    "subjects": [{"kind": "User", "name": "alice", "apiGroup": RBAC}],
                    "roleRef": {"kind": "Role", "name": "pod-reader", "apiGroup": RBAC}});
    assert_eq!(s.post("admin-token", "/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings", rb).await.code, 201);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn self_subject_review_answers_201_with_the_requester_and_stores_nothing() {
    let s = Server::start().await;
    let body = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"});
    let r = s.post("alice-token", &format!("{AUTHN}/selfsubjectreviews"), body.clone()).await;
    assert_eq!(r.code, 201, "{}", r.json);
    assert_eq!(r.json["kind"], "SelfSubjectReview");
    assert_eq!(r.json["status"]["userInfo"], json!({"username": "alice", "uid": "2", "groups": ["dev", "system:authenticated"]}));
    let r = s.post("bob-token", &format!("{AUTHN}/selfsubjectreviews?dryRun=All"), body).await;
    assert_eq!(r.code, 201, "{}", r.json);
    assert_eq!(r.json["status"]["userInfo"]["username"], "bob");
    // Impersonated (admin may impersonate anyone): the review shows the target.
    let r = s
        .send("admin-token", "POST", &format!("{AUTHN}/selfsubjectreviews"), &[("Impersonate-User", "carol"), ("Impersonate-Group", "qa")],
              Some(json!({"kind": "SelfSubjectReview", "apiVersion": "authentication.k8s.io/v1"})))
        .await;
    assert_eq!(r.json["status"]["userInfo"], json!({"username": "carol", "groups": ["qa", "system:authenticated"]}));
    // Create only: no GET or LIST, nothing in storage.
    let r = s.send("admin-token", "GET", &format!("{AUTHN}/selfsubjectreviews"), &[], None).await;
    assert_eq!((r.code, r.json["reason"].as_str()), (405, Some("MethodNotAllowed")), "{}", r.json);
    assert_eq!(s.review_keys().await, Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_review_authenticates_the_token_in_the_spec() {
    let s = Server::start().await;
    let path = format!("{AUTHN}/tokenreviews");
    let review = |token: &str| json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}});
    let r = s.post("admin-token", &path, review("alice-token")).await;
    assert_eq!(r.code, 201, "{}", r.json);
    assert_eq!(r.json["spec"]["token"], "alice-token");
    assert_eq!(
        r.json["status"],
        json!({"authenticated": true, "user": {"username": "alice", "uid": "2", "groups": ["dev", "system:authenticated"]}})
    );
    let r = s.post("admin-token", &path, review("not-a-token")).await;
    assert_eq!(r.code, 201, "{}", r.json);
    assert_eq!(r.json["status"], json!({"user": {}, "error": "invalid bearer token"}));
    // Static tokens are audience-agnostic and rkube has no API audiences:
    // a review naming audiences does not authenticate them.
    let mut with_audiences = review("alice-token");
    with_audiences["spec"]["audiences"] = json!(["https://example.com"]);
    let r = s.post("admin-token", &path, with_audiences).await;
    assert_eq!(r.json["status"], json!({"user": {}, "error": "invalid bearer token"}));
    let r = s.post("admin-token", &path, review("")).await;
    assert_eq!(r.code, 400, "{}", r.json);
    assert_eq!(r.json["message"], "token is required for TokenReview in authentication");
    // Creating a TokenReview needs RBAC's create on tokenreviews.
    let r = s.post("alice-token", &path, review("bob-token")).await;
    assert_eq!(r.code, 403, "{}", r.json);
    assert_eq!(
        r.json["message"],
        "tokenreviews.authentication.k8s.io is forbidden: User \"alice\" cannot create resource \"tokenreviews\" in API group \"authentication.k8s.io\" at the cluster scope"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subject_access_reviews_follow_rbac_for_the_user_in_the_spec() {
    let s = Server::start().await;
    grant_alice_pods(&s).await;
    let path = format!("{AUTHZ}/subjectaccessreviews");
    let r = s.post("admin-token", &path, sar("alice", &[], json!({"verb": "list", "resource": "pods", "namespace": "default"}))).await;
    assert_eq!(r.code, 201, "{}", r.json);
    assert_eq!(
        r.json["status"],
        json!({"allowed": true, "reason": "RBAC: allowed by RoleBinding \"alice-reads\" of Role \"pod-reader\" to User \"alice\" in namespace \"default\""})
    );
    // Not granted: not allowed, and not denied either (RBAC has no opinion).
    let r = s.post("admin-token", &path, sar("alice", &[], json!({"verb": "delete", "resource": "pods", "namespace": "default"}))).await;
    assert_eq!(r.json["status"], json!({"allowed": false}));
    // Groups count; spec users get no system:authenticated.
    let r = s.post("admin-token", &path, json!({"kind": "SubjectAccessReview", "apiVersion": "authorization.k8s.io/v1",
        "spec": {"user": "x", "nonResourceAttributes": {"path": "/api", "verb": "get"}}})).await;
    assert_eq!(r.json["status"]["allowed"], false);
    let r = s.post("admin-token", &path, json!({"kind": "SubjectAccessReview", "apiVersion": "authorization.k8s.io/v1",
        "spec": {"groups": ["system:authenticated"], "nonResourceAttributes": {"path": "/api", "verb": "get"}}})).await;
    assert_eq!(r.json["status"]["allowed"], true, "{}", r.json);
    // Validation as upstream.
    let r = s.post("admin-token", &path, json!({"kind": "SubjectAccessReview", "apiVersion": "authorization.k8s.io/v1", "spec": {}})).await;
    assert_eq!((r.code, r.json["reason"].as_str()), (422, Some("Invalid")), "{}", r.json);
    assert_eq!(
        r.json["message"],
        "SubjectAccessReview.authorization.k8s.io \"\" is invalid: [spec.resourceAttributes: Invalid value: \"null\": exactly one of nonResourceAttributes or resourceAttributes must be specified, spec.user: Invalid value: \"\": at least one of user or group must be specified]"
    );
    let r = s.post("admin-token", &path, json!({"kind": "SubjectAccessReview", "apiVersion": "authorization.k8s.io/v1",
        "spec": {"user": "alice", "resourceAttributes": {"verb": "get", "resource": "pods"}, "bogus": 1}})).await;
    assert_eq!(r.code, 201, "{}", r.json);
    // Local reviews: the path namespace must be the attributes' namespace.
    let local = |ns: &str| json!({"kind": "LocalSubjectAccessReview", "apiVersion": "authorization.k8s.io/v1",
        "spec": {"user": "alice", "resourceAttributes": {"verb": "get", "resource": "pods", "namespace": ns}}});
    let r = s.post("admin-token", &format!("{AUTHZ}/namespaces/default/localsubjectaccessreviews"), local("default")).await;
    assert_eq!(r.code, 201, "{}", r.json);
    assert_eq!(r.json["metadata"]["namespace"], "default");
    assert_eq!(r.json["status"]["allowed"], true);
    let r = s.post("admin-token", &format!("{AUTHZ}/namespaces/default/localsubjectaccessreviews"), local("kube-system")).await;
    assert_eq!(r.code, 422, "{}", r.json);
    assert_eq!(
        r.json["message"],
        "LocalSubjectAccessReview.authorization.k8s.io \"\" is invalid: spec.resourceAttributes.namespace: Invalid value: \"kube-system\": must match metadata.namespace"
    );
    assert_eq!(s.review_keys().await, Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn self_subject_access_review_checks_the_requester_or_whom_it_impersonates() {
    let s = Server::start().await;
    grant_alice_pods(&s).await;
    let path = format!("{AUTHZ}/selfsubjectaccessreviews");
    let ssar = |verb: &str, ns: &str| json!({"kind": "SelfSubjectAccessReview", "apiVersion": "authorization.k8s.io/v1",
        "spec": {"resourceAttributes": {"verb": verb, "resource": "pods", "namespace": ns}}});
    let r = s.post("alice-token", &path, ssar("get", "default")).await;
    assert_eq!(r.code, 201, "{}", r.json);
    assert_eq!(r.json["status"]["allowed"], true);
    let r = s.post("alice-token", &path, ssar("get", "kube-system")).await;
    assert_eq!(r.json["status"], json!({"allowed": false}));
    let r = s.post("bob-token", &path, ssar("get", "default")).await;
    assert_eq!(r.json["status"], json!({"allowed": false}));
    // admin is in system:masters; impersonating alice checks alice.
    let r = s.post("admin-token", &path, ssar("delete", "kube-system")).await;
    assert_eq!(r.json["status"], json!({"allowed": true}));
    let r = s.send("admin-token", "POST", &path, &[("Impersonate-User", "alice")], Some(ssar("get", "default"))).await;
    assert_eq!(r.json["status"]["allowed"], true, "{}", r.json);
    let r = s.send("admin-token", "POST", &path, &[("Impersonate-User", "alice")], Some(ssar("delete", "default"))).await;
    assert_eq!(r.json["status"], json!({"allowed": false}));
    let r = s.post("alice-token", &path, json!({"kind": "SelfSubjectAccessReview", "apiVersion": "authorization.k8s.io/v1",
        "metadata": {"name": "x"}, "spec": {"nonResourceAttributes": {"path": "/api", "verb": "get"}}})).await;
    assert_eq!(r.code, 422, "{}", r.json);
    assert_eq!(r.json["message"], "SelfSubjectAccessReview.authorization.k8s.io \"\" is invalid: metadata: Invalid value: {\"name\":\"x\"}: must be empty");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn self_subject_rules_review_lists_the_rules_bound_to_the_requester() {
    let s = Server::start().await;
    grant_alice_pods(&s).await;
    let path = format!("{AUTHZ}/selfsubjectrulesreviews");
    let ssrr = |ns: &str| json!({"kind": "SelfSubjectRulesReview", "apiVersion": "authorization.k8s.io/v1", "spec": {"namespace": ns}});
    let r = s.post("alice-token", &path, ssrr("default")).await;
    assert_eq!(r.code, 201, "{}", r.json);
    assert_eq!(r.json["spec"], json!({}));
    let status = &r.json["status"];
    assert_eq!(status["incomplete"], false);
    assert!(status.get("evaluationError").is_none(), "{status}");
    assert_eq!(
        status["resourceRules"],
        json!([
            {"verbs": ["create"], "apiGroups": ["authorization.k8s.io"], "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"]},
            {"verbs": ["create"], "apiGroups": ["authentication.k8s.io"], "resources": ["selfsubjectreviews"]},
            {"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods"]},
        ])
    );
    let urls: Vec<&Value> = status["nonResourceRules"].as_array().unwrap().iter().map(|r| &r["nonResourceURLs"]).collect();
    assert_eq!(urls.len(), 2, "system:discovery and system:public-info-viewer: {status}");
    // In another namespace the RoleBinding does not apply.
    let r = s.post("alice-token", &path, ssrr("kube-system")).await;
    assert_eq!(r.json["status"]["resourceRules"].as_array().unwrap().len(), 2);
    // Masters: cluster-admin's wildcards through the bootstrap binding.
    let r = s.post("admin-token", &path, ssrr("default")).await;
    assert_eq!(r.json["status"]["resourceRules"][0], json!({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}));
    assert_eq!(r.json["status"]["nonResourceRules"][0], json!({"verbs": ["*"], "nonResourceURLs": ["*"]}));
    let r = s.post("alice-token", &path, ssrr("")).await;
    assert_eq!((r.code, r.json["message"].as_str()), (400, Some("no namespace on request")), "{}", r.json);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_lists_review_resources_with_create_only() {
    let s = Server::start().await;
    let r = s.send("admin-token", "GET", AUTHZ, &[], None).await;
    assert_eq!(r.code, 200, "{}", r.json);
    let names: Vec<(&str, bool, &Value)> = r.json["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| (x["name"].as_str().unwrap(), x["namespaced"].as_bool().unwrap(), &x["verbs"]))
        .collect();
    assert_eq!(
        names,
        vec![
            ("localsubjectaccessreviews", true, &json!(["create"])),
            ("selfsubjectaccessreviews", false, &json!(["create"])),
            ("selfsubjectrulesreviews", false, &json!(["create"])),
            ("subjectaccessreviews", false, &json!(["create"])),
        ]
    );
    let r = s.send("admin-token", "GET", AUTHN, &[], None).await;
    let names: Vec<&str> = r.json["resources"].as_array().unwrap().iter().map(|x| x["name"].as_str().unwrap()).collect();
    assert_eq!(names, vec!["selfsubjectreviews", "tokenreviews"]);
    // OpenAPI v2: one POST path per review, no list kind or read paths.
    let doc = s.send("admin-token", "GET", "/openapi/v2", &[], None).await.json;
    let paths = doc["paths"].as_object().unwrap();
    let review_paths: Vec<(&String, Vec<&String>)> = paths
        .iter()
        .filter(|(p, _)| p.contains("review"))
        .map(|(p, item)| (p, item.as_object().unwrap().keys().filter(|k| *k != "parameters").collect()))
        .collect();
    let post = "post".to_string();
    assert_eq!(
        review_paths,
        vec![
            (&"/apis/authentication.k8s.io/v1/selfsubjectreviews".to_string(), vec![&post]),
            (&"/apis/authentication.k8s.io/v1/tokenreviews".to_string(), vec![&post]),
            (&"/apis/authorization.k8s.io/v1/namespaces/{namespace}/localsubjectaccessreviews".to_string(), vec![&post]),
            (&"/apis/authorization.k8s.io/v1/selfsubjectaccessreviews".to_string(), vec![&post]),
            (&"/apis/authorization.k8s.io/v1/selfsubjectrulesreviews".to_string(), vec![&post]),
            (&"/apis/authorization.k8s.io/v1/subjectaccessreviews".to_string(), vec![&post]),
        ]
    );
    let op = &paths["/apis/authorization.k8s.io/v1/subjectaccessreviews"]["post"];
    assert_eq!(op["operationId"], "createAuthorizationV1SubjectAccessReview");
    assert_eq!(op["x-kubernetes-group-version-kind"]["kind"], "SubjectAccessReview");
    let defs = doc["definitions"].as_object().unwrap();
    assert!(defs.contains_key("io.k8s.api.authorization.v1.SubjectAccessReview"));
    assert!(!defs.contains_key("io.k8s.api.authorization.v1.SubjectAccessReviewList"));
}
