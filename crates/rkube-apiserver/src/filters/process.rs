//! Process metrics read from `/proc` on every scrape, with the names of the
//! Prometheus Go client's process collector that kube-apiserver exports:
//! `process_resident_memory_bytes`, `process_virtual_memory_bytes`,
//! `process_cpu_seconds_total`, `process_open_fds`, `process_max_fds`,
//! `process_start_time_seconds`. On a system without `/proc` they are omitted.

use std::fmt;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

/// One reading of the process's resource use.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProcessStats {
    /// Resident set size, bytes.
    pub resident_memory_bytes: f64,
    /// Virtual memory size, bytes.
    pub virtual_memory_bytes: f64,
    /// User + system CPU time, seconds.
    pub cpu_seconds: f64,
    /// Start time, seconds since the Unix epoch.
    pub start_time_seconds: f64,
    /// Open file descriptors.
    pub open_fds: f64,
    /// The soft limit on file descriptors.
    pub max_fds: f64,
}

impl ProcessStats {
    /// Reads `/proc/self`. `None` when `/proc` is unreadable.
    pub fn read() -> Option<ProcessStats> {
        let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        let boot_time = std::fs::read_to_string("/proc/stat")
            .ok()?
            .lines()
            .find_map(|l| l.strip_prefix("btime ").and_then(|v| v.trim().parse::<f64>().ok()))?;
        // SAFETY: sysconf has no preconditions.
        let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
        // SAFETY: as above.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as f64;
        let mut stats = parse_stat(&stat, ticks, page, boot_time)?;
        stats.open_fds = std::fs::read_dir("/proc/self/fd").map(|d| d.count() as f64).unwrap_or(0.0);
        stats.max_fds = std::fs::read_to_string("/proc/self/limits")
            .ok()
            .and_then(|l| {
                l.lines().find(|l| l.starts_with("Max open files")).and_then(|l| {
                    l.trim_start_matches("Max open files").split_whitespace().next().and_then(|v| v.parse::<f64>().ok())
                })
            })
            .unwrap_or(0.0);
        Some(stats)
    }
}

/// Parses `/proc/self/stat` (fields after the parenthesised command name:
/// utime 14, stime 15, starttime 22, vsize 23, rss 24, 1-based).
fn parse_stat(stat: &str, ticks: f64, page: f64, boot_time: f64) -> Option<ProcessStats> {
    let after = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = after.split_whitespace().collect();
    // f[0] is field 3 (state).
    let field = |n: usize| f.get(n - 3).and_then(|v| v.parse::<f64>().ok());
    if ticks <= 0.0 {
        return None;
    }
    Some(ProcessStats {
        cpu_seconds: (field(14)? + field(15)?) / ticks,
        start_time_seconds: boot_time + field(22)? / ticks,
        virtual_memory_bytes: field(23)?,
        resident_memory_bytes: field(24)? * page,
        open_fds: 0.0,
        max_fds: 0.0,
    })
}

/// The collector registered by [`crate::filters::metrics::ApiserverMetrics`].
#[derive(Debug, Default)]
pub struct ProcessCollector;

impl ProcessCollector {
    /// A collector reading `/proc/self` on each scrape.
    pub fn new() -> Self {
        ProcessCollector
    }
}

fn gauge(encoder: &mut DescriptorEncoder, name: &str, help: &str, v: f64) -> fmt::Result {
    let g = ConstGauge::new(v);
    let e = encoder.encode_descriptor(name, help, None, g.metric_type())?;
    g.encode(e)
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        let Some(s) = ProcessStats::read() else {
            return Ok(());
        };
        let cpu = ConstCounter::new(s.cpu_seconds);
        let e = encoder.encode_descriptor("process_cpu_seconds", "Total user and system CPU time spent in seconds.", None, cpu.metric_type())?;
        cpu.encode(e)?;
        gauge(&mut encoder, "process_max_fds", "Maximum number of open file descriptors.", s.max_fds)?;
        gauge(&mut encoder, "process_open_fds", "Number of open file descriptors.", s.open_fds)?;
        gauge(&mut encoder, "process_resident_memory_bytes", "Resident memory size in bytes.", s.resident_memory_bytes)?;
        gauge(
            &mut encoder,
            "process_start_time_seconds",
            "Start time of the process since unix epoch in seconds.",
            s.start_time_seconds,
        )?;
        gauge(&mut encoder, "process_virtual_memory_bytes", "Virtual memory size in bytes.", s.virtual_memory_bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_read_after_the_command_name() {
        // A command name with spaces and parentheses must not shift the fields.
        let stat = "1234 (a b) c) S 1 1 1 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 4 0 1000 123456789 2500 18446744073709551615";
        let s = parse_stat(stat, 100.0, 4096.0, 1_700_000_000.0).unwrap();
        assert_eq!(s.cpu_seconds, 3.0);
        assert_eq!(s.start_time_seconds, 1_700_000_010.0);
        assert_eq!(s.virtual_memory_bytes, 123456789.0);
        assert_eq!(s.resident_memory_bytes, 2500.0 * 4096.0);
    }

    #[test]
    fn this_process_has_memory_and_fds() {
        let s = ProcessStats::read().expect("/proc is readable on Linux");
        assert!(s.resident_memory_bytes > 0.0);
        assert!(s.open_fds >= 1.0);
        assert!(s.start_time_seconds > 1_000_000_000.0);
    }
}
