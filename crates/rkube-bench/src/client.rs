//! A thin Kubernetes REST client over reqwest (plain HTTP on loopback),
//! parsing only what the scenarios need: `metadata.resourceVersion` of
//! written objects, `metadata.continue` and the item count of lists, and
//! watch events line by line.

use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt;
use serde::Deserialize;

/// Errors of one API call.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Transport failure (connect, reset, timeout).
    #[error("HTTP {method} {path}: {source}")]
    Http {
        /// Method.
        method: &'static str,
        /// Path and query.
        path: String,
        /// The error.
        source: reqwest::Error,
    },
    /// The server answered with a non-2xx code.
    #[error("HTTP {method} {path}: {code}: {body}")]
    Status {
        /// Method.
        method: &'static str,
        /// Path and query.
        path: String,
        /// HTTP status code.
        code: u16,
        /// The start of the body (usually a `Status` object).
        body: String,
    },
    /// The body was not the JSON expected.
    #[error("HTTP {method} {path}: cannot decode the response: {source}")]
    Decode {
        /// Method.
        method: &'static str,
        /// Path and query.
        path: String,
        /// The error.
        source: serde_json::Error,
    },
    /// The body was not the protobuf expected.
    #[error("HTTP {method} {path}: cannot decode the protobuf response: {source}")]
    DecodeProtobuf {
        /// Method.
        method: &'static str,
        /// Path and query.
        path: String,
        /// The error.
        source: rkube_api::protobuf::ProtobufError,
    },
}

impl ClientError {
    /// The HTTP status code when the server answered with one.
    pub fn code(&self) -> Option<u16> {
        match self {
            ClientError::Status { code, .. } => Some(*code),
            _ => None,
        }
    }
}

/// Result alias.
pub type ClientResult<T> = Result<T, ClientError>;

#[derive(Deserialize, Default)]
struct Meta {
    #[serde(default, rename = "resourceVersion")]
    resource_version: String,
    #[serde(default, rename = "continue")]
    continue_token: String,
}

#[derive(Deserialize)]
struct ObjectHead {
    #[serde(default)]
    metadata: Meta,
}

#[derive(Deserialize)]
struct ListHead {
    #[serde(default)]
    metadata: Meta,
    #[serde(default)]
    items: Vec<serde::de::IgnoredAny>,
}

/// What a LIST returned.
#[derive(Debug, Clone)]
pub struct ListPage {
    /// Items in the page.
    pub items: usize,
    /// Body size, bytes.
    pub bytes: usize,
    /// `metadata.resourceVersion`.
    pub resource_version: String,
    /// `metadata.continue` (empty on the last page).
    pub continue_token: String,
}

/// One watch event, only the fields the scenarios read.
#[derive(Debug, Clone, Deserialize)]
pub struct WatchEvent {
    /// ADDED, MODIFIED, DELETED, BOOKMARK or ERROR.
    #[serde(rename = "type")]
    pub kind: String,
    /// The object.
    pub object: EventObject,
}

/// The parts of a watched object the scenarios read.
#[derive(Debug, Clone, Deserialize, Default)]
pub struct EventObject {
    /// Metadata.
    #[serde(default)]
    pub metadata: EventMeta,
    /// ConfigMap data (the watch scenario puts its send timestamp here).
    #[serde(default)]
    pub data: Option<std::collections::BTreeMap<String, String>>,
    /// Pod spec (the cluster scenario reads `nodeName`).
    #[serde(default)]
    pub spec: Option<EventSpec>,
    /// Pod status (the cluster scenario reads `phase`).
    #[serde(default)]
    pub status: Option<EventStatus>,
}

/// Pod status fields read from watch events.
#[derive(Debug, Clone, Deserialize, Default)]
pub struct EventStatus {
    /// `status.phase`.
    #[serde(default)]
    pub phase: String,
}

/// Object metadata fields read from watch events.
#[derive(Debug, Clone, Deserialize, Default)]
pub struct EventMeta {
    /// Name.
    #[serde(default)]
    pub name: String,
    /// Namespace.
    #[serde(default)]
    pub namespace: String,
    /// resourceVersion.
    #[serde(default, rename = "resourceVersion")]
    pub resource_version: String,
    /// Annotations (the cluster scenario reads its create timestamp here).
    #[serde(default)]
    pub annotations: Option<std::collections::BTreeMap<String, String>>,
}

/// Pod spec fields read from watch events.
#[derive(Debug, Clone, Deserialize, Default)]
pub struct EventSpec {
    /// `spec.nodeName`.
    #[serde(default, rename = "nodeName")]
    pub node_name: String,
}

/// Client for one API server. Cheap to clone (shares the connection pool).
#[derive(Clone)]
pub struct Api {
    http: reqwest::Client,
    base: String,
    /// Sent as `Authorization: Bearer` when set.
    token: Option<String>,
    /// The `Accept` header of every request.
    accept: &'static str,
}

/// A client builder trusting only `ca_pem` (PEM certificates) for HTTPS
/// (rustls with the ring provider, TLS 1.2 and 1.3). `Err` with a message
/// when the PEM holds no certificate.
pub fn https_builder(ca_pem: &str) -> Result<reqwest::ClientBuilder, String> {
    https_builder_alpn(ca_pem, &[b"http/1.1"])
}

/// [`https_builder`] offering `alpn` protocols (`h2` for HTTP/2, as kubectl does).
pub fn https_builder_alpn(ca_pem: &str, alpn: &[&[u8]]) -> Result<reqwest::ClientBuilder, String> {
    use rustls_pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pki_types::CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        let cert = cert.map_err(|e| format!("reading the CA: {e}"))?;
        roots
            .add(cert)
            .map_err(|e| format!("trusting the CA: {e}"))?;
    }
    if roots.is_empty() {
        return Err("no CA certificate".into());
    }
    let mut cfg = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| e.to_string())?
    .with_root_certificates(roots)
    .with_no_client_auth();
    cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(reqwest::Client::builder().use_preconfigured_tls(cfg))
}

/// The default timeout of non-streaming calls (LISTs of 300k objects included).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(300);

impl Api {
    /// A client for `base` (`http://127.0.0.1:PORT`).
    pub fn new(base: &str) -> Api {
        let http = reqwest::Client::builder()
            .pool_max_idle_per_host(1024)
            .tcp_nodelay(true)
            .build()
            .unwrap_or_else(|_| reqwest::Client::new());
        Api {
            http,
            base: base.trim_end_matches('/').to_string(),
            token: None,
            accept: "application/json",
        }
    }

    /// This client (same connection pool) authenticating with bearer `token`.
    pub fn with_token(&self, token: &str) -> Api {
        Api { token: Some(token.to_string()), ..self.clone() }
    }

    /// A client for `base` (`https://127.0.0.1:PORT`) trusting `ca_pem`,
    /// authenticating with bearer `token`.
    pub fn secure(base: &str, ca_pem: &str, token: &str) -> Result<Api, String> {
        let http = https_builder(ca_pem)?
            .pool_max_idle_per_host(1024)
            .tcp_nodelay(true)
            .build()
            .map_err(|e| e.to_string())?;
        Ok(Api {
            http,
            base: base.trim_end_matches('/').to_string(),
            token: Some(token.to_string()),
            accept: "application/json",
        })
    }

    /// [`Api::secure`] speaking HTTP/2 (negotiated by ALPN) when `http2`,
    /// else HTTP/1.1.
    pub fn secure_with(base: &str, ca_pem: &str, token: &str, http2: bool) -> Result<Api, String> {
        let alpn: &[&[u8]] = if http2 { &[b"h2"] } else { &[b"http/1.1"] };
        let mut builder = https_builder_alpn(ca_pem, alpn)?
            .pool_max_idle_per_host(1024)
            .tcp_nodelay(true);
        if http2 {
            builder = builder.http2_prior_knowledge();
        }
        let http = builder.build().map_err(|e| e.to_string())?;
        Ok(Api {
            http,
            base: base.trim_end_matches('/').to_string(),
            token: Some(token.to_string()),
            accept: "application/json",
        })
    }

    /// The same client asking for `accept` (e.g. what client-go's protobuf
    /// clients send, `application/vnd.kubernetes.protobuf, application/json`).
    pub fn with_accept(mut self, accept: &'static str) -> Api {
        self.accept = accept;
        self
    }

    /// The server's base URL.
    pub fn base(&self) -> &str {
        &self.base
    }

    async fn send(
        &self,
        method: &'static str,
        path: &str,
        body: Option<(Vec<u8>, &'static str)>,
    ) -> ClientResult<reqwest::Response> {
        let url = format!("{}{}", self.base, path);
        let m = reqwest::Method::from_bytes(method.as_bytes()).unwrap_or(reqwest::Method::GET);
        let mut req = self
            .http
            .request(m, url)
            .header("accept", self.accept)
            .timeout(CALL_TIMEOUT);
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        if let Some((b, ct)) = body {
            req = req.header("content-type", ct).body(b);
        }
        let resp = req.send().await.map_err(|source| ClientError::Http {
            method,
            path: path.to_string(),
            source,
        })?;
        if !resp.status().is_success() {
            let code = resp.status().as_u16();
            let text = resp.text().await.unwrap_or_default();
            return Err(ClientError::Status {
                method,
                path: path.to_string(),
                code,
                body: text.chars().take(300).collect(),
            });
        }
        Ok(resp)
    }

    async fn body(
        &self,
        method: &'static str,
        path: &str,
        resp: reqwest::Response,
    ) -> ClientResult<Bytes> {
        resp.bytes().await.map_err(|source| ClientError::Http {
            method,
            path: path.to_string(),
            source,
        })
    }

    async fn write(
        &self,
        method: &'static str,
        path: &str,
        body: Vec<u8>,
        ct: &'static str,
    ) -> ClientResult<String> {
        let resp = self.send(method, path, Some((body, ct))).await?;
        let bytes = self.body(method, path, resp).await?;
        let head: ObjectHead =
            serde_json::from_slice(&bytes).map_err(|source| ClientError::Decode {
                method,
                path: path.to_string(),
                source,
            })?;
        Ok(head.metadata.resource_version)
    }

    /// Sends `body` as `content_type` with `method` to `path` and returns the
    /// answer's HTTP code and body, whatever the code.
    pub async fn send_raw(
        &self,
        method: &'static str,
        path: &str,
        body: Vec<u8>,
        content_type: &'static str,
    ) -> ClientResult<(u16, Bytes)> {
        let url = format!("{}{}", self.base, path);
        let m = reqwest::Method::from_bytes(method.as_bytes()).unwrap_or(reqwest::Method::POST);
        let mut req = self
            .http
            .request(m, url)
            .header("accept", self.accept)
            .header("content-type", content_type)
            .timeout(CALL_TIMEOUT)
            .body(body);
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        let resp = req.send().await.map_err(|source| ClientError::Http {
            method,
            path: path.to_string(),
            source,
        })?;
        let code = resp.status().as_u16();
        Ok((code, self.body(method, path, resp).await?))
    }

    /// POST `body` (JSON) to a collection path; returns the new resourceVersion.
    pub async fn create(&self, collection: &str, body: &serde_json::Value) -> ClientResult<String> {
        self.write(
            "POST",
            collection,
            serde_json::to_vec(body).unwrap_or_default(),
            "application/json",
        )
        .await
    }

    /// PUT `body` to an object path; returns the new resourceVersion.
    pub async fn update(&self, path: &str, body: &serde_json::Value) -> ClientResult<String> {
        self.write(
            "PUT",
            path,
            serde_json::to_vec(body).unwrap_or_default(),
            "application/json",
        )
        .await
    }

    /// JSON merge-PATCH an object path (e.g. `.../pods/x/status`); returns the new resourceVersion.
    pub async fn merge_patch(&self, path: &str, patch: &serde_json::Value) -> ClientResult<String> {
        self.write(
            "PATCH",
            path,
            serde_json::to_vec(patch).unwrap_or_default(),
            "application/merge-patch+json",
        )
        .await
    }

    /// GET a path; the body.
    pub async fn get(&self, path: &str) -> ClientResult<Bytes> {
        let resp = self.send("GET", path, None).await?;
        self.body("GET", path, resp).await
    }

    /// GET `path`, returning the HTTP code (and no error for non-2xx).
    pub async fn status_of(&self, path: &str) -> ClientResult<u16> {
        match self.send("GET", path, None).await {
            Ok(resp) => {
                let code = resp.status().as_u16();
                let _ = resp.bytes().await;
                Ok(code)
            }
            Err(ClientError::Status { code, .. }) => Ok(code),
            Err(e) => Err(e),
        }
    }

    /// A LIST, timed until the last body byte arrives; the body is returned
    /// unparsed (parse it with [`parse_list`] outside the timed region).
    pub async fn list_raw(&self, path: &str) -> ClientResult<(Duration, Vec<Bytes>)> {
        let start = Instant::now();
        let resp = self.send("GET", path, None).await?;
        let mut stream = resp.bytes_stream();
        let mut chunks = Vec::new();
        while let Some(chunk) = stream.next().await {
            chunks.push(chunk.map_err(|source| ClientError::Http {
                method: "GET",
                path: path.to_string(),
                source,
            })?);
        }
        Ok((start.elapsed(), chunks))
    }

    /// A LIST, parsed.
    pub async fn list(&self, path: &str) -> ClientResult<ListPage> {
        let (_, chunks) = self.list_raw(path).await?;
        parse_list(path, &chunks)
    }

    /// Opens a WATCH on `path` (which must carry `watch=true`); events arrive on the stream.
    pub async fn watch(&self, path: &str) -> ClientResult<WatchStream> {
        let url = format!("{}{}", self.base, path);
        let resp = self
            .http
            .get(url)
            .header("accept", "application/json")
            .send()
            .await
            .map_err(|source| ClientError::Http {
                method: "GET",
                path: path.to_string(),
                source,
            })?;
        if !resp.status().is_success() {
            let code = resp.status().as_u16();
            let text = resp.text().await.unwrap_or_default();
            return Err(ClientError::Status {
                method: "GET",
                path: path.to_string(),
                code,
                body: text.chars().take(300).collect(),
            });
        }
        Ok(WatchStream {
            inner: Box::pin(resp.bytes_stream()),
            buf: Vec::new(),
            path: path.to_string(),
        })
    }

    /// `GET /metrics` as text, or `None` when the server has no such endpoint.
    pub async fn metrics(&self) -> Option<String> {
        let bytes = self.get("/metrics").await.ok()?;
        Some(String::from_utf8_lossy(&bytes).into_owned())
    }
}

/// Parses a LIST body given as chunks (JSON, or protobuf when it starts
/// with `k8s\0`): item count, resourceVersion, continue.
pub fn parse_list(path: &str, chunks: &[Bytes]) -> ClientResult<ListPage> {
    let bytes: usize = chunks.iter().map(Bytes::len).sum();
    if chunks
        .first()
        .is_some_and(|c| c.starts_with(rkube_api::protobuf::MAGIC))
    {
        let all = chunks.concat();
        let s = rkube_api::protobuf::list_summary(&all).map_err(|source| {
            ClientError::DecodeProtobuf {
                method: "GET",
                path: path.to_string(),
                source,
            }
        })?;
        return Ok(ListPage {
            items: s.items,
            bytes,
            resource_version: s.resource_version,
            continue_token: s.continue_token,
        });
    }
    let head: ListHead = if chunks.len() == 1 {
        serde_json::from_slice(&chunks[0])
    } else {
        let mut all = Vec::with_capacity(bytes);
        for c in chunks {
            all.extend_from_slice(c);
        }
        serde_json::from_slice(&all)
    }
    .map_err(|source| ClientError::Decode {
        method: "GET",
        path: path.to_string(),
        source,
    })?;
    Ok(ListPage {
        items: head.items.len(),
        bytes,
        resource_version: head.metadata.resource_version,
        continue_token: head.metadata.continue_token,
    })
}

type ByteStream = std::pin::Pin<Box<dyn futures::Stream<Item = reqwest::Result<Bytes>> + Send>>;

/// An open watch: newline-delimited JSON events.
pub struct WatchStream {
    inner: ByteStream,
    buf: Vec<u8>,
    path: String,
}

impl WatchStream {
    /// The next event; `Ok(None)` when the server ended the stream.
    pub async fn next_event(&mut self) -> ClientResult<Option<WatchEvent>> {
        loop {
            if let Some(pos) = self.buf.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=pos).collect();
                let line = &line[..line.len() - 1];
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                let ev: WatchEvent =
                    serde_json::from_slice(line).map_err(|source| ClientError::Decode {
                        method: "GET",
                        path: self.path.clone(),
                        source,
                    })?;
                return Ok(Some(ev));
            }
            match self.inner.next().await {
                Some(Ok(chunk)) => self.buf.extend_from_slice(&chunk),
                Some(Err(source)) => {
                    return Err(ClientError::Http {
                        method: "GET",
                        path: self.path.clone(),
                        source,
                    })
                }
                None => return Ok(None),
            }
        }
    }
}

/// Percent-encodes a query value (a continue token, a selector).
pub fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Sum of every sample of a Prometheus counter in a text exposition (all label sets).
/// `None` when the metric does not appear.
pub fn metric_sum(text: &str, name: &str) -> Option<f64> {
    metric_sum_where(text, name, "")
}

/// Like [`metric_sum`], only over samples whose line contains `needle` (e.g. `fallback="true"`).
pub fn metric_sum_where(text: &str, name: &str, needle: &str) -> Option<f64> {
    let mut found = false;
    let mut sum = 0.0;
    for line in text.lines() {
        if line.starts_with('#') || !line.starts_with(name) || !line.contains(needle) {
            continue;
        }
        let rest = &line[name.len()..];
        if !(rest.starts_with('{') || rest.starts_with(' ')) {
            continue;
        }
        if let Some(v) = line.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()) {
            sum += v;
            found = true;
        }
    }
    found.then_some(sum)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_list_counts_items_across_chunks() {
        let body = br#"{"kind":"ConfigMapList","metadata":{"resourceVersion":"42","continue":"abc"},"items":[{"a":1},{"b":{"c":[1,2]}}]}"#;
        let chunks = vec![
            Bytes::copy_from_slice(&body[..30]),
            Bytes::copy_from_slice(&body[30..]),
        ];
        let page = parse_list("/api/v1/configmaps", &chunks).unwrap();
        assert_eq!(
            (
                page.items,
                page.resource_version.as_str(),
                page.continue_token.as_str()
            ),
            (2, "42", "abc")
        );
        assert_eq!(page.bytes, body.len());
    }

    #[test]
    fn continue_tokens_are_percent_encoded() {
        assert_eq!(urlencode("eyJ2Ijo=a+b/c"), "eyJ2Ijo%3Da%2Bb%2Fc");
    }

    #[test]
    fn metric_sum_adds_all_label_sets_and_ignores_prefixes() {
        let text = "# HELP x\napiserver_terminated_watchers_total{resource=\"pods\"} 2\napiserver_terminated_watchers_total{resource=\"configmaps\"} 3\napiserver_terminated_watchers_total_other 9\n";
        assert_eq!(
            metric_sum(text, "apiserver_terminated_watchers_total"),
            Some(5.0)
        );
        assert_eq!(metric_sum(text, "absent_metric"), None);
    }
}
