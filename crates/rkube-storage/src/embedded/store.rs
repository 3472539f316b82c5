//! The write side of the embedded store: applying create / update / delete
//! with their `mod_revision` guards inside one redb write transaction, the
//! durable commit, and compaction.
//!
//! A [`Store`] is owned by the single writer thread (`writer.rs`), so no lock
//! guards `current`: the writer is the only one that changes it. Readers never
//! look at these fields; they read the counters from the `meta` table in
//! their own snapshot.
//!
//! Revision history of one key, and what a compaction at 6 keeps:
//!
//! ```text
//! rev:   2        4        5          7
//!        put(v1)  put(v2)  delete     put(v3)
//!                          ^ newest version <= 6 is a tombstone
//! compact(6): drops 2 and 4; drops the tombstone at 5 (below 6); keeps 7.
//! A read at 6 finds no version <= 6 -> key absent (as it was).
//! ```

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use redb::{Durability, ReadableTable, Table, WriteTransaction};

use super::database::{self, DbSlot};
use super::record::Record;
use super::schema::{
    read_latest, read_revisions, storage_error, COMPACTED_REVISION, CURRENT_REVISION, HEALTH_PROBE, HISTORY, INITIAL_REVISION,
    LATEST, LOG, META,
};
use crate::{Event, EventKind, KeyValue, Result, Revision, StorageError};

/// One guarded write, as asked by a [`crate::Storage`] caller.
#[derive(Debug, Clone)]
pub(crate) enum WriteOp {
    /// Create a key that must not exist.
    Create {
        /// The key.
        key: String,
        /// The value.
        value: Bytes,
    },
    /// Replace a key whose `mod_revision` must equal `expected`.
    Update {
        /// The key.
        key: String,
        /// The new value.
        value: Bytes,
        /// The guard.
        expected: Revision,
    },
    /// Delete a key, guarded when `expected` is set.
    Delete {
        /// The key.
        key: String,
        /// The guard.
        expected: Option<Revision>,
    },
}

/// The answer to one successful [`WriteOp`].
#[derive(Debug, Clone)]
pub(crate) enum WriteOutcome {
    /// Create or update: the new key-value.
    Put(KeyValue),
    /// Delete: the last value and the revision of the delete.
    Deleted(KeyValue, Revision),
}

/// A committed batch: one result per op (in order) and the events of the
/// successful ones, in revision order.
#[derive(Debug, Default)]
pub(crate) struct Committed {
    /// Per-op results; guard failures are `Err` and took no revision.
    pub results: Vec<Result<WriteOutcome>>,
    /// Events of the successful ops.
    pub events: Vec<Event>,
    /// The current revision after the commit.
    pub revision: Revision,
}

/// The durable MVCC store (write side). See the module docs.
pub(crate) struct Store {
    slot: Arc<DbSlot>,
    /// Revision of the last committed write. Only the writer thread changes it.
    current: Revision,
    /// Compacted revision. Only the writer thread changes it.
    compacted: Revision,
}

/// The tables one write transaction works on.
struct Tables<'txn> {
    latest: Table<'txn, &'static str, &'static [u8]>,
    history: Table<'txn, (&'static str, i64), &'static [u8]>,
    log: Table<'txn, i64, &'static str>,
}

impl<'txn> Tables<'txn> {
    fn open(txn: &'txn WriteTransaction) -> Result<Tables<'txn>> {
        Ok(Tables {
            latest: txn.open_table(LATEST).map_err(|e| storage_error("open latest", e))?,
            history: txn.open_table(HISTORY).map_err(|e| storage_error("open history", e))?,
            log: txn.open_table(LOG).map_err(|e| storage_error("open log", e))?,
        })
    }

    fn latest(&self, key: &str) -> Result<Option<Record>> {
        match self.latest.get(key).map_err(|e| storage_error("get", e))? {
            Some(guard) => Ok(Some(read_latest(&self.history, key, guard.value())?)),
            None => Ok(None),
        }
    }

    /// Whether `key` exists (without reading its value).
    fn exists(&self, key: &str) -> Result<bool> {
        Ok(self.latest.get(key).map_err(|e| storage_error("get", e))?.is_some())
    }

    /// Records version `rec` of `key` at `rec.mod_revision` in history and log,
    /// and in `latest` (a tombstone removes the key from `latest`; a large
    /// value is written to `history` only, `latest` getting its header).
    fn write_version(&mut self, key: &str, rec: &Record) -> Result<()> {
        let bytes = rec.encode();
        let rev = rec.mod_revision;
        if rec.tombstone {
            self.latest.remove(key).map_err(|e| storage_error("remove latest", e))?;
        } else if rec.fits_latest() {
            self.latest.insert(key, bytes.as_slice()).map_err(|e| storage_error("insert latest", e))?;
        } else {
            let header = rec.encode_header_only();
            self.latest.insert(key, header.as_slice()).map_err(|e| storage_error("insert latest", e))?;
        }
        self.history.insert((key, rev), bytes.as_slice()).map_err(|e| storage_error("insert history", e))?;
        self.log.insert(rev, key).map_err(|e| storage_error("insert log", e))?;
        Ok(())
    }
}

impl Store {
    /// Opens (or creates) the database file `dir/rkube.redb` (see
    /// `database.rs` for file modes and the marker).
    ///
    /// Errors: `Unavailable` when another process (or handle) has it open,
    /// `Internal` for I/O, corruption, or a missing/empty store in a data dir
    /// that has held a cluster.
    pub fn open(dir: &Path) -> Result<Store> {
        let (db, _existed) = database::open_dir(dir)?;
        let txn = db.begin_write().map_err(|e| storage_error("begin write", e))?;
        let (current, compacted) = {
            let mut meta = txn.open_table(META).map_err(|e| storage_error("open meta", e))?;
            let (current, compacted) = read_revisions(&meta)?;
            if current == INITIAL_REVISION {
                meta.insert(CURRENT_REVISION, INITIAL_REVISION).map_err(|e| storage_error("init meta", e))?;
            }
            // Create the data tables so readers can always open them.
            Tables::open(&txn)?;
            (current, compacted)
        };
        txn.commit().map_err(|e| storage_error("commit init", e))?;
        if !dir.join(database::MARKER_FILE).exists() {
            database::write_marker(dir)?;
        }
        let slot = Arc::new(DbSlot::new(dir.join(database::DB_FILE), db));
        Ok(Store { slot, current, compacted })
    }

    /// The database slot, shared with readers.
    pub fn slot(&self) -> &Arc<DbSlot> {
        &self.slot
    }

    /// True when the handle is latched by an earlier I/O error (redb's
    /// `PreviousIo`) and must be reopened before it can write again.
    pub fn latched(&self) -> bool {
        match self.slot.get() {
            Ok(db) => matches!(db.begin_write(), Err(redb::TransactionError::Storage(redb::StorageError::PreviousIo))),
            Err(_) => true,
        }
    }

    /// Reopens the database after an I/O fault (see [`DbSlot::reopen`]).
    pub fn reopen(&mut self) -> Result<()> {
        self.slot.reopen()
    }

    /// Commits a write that changes no revision (the `meta` key
    /// `health_probe`), to learn whether the disk takes writes again.
    pub fn probe(&mut self) -> Result<()> {
        let db = self.slot.get()?;
        let mut txn = db.begin_write().map_err(|e| storage_error("begin write", e))?;
        txn.set_durability(Durability::Immediate).map_err(|e| storage_error("set durability", e))?;
        {
            let mut meta = txn.open_table(META).map_err(|e| storage_error("open meta", e))?;
            meta.insert(HEALTH_PROBE, self.current).map_err(|e| storage_error("write probe", e))?;
        }
        txn.commit().map_err(|e| storage_error("commit probe", e))
    }

    /// Revision of the last committed write.
    pub fn current_revision(&self) -> Revision {
        self.current
    }

    /// The compacted revision (0 when never compacted).
    pub fn compacted_revision(&self) -> Revision {
        self.compacted
    }

    /// Applies `ops` in order in one redb transaction and commits it with
    /// `Durability::Immediate` (fsync) before returning. Each successful op
    /// takes the next revision; a failed guard takes none and does not stop
    /// the others. `Err` means nothing was committed (every op failed).
    pub fn apply(&mut self, ops: &[WriteOp]) -> Result<Committed> {
        let db = self.slot.get()?;
        let mut txn = db.begin_write().map_err(|e| storage_error("begin write", e))?;
        txn.set_durability(Durability::Immediate).map_err(|e| storage_error("set durability", e))?;
        let mut out = Committed { revision: self.current, ..Default::default() };
        {
            let mut tables = Tables::open(&txn)?;
            for op in ops {
                match apply_one(&mut tables, op, out.revision + 1)? {
                    Ok((outcome, event)) => {
                        out.revision += 1;
                        out.events.push(event);
                        out.results.push(Ok(outcome));
                    }
                    Err(guard_failed) => out.results.push(Err(guard_failed)),
                }
            }
        }
        if out.revision == self.current {
            // Every guard failed: nothing to commit.
            txn.abort().map_err(|e| storage_error("abort", e))?;
            return Ok(out);
        }
        {
            let mut meta = txn.open_table(META).map_err(|e| storage_error("open meta", e))?;
            meta.insert(CURRENT_REVISION, out.revision).map_err(|e| storage_error("write meta", e))?;
        }
        txn.commit().map_err(|e| storage_error("commit", e))?;
        self.current = out.revision;
        Ok(out)
    }

    /// Drops history below `revision` (see the module docs) and persists the
    /// new compacted revision, in one durable transaction.
    ///
    /// Errors: `Compacted` when `revision` is not above the compacted one,
    /// `FutureRevision` when it is above the current one.
    pub fn compact(&mut self, revision: Revision) -> Result<()> {
        if revision <= self.compacted {
            return Err(StorageError::Compacted { requested: revision, compacted: self.compacted });
        }
        if revision > self.current {
            return Err(StorageError::FutureRevision { requested: revision, current: self.current });
        }
        let db = self.slot.get()?;
        let mut txn = db.begin_write().map_err(|e| storage_error("begin write", e))?;
        txn.set_durability(Durability::Immediate).map_err(|e| storage_error("set durability", e))?;
        {
            let mut tables = Tables::open(&txn)?;
            // Keys changed below `revision`: only they can have versions to drop.
            let mut keys = BTreeSet::new();
            for entry in tables.log.range(..revision).map_err(|e| storage_error("range log", e))? {
                let (_, key) = entry.map_err(|e| storage_error("scan log", e))?;
                keys.insert(key.value().to_string());
            }
            tables.log.retain_in(..revision, |_, _| false).map_err(|e| storage_error("trim log", e))?;
            for key in &keys {
                let mut versions = Vec::new();
                let range = tables
                    .history
                    .range::<(&str, i64)>((key.as_str(), i64::MIN)..=(key.as_str(), revision))
                    .map_err(|e| storage_error("range history", e))?;
                for entry in range {
                    let (k, v) = entry.map_err(|e| storage_error("scan history", e))?;
                    let tombstone = Record::decode(key, v.value())?.tombstone;
                    versions.push((k.value().1, tombstone));
                }
                let keep = match versions.last() {
                    Some(&(rev, tombstone)) if !tombstone || rev == revision => Some(rev),
                    _ => None,
                };
                for (rev, _) in versions {
                    if Some(rev) != keep {
                        tables.history.remove((key.as_str(), rev)).map_err(|e| storage_error("trim history", e))?;
                    }
                }
            }
            let mut meta = txn.open_table(META).map_err(|e| storage_error("open meta", e))?;
            meta.insert(COMPACTED_REVISION, revision).map_err(|e| storage_error("write meta", e))?;
        }
        txn.commit().map_err(|e| storage_error("commit compaction", e))?;
        self.compacted = revision;
        Ok(())
    }
}

/// Applies one op at revision `rev`. The outer `Err` is a storage failure
/// (abort the batch); the inner one a failed guard.
fn apply_one(tables: &mut Tables<'_>, op: &WriteOp, rev: Revision) -> Result<Result<(WriteOutcome, Event)>> {
    match op {
        WriteOp::Create { key, value } => {
            if tables.exists(key)? {
                return Ok(Err(StorageError::AlreadyExists { key: key.clone() }));
            }
            let kv = KeyValue {
                key: key.clone(),
                value: value.clone(),
                create_revision: rev,
                mod_revision: rev,
                version: 1,
            };
            tables.write_version(key, &Record::put(&kv))?;
            let event = Event { kind: EventKind::Put, kv: kv.clone(), prev_kv: None };
            Ok(Ok((WriteOutcome::Put(kv), event)))
        }
        WriteOp::Update { key, value, expected } => {
            let prev = match guard(tables, key, Some(*expected))? {
                Ok(prev) => prev,
                Err(e) => return Ok(Err(e)),
            };
            let kv = KeyValue {
                key: key.clone(),
                value: value.clone(),
                create_revision: prev.create_revision,
                mod_revision: rev,
                version: prev.version + 1,
            };
            tables.write_version(key, &Record::put(&kv))?;
            let event = Event { kind: EventKind::Put, kv: kv.clone(), prev_kv: Some(prev.into_key_value(key.clone())) };
            Ok(Ok((WriteOutcome::Put(kv), event)))
        }
        WriteOp::Delete { key, expected } => {
            let prev = match guard(tables, key, *expected)? {
                Ok(prev) => prev,
                Err(e) => return Ok(Err(e)),
            };
            let tomb = Record::tombstone(rev);
            tables.write_version(key, &tomb)?;
            let prev = prev.into_key_value(key.clone());
            let event =
                Event { kind: EventKind::Delete, kv: tomb.into_key_value(key.clone()), prev_kv: Some(prev.clone()) };
            Ok(Ok((WriteOutcome::Deleted(prev, rev), event)))
        }
    }
}

/// The live version of `key` if it exists and its `mod_revision` matches
/// `expected` (when given); else `NotFound` or `Conflict`.
fn guard(tables: &Tables<'_>, key: &str, expected: Option<Revision>) -> Result<Result<Record>> {
    let Some(prev) = tables.latest(key)? else {
        return Ok(Err(StorageError::NotFound { key: key.to_string() }));
    };
    match expected {
        Some(expected) if expected != prev.mod_revision => {
            Ok(Err(StorageError::Conflict { key: key.to_string(), expected, actual: prev.mod_revision }))
        }
        _ => Ok(Ok(prev)),
    }
}

#[cfg(test)]
mod tests {
    use redb::ReadableDatabase;

    use super::*;
    use crate::embedded::index;
    use crate::RangeRequest;

    /// A deterministic mix of creates, updates and deletes over three keys
    /// (revisions 2..=31), to compare reads before and after compactions;
    /// every third value is `large` (more than `latest` keeps itself).
    fn churn(store: &mut Store, large: bool) {
        let keys = ["/p/a", "/p/b", "/p/c"];
        for i in 0..30usize {
            let key = keys[(i * 7) % 3];
            let mut value = format!("v{i}");
            if large && i % 3 == 0 {
                value.push_str(&".".repeat(crate::embedded::record::INLINE_MAX));
            }
            let value = Bytes::from(value);
            let op = match store.apply(&[WriteOp::Create { key: key.into(), value: value.clone() }]) {
                Ok(c) if c.results[0].is_ok() => continue,
                _ if i % 4 == 0 => WriteOp::Delete { key: key.into(), expected: None },
                _ => WriteOp::Update { key: key.into(), value, expected: current_mod(store, key) },
            };
            store.apply(&[op]).unwrap().results.pop().unwrap().unwrap();
        }
    }

    fn current_mod(store: &Store, key: &str) -> Revision {
        let txn = store.slot().get().unwrap().begin_read().unwrap();
        index::get(&txn, key).unwrap().unwrap().mod_revision
    }

    fn read_at(store: &Store, rev: Revision) -> Result<Vec<crate::KeyValue>> {
        let txn = store.slot().get().unwrap().begin_read().unwrap();
        index::range(&txn, &RangeRequest { revision: rev, ..RangeRequest::prefix("/p/") }).map(|r| r.kvs)
    }

    fn replay_from(store: &Store, after: Revision) -> Result<Vec<Event>> {
        let txn = store.slot().get().unwrap().begin_read().unwrap();
        let until = index::revisions(&txn)?.0;
        index::replay(&txn, "/p/", after, until, usize::MAX).map(|p| p.events)
    }

    #[test]
    fn compaction_keeps_reads_and_replay_at_or_above_it_unchanged() {
        compaction_keeps_reads_and_replay(false);
    }

    /// The same with large values, which `latest` keeps as a header only.
    #[test]
    fn compaction_keeps_reads_and_replay_of_large_values() {
        compaction_keeps_reads_and_replay(true);
    }

    fn compaction_keeps_reads_and_replay(large: bool) {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(dir.path()).unwrap();
        churn(&mut store, large);
        let current = store.current_revision();
        assert!(current > 20, "churn made {current} revisions");
        let reads: Vec<_> = (1..=current).map(|r| read_at(&store, r).unwrap()).collect();
        let replays: Vec<_> = (1..=current).map(|r| replay_from(&store, r).unwrap()).collect();
        for compact_at in [3, 4, 9, 10, 17, current - 1, current] {
            store.compact(compact_at).unwrap();
            for rev in 1..=current {
                let idx = (rev - 1) as usize;
                if rev < compact_at {
                    assert!(matches!(read_at(&store, rev), Err(StorageError::Compacted { .. })), "read at {rev}");
                    assert!(matches!(replay_from(&store, rev), Err(StorageError::Compacted { .. })), "replay {rev}");
                } else {
                    assert_eq!(read_at(&store, rev).unwrap(), reads[idx], "read at {rev} after compact({compact_at})");
                    assert_eq!(
                        replay_from(&store, rev).unwrap(),
                        replays[idx],
                        "replay after {rev}, compact({compact_at})"
                    );
                }
            }
        }
        let live = read_at(&store, current).unwrap();
        let large_live = live.iter().filter(|kv| kv.value.len() > crate::embedded::record::INLINE_MAX).count();
        assert_eq!(large_live > 0, large, "live large values: {live:?}");
        drop(store);
        // The file passes `rkube snapshot check`, header-only records included.
        let status = crate::embedded::snapshot::check(&dir.path().join(database::DB_FILE)).unwrap();
        assert_eq!(status.keys, live.len() as u64);
    }

    /// `latest` keeps a large value's header only; the value is stored once.
    #[test]
    fn a_large_value_is_stored_once() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(dir.path()).unwrap();
        let value = Bytes::from(vec![b'x'; crate::embedded::record::INLINE_MAX + 1]);
        store.apply(&[WriteOp::Create { key: "/p/big".into(), value: value.clone() }]).unwrap();
        store.apply(&[WriteOp::Create { key: "/p/small".into(), value: Bytes::from_static(b"s") }]).unwrap();
        let txn = store.slot().get().unwrap().begin_read().unwrap();
        let latest = txn.open_table(LATEST).unwrap();
        assert_eq!(latest.get("/p/big").unwrap().unwrap().value().len(), 25);
        assert_eq!(latest.get("/p/small").unwrap().unwrap().value().len(), 26);
        assert_eq!(index::get(&txn, "/p/big").unwrap().unwrap().value, value);
    }
}
