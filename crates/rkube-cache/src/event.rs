//! Events: the cache's own record of a change ([`CacheEvent`], kept in the
//! history and shared by every watcher) and what a watcher receives
//! ([`WatchEvent`]).
//!
//! A change is decoded once into a `CacheEvent`; each watcher gets a
//! `WatchEvent` holding the same `Arc<CachedObject>`, so N watchers cost N
//! pointer copies, never N serializations (upstream `cachingObject`).

use std::sync::{Arc, OnceLock};

use bytes::{BufMut, Bytes, BytesMut};
use tokio::time::Instant;

use crate::error::CacheError;
use crate::store::CachedObject;

/// Annotation set on the bookmark that ends the initial events of a WatchList.
pub const INITIAL_EVENTS_END_ANNOTATION: &str = "k8s.io/initial-events-end";

/// What happened to an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// Created.
    Added,
    /// Updated.
    Modified,
    /// Deleted.
    Deleted,
}

/// One change as the cache recorded it (upstream `watchCacheEvent`).
#[derive(Debug)]
pub struct CacheEvent {
    /// Kind of change.
    pub kind: EventKind,
    /// The new state; for a deletion, the last state with `resourceVersion`
    /// set to the deletion revision (what upstream sends in DELETED).
    pub object: Arc<CachedObject>,
    /// The state before the change (`None` for a creation).
    pub prev_object: Option<Arc<CachedObject>>,
    /// The revision of the change.
    pub resource_version: i64,
    /// When the cache received it (drives history sizing).
    pub record_time: Instant,
    /// `prev_object` at this event's revision, built on first use (a watcher
    /// whose selector stops matching gets DELETED with it).
    prev_at_event_rv: OnceLock<Arc<CachedObject>>,
}

impl CacheEvent {
    /// A new event.
    pub fn new(
        kind: EventKind,
        object: Arc<CachedObject>,
        prev_object: Option<Arc<CachedObject>>,
        resource_version: i64,
        record_time: Instant,
    ) -> Self {
        CacheEvent { kind, object, prev_object, resource_version, record_time, prev_at_event_rv: OnceLock::new() }
    }

    /// The previous state re-stamped with this event's revision (serialized
    /// at most once per event, shared by every watcher that needs it).
    pub fn prev_at_event_rv(&self) -> Option<Arc<CachedObject>> {
        let prev = self.prev_object.as_ref()?;
        if self.kind == EventKind::Deleted {
            return Some(self.object.clone());
        }
        Some(self.prev_at_event_rv.get_or_init(|| Arc::new(prev.with_resource_version(self.resource_version))).clone())
    }
}

/// A bookmark: "every event up to `resource_version` has been sent".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bookmark {
    /// The revision the watcher is known to be synced to.
    pub resource_version: i64,
    /// True on the bookmark that ends a WatchList's initial events
    /// (annotation `k8s.io/initial-events-end: "true"`).
    pub initial_events_end: bool,
}

/// One item of a [`crate::CacheWatch`] stream.
#[derive(Debug, Clone)]
pub enum WatchEvent {
    /// `ADDED` (also the synthetic events of the initial state).
    Added(Arc<CachedObject>),
    /// `MODIFIED`.
    Modified(Arc<CachedObject>),
    /// `DELETED`: the object's last state at the deletion revision.
    Deleted(Arc<CachedObject>),
    /// `BOOKMARK` (only with `allowWatchBookmarks=true`).
    Bookmark(Bookmark),
    /// `ERROR`: the stream ends after it (e.g. 410 `Expired` for a too old resourceVersion).
    Error(CacheError),
}

impl WatchEvent {
    /// The event type as written on the wire: `ADDED`, `MODIFIED`, `DELETED`, `BOOKMARK`, `ERROR`.
    pub fn type_name(&self) -> &'static str {
        match self {
            WatchEvent::Added(_) => "ADDED",
            WatchEvent::Modified(_) => "MODIFIED",
            WatchEvent::Deleted(_) => "DELETED",
            WatchEvent::Bookmark(_) => "BOOKMARK",
            WatchEvent::Error(_) => "ERROR",
        }
    }

    /// The object carried, for ADDED / MODIFIED / DELETED.
    pub fn object(&self) -> Option<&Arc<CachedObject>> {
        match self {
            WatchEvent::Added(o) | WatchEvent::Modified(o) | WatchEvent::Deleted(o) => Some(o),
            _ => None,
        }
    }

    /// The resourceVersion of the object or bookmark.
    pub fn resource_version(&self) -> Option<i64> {
        match self {
            WatchEvent::Bookmark(b) => Some(b.resource_version),
            WatchEvent::Error(_) => None,
            _ => self.object().map(|o| o.resource_version),
        }
    }

    /// The event as one line of a JSON watch stream:
    /// `{"type":"ADDED","object":<object JSON>}\n`. Object bytes are copied
    /// as cached, never re-serialized. Bookmarks carry an object of `kind` /
    /// `api_version` with only `metadata.resourceVersion` (and the
    /// initial-events-end annotation); errors carry the `Status` object.
    pub fn to_json_line(&self, kind: &str, api_version: &str) -> Bytes {
        let type_name = self.type_name();
        match self {
            WatchEvent::Added(o) | WatchEvent::Modified(o) | WatchEvent::Deleted(o) => {
                let mut b = BytesMut::with_capacity(o.json.len() + 32);
                b.put_slice(b"{\"type\":\"");
                b.put_slice(type_name.as_bytes());
                b.put_slice(b"\",\"object\":");
                b.put_slice(&o.json);
                b.put_slice(b"}\n");
                b.freeze()
            }
            WatchEvent::Bookmark(bm) => {
                let mut meta = serde_json::json!({ "resourceVersion": bm.resource_version.to_string() });
                if bm.initial_events_end {
                    meta["annotations"] = serde_json::json!({ INITIAL_EVENTS_END_ANNOTATION: "true" });
                }
                let line = serde_json::json!({
                    "type": type_name,
                    "object": { "kind": kind, "apiVersion": api_version, "metadata": meta },
                });
                let mut v = serde_json::to_vec(&line).unwrap_or_default();
                v.push(b'\n');
                Bytes::from(v)
            }
            WatchEvent::Error(e) => {
                let status = rkube_api::status::Status::from(e.clone());
                let line = serde_json::json!({ "type": type_name, "object": status.to_json() });
                let mut v = serde_json::to_vec(&line).unwrap_or_default();
                v.push(b'\n');
                Bytes::from(v)
            }
        }
    }
}
