//! Duplicate keys in JSON request bodies, for `fieldValidation`.
//!
//! A decoded `serde_json::Value` keeps only the last value of a repeated key,
//! so duplicates are found on the body's bytes ([`KeyScan::of_json`]) and
//! reported with the unknown fields [`crate::validate::check_typed`] finds,
//! like upstream's strict decoder (`sigs.k8s.io/json`, used by
//! `apimachinery/pkg/runtime/serializer/json`): one error per field in
//! document order, `duplicate field "<path>"` / `unknown field "<path>"`
//! (paths like `spec.template.spec.containers[0].imagePullPolicy`); a field
//! both unknown and repeated, or repeated inside an unknown field, is only
//! unknown (the decoder skips unknown values). `Strict` turns them into 400
//! `strict decoding error: ...`, `Warn` into one warning each.
//!
//! YAML bodies are not scanned (their decoder refuses repeated keys itself).

use std::collections::HashMap;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

/// Where each key of a JSON body first appears, and its repeated keys.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyScan {
    /// Path of every key's first occurrence → its position among all keys.
    first_seen: HashMap<String, usize>,
    /// Repeated keys: (position of the repetition, path), in document order.
    duplicates: Vec<(usize, String)>,
    /// Keys seen so far (the next key's position).
    next: usize,
}

impl KeyScan {
    /// Scans a JSON body; `None` when it is not JSON (the decoder reports that).
    pub fn of_json(body: &[u8]) -> Option<KeyScan> {
        let mut scan = KeyScan::default();
        let mut de = serde_json::Deserializer::from_slice(body);
        Walk { path: String::new(), scan: &mut scan }.deserialize(&mut de).ok()?;
        Some(scan)
    }

    /// True when no key is repeated.
    pub fn has_duplicates(&self) -> bool {
        !self.duplicates.is_empty()
    }

    /// The strict decoding errors of a body with this scan whose unknown
    /// fields are `unknown` (paths, as `check_typed` finds them): unknown
    /// fields and duplicates not inside one, ordered by where they appear.
    pub fn strict_errors(&self, unknown: &[String]) -> Vec<String> {
        let inside_unknown = |path: &str| {
            unknown.iter().any(|u| {
                path == u
                    || path.strip_prefix(u.as_str()).is_some_and(|rest| rest.starts_with('.') || rest.starts_with('['))
            })
        };
        let mut errors: Vec<(usize, String)> = unknown
            .iter()
            .map(|u| (self.first_seen.get(u).copied().unwrap_or(usize::MAX), format!("unknown field {u:?}")))
            .collect();
        errors.extend(
            self.duplicates
                .iter()
                .filter(|(_, p)| !inside_unknown(p))
                .map(|(at, p)| (*at, format!("duplicate field {p:?}"))),
        );
        errors.sort_by_key(|(at, _)| *at);
        let mut out: Vec<String> = Vec::with_capacity(errors.len());
        for (_, e) in errors {
            // Upstream reports each distinct error once.
            if !out.contains(&e) {
                out.push(e);
            }
        }
        out
    }
}

/// Walks one JSON value at `path`, recording keys in `scan`.
struct Walk<'a> {
    path: String,
    scan: &'a mut KeyScan,
}

impl<'de> DeserializeSeed<'de> for Walk<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<(), D::Error> {
        de.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen: std::collections::HashSet<String> = std::collections::HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            let at = self.scan.next;
            self.scan.next += 1;
            let path = if self.path.is_empty() { key.clone() } else { format!("{}.{key}", self.path) };
            if seen.insert(key) {
                self.scan.first_seen.entry(path.clone()).or_insert(at);
            } else {
                self.scan.duplicates.push((at, path.clone()));
            }
            map.next_value_seed(Walk { path, scan: self.scan })?;
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut i = 0usize;
        loop {
            let path = format!("{}[{i}]", self.path);
            if seq.next_element_seed(Walk { path, scan: self.scan })?.is_none() {
                return Ok(());
            }
            i += 1;
        }
    }

    crate::json_value::ignore_scalars!();
}

/// Decodes a JSON body into a [`serde_json::Value`] as
/// `serde_json::from_slice` does (same errors, same last-wins handling of a
/// repeated key, same nesting limit; [`crate::json_value`]), and scans its
/// keys ([`KeyScan`]) only when some object repeats a key. The decoder
/// notices a repetition for free (inserting the key finds it present), so
/// the common body is read once more only by the decoder's own counting scan.
pub fn decode_json(body: &[u8]) -> serde_json::Result<(Value, Option<KeyScan>)> {
    let (value, repeated) = crate::json_value::from_slice_noting_repeats(body)?;
    let scan = if repeated { KeyScan::of_json(body) } else { Some(KeyScan::default()) };
    Ok((value, scan))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duplicates_and_unknown_fields_in_document_order() {
        let body = br#"{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"a","name":"b","bogus":1},
            "spec":{"paused":true,"x":{"y":1,"y":2},"paused":false,"template":{"spec":{"containers":[{"name":"c","image":"i","image":"j"}]}}}}"#;
        let scan = KeyScan::of_json(body).unwrap();
        assert!(scan.has_duplicates());
        let unknown = vec!["metadata.bogus".to_string(), "spec.x".to_string()];
        assert_eq!(
            scan.strict_errors(&unknown),
            vec![
                r#"duplicate field "metadata.name""#,
                r#"unknown field "metadata.bogus""#,
                r#"unknown field "spec.x""#,
                r#"duplicate field "spec.paused""#,
                r#"duplicate field "spec.template.spec.containers[0].image""#,
            ]
        );
    }

    #[test]
    fn a_repeated_unknown_field_is_reported_once_as_unknown() {
        let scan = KeyScan::of_json(br#"{"spec":{"u":1,"u":2}}"#).unwrap();
        assert_eq!(scan.strict_errors(&["spec.u".to_string()]), vec![r#"unknown field "spec.u""#]);
        assert_eq!(KeyScan::of_json(b"{"), None);
        assert!(!KeyScan::of_json(br#"{"a":[{"b":1},{"b":2}]}"#).unwrap().has_duplicates());
    }

    #[test]
    fn the_decoder_matches_serde_json_and_scans_only_bodies_with_repeated_keys() {
        let bodies: [&[u8]; 6] = [
            br#"{"a":{"b":[1,-2,3.5,1e400,true,null,"x\u00e9"]},"c":{}}"#,
            br#"{"spec":{"u":1,"v":2,"u":3}}"#,
            br#"{"a":1} x"#,
            br#"{"a":"#,
            b"[1,2]",
            br#"{"big":18446744073709551615,"neg":-9223372036854775808}"#,
        ];
        for body in bodies {
            let ours = decode_json(body).map(|(v, _)| v).map_err(|e| e.to_string());
            let theirs = serde_json::from_slice::<Value>(body).map_err(|e| e.to_string());
            assert_eq!(ours, theirs, "{}", String::from_utf8_lossy(body));
        }
        let (_, scan) = decode_json(br#"{"a":[{"b":1},{"b":2}]}"#).unwrap();
        assert_eq!(scan, Some(KeyScan::default()));
        let (v, scan) = decode_json(br#"{"spec":{"u":1,"v":2,"u":3}}"#).unwrap();
        assert_eq!(v.to_string(), r#"{"spec":{"u":3,"v":2}}"#);
        assert!(scan.is_some_and(|s| s.has_duplicates()));
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        assert!(decode_json(deep.as_bytes()).unwrap_err().to_string().contains("recursion limit"));
    }
}
