//! Kubernetes protobuf bodies (`application/vnd.kubernetes.protobuf`) turned
//! into the JSON objects rkube stores, and those objects turned back into
//! protobuf for responses.
//!
//! client-go's typed clients (and so `kubectl create namespace|configmap|secret|
//! deployment`, `kubectl run`) send built-in kinds as protobuf since
//! Kubernetes 1.31 (kubernetes#125314) and do not fall back to JSON. The wire
//! format is the one of `k8s.io/apimachinery/pkg/runtime/serializer/protobuf`:
//! the magic `k8s\0`, then a `runtime.Unknown` message whose `typeMeta` names
//! the apiVersion and kind and whose `raw` holds the object's own message.
//!
//! Decoding is driven by a schema table (`schema.json`, produced by
//! `tools/gen-proto-schema.py` from the `k8s-pb` crate's field tags and the
//! `k8s-openapi` crate's JSON names): message name → fields as
//! `[tag, jsonName, kind, repeated, messageType, inline?]`. The JSON produced follows
//! Go's `encoding/json` output for these types: `metav1.Time` as RFC 3339,
//! `resource.Quantity` as its string, `intstr.IntOrString` as a number or a
//! string, `runtime.RawExtension` and `FieldsV1` as embedded JSON, `[]byte` as
//! base64; empty strings and zero times are omitted (Go's `omitempty`).
//!
//! Responses go the other way ([`encode_object`], [`encode_message`],
//! [`watch_event_frame`]) with the same table.

mod encode;
mod wire;

pub use encode::{
    encode_message, encode_object, envelope, envelope_head, field_header, varint_len, watch_event_frame,
    ENVELOPE_TAIL,
};

use std::collections::HashMap;
use std::sync::OnceLock;

use base64::Engine;
use serde_json::{Map, Value};

use wire::{Reader, WireValue};

/// The media type of Kubernetes protobuf bodies.
pub const PROTOBUF_CONTENT_TYPE: &str = "application/vnd.kubernetes.protobuf";

/// The four bytes every Kubernetes protobuf body starts with.
pub const MAGIC: &[u8; 4] = b"k8s\0";

/// Errors decoding a protobuf body; the server answers them with 400 BadRequest
/// (or 415 UnsupportedMediaType for [`ProtobufError::UnknownKind`]).
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum ProtobufError {
    /// The body does not start with `k8s\0`.
    #[error("provided protobuf body is missing the Kubernetes magic prefix")]
    MissingMagic,
    /// The wire bytes are malformed (truncated varint, bad length, bad wire type).
    #[error("unable to decode protobuf body: {0}")]
    Malformed(String),
    /// The apiVersion/kind has no protobuf schema in rkube.
    #[error("no protobuf schema for {api_version}, Kind={kind}")]
    UnknownKind {
        /// The apiVersion named by the envelope.
        api_version: String,
        /// The kind named by the envelope.
        kind: String,
    },
}

#[derive(Debug)]
struct Field {
    json: String,
    kind: FieldKind,
    repeated: bool,
    /// A Go struct embedded with `json:",inline"`: its fields join the parent's.
    inline: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum FieldKind {
    String,
    Bytes,
    Bool,
    Int32,
    Int64,
    Double,
    Message(String),
    MapString,
    MapBytes,
    MapMessage(String),
}

type Schema = HashMap<String, HashMap<u32, Field>>;

fn schema() -> &'static Schema {
    static SCHEMA: OnceLock<Schema> = OnceLock::new();
    SCHEMA.get_or_init(|| {
        let doc: Value = serde_json::from_str(include_str!("schema.json")).unwrap_or(Value::Null);
        let mut out = Schema::new();
        let Some(messages) = doc.get("messages").and_then(Value::as_object) else { return out };
        for (name, fields) in messages {
            let mut table = HashMap::new();
            for f in fields.as_array().into_iter().flatten() {
                let (Some(tag), Some(json), Some(kind)) = (
                    f.get(0).and_then(Value::as_u64),
                    f.get(1).and_then(Value::as_str),
                    f.get(2).and_then(Value::as_str),
                ) else {
                    continue;
                };
                let repeated = f.get(3).and_then(Value::as_bool).unwrap_or(false);
                let typ = f.get(4).and_then(Value::as_str).unwrap_or_default().to_string();
                let kind = match kind {
                    "string" => FieldKind::String,
                    "bytes" => FieldKind::Bytes,
                    "bool" => FieldKind::Bool,
                    "int32" => FieldKind::Int32,
                    "int64" => FieldKind::Int64,
                    "double" => FieldKind::Double,
                    "message" => FieldKind::Message(typ),
                    "map_string" => FieldKind::MapString,
                    "map_bytes" => FieldKind::MapBytes,
                    "map_message" => FieldKind::MapMessage(typ),
                    _ => continue,
                };
                let inline = f.get(5).and_then(Value::as_bool).unwrap_or(false);
                table.insert(tag as u32, Field { json: json.to_string(), kind, repeated, inline });
            }
            out.insert(name.clone(), table);
        }
        out
    })
}

/// The protobuf message name for an apiVersion and kind, e.g. `apps/v1`,
/// `Deployment` → `api.apps.v1.Deployment`; `None` when rkube has no schema.
pub fn message_name(api_version: &str, kind: &str) -> Option<String> {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let mut candidates = Vec::new();
    if group.is_empty() {
        candidates.push(format!("api.core.{version}.{kind}"));
    } else if group == "apiregistration.k8s.io" {
        candidates.push(format!("kube_aggregator.pkg.apis.apiregistration.{version}.{kind}"));
    } else if group == "apiextensions.k8s.io" {
        candidates.push(format!("apiextensions_apiserver.pkg.apis.apiextensions.{version}.{kind}"));
    } else {
        let first = group.split('.').next().unwrap_or(group);
        candidates.push(format!("api.{first}.{version}.{kind}"));
    }
    // DeleteOptions, Status and friends live in meta/v1 whatever group sends them.
    candidates.push(format!("apimachinery.pkg.apis.meta.v1.{kind}"));
    candidates.into_iter().find(|c| schema().contains_key(c))
}

/// Whether `content_type` (parameters ignored) is the Kubernetes protobuf media type.
pub fn is_protobuf(content_type: &str) -> bool {
    content_type.split(';').next().map(str::trim).is_some_and(|m| m.eq_ignore_ascii_case(PROTOBUF_CONTENT_TYPE))
}

/// Decodes a whole `k8s\0`-prefixed body into the JSON object it carries, with
/// `apiVersion` and `kind` set from the envelope.
///
/// Errors: [`ProtobufError::MissingMagic`], [`ProtobufError::Malformed`],
/// [`ProtobufError::UnknownKind`].
pub fn decode_object(body: &[u8]) -> Result<Value, ProtobufError> {
    let rest = body.strip_prefix(MAGIC.as_slice()).ok_or(ProtobufError::MissingMagic)?;
    // runtime.Unknown: 1 typeMeta {1 apiVersion, 2 kind}, 2 raw, 3 contentEncoding, 4 contentType
    let (mut api_version, mut kind, mut raw) = (String::new(), String::new(), &[][..]);
    let mut reader = Reader::new(rest);
    while let Some((tag, value)) = reader.next_field()? {
        match (tag, value) {
            (1, WireValue::Len(type_meta)) => {
                let mut tm = Reader::new(type_meta);
                while let Some((t, v)) = tm.next_field()? {
                    match (t, v) {
                        (1, WireValue::Len(b)) => api_version = utf8(b)?,
                        (2, WireValue::Len(b)) => kind = utf8(b)?,
                        _ => {}
                    }
                }
            }
            (2, WireValue::Len(b)) => raw = b,
            (3, WireValue::Len(b)) if !b.is_empty() => {
                return Err(ProtobufError::Malformed(format!("unsupported content encoding {:?}", String::from_utf8_lossy(b))))
            }
            _ => {}
        }
    }
    let name = message_name(&api_version, &kind)
        .ok_or_else(|| ProtobufError::UnknownKind { api_version: api_version.clone(), kind: kind.clone() })?;
    let mut object = match decode_message(&name, raw)? {
        Value::Object(map) => map,
        _ => Map::new(),
    };
    let mut out = Map::new();
    out.insert("apiVersion".into(), Value::String(api_version));
    out.insert("kind".into(), Value::String(kind));
    out.append(&mut object);
    Ok(Value::Object(out))
}

/// Decodes the bytes of one message of type `name` (a schema name such as
/// `api.core.v1.Pod`) into JSON.
pub fn decode_message(name: &str, bytes: &[u8]) -> Result<Value, ProtobufError> {
    decode_message_depth(name, bytes, 0)
}

pub(crate) const MAX_DEPTH: usize = 64;

fn decode_message_depth(name: &str, bytes: &[u8], depth: usize) -> Result<Value, ProtobufError> {
    if depth > MAX_DEPTH {
        return Err(ProtobufError::Malformed("message nesting too deep".into()));
    }
    if let Some(special) = decode_special(name, bytes)? {
        return Ok(special);
    }
    if let Some(schema) = decode_schema_union(name, bytes, depth)? {
        return Ok(schema);
    }
    let table = schema().get(name).ok_or_else(|| ProtobufError::Malformed(format!("no schema for message {name}")))?;
    let mut out = Map::new();
    let mut reader = Reader::new(bytes);
    while let Some((tag, value)) = reader.next_field()? {
        let Some(field) = table.get(&tag) else { continue }; // unknown fields are skipped, as proto2 does
        match &field.kind {
            FieldKind::MapString | FieldKind::MapBytes | FieldKind::MapMessage(_) => {
                let WireValue::Len(entry) = value else { return Err(wire_type_error(name, &field.json)) };
                let (k, v) = decode_map_entry(&field.kind, entry, depth)?;
                let map = out.entry(field.json.clone()).or_insert_with(|| Value::Object(Map::new()));
                if let Value::Object(m) = map {
                    m.insert(k, v);
                }
            }
            kind if field.repeated => {
                let items = decode_repeated(kind, value, depth).map_err(|_| wire_type_error(name, &field.json))?;
                let list = out.entry(field.json.clone()).or_insert_with(|| Value::Array(Vec::new()));
                if let Value::Array(a) = list {
                    a.extend(items);
                }
            }
            kind => {
                let v = decode_single(kind, value, depth).map_err(|e| match e {
                    ProtobufError::Malformed(m) if m.is_empty() => wire_type_error(name, &field.json),
                    other => other,
                })?;
                // ObjectMeta.generation is a plain int64 in Go: 0 means unset and is omitted.
                let v = v.filter(|v| !(field.json == "generation" && name.ends_with("meta.v1.ObjectMeta") && v == &Value::from(0)));
                match v {
                    Some(Value::Object(inner)) if field.inline => {
                        for (k, v) in inner {
                            out.insert(k, v);
                        }
                    }
                    Some(v) => {
                        out.insert(field.json.clone(), v);
                    }
                    None => {
                        out.remove(&field.json);
                    }
                }
            }
        }
    }
    Ok(Value::Object(out))
}

fn wire_type_error(message: &str, field: &str) -> ProtobufError {
    ProtobufError::Malformed(format!("wrong wire type for field {field} of {message}"))
}

fn utf8(b: &[u8]) -> Result<String, ProtobufError> {
    String::from_utf8(b.to_vec()).map_err(|_| ProtobufError::Malformed("string field is not valid UTF-8".into()))
}

/// One non-repeated field; `None` means "omit" (empty string, zero time).
fn decode_single(kind: &FieldKind, value: WireValue<'_>, depth: usize) -> Result<Option<Value>, ProtobufError> {
    let bad = || ProtobufError::Malformed(String::new());
    Ok(Some(match (kind, value) {
        (FieldKind::String, WireValue::Len(b)) => {
            let s = utf8(b)?;
            if s.is_empty() {
                return Ok(None);
            }
            Value::String(s)
        }
        (FieldKind::Bytes, WireValue::Len(b)) => Value::String(base64::engine::general_purpose::STANDARD.encode(b)),
        (FieldKind::Bool, WireValue::Varint(v)) => Value::Bool(v != 0),
        (FieldKind::Int32, WireValue::Varint(v)) => Value::from(v as i64 as i32),
        (FieldKind::Int64, WireValue::Varint(v)) => Value::from(v as i64),
        (FieldKind::Double, WireValue::Fixed64(v)) => {
            let f = f64::from_bits(v);
            // Go's encoding/json writes integral float64s without a fraction (`1`, not `1.0`).
            if f.fract() == 0.0 && f.abs() < 9.007_199_254_740_992e15 {
                Value::from(f as i64)
            } else {
                serde_json::Number::from_f64(f).map(Value::Number).unwrap_or(Value::Null)
            }
        }
        (FieldKind::Message(name), WireValue::Len(b)) => {
            let v = decode_message_depth(name, b, depth + 1)?;
            if v.is_null() {
                return Ok(None);
            }
            v
        }
        _ => return Err(bad()),
    }))
}

fn decode_repeated(kind: &FieldKind, value: WireValue<'_>, depth: usize) -> Result<Vec<Value>, ProtobufError> {
    match (kind, value) {
        // k8s protos use packed=false, but accept packed varints too.
        (FieldKind::Int32 | FieldKind::Int64 | FieldKind::Bool, WireValue::Len(b)) => {
            let mut r = Reader::new(b);
            let mut out = Vec::new();
            while !r.is_empty() {
                let v = r.varint()?;
                out.push(match kind {
                    FieldKind::Bool => Value::Bool(v != 0),
                    FieldKind::Int32 => Value::from(v as i64 as i32),
                    _ => Value::from(v as i64),
                });
            }
            Ok(out)
        }
        (FieldKind::String, WireValue::Len(b)) => Ok(vec![Value::String(utf8(b)?)]),
        (kind, value) => Ok(decode_single(kind, value, depth)?.into_iter().collect()),
    }
}

fn decode_map_entry(kind: &FieldKind, entry: &[u8], depth: usize) -> Result<(String, Value), ProtobufError> {
    let mut key = String::new();
    let mut val = match kind {
        FieldKind::MapMessage(_) => Value::Object(Map::new()),
        _ => Value::String(String::new()),
    };
    let mut r = Reader::new(entry);
    while let Some((tag, v)) = r.next_field()? {
        match (tag, v) {
            (1, WireValue::Len(b)) => key = utf8(b)?,
            (2, WireValue::Len(b)) => {
                val = match kind {
                    FieldKind::MapString => Value::String(utf8(b)?),
                    FieldKind::MapBytes => Value::String(base64::engine::general_purpose::STANDARD.encode(b)),
                    FieldKind::MapMessage(name) => decode_message_depth(name, b, depth + 1)?,
                    _ => Value::Null,
                }
            }
            _ => return Err(ProtobufError::Malformed("bad map entry".into())),
        }
    }
    Ok((key, val))
}

/// Types whose JSON form is not their message form (custom marshallers in Go).
fn decode_special(name: &str, bytes: &[u8]) -> Result<Option<Value>, ProtobufError> {
    let short = name.rsplit('.').next().unwrap_or(name);
    let pkg = name.strip_suffix(short).unwrap_or("");
    let fields = || -> Result<HashMap<u64, WireValue<'_>>, ProtobufError> {
        let mut r = Reader::new(bytes);
        let mut m = HashMap::new();
        while let Some((t, v)) = r.next_field()? {
            m.insert(t as u64, v);
        }
        Ok(m)
    };
    let int = |f: &HashMap<u64, WireValue<'_>>, t| match f.get(&t) {
        Some(WireValue::Varint(v)) => *v as i64,
        _ => 0,
    };
    let bytes_of = |f: &HashMap<u64, WireValue<'_>>, t| match f.get(&t) {
        Some(WireValue::Len(b)) => b.to_vec(),
        _ => Vec::new(),
    };
    Ok(match (pkg, short) {
        ("apimachinery.pkg.apis.meta.v1.", "Time") | ("apimachinery.pkg.apis.meta.v1.", "MicroTime") => {
            let f = fields()?;
            let (secs, nanos) = (int(&f, 1), int(&f, 2));
            if secs == 0 && nanos == 0 {
                return Ok(Some(Value::Null));
            }
            let t = chrono::DateTime::from_timestamp(secs, nanos as u32)
                .ok_or_else(|| ProtobufError::Malformed(format!("time out of range: {secs}s")))?;
            Some(Value::String(if short == "Time" {
                crate::time::format_rfc3339(t)
            } else {
                crate::time::format_rfc3339_micros(t)
            }))
        }
        ("apimachinery.pkg.apis.meta.v1.", "Duration") => Some(Value::String(crate::time::format_go_duration(int(&fields()?, 1)))),
        ("apimachinery.pkg.api.resource.", "Quantity") => Some(Value::String(utf8(&bytes_of(&fields()?, 1))?)),
        ("apimachinery.pkg.util.intstr.", "IntOrString") => {
            let f = fields()?;
            Some(if int(&f, 1) == 1 {
                Value::String(utf8(&bytes_of(&f, 3))?)
            } else {
                Value::from(int(&f, 2) as i32)
            })
        }
        ("apimachinery.pkg.runtime.", "RawExtension") | ("apimachinery.pkg.apis.meta.v1.", "FieldsV1") => {
            let raw = bytes_of(&fields()?, 1);
            if raw.is_empty() {
                return Ok(Some(Value::Null));
            }
            Some(serde_json::from_slice(&raw).map_err(|e| ProtobufError::Malformed(format!("embedded JSON: {e}")))?)
        }
        // `type ExtraValue []string`: a message of repeated `items` on the
        // wire, a plain list of strings in JSON (user extras of reviews and CSRs).
        (_, "ExtraValue") => {
            let mut items = Vec::new();
            let mut r = Reader::new(bytes);
            while let Some((t, v)) = r.next_field()? {
                if let (1, WireValue::Len(b)) = (t, v) {
                    items.push(Value::String(utf8(b)?));
                }
            }
            Some(Value::Array(items))
        }
        _ => None,
    })
}

/// The package of the CRD schema types.
const APIEXTENSIONS: &str = "apiextensions_apiserver.pkg.apis.apiextensions.v1.";

/// The CRD schema types whose JSON is a union (apiextensions' custom
/// marshallers): `JSON` is the raw value; `JSONSchemaPropsOrArray` a schema
/// or a list of them; `JSONSchemaPropsOrBool` a schema or a boolean;
/// `JSONSchemaPropsOrStringArray` a schema or a list of strings.
fn decode_schema_union(name: &str, bytes: &[u8], depth: usize) -> Result<Option<Value>, ProtobufError> {
    let Some(short) = name.strip_prefix(APIEXTENSIONS) else { return Ok(None) };
    let props = |b: &[u8]| decode_message_depth(&format!("{APIEXTENSIONS}JsonSchemaProps"), b, depth + 1);
    let (mut first, mut rest, mut allows) = (None, Vec::new(), false);
    let mut r = Reader::new(bytes);
    match short {
        "Json" => {
            while let Some((t, v)) = r.next_field()? {
                if let (1, WireValue::Len(raw)) = (t, v) {
                    if raw.is_empty() {
                        return Ok(Some(Value::Null));
                    }
                    let v = serde_json::from_slice(raw).map_err(|e| ProtobufError::Malformed(format!("embedded JSON: {e}")))?;
                    return Ok(Some(v));
                }
            }
            Ok(Some(Value::Null))
        }
        "JsonSchemaPropsOrArray" | "JsonSchemaPropsOrStringArray" => {
            while let Some((t, v)) = r.next_field()? {
                match (t, v) {
                    (1, WireValue::Len(b)) => first = Some(props(b)?),
                    (2, WireValue::Len(b)) if short == "JsonSchemaPropsOrArray" => rest.push(props(b)?),
                    (2, WireValue::Len(b)) => rest.push(Value::String(utf8(b)?)),
                    _ => {}
                }
            }
            Ok(Some(first.unwrap_or(Value::Array(rest))))
        }
        "JsonSchemaPropsOrBool" => {
            while let Some((t, v)) = r.next_field()? {
                match (t, v) {
                    (1, WireValue::Varint(b)) => allows = b != 0,
                    (2, WireValue::Len(b)) => first = Some(props(b)?),
                    _ => {}
                }
            }
            Ok(Some(first.unwrap_or(Value::Bool(allows))))
        }
        _ => Ok(None),
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod encode_tests;

/// What a protobuf LIST body says without decoding its items: the number of
/// items, `metadata.resourceVersion` and `metadata.continue`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ListSummary {
    /// How many `items` the list holds.
    pub items: usize,
    /// `metadata.resourceVersion`.
    pub resource_version: String,
    /// `metadata.continue` (empty when absent).
    pub continue_token: String,
}

/// Scans a whole `k8s\0`-prefixed `<Kind>List` body: counts the items (field
/// 2 of every list message) and reads the `ListMeta` (field 1), skipping the
/// items' contents. Cost: one pass over the field headers.
///
/// Errors: [`ProtobufError::MissingMagic`], [`ProtobufError::Malformed`].
pub fn list_summary(body: &[u8]) -> Result<ListSummary, ProtobufError> {
    let rest = body.strip_prefix(MAGIC.as_slice()).ok_or(ProtobufError::MissingMagic)?;
    let mut raw = &[][..];
    let mut reader = Reader::new(rest);
    while let Some((tag, value)) = reader.next_field()? {
        if let (2, WireValue::Len(b)) = (tag, value) {
            raw = b;
        }
    }
    let mut out = ListSummary::default();
    let mut list = Reader::new(raw);
    while let Some((tag, value)) = list.next_field()? {
        match (tag, value) {
            (1, WireValue::Len(meta)) => {
                if let Value::Object(m) = decode_message("apimachinery.pkg.apis.meta.v1.ListMeta", meta)? {
                    let s = |k: &str| m.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
                    out.resource_version = s("resourceVersion");
                    out.continue_token = s("continue");
                }
            }
            (2, _) => out.items += 1,
            _ => {}
        }
    }
    Ok(out)
}
