//! Helpers of `tests/cache.rs`: real API server processes (this crate's
//! `apiserver` binary, same flags as `rkube apiserver`), an in-process
//! server over a given storage, an etcd the test starts on ports it picked
//! beforehand (to start the API server before etcd), an HTTP client that
//! returns what a client sees, `/metrics` parsing, and a watch reader.
//! `tests/faults.rs` builds on these too (through `faults_support`).
//!
//! Every process is a child of the test, killed by its PID on drop.
#![allow(dead_code)]

use std::io::Read;
use std::net::{Ipv4Addr, TcpListener};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use rkube_apiserver::{ApiState, ServerConfig};
use rkube_storage::Storage;
use serde_json::{json, Value};

/// A reqwest client with a 30 s timeout (see [`client_with_timeout`]).
pub fn client() -> reqwest::Client {
    client_with_timeout(Duration::from_secs(30))
}

/// A reqwest client whose requests give up after `timeout`; installs the TLS
/// crypto provider reqwest needs (plain HTTP only here).
pub fn client_with_timeout(timeout: Duration) -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder().timeout(timeout).build().expect("HTTP client")
}

/// `metadata.resourceVersion` of a JSON object as a number (0 when absent).
pub fn rv_of(v: &Value) -> i64 {
    v.pointer("/metadata/resourceVersion").and_then(Value::as_str).and_then(|s| s.parse().ok()).unwrap_or(0)
}

/// One response as a client sees it.
#[derive(Debug)]
pub struct Resp {
    /// HTTP status.
    pub code: u16,
    /// Headers.
    pub headers: reqwest::header::HeaderMap,
    /// JSON body (`Null` when not JSON).
    pub body: Value,
    /// Raw text.
    pub text: String,
    /// Time to the full response.
    pub elapsed: Duration,
}

impl Resp {
    /// `Status.reason`.
    pub fn reason(&self) -> &str {
        self.body["reason"].as_str().unwrap_or("")
    }
    /// `metadata.resourceVersion` as a number (0 when absent).
    pub fn rv(&self) -> i64 {
        rv_of(&self.body)
    }
    /// `metadata.name` of each item.
    pub fn names(&self) -> Vec<String> {
        self.body["items"]
            .as_array()
            .map(|a| a.iter().filter_map(|i| i.pointer("/metadata/name")?.as_str().map(str::to_string)).collect())
            .unwrap_or_default()
    }
    /// The `Retry-After` header as a number.
    pub fn retry_after(&self) -> Option<u64> {
        self.headers.get("retry-after")?.to_str().ok()?.parse().ok()
    }
}

/// An HTTP client bound to one server.
#[derive(Clone)]
pub struct Api {
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    client: reqwest::Client,
}

impl Api {
    /// A client for `base`.
    pub fn new(base: &str) -> Api {
        Api { base: base.to_string(), client: client() }
    }

    /// Sends a request with an optional JSON body.
    pub async fn send(&self, method: &str, path: &str, body: Option<&Value>) -> Resp {
        let started = Instant::now();
        let m = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
        let mut req = self.client.request(m, format!("{}{}", self.base, path));
        if let Some(b) = body {
            req = req.header("content-type", "application/json").body(b.to_string());
        }
        let resp = req.send().await.expect("request");
        let code = resp.status().as_u16();
        let headers = resp.headers().clone();
        let text = resp.text().await.expect("body");
        let body = serde_json::from_str(&text).unwrap_or(Value::Null);
        Resp { code, headers, body, text, elapsed: started.elapsed() }
    }

    /// GET.
    pub async fn get(&self, path: &str) -> Resp {
        self.send("GET", path, None).await
    }

    /// POST JSON, asserting 201.
    pub async fn create(&self, path: &str, body: &Value) -> Resp {
        let r = self.send("POST", path, Some(body)).await;
        assert_eq!(r.code, 201, "create {path}: {}", r.text);
        r
    }

    /// Creates configmap `name` in `default`, returning its resourceVersion.
    pub async fn configmap(&self, name: &str) -> i64 {
        let body = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": "v"}});
        self.create("/api/v1/namespaces/default/configmaps", &body).await.rv()
    }

    /// The `/metrics` text.
    pub async fn metrics(&self) -> String {
        let r = self.get("/metrics").await;
        assert_eq!(r.code, 200, "{}", r.text);
        r.text
    }

    /// Waits until `/readyz` answers 200 (panics after `secs`).
    pub async fn wait_ready(&self, secs: u64) {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            if let Ok(r) = self.client.get(format!("{}/readyz", self.base)).send().await {
                if r.status().as_u16() == 200 {
                    return;
                }
            }
            assert!(Instant::now() < deadline, "{} not ready within {secs}s", self.base);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Opens a watch.
    pub async fn watch(&self, path: &str) -> WatchReader {
        let resp = self.client.get(format!("{}{}", self.base, path)).send().await.expect("watch request");
        WatchReader::from_response(resp)
    }
}

/// The value of the sample `name{labels...}` (labels matched as a subset), 0 when absent.
pub fn metric(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
        .filter(|l| labels.iter().all(|(k, v)| l.contains(&format!("{k}=\"{v}\""))))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Newline-delimited watch events.
pub struct WatchReader {
    /// HTTP status.
    pub code: u16,
    stream: std::pin::Pin<Box<dyn futures::Stream<Item = reqwest::Result<bytes::Bytes>> + Send>>,
    buf: Vec<u8>,
}

/// What waiting for the next line of a watch stream gave.
#[allow(clippy::enum_variant_names)]
#[derive(Debug)]
pub enum Line {
    /// One line, its newline included.
    Line(Vec<u8>),
    /// Nothing within the wait.
    Idle,
    /// The stream ended (or broke).
    End,
}

impl WatchReader {
    /// Reads the body of a watch response.
    pub fn from_response(resp: reqwest::Response) -> WatchReader {
        WatchReader { code: resp.status().as_u16(), stream: Box::pin(resp.bytes_stream()), buf: Vec::new() }
    }

    /// The next line, waiting at most `wait`.
    pub async fn next_line(&mut self, wait: Duration) -> Line {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            if let Some(pos) = self.buf.iter().position(|b| *b == b'\n') {
                return Line::Line(self.buf.drain(..=pos).collect());
            }
            match tokio::time::timeout_at(deadline, self.stream.next()).await {
                Ok(Some(Ok(chunk))) => self.buf.extend_from_slice(&chunk),
                Ok(Some(Err(_))) | Ok(None) => return Line::End,
                Err(_) => return Line::Idle,
            }
        }
    }

    /// The next event within `secs` (None on timeout or end).
    pub async fn next_within(&mut self, secs: u64) -> Option<Value> {
        match self.next_line(Duration::from_secs(secs)).await {
            Line::Line(line) => serde_json::from_slice(&line).ok(),
            Line::Idle | Line::End => None,
        }
    }

    /// True when the stream ends within `secs`.
    pub async fn ends_within(&mut self, secs: u64) -> bool {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
        loop {
            match tokio::time::timeout_at(deadline, self.stream.next()).await {
                Ok(None) | Ok(Some(Err(_))) => return true,
                Ok(Some(Ok(_))) => continue,
                Err(_) => return false,
            }
        }
    }
}

/// A free loopback port.
pub fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind").local_addr().expect("addr").port()
}

/// A real `apiserver` process (this crate's binary), killed by PID on drop.
pub struct Apiserver {
    child: Child,
    log: PathBuf,
    _dir: tempfile::TempDir,
    /// Client for it.
    pub api: Api,
}

impl Drop for Apiserver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Apiserver {
    /// Starts `apiserver --port=0 --data-dir=<temp> <args>` with extra env,
    /// and waits until it listens (not until it is ready).
    pub fn spawn(args: &[&str], env: &[(&str, &str)]) -> Apiserver {
        Self::spawn_in(None, args, env)
    }

    /// Like [`Apiserver::spawn`] with the embedded store in `data_dir` (a temp dir when None).
    pub fn spawn_in(data_dir: Option<&std::path::Path>, args: &[&str], env: &[(&str, &str)]) -> Apiserver {
        let dir = tempfile::tempdir().expect("temp dir");
        let log = dir.path().join("apiserver.log");
        let out = std::fs::File::create(&log).expect("log file");
        let data = data_dir.map(|d| d.to_path_buf()).unwrap_or_else(|| dir.path().join("data"));
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_apiserver"));
        cmd.arg("--port=0")
            .arg(format!("--data-dir={}", data.display()))
            .args(args)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("log"))
            .stderr(out);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd.spawn().expect("spawn apiserver");
        let mut server = Apiserver { child, log, _dir: dir, api: Api::new("http://0.0.0.0:0") };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let text = server.log();
            if let Some(addr) = text
                .lines()
                .find(|l| l.contains("serving the Kubernetes API"))
                .and_then(|l| l.split("address=").nth(1))
                .and_then(|r| r.split_whitespace().next())
            {
                server.api = Api::new(&format!("http://{addr}"));
                return server;
            }
            if let Ok(Some(status)) = server.child.try_wait() {
                panic!("apiserver exited ({status}):\n{text}");
            }
            assert!(Instant::now() < deadline, "apiserver did not listen in 30 s:\n{text}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `kill -9 <pid>` and reap it (the process gets no chance to clean up).
    pub fn kill_9(&mut self) {
        // SAFETY: plain kill(2) on our own child's pid, which is not reaped yet.
        unsafe {
            libc::kill(self.child.id() as libc::pid_t, libc::SIGKILL);
        }
        let _ = self.child.wait();
    }

    /// The exit status when the process has exited, None while it runs.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Everything the process logged so far.
    pub fn log(&self) -> String {
        let mut s = String::new();
        if let Ok(mut f) = std::fs::File::open(&self.log) {
            let _ = f.read_to_string(&mut s);
        }
        s
    }
}

/// Runs `apiserver <args>` expecting it to exit; returns (success, output).
pub fn run_to_exit(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_apiserver")).args(args).output().expect("run apiserver");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

/// An etcd on loopback ports chosen before it starts, so a server can be
/// pointed at it while it is still down. Killed by PID on drop.
pub struct LateEtcd {
    client_port: u16,
    peer_port: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
}

impl LateEtcd {
    /// Picks the ports; nothing runs yet.
    pub fn new() -> LateEtcd {
        let client_port = free_port();
        let mut peer_port = free_port();
        while peer_port == client_port {
            peer_port = free_port();
        }
        LateEtcd { client_port, peer_port, dir: tempfile::tempdir().expect("temp dir"), child: None }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.client_port)
    }

    /// Starts etcd and waits until it answers `/health` (20 s at most).
    pub fn start(&mut self) {
        let client = self.endpoint();
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let log = std::fs::File::create(self.dir.path().join("etcd.log")).expect("etcd log");
        let child = Command::new("etcd")
            .arg("--name=late")
            .arg(format!("--data-dir={}", self.dir.path().join("data").display()))
            .arg(format!("--listen-client-urls={client}"))
            .arg(format!("--advertise-client-urls={client}"))
            .arg(format!("--listen-peer-urls={peer}"))
            .arg(format!("--initial-advertise-peer-urls={peer}"))
            .arg(format!("--initial-cluster=late={peer}"))
            .arg("--experimental-watch-progress-notify-interval=1s")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("spawn etcd (apt-get install -y etcd-server)");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        while !etcd_healthy(self.client_port) {
            assert!(Instant::now() < deadline, "etcd not healthy in 20 s");
            std::thread::sleep(Duration::from_millis(25));
        }
    }
}

impl LateEtcd {
    /// Kills etcd (by PID) and waits for it; `start` brings it back with the same data.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for LateEtcd {
    fn drop(&mut self) {
        if let Some(c) = self.child.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn etcd_healthy(port: u16) -> bool {
    use std::io::Write;
    let Ok(mut conn) =
        std::net::TcpStream::connect_timeout(&(Ipv4Addr::LOCALHOST, port).into(), Duration::from_millis(200))
    else {
        return false;
    };
    let _ = conn.set_read_timeout(Some(Duration::from_secs(1)));
    if conn.write_all(b"GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").is_err() {
        return false;
    }
    let mut body = String::new();
    let _ = conn.read_to_string(&mut body);
    body.contains("\"health\":\"true\"")
}

/// A server in this process over `storage` with `config`; stops on drop.
pub struct InProcess {
    /// Client for it.
    pub api: Api,
    /// Its state (caches, metrics).
    pub state: ApiState,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Drop for InProcess {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

impl InProcess {
    /// Bootstraps and serves `storage` on 127.0.0.1:0; waits for `/readyz`.
    pub async fn start(storage: Arc<dyn Storage>, config: ServerConfig) -> InProcess {
        let server = Self::start_unready(storage, config).await;
        server.api.wait_ready(20).await;
        server
    }

    /// Bootstraps and serves `storage` on 127.0.0.1:0 without waiting for
    /// `/readyz` (for tests of a server that is not ready yet).
    pub async fn start_unready(storage: Arc<dyn Storage>, config: ServerConfig) -> InProcess {
        let state = ApiState::new(storage, config);
        rkube_apiserver::bootstrap(&state).await.expect("bootstrap");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let st = state.clone();
        tokio::spawn(async move {
            let _ = rkube_apiserver::serve(listener, st, async move {
                let _ = rx.await;
            })
            .await;
        });
        InProcess { api: Api::new(&format!("http://{addr}")), state, stop: Some(tx) }
    }
}

/// How a [`WatchHooked`] storage opens watches.
pub trait WatchHook: Send + Sync + 'static {
    /// Opens the watch of `prefix` after `after`, normally on `inner`.
    fn watch<'a>(
        &'a self,
        inner: &'a dyn Storage,
        prefix: &'a str,
        after: rkube_storage::Revision,
    ) -> futures::future::BoxFuture<'a, rkube_storage::Result<rkube_storage::Watch>>;
}

/// Storage passing every call to `inner` except watches, which `hook` opens:
/// the one pass-through behind the tests' faulty storages.
pub struct WatchHooked<H> {
    inner: Arc<dyn Storage>,
    /// What it does with watches.
    pub hook: H,
}

impl<H> WatchHooked<H> {
    /// Wraps `inner`.
    pub fn wrap(inner: Arc<dyn Storage>, hook: H) -> WatchHooked<H> {
        WatchHooked { inner, hook }
    }
}

#[async_trait::async_trait]
impl<H: WatchHook> Storage for WatchHooked<H> {
    fn backend_name(&self) -> &'static str {
        self.inner.backend_name()
    }
    async fn get(&self, key: &str) -> rkube_storage::Result<Option<rkube_storage::KeyValue>> {
        self.inner.get(key).await
    }
    async fn range(&self, req: rkube_storage::RangeRequest) -> rkube_storage::Result<rkube_storage::RangeResponse> {
        self.inner.range(req).await
    }
    async fn create(&self, key: &str, value: bytes::Bytes) -> rkube_storage::Result<rkube_storage::KeyValue> {
        self.inner.create(key, value).await
    }
    async fn update(
        &self,
        key: &str,
        value: bytes::Bytes,
        expected: rkube_storage::Revision,
    ) -> rkube_storage::Result<rkube_storage::KeyValue> {
        self.inner.update(key, value, expected).await
    }
    async fn delete(
        &self,
        key: &str,
        expected: Option<rkube_storage::Revision>,
    ) -> rkube_storage::Result<(rkube_storage::KeyValue, rkube_storage::Revision)> {
        self.inner.delete(key, expected).await
    }
    async fn watch(&self, prefix: &str, after: rkube_storage::Revision) -> rkube_storage::Result<rkube_storage::Watch> {
        self.hook.watch(&*self.inner, prefix, after).await
    }
    async fn current_revision(&self) -> rkube_storage::Result<rkube_storage::Revision> {
        self.inner.current_revision().await
    }
    async fn compacted_revision(&self) -> rkube_storage::Result<rkube_storage::Revision> {
        self.inner.compacted_revision().await
    }
    async fn compact(&self, revision: rkube_storage::Revision) -> rkube_storage::Result<()> {
        self.inner.compact(revision).await
    }
    fn progress_notify_reliable(&self) -> bool {
        self.inner.progress_notify_reliable()
    }
}

/// Drops every watch event for keys containing `marker`.
pub struct LoseMarked {
    marker: String,
}

impl WatchHook for LoseMarked {
    fn watch<'a>(
        &'a self,
        inner: &'a dyn Storage,
        prefix: &'a str,
        after: rkube_storage::Revision,
    ) -> futures::future::BoxFuture<'a, rkube_storage::Result<rkube_storage::Watch>> {
        Box::pin(async move {
            use rkube_storage::WatchResponse;
            let w = inner.watch(prefix, after).await?;
            let marker = self.marker.clone();
            let stream = w.stream.filter_map(move |msg| {
                let out = match msg {
                    Ok(WatchResponse::Events(evs)) => {
                        let kept: Vec<_> = evs.into_iter().filter(|e| !e.kv.key.contains(&marker)).collect();
                        (!kept.is_empty()).then_some(Ok(WatchResponse::Events(kept)))
                    }
                    other => Some(other),
                };
                futures::future::ready(out)
            });
            Ok(rkube_storage::Watch { stream: Box::pin(stream), progress: w.progress })
        })
    }
}

/// Storage whose watches never deliver events for keys containing `marker`:
/// a stand-in for a lost event in the storage watch stream (the class of bug
/// the consistency checker exists for). Reads and writes are untouched.
pub type LossyWatchStorage = WatchHooked<LoseMarked>;

impl LossyWatchStorage {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn Storage>, marker: &str) -> LossyWatchStorage {
        WatchHooked::wrap(inner, LoseMarked { marker: marker.to_string() })
    }
}

/// A fresh embedded store in a temp dir (kept alive by the returned dir).
pub fn embedded() -> (Arc<dyn Storage>, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("temp dir");
    let s = rkube_storage::embedded::EmbeddedStorage::open(dir.path()).expect("open embedded store");
    (Arc::new(s), dir)
}
