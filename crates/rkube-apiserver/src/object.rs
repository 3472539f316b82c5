//! Object metadata helpers: accessors on `serde_json::Value` objects and the
//! server-set fields (`uid`, `creationTimestamp`, `generation`, `generateName`
//! suffixes), following upstream's `rest.BeforeCreate` / `BeforeUpdate`
//! (`staging/src/k8s.io/apiserver/pkg/registry/rest/{create,update}.go`).

use serde_json::{Map, Value};

/// `metadata.<field>` as a string (`""` when absent).
pub fn meta_str<'a>(obj: &'a Value, field: &str) -> &'a str {
    obj.get("metadata").and_then(|m| m.get(field)).and_then(Value::as_str).unwrap_or("")
}

/// `metadata.name`.
pub fn name(obj: &Value) -> &str {
    meta_str(obj, "name")
}

/// `metadata.namespace`.
pub fn namespace(obj: &Value) -> &str {
    meta_str(obj, "namespace")
}

/// The `metadata` map, created when missing (and replacing a non-object).
pub fn metadata_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.is_object() {
        *obj = Value::Object(Map::new());
    }
    let map = obj.as_object_mut().expect("just made an object");
    let meta = map.entry("metadata").or_insert_with(|| Value::Object(Map::new()));
    if !meta.is_object() {
        *meta = Value::Object(Map::new());
    }
    meta.as_object_mut().expect("just made an object")
}

/// Sets `metadata.<field>` to `value`.
pub fn set_meta(obj: &mut Value, field: &str, value: Value) {
    metadata_mut(obj).insert(field.to_string(), value);
}

/// Removes `metadata.<field>`.
pub fn remove_meta(obj: &mut Value, field: &str) -> Option<Value> {
    metadata_mut(obj).remove(field)
}

/// `metadata.finalizers` as strings.
pub fn finalizers(obj: &Value) -> Vec<String> {
    obj.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_string)).collect())
        .unwrap_or_default()
}

/// True when `metadata.deletionTimestamp` is set.
pub fn is_terminating(obj: &Value) -> bool {
    !meta_str(obj, "deletionTimestamp").is_empty()
}

/// A fresh object UID (UUID v4, as upstream's `uuid.NewUUID`).
pub fn new_uid() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// Characters upstream's `utilrand.String` draws from (no vowels, no
/// look-alikes, so generated names never spell words).
const NAME_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// Longest `generateName` base kept before the 5-character suffix
/// (upstream `maxGeneratedNameLength` = 63 - 5).
const MAX_GENERATED_BASE: usize = 58;

/// `base` plus a random 5-character suffix (upstream `names.SimpleNameGenerator`).
pub fn generate_name(base: &str) -> String {
    let mut base = base.to_string();
    if base.len() > MAX_GENERATED_BASE {
        let mut cut = MAX_GENERATED_BASE;
        while !base.is_char_boundary(cut) {
            cut -= 1;
        }
        base.truncate(cut);
    }
    let bytes = uuid::Uuid::new_v4().into_bytes();
    for b in bytes.iter().take(5) {
        base.push(NAME_ALPHABET[*b as usize % NAME_ALPHABET.len()] as char);
    }
    base
}

/// Removes the fields the server owns and a client must not set on create:
/// `resourceVersion`, `uid`, `creationTimestamp`, `deletionTimestamp`,
/// `deletionGracePeriodSeconds`, `generation`, `selfLink`.
pub fn clear_server_fields(obj: &mut Value) {
    let meta = metadata_mut(obj);
    for f in [
        "resourceVersion",
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "generation",
        "selfLink",
    ] {
        meta.remove(f);
    }
}

/// Copies the fields a client cannot change on update from `old` into `new`
/// (upstream `rest.BeforeUpdate` + `FillObjectMetaSystemFields`): `uid`,
/// `creationTimestamp`, `deletionTimestamp`, `deletionGracePeriodSeconds`,
/// `generation`, and `name`/`namespace`/`generateName`.
pub fn keep_immutable_meta(old: &Value, new: &mut Value) {
    let empty = Map::new();
    let old_meta = old.get("metadata").and_then(Value::as_object).unwrap_or(&empty);
    let meta = metadata_mut(new);
    for f in ["uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "generation"] {
        match old_meta.get(f) {
            Some(v) => {
                meta.insert(f.to_string(), v.clone());
            }
            None => {
                meta.remove(f);
            }
        }
    }
    meta.remove("selfLink");
}

/// Sets `generation` on create (1 for kinds whose generation tracks spec changes).
pub fn set_initial_generation(obj: &mut Value, tracks_generation: bool) {
    if tracks_generation {
        set_meta(obj, "generation", Value::from(1));
    }
}

/// Bumps `generation` in `new` when anything outside `metadata` and `status`
/// changed from `old` (upstream strategies compare spec; rkube compares every
/// non-metadata, non-status field, which is the same for kinds with a spec).
pub fn bump_generation(old: &Value, new: &mut Value, tracks_generation: bool) {
    if !tracks_generation {
        return;
    }
    let old_gen = old.pointer("/metadata/generation").and_then(Value::as_i64).unwrap_or(0);
    let changed = spec_part(old) != spec_part(new);
    let gen = if changed { old_gen + 1 } else { old_gen.max(1) };
    set_meta(new, "generation", Value::from(gen));
}

fn spec_part(obj: &Value) -> Map<String, Value> {
    obj.as_object()
        .map(|m| {
            m.iter()
                .filter(|(k, _)| !matches!(k.as_str(), "metadata" | "status" | "apiVersion" | "kind"))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        })
        .unwrap_or_default()
}

/// True when `a` and `b` are equal ignoring `metadata.resourceVersion` and
/// `metadata.managedFields[*].time` (a no-op update writes nothing, as upstream).
pub fn same_ignoring_rv(a: &Value, b: &Value) -> bool {
    // Compared in place: copying two large objects to strip two fields cost
    // more than the rest of a small write to them.
    let (Value::Object(top_a), Value::Object(top_b)) = (a, b) else { return same_ignoring_rv_by_copy(a, b) };
    let (Some(meta_a), Some(meta_b)) = (metadata_in(top_a), metadata_in(top_b)) else { return same_ignoring_rv_by_copy(a, b) };
    let empty = Map::new();
    let (meta_a, meta_b) = (meta_a.unwrap_or(&empty), meta_b.unwrap_or(&empty));
    same_entries(top_a, top_b, |k| k == "metadata", |_, x, y| values_equal(x, y))
        && same_entries(meta_a, meta_b, |k| k == "resourceVersion", |k, x, y| match (k, x, y) {
            ("managedFields", Value::Array(x), Value::Array(y)) => {
                x.len() == y.len()
                    && x.iter().zip(y).all(|(e, f)| match (e, f) {
                        (Value::Object(e), Value::Object(f)) => {
                            same_entries(e, f, |k| k == "time", |_, x, y| values_equal(x, y))
                        }
                        (e, f) => values_equal(e, f),
                    })
            }
            (_, x, y) => values_equal(x, y),
        })
}

/// Whether `a` and `b` are equal, as `Value`'s `==` decides (the order of an
/// object's keys does not count). Two objects' entries are walked side by
/// side while their keys come in the same order, as two encodings of one
/// object usually do (stored objects and kubectl's bodies both sort map
/// keys); only from the first entry out of step on is each key looked up,
/// which is what `==` does for every key. Cost: linear in the smaller value.
pub fn values_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let mut in_step = InStep::new(y);
            x.len() == y.len() && x.iter().all(|(k, p)| in_step.get(k).is_some_and(|q| values_equal(p, q)))
        }
        (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(p, q)| values_equal(p, q)),
        _ => a == b,
    }
}

/// One map's entries read beside another map's walk: while the keys come
/// in the same order, each [`InStep::get`] takes `m`'s next entry (no
/// lookup); from the first key out of step on, every call looks the key up.
pub struct InStep<'a> {
    m: &'a Map<String, Value>,
    it: Option<serde_json::map::Iter<'a>>,
    matched: usize,
}

impl<'a> InStep<'a> {
    /// A walk beside `m`, at its first entry.
    pub fn new(m: &'a Map<String, Value>) -> Self {
        InStep { m, it: Some(m.iter()), matched: 0 }
    }

    /// `m`'s value for `key`, the next key of the other map's walk.
    pub fn get(&mut self, key: &str) -> Option<&'a Value> {
        if let Some(it) = &mut self.it {
            match it.next() {
                Some((k, v)) if k == key => {
                    self.matched += 1;
                    return Some(v);
                }
                _ => self.it = None,
            }
        }
        self.m.get(key)
    }

    /// `m`'s entries after those taken in step: the only ones whose keys the
    /// other map's walk may not have named.
    pub fn rest(&self) -> impl Iterator<Item = (&'a String, &'a Value)> {
        self.m.iter().skip(self.matched)
    }
}

/// `metadata` of an object map: `Some(None)` when absent, `None` when it is
/// not an object.
fn metadata_in(m: &Map<String, Value>) -> Option<Option<&Map<String, Value>>> {
    match m.get("metadata") {
        None => Some(None),
        Some(Value::Object(meta)) => Some(Some(meta)),
        Some(_) => None,
    }
}

/// Whether `a` and `b` hold the same keys besides those `skip` names, with
/// values `eq` finds equal (order does not count, as for `Value`'s `==`).
fn same_entries(
    a: &Map<String, Value>,
    b: &Map<String, Value>,
    skip: impl Fn(&str) -> bool,
    eq: impl Fn(&str, &Value, &Value) -> bool,
) -> bool {
    let kept = |m: &Map<String, Value>| m.keys().filter(|k| !skip(k)).count();
    if kept(a) != kept(b) {
        return false;
    }
    let mut in_step = InStep::new(b);
    a.iter().all(|(k, x)| {
        let y = in_step.get(k);
        skip(k) || y.is_some_and(|y| eq(k, x, y))
    })
}

/// [`same_ignoring_rv`] by stripping copies (for values that are not objects
/// with an object `metadata`, which [`metadata_mut`] replaces).
fn same_ignoring_rv_by_copy(a: &Value, b: &Value) -> bool {
    let strip = |v: &Value| {
        let mut v = v.clone();
        let meta = metadata_mut(&mut v);
        meta.remove("resourceVersion");
        if let Some(Value::Array(entries)) = meta.get_mut("managedFields") {
            for e in entries.iter_mut() {
                if let Some(m) = e.as_object_mut() {
                    m.remove("time");
                }
            }
        }
        v
    };
    strip(a) == strip(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 1024, failure_persistence: None, ..Default::default() })]

        /// Comparing in place agrees with comparing stripped copies.
        #[test]
        fn same_ignoring_rv_agrees_with_stripped_copies(
            a in proptest::collection::vec((0usize..6, 0usize..4), 0..6),
            b in proptest::collection::vec((0usize..6, 0usize..4), 0..6),
        ) {
            let build = |spec: &[(usize, usize)]| {
                let mut obj = json!({"kind": "ConfigMap"});
                for (what, value) in spec {
                    let v = json!(["x", "y", 1, {"time": "t"}])[*value].clone();
                    match what {
                        0 => obj["metadata"] = json!({}),
                        1 => obj["metadata"] = v,
                        2 => { metadata_mut(&mut obj).insert("resourceVersion".into(), v); }
                        3 => { metadata_mut(&mut obj).insert("managedFields".into(), json!([{"manager": "m", "time": v}])); }
                        4 => { metadata_mut(&mut obj).insert("name".into(), v); }
                        _ => obj["data"] = v,
                    }
                }
                obj
            };
            let (a, b) = (build(&a), build(&b));
            proptest::prop_assert_eq!(same_ignoring_rv(&a, &b), same_ignoring_rv_by_copy(&a, &b), "{} {}", a, b);
        }

        /// `values_equal` decides as `==` does, for maps whose keys come in
        /// the same order, in another order, or differ.
        #[test]
        fn values_equal_agrees_with_eq(
            a in proptest::collection::vec((0usize..5, 0usize..4), 0..8),
            b in proptest::collection::vec((0usize..5, 0usize..4), 0..8),
            reorder in proptest::prelude::any::<bool>(),
        ) {
            let build = |spec: &[(usize, usize)]| {
                let mut m = Map::new();
                for (key, value) in spec {
                    let v = json!(["x", 1, {"a": [1, {"b": "c"}], "b": null}, [{"a": 1}]])[*value].clone();
                    m.insert(format!("k{key}"), v);
                }
                Value::Object(m)
            };
            let (a, b) = (build(&a), build(&b));
            let b_reordered = match (&b, reorder) {
                (Value::Object(m), true) => Value::Object(m.clone().into_iter().rev().collect()),
                _ => b.clone(),
            };
            for (x, y) in [(&a, &b), (&a, &b_reordered), (&b, &b_reordered), (&a, &a)] {
                proptest::prop_assert_eq!(values_equal(x, y), x == y, "{} {}", x, y);
                let (nx, ny) = (json!({"n": [x, {"m": x}]}), json!({"n": [y, {"m": y}]}));
                proptest::prop_assert_eq!(values_equal(&nx, &ny), nx == ny);
            }
        }
    }

    #[test]
    fn generated_names_have_five_char_suffix() {
        let n = generate_name("web-");
        assert_eq!(n.len(), 9);
        assert!(n.starts_with("web-"));
        let long = "a".repeat(80);
        assert_eq!(generate_name(&long).len(), 63);
    }

    #[test]
    fn generation_bumps_only_on_spec_change() {
        let old = json!({"metadata": {"generation": 3}, "spec": {"a": 1}, "status": {"x": 1}});
        let mut same = json!({"metadata": {"labels": {"l": "v"}}, "spec": {"a": 1}, "status": {"x": 2}});
        bump_generation(&old, &mut same, true);
        assert_eq!(same["metadata"]["generation"], 3);
        let mut changed = json!({"metadata": {}, "spec": {"a": 2}});
        bump_generation(&old, &mut changed, true);
        assert_eq!(changed["metadata"]["generation"], 4);
    }
}
