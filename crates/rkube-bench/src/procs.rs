//! The processes a scenario runs: a real etcd (via
//! `rkube_storage::testing::EtcdServer`) and `rkube apiserver` children (the
//! running binary itself, `std::env::current_exe()`), each on free loopback
//! ports with a temporary data directory, stopped by PID when done or
//! dropped. Also `/proc/<pid>` sampling (RSS, CPU seconds).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rkube_storage::testing::EtcdServer;
use rkube_storage::Storage;

/// How long a started apiserver may take to answer `/readyz` 200.
pub const READY_TIMEOUT: Duration = Duration::from_secs(300);

/// How long a stopped apiserver may take to exit after SIGTERM before SIGKILL.
pub const STOP_GRACE: Duration = Duration::from_secs(20);

/// Errors starting or talking to the child processes.
#[derive(Debug, thiserror::Error)]
pub enum ProcError {
    /// etcd could not be started.
    #[error(transparent)]
    Etcd(#[from] rkube_storage::testing::EtcdServerError),
    /// Opening the storage directly failed.
    #[error("opening {backend} storage directly: {source}")]
    Storage {
        /// Which backend.
        backend: &'static str,
        /// Why.
        source: rkube_storage::StorageError,
    },
    /// File system or spawn failure.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The apiserver exited or never became ready.
    #[error("rkube apiserver {reason}; last log lines:\n{log}")]
    NotReady {
        /// What happened.
        reason: String,
        /// The tail of its log.
        log: String,
    },
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> ProcError {
    let what = what.into();
    move |source| ProcError::Io { what, source }
}

/// Storage backend of the API server under test.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, clap::ValueEnum, serde::Serialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// The embedded redb store (`--storage-backend=embedded`).
    Embedded,
    /// A real etcd on loopback (`--storage-backend=etcd3`).
    Etcd,
}

impl Backend {
    /// `embedded` or `etcd`.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Embedded => "embedded",
            Backend::Etcd => "etcd",
        }
    }
}

/// Optional server features, read from `rkube apiserver --help` once.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct ServerCaps {
    /// `--watch-cache-sizes` exists (a resource's cache can be disabled with `resource#0`).
    pub watch_cache_sizes: bool,
    /// A `--watch-cache` switch exists (the whole cache can be turned off).
    pub watch_cache_switch: bool,
}

impl ServerCaps {
    /// Reads the flags `exe apiserver --help` lists.
    pub fn detect(exe: &Path) -> ServerCaps {
        let help = Command::new(exe)
            .args(["apiserver", "--help"])
            .stdin(Stdio::null())
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        ServerCaps {
            watch_cache_sizes: help.contains("--watch-cache-sizes"),
            watch_cache_switch: help.lines().any(|l| {
                let l = l.trim_start();
                l.starts_with("--watch-cache ")
                    || l.starts_with("--watch-cache=")
                    || l.starts_with("--watch-cache <")
            }),
        }
    }

    /// True when the server has a watch cache at all (either flag exists).
    pub fn has_watch_cache(&self) -> bool {
        self.watch_cache_sizes || self.watch_cache_switch
    }

    /// Flags that make the server serve `resources` from storage, or `None`
    /// when this build cannot (then every read is storage-served anyway).
    pub fn cache_disabled_flags(&self, resources: &[&str]) -> Option<Vec<String>> {
        if self.watch_cache_sizes {
            let sizes: Vec<String> = resources.iter().map(|r| format!("{r}#0")).collect();
            Some(vec![format!("--watch-cache-sizes={}", sizes.join(","))])
        } else if self.watch_cache_switch {
            Some(vec!["--watch-cache=false".into()])
        } else {
            None
        }
    }
}

/// A backend and its state for one scenario: the etcd process (etcd backend)
/// or the embedded store's directory, shared by the API servers it starts.
pub struct Env {
    /// Which backend.
    pub backend: Backend,
    /// The rkube binary.
    pub exe: PathBuf,
    /// Server features.
    pub caps: ServerCaps,
    etcd: Option<EtcdServer>,
    dir: tempfile::TempDir,
    seq: std::sync::atomic::AtomicU32,
}

impl Env {
    /// Prepares `backend`: starts etcd on loopback for [`Backend::Etcd`],
    /// makes a fresh data directory either way.
    pub fn new(backend: Backend, exe: PathBuf, caps: ServerCaps) -> Result<Env, ProcError> {
        let dir = tempfile::Builder::new()
            .prefix("rkube-bench-")
            .tempdir()
            .map_err(io("creating a temp dir"))?;
        let etcd = match backend {
            Backend::Etcd => Some(EtcdServer::start()?),
            Backend::Embedded => None,
        };
        Ok(Env {
            backend,
            exe,
            caps,
            etcd,
            dir,
            seq: Default::default(),
        })
    }

    /// The etcd endpoint (etcd backend only).
    pub fn etcd_endpoint(&self) -> Option<String> {
        self.etcd.as_ref().map(EtcdServer::endpoint)
    }

    /// The etcd PID (etcd backend only).
    pub fn etcd_pid(&self) -> Option<u32> {
        self.etcd.as_ref().map(EtcdServer::pid)
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// Opens the storage directly (for bulk loading). For the embedded
    /// backend no API server may be running on it (redb is single-process):
    /// drop the returned handle before starting one.
    pub async fn open_storage(&self) -> Result<Arc<dyn Storage>, ProcError> {
        match (&self.etcd, self.backend) {
            (Some(etcd), _) => {
                let s = rkube_storage::etcd::EtcdStorage::connect(&[etcd.endpoint()])
                    .await
                    .map_err(|source| ProcError::Storage {
                        backend: "etcd",
                        source,
                    })?;
                Ok(Arc::new(s))
            }
            _ => {
                let dir = self.data_dir();
                std::fs::create_dir_all(&dir).map_err(io(format!("creating {}", dir.display())))?;
                let s = rkube_storage::embedded::EmbeddedStorage::open(&dir).map_err(|source| {
                    ProcError::Storage {
                        backend: "embedded",
                        source,
                    }
                })?;
                Ok(Arc::new(s))
            }
        }
    }

    /// Starts `rkube apiserver` on a free loopback port over this backend,
    /// with `extra` flags, and waits for `/readyz` 200.
    pub async fn start_server(&self, extra: &[String]) -> Result<ApiServer, ProcError> {
        self.start_server_with(extra, None).await
    }

    /// Like [`Env::start_server`]; with `secure` the server is reached over
    /// HTTPS (`extra` must hold its TLS flags) and `/readyz` is polled with
    /// `secure`'s CA and bearer token.
    pub async fn start_server_with(
        &self,
        extra: &[String],
        secure: Option<&Secure>,
    ) -> Result<ApiServer, ProcError> {
        let mut last = None;
        for _ in 0..3 {
            match self.spawn_server(extra, secure).await {
                Ok(s) => return Ok(s),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| ProcError::NotReady {
            reason: "was not started".into(),
            log: String::new(),
        }))
    }

    async fn spawn_server(
        &self,
        extra: &[String],
        secure: Option<&Secure>,
    ) -> Result<ApiServer, ProcError> {
        let port = free_port().map_err(io("picking a free port"))?;
        let n = self.seq.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let log_path = self.dir.path().join(format!("apiserver-{n}.log"));
        let log = std::fs::File::create(&log_path)
            .map_err(io(format!("creating {}", log_path.display())))?;
        let log_err = log.try_clone().map_err(io("cloning the log file"))?;
        let mut cmd = Command::new(&self.exe);
        cmd.arg("apiserver")
            .arg("--bind-address=127.0.0.1")
            .arg(format!("--port={port}"))
            .arg(format!("--data-dir={}", self.data_dir().display()));
        match &self.etcd {
            Some(etcd) => {
                cmd.arg("--storage-backend=etcd3")
                    .arg(format!("--etcd-servers={}", etcd.endpoint()));
            }
            None => {
                cmd.arg("--storage-backend=embedded");
            }
        }
        cmd.args(extra)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err);
        let spawned_at = Instant::now();
        let child = cmd
            .spawn()
            .map_err(io(format!("running {}", self.exe.display())))?;
        let scheme = if secure.is_some() { "https" } else { "http" };
        let mut server = ApiServer {
            child: Some(child),
            base: format!("{scheme}://127.0.0.1:{port}"),
            log_path,
            spawned_at,
            ready_after: Duration::ZERO,
            secure: secure.cloned(),
        };
        server.ready_after = server.wait_ready(READY_TIMEOUT).await?;
        Ok(server)
    }
}

/// How to reach a server that serves HTTPS and authenticates every request.
#[derive(Debug, Clone)]
pub struct Secure {
    /// The CA that signed the serving certificate (PEM).
    pub ca_pem: String,
    /// A bearer token of a user allowed `GET /readyz`.
    pub token: String,
}

/// A free loopback port (bound, then released for the child to bind).
pub fn free_port() -> std::io::Result<u16> {
    let l = std::net::TcpListener::bind(("127.0.0.1", 0))?;
    Ok(l.local_addr()?.port())
}

/// A running `rkube apiserver` child; SIGTERM then SIGKILL by PID on [`ApiServer::stop`], SIGKILL on drop.
pub struct ApiServer {
    child: Option<Child>,
    base: String,
    log_path: PathBuf,
    /// When the process was spawned.
    pub spawned_at: Instant,
    /// Spawn → first `/readyz` 200.
    pub ready_after: Duration,
    secure: Option<Secure>,
}

impl ApiServer {
    /// `http://127.0.0.1:<port>`.
    pub fn base_url(&self) -> &str {
        &self.base
    }

    /// The process id (0 once stopped).
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(Child::id).unwrap_or(0)
    }

    /// The last `lines` lines of the server's log.
    pub fn log_tail(&self, lines: usize) -> String {
        tail_of(&self.log_path, lines)
    }

    /// Polls `/readyz` every 10 ms until 200; returns the time since spawn.
    async fn wait_ready(&mut self, timeout: Duration) -> Result<Duration, ProcError> {
        let builder = match &self.secure {
            Some(s) => crate::client::https_builder(&s.ca_pem),
            None => Ok(reqwest::Client::builder()),
        };
        let http = builder
            .and_then(|b| {
                b.timeout(Duration::from_secs(5))
                    .build()
                    .map_err(|e| e.to_string())
            })
            .map_err(|e| ProcError::NotReady {
                reason: format!("cannot build an HTTP client: {e}"),
                log: String::new(),
            })?;
        let url = format!("{}/readyz", self.base);
        let token = self.secure.as_ref().map(|s| s.token.clone());
        loop {
            let mut req = http.get(&url);
            if let Some(t) = &token {
                req = req.bearer_auth(t);
            }
            if let Ok(r) = req.send().await {
                if r.status().is_success() {
                    return Ok(self.spawned_at.elapsed());
                }
            }
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    self.child = None;
                    return Err(ProcError::NotReady {
                        reason: format!("exited: {status}"),
                        log: self.log_tail(20),
                    });
                }
            }
            if self.spawned_at.elapsed() > timeout {
                return Err(ProcError::NotReady {
                    reason: format!("not ready after {timeout:?}"),
                    log: self.log_tail(20),
                });
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Stops the server: SIGTERM to its PID, wait up to [`STOP_GRACE`], then SIGKILL.
    pub async fn stop(mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        if let Ok(pid) = i32::try_from(child.id()) {
            // SAFETY: kill(2) on the PID of our own child, which has not been reaped yet.
            unsafe {
                libc::kill(pid, libc::SIGTERM);
            }
        }
        let deadline = Instant::now() + STOP_GRACE;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        tracing::warn!(
            pid = child.id(),
            "apiserver did not exit after SIGTERM; killing it"
        );
        let _ = child.kill();
        let _ = child.wait();
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // `Child::kill` sends SIGKILL to this child's PID only.
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// One reading of a process's resource use.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct ProcSample {
    /// Resident set size, bytes (`VmRSS`).
    pub rss_bytes: u64,
    /// User + system CPU time consumed so far by all its threads, seconds
    /// (nanosecond resolution from the process's CPU-time clock; clock ticks
    /// from `/proc/<pid>/stat` where that clock cannot be read).
    pub cpu_seconds: f64,
}

/// The CPU time all threads of process `pid` have used so far (including
/// threads that have exited), seconds, read from its CPU-time clock
/// (`clock_getcpuclockid(3)`): nanosecond resolution, where
/// `/proc/<pid>/stat` counts clock ticks (10 ms). `None` when the process
/// is gone or the clock cannot be read.
pub fn process_cpu_seconds(pid: u32) -> Option<f64> {
    let pid = libc::pid_t::try_from(pid).ok()?;
    let mut clock: libc::clockid_t = 0;
    // SAFETY: `clock` is a valid place for the clock id.
    if unsafe { libc::clock_getcpuclockid(pid, &mut clock) } != 0 {
        return None;
    }
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid place for the time.
    if unsafe { libc::clock_gettime(clock, &mut ts) } != 0 {
        return None;
    }
    Some(ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9)
}

/// Reads `/proc/<pid>/status` (VmRSS) and the CPU time used
/// ([`process_cpu_seconds`], else `/proc/<pid>/stat`'s utime + stime).
/// `None` when the process is gone.
pub fn sample_proc(pid: u32) -> Option<ProcSample> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let rss_kb: u64 = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the `(comm)` closing parenthesis; utime and stime are fields 14 and 15.
    let after = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = after.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let ticks = if ticks > 0 { ticks as f64 } else { 100.0 };
    Some(ProcSample {
        rss_bytes: rss_kb * 1024,
        cpu_seconds: process_cpu_seconds(pid).unwrap_or((utime + stime) / ticks),
    })
}

/// Samples a process once a second in the background: peak RSS and the CPU
/// used between [`ProcWatcher::start`] and [`ProcWatcher::finish`].
pub struct ProcWatcher {
    pid: u32,
    first: Option<ProcSample>,
    started: Instant,
    peak: Arc<std::sync::atomic::AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

/// What a [`ProcWatcher`] saw.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct ProcUsage {
    /// Highest RSS seen, bytes.
    pub peak_rss_bytes: u64,
    /// RSS at the end, bytes.
    pub final_rss_bytes: u64,
    /// CPU seconds used over the window.
    pub cpu_seconds: f64,
    /// Length of the window, seconds.
    pub wall_seconds: f64,
    /// Average cores busy: cpu_seconds / wall_seconds.
    pub avg_cores: f64,
}

impl ProcWatcher {
    /// Starts sampling `pid` every second.
    pub fn start(pid: u32) -> ProcWatcher {
        let first = sample_proc(pid);
        let peak = Arc::new(std::sync::atomic::AtomicU64::new(
            first.map(|s| s.rss_bytes).unwrap_or(0),
        ));
        let p = peak.clone();
        let task = tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                match sample_proc(pid) {
                    Some(s) => {
                        p.fetch_max(s.rss_bytes, std::sync::atomic::Ordering::Relaxed);
                    }
                    None => return,
                }
            }
        });
        ProcWatcher {
            pid,
            first,
            started: Instant::now(),
            peak,
            task,
        }
    }

    /// Stops sampling and reports; `None` when the process could not be read.
    pub fn finish(self) -> Option<ProcUsage> {
        self.task.abort();
        let last = sample_proc(self.pid)?;
        let first = self.first?;
        let peak = self
            .peak
            .load(std::sync::atomic::Ordering::Relaxed)
            .max(last.rss_bytes);
        let wall = self.started.elapsed().as_secs_f64();
        let cpu = (last.cpu_seconds - first.cpu_seconds).max(0.0);
        Some(ProcUsage {
            peak_rss_bytes: peak,
            final_rss_bytes: last.rss_bytes,
            cpu_seconds: cpu,
            wall_seconds: wall,
            avg_cores: if wall > 0.0 { cpu / wall } else { 0.0 },
        })
    }
}

/// The last `lines` lines of the file at `path` (empty when it cannot be read).
pub fn tail_of(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sample_proc_reads_this_process() {
        let s = sample_proc(std::process::id()).expect("own /proc entry");
        assert!(s.rss_bytes > 0);
        assert!(s.cpu_seconds >= 0.0);
        assert!(sample_proc(u32::MAX).is_none());
    }

    #[test]
    fn process_cpu_time_counts_other_threads_finer_than_clock_ticks() {
        let pid = std::process::id();
        let before = process_cpu_seconds(pid).expect("own CPU clock");
        // 2 ms of CPU on another thread (its own CPU clock, so a busy machine that preempts
        // it does not shorten it): less than one clock tick.
        std::thread::spawn(|| {
            let thread_cpu = || {
                let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
                // SAFETY: clock_gettime writes into the struct we own.
                unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
                ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
            };
            let start = thread_cpu();
            let mut x = 0u64;
            while thread_cpu() - start < 0.002 {
                x = std::hint::black_box(x.wrapping_add(1));
            }
        })
        .join()
        .expect("spinner");
        let used = process_cpu_seconds(pid).expect("own CPU clock") - before;
        assert!((0.0015..1.0).contains(&used), "{used}");
        assert!(process_cpu_seconds(u32::MAX).is_none());
    }

    #[test]
    fn cache_disabled_flags_follow_the_available_switch() {
        let sizes = ServerCaps {
            watch_cache_sizes: true,
            watch_cache_switch: true,
        };
        assert_eq!(
            sizes.cache_disabled_flags(&["pods", "configmaps"]).unwrap(),
            ["--watch-cache-sizes=pods#0,configmaps#0"]
        );
        let switch = ServerCaps {
            watch_cache_sizes: false,
            watch_cache_switch: true,
        };
        assert_eq!(
            switch.cache_disabled_flags(&["pods"]).unwrap(),
            ["--watch-cache=false"]
        );
        assert!(ServerCaps::default()
            .cache_disabled_flags(&["pods"])
            .is_none());
    }
}
