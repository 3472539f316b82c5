//! Clients that send a LIST and never read the answer must not make the
//! server hold a copy of the body each: the JSON body is streamed in chunks
//! built as the socket takes them (`handlers::read::list_chunks`). The test
//! opens 40 HTTP/1.1 connections that each ask for a ~6 MB LIST and stall,
//! and reads this process's RSS (the server runs in it) from /proc before
//! and while they stall; a normal client is answered meanwhile. Buffering
//! the whole body per response grew RSS by about 40 × 6 MB.

use crate::common;

use std::time::Duration;

use common::TestServer;
use serde_json::json;
use tokio::io::AsyncWriteExt;

/// This process's resident set size in bytes (`VmRSS` of /proc/self/status).
fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS");
    kb * 1024
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_list_clients_do_not_each_hold_a_copy_of_the_body() {
    let s = TestServer::embedded().await;
    let value = "x".repeat(20 * 1024);
    for i in 0..300 {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("cm-{i:03}")}, "data": {"v": value}});
        assert_eq!(s.post("/api/v1/namespaces/default/configmaps", &cm).await.code, 201);
    }
    let full = s.get("/api/v1/configmaps").await;
    assert_eq!(full.code, 200);
    let body_len = full.text.len() as u64;
    assert!(body_len > 6_000_000, "a ~6 MB LIST: {body_len}");

    let addr = s.base.trim_start_matches("http://").to_string();
    let before = rss_bytes();
    let mut stalled = Vec::new();
    for _ in 0..40 {
        let mut sock = tokio::net::TcpStream::connect(&addr).await.expect("connect");
        sock.write_all(b"GET /api/v1/configmaps HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").await.expect("send");
        stalled.push(sock);
    }
    // Let every response start and fill what the sockets take.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let during = rss_bytes();
    let grown = during.saturating_sub(before);

    // A normal client is answered meanwhile, with the whole list.
    let other = s.get("/api/v1/namespaces/default/configmaps?limit=1").await;
    assert_eq!(other.code, 200, "{}", other.text);
    assert_eq!(other.body["items"].as_array().map(Vec::len), Some(1));

    let buffered = 40 * body_len;
    eprintln!("RSS grew {grown} bytes for 40 stalled clients of a {body_len}-byte LIST");
    assert!(
        grown < buffered / 4,
        "RSS grew {grown} bytes for 40 stalled clients of a {body_len}-byte LIST (a copy each would be {buffered})"
    );
    drop(stalled);
}

/// HTTP/2 streams whose client never grants flow-control window (it never
/// reads) hold at most the stream's window of the body on the server, not a
/// copy each: 100 streams on two TLS connections (the path kubectl takes),
/// each asking for a ~6 MB LIST through the whole filter chain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_http2_streams_do_not_each_hold_a_copy_of_the_body() {
    use rkube_apiserver::filters::metrics::ApiserverMetrics;
    use rkube_apiserver::filters::{tls, FilterArgs, FilterChain};
    use std::sync::Arc;

    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().expect("temp dir");
    let storage: Arc<dyn rkube_storage::Storage> =
        Arc::new(rkube_storage::embedded::EmbeddedStorage::open(&dir.path().join("data")).expect("store"));
    let st = rkube_apiserver::server::default_state(storage);
    rkube_apiserver::bootstrap(&st).await.expect("bootstrap");
    let pki = tls::generate_self_signed(dir.path()).expect("pki");
    let tokens = dir.path().join("tokens.csv");
    std::fs::write(&tokens, "admin-token,admin,1,\"system:masters\"\n").expect("tokens");
    let args = FilterArgs {
        tls_cert_file: Some(pki.serving_cert_path.clone()),
        tls_private_key_file: Some(pki.serving_key_path.clone()),
        token_auth_file: Some(tokens),
        anonymous_auth: false,
        ..FilterArgs::default()
    };
    let chain = FilterChain::build(args.load().expect("flags"), None, Arc::new(ApiserverMetrics::new())).expect("chain");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(async move {
        rkube_apiserver::server::serve_api(listener, st, &chain, async {
            let _ = stopped.await;
        })
        .await
    });

    let ca = reqwest::Certificate::from_pem(pki.ca_cert_pem.as_bytes()).expect("ca");
    let client = reqwest::Client::builder().use_rustls_tls().add_root_certificate(ca).build().expect("client");
    let base = format!("https://127.0.0.1:{}", addr.port());
    let value = "x".repeat(20 * 1024);
    for i in 0..300 {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("cm-{i:03}")}, "data": {"v": value}});
        let r = client.post(format!("{base}/api/v1/namespaces/default/configmaps")).bearer_auth("admin-token").json(&cm).send().await;
        assert_eq!(r.expect("create").status().as_u16(), 201);
    }
    let full = client.get(format!("{base}/api/v1/configmaps")).bearer_auth("admin-token").send().await.expect("list");
    let body_len = full.bytes().await.expect("body").len() as u64;
    assert!(body_len > 6_000_000, "a ~6 MB LIST: {body_len}");

    let mut roots = rustls::RootCertStore::empty();
    roots.add(pki.ca_certs().expect("ca certs")[0].clone()).expect("root");
    let mut cfg = rustls::ClientConfig::builder().with_root_certificates(roots).with_no_client_auth();
    cfg.alpn_protocols = vec![b"h2".to_vec()];
    let connector = tokio_rustls::TlsConnector::from(Arc::new(cfg));

    let before = rss_bytes();
    let mut stalled = Vec::new();
    for _ in 0..2 {
        let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let name = rustls_pki_types::ServerName::try_from("localhost").expect("name");
        let tls = connector.connect(name, tcp).await.expect("TLS handshake");
        assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]), "HTTP/2 negotiated");
        // A large connection window, so only each stream's own (default,
        // 64 KiB) window, never released, holds the server back.
        let (h2, conn) = h2::client::Builder::new()
            .initial_connection_window_size(1 << 30)
            .handshake::<_, bytes::Bytes>(tls)
            .await
            .expect("HTTP/2 handshake");
        let conn = tokio::spawn(conn);
        let mut responses = Vec::new();
        for _ in 0..50 {
            let mut ready = h2.clone().ready().await.expect("stream slot");
            let req = axum::http::Request::get(format!("{base}/api/v1/configmaps"))
                .header("authorization", "Bearer admin-token")
                .body(())
                .expect("request");
            let (resp, _) = ready.send_request(req, true).expect("send");
            responses.push(resp);
        }
        let mut heads = Vec::new();
        for r in responses {
            let resp = r.await.expect("response head");
            assert_eq!(resp.status().as_u16(), 200);
            heads.push(resp);
        }
        stalled.push((h2, conn, heads));
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let during = rss_bytes();
    let grown = during.saturating_sub(before);

    let other = client.get(format!("{base}/api/v1/namespaces/default/configmaps?limit=1")).bearer_auth("admin-token").send().await;
    assert_eq!(other.expect("answered meanwhile").status().as_u16(), 200);

    let buffered = 100 * body_len;
    eprintln!("RSS grew {grown} bytes for 100 stalled HTTP/2 streams of a {body_len}-byte LIST");
    assert!(
        grown < buffered / 4,
        "RSS grew {grown} bytes for 100 stalled HTTP/2 streams of a {body_len}-byte LIST (a copy each would be {buffered})"
    );
    for (h2, conn, heads) in stalled {
        drop(heads);
        drop(h2);
        conn.abort();
    }
    let _ = stop.send(());
    let _ = tokio::time::timeout(Duration::from_secs(10), server).await;
}
