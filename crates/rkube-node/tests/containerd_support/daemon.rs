//! A private containerd for one test: its own `config.toml` (root, state, runc root, opt dir
//! and sockets inside the test's directory; CRI plugin with `restrict_oom_score_adj`, the local
//! sandbox image, no CNI configuration), started as a child and stopped by PID.
//!
//! Snapshotter: `overlayfs` when containerd's own probe loads it (`ctr plugins ls` says `ok`),
//! else containerd is restarted with `native` (`RKUBE_CONTAINERD_SNAPSHOTTER=native` forces it).
//!
//! Clean-up ([`Drop`]): every runc container under the private runc root is force-deleted,
//! containerd gets SIGTERM (SIGKILL after 5 s), the shims serving this containerd's socket are
//! killed by PID, and mounts left under the directory are detached.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The binaries the test needs, and the Debian packages that ship them.
pub const REQUIRED: &[(&str, &str)] =
    &[("containerd", "containerd"), ("ctr", "containerd"), ("runc", "runc"), ("busybox", "busybox-static")];

/// `name` on `$PATH`.
pub fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(name)).find(|p| p.is_file())
}

/// A running private containerd.
pub struct Containerd {
    /// Its directory (config, root, state, sockets, log).
    pub dir: PathBuf,
    /// The gRPC socket.
    pub socket: PathBuf,
    /// The snapshotter in use (`overlayfs` or `native`).
    pub snapshotter: &'static str,
    child: Option<Child>,
}

fn config_toml(dir: &Path, snapshotter: &str, sandbox_image: &str) -> String {
    let d = dir.display();
    format!(
        r#"version = 2
root = "{d}/root"
state = "{d}/state"

[grpc]
  address = "{d}/containerd.sock"

[ttrpc]
  address = "{d}/containerd.sock.ttrpc"

[debug]
  address = ""

[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = "{d}/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{sandbox_image}"
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"

[plugins."io.containerd.grpc.v1.cri".containerd]
  snapshotter = "{snapshotter}"
  default_runtime_name = "runc"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
  Root = "{d}/runc"

[plugins."io.containerd.grpc.v1.cri".cni]
  bin_dir = "{d}/cni/bin"
  conf_dir = "{d}/cni/conf"
"#
    )
}

impl Containerd {
    /// Starts containerd in `dir` (created) with `sandbox_image` as the pause image; returns
    /// once its socket answers `ctr version`.
    pub async fn start(dir: &Path, sandbox_image: &str) -> anyhow::Result<Self> {
        std::fs::create_dir_all(dir)?;
        if std::env::var("RKUBE_CONTAINERD_SNAPSHOTTER").as_deref() == Ok("native") {
            return Self::spawn(dir, "native", sandbox_image).await;
        }
        let mut daemon = Self::spawn(dir, "overlayfs", sandbox_image).await?;
        let plugins = daemon.ctr(&["plugins", "ls"]).await?;
        let overlay_ok = plugins
            .lines()
            .any(|l| l.contains("io.containerd.snapshotter.v1") && l.contains("overlayfs") && l.trim_end().ends_with("ok"));
        if !overlay_ok {
            eprintln!("containerd: overlayfs snapshotter unavailable here; using native");
            daemon.stop();
            daemon = Self::spawn(dir, "native", sandbox_image).await?;
        }
        Ok(daemon)
    }

    async fn spawn(dir: &Path, snapshotter: &'static str, sandbox_image: &str) -> anyhow::Result<Self> {
        let config = dir.join("config.toml");
        std::fs::write(&config, config_toml(dir, snapshotter, sandbox_image))?;
        let socket = dir.join("containerd.sock");
        let _ = std::fs::remove_file(&socket);
        let log = std::fs::OpenOptions::new().create(true).append(true).open(dir.join("containerd.log"))?;
        let child = Command::new("containerd")
            .arg("--config")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()?;
        let mut daemon = Self { dir: dir.to_path_buf(), socket, snapshotter, child: Some(child) };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(c) = daemon.child.as_mut() {
                if let Some(status) = c.try_wait()? {
                    anyhow::bail!("containerd exited with {status}; log:\n{}", daemon.log_tail(30));
                }
            }
            if daemon.socket.exists() && daemon.ctr(&["version"]).await.is_ok() {
                return Ok(daemon);
            }
            if Instant::now() > deadline {
                anyhow::bail!("containerd did not answer within 20 s; log:\n{}", daemon.log_tail(30));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The CRI endpoint (`unix://…`).
    pub fn endpoint(&self) -> String {
        format!("unix://{}", self.socket.display())
    }

    /// Runs `ctr -a <socket> -n k8s.io <args>`; its stdout.
    pub async fn ctr(&self, args: &[&str]) -> anyhow::Result<String> {
        let out = tokio::process::Command::new("ctr")
            .arg("-a")
            .arg(&self.socket)
            .args(["-n", "k8s.io"])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .await?;
        anyhow::ensure!(
            out.status.success(),
            "ctr {args:?}: {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Imports an OCI layout tarball into the CRI namespace, unpacked for the snapshotter.
    pub async fn import(&self, tarball: &Path) -> anyhow::Result<()> {
        let path = tarball.to_str().ok_or_else(|| anyhow::anyhow!("non-UTF-8 path"))?;
        self.ctr(&["images", "import", "--all-platforms", "--snapshotter", self.snapshotter, path]).await?;
        Ok(())
    }

    /// The last `n` lines of containerd's log.
    pub fn log_tail(&self, n: usize) -> String {
        let log = std::fs::read_to_string(self.dir.join("containerd.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// SIGTERM, then SIGKILL after 5 s; reaps the child.
    fn stop(&mut self) {
        let Some(mut child) = self.child.take() else { return };
        let Ok(pid) = libc::pid_t::try_from(child.id()) else { return };
        // SAFETY: kill(2) on our own child's PID.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if matches!(child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = child.wait();
    }

    /// Force-deletes every runc container under the private runc root.
    fn delete_runc_containers(&self) {
        let root = self.dir.join("runc").join("k8s.io");
        if !root.exists() {
            return;
        }
        let Ok(out) = Command::new("runc").arg("--root").arg(&root).args(["list", "-q"]).output() else { return };
        for id in String::from_utf8_lossy(&out.stdout).split_whitespace() {
            let _ = Command::new("runc").arg("--root").arg(&root).args(["delete", "--force", id]).output();
        }
    }

    /// The sockets of this containerd's shims (outside the directory: containerd 1.6 puts them
    /// under `/run/containerd/s/`; a killed shim leaves its socket behind).
    fn shim_sockets(&self) -> Vec<PathBuf> {
        let tasks = self.dir.join("state/io.containerd.runtime.v2.task/k8s.io");
        let Ok(bundles) = std::fs::read_dir(tasks) else { return vec![] };
        bundles
            .flatten()
            .filter_map(|b| std::fs::read_to_string(b.path().join("address")).ok())
            .filter_map(|a| a.trim().strip_prefix("unix://").map(PathBuf::from))
            .collect()
    }

    /// Kills the shims whose command line names this containerd's socket (by PID).
    fn kill_shims(&self) {
        let needle = self.socket.display().to_string();
        let Ok(procs) = std::fs::read_dir("/proc") else { return };
        for p in procs.flatten() {
            let Some(pid) = p.file_name().to_str().and_then(|s| s.parse::<libc::pid_t>().ok()) else { continue };
            let Ok(cmdline) = std::fs::read(p.path().join("cmdline")) else { continue };
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            if cmdline.contains("containerd-shim") && cmdline.contains(&needle) {
                // SAFETY: kill(2) on a shim our containerd started for this test.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
    }

    /// Detaches every mount under the directory, deepest first.
    fn unmount_all(&self) {
        let prefix = self.dir.display().to_string();
        let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let mut points: Vec<String> = info
            .lines()
            .filter_map(|l| l.split(' ').nth(4))
            .map(unescape_mount_path)
            .filter(|p| p.starts_with(&prefix))
            .collect();
        points.sort_by_key(|p| std::cmp::Reverse(p.len()));
        for p in points {
            let Ok(c) = std::ffi::CString::new(p) else { continue };
            // SAFETY: umount2(2) with a valid NUL-terminated path.
            unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
        }
    }

    /// Everything [`Drop`] does, callable early.
    pub fn shutdown(&mut self) {
        if self.child.is_none() {
            return;
        }
        let shim_sockets = self.shim_sockets();
        self.delete_runc_containers();
        self.stop();
        self.kill_shims();
        for socket in shim_sockets {
            let _ = std::fs::remove_file(socket);
        }
        self.unmount_all();
    }
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo`.
fn unescape_mount_path(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c)) {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

impl Drop for Containerd {
    fn drop(&mut self) {
        if std::thread::panicking() && self.child.is_some() {
            eprintln!("--- containerd log (last 40 lines) ---\n{}", self.log_tail(40));
        }
        self.shutdown();
    }
}
