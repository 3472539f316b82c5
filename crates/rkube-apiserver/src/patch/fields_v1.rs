//! Small edits of a `FieldsV1` object in place, without decoding it into a
//! [`FieldSet`].
//!
//! An `Update` usually changes a few fields of an object whose managers own
//! many (a controller writing one key of a ConfigMap with 100,000 keys).
//! Decoding every manager's `FieldsV1` into a [`FieldSet`] and encoding it
//! back builds and hashes a map entry per owned field. The edits here
//! build nothing per owned field: each path edited costs a scan and a
//! shift of the nodes on its way (for a key of a 100,000-key map, a pass
//! over that map's entries), plus one linear check, without allocation for
//! `f:` keys, that the stored object is in the form
//! [`FieldSet::into_fields_v1`] writes.
//!
//! The result is, byte for byte, what decoding, [`FieldSet::difference`] /
//! [`FieldSet::union`] and encoding would give: both follow
//! structured-merge-diff's `fieldpath.Set` and its `FieldsV1` serialization
//! (`fieldpath/serialize.go`: keys in path-element order, a member that has
//! children marked with `".": {}`), and a property test checks one against
//! the other.

use std::cmp::Ordering;

use serde_json::{Map, Value};

use super::fieldpath::{FieldSet, PathElement};

/// The `FieldsV1` key of a node that is a member and has children.
const MARK: &str = ".";

/// The rank of a `FieldsV1` key's prefix in [`PathElement`] order (field,
/// key, value, index); `None` for a malformed key.
fn rank(key: &str) -> Option<u8> {
    match key.get(..2)? {
        "f:" => Some(0),
        "k:" => Some(1),
        "v:" => Some(2),
        "i:" => Some(3),
        _ => None,
    }
}

/// The order of two canonical `FieldsV1` keys: the order of the
/// [`PathElement`]s they spell (indices compare as numbers).
fn key_order(a: &str, b: &str) -> Ordering {
    let (ra, rb) = (rank(a).unwrap_or(u8::MAX), rank(b).unwrap_or(u8::MAX));
    if ra != rb {
        return ra.cmp(&rb);
    }
    let (ta, tb) = (a.get(2..).unwrap_or(""), b.get(2..).unwrap_or(""));
    if ra == 3 {
        // Canonical indices have no leading zeros: longer is larger.
        return ta.len().cmp(&tb.len()).then_with(|| ta.cmp(tb));
    }
    ta.cmp(tb)
}

/// Whether `key` is a `FieldsV1` key exactly as
/// [`PathElement::to_fields_v1_key`] writes it.
fn canonical_key(key: &str) -> bool {
    match rank(key) {
        Some(0) => true,
        Some(3) => {
            let digits = &key[2..];
            !digits.is_empty()
                && digits.bytes().all(|b| b.is_ascii_digit())
                && (digits == "0" || !digits.starts_with('0'))
                && digits.parse::<usize>().is_ok()
        }
        Some(_) => PathElement::from_fields_v1_key(key).is_some_and(|pe| pe.to_fields_v1_key() == key),
        None => false,
    }
}

/// Whether `fields` (a `FieldsV1` object) is exactly what
/// [`FieldSet::into_fields_v1`] writes for the set it decodes to: every key
/// canonical, keys in [`PathElement`] order with no repeat, every value an
/// object, and `"."` only first in a node that has other keys. Linear in
/// the object's size; allocates only for `k:` and `v:` keys.
pub(crate) fn is_canonical(fields: &Map<String, Value>) -> bool {
    node_is_canonical(fields, true)
}

fn node_is_canonical(node: &Map<String, Value>, root: bool) -> bool {
    let mut prev: Option<&str> = None;
    for (i, (key, value)) in node.iter().enumerate() {
        let Value::Object(child) = value else { return false };
        if key == MARK {
            if root || i != 0 || !child.is_empty() || node.len() == 1 {
                return false;
            }
            continue;
        }
        if !canonical_key(key) || prev.is_some_and(|p| key_order(p, key) != Ordering::Less) {
            return false;
        }
        prev = Some(key);
        if !child.is_empty() && !node_is_canonical(child, false) {
            return false;
        }
    }
    true
}

/// Whether the node under a key is a member: `{}`, or marked `"."`.
fn is_member(node: &Map<String, Value>) -> bool {
    node.is_empty() || node.contains_key(MARK)
}

/// Puts the node under `key` of `parent` back in canonical form once its
/// children are edited and its membership is `member`: `{}` for a member
/// with no children, removed for a non-member with none, `"."` first
/// exactly when a member has children.
fn settle(parent: &mut Map<String, Value>, key: &str, member: bool) {
    let Some(Value::Object(node)) = parent.get_mut(key) else { return };
    let marked = node.contains_key(MARK);
    let children = node.len() - usize::from(marked);
    if children == 0 {
        if member {
            node.clear();
        } else {
            parent.shift_remove(key);
        }
    } else if member && !marked {
        node.shift_insert(0, MARK.to_string(), Value::Object(Map::new()));
    } else if !member && marked {
        node.shift_remove(MARK);
    }
}

/// `fields − set` in place ([`FieldSet::difference`]: a member of `set`
/// removes only that exact path). `fields` must be canonical
/// ([`is_canonical`]) and stays so. Time: the size of `set` times the
/// `shift_remove` cost of the nodes it touches.
pub(crate) fn remove(fields: &mut Map<String, Value>, set: &FieldSet) {
    for (pe, removes_member, sub) in elements(set) {
        let key = pe.to_fields_v1_key();
        let Some(Value::Object(node)) = fields.get_mut(&key) else { continue };
        let member = is_member(node) && !removes_member;
        if let Some(sub) = sub {
            if !node.is_empty() {
                remove(node, sub);
            }
        }
        settle(fields, &key, member);
    }
}

/// `fields ∪ set` in place ([`FieldSet::union`]). `fields` must be
/// canonical ([`is_canonical`]) and stays so: a new key goes where its
/// [`PathElement`] sorts. Time: the size of `set` times a scan and a
/// `shift_insert` of the nodes it touches.
pub(crate) fn add(fields: &mut Map<String, Value>, set: &FieldSet) {
    for (pe, adds_member, sub) in elements(set) {
        let key = pe.to_fields_v1_key();
        let was_member = match fields.get(&key) {
            Some(Value::Object(node)) => is_member(node),
            _ => {
                let at = insertion_index(fields, &key);
                fields.shift_insert(at, key.clone(), Value::Object(Map::new()));
                false
            }
        };
        if let (Some(sub), Some(Value::Object(node))) = (sub, fields.get_mut(&key)) {
            add(node, sub);
        }
        settle(fields, &key, was_member || adds_member);
    }
}

/// Whether the canonical `fields` ([`is_canonical`]) is exactly the
/// encoding of `set` ([`FieldSet::into_fields_v1`]), found without encoding
/// or decoding either: one walk of both, in step (no lookup per key).
/// Allocates only for elements that are not field names.
pub(crate) fn encodes(fields: &Map<String, Value>, set: &FieldSet) -> bool {
    let keys = fields.iter().filter(|(k, _)| k.as_str() != MARK);
    let marked = usize::from(fields.contains_key(MARK));
    let mut elements = elements(set);
    let mut count = 0;
    for (key, child) in keys {
        count += 1;
        let Some((pe, member, sub)) = elements.next() else { return false };
        let Value::Object(child) = child else { return false };
        let same_key = match pe {
            PathElement::Field(name) => key.strip_prefix("f:") == Some(name.as_str()),
            other => other.to_fields_v1_key() == *key,
        };
        let fits = match sub {
            None => child.is_empty() && member,
            Some(sub) => !child.is_empty() && child.contains_key(MARK) == member && encodes(child, sub),
        };
        if !same_key || !fits {
            return false;
        }
    }
    elements.next().is_none() && count + marked == fields.len()
}

/// Each element of `set`'s top node once, in [`PathElement`] order: whether
/// it is a member, and the subset under it. One merge of the node's sorted
/// members and children, with no lookup per element.
fn elements(set: &FieldSet) -> impl Iterator<Item = (&PathElement, bool, Option<&FieldSet>)> {
    let mut members = set.members().iter().peekable();
    let mut children = set.children().iter().peekable();
    std::iter::from_fn(move || match (members.peek(), children.peek()) {
        (Some(m), Some((c, _))) if m == c => {
            let (_, sub) = children.next()?;
            Some((members.next()?, true, Some(sub)))
        }
        (Some(m), Some((c, _))) if m < c => Some((members.next()?, true, None)),
        (Some(_), Some(_)) | (None, Some(_)) => children.next().map(|(c, sub)| (c, false, Some(sub))),
        (Some(_), None) => Some((members.next()?, true, None)),
        (None, None) => None,
    })
}

/// Where `key` goes among `node`'s keys (after its `"."`, in key order).
fn insertion_index(node: &Map<String, Value>, key: &str) -> usize {
    node.keys().take_while(|k| k.as_str() == MARK || key_order(k, key) == Ordering::Less).count()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn element() -> impl Strategy<Value = PathElement> {
        prop_oneof![
            4 => prop::sample::select(vec!["a", "b", "data", "k1", "k10", "k2", "spec", ""]).prop_map(PathElement::field),
            1 => prop::sample::select(vec!["web", "db"]).prop_map(|n| PathElement::key(vec![("name".to_string(), Value::from(n))])),
            1 => prop::sample::select(vec!["x", "y"]).prop_map(|v| PathElement::value(&Value::from(v))),
            2 => prop::sample::select(vec![0usize, 1, 2, 9, 10, 11, 100]).prop_map(PathElement::Index),
        ]
    }

    fn set() -> impl Strategy<Value = FieldSet> {
        prop::collection::vec(prop::collection::vec(element(), 1..4), 0..12).prop_map(|paths| {
            let mut s = FieldSet::new();
            for p in paths {
                s.insert(&p);
            }
            s
        })
    }

    fn object(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => Map::new(),
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

        /// Editing the encoded set in place gives, byte for byte, what
        /// decoding, editing the `FieldSet` and encoding again gives.
        #[test]
        fn edits_in_place_match_the_field_set(owned in set(), changed in set(), removed in set()) {
            let encoded = object(owned.clone().into_fields_v1());
            prop_assert!(is_canonical(&encoded));

            let mut in_place = encoded.clone();
            remove(&mut in_place, &changed);
            remove(&mut in_place, &removed);
            add(&mut in_place, &changed);
            prop_assert!(is_canonical(&in_place));
            let want = owned.difference(&changed).difference(&removed).union(&changed).into_fields_v1();
            prop_assert_eq!(Value::Object(in_place).to_string(), want.to_string());
        }

        /// `encodes` says whether an encoded object is a set's encoding.
        #[test]
        fn encodes_is_encoding_and_comparing(a in set(), b in set()) {
            let encoded = object(a.clone().into_fields_v1());
            prop_assert!(encodes(&encoded, &a));
            prop_assert_eq!(encodes(&encoded, &b), encoded == object(b.into_fields_v1()));
        }

        /// Only the form the encoder writes is taken as canonical.
        #[test]
        fn canonical_means_the_decode_encode_round_trip_is_exact(owned in set(), swap in 0usize..8) {
            let encoded = object(owned.into_fields_v1());
            let round = FieldSet::from_fields_v1(&Value::Object(encoded.clone())).unwrap().into_fields_v1();
            prop_assert_eq!(Value::Object(encoded.clone()).to_string(), round.to_string());
            // Reversing two keys of the top node breaks the order.
            if encoded.len() >= 2 {
                let mut keys: Vec<(String, Value)> = encoded.into_iter().collect();
                let i = swap % (keys.len() - 1);
                keys.swap(i, i + 1);
                let reordered: Map<String, Value> = keys.into_iter().collect();
                prop_assert!(!is_canonical(&reordered));
            }
        }
    }

    #[test]
    fn malformed_or_unordered_objects_are_not_canonical() {
        let not = |v: Value| !is_canonical(&object(v));
        assert!(not(serde_json::json!({".": {}})));
        assert!(not(serde_json::json!({"f:a": {".": {}}})));
        assert!(not(serde_json::json!({"f:a": {"f:b": {}, ".": {}}})));
        assert!(not(serde_json::json!({"f:a": {".": {"x": {}}, "f:b": {}}})));
        assert!(not(serde_json::json!({"i:01": {}})));
        assert!(not(serde_json::json!({"i:10": {}, "i:9": {}})));
        assert!(not(serde_json::json!({"f:b": {}, "f:a": {}})));
        assert!(not(serde_json::json!({"i:1": {}, "f:a": {}})));
        assert!(not(serde_json::json!({"k:{\"b\":1,\"a\":2}": {}})));
        assert!(not(serde_json::json!({"x:a": {}})));
        assert!(not(serde_json::json!({"f:a": 1})));
        assert!(is_canonical(&object(serde_json::json!({"f:a": {".": {}, "f:b": {}}, "f:c": {}, "k:{\"a\":2,\"b\":1}": {}, "i:9": {}, "i:10": {}}))));
    }
}
