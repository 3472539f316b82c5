//! ConfigMap and Secret payloads.
//!
//! - A Secret's `stringData` is write-only: its entries are base64-encoded
//!   into `data` (overwriting a key present in both) and the field is never
//!   stored or returned, on every write (create, update, patch, server-side
//!   apply), as upstream's conversion to the internal type does
//!   (`pkg/apis/core/v1/conversion.go`, `Convert_v1_Secret_To_core_Secret`).
//! - The payload of a ConfigMap (`data` plus decoded `binaryData`) and of a
//!   Secret (decoded `data`) is at most [`MAX_SECRET_SIZE`] bytes; above it
//!   the write is 422 `Invalid` with upstream's `Too long` cause
//!   (`pkg/apis/core/validation/validation.go`, `ValidateConfigMap` /
//!   `ValidateSecret`): field `[]` for a ConfigMap (upstream passes an empty
//!   path), `data` for a Secret.

use base64::Engine;
use rkube_api::field_error::FieldError;
use serde_json::{Map, Value};

/// Largest ConfigMap or Secret payload in bytes (upstream `MaxSecretSize`, 1 MiB).
pub const MAX_SECRET_SIZE: usize = 1024 * 1024;

/// Merges a Secret's `stringData` into `data` (base64) and removes it. A
/// no-op for other kinds and for Secrets without `stringData`.
pub fn merge_string_data(kind: &str, obj: &mut Value) {
    if kind != "Secret" {
        return;
    }
    let Some(map) = obj.as_object_mut() else { return };
    let Some(string_data) = map.remove("stringData") else { return };
    let Value::Object(entries) = string_data else { return };
    if entries.is_empty() {
        return;
    }
    let data = map.entry("data").or_insert_with(|| Value::Object(Map::new()));
    if !data.is_object() {
        *data = Value::Object(Map::new());
    }
    if let Some(data) = data.as_object_mut() {
        for (k, v) in entries {
            let text = v.as_str().unwrap_or_default();
            data.insert(k, Value::String(base64::engine::general_purpose::STANDARD.encode(text)));
        }
    }
}

/// Bytes a base64 string decodes to (its length when it is not base64:
/// typed decoding refuses such values before this is asked).
fn decoded_len(s: &str) -> usize {
    base64::engine::general_purpose::STANDARD.decode(s).map(|b| b.len()).unwrap_or(s.len())
}

fn sum(obj: &Value, section: &str, len: impl Fn(&str) -> usize) -> usize {
    obj.get(section)
        .and_then(Value::as_object)
        .map(|m| m.values().filter_map(Value::as_str).map(&len).sum())
        .unwrap_or(0)
}

/// The `Too long` error of a ConfigMap or Secret whose payload exceeds
/// [`MAX_SECRET_SIZE`]; `None` when it fits or for other kinds.
pub fn validate_size(kind: &str, obj: &Value) -> Option<FieldError> {
    let (total, field) = match kind {
        "ConfigMap" => (sum(obj, "data", str::len) + sum(obj, "binaryData", decoded_len), "[]"),
        "Secret" => (sum(obj, "data", decoded_len), "data"),
        _ => return None,
    };
    (total > MAX_SECRET_SIZE).then(|| FieldError::too_long(field, MAX_SECRET_SIZE))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn string_data_is_encoded_into_data_and_dropped() {
        let mut s = json!({"kind": "Secret", "data": {"a": "eA==", "b": "eQ=="}, "stringData": {"b": "new", "c": "z"}});
        merge_string_data("Secret", &mut s);
        assert_eq!(s, json!({"kind": "Secret", "data": {"a": "eA==", "b": "bmV3", "c": "eg=="}}));
        let mut cm = json!({"stringData": {"a": "b"}});
        merge_string_data("ConfigMap", &mut cm);
        assert_eq!(cm, json!({"stringData": {"a": "b"}}));
    }

    #[test]
    fn payload_over_one_mib_is_too_long() {
        let at_limit = json!({"data": {"a": "x".repeat(MAX_SECRET_SIZE - 3)}, "binaryData": {"b": "eHh4"}});
        assert_eq!(validate_size("ConfigMap", &at_limit), None);
        let over = json!({"data": {"a": "x".repeat(MAX_SECRET_SIZE - 2)}, "binaryData": {"b": "eHh4"}});
        let err = validate_size("ConfigMap", &over).unwrap();
        assert_eq!(err.to_string(), "[]: Too long: may not be more than 1048576 bytes");
        let secret = json!({"data": {"a": base64::engine::general_purpose::STANDARD.encode(vec![0u8; MAX_SECRET_SIZE + 1])}});
        assert_eq!(validate_size("Secret", &secret).unwrap().to_string(), "data: Too long: may not be more than 1048576 bytes");
    }
}
