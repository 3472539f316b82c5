//! Embedded MVCC store on redb: the default backend, durable, single process.
//!
//! Laid out like etcd's `server/storage/mvcc`:
//! - `record.rs`: the stored form of one key version;
//! - `schema.rs`: the redb tables (`meta`, `latest`, `history`, `log`) and their invariants;
//! - `index.rs`: reads (point, range at latest / older revision, watch replay);
//! - `store.rs`: guarded writes in one transaction, durable commit, compaction;
//! - `watchable.rs`: the watch layer, fed by a decorator on commit;
//! - `writer.rs`: the single writer thread with group commit.
//!
//! Semantics follow etcd v3 (see [`crate::Storage`]); differences, all
//! documented where they apply:
//! - a watch with `after_revision` below the compacted revision fails with
//!   `Compacted` (etcd accepts `after_revision == compacted - 1`), so every
//!   replayed update and delete carries its `prev_kv`;
//! - progress notifications are sent on request only (no periodic ones);
//! - a watcher whose channel overflows is dropped with `Unavailable`
//!   (see `watchable.rs`).
//!
//! - `database.rs`: the files (modes 0700/0600, the "has held a cluster"
//!   marker) and the shared handle, reopened after an I/O fault;
//! - `snapshot.rs`: `rkube snapshot save | restore | check`.
//!
//! Durability: a write is acknowledged after its redb transaction committed
//! with `Durability::Immediate` (fsync); a `kill -9` loses nothing
//! acknowledged. redb locks the file: a second writable open, from this or
//! another process, fails with `Unavailable`; read-only opens by
//! `rkube snapshot save` are allowed while the server runs.
//!
//! Faults: a write that fails for lack of space answers
//! [`StorageError::NoSpace`], reads keep working, [`Storage::write_health`]
//! reports the fault, and writes resume without a restart once space is
//! freed (see `writer.rs`).

mod database;
mod index;
mod record;
mod schema;
pub mod snapshot;
mod store;
mod watchable;
mod writer;

use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use redb::ReadableDatabase;

use crate::{KeyValue, RangeRequest, RangeResponse, Result, Revision, Storage, StorageError, Watch};
use database::DbSlot;
pub use database::{DB_FILE, DIR_MODE, FILE_MODE, MARKER_FILE};
use store::{Store, WriteOp, WriteOutcome};
use watchable::{Hub, WatchableStore};
use writer::Writer;

/// Tuning of an [`EmbeddedStorage`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EmbeddedOptions {
    /// Messages (one per committed batch touching the watcher's prefix, or one
    /// progress notification) a watcher may have queued before it is dropped
    /// as too slow. Default 1024.
    pub watch_channel_capacity: usize,
}

impl Default for EmbeddedOptions {
    fn default() -> Self {
        EmbeddedOptions { watch_channel_capacity: 1024 }
    }
}

/// The embedded backend: durable MVCC on one redb file, `DIR/rkube.redb`.
///
/// Dropping the last handle stops the writer thread (after the queued writes)
/// and ends every watch with `Unavailable`; the file is released once open
/// watch streams are dropped too.
pub struct EmbeddedStorage {
    db: Arc<DbSlot>,
    hub: Arc<Hub>,
    writer: Writer,
}

impl std::fmt::Debug for EmbeddedStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddedStorage").field("revision", &self.hub.published()).finish_non_exhaustive()
    }
}

impl EmbeddedStorage {
    /// Opens (creating if needed) the store in directory `dir` with default options.
    ///
    /// Blocking (file I/O, and after a crash redb's repair, which reads the
    /// whole file): call it at startup or inside `spawn_blocking`. Starts the
    /// writer thread.
    ///
    /// Errors: `Unavailable` when the store is already open (by this or
    /// another process), `Internal` for I/O errors or a corrupt file.
    pub fn open(dir: &Path) -> Result<EmbeddedStorage> {
        Self::open_with(dir, EmbeddedOptions::default())
    }

    /// Like [`EmbeddedStorage::open`], with explicit options.
    pub fn open_with(dir: &Path, options: EmbeddedOptions) -> Result<EmbeddedStorage> {
        let store = Store::open(dir)?;
        let db = store.slot().clone();
        let hub =
            Arc::new(Hub::new(store.current_revision(), store.compacted_revision(), options.watch_channel_capacity));
        let writer = Writer::spawn(WatchableStore::new(store, hub.clone()), hub.clone())?;
        Ok(EmbeddedStorage { db, hub, writer })
    }

    /// Runs `read` in a fresh read transaction on the blocking pool.
    async fn read<T, F>(&self, read: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&redb::ReadTransaction) -> Result<T> + Send + 'static,
    {
        let db = self.db.clone();
        tokio::task::spawn_blocking(move || {
            let txn = db.get()?.begin_read().map_err(|e| schema::internal("begin read", e))?;
            read(&txn)
        })
        .await
        .map_err(|e| StorageError::Internal(format!("embedded read task failed: {e}")))?
    }
}

fn unexpected(outcome: WriteOutcome) -> StorageError {
    StorageError::Internal(format!("embedded store: unexpected write outcome {outcome:?}"))
}

#[async_trait::async_trait]
impl Storage for EmbeddedStorage {
    fn backend_name(&self) -> &'static str {
        "embedded"
    }

    async fn get(&self, key: &str) -> Result<Option<KeyValue>> {
        let key = key.to_string();
        self.read(move |txn| index::get(txn, &key)).await
    }

    async fn range(&self, req: RangeRequest) -> Result<RangeResponse> {
        self.read(move |txn| index::range(txn, &req)).await
    }

    async fn create(&self, key: &str, value: Bytes) -> Result<KeyValue> {
        match self.writer.write(WriteOp::Create { key: key.to_string(), value }).await? {
            WriteOutcome::Put(kv) => Ok(kv),
            other => Err(unexpected(other)),
        }
    }

    async fn update(&self, key: &str, value: Bytes, expected_mod_revision: Revision) -> Result<KeyValue> {
        let op = WriteOp::Update { key: key.to_string(), value, expected: expected_mod_revision };
        match self.writer.write(op).await? {
            WriteOutcome::Put(kv) => Ok(kv),
            other => Err(unexpected(other)),
        }
    }

    async fn delete(&self, key: &str, expected_mod_revision: Option<Revision>) -> Result<(KeyValue, Revision)> {
        let op = WriteOp::Delete { key: key.to_string(), expected: expected_mod_revision };
        match self.writer.write(op).await? {
            WriteOutcome::Deleted(kv, rev) => Ok((kv, rev)),
            other => Err(unexpected(other)),
        }
    }

    /// See the module docs: `after_revision` below the compacted revision
    /// fails with `Compacted`; the stream ends with `Unavailable` when the
    /// watcher overflows or the store closes.
    async fn watch(&self, prefix: &str, after_revision: Revision) -> Result<Watch> {
        watchable::watch(&self.hub, self.db.clone(), prefix, after_revision)
    }

    async fn current_revision(&self) -> Result<Revision> {
        Ok(self.hub.published())
    }

    async fn compacted_revision(&self) -> Result<Revision> {
        Ok(self.hub.compacted())
    }

    async fn compact(&self, revision: Revision) -> Result<()> {
        self.writer.compact(revision).await
    }

    /// `Err` with the last disk error (e.g. `NoSpace`) while writes fail;
    /// probes the disk again at most once a second (see `writer.rs`).
    async fn write_health(&self) -> Result<()> {
        self.writer.probe().await
    }
}
