//! Resource accounting of containers and of the host (CRI `ContainerStats`,
//! `ListContainerStats`, `PodSandboxStats`, `ListPodSandboxStats`; upstream CRI `api.proto`,
//! and the node figures kubelet's summary API takes from cAdvisor's root cgroup).
//!
//! A container with a cgroup of its own ([`crate::cgroups`], when the runtime may make one) is
//! measured from the kernel's accounting of that cgroup: cumulative CPU time, memory usage,
//! working set (usage less inactive file pages, as cAdvisor computes it), rss and page faults,
//! and `available_bytes` (limit less working set) when it has a memory limit.
//!
//! Otherwise (no usable cgroup hierarchy, or a runtime without privileges) rkube runtime reads
//! `/proc`: it runs a container as a host process leading its own process group (see
//! [`crate::process`]), so a container's usage is the sum over its processes: every process of
//! the group, plus any descendant of the main process that left the group (`setsid`,
//! `setpgid`).
//!
//! - CPU: `utime + stime + cutime + cstime` of each live process, in clock ticks converted to
//!   nanoseconds. Counting the children's times of live processes keeps the work of reaped
//!   children (a shell's `sleep`, a pipeline) in the cumulative figure; a process still alive is
//!   not in its parent's `cutime` yet, so nothing is counted twice.
//! - Memory: the resident set (`statm` resident pages) of each process. Without a cgroup there is
//!   no page cache attributable to the container, so `working_set_bytes`, `usage_bytes` and
//!   `rss_bytes` are all that sum (pages shared between the processes count once per process).
//!
//! A sandbox's figures are the sums of its running containers' figures.
//!
//! `usage_nano_cores` is the rate between two samples of the same container or sandbox, as
//! containerd computes it: the first call for an object has none.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use procfs::{Current as _, CurrentSI as _};

use crate::cgroups::{Cgroup, CgroupUsage};
use crate::cri;
use crate::runtime::{Result, Runtime, RuntimeError};
use crate::state::ContainerRecord;

/// Usage of one process tree at one instant.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TreeUsage {
    /// Cumulative CPU time, ns (user + system, including reaped children).
    pub cpu_ns: u64,
    /// Resident memory, bytes.
    pub rss_bytes: u64,
    /// Number of live processes counted.
    pub processes: u64,
}

impl std::ops::AddAssign for TreeUsage {
    fn add_assign(&mut self, other: Self) {
        self.cpu_ns += other.cpu_ns;
        self.rss_bytes += other.rss_bytes;
        self.processes += other.processes;
    }
}

/// One process as read from `/proc/<pid>/stat`.
#[derive(Debug, Clone, Copy)]
struct Proc {
    pid: i32,
    ppid: i32,
    pgrp: i32,
    cpu_ticks: u64,
    rss_pages: u64,
}

/// Every live process of the host (processes that vanish while being read are skipped).
fn snapshot() -> Vec<Proc> {
    let Ok(all) = procfs::process::all_processes() else { return Vec::new() };
    all.filter_map(Result::ok)
        .filter_map(|p| p.stat().ok())
        .filter(|s| s.state != 'Z')
        .map(|s| Proc {
            pid: s.pid,
            ppid: s.ppid,
            pgrp: s.pgrp,
            cpu_ticks: s.utime + s.stime + u64::try_from(s.cutime.max(0) + s.cstime.max(0)).unwrap_or(0),
            rss_pages: s.rss,
        })
        .collect()
}

/// Clock ticks to nanoseconds.
fn ticks_to_ns(ticks: u64) -> u64 {
    let hz = procfs::ticks_per_second().max(1);
    ticks.saturating_mul(1_000_000_000 / hz)
}

/// Usage of the tree of each leader in `leaders` (a container's main pid, which is also its
/// process group id), from one reading of `/proc`. A leader with no live process has zero usage.
pub fn tree_usage(leaders: &[i32]) -> HashMap<i32, TreeUsage> {
    let procs = snapshot();
    let page = procfs::page_size();
    let mut children: HashMap<i32, Vec<usize>> = HashMap::new();
    for (i, p) in procs.iter().enumerate() {
        children.entry(p.ppid).or_default().push(i);
    }
    leaders
        .iter()
        .map(|&leader| {
            let mut members: HashSet<usize> =
                procs.iter().enumerate().filter(|(_, p)| p.pgrp == leader || p.pid == leader).map(|(i, _)| i).collect();
            let mut queue: Vec<i32> = members.iter().map(|&i| procs[i].pid).collect();
            while let Some(pid) = queue.pop() {
                for &c in children.get(&pid).map(Vec::as_slice).unwrap_or(&[]) {
                    if members.insert(c) {
                        queue.push(procs[c].pid);
                    }
                }
            }
            let mut usage = TreeUsage::default();
            for i in members {
                usage += TreeUsage {
                    cpu_ns: ticks_to_ns(procs[i].cpu_ticks),
                    rss_bytes: procs[i].rss_pages.saturating_mul(page),
                    processes: 1,
                };
            }
            (leader, usage)
        })
        .collect()
}

/// The host's usage, as kubelet's summary reports the node (cAdvisor's root cgroup, read here
/// from `/proc/stat` and `/proc/meminfo`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HostUsage {
    /// Cumulative non-idle CPU time of all CPUs (user, nice, system, irq, softirq, steal), ns.
    pub cpu_ns: u64,
    /// `MemTotal - MemFree`, bytes.
    pub memory_usage_bytes: u64,
    /// Usage less `Inactive(file)`, bytes (the working set as cAdvisor computes it).
    pub memory_working_set_bytes: u64,
    /// `AnonPages`, bytes.
    pub memory_rss_bytes: u64,
    /// `MemAvailable`, bytes.
    pub memory_available_bytes: u64,
    /// `MemTotal`, bytes.
    pub memory_total_bytes: u64,
}

/// Reads the host's CPU and memory usage.
///
/// # Errors
/// `/proc/stat` or `/proc/meminfo` cannot be read or parsed.
pub fn host_usage() -> Result<HostUsage, procfs::ProcError> {
    let stat = procfs::KernelStats::current()?;
    let t = &stat.total;
    // CpuTime's fields are in ticks (its *_ms helpers convert); steal, irq and softirq are optional.
    let busy = t.user + t.nice + t.system + t.irq.unwrap_or(0) + t.softirq.unwrap_or(0) + t.steal.unwrap_or(0);
    let mem = procfs::Meminfo::current()?;
    let usage = mem.mem_total.saturating_sub(mem.mem_free);
    Ok(HostUsage {
        cpu_ns: ticks_to_ns(busy),
        memory_usage_bytes: usage,
        memory_working_set_bytes: usage.saturating_sub(mem.inactive_file.unwrap_or(0)),
        memory_rss_bytes: mem.anon_pages.unwrap_or(0),
        memory_available_bytes: mem.mem_available.unwrap_or(mem.mem_free),
        memory_total_bytes: mem.mem_total,
    })
}

/// When the host booted, seconds since the epoch (`btime` of `/proc/stat`); `None` when
/// unreadable.
pub fn boot_time_secs() -> Option<u64> {
    procfs::boot_time_secs().ok()
}

/// The previous CPU sample of each container or sandbox, for `usage_nano_cores`.
#[derive(Debug, Default)]
pub struct RateTracker {
    last: Mutex<HashMap<String, (i64, u64)>>,
}

impl RateTracker {
    /// Records `(at_ns, cpu_ns)` for `id` and returns the rate since the previous sample of `id`
    /// in nanocores (ns of CPU per s), `None` for the first sample or a counter that went back.
    pub fn rate(&self, id: &str, at_ns: i64, cpu_ns: u64) -> Option<u64> {
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        let prev = last.insert(id.to_string(), (at_ns, cpu_ns));
        let (t0, c0) = prev?;
        let dt = u64::try_from(at_ns.checked_sub(t0)?).ok().filter(|d| *d > 0)?;
        let dc = cpu_ns.checked_sub(c0)?;
        Some(u64::try_from(u128::from(dc) * 1_000_000_000 / u128::from(dt)).unwrap_or(u64::MAX))
    }

    /// Forgets ids not in `keep` (removed containers and sandboxes).
    pub fn retain(&self, keep: &HashSet<String>) {
        self.last.lock().unwrap_or_else(|p| p.into_inner()).retain(|k, _| keep.contains(k));
    }
}

fn u64v(value: u64) -> Option<cri::UInt64Value> {
    Some(cri::UInt64Value { value })
}

/// CRI `CpuUsage` at `at_ns`.
pub fn cpu_usage(at_ns: i64, cpu_ns: u64, nano_cores: Option<u64>) -> cri::CpuUsage {
    cri::CpuUsage { timestamp: at_ns, usage_core_nano_seconds: u64v(cpu_ns), usage_nano_cores: nano_cores.and_then(u64v) }
}

/// CRI `MemoryUsage` at `at_ns` of a tree whose resident set is `rss` bytes (working set, usage
/// and rss are all that figure; see the module docs).
pub fn memory_usage(at_ns: i64, rss: u64) -> cri::MemoryUsage {
    cri::MemoryUsage {
        timestamp: at_ns,
        working_set_bytes: u64v(rss),
        usage_bytes: u64v(rss),
        rss_bytes: u64v(rss),
        ..Default::default()
    }
}

/// CRI `MemoryUsage` at `at_ns` from a cgroup's figures; `available_bytes` (limit less working
/// set, as containerd reports it) only with a limit.
pub fn cgroup_memory_usage(at_ns: i64, u: &CgroupUsage) -> cri::MemoryUsage {
    cri::MemoryUsage {
        timestamp: at_ns,
        working_set_bytes: u64v(u.working_set_bytes),
        available_bytes: u.limit_bytes.and_then(|l| u64v(l.saturating_sub(u.working_set_bytes))),
        usage_bytes: u64v(u.usage_bytes),
        rss_bytes: u64v(u.rss_bytes),
        page_faults: u64v(u.page_faults),
        major_page_faults: u64v(u.major_page_faults),
    }
}

/// The sum of containers' `MemoryUsage` at `at_ns`: working set, usage and rss are 0 without
/// containers; the other fields stay unset unless a container has them.
fn sum_memory(at_ns: i64, containers: &[cri::ContainerStats]) -> cri::MemoryUsage {
    let sum = |pick: fn(&cri::MemoryUsage) -> &Option<cri::UInt64Value>| {
        let values: Vec<u64> =
            containers.iter().filter_map(|c| c.memory.as_ref()).filter_map(|m| pick(m).as_ref().map(|v| v.value)).collect();
        if values.is_empty() {
            None
        } else {
            u64v(values.iter().sum())
        }
    };
    let or_zero = |v: Option<cri::UInt64Value>| v.or_else(|| u64v(0));
    cri::MemoryUsage {
        timestamp: at_ns,
        working_set_bytes: or_zero(sum(|m| &m.working_set_bytes)),
        available_bytes: sum(|m| &m.available_bytes),
        usage_bytes: or_zero(sum(|m| &m.usage_bytes)),
        rss_bytes: or_zero(sum(|m| &m.rss_bytes)),
        page_faults: sum(|m| &m.page_faults),
        major_page_faults: sum(|m| &m.major_page_faults),
    }
}

/// A running container's identity and main pid, copied out of the records.
struct Target {
    id: String,
    sandbox_id: String,
    attributes: cri::ContainerAttributes,
    pid: i32,
    cgroup: Option<Cgroup>,
}

impl Runtime {
    fn running_targets(&self, keep: impl Fn(&ContainerRecord) -> bool) -> Vec<Target> {
        let st = self.lock();
        let mut list: Vec<(&ContainerRecord, i32)> = st
            .containers
            .values()
            .filter(|c| c.state == cri::ContainerState::ContainerRunning && keep(c))
            .filter_map(|c| c.pid.map(|pid| (c, pid)))
            .collect();
        list.sort_by(|a, b| a.0.created_at.cmp(&b.0.created_at).then_with(|| a.0.id.cmp(&b.0.id)));
        list.into_iter()
            .map(|(c, pid)| Target {
                id: c.id.clone(),
                sandbox_id: c.sandbox_id.clone(),
                attributes: cri::ContainerAttributes {
                    id: c.id.clone(),
                    metadata: Some(c.metadata.clone()),
                    labels: c.labels.clone(),
                    annotations: c.annotations.clone(),
                },
                pid,
                cgroup: c.cgroup.clone(),
            })
            .collect()
    }

    /// Stats of each target, in the targets' order: from its cgroup when it has one (and it
    /// can be read), else from one reading of `/proc` for all the others.
    fn measure(&self, targets: &[Target]) -> Vec<cri::ContainerStats> {
        let from_cgroups: Vec<Option<CgroupUsage>> =
            targets.iter().map(|t| t.cgroup.as_ref().and_then(|cg| cg.usage().ok())).collect();
        let pids: Vec<i32> = targets.iter().zip(&from_cgroups).filter(|(_, u)| u.is_none()).map(|(t, _)| t.pid).collect();
        let usage = if pids.is_empty() { HashMap::new() } else { tree_usage(&pids) };
        let now = self.now_ns();
        targets
            .iter()
            .zip(from_cgroups)
            .map(|(t, cg)| {
                let (cpu_ns, memory) = match cg {
                    Some(u) => (u.cpu_ns, cgroup_memory_usage(now, &u)),
                    None => {
                        let u = usage.get(&t.pid).copied().unwrap_or_default();
                        (u.cpu_ns, memory_usage(now, u.rss_bytes))
                    }
                };
                cri::ContainerStats {
                    attributes: Some(t.attributes.clone()),
                    cpu: Some(cpu_usage(now, cpu_ns, self.rates.rate(&t.id, now, cpu_ns))),
                    memory: Some(memory),
                    writable_layer: None,
                    swap: None,
                }
            })
            .collect()
    }

    fn forget_removed(&self) {
        let st = self.lock();
        let keep: HashSet<String> = st.containers.keys().chain(st.sandboxes.keys()).cloned().collect();
        drop(st);
        self.rates.retain(&keep);
    }

    /// CRI `ContainerStats` of container `id`: usage while it runs, none (only attributes) once
    /// it has exited.
    ///
    /// # Errors
    /// `NotFound` for an unknown container.
    pub fn container_stats(&self, id: &str) -> Result<cri::ContainerStats> {
        let targets = self.running_targets(|c| c.id == id);
        if let Some(stats) = self.measure(&targets).pop() {
            return Ok(stats);
        }
        let st = self.lock();
        let c = st.containers.get(id).ok_or_else(|| RuntimeError::NotFound { kind: "container", id: id.to_string() })?;
        Ok(cri::ContainerStats {
            attributes: Some(cri::ContainerAttributes {
                id: c.id.clone(),
                metadata: Some(c.metadata.clone()),
                labels: c.labels.clone(),
                annotations: c.annotations.clone(),
            }),
            ..Default::default()
        })
    }

    /// CRI `ListContainerStats`: every running container matching the filter (id, sandbox id,
    /// labels), oldest first.
    pub fn list_container_stats(&self, filter: Option<&cri::ContainerStatsFilter>) -> Vec<cri::ContainerStats> {
        self.forget_removed();
        let targets = self.running_targets(|c| {
            filter.is_none_or(|f| {
                (f.id.is_empty() || c.id == f.id)
                    && (f.pod_sandbox_id.is_empty() || c.sandbox_id == f.pod_sandbox_id)
                    && f.label_selector.iter().all(|(k, v)| c.labels.get(k) == Some(v))
            })
        });
        self.measure(&targets)
    }

    /// CRI `PodSandboxStats` of sandbox `id`: the sum of its running containers, with each
    /// container's stats.
    ///
    /// # Errors
    /// `NotFound` for an unknown sandbox.
    pub fn pod_sandbox_stats(&self, id: &str) -> Result<cri::PodSandboxStats> {
        let filter = cri::PodSandboxStatsFilter { id: id.to_string(), ..Default::default() };
        self.list_pod_sandbox_stats(Some(&filter))
            .pop()
            .ok_or_else(|| RuntimeError::NotFound { kind: "pod sandbox", id: id.to_string() })
    }

    /// CRI `ListPodSandboxStats`: every sandbox matching the filter (id, labels), oldest first.
    pub fn list_pod_sandbox_stats(&self, filter: Option<&cri::PodSandboxStatsFilter>) -> Vec<cri::PodSandboxStats> {
        self.forget_removed();
        let sandboxes: Vec<cri::PodSandboxAttributes> = {
            let st = self.lock();
            let mut list: Vec<&crate::state::SandboxRecord> = st
                .sandboxes
                .values()
                .filter(|s| {
                    filter.is_none_or(|f| {
                        (f.id.is_empty() || s.id == f.id) && f.label_selector.iter().all(|(k, v)| s.labels.get(k) == Some(v))
                    })
                })
                .collect();
            list.sort_by(|a, b| a.created_at.cmp(&b.created_at).then_with(|| a.id.cmp(&b.id)));
            list.into_iter()
                .map(|s| cri::PodSandboxAttributes {
                    id: s.id.clone(),
                    metadata: Some(s.metadata.clone()),
                    labels: s.labels.clone(),
                    annotations: s.annotations.clone(),
                })
                .collect()
        };
        let wanted: HashSet<&str> = sandboxes.iter().map(|s| s.id.as_str()).collect();
        let targets = self.running_targets(|c| wanted.contains(c.sandbox_id.as_str()));
        let measured = self.measure(&targets);
        let now = self.now_ns();
        sandboxes
            .into_iter()
            .map(|attrs| {
                let containers: Vec<cri::ContainerStats> = targets
                    .iter()
                    .zip(&measured)
                    .filter(|(t, _)| t.sandbox_id == attrs.id)
                    .map(|(_, s)| s.clone())
                    .collect();
                let value = |v: &Option<cri::UInt64Value>| v.as_ref().map_or(0, |v| v.value);
                let cpu_ns: u64 = containers.iter().map(|c| c.cpu.as_ref().map_or(0, |u| value(&u.usage_core_nano_seconds))).sum();
                let memory = sum_memory(now, &containers);
                let rate = self.rates.rate(&attrs.id, now, cpu_ns);
                cri::PodSandboxStats {
                    attributes: Some(attrs),
                    linux: Some(cri::LinuxPodSandboxStats {
                        cpu: Some(cpu_usage(now, cpu_ns, rate)),
                        memory: Some(memory),
                        network: None,
                        process: Some(cri::ProcessUsage { timestamp: now, process_count: None }),
                        containers,
                    }),
                    windows: None,
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_needs_two_samples_and_is_cpu_ns_per_second() {
        let r = RateTracker::default();
        assert_eq!(r.rate("a", 1_000_000_000, 0), None);
        assert_eq!(r.rate("a", 3_000_000_000, 1_000_000_000), Some(500_000_000));
        assert_eq!(r.rate("a", 4_000_000_000, 500), None, "a counter that went back gives no rate");
        r.retain(&HashSet::new());
        assert_eq!(r.rate("a", 5_000_000_000, 600), None, "forgotten ids start over");
    }

    #[test]
    fn host_usage_reads_cpu_and_memory_of_this_machine() {
        let h = host_usage().expect("/proc readable");
        assert!(h.cpu_ns > 0 && h.memory_total_bytes > 0);
        assert!(h.memory_working_set_bytes <= h.memory_usage_bytes && h.memory_usage_bytes <= h.memory_total_bytes);
    }

    #[test]
    fn tree_usage_counts_a_burning_process_group_and_its_children() {
        use std::os::unix::process::CommandExt as _;
        // A shell in its own group that burns CPU in a child (which stays in the group).
        let mut child = std::process::Command::new("sh")
            .args(["-c", "sh -c 'while :; do :; done' & wait"])
            .process_group(0)
            .spawn()
            .expect("sh");
        let pid = i32::try_from(child.id()).expect("pid");
        std::thread::sleep(std::time::Duration::from_millis(700));
        let u = tree_usage(&[pid]);
        crate::process::signal_group(pid, libc::SIGKILL);
        let _ = child.wait();
        let u = u[&pid];
        assert!(u.processes >= 2, "{u:?}");
        assert!(u.cpu_ns >= 50_000_000, "burned at least 0.05 s of CPU: {u:?}");
        assert!(u.rss_bytes > 0, "{u:?}");
        // The killed grandchild is reparented and reaped by someone else: it may
        // still be exiting for a moment after its leader is reaped.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let left = tree_usage(&[pid])[&pid];
            if left == TreeUsage::default() {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "a dead group has no usage: {left:?}");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}
