//! A real admission webhook server for tests: HTTPS (rustls) on 127.0.0.1
//! with its own CA made by rcgen, one thread per connection, speaking just
//! enough HTTP/1.1 (one request per connection, `Connection: close`).
//! Shared by the in-process tests and the kubectl end-to-end test.
//!
//! Paths decide the answer:
//! - `/deny-prefix`: denies objects (or, on DELETE, old objects) whose name starts with `deny-`, with
//!   message `names starting with deny- are refused`;
//! - `/deny-status`: denies everything with its own status (code 422,
//!   reason `Invalid`, message `custom denial`);
//! - `/add-label`: allows with a JSON Patch adding label
//!   `webhook.example.com/mutated: "true"`;
//! - `/replace-labels`: allows with a JSON Patch making that label the
//!   object's only one;
//! - `/warn`: allows with the warning `configmaps here are watched`;
//! - `/sleep`: answers (allowed) after 3 s;
//! - `/annotate`: allows with the audit annotation `decision: looked`;
//! - anything else: allows.
//!
//! A `ConversionReview` (a CRD's conversion webhook) is answered by
//! [`convert`]: `/convert` converts Widgets between `v1` (`spec.size`) and
//! `v2` (`spec.dimension`), sets label [`CONVERTED_LABEL`] to the version
//! and `metadata.generation` to 1000 (which the API server must undo);
//! `/convert-wrong-uid` answers another uid, `/convert-drop` no objects,
//! `/convert-fail` a `Failure` result with message `cannot convert`.
//!
//! Every review received is recorded with its path.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use serde_json::{json, Value};

/// The label `/add-label` adds.
pub const MUTATED_LABEL: &str = "webhook.example.com/mutated";

/// The label `/convert` sets on every object it converts, to the version.
pub const CONVERTED_LABEL: &str = "webhook.example.com/converted-to";

/// A running webhook server; stopped when dropped.
pub struct WebhookServer {
    /// The port on 127.0.0.1.
    pub port: u16,
    /// The CA certificate (PEM) its serving certificate chains to.
    pub ca_pem: String,
    /// Every request received: (path, AdmissionReview).
    pub seen: Arc<Mutex<Vec<(String, Value)>>>,
    stop: Arc<AtomicBool>,
}

impl Drop for WebhookServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so it sees the flag.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

impl WebhookServer {
    /// Starts a server with a new CA; its certificate is valid for
    /// `127.0.0.1`, `localhost` and `hostnames`.
    pub fn start(hostnames: &[&str]) -> WebhookServer {
        use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
        let _ = rustls::crypto::ring::default_provider().install_default();
        let ca_key = KeyPair::generate().expect("CA key");
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca_cert = ca_params.self_signed(&ca_key).expect("CA certificate");
        let issuer = Issuer::new(ca_params, &ca_key);
        let mut names = vec!["127.0.0.1".to_string(), "localhost".to_string()];
        names.extend(hostnames.iter().map(|h| h.to_string()));
        let key = KeyPair::generate().expect("serving key");
        let serving = CertificateParams::new(names).expect("serving params").signed_by(&key, &issuer).expect("serving certificate");
        let cert_der = serving.der().clone();
        let key_der = rustls::pki_types::PrivateKeyDer::try_from(key.serialize_der()).expect("key DER");
        let config = rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(vec![cert_der], key_der)
            .expect("TLS config");
        let config = Arc::new(config);
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (seen2, stop2) = (seen.clone(), stop.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if stop2.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let (config, seen) = (config.clone(), seen2.clone());
                std::thread::spawn(move || serve(conn, config, seen));
            }
        });
        WebhookServer { port, ca_pem: ca_cert.pem(), seen, stop }
    }

    /// `https://127.0.0.1:<port><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("https://127.0.0.1:{}{path}", self.port)
    }

    /// The CA as a `caBundle` value (base64 of the PEM).
    pub fn ca_bundle(&self) -> String {
        base64::engine::general_purpose::STANDARD.encode(&self.ca_pem)
    }

    /// The AdmissionReviews received on `path` so far.
    pub fn requests(&self, path: &str) -> Vec<Value> {
        self.seen.lock().map(|s| s.iter().filter(|(p, _)| p == path).map(|(_, v)| v.clone()).collect()).unwrap_or_default()
    }
}

fn serve(conn: TcpStream, config: Arc<rustls::ServerConfig>, seen: Arc<Mutex<Vec<(String, Value)>>>) {
    let _ = conn.set_read_timeout(Some(Duration::from_secs(10)));
    let Ok(tls) = rustls::ServerConnection::new(config) else { return };
    let mut stream = rustls::StreamOwned::new(tls, conn);
    let mut reader = BufReader::new(&mut stream);
    let mut request_line = String::new();
    if reader.read_line(&mut request_line).is_err() {
        return;
    }
    let path = request_line.split_whitespace().nth(1).unwrap_or("/").split('?').next().unwrap_or("/").to_string();
    let mut length = 0usize;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).is_err() || line.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = line.split_once(':') {
            if k.eq_ignore_ascii_case("content-length") {
                length = v.trim().parse().unwrap_or(0);
            }
        }
    }
    let mut body = vec![0u8; length];
    if reader.read_exact(&mut body).is_err() {
        return;
    }
    let review: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    if let Ok(mut s) = seen.lock() {
        s.push((path.clone(), review.clone()));
    }
    let answer = answer(&path, &review);
    let out = serde_json::to_vec(&answer).unwrap_or_default();
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        out.len()
    );
    let _ = stream.write_all(head.as_bytes());
    let _ = stream.write_all(&out);
    let _ = stream.flush();
    stream.conn.send_close_notify();
    let _ = stream.flush();
}

fn answer(path: &str, review: &Value) -> Value {
    if review.get("kind").and_then(Value::as_str) == Some("ConversionReview") {
        return convert(path, review);
    }
    let uid = review.pointer("/request/uid").cloned().unwrap_or(Value::Null);
    let name = review
        .pointer("/request/object/metadata/name")
        .or_else(|| review.pointer("/request/oldObject/metadata/name"))
        .and_then(Value::as_str)
        .unwrap_or("");
    let mut response = json!({"uid": uid, "allowed": true});
    match path {
        "/deny-prefix" if name.starts_with("deny-") => {
            response["allowed"] = json!(false);
            response["status"] = json!({"message": "names starting with deny- are refused"});
        }
        "/deny-status" => {
            response["allowed"] = json!(false);
            response["status"] = json!({"code": 422, "reason": "Invalid", "message": "custom denial"});
        }
        "/add-label" => {
            let has_labels = review.pointer("/request/object/metadata/labels").is_some_and(Value::is_object);
            let op = if has_labels {
                json!({"op": "add", "path": format!("/metadata/labels/{}", MUTATED_LABEL.replace('/', "~1")), "value": "true"})
            } else {
                json!({"op": "add", "path": "/metadata/labels", "value": {MUTATED_LABEL: "true"}})
            };
            let patch = serde_json::to_vec(&json!([op])).unwrap_or_default();
            response["patchType"] = json!("JSONPatch");
            response["patch"] = json!(base64::engine::general_purpose::STANDARD.encode(patch));
        }
        "/replace-labels" => {
            let op = json!({"op": "add", "path": "/metadata/labels", "value": {MUTATED_LABEL: "true"}});
            let patch = serde_json::to_vec(&json!([op])).unwrap_or_default();
            response["patchType"] = json!("JSONPatch");
            response["patch"] = json!(base64::engine::general_purpose::STANDARD.encode(patch));
        }
        "/warn" => {
            response["warnings"] = json!(["configmaps here are watched"]);
        }
        "/sleep" => std::thread::sleep(Duration::from_secs(3)),
        "/annotate" => {
            response["auditAnnotations"] = json!({"decision": "looked"});
        }
        _ => {}
    }
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response})
}

/// The answer to a `ConversionReview` on `path` (see the module doc).
pub fn convert(path: &str, review: &Value) -> Value {
    let api_version = review.get("apiVersion").cloned().unwrap_or(Value::Null);
    let mut uid = review.pointer("/request/uid").cloned().unwrap_or(Value::Null);
    let desired = review.pointer("/request/desiredAPIVersion").and_then(Value::as_str).unwrap_or("").to_string();
    let version = desired.rsplit('/').next().unwrap_or("").to_string();
    let objects = review.pointer("/request/objects").and_then(Value::as_array).cloned().unwrap_or_default();
    let mut converted: Vec<Value> = objects
        .into_iter()
        .map(|mut o| {
            o["apiVersion"] = json!(desired);
            let spec = o.get_mut("spec").and_then(Value::as_object_mut);
            if let Some(spec) = spec {
                let (from, to) = if version == "v2" { ("size", "dimension") } else { ("dimension", "size") };
                if let Some(v) = spec.remove(from) {
                    spec.insert(to.to_string(), v);
                }
            }
            if !o["metadata"]["labels"].is_object() {
                o["metadata"]["labels"] = json!({});
            }
            o["metadata"]["labels"][CONVERTED_LABEL] = json!(version);
            o["metadata"]["generation"] = json!(1000);
            o
        })
        .collect();
    let mut result = json!({"status": "Success"});
    match path {
        "/convert-wrong-uid" => uid = json!("not-the-request-uid"),
        "/convert-drop" => converted.clear(),
        "/convert-fail" => result = json!({"status": "Failure", "message": "cannot convert"}),
        _ => {}
    }
    json!({"apiVersion": api_version, "kind": "ConversionReview",
           "response": {"uid": uid, "result": result, "convertedObjects": converted}})
}
