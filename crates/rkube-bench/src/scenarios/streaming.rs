//! `rkube bench streaming`: `kubectl exec` round trips and `kubectl port-forward` throughput
//! through the whole path (kubectl → API server → kubelet API → runtime streaming server →
//! the pod's process), with both of kubectl's protocols: 1.27 speaks SPDY/3.1, 1.33 speaks
//! WebSocket (`v5.channel.k8s.io` for exec, `v2.portforward.k8s.io` for port-forward).
//!
//! One `rkube up --node` runs (HTTPS, its admin kubeconfig). Two pods run on its node: `box`
//! (`sleep`) and `source`, a Python process that sends `--sizes` bytes (default 1 GiB) of zeros
//! to each connection on a loopback port and closes it (Ready once the port accepts).
//!
//! - Exec round trip: the wall time of one `kubectl exec box -- true` process, kubectl's own
//!   start included (what a user waits for); after two unmeasured warm-up runs, 50 runs per
//!   version (5 with `--quick`); the median and p90 are reported.
//! - Port-forward throughput: `kubectl port-forward pod/source :<port>` runs; each of `--runs`
//!   runs (default 3) opens a connection to the local port and reads to its end; bytes per
//!   second of wall time from connect to end of stream.
//!
//! The scenario fails when kubectl is missing, an exec exits non-zero, or a connection
//! delivers another number of bytes than the source sent.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncReadExt};
use tokio::process::{Child, Command};

use crate::cli::Scenario;
use crate::procs::free_port;
use crate::report::{Report, Table};
use crate::scenarios::{pick, Ctx};
use crate::stats::{fmt_bytes, fmt_secs};

/// The kubectl versions measured, with the protocol each speaks.
const KUBECTLS: [(&str, &str); 2] = [("1.27", "SPDY/3.1"), ("1.33", "WebSocket")];

/// Measured exec runs per kubectl (after [`EXEC_WARMUP`] unmeasured ones).
const EXEC_RUNS: usize = 50;
const EXEC_WARMUP: usize = 2;

/// Bytes the source pod sends per connection by default.
const DEFAULT_BYTES: usize = 1 << 30;

/// How long `rkube up --node` may take to serve and register its node.
const UP_TIMEOUT: Duration = Duration::from_secs(90);

/// A child process stopped on drop: SIGTERM, then SIGKILL after 10 s (by PID).
struct Proc(Option<Child>);

impl Proc {
    async fn stop(mut self) {
        if let Some(mut child) = self.0.take() {
            if let Some(pid) = child.id().and_then(|p| i32::try_from(p).ok()) {
                // SAFETY: kill(2) on the child this scenario started and has not reaped.
                unsafe { libc::kill(pid, libc::SIGTERM) };
            }
            if tokio::time::timeout(Duration::from_secs(10), child.wait())
                .await
                .is_err()
            {
                let _ = child.kill().await;
            }
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Some(child) = self.0.as_mut() {
            let _ = child.start_kill();
        }
    }
}

/// The directory holding `kubectl.1.27` and `kubectl.1.33`: `--kubectl-dir`, else the first
/// directory of `PATH` that has both.
fn kubectl_dir(given: Option<&Path>) -> anyhow::Result<PathBuf> {
    let has_both = |d: &Path| {
        KUBECTLS
            .iter()
            .all(|(v, _)| d.join(format!("kubectl.{v}")).is_file())
    };
    if let Some(d) = given {
        anyhow::ensure!(
            has_both(d),
            "{} lacks kubectl.1.27 or kubectl.1.33",
            d.display()
        );
        return Ok(d.to_path_buf());
    }
    std::env::var_os("PATH")
        .and_then(|p| std::env::split_paths(&p).find(|d| has_both(d)))
        .context("kubectl.1.27 and kubectl.1.33 not found on PATH (or give --kubectl-dir)")
}

struct Kubectl {
    exe: PathBuf,
    kubeconfig: PathBuf,
}

impl Kubectl {
    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(&self.exe);
        cmd.arg(format!("--kubeconfig={}", self.kubeconfig.display()))
            .args(args)
            .stdin(Stdio::null())
            .kill_on_drop(true);
        cmd
    }

    /// Runs to completion; Ok(stdout) on exit 0, else the error with stderr.
    async fn run(&self, args: &[&str]) -> anyhow::Result<String> {
        let out = self
            .command(args)
            .output()
            .await
            .with_context(|| format!("running {}", self.exe.display()))?;
        anyhow::ensure!(
            out.status.success(),
            "kubectl {} exited with {}: {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Retries `args` every 500 ms until it succeeds or `timeout` passes.
    async fn until_ok(&self, args: &[&str], timeout: Duration) -> anyhow::Result<String> {
        let deadline = Instant::now() + timeout;
        loop {
            match self.run(args).await {
                Ok(out) => return Ok(out),
                Err(e) if Instant::now() >= deadline => return Err(e),
                Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
            }
        }
    }
}

/// The two pods, as a manifest for `kubectl apply -f -`.
fn manifest(source_port: u16, bytes: usize) -> String {
    let server = [
        "import socket, sys",
        "n, port = int(sys.argv[1]), int(sys.argv[2])",
        "s = socket.socket()",
        "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)",
        "s.bind(('', port))",
        "s.listen(8)",
        "chunk = bytes(1 << 20)",
        "while True:",
        "    c, _ = s.accept()",
        "    left = n",
        "    try:",
        "        while left > 0:",
        "            k = min(left, len(chunk))",
        "            c.sendall(chunk[:k])",
        "            left -= k",
        "    except OSError:",
        "        pass",
        "    c.close()",
    ]
    .join("\n");
    let pods = [
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "box", "namespace": "default"},
            "spec": {"terminationGracePeriodSeconds": 1,
                "containers": [{"name": "main", "image": "busybox", "command": ["sleep", "36000"]}]}}),
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "source", "namespace": "default"},
            "spec": {"terminationGracePeriodSeconds": 1,
                "containers": [{"name": "main", "image": "python", "command": ["python3", "-c", server, bytes.to_string(), source_port.to_string()],
                    "readinessProbe": {"tcpSocket": {"port": source_port}, "periodSeconds": 1}}]}}),
    ];
    json!({"apiVersion": "v1", "kind": "List", "items": pods}).to_string()
}

/// Starts `rkube up --node` in `dir` on a free port; returns once the node is Ready.
async fn start_up(exe: &Path, dir: &Path) -> anyhow::Result<(Proc, PathBuf)> {
    let port = free_port().context("picking a free port")?;
    let log = std::fs::File::create(dir.join("up.log")).context("creating up.log")?;
    let child = Command::new(exe)
        .args([
            "up",
            "--node",
            &format!("--port={port}"),
            &format!("--data-dir={}", dir.join("data").display()),
        ])
        .stdin(Stdio::null())
        .stdout(log.try_clone().context("cloning the log file")?)
        .stderr(log)
        .spawn()
        .with_context(|| format!("running {} up --node", exe.display()))?;
    let up = Proc(Some(child));
    let kubeconfig = dir.join("data").join("kubeconfig");
    let deadline = Instant::now() + UP_TIMEOUT;
    while !kubeconfig.exists() {
        anyhow::ensure!(
            Instant::now() < deadline,
            "rkube up wrote no kubeconfig in {UP_TIMEOUT:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok((up, kubeconfig))
}

/// Runs the scenario.
pub async fn run(ctx: &Ctx) -> anyhow::Result<Report> {
    let quick = ctx.args.quick;
    let bytes = pick(&ctx.args.sizes, quick, &[16 << 20], &[DEFAULT_BYTES])[0];
    let execs = if quick { 5 } else { EXEC_RUNS };
    let runs = ctx.runs(3);
    let dir = kubectl_dir(ctx.args.kubectl_dir.as_deref())?;
    let mut report = ctx.report(
        Scenario::Streaming,
        json!({"exec_runs": execs, "exec_warmup_runs": EXEC_WARMUP, "port_forward_bytes": bytes, "port_forward_runs": runs,
            "kubectl": KUBECTLS.iter().map(|(v, p)| json!({"version": v, "protocol": p})).collect::<Vec<_>>()}),
    );
    let work = tempfile::tempdir().context("temp dir")?;
    let (up, kubeconfig) = start_up(&ctx.exe, work.path()).await?;
    let admin = Kubectl {
        exe: dir.join("kubectl.1.33"),
        kubeconfig: kubeconfig.clone(),
    };
    admin
        .until_ok(&["get", "--raw", "/readyz"], UP_TIMEOUT)
        .await
        .context("rkube up never became ready")?;
    admin
        .until_ok(
            &[
                "wait",
                "--for=condition=Ready",
                "node",
                "--all",
                "--timeout=5s",
            ],
            UP_TIMEOUT,
        )
        .await
        .context("the node never became Ready")?;
    let source_port = free_port().context("picking the source's port")?;
    let manifest_path = work.path().join("pods.json");
    std::fs::write(&manifest_path, manifest(source_port, bytes)).context("writing the manifest")?;
    let manifest_arg = manifest_path.display().to_string();
    admin
        .until_ok(&["apply", "-f", &manifest_arg], Duration::from_secs(30))
        .await?;
    admin
        .run(&[
            "wait",
            "--for=condition=Ready",
            "pod/box",
            "pod/source",
            "--timeout=60s",
        ])
        .await?;

    let mut exec_table = Table::new(
        format!("`kubectl exec box -- true`, wall time of the kubectl process (median of {execs} after {EXEC_WARMUP} warm-up runs)"),
        &["kubectl", "protocol", "median", "p90"],
    );
    let mut pf_table = Table::new(
        format!(
            "`kubectl port-forward`: reading {} from a pod (median of {runs} runs)",
            fmt_bytes(bytes as u64)
        ),
        &["kubectl", "protocol", "throughput", "time"],
    );
    for (version, protocol) in KUBECTLS {
        let k = Kubectl {
            exe: dir.join(format!("kubectl.{version}")),
            kubeconfig: kubeconfig.clone(),
        };
        crate::progress::phase(&format!("exec round trips with kubectl {version}"));
        let mut times = Vec::new();
        for i in 0..EXEC_WARMUP + execs {
            let t = Instant::now();
            k.run(&["exec", "box", "--", "true"]).await?;
            if i >= EXEC_WARMUP {
                times.push(t.elapsed().as_secs_f64());
            }
        }
        let labels = [
            ("kubectl", version.to_string()),
            ("protocol", protocol.to_string()),
        ];
        let s = report.measure("streaming/exec_round_trip", "s", &labels, &times);
        exec_table.row(vec![
            version.into(),
            protocol.into(),
            s.as_ref().map_or("n/a".into(), |s| fmt_secs(s.median)),
            s.as_ref().map_or("n/a".into(), |s| fmt_secs(s.p90)),
        ]);

        crate::progress::phase(&format!("port-forward throughput with kubectl {version}"));
        let (rates, secs) = port_forward(&k, source_port, bytes, runs).await?;
        let r = report.measure("streaming/port_forward_throughput", "B/s", &labels, &rates);
        let t = report.measure("streaming/port_forward_seconds", "s", &labels, &secs);
        pf_table.row(vec![
            version.into(),
            protocol.into(),
            r.as_ref()
                .map_or("n/a".into(), |r| format!("{:.0} MB/s", r.median / 1e6)),
            t.as_ref().map_or("n/a".into(), |t| fmt_secs(t.median)),
        ]);
    }
    report.tables.push(exec_table);
    report.tables.push(pf_table);
    let _ = admin
        .run(&["delete", "pod", "box", "source", "--wait=false"])
        .await;
    up.stop().await;
    Ok(report)
}

/// Runs `kubectl port-forward` to the source and reads `runs` connections through it;
/// returns bytes per second and seconds of each.
async fn port_forward(
    k: &Kubectl,
    source_port: u16,
    bytes: usize,
    runs: usize,
) -> anyhow::Result<(Vec<f64>, Vec<f64>)> {
    let mut cmd = k.command(&[
        "port-forward",
        "--address=127.0.0.1",
        "pod/source",
        &format!(":{source_port}"),
    ]);
    cmd.stdout(Stdio::piped()).stderr(Stdio::null());
    let mut child = cmd.spawn().context("starting kubectl port-forward")?;
    let stdout = child.stdout.take().context("port-forward stdout")?;
    let pf = Proc(Some(child));
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    // "Forwarding from 127.0.0.1:<local> -> <remote>"
    let local: u16 = tokio::time::timeout(Duration::from_secs(30), async {
        while let Ok(Some(line)) = lines.next_line().await {
            let port = line
                .strip_prefix("Forwarding from 127.0.0.1:")
                .and_then(|rest| rest.split_whitespace().next())
                .and_then(|p| p.parse().ok());
            if let Some(p) = port {
                return Some(p);
            }
        }
        None
    })
    .await
    .ok()
    .flatten()
    .context("kubectl port-forward did not say which local port it listens on")?;
    // Keep reading its output so it never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    let (mut rates, mut secs) = (Vec::new(), Vec::new());
    let mut buf = vec![0u8; 1 << 20];
    for _ in 0..runs {
        let t = Instant::now();
        let mut conn = tokio::net::TcpStream::connect(("127.0.0.1", local))
            .await
            .context("connecting to the forwarded port")?;
        let mut got = 0usize;
        loop {
            let n = tokio::time::timeout(Duration::from_secs(60), conn.read(&mut buf))
                .await
                .context("no byte through the forwarded port for 60 s")??;
            if n == 0 {
                break;
            }
            got += n;
        }
        let elapsed = t.elapsed().as_secs_f64();
        anyhow::ensure!(
            got == bytes,
            "port-forward delivered {got} bytes, the pod sent {bytes}"
        );
        rates.push(bytes as f64 / elapsed);
        secs.push(elapsed);
    }
    pf.stop().await;
    Ok((rates, secs))
}
