//! A cgroup of its own for each container, when the host lets the runtime make one: the
//! container's processes join it before they exec, its CPU and memory figures come from the
//! kernel's accounting of it (as containerd and cAdvisor read them), `memory_limit_in_bytes` of
//! the CRI request becomes its memory limit (the kernel's OOM killer then ends the container,
//! reported as `OOMKilled`), and it is removed with the container.
//!
//! Layout: `<hierarchy root>/rkube/<pod uid>/<container id>`, in the unified (v2) hierarchy when
//! it offers the `memory` controller and lets the runtime hand it down, otherwise in both the
//! `cpuacct` and `memory` v1 hierarchies. Without a usable hierarchy (no cgroupfs, read-only, not root) the runtime keeps
//! reading `/proc` per process group ([`crate::stats`]); [`choose`] decides which, from the
//! mounts of `/proc/self/mountinfo` and a probe that makes the `rkube` directory.
//!
//! Files read (kernel `Documentation/admin-guide/cgroup-v1/{cpuacct,memory}.rst` and
//! `cgroup-v2.rst`; the figures as cAdvisor's `container/libcontainer/handler.go` derives them):
//!
//! | figure | v1 | v2 |
//! | --- | --- | --- |
//! | CPU time, ns | `cpuacct.usage` | `cpu.stat` `usage_usec` × 1000 |
//! | memory usage, bytes | `memory.usage_in_bytes` | `memory.current` |
//! | working set | usage − `total_inactive_file` | usage − `inactive_file` |
//! | rss | `total_rss` | `anon` |
//! | page faults | `total_pgfault`, `total_pgmajfault` | `pgfault`, `pgmajfault` |
//! | limit | `memory.limit_in_bytes` | `memory.max` |
//! | OOM kills | `memory.oom_control` `oom_kill` | `memory.events` `oom_kill` |

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};

/// The directory made under each hierarchy's root for the runtime's cgroups.
pub const PARENT: &str = "rkube";

/// A v1 memory limit at or above this is "no limit" (the kernel shows `PAGE_COUNTER_MAX` pages).
const V1_UNLIMITED: u64 = 1 << 62;

/// Where container usage comes from, decided once per runtime.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Accounting {
    /// cgroup v2: `parent` is the `rkube` directory of the unified hierarchy.
    V2 {
        /// `<cgroup2 mount>/rkube`.
        parent: PathBuf,
    },
    /// cgroup v1: the `rkube` directories of the `cpuacct` and `memory` hierarchies.
    V1 {
        /// `<cpuacct mount>/rkube`.
        cpuacct: PathBuf,
        /// `<memory mount>/rkube`.
        memory: PathBuf,
    },
    /// No usable hierarchy: usage is summed over each container's processes in `/proc`.
    Proc {
        /// Why no cgroup is used (logged once).
        reason: String,
    },
}

/// One cgroup hierarchy as [`choose`] needs it (a mount of `/proc/self/mountinfo`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// `cgroup` (v1) or `cgroup2`; other types are ignored.
    pub fs_type: String,
    /// Super-block options: for a v1 hierarchy, its controllers (`cpuacct`, `memory`, ...).
    pub super_options: Vec<String>,
    /// The directory the `rkube` parent is made in: the hierarchy's root (its mount point), as
    /// kubelet's default `--cgroup-root=/` puts `kubepods` there. (Not the runtime's own cgroup:
    /// a cgroup some supervisor made for the runtime would then hold child cgroups the
    /// supervisor does not expect, and a v2 cgroup with processes cannot delegate controllers.)
    pub base: PathBuf,
}

/// Picks the accounting: v2 when a `cgroup2` mount lists `memory` in its base's
/// `cgroup.controllers` (read through `controllers`) and `usable` accepts it; else v1
/// when a `cpuacct` and a `memory` hierarchy are both mounted and `usable`; else `/proc` with the
/// reason. `usable(dir)` is the runtime's probe: it makes `dir/rkube` (and for v2 hands the
/// controllers down to it) and answers whether it could, so a non-root runtime, a read-only
/// cgroupfs, or a v2 cgroup that may not delegate falls back.
pub fn choose(
    mounts: &[Mount],
    controllers: impl Fn(&Path) -> Option<String>,
    usable: impl Fn(&Path) -> bool,
) -> Accounting {
    let mut why = Vec::new();
    match mounts.iter().find(|m| m.fs_type == "cgroup2") {
        Some(m) => {
            let has_memory = controllers(&m.base).is_some_and(|c| c.split_whitespace().any(|c| c == "memory"));
            if !has_memory {
                why.push(format!("the unified hierarchy at {} has no memory controller", m.base.display()));
            } else if usable(&m.base) {
                return Accounting::V2 { parent: m.base.join(PARENT) };
            } else {
                why.push(format!("cannot make {} with the memory controller", m.base.join(PARENT).display()));
            }
        }
        None => why.push("no cgroup2 mount".to_string()),
    }
    let v1 = |controller: &str| {
        mounts.iter().find(|m| m.fs_type == "cgroup" && m.super_options.iter().any(|o| o == controller))
    };
    match (v1("cpuacct"), v1("memory")) {
        (Some(cpuacct), Some(memory)) => {
            let unusable: Vec<String> = [cpuacct, memory]
                .iter()
                .filter(|m| !usable(&m.base))
                .map(|m| format!("cannot make {}", m.base.join(PARENT).display()))
                .collect();
            if unusable.is_empty() {
                return Accounting::V1 { cpuacct: cpuacct.base.join(PARENT), memory: memory.base.join(PARENT) };
            }
            why.extend(unusable);
        }
        _ => why.push("no cpuacct and memory v1 hierarchies".to_string()),
    }
    Accounting::Proc { reason: why.join("; ") }
}

/// [`choose`] on this host: the cgroup mounts of `/proc/self/mountinfo`, and a probe that makes
/// the `rkube` directory (and, in the unified hierarchy, enables `memory` for its children).
/// `enabled: false` gives `/proc`.
pub fn detect(enabled: bool) -> Accounting {
    if !enabled {
        return Accounting::Proc { reason: "cgroups are turned off in the runtime's config".to_string() };
    }
    let mounts: Vec<Mount> = match procfs::process::Process::myself().and_then(|p| p.mountinfo()) {
        Ok(infos) => infos
            .0
            .into_iter()
            .map(|m| Mount { fs_type: m.fs_type, super_options: m.super_options.into_keys().collect(), base: m.mount_point })
            .collect(),
        Err(err) => return Accounting::Proc { reason: format!("reading /proc/self/mountinfo: {err}") },
    };
    choose(&mounts, |dir| std::fs::read_to_string(dir.join("cgroup.controllers")).ok(), |dir| {
        let parent = dir.join(PARENT);
        let made = std::fs::create_dir_all(&parent).is_ok() && parent.join("cgroup.procs").exists();
        let v2 = dir.join("cgroup.subtree_control").exists();
        made && (!v2 || (enable_controllers(dir).is_ok() && enable_controllers(&parent).is_ok()))
    })
}

/// A path component for a pod uid or container id: the value itself when it is a plain name,
/// else `fallback` (an id the runtime made).
fn component<'a>(value: &'a str, fallback: &'a str) -> &'a str {
    let plain = !value.is_empty() && value != "." && value != ".." && !value.contains('/') && !value.contains('\0');
    if plain {
        value
    } else {
        fallback
    }
}

impl Accounting {
    /// Whether containers get cgroups.
    pub fn is_cgroup(&self) -> bool {
        !matches!(self, Self::Proc { .. })
    }

    /// The cgroup of a pod (`rkube/<pod uid>`; the sandbox id when the uid is not a plain
    /// name), `None` under `/proc` accounting. Not created here.
    pub fn pod(&self, pod_uid: &str, sandbox_id: &str) -> Option<Cgroup> {
        let name = component(pod_uid, sandbox_id);
        self.at(Path::new(name))
    }

    /// The cgroup of a container (`rkube/<pod uid>/<container id>`). Not created here.
    pub fn container(&self, pod_uid: &str, sandbox_id: &str, container_id: &str) -> Option<Cgroup> {
        let rel = Path::new(component(pod_uid, sandbox_id)).join(component(container_id, "container"));
        self.at(&rel)
    }

    fn at(&self, rel: &Path) -> Option<Cgroup> {
        match self {
            Self::V2 { parent } => Some(Cgroup::V2 { dir: parent.join(rel) }),
            Self::V1 { cpuacct, memory } => Some(Cgroup::V1 { cpuacct: cpuacct.join(rel), memory: memory.join(rel) }),
            Self::Proc { .. } => None,
        }
    }

    /// Makes the cgroup of a container (and of its pod) and sets its memory limit when
    /// `memory_limit` is positive (bytes; CRI `LinuxContainerResources.memory_limit_in_bytes`),
    /// with no swap allowed on top of it.
    ///
    /// # Errors
    /// A directory cannot be made, a v2 controller cannot be enabled for the children, or the
    /// limit cannot be written.
    pub fn create(&self, pod_uid: &str, sandbox_id: &str, container_id: &str, memory_limit: i64) -> io::Result<Option<Cgroup>> {
        let Some(cg) = self.container(pod_uid, sandbox_id, container_id) else { return Ok(None) };
        if let Self::V2 { parent } = self {
            // Each level above the leaf hands `memory` (and `cpu`, when offered) down.
            let root = parent.parent().unwrap_or(parent);
            let pod = parent.join(component(pod_uid, sandbox_id));
            std::fs::create_dir_all(&pod)?;
            for level in [root, parent.as_path(), pod.as_path()] {
                enable_controllers(level)?;
            }
        }
        for dir in cg.dirs() {
            std::fs::create_dir_all(dir)?;
        }
        if memory_limit > 0 {
            let (limit, no_swap, swap_value) = match &cg {
                Cgroup::V2 { dir } => (dir.join("memory.max"), dir.join("memory.swap.max"), "0".to_string()),
                Cgroup::V1 { memory, .. } => {
                    (memory.join("memory.limit_in_bytes"), memory.join("memory.memsw.limit_in_bytes"), memory_limit.to_string())
                }
            };
            std::fs::write(limit, memory_limit.to_string())?;
            // No swap beyond the limit, as kubelet asks when swap is off (its `ConfigureNoSwap`);
            // a kernel without swap accounting has no such file.
            if no_swap.exists() {
                std::fs::write(no_swap, swap_value)?;
            }
        }
        Ok(Some(cg))
    }
}

/// How old an empty cgroup under `rkube/` must be before a starting runtime removes it: younger
/// ones may belong to another runtime that is about to use them.
pub const STALE_AFTER: std::time::Duration = std::time::Duration::from_secs(600);

impl Accounting {
    /// Removes what runtimes that were killed without a shutdown (SIGKILL) left under `rkube/`:
    /// container cgroups without processes and pod cgroups without containers, once older than
    /// `stale_after` (by the directory's modification time). A cgroup that still holds a process
    /// or a child refuses `rmdir` and stays. Returns how many directories went.
    pub fn sweep_stale(&self, stale_after: std::time::Duration) -> usize {
        let parents: Vec<&Path> = match self {
            Self::V2 { parent } => vec![parent],
            Self::V1 { cpuacct, memory } => vec![cpuacct, memory],
            Self::Proc { .. } => return 0,
        };
        let subdirs = |dir: &Path| -> Vec<PathBuf> {
            std::fs::read_dir(dir)
                .map(|entries| entries.filter_map(Result::ok).map(|e| e.path()).filter(|p| p.is_dir()).collect())
                .unwrap_or_default()
        };
        let stale = |dir: &Path| {
            std::fs::metadata(dir).and_then(|m| m.modified()).is_ok_and(|t| t.elapsed().is_ok_and(|age| age >= stale_after))
        };
        let mut removed = 0;
        for parent in parents {
            for pod in subdirs(parent) {
                // Judged before its children go (removing one makes the directory look new).
                let pod_stale = stale(&pod);
                for leaf in subdirs(&pod) {
                    if stale(&leaf) && std::fs::remove_dir(&leaf).is_ok() {
                        removed += 1;
                    }
                }
                if pod_stale && std::fs::remove_dir(&pod).is_ok() {
                    removed += 1;
                }
            }
        }
        removed
    }
}

/// Adds `memory` (and `cpu` when available) to `dir/cgroup.subtree_control`.
fn enable_controllers(dir: &Path) -> io::Result<()> {
    let available = std::fs::read_to_string(dir.join("cgroup.controllers"))?;
    let enabled = std::fs::read_to_string(dir.join("cgroup.subtree_control"))?;
    let want: Vec<String> = ["memory", "cpu"]
        .iter()
        .filter(|c| available.split_whitespace().any(|a| a == **c) && !enabled.split_whitespace().any(|e| e == **c))
        .map(|c| format!("+{c}"))
        .collect();
    if want.is_empty() {
        return Ok(());
    }
    std::fs::write(dir.join("cgroup.subtree_control"), want.join(" "))
}

/// One cgroup (a pod's or a container's) in whichever hierarchy the runtime uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cgroup {
    /// A directory of the unified hierarchy.
    V2 {
        /// The cgroup's directory.
        dir: PathBuf,
    },
    /// The same relative path in the v1 `cpuacct` and `memory` hierarchies.
    V1 {
        /// The directory in the `cpuacct` hierarchy.
        cpuacct: PathBuf,
        /// The directory in the `memory` hierarchy.
        memory: PathBuf,
    },
}

/// Usage of one cgroup at one instant (see the module docs for the files).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CgroupUsage {
    /// Cumulative CPU time, ns.
    pub cpu_ns: u64,
    /// Memory charged to the cgroup (anonymous + page cache + kernel), bytes.
    pub usage_bytes: u64,
    /// Usage less inactive file pages, bytes.
    pub working_set_bytes: u64,
    /// Anonymous memory and swap cache, bytes.
    pub rss_bytes: u64,
    /// Page faults, count.
    pub page_faults: u64,
    /// Major page faults, count.
    pub major_page_faults: u64,
    /// The memory limit, bytes; `None` when unlimited.
    pub limit_bytes: Option<u64>,
}

fn read_u64(path: &Path) -> io::Result<u64> {
    let text = std::fs::read_to_string(path)?;
    text.trim().parse().map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("{}: {e}", path.display())))
}

/// `key value` lines (`memory.stat`, `cpu.stat`, `memory.events`, `memory.oom_control`).
fn read_keyed(path: &Path) -> io::Result<HashMap<String, u64>> {
    let text = std::fs::read_to_string(path)?;
    Ok(parse_keyed(&text))
}

fn parse_keyed(text: &str) -> HashMap<String, u64> {
    text.lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(' ')?;
            Some((k.to_string(), v.trim().parse().ok()?))
        })
        .collect()
}

impl Cgroup {
    /// Its directories (one for v2, two for v1).
    pub fn dirs(&self) -> Vec<&Path> {
        match self {
            Self::V2 { dir } => vec![dir.as_path()],
            Self::V1 { cpuacct, memory } => vec![cpuacct.as_path(), memory.as_path()],
        }
    }

    /// The `cgroup.procs` file of each directory: a process writing `0` there joins the cgroup.
    pub fn procs_files(&self) -> Vec<PathBuf> {
        self.dirs().iter().map(|d| d.join("cgroup.procs")).collect()
    }

    /// Reads the CPU and memory figures.
    ///
    /// # Errors
    /// A file is missing (the cgroup was removed) or malformed.
    pub fn usage(&self) -> io::Result<CgroupUsage> {
        match self {
            Self::V2 { dir } => {
                let cpu = read_keyed(&dir.join("cpu.stat"))?;
                let usage = read_u64(&dir.join("memory.current"))?;
                let stat = read_keyed(&dir.join("memory.stat"))?;
                let max = std::fs::read_to_string(dir.join("memory.max"))?;
                Ok(figures(
                    cpu.get("usage_usec").copied().unwrap_or(0).saturating_mul(1000),
                    usage,
                    &stat,
                    ["inactive_file", "anon", "pgfault", "pgmajfault"],
                    max.trim().parse().ok(),
                ))
            }
            Self::V1 { cpuacct, memory } => {
                let cpu_ns = read_u64(&cpuacct.join("cpuacct.usage"))?;
                let usage = read_u64(&memory.join("memory.usage_in_bytes"))?;
                let stat = read_keyed(&memory.join("memory.stat"))?;
                let limit = read_u64(&memory.join("memory.limit_in_bytes")).ok().filter(|l| *l < V1_UNLIMITED);
                Ok(figures(cpu_ns, usage, &stat, ["total_inactive_file", "total_rss", "total_pgfault", "total_pgmajfault"], limit))
            }
        }
    }

    /// Whether the kernel's OOM killer has killed a process of this cgroup.
    pub fn oom_killed(&self) -> bool {
        let (file, key) = match self {
            Self::V2 { dir } => (dir.join("memory.events"), "oom_kill"),
            Self::V1 { memory, .. } => (memory.join("memory.oom_control"), "oom_kill"),
        };
        read_keyed(&file).ok().and_then(|m| m.get(key).copied()).is_some_and(|n| n > 0)
    }

    /// The processes in the cgroup now (an unreadable cgroup has none).
    pub fn pids(&self) -> Vec<i32> {
        let Some(first) = self.procs_files().into_iter().next() else { return Vec::new() };
        std::fs::read_to_string(first)
            .map(|t| t.lines().filter_map(|l| l.trim().parse().ok()).collect())
            .unwrap_or_default()
    }

    /// SIGKILLs every process in the cgroup (those that left the container's process group too).
    pub fn kill_all(&self) {
        for pid in self.pids() {
            // SAFETY: kill(2) with a pid read from the cgroup; no memory is touched.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }

    /// Removes the cgroup's directories (`rmdir`). A directory already gone is fine.
    ///
    /// # Errors
    /// `EBUSY`/`ENOTEMPTY` while processes or child cgroups are left; other I/O errors.
    pub fn remove(&self) -> io::Result<()> {
        for dir in self.dirs() {
            match std::fs::remove_dir(dir) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
        Ok(())
    }

    /// Whether it holds child cgroups (a pod's cgroup with a container's left in it).
    pub fn has_children(&self) -> bool {
        self.dirs().iter().any(|d| {
            std::fs::read_dir(d).is_ok_and(|mut entries| entries.any(|e| e.is_ok_and(|e| e.path().is_dir())))
        })
    }

    /// Whether any of its directories still exists.
    pub fn exists(&self) -> bool {
        self.dirs().iter().any(|d| d.exists())
    }
}

/// How long [`destroy`] waits for a cgroup's processes to be gone before giving up.
const DESTROY_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Kills whatever is left in each cgroup of `cgroups` (in order: containers before their pod),
/// then removes it, retrying while the kernel still counts exiting processes. A cgroup that
/// cannot be removed in [`DESTROY_WAIT`] is logged and left.
pub async fn destroy(cgroups: Vec<Cgroup>) {
    for cg in cgroups {
        let deadline = tokio::time::Instant::now() + DESTROY_WAIT;
        loop {
            cg.kill_all();
            match cg.remove() {
                Ok(()) => break,
                // A pod cgroup that still holds another container's cgroup stays.
                Err(_) if cg.has_children() => break,
                Err(e) if tokio::time::Instant::now() >= deadline => {
                    tracing::warn!(cgroup = ?cg, error = %e, "cannot remove cgroup");
                    break;
                }
                Err(_) => tokio::time::sleep(std::time::Duration::from_millis(20)).await,
            }
        }
    }
}

/// Builds the usage from the raw readings; `keys` names inactive file, rss and the two fault
/// counters in this version's `memory.stat`.
fn figures(cpu_ns: u64, usage: u64, stat: &HashMap<String, u64>, keys: [&str; 4], limit: Option<u64>) -> CgroupUsage {
    let get = |k: &str| stat.get(k).copied().unwrap_or(0);
    CgroupUsage {
        cpu_ns,
        usage_bytes: usage,
        working_set_bytes: usage.saturating_sub(get(keys[0])),
        rss_bytes: get(keys[1]),
        page_faults: get(keys[2]),
        major_page_faults: get(keys[3]),
        limit_bytes: limit,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mount(fs_type: &str, base: &str, options: &[&str]) -> Mount {
        Mount { fs_type: fs_type.into(), base: base.into(), super_options: options.iter().map(|o| (*o).to_string()).collect() }
    }

    /// A hybrid host (the memory hierarchy mounted at a path of its own).
    fn hybrid() -> Vec<Mount> {
        vec![
            mount("proc", "/proc", &[]),
            mount("cgroup", "/sys/fs/cgroup/cpu,cpuacct", &["rw", "cpu", "cpuacct"]),
            mount("cgroup", "/sys/fs/cgroup/memory/svc", &["rw", "memory"]),
            mount("cgroup2", "/sys/fs/cgroup/unified", &["rw"]),
        ]
    }

    #[test]
    fn unified_hierarchy_with_memory_controller_is_preferred() {
        let got = choose(&hybrid(), |_| Some("cpu io memory pids".into()), |_| true);
        assert_eq!(got, Accounting::V2 { parent: "/sys/fs/cgroup/unified/rkube".into() });
    }

    #[test]
    fn unified_hierarchy_without_memory_falls_back_to_v1_cpuacct_and_memory() {
        let got = choose(&hybrid(), |_| Some("hugetlb".into()), |_| true);
        assert_eq!(
            got,
            Accounting::V1 { cpuacct: "/sys/fs/cgroup/cpu,cpuacct/rkube".into(), memory: "/sys/fs/cgroup/memory/svc/rkube".into() }
        );
    }

    #[test]
    fn without_permission_to_make_the_parent_usage_comes_from_proc() {
        let got = choose(&hybrid(), |_| Some("cpu memory".into()), |_| false);
        let Accounting::Proc { reason } = got else { panic!("expected /proc, got {got:?}") };
        assert!(reason.contains("cannot make /sys/fs/cgroup/unified/rkube"), "{reason}");
        assert!(reason.contains("cannot make /sys/fs/cgroup/memory/svc/rkube"), "{reason}");
    }

    #[test]
    fn a_missing_v1_controller_and_no_unified_hierarchy_means_proc() {
        let mounts = vec![mount("cgroup", "/sys/fs/cgroup/memory", &["memory"])];
        let got = choose(&mounts, |_| None, |_| true);
        assert!(matches!(&got, Accounting::Proc { reason } if reason.contains("no cgroup2 mount")), "{got:?}");
        assert!(!got.is_cgroup() && got.container("uid", "sb", "c").is_none());
    }

    #[test]
    fn container_cgroups_nest_under_the_pod_uid_or_the_sandbox_id() {
        let acc = Accounting::V2 { parent: "/cg/rkube".into() };
        assert_eq!(acc.container("u1", "sb", "c1"), Some(Cgroup::V2 { dir: "/cg/rkube/u1/c1".into() }));
        assert_eq!(acc.pod("../x", "sb"), Some(Cgroup::V2 { dir: "/cg/rkube/sb".into() }), "a uid that is not a plain name");
        assert_eq!(acc.pod("", "sb"), Some(Cgroup::V2 { dir: "/cg/rkube/sb".into() }));
    }

    #[test]
    fn a_sweep_removes_only_old_empty_cgroups() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let parent = tmp.path().join(PARENT);
        let old = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
        let age = |dir: &Path| {
            let f = std::fs::File::open(dir).expect("open dir");
            f.set_modified(old).expect("set mtime");
        };
        for leaf in ["gone-pod/c1", "busy-pod/c2", "busy-pod/c3", "young-pod/c4"] {
            std::fs::create_dir_all(parent.join(leaf)).expect("mkdir");
        }
        // A cgroup with a process refuses rmdir: here, a directory with a file in it.
        std::fs::write(parent.join("busy-pod/c2/cgroup.procs"), "42\n").expect("file");
        for dir in ["gone-pod/c1", "busy-pod/c2", "busy-pod/c3", "gone-pod", "busy-pod"] {
            age(&parent.join(dir));
        }
        let acc = Accounting::V2 { parent: parent.clone() };
        assert_eq!(acc.sweep_stale(std::time::Duration::from_secs(600)), 3, "c1, its pod, c3");
        let left: Vec<bool> = ["gone-pod", "busy-pod/c2", "busy-pod/c3", "young-pod/c4"].iter().map(|d| parent.join(d).exists()).collect();
        assert_eq!(left, [false, true, false, true]);
        assert_eq!(Accounting::Proc { reason: String::new() }.sweep_stale(std::time::Duration::ZERO), 0);
    }

    #[test]
    fn working_set_is_usage_less_inactive_file() {
        let stat = parse_keyed("total_inactive_file 300\ntotal_rss 500\ntotal_pgfault 7\ntotal_pgmajfault 1\ncache 9\n");
        let u = figures(42, 1000, &stat, ["total_inactive_file", "total_rss", "total_pgfault", "total_pgmajfault"], None);
        assert_eq!(
            u,
            CgroupUsage {
                cpu_ns: 42,
                usage_bytes: 1000,
                working_set_bytes: 700,
                rss_bytes: 500,
                page_faults: 7,
                major_page_faults: 1,
                limit_bytes: None
            }
        );
        let stat = parse_keyed("inactive_file 2000\nanon 5\n");
        assert_eq!(figures(0, 1000, &stat, ["inactive_file", "anon", "pgfault", "pgmajfault"], Some(4096)).working_set_bytes, 0);
    }
}
