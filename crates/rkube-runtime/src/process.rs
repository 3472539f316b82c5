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

use std::os::unix::process::ExitStatusExt;
use std::process::{ExitStatus, Stdio};

use tokio::process::{Child, Command};

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
}

/// Starts the process with piped stdout/stderr, null stdin, in a new process group, killed when
/// the runtime dies.
pub fn spawn(spec: &ProcessSpec) -> Result<Child, ProcessError> {
    let program = spec.argv.first().ok_or(ProcessError::NoCommand)?;
    let mut cmd = Command::new(program);
    cmd.args(&spec.argv[1..])
        .env_clear()
        .envs(spec.envs.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(false);
    if !spec.working_dir.is_empty() {
        cmd.current_dir(&spec.working_dir);
    }
    // SAFETY: the closure runs between fork and exec and only calls the async-signal-safe
    // prctl(2); it allocates nothing and touches no locks.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd.spawn().map_err(|source| ProcessError::Spawn { program: program.clone(), source })
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
        Ok(stat) => stat.rsplit_once(") ").map(|(_, rest)| !rest.starts_with('Z')).unwrap_or(true),
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
