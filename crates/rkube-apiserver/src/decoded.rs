//! Decoded objects the write paths read or wrote last, so that the next
//! update of a large object does not decode its stored bytes again.
//!
//! An update reads the stored object and decodes it before it can compute
//! the new one; for a ConfigMap with 1 MiB of data (165,669 keys, as many
//! again in its managedFields) that decode is about a third of the
//! request's CPU. Upstream's `GuaranteedUpdate` starts from the watch
//! cache's decoded object instead (`cachedExistingObject`,
//! `storage/cacher/cacher.go`); rkube's watch cache keeps bytes, so this
//! keeps the decoded form of the large objects written or read through
//! [`crate::handlers::Ctx::load`] recently.
//!
//! An entry is used only for the very bytes it was decoded from: a lookup
//! compares the stored bytes and revision read in the same attempt, so an
//! entry is never stale, whichever server wrote the key (several API
//! servers may share one etcd). Only objects of at least
//! [`MIN_STORED_BYTES`] are kept (smaller ones decode in well under a
//! millisecond), and the entries' estimated heap is held to
//! [`BUDGET_BYTES`], least recently used first out; an entry not used for
//! [`IDLE`] is dropped at the next lookup or insert.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde_json::Value;

/// Stored objects smaller than this (bytes) are not kept.
pub const MIN_STORED_BYTES: usize = 64 * 1024;

/// The most heap the kept objects may take, as [`heap_estimate`] counts it (bytes).
pub const BUDGET_BYTES: usize = 64 * 1024 * 1024;

/// An entry unused this long is dropped.
pub const IDLE: Duration = Duration::from_secs(60);

/// Decoded objects by storage key; see the module documentation.
#[derive(Debug, Default)]
pub struct DecodedObjects {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    by_key: HashMap<String, Entry>,
    heap: usize,
}

#[derive(Debug)]
struct Entry {
    /// The stored bytes the value was decoded from (shared, not copied).
    stored: Bytes,
    revision: i64,
    value: Kept,
    heap: usize,
    used: Instant,
}

/// A kept object: decoded, or still to be completed at its first use
/// (once; other lookups wait meanwhile).
#[derive(Clone)]
enum Kept {
    Whole(Arc<Value>),
    Pending(Arc<LazyLock<Arc<Value>, Completed>>),
}

/// What gives a pending object, completed.
type Completed = Box<dyn FnOnce() -> Arc<Value> + Send>;

/// What completes a pending object, in place ([`DecodedObjects::put_pending`]).
pub type Completion = Box<dyn FnOnce(&mut Value) + Send>;

impl std::fmt::Debug for Kept {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Kept::Whole(_) => f.write_str("Whole"),
            Kept::Pending(_) => f.write_str("Pending"),
        }
    }
}

impl Kept {
    /// The decoded object, completed first when still pending.
    fn value(&self) -> Arc<Value> {
        match self {
            Kept::Whole(v) => v.clone(),
            Kept::Pending(p) => Arc::clone(p),
        }
    }
}

impl DecodedObjects {
    /// The decoded object stored at `key` as `stored` at `revision`, when it
    /// is kept: the value `crate::source::decode_stored` gives for them.
    pub fn get(&self, key: &str, stored: &[u8], revision: i64) -> Option<Arc<Value>> {
        if stored.len() < MIN_STORED_BYTES {
            return None;
        }
        let now = Instant::now();
        let (kept, value, dropped) = {
            let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
            let mut dropped = inner.drop_idle(now);
            match inner.by_key.get_mut(key) {
                Some(entry) if entry.revision == revision => {
                    entry.used = now;
                    (Some(entry.stored.clone()), Some(entry.value.clone()), dropped)
                }
                // Another revision is stored now: this one is of no more use.
                Some(_) => {
                    dropped.extend(inner.remove(key));
                    (None, None, dropped)
                }
                None => (None, None, dropped),
            }
        };
        // Compared, completed and dropped without the lock: bytes of a
        // large object take a while to compare, a pending one to complete,
        // and a large value to free.
        drop(dropped);
        match (kept, value) {
            (Some(kept), Some(value)) if kept[..] == *stored => Some(value.value()),
            _ => None,
        }
    }

    /// [`DecodedObjects::put`] of the object that `complete` makes of
    /// `partial`, completed only when a lookup first wants it: the create
    /// path keeps an object whose managedFields entry it stored as JSON
    /// text this way, so that a create the object's next update does not
    /// follow never decodes that text, and one it does follow decodes only
    /// the text rather than the stored bytes. `extra_heap` estimates what
    /// completing adds to `partial`'s heap (bytes).
    pub fn put_pending(&self, key: &str, stored: Bytes, revision: i64, partial: Value, extra_heap: usize, complete: Completion) {
        if stored.len() < MIN_STORED_BYTES {
            return;
        }
        let heap = heap_estimate(&partial).saturating_add(extra_heap);
        let completed: Completed = Box::new(move || {
            let mut value = partial;
            complete(&mut value);
            Arc::new(value)
        });
        self.keep(key, stored, revision, Kept::Pending(Arc::new(LazyLock::new(completed))), heap);
    }

    /// Keeps `value`, the decoded form of `stored` (the bytes stored at `key`
    /// at `revision`, with `metadata.resourceVersion` set to it, exactly as
    /// `crate::source::decode_stored` gives it), when `stored` is large
    /// enough and the value fits the budget; replaces the key's entry.
    pub fn put(&self, key: &str, stored: Bytes, revision: i64, value: Arc<Value>) {
        if stored.len() < MIN_STORED_BYTES {
            return;
        }
        let heap = heap_estimate(&value);
        self.keep(key, stored, revision, Kept::Whole(value), heap);
    }

    /// Keeps `value`, whose heap is estimated at `value_heap` bytes, as
    /// [`DecodedObjects::put`] does (the callers have checked the size).
    fn keep(&self, key: &str, stored: Bytes, revision: i64, value: Kept, value_heap: usize) {
        // The stored bytes may sit in a buffer up to twice their length.
        let heap = value_heap.saturating_add(2 * stored.len());
        let now = Instant::now();
        let mut dropped = Vec::new();
        {
            let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
            dropped.extend(inner.remove(key));
            if heap <= BUDGET_BYTES {
                dropped.extend(inner.drop_idle(now));
                while inner.heap + heap > BUDGET_BYTES {
                    let Some(oldest) = inner.by_key.iter().min_by_key(|(_, e)| e.used).map(|(k, _)| k.clone()) else {
                        break;
                    };
                    dropped.extend(inner.remove(&oldest));
                }
                inner.heap += heap;
                inner.by_key.insert(key.to_string(), Entry { stored, revision, value, heap, used: now });
            }
        }
        // Freed without the lock.
        drop(dropped);
    }

    /// How many objects are kept, and their estimated heap (bytes).
    pub fn usage(&self) -> (usize, usize) {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        (inner.by_key.len(), inner.heap)
    }
}

impl Inner {
    /// Takes `key`'s entry out (the caller drops it without the lock).
    fn remove(&mut self, key: &str) -> Option<Entry> {
        let e = self.by_key.remove(key)?;
        self.heap -= e.heap;
        Some(e)
    }

    /// Takes out the entries unused for [`IDLE`].
    fn drop_idle(&mut self, now: Instant) -> Vec<Entry> {
        let idle: Vec<String> =
            self.by_key.iter().filter(|(_, e)| now.duration_since(e.used) >= IDLE).map(|(k, _)| k.clone()).collect();
        idle.iter().filter_map(|k| self.remove(k)).collect()
    }
}

/// An estimate of the heap that decoding `text`, JSON objects nested in
/// objects (a `FieldsV1`), takes (bytes): a map entry for each `{` (each
/// member's value is an object; a `{` inside a key only adds to the
/// estimate) and the text's length for the keys' buffers. One pass over
/// the bytes, building nothing.
pub fn nested_objects_heap_estimate(text: &str) -> usize {
    let opened = text.bytes().filter(|&b| b == b'{').count();
    opened.saturating_mul(MAP_ENTRY).saturating_add(text.len())
}

/// [`heap_estimate`]'s cost of one entry of serde_json's ordered map: hash,
/// key, value; and its index slot with the table's spare room (a table at
/// most 7/8 full, rounded up to a power of two: up to 16 bytes a slot).
const MAP_ENTRY: usize = 8 + std::mem::size_of::<String>() + std::mem::size_of::<Value>() + 16;

/// An estimate of the heap `v` takes (bytes): every value slot, map entry
/// (hash, key, value and index), string and key buffer. Linear in `v`'s
/// size; iterative, so any nesting is fine.
pub fn heap_estimate(v: &Value) -> usize {
    const VALUE: usize = std::mem::size_of::<Value>();
    /// The heap of `v` itself: a string's buffer, an array's slots. Only a
    /// container with items goes on `stack`, so the strings and empty maps
    /// of a large map (its most common values) are counted where they are
    /// met, without a stack round trip each.
    fn own<'v>(v: &'v Value, stack: &mut Vec<&'v Value>) -> usize {
        match v {
            Value::String(s) => s.capacity(),
            Value::Array(items) => {
                if !items.is_empty() {
                    stack.push(v);
                }
                items.capacity() * VALUE
            }
            Value::Object(map) => {
                if !map.is_empty() {
                    stack.push(v);
                }
                0
            }
            Value::Null | Value::Bool(_) | Value::Number(_) => 0,
        }
    }
    let mut stack = Vec::new();
    let mut total = own(v, &mut stack);
    while let Some(v) = stack.pop() {
        match v {
            Value::Array(items) => {
                for item in items {
                    total += own(item, &mut stack);
                }
            }
            Value::Object(map) => {
                for (k, item) in map {
                    total += MAP_ENTRY + k.capacity() + own(item, &mut stack);
                }
            }
            _ => {}
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn large(tag: &str, keys: usize) -> (Bytes, Value) {
        let data: serde_json::Map<String, Value> = (0..keys).map(|i| (format!("k{i}"), json!(tag))).collect();
        let v = json!({"kind": "ConfigMap", "metadata": {"name": tag, "resourceVersion": "7"}, "data": data});
        (Bytes::from(serde_json::to_vec(&v).unwrap()), v)
    }

    #[test]
    fn a_pending_entry_is_completed_once_at_its_first_lookup() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let objs = DecodedObjects::default();
        let (stored, whole) = large("p", 9000);
        let mut partial = whole.clone();
        let data = partial.as_object_mut().unwrap().remove("data").unwrap();
        let completions = Arc::new(AtomicUsize::new(0));
        let counted = completions.clone();
        let complete: Completion = Box::new(move |v: &mut Value| {
            counted.fetch_add(1, Ordering::SeqCst);
            v.as_object_mut().unwrap().insert("data".into(), data);
        });
        objs.put_pending("/registry/configmaps/ns/p", stored.clone(), 7, partial, 0, complete);
        assert_eq!(completions.load(Ordering::SeqCst), 0, "not completed when kept");
        let got = std::thread::scope(|s| {
            let lookups: Vec<_> = (0..4).map(|_| s.spawn(|| objs.get("/registry/configmaps/ns/p", &stored, 7))).collect();
            lookups.into_iter().map(|l| l.join().unwrap()).collect::<Vec<_>>()
        });
        assert!(got.iter().all(|v| v.as_deref() == Some(&whole)), "every lookup gets the whole object");
        assert_eq!(completions.load(Ordering::SeqCst), 1, "completed once");
        assert!(objs.get("/registry/configmaps/ns/p", &stored, 7).is_some_and(|v| *v == whole));
        assert_eq!(completions.load(Ordering::SeqCst), 1);
        assert!(objs.get("/registry/configmaps/ns/p", &stored, 8).is_none(), "another revision");
        // What completing adds counts against the budget.
        let (stored, partial) = large("q", 9000);
        objs.put_pending("/registry/configmaps/ns/q", stored.clone(), 7, partial, BUDGET_BYTES, Box::new(|_| {}));
        assert!(objs.get("/registry/configmaps/ns/q", &stored, 7).is_none(), "over the budget: not kept");
    }

    #[test]
    fn the_estimate_of_fields_text_is_at_least_the_decoded_estimate() {
        let mut fields = serde_json::Map::new();
        for i in 0..5000 {
            fields.insert(format!("f:k{i}"), json!({}));
        }
        let nested = json!({"f:data": Value::Object(fields), "f:metadata": {"f:labels": {".": {}, "f:a{b": {}}}});
        let text = nested.to_string();
        let (estimate, decoded) = (nested_objects_heap_estimate(&text), heap_estimate(&nested));
        assert!(estimate >= decoded && estimate < 2 * decoded, "{estimate} for {decoded}");
    }

    #[test]
    fn an_entry_answers_only_for_its_bytes_and_revision() {
        let objs = DecodedObjects::default();
        let (stored, v) = large("a", 10_000);
        objs.put("/registry/configmaps/ns/a", stored.clone(), 7, Arc::new(v.clone()));
        assert!(objs.get("/registry/configmaps/ns/a", &stored, 7).is_some_and(|got| *got == v));
        assert!(objs.get("/registry/configmaps/ns/b", &stored, 7).is_none());
        let mut other = stored.to_vec();
        let at = other.len() - 5;
        other[at] = b'b';
        assert!(objs.get("/registry/configmaps/ns/a", &other, 7).is_none());
        assert!(objs.get("/registry/configmaps/ns/a", &stored, 7).is_some());
        // Another revision: no answer, and the entry is dropped.
        assert!(objs.get("/registry/configmaps/ns/a", &stored, 8).is_none());
        assert_eq!(objs.usage(), (0, 0));
        objs.put("/registry/configmaps/ns/a", stored.clone(), 7, Arc::new(v.clone()));
        // A new write of the key replaces its entry.
        let (stored2, v2) = large("c", 10_000);
        objs.put("/registry/configmaps/ns/a", stored2.clone(), 9, Arc::new(v2.clone()));
        assert!(objs.get("/registry/configmaps/ns/a", &stored2, 9).is_some_and(|got| *got == v2));
        assert_eq!(objs.usage().0, 1);
        assert!(objs.get("/registry/configmaps/ns/a", &stored, 7).is_none());
    }

    #[test]
    fn small_objects_are_not_kept_and_the_budget_holds() {
        let objs = DecodedObjects::default();
        let small = Bytes::from_static(br#"{"kind":"ConfigMap"}"#);
        objs.put("s", small.clone(), 1, Arc::new(json!({"kind": "ConfigMap"})));
        assert_eq!(objs.usage(), (0, 0));
        // Each about 10 MiB estimated: at most 6 fit in 64 MiB, the least
        // recently used leave first.
        let (stored, v) = large("x", 70_000);
        let one = heap_estimate(&v) + 2 * stored.len();
        assert!(one > 8 << 20 && one < BUDGET_BYTES / 4, "{one}");
        let v = Arc::new(v);
        for i in 0..12 {
            objs.put(&format!("k{i}"), stored.clone(), 1, v.clone());
            // k0 is used after every insert, so it stays.
            assert!(objs.get("k0", &stored, 1).is_some());
            let (n, heap) = objs.usage();
            assert!(heap <= BUDGET_BYTES && heap == n * one, "{n} {heap}");
        }
        let (n, _) = objs.usage();
        assert_eq!(n, BUDGET_BYTES / one);
        assert!(objs.get("k1", &stored, 1).is_none());
        assert!(objs.get("k11", &stored, 1).is_some());
    }

    #[test]
    fn the_estimate_counts_slots_keys_and_strings() {
        let v = json!({"ab": "cdef", "list": [1, "x"]});
        let slot = std::mem::size_of::<Value>();
        let entry = 8 + std::mem::size_of::<String>() + slot + 16;
        let strings = v["ab"].as_str().unwrap().len() + 1;
        let keys = 2 + 4;
        assert_eq!(heap_estimate(&v), 2 * entry + keys + strings + 2 * slot);
    }

    #[test]
    fn the_estimate_counts_nested_and_empty_containers() {
        let v = json!({"a": [], "b": {}, "c": [[1], {"d": "ef"}]});
        let slot = std::mem::size_of::<Value>();
        let entry = 8 + std::mem::size_of::<String>() + slot + 16;
        // Four map entries with 4 key bytes, three array slots, "ef".
        assert_eq!(heap_estimate(&v), 4 * entry + 4 + 3 * slot + 2);
        assert_eq!(heap_estimate(&json!("ef")), 2);
        assert_eq!(heap_estimate(&json!(null)), 0);
    }
}
