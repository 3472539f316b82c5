//! Error answers over HTTP/2 are complete responses even when the handler
//! never read the request body: curl (a real HTTP/2 client, nghttp2) POSTs a
//! 1 MiB body anonymously (401) and to a missing subresource (404) and must
//! read the Status the server sent, not "Stream error in the HTTP/2 framing
//! layer" (an RST_STREAM racing the answer).

use std::sync::Arc;

use rkube_apiserver::filters::metrics::ApiserverMetrics;
use rkube_apiserver::filters::tls;
use rkube_apiserver::filters::{FilterArgs, FilterChain};
use serde_json::Value;
use tokio::sync::oneshot;

/// curl's exit code, the HTTP code and version it saw, and the body.
async fn curl(args: &[&str], body: &std::path::Path, url: &str) -> (i32, String, Value) {
    let mut cmd = tokio::process::Command::new("curl");
    cmd.args(["-sS", "--http2", "-k", "-X", "POST", "-H", "content-type: application/json", "--max-time", "30"])
        .arg("--data-binary")
        .arg(format!("@{}", body.display()))
        .args(["-w", "\n%{http_code} %{http_version}"])
        .args(args)
        .arg(url)
        .kill_on_drop(true);
    let out = cmd.output().await.expect("curl runs (apt-get install curl)");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let (text, code) = stdout.rsplit_once('\n').unwrap_or(("", &stdout));
    let code = format!("{code}{}", String::from_utf8_lossy(&out.stderr).trim());
    (out.status.code().unwrap_or(-1), code, serde_json::from_str(text).unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_error_answers_to_unread_bodies_are_complete() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().unwrap();
    let storage: Arc<dyn rkube_storage::Storage> =
        Arc::new(rkube_storage::embedded::EmbeddedStorage::open(&dir.path().join("data")).unwrap());
    let st = rkube_apiserver::server::default_state(storage);
    rkube_apiserver::bootstrap(&st).await.unwrap();
    let pki = tls::generate_self_signed(dir.path()).unwrap();
    let tokens = dir.path().join("tokens.csv");
    std::fs::write(&tokens, "admin-token,admin,1,\"system:masters\"\n").unwrap();
    let args = FilterArgs {
        tls_cert_file: Some(pki.serving_cert_path.clone()),
        tls_private_key_file: Some(pki.serving_key_path.clone()),
        token_auth_file: Some(tokens),
        anonymous_auth: false,
        ..FilterArgs::default()
    };
    let chain = FilterChain::build(args.load().unwrap(), None, Arc::new(ApiserverMetrics::new())).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("https://127.0.0.1:{}", listener.local_addr().unwrap().port());
    let (stop, stopped) = oneshot::channel::<()>();
    let server = tokio::spawn(async move {
        rkube_apiserver::server::serve_api(listener, st, &chain, async {
            let _ = stopped.await;
        })
        .await
    });

    let body = dir.path().join("body.json");
    std::fs::write(&body, vec![b'a'; 1024 * 1024]).unwrap();
    let cms = format!("{base}/api/v1/namespaces/default/configmaps");
    let missing = format!("{cms}/cm/nosuch");
    let auth: &[&str] = &["-H", "Authorization: Bearer admin-token"];
    for round in 0..5 {
        let (exit, code, status) = curl(&[], &body, &cms).await;
        assert_eq!((exit, code.as_str(), status["reason"].as_str()), (0, "401 2", Some("Unauthorized")), "round {round}: {status}");
        let (exit, code, status) = curl(auth, &body, &missing).await;
        assert_eq!((exit, code.as_str(), status["reason"].as_str()), (0, "404 2", Some("NotFound")), "round {round}: {status}");
    }
    // A body the handler does read still works on the same server.
    std::fs::write(&body, r#"{"metadata":{"name":"cm"}}"#).unwrap();
    let (exit, code, status) = curl(auth, &body, &cms).await;
    assert_eq!((exit, code.as_str()), (0, "201 2"), "{status}");

    let _ = stop.send(());
    server.await.unwrap().unwrap();
}
