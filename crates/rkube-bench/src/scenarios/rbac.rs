//! `rkube bench rbac`: what RBAC costs a request. Throughput of GET of one
//! ConfigMap over HTTPS with 8 connections, side by side in one run, for a
//! `system:masters` user (never evaluated) and for a user allowed by a
//! RoleBinding to `view`, with 0, 400 and 10,000 ClusterRoleBindings of
//! other users present.
//!
//! One API server runs (`--authorization-mode=RBAC`, a generated CA and
//! serving certificate, `--token-auth-file` with both users); the
//! ClusterRoleBindings are created through the API by the admin between
//! steps. At each step the two users alternate, `runs` timed windows each
//! (median kept), so drift of the machine hits both alike.
//!
//! Goal (issue 14): the RBAC user gets at least [`GOAL_RATIO`] of the
//! masters user's throughput at every step; below it the report is written
//! and the command exits non-zero. Every request must answer 200 (a 403
//! means the scenario measures the wrong thing: it fails).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use serde_json::json;

use crate::cli::Scenario;
use crate::client::{https_builder, Api};
use crate::procs::{Backend, ProcWatcher, Secure};
use crate::progress;
use crate::report::{Report, Table};
use crate::scenarios::{pick, Ctx};
use crate::stats::fmt_rate;

/// The RBAC user's throughput must be at least this share of the masters user's.
pub const GOAL_RATIO: f64 = 0.85;
/// Connections (and requests in flight) per measurement, as wrk's `-c 8`.
pub const CONNECTIONS: usize = 8;

const NS: &str = "bench-rbac";
const RBAC: &str = "rbac.authorization.k8s.io";
pub(crate) const MASTERS_TOKEN: &str = "bench-masters-token";
const USER_TOKEN: &str = "bench-viewer-token";

/// A CA and a serving certificate for 127.0.0.1, written to `dir`; returns
/// the CA (PEM) and the flags serving HTTPS with them.
pub(crate) fn pki(dir: &std::path::Path) -> anyhow::Result<(String, Vec<String>)> {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate()?;
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.distinguished_name.push(DnType::CommonName, "rkube-bench-ca");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_cert = ca.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca, &ca_key);
    let key = KeyPair::generate()?;
    let mut sp = CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])?;
    sp.distinguished_name.push(DnType::CommonName, "kube-apiserver");
    let cert = sp.signed_by(&key, &issuer)?;
    let (crt, keyf, tokens) = (dir.join("apiserver.crt"), dir.join("apiserver.key"), dir.join("tokens.csv"));
    std::fs::write(&crt, cert.pem())?;
    std::fs::write(&keyf, key.serialize_pem())?;
    std::fs::write(&tokens, format!("{MASTERS_TOKEN},bench-admin,1,\"system:masters\"\n{USER_TOKEN},bench-viewer,2,\"bench-viewers\"\n"))?;
    let flags = vec![
        format!("--tls-cert-file={}", crt.display()),
        format!("--tls-private-key-file={}", keyf.display()),
        format!("--token-auth-file={}", tokens.display()),
        "--authorization-mode=RBAC".to_string(),
        "--anonymous-auth=false".to_string(),
    ];
    Ok((ca_cert.pem(), flags))
}

/// GETs `path` with `token` on [`CONNECTIONS`] connections for `window`;
/// returns requests per second. Any answer but 200 is an error.
async fn throughput(base: &str, ca_pem: &str, token: &str, path: &str, window: Duration) -> anyhow::Result<f64> {
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let url = format!("{base}{path}");
    let mut tasks = Vec::new();
    for _ in 0..CONNECTIONS {
        // One client per connection: each keeps exactly one connection open.
        let http = https_builder(ca_pem).map_err(anyhow::Error::msg)?.pool_max_idle_per_host(1).tcp_nodelay(true).build()?;
        let (stop, done, url, token) = (stop.clone(), done.clone(), url.clone(), token.to_string());
        tasks.push(tokio::spawn(async move {
            // Warm the connection (TLS handshake) before counting.
            http.get(&url).bearer_auth(&token).send().await?.bytes().await?;
            while !stop.load(Ordering::Relaxed) {
                let resp = http.get(&url).bearer_auth(&token).send().await?;
                let code = resp.status().as_u16();
                let body = resp.bytes().await?;
                anyhow::ensure!(code == 200, "GET {url}: {code} {}", String::from_utf8_lossy(&body[..body.len().min(300)]));
                done.fetch_add(1, Ordering::Relaxed);
            }
            Ok::<_, anyhow::Error>(())
        }));
    }
    // Let every connection finish its handshake, then count over the window.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let start_count = done.load(Ordering::Relaxed);
    let t = Instant::now();
    tokio::time::sleep(window).await;
    let n = done.load(Ordering::Relaxed) - start_count;
    let secs = t.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await??;
    }
    Ok(n as f64 / secs)
}

/// Creates ClusterRoleBindings `other-<i>` (user `other-<i>`, ClusterRole `view`) for `range`.
async fn add_bindings(api: &Api, range: std::ops::Range<usize>) -> anyhow::Result<()> {
    let pb = progress::bar(range.len() as u64, format!("creating {} ClusterRoleBindings", range.len()));
    futures::stream::iter(range)
        .map(|i| async move {
            let b = json!({"apiVersion": format!("{RBAC}/v1"), "kind": "ClusterRoleBinding",
                "metadata": {"name": format!("other-{i:05}")},
                "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": "view"},
                "subjects": [{"apiGroup": RBAC, "kind": "User", "name": format!("other-{i:05}")}]});
            api.create(&format!("/apis/{RBAC}/v1/clusterrolebindings"), &b).await
        })
        .buffer_unordered(16)
        .inspect_ok(|_| pb.inc(1))
        .try_collect::<Vec<_>>()
        .await?;
    pb.finish_and_clear();
    Ok(())
}

/// Runs the scenario.
pub async fn run(ctx: &Ctx) -> anyhow::Result<Report> {
    let quick = ctx.args.quick;
    let backend = ctx.backends(&[Backend::Embedded])[0];
    let mut sizes = pick(&ctx.args.sizes, quick, &[0, 40], &[0, 400, 10_000]);
    sizes.sort_unstable();
    sizes.dedup();
    let runs = ctx.runs(3);
    let window = Duration::from_secs(ctx.args.step_seconds.unwrap_or(if quick { 1 } else { 5 }));
    let mut report = ctx.report(
        Scenario::Rbac,
        json!({"backend": backend, "cluster_role_bindings": sizes, "runs": runs, "window_seconds": window.as_secs(),
            "connections": CONNECTIONS, "request": "GET one ConfigMap over HTTPS",
            "users": {"masters": "bearer token, group system:masters", "rbac": "bearer token, RoleBinding to ClusterRole view in the namespace"},
            "goal_ratio": GOAL_RATIO}),
    );
    let env = ctx.env(backend).await?;
    let dir = tempfile::Builder::new().prefix("rkube-bench-rbac-").tempdir()?;
    let (ca_pem, flags) = pki(dir.path())?;
    let secure = Secure { ca_pem: ca_pem.clone(), token: MASTERS_TOKEN.into() };
    let server = env.start_server_with(&flags, Some(&secure)).await?;
    let base = server.base_url().to_string();
    let admin = Api::secure(&base, &ca_pem, MASTERS_TOKEN).map_err(anyhow::Error::msg)?;
    admin.create("/api/v1/namespaces", &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})).await?;
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "target", "namespace": NS}, "data": {"k": "v"}});
    admin.create(&format!("/api/v1/namespaces/{NS}/configmaps"), &cm).await?;
    let rb = json!({"apiVersion": format!("{RBAC}/v1"), "kind": "RoleBinding", "metadata": {"name": "viewer", "namespace": NS},
        "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": "view"},
        "subjects": [{"apiGroup": RBAC, "kind": "User", "name": "bench-viewer"}]});
    admin.create(&format!("/apis/{RBAC}/v1/namespaces/{NS}/rolebindings"), &rb).await?;
    let path = format!("/api/v1/namespaces/{NS}/configmaps/target");
    let watcher = ProcWatcher::start(server.pid());

    let mut table = Table::new(
        format!("GET one ConfigMap over HTTPS, {CONNECTIONS} connections, median of {runs} × {} s", window.as_secs()),
        &["ClusterRoleBindings of others", "system:masters req/s", "RBAC user req/s", "ratio", "goal"],
    );
    let mut present = 0;
    for &n in &sizes {
        if n > present {
            add_bindings(&admin, present..n).await?;
            present = n;
        }
        let (mut masters, mut user) = (Vec::new(), Vec::new());
        for run in 0..runs {
            progress::phase(&format!("{n} bindings: run {}/{runs}", run + 1));
            masters.push(throughput(&base, &ca_pem, MASTERS_TOKEN, &path, window).await?);
            user.push(throughput(&base, &ca_pem, USER_TOKEN, &path, window).await?);
        }
        let labels = |who: &str| [("bindings", n.to_string()), ("user", who.to_string())];
        let m = report.measure("rbac/get/throughput", "req/s", &labels("masters"), &masters);
        let u = report.measure("rbac/get/throughput", "req/s", &labels("rbac"), &user);
        let (Some(m), Some(u)) = (m, u) else { anyhow::bail!("no samples at {n} bindings") };
        let ratio = u.median / m.median;
        report.measure("rbac/get/ratio", "ratio", &[("bindings", n.to_string())], &[ratio]);
        let met = ratio >= GOAL_RATIO;
        if !met {
            report.missed_goals.push(format!(
                "at {n} ClusterRoleBindings the RBAC user got {:.0}% of the masters user's throughput (goal {:.0}%)",
                ratio * 100.0,
                GOAL_RATIO * 100.0
            ));
        }
        table.row(vec![
            n.to_string(),
            fmt_rate(m.median),
            fmt_rate(u.median),
            format!("{:.0}%", ratio * 100.0),
            if met { "met".into() } else { "MISSED".into() },
        ]);
    }
    report.tables.push(table);
    if let Some(usage) = watcher.finish() {
        report.note(format!("API server over the whole run: {:.2} cores on average, {:.1} CPU seconds", usage.avg_cores, usage.cpu_seconds));
    }
    report.note("The load generator runs in this process, on the same machine as the server; both users pay its cost alike.");
    server.stop().await;
    Ok(report)
}
