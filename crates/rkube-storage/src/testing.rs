//! Helpers for tests in any crate: a real `etcd` server on free loopback
//! ports, and [`Tmpfs`], a small tmpfs mounted for disk-full tests.
//!
//! ```no_run
//! # async fn t() -> Result<(), Box<dyn std::error::Error>> {
//! let etcd = rkube_storage::testing::EtcdServer::start()?;
//! let storage = rkube_storage::etcd::EtcdStorage::connect(&[etcd.endpoint()]).await?;
//! // ... the server is killed (by PID) and its data dir removed when `etcd` drops.
//! # Ok(()) }
//! ```
//!
//! The `etcd` binary must be on `PATH` (Debian: `apt-get install -y etcd-server`);
//! when it is not, [`EtcdServer::start`] returns an error so the test fails
//! rather than silently skipping.

use std::ffi::OsStr;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How long [`EtcdServer::start`] waits for `/health` to answer true.
pub const START_TIMEOUT: Duration = Duration::from_secs(20);

/// Errors starting a test etcd.
#[derive(Debug, thiserror::Error)]
pub enum EtcdServerError {
    /// The `etcd` binary could not be run (not on `PATH`?).
    #[error("cannot run `etcd` (is etcd-server installed and on PATH?): {0}")]
    Spawn(std::io::Error),
    /// Preparing the data dir or ports failed.
    #[error("preparing test etcd: {0}")]
    Io(#[from] std::io::Error),
    /// etcd exited or did not become healthy in time; carries its log tail.
    #[error("test etcd did not become healthy: {reason}; log tail:\n{log}")]
    Unhealthy {
        /// Why we gave up.
        reason: String,
        /// The last lines etcd printed.
        log: String,
    },
}

/// A running single-member etcd for tests, killed by PID on drop.
///
/// Started with `--experimental-watch-progress-notify-interval=1s`, data in a
/// fresh directory under the system temp dir (removed on drop).
#[derive(Debug)]
pub struct EtcdServer {
    child: Child,
    data_dir: PathBuf,
    client_port: u16,
}

/// A free loopback port (bound then released; etcd binds it right after).
fn free_port() -> std::io::Result<u16> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    Ok(listener.local_addr()?.port())
}

/// A fresh unique directory under the temp dir.
fn fresh_dir() -> std::io::Result<PathBuf> {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    let dir = std::env::temp_dir().join(format!(
        "rkube-test-etcd-{}-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed),
        nanos
    ));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// True when `GET /health` on the client port says healthy.
fn healthy(port: u16) -> bool {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let Ok(mut conn) = TcpStream::connect_timeout(&addr, Duration::from_millis(200)) else {
        return false;
    };
    let _ = conn.set_read_timeout(Some(Duration::from_secs(1)));
    if conn.write_all(b"GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").is_err() {
        return false;
    }
    let mut body = String::new();
    let _ = conn.read_to_string(&mut body);
    body.contains("\"health\":\"true\"")
}

fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

impl EtcdServer {
    /// Starts `etcd` on free loopback ports and waits until it is healthy
    /// (typically ~0.2 s; gives up after [`START_TIMEOUT`]).
    ///
    /// Errors: [`EtcdServerError::Spawn`] when `etcd` is not on `PATH`,
    /// [`EtcdServerError::Unhealthy`] when it exits or never gets healthy.
    pub fn start() -> Result<EtcdServer, EtcdServerError> {
        Self::start_binary("etcd")
    }

    /// Like [`EtcdServer::start`] with an explicit `etcd` binary (a path or a
    /// name looked up on `PATH`).
    pub fn start_binary(etcd: impl AsRef<OsStr>) -> Result<EtcdServer, EtcdServerError> {
        let etcd = etcd.as_ref();
        // A port picked free can be taken before etcd binds it: retry a few times.
        let mut last = None;
        for _ in 0..3 {
            match Self::start_once(etcd) {
                Ok(server) => return Ok(server),
                Err(e @ EtcdServerError::Spawn(_)) => return Err(e),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| EtcdServerError::Unhealthy { reason: "no attempt made".into(), log: String::new() }))
    }

    fn start_once(etcd: &OsStr) -> Result<EtcdServer, EtcdServerError> {
        let data_dir = fresh_dir()?;
        let client_port = free_port()?;
        let mut peer_port = free_port()?;
        while peer_port == client_port {
            peer_port = free_port()?;
        }
        let client = format!("http://127.0.0.1:{client_port}");
        let peer = format!("http://127.0.0.1:{peer_port}");
        let log_path = data_dir.join("etcd.log");
        let log = std::fs::File::create(&log_path)?;
        let log_err = log.try_clone()?;
        let spawned = Command::new(etcd)
            .arg("--name=t")
            .arg(format!("--data-dir={}", data_dir.join("data").display()))
            .arg(format!("--listen-client-urls={client}"))
            .arg(format!("--advertise-client-urls={client}"))
            .arg(format!("--listen-peer-urls={peer}"))
            .arg(format!("--initial-advertise-peer-urls={peer}"))
            .arg(format!("--initial-cluster=t={peer}"))
            .arg("--experimental-watch-progress-notify-interval=1s")
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            .spawn();
        let child = match spawned {
            Ok(child) => child,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&data_dir);
                return Err(EtcdServerError::Spawn(e));
            }
        };
        // From here on, Drop kills the child and removes the dir.
        let mut server = EtcdServer { child, data_dir, client_port };
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if healthy(client_port) {
                return Ok(server);
            }
            if let Ok(Some(status)) = server.child.try_wait() {
                return Err(EtcdServerError::Unhealthy {
                    reason: format!("etcd exited: {status}"),
                    log: log_tail(&log_path),
                });
            }
            if Instant::now() > deadline {
                return Err(EtcdServerError::Unhealthy {
                    reason: format!("not healthy after {START_TIMEOUT:?}"),
                    log: log_tail(&log_path),
                });
            }
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    /// The client URL, e.g. `http://127.0.0.1:40123` (for `--etcd-servers`).
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.client_port)
    }

    /// The etcd process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The temp directory holding etcd's data and its log (`etcd.log`).
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        // `Child::kill` sends SIGKILL to this child's PID only.
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.data_dir);
    }
}

/// A tmpfs of a fixed size mounted on a fresh temp dir (needs root; see
/// [`Tmpfs::mount`]), unmounted on drop. Disk-full tests fill it with
/// [`Tmpfs::fill`] and free it with [`Tmpfs::free`].
#[derive(Debug)]
pub struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    /// Mounts a tmpfs of `size_bytes` with `mount -t tmpfs`. `Err` carries
    /// why it could not (not root, no `mount`): the caller prints it and skips.
    pub fn mount(size_bytes: u64) -> Result<Tmpfs, String> {
        let dir = tempfile::tempdir().map_err(|e| format!("temp dir: {e}"))?;
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size_bytes}"), "tmpfs"])
            .arg(dir.path())
            .output()
            .map_err(|e| format!("cannot run mount: {e}"))?;
        if !out.status.success() {
            return Err(format!("mount -t tmpfs failed: {}", String::from_utf8_lossy(&out.stderr).trim()));
        }
        Ok(Tmpfs { dir })
    }

    /// The mount point.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Writes `path()/filler` until the file system is full; returns its size.
    pub fn fill(&self) -> std::io::Result<u64> {
        let mut f = std::fs::OpenOptions::new().create(true).append(true).open(self.path().join("filler"))?;
        let chunk = vec![0xa5u8; 4096];
        let mut written = 0u64;
        loop {
            match f.write(&chunk) {
                Ok(0) => break,
                Ok(n) => written += n as u64,
                Err(e) if e.kind() == std::io::ErrorKind::StorageFull => break,
                Err(e) => return Err(e),
            }
        }
        Ok(written)
    }

    /// Removes the filler file.
    pub fn free(&self) -> std::io::Result<()> {
        std::fs::remove_file(self.path().join("filler"))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        // Lazily when something still holds a file there (a store being dropped).
        let plain = Command::new("umount").arg(self.dir.path()).output();
        if !plain.is_ok_and(|o| o.status.success()) {
            let _ = Command::new("umount").arg("-l").arg(self.dir.path()).output();
        }
    }
}
