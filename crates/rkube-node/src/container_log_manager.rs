//! Container log rotation (upstream kubelet's `pkg/kubelet/logs/container_log_manager.go`).
//!
//! Every `--container-log-monitor-interval`, the log of each running container whose size
//! reached `--container-log-max-size` is rotated, by up to `--container-log-max-workers`
//! containers at once:
//!
//! 1. leftovers of an earlier rotation go: `<log>.*.tmp` files, and an uncompressed rotated
//!    file whose `.gz` exists;
//! 2. the oldest rotated files go until `--container-log-max-files` − 2 are left (room for the
//!    file being rotated now and the live log);
//! 3. those left are compressed (`<log>.<timestamp>.gz`, written through `.tmp`);
//! 4. the live log is renamed `<log>.<YYYYMMDD-hhmmss>` (UTC) and the runtime is asked to
//!    reopen its log path (CRI `ReopenContainerLog`); when it cannot, the rename is undone.
//!
//! So the newest rotated file stays uncompressed until the next rotation (the runtime may
//! write its last records there while it reopens), and a container keeps at most
//! `--container-log-max-files` files. A live log that is missing is recreated by a reopen.
//! `kubectl logs` reads the live log; `kubectl logs -f` follows it across rotations.

use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::StreamExt;
use rkube_runtime::cri;

use crate::cri::{CriClient, RuntimeApi as _};
use crate::shutdown::Shutdown;

/// Suffix of compressed rotated logs.
pub const COMPRESS_SUFFIX: &str = ".gz";
/// Suffix of a compressed log being written.
pub const TMP_SUFFIX: &str = ".tmp";
/// Layout of the rotation timestamp (Go's `20060102-150405`).
pub const TIMESTAMP_FORMAT: &str = "%Y%m%d-%H%M%S";

/// What the rotation flags set (kubelet's `ContainerLogMaxSize`, `ContainerLogMaxFiles`,
/// `ContainerLogMonitorInterval`, `ContainerLogMaxWorkers`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogRotatePolicy {
    /// Bytes a live log may reach before it is rotated (default 10 Mi).
    pub max_size: u64,
    /// Files kept per container, the live log included (default 5, at least 2).
    pub max_files: usize,
    /// How often logs are checked (default 10 s, at least 3 s).
    pub monitor_interval: Duration,
    /// Containers rotated at once (default 1, at least 1).
    pub max_workers: usize,
}

impl Default for LogRotatePolicy {
    fn default() -> Self {
        Self {
            max_size: 10 * 1024 * 1024,
            max_files: 5,
            monitor_interval: Duration::from_secs(10),
            max_workers: 1,
        }
    }
}

impl LogRotatePolicy {
    /// Checks the policy as kubelet's configuration validation does.
    ///
    /// # Errors
    /// The message of the first rule broken, naming the flag.
    pub fn validate(&self) -> Result<(), String> {
        if self.max_files <= 1 {
            return Err(format!("invalid configuration: containerLogMaxFiles (--container-log-max-files) {}, must be more than 1", self.max_files));
        }
        if self.max_workers < 1 {
            return Err(format!("invalid configuration: containerLogMaxWorkers (--container-log-max-workers) {}, must be greater than or equal to 1", self.max_workers));
        }
        if self.monitor_interval < Duration::from_secs(3) {
            return Err(format!(
                "invalid configuration: containerLogMonitorInterval (--container-log-monitor-interval) {:?}, must be a positive time duration greater than or equal to 3s",
                self.monitor_interval
            ));
        }
        Ok(())
    }
}

/// Parses a `--container-log-max-size` quantity (`10Mi`, `500Ki`, `1G`) into bytes.
///
/// # Errors
/// Not a quantity, or negative.
pub fn parse_max_size(s: &str) -> Result<u64, String> {
    match rkube_scheduler::resources::parse_milli(s) {
        Some(milli) if milli >= 0 => {
            u64::try_from(milli / 1000).map_err(|_| format!("quantity {s:?} is too large"))
        }
        _ => Err(format!("invalid quantity {s:?}")),
    }
}

/// Rotates logs every `policy.monitor_interval` until `shutdown` fires.
pub async fn run(cri: CriClient, policy: LogRotatePolicy, mut shutdown: Shutdown) {
    loop {
        tokio::select! {
            _ = shutdown.wait() => return,
            _ = tokio::time::sleep(policy.monitor_interval) => {}
        }
        rotate_logs(&cri, &policy).await;
    }
}

/// One pass: every running container whose log is due is rotated (errors are logged and
/// the container is tried again on the next pass).
pub async fn rotate_logs(cri: &CriClient, policy: &LogRotatePolicy) {
    let containers = match cri.list_containers().await {
        Ok(c) => c,
        Err(err) => {
            tracing::warn!(%err, "container log rotation: listing containers failed");
            return;
        }
    };
    let running = containers
        .into_iter()
        .filter(|c| c.state == cri::ContainerState::ContainerRunning as i32);
    futures::stream::iter(running)
        .for_each_concurrent(policy.max_workers.max(1), |c| async move {
            if let Err(err) = rotate_if_due(cri, policy, &c.id).await {
                tracing::warn!(container = %c.id, %err, "container log rotation failed");
            }
        })
        .await;
}

async fn rotate_if_due(cri: &CriClient, policy: &LogRotatePolicy, id: &str) -> Result<(), String> {
    let status = cri.container_status(id).await.map_err(|e| e.to_string())?;
    if status.log_path.is_empty() {
        return Ok(());
    }
    let log = PathBuf::from(&status.log_path);
    match tokio::fs::metadata(&log).await {
        Ok(m) if m.len() < policy.max_size => Ok(()),
        Ok(_) => rotate(cri, policy, id, &log).await,
        // Removed by someone: the runtime opens the path again.
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => cri
            .reopen_container_log(id)
            .await
            .map_err(|e| e.to_string()),
        Err(err) => Err(format!("{}: {err}", log.display())),
    }
}

async fn rotate(
    cri: &CriClient,
    policy: &LogRotatePolicy,
    id: &str,
    log: &Path,
) -> Result<(), String> {
    let (log_owned, max_files) = (log.to_path_buf(), policy.max_files);
    // File work (compression above all) off the async threads.
    let rotated =
        tokio::task::spawn_blocking(move || prepare(&log_owned, max_files, chrono::Utc::now()))
            .await
            .map_err(|e| e.to_string())??;
    if let Err(err) = cri.reopen_container_log(id).await {
        if let Err(back) = std::fs::rename(&rotated, log) {
            tracing::warn!(from = %rotated.display(), %back, "undoing a log rotation failed");
        }
        return Err(format!("reopening {}: {err}", log.display()));
    }
    Ok(())
}

/// Steps 1–4 of the module docs on the file system, up to the rename of the live log; returns
/// the rotated file's path.
///
/// # Errors
/// An I/O error, with the path.
pub fn prepare(
    log: &Path,
    max_files: usize,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<PathBuf, String> {
    let io = |p: &Path, e: std::io::Error| format!("{}: {e}", p.display());
    let mut rotated = rotated_files(log).map_err(|e| io(log, e))?;
    // 1. Leftovers.
    rotated.retain(|p| {
        let name = p.to_string_lossy();
        let leftover = name.ends_with(TMP_SUFFIX)
            || (!name.ends_with(COMPRESS_SUFFIX)
                && Path::new(&format!("{name}{COMPRESS_SUFFIX}")).exists());
        if leftover {
            if let Err(err) = std::fs::remove_file(p) {
                tracing::warn!(path = %p.display(), %err, "removing a log leftover failed");
            }
        }
        !leftover
    });
    // 2. Oldest first (the timestamp sorts as text); keep max_files - 2.
    rotated.sort();
    let keep = max_files.saturating_sub(2);
    let excess = rotated.len().saturating_sub(keep);
    for p in rotated.drain(..excess) {
        std::fs::remove_file(&p).map_err(|e| io(&p, e))?;
    }
    // 3. Compress what is left.
    for p in &rotated {
        if !p.to_string_lossy().ends_with(COMPRESS_SUFFIX) {
            compress(p).map_err(|e| io(p, e))?;
        }
    }
    // 4. Rename the live log.
    let target = PathBuf::from(format!(
        "{}.{}",
        log.display(),
        now.format(TIMESTAMP_FORMAT)
    ));
    std::fs::rename(log, &target).map_err(|e| io(log, e))?;
    Ok(target)
}

/// `<log>.*` beside `log`.
fn rotated_files(log: &Path) -> std::io::Result<Vec<PathBuf>> {
    let (Some(dir), Some(name)) = (log.parent(), log.file_name()) else {
        return Ok(Vec::new());
    };
    let prefix = format!("{}.", name.to_string_lossy());
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_name().to_string_lossy().starts_with(&prefix) {
            out.push(entry.path());
        }
    }
    Ok(out)
}

/// `p` → `p.gz` through `p.gz.tmp`, then `p` is removed.
fn compress(p: &Path) -> std::io::Result<()> {
    let gz = PathBuf::from(format!("{}{COMPRESS_SUFFIX}", p.display()));
    let tmp = PathBuf::from(format!("{}{TMP_SUFFIX}", gz.display()));
    let result = (|| {
        let mut input = std::fs::File::open(p)?;
        let out = std::fs::File::create(&tmp)?;
        let mut encoder = flate2::write::GzEncoder::new(out, flate2::Compression::default());
        std::io::copy(&mut input, &mut encoder)?;
        encoder.finish()?.sync_all()?;
        std::fs::rename(&tmp, &gz)?;
        std::fs::remove_file(p)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn at(s: &str) -> chrono::DateTime<chrono::Utc> {
        chrono::DateTime::parse_from_rfc3339(s)
            .expect("time")
            .with_timezone(&chrono::Utc)
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .expect("dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn rotation_keeps_max_files_compresses_all_but_the_newest_and_clears_leftovers() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = dir.path().join("0.log");
        std::fs::write(&log, "first\n").expect("write");
        let r1 = prepare(&log, 3, at("2026-11-27T01:02:03Z")).expect("first rotation");
        assert_eq!(r1, dir.path().join("0.log.20261127-010203"));
        std::fs::write(&log, "second\n").expect("write");
        // A leftover of an interrupted compression.
        std::fs::write(dir.path().join("0.log.20261127-010203.gz.tmp"), "x").expect("write");
        prepare(&log, 3, at("2026-11-27T01:05:00Z")).expect("second rotation");
        assert_eq!(
            names(dir.path()),
            ["0.log.20261127-010203.gz", "0.log.20261127-010500"]
        );
        let mut text = String::new();
        flate2::read::GzDecoder::new(
            std::fs::File::open(dir.path().join("0.log.20261127-010203.gz")).expect("open"),
        )
        .read_to_string(&mut text)
        .expect("gunzip");
        assert_eq!(text, "first\n");
        std::fs::write(&log, "third\n").expect("write");
        prepare(&log, 3, at("2026-11-27T01:09:00Z")).expect("third rotation");
        // max 3 files: the live log (recreated by the runtime), one compressed, the newest.
        assert_eq!(
            names(dir.path()),
            ["0.log.20261127-010500.gz", "0.log.20261127-010900"]
        );
    }

    #[test]
    fn an_uncompressed_file_beside_its_compressed_copy_is_a_leftover() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = dir.path().join("1.log");
        std::fs::write(&log, "live\n").expect("write");
        std::fs::write(dir.path().join("1.log.20261127-000000"), "old\n").expect("write");
        std::fs::write(dir.path().join("1.log.20261127-000000.gz"), "").expect("write");
        // Another container's log in the same directory is not touched.
        std::fs::write(dir.path().join("10.log"), "other\n").expect("write");
        prepare(&log, 5, at("2026-11-27T00:01:00Z")).expect("rotation");
        assert_eq!(
            names(dir.path()),
            [
                "1.log.20261127-000000.gz",
                "1.log.20261127-000100",
                "10.log"
            ]
        );
    }

    #[test]
    fn policy_rules_and_sizes_follow_kubelet() {
        assert!(LogRotatePolicy::default().validate().is_ok());
        let one = LogRotatePolicy {
            max_files: 1,
            ..Default::default()
        };
        assert!(one
            .validate()
            .unwrap_err()
            .contains("--container-log-max-files"));
        let fast = LogRotatePolicy {
            monitor_interval: Duration::from_secs(1),
            ..Default::default()
        };
        assert!(fast
            .validate()
            .unwrap_err()
            .contains("--container-log-monitor-interval"));
        let none = LogRotatePolicy {
            max_workers: 0,
            ..Default::default()
        };
        assert!(none
            .validate()
            .unwrap_err()
            .contains("--container-log-max-workers"));
        assert_eq!(parse_max_size("10Mi"), Ok(10 * 1024 * 1024));
        assert_eq!(parse_max_size("1k"), Ok(1000));
        assert_eq!(parse_max_size("300"), Ok(300));
        assert!(parse_max_size("-1Mi").is_err());
        assert!(parse_max_size("ten").is_err());
    }
}
