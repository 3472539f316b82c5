//! The read path: GET, LIST and WATCH go through one trait, [`ReadSource`].
//!
//! Today [`StorageSource`] serves it straight from [`Storage`]; the watch
//! cache (issue 3) will implement the same trait and replace it without the
//! handlers noticing. Objects come out decoded, with `metadata.resourceVersion`
//! set to their `mod_revision` (upstream's etcd3 store keeps the stored bytes
//! free of a resourceVersion and sets it on read, `storage/etcd3/store.go`).

use std::pin::Pin;
use std::sync::Arc;

use futures::{Stream, StreamExt};
use rkube_api::registry::{self, ResourceInfo};
use rkube_api::selector::{FieldSelector, LabelSelector};
use rkube_storage::{
    prefix_end, Event, EventKind, KeyValue, ProgressRequester, RangeRequest, Revision, Storage, StorageError,
    WatchResponse,
};
use serde_json::Value;

/// Result alias for reads.
pub type SourceResult<T> = Result<T, StorageError>;

/// Label and field selectors of a LIST or WATCH (upstream `SelectionPredicate`).
#[derive(Debug, Clone, Default)]
pub struct Predicate {
    /// `labelSelector=`.
    pub label: LabelSelector,
    /// `fieldSelector=`.
    pub field: FieldSelector,
}

impl Predicate {
    /// True when both selectors are empty (every object matches).
    pub fn is_everything(&self) -> bool {
        self.label.is_empty() && self.field.is_empty()
    }

    /// Whether `obj` (of resource `info`) satisfies both selectors.
    pub fn matches(&self, info: &ResourceInfo, obj: &Value) -> bool {
        if !self.label.is_empty() {
            let empty = serde_json::Map::new();
            let labels = obj.pointer("/metadata/labels").and_then(Value::as_object).unwrap_or(&empty);
            if !self.label.matches(labels) {
                return false;
            }
        }
        self.field.is_empty() || self.field.matches(|f| registry::field_value(info, obj, f))
    }
}

/// One LIST read.
#[derive(Debug, Clone)]
pub struct ListRequest<'a> {
    /// The resource listed.
    pub info: &'static ResourceInfo,
    /// Key prefix to list (ends in `/`): the resource prefix, or a namespace under it.
    pub prefix: String,
    /// Revision to read at; 0 = latest.
    pub revision: Revision,
    /// Absolute key to start at (inclusive), from a continue token.
    pub start_key: Option<String>,
    /// Page size; 0 = everything.
    pub limit: usize,
    /// Selectors.
    pub predicate: &'a Predicate,
}

/// One page of a LIST.
#[derive(Debug, Clone, Default)]
pub struct ListPage {
    /// Matching objects in key order, each with `metadata.resourceVersion` set.
    pub items: Vec<Value>,
    /// The revision the list was read at (the list's `metadata.resourceVersion`).
    pub revision: Revision,
    /// When more keys follow the page: the absolute key of the page's last item
    /// (the continue token starts right after it).
    pub last_key: Option<String>,
    /// Keys left after the page (only without selectors, as upstream).
    pub remaining: Option<i64>,
}

/// A change seen by a watch, with decoded objects.
#[derive(Debug, Clone)]
pub enum SourceEvent {
    /// A create or update at `revision`: the new object and, for updates, the previous one.
    Put {
        /// The object after the change (resourceVersion = the event's revision).
        object: Value,
        /// The object before the change (None for a create).
        prev: Option<Value>,
        /// Revision of the change.
        revision: Revision,
    },
    /// A delete at `revision`: the last state, with resourceVersion = the delete's revision.
    Delete {
        /// The object's last state.
        object: Value,
        /// Revision of the delete.
        revision: Revision,
    },
    /// Every event up to `revision` has been delivered.
    Progress(Revision),
}

/// A stream of watch batches; ends or yields an error when the watch breaks.
pub type SourceStream = Pin<Box<dyn Stream<Item = SourceResult<Vec<SourceEvent>>> + Send>>;

/// A live watch on a [`ReadSource`].
pub struct SourceWatch {
    /// The batches of events.
    pub events: SourceStream,
    /// Asks for a progress notification (used for bookmarks).
    pub progress: Arc<dyn ProgressRequester>,
}

/// Where GET, LIST and WATCH are served from (storage now, the watch cache later).
#[async_trait::async_trait]
pub trait ReadSource: Send + Sync + 'static {
    /// The object at `key` (latest), with its resourceVersion set.
    async fn get(&self, key: &str) -> SourceResult<Option<Value>>;
    /// One page of a list.
    async fn list(&self, req: ListRequest<'_>) -> SourceResult<ListPage>;
    /// Every change under `prefix` after `after_revision` (0 = from now).
    async fn watch(&self, prefix: &str, after_revision: Revision) -> SourceResult<SourceWatch>;
    /// The latest revision.
    async fn current_revision(&self) -> SourceResult<Revision>;
    /// Whether a requested progress notification can be trusted to mean
    /// "every event up to its revision was delivered" (see
    /// [`Storage::progress_notify_reliable`]).
    fn progress_reliable(&self) -> bool {
        true
    }

    // Options-level reads, for sources that route by the request itself (the
    // watch cache, `crate::cache_source`); served by `crate::cached_read`.
    // `None` (the default): not served this way; the handler uses the
    // methods above.

    /// GET `key` of `info` honouring `resourceVersion`; the object's JSON.
    async fn get_by_options(
        &self,
        _info: &'static ResourceInfo,
        _key: &str,
        _resource_version: Option<&str>,
    ) -> Option<Result<Option<bytes::Bytes>, rkube_api::status::Status>> {
        None
    }

    /// LIST `info` in `namespace` (None = all) with the request's options; items as JSON bytes.
    async fn list_by_options(
        &self,
        _info: &'static ResourceInfo,
        _namespace: Option<&str>,
        _opts: &rkube_api::list_options::ListOptions,
    ) -> Option<Result<crate::cached_read::RawList, rkube_api::status::Status>> {
        None
    }

    /// WATCH `info` in `namespace` (None = all) with the request's options.
    async fn watch_by_options(
        &self,
        _info: &'static ResourceInfo,
        _namespace: Option<&str>,
        _opts: &rkube_api::list_options::ListOptions,
    ) -> Option<Result<rkube_cache::CacheWatch, rkube_api::status::Status>> {
        None
    }
}

/// Decodes a stored object and sets its resourceVersion to `revision`.
pub fn decode_stored(kv_key: &str, bytes: &[u8], revision: Revision) -> SourceResult<Value> {
    let mut obj: Value = serde_json::from_slice(bytes)
        .map_err(|e| StorageError::Internal(format!("cannot decode object at {kv_key}: {e}")))?;
    set_resource_version(&mut obj, revision);
    Ok(obj)
}

/// Sets `metadata.resourceVersion` to `revision`, with the object's keys in
/// typed order ([`rkube_api::wire::order_object_keys`]: `kind` first, the
/// resourceVersion in its `ObjectMeta` place).
pub fn set_resource_version(obj: &mut Value, revision: Revision) {
    if let Some(map) = obj.as_object_mut() {
        let meta = map.entry("metadata").or_insert_with(|| Value::Object(Default::default()));
        if let Some(meta) = meta.as_object_mut() {
            meta.insert("resourceVersion".into(), Value::String(revision.to_string()));
        }
    }
    rkube_api::wire::order_object_keys(obj);
}

fn decode_kv(kv: &KeyValue) -> SourceResult<Value> {
    decode_stored(&kv.key, &kv.value, kv.mod_revision)
}

/// [`ReadSource`] served straight from [`Storage`].
pub struct StorageSource {
    storage: Arc<dyn Storage>,
}

impl StorageSource {
    /// Reads from `storage`.
    pub fn new(storage: Arc<dyn Storage>) -> Self {
        StorageSource { storage }
    }
}

/// Largest storage page fetched while filtering a LIST with selectors.
const MAX_FILTER_PAGE: usize = 10_000;

#[async_trait::async_trait]
impl ReadSource for StorageSource {
    async fn get(&self, key: &str) -> SourceResult<Option<Value>> {
        match self.storage.get(key).await? {
            Some(kv) => Ok(Some(decode_kv(&kv)?)),
            None => Ok(None),
        }
    }

    async fn list(&self, req: ListRequest<'_>) -> SourceResult<ListPage> {
        let end = prefix_end(&req.prefix);
        let mut start = req.start_key.clone().unwrap_or_else(|| req.prefix.clone());
        if start < req.prefix {
            start = req.prefix.clone();
        }
        let filtering = !req.predicate.is_everything();
        let mut revision = req.revision;
        let mut page = ListPage::default();
        // Upstream's etcd3 store: read `limit` keys, filter, and keep reading
        // (doubling the page) until `limit` items matched or keys run out.
        let mut fetch = if req.limit == 0 { 0 } else { req.limit };
        loop {
            let resp = self
                .storage
                .range(RangeRequest {
                    start: start.clone(),
                    end: end.clone(),
                    revision,
                    limit: fetch,
                    count_only: false,
                })
                .await?;
            if revision == 0 {
                revision = resp.revision;
            }
            let n = resp.kvs.len();
            let mut last_taken: Option<String> = None;
            let mut filled_at: Option<usize> = None;
            for (i, kv) in resp.kvs.iter().enumerate() {
                let obj = decode_kv(kv)?;
                if !filtering || req.predicate.matches(req.info, &obj) {
                    page.items.push(obj);
                    last_taken = Some(kv.key.clone());
                    if req.limit > 0 && page.items.len() == req.limit {
                        filled_at = Some(i);
                        break;
                    }
                }
            }
            if let Some(i) = filled_at {
                let more_here = i + 1 < n || resp.more;
                if more_here {
                    page.last_key = last_taken;
                    if !filtering {
                        page.remaining = Some(resp.count - (i as i64 + 1));
                    }
                }
                break;
            }
            if !resp.more || n == 0 {
                break;
            }
            // Continue after the last key read.
            let last = resp.kvs[n - 1].key.clone();
            start = format!("{last}\u{0}");
            fetch = (fetch * 2).clamp(1, MAX_FILTER_PAGE);
        }
        page.revision = revision;
        Ok(page)
    }

    async fn watch(&self, prefix: &str, after_revision: Revision) -> SourceResult<SourceWatch> {
        let watch = self.storage.watch(prefix, after_revision).await?;
        let events = watch.stream.map(|resp| match resp? {
            WatchResponse::Progress { revision } => Ok(vec![SourceEvent::Progress(revision)]),
            WatchResponse::Events(events) => events.iter().map(convert_event).collect(),
        });
        Ok(SourceWatch { events: Box::pin(events), progress: watch.progress })
    }

    async fn current_revision(&self) -> SourceResult<Revision> {
        self.storage.current_revision().await
    }

    fn progress_reliable(&self) -> bool {
        self.storage.progress_notify_reliable()
    }
}

fn convert_event(ev: &Event) -> SourceResult<SourceEvent> {
    let revision = ev.revision();
    match ev.kind {
        EventKind::Put => {
            let object = decode_kv(&ev.kv)?;
            let prev = match &ev.prev_kv {
                Some(p) if !ev.is_create() => Some(decode_kv(p)?),
                _ => None,
            };
            Ok(SourceEvent::Put { object, prev, revision })
        }
        EventKind::Delete => {
            let prev = ev
                .prev_kv
                .as_ref()
                .ok_or_else(|| StorageError::Internal(format!("delete event without previous value: {}", ev.kv.key)))?;
            let object = decode_stored(&prev.key, &prev.value, revision)?;
            Ok(SourceEvent::Delete { object, revision })
        }
    }
}
