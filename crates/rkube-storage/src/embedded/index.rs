//! The read side of the embedded store: point reads, range reads at the
//! latest or an older revision, and watch replay from history. Every
//! function reads inside one redb read transaction, so it sees one
//! consistent snapshot (the revision counters and the data agree).
//!
//! Reads at the latest revision scan the `latest` table only; reads at an
//! older revision scan `history` (all retained versions of the keys in the
//! range) and pick, per key, the newest version at or below the revision.

use std::ops::Bound;

use redb::ReadTransaction;

use super::record::Record;
use super::schema::{internal, read_latest, read_revisions, HISTORY, LATEST, LOG, META};
use crate::{Event, EventKind, KeyValue, RangeRequest, RangeResponse, Result, Revision, StorageError};

/// The etcd range end that means "every key from `start` on".
const FROM_KEY_END: &str = "\0";

/// `(current_revision, compacted_revision)` as of this snapshot.
pub(crate) fn revisions(txn: &ReadTransaction) -> Result<(Revision, Revision)> {
    let meta = txn.open_table(META).map_err(|e| internal("open meta", e))?;
    read_revisions(&meta)
}

/// The live version of `key`, if any.
pub(crate) fn get(txn: &ReadTransaction, key: &str) -> Result<Option<KeyValue>> {
    let latest = txn.open_table(LATEST).map_err(|e| internal("open latest", e))?;
    let found = latest.get(key).map_err(|e| internal("get", e))?;
    match found {
        None => Ok(None),
        Some(guard) => {
            let history = txn.open_table(HISTORY).map_err(|e| internal("open history", e))?;
            Ok(Some(read_latest(&history, key, guard.value())?.into_key_value(key.to_string())))
        }
    }
}

/// The key bounds of a range request, with etcd's meaning of `end`:
/// empty = the single key `start`, `"\0"` = every key from `start` on.
fn key_bounds(req: &RangeRequest) -> (Bound<&str>, Bound<&str>) {
    if req.end.is_empty() {
        (Bound::Included(req.start.as_str()), Bound::Included(req.start.as_str()))
    } else if req.end == FROM_KEY_END {
        (Bound::Included(req.start.as_str()), Bound::Unbounded)
    } else {
        (Bound::Included(req.start.as_str()), Bound::Excluded(req.end.as_str()))
    }
}

/// True when the range is empty by construction (`end <= start`), which
/// redb would reject as an inverted range.
fn range_is_empty(req: &RangeRequest) -> bool {
    !req.end.is_empty() && req.end != FROM_KEY_END && req.end.as_str() <= req.start.as_str()
}

/// Collects counted keys into a response honouring `limit` and `count_only`.
struct RangeCollector<'r> {
    req: &'r RangeRequest,
    resp: RangeResponse,
}

impl<'r> RangeCollector<'r> {
    fn new(req: &'r RangeRequest, revision: Revision) -> Self {
        RangeCollector { req, resp: RangeResponse { revision, ..Default::default() } }
    }

    /// True when the next key would be returned (so its value must be decoded).
    fn wants_value(&self) -> bool {
        !self.req.count_only && (self.req.limit == 0 || self.resp.kvs.len() < self.req.limit)
    }

    /// Counts one key; `kv` is `Some` exactly when [`Self::wants_value`] was true.
    fn push(&mut self, kv: Option<KeyValue>) {
        self.resp.count += 1;
        match kv {
            Some(kv) => self.resp.kvs.push(kv),
            None if !self.req.count_only => self.resp.more = true,
            None => {}
        }
    }
}

/// A range read at `req.revision` (0 = latest).
///
/// Errors: `Compacted` when `req.revision` is below the compacted revision,
/// `FutureRevision` when it is above the current one.
pub(crate) fn range(txn: &ReadTransaction, req: &RangeRequest) -> Result<RangeResponse> {
    let (current, compacted) = revisions(txn)?;
    if req.revision > current {
        return Err(StorageError::FutureRevision { requested: req.revision, current });
    }
    if req.revision > 0 && req.revision < compacted {
        return Err(StorageError::Compacted { requested: req.revision, compacted });
    }
    if req.revision == 0 || req.revision == current {
        let mut out = RangeCollector::new(req, if req.revision == 0 { current } else { req.revision });
        if range_is_empty(req) {
            return Ok(out.resp);
        }
        let latest = txn.open_table(LATEST).map_err(|e| internal("open latest", e))?;
        let history = txn.open_table(HISTORY).map_err(|e| internal("open history", e))?;
        let iter = latest.range::<&str>(key_bounds(req)).map_err(|e| internal("range latest", e))?;
        for entry in iter {
            let (k, v) = entry.map_err(|e| internal("scan latest", e))?;
            let kv = if out.wants_value() {
                let key = k.value();
                Some(read_latest(&history, key, v.value())?.into_key_value(key.to_string()))
            } else {
                None
            };
            out.push(kv);
        }
        return Ok(out.resp);
    }
    range_at_revision(txn, req)
}

/// A range read at an older revision: the newest version of each key at or
/// below `req.revision`, skipping keys whose newest such version is a delete.
fn range_at_revision(txn: &ReadTransaction, req: &RangeRequest) -> Result<RangeResponse> {
    let at = req.revision;
    let mut out = RangeCollector::new(req, at);
    if range_is_empty(req) {
        return Ok(out.resp);
    }
    let history = txn.open_table(HISTORY).map_err(|e| internal("open history", e))?;
    let (lo, hi) = key_bounds(req);
    let lo = match lo {
        Bound::Included(k) => Bound::Included((k, i64::MIN)),
        _ => Bound::Unbounded,
    };
    let hi = match hi {
        Bound::Included(k) => Bound::Included((k, i64::MAX)),
        Bound::Excluded(k) => Bound::Excluded((k, i64::MIN)),
        Bound::Unbounded => Bound::Unbounded,
    };
    let iter = history.range::<(&str, i64)>((lo, hi)).map_err(|e| internal("range history", e))?;
    // The newest version at or below `at` of the key being scanned. Versions
    // of one key come in revision order, so the last one <= `at` wins.
    let mut pending: Option<(String, Record)> = None;
    for entry in iter {
        let (k, v) = entry.map_err(|e| internal("scan history", e))?;
        let (key, rev) = k.value();
        if pending.as_ref().is_none_or(|(p, _)| p != key) {
            flush(pending.take(), &mut out);
        }
        if rev <= at {
            pending = Some((key.to_string(), Record::decode(key, v.value())?));
        }
    }
    flush(pending.take(), &mut out);
    Ok(out.resp)
}

/// Counts the version `pending` (the newest of its key at the read
/// revision) unless it is a delete.
fn flush(pending: Option<(String, Record)>, out: &mut RangeCollector<'_>) {
    if let Some((key, rec)) = pending {
        if !rec.tombstone {
            let kv = if out.wants_value() { Some(rec.into_key_value(key)) } else { None };
            out.push(kv);
        }
    }
}

/// One page of watch replay.
#[derive(Debug, Default)]
pub(crate) struct ReplayPage {
    /// Matching events, in revision order.
    pub events: Vec<Event>,
    /// The last revision examined; the next page starts after it.
    pub scanned_to: Revision,
}

/// Events for keys starting with `prefix` with revision in `(after, until]`,
/// at most `max_events` of them, each with `prev_kv`.
///
/// Errors: `Compacted` when `after` is below the compacted revision (the
/// events just after `after`, or their previous values, may be gone).
pub(crate) fn replay(
    txn: &ReadTransaction,
    prefix: &str,
    after: Revision,
    until: Revision,
    max_events: usize,
) -> Result<ReplayPage> {
    let (_, compacted) = revisions(txn)?;
    if after < compacted {
        return Err(StorageError::Compacted { requested: after, compacted });
    }
    let mut page = ReplayPage { events: Vec::new(), scanned_to: until };
    if after >= until {
        return Ok(page);
    }
    let log = txn.open_table(LOG).map_err(|e| internal("open log", e))?;
    let history = txn.open_table(HISTORY).map_err(|e| internal("open history", e))?;
    let iter = log.range((after + 1)..=until).map_err(|e| internal("range log", e))?;
    for entry in iter {
        let (rev, key) = entry.map_err(|e| internal("scan log", e))?;
        let (rev, key) = (rev.value(), key.value());
        if !key.starts_with(prefix) {
            continue;
        }
        let rec = history
            .get((key, rev))
            .map_err(|e| internal("read history", e))?
            .ok_or_else(|| internal("replay", format!("log revision {rev} of {key:?} has no history entry")))?;
        let rec = Record::decode(key, rec.value())?;
        let prev = history
            .range::<(&str, i64)>((key, i64::MIN)..(key, rev))
            .map_err(|e| internal("range history", e))?
            .next_back()
            .transpose()
            .map_err(|e| internal("scan history", e))?;
        let prev_kv = match prev {
            Some((_, v)) => {
                let prev = Record::decode(key, v.value())?;
                (!prev.tombstone).then(|| prev.into_key_value(key.to_string()))
            }
            None => None,
        };
        let kind = if rec.tombstone { EventKind::Delete } else { EventKind::Put };
        page.events.push(Event { kind, kv: rec.into_key_value(key.to_string()), prev_kv });
        if page.events.len() >= max_events {
            page.scanned_to = rev;
            break;
        }
    }
    Ok(page)
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use redb::ReadableDatabase;

    use super::*;
    use crate::embedded::store::{Store, WriteOp};

    fn put(key: &str, value: &'static str) -> WriteOp {
        WriteOp::Create { key: key.into(), value: Bytes::from_static(value.as_bytes()) }
    }

    /// ```text
    /// rev:  2      3      4         5       6
    ///       a=a1   b=b1   a=a2      del b   b=b2 (re-create)
    /// ```
    #[test]
    fn range_at_each_revision_sees_exactly_that_revisions_keys() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(dir.path()).unwrap();
        for op in [
            put("/p/a", "a1"),
            put("/p/b", "b1"),
            WriteOp::Update { key: "/p/a".into(), value: Bytes::from_static(b"a2"), expected: 2 },
            WriteOp::Delete { key: "/p/b".into(), expected: None },
            put("/p/b", "b2"),
        ] {
            store.apply(&[op]).unwrap().results.pop().unwrap().unwrap();
        }
        let txn = store.slot().get().unwrap().begin_read().unwrap();
        let table: [(Revision, &[(&str, &str)]); 6] = [
            (1, &[]),
            (2, &[("/p/a", "a1")]),
            (3, &[("/p/a", "a1"), ("/p/b", "b1")]),
            (4, &[("/p/a", "a2"), ("/p/b", "b1")]),
            (5, &[("/p/a", "a2")]),
            (6, &[("/p/a", "a2"), ("/p/b", "b2")]),
        ];
        for (rev, want) in table {
            let resp = range(&txn, &RangeRequest { revision: rev, ..RangeRequest::prefix("/p/") }).unwrap();
            let got: Vec<(&str, &[u8])> = resp.kvs.iter().map(|kv| (kv.key.as_str(), kv.value.as_ref())).collect();
            let want: Vec<(&str, &[u8])> = want.iter().map(|(k, v)| (*k, v.as_bytes())).collect();
            assert_eq!(got, want, "at revision {rev}");
            assert_eq!(resp.count as usize, want.len(), "count at revision {rev}");
        }
    }

    #[test]
    fn replay_pages_stop_at_max_events_and_resume() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(dir.path()).unwrap();
        let ops: Vec<_> = (0..5).map(|i| put(&format!("/p/{i}"), "x")).collect();
        store.apply(&ops).unwrap();
        let txn = store.slot().get().unwrap().begin_read().unwrap();
        let first = replay(&txn, "/p/", 1, 6, 2).unwrap();
        assert_eq!(first.events.iter().map(|e| e.revision()).collect::<Vec<_>>(), [2, 3]);
        assert_eq!(first.scanned_to, 3);
        let rest = replay(&txn, "/p/", first.scanned_to, 6, 10).unwrap();
        assert_eq!(rest.events.iter().map(|e| e.revision()).collect::<Vec<_>>(), [4, 5, 6]);
        assert_eq!(rest.scanned_to, 6);
        assert!(replay(&txn, "/q/", 1, 6, 10).unwrap().events.is_empty());
    }
}
