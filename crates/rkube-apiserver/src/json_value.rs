//! JSON text into a [`serde_json::Value`] with every object and array
//! allocated at its final size.
//!
//! `serde_json::from_slice::<Value>` grows each map and array as it reads
//! them: an array of 1.5 million numbers is copied about twenty times on the
//! way (each doubling moves every element), and a map of 165,000 keys
//! rehashes its whole index at every doubling. On a large text this decoder
//! first counts the entries of every container in one scan that builds
//! nothing (about 2 ns per byte), then builds the value with those counts as
//! capacities. Measured on a release build, one 3 MiB text, median of 11
//! decodes and drops: a ConfigMap with 165,669 keys 58 → 50 ms, a ConfigMap
//! whose one value is an array of 1.5 million zeros 152 → 97 ms.
//!
//! The result, the errors and the nesting limit are `serde_json`'s: the
//! same deserializer reads the text both times, objects keep the last of a
//! repeated key at its first position, and a text the counting scan refuses
//! is decoded again by `serde_json` itself so the error is the one it gives.
//! One exception, on purpose: with serde_json's `raw_value` feature (which
//! this crate enables), its own decoder reads an object whose key is
//! `$serde_json::private::RawValue` as the JSON text of that key's string
//! value; here it is an ordinary key, as a client sent and stored it.

use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

/// Texts shorter than this (bytes) are built in one pass, growing as they
/// go: their containers are small, and a second pass would cost more than
/// the growth it saves.
pub const PRESIZE_MIN_BYTES: usize = 16 * 1024;

/// `bytes` as a JSON value, as `serde_json::from_slice::<Value>` decodes it
/// (same value, same errors, trailing characters refused).
pub fn from_slice(bytes: &[u8]) -> serde_json::Result<Value> {
    decode(bytes, None)
}

/// [`from_slice`], and whether some object in the text repeats a key (the
/// value keeps the last one, as `serde_json` does).
pub fn from_slice_noting_repeats(bytes: &[u8]) -> serde_json::Result<(Value, bool)> {
    let mut repeated = false;
    let value = decode(bytes, Some(&mut repeated))?;
    Ok((value, repeated))
}

fn decode(bytes: &[u8], repeated: Option<&mut bool>) -> serde_json::Result<Value> {
    // Valid UTF-8 checked once for the whole text (a word at a time), so
    // neither pass checks each string again; a text that is not UTF-8 is
    // refused by serde_json itself, with the error it gives.
    let Ok(text) = std::str::from_utf8(bytes) else { return serde_json::from_slice(bytes) };
    let sizes = if bytes.len() >= PRESIZE_MIN_BYTES {
        match container_sizes(text) {
            Ok(sizes) => sizes,
            // The counting scan refuses what the build would (the same
            // deserializer reads both); serde_json's own decode gives the
            // error exactly as it words it.
            Err(_) => return serde_json::from_slice(bytes),
        }
    } else {
        Vec::new()
    };
    let mut scratch = false;
    let mut build = Build { sizes: &sizes, next: 0, repeated: repeated.unwrap_or(&mut scratch) };
    let mut de = serde_json::Deserializer::from_str(text);
    let value = (&mut build).deserialize(&mut de)?;
    de.end()?;
    Ok(value)
}

/// The number of entries of every object and array in `text`, in the order
/// they open (a pre-order walk, the order [`Build`] meets them).
fn container_sizes(text: &str) -> serde_json::Result<Vec<u32>> {
    let mut sizes = Vec::new();
    let mut de = serde_json::Deserializer::from_str(text);
    Count(&mut sizes).deserialize(&mut de)?;
    de.end()?;
    Ok(sizes)
}

/// The scalar visits of a [`serde::de::Visitor`] whose value is `()` and
/// which only walks containers: every JSON scalar is accepted and ignored.
macro_rules! ignore_scalars {
    () => {
        fn visit_bool<E>(self, _: bool) -> Result<(), E> {
            Ok(())
        }
        fn visit_i64<E>(self, _: i64) -> Result<(), E> {
            Ok(())
        }
        fn visit_u64<E>(self, _: u64) -> Result<(), E> {
            Ok(())
        }
        fn visit_f64<E>(self, _: f64) -> Result<(), E> {
            Ok(())
        }
        fn visit_str<E>(self, _: &str) -> Result<(), E> {
            Ok(())
        }
        fn visit_unit<E>(self) -> Result<(), E> {
            Ok(())
        }
    };
}
pub(crate) use ignore_scalars;

/// Counts the entries of one value's containers into the vector.
struct Count<'a>(&'a mut Vec<u32>);

impl<'de> DeserializeSeed<'de> for Count<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<(), D::Error> {
        de.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Count<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any valid JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let slot = self.0.len();
        self.0.push(0);
        let mut n: u32 = 0;
        while map.next_key::<IgnoredAny>()?.is_some() {
            map.next_value_seed(Count(&mut *self.0))?;
            n = n.saturating_add(1);
        }
        self.0[slot] = n;
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let slot = self.0.len();
        self.0.push(0);
        let mut n: u32 = 0;
        while seq.next_element_seed(Count(&mut *self.0))?.is_some() {
            n = n.saturating_add(1);
        }
        self.0[slot] = n;
        Ok(())
    }

    ignore_scalars!();
}

/// Builds one value, taking each container's capacity from `sizes` (none
/// left: grow as needed) and noting repeated keys in `repeated`.
struct Build<'a> {
    sizes: &'a [u32],
    next: usize,
    repeated: &'a mut bool,
}

impl Build<'_> {
    /// The capacity of the container opening now.
    fn take_size(&mut self) -> usize {
        let size = self.sizes.get(self.next).map_or(0, |&n| n as usize);
        self.next += 1;
        size
    }
}

impl<'de> DeserializeSeed<'de> for &mut Build<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<Value, D::Error> {
        de.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for &mut Build<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any valid JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::with_capacity(self.take_size());
        while let Some(key) = map.next_key::<String>()? {
            let value = map.next_value_seed(&mut *self)?;
            if out.insert(key, value).is_some() {
                *self.repeated = true;
            }
        }
        Ok(Value::Object(out))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::with_capacity(self.take_size());
        while let Some(v) = seq.next_element_seed(&mut *self)? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Pads a text with trailing whitespace past [`PRESIZE_MIN_BYTES`], so the
    /// counting pass runs (whitespace does not change the value or the error
    /// of a text that fails before its end; trailing characters still fail).
    fn padded(text: &[u8]) -> Vec<u8> {
        let mut out = text.to_vec();
        out.resize(text.len().max(PRESIZE_MIN_BYTES) + 1, b' ');
        out
    }

    fn both_ways(text: &[u8]) -> (Result<String, String>, Result<String, String>) {
        let ours = from_slice(text).map(|v| v.to_string()).map_err(|e| e.to_string());
        let theirs = serde_json::from_slice::<Value>(text).map(|v| v.to_string()).map_err(|e| e.to_string());
        (ours, theirs)
    }

    #[test]
    fn values_and_errors_are_serde_json_s_for_short_and_long_texts() {
        let texts: [&[u8]; 12] = [
            br#"{"a":{"b":[1,-2,3.5,1e400,true,null,"x\u00e9"]},"c":{},"d":[]}"#,
            br#"{"spec":{"u":1,"v":2,"u":3}}"#,
            br#"{"a":1} x"#,
            br#"{"a":"#,
            b"[1,2]",
            br#"{"big":18446744073709551615,"neg":-9223372036854775808,"f":-0.0}"#,
            b"{\"a\xff\":1, x}",
            b"{\"a\":\"\xff\"}",
            br#"{"a":"\ud800"}"#,
            br#"{"a":[{"b":[[],{}]},[[1],[2,{"c":{}}]]]}"#,
            b"",
            b"null",
        ];
        for text in texts {
            let (ours, theirs) = both_ways(text);
            assert_eq!(ours, theirs, "{}", String::from_utf8_lossy(text));
            let long = padded(text);
            let (ours, theirs) = both_ways(&long);
            assert_eq!(ours, theirs, "padded {}", String::from_utf8_lossy(text));
        }
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        let (ours, theirs) = both_ways(&padded(deep.as_bytes()));
        assert!(ours.unwrap_err().contains("recursion limit"));
        assert!(theirs.is_err());
    }

    #[test]
    fn containers_get_their_final_size_and_keep_serde_json_s_key_order() {
        let mut text = String::from(r#"{"z":1,"data":{"#);
        for i in 0..3000 {
            text.push_str(&format!("\"k{i}\":\"v{i}\","));
        }
        text.push_str(r#""k7":"again"},"list":["#);
        text.push_str(&vec!["0"; 5000].join(","));
        text.push_str("]}");
        assert!(text.len() >= PRESIZE_MIN_BYTES);
        let (value, repeated) = from_slice_noting_repeats(text.as_bytes()).unwrap();
        assert!(repeated);
        let theirs: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(serde_json::to_string(&value).unwrap(), serde_json::to_string(&theirs).unwrap());
        let data = value["data"].as_object().unwrap();
        assert_eq!(data.len(), 3000);
        assert_eq!(data["k7"], "again");
        // Pre-order counts: the top object, `data` (the repeat counted), `list`.
        assert_eq!(container_sizes(&text).unwrap(), vec![3, 3001, 5000]);
        assert_eq!(value["list"].as_array().unwrap().capacity(), 5000);
        let (_, repeated) = from_slice_noting_repeats(br#"{"a":[{"b":1},{"b":2}]}"#).unwrap();
        assert!(!repeated);
    }

    #[test]
    fn serde_json_s_raw_value_key_is_an_ordinary_key() {
        let text = br#"{"$serde_json::private::RawValue":"[1]","a":{"$serde_json::private::RawValue":2}}"#;
        for t in [text.to_vec(), padded(text)] {
            let v = from_slice(&t).unwrap();
            assert_eq!(v["$serde_json::private::RawValue"], "[1]");
            assert_eq!(v["a"]["$serde_json::private::RawValue"], 2);
        }
    }

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| Value::Number(n.into())),
            any::<u64>().prop_map(|n| Value::Number(n.into())),
            (-1e300f64..1e300).prop_map(|f| Number::from_f64(f).map_or(Value::Null, Value::Number)),
            "[a-z\u{e9}\"\\\\ ]{0,6}".prop_map(Value::String),
        ];
        leaf.prop_recursive(6, 200, 12, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..12).prop_map(Value::Array),
                prop::collection::vec(("[a-c]{1,2}", inner), 0..12)
                    .prop_map(|entries| Value::Object(entries.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn any_text_decodes_as_serde_json_decodes_it(value in json_value(), dup in any::<bool>(), cut in 0usize..64) {
            let mut text = serde_json::to_string(&value).unwrap();
            if dup {
                // A repeated key, when the text is an object with a key.
                if let Some(end) = text.find("\":").filter(|_| text.starts_with("{\"")) {
                    let key = text[1..end].to_string();
                    text.insert_str(1, &format!("\"{key}\":[7],"));
                }
            }
            let bytes = text.as_bytes();
            // Cut texts too: unfinished, possibly inside a character.
            for t in [bytes, &bytes[..bytes.len().saturating_sub(cut)]] {
                let (ours, theirs) = both_ways(t);
                prop_assert_eq!(ours, theirs);
                let (ours, theirs) = both_ways(&padded(t));
                prop_assert_eq!(ours, theirs);
            }
        }
    }
}
