//! RBAC beyond evaluation, against the real API server (embedded store)
//! over HTTPS with `--authorization-mode=RBAC` reading its roles from
//! memory (`RbacCache`, kept by watches): bindings written through the API
//! apply to the very next request, impersonation (`Impersonate-*` headers and `kubectl --as`),
//! escalation prevention on role and binding writes, and ClusterRole
//! aggregation.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rkube_apiserver::filters::metrics::ApiserverMetrics;
use rkube_apiserver::filters::rbac::{ensure_bootstrap_policy, RbacSource};
use rkube_apiserver::filters::rbac_cache::RbacCache;
use rkube_apiserver::filters::tls::{self, Pki};
use rkube_apiserver::filters::{FilterArgs, FilterChain};
use serde_json::{json, Value};
use tokio::sync::oneshot;

const TOKENS: &str = "admin-token,admin,1,\"system:masters\"\nalice-token,alice,2,\"dev\"\nbob-token,bob,3\n";
const POLICY: &str = "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n";
const RBAC: &str = "rbac.authorization.k8s.io";

struct Server {
    base: String,
    pki: Pki,
    dir: tempfile::TempDir,
    audit: PathBuf,
    client: reqwest::Client,
    stop: Option<oneshot::Sender<()>>,
    done: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
}

struct Answer {
    code: u16,
    json: Value,
}

impl Server {
    async fn start() -> Server {
        let _ = tracing_subscriber::fmt().with_writer(std::io::stderr).with_max_level(tracing::Level::WARN).try_init();
        let dir = tempfile::tempdir().unwrap();
        let storage: Arc<dyn rkube_storage::Storage> =
            Arc::new(rkube_storage::embedded::EmbeddedStorage::open(&dir.path().join("data")).unwrap());
        let st = rkube_apiserver::server::default_state(storage.clone());
        rkube_apiserver::bootstrap(&st).await.unwrap();
        ensure_bootstrap_policy(storage.as_ref(), "/registry").await.unwrap();
        let pki = tls::generate_self_signed(dir.path()).unwrap();
        let tokens = dir.path().join("tokens.csv");
        std::fs::write(&tokens, TOKENS).unwrap();
        let policy = dir.path().join("policy.yaml");
        std::fs::write(&policy, POLICY).unwrap();
        let audit = dir.path().join("audit.log");
        let args = FilterArgs {
            tls_cert_file: Some(pki.serving_cert_path.clone()),
            tls_private_key_file: Some(pki.serving_key_path.clone()),
            client_ca_file: Some(pki.ca_cert_path.clone()),
            token_auth_file: Some(tokens),
            anonymous_auth: false,
            authorization_mode: vec!["RBAC".into()],
            audit_log_path: Some(audit.display().to_string()),
            audit_policy_file: Some(policy),
            ..FilterArgs::default()
        };
        let cache = RbacCache::start(storage.clone(), "/registry");
        let rbac: Arc<dyn RbacSource> = cache.clone();
        let chain = FilterChain::build(args.load().unwrap(), Some(rbac), Arc::new(ApiserverMetrics::new())).unwrap();
        tokio::spawn(rkube_apiserver::rbac_aggregation::run_with(cache, st.shutdown.subscribe()));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("https://127.0.0.1:{}", listener.local_addr().unwrap().port());
        let (stop, stopped) = oneshot::channel::<()>();
        let done = tokio::spawn(async move {
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
        Server { base, pki, dir, audit, client, stop: Some(stop), done: Some(done) }
    }

    async fn send(&self, token: &str, method: &str, path: &str, headers: &[(&str, &str)], body: Option<(&str, Value)>) -> Answer {
        let mut rb = self.client.request(method.parse().unwrap(), format!("{}{path}", self.base)).bearer_auth(token);
        for (k, v) in headers {
            rb = rb.header(*k, *v);
        }
        if let Some((ct, b)) = body {
            rb = rb.header("content-type", ct).body(b.to_string());
        }
        let resp = rb.send().await.unwrap();
        let code = resp.status().as_u16();
        let text = resp.text().await.unwrap();
        Answer { code, json: serde_json::from_str(&text).unwrap_or(Value::Null) }
    }

    async fn post(&self, token: &str, path: &str, body: Value) -> Answer {
        self.send(token, "POST", path, &[], Some(("application/json", body))).await
    }

    /// Stops the server (flushing the audit log) and returns the audit events.
    async fn stop(mut self) -> Vec<Value> {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(d) = self.done.take() {
            let _ = tokio::time::timeout(Duration::from_secs(10), d).await;
        }
        std::fs::read_to_string(&self.audit)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

fn cluster_role(name: &str, rules: Value) -> Value {
    json!({"apiVersion": format!("{RBAC}/v1"), "kind": "ClusterRole", "metadata": {"name": name}, "rules": rules})
}

fn binding(kind: &str, name: &str, ns: Option<&str>, role_kind: &str, role: &str, user: &str) -> Value {
    let mut meta = json!({"name": name});
    if let Some(ns) = ns {
        meta["namespace"] = json!(ns);
    }
    json!({"apiVersion": format!("{RBAC}/v1"), "kind": kind, "metadata": meta,
           "subjects": [{"kind": "User", "name": user, "apiGroup": RBAC}],
           "roleRef": {"kind": role_kind, "name": role, "apiGroup": RBAC}})
}

async fn kubectl(kubeconfig: &Path, args: &[&str]) -> (bool, String, String) {
    let out = tokio::time::timeout(
        Duration::from_secs(60),
        tokio::process::Command::new("kubectl")
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .args(args)
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("kubectl finished within 60s")
    .expect("kubectl runs");
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn token_kubeconfig(s: &Server) -> PathBuf {
    use base64::Engine as _;
    let ca = base64::engine::general_purpose::STANDARD.encode(&s.pki.ca_cert_pem);
    let path = s.dir.path().join("alice-kubeconfig");
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: rkube\n  cluster:\n    server: {}\n    certificate-authority-data: {ca}\nusers:\n- name: alice\n  user:\n    token: alice-token\ncontexts:\n- name: c\n  context:\n    cluster: rkube\n    user: alice\n    namespace: default\ncurrent-context: c\n",
            s.base
        ),
    )
    .unwrap();
    path
}

/// `Impersonate-User`/`-Group`/`-Uid` need verb `impersonate` on users,
/// groups, uids (service accounts: on the account in its namespace); an
/// allowed request runs as the impersonated user, and the audit log records
/// both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn impersonation_needs_the_impersonate_verb_and_runs_as_the_target() {
    let s = Server::start().await;
    let cms = "/api/v1/namespaces/default/configmaps";
    let r = s.post("admin-token", cms, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c1"}})).await;
    assert_eq!(r.code, 201, "{}", r.json);

    // Not allowed to impersonate yet.
    let r = s.send("alice-token", "GET", cms, &[("Impersonate-User", "bob")], None).await;
    assert_eq!(r.code, 403, "{}", r.json);
    assert_eq!(
        r.json["message"],
        "users \"bob\" is forbidden: User \"alice\" cannot impersonate resource \"users\" in API group \"\" at the cluster scope"
    );
    assert_eq!(r.json["reason"], "Forbidden");

    // alice may impersonate bob, group viewers and uid 3; bob may read in default.
    let role = cluster_role(
        "impersonator",
        json!([{"verbs": ["impersonate"], "apiGroups": [""], "resources": ["users"], "resourceNames": ["bob"]},
               {"verbs": ["impersonate"], "apiGroups": [""], "resources": ["groups"], "resourceNames": ["viewers"]},
               {"verbs": ["impersonate"], "apiGroups": ["authentication.k8s.io"], "resources": ["uids"], "resourceNames": ["3"]}]),
    );
    let crs = format!("/apis/{RBAC}/v1/clusterroles");
    let crbs = format!("/apis/{RBAC}/v1/clusterrolebindings");
    let rbs = format!("/apis/{RBAC}/v1/namespaces/default/rolebindings");
    assert_eq!(s.post("admin-token", &crs, role).await.code, 201);
    let b = binding("ClusterRoleBinding", "alice-impersonates", None, "ClusterRole", "impersonator", "alice");
    assert_eq!(s.post("admin-token", &crbs, b).await.code, 201);
    let b = binding("RoleBinding", "bob-views", Some("default"), "ClusterRole", "view", "bob");
    assert_eq!(s.post("admin-token", &rbs, b).await.code, 201);

    let r = s.send("alice-token", "GET", &format!("{cms}/c1"), &[("Impersonate-User", "bob"), ("Impersonate-Uid", "3")], None).await;
    assert_eq!(r.code, 200, "{}", r.json);
    // The request runs as bob (who can only read), not as alice.
    let r = s.send("alice-token", "DELETE", &format!("{cms}/c1"), &[("Impersonate-User", "bob")], None).await;
    assert_eq!(r.code, 403, "{}", r.json);
    assert_eq!(
        r.json["message"],
        "configmaps \"c1\" is forbidden: User \"bob\" cannot delete resource \"configmaps\" in API group \"\" in the namespace \"default\""
    );
    // Groups are checked one by one.
    let r = s
        .send("alice-token", "GET", cms, &[("Impersonate-User", "bob"), ("Impersonate-Group", "viewers"), ("Impersonate-Group", "ops")], None)
        .await;
    assert_eq!(r.code, 403);
    assert_eq!(
        r.json["message"],
        "groups \"ops\" is forbidden: User \"alice\" cannot impersonate resource \"groups\" in API group \"\" at the cluster scope"
    );
    let r = s.send("alice-token", "GET", cms, &[("Impersonate-User", "bob"), ("Impersonate-Uid", "4")], None).await;
    assert_eq!(r.code, 403);
    assert_eq!(
        r.json["message"],
        "uids.authentication.k8s.io \"4\" is forbidden: User \"alice\" cannot impersonate resource \"uids\" in API group \"authentication.k8s.io\" at the cluster scope"
    );
    // Service accounts are checked as serviceaccounts in their namespace.
    let r = s.send("alice-token", "GET", cms, &[("Impersonate-User", "system:serviceaccount:default:builder")], None).await;
    assert_eq!(r.code, 403);
    assert_eq!(
        r.json["message"],
        "serviceaccounts \"builder\" is forbidden: User \"alice\" cannot impersonate resource \"serviceaccounts\" in API group \"\" in the namespace \"default\""
    );
    // A group without a user is refused.
    let r = s.send("alice-token", "GET", cms, &[("Impersonate-Group", "viewers")], None).await;
    assert_eq!(r.code, 500, "{}", r.json);
    assert!(r.json["message"].as_str().unwrap_or("").contains("without impersonating a user"), "{}", r.json);

    // kubectl --as sends the same headers.
    let kc = token_kubeconfig(&s);
    let (ok, out, err) = kubectl(&kc, &["--as=bob", "get", "configmap", "c1", "-o", "name"]).await;
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "configmap/c1");
    let (ok, _, err) = kubectl(&kc, &["--as=carol", "get", "configmaps"]).await;
    assert!(!ok);
    assert!(
        err.contains("Error from server (Forbidden): users \"carol\" is forbidden: User \"alice\" cannot impersonate resource \"users\" in API group \"\" at the cluster scope"),
        "{err}"
    );

    let events = s.stop().await;
    let ev = events
        .iter()
        .find(|e| e["verb"] == "delete" && e["stage"] == "ResponseComplete")
        .unwrap_or_else(|| panic!("no delete event in {events:?}"));
    assert_eq!(ev["user"]["username"], "alice");
    assert_eq!(ev["impersonatedUser"]["username"], "bob");
    assert_eq!(ev["impersonatedUser"]["groups"], json!(["system:authenticated"]));
    assert_eq!(ev["responseStatus"]["code"], 403);
}

/// Writing a Role needs the permissions it grants (or `escalate`); writing
/// a binding needs the referenced role's permissions (or `bind`); denials are
/// 403 with upstream's message and store nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rbac_writes_cannot_grant_permissions_the_writer_lacks() {
    let s = Server::start().await;
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}});
    assert_eq!(s.post("admin-token", "/api/v1/namespaces", ns).await.code, 201);
    let roles = format!("/apis/{RBAC}/v1/namespaces/team/roles");
    let rbs = format!("/apis/{RBAC}/v1/namespaces/team/rolebindings");
    // (Verb `*` would include `escalate` and `bind`: list the verbs.)
    let manager = json!({"apiVersion": format!("{RBAC}/v1"), "kind": "Role", "metadata": {"name": "manager", "namespace": "team"},
        "rules": [{"verbs": ["get", "list", "create", "update", "patch", "delete"], "apiGroups": [RBAC], "resources": ["roles", "rolebindings"]},
                  {"verbs": ["get", "list"], "apiGroups": [""], "resources": ["configmaps"]}]});
    assert_eq!(s.post("admin-token", &roles, manager).await.code, 201);
    let b = binding("RoleBinding", "alice-manages", Some("team"), "Role", "manager", "alice");
    assert_eq!(s.post("admin-token", &rbs, b).await.code, 201);

    let role = |name: &str, resources: Value| {
        json!({"apiVersion": format!("{RBAC}/v1"), "kind": "Role", "metadata": {"name": name, "namespace": "team"},
               "rules": [{"verbs": ["get"], "apiGroups": [""], "resources": resources}]})
    };
    // Within her own permissions: allowed.
    let r = s.post("alice-token", &roles, role("cm-reader", json!(["configmaps"]))).await;
    assert_eq!(r.code, 201, "{}", r.json);
    // Beyond them: 403, nothing stored.
    let r = s.post("alice-token", &roles, role("secret-reader", json!(["configmaps", "secrets"]))).await;
    assert_eq!(r.code, 403, "{}", r.json);
    assert_eq!(r.json["reason"], "Forbidden");
    assert_eq!(
        r.json["message"],
        "roles.rbac.authorization.k8s.io \"secret-reader\" is forbidden: user \"alice\" (groups=[\"dev\" \"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:\n{APIGroups:[\"\"], Resources:[\"secrets\"], Verbs:[\"get\"]}"
    );
    assert_eq!(s.send("admin-token", "GET", &format!("{roles}/secret-reader"), &[], None).await.code, 404);
    // Updates and patches are checked on the resulting object.
    let r = s.send("alice-token", "PUT", &format!("{roles}/cm-reader"), &[], Some(("application/json", role("cm-reader", json!(["secrets"]))))).await;
    assert_eq!(r.code, 403, "{}", r.json);
    let patch = json!({"rules": [{"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}]});
    let r = s.send("alice-token", "PATCH", &format!("{roles}/cm-reader"), &[], Some(("application/merge-patch+json", patch))).await;
    assert_eq!(r.code, 403, "{}", r.json);
    assert!(r.json["message"].as_str().unwrap_or("").ends_with("{APIGroups:[\"\"], Resources:[\"pods\"], Verbs:[\"get\"]}"), "{}", r.json);
    let stored = s.send("admin-token", "GET", &format!("{roles}/cm-reader"), &[], None).await;
    assert_eq!(stored.json["rules"][0]["resources"], json!(["configmaps"]));

    // Bindings: a role she holds may be bound; `admin` may not.
    let r = s.post("alice-token", &rbs, binding("RoleBinding", "bob-cm", Some("team"), "Role", "cm-reader", "bob")).await;
    assert_eq!(r.code, 201, "{}", r.json);
    let r = s.post("alice-token", &rbs, binding("RoleBinding", "bob-admin", Some("team"), "ClusterRole", "admin", "bob")).await;
    assert_eq!(r.code, 403, "{}", r.json);
    assert!(
        r.json["message"].as_str().unwrap_or("").starts_with(
            "rolebindings.rbac.authorization.k8s.io \"bob-admin\" is forbidden: user \"alice\" (groups=[\"dev\" \"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:\n"
        ),
        "{}",
        r.json
    );
    let r = s.post("alice-token", &rbs, binding("RoleBinding", "bob-ghost", Some("team"), "Role", "ghost", "bob")).await;
    assert_eq!(r.code, 404, "{}", r.json);

    // `escalate` on roles and `bind` on the `view` ClusterRole lift the checks.
    let extra = json!({"apiVersion": format!("{RBAC}/v1"), "kind": "Role", "metadata": {"name": "escalator", "namespace": "team"},
        "rules": [{"verbs": ["escalate"], "apiGroups": [RBAC], "resources": ["roles"]},
                  {"verbs": ["bind"], "apiGroups": [RBAC], "resources": ["clusterroles"], "resourceNames": ["view"]}]});
    assert_eq!(s.post("admin-token", &roles, extra).await.code, 201);
    let b = binding("RoleBinding", "alice-escalates", Some("team"), "Role", "escalator", "alice");
    assert_eq!(s.post("admin-token", &rbs, b).await.code, 201);
    let r = s.post("alice-token", &roles, role("secret-reader", json!(["secrets"]))).await;
    assert_eq!(r.code, 201, "{}", r.json);
    let r = s.post("alice-token", &rbs, binding("RoleBinding", "bob-view", Some("team"), "ClusterRole", "view", "bob")).await;
    assert_eq!(r.code, 201, "{}", r.json);
    let r = s.post("alice-token", &rbs, binding("RoleBinding", "bob-edit", Some("team"), "ClusterRole", "edit", "bob")).await;
    assert_eq!(r.code, 403, "bind on view only: {}", r.json);

    // system:masters is never checked.
    let r = s.post("admin-token", &format!("/apis/{RBAC}/v1/clusterroles"), cluster_role("all", json!([{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}]))).await;
    assert_eq!(r.code, 201, "{}", r.json);
    s.stop().await;
}

/// The RBAC cache is fresh for the writer: a binding created through the
/// API allows the next request at once, and once deleted the next request
/// is denied at once (20 rounds, no retries), for a User binding and for a
/// Group binding in the namespace, and for a ClusterRoleBinding.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bindings_written_through_the_api_apply_to_the_next_request() {
    let s = Server::start().await;
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "fresh"}});
    assert_eq!(s.post("admin-token", "/api/v1/namespaces", ns).await.code, 201);
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "fresh"}});
    assert_eq!(s.post("admin-token", "/api/v1/namespaces/fresh/configmaps", cm).await.code, 201);
    let get_cm = "/api/v1/namespaces/fresh/configmaps/c";
    let rbs = format!("/apis/{RBAC}/v1/namespaces/fresh/rolebindings");
    let crbs = format!("/apis/{RBAC}/v1/clusterrolebindings");
    let group_binding = |name: &str| {
        let mut b = binding("RoleBinding", name, Some("fresh"), "ClusterRole", "view", "unused");
        b["subjects"] = json!([{"kind": "Group", "name": "dev", "apiGroup": RBAC}]);
        b
    };
    for round in 0..20 {
        let (list, b) = match round % 3 {
            0 => (&rbs, binding("RoleBinding", &format!("alice-{round}"), Some("fresh"), "ClusterRole", "view", "alice")),
            1 => (&rbs, group_binding(&format!("devs-{round}"))),
            _ => (&crbs, binding("ClusterRoleBinding", &format!("alice-{round}"), None, "ClusterRole", "view", "alice")),
        };
        let name = b["metadata"]["name"].as_str().unwrap().to_string();
        let before = s.send("alice-token", "GET", get_cm, &[], None).await;
        assert_eq!(before.code, 403, "round {round} before: {}", before.json);
        assert_eq!(s.post("admin-token", list, b).await.code, 201, "round {round}");
        let during = s.send("alice-token", "GET", get_cm, &[], None).await;
        assert_eq!(during.code, 200, "round {round} with {name}: {}", during.json);
        assert_eq!(during.json["metadata"]["name"], "c");
        let del = s.send("admin-token", "DELETE", &format!("{list}/{name}"), &[], None).await;
        assert_eq!(del.code, 200, "round {round}: {}", del.json);
        let after = s.send("alice-token", "GET", get_cm, &[], None).await;
        assert_eq!(after.code, 403, "round {round} after deleting {name}: {}", after.json);
        assert_eq!(
            after.json["message"],
            "configmaps \"c\" is forbidden: User \"alice\" cannot get resource \"configmaps\" in API group \"\" in the namespace \"fresh\""
        );
    }
    s.stop().await;
}

/// Polls `path` as admin until `check` accepts the object (10 s).
async fn eventually(s: &Server, path: &str, what: &str, check: impl Fn(&Value) -> bool) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let r = s.send("admin-token", "GET", path, &[], None).await;
        if r.code == 200 && check(&r.json) {
            return r.json;
        }
        assert!(tokio::time::Instant::now() < deadline, "{what}: last answer {} {}", r.code, r.json);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A ClusterRole with an aggregationRule gets (and keeps) the rules of the
/// ClusterRoles its selectors match; bootstrap `view` → `edit` → `admin`
/// aggregate through the `aggregate-to-*` labels; using an aggregationRule
/// needs cluster-admin powers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aggregated_cluster_roles_follow_their_selected_roles() {
    let s = Server::start().await;
    let crs = format!("/apis/{RBAC}/v1/clusterroles");
    let crbs = format!("/apis/{RBAC}/v1/clusterrolebindings");
    let sel_label = "example.com/aggregate-to-monitoring";
    let monitoring = json!({"apiVersion": format!("{RBAC}/v1"), "kind": "ClusterRole", "metadata": {"name": "monitoring"},
        "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {sel_label: "true"}}]}});
    assert_eq!(s.post("admin-token", &crs, monitoring).await.code, 201);
    let b = binding("ClusterRoleBinding", "bob-monitors", None, "ClusterRole", "monitoring", "bob");
    assert_eq!(s.post("admin-token", &crbs, b).await.code, 201);
    assert_eq!(s.send("bob-token", "GET", "/api/v1/endpoints", &[], None).await.code, 403);

    let endpoints = json!({"verbs": ["get", "list", "watch"], "apiGroups": [""], "resources": ["endpoints"]});
    let mut part = cluster_role("monitoring-endpoints", json!([endpoints]));
    part["metadata"]["labels"] = json!({sel_label: "true"});
    assert_eq!(s.post("admin-token", &crs, part.clone()).await.code, 201);
    let path = format!("{crs}/monitoring");
    eventually(&s, &path, "rules aggregated", |r| r["rules"] == json!([endpoints])).await;
    // The aggregated rules authorize.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while s.send("bob-token", "GET", "/api/v1/endpoints", &[], None).await.code != 200 {
        assert!(tokio::time::Instant::now() < deadline, "bob never got endpoints");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Changing the selected role updates the aggregate; a second one adds its rules.
    let pods = json!({"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]});
    part["rules"] = json!([endpoints, pods]);
    let r = s.send("admin-token", "PUT", &format!("{crs}/monitoring-endpoints"), &[], Some(("application/json", part))).await;
    assert_eq!(r.code, 200, "{}", r.json);
    eventually(&s, &path, "rules follow updates", |r| r["rules"] == json!([endpoints, pods])).await;
    let nodes = json!({"verbs": ["list"], "apiGroups": [""], "resources": ["nodes"]});
    let mut part2 = cluster_role("monitoring-nodes", json!([nodes, pods]));
    part2["metadata"]["labels"] = json!({sel_label: "true"});
    assert_eq!(s.post("admin-token", &crs, part2).await.code, 201);
    eventually(&s, &path, "second role added", |r| r["rules"] == json!([endpoints, pods, nodes])).await;
    // Deleting a selected role removes its rules; manual edits of the rules are reverted.
    assert_eq!(s.send("admin-token", "DELETE", &format!("{crs}/monitoring-endpoints"), &[], None).await.code, 200);
    eventually(&s, &path, "deleted role's rules gone", |r| r["rules"] == json!([nodes, pods])).await;
    let patch = json!({"rules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}]});
    let r = s.send("admin-token", "PATCH", &path, &[], Some(("application/merge-patch+json", patch))).await;
    assert_eq!(r.code, 200, "{}", r.json);
    eventually(&s, &path, "manual rules reverted", |r| r["rules"] == json!([nodes, pods])).await;

    // Bootstrap roles: a role labeled aggregate-to-view reaches view, edit and admin.
    let widgets = json!({"verbs": ["get"], "apiGroups": ["example.com"], "resources": ["widgets"]});
    let mut w = cluster_role("widget-viewer", json!([widgets]));
    w["metadata"]["labels"] = json!({"rbac.authorization.k8s.io/aggregate-to-view": "true"});
    assert_eq!(s.post("admin-token", &crs, w).await.code, 201);
    for name in ["view", "edit", "admin"] {
        let role = eventually(&s, &format!("{crs}/{name}"), name, |r| {
            r["rules"].as_array().is_some_and(|rules| rules.contains(&widgets))
        })
        .await;
        assert!(role["aggregationRule"]["clusterRoleSelectors"].is_array(), "{role}");
    }

    // Only cluster admins may use an aggregationRule.
    let creator = cluster_role("role-creator", json!([{"verbs": ["create"], "apiGroups": [RBAC], "resources": ["clusterroles"]}]));
    assert_eq!(s.post("admin-token", &crs, creator).await.code, 201);
    let b = binding("ClusterRoleBinding", "alice-creates", None, "ClusterRole", "role-creator", "alice");
    assert_eq!(s.post("admin-token", &crbs, b).await.code, 201);
    let sneaky = json!({"apiVersion": format!("{RBAC}/v1"), "kind": "ClusterRole", "metadata": {"name": "sneaky"},
        "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"rbac.authorization.k8s.io/aggregate-to-admin": "true"}}]}});
    let r = s.post("alice-token", &crs, sneaky).await;
    assert_eq!(r.code, 403, "{}", r.json);
    assert_eq!(
        r.json["message"],
        "clusterroles.rbac.authorization.k8s.io \"sneaky\" is forbidden: must have cluster-admin privileges to use the aggregationRule"
    );
    s.stop().await;
}

/// `pods/ephemeralcontainers` is its own RBAC resource, as upstream: a role
/// that may patch `pods` may not add ephemeral containers, one naming
/// `pods/ephemeralcontainers` may.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ephemeral_containers_need_their_own_rbac_resource() {
    let s = Server::start().await;
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "image": "nginx"}]}});
    assert_eq!(s.post("admin-token", "/api/v1/namespaces/default/pods", pod).await.code, 201);
    let crbs = format!("/apis/{RBAC}/v1/clusterrolebindings");
    let crs = format!("/apis/{RBAC}/v1/clusterroles");
    let pods_only = cluster_role("pod-patcher", json!([{"verbs": ["get", "patch", "update"], "apiGroups": [""], "resources": ["pods"]}]));
    assert_eq!(s.post("admin-token", &crs, pods_only).await.code, 201);
    assert_eq!(s.post("admin-token", &crbs, binding("ClusterRoleBinding", "alice-pods", None, "ClusterRole", "pod-patcher", "alice")).await.code, 201);
    let ec = "/api/v1/namespaces/default/pods/p/ephemeralcontainers";
    let patch = json!({"spec": {"ephemeralContainers": [{"name": "dbg", "image": "busybox"}]}});
    let smp = "application/strategic-merge-patch+json";
    let r = s.send("alice-token", "PATCH", ec, &[], Some((smp, patch.clone()))).await;
    assert_eq!(r.code, 403, "{}", r.json);
    assert_eq!(r.json["reason"], "Forbidden");
    assert_eq!(
        r.json["message"],
        "pods \"p\" is forbidden: User \"alice\" cannot patch resource \"pods/ephemeralcontainers\" in API group \"\" in the namespace \"default\""
    );
    let debugger = cluster_role(
        "debugger",
        json!([{"verbs": ["get", "patch", "update"], "apiGroups": [""], "resources": ["pods/ephemeralcontainers"]}]),
    );
    assert_eq!(s.post("admin-token", &crs, debugger).await.code, 201);
    assert_eq!(s.post("admin-token", &crbs, binding("ClusterRoleBinding", "alice-debug", None, "ClusterRole", "debugger", "alice")).await.code, 201);
    let r = s.send("alice-token", "PATCH", ec, &[], Some((smp, patch))).await;
    assert_eq!(r.code, 200, "{}", r.json);
    assert_eq!(r.json["spec"]["ephemeralContainers"][0]["name"], "dbg");
    s.stop().await;
}
