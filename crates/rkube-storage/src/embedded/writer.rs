//! The single writer thread of the embedded store, with group commit.
//!
//! Async callers send a [`Command`] over an unbounded channel and await a
//! oneshot reply, so no redb I/O ever runs on a runtime worker. The thread
//! takes every command queued while the previous commit was being fsynced
//! (up to [`MAX_BATCH`]) and applies the writes in one redb transaction:
//! each write still gets its own revision and its own guard, but the batch
//! pays one fsync. Replies go out only after the commit (and the watch
//! publication) — an acknowledged write is on disk.

use std::sync::Arc;
use std::thread::JoinHandle;

use tokio::sync::{mpsc, oneshot};

use super::store::{WriteOp, WriteOutcome};
use super::watchable::{Hub, WatchableStore};
use crate::{Result, Revision, StorageError};

/// Most writes committed in one redb transaction.
pub(crate) const MAX_BATCH: usize = 512;

/// A request to the writer thread.
enum Command {
    /// A guarded write.
    Write { op: WriteOp, reply: oneshot::Sender<Result<WriteOutcome>> },
    /// A compaction.
    Compact { revision: Revision, reply: oneshot::Sender<Result<()>> },
}

/// Handle to the writer thread. Dropping it stops the thread after the
/// queued commands and waits for it (so the database file is released).
pub(crate) struct Writer {
    tx: Option<mpsc::UnboundedSender<Command>>,
    thread: Option<JoinHandle<()>>,
}

fn stopped() -> StorageError {
    StorageError::Unavailable("embedded store writer stopped".into())
}

impl Writer {
    /// Starts the writer thread owning `store`; it closes `hub` when it stops.
    pub fn spawn(store: WatchableStore, hub: Arc<Hub>) -> Result<Writer> {
        let (tx, rx) = mpsc::unbounded_channel();
        let thread = std::thread::Builder::new()
            .name("rkube-storage-writer".into())
            .spawn(move || run(store, rx, hub))
            .map_err(|e| StorageError::Internal(format!("spawn writer thread: {e}")))?;
        Ok(Writer { tx: Some(tx), thread: Some(thread) })
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

/// The writer loop: batch, commit, reply; close the hub on exit.
fn run(mut store: WatchableStore, mut rx: mpsc::UnboundedReceiver<Command>, hub: Arc<Hub>) {
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
                    commit(&mut store, std::mem::take(&mut writes));
                    let _ = reply.send(store.compact(revision));
                }
            }
        }
        commit(&mut store, writes);
    }
    hub.close();
}

/// Commits one batch of writes and answers each caller.
fn commit(store: &mut WatchableStore, writes: Vec<(WriteOp, oneshot::Sender<Result<WriteOutcome>>)>) {
    if writes.is_empty() {
        return;
    }
    let (ops, replies): (Vec<_>, Vec<_>) = writes.into_iter().unzip();
    match store.apply(&ops) {
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
