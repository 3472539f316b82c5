//! `rkube bench stalled`: what clients that ask for a large LIST and never
//! read the answer cost the server, and what it keeps afterwards.
//!
//! One API server over HTTPS (the path kubectl takes) holds `--sizes`
//! ConfigMaps (default 13,500 of about 1.1 KB: a ~15 MB LIST), loaded
//! straight into the embedded store before it starts. Then, at once:
//! - [`HTTP1_CLIENTS`] HTTP/1.1 connections each send the LIST and never read;
//! - [`HTTP2_STREAMS`] HTTP/2 streams (on [`HTTP2_CONNECTIONS`] connections
//!   with a 1 GiB connection window) each ask for it and never grant their
//!   stream any window.
//!
//! The server's RSS is sampled once a second (`/proc/<pid>/status`) before
//! (after one full LIST read, so the cache's own memory is counted in the
//! baseline), while the clients stall ([`STALL_SECONDS`]), and after they
//! disconnect ([`SETTLE_SECONDS`] later: what the allocator gave back).
//! Meanwhile a normal client times `GET ...?limit=1`.
//!
//! Goal (issue 13): the stalled clients add at most [`GOAL_GROWTH_BYTES`] to
//! the RSS; above it the report is written and the command exits non-zero.
//! Every stalled request must get a 200 head (anything else measures the
//! wrong thing: it fails).

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use serde_json::json;
use tokio::io::AsyncWriteExt;

use crate::cli::Scenario;
use crate::client::https_builder;
use crate::load;
use crate::objects::Kind;
use crate::procs::{sample_proc, Backend, Secure};
use crate::progress;
use crate::report::{Report, Table};
use crate::scenarios::{pick, rbac, Ctx};
use crate::stats::fmt_bytes;

/// HTTP/1.1 clients that send the LIST and never read.
pub const HTTP1_CLIENTS: usize = 100;
/// HTTP/2 streams that ask for the LIST and never read.
pub const HTTP2_STREAMS: usize = 100;
/// Connections the HTTP/2 streams share.
pub const HTTP2_CONNECTIONS: usize = 2;
/// How long the clients stall while RSS is sampled.
pub const STALL_SECONDS: u64 = 10;
/// How long after the clients went the "after" RSS is read.
pub const SETTLE_SECONDS: u64 = 20;
/// The most the stalled clients may add to the server's RSS.
pub const GOAL_GROWTH_BYTES: u64 = 200 * 1024 * 1024;

const NS: &str = "bench-stalled";

/// Runs the scenario.
pub async fn run(ctx: &Ctx) -> anyhow::Result<Report> {
    let quick = ctx.args.quick;
    let size = pick(&ctx.args.sizes, quick, &[500], &[13_500])[0];
    let (http1, http2) = if quick { (10, 10) } else { (HTTP1_CLIENTS, HTTP2_STREAMS) };
    let (stall, settle) = if quick { (3, 3) } else { (STALL_SECONDS, SETTLE_SECONDS) };
    let mut report = ctx.report(
        Scenario::Stalled,
        json!({"backend": "embedded", "configmaps": size, "http1_clients": http1, "http2_streams": http2,
               "http2_connections": HTTP2_CONNECTIONS, "stall_seconds": stall, "settle_seconds": settle,
               "goal_growth_bytes": GOAL_GROWTH_BYTES}),
    );
    let env = ctx.env(Backend::Embedded).await?;
    {
        let storage = env.open_storage().await?;
        load::namespace_direct(&storage, NS).await?;
        let pb = progress::bar(size as u64, format!("loading {size} configmaps"));
        load::load_direct(&storage, Kind::Configmaps, NS, 0..size, &pb).await?;
        pb.finish_and_clear();
    }
    let dir = tempfile::tempdir()?;
    let (ca_pem, flags) = rbac::pki(dir.path())?;
    let token = rbac::MASTERS_TOKEN.to_string();
    progress::phase("starting rkube apiserver over HTTPS");
    let server = env.start_server_with(&flags, Some(&Secure { ca_pem: ca_pem.clone(), token: token.clone() })).await?;
    let pid = server.pid();
    let base = server.base_url().to_string();
    let port = base.rsplit(':').next().and_then(|p| p.trim_end_matches('/').parse::<u16>().ok()).context("server port")?;
    let http = https_builder(&ca_pem).map_err(anyhow::Error::msg)?.build()?;
    // The loaded objects only (the namespace also gets `kube-root-ca.crt`).
    let list_path = format!("/api/v1/namespaces/{NS}/configmaps?labelSelector=bench%3Dlist");
    let full = http.get(format!("{base}{list_path}")).bearer_auth(&token).send().await?.bytes().await?;
    let items = serde_json::from_slice::<serde_json::Value>(&full)?["items"].as_array().map(Vec::len).unwrap_or(0);
    anyhow::ensure!(items == size, "the LIST returned {items} items, {size} were loaded");
    let body_len = full.len() as u64;
    drop(full);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = sample_proc(pid).context("server gone")?.rss_bytes;
    let quiet = small_get_ms(&http, &base, &list_path, &token).await?;

    let tls = tls_connector(&ca_pem)?;
    let mut held = Held::default();
    for _ in 0..http1 {
        let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
        let mut s = tls.connect(server_name(), tcp).await?;
        s.write_all(format!("GET {list_path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n\r\n").as_bytes()).await?;
        s.flush().await?;
        held.http1.push(s);
    }
    let per_conn = http2.div_ceil(HTTP2_CONNECTIONS);
    let mut opened = 0;
    while opened < http2 {
        let n = per_conn.min(http2 - opened);
        held.http2.push(open_h2_streams(&ca_pem, port, &list_path, &token, n).await?);
        opened += n;
    }
    let mut peak = before;
    let mut during_ms = Vec::new();
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(stall) {
        tokio::time::sleep(Duration::from_secs(1)).await;
        peak = peak.max(sample_proc(pid).context("server gone")?.rss_bytes);
        during_ms.push(small_get_ms(&http, &base, &list_path, &token).await?);
    }
    drop(held);
    tokio::time::sleep(Duration::from_secs(settle)).await;
    let after = sample_proc(pid).context("server gone")?.rss_bytes;
    server.stop().await;

    let growth = peak.saturating_sub(before);
    let kept = after.saturating_sub(before);
    let labels = [("configmaps", size.to_string()), ("list_bytes", body_len.to_string())];
    report.measure("rss/before", "bytes", &labels, &[before as f64]);
    report.measure("rss/peak_while_stalled", "bytes", &labels, &[peak as f64]);
    report.measure("rss/after", "bytes", &labels, &[after as f64]);
    report.measure("small_get/quiet", "ms", &labels, &[quiet]);
    report.measure("small_get/while_stalled", "ms", &labels, &during_ms);
    let mut table = Table::new(
        format!("{http1} HTTP/1.1 clients + {http2} HTTP/2 streams stalled on a {} LIST ({size} ConfigMaps)", fmt_bytes(body_len)),
        &["RSS before", "peak while stalled", "growth", "after the clients left", "kept", "GET limit=1 quiet", "while stalled (median)"],
    );
    during_ms.sort_by(f64::total_cmp);
    let median = during_ms.get(during_ms.len() / 2).copied().unwrap_or(f64::NAN);
    table.row(vec![
        fmt_bytes(before),
        fmt_bytes(peak),
        fmt_bytes(growth),
        fmt_bytes(after),
        fmt_bytes(kept),
        format!("{quiet:.1} ms"),
        format!("{median:.1} ms"),
    ]);
    report.tables.push(table);
    if growth > GOAL_GROWTH_BYTES && !quick {
        report.missed_goals.push(format!(
            "the stalled clients grew the server by {} (goal: at most {})",
            fmt_bytes(growth),
            fmt_bytes(GOAL_GROWTH_BYTES)
        ));
    }
    Ok(report)
}

/// Connections kept open (unread) until dropped.
#[derive(Default)]
struct Held {
    http1: Vec<tokio_rustls::client::TlsStream<tokio::net::TcpStream>>,
    http2: Vec<H2Conn>,
}

/// One HTTP/2 connection with its unread responses.
struct H2Conn {
    _send: h2::client::SendRequest<bytes::Bytes>,
    _responses: Vec<http::Response<h2::RecvStream>>,
    driver: tokio::task::JoinHandle<()>,
}

impl Drop for H2Conn {
    fn drop(&mut self) {
        self.driver.abort();
    }
}

fn server_name() -> rustls_pki_types::ServerName<'static> {
    rustls_pki_types::ServerName::IpAddress(std::net::Ipv4Addr::LOCALHOST.into())
}

fn tls_connector(ca_pem: &str) -> anyhow::Result<tokio_rustls::TlsConnector> {
    tls_connector_alpn(ca_pem, b"http/1.1")
}

fn tls_connector_alpn(ca_pem: &str, alpn: &[u8]) -> anyhow::Result<tokio_rustls::TlsConnector> {
    use rustls_pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pki_types::CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert?)?;
    }
    let mut cfg = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = vec![alpn.to_vec()];
    Ok(tokio_rustls::TlsConnector::from(Arc::new(cfg)))
}

/// Opens one HTTP/2 connection and `n` streams asking for `path`; waits for
/// every 200 head and keeps the bodies unread.
async fn open_h2_streams(ca_pem: &str, port: u16, path: &str, token: &str, n: usize) -> anyhow::Result<H2Conn> {
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    let tls = tls_connector_alpn(ca_pem, b"h2")?.connect(server_name(), tcp).await?;
    anyhow::ensure!(tls.get_ref().1.alpn_protocol() == Some(b"h2"), "the server did not negotiate HTTP/2");
    let (send, conn) = h2::client::Builder::new().initial_connection_window_size(1 << 30).handshake::<_, bytes::Bytes>(tls).await?;
    let driver = tokio::spawn(async move {
        let _ = conn.await;
    });
    let mut pending = Vec::new();
    for _ in 0..n {
        let mut ready = send.clone().ready().await?;
        let req = http::Request::get(format!("https://127.0.0.1:{port}{path}")).header("authorization", format!("Bearer {token}")).body(())?;
        pending.push(ready.send_request(req, true)?.0);
    }
    let mut responses = Vec::new();
    for p in pending {
        let resp = p.await?;
        anyhow::ensure!(resp.status() == 200, "a stalled HTTP/2 LIST answered {}", resp.status());
        responses.push(resp);
    }
    Ok(H2Conn { _send: send, _responses: responses, driver })
}

/// Milliseconds for `GET path&limit=1` (a normal client's request; `path` has a query).
async fn small_get_ms(http: &reqwest::Client, base: &str, path: &str, token: &str) -> anyhow::Result<f64> {
    let t = Instant::now();
    let resp = http.get(format!("{base}{path}&limit=1")).bearer_auth(token).timeout(Duration::from_secs(30)).send().await?;
    let code = resp.status().as_u16();
    resp.bytes().await?;
    anyhow::ensure!(code == 200, "GET {path}&limit=1 answered {code} while clients stalled");
    Ok(t.elapsed().as_secs_f64() * 1000.0)
}
