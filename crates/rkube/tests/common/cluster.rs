//! A running rkube API server for a test: `rkube up` on the embedded store in
//! a temporary data directory, or `rkube apiserver` on a real etcd, on a free
//! loopback port, with a kubeconfig pointing at it.
//!
//! Every process started here is owned by a [`ChildGuard`] and killed by PID
//! when the [`Cluster`] is dropped (also when the test panics).

use std::fs;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use rkube_storage::testing::EtcdServer;

use super::kubectl::Kubectl;
use super::process::ChildGuard;

/// How long a server may take to answer `/readyz` with 200 after start.
const READY_LIMIT: Duration = Duration::from_secs(60);

/// Which storage the API server runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// `rkube up --data-dir <tmp>`: the embedded (redb) store.
    Embedded,
    /// `rkube apiserver --storage-backend=etcd3 --etcd-servers=<real etcd>`.
    Etcd,
}

/// How to stop the server in restart tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// SIGTERM: graceful shutdown; the process must exit on its own.
    Term,
    /// SIGKILL: no chance to flush anything that was not already durable.
    Kill,
}

/// The rkube binary under test.
pub fn rkube_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_rkube"))
}

/// Picks a free TCP port on 127.0.0.1 (bind to port 0, read it, release it).
pub fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    l.local_addr().expect("local addr").port()
}

/// A running API server plus everything it needs; dropping it stops all.
pub struct Cluster {
    /// Storage backend in use.
    pub backend: Backend,
    /// Loopback port the server listens on.
    pub port: u16,
    /// Kubeconfig file kubectl uses.
    pub kubeconfig: PathBuf,
    /// How many times the server was started (names the log files).
    starts: u32,
    // Fields drop in order: the API server stops first, then its etcd, then
    // the temporary directory is removed.
    server: Option<ChildGuard>,
    etcd: Option<EtcdServer>,
    /// Temporary directory holding data, logs, kubeconfig, kubectl cache.
    dir: tempfile::TempDir,
}

impl Cluster {
    /// Starts a server on `backend` and waits until `/readyz` answers 200.
    #[track_caller]
    pub fn start(backend: Backend) -> Cluster {
        let dir = tempfile::Builder::new()
            .prefix("rkube-e2e-")
            .tempdir()
            .expect("tempdir");
        let etcd = match backend {
            Backend::Embedded => None,
            Backend::Etcd => {
                Some(EtcdServer::start().unwrap_or_else(|e| panic!("cannot start etcd: {e}")))
            }
        };
        let kubeconfig = dir.path().join("kubeconfig");
        let mut c = Cluster {
            backend,
            dir,
            port: 0,
            kubeconfig,
            server: None,
            starts: 0,
            etcd,
        };
        c.launch();
        c
    }

    /// The embedded store's data directory.
    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// The temporary directory of this cluster (for manifests etc.).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// A kubectl of `version` ("1.27", "1.33") talking to this server.
    pub fn kubectl(&self, version: &str) -> Kubectl {
        Kubectl::new(
            version,
            &self.kubeconfig,
            &self.dir.path().join(format!("kubectl-cache-{version}")),
            self.dir.path(),
        )
    }

    /// Writes `contents` to a file in the cluster's directory and returns its path.
    pub fn write_file(&self, name: &str, contents: &str) -> PathBuf {
        let p = self.dir.path().join(name);
        fs::write(&p, contents).expect("write test file");
        p
    }

    /// The server's log so far (stdout and stderr of the current start).
    pub fn server_log(&self) -> String {
        fs::read_to_string(self.log_path(self.starts)).unwrap_or_default()
    }

    fn log_path(&self, n: u32) -> PathBuf {
        self.dir.path().join(format!("rkube-{n}.log"))
    }

    fn command(&self) -> Command {
        let mut cmd = Command::new(rkube_bin());
        match self.backend {
            Backend::Embedded => {
                cmd.arg("up")
                    .arg(format!("--data-dir={}", self.data_dir().display()))
                    .arg(format!("--port={}", self.port));
            }
            Backend::Etcd => {
                let etcd = self.etcd.as_ref().expect("etcd started");
                cmd.arg("apiserver")
                    .arg("--bind-address=127.0.0.1")
                    .arg(format!("--port={}", self.port))
                    .arg("--storage-backend=etcd3")
                    .arg(format!("--etcd-servers={}", etcd.endpoint()));
            }
        }
        cmd.env(
            "RUST_LOG",
            std::env::var("RKUBE_E2E_LOG").unwrap_or_else(|_| "info".into()),
        );
        cmd
    }

    /// Starts the server process (again) and waits for readiness.
    #[track_caller]
    fn launch(&mut self) {
        let mut last_err = String::new();
        // A port picked free can be taken before the server binds it: retry.
        for _ in 0..3 {
            if self.port == 0 {
                self.port = free_port();
            }
            self.starts += 1;
            let log = fs::File::create(self.log_path(self.starts)).expect("create server log");
            let mut cmd = self.command();
            cmd.stdin(Stdio::null())
                .stdout(log.try_clone().expect("clone log handle"))
                .stderr(log);
            let child = cmd
                .spawn()
                .unwrap_or_else(|e| panic!("cannot start {:?}: {e}", rkube_bin()));
            let mut guard = ChildGuard::new(child, format!("rkube ({:?})", self.backend));
            let started = match self.backend {
                // `rkube up` picks another port when ours is taken: learn the
                // real one from the kubeconfig it printed.
                Backend::Embedded => self.wait_printed_kubeconfig(&mut guard),
                Backend::Etcd => {
                    self.write_own_kubeconfig();
                    Ok(())
                }
            };
            match started.and_then(|()| wait_ready(self.port, &mut guard)) {
                Ok(()) => {
                    self.server = Some(guard);
                    return;
                }
                Err(e) => {
                    drop(guard);
                    last_err = format!("{e}\n--- server log ---\n{}", self.server_log());
                    if !self.server_log().contains("Address already in use") {
                        break;
                    }
                    self.port = 0;
                }
            }
        }
        panic!("rkube server did not become ready: {last_err}");
    }

    /// Waits for `rkube up`'s `export KUBECONFIG=<path>` line, copies that
    /// kubeconfig (the file a user would use) and takes the port from its
    /// `server:` URL.
    fn wait_printed_kubeconfig(&mut self, guard: &mut ChildGuard) -> Result<(), String> {
        let start = Instant::now();
        while start.elapsed() < READY_LIMIT {
            if let Some(st) = guard.try_wait() {
                return Err(format!("`rkube up` exited early with {st}"));
            }
            let log = self.server_log();
            let printed = log
                .lines()
                .find_map(|l| l.trim().strip_prefix("export KUBECONFIG="))
                .map(|p| p.trim_matches(|c| c == '"' || c == '\'').to_owned());
            if let Some(path) = printed {
                let cfg = fs::read_to_string(&path)
                    .map_err(|e| format!("printed kubeconfig {path}: {e}"))?;
                let server = cfg
                    .lines()
                    .find_map(|l| l.trim().strip_prefix("server:"))
                    .map(|s| s.trim().trim_matches(|c| c == '"' || c == '\'').to_owned())
                    .ok_or_else(|| format!("no `server:` in printed kubeconfig {path}:\n{cfg}"))?;
                let port = server
                    .strip_prefix("http://127.0.0.1:")
                    .and_then(|p| p.trim_end_matches('/').parse::<u16>().ok())
                    .ok_or_else(|| {
                        format!("kubeconfig server {server:?} is not http://127.0.0.1:<port>")
                    })?;
                self.port = port;
                fs::write(&self.kubeconfig, cfg).map_err(|e| format!("copy kubeconfig: {e}"))?;
                return Ok(());
            }
            thread::sleep(Duration::from_millis(20));
        }
        Err(format!(
            "no `export KUBECONFIG=` line after {READY_LIMIT:?}"
        ))
    }

    /// A kubeconfig for `rkube apiserver` (plain HTTP on loopback).
    fn write_own_kubeconfig(&self) {
        let cfg = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: rkube\n  cluster:\n    server: http://127.0.0.1:{port}\ncontexts:\n- name: rkube\n  context:\n    cluster: rkube\n    user: rkube\ncurrent-context: rkube\nusers:\n- name: rkube\n  user: {{}}\n",
            port = self.port
        );
        fs::write(&self.kubeconfig, cfg).expect("write kubeconfig");
    }

    /// Stops the server with `how`, asserting it exits (within 15 s for
    /// SIGTERM), and returns its exit status.
    #[track_caller]
    pub fn stop(&mut self, how: Stop) -> ExitStatus {
        let mut guard = self.server.take().expect("server running");
        match how {
            Stop::Term => guard.signal("TERM"),
            Stop::Kill => guard.signal("KILL"),
        }
        match guard.wait_timeout(Duration::from_secs(15)) {
            Some(st) => st,
            None => panic!(
                "rkube did not exit within 15s after {how:?}; log:\n{}",
                self.server_log()
            ),
        }
    }

    /// Starts the server again on the same data directory / etcd (a new port
    /// only if the old one is taken) and rewrites the kubeconfig.
    #[track_caller]
    pub fn restart(&mut self) {
        assert!(
            self.server.is_none(),
            "stop the server before restarting it"
        );
        self.launch();
    }

    /// Raw `GET path` over HTTP/1.1; returns (status code, body).
    pub fn http_get(&self, path: &str) -> (u16, String) {
        http_get(self.port, path).unwrap_or_else(|e| panic!("GET {path}: {e}"))
    }
}

/// Polls `GET /readyz` until 200, failing early if the process exits.
fn wait_ready(port: u16, guard: &mut ChildGuard) -> Result<(), String> {
    let start = Instant::now();
    let mut last = String::from("no answer");
    while start.elapsed() < READY_LIMIT {
        if let Some(st) = guard.try_wait() {
            return Err(format!("server exited early with {st}"));
        }
        match http_get(port, "/readyz") {
            Ok((200, _)) => return Ok(()),
            Ok((code, body)) => last = format!("/readyz answered {code}: {body}"),
            Err(e) => last = e,
        }
        thread::sleep(Duration::from_millis(50));
    }
    Err(format!("not ready after {READY_LIMIT:?}: {last}"))
}

/// Minimal HTTP/1.1 GET on 127.0.0.1:`port` (Connection: close).
pub fn http_get(port: u16, path: &str) -> Result<(u16, String), String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).map_err(|e| format!("connect: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(|e| e.to_string())?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAccept: */*\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| format!("write: {e}"))?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).map_err(|e| format!("read: {e}"))?;
    let text = String::from_utf8_lossy(&buf).into_owned();
    let code = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse::<u16>().ok())
        .ok_or_else(|| format!("not an HTTP answer: {text:.200}"))?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Ok((code, body))
}
