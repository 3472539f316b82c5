//! Test harness: a real rkube API server on 127.0.0.1:0 in this process,
//! over the embedded store in a temp dir (or a real etcd), and a small HTTP
//! client that returns what a client sees (status code, headers, JSON body).

#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use rkube_apiserver::{ApiState, ServerConfig};
use rkube_storage::Storage;
use serde_json::{json, Value};
use tokio::sync::oneshot;

/// An HTTP client. reqwest is built with `rustls-tls-no-provider` (ring is
/// the workspace's only crypto provider), so ring is installed first.
pub fn http_client(timeout: Option<Duration>) -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut b = reqwest::Client::builder();
    if let Some(t) = timeout {
        b = b.timeout(t);
    }
    b.build().expect("HTTP client")
}

/// A running server and a client for it.
pub struct TestServer {
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    /// The HTTP client.
    pub client: reqwest::Client,
    /// The storage behind the server (for compaction tests).
    pub storage: Arc<dyn Storage>,
    /// The server's decoded objects ([`rkube_apiserver::decoded`]).
    pub decoded: Arc<rkube_apiserver::decoded::DecodedObjects>,
    stop: Option<oneshot::Sender<()>>,
    _dir: Option<tempfile::TempDir>,
    _etcd: Option<rkube_storage::testing::EtcdServer>,
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

/// One response.
#[derive(Debug)]
pub struct Resp {
    /// HTTP status.
    pub code: u16,
    /// Headers.
    pub headers: reqwest::header::HeaderMap,
    /// Body as JSON (`Null` when empty or not JSON).
    pub body: Value,
    /// Raw body text.
    pub text: String,
}

impl Resp {
    /// `Status.reason`.
    pub fn reason(&self) -> &str {
        self.body.get("reason").and_then(Value::as_str).unwrap_or("")
    }
    /// `Status.message`.
    pub fn message(&self) -> &str {
        self.body.get("message").and_then(Value::as_str).unwrap_or("")
    }
    /// `metadata.resourceVersion`.
    pub fn rv(&self) -> String {
        self.body.pointer("/metadata/resourceVersion").and_then(Value::as_str).unwrap_or("").to_string()
    }
    /// Asserts the response is a failure `Status` with `code` and `reason`.
    pub fn assert_status(&self, code: u16, reason: &str) {
        assert_eq!(self.code, code, "unexpected code; body: {}", self.text);
        assert_eq!(self.body["kind"], "Status", "not a Status: {}", self.text);
        assert_eq!(self.body["apiVersion"], "v1");
        assert_eq!(self.body["status"], "Failure");
        assert_eq!(self.body["code"], code);
        assert_eq!(self.reason(), reason, "body: {}", self.text);
    }
}

impl TestServer {
    /// A server over a fresh embedded store.
    pub async fn embedded() -> TestServer {
        Self::embedded_with(ServerConfig::default()).await
    }

    /// A server over a fresh embedded store serving reads straight from
    /// storage (`--watch-cache=false`), for rules about storage revisions.
    pub async fn embedded_storage_reads() -> TestServer {
        Self::embedded_with(uncached()).await
    }

    /// A server over a fresh embedded store with `config`.
    pub async fn embedded_with(config: ServerConfig) -> TestServer {
        let dir = tempfile::tempdir().expect("temp dir");
        let storage: Arc<dyn Storage> =
            Arc::new(rkube_storage::embedded::EmbeddedStorage::open(dir.path()).expect("open embedded store"));
        Self::start(storage, Some(dir), None, config).await
    }

    /// A server over a real etcd started for this test.
    pub async fn etcd() -> TestServer {
        Self::etcd_with(ServerConfig::default()).await
    }

    /// A server over a real etcd serving reads straight from storage.
    pub async fn etcd_storage_reads() -> TestServer {
        Self::etcd_with(uncached()).await
    }

    async fn etcd_with(config: ServerConfig) -> TestServer {
        let etcd = rkube_storage::testing::EtcdServer::start().expect("start etcd");
        let storage: Arc<dyn Storage> =
            Arc::new(rkube_storage::etcd::EtcdStorage::connect(&[etcd.endpoint()]).await.expect("connect to etcd"));
        Self::start(storage, None, Some(etcd), config).await
    }

    async fn start(
        storage: Arc<dyn Storage>,
        dir: Option<tempfile::TempDir>,
        etcd: Option<rkube_storage::testing::EtcdServer>,
        config: ServerConfig,
    ) -> TestServer {
        let st = ApiState::new(storage.clone(), config);
        let decoded = st.decoded.clone();
        rkube_apiserver::bootstrap(&st).await.expect("bootstrap");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (tx, rx) = oneshot::channel::<()>();
        tokio::spawn(async move {
            let _ = rkube_apiserver::serve(listener, st, async move {
                let _ = rx.await;
            })
            .await;
        });
        TestServer {
            base: format!("http://{addr}"),
            client: http_client(Some(Duration::from_secs(30))),
            storage,
            decoded,
            stop: Some(tx),
            _dir: dir,
            _etcd: etcd,
        }
    }

    /// Sends a request.
    pub async fn send(
        &self,
        method: &str,
        path: &str,
        content_type: Option<&str>,
        accept: Option<&str>,
        body: Option<Vec<u8>>,
    ) -> Resp {
        let m = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
        let mut req = self.client.request(m, format!("{}{}", self.base, path));
        if let Some(ct) = content_type {
            req = req.header("content-type", ct);
        }
        if let Some(a) = accept {
            req = req.header("accept", a);
        }
        if let Some(b) = body {
            req = req.body(b);
        }
        let resp = req.send().await.expect("request");
        let code = resp.status().as_u16();
        let headers = resp.headers().clone();
        let text = resp.text().await.expect("body");
        let body = serde_json::from_str(&text).unwrap_or(Value::Null);
        Resp { code, headers, body, text }
    }

    /// GET.
    pub async fn get(&self, path: &str) -> Resp {
        self.send("GET", path, None, None, None).await
    }

    /// GET with an Accept header.
    pub async fn get_as(&self, path: &str, accept: &str) -> Resp {
        self.send("GET", path, None, Some(accept), None).await
    }

    /// POST a JSON body.
    pub async fn post(&self, path: &str, body: &Value) -> Resp {
        self.send("POST", path, Some("application/json"), None, Some(body.to_string().into_bytes())).await
    }

    /// PUT a JSON body.
    pub async fn put(&self, path: &str, body: &Value) -> Resp {
        self.send("PUT", path, Some("application/json"), None, Some(body.to_string().into_bytes())).await
    }

    /// PATCH with a content type.
    pub async fn patch(&self, path: &str, content_type: &str, body: &str) -> Resp {
        self.send("PATCH", path, Some(content_type), None, Some(body.as_bytes().to_vec())).await
    }

    /// DELETE with an optional JSON body.
    pub async fn delete(&self, path: &str, body: Option<&Value>) -> Resp {
        let b = body.map(|v| v.to_string().into_bytes());
        let ct = body.map(|_| "application/json");
        self.send("DELETE", path, ct, None, b).await
    }

    /// Creates a namespace (asserts 201).
    pub async fn namespace(&self, name: &str) {
        let r = self
            .post("/api/v1/namespaces", &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}))
            .await;
        assert_eq!(r.code, 201, "{}", r.text);
    }

    /// Opens a watch; returns its event reader.
    pub async fn watch(&self, path: &str) -> WatchReader {
        self.watch_as(path, None).await
    }

    /// Opens a watch with an Accept header.
    pub async fn watch_as(&self, path: &str, accept: Option<&str>) -> WatchReader {
        let client = http_client(None);
        let mut req = client.get(format!("{}{}", self.base, path));
        if let Some(a) = accept {
            req = req.header("accept", a);
        }
        let resp = req.send().await.expect("watch request");
        let code = resp.status().as_u16();
        let headers = resp.headers().clone();
        WatchReader { code, headers, stream: Box::pin(resp.bytes_stream()), buf: Vec::new() }
    }
}

/// Reads newline-delimited watch events.
pub struct WatchReader {
    /// HTTP status of the watch.
    pub code: u16,
    /// Headers.
    pub headers: reqwest::header::HeaderMap,
    stream: std::pin::Pin<Box<dyn futures::Stream<Item = reqwest::Result<bytes::Bytes>> + Send>>,
    buf: Vec<u8>,
}

impl WatchReader {
    /// The next event within `secs` seconds (None on timeout or end of stream).
    pub async fn next_within(&mut self, secs: u64) -> Option<Value> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
        loop {
            if let Some(pos) = self.buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=pos).collect();
                return Some(serde_json::from_slice(&line).expect("event is JSON"));
            }
            match tokio::time::timeout_at(deadline, self.stream.next()).await {
                Ok(Some(Ok(chunk))) => self.buf.extend_from_slice(&chunk),
                _ => return None,
            }
        }
    }

    /// The next event (5 s at most), asserting there is one.
    pub async fn next(&mut self) -> Value {
        self.next_within(5).await.expect("a watch event within 5 s")
    }

    /// True when the stream ends (or stays silent) within `secs`.
    pub async fn ended_within(&mut self, secs: u64) -> bool {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
        loop {
            match tokio::time::timeout_at(deadline, self.stream.next()).await {
                Ok(None) => return true,
                Ok(Some(Ok(_))) => continue,
                Ok(Some(Err(_))) => return true,
                Err(_) => return false,
            }
        }
    }
}

/// Settings with the watch cache off (reads served from storage).
fn uncached() -> ServerConfig {
    let mut c = ServerConfig::default();
    c.watch_cache.enabled = false;
    c
}

/// A minimal valid pod.
pub fn pod(name: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "c", "image": "nginx:1.25"}]},
    })
}

/// A configmap.
pub fn configmap(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": "v"}})
}
