//! The redb tables of the embedded store and what each one holds.
//!
//! ```text
//! meta     "current_revision"   -> i64   revision of the last committed write (starts at 1, like etcd)
//!          "compacted_revision" -> i64   history below this revision is gone (0 = never compacted)
//!          "health_probe"       -> i64   written by the write probe after a disk fault (no meaning)
//! latest   key                  -> Record   the live version of every existing key (no tombstones):
//!                                           a LIST at the latest revision is one scan of this table;
//!                                           a value over 64 KiB is kept in history only (a header here)
//! history  (key, revision)      -> Record   every version (puts and tombstones) not yet compacted:
//!                                           reads at an older revision and watch replay use it
//! log      revision             -> key      which key each revision changed: watch replay walks it
//!                                           in revision order, compaction finds the keys to trim
//! ```
//!
//! Invariants (checked by the conformance suite, kept by `store.rs`):
//! - every revision in `(compacted_revision - 1, current_revision]` that
//!   changed a key has one `log` entry and one `history` entry;
//! - `latest[key]` equals the last `history` entry of `key` when that entry is
//!   a put (or is its header only, for a value over 64 KiB), and is absent
//!   when it is a tombstone;
//! - compaction at `c` keeps, for every key, the newest put at or below `c`,
//!   so reads at `c` and `prev_kv` of events after `c` stay answerable.

use redb::{ReadableTable, TableDefinition};

use super::record::Record;
use crate::{Result, Revision, StorageError};

/// Revision counters (see the module docs).
pub(crate) const META: TableDefinition<&str, i64> = TableDefinition::new("meta");
/// Live version of each existing key, encoded by [`super::record::Record`].
pub(crate) const LATEST: TableDefinition<&str, &[u8]> = TableDefinition::new("latest");
/// Every retained version of each key, keyed by `(key, revision)`.
pub(crate) const HISTORY: TableDefinition<(&str, i64), &[u8]> = TableDefinition::new("history");
/// The key each revision changed.
pub(crate) const LOG: TableDefinition<i64, &str> = TableDefinition::new("log");

/// `meta` key of the current revision.
pub(crate) const CURRENT_REVISION: &str = "current_revision";
/// `meta` key of the compacted revision.
pub(crate) const COMPACTED_REVISION: &str = "compacted_revision";

/// `meta` key the embedded store's health probe writes (the current
/// revision, unchanged): a commit that proves the disk takes writes again.
pub(crate) const HEALTH_PROBE: &str = "health_probe";

/// The revision of an empty store: etcd starts at 1 too, so a LIST of an
/// empty store never reports resourceVersion "0" (which Kubernetes reads as
/// "any").
pub(crate) const INITIAL_REVISION: Revision = 1;

/// Wraps any redb error as [`StorageError::Internal`] with what was being done.
pub(crate) fn internal(context: &str, err: impl std::fmt::Display) -> StorageError {
    StorageError::Internal(format!("embedded store: {context}: {err}"))
}

/// Wraps a redb error met while writing: a full disk (`ENOSPC`, `EDQUOT`)
/// becomes [`StorageError::NoSpace`], anything else [`StorageError::Internal`].
pub(crate) fn storage_error(context: &str, err: impl Into<redb::Error>) -> StorageError {
    let err: redb::Error = err.into();
    if let redb::Error::Io(io) = &err {
        if matches!(io.kind(), std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded) {
            return StorageError::NoSpace(format!("embedded store: {context}: {io}; nothing was written"));
        }
    }
    internal(context, err)
}

/// Reads `(current_revision, compacted_revision)` from the `meta` table.
pub(crate) fn read_revisions(meta: &impl ReadableTable<&'static str, i64>) -> Result<(Revision, Revision)> {
    let current = meta
        .get(CURRENT_REVISION)
        .map_err(|e| internal("read current revision", e))?
        .map(|g| g.value())
        .unwrap_or(INITIAL_REVISION);
    let compacted = meta
        .get(COMPACTED_REVISION)
        .map_err(|e| internal("read compacted revision", e))?
        .map(|g| g.value())
        .unwrap_or(0);
    Ok((current, compacted))
}

/// The live version of `key` from its `latest` entry `bytes`, its value read
/// from `history` when `latest` keeps only the header
/// ([`Record::decode_latest`]).
///
/// Errors: `Internal` for a corrupt record, or a header whose `history`
/// entry is missing or does not match it.
pub(crate) fn read_latest(
    history: &impl ReadableTable<(&'static str, i64), &'static [u8]>,
    key: &str,
    bytes: &[u8],
) -> Result<Record> {
    let (header, in_history) = Record::decode_latest(key, bytes)?;
    if !in_history {
        return Ok(header);
    }
    let found = history.get((key, header.mod_revision)).map_err(|e| internal("get history", e))?;
    let rec = match found {
        Some(guard) => Record::decode(key, guard.value())?,
        None => return Err(internal("read latest", format!("{key:?} at {}: no history entry holds its value", header.mod_revision))),
    };
    if rec.tombstone || (rec.create_revision, rec.version) != (header.create_revision, header.version) {
        return Err(internal("read latest", format!("{key:?} at {}: the history entry does not match", header.mod_revision)));
    }
    Ok(rec)
}
