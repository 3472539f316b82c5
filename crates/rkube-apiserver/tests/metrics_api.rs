//! `metrics.k8s.io/v1beta1` and `nodes/proxy` as a client sees them from a real API server
//! (embedded store, plain HTTP): discovery and the local APIService, the 404s before two
//! samples, the NodeMetrics / PodMetrics shapes and quantities once the store holds two
//! scrapes (recorded here as the scraper records a kubelet's page), selectors, tables, the verbs
//! a read-only resource refuses, and `nodes/proxy` to a node that does not exist or whose
//! kubelet does not answer. The scraper against a real node agent, `kubectl top` and RBAC are
//! in `crates/rkube/tests/metrics_e2e.rs`.

use std::collections::HashMap;
use std::sync::Arc;

use rkube_apiserver::metrics_api::store::{NodeScrape, Point};
use rkube_apiserver::ApiState;
use serde_json::{json, Value};
use tokio::sync::oneshot;

struct Server {
    base: String,
    st: ApiState,
    client: reqwest::Client,
    _stop: oneshot::Sender<()>,
    _dir: tempfile::TempDir,
}

async fn start() -> Server {
    let dir = tempfile::tempdir().expect("tempdir");
    let storage: Arc<dyn rkube_storage::Storage> =
        Arc::new(rkube_storage::embedded::EmbeddedStorage::open(dir.path()).expect("open embedded store"));
    let st = rkube_apiserver::server::default_state(storage);
    rkube_apiserver::bootstrap(&st).await.expect("bootstrap");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    let (tx, rx) = oneshot::channel::<()>();
    let served = st.clone();
    tokio::spawn(async move {
        let _ = rkube_apiserver::serve(listener, served, async move {
            let _ = rx.await;
        })
        .await;
    });
    let _ = rustls::crypto::ring::default_provider().install_default();
    Server { base, st, client: reqwest::Client::new(), _stop: tx, _dir: dir }
}

impl Server {
    async fn send(&self, method: reqwest::Method, path: &str, body: Option<&Value>, accept: &str) -> (u16, Value) {
        let mut req = self.client.request(method, format!("{}{path}", self.base)).header("accept", accept);
        if let Some(b) = body {
            req = req.json(b);
        }
        let resp = req.send().await.expect("request");
        let code = resp.status().as_u16();
        let text = resp.text().await.unwrap_or_default();
        (code, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    async fn get(&self, path: &str) -> (u16, Value) {
        self.send(reqwest::Method::GET, path, None, "application/json").await
    }

    async fn create(&self, path: &str, body: Value) {
        let (code, answer) = self.send(reqwest::Method::POST, path, Some(&body), "application/json").await;
        assert_eq!(code, 201, "{answer}");
    }
}

fn point(ts_ms: i64, cpu_seconds: f64, memory_bytes: f64, start: Option<f64>) -> Point {
    Point { ts_ms, cpu_seconds, memory_bytes, start }
}

/// One kubelet page's worth: the node and container `c` of `default/web-1`.
fn scrape(ts_ms: i64, node_cpu: f64, container_cpu: f64) -> NodeScrape {
    let key = ("default".to_string(), "web-1".to_string(), "c".to_string());
    NodeScrape {
        node: Some(point(ts_ms, node_cpu, 3.0 * 1024.0 * 1024.0, None)),
        containers: HashMap::from([(key, point(ts_ms, container_cpu, 4096.0, Some(100.0)))]),
    }
}

#[tokio::test]
async fn discovery_lists_metrics_k8s_io_read_only_behind_a_local_api_service() {
    let s = start().await;
    let (code, list) = s.get("/apis/metrics.k8s.io/v1beta1").await;
    assert_eq!(code, 200);
    assert_eq!(list["groupVersion"], "metrics.k8s.io/v1beta1");
    let find = |name: &str| list["resources"].as_array().into_iter().flatten().find(|r| r["name"] == name).cloned();
    let nodes = find("nodes").expect("nodes");
    assert_eq!((nodes["kind"].as_str(), nodes["namespaced"].as_bool()), (Some("NodeMetrics"), Some(false)));
    assert_eq!(nodes["verbs"], json!(["get", "list"]));
    let pods = find("pods").expect("pods");
    assert_eq!((pods["kind"].as_str(), pods["namespaced"].as_bool()), (Some("PodMetrics"), Some(true)));
    let (code, group) = s.get("/apis/metrics.k8s.io").await;
    assert_eq!((code, group["preferredVersion"]["groupVersion"].as_str()), (200, Some("metrics.k8s.io/v1beta1")));
    let (code, service) = s.get("/apis/apiregistration.k8s.io/v1/apiservices/v1beta1.metrics.k8s.io").await;
    assert_eq!(code, 200, "{service}");
    assert_eq!(service["spec"]["group"], "metrics.k8s.io");
    assert_eq!(service["spec"]["groupPriorityMinimum"], 100);
    assert!(service["spec"].get("service").is_none(), "served locally: {service}");
    // Read-only: no watch, no create.
    let (code, _) = s.get("/apis/metrics.k8s.io/v1beta1/nodes?watch=true").await;
    assert_eq!(code, 405);
    let (code, _) = s.send(reqwest::Method::POST, "/apis/metrics.k8s.io/v1beta1/nodes", Some(&json!({})), "application/json").await;
    assert_eq!(code, 405);
}

#[tokio::test]
async fn metrics_appear_after_two_samples_with_metrics_servers_shapes_and_selectors() {
    let s = start().await;
    s.create("/api/v1/nodes", json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "labels": {"zone": "a"}}})).await;
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web-1", "labels": {"app": "web"}},
                     "spec": {"containers": [{"name": "c", "image": "busybox"}]}});
    s.create("/api/v1/namespaces/default/pods", pod).await;

    // Nothing before two samples: 404 named as metrics-server names them, empty lists.
    let (code, err) = s.get("/apis/metrics.k8s.io/v1beta1/namespaces/default/pods/web-1").await;
    assert_eq!((code, err["reason"].as_str()), (404, Some("NotFound")));
    assert_eq!(err["message"], r#"podmetrics.metrics.k8s.io "web-1" not found"#);
    let (code, err) = s.get("/apis/metrics.k8s.io/v1beta1/nodes/n1").await;
    assert_eq!((code, err["message"].as_str()), (404, Some(r#"nodemetrics.metrics.k8s.io "n1" not found"#)));
    s.st.resource_metrics.record("n1", scrape(10_000, 100.0, 1.0));
    let (code, list) = s.get("/apis/metrics.k8s.io/v1beta1/nodes").await;
    assert_eq!((code, list["kind"].as_str(), list["items"].as_array().map(Vec::len)), (200, Some("NodeMetricsList"), Some(0)));

    // A second scrape 2 s later: node 0.25 cores, container 0.5 cores.
    s.st.resource_metrics.record("n1", scrape(12_000, 100.5, 2.0));
    let (code, node) = s.get("/apis/metrics.k8s.io/v1beta1/nodes/n1").await;
    assert_eq!(code, 200, "{node}");
    assert_eq!(node["kind"], "NodeMetrics");
    assert_eq!(node["apiVersion"], "metrics.k8s.io/v1beta1");
    assert_eq!(node["metadata"]["labels"], json!({"zone": "a"}));
    assert_eq!((node["timestamp"].as_str(), node["window"].as_str()), (Some("1970-01-01T00:00:12Z"), Some("2s")));
    assert_eq!(node["usage"], json!({"cpu": "250m", "memory": "3Mi"}));
    let (_, pod) = s.get("/apis/metrics.k8s.io/v1beta1/namespaces/default/pods/web-1").await;
    assert_eq!(pod["kind"], "PodMetrics");
    assert_eq!((pod["metadata"]["name"].as_str(), pod["metadata"]["namespace"].as_str()), (Some("web-1"), Some("default")));
    assert_eq!(pod["metadata"]["labels"], json!({"app": "web"}));
    assert_eq!(pod["containers"], json!([{"name": "c", "usage": {"cpu": "500m", "memory": "4Ki"}}]));

    // Selectors, all namespaces, another namespace.
    let count = |v: &Value| v["items"].as_array().map(Vec::len);
    let (_, l) = s.get("/apis/metrics.k8s.io/v1beta1/namespaces/default/pods?labelSelector=app%3Dweb").await;
    assert_eq!((l["kind"].as_str(), count(&l)), (Some("PodMetricsList"), Some(1)));
    let (_, l) = s.get("/apis/metrics.k8s.io/v1beta1/namespaces/default/pods?labelSelector=app%3Ddb").await;
    assert_eq!(count(&l), Some(0));
    let (_, l) = s.get("/apis/metrics.k8s.io/v1beta1/pods?fieldSelector=metadata.name%3Dweb-1").await;
    assert_eq!(count(&l), Some(1));
    let (_, l) = s.get("/apis/metrics.k8s.io/v1beta1/namespaces/kube-system/pods").await;
    assert_eq!(count(&l), Some(0));
    let (_, l) = s.get("/apis/metrics.k8s.io/v1beta1/nodes?labelSelector=zone%3Da").await;
    assert_eq!(count(&l), Some(1));
    let (code, err) = s.get("/apis/metrics.k8s.io/v1beta1/pods?fieldSelector=spec.nodeName%3Dn1").await;
    assert_eq!((code, err["message"].as_str()), (400, Some("field label not supported: spec.nodeName")));

    // kubectl's server-side table.
    let table_accept = "application/json;as=Table;v=v1;g=meta.k8s.io";
    let (code, table) = s.send(reqwest::Method::GET, "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods", None, table_accept).await;
    assert_eq!((code, table["kind"].as_str()), (200, Some("Table")));
    let columns: Vec<&str> = table["columnDefinitions"].as_array().into_iter().flatten().filter_map(|c| c["name"].as_str()).collect();
    assert_eq!(columns, ["Name", "cpu", "memory", "Window"], "metrics-server's columns");
    assert_eq!(table["rows"][0]["cells"], json!(["web-1", "500m", "4Ki", "2s"]));

    // A node that is no longer scraped loses its usage.
    s.st.resource_metrics.retain_nodes(&[]);
    let (code, _) = s.get("/apis/metrics.k8s.io/v1beta1/nodes/n1").await;
    assert_eq!(code, 404);
}

#[tokio::test]
async fn node_proxy_needs_a_node_and_a_kubelet_that_answers() {
    let s = start().await;
    let (code, err) = s.get("/api/v1/nodes/none/proxy/stats/summary").await;
    assert_eq!((code, err["message"].as_str()), (404, Some(r#"nodes "none" not found"#)));
    // A port nothing listens on: bind, note it, close.
    let port = std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port();
    let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gone"}});
    s.create("/api/v1/nodes", node).await;
    let status = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gone"}, "status": {
        "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": port}}}});
    let (code, body) = s.send(reqwest::Method::PUT, "/api/v1/nodes/gone/status", Some(&status), "application/json").await;
    assert_eq!(code, 200, "{body}");
    let (code, err) = s.get("/api/v1/nodes/gone/proxy/stats/summary").await;
    assert_eq!((code, err["reason"].as_str()), (503, Some("ServiceUnavailable")), "{err}");
    assert!(err["message"].as_str().is_some_and(|m| m.starts_with("error trying to reach service")), "{err}");
}
