//! Host processes for containers: spawning into a fresh process group, signalling the group,
//! and turning a wait status into a CRI exit code.
//!
//! Each container's main process leads its own process group (its pgid is its pid), so
//! `StopContainer` and `StopPodSandbox` signal everything the container forked, and when the main
//! process exits the rest of its group is killed, as happens to a container whose PID-namespace
//! init exits. Every child also gets `PR_SET_PDEATHSIG=SIGKILL`, so no container outlives a
//! runtime that is killed. (Linux ties that signal to the *thread* that forked: containers are
//! spawned from tokio worker threads, which live as long as the tokio runtime; rkube-runtime
//! never calls `block_in_place`, which would retire a worker thread early.)

use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::process::{ExitStatus, Stdio};

use crate::cri;
use tokio::process::Command;

/// `PATH` given to every container (the usual value of a Linux image's config).
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Errors starting a process.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    /// The container has neither command nor args.
    #[error("no command specified")]
    NoCommand,
    /// `fork`/`exec` failed (missing binary, bad working directory, ...).
    #[error("exec {program:?}: {source}")]
    Spawn {
        /// `argv[0]`.
        program: String,
        /// The OS error.
        source: std::io::Error,
    },
}

/// What to run.
#[derive(Debug, Clone)]
pub struct ProcessSpec {
    /// `argv[0]` is resolved in `PATH` of `envs`.
    pub argv: Vec<String>,
    /// The whole environment (nothing is inherited from the runtime).
    pub envs: Vec<(String, String)>,
    /// Empty means the runtime's working directory.
    pub working_dir: String,
    /// Bind mounts made in a private mount namespace of the process ([`bind_mounts`]).
    pub mounts: Vec<BindMount>,
    /// Stdin is a pipe (for `Attach`) instead of `/dev/null`.
    pub stdin: bool,
    /// `ContainerConfig.tty`: stdin, stdout and stderr are the slave side of a new
    /// pseudo-terminal, the process's controlling terminal in a session of its own.
    pub tty: bool,
    /// `cgroup.procs` files the process joins before it execs (its container's cgroup, one file
    /// per hierarchy); empty for none.
    pub cgroup_procs: Vec<std::path::PathBuf>,
}

/// One bind mount: `host_path` is seen at `container_path` by the process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BindMount {
    /// What is mounted.
    pub host_path: String,
    /// Where the process sees it (an absolute path of the host's tree: the
    /// process shares the host's root).
    pub container_path: String,
    /// Mounted read-only.
    pub readonly: bool,
}

/// The bind mounts to make for a container's CRI `mounts`: every mount with
/// absolute paths when the runtime runs as root (a private mount namespace
/// needs `CAP_SYS_ADMIN`); none otherwise, with a warning naming the
/// container, since a host process cannot get a private view of the tree
/// without privileges (its volumes are then not mounted).
pub fn bind_mounts(mounts: &[cri::Mount], container: &str) -> Vec<BindMount> {
    let wanted: Vec<BindMount> = mounts
        .iter()
        .filter(|m| m.host_path.starts_with('/') && m.container_path.starts_with('/'))
        .map(|m| BindMount {
            host_path: m.host_path.clone(),
            container_path: m.container_path.clone(),
            readonly: m.readonly,
        })
        .collect();
    // SAFETY: geteuid has no preconditions.
    if !wanted.is_empty() && unsafe { libc::geteuid() } != 0 {
        tracing::warn!(
            container,
            mounts = wanted.len(),
            "not running as root: the container's volumes are not mounted"
        );
        return Vec::new();
    }
    wanted
}

/// Opens each `cgroup.procs` file for writing (before a fork: [`join_cgroups`] then only writes).
///
/// # Errors
/// A file cannot be opened (the cgroup is gone, or no permission).
pub fn open_cgroup_procs(files: &[std::path::PathBuf]) -> std::io::Result<Vec<std::fs::File>> {
    files
        .iter()
        .map(|f| {
            std::fs::OpenOptions::new()
                .write(true)
                .open(f)
                .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", f.display())))
        })
        .collect()
}

/// Between fork and exec: moves the calling process into each cgroup whose `cgroup.procs` is
/// open on `fds` (writing `0` names the writer; kernel `cgroup-v2.rst`, `cgroups.txt`). Only
/// calls write(2), which is async-signal-safe.
///
/// # Errors
/// The kernel refused the move.
pub fn join_cgroups(fds: &[i32]) -> std::io::Result<()> {
    for &fd in fds {
        // SAFETY: writes one byte from a static buffer to a descriptor opened before the fork.
        if unsafe { libc::write(fd, c"0".as_ptr().cast(), 1) } != 1 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Starts the process with piped stdout/stderr, stdin piped when `spec.stdin` (else null), in a
/// new process group, killed when the runtime dies. With `spec.tty` the three streams are a new
/// terminal instead (returned as [`crate::exec::Spawned::pty`]) and the process leads a new
/// session (so its group id is its pid too).
pub fn spawn(spec: &ProcessSpec) -> Result<crate::exec::Spawned, ProcessError> {
    let program = spec.argv.first().ok_or(ProcessError::NoCommand)?;
    let spawn_err = |source| ProcessError::Spawn {
        program: program.clone(),
        source,
    };
    let mut cmd = Command::new(program);
    cmd.args(&spec.argv[1..])
        .env_clear()
        .envs(spec.envs.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .kill_on_drop(false);
    let pty = if spec.tty {
        let (master, slave) = crate::exec::open_pty().map_err(spawn_err)?;
        let dup = |fd: &OwnedFd| fd.try_clone().map(Stdio::from).map_err(spawn_err);
        cmd.stdin(dup(&slave)?)
            .stdout(dup(&slave)?)
            .stderr(dup(&slave)?);
        Some((master, slave))
    } else {
        cmd.stdin(if spec.stdin {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
        None
    };
    let slave_fd = pty.as_ref().map_or(-1, |(_, slave)| slave.as_raw_fd());
    let cgroup_files = open_cgroup_procs(&spec.cgroup_procs).map_err(spawn_err)?;
    let cgroup_fds: Vec<i32> = cgroup_files.iter().map(AsRawFd::as_raw_fd).collect();
    if !spec.working_dir.is_empty() {
        cmd.current_dir(&spec.working_dir);
    }
    // Mount points are created (on the host's tree) and paths converted before the fork.
    let mut binds: Vec<(std::ffi::CString, std::ffi::CString, bool)> =
        Vec::with_capacity(spec.mounts.len());
    for m in &spec.mounts {
        let target = std::path::Path::new(&m.container_path);
        let is_dir = std::fs::metadata(&m.host_path)
            .map(|md| md.is_dir())
            .unwrap_or(true);
        let made = if is_dir {
            std::fs::create_dir_all(target)
        } else {
            target
                .parent()
                .map(std::fs::create_dir_all)
                .unwrap_or(Ok(()))
                .and_then(|_| {
                    std::fs::OpenOptions::new()
                        .create(true)
                        .append(true)
                        .open(target)
                        .map(|_| ())
                })
        };
        made.map_err(|source| ProcessError::Spawn {
            program: format!("mount point {}", m.container_path),
            source,
        })?;
        let c = |s: &str| {
            std::ffi::CString::new(s).map_err(|e| ProcessError::Spawn {
                program: s.to_string(),
                source: std::io::Error::other(e),
            })
        };
        binds.push((c(&m.host_path)?, c(&m.container_path)?, m.readonly));
    }
    // SAFETY: the closure runs between fork and exec and only calls async-signal-safe
    // system calls (prctl(2), write(2), setsid(2), ioctl(2), unshare(2), mount(2)) on data prepared before the fork;
    // it allocates nothing and touches no locks.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            join_cgroups(&cgroup_fds)?;
            if slave_fd >= 0
                && (libc::setsid() < 0 || libc::ioctl(slave_fd, libc::TIOCSCTTY, 0) != 0)
            {
                return Err(std::io::Error::last_os_error());
            }
            if binds.is_empty() {
                return Ok(());
            }
            // A private copy of the mount tree: nothing mounted here reaches the host.
            if libc::unshare(libc::CLONE_NEWNS) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            let root = c"/";
            if libc::mount(
                std::ptr::null(),
                root.as_ptr(),
                std::ptr::null(),
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            for (source, target, readonly) in &binds {
                if libc::mount(
                    source.as_ptr(),
                    target.as_ptr(),
                    std::ptr::null(),
                    libc::MS_BIND | libc::MS_REC,
                    std::ptr::null(),
                ) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                if *readonly {
                    let flags = libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY | libc::MS_REC;
                    if libc::mount(
                        std::ptr::null(),
                        target.as_ptr(),
                        std::ptr::null(),
                        flags,
                        std::ptr::null(),
                    ) != 0
                    {
                        return Err(std::io::Error::last_os_error());
                    }
                }
            }
            Ok(())
        });
    }
    let child = cmd.spawn().map_err(spawn_err)?;
    let pty = match pty {
        Some((master, slave)) => {
            // Only the process holds the slave side: the terminal ends when it (and what it
            // started) closed it.
            drop(slave);
            Some(crate::exec::Pty::from_master(master).map_err(spawn_err)?)
        }
        None => None,
    };
    Ok(crate::exec::Spawned { child, pty })
}

/// Sends `signal` to every process of the group `pgid`. A group that no longer exists is not an
/// error (the container already ended).
pub fn signal_group(pgid: i32, signal: i32) {
    if pgid <= 1 {
        return; // never signal "every process" (-1) or our own group (0)
    }
    // SAFETY: kill(2) with a negative pid signals a process group; no memory is involved.
    let _ = unsafe { libc::kill(-pgid, signal) };
}

/// Whether a process with this pid exists (and is not a zombie we still have to reap).
pub fn process_exists(pid: i32) -> bool {
    if pid <= 0 {
        return false;
    }
    // SAFETY: signal 0 only checks for existence and permission.
    let alive = unsafe { libc::kill(pid, 0) } == 0;
    if !alive {
        return false;
    }
    // A zombie still answers kill(pid, 0); look at its state.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(") ")
            .map(|(_, rest)| !rest.starts_with('Z'))
            .unwrap_or(true),
        Err(_) => false,
    }
}

/// The CRI exit code of a wait status: the exit status, or 128 + signal number (137 for
/// SIGKILL, 143 for SIGTERM), as containerd reports it.
pub fn exit_code(status: &ExitStatus) -> i32 {
    match (status.code(), status.signal()) {
        (Some(code), _) => code,
        (None, Some(sig)) => 128 + sig,
        (None, None) => 255,
    }
}

/// The CRI `reason` of an exited container (`Completed` for 0, otherwise `Error`).
pub fn exit_reason(code: i32) -> &'static str {
    if code == 0 {
        "Completed"
    } else {
        "Error"
    }
}
