//! API Priority and Fairness in front of the real API server (embedded
//! store, token authentication over plain HTTP): the bootstrap FlowSchemas
//! and priority levels as kubectl lists them, requests classified by them
//! (the `X-Kubernetes-PF-*` headers), and FlowSchemas and levels written
//! through the API taking effect while the server runs.

use std::sync::Arc;
use std::time::Duration;

use rkube_apiserver::filters::metrics::ApiserverMetrics;
use rkube_apiserver::filters::{FilterArgs, FilterChain};
use serde_json::{json, Value};
use tokio::sync::oneshot;

const TOKENS: &str =
    "admin-token,admin,1,\"system:masters\"\nnode-token,system:node:n1,2,\"system:nodes\"\ncarol-token,carol,3,\"dev\"\n";
const FC: &str = "/apis/flowcontrol.apiserver.k8s.io/v1";
/// What `kubectl get` asks for.
const KUBECTL_TABLE: &str =
    "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";

struct Server {
    base: String,
    client: reqwest::Client,
    metrics: Arc<ApiserverMetrics>,
    stop: Option<oneshot::Sender<()>>,
    done: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
    _dir: tempfile::TempDir,
}

struct Answer {
    code: u16,
    headers: reqwest::header::HeaderMap,
    json: Value,
    text: String,
}

impl Answer {
    fn header(&self, name: &str) -> &str {
        self.headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or("")
    }
}

impl Server {
    async fn start() -> Server {
        let _ = tracing_subscriber::fmt().with_writer(std::io::stderr).with_max_level(tracing::Level::WARN).try_init();
        let dir = tempfile::tempdir().unwrap();
        let storage: Arc<dyn rkube_storage::Storage> =
            Arc::new(rkube_storage::embedded::EmbeddedStorage::open(&dir.path().join("data")).unwrap());
        let st = rkube_apiserver::server::default_state(storage);
        rkube_apiserver::bootstrap(&st).await.unwrap();
        let tokens = dir.path().join("tokens.csv");
        std::fs::write(&tokens, TOKENS).unwrap();
        let args = FilterArgs { token_auth_file: Some(tokens), anonymous_auth: false, ..FilterArgs::default() };
        let metrics = Arc::new(ApiserverMetrics::new());
        let chain = FilterChain::build(args.load().unwrap(), None, metrics.clone()).unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://127.0.0.1:{}", listener.local_addr().unwrap().port());
        let (stop, stopped) = oneshot::channel::<()>();
        let done = tokio::spawn(async move {
            rkube_apiserver::server::serve_api(listener, st, &chain, async {
                let _ = stopped.await;
            })
            .await
        });
        let client = crate::common::http_client(Some(Duration::from_secs(20)));
        Server { base, client, metrics, stop: Some(stop), done: Some(done), _dir: dir }
    }

    async fn send(&self, token: &str, method: &str, path: &str, accept: Option<&str>, body: Option<Value>) -> Answer {
        let mut rb = self.client.request(method.parse().unwrap(), format!("{}{path}", self.base)).bearer_auth(token);
        if let Some(a) = accept {
            rb = rb.header("accept", a);
        }
        if let Some(b) = body {
            rb = rb.header("content-type", "application/json").body(b.to_string());
        }
        let resp = rb.send().await.unwrap();
        let code = resp.status().as_u16();
        let headers = resp.headers().clone();
        let text = resp.text().await.unwrap();
        Answer { code, headers, json: serde_json::from_str(&text).unwrap_or(Value::Null), text }
    }

    async fn get(&self, token: &str, path: &str) -> Answer {
        self.send(token, "GET", path, None, None).await
    }

    /// The UID of a flowcontrol object (`flowschemas` or `prioritylevelconfigurations`).
    async fn uid(&self, resource: &str, name: &str) -> String {
        let a = self.get("admin-token", &format!("{FC}/{resource}/{name}")).await;
        assert_eq!(a.code, 200, "{resource}/{name}: {}", a.text);
        a.json["metadata"]["uid"].as_str().unwrap().to_string()
    }

    /// Sends until `done` holds for the answer (the configuration controller
    /// installs changes within the watch's latency); returns that answer.
    async fn eventually(
        &self,
        token: &str,
        method: &str,
        path: &str,
        body: Option<Value>,
        done: impl Fn(&Answer) -> bool,
    ) -> Answer {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let a = self.send(token, method, path, None, body.clone()).await;
            if done(&a) {
                return a;
            }
            assert!(tokio::time::Instant::now() < deadline, "last answer: {} {:?} {}", a.code, a.headers, a.text);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(d) = self.done.take() {
            let _ = tokio::time::timeout(Duration::from_secs(10), d).await;
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

fn names(table: &Value) -> Vec<String> {
    table["rows"].as_array().unwrap().iter().map(|r| r["cells"][0].as_str().unwrap().to_string()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bootstrap_flow_schemas_and_priority_levels_are_listed_as_kubectl_lists_them() {
    let s = Server::start().await;
    let a = s.send("admin-token", "GET", &format!("{FC}/flowschemas?limit=500"), Some(KUBECTL_TABLE), None).await;
    assert_eq!(a.code, 200, "{}", a.text);
    assert_eq!(a.json["kind"], "Table");
    let mut got = names(&a.json);
    got.sort();
    let mut want = vec![
        "catch-all",
        "exempt",
        "global-default",
        "kube-controller-manager",
        "kube-scheduler",
        "kube-system-service-accounts",
        "probes",
        "service-accounts",
        "system-leader-election",
        "system-node-high",
        "system-nodes",
        "workload-leader-election",
    ];
    want.sort();
    assert_eq!(got, want);
    let a = s
        .send("admin-token", "GET", &format!("{FC}/prioritylevelconfigurations?limit=500"), Some(KUBECTL_TABLE), None)
        .await;
    assert_eq!(a.code, 200, "{}", a.text);
    let mut got = names(&a.json);
    got.sort();
    assert_eq!(
        got,
        [
            "catch-all",
            "exempt",
            "global-default",
            "leader-election",
            "node-high",
            "system",
            "workload-high",
            "workload-low"
        ]
    );
    // `kubectl get flowschema system-node-high -o yaml`.
    let fs = s.get("admin-token", &format!("{FC}/flowschemas/system-node-high")).await;
    assert_eq!(fs.json["metadata"]["annotations"]["apf.kubernetes.io/autoupdate-spec"], "true");
    assert_eq!(fs.json["spec"]["matchingPrecedence"], 400);
    assert_eq!(fs.json["spec"]["priorityLevelConfiguration"]["name"], "node-high");
    assert_eq!(fs.json["spec"]["distinguisherMethod"]["type"], "ByUser");
    let rules = &fs.json["spec"]["rules"][0];
    assert_eq!(rules["subjects"], json!([{"kind": "Group", "group": {"name": "system:nodes"}}]));
    assert_eq!(rules["resourceRules"][0]["resources"], json!(["nodes", "nodes/status"]));
    assert_eq!(rules["resourceRules"][0]["clusterScope"], true);
    assert_eq!(rules["resourceRules"][1]["apiGroups"], json!(["coordination.k8s.io"]));
    assert_eq!(rules["resourceRules"][1]["resources"], json!(["leases"]));
    let pl = s.get("admin-token", &format!("{FC}/prioritylevelconfigurations/node-high")).await;
    assert_eq!(pl.json["spec"]["type"], "Limited");
    assert_eq!(pl.json["spec"]["limited"]["nominalConcurrencyShares"], 40);
    assert_eq!(
        pl.json["spec"]["limited"]["limitResponse"]["queuing"],
        json!({"queues": 64, "handSize": 6, "queueLengthLimit": 50})
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_lease_renewals_are_classified_system_node_high() {
    let s = Server::start().await;
    let (fs_uid, pl_uid) =
        (s.uid("flowschemas", "system-node-high").await, s.uid("prioritylevelconfigurations", "node-high").await);
    let leases = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases";
    let lease = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "n1"},
        "spec": {"holderIdentity": "n1", "leaseDurationSeconds": 40}});
    // Requests go unclassified until the flow schemas are loaded: wait on a
    // GET of the lease (any verb on leases is system-node-high), so the
    // create is sent once (a retried create would answer 409).
    s.eventually("node-token", "GET", &format!("{leases}/n1"), None, |a| {
        !a.header("x-kubernetes-pf-flowschema-uid").is_empty()
    })
    .await;
    let created = s.send("node-token", "POST", leases, None, Some(lease)).await;
    assert_eq!(created.code, 201, "{}", created.text);
    assert_eq!(created.header("x-kubernetes-pf-flowschema-uid"), fs_uid);
    assert_eq!(created.header("x-kubernetes-pf-prioritylevel-uid"), pl_uid);
    let mut renewed = created.json.clone();
    renewed["spec"]["renewTime"] = json!("2026-01-01T00:00:00.000000Z");
    let a = s.send("node-token", "PUT", &format!("{leases}/n1"), None, Some(renewed)).await;
    assert_eq!(a.code, 200, "{}", a.text);
    assert_eq!(a.header("x-kubernetes-pf-flowschema-uid"), fs_uid);
    assert_eq!(a.header("x-kubernetes-pf-prioritylevel-uid"), pl_uid);
    // The node's other requests: system-nodes / system. A master's: exempt.
    let a = s.get("node-token", "/api/v1/namespaces/default/pods").await;
    assert_eq!(a.header("x-kubernetes-pf-flowschema-uid"), s.uid("flowschemas", "system-nodes").await);
    assert_eq!(a.header("x-kubernetes-pf-prioritylevel-uid"), s.uid("prioritylevelconfigurations", "system").await);
    let a = s.get("admin-token", "/api/v1/namespaces").await;
    assert_eq!(a.header("x-kubernetes-pf-prioritylevel-uid"), s.uid("prioritylevelconfigurations", "exempt").await);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flow_schema_to_a_reject_level_answers_429_and_updating_it_takes_effect() {
    let s = Server::start().await;
    // A Limited level without shares and not allowed to borrow has no seat: with Reject, every
    // request is refused at once.
    let level = json!({"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "PriorityLevelConfiguration",
        "metadata": {"name": "no-seats"},
        "spec": {"type": "Limited", "limited": {"nominalConcurrencyShares": 0, "borrowingLimitPercent": 0,
            "limitResponse": {"type": "Reject"}}}});
    let a = s.send("admin-token", "POST", &format!("{FC}/prioritylevelconfigurations"), None, Some(level)).await;
    assert_eq!(a.code, 201, "{}", a.text);
    let schema = json!({"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema",
        "metadata": {"name": "carol"},
        "spec": {"matchingPrecedence": 50, "priorityLevelConfiguration": {"name": "no-seats"},
            "rules": [{"subjects": [{"kind": "User", "user": {"name": "carol"}}],
                "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"], "namespaces": ["*"], "clusterScope": true}]}]}});
    let a = s.send("admin-token", "POST", &format!("{FC}/flowschemas"), None, Some(schema)).await;
    assert_eq!(a.code, 201, "{}", a.text);
    let fs_uid = a.json["metadata"]["uid"].as_str().unwrap().to_string();
    let configmaps = "/api/v1/namespaces/default/configmaps";
    let refused = s.eventually("carol-token", "GET", configmaps, None, |a| a.code == 429).await;
    assert_eq!(refused.json["reason"], "TooManyRequests");
    assert_eq!(refused.header("retry-after"), "1");
    assert_eq!(refused.header("x-kubernetes-pf-flowschema-uid"), fs_uid);
    assert_eq!(
        refused.header("x-kubernetes-pf-prioritylevel-uid"),
        s.uid("prioritylevelconfigurations", "no-seats").await
    );
    assert!(s.metrics.flowcontrol_rejected_count("carol", "no-seats", "concurrency-limit") >= 1);
    // Non-resource requests are not in the schema's rules: global-default serves them.
    assert_eq!(s.get("carol-token", "/version").await.code, 200);

    // Point the FlowSchema at global-default: carol is served again.
    let mut fs = s.get("admin-token", &format!("{FC}/flowschemas/carol")).await.json;
    fs["spec"]["priorityLevelConfiguration"]["name"] = json!("global-default");
    let a = s.send("admin-token", "PUT", &format!("{FC}/flowschemas/carol"), None, Some(fs)).await;
    assert_eq!(a.code, 200, "{}", a.text);
    let served = s.eventually("carol-token", "GET", configmaps, None, |a| a.code == 200).await;
    assert_eq!(served.header("x-kubernetes-pf-flowschema-uid"), fs_uid);
    assert_eq!(
        served.header("x-kubernetes-pf-prioritylevel-uid"),
        s.uid("prioritylevelconfigurations", "global-default").await
    );

    // Deleting it: carol falls through to global-default's own FlowSchema.
    let a = s.send("admin-token", "DELETE", &format!("{FC}/flowschemas/carol"), None, None).await;
    assert_eq!(a.code, 200, "{}", a.text);
    let gd_uid = s.uid("flowschemas", "global-default").await;
    s.eventually("carol-token", "GET", configmaps, None, |a| a.header("x-kubernetes-pf-flowschema-uid") == gd_uid)
        .await;
    s.stop().await;
}

/// The ensurer at the next start: bootstrap objects still annotated
/// `apf.kubernetes.io/autoupdate-spec: "true"` get their spec back, those
/// annotated otherwise keep the user's (but the mandatory `catch-all` is
/// restored anyway), deleted ones come back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_restores_auto_updated_bootstrap_specs_and_keeps_opted_out_ones() {
    let dir = tempfile::tempdir().unwrap();
    let storage: Arc<dyn rkube_storage::Storage> =
        Arc::new(rkube_storage::embedded::EmbeddedStorage::open(dir.path()).unwrap());
    let st = rkube_apiserver::server::default_state(storage.clone());
    rkube_apiserver::bootstrap(&st).await.unwrap();
    let key = |name: &str| format!("/registry/flowschemas/{name}");
    let edit = |name: &'static str, auto: &'static str| {
        let storage = storage.clone();
        async move {
            let kv = storage.get(&key(name)).await.unwrap().unwrap();
            let mut obj: Value = serde_json::from_slice(&kv.value).unwrap();
            obj["spec"]["matchingPrecedence"] = json!(7777);
            obj["metadata"]["annotations"]["apf.kubernetes.io/autoupdate-spec"] = json!(auto);
            storage.update(&key(name), serde_json::to_vec(&obj).unwrap().into(), kv.mod_revision).await.unwrap();
        }
    };
    edit("global-default", "true").await;
    edit("service-accounts", "false").await;
    // A mandatory object is restored whatever its annotation says.
    edit("catch-all", "false").await;
    storage.delete(&key("probes"), None).await.unwrap();
    let restarted = rkube_apiserver::server::default_state(storage.clone());
    rkube_apiserver::bootstrap(&restarted).await.unwrap();
    let spec = |name: &'static str| {
        let storage = storage.clone();
        async move {
            let kv = storage.get(&key(name)).await.unwrap().unwrap();
            serde_json::from_slice::<Value>(&kv.value).unwrap()["spec"].clone()
        }
    };
    assert_eq!(spec("global-default").await["matchingPrecedence"], 9900);
    assert_eq!(spec("service-accounts").await["matchingPrecedence"], 7777);
    assert_eq!(spec("probes").await["matchingPrecedence"], 2);
    assert_eq!(spec("catch-all").await["matchingPrecedence"], 10000);
}
