//! Slow clients (slowloris) against the real serving path: the filter chain
//! with kube-apiserver's default flags over the embedded store, served by
//! `filters::tls::serve_with` on 127.0.0.1 with the header read timeout
//! shortened to 1 s (production: `READ_HEADER_TIMEOUT`, upstream's 32 s
//! `ReadHeaderTimeout`).
//!
//! A client that never finishes its request head must see the server close
//! the connection after the timeout, over plain HTTP and over TLS, while
//! other clients are answered meanwhile. A client that asks for a large LIST
//! and stops reading is disconnected once a write has waited on it for the
//! write stall timeout (also shortened to 1 s; production 60 s).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rkube_apiserver::filters::metrics::ApiserverMetrics;
use rkube_apiserver::filters::tls::{self, ServeOptions};
use rkube_apiserver::filters::{self, FilterArgs, FilterChain};
use rkube_storage::Storage;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::oneshot;

/// The shortened header read timeout of these tests.
const TEST_TIMEOUT: Duration = Duration::from_secs(1);

/// A request line and one header, without the blank line that ends the head.
const PARTIAL_HEAD: &[u8] = b"GET /api/v1/namespaces HTTP/1.1\r\nHost: 127.0.0.1\r\n";

struct Server {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    done: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
    _dir: tempfile::TempDir,
}

impl Server {
    /// Starts the server; over TLS with a fresh self-signed PKI (returned) when `tls`.
    async fn start(tls: bool) -> (Server, Option<tls::Pki>) {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let dir = tempfile::tempdir().expect("temp dir");
        let storage: Arc<dyn Storage> =
            Arc::new(rkube_storage::embedded::EmbeddedStorage::open(&dir.path().join("db")).expect("embedded store"));
        let st = rkube_apiserver::server::default_state(storage);
        rkube_apiserver::bootstrap(&st).await.expect("bootstrap");
        let config = FilterArgs::default().load().expect("default flags");
        let chain = FilterChain::build(config, None, Arc::new(ApiserverMetrics::new())).expect("filter chain");
        let router = filters::apply(rkube_apiserver::server::router(st), &chain);
        let pki = tls.then(|| tls::generate_self_signed(dir.path()).expect("pki"));
        let server_config = pki.as_ref().map(|p| tls::server_config(&p.tls_config().expect("serving pair"), None).expect("server config"));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (tx, rx) = oneshot::channel::<()>();
        let opts = ServeOptions { header_read_timeout: TEST_TIMEOUT, write_stall_timeout: TEST_TIMEOUT };
        let done = tokio::spawn(tls::serve_with(listener, router, server_config, opts, async move {
            let _ = rx.await;
        }));
        (Server { addr, stop: Some(tx), done: Some(done), _dir: dir }, pki)
    }

    /// Stops the server and waits until it returned.
    async fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(d) = self.done.take() {
            let r = tokio::time::timeout(Duration::from_secs(10), d).await;
            assert!(matches!(r, Ok(Ok(Ok(())))), "server stops cleanly: {r:?}");
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

/// Reads until the server closes the connection (or 10 s pass): the bytes
/// read and how long it took, or `None` when the connection stayed open.
async fn wait_for_close<S: AsyncRead + Unpin>(sock: &mut S, since: Instant) -> Option<(Vec<u8>, Duration)> {
    let mut buf = Vec::new();
    match tokio::time::timeout(Duration::from_secs(10), sock.read_to_end(&mut buf)).await {
        // A reset counts as closed too.
        Ok(_) => Some((buf, since.elapsed())),
        Err(_) => None,
    }
}

/// Sends the partial head on `sock`, checks `answered_meanwhile` succeeds
/// while it waits, then that the server closed `sock` after the timeout.
async fn assert_slow_head_is_cut_off<S, F>(mut sock: S, answered_meanwhile: F)
where
    S: AsyncRead + AsyncWrite + Unpin,
    F: std::future::Future<Output = u16>,
{
    sock.write_all(PARTIAL_HEAD).await.expect("send partial head");
    sock.flush().await.expect("flush");
    let since = Instant::now();
    assert_eq!(answered_meanwhile.await, 200, "another client is answered while the slow one waits");
    let (bytes, elapsed) = wait_for_close(&mut sock, since).await.expect("server closes the slow connection within 10 s");
    assert!(elapsed >= TEST_TIMEOUT - Duration::from_millis(100), "closed only after the header read timeout, took {elapsed:?}");
    assert!(
        bytes.is_empty() || bytes.starts_with(b"HTTP/1.1 408"),
        "no answer but a close (or a 408): {:?}",
        String::from_utf8_lossy(&bytes)
    );
}

#[tokio::test]
async fn incomplete_request_head_is_closed_after_read_header_timeout_over_http() {
    let (server, _) = Server::start(false).await;
    let client = reqwest::Client::builder().timeout(Duration::from_secs(10)).build().expect("client");
    let url = format!("http://{}/api/v1/namespaces/default", server.addr);
    let sock = tokio::net::TcpStream::connect(server.addr).await.expect("connect");
    assert_slow_head_is_cut_off(sock, async { client.get(&url).send().await.expect("normal request").status().as_u16() })
        .await;

    // A connection that sends nothing at all is closed too.
    let mut silent = tokio::net::TcpStream::connect(server.addr).await.expect("connect");
    let closed = wait_for_close(&mut silent, Instant::now()).await;
    assert!(closed.is_some(), "a silent connection is closed within 10 s");
    server.stop().await;
}

#[tokio::test]
async fn incomplete_request_head_is_closed_after_read_header_timeout_over_https() {
    let (server, pki) = Server::start(true).await;
    let pki = pki.expect("pki");
    let ca = reqwest::Certificate::from_pem(pki.ca_cert_pem.as_bytes()).expect("ca");
    let client = reqwest::Client::builder()
        .use_rustls_tls()
        .add_root_certificate(ca)
        .timeout(Duration::from_secs(10))
        .build()
        .expect("client");
    let url = format!("https://127.0.0.1:{}/api/v1/namespaces/default", server.addr.port());

    let mut roots = rustls::RootCertStore::empty();
    roots.add(pki.ca_certs().expect("ca certs")[0].clone()).expect("root");
    let mut cfg = rustls::ClientConfig::builder().with_root_certificates(roots).with_no_client_auth();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    let connector = tokio_rustls::TlsConnector::from(Arc::new(cfg));
    let tcp = tokio::net::TcpStream::connect(server.addr).await.expect("connect");
    let name = rustls_pki_types::ServerName::try_from("localhost").expect("name");
    let sock = connector.connect(name, tcp).await.expect("TLS handshake");
    assert_slow_head_is_cut_off(sock, async { client.get(&url).send().await.expect("normal request").status().as_u16() })
        .await;
    server.stop().await;
}

#[tokio::test]
async fn a_client_that_stops_reading_is_disconnected_after_the_write_stall_timeout() {
    let (server, _) = Server::start(false).await;
    let client = reqwest::Client::builder().timeout(Duration::from_secs(30)).build().expect("client");
    let base = format!("http://{}", server.addr);
    let value = "x".repeat(20 * 1024);
    for i in 0..300 {
        let cm = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("cm-{i:03}")}, "data": {"v": value}});
        let r = client.post(format!("{base}/api/v1/namespaces/default/configmaps")).json(&cm).send().await.expect("create");
        assert_eq!(r.status().as_u16(), 201);
    }
    let full = client.get(format!("{base}/api/v1/configmaps")).send().await.expect("list").bytes().await.expect("body");
    assert!(full.len() > 6_000_000, "a ~6 MB LIST: {}", full.len());

    // A small receive buffer, so the server's writes wait on this client soon.
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket.set_recv_buffer_size(4096).expect("SO_RCVBUF");
    let mut sock = socket.connect(server.addr).await.expect("connect");
    sock.write_all(b"GET /api/v1/configmaps HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").await.expect("send");
    tokio::time::sleep(TEST_TIMEOUT * 4).await;
    assert_eq!(
        client.get(format!("{base}/api/v1/namespaces/default")).send().await.expect("normal request").status().as_u16(),
        200,
        "another client is answered while the stalled one waits"
    );
    let (bytes, _) = wait_for_close(&mut sock, Instant::now()).await.expect("the server closed the stalled connection");
    assert!(bytes.starts_with(b"HTTP/1.1 200"), "the answer had started: {:?}", String::from_utf8_lossy(&bytes[..bytes.len().min(64)]));
    assert!(bytes.len() < full.len(), "cut before the end of the body: {} of {} bytes", bytes.len(), full.len());

    // A client that reads the same LIST at once gets all of it.
    let again = client.get(format!("{base}/api/v1/configmaps")).send().await.expect("list").bytes().await.expect("body");
    assert_eq!(again.len(), full.len());
    server.stop().await;
}
