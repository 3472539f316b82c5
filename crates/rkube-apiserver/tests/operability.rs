//! What an operator sees of the real API server behind the filter chain
//! (`server::serve_api`, plain HTTP, AlwaysAllow) over the embedded store:
//!
//! - trace logs of slow requests: the store is wrapped in a storage that
//!   sleeps when told to, `--request-trace-threshold=300ms`, the watch cache
//!   off (every read reaches storage); the one `Trace[...]` log entry of a
//!   request is found by the `Audit-Id` the client got. One test, because the
//!   verbosity (`PUT /debug/flags/v`) is process-wide, like klog's.
//! - `/metrics`: labels of non-resource requests, and one combined text
//!   (server and watch-cache families) whether the router is served behind
//!   the filter chain or alone.

use crate::log_support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use log_support::{init_logging, logged, step_names, trace_of};
use rkube_apiserver::filters::metrics::ApiserverMetrics;
use rkube_apiserver::filters::{FilterArgs, FilterChain};
use rkube_apiserver::{ApiState, ServerConfig};
use rkube_storage::{KeyValue, RangeRequest, RangeResponse, Result, Revision, Storage, Watch};
use serde_json::{json, Value};
use tokio::sync::oneshot;

// ---------------------------------------------------------------- storage

/// The embedded store, sleeping `delay_ms` before each read and write.
struct SlowStorage {
    inner: Arc<dyn Storage>,
    delay_ms: AtomicU64,
}

impl SlowStorage {
    async fn pause(&self) {
        let ms = self.delay_ms.load(Ordering::SeqCst);
        if ms > 0 {
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
    }
}

#[async_trait::async_trait]
impl Storage for SlowStorage {
    fn backend_name(&self) -> &'static str {
        self.inner.backend_name()
    }
    async fn get(&self, key: &str) -> Result<Option<KeyValue>> {
        self.pause().await;
        self.inner.get(key).await
    }
    async fn range(&self, req: RangeRequest) -> Result<RangeResponse> {
        self.pause().await;
        self.inner.range(req).await
    }
    async fn create(&self, key: &str, value: Bytes) -> Result<KeyValue> {
        self.pause().await;
        self.inner.create(key, value).await
    }
    async fn update(&self, key: &str, value: Bytes, expected_mod_revision: Revision) -> Result<KeyValue> {
        self.pause().await;
        self.inner.update(key, value, expected_mod_revision).await
    }
    async fn delete(&self, key: &str, expected_mod_revision: Option<Revision>) -> Result<(KeyValue, Revision)> {
        self.pause().await;
        self.inner.delete(key, expected_mod_revision).await
    }
    async fn watch(&self, prefix: &str, after_revision: Revision) -> Result<Watch> {
        self.inner.watch(prefix, after_revision).await
    }
    async fn current_revision(&self) -> Result<Revision> {
        self.inner.current_revision().await
    }
    async fn compacted_revision(&self) -> Result<Revision> {
        self.inner.compacted_revision().await
    }
    async fn compact(&self, revision: Revision) -> Result<()> {
        self.inner.compact(revision).await
    }
}

// ---------------------------------------------------------------- server

struct Server {
    base: String,
    client: reqwest::Client,
    storage: Arc<SlowStorage>,
    stop: Option<oneshot::Sender<()>>,
    done: Option<tokio::task::JoinHandle<()>>,
    _dir: tempfile::TempDir,
}

/// What a client got.
struct Answer {
    code: u16,
    audit_id: String,
    body: Value,
}

impl Server {
    async fn start(threshold: &str) -> Server {
        let mut config = ServerConfig::default();
        config.watch_cache.enabled = false;
        Self::start_with(threshold, config).await
    }

    async fn start_with(threshold: &str, config: ServerConfig) -> Server {
        init_logging();
        let _ = rustls::crypto::ring::default_provider().install_default();
        let dir = tempfile::tempdir().unwrap();
        let inner: Arc<dyn Storage> = Arc::new(rkube_storage::embedded::EmbeddedStorage::open(dir.path()).unwrap());
        let storage = Arc::new(SlowStorage { inner, delay_ms: AtomicU64::new(0) });
        let st = ApiState::new(storage.clone(), config);
        rkube_apiserver::bootstrap(&st).await.unwrap();
        let args = FilterArgs { request_trace_threshold: threshold.into(), ..FilterArgs::default() };
        let chain = FilterChain::build(args.load().unwrap(), None, Arc::new(ApiserverMetrics::new())).unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://127.0.0.1:{}", listener.local_addr().unwrap().port());
        let (stop, stopped) = oneshot::channel::<()>();
        let done = tokio::spawn(async move {
            rkube_apiserver::server::serve_api(listener, st, &chain, async {
                let _ = stopped.await;
            })
            .await
            .unwrap();
        });
        let client = reqwest::Client::builder().timeout(Duration::from_secs(30)).build().unwrap();
        Server { base, client, storage, stop: Some(stop), done: Some(done), _dir: dir }
    }

    async fn send(&self, method: &str, path: &str, content_type: &str, body: Option<String>) -> Answer {
        let mut rb = self.client.request(method.parse().unwrap(), format!("{}{path}", self.base));
        if let Some(b) = body {
            rb = rb.header("content-type", content_type).body(b);
        }
        let resp = rb.send().await.unwrap();
        let code = resp.status().as_u16();
        let audit_id = resp.headers().get("audit-id").and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
        let text = resp.text().await.unwrap();
        Answer { code, audit_id, body: serde_json::from_str(&text).unwrap_or(Value::Null) }
    }

    async fn text(&self, path: &str) -> (u16, String, String) {
        let resp = self.client.get(format!("{}{path}", self.base)).send().await.unwrap();
        let code = resp.status().as_u16();
        let ct = resp.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
        (code, ct, resp.text().await.unwrap())
    }

    async fn json(&self, method: &str, path: &str, body: Value) -> Answer {
        self.send(method, path, "application/json", Some(body.to_string())).await
    }

    fn slow_storage(&self, ms: u64) {
        self.storage.delay_ms.store(ms, Ordering::SeqCst);
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

const CM: &str = "/api/v1/namespaces/default/configmaps";

fn configmap(name: &str, value: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": value}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_requests_log_one_trace_with_each_verbs_handler_steps() {
    let s = Server::start("300ms").await;
    assert_eq!(s.json("POST", CM, configmap("cm", "1")).await.code, 201);

    // Verbosity 0: a slow GET logs its trace in upstream's shape, with only
    // the step slower than its share (300ms / (5 steps + 1) = 50ms): the read.
    s.slow_storage(400);
    let get = s.send("GET", &format!("{CM}/cm"), "", None).await;
    assert_eq!(get.code, 200);
    let trace = trace_of(&get.audit_id).await;
    let head = &trace[0];
    assert!(head.contains("\"Get\" accept:"), "{head}");
    for field in [
        format!("audit-id:{}", get.audit_id),
        "client:127.0.0.1".into(),
        "method:GET".into(),
        "protocol:HTTP/1.1".into(),
        "name:cm".into(),
        "resource:configmaps".into(),
        "scope:resource".into(),
        format!("url:{CM}/cm"),
        "user-agent:".into(),
        "verb:GET".into(),
        "(total time: ".into(),
    ] {
        assert!(head.contains(&field), "{field:?} missing in {head}");
    }
    assert_eq!(step_names(&trace), ["Get from storage done"], "{trace:#?}");
    let read = trace.iter().find(|l| l.contains("---\"Get from storage done\"")).unwrap();
    let ms: u64 = read.split("\" ").nth(1).and_then(|r| r.split("ms").next()).and_then(|n| n.parse().ok()).unwrap();
    assert!(ms >= 400, "the read step took the storage delay: {read}");
    assert!(trace.last().unwrap().ends_with("] END"), "{trace:#?}");

    // A fast request logs nothing.
    s.slow_storage(0);
    let fast = s.send("GET", &format!("{CM}/cm"), "", None).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!logged().contains(&fast.audit_id));

    // Verbosity 4 (set at runtime): every step of every verb is shown.
    let v = s.send("PUT", "/debug/flags/v", "text/plain", Some("4".into())).await;
    assert_eq!(v.code, 200);
    s.slow_storage(350);
    let write_steps = |first: &[&'static str]| {
        let mut v: Vec<&'static str> = first.to_vec();
        v.extend(["Admission and validation done", "Object stored in database", "About to write a response"]);
        v
    };
    let cases: Vec<(&str, Answer, Vec<&str>)> = vec![
        (
            "Get",
            s.send("GET", &format!("{CM}/cm"), "", None).await,
            vec!["About to Get from storage", "Get from storage done", "About to write a response"],
        ),
        (
            "List",
            s.send("GET", CM, "", None).await,
            vec!["About to List from storage", "Listing from storage done", "About to write a response"],
        ),
        (
            "Create",
            s.json("POST", CM, configmap("cm2", "1")).await,
            write_steps(&["About to convert to expected version", "Conversion done", "About to store object in database"]),
        ),
        (
            "Update",
            s.json("PUT", &format!("{CM}/cm2"), configmap("cm2", "2")).await,
            write_steps(&[
                "About to convert to expected version",
                "Conversion done",
                "About to store object in database",
                "Current object read from storage",
            ]),
        ),
        (
            "Patch",
            s.send("PATCH", &format!("{CM}/cm2"), "application/merge-patch+json", Some(r#"{"data":{"k":"3"}}"#.into()))
                .await,
            write_steps(&["About to apply patch", "Current object read from storage", "About to check admission control"]),
        ),
        (
            "Delete",
            s.send("DELETE", &format!("{CM}/cm2"), "", None).await,
            vec![
                "Decoded delete options",
                "About to delete object from database",
                "Object deleted from database",
                "About to write a response",
            ],
        ),
    ];
    for (name, answer, handler_steps) in cases {
        assert!(answer.code < 300, "{name}: {} {}", answer.code, answer.body);
        let trace = trace_of(&answer.audit_id).await;
        assert!(trace[0].contains(&format!("\"{name}\" accept:")), "{trace:#?}");
        let mut want: Vec<&str> = handler_steps;
        want.extend(["Transformed response object", "Writing http response done"]);
        assert_eq!(step_names(&trace), want, "{name}: {trace:#?}");
        if name == "List" {
            assert!(trace.iter().any(|l| l.contains("---\"Listing from storage done\" count:1 ")), "{trace:#?}");
        }
    }
    s.slow_storage(0);
    assert_eq!(s.send("PUT", "/debug/flags/v", "text/plain", Some("0".into())).await.code, 200);
    s.stop().await;
}

/// Asserts every metric family of `/metrics` text is declared once.
fn assert_families_unique(text: &str) {
    let mut seen = std::collections::HashSet::new();
    for l in text.lines().filter(|l| l.starts_with("# TYPE ")) {
        assert!(seen.insert(l), "{l} twice in:\n{text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_resource_requests_are_counted_without_resource_labels() {
    let s = Server::start_with("500ms", ServerConfig::default()).await;
    // /healthz answers 500 until the storage-readiness post-start hook passes (as upstream):
    // wait on /readyz, which this test does not count.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while s.text("/readyz").await.0 != 200 {
        assert!(std::time::Instant::now() < deadline, "/readyz never passed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for path in ["/version", "/openapi/v2", "/api", "/apis", "/healthz", "/livez/ping"] {
        assert_eq!(s.text(path).await.0, 200, "{path}");
    }
    assert_eq!(s.send("GET", "/api/v1/namespaces/default/configmaps", "", None).await.code, 200);
    let (code, content_type, text) = s.text("/metrics").await;
    assert_eq!(code, 200);
    assert_eq!(content_type, "text/plain; version=0.0.4; charset=utf-8");
    let series = |component: &str, subresource: &str| {
        format!("apiserver_request_total{{code=\"200\",component=\"{component}\",dry_run=\"\",group=\"\",resource=\"\",scope=\"\",subresource=\"{subresource}\",verb=\"GET\",version=\"\"}}")
    };
    for (line, n) in [
        // /version, /openapi/v2, /livez/ping: upstream does not count them; all resource labels empty.
        (series("apiserver", ""), 3),
        // Upstream's aggregated discovery and health check labels.
        (series("apiserver", "api"), 1),
        (series("apiserver", "apis"), 1),
        (series("", "/healthz"), 1),
    ] {
        assert!(text.contains(&format!("{line} {n}\n")), "missing {line} {n} in:\n{text}");
    }
    assert!(text.contains("apiserver_request_total{code=\"200\",component=\"apiserver\",dry_run=\"\",group=\"\",resource=\"configmaps\",scope=\"namespace\",subresource=\"\",verb=\"LIST\",version=\"v1\"} 1"), "{text}");
    for label in ["subresource=\"/api\"", "subresource=\"/version\"", "subresource=\"/openapi/v2\"", "subresource=\"/livez/ping\""] {
        assert!(!text.contains(label), "{label} in:\n{text}");
    }
    // The watch cache's families are part of the same text, once.
    assert!(text.contains("# TYPE apiserver_watch_cache_initializations_total counter"), "{text}");
    assert!(text.contains("# TYPE apiserver_cache_list_total counter"), "{text}");
    assert_families_unique(&text);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_unfiltered_router_serves_the_same_combined_metrics() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().unwrap();
    let storage: Arc<dyn Storage> = Arc::new(rkube_storage::embedded::EmbeddedStorage::open(dir.path()).unwrap());
    let st = ApiState::new(storage, ServerConfig::default());
    rkube_apiserver::bootstrap(&st).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://127.0.0.1:{}", listener.local_addr().unwrap().port());
    let (stop, stopped) = oneshot::channel::<()>();
    let done = tokio::spawn(rkube_apiserver::serve(listener, st, async {
        let _ = stopped.await;
    }));
    let client = reqwest::Client::builder().timeout(Duration::from_secs(30)).build().unwrap();
    let list = client.get(format!("{base}/api/v1/namespaces/default/configmaps")).send().await.unwrap();
    assert_eq!(list.status().as_u16(), 200);
    let resp = client.get(format!("{base}/metrics")).send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    assert_eq!(
        resp.headers().get("content-type").and_then(|v| v.to_str().ok()),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    let text = resp.text().await.unwrap();
    for family in [
        "# TYPE apiserver_watch_cache_initializations_total counter",
        "# TYPE apiserver_cache_list_total counter",
        // The server registry's families (no request counted: no filter chain).
        "# TYPE apiserver_current_inflight_requests gauge",
        "# TYPE process_cpu_seconds_total counter",
    ] {
        assert!(text.contains(family), "missing {family} in:\n{text}");
    }
    assert_families_unique(&text);
    let _ = stop.send(());
    let _ = tokio::time::timeout(Duration::from_secs(10), done).await;
}
