//! Structural schemas (a CRD version's `openAPIV3Schema`) applied to custom
//! resources, as upstream's apiextensions-apiserver does on every write:
//!
//! 1. [`prune`]: fields the schema does not specify are dropped (unless
//!    `x-kubernetes-preserve-unknown-fields: true`); `apiVersion`, `kind`
//!    and `metadata` of the root and of `x-kubernetes-embedded-resource`
//!    objects are kept (`pkg/apiserver/schema/pruning`);
//! 2. [`apply_defaults`]: absent fields with a `default` get it
//!    (`pkg/apiserver/schema/defaulting`);
//! 3. [`validate`]: types, `required`, `enum`, `pattern`, bounds, lengths,
//!    item and property counts, formats, `nullable`,
//!    `x-kubernetes-int-or-string`; each failure is a field error with
//!    kube-openapi's message (`spec.replicas in body must be of type
//!    integer: "string"`), typed as upstream's
//!    `kubeOpenAPIResultToFieldErrors` types them.
//!
//! [`structural_errors`] checks a CRD's schema is structural (every node
//! has a `type` unless it is int-or-string or preserves unknown fields).

use serde_json::{Map, Value};

use crate::field_error::{go_quote, FieldError, FieldErrorType};

fn props(schema: &Value) -> Option<&Map<String, Value>> {
    schema.get("properties").and_then(Value::as_object)
}

fn flag(schema: &Value, key: &str) -> bool {
    schema.get(key).and_then(Value::as_bool).unwrap_or(false)
}

/// The schema of the values of an object without `properties`
/// (`additionalProperties: {schema}`), if any.
fn additional(schema: &Value) -> Option<&Value> {
    schema.get("additionalProperties").filter(|a| a.is_object())
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// Drops from `obj` every field `schema` does not specify; returns their
/// paths (`spec.foo`) for unknown-field warnings. The root keeps
/// `apiVersion`, `kind` and `metadata`.
pub fn prune(obj: &mut Value, schema: &Value) -> Vec<String> {
    let mut dropped = Vec::new();
    prune_at(obj, schema, "", true, &mut dropped);
    dropped
}

fn prune_at(obj: &mut Value, schema: &Value, path: &str, keep_meta: bool, dropped: &mut Vec<String>) {
    match obj {
        Value::Object(map) => {
            let keep_meta = keep_meta || flag(schema, "x-kubernetes-embedded-resource");
            let preserve = flag(schema, "x-kubernetes-preserve-unknown-fields");
            let properties = props(schema);
            let extra = additional(schema);
            let keys: Vec<String> = map.keys().cloned().collect();
            for k in keys {
                let child_path = join(path, &k);
                let child_schema = properties.and_then(|p| p.get(&k)).or(extra);
                match child_schema {
                    Some(s) => {
                        if let Some(v) = map.get_mut(&k) {
                            prune_at(v, s, &child_path, false, dropped);
                        }
                    }
                    None if keep_meta && matches!(k.as_str(), "apiVersion" | "kind" | "metadata") => {}
                    None if preserve || schema.get("additionalProperties") == Some(&Value::Bool(true)) => {}
                    None => {
                        map.remove(&k);
                        dropped.push(child_path);
                    }
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (i, v) in items.iter_mut().enumerate() {
                    prune_at(v, item_schema, &format!("{path}[{i}]"), false, dropped);
                }
            }
        }
        _ => {}
    }
}

/// Sets every absent field of `obj` whose schema has a `default` to it
/// (also a `null` field that is not `nullable`), depth first, as upstream
/// defaults on decoding.
pub fn apply_defaults(obj: &mut Value, schema: &Value) {
    match obj {
        Value::Object(map) => {
            if let Some(properties) = props(schema) {
                for (k, s) in properties {
                    let Some(d) = s.get("default") else { continue };
                    let absent = match map.get(k) {
                        None => true,
                        Some(Value::Null) => !flag(s, "nullable"),
                        Some(_) => false,
                    };
                    if absent {
                        map.insert(k.clone(), d.clone());
                    }
                }
                for (k, v) in map.iter_mut() {
                    if let Some(s) = properties.get(k) {
                        apply_defaults(v, s);
                    }
                }
            } else if let Some(s) = additional(schema) {
                for v in map.values_mut() {
                    apply_defaults(v, s);
                }
            }
        }
        Value::Array(items) => {
            if let Some(s) = schema.get("items") {
                for v in items.iter_mut() {
                    apply_defaults(v, s);
                }
            }
        }
        _ => {}
    }
}

/// kube-openapi's name of a JSON value's type.
fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(n) if n.as_f64().is_some_and(|f| f.fract() == 0.0) => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn type_matches(expected: &str, v: &Value) -> bool {
    match expected {
        "" => true,
        "number" => v.is_number(),
        other => type_name(v) == other,
    }
}

/// A Go `%v`-like rendering of a JSON value for messages (`5`, `"x"`).
fn render(v: &Value) -> String {
    match v {
        Value::String(s) => go_quote(s),
        other => other.to_string(),
    }
}

fn invalid(path: &str, v: &Value, detail: String) -> FieldError {
    FieldError::invalid_rendered(path, render(v), detail)
}

fn number_text(n: &Value) -> String {
    match n.as_f64() {
        Some(f) if f.fract() == 0.0 && f.abs() < 1e15 => format!("{}", f as i64),
        Some(f) => f.to_string(),
        None => n.to_string(),
    }
}

/// The field errors of `obj` against `schema`. `path` prefixes the field
/// paths (`""` at the root). The root's `apiVersion`, `kind` and `metadata`
/// are validated elsewhere and skipped here.
pub fn validate(obj: &Value, schema: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    validate_at(obj, schema, "", true, &mut errs);
    errs
}

fn validate_at(v: &Value, schema: &Value, path: &str, root: bool, errs: &mut Vec<FieldError>) {
    let shown = if path.is_empty() { "body" } else { path };
    if v.is_null() {
        if flag(schema, "nullable") {
            return;
        }
        if let Some(t) = schema.get("type").and_then(Value::as_str) {
            errs.push(type_error(path, shown, t, v));
        }
        return;
    }
    if flag(schema, "x-kubernetes-int-or-string") {
        if !(v.is_string() || type_name(v) == "integer") {
            errs.push(type_error(path, shown, "integer,string", v));
            return;
        }
    } else if let Some(t) = schema.get("type").and_then(Value::as_str) {
        if !type_matches(t, v) {
            errs.push(type_error(path, shown, t, v));
            return;
        }
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array) {
        if !allowed.contains(v) {
            let rendered: Vec<String> = allowed.iter().map(render).collect();
            errs.push(FieldError {
                error_type: FieldErrorType::NotSupported,
                field: path.to_string(),
                bad_value: Some(render(v)),
                detail: format!("supported values: {}", rendered.join(", ")),
            });
        }
    }
    match v {
        Value::String(s) => validate_string(s, v, schema, path, shown, errs),
        Value::Number(n) => validate_number(n.as_f64().unwrap_or(0.0), v, schema, path, shown, errs),
        Value::Array(items) => {
            let n = items.len() as i64;
            if let Some(min) = schema.get("minItems").and_then(Value::as_i64) {
                if n < min {
                    errs.push(invalid(path, v, format!("{shown} in body should have at least {min} items")));
                }
            }
            if let Some(max) = schema.get("maxItems").and_then(Value::as_i64) {
                if n > max {
                    errs.push(too_many(path, n, max));
                }
            }
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    validate_at(item, item_schema, &format!("{path}[{i}]"), false, errs);
                }
            }
        }
        Value::Object(map) => {
            let n = map.len() as i64;
            if let Some(min) = schema.get("minProperties").and_then(Value::as_i64) {
                if n < min {
                    errs.push(invalid(path, v, format!("{shown} in body should have at least {min} properties")));
                }
            }
            if let Some(max) = schema.get("maxProperties").and_then(Value::as_i64) {
                if n > max {
                    errs.push(too_many(path, n, max));
                }
            }
            for req in schema.get("required").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str) {
                if !map.contains_key(req) {
                    errs.push(FieldError::required(&join(path, req), ""));
                }
            }
            let embedded = root || flag(schema, "x-kubernetes-embedded-resource");
            if flag(schema, "x-kubernetes-embedded-resource") {
                for key in ["apiVersion", "kind"] {
                    if map.get(key).and_then(Value::as_str).is_none_or(str::is_empty) {
                        errs.push(FieldError::required(&join(path, key), "must not be empty"));
                    }
                }
            }
            let properties = props(schema);
            let extra = additional(schema);
            for (k, child) in map {
                if embedded && matches!(k.as_str(), "apiVersion" | "kind" | "metadata") && properties.is_none_or(|p| !p.contains_key(k)) {
                    continue;
                }
                if let Some(s) = properties.and_then(|p| p.get(k)).or(extra) {
                    validate_at(child, s, &join(path, k), false, errs);
                }
            }
        }
        _ => {}
    }
}

fn type_error(path: &str, shown: &str, expected: &str, v: &Value) -> FieldError {
    let actual = type_name(v);
    FieldError {
        error_type: FieldErrorType::TypeInvalid,
        field: path.to_string(),
        bad_value: Some(go_quote(actual)),
        detail: format!("{shown} in body must be of type {expected}: {}", go_quote(actual)),
    }
}

fn too_many(path: &str, actual: i64, max: i64) -> FieldError {
    FieldError {
        error_type: FieldErrorType::TooMany,
        field: path.to_string(),
        bad_value: Some(actual.to_string()),
        detail: format!("must have at most {max} items"),
    }
}

fn validate_string(s: &str, v: &Value, schema: &Value, path: &str, shown: &str, errs: &mut Vec<FieldError>) {
    let len = s.chars().count() as i64;
    if let Some(min) = schema.get("minLength").and_then(Value::as_i64) {
        if len < min {
            errs.push(invalid(path, v, format!("{shown} in body should be at least {min} chars long")));
        }
    }
    if let Some(max) = schema.get("maxLength").and_then(Value::as_i64) {
        if len > max {
            errs.push(FieldError {
                error_type: FieldErrorType::TooLong,
                field: path.to_string(),
                bad_value: None,
                detail: format!("may not be more than {max} bytes"),
            });
        }
    }
    if let Some(p) = schema.get("pattern").and_then(Value::as_str) {
        match regex::Regex::new(p) {
            Ok(re) if !re.is_match(s) => errs.push(invalid(path, v, format!("{shown} in body should match '{p}'"))),
            Ok(_) => {}
            Err(_) => errs.push(invalid(path, v, format!("{shown} in body should match '{p}'"))),
        }
    }
    if let Some(format) = schema.get("format").and_then(Value::as_str) {
        if !string_format_ok(format, s) {
            errs.push(invalid(path, v, format!("{shown} in body must be of type {format}: {}", go_quote(s))));
        }
    }
}

/// The string formats upstream checks (`pkg/apiserver/validation/formats.go`
/// lists the supported ones); unknown formats pass.
pub(crate) fn string_format_ok(format: &str, s: &str) -> bool {
    match format {
        "date-time" | "datetime" => chrono::DateTime::parse_from_rfc3339(s).is_ok(),
        "date" => chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d").is_ok(),
        "byte" => {
            use base64::Engine;
            base64::engine::general_purpose::STANDARD.decode(s).is_ok()
        }
        "ipv4" => s.parse::<std::net::Ipv4Addr>().is_ok(),
        "ipv6" => s.parse::<std::net::Ipv6Addr>().is_ok(),
        "uuid" => uuid::Uuid::parse_str(s).is_ok() && s.len() == 36,
        _ => true,
    }
}

fn validate_number(f: f64, v: &Value, schema: &Value, path: &str, shown: &str, errs: &mut Vec<FieldError>) {
    if let Some(min) = schema.get("minimum").filter(|m| m.is_number()) {
        let m = min.as_f64().unwrap_or(f64::MIN);
        if flag(schema, "exclusiveMinimum") {
            if f <= m {
                errs.push(invalid(path, v, format!("{shown} in body should be greater than {}", number_text(min))));
            }
        } else if f < m {
            errs.push(invalid(path, v, format!("{shown} in body should be greater than or equal to {}", number_text(min))));
        }
    }
    if let Some(max) = schema.get("maximum").filter(|m| m.is_number()) {
        let m = max.as_f64().unwrap_or(f64::MAX);
        if flag(schema, "exclusiveMaximum") {
            if f >= m {
                errs.push(invalid(path, v, format!("{shown} in body should be less than {}", number_text(max))));
            }
        } else if f > m {
            errs.push(invalid(path, v, format!("{shown} in body should be less than or equal to {}", number_text(max))));
        }
    }
    let fits = match schema.get("format").and_then(Value::as_str) {
        Some("int32") => v.as_i64().is_some_and(|i| i32::try_from(i).is_ok()),
        Some("int64") => v.as_i64().is_some(),
        _ => true,
    };
    if !fits {
        let format = schema.get("format").and_then(Value::as_str).unwrap_or("");
        errs.push(invalid(path, v, format!("{shown} in body must be of type {format}: {}", render(v))));
    }
}

/// The structural-schema errors of a CRD version's `openAPIV3Schema`
/// (`field` is its path, e.g. `spec.versions[0].schema.openAPIV3Schema`):
/// the root must be an object, and every node below needs a `type` unless it
/// is `x-kubernetes-int-or-string` or `x-kubernetes-preserve-unknown-fields`
/// (upstream `pkg/apiserver/schema/validation.go`'s messages).
pub fn structural_errors(schema: &Value, field: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    match schema.get("type").and_then(Value::as_str) {
        Some("object") => {}
        None | Some("") => errs.push(FieldError::required(&format!("{field}.type"), "must not be empty at the root")),
        Some(other) => errs.push(FieldError::not_supported(&format!("{field}.type"), other, &["object"])),
    }
    structural_children(schema, field, &mut errs);
    errs
}

fn structural_children(schema: &Value, field: &str, errs: &mut Vec<FieldError>) {
    let check = |s: &Value, f: String, errs: &mut Vec<FieldError>| {
        let typed = s.get("type").and_then(Value::as_str).is_some_and(|t| !t.is_empty());
        if !typed && !flag(s, "x-kubernetes-int-or-string") && !flag(s, "x-kubernetes-preserve-unknown-fields") {
            errs.push(FieldError::required(&format!("{f}.type"), "must not be empty for specified object fields"));
        }
        structural_children(s, &f, errs);
    };
    if let Some(p) = props(schema) {
        for (k, s) in p {
            check(s, format!("{field}.properties[{k}]"), errs);
        }
    }
    if let Some(items) = schema.get("items").filter(|i| i.is_object()) {
        check(items, format!("{field}.items"), errs);
    }
    if let Some(a) = additional(schema) {
        check(a, format!("{field}.additionalProperties"), errs);
    }
}

#[cfg(test)]
mod tests;
