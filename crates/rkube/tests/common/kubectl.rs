//! The real kubectl binaries (`kubectl.1.27`, `kubectl.1.33`, ...) driven
//! against a test server, each call under a wall-clock limit.
//!
//! The versioned binaries come from the machine's `kubectl` package; their
//! directory is `$RKUBE_KUBECTL_DIR` if set, else found with `dpkg -L kubectl`,
//! else `/usr/lib/google-cloud-sdk/bin`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use super::process::{self, is_executable, Finished, Streaming};

/// Sent to kubectl as `--request-timeout` (so every request carries a
/// `timeout=` and a hung request fails the command).
pub const REQUEST_TIMEOUT: &str = "20s";
/// Wall-clock limit for one kubectl invocation.
pub const CALL_LIMIT: Duration = Duration::from_secs(45);

fn kubectl_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        if let Some(d) = std::env::var_os("RKUBE_KUBECTL_DIR") {
            return PathBuf::from(d);
        }
        if let Ok(out) = Command::new("dpkg").args(["-L", "kubectl"]).output() {
            let listing = String::from_utf8_lossy(&out.stdout);
            if let Some(p) = listing.lines().find(|l| l.contains("/kubectl.1.")) {
                if let Some(parent) = Path::new(p.trim()).parent() {
                    return parent.to_path_buf();
                }
            }
        }
        PathBuf::from("/usr/lib/google-cloud-sdk/bin")
    })
}

/// The path of `kubectl.<version>`; panics (failing the test) if missing.
#[track_caller]
pub fn kubectl_bin(version: &str) -> PathBuf {
    let p = kubectl_dir().join(format!("kubectl.{version}"));
    assert!(
        is_executable(&p),
        "{} not found: install the `kubectl` package or set RKUBE_KUBECTL_DIR",
        p.display()
    );
    p
}

/// One kubectl version bound to one server.
#[derive(Debug, Clone)]
pub struct Kubectl {
    /// "1.27", "1.33", ...
    pub version: String,
    bin: PathBuf,
    kubeconfig: PathBuf,
    cache_dir: PathBuf,
    home: PathBuf,
}

impl Kubectl {
    /// A kubectl of `version` using `kubeconfig`, with its discovery cache in
    /// `cache_dir` and `$HOME` set to `home` (nothing leaks between tests).
    #[track_caller]
    pub fn new(version: &str, kubeconfig: &Path, cache_dir: &Path, home: &Path) -> Self {
        Kubectl {
            version: version.to_owned(),
            bin: kubectl_bin(version),
            kubeconfig: kubeconfig.to_path_buf(),
            cache_dir: cache_dir.to_path_buf(),
            home: home.to_path_buf(),
        }
    }

    /// The `kubectl` command with `--kubeconfig`, `--cache-dir` and
    /// `--request-timeout` set and `args` appended, for callers that need a
    /// raw [`Command`] (custom stdin, environment, ...).
    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(&self.bin);
        cmd.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", &self.home)
            .env("KUBECONFIG", &self.kubeconfig)
            .arg(format!("--kubeconfig={}", self.kubeconfig.display()))
            .arg(format!("--cache-dir={}", self.cache_dir.display()))
            .arg(format!("--request-timeout={REQUEST_TIMEOUT}"))
            .args(args);
        cmd
    }

    /// Runs `kubectl <args>` to completion (limit [`CALL_LIMIT`]).
    #[track_caller]
    pub fn run(&self, args: &[&str]) -> Finished {
        process::run(self.command(args), None, CALL_LIMIT)
    }

    /// Runs `kubectl <args>` and asserts exit 0.
    #[track_caller]
    pub fn ok(&self, args: &[&str]) -> Finished {
        self.run(args).success()
    }

    /// Runs `kubectl <args>` with `stdin` (for `-f -`).
    #[track_caller]
    pub fn run_stdin(&self, args: &[&str], stdin: &str) -> Finished {
        process::run(self.command(args), Some(stdin), CALL_LIMIT)
    }

    /// `kubectl <args> -o json`, asserting success, parsed.
    #[track_caller]
    pub fn json(&self, args: &[&str]) -> serde_json::Value {
        let mut a = args.to_vec();
        a.push("-o");
        a.push("json");
        self.ok(&a).json()
    }

    /// Starts `kubectl <args>` in the background (e.g. `get -w`, a waiting delete).
    #[track_caller]
    pub fn spawn(&self, args: &[&str]) -> Streaming {
        Streaming::spawn(self.command(args))
    }

    /// Runs `kubectl <args>`, asserting exit 1 and that stderr is exactly
    /// `expected_stderr` (one line, newline added).
    #[track_caller]
    pub fn fails_with(&self, args: &[&str], expected_stderr: &str) -> Finished {
        let f = self.run(args);
        assert_eq!(
            (f.code, f.stderr.trim_end()),
            (Some(1), expected_stderr),
            "`{}` should fail with exactly this stderr; stdout:\n{}",
            f.cmdline,
            f.stdout
        );
        f
    }
}
