//! The cache's store: a persistent ordered map from key to cached object.
//!
//! Follows upstream `cacher/store_btree.go`: a B-tree keyed by object key whose
//! `Clone()` is O(1) (structural sharing), which is what makes a snapshot per
//! event affordable (KEP-4988). Here the tree is [`imbl::OrdMap`].
//!
//! Keys are **relative to the resource prefix**: `default/web-0` for
//! `/registry/pods/default/web-0`, `node-1` for `/registry/minions/node-1`.
//! Keys of one namespace are therefore the range `[ns/, ns0)`.
//!
//! Each object is decoded **once** when it enters the cache ([`CachedObject`]):
//! its JSON bytes (with `metadata.resourceVersion` set to the storage
//! `mod_revision`), its labels and its selectable fields. LIST, WATCH and
//! every snapshot then share the same `Arc`.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use bytes::Bytes;
use imbl::OrdMap;
use rkube_api::registry::{self, ResourceInfo};
use serde_json::Value;

use crate::filter::Predicate;

/// Extracts an object's selectable fields besides `metadata.name` and
/// `metadata.namespace`, which the cache adds itself, e.g. for pods
/// `spec.nodeName`, `status.phase`, ... (upstream `GetAttrs` / `ToSelectableFields`).
#[derive(Debug, Clone, Copy)]
pub enum FieldExtractor {
    /// No other field (resources whose only selectable fields are
    /// `metadata.name` and `metadata.namespace`).
    None,
    /// The selectable fields of a resource-table row: each of `info.fields`
    /// read with [`registry::field_value`]. Works for rows added while the
    /// server runs (CRDs) as for built-in ones.
    Resource(&'static ResourceInfo),
    /// A function (tests, resources outside the table).
    Fn(fn(&Value) -> Vec<(String, String)>),
}

impl FieldExtractor {
    /// The `(field, value)` pairs of `v`; fields the object lacks are left out.
    pub fn extract(&self, v: &Value) -> Vec<(String, String)> {
        match self {
            FieldExtractor::None => Vec::new(),
            FieldExtractor::Resource(info) => info
                .fields
                .iter()
                .filter_map(|f| registry::field_value(info, v, f.label).map(|val| (f.label.to_string(), val)))
                .collect(),
            FieldExtractor::Fn(f) => f(v),
        }
    }
}

/// Result alias for this module.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// Errors decoding a stored value into a [`CachedObject`].
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum StoreError {
    /// The value is not a JSON object.
    #[error("object at key {key:?} is not a JSON object: {reason}")]
    Undecodable {
        /// The relative key.
        key: String,
        /// Why decoding failed.
        reason: String,
    },
}

/// One object as the cache holds it. Immutable; shared by `Arc` between the
/// store, its snapshots, the event history and every watcher.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CachedObject {
    /// Key relative to the resource prefix (`namespace/name` or `name`).
    pub key: String,
    /// `metadata.namespace`, `None` for cluster-scoped objects.
    pub namespace: Option<String>,
    /// `metadata.name`.
    pub name: String,
    /// The object's resourceVersion (storage `mod_revision`).
    pub resource_version: i64,
    /// The object's JSON, serialized once, with `metadata.resourceVersion` set.
    pub json: Bytes,
    /// `metadata.labels`.
    pub labels: BTreeMap<String, String>,
    /// Selectable fields: `metadata.name`, `metadata.namespace` (namespaced
    /// objects) and whatever the resource's [`FieldExtractor`] returned.
    pub fields: Vec<(String, String)>,
    /// Other encodings of [`CachedObject::json`], each made once on first
    /// use and then shared by every reader (upstream's `CachingObject`).
    pub encodings: Encodings,
}

/// Encodings of a cached object besides its JSON, made on first use (a
/// protobuf LIST or WATCH) and kept as long as the object is cached, so
/// every later reader splices the same bytes. Never part of equality.
#[derive(Debug, Clone, Default)]
pub struct Encodings {
    protobuf: std::sync::OnceLock<Bytes>,
}

impl Encodings {
    /// The object's protobuf message bytes, made by `encode` the first time
    /// (concurrent first readers may each encode; one result is kept).
    /// Errors: whatever `encode` returns; nothing is kept then.
    pub fn protobuf<E>(&self, encode: impl FnOnce() -> Result<Bytes, E>) -> Result<Bytes, E> {
        if let Some(b) = self.protobuf.get() {
            return Ok(b.clone());
        }
        let b = encode()?;
        Ok(self.protobuf.get_or_init(|| b).clone())
    }
}

impl PartialEq for Encodings {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for Encodings {}

impl CachedObject {
    /// Decodes a stored value read at `resource_version` (its `mod_revision`).
    ///
    /// The JSON is rewritten only when its `metadata.resourceVersion` differs
    /// from `resource_version` (storage keeps objects without it, as
    /// kube-apiserver does) or its keys are not in typed order
    /// ([`rkube_api::wire::order_object_keys`]). Errors: [`StoreError::Undecodable`] when the
    /// value is not a JSON object.
    ///
    /// Objects as the API server stores them (compact, keys in typed order:
    /// [`rkube_api::wire::RawObject`]) are not decoded in full: the
    /// resourceVersion is spliced into the bytes, and only `metadata`'s
    /// name, namespace and labels and the top-level fields the extractor
    /// reads are decoded. A 5 MB ConfigMap then costs one scan of its bytes
    /// instead of a decode and an encode.
    pub fn decode(key: &str, value: &[u8], resource_version: i64, extract: FieldExtractor) -> Result<CachedObject> {
        if !matches!(extract, FieldExtractor::Fn(_)) {
            if let Some(raw) = rkube_api::wire::RawObject::parse(value) {
                return Ok(Self::from_raw(key, value, &raw, resource_version, extract));
            }
        }
        Self::decode_in_full(key, value, resource_version, extract)
    }

    /// [`CachedObject::decode`] by decoding the whole object.
    fn decode_in_full(key: &str, value: &[u8], resource_version: i64, extract: FieldExtractor) -> Result<CachedObject> {
        let mut v: Value = serde_json::from_slice(value)
            .map_err(|e| StoreError::Undecodable { key: key.to_string(), reason: e.to_string() })?;
        if !v.is_object() {
            return Err(StoreError::Undecodable { key: key.to_string(), reason: "not an object".into() });
        }
        let rv_string = resource_version.to_string();
        let rv_set = set_resource_version(&mut v, &rv_string);
        // Typed key order (`kind`, `apiVersion`, `metadata`, ...), also for
        // objects stored before rkube kept it.
        let moved = rkube_api::wire::order_object_keys(&mut v);
        // Bytes are kept as they are only in the form `RawObject::parse`
        // takes (typed, compact: what [`CachedObject::with_resource_version`]
        // relies on); others, such as bytes that repeat a key, are encoded
        // again from the value they decode to.
        let json = if rv_set || moved || rkube_api::wire::RawObject::parse(value).is_none() {
            to_exact_json(&v, value.len() + rv_string.len() + 24)
        } else {
            Bytes::copy_from_slice(value)
        };
        Ok(Self::from_value(key, &v, resource_version, json, extract))
    }

    /// [`CachedObject::decode`] of an object read by [`rkube_api::wire::RawObject`]:
    /// the same object, built from the fields it needs.
    fn from_raw(key: &str, value: &[u8], raw: &rkube_api::wire::RawObject<'_>, resource_version: i64, extract: FieldExtractor) -> CachedObject {
        let json = match raw.with_resource_version(&resource_version.to_string()) {
            Some(spliced) => Bytes::from(spliced),
            None => Bytes::copy_from_slice(value),
        };
        // What the extractor and the metadata reads see: the top-level
        // fields the extractor's paths start with, and metadata's name,
        // namespace and labels (without managedFields) unless it reads
        // metadata itself.
        let decoded = |v: Option<&str>| v.and_then(|v| serde_json::from_str::<Value>(v).ok());
        let mut partial = serde_json::Map::new();
        if let FieldExtractor::Resource(info) = extract {
            for f in info.fields {
                let top = f.path.split('.').next().unwrap_or_default();
                if !partial.contains_key(top) {
                    if let Some(v) = decoded(raw.get(top)) {
                        partial.insert(top.to_string(), v);
                    }
                }
            }
        }
        if !partial.contains_key("metadata") {
            let meta: serde_json::Map<String, Value> = ["name", "namespace", "labels"]
                .into_iter()
                .filter_map(|k| decoded(raw.meta(k).map(|v| v.get())).map(|v| (k.to_string(), v)))
                .collect();
            partial.insert("metadata".to_string(), Value::Object(meta));
        }
        Self::from_value(key, &Value::Object(partial), resource_version, json, extract)
    }

    fn from_value(key: &str, v: &Value, resource_version: i64, json: Bytes, extract: FieldExtractor) -> CachedObject {
        let meta = v.get("metadata");
        let str_of = |k: &str| meta.and_then(|m| m.get(k)).and_then(Value::as_str).filter(|s| !s.is_empty());
        let (key_ns, key_name) = match key.rsplit_once('/') {
            Some((ns, name)) => (Some(ns), name),
            None => (None, key),
        };
        let namespace = str_of("namespace").or(key_ns).map(str::to_string);
        let name = str_of("name").unwrap_or(key_name).to_string();
        let labels = meta
            .and_then(|m| m.get("labels"))
            .and_then(Value::as_object)
            .map(|m| m.iter().filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_string()))).collect())
            .unwrap_or_default();
        let mut fields = vec![("metadata.name".to_string(), name.clone())];
        if let Some(ns) = &namespace {
            fields.push(("metadata.namespace".to_string(), ns.clone()));
        }
        fields.extend(extract.extract(v));
        CachedObject {
            key: key.to_string(),
            namespace,
            name,
            resource_version,
            json,
            labels,
            fields,
            encodings: Encodings::default(),
        }
    }

    /// The same object at another resourceVersion (upstream sets the
    /// deletion revision on the last state of a deleted object). Serializes
    /// at most once. The cached bytes are one JSON object in typed, compact
    /// form ([`CachedObject::decode`] keeps or makes them so), so only their head is read
    /// ([`rkube_api::wire::RawObject::parse_head`]): a deletion of a large
    /// object costs no second parse of its body.
    pub fn with_resource_version(&self, resource_version: i64) -> CachedObject {
        let mut out = self.clone();
        out.resource_version = resource_version;
        if let Some(raw) = rkube_api::wire::RawObject::parse_head(&self.json) {
            if let Some(spliced) = raw.with_resource_version(&resource_version.to_string()) {
                out.json = Bytes::from(spliced);
                out.encodings = Encodings::default();
            }
            return out;
        }
        if let Ok(mut v) = serde_json::from_slice::<Value>(&self.json) {
            if set_resource_version(&mut v, &resource_version.to_string()) {
                rkube_api::wire::order_object_keys(&mut v);
                out.json = to_exact_json(&v, self.json.len() + 24);
                out.encodings = Encodings::default();
            }
        }
        out
    }

    /// The value of a selectable field, if the object has it.
    pub fn field(&self, name: &str) -> Option<&str> {
        self.fields.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }
}

/// Serializes `v` into a buffer holding exactly its bytes. (`serde_json::to_vec`
/// grows its buffer by doubling and `Bytes` keeps the whole allocation: a
/// 1.5 KB object would hold 2 KB for as long as it is cached.) `hint` is the
/// expected length.
fn to_exact_json(v: &Value, hint: usize) -> Bytes {
    let mut buf = Vec::with_capacity(hint);
    if serde_json::to_writer(&mut buf, v).is_err() {
        buf.clear();
    }
    buf.shrink_to_fit();
    Bytes::from(buf)
}

/// Sets `metadata.resourceVersion`; returns false when it already had that value.
fn set_resource_version(v: &mut Value, rv: &str) -> bool {
    let Some(obj) = v.as_object_mut() else { return false };
    let meta = obj.entry("metadata").or_insert_with(|| Value::Object(Default::default()));
    let Some(meta) = meta.as_object_mut() else { return false };
    if meta.get("resourceVersion").and_then(Value::as_str) == Some(rv) {
        return false;
    }
    meta.insert("resourceVersion".to_string(), Value::String(rv.to_string()));
    true
}

/// The persistent ordered map. `clone()` is O(1) and shares structure.
///
/// Keys are `Arc<str>`: a write copies the B-tree nodes on the path to its
/// key (the older snapshots keep the originals), and copying a node clones
/// its keys; an `Arc<str>` clone is a reference count, a `String` clone an
/// allocation per key (100k pods: 3.6 KB per snapshot with `String`, 2.3 KB with `Arc<str>`).
#[derive(Debug, Clone, Default)]
pub struct Store {
    map: OrdMap<Arc<str>, Arc<CachedObject>>,
}

impl Store {
    /// An empty store.
    pub fn new() -> Self {
        Store::default()
    }

    /// Number of objects.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The object at `key` (relative).
    pub fn get(&self, key: &str) -> Option<&Arc<CachedObject>> {
        self.map.get(key)
    }

    /// Inserts or replaces; returns the previous object.
    pub fn insert(&mut self, obj: Arc<CachedObject>) -> Option<Arc<CachedObject>> {
        self.map.insert(Arc::from(obj.key.as_str()), obj)
    }

    /// Removes `key`; returns the removed object.
    pub fn remove(&mut self, key: &str) -> Option<Arc<CachedObject>> {
        self.map.remove(key)
    }

    /// All objects in key order.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<CachedObject>> {
        self.map.values()
    }

    /// Objects of `namespace` (all when `None`) with key ≥ `start`, in key order.
    pub fn range<'a>(
        &'a self,
        namespace: Option<&str>,
        start: Option<&str>,
    ) -> Box<dyn Iterator<Item = &'a Arc<CachedObject>> + 'a> {
        let (lo, hi) = match namespace {
            Some(ns) => (format!("{ns}/"), Some(format!("{ns}0"))),
            None => (String::new(), None),
        };
        let lo = match start {
            Some(s) if s > lo.as_str() => s.to_string(),
            _ => lo,
        };
        if let Some(hi) = &hi {
            if lo >= *hi {
                return Box::new(std::iter::empty());
            }
        }
        let upper = match &hi {
            Some(h) => Bound::Excluded(h.as_str()),
            None => Bound::Unbounded,
        };
        Box::new(self.map.range::<_, str>((Bound::Included(lo.as_str()), upper)).map(|(_, v)| v))
    }
}

/// One page of a LIST read from a store or snapshot.
#[derive(Debug, Clone, Default)]
pub struct Page {
    /// Matching objects, in key order.
    pub items: Vec<Arc<CachedObject>>,
    /// True when at least one more matching object follows the page.
    pub more: bool,
    /// Objects (matching or not) after the last returned one; only counted
    /// when asked (no selectors: it is then `remainingItemCount`).
    pub remaining: Option<i64>,
    /// Objects examined (for `apiserver_cache_list_fetched_objects_total`).
    pub fetched: usize,
}

/// Reads a page: objects of `pred`'s namespace from `start` on, those
/// matching `pred`, at most `limit` (0 = all). Counts the rest when
/// `count_remaining`, which callers set only when `pred` has no selector
/// (upstream `PrepareContinueToken`'s remainingItemCount).
pub fn read_page<'a>(
    objects: impl Iterator<Item = &'a Arc<CachedObject>>,
    pred: &Predicate,
    limit: usize,
    count_remaining: bool,
) -> Page {
    let mut page = Page::default();
    let mut objects = objects.peekable();
    while let Some(obj) = objects.next() {
        page.fetched += 1;
        if !pred.matches(obj) {
            continue;
        }
        page.items.push(obj.clone());
        if limit > 0 && page.items.len() == limit {
            // Is there one more matching object? Without selectors every
            // object left in the range matches, so counting them answers both.
            if count_remaining {
                let n = objects.count();
                page.remaining = Some(n as i64);
                page.more = n > 0;
            } else {
                for o in objects.by_ref() {
                    page.fetched += 1;
                    if pred.matches(o) {
                        page.more = true;
                        break;
                    }
                }
            }
            break;
        }
    }
    page
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_field_extractor_reads_the_rows_selectable_fields() {
        let pods = registry::lookup("", "v1", "pods").expect("pods row");
        let pod = br#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a","namespace":"d"},"spec":{"nodeName":"n1"},"status":{"phase":"Running"}}"#;
        let o = CachedObject::decode("d/a", pod, 3, FieldExtractor::Resource(pods)).unwrap();
        assert_eq!(o.field("metadata.name"), Some("a"));
        assert_eq!(o.field("metadata.namespace"), Some("d"));
        assert_eq!(o.field("spec.nodeName"), Some("n1"));
        assert_eq!(o.field("status.phase"), Some("Running"));
        // A row with no extra selectable fields adds nothing.
        let cms = registry::lookup("", "v1", "configmaps").expect("configmaps row");
        let cm = br#"{"metadata":{"name":"c","namespace":"d"}}"#;
        let o = CachedObject::decode("d/c", cm, 3, FieldExtractor::Resource(cms)).unwrap();
        assert_eq!(o.fields.len(), 2, "{:?}", o.fields);
    }

    fn obj(key: &str, rv: i64) -> Arc<CachedObject> {
        let (ns, name) = key.split_once('/').unwrap();
        let json = format!(r#"{{"metadata":{{"name":"{name}","namespace":"{ns}","labels":{{"app":"a"}}}}}}"#);
        Arc::new(CachedObject::decode(key, json.as_bytes(), rv, FieldExtractor::None).unwrap())
    }

    #[test]
    fn bytes_not_in_typed_form_are_cached_encoded_again() {
        // Already at its revision and in typed key order, but `metadata`
        // repeated: kept as it was, a later splice of the first `metadata`
        // would leave the second (and its resourceVersion) in place.
        let stored = br#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a"},"data":{},"metadata":{"name":"a","resourceVersion":"5"}}"#;
        let o = CachedObject::decode("ns/a", stored, 5, FieldExtractor::None).unwrap();
        let gone = o.with_resource_version(6);
        assert_eq!(
            std::str::from_utf8(&gone.json).unwrap(),
            r#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","resourceVersion":"6"},"data":{}}"#
        );
        // Bytes in typed form at their revision are kept as they are.
        let typed = br#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","resourceVersion":"5"},"data":{}}"#;
        let o = CachedObject::decode("ns/a", typed, 5, FieldExtractor::Fn(|_| Vec::new())).unwrap();
        assert_eq!(&o.json[..], &typed[..]);
    }

    #[test]
    fn decode_sets_resource_version_labels_and_fields_once() {
        let o = obj("default/web-0", 42);
        let v: Value = serde_json::from_slice(&o.json).unwrap();
        assert_eq!(v["metadata"]["resourceVersion"], "42");
        assert_eq!(o.labels.get("app").map(String::as_str), Some("a"));
        assert_eq!(o.field("metadata.name"), Some("web-0"));
        assert_eq!(o.field("metadata.namespace"), Some("default"));
        assert_eq!(o.namespace.as_deref(), Some("default"));
    }

    #[test]
    fn decoding_from_the_raw_bytes_gives_the_object_a_full_decode_gives() {
        let pods = registry::lookup("", "v1", "pods").expect("pods row");
        let cms = registry::lookup("", "v1", "configmaps").expect("configmaps row");
        let cases: &[(&[u8], FieldExtractor)] = &[
            (br#"{"kind":"Pod","apiVersion":"v1","metadata":{"name":"a","namespace":"d","uid":"u","labels":{"app":"x","n":1},"managedFields":[{"manager":"m"}]},"spec":{"nodeName":"n1","restartPolicy":"Always"},"status":{"phase":"Running"}}"#, FieldExtractor::Resource(pods)),
            (br#"{"kind":"Pod","metadata":{"name":"a","namespace":"d","resourceVersion":"7"},"spec":{}}"#, FieldExtractor::Resource(pods)),
            (br#"{"kind":"ConfigMap","metadata":{"name":"c","namespace":"d","resourceVersion":"9"},"data":{"k":"v"}}"#, FieldExtractor::Resource(cms)),
            (br#"{"metadata":{"name":"","labels":{}}}"#, FieldExtractor::None),
            (br#"{"metadata":{}}"#, FieldExtractor::None),
        ];
        for (bytes, extract) in cases {
            assert!(rkube_api::wire::RawObject::parse(bytes).is_some(), "the fast path is taken");
            let fast = CachedObject::decode("d/a", bytes, 9, *extract).unwrap();
            let full = CachedObject::decode_in_full("d/a", bytes, 9, *extract).unwrap();
            assert_eq!(fast, full, "{}", String::from_utf8_lossy(bytes));
            assert_eq!(fast.json, full.json);
            let later_fast = fast.with_resource_version(12);
            let v: Value = serde_json::from_slice(&later_fast.json).unwrap();
            assert_eq!(v["metadata"]["resourceVersion"], "12");
        }
    }

    #[test]
    fn decode_rejects_non_objects() {
        assert!(CachedObject::decode("a/b", b"[1]", 1, FieldExtractor::None).is_err());
        assert!(CachedObject::decode("a/b", b"{nope", 1, FieldExtractor::None).is_err());
    }

    #[test]
    fn range_stays_inside_the_namespace_and_starts_at_start() {
        let mut s = Store::new();
        for k in ["a/x", "a/y", "ab/z", "b/w"] {
            s.insert(obj(k, 1));
        }
        let keys = |it: Box<dyn Iterator<Item = &Arc<CachedObject>> + '_>| -> Vec<String> {
            it.map(|o| o.key.clone()).collect()
        };
        assert_eq!(keys(s.range(Some("a"), None)), ["a/x", "a/y"]);
        assert_eq!(keys(s.range(Some("a"), Some("a/x\0"))), ["a/y"]);
        assert_eq!(keys(s.range(None, Some("ab/"))), ["ab/z", "b/w"]);
        assert_eq!(keys(s.range(Some("a"), Some("b/"))), Vec::<String>::new());
    }

    #[test]
    fn clone_is_a_snapshot_unaffected_by_later_writes() {
        let mut s = Store::new();
        s.insert(obj("a/x", 1));
        let snap = s.clone();
        s.insert(obj("a/x", 2));
        s.remove("a/x");
        assert_eq!(snap.get("a/x").unwrap().resource_version, 1);
        assert!(s.get("a/x").is_none());
    }

    #[test]
    fn with_resource_version_rewrites_json() {
        let o = obj("a/x", 3).with_resource_version(9);
        let v: Value = serde_json::from_slice(&o.json).unwrap();
        assert_eq!(v["metadata"]["resourceVersion"], "9");
        assert_eq!(o.resource_version, 9);
    }
}
