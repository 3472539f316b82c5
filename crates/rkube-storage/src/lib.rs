//! Storage for rkube with etcd v3 semantics.
//!
//! The [`Storage`] trait is the contract every backend keeps (etcd's
//! `api/mvccpb/kv.proto` and `server/storage/mvcc/kv.go`): a global revision that grows by one
//! per committed write, per-key `create_revision` / `mod_revision` /
//! `version`, reads at the latest or an older revision, compare-and-swap
//! writes guarded by `mod_revision`, watches from a revision with previous
//! values, progress notifications, and compaction.
//!
//! Backends:
//! - [`embedded`]: durable MVCC on redb, the default (single process).
//! - [`etcd`]: real etcd v3 over gRPC via `etcd-client`.
//!
//! [`compactor`] runs the `compact_rev_key` compaction every API server on
//! one storage shares (one winner per round).
//!
//! [`testing`] starts a real `etcd` on free loopback ports for tests in any
//! crate (`testing::EtcdServer::start()`).
//!
//! An object's Kubernetes `resourceVersion` is its `mod_revision` as a
//! decimal string.

#![deny(missing_docs)]

use std::fmt;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use futures::Stream;

pub mod compactor;
pub mod embedded;
pub mod etcd;
pub mod testing;

/// A storage revision (etcd's `int64` revision). Revision 0 means "none".
pub type Revision = i64;

/// Result alias for storage operations.
pub type Result<T, E = StorageError> = std::result::Result<T, E>;

/// Errors a backend returns. Each maps to one Kubernetes `Status` at the
/// HTTP edge (in `rkube-apiserver`).
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum StorageError {
    /// The key does not exist (API: 404 `NotFound`).
    #[error("key not found: {key}")]
    NotFound {
        /// The key that was looked up.
        key: String,
    },
    /// `create` found the key already present (API: 409 `AlreadyExists`).
    #[error("key already exists: {key}")]
    AlreadyExists {
        /// The key that exists.
        key: String,
    },
    /// A `mod_revision` guard failed (API: 409 `Conflict`).
    #[error("conflict on {key}: expected mod_revision {expected}, found {actual}")]
    Conflict {
        /// The key whose guard failed.
        key: String,
        /// The mod_revision the caller expected.
        expected: Revision,
        /// The current mod_revision (0 if the key is gone).
        actual: Revision,
    },
    /// The requested revision was compacted (API: 410 `Expired`).
    #[error("mvcc: required revision has been compacted (requested {requested}, compacted {compacted})")]
    Compacted {
        /// The requested revision.
        requested: Revision,
        /// The current compacted revision.
        compacted: Revision,
    },
    /// The requested revision is newer than the current one (etcd `ErrFutureRev`).
    #[error("mvcc: required revision is a future revision (requested {requested}, current {current})")]
    FutureRevision {
        /// The requested revision.
        requested: Revision,
        /// The store's current revision.
        current: Revision,
    },
    /// The backend is unreachable or failed (API: 500/503).
    #[error("storage unavailable: {0}")]
    Unavailable(String),
    /// A write failed because the disk holding the store is full
    /// (`ENOSPC`/`EDQUOT`); nothing of it was written. The message names the
    /// file and the OS error. etcd's counterpart is `ErrNoSpace` ("mvcc:
    /// database space exceeded", `server/etcdserver/api/v3rpc/rpctypes/error.go`). The embedded store recovers by itself once
    /// space is freed (API: 503 `ServiceUnavailable` with `Retry-After`: a
    /// retry is safe and succeeds once space is back).
    #[error("{0}")]
    NoSpace(String),
    /// Any other internal error (API: 500 `InternalError`).
    #[error("storage internal error: {0}")]
    Internal(String),
}

/// One key with its value and revisions, as etcd's `mvccpb.KeyValue`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyValue {
    /// Full key, e.g. `/registry/pods/default/web-0`.
    pub key: String,
    /// The value bytes (the object's JSON for rkube).
    pub value: Bytes,
    /// Revision of the transaction that created the key.
    pub create_revision: Revision,
    /// Revision of the last transaction that modified the key (the object's resourceVersion).
    pub mod_revision: Revision,
    /// Number of modifications since creation (1 after create).
    pub version: i64,
}

/// A range read: keys in `[start, end)` at a revision.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RangeRequest {
    /// First key (inclusive).
    pub start: String,
    /// End key (exclusive). Use [`prefix_end`] to read a prefix.
    pub end: String,
    /// Read at this revision; 0 = latest.
    pub revision: Revision,
    /// At most this many keys; 0 = no limit.
    pub limit: usize,
    /// Only count, return no key-values.
    pub count_only: bool,
}

impl RangeRequest {
    /// All keys under `prefix` (which should end in `/`), at the latest revision.
    pub fn prefix(prefix: &str) -> Self {
        RangeRequest { start: prefix.to_string(), end: prefix_end(prefix), ..Default::default() }
    }
}

/// The answer to a range read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RangeResponse {
    /// The keys read, in key order.
    pub kvs: Vec<KeyValue>,
    /// True when more keys matched than `limit` allowed.
    pub more: bool,
    /// Number of keys in the whole range (ignoring `limit`).
    pub count: i64,
    /// The revision the read was served at (the store's current revision for latest reads).
    pub revision: Revision,
}

/// Kind of a watch event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    /// Key created or updated.
    Put,
    /// Key deleted.
    Delete,
}

/// One change, as etcd's `mvccpb.Event` with `prev_kv`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// Put or delete.
    pub kind: EventKind,
    /// The new key-value for a put; for a delete, the key with an empty value and
    /// `mod_revision` = the revision of the delete.
    pub kv: KeyValue,
    /// The value before this event (None for a create).
    pub prev_kv: Option<KeyValue>,
}

impl Event {
    /// The revision at which this event happened.
    pub fn revision(&self) -> Revision {
        self.kv.mod_revision
    }
    /// True for a put whose key did not exist before.
    pub fn is_create(&self) -> bool {
        self.kind == EventKind::Put && self.kv.create_revision == self.kv.mod_revision
    }
}

/// A message on a watch stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchResponse {
    /// Events, in revision order.
    Events(Vec<Event>),
    /// A progress notification: every event up to `revision` has been delivered.
    Progress {
        /// The store's revision when the notification was produced.
        revision: Revision,
    },
}

/// A stream of watch responses. It ends (or yields an error) when the watch
/// breaks; a watch from a compacted revision yields `Err(Compacted)` first.
pub type WatchStream = Pin<Box<dyn Stream<Item = Result<WatchResponse>> + Send>>;

/// Asks the watch it belongs to for a progress notification.
pub trait ProgressRequester: Send + Sync {
    /// Request one [`WatchResponse::Progress`] on the watch. Fire and forget.
    fn request_progress(&self);
}

/// A live watch: its event stream and a handle to request progress.
pub struct Watch {
    /// The responses.
    pub stream: WatchStream,
    /// Requests progress notifications on this watch.
    pub progress: Arc<dyn ProgressRequester>,
}

impl fmt::Debug for Watch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Watch").finish_non_exhaustive()
    }
}

/// Storage with etcd v3 semantics. All methods are safe to call concurrently.
///
/// Keys are UTF-8 strings such as `/registry/pods/default/web-0`.
#[async_trait::async_trait]
pub trait Storage: Send + Sync + 'static {
    /// Human name of the backend (`embedded` or `etcd`), used in metrics labels.
    fn backend_name(&self) -> &'static str;

    /// Read one key at the latest revision. `Ok(None)` when absent.
    async fn get(&self, key: &str) -> Result<Option<KeyValue>>;

    /// Read a range of keys at a revision (0 = latest).
    /// Errors: `Compacted` below the compacted revision, `FutureRevision` above the current one.
    async fn range(&self, req: RangeRequest) -> Result<RangeResponse>;

    /// Create `key`; fails with `AlreadyExists` if it exists. Returns the new key-value.
    async fn create(&self, key: &str, value: Bytes) -> Result<KeyValue>;

    /// Replace `key`'s value if its `mod_revision` equals `expected_mod_revision`.
    /// Errors: `NotFound` if absent, `Conflict` if the guard fails.
    async fn update(&self, key: &str, value: Bytes, expected_mod_revision: Revision) -> Result<KeyValue>;

    /// Delete `key`, guarded by `expected_mod_revision` when given.
    /// Returns the deleted key-value (its last state) and the revision of the delete.
    /// Errors: `NotFound`, `Conflict`.
    async fn delete(&self, key: &str, expected_mod_revision: Option<Revision>) -> Result<(KeyValue, Revision)>;

    /// Watch keys under `prefix` for every event with revision > `after_revision`
    /// (so `after_revision` = the revision of a LIST gives exactly what came after it).
    /// `after_revision` = 0 means "from now". Errors: `Compacted`.
    async fn watch(&self, prefix: &str, after_revision: Revision) -> Result<Watch>;

    /// The store's current revision (a quorum read on etcd).
    async fn current_revision(&self) -> Result<Revision>;

    /// The revision below which history is gone (0 when never compacted).
    async fn compacted_revision(&self) -> Result<Revision>;

    /// Drop history below `revision`. Reads and watches below it then fail with `Compacted`.
    async fn compact(&self, revision: Revision) -> Result<()>;

    /// Whether the backend accepts writes now: `Err` (e.g. [`StorageError::NoSpace`])
    /// while its writes fail for a reason that is not the request's, `Ok`
    /// otherwise. Backs `/readyz/etcd` (upstream's storage readiness check,
    /// `staging/src/k8s.io/apiserver/pkg/storage/storagebackend/factory/etcd3.go`,
    /// fails on etcd errors likewise). The embedded store probes its disk
    /// again (at most once a second) while faulted; other backends report
    /// `Ok` and are checked by reachability.
    async fn write_health(&self) -> Result<()> {
        Ok(())
    }

    /// Whether requested progress notifications can be trusted as soon as the
    /// watch is created (false on etcd older than 3.4.31 / 3.5.13, issue 15220).
    fn progress_notify_reliable(&self) -> bool {
        true
    }
}

/// The smallest key greater than every key starting with `prefix` (etcd's `GetPrefixRangeEnd`).
pub fn prefix_end(prefix: &str) -> String {
    let mut bytes = prefix.as_bytes().to_vec();
    while let Some(last) = bytes.pop() {
        if last < 0xff {
            bytes.push(last + 1);
            return String::from_utf8_lossy(&bytes).into_owned();
        }
    }
    "\0".to_string()
}
