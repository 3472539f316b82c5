//! The errors a client of the cache can see, and their one mapping to a
//! Kubernetes `Status` (used by the API server at its HTTP edge).

use rkube_api::status::{Status, StatusDetails};
use rkube_storage::StorageError;

/// Result alias for cache operations.
pub type Result<T, E = CacheError> = std::result::Result<T, E>;

/// Message of a 410 for a LIST at a compacted resourceVersion (upstream etcd3 `expired`).
pub const EXPIRED_LIST_MESSAGE: &str = "The resourceVersion for the provided list is too old.";
/// Message of a 410 for a continue token at a compacted resourceVersion (upstream etcd3).
pub const EXPIRED_CONTINUE_MESSAGE: &str = "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.";

/// What can go wrong serving a LIST, GET or WATCH.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum CacheError {
    /// The cache is (re)initializing (KEP-4568). API: 429 `TooManyRequests`,
    /// `storage is (re)initializing`, `Retry-After: retry_after_secs`.
    #[error("storage is (re)initializing")]
    NotReady {
        /// Seconds for the `Retry-After` header (1..=30).
        retry_after_secs: u64,
    },
    /// Events after `requested` are gone from the history. API: 410
    /// `Expired`, `too old resource version: N (M)`.
    #[error("too old resource version: {requested} ({oldest})")]
    TooOldResourceVersion {
        /// The requested resourceVersion.
        requested: i64,
        /// The oldest one still available.
        oldest: i64,
    },
    /// The cache did not reach `requested` within 3 s. API: 504 `Timeout`,
    /// cause `ResourceVersionTooLarge`, `Retry-After: 1`.
    #[error("Too large resource version: {requested}, current: {current}")]
    TooLargeResourceVersion {
        /// The requested resourceVersion.
        requested: i64,
        /// The cache's (or storage's) current one.
        current: i64,
    },
    /// A read from storage at a compacted revision. API: 410 `Expired` with `message`.
    #[error("{message}")]
    Expired {
        /// [`EXPIRED_LIST_MESSAGE`] or [`EXPIRED_CONTINUE_MESSAGE`].
        message: String,
    },
    /// Invalid request options (bad resourceVersion, match, continue token). API: 400 `BadRequest`.
    #[error("{0}")]
    BadRequest(String),
    /// Storage failed. API: by kind (410 compacted, 504 future revision, 503 unavailable, 500).
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// With `ResilientWatchCacheInitialization` off, the cache did not become
    /// ready within a request's wait (pre-KEP-4568 behaviour). API: 503
    /// `ServiceUnavailable`, `storage is (re)initializing`.
    #[error("storage is (re)initializing")]
    NotReadyTimeout,
    /// The cacher was stopped. API: 503 `ServiceUnavailable`.
    #[error("apiserver cacher is stopped")]
    Stopped,
}

impl CacheError {
    /// Whether the cache is (re)initializing ([`CacheError::NotReady`] or
    /// [`CacheError::NotReadyTimeout`]): storage can still answer.
    pub fn is_not_ready(&self) -> bool {
        matches!(self, CacheError::NotReady { .. } | CacheError::NotReadyTimeout)
    }
}

impl From<CacheError> for Status {
    fn from(e: CacheError) -> Status {
        match e {
            CacheError::NotReady { retry_after_secs } => {
                Status::too_many_requests("storage is (re)initializing", retry_after_secs)
            }
            CacheError::TooOldResourceVersion { requested, oldest } => Status::too_old_resource_version(requested, oldest),
            CacheError::TooLargeResourceVersion { requested, current } => {
                Status::too_large_resource_version(requested, current)
            }
            CacheError::Expired { message } => Status::expired(message),
            CacheError::BadRequest(msg) => Status::bad_request(msg),
            CacheError::Storage(s) => storage_status(s, Target::default(), StorageOp::List),
            CacheError::NotReadyTimeout => Status::service_unavailable("storage is (re)initializing"),
            CacheError::Stopped => Status::service_unavailable("apiserver cacher is stopped"),
        }
    }
}

/// What a failed storage call was doing; picks the 410 message (upstream
/// `storage/etcd3/store.go` for LIST and continue, the watch cache's
/// `too old resource version` otherwise).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StorageOp {
    /// GET, create, update or delete of one object.
    Object,
    /// A LIST without a continue token.
    List,
    /// A LIST with a continue token.
    Continue,
    /// A WATCH.
    Watch,
}

/// The object a failed storage call was about (the resource's group and
/// plural, and the object's name, `""` for collections): named in the
/// `NotFound`, `AlreadyExists` and `Conflict` messages.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Target<'a> {
    /// API group (`""` for core).
    pub group: &'a str,
    /// Resource plural.
    pub resource: &'a str,
    /// Object name.
    pub name: &'a str,
}

/// Seconds a client is told to wait (`Retry-After`, `details.retryAfterSeconds`)
/// when storage is unreachable.
pub const UNAVAILABLE_RETRY_AFTER_SECS: u64 = 1;

/// The one mapping of a [`StorageError`] to the `Status` a client sees
/// (upstream `staging/src/k8s.io/apiserver/pkg/storage/errors/storage.go`
/// `Interpret*Error`, `storage/errors.go` and `storage/etcd3/store.go`):
///
/// | error | code, reason | message |
/// |---|---|---|
/// | `NotFound` | 404 `NotFound` | `<resource> "<name>" not found` |
/// | `AlreadyExists` | 409 `AlreadyExists` | `<resource> "<name>" already exists` |
/// | `Conflict` | 409 `Conflict` | `Operation cannot be fulfilled on <resource> "<name>": the object has been modified; ...` |
/// | `Compacted`, LIST | 410 `Expired` | [`EXPIRED_LIST_MESSAGE`] |
/// | `Compacted`, continue | 410 `Expired` | [`EXPIRED_CONTINUE_MESSAGE`] |
/// | `Compacted`, GET / write / WATCH | 410 `Expired` | `too old resource version: N (M)` |
/// | `FutureRevision` | 504 `Timeout`, cause `ResourceVersionTooLarge`, `Retry-After: 1` | `Timeout: Too large resource version: N, current: M` |
/// | `Unavailable` | 503 `ServiceUnavailable`, `Retry-After: 1` | `storage unavailable: <why>` |
/// | `Internal` | 500 `InternalError` | `Internal error occurred: <why>` |
///
/// Upstream answers an unreachable etcd with a 504 `ServerTimeout` after its
/// client's retries time out; rkube fails fast with a 503 and `Retry-After`,
/// which every client retries the same way.
pub fn storage_status(err: StorageError, target: Target<'_>, op: StorageOp) -> Status {
    let Target { group, resource, name } = target;
    match err {
        StorageError::NotFound { .. } => Status::not_found(group, resource, name),
        StorageError::AlreadyExists { .. } => Status::already_exists(group, resource, name),
        StorageError::Conflict { .. } => Status::conflict(
            group,
            resource,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        ),
        StorageError::Compacted { requested, compacted } => match op {
            StorageOp::List => Status::expired(EXPIRED_LIST_MESSAGE),
            StorageOp::Continue => Status::expired(EXPIRED_CONTINUE_MESSAGE),
            StorageOp::Object | StorageOp::Watch => Status::too_old_resource_version(requested, compacted),
        },
        StorageError::FutureRevision { requested, current } => Status::too_large_resource_version(requested, current),
        StorageError::Unavailable(msg) => {
            let mut s = Status::service_unavailable(format!("storage unavailable: {msg}"));
            s.details = Some(StatusDetails {
                retry_after_seconds: Some(UNAVAILABLE_RETRY_AFTER_SECS),
                ..StatusDetails::default()
            });
            s
        }
        // A full disk: nothing was written and the store recovers by itself
        // once space is freed, so answer like an unavailable backend (503 +
        // Retry-After), which client-go retries
        // (`staging/src/k8s.io/client-go/rest/with_retry.go`), rather than a
        // final 500; the message names the cause.
        StorageError::NoSpace(msg) => {
            let mut s = Status::service_unavailable(format!("storage write failed: {msg}"));
            s.details = Some(StatusDetails {
                retry_after_seconds: Some(UNAVAILABLE_RETRY_AFTER_SECS),
                ..StatusDetails::default()
            });
            s
        }
        StorageError::Internal(msg) => Status::internal(msg),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_map_to_the_status_a_client_sees() {
        // (error, code, reason, message contains)
        let cases = [
            (CacheError::NotReady { retry_after_secs: 3 }, 429, "TooManyRequests", "storage is (re)initializing"),
            (CacheError::TooOldResourceVersion { requested: 5, oldest: 9 }, 410, "Expired", "too old resource version: 5 (9)"),
            (
                CacheError::TooLargeResourceVersion { requested: 50, current: 9 },
                504,
                "Timeout",
                "Too large resource version: 50, current: 9",
            ),
            (CacheError::BadRequest("bad".into()), 400, "BadRequest", "bad"),
            (CacheError::NotReadyTimeout, 503, "ServiceUnavailable", "storage is (re)initializing"),
            (
                CacheError::Storage(StorageError::Compacted { requested: 1, compacted: 5 }),
                410,
                "Expired",
                EXPIRED_LIST_MESSAGE,
            ),
        ];
        for (err, code, reason, msg) in cases {
            let s = Status::from(err.clone());
            assert_eq!((s.code(), s.reason()), (code, reason), "{err:?}");
            assert!(s.message().contains(msg), "{err:?}: {}", s.message());
        }
        let s = Status::from(CacheError::NotReady { retry_after_secs: 3 });
        assert_eq!(s.retry_after(), Some(3));
        let s = Status::from(CacheError::TooLargeResourceVersion { requested: 2, current: 1 });
        assert_eq!(s.retry_after(), Some(1));
        // A storage failure inside a cache read maps like any other storage failure.
        let s = Status::from(CacheError::Storage(StorageError::Unavailable("down".into())));
        assert_eq!((s.code(), s.reason(), s.message(), s.retry_after()), (503, "ServiceUnavailable", "storage unavailable: down", Some(1)));
    }

    #[test]
    fn storage_errors_map_to_upstream_status_in_one_place() {
        let pod = Target { group: "", resource: "pods", name: "web" };
        let deploy = Target { group: "apps", resource: "deployments", name: "d" };
        let compacted = || StorageError::Compacted { requested: 3, compacted: 8 };
        // (error, target, op, code, reason, message, Retry-After)
        type Case<'a> = (StorageError, Target<'a>, StorageOp, u16, &'a str, String, Option<u64>);
        let cases: Vec<Case> = vec![
            (StorageError::NotFound { key: "k".into() }, pod, StorageOp::Object, 404, "NotFound", r#"pods "web" not found"#.into(), None),
            (StorageError::NotFound { key: "k".into() }, deploy, StorageOp::Object, 404, "NotFound", r#"deployments.apps "d" not found"#.into(), None),
            (StorageError::AlreadyExists { key: "k".into() }, pod, StorageOp::Object, 409, "AlreadyExists", r#"pods "web" already exists"#.into(), None),
            (
                StorageError::Conflict { key: "k".into(), expected: 1, actual: 2 },
                pod,
                StorageOp::Object,
                409,
                "Conflict",
                r#"Operation cannot be fulfilled on pods "web": the object has been modified; please apply your changes to the latest version and try again"#.into(),
                None,
            ),
            (compacted(), pod, StorageOp::List, 410, "Expired", EXPIRED_LIST_MESSAGE.into(), None),
            (compacted(), pod, StorageOp::Continue, 410, "Expired", EXPIRED_CONTINUE_MESSAGE.into(), None),
            (compacted(), pod, StorageOp::Watch, 410, "Expired", "too old resource version: 3 (8)".into(), None),
            (compacted(), pod, StorageOp::Object, 410, "Expired", "too old resource version: 3 (8)".into(), None),
            (
                StorageError::FutureRevision { requested: 50, current: 9 },
                pod,
                StorageOp::List,
                504,
                "Timeout",
                "Timeout: Too large resource version: 50, current: 9".into(),
                Some(1),
            ),
            (StorageError::Unavailable("etcd down".into()), pod, StorageOp::Object, 503, "ServiceUnavailable", "storage unavailable: etcd down".into(), Some(1)),
            (StorageError::Unavailable("etcd down".into()), pod, StorageOp::List, 503, "ServiceUnavailable", "storage unavailable: etcd down".into(), Some(1)),
            (StorageError::Internal("boom".into()), pod, StorageOp::Object, 500, "InternalError", "Internal error occurred: boom".into(), None),
        ];
        for (err, target, op, code, reason, message, retry) in cases {
            let s = storage_status(err.clone(), target, op);
            assert_eq!((s.code(), s.reason(), s.message(), s.retry_after()), (code, reason, message.as_str(), retry), "{err:?} {op:?}");
        }
        let s = storage_status(StorageError::FutureRevision { requested: 50, current: 9 }, pod, StorageOp::List);
        let cause = &s.details.as_ref().expect("details").causes[0];
        assert_eq!(cause.reason, "ResourceVersionTooLarge");
    }
}
