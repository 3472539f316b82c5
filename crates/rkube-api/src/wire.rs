//! Body bytes as kube-apiserver writes them.
//!
//! kube-apiserver encodes typed objects with Go's `encoding/json` through a
//! `json.Encoder` (`k8s.io/apimachinery/pkg/runtime/serializer/json/json.go`):
//!
//! - object keys come in Go struct order: `TypeMeta` first (`kind`, then
//!   `apiVersion`), then `metadata`, the type's own fields, and `status`
//!   last; `ObjectMeta`'s keys in its struct order
//!   (`k8s.io/apimachinery/pkg/apis/meta/v1/types.go`);
//! - every encoded value is followed by `\n` ([`JSON_TERMINATOR`]): object,
//!   list and `Status` bodies alike, and each line of a watch stream.
//!
//! rkube keeps the JSON a client sent, so [`order_object_keys`] puts the
//! top-level and `metadata` keys in that order where objects are prepared for
//! storage and where they are decoded from it (objects written before the
//! order was kept come out right too). Fields below the top level keep the
//! client's order. Custom resources, which upstream encodes as unstructured
//! maps with sorted keys (`apiVersion` before `kind`), are not served yet.

use serde::ser::SerializeMap;
use serde_json::{Map, Value};

/// What Go's `json.Encoder.Encode` writes after every value.
pub const JSON_TERMINATOR: u8 = b'\n';

/// `ObjectMeta`'s JSON keys in struct order.
pub const OBJECT_META_ORDER: &[&str] = &[
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
];

/// Rank of a top-level key: `kind`, `apiVersion`, `metadata`, the rest (in
/// their present order), `status`.
fn top_rank(key: &str) -> u8 {
    match key {
        "kind" => 0,
        "apiVersion" => 1,
        "metadata" => 2,
        "status" => 4,
        _ => 3,
    }
}

/// Rank of a `metadata` key: its place in [`OBJECT_META_ORDER`]; unknown
/// keys after them, in their present order.
fn meta_rank(key: &str) -> usize {
    OBJECT_META_ORDER.iter().position(|k| *k == key).unwrap_or(OBJECT_META_ORDER.len())
}

/// Reorders `map`'s keys by `rank` (stable: equal ranks keep their order).
/// Values are moved, not copied; nothing is rebuilt when already in order.
/// Returns whether anything moved.
fn reorder<R: Ord>(map: &mut Map<String, Value>, rank: impl Fn(&str) -> R) -> bool {
    let sorted = map.keys().zip(map.keys().skip(1)).all(|(a, b)| rank(a) <= rank(b));
    if sorted {
        return false;
    }
    let mut entries: Vec<(String, Value)> = std::mem::take(map).into_iter().collect();
    entries.sort_by_key(|(k, _)| rank(k));
    map.extend(entries);
    true
}

/// Puts `obj`'s top-level keys in typed-object order (`kind`, `apiVersion`,
/// `metadata`, other fields as they are, `status`) and its `metadata` keys
/// in `ObjectMeta` order. Returns whether anything moved (a caller holding
/// the object's serialized bytes re-encodes only then). Non-objects are left
/// alone.
pub fn order_object_keys(obj: &mut Value) -> bool {
    let Value::Object(map) = obj else { return false };
    let mut moved = reorder(map, top_rank);
    if let Some(Value::Object(meta)) = map.get_mut("metadata") {
        moved |= reorder(meta, meta_rank);
    }
    moved
}

/// `obj` as compact JSON with its top-level and `metadata` keys in typed
/// order: the bytes `serde_json::to_vec` writes for `obj` after
/// [`order_object_keys`], without copying or changing `obj`. With
/// `without_resource_version`, `metadata.resourceVersion` is left out, as
/// objects are stored (the revision is the storage's, upstream's
/// `APIObjectVersioner.PrepareObjectForStorage`). Errors: serde_json's (only
/// for a map key that is not a string, which a `Value` cannot hold).
pub fn to_typed_json(obj: &Value, without_resource_version: bool) -> serde_json::Result<Vec<u8>> {
    serde_json::to_vec(&TypedOrder::<()> { value: obj, without_resource_version, managed_fields: None })
}

/// [`to_typed_json`] of `obj` with `metadata.managedFields` set to what
/// `managed_fields` serializes to (replacing any `obj` has), without
/// building that value into `obj`: the bytes `to_typed_json` writes after
/// inserting it, as long as `managed_fields` serializes as its `Value`
/// would, and how deeply they nest ([`to_typed_json_nested`]). The create
/// path writes a `managedFields` entry whose `fieldsV1`
/// is still JSON text this way (a `serde_json::value::RawValue`), so the
/// map of a large object's fields is never built. `None` when `obj` is not
/// an object with an object `metadata` (the caller inserts the value and
/// encodes). Errors: serde_json's.
pub fn to_typed_json_with_managed_fields<M: serde::Serialize>(
    obj: &Value,
    without_resource_version: bool,
    managed_fields: &M,
) -> Option<serde_json::Result<(Vec<u8>, usize)>> {
    obj.get("metadata")?.as_object()?;
    Some(to_vec_nested(&TypedOrder { value: obj, without_resource_version, managed_fields: Some(managed_fields) }))
}

/// [`to_typed_json`], and how deeply what it wrote nests
/// ([`Nesting`]): the storage path refuses objects whose stored form nests
/// deeper than every decoder of stored objects reads.
pub fn to_typed_json_nested(obj: &Value, without_resource_version: bool) -> serde_json::Result<(Vec<u8>, usize)> {
    to_vec_nested(&TypedOrder::<()> { value: obj, without_resource_version, managed_fields: None })
}

/// `value` as compact JSON (the bytes `serde_json::to_vec` writes), and the
/// deepest nesting of objects and arrays in them, JSON text written as it
/// is (a `RawValue`) counted too.
fn to_vec_nested<T: serde::Serialize + ?Sized>(value: &T) -> serde_json::Result<(Vec<u8>, usize)> {
    let mut out = Vec::with_capacity(128);
    let mut nesting = Nesting::default();
    value.serialize(&mut serde_json::Serializer::with_formatter(&mut out, Counting(&mut nesting)))?;
    Ok((out, nesting.deepest))
}

/// A compact formatter that notes the deepest nesting it writes: the
/// outermost object or array is level 1, as serde_json's decoder counts
/// toward its recursion limit of 128.
#[derive(Debug, Default)]
struct Nesting {
    depth: usize,
    deepest: usize,
}

impl Nesting {
    fn open(&mut self) {
        self.depth += 1;
        self.deepest = self.deepest.max(self.depth);
    }
}

/// [`Nesting`] as the serializer's formatter (which it owns).
struct Counting<'a>(&'a mut Nesting);

impl serde_json::ser::Formatter for Counting<'_> {
    fn begin_array<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.open();
        w.write_all(b"[")
    }

    fn end_array<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.depth -= 1;
        w.write_all(b"]")
    }

    fn begin_object<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.open();
        w.write_all(b"{")
    }

    fn end_object<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.depth -= 1;
        w.write_all(b"}")
    }

    fn write_raw_fragment<W: ?Sized + std::io::Write>(&mut self, w: &mut W, fragment: &str) -> std::io::Result<()> {
        self.0.deepest = self.0.deepest.max(self.0.depth + text_nesting(fragment.as_bytes()));
        w.write_all(fragment.as_bytes())
    }
}

/// The deepest nesting of objects and arrays in JSON `text` (0 for a
/// scalar), brackets inside strings not counted; one pass that builds
/// nothing. Text that is not JSON gives a number that means nothing.
pub fn text_nesting(text: &[u8]) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    let mut in_string = false;
    let mut escaped = false;
    for &b in text {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' | b'[' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// Serializes an object's top-level keys by [`top_rank`] and its `metadata`
/// keys by [`meta_rank`] (stable), as [`order_object_keys`] orders them;
/// `managed_fields`, when given, as `metadata.managedFields`.
struct TypedOrder<'a, M> {
    value: &'a Value,
    without_resource_version: bool,
    managed_fields: Option<&'a M>,
}

impl<M: serde::Serialize> serde::Serialize for TypedOrder<'_, M> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let Value::Object(map) = self.value else { return self.value.serialize(s) };
        serialize_ranked(map, top_rank, s, |key, v, m| match (key, v) {
            ("metadata", Value::Object(meta)) => m.serialize_entry(
                key,
                &MetaOrder {
                    meta,
                    without_resource_version: self.without_resource_version,
                    managed_fields: self.managed_fields,
                },
            ),
            _ => m.serialize_entry(key, v),
        })
    }
}

/// `metadata` keys in [`meta_rank`] order, `resourceVersion` left out on
/// request, `managedFields` replaced by `managed_fields` when given.
struct MetaOrder<'a, M> {
    meta: &'a Map<String, Value>,
    without_resource_version: bool,
    managed_fields: Option<&'a M>,
}

impl<M: serde::Serialize> serde::Serialize for MetaOrder<'_, M> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let left_out = |key: &str| self.without_resource_version && key == "resourceVersion";
        let Some(managed_fields) = self.managed_fields else {
            return serialize_ranked(self.meta, meta_rank, s, |key, v, m| match left_out(key) {
                true => Ok(()),
                false => m.serialize_entry(key, v),
            });
        };
        // Where inserting `managedFields` and ordering put it: before the
        // first key ranked after it (only `managedFields` has its rank).
        let rank = meta_rank("managedFields");
        let mut entries: Vec<(&String, &Value)> =
            self.meta.iter().filter(|(k, _)| *k != "managedFields" && !left_out(k)).collect();
        entries.sort_by_key(|(k, _)| meta_rank(k));
        let at = entries.partition_point(|(k, _)| meta_rank(k) < rank);
        let mut m = s.serialize_map(Some(entries.len() + 1))?;
        for (k, v) in &entries[..at] {
            m.serialize_entry(k, v)?;
        }
        m.serialize_entry("managedFields", managed_fields)?;
        for (k, v) in &entries[at..] {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

/// Writes `map`'s entries through `entry` in `rank` order, equal ranks in
/// their present order (the order [`reorder`] gives).
fn serialize_ranked<S: serde::Serializer, R: Ord>(
    map: &Map<String, Value>,
    rank: impl Fn(&str) -> R,
    s: S,
    entry: impl Fn(&str, &Value, &mut S::SerializeMap) -> Result<(), S::Error>,
) -> Result<S::Ok, S::Error> {
    let mut m = s.serialize_map(Some(map.len()))?;
    let sorted = map.keys().zip(map.keys().skip(1)).all(|(a, b)| rank(a) <= rank(b));
    if sorted {
        for (k, v) in map {
            entry(k, v, &mut m)?;
        }
    } else {
        let mut entries: Vec<(&String, &Value)> = map.iter().collect();
        entries.sort_by_key(|(k, _)| rank(k));
        for (k, v) in entries {
            entry(k, v, &mut m)?;
        }
    }
    m.end()
}

/// The entries of an object's JSON up to its `metadata`
/// ([`RawObject::parse_head`]), to set its resourceVersion.
#[derive(Debug)]
pub struct RawHead<'a>(RawObject<'a>);

impl RawHead<'_> {
    /// [`RawObject::with_resource_version`].
    pub fn with_resource_version(&self, rv: &str) -> Option<Vec<u8>> {
        self.0.with_resource_version(rv)
    }
}

/// An object's compact JSON read without building it: its top-level and
/// `metadata` entries as slices of the input (`serde_json`'s `RawValue`), so
/// a reader that needs a few fields of a large object, or to set its
/// `metadata.resourceVersion`, does not decode and re-encode the rest.
///
/// [`RawObject::parse`] takes objects whose two upper levels are compact
/// and in typed order, as [`to_typed_json`] writes them; callers decode in
/// full when it returns `None`. For bytes [`to_typed_json`] wrote, a splice
/// gives the bytes that decoding, changing and re-encoding would; spacing
/// below those two levels is kept as it is.
#[derive(Debug)]
pub struct RawObject<'a> {
    bytes: &'a [u8],
    /// The top-level entries: each key and its value's JSON text.
    top: Vec<(&'a str, &'a str)>,
    meta: Vec<(&'a str, &'a serde_json::value::RawValue)>,
    /// `metadata`'s JSON text, from its `{` to its `}`.
    meta_text: &'a str,
}

impl<'a> RawObject<'a> {
    /// Reads `bytes`. `None` when they are not one JSON object, contain a
    /// line break, lack a `metadata` object, repeat a top-level or
    /// `metadata` key, spell a key of either level with escapes or with
    /// space around it or around the values of either level, or have their
    /// top-level or `metadata` keys out of typed
    /// order ([`order_object_keys`]). Cost: a UTF-8 check and one parse of
    /// the bytes; only the keys of the two levels are kept.
    pub fn parse(bytes: &'a [u8]) -> Option<Self> {
        use serde::de::DeserializeSeed;
        if has_line_break(bytes) {
            return None;
        }
        // UTF-8 checked once for the whole text, so that strings are not
        // checked one by one as they are read.
        let text = std::str::from_utf8(bytes).ok()?;
        let mut out = raw::Parsed::default();
        let mut de = serde_json::Deserializer::from_str(text);
        raw::Entries { out: &mut out, last: None }.deserialize(&mut de).ok()?;
        de.end().ok()?;
        if bytes.last() != Some(&b'}') {
            return None;
        }
        Self::checked(bytes, out)
    }

    /// [`RawObject::parse`] of the entries up to `metadata` only: the rest
    /// of the bytes is not parsed, so its cost does not grow with the
    /// object (a 3 MiB ConfigMap's `data` is only searched for a line
    /// break). For bytes known to be one JSON object, as [`to_typed_json`]
    /// writes them: what follows `metadata` is taken as it is. `None` as
    /// [`RawObject::parse`] gives it for that head, or for a line break
    /// anywhere.
    pub fn parse_head(bytes: &'a [u8]) -> Option<RawHead<'a>> {
        use serde::de::DeserializeSeed;
        let mut out = raw::Parsed::default();
        let mut de = serde_json::Deserializer::from_slice(bytes);
        // Stopping after `metadata` leaves the object open, which the
        // deserializer reports as an error once the visitor is done.
        let _ = raw::Entries { out: &mut out, last: Some("metadata") }.deserialize(&mut de);
        if out.top.last()?.0 != "metadata" {
            return None;
        }
        if has_line_break(bytes) {
            return None;
        }
        Self::checked(bytes, out).map(RawHead)
    }

    /// The object of `parsed`, the entries of `bytes` (all, or up to
    /// `metadata`), when they have the form [`RawObject::parse`] takes.
    /// `metadata`'s entries were read in the same scan as the top level's,
    /// so its text is found from theirs: `{` right after `"metadata":`, `}`
    /// right after its last value.
    fn checked(bytes: &'a [u8], parsed: raw::Parsed<'a>) -> Option<Self> {
        let raw::Parsed { top: top_entries, meta: meta_entries } = parsed;
        let offset = |s: &str| offset_in(bytes, s);
        let mut meta = Vec::new();
        for (k, v) in meta_entries? {
            let std::borrow::Cow::Borrowed(k) = k else { return None };
            meta.push((k, v));
        }
        let mut top = Vec::with_capacity(top_entries.len());
        let mut meta_text = None;
        for (k, v) in top_entries {
            let std::borrow::Cow::Borrowed(key) = k else { return None };
            let value = match v {
                Some(v) => v.get(),
                None => {
                    // `metadata` (read as entries): its text, when it
                    // starts right after the key's `":`; its close follows
                    // the last value, or the `{` when it has none.
                    let open = offset(key) + key.len() + 2;
                    let close = match meta.last() {
                        Some((_, v)) => offset(v.get()) + v.get().len(),
                        None => open + 1,
                    };
                    if bytes.get(open) != Some(&b'{') || bytes.get(close) != Some(&b'}') {
                        return None;
                    }
                    let t = std::str::from_utf8(bytes.get(open..=close)?).ok()?;
                    meta_text = Some(t);
                    t
                }
            };
            top.push((key, value));
        }
        let out = RawObject { bytes, top, meta, meta_text: meta_text? };
        let in_order = |ranks: &mut dyn Iterator<Item = usize>| {
            let ranks: Vec<usize> = ranks.collect();
            ranks.windows(2).all(|w| w[0] <= w[1])
        };
        if !in_order(&mut out.top.iter().map(|(k, _)| top_rank(k) as usize))
            || !in_order(&mut out.meta.iter().map(|(k, _)| meta_rank(k)))
        {
            return None;
        }
        let unique = |mut keys: Vec<&str>| {
            keys.sort_unstable();
            keys.windows(2).all(|w| w[0] != w[1])
        };
        if !unique(out.top.iter().map(|(k, _)| *k).collect()) || !unique(out.meta.iter().map(|(k, _)| *k).collect()) {
            return None;
        }
        // The object starts the bytes; each key of both levels sits right
        // after `{` or `,` and right before `:` and its value, which `,` or
        // `}` follows right away (metadata's closing brace right after a
        // value, checked above): splices there stay compact.
        let compact = |k: &str, v: &str| {
            let at = out.offset(k);
            matches!(bytes.get(at.wrapping_sub(2)), Some(b'{' | b','))
                && bytes.get(at + k.len() + 1) == Some(&b':')
                && out.offset(v) == at + k.len() + 2
                && matches!(bytes.get(out.offset(v) + v.len()), Some(b',' | b'}'))
        };
        if bytes.first() != Some(&b'{') {
            return None;
        }
        if !out.top.iter().all(|(k, v)| compact(k, v)) || !out.meta.iter().all(|(k, v)| compact(k, v.get())) {
            return None;
        }
        Some(out)
    }

    /// Where `s`, a slice of the input, starts in it.
    fn offset(&self, s: &str) -> usize {
        offset_in(self.bytes, s)
    }

    /// A top-level entry's JSON text.
    pub fn get(&self, key: &str) -> Option<&'a str> {
        self.top.iter().find(|(k, _)| *k == key).map(|(_, v)| *v)
    }

    /// The top-level keys, in order.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.top.iter().map(|(k, _)| *k)
    }

    /// A `metadata` entry's JSON text.
    pub fn meta(&self, key: &str) -> Option<&'a serde_json::value::RawValue> {
        self.meta.iter().find(|(k, _)| *k == key).map(|(_, v)| *v)
    }

    /// A `metadata` entry that is a JSON string, decoded.
    pub fn meta_str(&self, key: &str) -> Option<String> {
        self.meta(key).and_then(|v| serde_json::from_str::<String>(v.get()).ok())
    }

    /// The bytes with `metadata.resourceVersion` set to `rv`, spliced in
    /// where [`order_object_keys`] puts it (or its old value replaced):
    /// the bytes decoding, setting it and [`to_typed_json`] give. `None`
    /// when it already has that value.
    pub fn with_resource_version(&self, rv: &str) -> Option<Vec<u8>> {
        let quoted = serde_json::to_string(rv).unwrap_or_default();
        let (at, end, text) = match self.meta("resourceVersion") {
            Some(old) if serde_json::from_str::<String>(old.get()).ok().as_deref() == Some(rv) => return None,
            Some(old) => {
                let at = self.offset(old.get());
                (at, at + old.get().len(), quoted)
            }
            None => {
                let rank = meta_rank("resourceVersion");
                match self.meta.iter().find(|(k, _)| meta_rank(k) > rank) {
                    // Before the key's opening quote.
                    Some((k, _)) => {
                        let at = self.offset(k) - 1;
                        (at, at, format!("\"resourceVersion\":{quoted},"))
                    }
                    None => {
                        let at = self.offset(self.meta_text) + self.meta_text.len() - 1;
                        let sep = if self.meta.is_empty() { "" } else { "," };
                        (at, at, format!("{sep}\"resourceVersion\":{quoted}"))
                    }
                }
            }
        };
        // One byte of room for the line a JSON answer ends with
        // ([`JSON_TERMINATOR`]): pushing it copies no large object again.
        let mut out = Vec::with_capacity(self.bytes.len() - (end - at) + text.len() + 1);
        out.extend_from_slice(&self.bytes[..at]);
        out.extend_from_slice(text.as_bytes());
        out.extend_from_slice(&self.bytes[end..]);
        Some(out)
    }
}

/// Whether `bytes` hold a `\n` or `\r` (one pass).
fn has_line_break(bytes: &[u8]) -> bool {
    memchr::memchr2(b'\n', b'\r', bytes).is_some()
}

/// Where `s`, a slice of `bytes`, starts in it.
fn offset_in(bytes: &[u8], s: &str) -> usize {
    s.as_ptr() as usize - bytes.as_ptr() as usize
}

/// Deserializers for [`RawObject`]: an object's entries as borrowed keys and
/// raw values.
mod raw {
    use std::borrow::Cow;
    use std::fmt;
    use std::marker::PhantomData;

    use serde::de::{DeserializeSeed, Deserializer, MapAccess, Visitor};
    use serde_json::value::RawValue;

    /// A JSON object's keys (borrowed when they have no escapes) and raw
    /// values, but `metadata`'s value, which is read as entries in the same
    /// scan (the first `metadata`, when an object repeats it).
    #[derive(Default)]
    pub(super) struct Parsed<'de> {
        /// Every entry, in order; `None` for the `metadata` in `meta`.
        pub(super) top: Vec<(Cow<'de, str>, Option<&'de RawValue>)>,
        /// `metadata`'s entries.
        pub(super) meta: Option<Vec<(Cow<'de, str>, &'de RawValue)>>,
    }

    /// Reads an object into `out`, up to the entry of key `last` (the
    /// visit ends there, without reading the rest) or all of it.
    pub(super) struct Entries<'o, 'de> {
        pub(super) out: &'o mut Parsed<'de>,
        pub(super) last: Option<&'static str>,
    }

    impl<'de> DeserializeSeed<'de> for Entries<'_, 'de> {
        type Value = ();

        fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<(), D::Error> {
            de.deserialize_map(self)
        }
    }

    impl<'de> Visitor<'de> for Entries<'_, 'de> {
        type Value = ();

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a JSON object")
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            while let Some(k) = map.next_key_seed(Key)? {
                let done = self.last.is_some_and(|last| k == last);
                if k == "metadata" && self.out.meta.is_none() {
                    self.out.meta = Some(map.next_value_seed(MetaEntries(PhantomData))?);
                    self.out.top.push((k, None));
                } else {
                    let v: &'de RawValue = map.next_value()?;
                    self.out.top.push((k, Some(v)));
                }
                if done {
                    break;
                }
            }
            Ok(())
        }
    }

    /// The entries of a JSON object, keys borrowed when they have no escapes.
    struct MetaEntries<'a>(PhantomData<&'a ()>);

    impl<'de> DeserializeSeed<'de> for MetaEntries<'de> {
        type Value = Vec<(Cow<'de, str>, &'de RawValue)>;

        fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<Self::Value, D::Error> {
            de.deserialize_map(self)
        }
    }

    impl<'de> Visitor<'de> for MetaEntries<'de> {
        type Value = Vec<(Cow<'de, str>, &'de RawValue)>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a JSON object")
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut out = Vec::new();
            while let Some(k) = map.next_key_seed(Key)? {
                let v: &'de RawValue = map.next_value()?;
                out.push((k, v));
            }
            Ok(out)
        }
    }

    /// A key, borrowed from the input when it can be.
    struct Key;

    impl<'de> DeserializeSeed<'de> for Key {
        type Value = Cow<'de, str>;

        fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<Self::Value, D::Error> {
            de.deserialize_str(self)
        }
    }

    impl<'de> Visitor<'de> for Key {
        type Value = Cow<'de, str>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a string")
        }

        fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
            Ok(Cow::Borrowed(v))
        }

        fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
            Ok(Cow::Owned(v.to_string()))
        }
    }
}

/// `value` serialized as a response body: compact JSON followed by
/// [`JSON_TERMINATOR`], as `json.Encoder` writes it.
pub fn to_json_body<T: serde::Serialize + ?Sized>(value: &T) -> serde_json::Result<Vec<u8>> {
    let mut out = serde_json::to_vec(value)?;
    out.push(JSON_TERMINATOR);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn keys(v: &Value) -> Vec<&str> {
        v.as_object().unwrap().keys().map(String::as_str).collect()
    }

    /// The deepest nesting of `v` (a scalar is 0).
    fn value_nesting(v: &Value) -> usize {
        match v {
            Value::Array(items) => 1 + items.iter().map(value_nesting).max().unwrap_or(0),
            Value::Object(map) => 1 + map.values().map(value_nesting).max().unwrap_or(0),
            _ => 0,
        }
    }

    #[test]
    fn text_nesting_skips_brackets_in_strings() {
        for (text, want) in [
            (r#""x""#, 0),
            ("[]", 1),
            (r#"{"a":[{},[[1]]]}"#, 4),
            (r#"{"[[[":"{{{","b":["\"[[","]]"]}"#, 2),
            (r#"{"k:{\"name\":\"a{\"}":{}}"#, 2),
        ] {
            assert_eq!(text_nesting(text.as_bytes()), want, "{text}");
            assert_eq!(value_nesting(&serde_json::from_str(text).unwrap()), want, "{text}");
        }
    }

    #[test]
    fn kubectl_sorted_body_gets_typed_order() {
        let mut obj = json!({
            "apiVersion": "v1", "data": {"b": "1", "a": "2"}, "kind": "ConfigMap",
            "metadata": {"annotations": {}, "labels": {"x": "y"}, "name": "cm", "namespace": "default",
                         "uid": "u", "creationTimestamp": "t", "resourceVersion": "7"},
        });
        assert!(order_object_keys(&mut obj));
        assert_eq!(
            serde_json::to_string(&obj).unwrap(),
            r#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"cm","namespace":"default","uid":"u","resourceVersion":"7","creationTimestamp":"t","labels":{"x":"y"},"annotations":{}},"data":{"b":"1","a":"2"}}"#
        );
        assert!(!order_object_keys(&mut obj), "a second pass moves nothing");
    }

    #[test]
    fn status_goes_last_and_other_fields_keep_their_order() {
        let mut obj = json!({"status": {}, "spec": {}, "kind": "Pod", "extra": 1, "apiVersion": "v1"});
        order_object_keys(&mut obj);
        assert_eq!(keys(&obj), ["kind", "apiVersion", "spec", "extra", "status"]);
        let mut not_object = json!([1, 2]);
        assert!(!order_object_keys(&mut not_object));
    }

    #[test]
    fn bodies_end_with_a_newline() {
        assert_eq!(to_json_body(&json!({"kind": "Status"})).unwrap(), b"{\"kind\":\"Status\"}\n");
    }

    /// `order_object_keys` on a copy, `resourceVersion` removed on request,
    /// then `to_vec`: what [`to_typed_json`] must equal.
    fn by_copy(obj: &Value, without_rv: bool) -> Vec<u8> {
        let mut copy = obj.clone();
        if without_rv {
            if let Some(Value::Object(meta)) = copy.get_mut("metadata") {
                meta.shift_remove("resourceVersion");
            }
        }
        order_object_keys(&mut copy);
        serde_json::to_vec(&copy).unwrap()
    }

    /// What a full decode, `resourceVersion` set, reorder and encode give.
    fn by_decoding(bytes: &[u8], rv: &str) -> Vec<u8> {
        let mut v: Value = serde_json::from_slice(bytes).unwrap();
        let meta = v.as_object_mut().unwrap().entry("metadata").or_insert_with(|| json!({}));
        meta.as_object_mut().unwrap().insert("resourceVersion".into(), json!(rv));
        order_object_keys(&mut v);
        serde_json::to_vec(&v).unwrap()
    }

    #[test]
    fn typed_json_orders_without_copying_and_can_leave_out_the_resource_version() {
        let obj = json!({"data": {"b": "1"}, "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"labels": {"a": "b"}, "resourceVersion": "9", "name": "x"}});
        assert_eq!(
            to_typed_json(&obj, false).unwrap(),
            br#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"x","resourceVersion":"9","labels":{"a":"b"}},"data":{"b":"1"}}"#
        );
        assert_eq!(
            to_typed_json(&obj, true).unwrap(),
            br#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"x","labels":{"a":"b"}},"data":{"b":"1"}}"#
        );
        assert_eq!(to_typed_json(&json!([1]), true).unwrap(), b"[1]");
        assert_eq!(to_typed_json(&json!({"metadata": 3}), true).unwrap(), br#"{"metadata":3}"#);
        let entries = json!([{"manager": "m"}]);
        assert!(to_typed_json_with_managed_fields(&json!({"metadata": 3}), true, &entries).is_none());
        assert!(to_typed_json_with_managed_fields(&json!([1]), true, &entries).is_none());
        let (with, nesting) = to_typed_json_with_managed_fields(&obj, true, &entries).unwrap().unwrap();
        assert_eq!(nesting, 4, "object, metadata, managedFields, entry");
        assert_eq!(
            with,
            br#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"x","labels":{"a":"b"},"managedFields":[{"manager":"m"}]},"data":{"b":"1"}}"#
        );
    }

    #[test]
    fn raw_object_splices_the_resource_version_where_order_object_keys_puts_it() {
        let cases: &[&[u8]] = &[
            br#"{"kind":"ConfigMap","metadata":{"name":"x","uid":"u","creationTimestamp":"t"},"data":{}}"#,
            br#"{"metadata":{"name":"x"}}"#,
            br#"{"metadata":{}}"#,
            br#"{"metadata":{"labels":{"a":"b"},"managedFields":[]},"spec":{"x":[1,2]}}"#,
            br#"{"metadata":{"name":"x","resourceVersion":"3","labels":{}},"status":{}}"#,
            br#"{"metadata":{"name":"x","zz":1}}"#,
        ];
        for bytes in cases {
            let raw = RawObject::parse(bytes).unwrap_or_else(|| panic!("{}", String::from_utf8_lossy(bytes)));
            let spliced = raw.with_resource_version("42").unwrap();
            assert_eq!(String::from_utf8(spliced).unwrap(), String::from_utf8(by_decoding(bytes, "42")).unwrap());
        }
        let same = br#"{"metadata":{"name":"x","resourceVersion":"42"}}"#;
        assert!(RawObject::parse(same).unwrap().with_resource_version("42").is_none(), "already set");
        // The head alone: what follows `metadata` is not parsed.
        let unread = br#"{"kind":"K","metadata":{"name":"x"},"data":{"a":[1,2"#;
        assert!(RawObject::parse(unread).is_none());
        let spliced = RawObject::parse_head(unread).unwrap().with_resource_version("42").unwrap();
        assert_eq!(spliced, br#"{"kind":"K","metadata":{"name":"x","resourceVersion":"42"},"data":{"a":[1,2"#);
        for refused in [&br#"{"kind":"K","data":{}}"#[..], b"{\"metadata\":{\"name\":\"x\"},\"data\":\"a\nb\"}", br#"{"kind":1"#, br#"{"metadata":"#] {
            assert!(RawObject::parse_head(refused).is_none(), "{}", String::from_utf8_lossy(refused));
        }
        let raw = RawObject::parse(cases[0]).unwrap();
        assert_eq!(raw.meta_str("name").as_deref(), Some("x"));
        assert_eq!(raw.get("data"), Some("{}"));
        assert_eq!(raw.get("metadata"), Some(r#"{"name":"x","uid":"u","creationTimestamp":"t"}"#));
        assert_eq!(RawObject::parse(cases[2]).unwrap().get("metadata"), Some("{}"));
        assert_eq!(raw.keys().collect::<Vec<_>>(), ["kind", "metadata", "data"]);
    }

    #[test]
    fn raw_object_refuses_what_a_splice_would_get_wrong() {
        let refused: &[&[u8]] = &[
            b"[1]",
            b"{\"metadata\":{}} x",
            br#"{"kind":"Pod"}"#,
            br#"{"metadata":[]}"#,
            br#"{"metadata":{"name":"a","name":"b"}}"#,
            br#"{"metadata":{},"metadata":{}}"#,
            br#"{"metadata":{"na\u006de":"a"}}"#,
            br#"{"metadata":{"labels":{},"name":"a"}}"#,
            br#"{"status":{},"metadata":{}}"#,
            br#"{"metadata":{"name": "a"}}"#,
            br#"{"metadata":{"name":"a" }}"#,
            br#"{ "metadata":{}}"#,
            br#"{"metadata": {}}"#,
            br#"{"metadata":{ }}"#,
            br#"{"m\u0065tadata":{}}"#,
            br#"{"metadata":{"name":"a"},"metadata":3}"#,
            br#"{"metadata":null}"#,
            b"{\"metadata\":{\"name\":\"a\"},\n\"x\":1}",
            br#"{"kind":"Pod" ,"metadata":{}}"#,
            br#"{"metadata":{"name":"a" ,"uid":"u"}}"#,
            br#"{"metadata":{} }"#,
            br#" {"metadata":{}}"#,
            br#"{"metadata":{}} "#,
            b"{\"metadata\":{}}\t",
        ];
        for bytes in refused {
            assert!(RawObject::parse(bytes).is_none(), "{}", String::from_utf8_lossy(bytes));
        }
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        fn scalar() -> impl Strategy<Value = Value> {
            prop_oneof![
                Just(Value::Null),
                any::<bool>().prop_map(Value::Bool),
                any::<i64>().prop_map(|n| json!(n)),
                "[a-z\"\\\\ é\n]{0,6}".prop_map(Value::String),
            ]
        }

        fn value() -> impl Strategy<Value = Value> {
            scalar().prop_recursive(3, 24, 4, |inner| {
                prop_oneof![
                    prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                    prop::collection::vec(("[a-z]{1,4}", inner), 0..4)
                        .prop_map(|kv| Value::Object(kv.into_iter().collect())),
                ]
            })
        }

        /// Keys of either level, typed ones among others, in any order.
        fn key(known: &'static [&'static str]) -> impl Strategy<Value = String> {
            prop_oneof![prop::sample::select(known).prop_map(str::to_string), "[a-z]{1,3}"]
        }

        fn object() -> impl Strategy<Value = Value> {
            let meta = prop::collection::vec((key(OBJECT_META_ORDER), value()), 0..6);
            let top = prop::collection::vec((key(&["kind", "apiVersion", "spec", "status", "data"]), value()), 0..5);
            (meta, top, any::<bool>()).prop_map(|(meta, top, meta_first)| {
                let meta: Map<String, Value> = meta.into_iter().collect();
                let mut m = Map::new();
                if meta_first {
                    m.insert("metadata".into(), Value::Object(meta.clone()));
                }
                for (k, v) in top {
                    m.insert(k, v);
                }
                m.insert("metadata".into(), Value::Object(meta));
                Value::Object(m)
            })
        }

        proptest! {
            #[test]
            fn typed_json_is_the_copy_reordered(obj in object(), without_rv in any::<bool>()) {
                prop_assert_eq!(to_typed_json(&obj, without_rv).unwrap(), by_copy(&obj, without_rv));
            }

            #[test]
            fn a_splice_gives_the_bytes_of_a_full_decode(obj in object(), rv in 1u64..100_000) {
                let bytes = to_typed_json(&obj, false).unwrap();
                let raw = RawObject::parse(&bytes);
                prop_assert!(raw.is_some(), "typed JSON is always read: {}", String::from_utf8_lossy(&bytes));
                let rv = rv.to_string();
                let want = by_decoding(&bytes, &rv);
                let spliced = raw.unwrap().with_resource_version(&rv);
                // Reading the head only splices the same bytes.
                let head = RawObject::parse_head(&bytes);
                prop_assert!(head.is_some(), "typed JSON's head is always read: {}", String::from_utf8_lossy(&bytes));
                prop_assert_eq!(&head.unwrap().with_resource_version(&rv), &spliced);
                match spliced {
                    Some(spliced) => prop_assert_eq!(String::from_utf8(spliced).unwrap(), String::from_utf8(want).unwrap()),
                    None => prop_assert_eq!(bytes, want),
                }
            }

            #[test]
            fn managed_fields_given_apart_are_written_where_inserting_them_puts_them(
                obj in object(),
                without_rv in any::<bool>(),
                managed_fields in value(),
            ) {
                let mut inserted = obj.clone();
                if let Some(Value::Object(meta)) = inserted.get_mut("metadata") {
                    meta.insert("managedFields".into(), managed_fields.clone());
                }
                let apart = to_typed_json_with_managed_fields(&obj, without_rv, &managed_fields);
                // The same, the entries given as JSON text.
                let text = serde_json::to_string(&managed_fields).unwrap();
                let raw: &serde_json::value::RawValue = serde_json::from_str(&text).unwrap();
                let raw_apart = to_typed_json_with_managed_fields(&obj, without_rv, &raw);
                match obj.get("metadata") {
                    Some(Value::Object(_)) => {
                        let (bytes, nesting) = apart.unwrap().unwrap();
                        let want = to_typed_json_nested(&inserted, without_rv).unwrap();
                        prop_assert_eq!(String::from_utf8(bytes).unwrap(), String::from_utf8(want.0.clone()).unwrap());
                        prop_assert_eq!(nesting, want.1);
                        let (raw_bytes, raw_nesting) = raw_apart.unwrap().unwrap();
                        prop_assert_eq!(&raw_bytes, &want.0);
                        prop_assert_eq!(raw_nesting, want.1);
                    }
                    _ => prop_assert!(apart.is_none() && raw_apart.is_none()),
                }
            }

            #[test]
            fn the_nesting_noted_is_the_texts_and_the_values(obj in object(), without_rv in any::<bool>()) {
                let (bytes, nesting) = to_typed_json_nested(&obj, without_rv).unwrap();
                prop_assert_eq!(&bytes, &to_typed_json(&obj, without_rv).unwrap());
                prop_assert_eq!(nesting, text_nesting(&bytes));
                if !without_rv {
                    prop_assert_eq!(nesting, value_nesting(&obj));
                }
            }
        }
    }

}
