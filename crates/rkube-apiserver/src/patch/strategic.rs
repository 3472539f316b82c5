//! Strategic merge patch (`application/strategic-merge-patch+json`), the
//! server side of `k8s.io/apimachinery/pkg/util/strategicpatch/patch.go`
//! (`StrategicMergeMapPatch` with `MergeParallelList` and
//! `IgnoreUnmatchedNulls`).
//!
//! Like JSON merge patch, but lists with a merge strategy in
//! [`super::schema`] merge item by item, and the patch may carry directives:
//!
//! - `"$patch": "replace" | "delete" | "merge"` in an object (replace it
//!   whole / clear it / merge as usual) or as a list item (`{"$patch":
//!   "replace"}` replaces the whole list; `{"name": "x", "$patch":
//!   "delete"}` deletes the item with that merge key);
//! - `"$setElementOrder/<list>": [...]` orders the merged list;
//! - `"$retainKeys": [...]` clears every field of the object not named;
//! - `"$deleteFromPrimitiveList/<list>": [...]` removes scalars from a list;
//! - `null` removes a field.
//!
//! Differences from upstream, all on inputs upstream mishandles: a value
//! added where the live object has none is merged into an empty value (so
//! directives and nulls never reach storage, where upstream relies on the
//! typed decode to drop them); `$patch: merge` is accepted as a no-op
//! everywhere; `$deleteFromPrimitiveList` of an absent list is a no-op;
//! structural errors upstream returns as 500 (a missing merge key, items of
//! mixed types) are 400 `BadRequest` here.

use std::collections::{HashMap, HashSet};

use serde_json::{Map, Value};

use super::schema::{Shape, SmpList};
use super::PatchError;

const DIRECTIVE_MARKER: &str = "$patch";
const RETAIN_KEYS: &str = "$retainKeys";
const SET_ELEMENT_ORDER: &str = "$setElementOrder";
const DELETE_FROM_PRIMITIVE_LIST: &str = "$deleteFromPrimitiveList";

const ERR_NO_LIST_OF_LISTS: &str = "lists of lists are not supported";
const ERR_BAD_PRIMITIVE_LIST: &str = "invalid patch format of primitive list";
const ERR_BAD_RETAIN_KEYS: &str = "invalid patch format of retainKeys";
const ERR_RETAIN_KEYS_MISMATCH: &str = "patch content doesn't match retainKeys list";
const ERR_BAD_SET_ELEMENT_ORDER: &str = "invalid patch format of setElementOrder list";

/// Applies a strategic merge patch (already parsed) to `original` with the
/// schema `shape`. Both must be JSON objects.
pub(crate) fn strategic_merge(
    original: &Value,
    patch: Value,
    shape: &Shape,
) -> Result<Value, PatchError> {
    let Value::Object(patch) = patch else {
        return Err(PatchError::BadRequest(format!(
            "json: cannot unmarshal {} into Go value of type map[string]interface {{}}",
            json_kind(&patch)
        )));
    };
    let original = match original {
        Value::Object(m) => m.clone(),
        _ => Map::new(),
    };
    merge_map(original, patch, shape).map(Value::Object)
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn bad_request(msg: impl Into<String>) -> PatchError {
    PatchError::BadRequest(msg.into())
}

fn no_merge_key(item: &Value, key: &str) -> PatchError {
    bad_request(format!(
        "map: {item} does not contain declared merge key: {key}"
    ))
}

fn bad_patch_type(directive: &Value, m: &Map<String, Value>) -> PatchError {
    let d = directive
        .as_str()
        .map_or_else(|| directive.to_string(), str::to_string);
    bad_request(format!(
        "unknown patch type: {d} in map: {}",
        Value::Object(m.clone())
    ))
}

/// A patch value written where the live object has nothing: merged into an
/// empty value of its kind so directives are applied and nulls dropped.
fn sanitize(v: Value, shape: &Shape) -> Result<Value, PatchError> {
    match v {
        Value::Object(m) => merge_map(Map::new(), m, shape).map(Value::Object),
        Value::Array(items) => merge_list(Vec::new(), items, shape).map(Value::Array),
        other => Ok(other),
    }
}

/// The list key a directive applies to: `$setElementOrder/containers` → `containers`.
fn directive_target<'a>(key: &'a str, prefix: &str, err: &str) -> Result<&'a str, PatchError> {
    match key.split_once('/') {
        Some((p, rest)) if p == prefix => Ok(rest),
        _ => Err(bad_request(err)),
    }
}

fn merge_map(
    mut original: Map<String, Value>,
    mut patch: Map<String, Value>,
    shape: &Shape,
) -> Result<Map<String, Value>, PatchError> {
    if let Some(directive) = patch.shift_remove(DIRECTIVE_MARKER) {
        match directive.as_str() {
            Some("replace") => return merge_map(Map::new(), patch, shape),
            Some("delete") => return Ok(Map::new()),
            Some("merge") => {}
            _ => return Err(bad_patch_type(&directive, &patch)),
        }
    }
    apply_retain_keys(&mut original, &mut patch)?;
    apply_set_element_order(&mut original, &mut patch, shape)?;

    let mut deletions: Vec<(String, Value)> = Vec::new();
    for (k, pv) in patch {
        if k.starts_with(DELETE_FROM_PRIMITIVE_LIST) {
            let target = directive_target(&k, DELETE_FROM_PRIMITIVE_LIST, ERR_BAD_PRIMITIVE_LIST)?;
            deletions.push((target.to_string(), pv));
            continue;
        }
        if k.starts_with('$') {
            // Not a directive we know: upstream stores it as an unknown
            // field that the typed decode then drops.
            continue;
        }
        if pv.is_null() {
            original.shift_remove(&k);
            continue;
        }
        let child = shape.child(&k);
        let merged = match original.get_mut(&k) {
            None => sanitize(pv, child)?,
            Some(ov) => match (std::mem::take(ov), pv) {
                (Value::Object(o), Value::Object(p)) => Value::Object(merge_map(o, p, child)?),
                (Value::Array(o), Value::Array(p)) => Value::Array(merge_list(o, p, child)?),
                (_, p) => sanitize(p, child)?,
            },
        };
        original.insert(k, merged);
    }

    for (target, list) in deletions {
        let Value::Array(to_delete) = list else {
            return Err(bad_request(ERR_BAD_PRIMITIVE_LIST));
        };
        if let Some(Value::Array(items)) = original.get_mut(&target) {
            let to_delete: HashSet<String> = to_delete.iter().map(Value::to_string).collect();
            items.retain(|item| !to_delete.contains(&item.to_string()));
        }
    }
    Ok(original)
}

/// `$retainKeys`: clear every field of `original` not listed; every
/// non-null field the patch sets must be listed.
fn apply_retain_keys(
    original: &mut Map<String, Value>,
    patch: &mut Map<String, Value>,
) -> Result<(), PatchError> {
    let Some(retain) = patch.shift_remove(RETAIN_KEYS) else {
        return Ok(());
    };
    let Value::Array(retain) = retain else {
        return Err(bad_request(ERR_BAD_RETAIN_KEYS));
    };
    let keep: HashSet<&str> = retain.iter().filter_map(Value::as_str).collect();
    for (k, v) in patch.iter() {
        if v.is_null()
            || k.starts_with(DELETE_FROM_PRIMITIVE_LIST)
            || k.starts_with(SET_ELEMENT_ORDER)
        {
            continue;
        }
        if !keep.contains(&k.as_str()) {
            return Err(PatchError::Unprocessable(
                ERR_RETAIN_KEYS_MISMATCH.to_string(),
            ));
        }
    }
    original.retain(|k, _| keep.contains(&k.as_str()));
    Ok(())
}

/// Processes every `$setElementOrder/<list>` of `patch` together with the
/// `<list>` it orders (removing both from `patch`).
fn apply_set_element_order(
    original: &mut Map<String, Value>,
    patch: &mut Map<String, Value>,
    shape: &Shape,
) -> Result<(), PatchError> {
    let keys: Vec<String> = patch
        .keys()
        .filter(|k| k.starts_with(SET_ELEMENT_ORDER))
        .cloned()
        .collect();
    for key in keys {
        let order = patch.shift_remove(&key).unwrap_or(Value::Null);
        let target =
            directive_target(&key, SET_ELEMENT_ORDER, ERR_BAD_SET_ELEMENT_ORDER)?.to_string();
        let Value::Array(order) = order else {
            return Err(bad_request(ERR_BAD_SET_ELEMENT_ORDER));
        };
        let child = shape.child(&target);
        let merge_key = match child.smp_list() {
            SmpList::MergeKey(k) => Some(k),
            _ => None,
        };
        let original_list = match original.get(&target) {
            None | Some(Value::Null) => None,
            Some(Value::Array(items)) => Some(items.clone()),
            Some(_) => return Err(bad_request(ERR_BAD_SET_ELEMENT_ORDER)),
        };
        // A `null` list stays in the patch: it deletes the field afterwards.
        let patch_list = match patch.get(&target) {
            None | Some(Value::Null) => None,
            Some(Value::Array(_)) => match patch.shift_remove(&target) {
                Some(Value::Array(items)) => Some(items),
                _ => None,
            },
            Some(_) => return Err(bad_request(ERR_BAD_SET_ELEMENT_ORDER)),
        };
        validate_set_element_order(patch_list.as_deref().unwrap_or(&[]), &order, merge_key)?;
        let server_order = original_list.clone().unwrap_or_default();
        let merged = match (original_list, patch_list) {
            (Some(o), None) => o,
            (None, Some(p)) => merge_list(Vec::new(), p, child)?,
            (Some(o), Some(p)) => merge_list(o, p, child)?,
            (None, None) => continue,
        };
        let order_index = OrderIndex::new(&order, merge_key);
        let (in_order, server_only): (Vec<Value>, Vec<Value>) = merged
            .into_iter()
            .partition(|item| order_index.get(item).is_some());
        let sorted = normalize_order(in_order, server_only, &order, &server_order, merge_key);
        original.insert(target, Value::Array(sorted));
    }
    Ok(())
}

/// Upstream's `validatePatchWithSetOrderList`: the patch list's items (less
/// deletions) must appear in the order list, in the same relative order.
fn validate_set_element_order(
    patch_list: &[Value],
    order: &[Value],
    merge_key: Option<&str>,
) -> Result<(), PatchError> {
    if order.is_empty() || patch_list.is_empty() {
        return Ok(());
    }
    let non_delete: Vec<&Value> = patch_list
        .iter()
        .filter(|item| {
            merge_key.is_none()
                || item.get(DIRECTIVE_MARKER).and_then(Value::as_str) != Some("delete")
        })
        .collect();
    let (mut pi, mut si) = (0usize, 0usize);
    while pi < non_delete.len() && si < order.len() {
        let item = non_delete[pi];
        if item.get(DIRECTIVE_MARKER).is_some() {
            pi += 1;
            continue;
        }
        let equal = match merge_key {
            Some(k) => {
                let a = item.get(k).ok_or_else(|| no_merge_key(item, k))?;
                let b = order[si]
                    .get(k)
                    .ok_or_else(|| no_merge_key(&order[si], k))?;
                a == b
            }
            None => *item == order[si],
        };
        if equal {
            pi += 1;
        }
        si += 1;
    }
    if pi < non_delete.len() && si >= order.len() {
        return Err(bad_request(format!(
            "The order in patch list:\n{}\n doesn't match {SET_ELEMENT_ORDER} list:\n{}\n",
            Value::Array(patch_list.to_vec()),
            Value::Array(order.to_vec())
        )));
    }
    Ok(())
}

#[derive(PartialEq)]
enum ElementKind {
    Object,
    Array,
    Scalar(u8),
}

fn element_kind(v: &Value) -> ElementKind {
    match v {
        Value::Object(_) => ElementKind::Object,
        Value::Array(_) => ElementKind::Array,
        Value::Null => ElementKind::Scalar(0),
        Value::Bool(_) => ElementKind::Scalar(1),
        Value::Number(_) => ElementKind::Scalar(2),
        Value::String(_) => ElementKind::Scalar(3),
    }
}

/// The common kind of the items of both lists (upstream's `sliceElementType`).
fn common_kind(original: &[Value], patch: &[Value]) -> Result<ElementKind, PatchError> {
    let mut kinds = original.iter().chain(patch.iter()).map(element_kind);
    let Some(first) = kinds.next() else {
        return Err(bad_request("no elements in any of the given slices"));
    };
    if first == ElementKind::Array {
        return Err(PatchError::Unprocessable(ERR_NO_LIST_OF_LISTS.to_string()));
    }
    if kinds.any(|k| k != first) {
        return Err(bad_request(format!(
            "list element types are not identical: {} {}",
            Value::Array(original.to_vec()),
            Value::Array(patch.to_vec())
        )));
    }
    Ok(first)
}

fn merge_list(
    original: Vec<Value>,
    patch: Vec<Value>,
    shape: &Shape,
) -> Result<Vec<Value>, PatchError> {
    let items_shape = shape.items();
    let merge_key = match shape.smp_list() {
        SmpList::Replace => {
            return patch
                .into_iter()
                .map(|item| sanitize(item, items_shape))
                .collect();
        }
        SmpList::MergePrimitive => None,
        SmpList::MergeKey(k) => Some(k),
    };
    if original.is_empty() && patch.is_empty() {
        return Ok(original);
    }
    if common_kind(&original, &patch)? != ElementKind::Object {
        let mut merged: Vec<Value> = Vec::with_capacity(original.len() + patch.len());
        let mut seen = HashSet::new();
        for item in original.iter().chain(patch.iter()) {
            if seen.insert(item.to_string()) {
                merged.push(item.clone());
            }
        }
        let in_patch_index = OrderIndex::new(&patch, None);
        let (in_patch, server_only): (Vec<Value>, Vec<Value>) = merged
            .into_iter()
            .partition(|item| in_patch_index.get(item).is_some());
        return Ok(normalize_order(
            in_patch,
            server_only,
            &patch,
            &original,
            None,
        ));
    }
    let Some(key) = merge_key else {
        return Err(bad_request(
            "cannot merge lists without merge key for type map",
        ));
    };

    // Special elements first: deletions and a whole-list replace.
    let mut plain: Vec<Map<String, Value>> = Vec::with_capacity(patch.len());
    let mut deleted: HashSet<String> = HashSet::new();
    let mut replace = false;
    for item in patch {
        let Value::Object(mut m) = item else { continue };
        match m.get(DIRECTIVE_MARKER).cloned() {
            None => plain.push(m),
            Some(d) => match d.as_str() {
                Some("delete") => {
                    let Some(kv) = m.get(key) else {
                        return Err(no_merge_key(&Value::Object(m), key));
                    };
                    deleted.insert(kv.to_string());
                }
                Some("replace") => replace = true,
                Some("merge") => {
                    m.shift_remove(DIRECTIVE_MARKER);
                    plain.push(m);
                }
                _ => return Err(bad_patch_type(&d, &m)),
            },
        }
    }
    if replace {
        return plain
            .into_iter()
            .map(|m| merge_map(Map::new(), m, items_shape).map(Value::Object))
            .collect();
    }

    let mut original = original;
    if !deleted.is_empty() {
        original.retain(|o| {
            !o.get(key)
                .is_some_and(|kv| deleted.contains(&kv.to_string()))
        });
    }
    let server_order = original.clone();
    let mut merged = original;
    // First item of `merged` with each merge key value.
    let mut positions: HashMap<String, usize> = HashMap::with_capacity(merged.len() + plain.len());
    for (i, o) in merged.iter().enumerate() {
        if let Some(kv) = o.get(key) {
            positions.entry(kv.to_string()).or_insert(i);
        }
    }
    let mut patch_order: Vec<Value> = Vec::with_capacity(plain.len());
    for item in plain {
        let Some(kv) = item.get(key).cloned() else {
            return Err(no_merge_key(&Value::Object(item), key));
        };
        let mut order_entry = Map::new();
        order_entry.insert(key.to_string(), kv.clone());
        patch_order.push(Value::Object(order_entry));
        match positions.get(&kv.to_string()).copied() {
            Some(i) => {
                let Value::Object(o) = std::mem::take(&mut merged[i]) else {
                    return Err(bad_request(format!("value for key {i} is not a map.")));
                };
                merged[i] = Value::Object(merge_map(o, item, items_shape)?);
            }
            None => {
                positions.insert(kv.to_string(), merged.len());
                merged.push(Value::Object(merge_map(Map::new(), item, items_shape)?));
            }
        }
    }
    let patch_index = OrderIndex::new(&patch_order, Some(key));
    let (in_patch, server_only): (Vec<Value>, Vec<Value>) = merged
        .into_iter()
        .partition(|item| patch_index.get(item).is_some());
    Ok(normalize_order(
        in_patch,
        server_only,
        &patch_order,
        &server_order,
        Some(key),
    ))
}

/// Positions in an order list (first occurrence), by merge key value or,
/// without a merge key, by value; an item without the merge key matches an
/// order entry without it, as upstream's `index` does.
struct OrderIndex<'k> {
    merge_key: Option<&'k str>,
    first: HashMap<String, usize>,
}

impl<'k> OrderIndex<'k> {
    fn new(order: &[Value], merge_key: Option<&'k str>) -> Self {
        let mut first = HashMap::with_capacity(order.len());
        for (i, o) in order.iter().enumerate() {
            first.entry(identity(o, merge_key)).or_insert(i);
        }
        OrderIndex { merge_key, first }
    }

    fn get(&self, item: &Value) -> Option<usize> {
        self.first.get(&identity(item, self.merge_key)).copied()
    }
}

/// The hashable identity of a list item: JSON text of its merge key value
/// (`"\0"` when it has none), or of the whole item without a merge key.
fn identity(item: &Value, merge_key: Option<&str>) -> String {
    match merge_key {
        Some(k) => item
            .get(k)
            .map_or_else(|| "\0".to_string(), Value::to_string),
        None => item.to_string(),
    }
}

/// Upstream's `normalizeElementOrder`: patch items sorted by the patch (or
/// `$setElementOrder`) order, server-only items by their live order, then
/// interleaved so each server-only item lands before the first patch item
/// that comes after it in the live list.
fn normalize_order(
    patch_items: Vec<Value>,
    server_only: Vec<Value>,
    patch_order: &[Value],
    server_order: &[Value],
    merge_key: Option<&str>,
) -> Vec<Value> {
    let server_index = OrderIndex::new(server_order, merge_key);
    let right = sort_by_order(patch_items, &OrderIndex::new(patch_order, merge_key));
    let left = sort_by_order(server_only, &server_index);
    let mut out = Vec::with_capacity(left.len() + right.len());
    let mut left = left.into_iter().peekable();
    let mut right = right.into_iter().peekable();
    loop {
        match (left.peek(), right.peek()) {
            (Some(l), Some(r)) => {
                let take_left = matches!((server_index.get(l), server_index.get(r)), (Some(a), Some(b)) if a < b);
                let next = if take_left { left.next() } else { right.next() };
                out.extend(next);
            }
            (Some(_), None) => out.extend(left.next()),
            (None, Some(_)) => out.extend(right.next()),
            (None, None) => break,
        }
    }
    out
}

/// Stable sort by position in `order`; items not found go first.
fn sort_by_order(mut items: Vec<Value>, order: &OrderIndex<'_>) -> Vec<Value> {
    items.sort_by_cached_key(|item| order.get(item).map_or(-1, |i| i as i64));
    items
}
