//! What the figures were measured on: CPUs, memory, kernel, load, the rkube
//! build (git commit, dirty tree, debug or release) and the etcd version.
//!
//! Everything is read from `/proc`, `git` (read-only commands) and `etcd
//! --version`; a value that cannot be read is `None`, never guessed.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde::Serialize;

/// The machine and build a report was produced on.
#[derive(Debug, Clone, Serialize)]
pub struct MachineInfo {
    /// Logical CPUs available to this process.
    pub nproc: usize,
    /// CPU model from `/proc/cpuinfo`.
    pub cpu_model: Option<String>,
    /// `MemTotal` from `/proc/meminfo`, in bytes.
    pub memory_bytes: Option<u64>,
    /// `MemAvailable` when the run started, in bytes.
    pub memory_available_bytes: Option<u64>,
    /// Kernel release (`/proc/sys/kernel/osrelease`).
    pub kernel: Option<String>,
    /// 1-minute load average when the run started (above `nproc` = busy machine).
    pub loadavg_1m_start: Option<f64>,
    /// 1-minute load average when the run ended.
    pub loadavg_1m_end: Option<f64>,
    /// `git rev-parse HEAD` of the rkube checkout the binary was built from (stamped at
    /// build time; read from the run's checkout only for builds made outside git).
    pub rkube_git_commit: Option<String>,
    /// True when tracked files differed from that commit when the binary was built
    /// (`git status --porcelain -uno`), benchmark reports and BENCHMARKS.md excepted.
    pub rkube_git_dirty: Option<bool>,
    /// `release` or `debug` (figures from a debug build are not comparable).
    pub rkube_build: &'static str,
    /// rkube crate version.
    pub rkube_version: &'static str,
    /// First line of `etcd --version`, when etcd is on PATH.
    pub etcd_version: Option<String>,
    /// Soft limit of open files for this process (after raising it).
    pub open_files_limit: Option<u64>,
}

impl MachineInfo {
    /// Reads everything now (the end load average is filled by [`MachineInfo::finish`]);
    /// `reports` is the run's output directory, left out of the dirty-tree check when it lies
    /// inside the checkout (a run that rewrites committed reports is still a clean build).
    pub fn collect(reports: &Path) -> MachineInfo {
        // The commit stamped at build time (build.rs) names what the binary is; the checkout
        // the run happens in is only a fallback for builds made outside a git checkout.
        let (commit, dirty) = match (env!("RKUBE_BUILD_COMMIT"), env!("RKUBE_BUILD_DIRTY")) {
            (c, d) if !c.is_empty() => (Some(c.to_string()), d.parse::<bool>().ok()),
            _ => {
                let repo = find_repo();
                let commit = repo.as_deref().and_then(|r| git(r, &["rev-parse", "HEAD"]));
                (commit, repo.as_deref().and_then(|r| dirty(r, reports)))
            }
        };
        MachineInfo {
            nproc: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1),
            cpu_model: read("/proc/cpuinfo").and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("model name"))
                    .and_then(|l| l.split(':').nth(1))
                    .map(|v| v.trim().to_string())
            }),
            memory_bytes: meminfo("MemTotal"),
            memory_available_bytes: meminfo("MemAvailable"),
            kernel: read("/proc/sys/kernel/osrelease").map(|s| s.trim().to_string()),
            loadavg_1m_start: loadavg(),
            loadavg_1m_end: None,
            rkube_git_commit: commit,
            rkube_git_dirty: dirty,
            rkube_build: if cfg!(debug_assertions) {
                "debug"
            } else {
                "release"
            },
            rkube_version: env!("CARGO_PKG_VERSION"),
            etcd_version: Command::new("etcd")
                .arg("--version")
                .output()
                .ok()
                .and_then(|o| String::from_utf8(o.stdout).ok())
                .and_then(|s| s.lines().next().map(str::to_string)),
            open_files_limit: open_files_limit(),
        }
    }

    /// Records the load average at the end of the run.
    pub fn finish(&mut self) {
        self.loadavg_1m_end = loadavg();
    }

    /// One line for reports: `2 CPUs (model), 23.4 GiB, kernel X, load 1.2 → 2.3, commit abc (dirty), release`.
    pub fn one_line(&self) -> String {
        let mem = self
            .memory_bytes
            .map(crate::stats::fmt_bytes)
            .unwrap_or_else(|| "? memory".into());
        let load = |l: Option<f64>| l.map(|v| format!("{v:.2}")).unwrap_or_else(|| "?".into());
        let commit = match (&self.rkube_git_commit, self.rkube_git_dirty) {
            (Some(c), Some(true)) => {
                format!("commit {} + uncommitted changes", &c[..c.len().min(12)])
            }
            (Some(c), _) => format!("commit {}", &c[..c.len().min(12)]),
            (None, _) => "commit unknown".into(),
        };
        format!(
            "{} CPUs ({}), {} RAM, kernel {}, load average {} at start → {} at end, rkube {} build, {}",
            self.nproc,
            self.cpu_model.as_deref().unwrap_or("unknown CPU"),
            mem,
            self.kernel.as_deref().unwrap_or("?"),
            load(self.loadavg_1m_start),
            load(self.loadavg_1m_end),
            self.rkube_build,
            commit
        )
    }
}

fn read(path: &str) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

fn meminfo(field: &str) -> Option<u64> {
    let text = read("/proc/meminfo")?;
    let line = text
        .lines()
        .find(|l| l.starts_with(field) && l[field.len()..].starts_with(':'))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

fn loadavg() -> Option<f64> {
    read("/proc/loadavg")?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

fn open_files_limit() -> Option<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we own.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) };
    (rc == 0).then_some(lim.rlim_cur)
}

/// Raises this process's soft open-files limit to its hard limit (children
/// inherit it), so thousands of watch connections fit. Returns the new limit.
pub fn raise_open_files_limit() -> Option<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit read and write a struct we own.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return None;
        }
        if lim.rlim_cur < lim.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: lim.rlim_max,
                rlim_max: lim.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                return Some(raised.rlim_cur);
            }
        }
    }
    Some(lim.rlim_cur)
}

/// The rkube checkout: the current directory or an ancestor of the running
/// binary (`<repo>/target/<profile>/rkube`) that contains `.git`.
fn find_repo() -> Option<PathBuf> {
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Ok(exe) = std::env::current_exe() {
        candidates.extend(exe.ancestors().map(Path::to_path_buf));
    }
    if let Ok(cwd) = std::env::current_dir() {
        candidates.extend(cwd.ancestors().map(Path::to_path_buf));
    }
    candidates
        .into_iter()
        .find(|d| d.join(".git").exists() && d.join("crates").is_dir())
}

/// Whether tracked files of `repo` differ from its HEAD, changes under `reports` aside.
fn dirty(repo: &Path, reports: &Path) -> Option<bool> {
    let mut args = vec![
        "status".to_string(),
        "--porcelain".into(),
        "--untracked-files=no".into(),
    ];
    if let Some(rel) = inside(repo, reports) {
        args.extend([
            "--".into(),
            ".".into(),
            format!(":(exclude){}", rel.display()),
        ]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    git(repo, &args).map(|s| !s.is_empty())
}

/// `path` relative to `repo` when it lies inside it (both resolved; `path` may not exist yet).
fn inside(repo: &Path, path: &Path) -> Option<PathBuf> {
    let repo = repo.canonicalize().ok()?;
    let abs = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir().ok()?.join(path)
    };
    // The directory may not exist yet: resolve its nearest existing ancestor.
    let (base, rest) = abs.ancestors().find_map(|a| {
        a.canonicalize()
            .ok()
            .map(|c| (c, abs.strip_prefix(a).ok().map(Path::to_path_buf)))
    })?;
    let full = base.join(rest.unwrap_or_default());
    let rel = full.strip_prefix(&repo).ok()?.to_path_buf();
    (!rel.as_os_str().is_empty()).then_some(rel)
}

/// Runs a read-only git command in `repo`; trimmed stdout on success.
fn git(repo: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(args)
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(dir: &Path, args: &[&str]) {
        let ok = Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(args)
            .output()
            .map(|o| o.status.success());
        assert_eq!(ok.ok(), Some(true), "git {args:?}");
    }

    #[test]
    fn rewritten_reports_do_not_make_the_tree_dirty_but_other_changes_do() {
        let repo = tempfile::tempdir().expect("tempdir");
        let r = repo.path();
        run(r, &["init", "-q"]);
        std::fs::create_dir_all(r.join("bench-results")).expect("dir");
        std::fs::write(r.join("bench-results/list.json"), "{}").expect("write");
        std::fs::write(r.join("src.rs"), "fn main() {}").expect("write");
        run(r, &["add", "."]);
        run(
            r,
            &[
                "-c",
                "user.email=b@e",
                "-c",
                "user.name=bench",
                "commit",
                "-qm",
                "reports",
            ],
        );
        assert_eq!(dirty(r, &r.join("bench-results")), Some(false));
        std::fs::write(r.join("bench-results/list.json"), "{\"new\": 1}").expect("write");
        assert_eq!(
            dirty(r, &r.join("bench-results")),
            Some(false),
            "the run's own reports"
        );
        assert_eq!(
            dirty(r, Path::new("/elsewhere")),
            Some(true),
            "reports written elsewhere: a change"
        );
        std::fs::write(r.join("src.rs"), "fn main() { }").expect("write");
        assert_eq!(
            dirty(r, &r.join("bench-results")),
            Some(true),
            "a source change"
        );
        assert_eq!(
            inside(r, &r.join("not-yet/made")),
            Some(PathBuf::from("not-yet/made"))
        );
        assert_eq!(inside(r, Path::new("/elsewhere")), None);
    }
}
