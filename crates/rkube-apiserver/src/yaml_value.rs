//! YAML text to a JSON [`Value`] with a budget of nodes, so aliases cannot
//! expand a small body into a huge value.
//!
//! serde_yaml replays an anchored node for every alias (`*a`) while it
//! deserializes; its own repetition limit does not stop a 1,000-item anchor
//! aliased 300,000 times (900 KB: 300 million values, tens of seconds of CPU
//! and gigabytes of memory). Upstream's decoder refuses such documents with
//! `yaml: document contains excessive aliasing` (go-yaml's `decode.go`
//! alias ratio); here the value being built may have at most as many nodes
//! as the body has bytes (plus [`SLACK_NODES`]): a body without aliases
//! always fits (every node takes at least one byte), and the cost stays
//! linear in the body's size.

use std::cell::Cell;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

/// Nodes allowed beyond one per byte, so small documents may alias freely.
pub const SLACK_NODES: usize = 1024;

/// The message of a body whose aliases expand past the budget (go-yaml's).
pub const EXCESSIVE_ALIASING: &str = "document contains excessive aliasing";

/// Decodes one YAML document of `body` into JSON, building at most
/// `body.len() + SLACK_NODES` nodes. Errors: serde_yaml's message, or
/// exactly [`EXCESSIVE_ALIASING`].
pub fn from_slice(body: &[u8]) -> Result<Value, String> {
    let budget = Cell::new(body.len().saturating_add(SLACK_NODES));
    let de = serde_yaml::Deserializer::from_slice(body);
    Budgeted(&budget).deserialize(de).map_err(|e| {
        if budget.get() == 0 && e.to_string().contains(EXCESSIVE_ALIASING) {
            EXCESSIVE_ALIASING.to_string()
        } else {
            e.to_string()
        }
    })
}

/// Builds a [`Value`] while counting down `0`.
#[derive(Clone, Copy)]
struct Budgeted<'a>(&'a Cell<usize>);

impl Budgeted<'_> {
    fn spend<E: serde::de::Error>(self) -> Result<(), E> {
        match self.0.get().checked_sub(1) {
            Some(left) => {
                self.0.set(left);
                Ok(())
            }
            None => Err(E::custom(EXCESSIVE_ALIASING)),
        }
    }
}

impl<'de> DeserializeSeed<'de> for Budgeted<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Budgeted<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any YAML value")
    }

    fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Value, E> {
        self.spend()?;
        Ok(Value::Bool(v))
    }

    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Value, E> {
        self.spend()?;
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Value, E> {
        self.spend()?;
        Ok(Value::Number(v.into()))
    }

    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Value, E> {
        self.spend()?;
        // As serde_json's own `Value`: a non-finite float becomes null.
        Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Value, E> {
        self.spend()?;
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Value, E> {
        self.spend()?;
        Ok(Value::String(v))
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Value, E> {
        self.spend()?;
        Ok(Value::Null)
    }

    fn visit_none<E: serde::de::Error>(self) -> Result<Value, E> {
        self.visit_unit()
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        self.spend()?;
        let mut items = Vec::new();
        while let Some(v) = seq.next_element_seed(self)? {
            items.push(v);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        self.spend()?;
        let mut fields = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            self.spend()?;
            let value = map.next_value_seed(self)?;
            fields.insert(key, value);
        }
        Ok(Value::Object(fields))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_like_serde_yaml() {
        for doc in [
            "a: 1\nb: [true, 2.5, null, ~, '', x]\nc: {d: -3}\n",
            "- a\n- {b: c}\n- [1, [2]]\n",
            "a: &x {b: 1}\nc: *x\n",
            "x: .inf\ny: 18446744073709551615\nz: -9223372036854775808\n",
            "",
            "plain",
        ] {
            let ours = from_slice(doc.as_bytes()).expect("decodes");
            let theirs: Value = serde_yaml::from_str(doc).expect("serde_yaml decodes");
            assert_eq!(ours, theirs, "{doc:?}");
        }
        assert_eq!(from_slice(b"a: [").unwrap_err().to_string(), serde_yaml::from_str::<Value>("a: [").unwrap_err().to_string());
    }

    #[test]
    fn aliases_may_not_expand_past_the_body_size() {
        let mut doc = format!("a: &a [{}]\nb: [", vec!["x"; 1000].join(","));
        for _ in 0..10_000 {
            doc.push_str("*a,");
        }
        doc.push_str("x]\n");
        let started = std::time::Instant::now();
        let err = from_slice(doc.as_bytes()).unwrap_err().to_string();
        assert_eq!(err, EXCESSIVE_ALIASING);
        assert!(started.elapsed() < std::time::Duration::from_secs(20));
        // A few aliases of a small anchor are fine.
        let v = from_slice(b"a: &a {b: 1}\nc: *a\nd: *a\n").unwrap();
        assert_eq!(v["d"]["b"], 1);
    }
}
