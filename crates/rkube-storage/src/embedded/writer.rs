//! The single writer thread of the embedded store, with group commit.
//!
//! Async callers send a [`Command`] over an unbounded channel and await a
//! oneshot reply, so no redb I/O ever runs on a runtime worker. The thread
//! takes every command queued while the previous commit was being fsynced
//! (up to [`MAX_BATCH`]) and applies the writes in one redb transaction:
//! each write still gets its own revision and its own guard, but the batch
//! pays one fsync. Replies go out only after the commit (and the watch
//! publication) — an acknowledged write is on disk.
//!
//! **Faults** (a full disk): a failed commit answers its batch with the
//! error ([`crate::StorageError::NoSpace`] for `ENOSPC`) and marks the store
//! faulted ([`WriteHealth`], read by `/readyz/etcd`). If redb latched the
//! handle, the thread reopens the database at once, so reads go on and the
//! next write can succeed without a restart. While faulted, writes are tried
//! on disk at most once per [`FAULT_RETRY`] (a failed try can cost a
//! reopen, which re-reads the file); in between they fail fast with the
//! fault's error. The first commit that succeeds (a client write, or the
//! probe `/readyz` triggers) clears the fault. Nothing acknowledged is lost:
//! a failed batch was never committed, and the reopen brings the file back
//! to its last commit.

use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};

use super::store::{WriteOp, WriteOutcome};
use super::watchable::{Hub, WatchableStore};
use crate::{Result, Revision, StorageError};

/// Most writes committed in one redb transaction.
pub(crate) const MAX_BATCH: usize = 512;

/// While faulted, the disk is tried again at most this often.
pub(crate) const FAULT_RETRY: Duration = Duration::from_secs(1);

/// Whether the last commit failed for a reason of the disk's (shared
/// between the writer thread and [`crate::Storage::write_health`]).
#[derive(Debug, Default)]
pub(crate) struct WriteHealth {
    /// The failure and when the disk was last tried; `None` when healthy.
    fault: Mutex<Option<(StorageError, Instant)>>,
}

impl WriteHealth {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<(StorageError, Instant)>> {
        self.fault.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The current fault, if any.
    pub fn fault(&self) -> Option<StorageError> {
        self.lock().as_ref().map(|(e, _)| e.clone())
    }

    /// The fault's error when the disk was tried less than [`FAULT_RETRY`] ago.
    fn fail_fast(&self) -> Option<StorageError> {
        self.lock().as_ref().filter(|(_, tried)| tried.elapsed() < FAULT_RETRY).map(|(e, _)| e.clone())
    }

    fn set(&self, err: StorageError) {
        *self.lock() = Some((err, Instant::now()));
    }

    fn clear(&self) {
        if self.lock().take().is_some() {
            tracing::info!("embedded store: writes succeed again");
        }
    }
}

/// A request to the writer thread.
enum Command {
    /// A guarded write.
    Write { op: WriteOp, reply: oneshot::Sender<Result<WriteOutcome>> },
    /// A compaction.
    Compact { revision: Revision, reply: oneshot::Sender<Result<()>> },
    /// While faulted: try the disk again (see [`Writer::probe`]).
    Probe { reply: oneshot::Sender<Result<()>> },
}

/// Handle to the writer thread. Dropping it stops the thread after the
/// queued commands and waits for it (so the database file is released).
pub(crate) struct Writer {
    tx: Option<mpsc::UnboundedSender<Command>>,
    thread: Option<JoinHandle<()>>,
    health: Arc<WriteHealth>,
}

fn stopped() -> StorageError {
    StorageError::Unavailable("embedded store writer stopped".into())
}

impl Writer {
    /// Starts the writer thread owning `store`; it closes `hub` when it stops.
    pub fn spawn(store: WatchableStore, hub: Arc<Hub>) -> Result<Writer> {
        let (tx, rx) = mpsc::unbounded_channel();
        let health = Arc::new(WriteHealth::default());
        let mut writer = WriterThread { store, health: health.clone() };
        let thread = std::thread::Builder::new()
            .name("rkube-storage-writer".into())
            .spawn(move || writer.run(rx, hub))
            .map_err(|e| StorageError::Internal(format!("spawn writer thread: {e}")))?;
        Ok(Writer { tx: Some(tx), thread: Some(thread), health })
    }

    /// `Ok` when the last commit succeeded; while faulted, asks the thread
    /// to try the disk (at most once per [`FAULT_RETRY`]) and answers its
    /// verdict.
    pub async fn probe(&self) -> Result<()> {
        if self.health.fault().is_none() {
            return Ok(());
        }
        let (reply, rx) = oneshot::channel();
        self.tx.as_ref().ok_or_else(stopped)?.send(Command::Probe { reply }).map_err(|_| stopped())?;
        rx.await.map_err(|_| stopped())?
    }

    /// Applies one write; resolves after its batch is durably committed.
    pub async fn write(&self, op: WriteOp) -> Result<WriteOutcome> {
        let (reply, rx) = oneshot::channel();
        self.tx.as_ref().ok_or_else(stopped)?.send(Command::Write { op, reply }).map_err(|_| stopped())?;
        rx.await.map_err(|_| stopped())?
    }

    /// Compacts at `revision`; resolves after the compaction commits.
    pub async fn compact(&self, revision: Revision) -> Result<()> {
        let (reply, rx) = oneshot::channel();
        self.tx.as_ref().ok_or_else(stopped)?.send(Command::Compact { revision, reply }).map_err(|_| stopped())?;
        rx.await.map_err(|_| stopped())?
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.tx.take();
        if let Some(thread) = self.thread.take() {
            if thread.join().is_err() {
                tracing::error!("embedded store writer thread panicked");
            }
        }
    }
}

/// The state the writer thread owns.
struct WriterThread {
    store: WatchableStore,
    health: Arc<WriteHealth>,
}

impl WriterThread {
    /// The writer loop: batch, commit, reply; close the hub on exit.
    fn run(&mut self, mut rx: mpsc::UnboundedReceiver<Command>, hub: Arc<Hub>) {
        while let Some(first) = rx.blocking_recv() {
            let mut commands = vec![first];
            while commands.len() < MAX_BATCH {
                match rx.try_recv() {
                    Ok(cmd) => commands.push(cmd),
                    Err(_) => break,
                }
            }
            let mut writes = Vec::new();
            for cmd in commands {
                match cmd {
                    Command::Write { op, reply } => writes.push((op, reply)),
                    Command::Compact { revision, reply } => {
                        // Writes queued before the compaction commit first.
                        self.commit(std::mem::take(&mut writes));
                        let result = self.guarded(|store| store.compact(revision));
                        let _ = reply.send(result);
                    }
                    Command::Probe { reply } => {
                        let result = self.guarded(|store| store.probe());
                        let _ = reply.send(result);
                    }
                }
            }
            self.commit(writes);
        }
        hub.close();
    }

    /// Runs one disk operation under the fault rules of the module docs.
    fn guarded<T>(&mut self, op: impl FnOnce(&mut WatchableStore) -> Result<T>) -> Result<T> {
        if let Some(err) = self.health.fail_fast() {
            return Err(err);
        }
        match op(&mut self.store) {
            Ok(v) => {
                self.health.clear();
                Ok(v)
            }
            Err(e) => Err(self.failed(e)),
        }
    }

    /// Records a failed disk operation: a guard or revision error is the
    /// request's and changes nothing; any other error marks the store
    /// faulted and reopens a latched database.
    fn failed(&mut self, err: StorageError) -> StorageError {
        if matches!(err, StorageError::Compacted { .. } | StorageError::FutureRevision { .. }) {
            return err;
        }
        let err = name_file(err, self.store.path());
        tracing::error!(error = %err, "embedded store write failed");
        if self.store.latched() {
            match self.store.reopen() {
                Ok(()) => tracing::warn!("embedded store reopened after an I/O error"),
                Err(e) => tracing::error!(error = %e, "embedded store could not be reopened; trying again later"),
            }
        }
        self.health.set(err.clone());
        err
    }

    /// Commits one batch of writes and answers each caller.
    fn commit(&mut self, writes: Vec<(WriteOp, oneshot::Sender<Result<WriteOutcome>>)>) {
        if writes.is_empty() {
            return;
        }
        let (ops, replies): (Vec<_>, Vec<_>) = writes.into_iter().unzip();
        match self.guarded(|store| store.apply(&ops)) {
            Ok(committed) => {
                for (reply, result) in replies.into_iter().zip(committed.results) {
                    let _ = reply.send(result);
                }
            }
            Err(e) => {
                tracing::error!(error = %e, writes = ops.len(), "embedded store commit failed");
                for reply in replies {
                    let _ = reply.send(Err(e.clone()));
                }
            }
        }
    }
}

/// Puts the database file's path into a disk error's message.
fn name_file(err: StorageError, path: &std::path::Path) -> StorageError {
    let named = |m: String| m.replacen("embedded store:", &format!("embedded store {}:", path.display()), 1);
    match err {
        StorageError::NoSpace(m) => StorageError::NoSpace(named(m)),
        StorageError::Internal(m) => StorageError::Internal(named(m)),
        other => other,
    }
}
