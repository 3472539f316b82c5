//! `metadata.managedFields`: which manager owns which fields.
//!
//! Follows `k8s.io/apimachinery/pkg/util/managedfields/internal`
//! (`managedfields.go`, `structuredmerge.go`, `managedfieldsupdater.go`,
//! `stripmeta.go`) and structured-merge-diff's `merge/update.go`:
//!
//! - an entry is identified by manager, operation, subresource and, for
//!   `Update` entries only, apiVersion;
//! - an `Update` (create, update, non-apply patch) owns the fields it added
//!   or changed; those fields leave every other entry, as do fields it
//!   removed; an entry left empty is dropped; the updater's `time` is set
//!   only when it changed something;
//! - entries are sorted by operation, time, manager, apiVersion, subresource;
//! - `apiVersion`, `kind` and the identifying/server-set metadata fields are
//!   never owned, nor `status` by main-resource writes or `spec` by
//!   `status` writes (upstream's reset fields).

use serde_json::{Map, Value};

use super::fieldpath::{ignored_top_level, stripped_fields, FieldSet};
use super::fields_v1;
use super::schema;
use super::typed::{self, compare_without_managed_fields};

/// `operation` of entries written by server-side apply.
pub const OPERATION_APPLY: &str = "Apply";
/// `operation` of entries written by create, update and non-apply patches.
pub const OPERATION_UPDATE: &str = "Update";

/// One `managedFields` entry: its fields decoded (a [`FieldSet`]), or
/// still encoded (an [`EncodedEntry`]).
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct ManagedEntry<F = FieldSet> {
    pub manager: String,
    pub operation: String,
    pub api_version: String,
    pub time: Option<String>,
    pub subresource: String,
    pub fields: F,
}

/// A `managedFields` entry whose `fieldsV1` stays encoded, for edits in
/// place ([`super::fields_v1`]); read only when that object is canonical.
type EncodedEntry = ManagedEntry<Map<String, Value>>;

impl<F> ManagedEntry<F> {
    /// A copy of this entry but its fields.
    fn without_fields(&self) -> ManagedEntry<()> {
        ManagedEntry {
            manager: self.manager.clone(),
            operation: self.operation.clone(),
            api_version: self.api_version.clone(),
            time: self.time.clone(),
            subresource: self.subresource.clone(),
            fields: (),
        }
    }

    /// Whether this entry is the one of (`manager`, `operation`,
    /// `api_version`, `subresource`); apiVersion counts for `Update` only.
    pub(crate) fn is(
        &self,
        manager: &str,
        operation: &str,
        api_version: &str,
        subresource: &str,
    ) -> bool {
        self.manager == manager
            && self.operation == operation
            && self.subresource == subresource
            && (operation == OPERATION_APPLY || self.api_version == api_version)
    }

    /// How upstream names the manager in a conflict (`printManager`):
    /// `"kubectl"`, `"kube-controller-manager" using apps/v1`,
    /// `"x" with subresource "status" using v1`.
    pub(crate) fn printed(&self) -> String {
        let mut s = format!("{:?}", self.manager);
        if !self.subresource.is_empty() {
            s = format!("{s} with subresource {:?}", self.subresource);
        }
        if self.operation == OPERATION_UPDATE {
            s = format!("{s} using {}", self.api_version);
        }
        s
    }

    /// The order upstream keeps entries in: operation, time, manager,
    /// apiVersion, subresource.
    fn order(&self) -> (&str, &str, &str, &str, &str) {
        let time = self.time.as_deref().unwrap_or_default();
        (&self.operation, time, &self.manager, &self.api_version, &self.subresource)
    }

    /// The entry of `obj` (a `managedFields` item) with `fields`: a
    /// missing or non-string text reads as empty, `time` as absent.
    fn read(obj: &Map<String, Value>, fields: F) -> Self {
        let text = |k: &str| obj.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
        ManagedEntry {
            manager: text("manager"),
            operation: text("operation"),
            api_version: text("apiVersion"),
            time: obj.get("time").and_then(Value::as_str).map(str::to_string),
            subresource: text("subresource"),
            fields,
        }
    }

    /// The entry as a `managedFields` item, its keys in upstream's field
    /// order (`ManagedFieldsEntry`); `time` and `subresource` only when
    /// set; `fields_v1` encodes the fields.
    fn into_json_with(self, fields_v1: impl FnOnce(F) -> Value) -> Value {
        Value::Object(self.into_map_with(fields_v1))
    }

    /// [`ManagedEntry::into_json_with`]'s object.
    fn into_map_with(self, fields_v1: impl FnOnce(F) -> Value) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert("manager".into(), Value::String(self.manager));
        m.insert("operation".into(), Value::String(self.operation));
        m.insert("apiVersion".into(), Value::String(self.api_version));
        if let Some(t) = self.time {
            m.insert("time".into(), Value::String(t));
        }
        m.insert("fieldsType".into(), Value::String("FieldsV1".into()));
        m.insert("fieldsV1".into(), fields_v1(self.fields));
        if !self.subresource.is_empty() {
            m.insert("subresource".into(), Value::String(self.subresource));
        }
        m
    }
}

impl ManagedEntry {
    fn into_json(self) -> Value {
        self.into_json_with(FieldSet::into_fields_v1)
    }

    fn from_json(v: &Value) -> Result<Self, String> {
        let obj = v
            .as_object()
            .ok_or("managedFields entry is not an object")?;
        let fields_type = obj.get("fieldsType").and_then(Value::as_str).unwrap_or_default();
        let fields = match obj.get("fieldsV1") {
            None | Some(Value::Null) => FieldSet::new(),
            Some(f) => FieldSet::from_fields_v1(f)?,
        };
        if !fields_type.is_empty() && fields_type != "FieldsV1" {
            return Err(format!("invalid fieldsType {fields_type:?}"));
        }
        Ok(ManagedEntry::read(obj, fields))
    }
}

/// The decoded `metadata.managedFields` of `obj` (empty when absent).
pub(crate) fn decode(obj: &Value) -> Result<Vec<ManagedEntry>, String> {
    match obj.pointer("/metadata/managedFields") {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(entries)) => entries.iter().map(ManagedEntry::from_json).collect(),
        Some(_) => Err("metadata.managedFields is not a list".to_string()),
    }
}

/// `obj` without `metadata.managedFields`: `obj` itself when it has none,
/// else a copy of the rest (the entries, often as large as the object, are
/// not copied).
pub(crate) fn without_managed_fields(obj: &Value) -> std::borrow::Cow<'_, Value> {
    let Value::Object(top) = obj else { return std::borrow::Cow::Borrowed(obj) };
    let Some(Value::Object(meta)) = top.get("metadata").filter(|m| m.get("managedFields").is_some()) else {
        return std::borrow::Cow::Borrowed(obj);
    };
    let mut out = Map::with_capacity(top.len());
    for (k, v) in top {
        let v = match v {
            Value::Object(_) if k == "metadata" => {
                Value::Object(meta.iter().filter(|(k, _)| *k != "managedFields").map(|(k, v)| (k.clone(), v.clone())).collect())
            }
            v => v.clone(),
        };
        out.insert(k.clone(), v);
    }
    std::borrow::Cow::Owned(Value::Object(out))
}

/// Writes `entries` (sorted like upstream) into `obj`'s metadata; removes
/// the field when there are none.
pub(crate) fn encode(obj: &mut Value, mut entries: Vec<ManagedEntry>) {
    entries.retain(|e| !e.fields.is_empty());
    entries.sort_by(|a, b| a.order().cmp(&b.order()));
    write(obj, entries.into_iter().map(|e| e.into_json()).collect());
}

/// managedFields entries computed for an object but not yet written into
/// it ([`encode`] writes them): server-side apply creating an object hands
/// them to the create path, which writes them after validation when
/// nothing else may change the object in between. A configuration that
/// will be refused (422) is then refused before its entries are written
/// and, when its field set was built (a configuration with lists of set or
/// map items), before that set is encoded. A configuration the create walk
/// follows has its fields written as JSON text by the walk
/// ([`super::typed::created_fields_v1_text`]) before validation (the walk
/// needs the configuration as sent, which the merge then consumes); the
/// create path stores that text as it is
/// ([`UnwrittenEntries::encode_stored`]) and decodes it only when the
/// entry is written into the object. Measured on release builds side by
/// side (6 rounds of 10 requests, median of the round means), against
/// building the entry's map before validation: a refused apply of a
/// 3 MiB ConfigMap takes 0.66 of the CPU as JSON text and 0.69 as block
/// YAML. An accepted apply creating a ConfigMap of 1 MiB of data takes
/// 0.58 of the CPU it took when the text was decoded into the entry
/// before the object was stored (same measure). Empty: nothing to write.
#[derive(Debug, Default)]
pub struct UnwrittenEntries(Unwritten);

#[derive(Debug, Default)]
enum Unwritten {
    /// Nothing to write.
    #[default]
    None,
    /// Entries to encode ([`encode`]).
    Decoded(Vec<ManagedEntry>),
    /// One entry with its fields encoded as `FieldsV1` JSON text, decoded
    /// when written.
    Encoded(ManagedEntry<String>),
}

impl UnwrittenEntries {
    /// Writes the entries into `obj`'s metadata as [`encode`] does
    /// (sorted, empty ones left out); nothing when there are none, so
    /// entries already in `obj` stay.
    pub fn write_into(self, obj: &mut Value) {
        match self.0 {
            Unwritten::None => {}
            Unwritten::Decoded(entries) => encode(obj, entries),
            Unwritten::Encoded(entry) => {
                // The walk's text is a JSON object that nests no deeper
                // than decoding allows (`created_fields_v1_text`); were it
                // not to decode, the entry would own nothing rather than
                // fail the request.
                let fields = match crate::json_value::from_slice(entry.fields.as_bytes()) {
                    Ok(Value::Object(fields)) => fields,
                    _ => Map::new(),
                };
                match fields.is_empty() {
                    true => write(obj, Vec::new()),
                    false => write(obj, vec![entry.into_json_with(|_| Value::Object(fields))]),
                }
            }
        }
    }

    /// Whether there is nothing to write.
    pub fn is_empty(&self) -> bool {
        matches!(self.0, Unwritten::None)
    }

    /// `obj` with these entries written ([`UnwrittenEntries::write_into`])
    /// as stored: the bytes of `rkube_api::wire::to_typed_json(obj, true)`
    /// after writing them, without decoding an entry whose fields are still
    /// JSON text: the text is copied as it is (serde_json's `RawValue`,
    /// which checks it in one pass that builds nothing), and how deeply they
    /// nest ([`rkube_api::wire::to_typed_json_nested`]). `None` when the
    /// entries are not one such entry owning fields, or `obj` has no
    /// `metadata` object: write them, then encode. Errors: serde_json's.
    pub fn encode_stored(&self, obj: &Value) -> Option<serde_json::Result<(Vec<u8>, usize)>> {
        let Unwritten::Encoded(entry) = &self.0 else { return None };
        if entry.fields == "{}" {
            return None;
        }
        // The walk's text is one JSON object; were it not, the entry is
        // written as `write_into` writes it.
        let fields: &serde_json::value::RawValue = serde_json::from_str(&entry.fields).ok()?;
        let head = entry.without_fields().into_map_with(|()| Value::Null);
        rkube_api::wire::to_typed_json_with_managed_fields(obj, true, &[TextEntry { head: &head, fields }])
    }

    /// An estimate of the heap that writing these entries adds to an
    /// object (bytes; [`crate::decoded::heap_estimate`]'s measure): for an
    /// entry still JSON text, [`crate::decoded::nested_objects_heap_estimate`]
    /// of it; decoded entries are counted as nothing (only text is kept
    /// apart from a written object).
    pub fn heap_estimate(&self) -> usize {
        match &self.0 {
            Unwritten::Encoded(entry) => crate::decoded::nested_objects_heap_estimate(&entry.fields),
            Unwritten::None | Unwritten::Decoded(_) => 0,
        }
    }

    /// The `Update` entry of `rec` a create of `obj` records
    /// ([`record_update`] with no old object), its fields written as JSON
    /// text by the create walk ([`super::typed::created_fields_v1_text`])
    /// and left unwritten, so that a large object's field map is never
    /// built when the create path can store the text as it is
    /// ([`UnwrittenEntries::encode_stored`]). `None` where `record_update`
    /// does not take that walk (`obj` carries managedFields, or holds what
    /// the walk does not follow: lists of set or map items), the text would
    /// nest deeper than JSON decoding takes, or the entry would own no
    /// field.
    pub fn created(rec: &UpdateRecord<'_>, obj: &Value) -> Option<Self> {
        if obj.pointer("/metadata/managedFields").is_some() {
            return None;
        }
        let (shape, strip, ignored) = recorded_as(rec, None, obj);
        let text = typed::created_fields_v1_text(obj, shape, &strip, ignored, typed::CreatedBy::Update)?;
        // No fields: `record_update` writes no entry, at no cost.
        (text != "{}").then(|| UnwrittenEntries(Unwritten::Encoded(rec.entry(text))))
    }

    /// Entries to write later.
    pub(crate) fn new(entries: Vec<ManagedEntry>) -> Self {
        UnwrittenEntries(Unwritten::Decoded(entries))
    }

    /// The one `Apply` entry of `manager` at `api_version` for the main
    /// resource, stamped `time`, owning the fields of `fields_text`: the
    /// JSON text of a canonical `FieldsV1` ([`fields_v1::is_canonical`]),
    /// as [`super::typed::created_fields_v1_text`] writes it.
    pub(crate) fn sole_apply(manager: &str, api_version: &str, time: &str, fields_text: String) -> Self {
        UnwrittenEntries(Unwritten::Encoded(new_apply_entry(manager, api_version, Some(time.to_string()), fields_text)))
    }
}

/// A `managedFields` entry as [`ManagedEntry::into_json`] writes it, its
/// `fieldsV1` given as JSON text: `head` is the entry's map with any value
/// in `fieldsV1`'s place, serialized with `fields` there instead.
struct TextEntry<'a> {
    head: &'a Map<String, Value>,
    fields: &'a serde_json::value::RawValue,
}

impl serde::Serialize for TextEntry<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(self.head.len()))?;
        for (k, v) in self.head {
            match k.as_str() {
                "fieldsV1" => m.serialize_entry(k, self.fields)?,
                _ => m.serialize_entry(k, v)?,
            }
        }
        m.end()
    }
}

/// Sets `obj`'s `metadata.managedFields` to `entries`, or removes it when
/// there are none.
fn write(obj: &mut Value, entries: Vec<Value>) {
    let Value::Object(root) = obj else { return };
    let meta = root
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    let Value::Object(meta) = meta else { return };
    if entries.is_empty() {
        meta.shift_remove("managedFields");
    } else {
        meta.insert("managedFields".into(), Value::Array(entries));
    }
}

impl EncodedEntry {
    /// Whether [`EncodedEntry::take`] reads `v`: an object whose
    /// `fieldsType` is `FieldsV1` or empty and whose `fieldsV1` is absent,
    /// null or canonical ([`fields_v1::is_canonical`]).
    fn readable(v: &Value) -> bool {
        let Some(obj) = v.as_object() else { return false };
        let typed = obj.get("fieldsType").and_then(Value::as_str).unwrap_or_default();
        (typed.is_empty() || typed == "FieldsV1")
            && match obj.get("fieldsV1") {
                None | Some(Value::Null) => true,
                Some(Value::Object(f)) => fields_v1::is_canonical(f),
                Some(_) => false,
            }
    }

    /// Reads an entry [`EncodedEntry::readable`] accepted, as
    /// [`ManagedEntry`]'s decoding reads it, moving its fields out.
    fn take(v: Value) -> Self {
        // Never hit: only entries `readable` accepted (objects) are taken.
        let Value::Object(mut obj) = v else { return EncodedEntry::default() };
        let fields = match obj.remove("fieldsV1") {
            Some(Value::Object(f)) => f,
            _ => Map::new(),
        };
        ManagedEntry::read(&obj, fields)
    }

    /// The entry as [`ManagedEntry::into_json`] writes it.
    fn into_json(self) -> Value {
        self.into_json_with(Value::Object)
    }
}

/// `obj`'s managedFields entries, taken out of it with their `fieldsV1`
/// still encoded, when there is at least one and every one is
/// [`EncodedEntry::readable`]; else `None` and `obj` is left as it was.
fn take_encoded(obj: &mut Value) -> Option<Vec<EncodedEntry>> {
    let meta = obj.get_mut("metadata")?.as_object_mut()?;
    match meta.get("managedFields")? {
        Value::Array(entries) if !entries.is_empty() && entries.iter().all(EncodedEntry::readable) => {}
        _ => return None,
    }
    let Some(Value::Array(entries)) = meta.get_mut("managedFields").map(std::mem::take) else { return None };
    Some(entries.into_iter().map(EncodedEntry::take).collect())
}

/// The one entry of `obj`'s managedFields, when there is exactly one and
/// it is the `Apply` entry of `manager` at `api_version` for the main
/// resource with a canonical `fieldsV1` ([`fields_v1::is_canonical`]): its
/// time and its encoded fields.
pub(crate) fn sole_apply_entry<'a>(
    obj: &'a Value,
    manager: &str,
    api_version: &str,
) -> Option<(Option<&'a str>, &'a Map<String, Value>)> {
    let Some(Value::Array(entries)) = obj.pointer("/metadata/managedFields") else { return None };
    let [entry] = entries.as_slice() else { return None };
    let (true, Some(obj)) = (EncodedEntry::readable(entry), entry.as_object()) else { return None };
    let read = ManagedEntry::read(obj, ());
    let ours = read.is(manager, OPERATION_APPLY, api_version, "") && read.api_version == api_version;
    match entry.get("fieldsV1") {
        Some(Value::Object(fields)) if ours => Some((entry.get("time").and_then(Value::as_str), fields)),
        _ => None,
    }
}

/// Removes `obj`'s `metadata.managedFields` and gives back the encoded
/// fields of its one entry (moved, not copied); `None`, with `obj` left as
/// it was, unless there is exactly one entry with an object `fieldsV1`.
pub(crate) fn remove_sole_entry_fields(obj: &mut Value) -> Option<Map<String, Value>> {
    let meta = obj.get_mut("metadata")?.as_object_mut()?;
    match meta.get("managedFields")? {
        Value::Array(entries) if matches!(entries.as_slice(), [Value::Object(e)] if e.get("fieldsV1").is_some_and(Value::is_object)) => {}
        _ => return None,
    }
    let Some(Value::Array(mut entries)) = meta.shift_remove("managedFields") else { return None };
    match entries.pop() {
        Some(Value::Object(mut entry)) => match entry.remove("fieldsV1") {
            Some(Value::Object(fields)) => Some(fields),
            _ => None,
        },
        _ => None,
    }
}

/// Sets `obj`'s managedFields to the one `Apply` entry of `manager` at
/// `api_version` for the main resource, its fields already encoded.
pub(crate) fn write_sole_apply_entry(
    obj: &mut Value,
    manager: &str,
    api_version: &str,
    time: Option<String>,
    fields: Map<String, Value>,
) {
    write(obj, vec![new_apply_entry(manager, api_version, time, fields).into_json()]);
}

/// The `Apply` entry of `manager` at `api_version` for the main resource,
/// stamped `time`, owning `fields` (encoded, as a map or as text).
fn new_apply_entry<F>(manager: &str, api_version: &str, time: Option<String>, fields: F) -> ManagedEntry<F> {
    ManagedEntry {
        manager: manager.to_string(),
        operation: OPERATION_APPLY.to_string(),
        api_version: api_version.to_string(),
        time,
        subresource: String::new(),
        fields,
    }
}

/// What [`record_update`] records.
#[derive(Debug, Clone, Copy)]
pub struct UpdateRecord<'a> {
    /// The field manager (`?fieldManager=`, or the user agent's first word).
    pub manager: &'a str,
    /// The request's group/version, e.g. `apps/v1`.
    pub api_version: &'a str,
    /// `status` for a status update, `""` for the main resource.
    pub subresource: &'a str,
    /// `metav1.Time` string for the entry's `time`.
    pub now: &'a str,
}

impl UpdateRecord<'_> {
    /// A new `Update` entry of this record holding `fields`.
    fn entry<F>(&self, fields: F) -> ManagedEntry<F> {
        ManagedEntry {
            manager: self.manager.to_string(),
            operation: OPERATION_UPDATE.to_string(),
            api_version: self.api_version.to_string(),
            time: Some(self.now.to_string()),
            subresource: self.subresource.to_string(),
            fields,
        }
    }
}

/// Records in `new.metadata.managedFields` the fields an `Update` by
/// `rec.manager` changed going from `old` (`None` for a create) to `new`.
///
/// Starts from the entries `new` carries when it has any (a client may
/// replace managedFields), else from `old`'s; entries that cannot be decoded
/// are dropped (upstream drops all managedFields then).
pub fn record_update(rec: &UpdateRecord<'_>, old: Option<&Value>, new: &mut Value) {
    record_update_with(rec, old, new, true)
}

/// What an `Update` by `rec` from `old` to `new` is recorded with: the
/// shape of `new`'s kind (`old`'s when `new` names none), the paths never
/// owned ([`stripped_fields`]) and the top-level field the write ignores
/// ([`ignored_top_level`]).
fn recorded_as(rec: &UpdateRecord<'_>, old: Option<&Value>, new: &Value) -> (&'static schema::Shape, FieldSet, &'static str) {
    let named = |key: &str| new.get(key).or_else(|| old.and_then(|o| o.get(key))).and_then(Value::as_str).unwrap_or("");
    let shape = schema::root_for(named("apiVersion"), named("kind"));
    (shape, stripped_fields(), ignored_top_level(rec.subresource))
}

/// How many paths an `Update` may add, change or remove for
/// [`record_update`] to edit the encoded entries in place
/// ([`super::fields_v1`]) rather than decode and encode every entry: each
/// path edited in place costs a scan of the nodes it touches.
const IN_PLACE_PATHS: usize = 8;

/// [`record_update`], taking its two shortcuts when `shortcuts` (the tests
/// compare both ways): a create of an object without managedFields encodes
/// the fields it sets in one walk ([`typed::created_fields_v1`]), and an
/// update that changes at most [`IN_PLACE_PATHS`] paths edits the encoded
/// entries in place.
pub(crate) fn record_update_with(rec: &UpdateRecord<'_>, old: Option<&Value>, new: &mut Value, shortcuts: bool) {
    let (shape, strip, ignored) = recorded_as(rec, old, new);
    if shortcuts && old.is_none() && new.pointer("/metadata/managedFields").is_none() {
        if let Some(fields) = typed::created_fields_v1(new, shape, &strip, ignored, typed::CreatedBy::Update) {
            let entries = match fields.is_empty() {
                true => Vec::new(),
                false => vec![rec.entry(fields).into_json()],
            };
            write(new, entries);
            return;
        }
    }
    let cmp = compare_without_managed_fields(old, Some(new), shape);
    let changed = cmp
        .added
        .union(&cmp.modified)
        .difference(&strip)
        .without_top_level(ignored);
    let removed = cmp.removed.without_top_level(ignored);
    let limit = IN_PLACE_PATHS.saturating_add(1);
    if shortcuts && changed.count_up_to(limit) + removed.count_up_to(limit) <= IN_PLACE_PATHS {
        if let Some(entries) = take_encoded(new) {
            record_in_place(rec, entries, &changed, &removed, new);
            return;
        }
    }
    let mut entries = match decode(new) {
        Ok(e) if !e.is_empty() => e,
        _ => old
            .map(|o| decode(o).unwrap_or_default())
            .unwrap_or_default(),
    };
    for e in entries.iter_mut() {
        e.fields = std::mem::take(&mut e.fields).difference(&changed).difference(&removed);
    }
    if !changed.is_empty() {
        match entries.iter_mut().find(|e| {
            e.is(
                rec.manager,
                OPERATION_UPDATE,
                rec.api_version,
                rec.subresource,
            )
        }) {
            Some(e) => {
                e.fields = std::mem::take(&mut e.fields).union(&changed);
                e.time = Some(rec.now.to_string());
            }
            None => entries.push(rec.entry(changed)),
        }
    }
    encode(new, entries);
}

/// The rest of [`record_update_with`] on entries taken out of `new` with
/// their `fieldsV1` encoded: the same edits, made in place.
fn record_in_place(
    rec: &UpdateRecord<'_>,
    mut entries: Vec<EncodedEntry>,
    changed: &FieldSet,
    removed: &FieldSet,
    new: &mut Value,
) {
    let updater = match changed.is_empty() {
        true => None,
        false => entries.iter().position(|e| e.is(rec.manager, OPERATION_UPDATE, rec.api_version, rec.subresource)),
    };
    for (i, e) in entries.iter_mut().enumerate() {
        // The updater's entry gets `changed` added below: taking those paths
        // out first would only move its keys out of their maps and back in
        // (each an `O(n)` shift in a map of `n` keys), to the same set.
        if Some(i) != updater {
            fields_v1::remove(&mut e.fields, changed);
        }
        fields_v1::remove(&mut e.fields, removed);
    }
    if !changed.is_empty() {
        match updater.and_then(|i| entries.get_mut(i)) {
            Some(e) => {
                fields_v1::add(&mut e.fields, changed);
                e.time = Some(rec.now.to_string());
            }
            None => entries.push(rec.entry(match changed.clone().into_fields_v1() {
                Value::Object(f) => f,
                _ => Map::new(),
            })),
        }
    }
    entries.retain(|e| !e.fields.is_empty());
    entries.sort_by(|a, b| a.order().cmp(&b.order()));
    write(new, entries.into_iter().map(EncodedEntry::into_json).collect());
}
