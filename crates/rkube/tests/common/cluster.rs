//! A running rkube API server for a test: `rkube up` on the embedded store in
//! a temporary data directory, or `rkube apiserver` on a real etcd, on a free
//! loopback port, with a kubeconfig pointing at it.
//!
//! `rkube up` runs secure, as users get it: HTTPS with the CA it generates in
//! `<data-dir>/pki`, no anonymous access, RBAC; [`Cluster::kubeconfig`] is a
//! copy of the kubeconfig it wrote (the admin, group `system:masters`), and
//! [`Cluster::kubectl`] carries it (`--kubeconfig`). [`Cluster::builder`]
//! adds flags (`.arg("--token-auth-file=...")`) or `.insecure()` (plain HTTP).
//! `rkube apiserver` (the etcd backend) serves plain HTTP with AlwaysAllow;
//! beside it runs `rkube controller-manager --kubeconfig=<that kubeconfig>`
//! (as `rkube up` runs the controllers in its own process), so namespace
//! deletion and garbage collection behave alike on both backends.
//!
//! Every process started here is owned by a [`ChildGuard`] and killed by PID
//! when the [`Cluster`] is dropped (also when the test panics).

use std::fs;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use rkube_storage::testing::EtcdServer;

use super::kubeconfig::{self, Credentials, HttpClient, KubeconfigInfo};
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

/// How to start a [`Cluster`]: `Cluster::builder(backend).arg(..).insecure().start()`.
#[derive(Debug, Clone)]
pub struct ClusterBuilder {
    backend: Backend,
    insecure: bool,
    args: Vec<String>,
}

impl ClusterBuilder {
    /// `rkube up --insecure`: plain HTTP, no authentication or authorization.
    pub fn insecure(mut self) -> Self {
        self.insecure = true;
        self
    }

    /// One more flag for the server command (e.g. `--token-auth-file=/tmp/t.csv`).
    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// An audit log at `dir/audit.log` with a policy recording every
    /// request at the `Metadata` level; returns the log's path too.
    pub fn metadata_audit_log(self, dir: &std::path::Path) -> (Self, std::path::PathBuf) {
        let log = dir.join("audit.log");
        let policy = dir.join("policy.yaml");
        std::fs::write(&policy, "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n").expect("write policy");
        let this = self.arg(format!("--audit-log-path={}", log.display())).arg(format!("--audit-policy-file={}", policy.display()));
        (this, log)
    }

    /// Starts the server and waits until `/readyz` answers 200.
    #[track_caller]
    pub fn start(self) -> Cluster {
        let dir = tempfile::Builder::new()
            .prefix("rkube-e2e-")
            .tempdir()
            .expect("tempdir");
        let etcd = match self.backend {
            Backend::Embedded => None,
            Backend::Etcd => {
                Some(EtcdServer::start().unwrap_or_else(|e| panic!("cannot start etcd: {e}")))
            }
        };
        let kubeconfig = dir.path().join("kubeconfig");
        let mut c = Cluster {
            backend: self.backend,
            dir,
            port: 0,
            kubeconfig,
            insecure: self.insecure,
            args: self.args,
            admin: HttpClient::plain(0),
            controller_manager: None,
            server: None,
            starts: 0,
            etcd,
        };
        c.launch();
        c
    }
}

/// A running API server plus everything it needs; dropping it stops all.
pub struct Cluster {
    /// Storage backend in use.
    pub backend: Backend,
    /// Loopback port the server listens on.
    pub port: u16,
    /// Kubeconfig file kubectl uses (a copy of the one `rkube up` wrote: the admin).
    pub kubeconfig: PathBuf,
    insecure: bool,
    args: Vec<String>,
    /// HTTP client with the kubeconfig's credentials.
    admin: HttpClient,
    /// How many times the server was started (names the log files).
    starts: u32,
    // Fields drop in order: the controller manager stops first, then the
    // API server, then its etcd, then the temporary directory is removed.
    controller_manager: Option<ChildGuard>,
    server: Option<ChildGuard>,
    etcd: Option<EtcdServer>,
    /// Temporary directory holding data, logs, kubeconfig, kubectl cache.
    dir: tempfile::TempDir,
}

impl Cluster {
    /// Starts a server on `backend` (`rkube up` secure by default) and waits
    /// until `/readyz` answers 200.
    #[track_caller]
    pub fn start(backend: Backend) -> Cluster {
        Cluster::builder(backend).start()
    }

    /// A builder, to add flags or choose `--insecure`.
    pub fn builder(backend: Backend) -> ClusterBuilder {
        ClusterBuilder {
            backend,
            insecure: false,
            args: Vec::new(),
        }
    }

    /// True when the server speaks HTTPS (`rkube up` without `--insecure`).
    pub fn is_https(&self) -> bool {
        self.backend == Backend::Embedded && !self.insecure
    }

    /// The server URL, `https://127.0.0.1:<port>` (or `http://`).
    pub fn server_url(&self) -> String {
        let scheme = if self.is_https() { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}", self.port)
    }

    /// `<data-dir>/pki` of `rkube up` (CA, serving and admin certificates).
    pub fn pki_dir(&self) -> PathBuf {
        self.data_dir().join("pki")
    }

    /// The admin kubeconfig, parsed.
    #[track_caller]
    pub fn kubeconfig_info(&self) -> KubeconfigInfo {
        kubeconfig::read(&self.kubeconfig).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Writes `<name>.kubeconfig` for this server (trusting its CA) that
    /// authenticates with `credentials`; returns its path.
    #[track_caller]
    pub fn write_kubeconfig_for(&self, name: &str, credentials: &Credentials) -> PathBuf {
        let text = self.kubeconfig_info().render(name, credentials);
        self.write_file(&format!("{name}.kubeconfig"), &text)
    }

    /// The embedded store's data directory.
    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// The temporary directory of this cluster (for manifests etc.).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// A kubectl of `version` ("1.27", "1.33") talking to this server as the
    /// admin (`--kubeconfig` = [`Cluster::kubeconfig`]).
    pub fn kubectl(&self, version: &str) -> Kubectl {
        self.kubectl_with(version, &self.kubeconfig)
    }

    /// A kubectl of `version` using another kubeconfig (e.g. one from
    /// [`Cluster::write_kubeconfig_for`]), with its own discovery cache.
    pub fn kubectl_with(&self, version: &str, kubeconfig: &Path) -> Kubectl {
        let tag = kubeconfig
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        Kubectl::new(
            version,
            kubeconfig,
            &self
                .dir
                .path()
                .join(format!("kubectl-cache-{version}-{tag}")),
            self.dir.path(),
        )
    }

    /// Writes `contents` to a file in the cluster's directory and returns its path.
    pub fn write_file(&self, name: &str, contents: &str) -> PathBuf {
        let p = self.dir.path().join(name);
        fs::write(&p, contents).expect("write test file");
        p
    }

    /// Polls `f` every 300 ms until it returns `Some`; fails naming `what`,
    /// with the server log, after `limit`.
    #[track_caller]
    pub fn wait_until<T>(&self, what: &str, limit: Duration, mut f: impl FnMut() -> Option<T>) -> T {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(v) = f() {
                return v;
            }
            assert!(Instant::now() < deadline, "timed out waiting for {what}\n--- server log ---\n{}", self.server_log());
            thread::sleep(Duration::from_millis(300));
        }
    }

    /// Waits (up to `limit`) until `k` sees a Node with `Ready=True`.
    #[track_caller]
    pub fn wait_for_ready_node(&self, k: &Kubectl, limit: Duration) {
        self.wait_until("a Ready node", limit, || {
            let nodes = k.json(&["get", "nodes"]);
            let ready = nodes["items"].as_array().into_iter().flatten().any(|n| {
                n["status"]["conditions"].as_array().into_iter().flatten().any(|c| c["type"] == "Ready" && c["status"] == "True")
            });
            ready.then_some(())
        });
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
                if self.insecure {
                    cmd.arg("--insecure");
                }
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
        cmd.args(&self.args);
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
            match started.and_then(|()| wait_ready(&self.admin, &mut guard)) {
                Ok(()) => {
                    self.server = Some(guard);
                    if self.backend == Backend::Etcd {
                        self.start_controller_manager();
                    }
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
                let info = KubeconfigInfo::parse(&cfg)?;
                if info.is_https() == self.insecure {
                    return Err(format!(
                        "kubeconfig server {:?} with insecure={}",
                        info.server, self.insecure
                    ));
                }
                self.port = info.port()?;
                self.admin = info.client(&info.credentials)?;
                fs::write(&self.kubeconfig, cfg).map_err(|e| format!("copy kubeconfig: {e}"))?;
                return Ok(());
            }
            thread::sleep(Duration::from_millis(20));
        }
        Err(format!(
            "no `export KUBECONFIG=` line after {READY_LIMIT:?}"
        ))
    }

    /// `rkube controller-manager` with the kubeconfig of `rkube apiserver`
    /// (log: `controller-manager-<n>.log`).
    fn start_controller_manager(&mut self) {
        let log = fs::File::create(self.dir.path().join(format!("controller-manager-{}.log", self.starts)))
            .expect("create controller manager log");
        let mut cmd = Command::new(rkube_bin());
        // One replica per test: no Lease to wait for after a restart, and no
        // health server, whose default port (10257) parallel tests share.
        cmd.arg("controller-manager")
            .arg(format!("--kubeconfig={}", self.kubeconfig.display()))
            .args(["--leader-elect=false", "--secure-port=0"])
            .env("RUST_LOG", std::env::var("RKUBE_E2E_LOG").unwrap_or_else(|_| "info".into()))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("clone log handle"))
            .stderr(log);
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {:?} controller-manager: {e}", rkube_bin()));
        self.controller_manager = Some(ChildGuard::new(child, "rkube controller-manager"));
    }

    /// A kubeconfig for `rkube apiserver` (plain HTTP on loopback).
    fn write_own_kubeconfig(&mut self) {
        self.admin = HttpClient::plain(self.port);
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
        // The controller manager of the etcd backend goes first (dropping
        // its guard kills it by PID); `restart` starts a new one.
        self.controller_manager.take();
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

    /// The PID of the running server process, if it runs.
    pub fn server_pid(&self) -> Option<u32> {
        self.server.as_ref().map(|g| g.pid())
    }

    /// Raw `GET path` over HTTP/1.1 (TLS when the server is HTTPS) with the
    /// admin kubeconfig's credentials; returns (status code, body).
    pub fn http_get(&self, path: &str) -> (u16, String) {
        self.admin
            .get(path)
            .unwrap_or_else(|e| panic!("GET {path}: {e}"))
    }

    /// Raw `GET path` as `credentials` (TLS trusting the server's CA when HTTPS).
    pub fn http_get_as(
        &self,
        path: &str,
        credentials: &Credentials,
    ) -> Result<(u16, String), String> {
        self.kubeconfig_info().client(credentials)?.get(path)
    }
}

/// Polls `GET /readyz` until 200, failing early if the process exits.
fn wait_ready(client: &HttpClient, guard: &mut ChildGuard) -> Result<(), String> {
    let start = Instant::now();
    let mut last = String::from("no answer");
    while start.elapsed() < READY_LIMIT {
        if let Some(st) = guard.try_wait() {
            return Err(format!("server exited early with {st}"));
        }
        match client.get("/readyz") {
            Ok((200, _)) => return Ok(()),
            Ok((code, body)) => last = format!("/readyz answered {code}: {body}"),
            Err(e) => last = e,
        }
        thread::sleep(Duration::from_millis(50));
    }
    Err(format!("not ready after {READY_LIMIT:?}: {last}"))
}

/// Minimal plain HTTP/1.1 GET on 127.0.0.1:`port` (Connection: close).
pub fn http_get(port: u16, path: &str) -> Result<(u16, String), String> {
    HttpClient::plain(port).get(path)
}
