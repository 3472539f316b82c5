//! Clients that send a LIST and never read the answer must not make the
//! server hold a copy of the body each: the JSON body is streamed in chunks
//! built as the socket takes them (`handlers::read::list_chunks`). The test
//! opens 40 HTTP/1.1 connections that each ask for a ~6 MB LIST and stall,
//! and reads this process's RSS (the server runs in it) from /proc before
//! and while they stall; a normal client is answered meanwhile. Buffering
//! the whole body per response grew RSS by about 40 × 6 MB.

mod common;

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
