//! Processes run in a container's context for CRI `Exec` and `ExecSync`.
//!
//! A container here is a host process, so "in the container" means: the container's
//! environment and working directory, its mount namespace when it has a private one (its
//! volumes; joined with `setns(2)`), and its process group, so stopping the container also ends
//! what was exec'd into it. With a terminal (`tty`), the process gets a new session whose
//! controlling terminal is the slave side of a fresh pseudo-terminal (`openpty(3)`); its stdin,
//! stdout and stderr all go through the master side, which the runtime keeps ([`Pty`]).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::unix::AsyncFd;
use tokio::io::AsyncReadExt;
use tokio::process::{Child, Command};

use crate::process::{self, ProcessError};

/// What an exec'd process inherits from its container.
#[derive(Clone, Debug)]
pub struct ExecTarget {
    /// The container's main process (its pid is its process group id).
    pub pid: i32,
    /// The container's environment.
    pub envs: Vec<(String, String)>,
    /// The container's working directory (empty: the runtime's).
    pub working_dir: String,
    /// `cgroup.procs` files of the container's cgroup: the exec'd process joins it, so its
    /// usage counts as the container's (empty without a cgroup).
    pub cgroup_procs: Vec<std::path::PathBuf>,
}

/// Which standard streams the client wants.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExecStreams {
    /// Standard input is fed by the client.
    pub stdin: bool,
    /// Standard output goes to the client.
    pub stdout: bool,
    /// Standard error goes to the client.
    pub stderr: bool,
    /// A terminal: stdin, stdout and stderr are one pseudo-terminal.
    pub tty: bool,
}

/// The master side of a pseudo-terminal, non-blocking, driven by tokio.
#[derive(Debug)]
pub struct Pty {
    master: AsyncFd<OwnedFd>,
}

impl Pty {
    /// The runtime's side of a terminal from [`open_pty`]'s master descriptor.
    ///
    /// # Errors
    /// The descriptor cannot be registered with tokio.
    pub(crate) fn from_master(master: OwnedFd) -> io::Result<Self> {
        // SAFETY: `master` is an open descriptor this `Pty` owns; it is neither replaced nor
        // closed while registered.
        Ok(Self {
            master: unsafe { AsyncFd::register(master) }?,
        })
    }

    /// Reads output of the terminal; `Ok(0)` once every holder of the slave side has closed it
    /// (Linux reports that as `EIO`).
    ///
    /// # Errors
    /// Other read errors.
    pub async fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            let mut guard = self.master.readable().await?;
            // SAFETY: read(2) into a buffer we own, of its length.
            let res = guard.try_io(|fd| {
                cvt(unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) })
            });
            match res {
                Ok(Ok(n)) => return Ok(n),
                Ok(Err(e)) if e.raw_os_error() == Some(libc::EIO) => return Ok(0),
                Ok(Err(e)) => return Err(e),
                Err(_would_block) => continue,
            }
        }
    }

    /// Writes all of `data` as terminal input.
    ///
    /// # Errors
    /// The terminal is gone.
    pub async fn write_all(&self, mut data: &[u8]) -> io::Result<()> {
        while !data.is_empty() {
            let mut guard = self.master.writable().await?;
            // SAFETY: write(2) from a buffer we own, of its length.
            let res = guard.try_io(|fd| {
                cvt(unsafe { libc::write(fd.as_raw_fd(), data.as_ptr().cast(), data.len()) })
            });
            match res {
                Ok(Ok(n)) => data = &data[n..],
                Ok(Err(e)) => return Err(e),
                Err(_would_block) => continue,
            }
        }
        Ok(())
    }

    /// Sets the terminal's size (`TIOCSWINSZ`); the process gets `SIGWINCH`.
    ///
    /// # Errors
    /// The ioctl failed.
    pub fn resize(&self, cols: u16, rows: u16) -> io::Result<()> {
        let ws = libc::winsize {
            ws_row: rows,
            ws_col: cols,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        // SAFETY: TIOCSWINSZ reads one winsize from the pointer.
        cvt(unsafe { libc::ioctl(self.master.as_raw_fd(), libc::TIOCSWINSZ, &ws) as isize })
            .map(|_| ())
    }
}

fn cvt(n: isize) -> io::Result<usize> {
    usize::try_from(n).map_err(|_| io::Error::last_os_error())
}

/// A started exec: the child (pipes taken from it as asked) and the terminal when `tty`.
#[derive(Debug)]
pub struct Spawned {
    /// The process; with `tty` it has no pipes.
    pub child: Child,
    /// The terminal's master side (`tty` only).
    pub pty: Option<Pty>,
}

/// A new pseudo-terminal (80x24): its master side (non-blocking) and its slave side, both
/// close-on-exec.
pub(crate) fn open_pty() -> io::Result<(OwnedFd, OwnedFd)> {
    let (mut master, mut slave): (RawFd, RawFd) = (-1, -1);
    let ws = libc::winsize {
        ws_row: 24,
        ws_col: 80,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: openpty writes two fds; name and termios pointers may be null.
    let rc = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            &ws,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: openpty returned two open descriptors we now own.
    let (master, slave) = unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
    for fd in [&master, &slave] {
        // SAFETY: F_SETFD on a descriptor we own.
        unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC) };
    }
    // SAFETY: F_GETFL/F_SETFL on a descriptor we own.
    unsafe {
        let flags = libc::fcntl(master.as_raw_fd(), libc::F_GETFL);
        libc::fcntl(master.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK);
    }
    Ok((master, slave))
}

/// The container's mount namespace when it differs from the runtime's (`None` otherwise, or
/// when it cannot be opened: the process then sees the host's tree).
fn container_mount_ns(pid: i32) -> Option<OwnedFd> {
    let theirs = std::fs::read_link(format!("/proc/{pid}/ns/mnt")).ok()?;
    let ours = std::fs::read_link("/proc/self/ns/mnt").ok()?;
    if theirs == ours {
        return None;
    }
    std::fs::File::open(format!("/proc/{pid}/ns/mnt"))
        .ok()
        .map(OwnedFd::from)
}

/// Starts `argv` in `target`'s context with the streams asked for (see the module docs);
/// streams not asked for are `/dev/null`.
///
/// # Errors
/// [`ProcessError::NoCommand`] for an empty `argv`; [`ProcessError::Spawn`] when the terminal
/// cannot be made or the program not started.
pub fn spawn(
    target: &ExecTarget,
    argv: &[String],
    streams: ExecStreams,
) -> Result<Spawned, ProcessError> {
    let program = argv.first().ok_or(ProcessError::NoCommand)?;
    let spawn_err = |source| ProcessError::Spawn {
        program: program.clone(),
        source,
    };
    let mut cmd = Command::new(program);
    cmd.args(&argv[1..])
        .env_clear()
        .envs(target.envs.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .kill_on_drop(false);
    let mut pty = None;
    let mut slave_fd: RawFd = -1;
    if streams.tty {
        let (master, slave) = open_pty().map_err(spawn_err)?;
        let dup = |fd: &OwnedFd| fd.try_clone().map(Stdio::from).map_err(spawn_err);
        cmd.stdin(dup(&slave)?)
            .stdout(dup(&slave)?)
            .stderr(dup(&slave)?);
        slave_fd = slave.as_raw_fd();
        pty = Some((master, slave));
    } else {
        let pick = |on: bool| if on { Stdio::piped() } else { Stdio::null() };
        cmd.stdin(pick(streams.stdin))
            .stdout(pick(streams.stdout))
            .stderr(pick(streams.stderr));
    }
    let mount_ns = container_mount_ns(target.pid);
    let ns_fd = mount_ns.as_ref().map_or(-1, AsRawFd::as_raw_fd);
    let workdir = if target.working_dir.is_empty() {
        None
    } else {
        Some(
            std::ffi::CString::new(target.working_dir.as_str())
                .map_err(|e| spawn_err(io::Error::other(e)))?,
        )
    };
    let (tty, pgid) = (streams.tty, target.pid);
    let cgroup_files = crate::process::open_cgroup_procs(&target.cgroup_procs).map_err(spawn_err)?;
    let cgroup_fds: Vec<RawFd> = cgroup_files.iter().map(AsRawFd::as_raw_fd).collect();
    // SAFETY: the closure runs between fork and exec and only makes async-signal-safe system
    // calls (prctl, write, setns, chdir, setsid, ioctl, setpgid) on data prepared before the fork.
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
                return Err(io::Error::last_os_error());
            }
            crate::process::join_cgroups(&cgroup_fds)?;
            if ns_fd >= 0 && libc::setns(ns_fd, libc::CLONE_NEWNS) != 0 {
                return Err(io::Error::last_os_error());
            }
            if let Some(dir) = &workdir {
                if libc::chdir(dir.as_ptr()) != 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            if tty {
                if libc::setsid() < 0 || libc::ioctl(slave_fd, libc::TIOCSCTTY, 0) != 0 {
                    return Err(io::Error::last_os_error());
                }
            } else if pgid <= 1 || libc::setpgid(0, pgid) != 0 {
                // The container's group is gone (it is exiting): a group of its own.
                libc::setpgid(0, 0);
            }
            Ok(())
        });
    }
    let child = cmd.spawn().map_err(spawn_err)?;
    drop(mount_ns);
    let pty = match pty {
        Some((master, slave)) => {
            drop(slave);
            Some(Pty::from_master(master).map_err(spawn_err)?)
        }
        None => None,
    };
    Ok(Spawned { child, pty })
}

/// What `ExecSync` returns.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SyncOutput {
    /// Everything written to stdout.
    pub stdout: Vec<u8>,
    /// Everything written to stderr.
    pub stderr: Vec<u8>,
    /// The exit code (128 + signal when signalled; 137 when the timeout killed it).
    pub exit_code: i32,
}

/// Runs `argv` in `target`'s context to its end (CRI `ExecSync`), collecting its output; with a
/// `timeout`, the process (and its group) is killed when it runs longer.
///
/// # Errors
/// The process cannot be started.
pub async fn run_sync(
    target: &ExecTarget,
    argv: &[String],
    timeout: Option<Duration>,
) -> Result<SyncOutput, ProcessError> {
    let streams = ExecStreams {
        stdin: false,
        stdout: true,
        stderr: true,
        tty: false,
    };
    let Spawned { mut child, .. } = spawn(target, argv, streams)?;
    let pid = child.id().and_then(|p| i32::try_from(p).ok()).unwrap_or(0);
    let (mut out, mut err) = (child.stdout.take(), child.stderr.take());
    let collect = async {
        let (mut o, mut e) = (Vec::new(), Vec::new());
        let read_out = async {
            if let Some(s) = out.as_mut() {
                let _ = s.read_to_end(&mut o).await;
            }
        };
        let read_err = async {
            if let Some(s) = err.as_mut() {
                let _ = s.read_to_end(&mut e).await;
            }
        };
        tokio::join!(read_out, read_err);
        let code = child
            .wait()
            .await
            .map(|s| process::exit_code(&s))
            .unwrap_or(255);
        (o, e, code)
    };
    let waited = match timeout {
        Some(t) => tokio::time::timeout(t, collect).await.ok(),
        None => Some(collect.await),
    };
    match waited {
        Some((stdout, stderr, exit_code)) => Ok(SyncOutput {
            stdout,
            stderr,
            exit_code,
        }),
        None => {
            // SAFETY: kill(2) on the pid we started; no memory is involved.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            Ok(SyncOutput {
                stdout: Vec::new(),
                stderr: Vec::new(),
                exit_code: 128 + libc::SIGKILL,
            })
        }
    }
}

/// An [`tokio::io::AsyncRead`] over a terminal's output (end of stream once every holder of
/// the slave side has closed it), for the log writer of a container with `tty`.
#[derive(Debug, Clone)]
pub struct PtyReader(pub std::sync::Arc<Pty>);

impl tokio::io::AsyncRead for PtyReader {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        loop {
            let mut guard = std::task::ready!(self.0.master.poll_read_ready(cx))?;
            let unfilled = buf.initialize_unfilled();
            // SAFETY: read(2) into the initialized, unfilled part of `buf`, of its length.
            let res = guard.try_io(|fd| {
                cvt(unsafe {
                    libc::read(fd.as_raw_fd(), unfilled.as_mut_ptr().cast(), unfilled.len())
                })
            });
            match res {
                Ok(Ok(n)) => {
                    buf.advance(n);
                    return std::task::Poll::Ready(Ok(()));
                }
                Ok(Err(e)) if e.raw_os_error() == Some(libc::EIO) => {
                    return std::task::Poll::Ready(Ok(()))
                }
                Ok(Err(e)) => return std::task::Poll::Ready(Err(e)),
                Err(_would_block) => continue,
            }
        }
    }
}
