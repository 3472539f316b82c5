//! JSON objects written as Kubernetes protobuf: the inverse of
//! [`super::decode_object`], driven by the same schema table.
//!
//! What kube-apiserver's generated marshallers (`generated.pb.go`) do and
//! what this does:
//! - fields go out in ascending field-number order, map entries sorted by
//!   key, list items in order, so equal objects give equal bytes;
//! - Go writes every non-pointer field, zero or not; JSON does not say which
//!   fields are pointers, so a field absent from the JSON (Go's `omitempty`
//!   zero) is left out, and the reader's default (the zero value, or nil for a
//!   pointer) is the same object;
//! - the special types keep their wire form: `metav1.Time`/`MicroTime` as
//!   `{seconds, nanos}`, `metav1.Duration` as nanoseconds, `resource.Quantity`
//!   as its string, `intstr.IntOrString` as `{type, intVal, strVal}`,
//!   `runtime.RawExtension` and `FieldsV1` as embedded JSON bytes, `[]byte` from
//!   base64.
//!
//! Upstream: `k8s.io/apimachinery/pkg/runtime/serializer/protobuf` (the
//! `k8s\0` + `runtime.Unknown` envelope) and the `generated.pb.go` marshallers.

use std::collections::HashMap;
use std::sync::OnceLock;

use base64::Engine;
use serde_json::Value;

use super::{schema, Field, FieldKind, ProtobufError, MAGIC};

/// The fields of every message in field-number order.
fn ordered(name: &str) -> Option<&'static [(u32, &'static Field)]> {
    static ORDERED: OnceLock<HashMap<&'static str, Vec<(u32, &'static Field)>>> = OnceLock::new();
    ORDERED
        .get_or_init(|| {
            schema()
                .iter()
                .map(|(name, fields)| {
                    let mut v: Vec<(u32, &Field)> = fields.iter().map(|(t, f)| (*t, f)).collect();
                    v.sort_by_key(|(t, _)| *t);
                    (name.as_str(), v)
                })
                .collect()
        })
        .get(name)
        .map(Vec::as_slice)
}

/// Wraps a message's bytes in the envelope every Kubernetes protobuf body
/// carries: `k8s\0`, then `runtime.Unknown{typeMeta{apiVersion, kind}, raw,
/// contentEncoding: "", contentType: ""}` (Go writes the two empty strings).
pub fn envelope(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
    let head = envelope_head(api_version, kind, raw.len());
    let mut out = Vec::with_capacity(head.len() + raw.len() + ENVELOPE_TAIL.len());
    out.extend_from_slice(&head);
    out.extend_from_slice(raw);
    out.extend_from_slice(ENVELOPE_TAIL);
    out
}

/// What follows `raw` in an envelope: empty `contentEncoding` (3) and `contentType` (4).
pub const ENVELOPE_TAIL: &[u8] = &[0x1a, 0x00, 0x22, 0x00];

/// The bytes of an envelope before a `raw` of `raw_len` bytes (magic,
/// `typeMeta`, the `raw` field's key and length); the body is this, the raw
/// bytes, then [`ENVELOPE_TAIL`]. Lets a caller stream `raw` in pieces.
pub fn envelope_head(api_version: &str, kind: &str, raw_len: usize) -> Vec<u8> {
    let mut type_meta = Vec::with_capacity(api_version.len() + kind.len() + 4);
    put_bytes(&mut type_meta, 1, api_version.as_bytes());
    put_bytes(&mut type_meta, 2, kind.as_bytes());
    let mut out = Vec::with_capacity(MAGIC.len() + type_meta.len() + 16);
    out.extend_from_slice(MAGIC);
    put_bytes(&mut out, 1, &type_meta);
    put_key(&mut out, 2, 2);
    put_varint(&mut out, raw_len as u64);
    out
}

/// Encodes a JSON object (with `apiVersion` and `kind`) as a whole body:
/// the envelope around the message its apiVersion and kind name.
///
/// Errors: [`ProtobufError::UnknownKind`] when rkube has no schema for the
/// kind (custom resources), [`ProtobufError::Malformed`] when a field's JSON
/// does not fit its protobuf type.
pub fn encode_object(value: &Value) -> Result<Vec<u8>, ProtobufError> {
    let api_version = value.get("apiVersion").and_then(Value::as_str).unwrap_or_default();
    let kind = value.get("kind").and_then(Value::as_str).unwrap_or_default();
    let name = super::message_name(api_version, kind)
        .ok_or_else(|| ProtobufError::UnknownKind { api_version: api_version.into(), kind: kind.into() })?;
    let raw = encode_message(&name, value)?;
    Ok(envelope(api_version, kind, &raw))
}

/// The bytes of one message of type `name` (e.g. `api.core.v1.Pod`) holding
/// `value`; fields of `value` the message lacks (`apiVersion`, `kind`) are
/// not written.
///
/// Errors: [`ProtobufError::Malformed`] when `name` has no schema or a field's
/// JSON does not fit its type (a string where a number belongs, bad base64, an
/// unparsable time or duration).
pub fn encode_message(name: &str, value: &Value) -> Result<Vec<u8>, ProtobufError> {
    let mut out = Vec::new();
    encode_into(name, value, &mut out, 0)?;
    Ok(out)
}

fn encode_into(name: &str, value: &Value, out: &mut Vec<u8>, depth: usize) -> Result<(), ProtobufError> {
    if depth > super::MAX_DEPTH {
        return Err(ProtobufError::Malformed("message nesting too deep".into()));
    }
    if encode_special(name, value, out)? || encode_schema_union(name, value, out, depth)? {
        return Ok(());
    }
    let fields = ordered(name).ok_or_else(|| ProtobufError::Malformed(format!("no schema for message {name}")))?;
    let Value::Object(map) = value else {
        return Err(mismatch(name, "", "an object", value));
    };
    for &(tag, field) in fields {
        if field.inline {
            // A Go struct embedded inline: its fields are the parent's own.
            let FieldKind::Message(inner) = &field.kind else { continue };
            let mut sub = Vec::new();
            encode_into(inner, value, &mut sub, depth + 1)?;
            put_bytes(out, tag, &sub);
            continue;
        }
        let Some(v) = map.get(&field.json) else { continue };
        if v.is_null() {
            continue;
        }
        match &field.kind {
            FieldKind::MapString | FieldKind::MapBytes | FieldKind::MapMessage(_) => {
                let Value::Object(entries) = v else { return Err(mismatch(name, &field.json, "an object", v)) };
                let mut keys: Vec<&String> = entries.keys().collect();
                keys.sort();
                for k in keys {
                    let mut entry = Vec::new();
                    put_bytes(&mut entry, 1, k.as_bytes());
                    let ev = &entries[k];
                    match &field.kind {
                        FieldKind::MapString => {
                            put_bytes(&mut entry, 2, as_str(name, &field.json, ev)?.as_bytes())
                        }
                        FieldKind::MapBytes => put_bytes(&mut entry, 2, &base64_bytes(name, &field.json, ev)?),
                        FieldKind::MapMessage(m) => {
                            let mut sub = Vec::new();
                            encode_into(m, ev, &mut sub, depth + 1)?;
                            put_bytes(&mut entry, 2, &sub);
                        }
                        _ => {}
                    }
                    put_bytes(out, tag, &entry);
                }
            }
            kind if field.repeated => {
                let Value::Array(items) = v else { return Err(mismatch(name, &field.json, "a list", v)) };
                for item in items {
                    encode_single(name, &field.json, kind, tag, item, out, depth)?;
                }
            }
            kind => encode_single(name, &field.json, kind, tag, v, out, depth)?,
        }
    }
    Ok(())
}

fn encode_single(
    msg: &str,
    json: &str,
    kind: &FieldKind,
    tag: u32,
    v: &Value,
    out: &mut Vec<u8>,
    depth: usize,
) -> Result<(), ProtobufError> {
    match kind {
        FieldKind::String => put_bytes(out, tag, as_str(msg, json, v)?.as_bytes()),
        FieldKind::Bytes => put_bytes(out, tag, &base64_bytes(msg, json, v)?),
        FieldKind::Bool => {
            let b = v.as_bool().ok_or_else(|| mismatch(msg, json, "a boolean", v))?;
            put_key(out, tag, 0);
            put_varint(out, u64::from(b));
        }
        FieldKind::Int32 | FieldKind::Int64 => {
            let n = as_int(v).ok_or_else(|| mismatch(msg, json, "an integer", v))?;
            if *kind == FieldKind::Int32 && i32::try_from(n).is_err() {
                return Err(mismatch(msg, json, "a 32-bit integer", v));
            }
            put_key(out, tag, 0);
            // Negative int32 and int64 values are sign-extended to ten bytes.
            put_varint(out, n as u64);
        }
        FieldKind::Double => {
            let f = v.as_f64().ok_or_else(|| mismatch(msg, json, "a number", v))?;
            put_key(out, tag, 1);
            out.extend_from_slice(&f.to_bits().to_le_bytes());
        }
        FieldKind::Message(name) => {
            let mut sub = Vec::new();
            encode_into(name, v, &mut sub, depth + 1)?;
            put_bytes(out, tag, &sub);
        }
        FieldKind::MapString | FieldKind::MapBytes | FieldKind::MapMessage(_) => {}
    }
    Ok(())
}

/// Types whose wire form is not their JSON form (custom marshallers in Go).
/// Returns `false` for ordinary messages.
fn encode_special(name: &str, value: &Value, out: &mut Vec<u8>) -> Result<bool, ProtobufError> {
    let short = name.rsplit('.').next().unwrap_or(name);
    let pkg = name.strip_suffix(short).unwrap_or("");
    match (pkg, short) {
        ("apimachinery.pkg.apis.meta.v1.", "Time") | ("apimachinery.pkg.apis.meta.v1.", "MicroTime") => {
            let s = as_str(name, "", value)?;
            let t = chrono::DateTime::parse_from_rfc3339(s)
                .map_err(|e| ProtobufError::Malformed(format!("{name}: invalid time {s:?}: {e}")))?;
            // Go's Time marshaller writes both fields, zero or not.
            put_key(out, 1, 0);
            put_varint(out, t.timestamp() as u64);
            put_key(out, 2, 0);
            put_varint(out, i64::from(t.timestamp_subsec_nanos()) as u64);
        }
        ("apimachinery.pkg.apis.meta.v1.", "Duration") => {
            let s = as_str(name, "", value)?;
            let ns = crate::time::parse_go_duration(s)
                .ok_or_else(|| ProtobufError::Malformed(format!("{name}: invalid duration {s:?}")))?;
            put_key(out, 1, 0);
            put_varint(out, ns as u64);
        }
        ("apimachinery.pkg.api.resource.", "Quantity") => {
            let s = match value {
                Value::String(s) => s.clone(),
                Value::Number(n) => n.to_string(),
                other => return Err(mismatch(name, "", "a quantity", other)),
            };
            put_bytes(out, 1, s.as_bytes());
        }
        ("apimachinery.pkg.util.intstr.", "IntOrString") => {
            // {type: 0 Int / 1 String, intVal, strVal}, all three written as Go does.
            let (ty, int, s) = match value {
                Value::String(s) => (1u64, 0i64, s.as_str()),
                v => (0, as_int(v).ok_or_else(|| mismatch(name, "", "an integer or a string", v))?, ""),
            };
            put_key(out, 1, 0);
            put_varint(out, ty);
            put_key(out, 2, 0);
            put_varint(out, int as u64);
            put_bytes(out, 3, s.as_bytes());
        }
        ("apimachinery.pkg.runtime.", "RawExtension") | ("apimachinery.pkg.apis.meta.v1.", "FieldsV1") => {
            let raw = serde_json::to_vec(value).map_err(|e| ProtobufError::Malformed(format!("{name}: {e}")))?;
            put_bytes(out, 1, &raw);
        }
        (_, "ExtraValue") => {
            let Value::Array(items) = value else { return Err(mismatch(name, "", "a list", value)) };
            for item in items {
                put_bytes(out, 1, as_str(name, "items", item)?.as_bytes());
            }
        }
        _ => return Ok(false),
    }
    Ok(true)
}

/// The CRD schema unions (see the decoder): `JSON` as raw bytes, and
/// schema-or-list / schema-or-bool by the JSON value's type. Returns `false`
/// for other messages.
fn encode_schema_union(name: &str, value: &Value, out: &mut Vec<u8>, depth: usize) -> Result<bool, ProtobufError> {
    let Some(short) = name.strip_prefix(super::APIEXTENSIONS) else { return Ok(false) };
    let props = format!("{}JsonSchemaProps", super::APIEXTENSIONS);
    let schema = |v: &Value, out: &mut Vec<u8>, tag: u32| -> Result<(), ProtobufError> {
        let mut sub = Vec::new();
        encode_into(&props, v, &mut sub, depth + 1)?;
        put_bytes(out, tag, &sub);
        Ok(())
    };
    match (short, value) {
        ("Json", v) => {
            let raw = serde_json::to_vec(v).map_err(|e| ProtobufError::Malformed(format!("{name}: {e}")))?;
            put_bytes(out, 1, &raw);
        }
        ("JsonSchemaPropsOrArray" | "JsonSchemaPropsOrStringArray", Value::Object(_)) => schema(value, out, 1)?,
        ("JsonSchemaPropsOrArray", Value::Array(items)) => {
            for item in items {
                schema(item, out, 2)?;
            }
        }
        ("JsonSchemaPropsOrStringArray", Value::Array(items)) => {
            for item in items {
                put_bytes(out, 2, as_str(name, "property", item)?.as_bytes());
            }
        }
        ("JsonSchemaPropsOrBool", Value::Bool(b)) => {
            put_key(out, 1, 0);
            put_varint(out, u64::from(*b));
        }
        ("JsonSchemaPropsOrBool", Value::Object(_)) => {
            put_key(out, 1, 0);
            put_varint(out, 1);
            schema(value, out, 2)?;
        }
        ("JsonSchemaPropsOrArray" | "JsonSchemaPropsOrStringArray" | "JsonSchemaPropsOrBool", other) => {
            return Err(mismatch(name, "", "a schema, a list or a boolean", other));
        }
        _ => return Ok(false),
    }
    Ok(true)
}

fn as_int(v: &Value) -> Option<i64> {
    v.as_i64().or_else(|| v.as_u64().and_then(|u| i64::try_from(u).ok())).or_else(|| {
        v.as_f64().filter(|f| f.fract() == 0.0 && f.abs() < 9.007_199_254_740_992e15).map(|f| f as i64)
    })
}

fn as_str<'a>(msg: &str, json: &str, v: &'a Value) -> Result<&'a str, ProtobufError> {
    v.as_str().ok_or_else(|| mismatch(msg, json, "a string", v))
}

fn base64_bytes(msg: &str, json: &str, v: &Value) -> Result<Vec<u8>, ProtobufError> {
    let s = as_str(msg, json, v)?;
    base64::engine::general_purpose::STANDARD
        .decode(s)
        .map_err(|e| ProtobufError::Malformed(format!("field {json} of {msg}: invalid base64: {e}")))
}

fn mismatch(msg: &str, json: &str, want: &str, got: &Value) -> ProtobufError {
    let got = match got {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    };
    ProtobufError::Malformed(format!("field {json} of {msg}: expected {want}, found {got}"))
}

/// Appends a field key (`tag << 3 | wire type`).
pub(crate) fn put_key(out: &mut Vec<u8>, tag: u32, wire_type: u8) {
    put_varint(out, (u64::from(tag) << 3) | u64::from(wire_type));
}

/// Appends a base-128 varint.
pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// The length of `v` as a varint, in bytes.
pub fn varint_len(v: u64) -> usize {
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

/// Appends a length-delimited field (strings, bytes, messages).
pub(crate) fn put_bytes(out: &mut Vec<u8>, tag: u32, bytes: &[u8]) {
    put_key(out, tag, 2);
    put_varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// One frame of a protobuf watch stream
/// (`application/vnd.kubernetes.protobuf;stream=watch`): a 4-byte big-endian
/// length, then a `metav1.WatchEvent{type, object: RawExtension{raw}}` whose
/// `raw` is the object's whole body ([`envelope`]), as upstream's
/// `LengthDelimitedFramer` and watch encoder write it.
pub fn watch_event_frame(event_type: &str, object_body: &[u8]) -> Vec<u8> {
    let mut raw_ext = Vec::with_capacity(object_body.len() + 6);
    put_bytes(&mut raw_ext, 1, object_body);
    let mut event = Vec::with_capacity(raw_ext.len() + event_type.len() + 8);
    put_bytes(&mut event, 1, event_type.as_bytes());
    put_bytes(&mut event, 2, &raw_ext);
    let mut out = Vec::with_capacity(event.len() + 4);
    out.extend_from_slice(&(event.len() as u32).to_be_bytes());
    out.extend_from_slice(&event);
    out
}

/// The key and length of a length-delimited field `tag` of `len` bytes, for
/// callers splicing pre-encoded messages (list items) into a body.
pub fn field_header(tag: u32, len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(6);
    put_key(&mut out, tag, 2);
    put_varint(&mut out, len as u64);
    out
}
