//! Bad requests against the real API server: the production serving path
//! (`server::serve_api` with kube-apiserver's default flags: plain HTTP,
//! anonymous, AlwaysAllow) over the embedded store, on 127.0.0.1.
//!
//! One table row per hostile request. Each row asserts the exact HTTP code,
//! the Status `reason` (and causes for 422), and that storage is unchanged
//! afterwards (same store revision, same keys at the same revisions).
//! Header and URL limits are sent over a raw socket: the answer must be a
//! clean refusal (431/414 from hyper, as Go's server answers 431) followed by
//! the connection closing, never a hang.

use std::sync::Arc;
use std::time::Duration;

use rkube_apiserver::filters::metrics::ApiserverMetrics;
use rkube_apiserver::filters::{FilterArgs, FilterChain};
use rkube_storage::{RangeRequest, Storage};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::oneshot;

const CMS: &str = "/api/v1/namespaces/default/configmaps";
const CM: &str = "/api/v1/namespaces/default/configmaps/cm";
const JSON: &str = "application/json";
const YAML: &str = "application/yaml";
const JSON_PATCH: &str = "application/json-patch+json";
const MERGE_PATCH: &str = "application/merge-patch+json";
const SMP: &str = "application/strategic-merge-patch+json";
const APPLY: &str = "application/apply-patch+yaml";

struct Server {
    base: String,
    addr: std::net::SocketAddr,
    storage: Arc<dyn Storage>,
    client: reqwest::Client,
    stop: Option<oneshot::Sender<()>>,
    _dir: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

/// Everything storage holds: revision and every key with its mod revision.
#[derive(Debug, PartialEq, Eq)]
struct Snapshot {
    revision: i64,
    keys: Vec<(String, i64)>,
}

impl Server {
    async fn start() -> Server {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let dir = tempfile::tempdir().expect("temp dir");
        let storage: Arc<dyn Storage> =
            Arc::new(rkube_storage::embedded::EmbeddedStorage::open(dir.path()).expect("embedded store"));
        let st = rkube_apiserver::server::default_state(storage.clone());
        rkube_apiserver::bootstrap(&st).await.expect("bootstrap");
        let config = FilterArgs::default().load().expect("default flags");
        let chain = FilterChain::build(config, None, Arc::new(ApiserverMetrics::new())).expect("filter chain");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (tx, rx) = oneshot::channel::<()>();
        tokio::spawn(async move {
            let _ = rkube_apiserver::server::serve_api(listener, st, &chain, async move {
                let _ = rx.await;
            })
            .await;
        });
        let client = reqwest::Client::builder().timeout(Duration::from_secs(30)).build().expect("client");
        Server { base: format!("http://{addr}"), addr, storage, client, stop: Some(tx), _dir: dir }
    }

    async fn send(&self, method: &str, path: &str, ct: Option<&str>, accept: Option<&str>, body: Vec<u8>) -> (u16, Value) {
        let m = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
        let mut req = self.client.request(m, format!("{}{}", self.base, path));
        if let Some(ct) = ct {
            req = req.header("content-type", ct);
        }
        if let Some(a) = accept {
            req = req.header("accept", a);
        }
        if !body.is_empty() {
            req = req.body(body);
        }
        let resp = req.send().await.unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        let code = resp.status().as_u16();
        let text = resp.text().await.expect("body");
        (code, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    async fn snapshot(&self) -> Snapshot {
        let revision = self.storage.current_revision().await.expect("revision");
        let all = self.storage.range(RangeRequest::prefix("/")).await.expect("range");
        Snapshot { revision, keys: all.kvs.into_iter().map(|kv| (kv.key, kv.mod_revision)).collect() }
    }

    /// Sends raw bytes; returns the status code of the answer and whether
    /// the server closed the connection after it (within 10 s).
    async fn raw(&self, request: &[u8]) -> (u16, bool) {
        let mut sock = tokio::net::TcpStream::connect(self.addr).await.expect("connect");
        // The server may answer and close before it read everything.
        let _ = sock.write_all(request).await;
        let mut buf = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(10), sock.read_to_end(&mut buf)).await;
        let closed = matches!(read, Ok(Ok(_)) | Ok(Err(_)));
        let head = String::from_utf8_lossy(&buf[..buf.len().min(64)]).into_owned();
        let code = head.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
        (code, closed)
    }
}

/// One hostile request and what a client must see.
struct Row {
    name: &'static str,
    method: &'static str,
    path: String,
    ct: Option<&'static str>,
    accept: Option<&'static str>,
    body: Vec<u8>,
    code: u16,
    reason: &'static str,
    /// For 422: the field of the first cause.
    cause_field: Option<&'static str>,
}

fn row(name: &'static str, method: &'static str, path: &str, ct: Option<&'static str>, body: impl Into<Vec<u8>>, code: u16, reason: &'static str) -> Row {
    Row { name, method, path: path.to_string(), ct, accept: None, body: body.into(), code, reason, cause_field: None }
}

fn invalid(name: &'static str, method: &'static str, path: &str, ct: &'static str, body: Value, field: &'static str) -> Row {
    Row { cause_field: Some(field), ..row(name, method, path, Some(ct), body.to_string(), 422, "Invalid") }
}

fn configmap(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": "v"}})
}

fn nested(n: usize) -> String {
    format!(
        "{{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{{\"name\":\"deep\"}},\"data\":{}{}}}",
        "{\"a\":".repeat(n),
        "}".repeat(n)
    )
}

fn table() -> Vec<Row> {
    let big = {
        let mut cm = configmap("big");
        cm["data"]["k"] = json!("x".repeat(4 * 1024 * 1024));
        cm.to_string()
    };
    let many_ops: Vec<Value> = (0..10_001).map(|_| json!({"op": "test", "path": "/data/k", "value": "v"})).collect();
    let copies: Vec<Value> = (0..40).map(|i| json!({"op": "copy", "from": "/data", "path": format!("/data/c{i}")})).collect();
    let over_one_mib = "x".repeat(1024 * 1024 + 1);
    let deep_add = {
        let deep = (0..100).fold(json!("x"), |v, _| json!({"a": v}));
        json!([{"op": "add", "path": "/data/a", "value": deep}, {"op": "add", "path": format!("/data/a{}", "/a".repeat(99)), "value": deep}])
    };
    vec![
        // ---- bodies
        row("malformed JSON body", "POST", CMS, Some(JSON), "{\"kind\": \"ConfigMap\",", 400, "BadRequest"),
        row("empty JSON body", "POST", CMS, Some(JSON), "", 400, "BadRequest"),
        row("JSON array body", "POST", CMS, Some(JSON), "[1,2]", 400, "BadRequest"),
        row("JSON that is not UTF-8", "POST", CMS, Some(JSON), b"{\"a\":\"\xff\xfe\"}".to_vec(), 400, "BadRequest"),
        row("malformed YAML body", "POST", CMS, Some(YAML), "kind: ConfigMap\nmetadata: [\n", 400, "BadRequest"),
        row("multi-document YAML body", "POST", CMS, Some(YAML), "a: 1\n---\nb: 2\n", 400, "BadRequest"),
        row("protobuf body that is garbage", "POST", CMS, Some("application/vnd.kubernetes.protobuf"), b"k8s\0\xff\xff\xff".to_vec(), 400, "BadRequest"),
        row("wrong content type", "POST", CMS, Some("text/plain"), configmap("x").to_string(), 415, "UnsupportedMediaType"),
        row("form content type", "POST", CMS, Some("application/x-www-form-urlencoded"), "a=b", 415, "UnsupportedMediaType"),
        row("JSON nested 10,000 deep", "POST", CMS, Some(JSON), nested(10_000), 400, "BadRequest"),
        row("JSON nested 200 deep", "POST", CMS, Some(JSON), nested(200), 400, "BadRequest"),
        row("YAML nested 10,000 deep", "POST", CMS, Some(YAML), format!("a: {}{}", "[".repeat(10_000), "]".repeat(10_000)), 400, "BadRequest"),
        row("YAML aliases of a 1,000-item anchor, 300,000 of them", "POST", CMS, Some(YAML), format!("kind: ConfigMap\nmetadata:\n  name: a\nx: &a [{}]\ny: [{}x]\n", vec!["x"; 1000].join(","), "*a,".repeat(300_000)), 400, "BadRequest"),
        row("body over 3 MiB", "POST", CMS, Some(JSON), big, 413, "RequestEntityTooLarge"),
        // ---- kinds and names
        row("kind does not match the URL", "POST", CMS, Some(JSON), json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}}).to_string(), 400, "BadRequest"),
        row("unknown kind in the body", "POST", CMS, Some(JSON), json!({"apiVersion": "v1", "kind": "Widget", "metadata": {"name": "x"}}).to_string(), 400, "BadRequest"),
        row("apiVersion of another group", "POST", CMS, Some(JSON), json!({"apiVersion": "apps/v1", "kind": "ConfigMap", "metadata": {"name": "x"}}).to_string(), 400, "BadRequest"),
        row("unknown resource in the URL", "POST", "/api/v1/namespaces/default/widgets", Some(JSON), configmap("x").to_string(), 404, "NotFound"),
        row("namespace of the body differs from the URL", "POST", CMS, Some(JSON), json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": "other"}}).to_string(), 400, "BadRequest"),
        row("name of the body differs from the URL", "PUT", CM, Some(JSON), configmap("other").to_string(), 400, "BadRequest"),
        invalid("invalid name", "POST", CMS, JSON, configmap("Bad_Name"), "metadata.name"),
        invalid("name too long", "POST", CMS, JSON, configmap(&"a".repeat(300)), "metadata.name"),
        invalid("missing name", "POST", CMS, JSON, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}}), "metadata.name"),
        invalid("invalid label key", "POST", CMS, JSON, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "labels": {"bad key": "v"}}}), "metadata.labels"),
        invalid("invalid data key", "POST", CMS, JSON, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {"a/b": "v"}}), "data[a/b]"),
        row("invalid dryRun", "POST", &format!("{CMS}?dryRun=Some"), Some(JSON), configmap("x").to_string(), 400, "BadRequest"),
        row("invalid resourceVersion in a PUT body", "PUT", CM, Some(JSON), json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "resourceVersion": "abc"}}).to_string(), 400, "BadRequest"),
        row("malformed DeleteOptions", "DELETE", CM, Some(JSON), "{\"propagationPolicy\":", 400, "BadRequest"),
        // ---- query parameters
        row("invalid label selector", "GET", &format!("{CMS}?labelSelector=a%20in%20(b"), None, "", 400, "BadRequest"),
        row("invalid label selector key", "GET", &format!("{CMS}?labelSelector=-a=b"), None, "", 400, "BadRequest"),
        row("invalid field selector", "GET", &format!("{CMS}?fieldSelector=metadata.name"), None, "", 400, "BadRequest"),
        row("field selector with a bad escape", "GET", &format!("{CMS}?fieldSelector=metadata.name%3Da%5Cb"), None, "", 400, "BadRequest"),
        row("unsupported field label", "GET", &format!("{CMS}?fieldSelector=spec.nope%3Dx"), None, "", 400, "BadRequest"),
        row("invalid resourceVersion on LIST", "GET", &format!("{CMS}?resourceVersion=abc"), None, "", 400, "BadRequest"),
        row("negative resourceVersion on LIST", "GET", &format!("{CMS}?resourceVersion=-1"), None, "", 400, "BadRequest"),
        row("invalid resourceVersion on WATCH", "GET", &format!("{CMS}?watch=true&resourceVersion=abc"), None, "", 400, "BadRequest"),
        row("invalid resourceVersion on GET", "GET", &format!("{CM}?resourceVersion=abc"), None, "", 400, "BadRequest"),
        row("garbage continue token", "GET", &format!("{CMS}?limit=1&continue=not-a-token"), None, "", 400, "BadRequest"),
        row("continue token with start key outside the prefix", "GET", &format!("{CMS}?limit=1&continue={}", token(5, "../secrets/x")), None, "", 400, "BadRequest"),
        row("continue with a resourceVersion", "GET", &format!("{CMS}?limit=1&resourceVersion=5&continue={}", token(5, "default/cm")), None, "", 400, "BadRequest"),
        row("invalid limit", "GET", &format!("{CMS}?limit=ten"), None, "", 400, "BadRequest"),
        row("negative timeoutSeconds", "GET", &format!("{CMS}?watch=true&timeoutSeconds=-5"), None, "", 400, "BadRequest"),
        Row { cause_field: Some("resourceVersionMatch"), ..row("resourceVersionMatch without resourceVersion", "GET", &format!("{CMS}?resourceVersionMatch=Exact"), None, "", 422, "Invalid") },
        Row { accept: Some("application/vnd.kubernetes.protobuf;as=Table;v=v1;g=meta.k8s.io"), ..row("Accept only a Table in protobuf", "GET", CMS, None, "", 406, "NotAcceptable") },
        row("name with a percent sign", "DELETE", &format!("{CMS}/a%25b"), None, "", 400, "BadRequest"),
        row("malformed percent escape in the path", "GET", &format!("{CMS}/a%zz"), None, "", 400, "BadRequest"),
        row("method not allowed on /version", "POST", "/version", Some(JSON), "{}", 405, "MethodNotAllowed"),
        // ---- patches
        row("patch with a non-patch content type", "PATCH", CM, Some(JSON), "{}", 415, "UnsupportedMediaType"),
        row("JSON patch that is not an array", "PATCH", CM, Some(JSON_PATCH), "{\"op\":\"add\"}", 400, "BadRequest"),
        row("JSON patch that is not JSON", "PATCH", CM, Some(JSON_PATCH), "[{\"op\":", 400, "BadRequest"),
        row("JSON patch whose test fails", "PATCH", CM, Some(JSON_PATCH), json!([{"op": "test", "path": "/data/k", "value": "nope"}]).to_string(), 422, "Invalid"),
        row("JSON patch with an unknown op", "PATCH", CM, Some(JSON_PATCH), json!([{"op": "explode", "path": "/data"}]).to_string(), 422, "Invalid"),
        row("JSON patch on a missing path", "PATCH", CM, Some(JSON_PATCH), json!([{"op": "remove", "path": "/spec/nothing"}]).to_string(), 422, "Invalid"),
        row("JSON patch over 10,000 operations", "PATCH", CM, Some(JSON_PATCH), Value::Array(many_ops).to_string(), 413, "RequestEntityTooLarge"),
        row("JSON patch copy amplification", "PATCH", CM, Some(JSON_PATCH), Value::Array(copies).to_string(), 422, "Invalid"),
        row("JSON patch nesting beyond the limit", "PATCH", CM, Some(JSON_PATCH), deep_add.to_string(), 422, "Invalid"),
        row("JSON patch renaming the object", "PATCH", CM, Some(JSON_PATCH), json!([{"op": "replace", "path": "/metadata/name", "value": "other"}]).to_string(), 400, "BadRequest"),
        invalid("JSON patch making the object invalid", "PATCH", CM, JSON_PATCH, json!([{"op": "add", "path": "/metadata/labels", "value": {"bad key": "v"}}]), "metadata.labels"),
        row("merge patch that is not JSON", "PATCH", CM, Some(MERGE_PATCH), "{\"data\":", 400, "BadRequest"),
        row("merge patch null", "PATCH", CM, Some(MERGE_PATCH), "null", 400, "BadRequest"),
        row("merge patch that is an array", "PATCH", CM, Some(MERGE_PATCH), "[1]", 422, "Invalid"),
        row("merge patch nested 10,000 deep", "PATCH", CM, Some(MERGE_PATCH), format!("{}{}", "{\"a\":".repeat(10_000), "}".repeat(10_000)), 400, "BadRequest"),
        row("strategic merge patch that is not JSON", "PATCH", CM, Some(SMP), "{\"data\":", 400, "BadRequest"),
        row("strategic merge patch with a non-list $retainKeys", "PATCH", CM, Some(SMP), json!({"data": {"$retainKeys": "k"}}).to_string(), 400, "BadRequest"),
        invalid("strategic merge patch making the object invalid", "PATCH", CM, SMP, json!({"metadata": {"name": "cm", "generateName": "Bad_"}, "data": {"a/b": "c"}}), "data[a/b]"),
        Row { cause_field: Some("fieldManager"), ..row("apply without fieldManager", "PATCH", CM, Some(APPLY), configmap("cm").to_string(), 422, "Invalid") },
        row("apply body that is not YAML", "PATCH", &format!("{CM}?fieldManager=t"), Some(APPLY), "data: [\n", 400, "BadRequest"),
        row("apply body that is a list", "PATCH", &format!("{CM}?fieldManager=t"), Some(APPLY), "- a\n- b\n", 400, "BadRequest"),
        row("apply of another kind", "PATCH", &format!("{CM}?fieldManager=t"), Some(APPLY), json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "cm"}}).to_string(), 400, "BadRequest"),
        Row { cause_field: Some("force"), ..row("force on a merge patch", "PATCH", &format!("{CM}?force=true"), Some(MERGE_PATCH), "{}", 422, "Invalid") },
        // ---- payload limits (upstream MaxSecretSize: 1 MiB of data)
        invalid("ConfigMap data over 1 MiB", "POST", CMS, JSON, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "big"}, "data": {"k": over_one_mib.clone()}}), "[]"),
        invalid("ConfigMap data and binaryData over 1 MiB", "POST", CMS, JSON, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "big"}, "data": {"k": "x".repeat(1024 * 1024 - 2)}, "binaryData": {"b": "eHh4"}}), "[]"),
        invalid("ConfigMap update over 1 MiB", "PUT", CM, JSON, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}, "data": {"k": over_one_mib.clone()}}), "[]"),
        invalid("merge patch growing a ConfigMap over 1 MiB", "PATCH", CM, MERGE_PATCH, json!({"data": {"big": over_one_mib.clone()}}), "[]"),
        invalid("Secret data over 1 MiB", "POST", SECRETS, JSON, json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "big"}, "data": {"k": base64_of(1024 * 1024 + 1)}}), "data"),
        invalid("Secret stringData over 1 MiB", "POST", SECRETS, JSON, json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "big"}, "stringData": {"k": over_one_mib.clone()}}), "data"),
        // ---- object metadata
        invalid("finalizer that is not a qualified name", "POST", CMS, JSON, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "finalizers": ["a/b/c"]}}), "metadata.finalizers"),
        invalid("finalizers orphan and foregroundDeletion together", "POST", CMS, JSON, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "finalizers": ["orphan", "foregroundDeletion"]}}), "metadata.finalizers"),
        invalid("two controller ownerReferences", "POST", CMS, JSON, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "ownerReferences": [owner("a", true), owner("b", true)]}}), "metadata.ownerReferences"),
        invalid("ownerReference with an empty uid", "POST", CMS, JSON, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": ""}]}}), "metadata.ownerReferences.uid"),
        invalid("merge patch adding a second controller", "PATCH", CM, MERGE_PATCH, json!({"metadata": {"ownerReferences": [owner("a", true), owner("b", true)]}}), "metadata.ownerReferences"),
        // ---- repeated keys
        row("repeated JSON key with fieldValidation=Strict", "POST", &format!("{CMS}?fieldValidation=Strict"), Some(JSON), r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x","name":"y"}}"#, 400, "BadRequest"),
        row("repeated JSON key in a PUT with fieldValidation=Strict", "PUT", &format!("{CM}?fieldValidation=Strict"), Some(JSON), r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm"},"data":{"k":"1","k":"2"}}"#, 400, "BadRequest"),
    ]
}

const SECRETS: &str = "/api/v1/namespaces/default/secrets";

/// An ownerReference to Deployment `name`.
fn owner(name: &str, controller: bool) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": name, "uid": format!("uid-{name}"), "controller": controller})
}

/// The base64 of `n` zero bytes.
fn base64_of(n: usize) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(vec![0u8; n])
}

/// Path segments are percent-decoded like Go's `URL.Path` before they are
/// split (client libraries such as the Python client escape `:` in names).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn percent_encoded_names_address_the_object() {
    let srv = Server::start().await;
    let (code, body) = srv.send("POST", CMS, Some(JSON), None, configmap("system.x-1").to_string().into_bytes()).await;
    assert_eq!(code, 201, "{body}");
    let (code, body) = srv.send("GET", &format!("{CMS}/system%2Ex%2D1"), None, None, vec![]).await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["metadata"]["name"], "system.x-1");
    let (code, body) = srv.send("GET", "/api/v1/namespaces/%64efault/configmaps/system.x-1", None, None, vec![]).await;
    assert_eq!(code, 200, "{body}");
    // HTTP clients resolve `%2e%2e` themselves; over a raw socket it reaches
    // the server, which refuses it as a name like upstream's namer.
    let before = srv.snapshot().await;
    for name in ["%2e%2e", "%2E", "a%252Fb"] {
        let (code, closed) = srv.raw(format!("DELETE {CMS}/{name} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes()).await;
        assert_eq!(code, 400, "{name}");
        assert!(closed);
    }
    assert_eq!(before, srv.snapshot().await);
}

/// A continue token for `rv` and `start` (the format of `ContinueToken::encode`).
fn token(rv: i64, start: &str) -> String {
    use base64::Engine;
    let json = json!({"v": "meta.k8s.io/v1", "rv": rv, "start": start}).to_string();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_requests_get_the_exact_status_and_change_nothing() {
    let srv = Server::start().await;
    for name in ["cm", "cm2"] {
        let (code, body) = srv.send("POST", CMS, Some(JSON), None, configmap(name).to_string().into_bytes()).await;
        assert_eq!(code, 201, "{body}");
    }
    let mut failures = Vec::new();
    for r in table() {
        let before = srv.snapshot().await;
        let (code, body) = srv.send(r.method, &r.path, r.ct, r.accept, r.body).await;
        let after = srv.snapshot().await;
        eprintln!("{:<55} {code} {:<22} {}", r.name, body["reason"].as_str().unwrap_or(""), body["message"].as_str().unwrap_or("").chars().take(140).collect::<String>());
        let mut problems = Vec::new();
        if code != r.code {
            problems.push(format!("code {code}, want {}", r.code));
        }
        if body["kind"] != "Status" || body["status"] != "Failure" || body["code"] != r.code {
            problems.push("not a Failure Status with that code".to_string());
        }
        if body["reason"] != r.reason {
            problems.push(format!("reason {}, want {}", body["reason"], r.reason));
        }
        if let Some(field) = r.cause_field {
            let fields: Vec<&str> = body
                .pointer("/details/causes")
                .and_then(Value::as_array)
                .map(|cs| cs.iter().filter_map(|c| c["field"].as_str()).collect())
                .unwrap_or_default();
            if !fields.iter().any(|f| f.starts_with(field)) {
                problems.push(format!("causes {fields:?}, want one on {field}"));
            }
        }
        if before != after {
            problems.push("storage changed".to_string());
        }
        if !problems.is_empty() {
            let shown: String = body.to_string().chars().take(400).collect();
            failures.push(format!("{}: {} — {shown}", r.name, problems.join("; ")));
        }
    }
    assert!(failures.is_empty(), "{} rows failed:\n{}", failures.len(), failures.join("\n"));
}

/// A continue token whose list revision was compacted is 410 Expired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn continue_token_of_a_compacted_revision_is_410_expired() {
    let srv = Server::start().await;
    for name in ["a", "b", "c"] {
        let (code, body) = srv.send("POST", CMS, Some(JSON), None, configmap(name).to_string().into_bytes()).await;
        assert_eq!(code, 201, "{body}");
    }
    let (code, page) = srv.send("GET", &format!("{CMS}?limit=1"), None, None, vec![]).await;
    assert_eq!(code, 200, "{page}");
    let next = page.pointer("/metadata/continue").and_then(Value::as_str).expect("a continue token").to_string();
    let (code, body) = srv.send("POST", CMS, Some(JSON), None, configmap("d").to_string().into_bytes()).await;
    assert_eq!(code, 201, "{body}");
    // Two compactor rounds: the first records the current revision, the
    // second compacts to it; the watch cache hears of it and drops its snapshots.
    let mut state = rkube_storage::compactor::CompactorState::default();
    for _ in 0..2 {
        rkube_storage::compactor::compact_once(srv.storage.as_ref(), &mut state).await.expect("compaction round");
    }
    let path = format!("{CMS}?limit=1&continue={next}");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let (code, body) = loop {
        let before = srv.snapshot().await;
        let (code, body) = srv.send("GET", &path, None, None, vec![]).await;
        assert_eq!(before, srv.snapshot().await, "a LIST changed storage");
        if code != 200 || tokio::time::Instant::now() > deadline {
            break (code, body);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(code, 410, "{body}");
    assert_eq!(body["reason"], "Expired", "{body}");
    assert!(body["message"].as_str().unwrap_or("").contains("continue"), "{body}");
}

/// Request heads over hyper's limits are refused cleanly (and the
/// connection closed), whatever part is too big; nothing is stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_request_heads_are_refused_without_hanging() {
    let srv = Server::start().await;
    let before = srv.snapshot().await;
    let long_path = format!("/api/v1/namespaces/default/configmaps/{}", "a".repeat(1024 * 1024));
    let cases: Vec<(&str, Vec<u8>, &[u16])> = vec![
        ("1 MiB URL", format!("GET {long_path} HTTP/1.1\r\nHost: x\r\n\r\n").into_bytes(), &[414, 431]),
        (
            "1 MiB header",
            format!("GET {CMS} HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n", "b".repeat(1024 * 1024)).into_bytes(),
            &[431],
        ),
        (
            "1,000 headers",
            format!("GET {CMS} HTTP/1.1\r\nHost: x\r\n{}\r\n", (0..1000).map(|i| format!("X-H{i}: v\r\n")).collect::<String>())
                .into_bytes(),
            &[431],
        ),
        ("request line that is not HTTP", b"\x00\x01\x02 garbage\r\n\r\n".to_vec(), &[400]),
        (
            "Content-Length that is not a number",
            format!("POST {CMS} HTTP/1.1\r\nHost: x\r\nContent-Length: ten\r\n\r\n").into_bytes(),
            &[400],
        ),
    ];
    for (name, request, want) in cases {
        let (code, closed) = srv.raw(&request).await;
        assert!(want.contains(&code), "{name}: answered {code}, want one of {want:?}");
        assert!(closed, "{name}: connection left open");
    }
    // The server still answers normally afterwards.
    let (code, _) = srv.send("GET", CMS, None, None, vec![]).await;
    assert_eq!(code, 200);
    assert_eq!(before, srv.snapshot().await);
}

/// Objects nested as deep as a body may be (unknown fields, YAML or JSON)
/// are either refused or stay readable: a stored object storage cannot
/// decode again would break every LIST of its collection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_nested_up_to_the_body_limit_stay_readable() {
    let srv = Server::start().await;
    let chain = |n: usize| (0..n).fold(json!("x"), |v, _| json!({"a": v}));
    for (i, depth) in [100usize, 120, 124, 125, 126, 127, 128].into_iter().enumerate() {
        for (j, ct) in [JSON, YAML].into_iter().enumerate() {
            let name = format!("deep-{i}-{j}");
            // The object itself is one level; `x` holds the rest.
            let obj = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "x": chain(depth - 2)});
            let body = if ct == JSON { obj.to_string() } else { serde_yaml::to_string(&obj).unwrap() };
            let (code, resp) = srv.send("POST", CMS, Some(ct), None, body.into_bytes()).await;
            assert!(code == 201 || code == 400, "{depth} {ct}: {code} {resp}");
            let (code, resp) = srv.send("GET", &format!("{CMS}/{name}"), None, None, vec![]).await;
            assert!(code == 200 || code == 404, "{depth} {ct}: GET {code} {resp}");
            let (code, resp) = srv.send("GET", CMS, None, None, vec![]).await;
            assert_eq!(code, 200, "{depth} {ct}: LIST {resp}");
        }
    }
}

/// One response as a client sees it: code, `Warning` headers, body text.
async fn call(srv: &Server, method: &str, path: &str, ct: &str, body: impl Into<Vec<u8>>) -> (u16, Vec<String>, String) {
    let m = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
    let resp = srv
        .client
        .request(m, format!("{}{}", srv.base, path))
        .header("content-type", ct)
        .body(body.into())
        .send()
        .await
        .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
    let code = resp.status().as_u16();
    let warnings = resp.headers().get_all("warning").iter().map(|v| v.to_str().unwrap_or("").to_string()).collect();
    (code, warnings, resp.text().await.expect("body"))
}

/// A ConfigMap over 1 MiB is refused with upstream's exact Status
/// (`ValidateConfigMap`'s `Too long` on field `[]`), before storage sees it
/// (on etcd the write would otherwise fail with a 500 or 503).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configmap_over_one_mib_is_422_with_upstreams_message() {
    let srv = Server::start().await;
    let before = srv.snapshot().await;
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "big"}, "data": {"k": "x".repeat(1024 * 1024 + 1)}});
    let (code, _, text) = call(&srv, "POST", CMS, JSON, cm.to_string()).await;
    assert_eq!(
        (code, text.as_str()),
        (
            422,
            concat!(
                r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","#,
                r#""message":"ConfigMap \"big\" is invalid: []: Too long: may not be more than 1048576 bytes","#,
                r#""reason":"Invalid","details":{"name":"big","kind":"ConfigMap","causes":[{"reason":"FieldValueTooLong","#,
                r#""message":"Too long: may not be more than 1048576 bytes","field":"[]"}]},"code":422}"#,
                "\n"
            )
        )
    );
    // Exactly 1 MiB is fine.
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "max"}, "data": {"k": "x".repeat(1024 * 1024)}});
    let (code, _, text) = call(&srv, "POST", CMS, JSON, cm.to_string()).await;
    assert_eq!(code, 201, "{}", &text[..text.len().min(300)]);
    assert_eq!(before.keys.len() + 1, srv.snapshot().await.keys.len());
}

/// Repeated keys in a JSON body: with `fieldValidation=Strict` a 400 naming
/// them with the unknown fields, in document order, as upstream's strict
/// decoder words it; with `Warn` (the default) one `Warning` each, and the
/// last value wins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeated_json_keys_are_400_when_strict_and_warnings_otherwise() {
    let srv = Server::start().await;
    let body = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","name":"dup"},"bogus":1,"data":{"k":"1","k":"2"}}"#;
    let before = srv.snapshot().await;
    let (code, _, text) = call(&srv, "POST", &format!("{CMS}?fieldValidation=Strict"), JSON, body).await;
    assert_eq!(code, 400, "{text}");
    let status: Value = serde_json::from_str(&text).expect("Status");
    assert_eq!(
        (status["reason"].as_str(), status["message"].as_str()),
        (
            Some("BadRequest"),
            Some(r#"ConfigMap in version "v1" cannot be handled as a ConfigMap: strict decoding error: duplicate field "metadata.name", unknown field "bogus", duplicate field "data.k""#)
        )
    );
    assert_eq!(before, srv.snapshot().await);
    for query in ["", "?fieldValidation=Warn"] {
        let body = body.replace("\"dup\"", &format!("\"dup{}\"", query.len()));
        let (code, warnings, text) = call(&srv, "POST", &format!("{CMS}{query}"), JSON, body).await;
        assert_eq!(code, 201, "{text}");
        assert_eq!(
            warnings,
            [
                r#"299 - "duplicate field \"metadata.name\"""#,
                r#"299 - "unknown field \"bogus\"""#,
                r#"299 - "duplicate field \"data.k\"""#
            ],
            "{query}"
        );
        let created: Value = serde_json::from_str(&text).expect("object");
        assert_eq!((created["metadata"]["name"].as_str(), &created["data"]), (Some(format!("dup{}", query.len()).as_str()), &json!({"k": "2"})));
    }
    let (code, warnings, _) = call(&srv, "POST", &format!("{CMS}?fieldValidation=Ignore"), JSON, body).await;
    assert_eq!((code, warnings), (201, vec![]));
}

/// A Secret's `stringData` is encoded into `data` and never stored nor
/// returned, on create, update, merge and strategic patches and server-side
/// apply (upstream converts it on the way in).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secret_string_data_is_merged_into_data_and_never_stored() {
    let srv = Server::start().await;
    let secret = "/api/v1/namespaces/default/secrets/s";
    let stored = |srv: &Server| {
        let storage = srv.storage.clone();
        async move {
            let kv = storage.get("/registry/secrets/default/s").await.expect("get").expect("stored");
            serde_json::from_slice::<Value>(&kv.value).expect("JSON")
        }
    };
    let steps: Vec<(&str, &str, &str, String, Value)> = vec![
        (
            "POST",
            SECRETS,
            JSON,
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "data": {"a": "eA=="}, "stringData": {"password": "hunter2"}}).to_string(),
            json!({"a": "eA==", "password": "aHVudGVyMg=="}),
        ),
        (
            "PUT",
            secret,
            JSON,
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "data": {"a": "eA==", "password": "aHVudGVyMg=="}, "stringData": {"a": "new"}}).to_string(),
            json!({"a": "bmV3", "password": "aHVudGVyMg=="}),
        ),
        ("PATCH", secret, MERGE_PATCH, json!({"stringData": {"b": "bee"}}).to_string(), json!({"a": "bmV3", "password": "aHVudGVyMg==", "b": "YmVl"})),
        ("PATCH", secret, SMP, json!({"stringData": {"b": "two"}}).to_string(), json!({"a": "bmV3", "password": "aHVudGVyMg==", "b": "dHdv"})),
    ];
    for (method, path, ct, body, want) in steps {
        let (code, _, text) = call(&srv, method, path, ct, body).await;
        let got: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        assert!(code == 200 || code == 201, "{method} {ct}: {code} {text}");
        assert_eq!((&got["data"], got.get("stringData")), (&want, None), "{method} {ct} response");
        let kept = stored(&srv).await;
        assert_eq!((&kept["data"], kept.get("stringData")), (&want, None), "{method} {ct} storage");
    }
    let applied = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "applied"}, "stringData": {"k": "v"}});
    let (code, _, text) = call(&srv, "PATCH", &format!("{SECRETS}/applied?fieldManager=test"), APPLY, applied.to_string()).await;
    assert_eq!(code, 201, "{text}");
    let got: Value = serde_json::from_str(&text).expect("object");
    assert_eq!((&got["data"], got.get("stringData")), (&json!({"k": "dg=="}), None), "apply");
    let kv = srv.storage.get("/registry/secrets/default/applied").await.expect("get").expect("stored");
    let kept: Value = serde_json::from_slice(&kv.value).expect("JSON");
    assert_eq!((&kept["data"], kept.get("stringData")), (&json!({"k": "dg=="}), None), "apply storage");
}

/// A request URI over hyper's 64 KiB limit is 414 with a Status body (and the
/// connection closes); shorter ones are served normally.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uri_over_64_kib_is_414_with_a_status_body() {
    let srv = Server::start().await;
    let path = format!("{CMS}/{}", "a".repeat(70 * 1024));
    let mut sock = tokio::net::TcpStream::connect(srv.addr).await.expect("connect");
    sock.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes()).await.expect("send");
    let mut buf = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), sock.read_to_end(&mut buf)).await.expect("closed in time").expect("read");
    let text = String::from_utf8(buf).expect("UTF-8");
    let (head, body) = text.split_once("\r\n\r\n").expect("head and body");
    let head = format!("{head}\r\n");
    assert!(head.starts_with("HTTP/1.1 414 URI Too Long\r\n"), "{head}");
    let body_want = "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"the request URI is too long\",\"code\":414}\n";
    assert!(head.contains("\r\ncontent-type: application/json\r\n"), "{head}");
    assert!(head.contains(&format!("\r\ncontent-length: {}\r\n", body_want.len())), "{head}");
    assert_eq!(body, body_want);
    let (code, _) = srv.send("GET", &format!("{CMS}/{}", "a".repeat(60 * 1024)), None, None, vec![]).await;
    assert_eq!(code, 404);
}

/// YAML nested 250,000 levels deep (500 KB, which libyaml alone takes
/// minutes of CPU to parse) is refused with the JSON decoder's depth limit
/// before it is parsed, through every verb that decodes YAML (POST, PUT,
/// dry-run POST, server-side apply), four at once, while a concurrent GET is
/// answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deeply_nested_yaml_is_refused_at_once_while_others_are_served() {
    let srv = Arc::new(Server::start().await);
    let (code, _) = srv.send("POST", CMS, Some(JSON), None, br#"{"metadata":{"name":"cm"}}"#.to_vec()).await;
    assert_eq!(code, 201);
    let before = srv.snapshot().await;
    let n = 250_000;
    let flow = format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\nx: {}{}\n", "[".repeat(n), "]".repeat(n));
    let block = format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\nx:\n{}1\n", "- ".repeat(n));
    let converting = "error converting YAML to JSON: yaml: exceeded max depth of 127";
    let requests = [
        ("POST", CMS.to_string(), YAML, flow.clone(), converting),
        ("POST", format!("{CMS}?dryRun=All"), YAML, block.clone(), converting),
        ("PUT", CM.to_string(), YAML, flow.clone(), converting),
        ("PATCH", format!("{CM}?fieldManager=t"), APPLY, flow, "error decoding YAML: exceeded max depth of 127"),
    ];
    let posts: Vec<_> = requests
        .into_iter()
        .map(|(method, path, ct, body, message)| {
            let srv = srv.clone();
            tokio::spawn(async move {
                let (code, status) = srv.send(method, &path, Some(ct), None, body.into_bytes()).await;
                assert_eq!((code, status["reason"].as_str(), status["message"].as_str()), (400, Some("BadRequest"), Some(message)), "{method} {path}: {status}");
            })
        })
        .collect();
    let get = tokio::time::timeout(Duration::from_secs(20), srv.send("GET", CM, None, None, vec![])).await;
    assert_eq!(get.expect("GET answered while the nested bodies are decoded").0, 200);
    for p in posts {
        tokio::time::timeout(Duration::from_secs(60), p).await.expect("refused in time").expect("asserts hold");
    }
    assert_eq!(before, srv.snapshot().await);
}

/// The request timeout bounds body decoding: four large YAML bodies (2.5 MB,
/// 140,000 keys, malformed at the very end, so decoding is all their
/// handlers do) sent at once with `?timeout=100ms` are each answered 504
/// `Timeout` while they are still being decoded, although the server has
/// two worker threads: large bodies are decoded with the worker handed over
/// to other tasks, so the timeout's timer runs. Then a GET is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_timeout_bounds_decoding_of_large_yaml_bodies() {
    let srv = Arc::new(Server::start().await);
    let (code, _) = srv.send("POST", CMS, Some(JSON), None, br#"{"metadata":{"name":"cm"}}"#.to_vec()).await;
    assert_eq!(code, 201);
    let posts: Vec<_> = (0..4)
        .map(|i| {
            let srv = srv.clone();
            tokio::spawn(async move {
                let mut body = format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: big-{i}\ndata:\n");
                for k in 0..140_000 {
                    body.push_str(&format!("  key{k}: value\n"));
                }
                body.push_str("  last: [unclosed\n");
                srv.send("POST", &format!("{CMS}?timeout=100ms"), Some(YAML), None, body.into_bytes()).await
            })
        })
        .collect();
    for p in posts {
        let (code, status) = p.await.expect("POST task");
        assert_eq!((code, status["reason"].as_str()), (504, Some("Timeout")), "{status}");
    }
    let (code, _) = srv.send("GET", CM, None, None, vec![]).await;
    assert_eq!(code, 200);
}
