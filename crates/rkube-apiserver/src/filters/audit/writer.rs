//! The audit log backend (upstream's `log` plugin behind the `batch`
//! buffer): events go through a bounded channel to one writer thread that
//! appends JSON lines to `--audit-log-path` (or stdout for `-`), rotating the
//! file like lumberjack (`--audit-log-maxsize` MB, default 100 when 0;
//! `--audit-log-maxbackup` files kept, 0 = all; `--audit-log-maxage` days,
//! 0 = forever). Backups are named `<name>-<UTC time>.<ext>`, e.g.
//! `audit-2024-05-01T12-00-00.000.log`.
//!
//! In `batch` mode (rkube's default) a request never waits for the log: when
//! the buffer (`--audit-log-batch-buffer-size`) is full the event is dropped
//! and `apiserver_audit_error_total{plugin="log"}` counts it. In `blocking`
//! mode (upstream's default) the request waits for room in the buffer.
//! Write failures are counted the same way and logged.

use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use tokio::sync::{mpsc, oneshot};

use crate::filters::audit::event::Event;
use crate::filters::metrics::ApiserverMetrics;

/// The `plugin` label of the log backend.
pub const PLUGIN: &str = "log";

/// lumberjack's size limit when `--audit-log-maxsize` is 0.
const DEFAULT_MAX_SIZE_MB: u64 = 100;

/// Errors opening the audit log.
#[derive(Debug, thiserror::Error)]
pub enum WriterError {
    /// The file or its directory could not be created.
    #[error("opening audit log {path}: {source}")]
    Open {
        /// The file.
        path: String,
        /// Why.
        source: io::Error,
    },
    /// The writer thread could not be started.
    #[error("starting the audit writer: {0}")]
    Thread(io::Error),
}

/// Where events are written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuditSink {
    /// Standard output (`--audit-log-path=-`).
    Stdout,
    /// A file with rotation.
    File(RotationConfig),
}

/// File and rotation settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RotationConfig {
    /// The log file.
    pub path: PathBuf,
    /// Rotate before the file would exceed this many bytes.
    pub max_bytes: u64,
    /// Backups kept (0 = all).
    pub max_backups: usize,
    /// Backups older than this are removed (`None` = kept).
    pub max_age: Option<Duration>,
}

impl RotationConfig {
    /// From the flags: `max_size_mb` (0 = 100 MB), `max_backups`, `max_age_days` (0 = forever).
    pub fn from_flags(path: PathBuf, max_size_mb: u64, max_backups: usize, max_age_days: u64) -> Self {
        let mb = if max_size_mb == 0 { DEFAULT_MAX_SIZE_MB } else { max_size_mb };
        RotationConfig {
            path,
            max_bytes: mb * 1024 * 1024,
            max_backups,
            max_age: (max_age_days > 0).then(|| Duration::from_secs(max_age_days * 24 * 3600)),
        }
    }
}

/// How a full buffer is handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuditMode {
    /// Drop the event and count it (never blocks a request).
    Batch,
    /// Wait for room in the buffer.
    Blocking,
}

/// An append-only file rotated by size (lumberjack's behaviour).
pub struct RotatingFile {
    cfg: RotationConfig,
    file: BufWriter<File>,
    size: u64,
}

fn open_append(path: &Path) -> io::Result<File> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let mut opts = OpenOptions::new();
    opts.create(true).append(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    opts.open(path)
}

impl RotatingFile {
    /// Opens (creating it and its directory) `cfg.path` for appending.
    pub fn open(cfg: RotationConfig) -> io::Result<Self> {
        let file = open_append(&cfg.path)?;
        let size = file.metadata().map(|m| m.len()).unwrap_or(0);
        Ok(RotatingFile { cfg, file: BufWriter::new(file), size })
    }

    /// Appends `line`, rotating first when it would not fit.
    pub fn write_line(&mut self, line: &[u8]) -> io::Result<()> {
        if self.size > 0 && self.size + line.len() as u64 > self.cfg.max_bytes {
            self.rotate()?;
        }
        self.file.write_all(line)?;
        self.size += line.len() as u64;
        Ok(())
    }

    /// Flushes buffered lines to the file.
    pub fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }

    fn name_parts(&self) -> (PathBuf, String, String) {
        let dir = self.cfg.path.parent().map(Path::to_path_buf).unwrap_or_default();
        let file = self.cfg.path.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
        let (stem, ext) = match file.rfind('.') {
            Some(i) if i > 0 => (file[..i].to_string(), file[i..].to_string()),
            _ => (file.clone(), String::new()),
        };
        (dir, stem, ext)
    }

    fn backup_path(&self) -> PathBuf {
        let (dir, stem, ext) = self.name_parts();
        let mut t = chrono::Utc::now();
        loop {
            let p = dir.join(format!("{stem}-{}{ext}", t.format("%Y-%m-%dT%H-%M-%S%.3f")));
            if !p.exists() {
                return p;
            }
            t += chrono::Duration::milliseconds(1);
        }
    }

    fn rotate(&mut self) -> io::Result<()> {
        self.file.flush()?;
        let backup = self.backup_path();
        std::fs::rename(&self.cfg.path, &backup)?;
        self.file = BufWriter::new(open_append(&self.cfg.path)?);
        self.size = 0;
        self.remove_old_backups();
        Ok(())
    }

    /// The backups of this file, newest first.
    pub fn backups(&self) -> Vec<PathBuf> {
        let (dir, stem, ext) = self.name_parts();
        let dir = if dir.as_os_str().is_empty() { PathBuf::from(".") } else { dir };
        let prefix = format!("{stem}-");
        let mut found: Vec<(String, PathBuf)> = std::fs::read_dir(&dir)
            .map(|rd| {
                rd.filter_map(Result::ok)
                    .filter_map(|e| {
                        let name = e.file_name().to_string_lossy().into_owned();
                        let ts = name.strip_prefix(&prefix)?.strip_suffix(ext.as_str())?.to_string();
                        chrono::NaiveDateTime::parse_from_str(&ts, "%Y-%m-%dT%H-%M-%S%.3f").ok()?;
                        Some((ts, e.path()))
                    })
                    .collect()
            })
            .unwrap_or_default();
        found.sort_by(|a, b| b.0.cmp(&a.0));
        found.into_iter().map(|(_, p)| p).collect()
    }

    fn remove_old_backups(&self) {
        let backups = self.backups();
        let now = SystemTime::now();
        for (i, p) in backups.iter().enumerate() {
            let too_many = self.cfg.max_backups > 0 && i >= self.cfg.max_backups;
            let too_old = self.cfg.max_age.is_some_and(|age| {
                std::fs::metadata(p)
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|m| now.duration_since(m).ok())
                    .is_some_and(|d| d > age)
            });
            if too_many || too_old {
                if let Err(e) = std::fs::remove_file(p) {
                    tracing::warn!(path = %p.display(), error = %e, "removing an old audit log backup");
                }
            }
        }
    }
}

type LineSink = Box<dyn FnMut(&[u8]) -> io::Result<()> + Send>;
type FlushSink = Box<dyn FnMut() -> io::Result<()> + Send>;

enum Msg {
    Event(Box<Event>),
    Flush(oneshot::Sender<()>),
}

/// The running backend: a bounded buffer and its writer thread.
pub struct AuditBackend {
    tx: mpsc::Sender<Msg>,
    mode: AuditMode,
    metrics: Arc<ApiserverMetrics>,
    pause: Arc<RwLock<()>>,
}

impl std::fmt::Debug for AuditBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuditBackend").field("mode", &self.mode).finish_non_exhaustive()
    }
}

impl AuditBackend {
    /// Opens `sink` (errors now, not at the first event) and starts the
    /// writer thread with a buffer of `buffer_size` events.
    pub fn start(
        sink: AuditSink,
        buffer_size: usize,
        mode: AuditMode,
        metrics: Arc<ApiserverMetrics>,
    ) -> Result<Self, WriterError> {
        let mut out: LineSink;
        let mut flush: FlushSink;
        match sink {
            AuditSink::Stdout => {
                out = Box::new(|line| io::stdout().lock().write_all(line));
                flush = Box::new(|| io::stdout().lock().flush());
            }
            AuditSink::File(cfg) => {
                let path = cfg.path.display().to_string();
                let file = RotatingFile::open(cfg).map_err(|source| WriterError::Open { path, source })?;
                let file = Arc::new(std::sync::Mutex::new(file));
                let f2 = file.clone();
                out = Box::new(move |line| file.lock().unwrap_or_else(|p| p.into_inner()).write_line(line));
                flush = Box::new(move || f2.lock().unwrap_or_else(|p| p.into_inner()).flush());
            }
        }
        let (tx, mut rx) = mpsc::channel::<Msg>(buffer_size.max(1));
        let pause = Arc::new(RwLock::new(()));
        let (m, p) = (metrics.clone(), pause.clone());
        std::thread::Builder::new()
            .name("audit-log-writer".into())
            .spawn(move || {
                while let Some(first) = rx.blocking_recv() {
                    let _held = p.read().unwrap_or_else(|e| e.into_inner());
                    let mut acks = Vec::new();
                    let mut next = Some(first);
                    while let Some(msg) = next.take() {
                        match msg {
                            Msg::Event(ev) => {
                                if let Err(e) = out(&ev.to_line()) {
                                    m.audit_error(PLUGIN);
                                    tracing::error!(error = %e, "writing the audit log");
                                }
                            }
                            Msg::Flush(ack) => acks.push(ack),
                        }
                        next = rx.try_recv().ok();
                    }
                    if let Err(e) = flush() {
                        tracing::error!(error = %e, "flushing the audit log");
                    }
                    for a in acks {
                        let _ = a.send(());
                    }
                }
            })
            .map_err(WriterError::Thread)?;
        Ok(AuditBackend { tx, mode, metrics, pause })
    }

    /// Hands `ev` to the writer (see the module docs for a full buffer).
    pub async fn process(&self, ev: Event) {
        self.metrics.audit_event();
        match self.mode {
            AuditMode::Batch => self.try_process(ev),
            AuditMode::Blocking => {
                if self.tx.send(Msg::Event(Box::new(ev))).await.is_err() {
                    self.metrics.audit_error(PLUGIN);
                }
            }
        }
    }

    /// Hands `ev` to the writer without waiting; a full buffer drops it.
    pub fn try_process(&self, ev: Event) {
        if let Err(e) = self.tx.try_send(Msg::Event(Box::new(ev))) {
            self.metrics.audit_error(PLUGIN);
            if matches!(e, mpsc::error::TrySendError::Full(_)) {
                tracing::warn!("audit buffer queue blocked: audit event dropped");
            }
        }
    }

    /// Waits until every event handed over before this call is written and flushed.
    pub async fn flush(&self) {
        let (ack, done) = oneshot::channel();
        if self.tx.send(Msg::Flush(ack)).await.is_ok() {
            let _ = done.await;
        }
    }

    /// Holds the writer until the guard is dropped (events queue up, then
    /// drop once the buffer is full): for maintenance and tests of overflow.
    pub fn pause(&self) -> PauseGuard {
        let lock = self.pause.clone();
        // The writer takes the read side per batch; waiting for write access
        // blocks at most one batch.
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let (held_tx, held_rx) = std::sync::mpsc::channel::<()>();
        std::thread::spawn(move || {
            let _g = lock.write().unwrap_or_else(|e| e.into_inner());
            let _ = held_tx.send(());
            let _ = rx.recv();
        });
        let _ = held_rx.recv();
        PauseGuard { _release: tx }
    }
}

/// Returned by [`AuditBackend::pause`]; the writer resumes when it is dropped.
pub struct PauseGuard {
    _release: std::sync::mpsc::Sender<()>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(dir: &Path, max_bytes: u64, max_backups: usize) -> RotationConfig {
        RotationConfig { path: dir.join("audit.log"), max_bytes, max_backups, max_age: None }
    }

    #[test]
    fn file_rotates_by_size_and_keeps_max_backups() {
        let dir = tempfile::tempdir().unwrap();
        let mut f = RotatingFile::open(cfg(dir.path(), 100, 2)).unwrap();
        let line = [b'x'; 39];
        for _ in 0..12 {
            f.write_line(&line).unwrap();
        }
        f.flush().unwrap();
        // 2 lines (78 bytes) fit per file: 12 lines → 5 rotations, 2 backups kept.
        let backups = f.backups();
        assert_eq!(backups.len(), 2, "{backups:?}");
        for b in &backups {
            assert_eq!(std::fs::metadata(b).unwrap().len(), 78);
            let name = b.file_name().unwrap().to_string_lossy().into_owned();
            assert!(name.starts_with("audit-") && name.ends_with(".log"), "{name}");
        }
        assert_eq!(std::fs::metadata(dir.path().join("audit.log")).unwrap().len(), 78);
    }

    #[test]
    fn flags_default_to_lumberjack_sizes() {
        let c = RotationConfig::from_flags("/x/a.log".into(), 0, 0, 0);
        assert_eq!(c.max_bytes, 100 * 1024 * 1024);
        assert_eq!(c.max_age, None);
        assert_eq!(RotationConfig::from_flags("/x/a.log".into(), 2, 3, 1).max_age, Some(Duration::from_secs(86400)));
    }

    #[test]
    fn unopenable_paths_fail_at_start() {
        let dir = tempfile::tempdir().unwrap();
        let blocker = dir.path().join("file");
        std::fs::write(&blocker, b"").unwrap();
        let sink = AuditSink::File(cfg(&blocker.join("sub"), 10, 0));
        let err = AuditBackend::start(sink, 10, AuditMode::Batch, Arc::new(ApiserverMetrics::new())).unwrap_err();
        assert!(err.to_string().starts_with("opening audit log"), "{err}");
    }
}
