//! Kubernetes `metav1.Status`: the error body every API failure is sent as.
//!
//! Constructors follow `k8s.io/apimachinery/pkg/api/errors/errors.go`
//! (message wording, `reason`, `code`, `details`), and the storage errors of
//! `k8s.io/apiserver/pkg/storage/errors.go` (too large / too old resource
//! version). The JSON shape is exactly upstream's:
//!
//! ```json
//! {"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",
//!  "message":"pods \"x\" not found","reason":"NotFound",
//!  "details":{"name":"x","kind":"pods"},"code":404}
//! ```
//!
//! Empty fields are omitted like Go's `omitempty`; `metadata` is always `{}`.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::field_error::go_quote;

/// `status` value of a failed request.
pub const STATUS_FAILURE: &str = "Failure";
/// `status` value of a successful request (e.g. a DELETE answered with a Status).
pub const STATUS_SUCCESS: &str = "Success";

/// Cause type (`details.causes[].reason`) marking a "too large resource
/// version" timeout (`metav1.CauseTypeResourceVersionTooLarge`).
pub const CAUSE_TYPE_RESOURCE_VERSION_TOO_LARGE: &str = "ResourceVersionTooLarge";

/// The `metav1.Status` object. Serializes exactly like upstream (field order
/// kind, apiVersion, metadata, status, message, reason, details, code).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    /// Always `"Status"`.
    #[serde(default = "status_kind")]
    pub kind: String,
    /// Always `"v1"`.
    #[serde(default = "status_api_version")]
    pub api_version: String,
    /// `ListMeta`; always `{}` for errors.
    #[serde(default)]
    pub metadata: serde_json::Map<String, serde_json::Value>,
    /// `"Failure"` or `"Success"`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub status: String,
    /// Human-readable description, printed by kubectl after `Error from server (<reason>): `.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// Machine-readable reason (`NotFound`, `Conflict`, ...).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// Extra data about the failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<StatusDetails>,
    /// HTTP status code (Go `int32`; 0 is omitted).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub code: u16,
}

/// `metav1.StatusDetails`. Every field is omitted when empty.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusDetails {
    /// Name of the object concerned.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// API group of the resource concerned (`""` for core).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub group: String,
    /// Resource (plural, e.g. `pods`) or kind (e.g. `Pod`, for `Invalid`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kind: String,
    /// UID of the object concerned.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
    /// Individual causes (field errors for `Invalid`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub causes: Vec<StatusCause>,
    /// Seconds the client should wait before retrying (also sent as `Retry-After`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_seconds: Option<u64>,
}

/// `metav1.StatusCause`: one reason for a failure, e.g. one invalid field.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusCause {
    /// Cause type, e.g. `FieldValueInvalid`, `FieldValueRequired` (Go field `Type`, JSON `reason`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// Human-readable description (for field errors: the error body without the field path).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// Field path, e.g. `metadata.name`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub field: String,
}

fn status_kind() -> String {
    "Status".to_string()
}

fn status_api_version() -> String {
    "v1".to_string()
}

fn is_zero(code: &u16) -> bool {
    *code == 0
}

/// `resource` qualified by `group` like `schema.GroupResource.String()`:
/// `pods`, `deployments.apps`.
fn qualified(group: &str, resource: &str) -> String {
    if group.is_empty() {
        resource.to_string()
    } else {
        format!("{resource}.{group}")
    }
}

impl StatusCause {
    /// A cause with the given type, message and field path.
    pub fn new(
        reason: impl Into<String>,
        message: impl Into<String>,
        field: impl Into<String>,
    ) -> Self {
        StatusCause {
            reason: reason.into(),
            message: message.into(),
            field: field.into(),
        }
    }

    /// The cause as upstream `field.Error.Error()` prints it: `<field>: <message>`
    /// (just the message when there is no field).
    pub fn to_error_string(&self) -> String {
        if self.field.is_empty() {
            self.message.clone()
        } else {
            format!("{}: {}", self.field, self.message)
        }
    }
}

impl Status {
    /// A failure Status with `code`, `reason` and `message` and no details.
    pub fn new(code: u16, reason: impl Into<String>, message: impl Into<String>) -> Self {
        Status {
            kind: status_kind(),
            api_version: status_api_version(),
            metadata: serde_json::Map::new(),
            status: STATUS_FAILURE.to_string(),
            message: message.into(),
            reason: reason.into(),
            details: None,
            code,
        }
    }

    /// A `"Success"` Status with code 200 (what DELETE of a collection may return).
    pub fn success() -> Self {
        let mut s = Status::new(200, "", "");
        s.status = STATUS_SUCCESS.to_string();
        s
    }

    /// Replaces the details.
    pub fn with_details(mut self, details: StatusDetails) -> Self {
        self.details = Some(details);
        self
    }

    fn with_object(self, group: &str, kind: &str, name: &str) -> Self {
        self.with_details(StatusDetails {
            name: name.to_string(),
            group: group.to_string(),
            kind: kind.to_string(),
            ..StatusDetails::default()
        })
    }

    /// 404 `NotFound`: `pods "x" not found` / `deployments.apps "x" not found`
    /// (upstream `NewNotFound`). Details: name, group, kind = resource.
    pub fn not_found(group: &str, resource: &str, name: &str) -> Self {
        Status::new(
            404,
            "NotFound",
            format!(
                "{} {} not found",
                qualified(group, resource),
                go_quote(name)
            ),
        )
        .with_object(group, resource, name)
    }

    /// 409 `AlreadyExists`: `pods "x" already exists` (upstream `NewAlreadyExists`).
    pub fn already_exists(group: &str, resource: &str, name: &str) -> Self {
        Status::new(
            409,
            "AlreadyExists",
            format!(
                "{} {} already exists",
                qualified(group, resource),
                go_quote(name)
            ),
        )
        .with_object(group, resource, name)
    }

    /// 409 `Conflict`: `Operation cannot be fulfilled on pods "x": <msg>` (upstream `NewConflict`).
    pub fn conflict(group: &str, resource: &str, name: &str, msg: impl fmt::Display) -> Self {
        Status::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} {}: {}",
                qualified(group, resource),
                go_quote(name),
                msg
            ),
        )
        .with_object(group, resource, name)
    }

    /// 422 `Invalid`: `Pod "x" is invalid: <causes>` (upstream `NewInvalid`).
    ///
    /// `kind` is the Kind (`Pod`); with a non-empty `group` the message says
    /// `Deployment.apps "x" is invalid: ...`. One cause prints as
    /// `field: message`; several as `[f1: m1, f2: m2]` (upstream
    /// `ErrorList.ToAggregate()`, which also drops duplicates).
    pub fn invalid(group: &str, kind: &str, name: &str, causes: Vec<StatusCause>) -> Self {
        let mut parts: Vec<String> = Vec::with_capacity(causes.len());
        for c in &causes {
            let s = c.to_error_string();
            if !parts.contains(&s) {
                parts.push(s);
            }
        }
        let joined = match parts.len() {
            0 => String::new(),
            1 => parts.remove(0),
            _ => format!("[{}]", parts.join(", ")),
        };
        let message = if joined.is_empty() {
            format!("{} {} is invalid", qualified(group, kind), go_quote(name))
        } else {
            format!(
                "{} {} is invalid: {}",
                qualified(group, kind),
                go_quote(name),
                joined
            )
        };
        Status::new(422, "Invalid", message).with_details(StatusDetails {
            name: name.to_string(),
            group: group.to_string(),
            kind: kind.to_string(),
            causes,
            ..StatusDetails::default()
        })
    }

    /// 400 `BadRequest` with `msg` (upstream `NewBadRequest`).
    pub fn bad_request(msg: impl fmt::Display) -> Self {
        Status::new(400, "BadRequest", msg.to_string())
    }

    /// 401 `Unauthorized`; an empty `msg` becomes `not authorized` (upstream `NewUnauthorized`).
    pub fn unauthorized(msg: impl fmt::Display) -> Self {
        let mut m = msg.to_string();
        if m.is_empty() {
            m = "not authorized".to_string();
        }
        Status::new(401, "Unauthorized", m)
    }

    /// 403 `Forbidden` as the authorization filter words it:
    /// `pods "x" is forbidden: User "bob" cannot get resource "pods" in API group "" in the namespace "ns"`
    /// (`... at the cluster scope` when `ns` is empty; no `"x"` when `name` is empty).
    /// `resource` may carry a subresource (`pods/log`); the prefix then names only `pods`.
    pub fn forbidden(
        user: &str,
        verb: &str,
        group: &str,
        resource: &str,
        name: &str,
        ns: &str,
    ) -> Self {
        let base = resource.split('/').next().unwrap_or(resource);
        let scope = if ns.is_empty() {
            "at the cluster scope".to_string()
        } else {
            format!("in the namespace {}", go_quote(ns))
        };
        let reason = format!(
            "User {} cannot {verb} resource {} in API group {} {scope}",
            go_quote(user),
            go_quote(resource),
            go_quote(group)
        );
        let q = qualified(group, base);
        let message = if base.is_empty() {
            format!("forbidden: {reason}")
        } else if name.is_empty() {
            format!("{q} is forbidden: {reason}")
        } else {
            format!("{q} {} is forbidden: {reason}", go_quote(name))
        };
        Status::new(403, "Forbidden", message).with_object(group, base, name)
    }

    /// 405 `MethodNotAllowed` with `msg`.
    pub fn method_not_allowed(msg: impl fmt::Display) -> Self {
        Status::new(405, "MethodNotAllowed", msg.to_string())
    }

    /// 406 `NotAcceptable` with `msg` (no media type in `Accept` can be served).
    pub fn not_acceptable(msg: impl fmt::Display) -> Self {
        Status::new(406, "NotAcceptable", msg.to_string())
    }

    /// 410 `Expired` with `msg` (upstream `NewResourceExpired`).
    pub fn expired(msg: impl fmt::Display) -> Self {
        Status::new(410, "Expired", msg.to_string())
    }

    /// 410 `Gone` with `msg` (upstream `NewGone`).
    pub fn gone(msg: impl fmt::Display) -> Self {
        Status::new(410, "Gone", msg.to_string())
    }

    /// 413 `RequestEntityTooLarge`: `Request entity too large: <msg>`
    /// (upstream `NewRequestEntityTooLargeError`).
    pub fn request_entity_too_large(msg: impl fmt::Display) -> Self {
        Status::new(
            413,
            "RequestEntityTooLarge",
            format!("Request entity too large: {msg}"),
        )
    }

    /// 415 `UnsupportedMediaType` with `msg`.
    pub fn unsupported_media_type(msg: impl fmt::Display) -> Self {
        Status::new(415, "UnsupportedMediaType", msg.to_string())
    }

    /// 429 `TooManyRequests` with `msg` and `details.retryAfterSeconds`
    /// (upstream `NewTooManyRequests`; 0 means no retry hint).
    pub fn too_many_requests(msg: impl fmt::Display, retry_after_secs: u64) -> Self {
        Status::new(429, "TooManyRequests", msg.to_string()).with_details(StatusDetails {
            retry_after_seconds: nonzero(retry_after_secs),
            ..StatusDetails::default()
        })
    }

    /// 504 `Timeout`: `Timeout: <msg>` with `details.retryAfterSeconds`
    /// (upstream `NewTimeoutError`; 0 means no retry hint).
    pub fn timeout(msg: impl fmt::Display, retry_after_secs: u64) -> Self {
        Status::new(504, "Timeout", format!("Timeout: {msg}")).with_details(StatusDetails {
            retry_after_seconds: nonzero(retry_after_secs),
            ..StatusDetails::default()
        })
    }

    /// 504 `Timeout` for a read at a resourceVersion the server has not reached
    /// (upstream `storage.NewTooLargeResourceVersionError`): message
    /// `Timeout: Too large resource version: N, current: M`, one cause of type
    /// `ResourceVersionTooLarge` (message `Too large resource version`),
    /// `retryAfterSeconds: 1`. client-go's reflector recognises it by the cause
    /// and relists with `resourceVersion=""`.
    pub fn too_large_resource_version(
        requested: impl fmt::Display,
        current: impl fmt::Display,
    ) -> Self {
        let mut s = Status::timeout(
            format!("Too large resource version: {requested}, current: {current}"),
            1,
        );
        if let Some(d) = s.details.as_mut() {
            d.causes.push(StatusCause::new(
                CAUSE_TYPE_RESOURCE_VERSION_TOO_LARGE,
                "Too large resource version",
                "",
            ));
        }
        s
    }

    /// 410 `Expired`: `too old resource version: N (M)` where M is the oldest
    /// resourceVersion still available (the cacher's watch/list error).
    pub fn too_old_resource_version(
        requested: impl fmt::Display,
        oldest: impl fmt::Display,
    ) -> Self {
        Status::expired(format!("too old resource version: {requested} ({oldest})"))
    }

    /// 500 `InternalError`: `Internal error occurred: <msg>`, with one cause
    /// carrying `msg` (upstream `NewInternalError`).
    pub fn internal(msg: impl fmt::Display) -> Self {
        let m = msg.to_string();
        Status::new(
            500,
            "InternalError",
            format!("Internal error occurred: {m}"),
        )
        .with_details(StatusDetails {
            causes: vec![StatusCause::new("", m, "")],
            ..StatusDetails::default()
        })
    }

    /// 503 `ServiceUnavailable` with `msg` (upstream `NewServiceUnavailable`).
    pub fn service_unavailable(msg: impl fmt::Display) -> Self {
        Status::new(503, "ServiceUnavailable", msg.to_string())
    }

    /// The HTTP status code.
    pub fn code(&self) -> u16 {
        self.code
    }

    /// The reason (`NotFound`, ...).
    pub fn reason(&self) -> &str {
        &self.reason
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// `details.retryAfterSeconds`, to be sent as the `Retry-After` header.
    pub fn retry_after(&self) -> Option<u64> {
        self.details.as_ref().and_then(|d| d.retry_after_seconds)
    }

    /// The Status as a JSON value (the HTTP response body).
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or_else(|_| serde_json::json!({}))
    }
}

fn nonzero(v: u64) -> Option<u64> {
    (v > 0).then_some(v)
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Status {}
