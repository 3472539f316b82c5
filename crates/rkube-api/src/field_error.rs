//! Field errors (upstream `k8s.io/apimachinery/pkg/util/validation/field`),
//! the building blocks of a 422 `Invalid` Status.
//!
//! A [`FieldError`] becomes a [`StatusCause`] whose `reason` is the error
//! type (`FieldValueInvalid`, ...), `field` the path and `message` upstream's
//! `ErrorBody()`, e.g. `Invalid value: "Foo": a lowercase RFC 1123 ...`.

use std::fmt;

use crate::status::StatusCause;

/// Type of a field error (upstream `field.ErrorType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FieldErrorType {
    /// `FieldValueNotFound`, "Not found".
    NotFound,
    /// `FieldValueRequired`, "Required value".
    Required,
    /// `FieldValueDuplicate`, "Duplicate value".
    Duplicate,
    /// `FieldValueInvalid`, "Invalid value".
    Invalid,
    /// `FieldValueNotSupported`, "Unsupported value".
    NotSupported,
    /// `FieldValueForbidden`, "Forbidden".
    Forbidden,
    /// `FieldValueTooLong`, "Too long".
    TooLong,
    /// `FieldValueTooMany`, "Too many".
    TooMany,
    /// `InternalError`, "Internal error".
    Internal,
    /// `FieldValueTypeInvalid`, "Invalid value".
    TypeInvalid,
}

impl FieldErrorType {
    /// The cause type string (`StatusCause.reason`).
    pub fn as_cause_type(self) -> &'static str {
        match self {
            FieldErrorType::NotFound => "FieldValueNotFound",
            FieldErrorType::Required => "FieldValueRequired",
            FieldErrorType::Duplicate => "FieldValueDuplicate",
            FieldErrorType::Invalid => "FieldValueInvalid",
            FieldErrorType::NotSupported => "FieldValueNotSupported",
            FieldErrorType::Forbidden => "FieldValueForbidden",
            FieldErrorType::TooLong => "FieldValueTooLong",
            FieldErrorType::TooMany => "FieldValueTooMany",
            FieldErrorType::Internal => "InternalError",
            FieldErrorType::TypeInvalid => "FieldValueTypeInvalid",
        }
    }

    /// The human-readable prefix of the message.
    pub fn description(self) -> &'static str {
        match self {
            FieldErrorType::NotFound => "Not found",
            FieldErrorType::Required => "Required value",
            FieldErrorType::Duplicate => "Duplicate value",
            FieldErrorType::Invalid | FieldErrorType::TypeInvalid => "Invalid value",
            FieldErrorType::NotSupported => "Unsupported value",
            FieldErrorType::Forbidden => "Forbidden",
            FieldErrorType::TooLong => "Too long",
            FieldErrorType::TooMany => "Too many",
            FieldErrorType::Internal => "Internal error",
        }
    }
}

/// One field error: type, field path, offending value (already rendered the
/// way upstream prints it, or `None` when upstream omits it) and detail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// The error type.
    pub error_type: FieldErrorType,
    /// Field path, e.g. `metadata.name`, `spec.containers[0].image`.
    pub field: String,
    /// The bad value as printed in the message (`"x"` for strings, `5` for numbers).
    pub bad_value: Option<String>,
    /// Explanation appended after the value.
    pub detail: String,
}

impl FieldError {
    /// `Invalid value: "<value>": <detail>` for a string value.
    pub fn invalid(field: &str, value: &str, detail: impl Into<String>) -> Self {
        Self::with(
            FieldErrorType::Invalid,
            field,
            Some(go_quote(value)),
            detail,
        )
    }

    /// `Invalid value: <value>: <detail>` for a JSON value (strings quoted,
    /// numbers and booleans plain, null as `"null"`, objects as JSON).
    pub fn invalid_json(field: &str, value: &serde_json::Value, detail: impl Into<String>) -> Self {
        let rendered = match value {
            serde_json::Value::String(s) => go_quote(s),
            serde_json::Value::Null => go_quote("null"),
            v => v.to_string(),
        };
        Self::with(FieldErrorType::Invalid, field, Some(rendered), detail)
    }

    /// `Invalid value: <rendered>: <detail>`, the value already printed the
    /// way upstream prints it (e.g. Go's `%#v` of a list).
    pub fn invalid_rendered(field: &str, rendered: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::with(FieldErrorType::Invalid, field, Some(rendered.into()), detail)
    }

    /// `Required value: <detail>`.
    pub fn required(field: &str, detail: impl Into<String>) -> Self {
        Self::with(FieldErrorType::Required, field, None, detail)
    }

    /// `Forbidden: <detail>`.
    pub fn forbidden(field: &str, detail: impl Into<String>) -> Self {
        Self::with(FieldErrorType::Forbidden, field, None, detail)
    }

    /// `Unsupported value: "<value>": supported values: "a", "b"`.
    pub fn not_supported(field: &str, value: &str, supported: &[&str]) -> Self {
        let detail = if supported.is_empty() {
            String::new()
        } else {
            let q: Vec<String> = supported.iter().map(|s| go_quote(s)).collect();
            format!("supported values: {}", q.join(", "))
        };
        Self::with(
            FieldErrorType::NotSupported,
            field,
            Some(go_quote(value)),
            detail,
        )
    }

    /// `Too long: may not be more than <max> bytes`.
    pub fn too_long(field: &str, max_bytes: usize) -> Self {
        let unit = if max_bytes == 1 { "byte" } else { "bytes" };
        Self::with(
            FieldErrorType::TooLong,
            field,
            None,
            format!("may not be more than {max_bytes} {unit}"),
        )
    }

    /// `Too many: <actual>: must have at most <max> items` (upstream `field.TooMany`).
    pub fn too_many(field: &str, actual: usize, max: usize) -> Self {
        Self::with(FieldErrorType::TooMany, field, Some(actual.to_string()), format!("must have at most {max} items"))
    }

    /// `Duplicate value: "<value>"`.
    pub fn duplicate(field: &str, value: &str) -> Self {
        Self::with(FieldErrorType::Duplicate, field, Some(go_quote(value)), "")
    }

    /// `Not found: "<value>"`.
    pub fn not_found(field: &str, value: &str) -> Self {
        Self::with(FieldErrorType::NotFound, field, Some(go_quote(value)), "")
    }

    fn with(
        t: FieldErrorType,
        field: &str,
        bad_value: Option<String>,
        detail: impl Into<String>,
    ) -> Self {
        FieldError {
            error_type: t,
            field: field.to_string(),
            bad_value,
            detail: detail.into(),
        }
    }

    /// Upstream `ErrorBody()`: the message without the field path.
    pub fn body(&self) -> String {
        let mut s = self.error_type.description().to_string();
        let shows_value = !matches!(
            self.error_type,
            FieldErrorType::Required
                | FieldErrorType::Forbidden
                | FieldErrorType::TooLong
                | FieldErrorType::Internal
        );
        if let (true, Some(v)) = (shows_value, &self.bad_value) {
            s.push_str(": ");
            s.push_str(v);
        }
        if !self.detail.is_empty() {
            s.push_str(": ");
            s.push_str(&self.detail);
        }
        s
    }
}

impl fmt::Display for FieldError {
    /// Upstream `Error()`: `<field>: <body>`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.body())
    }
}

impl std::error::Error for FieldError {}

impl From<FieldError> for StatusCause {
    fn from(e: FieldError) -> StatusCause {
        StatusCause::new(e.error_type.as_cause_type(), e.body(), e.field.clone())
    }
}

/// Quotes a string like Go's `%q` / `strconv.Quote`: double quotes, `\"` and
/// `\\`, the usual C escapes, `\xNN` / `\uNNNN` / `\UNNNNNNNN` for other
/// control or non-printable characters; printable Unicode is kept.
pub fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c if c.is_control() => {
                if (c as u32) < 0x10000 {
                    out.push_str(&format!("\\u{:04x}", c as u32));
                } else {
                    out.push_str(&format!("\\U{:08x}", c as u32));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}
