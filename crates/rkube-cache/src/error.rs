//! The errors a client of the cache can see, and their one mapping to a
//! Kubernetes `Status` (used by the API server at its HTTP edge).

use rkube_api::status::Status;
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
    /// The cacher was stopped. API: 503 `ServiceUnavailable`.
    #[error("apiserver cacher is stopped")]
    Stopped,
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
            CacheError::Storage(s) => match s {
                StorageError::Compacted { .. } => Status::expired(EXPIRED_LIST_MESSAGE),
                StorageError::FutureRevision { requested, current } => {
                    Status::too_large_resource_version(requested, current)
                }
                StorageError::Unavailable(m) => Status::service_unavailable(m),
                other => Status::internal(other),
            },
            CacheError::Stopped => Status::service_unavailable("apiserver cacher is stopped"),
        }
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
    }
}
