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
    match plain_block_mapping(body) {
        Some(value) => Ok(value),
        None => parsed(body),
    }
}

/// The deepest value [`plain_block_mapping`] returns: its mappings, block
/// and flow sequences nest at most this deep, the outermost counting 1 (a
/// value nested deeper is left to the YAML parser).
pub const PLAIN_MAX_NESTING: usize = PLAIN_MAX_DEPTH + 1;

/// [`from_slice`] by the YAML parser.
pub fn parsed(body: &[u8]) -> Result<Value, String> {
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

/// How deep [`plain_block_mapping`] nests mappings before leaving the
/// text to the YAML parser.
const PLAIN_MAX_DEPTH: usize = 64;

/// The longest key [`plain_block_mapping`] reads itself (bytes, all ASCII): below libyaml's
/// 1,024-character limit on plain keys (`scanner.c`, simple keys), past which the YAML
/// parser refuses the document; longer keys are left to the parser.
const PLAIN_MAX_KEY_LEN: usize = 1000;

/// The value of a YAML text in the plain subset most large manifests
/// (a ConfigMap's `data`, labels, container lists) are written in, read in
/// one pass without the YAML parser, about as fast as JSON; `None` (and
/// the YAML parser decides) for anything outside it.
///
/// The subset, one entry or item per line, indented with spaces; no blank
/// line, comment, tab, carriage return, document marker, tag, anchor,
/// alias or flow mapping:
/// - block mappings: `key: value`, or `key:` followed by a more indented
///   mapping, by a block sequence (more indented, or at the key's own
///   column), or by nothing (null);
/// - block sequences: `- value`, or `- key: value` opening a mapping whose
///   keys are at the column of that first key;
/// - flow sequences of values: `[a, 1, [b]]`, which may go on after a
///   comma on lines indented past the enclosing block's column.
///
/// Keys are words of `[A-Za-z0-9_./-]` starting with a letter (and not a
/// null or boolean word). Values are such words with single inner spaces
/// allowed, which are strings in YAML's core schema (what serde_yaml
/// resolves plain scalars by), except the null words (`null`, `Null`,
/// `NULL`, `~`) and the booleans (`true`, `True`, `TRUE` and the same of
/// `false`); or decimal integers without a leading zero or sign other than
/// `-`, of at most 18 digits; other text a number could start (a dot, a
/// `+`, an exponent, a leading zero) is left to the parser. A key or value
/// may also be quoted (`"..."` or `'...'`) on one line, with printable
/// ASCII and no escape inside: a string as written.
///
/// Read in time linear in the text's length; the value nests at most
/// [`PLAIN_MAX_NESTING`] deep.
pub fn plain_block_mapping(body: &[u8]) -> Option<Value> {
    let mut p = Plain { b: body, i: 0, entries: Vec::new() };
    let value = p.mapping(0, 0, false)?;
    (p.i == body.len()).then_some(value)
}

/// A cursor over a text in [`plain_block_mapping`]'s subset.
struct Plain<'a> {
    b: &'a [u8],
    /// Next byte to read: at the start of a line between entries.
    i: usize,
    /// The entries of the mappings being read, innermost last: a mapping
    /// is built once its entries are all read, at its final size (growing
    /// a map of 100,000s of keys as it is read rehashes it at every
    /// doubling, about a sixth of reading the text).
    entries: Vec<(String, Value)>,
}

/// The longest integer [`Plain::integer`] reads (digits): any such fits an
/// `i64`, as the parser would read it.
const PLAIN_MAX_DIGITS: usize = 18;

impl<'a> Plain<'a> {
    /// Spaces at the start of the line at `self.i`; `None` at the end of
    /// the text.
    fn indent(&self) -> Option<usize> {
        if self.i >= self.b.len() {
            return None;
        }
        Some(self.b[self.i..].iter().take_while(|&&c| c == b' ').count())
    }

    /// Whether the line at `self.i`, indented by `indent`, is a block
    /// sequence item (`- ` after the indentation).
    fn is_item(&self, indent: usize) -> bool {
        self.b.get(self.i + indent..self.i + indent + 2) == Some(b"- ")
    }

    /// The entries of a mapping whose keys are at column `column`; when
    /// `inline`, the first key is at `self.i`, after a sequence's `- `.
    fn mapping(&mut self, column: usize, depth: usize, inline: bool) -> Option<Value> {
        if depth > PLAIN_MAX_DEPTH {
            return None;
        }
        let first = self.entries.len();
        let mut at_key = inline;
        loop {
            if !at_key {
                let Some(indent) = self.indent() else { break };
                if indent < column && self.entries.len() > first {
                    break;
                }
                if indent != column {
                    return None;
                }
                self.i += indent;
            }
            at_key = false;
            let key = self.key()?;
            self.i += 1;
            let value = match self.b.get(self.i) {
                Some(b' ') => {
                    self.i += 1;
                    self.inline_value(column, depth)?
                }
                None | Some(b'\n') => {
                    self.end_of_line()?;
                    match self.indent() {
                        Some(inner) if inner >= column && self.is_item(inner) => self.sequence(inner, depth + 1)?,
                        Some(inner) if inner > column => self.mapping(inner, depth + 1, false)?,
                        _ => Value::Null,
                    }
                }
                Some(_) => return None,
            };
            self.entries.push((key.to_owned(), value));
        }
        if self.entries.len() == first {
            return None;
        }
        // A repeated key keeps its first place and its last value.
        let mut map = Map::with_capacity(self.entries.len() - first);
        for (key, value) in self.entries.drain(first..) {
            map.insert(key, value);
        }
        Some(Value::Object(map))
    }

    /// A key at `self.i` up to its `:`, where it stops: a word that is not
    /// a null or boolean word, or a quoted scalar.
    fn key(&mut self) -> Option<&'a str> {
        let start = self.i;
        let key = match self.b.get(self.i)? {
            b'"' | b'\'' => self.quoted()?,
            _ => {
                let word = self.word(false)?;
                if matches!(word, "null" | "Null" | "NULL" | "true" | "True" | "TRUE" | "false" | "False" | "FALSE") {
                    return None;
                }
                word
            }
        };
        // libyaml (and go-yaml) take a simple key only when its `:` comes within 1,024
        // characters of its start; longer keys are the parser's to refuse.
        if self.i - start > PLAIN_MAX_KEY_LEN || self.b.get(self.i) != Some(&b':') {
            return None;
        }
        Some(key)
    }

    /// The items of a block sequence whose `-` are at column `column`.
    fn sequence(&mut self, column: usize, depth: usize) -> Option<Value> {
        if depth > PLAIN_MAX_DEPTH {
            return None;
        }
        let mut items = Vec::new();
        while let Some(indent) = self.indent() {
            if indent != column || !self.is_item(indent) {
                // A line of the enclosing mapping (which checks it), or
                // none the subset has.
                break;
            }
            self.i += indent + 1;
            let spaces = self.b[self.i..].iter().take_while(|&&c| c == b' ').count();
            self.i += spaces;
            let item_column = column + 1 + spaces;
            let at = self.i;
            let item = match self.key() {
                Some(_) if matches!(self.b.get(self.i + 1), None | Some(b' ' | b'\n')) => {
                    self.i = at;
                    self.mapping(item_column, depth + 1, true)?
                }
                _ => {
                    self.i = at;
                    self.inline_value(column, depth)?
                }
            };
            items.push(item);
        }
        if items.is_empty() {
            return None;
        }
        Some(Value::Array(items))
    }

    /// A value on the rest of the line (a flow sequence or a scalar) of
    /// an entry or item of the block at `column`, and that line's end.
    fn inline_value(&mut self, column: usize, depth: usize) -> Option<Value> {
        let value = match self.b.get(self.i)? {
            b'[' => self.flow_sequence(column, depth + 1)?,
            _ => self.value()?,
        };
        self.end_of_line()?;
        Some(value)
    }

    /// A flow sequence at `self.i` (its `[`), which it passes; its lines
    /// after the first are indented past `column`.
    fn flow_sequence(&mut self, column: usize, depth: usize) -> Option<Value> {
        if depth > PLAIN_MAX_DEPTH {
            return None;
        }
        self.i += 1;
        if self.b.get(self.i) == Some(&b']') {
            self.i += 1;
            return Some(Value::Array(Vec::new()));
        }
        // Sized once for a flat sequence (a million items fit in 3 MiB):
        // at most one item per comma up to the next bracket.
        let ahead = &self.b[self.i..];
        let extent = ahead.iter().position(|&c| c == b'[' || c == b']').unwrap_or(ahead.len());
        let mut items = Vec::with_capacity(1 + ahead[..extent].iter().filter(|&&c| c == b',').count());
        loop {
            let item = match self.b.get(self.i)? {
                b'[' => self.flow_sequence(column, depth + 1)?,
                _ => self.value()?,
            };
            items.push(item);
            match self.b.get(self.i)? {
                b']' => {
                    self.i += 1;
                    // Commas inside quotes counted too many.
                    if items.capacity() > 2 * items.len() + 16 {
                        items.shrink_to_fit();
                    }
                    return Some(Value::Array(items));
                }
                b',' => {
                    self.i += 1;
                    self.flow_separation(column)?;
                }
                _ => return None,
            }
        }
    }

    /// The spaces after a flow sequence's comma, or a line break and the
    /// next line's indentation (past `column`), which it passes.
    fn flow_separation(&mut self, column: usize) -> Option<()> {
        self.i += self.b[self.i..].iter().take_while(|&&c| c == b' ').count();
        if self.b.get(self.i) == Some(&b'\n') {
            self.i += 1;
            if self.indent()? <= column {
                return None;
            }
            self.i += self.indent()?;
        }
        Some(())
    }

    /// A scalar value at `self.i`, which it passes: a quoted string as
    /// written, an integer, a null or boolean word, or a word (a string).
    fn value(&mut self) -> Option<Value> {
        Some(match self.b.get(self.i)? {
            b'"' | b'\'' => Value::String(self.quoted()?.to_owned()),
            b'0'..=b'9' | b'-' => self.integer()?,
            b'~' => {
                self.i += 1;
                Value::Null
            }
            _ => match self.word(true)? {
                "null" | "Null" | "NULL" => Value::Null,
                "true" | "True" | "TRUE" => Value::Bool(true),
                "false" | "False" | "FALSE" => Value::Bool(false),
                word => Value::String(word.to_owned()),
            },
        })
    }

    /// A decimal integer at `self.i` (`0`, or an optional `-` and at most
    /// [`PLAIN_MAX_DIGITS`] digits not starting with `0`), which it passes.
    /// The caller refuses what follows unless it ends the scalar, so `1.5`
    /// or `12ab` leave the subset.
    fn integer(&mut self) -> Option<Value> {
        let negative = self.b[self.i] == b'-';
        let start = self.i + usize::from(negative);
        let digits = self.b[start..].iter().take_while(|c| c.is_ascii_digit()).count();
        let text = std::str::from_utf8(&self.b[start..start + digits]).ok()?;
        if digits == 0 || digits > PLAIN_MAX_DIGITS || (text.starts_with('0') && (digits > 1 || negative)) {
            return None;
        }
        let magnitude: i64 = text.parse().ok()?;
        self.i = start + digits;
        Some(Value::Number(if negative { -magnitude } else { magnitude }.into()))
    }

    /// A single- or double-quoted scalar at `self.i` whose text is printable
    /// ASCII with no escape (no `\\` in double quotes, no `''` in single
    /// ones) and no line break, which it passes; its text, a string
    /// whatever it reads like (quoted scalars are not resolved).
    fn quoted(&mut self) -> Option<&'a str> {
        let b: &'a [u8] = self.b;
        let quote = b[self.i];
        let start = self.i + 1;
        let len = b[start..].iter().position(|&c| c == quote || !(0x20..0x7f).contains(&c) || (quote == b'"' && c == b'\\'))?;
        let end = start + len;
        if b[end] != quote || (quote == b'\'' && b.get(end + 1) == Some(&b'\'')) {
            return None;
        }
        self.i = end + 1;
        std::str::from_utf8(&b[start..end]).ok()
    }

    /// A key (`spaces` false) or value word at `self.i`, which it passes.
    fn word(&mut self, spaces: bool) -> Option<&'a str> {
        let b: &'a [u8] = self.b;
        let start = self.i;
        if !b.get(start)?.is_ascii_alphabetic() {
            return None;
        }
        let mut end = start;
        while let Some(&c) = b.get(end) {
            let inner_space = spaces && c == b' ' && b.get(end + 1).is_some_and(|n| is_word_byte(*n));
            if !(is_word_byte(c) || inner_space) {
                break;
            }
            end += 1;
        }
        let word = std::str::from_utf8(&b[start..end]).ok()?;
        self.i = end;
        Some(word)
    }

    /// Passes the line break at `self.i` (or the end of the text).
    fn end_of_line(&mut self) -> Option<()> {
        match self.b.get(self.i) {
            None => Some(()),
            Some(b'\n') if self.b.get(self.i + 1) != Some(&b'\n') => {
                self.i += 1;
                Some(())
            }
            _ => None,
        }
    }
}

/// A byte of a word in [`plain_block_mapping`]'s subset.
fn is_word_byte(c: u8) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'/' | b'-')
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
    fn the_plain_subset_reads_like_the_parser_and_leaves_the_rest_to_it() {
        let plain = [
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  labels:\n    app.kubernetes.io/name: web-1\ndata:\n  k0: v0\n  k1: a b c\n",
            "a:\nb: c",
            "a:\n    b:\n      c: d\n    e: f\ng: h\n",
            "a: x\na: y\nb: z\n",
            "a: yes\nb: on\nc: inf\nd: nan\ne: Infinity\nf: y\ng: No\n",
            "a:\n",
            "a: 'b'\n", "a: \"b\"\n", "\"k0\": \"v0\"\n'k1': 'v # 1'\n", "a: \"1\"\nb: 'null'\nc: \"\"\nd: ''\n",
            "\"a b\":\n  'c\\d': \"e'f\"\n",
            "a: null\nb: True\nc: ~\nd: FALSE\ne: 0\nf: -12\ng: 123456789012345678\n",
            "a:\n- b\n- 1\nc:\n  - d\n  - [e, 2, [], [f g, 'h', \"i\"]]\n",
            "a: [b]\nc: [0,1, -2,   3]\nd: [x,\n  y, [z,\n   w]]\n",
            "containers:\n- name: web\n  image: nginx\n  ports:\n  - containerPort: 80\n    protocol: TCP\n-   name: side\n    args: [a, b]\nreplicas: 3\n",
            "x:\n  - a:\n    - b\n    c: d\n  - e:\n  - f: [g]\n",
            "a:\n  - b\n  -  c: d\n     e: ~\n",
        ];
        for doc in plain {
            let fast = plain_block_mapping(doc.as_bytes()).unwrap_or_else(|| panic!("{doc:?} is in the subset"));
            assert_eq!(Ok(fast), parsed(doc.as_bytes()), "{doc:?}");
        }
        let others = [
            "", "\n", "a: b\n\nc: d\n", "a: b # c\n", "a: b \n", "a:  b\n", "a: 'b' \n", "a: \"b\\n\"\n",
            "a: 'b''c'\n", "a: \"b\n c\"\n", "a: 'b\n", "\"a\":b\n", "a: \"é\"\n", "a: \"b\"c\n", "a: 'b\tc'\n",
            "null: a\n", "a: .5\n", "a: -b\n", "a: b\n  c\n", "  a: b\n",
            "a:\n    b: c\n  d: e\n", "a: b\r\n", "a:\tb\n", "---\na: b\n", "a: b\n...\n", "a: &x b\nc: *x\n",
            "a: !!str b\n", "a: b:c\n", "a b: c\n", "\u{feff}a: b\n", "a: é\n", "a", "a:b\n",
            "a: 01\n", "a: -0\n", "a: +1\n", "a: 1.5\n", "a: 1e3\n", "a: 0x1\n", "a: 1234567890123456789\n", "a: 12ab\n", "a: ~x\n",
            "a: [b,]\n", "a: [ b]\n", "a: [b ]\n", "a: [b] c\n", "a: [b\n", "a: [b,\nc]\n", "x:\n  a: [b,\n  c]\n", "a: {b: c}\n",
            "a: [b: c]\n", "a:\n- b\n  - c\n", "a:\n- - b\n", "a:\n-\n  b\n", "a:\n- b\nc\n", "a:\n  - b\n - c\n", "- a\n- b: c\n",
            "a:\n- true: b\n", "a:\n- b c: d\n", "a: [b, # c\n  d]\n",
        ];
        for doc in others {
            assert_eq!(plain_block_mapping(doc.as_bytes()), None, "{doc:?} is outside the subset");
            assert_eq!(from_slice(doc.as_bytes()), parsed(doc.as_bytes()), "{doc:?}");
        }
        // Keys past libyaml's simple-key length: the parser refuses 1,025 characters.
        for len in [PLAIN_MAX_KEY_LEN + 1, 1025, 2000] {
            let doc = format!("{}: v\n", "k".repeat(len));
            assert_eq!(plain_block_mapping(doc.as_bytes()), None, "key of {len}");
            assert_eq!(from_slice(doc.as_bytes()), parsed(doc.as_bytes()), "key of {len}");
        }
        // Commas inside a quoted item do not leave a large array reserved.
        let commas = format!("a: ['{}']\n", ",".repeat(10_000));
        let value = plain_block_mapping(commas.as_bytes()).expect("in the subset");
        assert!(value["a"].as_array().is_some_and(|a| a.len() == 1 && a.capacity() < 32));
        let long = format!("{}: v\n", "k".repeat(PLAIN_MAX_KEY_LEN));
        assert_eq!(plain_block_mapping(long.as_bytes()).as_ref(), parsed(long.as_bytes()).ok().as_ref());
        let deep = (0..=PLAIN_MAX_DEPTH + 1).map(|d| format!("{}k:\n", " ".repeat(d))).collect::<String>();
        assert_eq!(plain_block_mapping(deep.as_bytes()), None);
        assert!(parsed(deep.as_bytes()).is_ok());
    }

    /// The deepest texts of each shape the plain reader takes nest no
    /// deeper than it says (`media::yaml_to_json` skips the depth checks
    /// for them), and the reader does take texts that deep.
    #[test]
    fn plain_values_nest_at_most_plain_max_nesting() {
        let mappings = |n: usize| {
            let mut t: String = (0..n).map(|d| format!("{}k:\n", " ".repeat(d))).collect();
            t.push_str(&format!("{}k: v\n", " ".repeat(n)));
            t
        };
        let flows = |n: usize| format!("a: {}{}\n", "[".repeat(n), "]".repeat(n));
        let items = |n: usize| {
            // `- k:` items, each a mapping holding the next list.
            let mut t = String::from("a:\n");
            for d in 0..n {
                t.push_str(&format!("{}- k:\n", " ".repeat(2 * d)));
            }
            t.push_str(&format!("{}- v\n", " ".repeat(2 * n)));
            t
        };
        let mixed = |n: usize| format!("{}{}{}\n", mappings(n).trim_end_matches("v\n"), "[".repeat(n), "]".repeat(n));
        let shapes: [(&str, &dyn Fn(usize) -> String); 4] = [("mappings", &mappings), ("flows", &flows), ("items", &items), ("mixed", &mixed)];
        let mut deepest_of_all = 0;
        for (name, text) in shapes {
            let deepest = (0..=2 * PLAIN_MAX_NESTING)
                .filter_map(|n| plain_block_mapping(text(n).as_bytes()).map(|v| crate::patch::json::nesting_depth(&v)))
                .max()
                .unwrap_or_else(|| panic!("{name}: no text taken"));
            assert!(deepest <= PLAIN_MAX_NESTING, "{name}: {deepest}");
            assert!(deepest >= PLAIN_MAX_DEPTH, "{name}: only {deepest} deep");
            deepest_of_all = deepest_of_all.max(deepest);
        }
        assert_eq!(deepest_of_all, PLAIN_MAX_NESTING, "the bound is reached");
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 4096, failure_persistence: None, ..Default::default() })]

        /// Texts made of the subset's pieces and of what leaves it: what the
        /// one-pass reader accepts, the parser reads the same.
        #[test]
        fn random_texts_read_by_the_plain_subset_read_the_same_by_the_parser(
            pieces in proptest::collection::vec(proptest::sample::select(vec![
                "a", "b1", "k.z/w-_", "Null", "true", "yes", "x y", ":", ": ", " ", "  ", "\n", "\n  ", "\n    ", "-", "- ",
                "#", " #", "\t", "'", "\"", "1", ".", "{", "[", "&", "*", "!", "~", "\r\n",
                "'q'", "\"q\"", "\"a b\"", "''", "\"\"", "\"\\n\"", "'a''b'", "\"#\"", "'1'", "\\",
                "[", "]", ", ", ",", "0", "-1", "12", "01", "~", "null", "FALSE", "- a: ", "\n- ", "\n  - ", "[a, 1]", "a:\n",
            ]), 0..24),
        ) {
            let doc = pieces.concat();
            if let Some(fast) = plain_block_mapping(doc.as_bytes()) {
                proptest::prop_assert_eq!(Ok(fast), parsed(doc.as_bytes()), "{:?}", doc);
            }
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 4096, failure_persistence: None, ..Default::default() })]

        /// Documents of `key: value` lines at random indents (most of them
        /// in the subset, some not): the one-pass reader and the parser
        /// agree on every one the reader accepts, and it accepts the
        /// well-formed ones.
        #[test]
        fn random_block_mappings_read_the_same_both_ways(
            lines in proptest::collection::vec((
                0usize..4,
                proptest::sample::select(vec!["a", "b", "k.z/w", "x-1", "true", "y", "\"q\"", "'s t'"]),
                proptest::sample::select(vec!["", " v", " v1 w", " no", " null", " 1", " a:b", " x #c", "  v", " v ", " \"1\"", " 'a: b'", " \"x\\\"y\"", " 'it''s'"]),
            ), 1..12),
        ) {
            let doc: String = lines.iter().map(|(indent, key, value)| format!("{}{key}:{value}\n", "  ".repeat(*indent))).collect();
            match plain_block_mapping(doc.as_bytes()) {
                Some(fast) => proptest::prop_assert_eq!(Ok(fast), parsed(doc.as_bytes()), "{:?}", doc),
                None => {
                    let in_subset = lines.iter().all(|(_, k, v)| *k != "true" && matches!(*v, "" | " v" | " v1 w" | " no" | " null" | " 1" | " \"1\"" | " 'a: b'"))
                        && lines[0].0 == 0
                        && lines.windows(2).all(|w| w[1].0 <= w[0].0 || (w[1].0 == w[0].0 + 1 && w[0].2.is_empty()));
                    proptest::prop_assert!(!in_subset, "{:?} is in the subset", doc);
                }
            }
        }
    }

    /// A document of the subset: block mappings and sequences, flow
    /// sequences and scalars nested at random.
    #[derive(Debug, Clone)]
    enum Node {
        Scalar(&'static str, Value),
        Flow(Vec<Node>),
        Block(Vec<Node>),
        Mapping(Vec<(&'static str, Node)>),
    }

    impl Node {
        fn json(&self) -> Value {
            match self {
                Node::Scalar(_, v) => v.clone(),
                Node::Flow(items) | Node::Block(items) => Value::Array(items.iter().map(Node::json).collect()),
                Node::Mapping(entries) => {
                    Value::Object(entries.iter().map(|(k, v)| (k.trim_matches(['\'', '"']).to_string(), v.json())).collect())
                }
            }
        }

        /// The node on the rest of a line (a scalar or flow sequence).
        fn inline(&self) -> String {
            match self {
                Node::Scalar(text, _) => text.to_string(),
                Node::Flow(items) => format!("[{}]", items.iter().map(Node::inline).collect::<Vec<_>>().join(", ")),
                _ => unreachable!("block nodes are not inline"),
            }
        }

        /// The lines of a mapping or block sequence at `column`; the first
        /// one without its indentation when `inline` (after a `- `).
        fn block(&self, column: usize, inline: bool) -> String {
            let mut out = String::new();
            let pad = |first: bool| if first && inline { String::new() } else { " ".repeat(column) };
            match self {
                Node::Mapping(entries) => {
                    for (i, (k, v)) in entries.iter().enumerate() {
                        out.push_str(&format!("{}{k}:", pad(i == 0)));
                        match v {
                            Node::Scalar(..) | Node::Flow(_) => out.push_str(&format!(" {}\n", v.inline())),
                            Node::Mapping(_) => out.push_str(&format!("\n{}", v.block(column + 2, false))),
                            // A sequence may sit at its key's own column.
                            Node::Block(_) => out.push_str(&format!("\n{}", v.block(column + 2 * (k.len() % 2), false))),
                        }
                    }
                }
                Node::Block(items) => {
                    for (i, item) in items.iter().enumerate() {
                        out.push_str(&format!("{}- ", pad(i == 0)));
                        match item {
                            Node::Mapping(_) => out.push_str(&item.block(column + 2, true)),
                            _ => out.push_str(&format!("{}\n", item.inline())),
                        }
                    }
                }
                _ => unreachable!("inline nodes are not blocks"),
            }
            out
        }
    }

    fn node() -> impl proptest::strategy::Strategy<Value = Node> {
        use proptest::prelude::*;
        let scalars: Vec<(&'static str, Value)> = vec![
            ("a", json_string("a")), ("web-1", json_string("web-1")), ("x y", json_string("x y")), ("k.z/w", json_string("k.z/w")),
            ("0", Value::from(0)), ("42", Value::from(42)), ("-7", Value::from(-7)), ("~", Value::Null), ("null", Value::Null),
            ("True", Value::Bool(true)), ("false", Value::Bool(false)), ("'1'", json_string("1")), ("\"a: b\"", json_string("a: b")),
            ("no", json_string("no")), ("'x, y'", json_string("x, y")),
        ];
        let leaf = proptest::sample::select(scalars).prop_map(|(t, v)| Node::Scalar(t, v));
        leaf.prop_recursive(5, 48, 4, |inner| {
            let keys = proptest::sample::select(vec!["a", "bb", "name", "image", "ports", "c1", "'q'", "\"d e\""]);
            prop_oneof![
                proptest::collection::vec(inner.clone().prop_filter("flow items are inline", |n| matches!(n, Node::Scalar(..) | Node::Flow(_))), 0..4).prop_map(Node::Flow),
                proptest::collection::vec(inner.clone().prop_filter("no sequence in a sequence", |n| !matches!(n, Node::Block(_))), 1..4).prop_map(Node::Block),
                proptest::collection::btree_map(keys, inner, 1..4).prop_map(|m| Node::Mapping(m.into_iter().collect())),
            ]
        })
    }

    fn json_string(s: &str) -> Value {
        Value::String(s.to_string())
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 2048, failure_persistence: None, ..Default::default() })]

        /// Random documents of the subset (mappings, block and flow
        /// sequences, resolved scalars) are read in one pass, to the value
        /// the parser gives.
        #[test]
        fn nested_documents_of_the_subset_read_the_same_both_ways(entries in proptest::collection::vec(node(), 1..4)) {
            let keys = ["top", "data", "spec", "items"];
            let doc = Node::Mapping(entries.into_iter().enumerate().map(|(i, n)| (keys[i], n)).collect());
            let text = doc.block(0, false);
            let expected = doc.json();
            proptest::prop_assert_eq!(parsed(text.as_bytes()), Ok(expected.clone()), "{}", text);
            proptest::prop_assert_eq!(plain_block_mapping(text.as_bytes()), Some(expected), "{}", text);
        }
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
