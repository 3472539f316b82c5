//! Snapshots of the embedded store: `rkube snapshot save | restore | check`,
//! after `etcdctl snapshot save` and `etcdutl snapshot restore | status`.
//!
//! - [`save`] copies the store, as of one revision, into a new redb file. It
//!   works whether the server runs or not: the server opens its database in
//!   redb's `SingleWriter` mode, which lets another process open the file
//!   read-only and read a consistent snapshot (one read transaction) while
//!   the server keeps writing. The copy is written to `FILE.part` and renamed
//!   to `FILE` once durable (mode 0600), like etcdctl.
//! - [`restore`] checks the snapshot and installs it as `DIR/rkube.redb`
//!   (DIR 0700, file 0600, marker written). It refuses a data dir whose store
//!   holds data unless `overwrite` is set, and a store a running server has
//!   open. The snapshot's revision is kept, so resourceVersions continue
//!   from it. When it overwrites a store that had reached a later revision,
//!   the restored store starts at that later revision and is marked
//!   compacted there (etcdutl's `--bump-revision` with `--mark-compacted`):
//!   resourceVersions never go backwards, and watchers holding older ones get
//!   410 Expired and relist instead of missing the rollback.
//! - [`check`] verifies a store or snapshot file without changing it:
//!   redb's page checksums (on a private copy, skipped when a server has the
//!   file open), then every record decodes, every live key has its history
//!   entry, and no revision is above the current one. It reports what
//!   etcdutl's `snapshot status` does.

use std::path::{Path, PathBuf};

use redb::{Database, ReadTransaction, ReadableDatabase, ReadableTable, ReadableTableMetadata, TableDefinition};

use super::database::{self, DB_FILE};
use super::record::Record;
use super::schema::{read_revisions, storage_error, COMPACTED_REVISION, CURRENT_REVISION, HISTORY, LATEST, LOG, META};
use crate::{Result, Revision, StorageError};

/// What [`check`] found in a store or snapshot file (etcdutl `snapshot status`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotStatus {
    /// The current revision: the resourceVersion a LIST of the restored store answers.
    pub revision: Revision,
    /// History below this revision is gone (0 = never compacted).
    pub compacted_revision: Revision,
    /// Live keys (objects).
    pub keys: u64,
    /// Retained versions of keys, tombstones included.
    pub versions: u64,
    /// Size of the file in bytes.
    pub size_bytes: u64,
}

impl std::fmt::Display for SnapshotStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "revision {}, compacted revision {}, {} keys, {} versions, {} bytes",
            self.revision, self.compacted_revision, self.keys, self.versions, self.size_bytes
        )
    }
}

fn fail(what: String) -> StorageError {
    StorageError::Internal(what)
}

/// Any readable handle of a store file.
enum Handle {
    ReadOnly(redb::ReadOnlyDatabase),
    Writable(Database),
}

impl Handle {
    fn begin_read(&self) -> std::result::Result<ReadTransaction, redb::TransactionError> {
        match self {
            Handle::ReadOnly(db) => db.begin_read(),
            Handle::Writable(db) => db.begin_read(),
        }
    }
}

/// Opens an existing store file for reading: read-only (also beside a
/// running server); writable, which repairs it, when a crash left it needing
/// repair and no process has it open.
fn open_for_reading(path: &Path) -> Result<Handle> {
    if !path.is_file() {
        return Err(fail(format!("{}: no such file", path.display())));
    }
    if std::fs::metadata(path).map(|m| m.len()).unwrap_or(0) == 0 {
        return Err(fail(format!("{}: the file is empty (0 bytes), not an rkube store", path.display())));
    }
    // Read-only first: it changes nothing and works beside a running server.
    let read_only_err = match database::builder().open_read_only(path) {
        Ok(db) => return Ok(Handle::ReadOnly(db)),
        Err(e) => e,
    };
    // A file a crash left needing repair: only a writable open repairs it.
    match database::builder().open(path) {
        Ok(db) => Ok(Handle::Writable(db)),
        Err(redb::DatabaseError::DatabaseAlreadyOpen) => {
            Err(fail(format!("{}: cannot open read-only beside its server: {read_only_err}", path.display())))
        }
        Err(e) => Err(fail(format!("{}: not a readable redb file: {e}", path.display()))),
    }
}

/// Verifies redb's page checksums of `path` on a private copy (the check
/// commits, and `check` must not change the file). Skipped, returning
/// false, when a server has the file open: a copy would not be consistent.
fn verify_checksums(path: &Path) -> Result<bool> {
    if let Err(redb::DatabaseError::DatabaseAlreadyOpen) = database::builder().open(path).map(drop) {
        return Ok(false);
    }
    let copy = tempfile::NamedTempFile::new().map_err(|e| fail(format!("temp file: {e}")))?;
    std::fs::copy(path, copy.path()).map_err(|e| fail(format!("copy {}: {e}", path.display())))?;
    let mut db = Database::builder()
        .open(copy.path())
        .map_err(|e| fail(format!("{}: not a readable redb file: {e}", path.display())))?;
    match db.check_integrity() {
        Ok(true) => Ok(true),
        Ok(false) => {
            Err(fail(format!("{}: damaged pages (redb's integrity check had to repair them)", path.display())))
        }
        Err(e) => Err(fail(format!("{}: integrity check failed: {e}", path.display()))),
    }
}

/// Saves a consistent copy of the store in `data_dir` to `out` (see the
/// module docs) and returns its status.
///
/// Errors (`Internal`): no store in `data_dir`, I/O errors (also `NoSpace`
/// for a full disk), a corrupt store.
pub fn save(data_dir: &Path, out: &Path) -> Result<SnapshotStatus> {
    let src = open_for_reading(&data_dir.join(DB_FILE))?;
    let txn = src.begin_read().map_err(|e| fail(format!("begin read: {e}")))?;
    let part = part_path(out);
    database::create_private_file(&part)?;
    let copied = copy_into(&txn, &part);
    drop(txn);
    drop(src);
    if let Err(e) = copied {
        let _ = std::fs::remove_file(&part);
        return Err(e);
    }
    std::fs::rename(&part, out).map_err(|e| fail(format!("rename {} to {}: {e}", part.display(), out.display())))?;
    if let Some(parent) = out.parent().filter(|p| !p.as_os_str().is_empty()) {
        database::sync_dir(parent)?;
    }
    check(out)
}

/// `FILE.part`, where a snapshot or restore is written before its rename.
fn part_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".part");
    PathBuf::from(name)
}

/// Copies the four tables of `txn`'s snapshot into a new database at `dest`
/// in one durable transaction.
fn copy_into(txn: &ReadTransaction, dest: &Path) -> Result<()> {
    let db = Database::builder().create(dest).map_err(|e| fail(format!("create {}: {e}", dest.display())))?;
    let err = |what: &str| format!("{what} {}", dest.display());
    let w = db.begin_write().map_err(|e| storage_error(&err("begin write on"), e))?;
    copy_table(txn, &w, META).map_err(|e| storage_error(&err("copy meta into"), e))?;
    copy_table(txn, &w, LATEST).map_err(|e| storage_error(&err("copy latest into"), e))?;
    copy_table(txn, &w, HISTORY).map_err(|e| storage_error(&err("copy history into"), e))?;
    copy_table(txn, &w, LOG).map_err(|e| storage_error(&err("copy log into"), e))?;
    w.commit().map_err(|e| storage_error(&err("commit"), e))?;
    Ok(())
}

fn copy_table<K: redb::Key + 'static, V: redb::Value + 'static>(
    src: &ReadTransaction,
    dest: &redb::WriteTransaction,
    table: TableDefinition<K, V>,
) -> std::result::Result<(), redb::Error> {
    let from = src.open_table(table)?;
    let mut to = dest.open_table(table)?;
    for entry in from.iter()? {
        let (k, v) = entry?;
        to.insert(k.value(), v.value())?;
    }
    Ok(())
}

/// Verifies a store or snapshot file (see the module docs) and reports its status.
///
/// Errors (`Internal`): the file is missing, empty, not redb, not an rkube
/// store, or one of the checks failed (the message names the key).
pub fn check(path: &Path) -> Result<SnapshotStatus> {
    drop(open_for_reading(path)?);
    verify_checksums(path)?;
    let handle = open_for_reading(path)?;
    let txn = handle.begin_read().map_err(|e| fail(format!("{}: begin read: {e}", path.display())))?;
    let bad = |what: String| fail(format!("{}: {what}", path.display()));
    let not_store = |e: redb::TableError| bad(format!("not an rkube store: {e}"));
    let meta = txn.open_table(META).map_err(not_store)?;
    if meta.get(CURRENT_REVISION).map_err(|e| bad(e.to_string()))?.is_none() {
        return Err(bad(format!("not an rkube store: meta has no {CURRENT_REVISION}")));
    }
    let (revision, compacted) = read_revisions(&meta)?;
    let latest = txn.open_table(LATEST).map_err(not_store)?;
    let history = txn.open_table(HISTORY).map_err(not_store)?;
    let log = txn.open_table(LOG).map_err(not_store)?;
    let mut versions = 0u64;
    for entry in history.iter().map_err(|e| bad(e.to_string()))? {
        let (k, v) = entry.map_err(|e| bad(e.to_string()))?;
        let (key, rev) = k.value();
        let rec = Record::decode(key, v.value()).map_err(|e| bad(e.to_string()))?;
        if rec.mod_revision != rev || rev > revision {
            return Err(bad(format!(
                "history of {key:?} at {rev} records revision {} (current {revision})",
                rec.mod_revision
            )));
        }
        versions += 1;
    }
    for entry in latest.iter().map_err(|e| bad(e.to_string()))? {
        let (k, v) = entry.map_err(|e| bad(e.to_string()))?;
        let key = k.value();
        let (rec, header_only) = Record::decode_latest(key, v.value()).map_err(|e| bad(e.to_string()))?;
        let in_history = history.get((key, rec.mod_revision)).map_err(|e| bad(e.to_string()))?;
        // A header-only record matches its history entry's header (the
        // value is kept there only); any other record the whole entry.
        let matches = in_history.is_some_and(|h| match header_only {
            true => Record::decode(key, h.value()).is_ok_and(|whole| !whole.tombstone && whole.encode_header_only() == v.value()),
            false => h.value() == v.value(),
        });
        if rec.tombstone || !matches {
            return Err(bad(format!(
                "live key {key:?} at revision {} has no matching history entry",
                rec.mod_revision
            )));
        }
    }
    if let Some(last) = log.last().map_err(|e| bad(e.to_string()))? {
        if last.0.value() > revision {
            return Err(bad(format!("log reaches revision {} above the current {revision}", last.0.value())));
        }
    }
    let keys = latest.len().map_err(|e| bad(e.to_string()))?;
    let size_bytes = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    Ok(SnapshotStatus { revision, compacted_revision: compacted, keys, versions, size_bytes })
}

/// Installs `snapshot` as the store of `data_dir` (see the module docs).
///
/// Errors (`Internal`): the snapshot fails [`check`]; the data dir already
/// has a store with data and `overwrite` is false; a running server has it
/// open (`Unavailable`); I/O errors.
pub fn restore(snapshot: &Path, data_dir: &Path, overwrite: bool) -> Result<SnapshotStatus> {
    let status = check(snapshot)?;
    database::prepare_dir(data_dir)?;
    let dest = data_dir.join(DB_FILE);
    let mut floor = 0;
    if std::fs::metadata(&dest).map(|m| m.len() > 0).unwrap_or(false) {
        // Opening it for writing also proves no server has it open.
        let existing = database::open_file(&dest).map_err(|e| match e {
            StorageError::Unavailable(m) => StorageError::Unavailable(format!("{m}: stop the server before restoring")),
            other => other,
        })?;
        let txn = existing.begin_read().map_err(|e| fail(format!("begin read: {e}")))?;
        let current = match txn.open_table(META) {
            Ok(meta) => read_revisions(&meta)?.0,
            Err(_) => 0,
        };
        if !overwrite {
            return Err(fail(format!(
                "{} already holds a store (revision {current}); pass --overwrite to replace it with the snapshot",
                dest.display()
            )));
        }
        floor = current;
    }
    let part = part_path(&dest);
    std::fs::copy(snapshot, &part)
        .map_err(|e| fail(format!("copy {} to {}: {e}", snapshot.display(), part.display())))?;
    database::restrict_file(&part)?;
    if floor > status.revision {
        bump(&part, floor)?;
    }
    std::fs::File::open(&part).and_then(|f| f.sync_all()).map_err(|e| fail(format!("sync {}: {e}", part.display())))?;
    std::fs::rename(&part, &dest).map_err(|e| fail(format!("rename {} to {}: {e}", part.display(), dest.display())))?;
    database::sync_dir(data_dir)?;
    database::write_marker(data_dir)?;
    check(&dest)
}

/// Raises the current revision of the store at `path` to `revision` and
/// marks it compacted there (etcdutl's `--bump-revision --mark-compacted`).
fn bump(path: &Path, revision: Revision) -> Result<()> {
    let db = database::open_file(path)?;
    let err = |e: &dyn std::fmt::Display| fail(format!("raise the revision of {}: {e}", path.display()));
    let mut w = db.begin_write().map_err(|e| err(&e))?;
    w.set_durability(redb::Durability::Immediate).map_err(|e| err(&e))?;
    {
        let mut meta = w.open_table(META).map_err(|e| err(&e))?;
        meta.insert(CURRENT_REVISION, revision).map_err(|e| err(&e))?;
        meta.insert(COMPACTED_REVISION, revision).map_err(|e| err(&e))?;
    }
    w.commit().map_err(|e| err(&e))
}
