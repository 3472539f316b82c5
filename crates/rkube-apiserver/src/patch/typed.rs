//! Schema-aware walks over JSON values, the server-side apply half of
//! structured-merge-diff (`typed/tofieldset.go`, `typed/compare.go`,
//! `typed/merge.go`, `typed/remove.go`, `typed/validate.go`):
//!
//! - [`to_field_set`]: the fields a (partial) object sets;
//! - [`compare`]: which fields changed between two objects;
//! - [`merge`]: an applied configuration merged into a live object;
//! - [`remove_items`]: fields removed from an object;
//! - [`validate_applied`]: keys of associative lists present and unique.
//!
//! Objects merge field by field unless their shape is atomic; lists are
//! atomic unless the schema declares them a set (`v:` elements) or a map
//! (`k:` elements, see [`super::schema`]).

use std::collections::{HashMap, HashSet};

use serde_json::{Map, Value};

use super::fieldpath::{field_key, path_string, FieldSet, Path, PathElement};
use super::schema::{Shape, SsaList};

/// The path element of one item of an SSA list, or why there is none
/// (structured-merge-diff's wording).
pub(crate) fn item_path_element(
    list: SsaList,
    index: usize,
    item: &Value,
) -> Result<PathElement, String> {
    match list {
        SsaList::Atomic => Ok(PathElement::Index(index)),
        SsaList::Set => match item {
            Value::Object(_) | Value::Array(_) => {
                Err(format!("element {index}: set items must be scalars"))
            }
            v => Ok(PathElement::value(v)),
        },
        SsaList::Map(keys) => {
            let Some(obj) = item.as_object() else {
                return Err(format!(
                    "element {index}: associative list with keys has an element that is not a map"
                ));
            };
            let mut fields = Vec::with_capacity(keys.len());
            for k in keys {
                match (obj.get(k.name), k.default) {
                    (Some(Value::Object(_) | Value::Array(_)), _) => {
                        return Err(format!(
                            "element {index}: associative list with keys has an element whose key field {:?} is not a scalar",
                            k.name
                        ))
                    }
                    (Some(v), _) if !v.is_null() => fields.push((k.name.to_string(), v.clone())),
                    (_, Some(d)) => fields.push((k.name.to_string(), Value::String(d.to_string()))),
                    _ => {
                        return Err(format!(
                            "element {index}: associative list with keys has an element that omits key field {:?} (and doesn't have default value)",
                            k.name
                        ))
                    }
                }
            }
            Ok(PathElement::key(fields))
        }
    }
}

/// Items of a live (possibly not well-formed) list with their path
/// elements; an item whose keys are missing is addressed by index.
fn index_items(list: SsaList, items: &[Value]) -> Vec<(PathElement, &Value)> {
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            (
                item_path_element(list, i, item).unwrap_or(PathElement::Index(i)),
                item,
            )
        })
        .collect()
}

pub(crate) fn is_granular_list(shape: &Shape) -> bool {
    shape.ssa_list() != SsaList::Atomic
}

/// Checks an applied configuration: every associative list item has its
/// keys and no two items share them. The error reads like upstream's
/// `.spec.containers: element 0: associative list with keys has an element
/// that omits key field "name" (and doesn't have default value)`.
pub(crate) fn validate_applied(v: &Value, shape: &Shape) -> Result<(), String> {
    validate_at(v, shape, &mut Vec::new())
}

fn validate_at(v: &Value, shape: &Shape, path: &mut Path) -> Result<(), String> {
    match v {
        Value::Object(m) if !shape.is_atomic_map() => {
            // Scalars have nothing to check: their names are not copied.
            for (k, child) in m.iter().filter(|(_, c)| is_nested(c)) {
                path.push(PathElement::field(k));
                let r = validate_at(child, shape.child(k), path);
                path.pop();
                r?;
            }
            Ok(())
        }
        Value::Array(items) if is_granular_list(shape) => {
            let list = shape.ssa_list();
            let mut seen = HashSet::new();
            for (i, item) in items.iter().enumerate() {
                let pe = item_path_element(list, i, item)
                    .map_err(|e| format!("{}: {e}", path_string(path)))?;
                if !seen.insert(pe.clone()) {
                    return Err(format!(
                        "{}: duplicate entries for key {pe}",
                        path_string(path)
                    ));
                }
                if let SsaList::Map(_) = list {
                    path.push(pe);
                    let r = validate_at(item, shape.items(), path);
                    path.pop();
                    r?;
                }
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// Every field `v` sets: scalars, atomic values, empty objects and lists
/// are leaves; associative and set list items are members themselves (the
/// `.` of `k:{...}` entries); object nodes are not.
pub(crate) fn to_field_set(v: &Value, shape: &Shape) -> FieldSet {
    let mut set = FieldSet::new();
    field_set_at(v, shape, &mut Vec::new(), &mut set);
    set
}

fn field_set_at(v: &Value, shape: &Shape, path: &mut Path, set: &mut FieldSet) {
    match v {
        Value::Object(m) if !shape.is_atomic_map() && !m.is_empty() => {
            // Scalar fields are leaves whatever their shape: gathered and
            // added to the set at once.
            let mut leaves = Vec::new();
            for (k, child) in m {
                if !is_nested(child) {
                    leaves.push(PathElement::field(k));
                    continue;
                }
                path.push(PathElement::field(k));
                field_set_at(child, shape.child(k), path, set);
                path.pop();
            }
            set.insert_members(path, leaves);
        }
        Value::Array(items) if is_granular_list(shape) && !items.is_empty() => {
            let list = shape.ssa_list();
            for (pe, item) in index_items(list, items) {
                path.push(pe);
                if let SsaList::Map(_) = list {
                    field_set_at(item, shape.items(), path, set);
                }
                set.insert(path);
                path.pop();
            }
        }
        _ => set.insert(path),
    }
}

/// Whether the canonical `FieldsV1` object `stored` is exactly the encoding
/// of `to_field_set(config, shape)` without the paths of `strip` and the
/// top-level field `ignored` (what [`super::fields_v1::encodes`] answers for
/// that set, `false` for an empty set), found without building the set:
/// each object's keys are sorted (as borrowed strings) and walked in step
/// with the keys of its `stored` node, which a canonical encoding holds in
/// that order. For a ConfigMap of 165,000 keys applied again, building,
/// comparing and dropping the set took about a seventh of the request's CPU.
///
/// Follows the objects of `config` only: `None` (build the set) when the
/// walk, before it finds a difference, reaches a list, an empty object, or
/// an object whose shape is atomic.
pub(crate) fn encodes_config(
    stored: &Map<String, Value>,
    config: &Value,
    shape: &Shape,
    strip: &FieldSet,
    ignored: &str,
) -> Option<bool> {
    let Value::Object(m) = config else { return None };
    if shape.is_atomic_map() {
        return None;
    }
    // The top node may carry a `"."` first (never compared as a member).
    let marked = stored.keys().next().is_some_and(|k| k == ".");
    let found = encoded_node(stored, marked, m, shape, Some(strip), Some(ignored))?;
    Some(found.is_some_and(|n| n > 0))
}

/// The fields of the object `m` but `ignored`, in the order their elements
/// take in a field set and its canonical encoding: by name, as bytes. (A
/// stable sort: it takes the runs already in order, as `k1`, `k2`, ... are,
/// in one pass each.)
fn fields_in_order<'m>(m: &'m Map<String, Value>, ignored: Option<&str>) -> Vec<(&'m String, &'m Value)> {
    let mut fields: Vec<(&String, &Value)> = m.iter().filter(|(k, _)| ignored != Some(k.as_str())).collect();
    fields.sort_by(|a, b| a.0.cmp(b.0));
    fields
}

/// The number of elements of the set of the object `m` (less `strip` and
/// `ignored`) when `node`, after its leading `"."` if `marked`, holds
/// exactly their encodings, in order; `Some(None)` when it does not; `None`
/// for what [`encodes_config`] does not follow.
fn encoded_node(
    node: &Map<String, Value>,
    marked: bool,
    m: &Map<String, Value>,
    shape: &Shape,
    strip: Option<&FieldSet>,
    ignored: Option<&str>,
) -> Option<Option<usize>> {
    let fields = fields_in_order(m, ignored);
    let mut encoded = node.iter().skip(usize::from(marked));
    let mut count = 0;
    for (k, child) in fields {
        // Only the top node and `metadata` have paths to strip: no element
        // is built for the fields of other nodes.
        let element = || PathElement::field(k);
        let sub = match child {
            Value::Object(cm) if !cm.is_empty() => {
                let child_shape = shape.child(k);
                if child_shape.is_atomic_map() {
                    return None;
                }
                Some((cm, child_shape, strip.and_then(|s| s.child(&element()))))
            }
            Value::Object(_) | Value::Array(_) => return None,
            _ if strip.is_some_and(|s| s.has_member(&element())) => continue,
            _ => None,
        };
        // The node of a field whose paths are all stripped is left out of
        // the set: it is looked for only when something under it is not.
        // Whether that is so is known here only for scalars and non-empty
        // objects; anything else under such a node (an empty object, a
        // list, an atomic map: leaves that may be stripped too) is left to
        // the field set, before a missing node could be taken for a
        // difference.
        if let Some((cm, child_shape, Some(sub_strip))) = sub {
            let mut all_stripped = true;
            for (ck, cv) in cm {
                match cv {
                    Value::Object(o) if !o.is_empty() && !child_shape.child(ck).is_atomic_map() => all_stripped = false,
                    Value::Object(_) | Value::Array(_) => return None,
                    _ => all_stripped &= sub_strip.has_member(&PathElement::field(ck)),
                }
            }
            if all_stripped {
                continue;
            }
        }
        let Some((key, value)) = encoded.next() else { return Some(None) };
        if key.strip_prefix("f:") != Some(k.as_str()) {
            return Some(None);
        }
        let Value::Object(value) = value else { return Some(None) };
        match sub {
            // A leaf member: `{}`.
            None if value.is_empty() => {}
            None => return Some(None),
            // An object node is not a member itself: no `"."`.
            // (The walk below has checked that it holds nothing more.)
            Some((cm, child_shape, sub_strip)) => match encoded_node(value, false, cm, child_shape, sub_strip, None)? {
                Some(n) if n > 0 => {}
                _ => return Some(None),
            },
        }
        count += 1;
    }
    Some(encoded.next().is_none().then_some(count))
}

/// The canonical `FieldsV1` encoding of the fields a create of `obj` adds:
/// `compare(None, obj).added`, less the paths of `strip` and the top-level
/// field `ignored` (what [`super::managed::record_update`] records for an
/// object that has no managedFields), built from `obj` in one walk without
/// the [`FieldSet`]: each object's keys are sorted (as borrowed strings,
/// the order of a canonical encoding) and encoded as they come. For a
/// ConfigMap of 165,000 keys, building the set first was about a tenth of
/// the create's CPU in a profile; with the walk the create takes about 0.89
/// of its former CPU (release builds side by side, 8 rounds of 16 creates).
///
/// Follows objects, scalars and atomic values only: `None` (build the set)
/// for an `obj` that is not a non-empty object of a non-atomic shape, or
/// when the walk meets a non-empty list of set or map items (its items need
/// path elements of their own).
///
/// With [`CreatedBy::Apply`], the fields of the configuration `obj` that
/// server-side apply creating the object records instead:
/// `to_field_set(obj)` less the same paths, in which object nodes are
/// never members.
pub(crate) fn created_fields_v1(
    obj: &Value,
    shape: &Shape,
    strip: &FieldSet,
    ignored: &str,
    by: CreatedBy,
) -> Option<Map<String, Value>> {
    let mut out = MapOut::default();
    created_top(&mut out, obj, shape, strip, ignored, by)?;
    out.done
}

/// [`created_fields_v1`] as JSON text, byte for byte what encoding its map
/// gives, without building the map (an allocation and a hash per key): in
/// `perf` profiles of refused server-side applies of a 3 MiB ConfigMap as
/// block YAML (165,000 keys, release builds, 10 requests each), this walk
/// took 12.6 % of the CPU where the map's had taken 39.7 %. Also `None`
/// when the text would nest deeper than decoding it allows
/// ([`super::MAX_NESTING_DEPTH`]). Server-side apply creating an object
/// keeps its entry so until the create path has validated the object
/// ([`super::managed::UnwrittenEntries`]).
pub(crate) fn created_fields_v1_text(
    obj: &Value,
    shape: &Shape,
    strip: &FieldSet,
    ignored: &str,
    by: CreatedBy,
) -> Option<String> {
    let mut out = TextOut::default();
    created_top(&mut out, obj, shape, strip, ignored, by)?;
    // Text that JSON decoding would refuse as too deep is left to the
    // field set, which builds the map without decoding it (a configuration
    // at the nesting limit writes fields one level deeper: each leaf is
    // `{}`).
    (out.deepest <= super::MAX_NESTING_DEPTH).then_some(out.buf)
}

/// The walk of [`created_fields_v1`] into `out`.
fn created_top(out: &mut impl FieldsOut, obj: &Value, shape: &Shape, strip: &FieldSet, ignored: &str, by: CreatedBy) -> Option<()> {
    match obj {
        Value::Object(m) if !m.is_empty() && !shape.is_atomic_map() => {
            created_node(out, None, m, shape, Some(strip), Some(ignored), false, by)
        }
        _ => None,
    }
}

/// Which managedFields entry a create records ([`created_fields_v1`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CreatedBy {
    /// An `Update` (create, update that creates): what comparing with
    /// nothing adds, non-empty object nodes included unless value structs.
    Update,
    /// An `Apply` creating the object: the configuration's fields
    /// ([`to_field_set`]), no object node a member.
    Apply,
}

/// Writes into `out`, as the node of field `key` (the top node when
/// `None`), the encoded fields a create adds under the object node `m` of
/// `shape`, less `strip` and `ignored` (see [`created_fields_v1`]), after a
/// `"."` when the node is itself a `member` and holds fields (a member that
/// holds none encodes as `{}`); `None` where the walk stops. Follows
/// [`compare_at`] with no `lhs`: a scalar, an empty object or list, an
/// object of atomic shape and an atomic list are leaves (members); a
/// non-empty object is a member unless its field is a value struct
/// ([`Shape::is_value_struct`]) or the walk is [`CreatedBy::Apply`]'s, and
/// holds its own fields.
#[allow(clippy::too_many_arguments)]
fn created_node(
    out: &mut impl FieldsOut,
    key: Option<&str>,
    m: &Map<String, Value>,
    shape: &Shape,
    strip: Option<&FieldSet>,
    ignored: Option<&str>,
    member: bool,
    by: CreatedBy,
) -> Option<()> {
    let fields = fields_in_order(m, ignored);
    out.open(key, fields.len() + usize::from(member));
    if member {
        out.dot();
    }
    for (k, v) in fields {
        // Only the top node and `metadata` have paths to strip: no element
        // is built for the fields of other nodes.
        let element = || PathElement::field(k);
        let kept = !strip.is_some_and(|s| s.has_member(&element()));
        let child_shape = shape.child(k);
        match v {
            Value::Object(cm) if !cm.is_empty() && !child_shape.is_atomic_map() => {
                let is_member = kept && by == CreatedBy::Update && !shape.is_value_struct(k);
                let sub_strip = strip.and_then(|s| s.child(&element()));
                created_node(out, Some(k), cm, child_shape, sub_strip, None, is_member, by)?;
            }
            Value::Array(items) if !items.is_empty() && is_granular_list(child_shape) => return None,
            _ if kept => out.leaf(k),
            _ => {}
        }
    }
    let len = out.len();
    // A field's node that holds nothing and is no member is left out (the
    // top node never is); a member holding only its `"."` (all its fields
    // stripped: not reached with upstream's stripped fields, which are all
    // under the `metadata` node, never a member itself) is written `{}`.
    out.close(key.is_none() || member || len > 0, member && len == 1);
    Some(())
}

/// Where [`created_node`] writes the nodes it finds, one open node at a
/// time, innermost last.
trait FieldsOut {
    /// Opens the node of field `key` in the open node (the top node when
    /// `None`), with room for `n` entries.
    fn open(&mut self, key: Option<&str>, n: usize);
    /// Adds `"."` to the open node.
    fn dot(&mut self);
    /// Adds field `key` with no fields of its own (`{}`) to the open node.
    fn leaf(&mut self, key: &str);
    /// The open node's entries so far.
    fn len(&self) -> usize;
    /// Closes the open node: added to its parent when `keep` (the top
    /// node is the result either way), with no entries when `empty`.
    fn close(&mut self, keep: bool, empty: bool);
}

/// [`FieldsOut`] building the `FieldsV1` map.
#[derive(Default)]
struct MapOut {
    open: Vec<(Option<String>, Map<String, Value>)>,
    done: Option<Map<String, Value>>,
}

impl FieldsOut for MapOut {
    fn open(&mut self, key: Option<&str>, n: usize) {
        self.open.push((key.map(field_key), Map::with_capacity(n)));
    }

    fn dot(&mut self) {
        if let Some((_, node)) = self.open.last_mut() {
            node.insert(".".to_string(), Value::Object(Map::new()));
        }
    }

    fn leaf(&mut self, key: &str) {
        if let Some((_, node)) = self.open.last_mut() {
            node.insert(field_key(key), Value::Object(Map::new()));
        }
    }

    fn len(&self) -> usize {
        self.open.last().map_or(0, |(_, node)| node.len())
    }

    fn close(&mut self, keep: bool, empty: bool) {
        let Some((key, node)) = self.open.pop() else { return };
        let node = if empty { Map::new() } else { node };
        match (key, self.open.last_mut()) {
            (Some(key), Some((_, parent))) if keep => {
                parent.insert(key, Value::Object(node));
            }
            (None, _) => self.done = Some(node),
            _ => {}
        }
    }
}

/// [`FieldsOut`] writing the `FieldsV1` map's JSON text.
#[derive(Default)]
struct TextOut {
    buf: String,
    /// Per open node: where its entry starts in `buf` (before the comma
    /// that separates it from the previous one), where its entries start
    /// (after its `{`), and how many it has.
    open: Vec<(usize, usize, usize)>,
    /// The deepest the text nests: open nodes and the `{}` of an entry in
    /// the innermost (counted whether or not it gets one).
    deepest: usize,
}

impl TextOut {
    /// Starts an entry of the open node: a comma after the one before.
    fn next_entry(&mut self) {
        if self.open.last().is_some_and(|&(_, _, len)| len > 0) {
            self.buf.push(',');
        }
    }

    /// `"f:<key>"`, escaped as JSON.
    fn push_key(&mut self, key: &str) {
        if key.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
            self.buf.push_str("\"f:");
            self.buf.push_str(key);
            self.buf.push('"');
        } else {
            // serde_json cannot fail to encode a string.
            self.buf.push_str(&serde_json::to_string(&field_key(key)).unwrap_or_default());
        }
    }

    fn counted(&mut self) {
        if let Some((_, _, len)) = self.open.last_mut() {
            *len += 1;
        }
    }
}

impl FieldsOut for TextOut {
    fn open(&mut self, key: Option<&str>, _n: usize) {
        let start = self.buf.len();
        if let Some(key) = key {
            self.next_entry();
            self.push_key(key);
            self.buf.push(':');
        }
        self.buf.push('{');
        self.open.push((start, self.buf.len(), 0));
        self.deepest = self.deepest.max(self.open.len() + 1);
    }

    fn dot(&mut self) {
        self.next_entry();
        self.buf.push_str("\".\":{}");
        self.counted();
    }

    fn leaf(&mut self, key: &str) {
        self.next_entry();
        self.push_key(key);
        self.buf.push_str(":{}");
        self.counted();
    }

    fn len(&self) -> usize {
        self.open.last().map_or(0, |&(_, _, len)| len)
    }

    fn close(&mut self, keep: bool, empty: bool) {
        let Some((start, entries, _)) = self.open.pop() else { return };
        let top = self.open.is_empty();
        if !keep && !top {
            self.buf.truncate(start);
            return;
        }
        if empty {
            self.buf.truncate(entries);
        }
        self.buf.push('}');
        self.counted();
    }
}

/// Fields added, modified and removed going from `lhs` to `rhs`
/// (structured-merge-diff's `Comparison`).
#[derive(Debug, Default)]
pub(crate) struct Comparison {
    /// Present in `rhs` only (including new object and list-item nodes).
    pub added: FieldSet,
    /// Leaves present in both with different values.
    pub modified: FieldSet,
    /// Present in `lhs` only.
    pub removed: FieldSet,
    /// Leave `metadata.managedFields` out of the comparison.
    ignore_managed_fields: bool,
}

/// Compares two objects of the same shape. `None` stands for an absent
/// object (a create). Object fields marked zero-present in the schema do
/// not count as added nodes (upstream compares against a zero-valued Go
/// struct in which they already exist).
pub(crate) fn compare(lhs: Option<&Value>, rhs: Option<&Value>, shape: &Shape) -> Comparison {
    let mut out = Comparison::default();
    compare_at(lhs, rhs, shape, true, &mut Vec::new(), &mut out);
    out
}

/// [`compare`] of two objects as if neither had `metadata.managedFields`
/// (what the field manager compares), without copying them to take it out.
pub(crate) fn compare_without_managed_fields(lhs: Option<&Value>, rhs: Option<&Value>, shape: &Shape) -> Comparison {
    let mut out = Comparison { ignore_managed_fields: true, ..Comparison::default() };
    compare_at(lhs, rhs, shape, true, &mut Vec::new(), &mut out);
    out
}

/// True for the key `managedFields` of the top-level `metadata` when `out`
/// leaves it out.
fn skipped(out: &Comparison, path: &[PathElement], key: &str) -> bool {
    out.ignore_managed_fields && key == "managedFields" && matches!(path, [PathElement::Field(m)] if m == "metadata")
}

fn empty_or_absent(v: Option<&Value>) -> bool {
    match v {
        None => true,
        Some(Value::Object(m)) => m.is_empty(),
        Some(Value::Array(a)) => a.is_empty(),
        _ => false,
    }
}

fn compare_at(
    lhs: Option<&Value>,
    rhs: Option<&Value>,
    shape: &Shape,
    zero_present: bool,
    path: &mut Path,
    out: &mut Comparison,
) {
    if lhs.is_none() && rhs.is_none() {
        return;
    }
    // The top-level metadata when managedFields are left out: a metadata
    // object holding only them counts as the empty object it would be
    // without them.
    let at_meta = out.ignore_managed_fields && matches!(path.as_slice(), [PathElement::Field(m)] if m == "metadata");
    let managed_only =
        |v: Option<&Value>| at_meta && matches!(v, Some(Value::Object(m)) if m.len() == 1 && m.contains_key("managedFields"));
    let both_empty = (empty_or_absent(lhs) || managed_only(lhs)) && (empty_or_absent(rhs) || managed_only(rhs));
    let objects = matches!(
        (lhs, rhs),
        (Some(Value::Object(_)) | None, Some(Value::Object(_)) | None)
    );
    let arrays = matches!(
        (lhs, rhs),
        (Some(Value::Array(_)) | None, Some(Value::Array(_)) | None)
    );
    if objects && !shape.is_atomic_map() && !both_empty {
        let empty = Map::new();
        let l = lhs.and_then(Value::as_object).unwrap_or(&empty);
        let r = rhs.and_then(Value::as_object).unwrap_or(&empty);
        // Fields scalar on both sides (or absent on one) are leaves whatever
        // their shape: gathered and added to the comparison at once.
        let mut leaves = Leaves::default();
        // `r`'s entries walked beside `l`'s while the keys keep one order
        // (the usual case): no lookup per key then, and the second walk
        // starts after the entries matched so.
        let mut in_step = crate::object::InStep::new(r);
        for (k, lv) in l {
            let rv = in_step.get(k);
            if skipped(out, path, k) {
                continue;
            }
            if !is_nested(lv) && !rv.is_some_and(is_nested) {
                leaves.record(k, Some(lv), rv);
                continue;
            }
            path.push(PathElement::field(k));
            compare_at(
                Some(lv),
                rv,
                shape.child(k),
                shape.is_value_struct(k),
                path,
                out,
            );
            path.pop();
        }
        for (k, rv) in in_step.rest() {
            if skipped(out, path, k) {
                continue;
            }
            if !is_nested(rv) {
                if !l.contains_key(k) {
                    leaves.record(k, None, Some(rv));
                }
                continue;
            }
            if !l.contains_key(k) {
                path.push(PathElement::field(k));
                compare_at(
                    None,
                    Some(rv),
                    shape.child(k),
                    shape.is_value_struct(k),
                    path,
                    out,
                );
                path.pop();
            }
        }
        out.added.insert_members(path, leaves.added);
        out.modified.insert_members(path, leaves.modified);
        out.removed.insert_members(path, leaves.removed);
        node_added_removed(lhs, rhs, zero_present, path, out);
    } else if arrays && is_granular_list(shape) && !both_empty {
        let list = shape.ssa_list();
        let l = index_items(
            list,
            lhs.and_then(Value::as_array).map_or(&[][..], Vec::as_slice),
        );
        let r = index_items(
            list,
            rhs.and_then(Value::as_array).map_or(&[][..], Vec::as_slice),
        );
        let l_map: HashMap<&PathElement, &Value> = l.iter().rev().map(|(pe, v)| (pe, *v)).collect();
        let r_map: HashMap<&PathElement, &Value> = r.iter().rev().map(|(pe, v)| (pe, *v)).collect();
        let mut seen = HashSet::new();
        for (pe, _) in l.iter().chain(r.iter()) {
            if !seen.insert(pe) {
                continue;
            }
            path.push(pe.clone());
            let (li, ri) = (l_map.get(pe).copied(), r_map.get(pe).copied());
            match list {
                SsaList::Map(_) => compare_at(li, ri, shape.items(), false, path, out),
                _ => leaf(li, ri, path, out),
            }
            path.pop();
        }
        node_added_removed(lhs, rhs, zero_present, path, out);
    } else if managed_only(lhs) || managed_only(rhs) {
        let empty = Value::Object(Map::new());
        let l = if managed_only(lhs) { Some(&empty) } else { lhs };
        let r = if managed_only(rhs) { Some(&empty) } else { rhs };
        leaf(l, r, path, out);
    } else {
        leaf(lhs, rhs, path, out);
    }
}

/// Whether `v` is an object or a list (a node that may hold fields).
fn is_nested(v: &Value) -> bool {
    matches!(v, Value::Object(_) | Value::Array(_))
}

/// The scalar fields of one object node that [`leaf`] would record, by kind
/// of change.
#[derive(Default)]
struct Leaves {
    added: Vec<PathElement>,
    modified: Vec<PathElement>,
    removed: Vec<PathElement>,
}

impl Leaves {
    /// Records field `name` going from `lhs` to `rhs` as [`leaf`] does.
    fn record(&mut self, name: &str, lhs: Option<&Value>, rhs: Option<&Value>) {
        let to = match (lhs, rhs) {
            (None, Some(_)) => &mut self.added,
            (Some(_), None) => &mut self.removed,
            (Some(l), Some(r)) if !crate::object::values_equal(l, r) => &mut self.modified,
            _ => return,
        };
        to.push(PathElement::field(name));
    }
}

fn node_added_removed(
    lhs: Option<&Value>,
    rhs: Option<&Value>,
    zero_present: bool,
    path: &Path,
    out: &mut Comparison,
) {
    if lhs.is_none() && !zero_present {
        out.added.insert(path);
    } else if rhs.is_none() {
        out.removed.insert(path);
    }
}

fn leaf(lhs: Option<&Value>, rhs: Option<&Value>, path: &Path, out: &mut Comparison) {
    match (lhs, rhs) {
        (None, Some(_)) => out.added.insert(path),
        (Some(_), None) => out.removed.insert(path),
        (Some(l), Some(r)) if !crate::object::values_equal(l, r) => out.modified.insert(path),
        _ => {}
    }
}

/// Merges an applied configuration `rhs` into `lhs` (upstream's
/// `TypedValue.Merge`): fields of `rhs` win, objects merge field by field,
/// associative lists and sets merge item by item (order: `rhs` order for the
/// items it names, live-only items stay where they were), atomic values are
/// replaced. A `null` in `rhs` removes the field.
pub(crate) fn merge(lhs: Option<&Value>, rhs: &Value, shape: &Shape) -> Value {
    match lhs {
        Some(l) => {
            let mut out = l.clone();
            merge_into(&mut out, rhs, shape);
            out
        }
        None => merge_absent(rhs, shape),
    }
}

/// [`merge`] of `rhs` into `out`, changing it in place: `out` ends as the
/// bytes [`merge`] gives. Whether `out` changed as serde_json's `==` sees
/// it (exactly; an atomic value written again in another key order, or a
/// `-0.0` written over `0.0`, is replaced but counts as unchanged).
///
/// `out`'s maps are edited where they are: a field `rhs` names is found by
/// walking both maps in step (the same key order, as stored objects and
/// kubectl's bodies have it) and replaced only when it is not already what
/// the merge writes there, so a configuration restating a large map costs
/// a comparison per entry, not a map built again (each insertion hashes its
/// key).
pub(crate) fn merge_into(out: &mut Value, rhs: &Value, shape: &Shape) -> bool {
    match (out, rhs) {
        (Value::Object(o), Value::Object(r)) if !shape.is_atomic_map() => {
            let mut changed = false;
            let mut removed = false;
            let mut in_step = crate::object::InStep::new(r);
            for (k, ov) in o.iter_mut() {
                match in_step.get(k) {
                    Some(Value::Null) => removed = true,
                    Some(rv) => changed |= merge_into(ov, rv, shape.child(k)),
                    None => {}
                }
            }
            if removed {
                o.retain(|k, _| !matches!(r.get(k), Some(Value::Null)));
                changed = true;
            }
            // The fields matched in step are `out`'s: only the rest may be new.
            for (k, rv) in in_step.rest() {
                if !rv.is_null() && !o.contains_key(k) {
                    o.insert(k.clone(), merge_absent(rv, shape.child(k)));
                    changed = true;
                }
            }
            changed
        }
        (out, Value::Object(_)) if !shape.is_atomic_map() => {
            *out = merge_absent(rhs, shape);
            true
        }
        (out, Value::Array(r)) if is_granular_list(shape) => {
            let merged = Value::Array(merge_list(out.as_array().map_or(&[][..], Vec::as_slice), r, shape, &merge));
            replace(out, merged)
        }
        (out, Value::Object(_) | Value::Array(_)) => replace(out, without_nulls(rhs)),
        // A scalar: compared before it is copied.
        (out, _) if identical(out, rhs) => false,
        (out, _) => replace(out, rhs.clone()),
    }
}

/// [`merge_into`] of `rhs` into a copy of `lhs`, the copy made of `rhs`'s
/// own nodes wherever the merge leaves them as `rhs` has them: the same
/// bytes and the same changed flag as `merge_into(&mut lhs.clone(), &rhs)`,
/// but a map `rhs` restates with the same keys in the same order (a
/// configuration applied again) is kept where it is, its entries neither
/// copied from `lhs` nor hashed into a new map. Other maps are built again
/// in `lhs`'s key order (fields only `lhs` has copied, those only `rhs` has
/// last, in its order); lists and atomic values are `merge_into`'s.
pub(crate) fn merge_over(lhs: &Value, rhs: Value, shape: &Shape) -> (Value, bool) {
    match (lhs, rhs) {
        (Value::Object(l), Value::Object(mut r)) if !shape.is_atomic_map() => {
            let in_step = l.len() == r.len() && l.iter().zip(r.iter()).all(|((lk, _), (rk, rv))| lk == rk && !rv.is_null());
            let mut changed = false;
            if in_step {
                for ((k, lv), rv) in l.iter().zip(r.values_mut()) {
                    let (merged, c) = merge_over(lv, std::mem::take(rv), shape.child(k));
                    *rv = merged;
                    changed |= c;
                }
                return (Value::Object(r), changed);
            }
            let mut out = Map::with_capacity(l.len() + r.len());
            for (k, lv) in l {
                match r.get_mut(k) {
                    Some(Value::Null) => changed = true,
                    Some(rv) => {
                        let (merged, c) = merge_over(lv, std::mem::take(rv), shape.child(k));
                        out.insert(k.clone(), merged);
                        changed |= c;
                    }
                    None => {
                        out.insert(k.clone(), lv.clone());
                    }
                }
            }
            // Fields `lhs` has were taken above (their places left null).
            for (k, rv) in r {
                if !rv.is_null() && !l.contains_key(&k) {
                    let merged = merge_into_absent(rv, shape.child(&k));
                    out.insert(k, merged);
                    changed = true;
                }
            }
            (Value::Object(out), changed)
        }
        (_, rhs @ Value::Object(_)) if !shape.is_atomic_map() => (merge_into_absent(rhs, shape), true),
        (lhs, Value::Array(r)) if is_granular_list(shape) => {
            let merged = Value::Array(merge_list(lhs.as_array().map_or(&[][..], Vec::as_slice), &r, shape, &merge));
            let changed = changes(lhs, &merged);
            (merged, changed)
        }
        (lhs, rhs @ (Value::Object(_) | Value::Array(_))) => {
            let new = without_nulls_owned(rhs);
            let changed = changes(lhs, &new);
            (new, changed)
        }
        (lhs, rhs) => {
            let changed = changes(lhs, &rhs);
            (rhs, changed)
        }
    }
}

/// Whether [`replace`] of `old` by `new` counts as a change.
fn changes(old: &Value, new: &Value) -> bool {
    !identical(old, new) && !crate::object::values_equal(old, new)
}

/// Puts `new` in `out` unless it is [`identical`] already; whether `out`
/// changed as `==` sees it.
fn replace(out: &mut Value, new: Value) -> bool {
    if identical(out, &new) {
        return false;
    }
    let changed = !crate::object::values_equal(out, &new);
    *out = new;
    changed
}

/// Whether `a` and `b` encode to the same bytes: `==`, with keys in the
/// same order and floats of the same sign (`0.0 == -0.0` for `==`).
pub(crate) fn identical(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Object(a), Value::Object(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|((ka, va), (kb, vb))| ka == kb && identical(va, vb))
        }
        (Value::Array(a), Value::Array(b)) => a.len() == b.len() && a.iter().zip(b).all(|(x, y)| identical(x, y)),
        (Value::Number(x), Value::Number(y)) => match (x.as_f64(), x.is_f64(), y.is_f64()) {
            (Some(f), true, true) => y.as_f64().is_some_and(|g| f.to_bits() == g.to_bits()),
            _ => x == y,
        },
        _ => a == b,
    }
}

/// [`merge`] into nothing: `rhs` without its `null` fields, lists merged
/// as [`merge`] merges them.
fn merge_absent(rhs: &Value, shape: &Shape) -> Value {
    match rhs {
        Value::Object(r) if !shape.is_atomic_map() => Value::Object(
            r.iter().filter(|(_, v)| !v.is_null()).map(|(k, v)| (k.clone(), merge_absent(v, shape.child(k)))).collect(),
        ),
        Value::Array(r) if is_granular_list(shape) => Value::Array(merge_list(&[], r, shape, &merge)),
        _ => without_nulls(rhs),
    }
}

/// [`merge`] into an absent object (`merge(None, &rhs, shape)`, a create),
/// taking `rhs` by value: its nodes are kept in place (`null` fields
/// dropped, lists merged as [`merge`] does) instead of copied one by one.
pub(crate) fn merge_into_absent(rhs: Value, shape: &Shape) -> Value {
    match rhs {
        Value::Object(mut r) if !shape.is_atomic_map() => {
            r.retain(|_, v| !v.is_null());
            for (k, v) in r.iter_mut() {
                *v = merge_into_absent(std::mem::take(v), shape.child(k));
            }
            Value::Object(r)
        }
        Value::Array(r) if is_granular_list(shape) => Value::Array(merge_list(&[], &r, shape, &merge)),
        other => without_nulls_owned(other),
    }
}

/// [`without_nulls`], in place.
fn without_nulls_owned(v: Value) -> Value {
    match v {
        Value::Object(mut m) => {
            m.retain(|_, v| !v.is_null());
            for v in m.values_mut() {
                *v = without_nulls_owned(std::mem::take(v));
            }
            Value::Object(m)
        }
        Value::Array(items) => Value::Array(items.into_iter().map(without_nulls_owned).collect()),
        other => other,
    }
}

/// An atomic value as stored: `null` object fields mean "unset".
pub(crate) fn without_nulls(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), without_nulls(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(without_nulls).collect()),
        other => other.clone(),
    }
}

/// The item order of structured-merge-diff's list merge: items both lists
/// name come in `rhs` order, `rhs`-only items where `rhs` puts them,
/// `lhs`-only items keep their place. Live duplicates of a key the
/// configuration does not name are kept; those it names collapse into one.
///
/// Items of an associative list (a list of maps) are merged by `merge`
/// ([`merge`] itself, or in tests the merge it is checked against).
pub(crate) fn merge_list(lhs: &[Value], rhs: &[Value], shape: &Shape, merge: &dyn Fn(Option<&Value>, &Value, &Shape) -> Value) -> Vec<Value> {
    let list = shape.ssa_list();
    let items_shape = shape.items();
    let l = index_items(list, lhs);
    let r = index_items(list, rhs);
    let l_first: HashMap<&PathElement, &Value> = l.iter().rev().map(|(pe, v)| (pe, *v)).collect();
    let r_has: HashSet<&PathElement> = r.iter().map(|(pe, _)| pe).collect();
    let shared: Vec<&PathElement> = r
        .iter()
        .map(|(pe, _)| pe)
        .filter(|pe| l_first.contains_key(pe))
        .collect();
    let mut next_shared = 0usize;
    let mut consumed: HashSet<&PathElement> = HashSet::new();
    let merge_item = |lv: Option<&Value>, rv: &Value| match list {
        SsaList::Map(_) => merge(lv, rv, items_shape),
        _ => rv.clone(),
    };
    let mut out = Vec::with_capacity(l.len().max(r.len()));
    let (mut li, mut ri) = (0usize, 0usize);
    while li < l.len() || ri < r.len() {
        if li < l.len() {
            let lpe = &l[li].0;
            if r_has.contains(lpe) && consumed.contains(lpe) {
                li += 1;
                continue;
            }
            if ri < r.len() {
                if *lpe == r[ri].0 {
                    out.push(merge_item(Some(l[li].1), r[ri].1));
                    consumed.insert(lpe);
                    advance_shared(&shared, &mut next_shared, lpe);
                    li += 1;
                    ri += 1;
                    continue;
                }
                if r_has.contains(lpe) && shared.get(next_shared).is_some_and(|n| *n != lpe) {
                    li += 1;
                    continue;
                }
            }
            if !r_has.contains(lpe) {
                out.push(l[li].1.clone());
                li += 1;
                continue;
            }
        }
        if ri < r.len() {
            let rpe = &r[ri].0;
            if !consumed.contains(rpe) {
                out.push(merge_item(l_first.get(rpe).copied(), r[ri].1));
                consumed.insert(rpe);
            }
            advance_shared(&shared, &mut next_shared, rpe);
            ri += 1;
            continue;
        }
        // Only shared live items remain but the configuration is exhausted:
        // they were merged already (duplicates); drop them.
        li += 1;
    }
    out
}

fn advance_shared(shared: &[&PathElement], next: &mut usize, pe: &PathElement) {
    if shared.get(*next).is_some_and(|n| *n == pe) {
        *next += 1;
    }
}

/// Removes every member of `set` from `v` (a member object field or list
/// item goes with everything under it).
pub(crate) fn remove_items(v: &mut Value, set: &FieldSet, shape: &Shape) {
    if set.is_empty() {
        return;
    }
    match v {
        Value::Object(m) => {
            let keys: Vec<String> = m.keys().cloned().collect();
            for k in keys {
                let pe = PathElement::Field(k.clone());
                if set.has_member(&pe) {
                    m.shift_remove(&k);
                } else if let (Some(child), Some(value)) = (set.child(&pe), m.get_mut(&k)) {
                    remove_items(value, child, shape.child(&k));
                }
            }
        }
        Value::Array(items) if is_granular_list(shape) => {
            let list = shape.ssa_list();
            let pes: Vec<PathElement> = index_items(list, items)
                .into_iter()
                .map(|(pe, _)| pe)
                .collect();
            let mut kept = Vec::with_capacity(items.len());
            for (pe, mut item) in pes.into_iter().zip(items.drain(..)) {
                if set.has_member(&pe) {
                    continue;
                }
                if let Some(child) = set.child(&pe) {
                    remove_items(&mut item, child, shape.items());
                }
                kept.push(item);
            }
            *items = kept;
        }
        _ => {}
    }
}
