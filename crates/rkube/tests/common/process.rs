//! Child processes for tests: run-to-completion with a wall-clock limit,
//! long-running children with line-by-line output, and a guard that kills a
//! child by its PID when dropped, so no test leaves a process behind.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::thread;
use std::time::{Duration, Instant};

/// What a finished command printed and how it ended.
#[derive(Debug, Clone)]
pub struct Finished {
    /// The command line, for messages.
    pub cmdline: String,
    /// The exit code (`None` when killed by a signal).
    pub code: Option<i32>,
    /// Everything written to stdout.
    pub stdout: String,
    /// Everything written to stderr.
    pub stderr: String,
    /// Wall-clock time the command took.
    pub elapsed: Duration,
}

impl Finished {
    /// Panics with the full output unless the command exited 0.
    #[track_caller]
    pub fn success(self) -> Self {
        if self.code != Some(0) {
            panic!(
                "command failed (exit {:?}): {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
                self.code, self.cmdline, self.stdout, self.stderr
            );
        }
        self
    }

    /// Panics with the full output unless the command exited with `code`.
    #[track_caller]
    pub fn exit_code(self, code: i32) -> Self {
        if self.code != Some(code) {
            panic!(
                "expected exit {code}, got {:?}: {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
                self.code, self.cmdline, self.stdout, self.stderr
            );
        }
        self
    }

    /// Parses stdout as JSON, panicking with the output when it is not.
    #[track_caller]
    pub fn json(&self) -> serde_json::Value {
        match serde_json::from_str(&self.stdout) {
            Ok(v) => v,
            Err(err) => panic!(
                "stdout of `{}` is not JSON ({err}):\n{}\n--- stderr ---\n{}",
                self.cmdline, self.stdout, self.stderr
            ),
        }
    }

    /// stdout split into lines.
    pub fn stdout_lines(&self) -> Vec<&str> {
        self.stdout.lines().collect()
    }
}

fn cmdline_of(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

fn drain<R: Read + Send + 'static>(mut r: R) -> thread::JoinHandle<String> {
    thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = r.read_to_end(&mut buf);
        String::from_utf8_lossy(&buf).into_owned()
    })
}

/// Runs `cmd` to completion, feeding `stdin`, killing it (by PID) and
/// panicking if it runs longer than `limit`.
#[track_caller]
pub fn run(mut cmd: Command, stdin: Option<&str>, limit: Duration) -> Finished {
    let cmdline = cmdline_of(&cmd);
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let start = Instant::now();
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {cmdline}: {e}"));
    if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
        let input = input.to_owned();
        thread::spawn(move || {
            let _ = pipe.write_all(input.as_bytes());
        });
    }
    let out = drain(child.stdout.take().expect("piped stdout"));
    let err = drain(child.stderr.take().expect("piped stderr"));
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if start.elapsed() > limit => {
                let _ = child.kill();
                let _ = child.wait();
                let stdout = out.join().unwrap_or_default();
                let stderr = err.join().unwrap_or_default();
                panic!("timed out after {limit:?}: {cmdline}\n--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}");
            }
            Ok(None) => thread::sleep(Duration::from_millis(10)),
            Err(e) => panic!("waiting for {cmdline}: {e}"),
        }
    };
    Finished {
        cmdline,
        code: status.code(),
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
        elapsed: start.elapsed(),
    }
}

/// A child process killed (SIGKILL, by PID) and reaped on drop.
pub struct ChildGuard {
    child: Option<Child>,
    /// Human-readable name, for messages.
    pub name: String,
}

impl ChildGuard {
    /// Wraps a started child.
    pub fn new(child: Child, name: impl Into<String>) -> Self {
        ChildGuard {
            child: Some(child),
            name: name.into(),
        }
    }

    /// The child's PID.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(|c| c.id()).unwrap_or(0)
    }

    /// `Some(status)` if the child already exited.
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    /// Sends `signal` (e.g. "TERM", "KILL") to the child's PID.
    #[track_caller]
    pub fn signal(&self, signal: &str) {
        let pid = self.pid().to_string();
        let st = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(&pid)
            .status();
        assert!(
            matches!(st, Ok(s) if s.success()),
            "kill -{signal} {pid} ({}) failed: {st:?}",
            self.name
        );
    }

    /// Waits up to `limit` for the child to exit; `None` if it is still running.
    pub fn wait_timeout(&mut self, limit: Duration) -> Option<ExitStatus> {
        let start = Instant::now();
        loop {
            if let Some(st) = self.try_wait() {
                return Some(st);
            }
            if start.elapsed() > limit {
                return None;
            }
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// Takes the child out of the guard (the caller then owns its cleanup).
    pub fn child_mut(&mut self) -> &mut Child {
        self.child.as_mut().expect("child present")
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            if let Ok(None) = child.try_wait() {
                let _ = child.kill();
            }
            let _ = child.wait();
        }
    }
}

/// A running command whose stdout is read line by line (e.g. `kubectl get -w`).
pub struct Streaming {
    guard: ChildGuard,
    lines: Receiver<String>,
    seen: Vec<String>,
    stderr: thread::JoinHandle<String>,
}

impl Streaming {
    /// Starts `cmd` with stdout and stderr piped.
    #[track_caller]
    pub fn spawn(mut cmd: Command) -> Self {
        let cmdline = cmdline_of(&cmd);
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {cmdline}: {e}"));
        let stdout = child.stdout.take().expect("piped stdout");
        let stderr = drain(child.stderr.take().expect("piped stderr"));
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                match line {
                    Ok(l) => {
                        if tx.send(l).is_err() {
                            break;
                        }
                    }
                    Err(_) => break,
                }
            }
        });
        Streaming {
            guard: ChildGuard::new(child, cmdline),
            lines: rx,
            seen: Vec::new(),
            stderr,
        }
    }

    /// Waits up to `limit` for a stdout line matching `pred` and returns it;
    /// panics with everything seen so far if none comes.
    #[track_caller]
    pub fn expect_line(
        &mut self,
        what: &str,
        limit: Duration,
        pred: impl Fn(&str) -> bool,
    ) -> String {
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if pred(&line) {
                        return line;
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    panic!(
                        "`{}`: no line {what} within {limit:?}; lines so far:\n{}",
                        self.guard.name,
                        self.seen.join("\n")
                    )
                }
                Err(RecvTimeoutError::Disconnected) => {
                    let status = self.guard.wait_timeout(Duration::from_secs(5));
                    panic!(
                        "`{}` ended (status {status:?}) before a line {what}; lines so far:\n{}",
                        self.guard.name,
                        self.seen.join("\n")
                    )
                }
            }
        }
    }

    /// Reads lines for `d` and returns them (they are also kept in `seen`).
    pub fn collect_for(&mut self, d: Duration) -> Vec<String> {
        let deadline = Instant::now() + d;
        let mut got = Vec::new();
        while let Ok(line) = self
            .lines
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
        {
            self.seen.push(line.clone());
            got.push(line);
        }
        got
    }

    /// All stdout lines read so far.
    pub fn seen(&self) -> &[String] {
        &self.seen
    }

    /// The guard of the running process.
    pub fn guard(&mut self) -> &mut ChildGuard {
        &mut self.guard
    }

    /// Kills the process and returns its stderr.
    pub fn stop(self) -> String {
        let Streaming { guard, stderr, .. } = self;
        drop(guard);
        stderr.join().unwrap_or_default()
    }
}

/// True if `path` is an executable file.
pub fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}
