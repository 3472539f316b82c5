//! API errors: every failure a client sees is a Kubernetes `Status` object.
//!
//! [`ApiError`] wraps [`rkube_api::status::Status`] (which carries upstream's
//! messages, reasons and codes) so handlers can return it with `?` and axum
//! can render it. Storage errors become a `Status` in exactly one place,
//! [`rkube_cache::error::storage_status`] (following
//! `staging/src/k8s.io/apiserver/pkg/storage/errors/storage.go`), which
//! [`ApiError::from_storage`] and the watch cache's errors both use.

use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use rkube_api::registry::ResourceInfo;
use rkube_api::status::{Status, StatusCause, StatusDetails};
use rkube_cache::error::{storage_status, StorageOp, Target};
use rkube_storage::StorageError;

/// Result alias for handlers.
pub type ApiResult<T> = Result<T, ApiError>;

/// A failed request: the `Status` body (its `code` is the HTTP code; its
/// `details.retryAfterSeconds`, when set, is also sent as `Retry-After`).
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError(pub Box<Status>);

impl From<Status> for ApiError {
    fn from(s: Status) -> Self {
        ApiError(Box::new(s))
    }
}

impl From<rkube_cache::CacheError> for ApiError {
    fn from(e: rkube_cache::CacheError) -> Self {
        Status::from(e).into()
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}): {}", self.0.code, self.0.reason, self.0.message)
    }
}

impl std::error::Error for ApiError {}

impl ApiError {
    /// The HTTP status code.
    pub fn code(&self) -> u16 {
        self.0.code
    }

    /// 404 `NotFound`: `<resource> "<name>" not found`.
    pub fn not_found(info: &ResourceInfo, name: &str) -> Self {
        Status::not_found(info.group, info.resource, name).into()
    }

    /// 404 `NotFound` for an unknown path: `the server could not find the requested resource`.
    pub fn path_not_found() -> Self {
        Status::new(404, "NotFound", "the server could not find the requested resource")
            .with_details(StatusDetails::default())
            .into()
    }

    /// 409 `AlreadyExists`: `<resource> "<name>" already exists`.
    pub fn already_exists(info: &ResourceInfo, name: &str) -> Self {
        Status::already_exists(info.group, info.resource, name).into()
    }

    /// 409 `Conflict`: `Operation cannot be fulfilled on <resource> "<name>": <why>`.
    pub fn conflict(info: &ResourceInfo, name: &str, why: &str) -> Self {
        Status::conflict(info.group, info.resource, name, why).into()
    }

    /// The optimistic-concurrency conflict (stale `resourceVersion`).
    pub fn stale(info: &ResourceInfo, name: &str) -> Self {
        Self::conflict(
            info,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// 422 `Invalid`: `<Kind> "<name>" is invalid: <causes>`.
    pub fn invalid(info: &ResourceInfo, name: &str, causes: Vec<StatusCause>) -> Self {
        Status::invalid(info.group, info.kind, name, causes).into()
    }

    /// 400 `BadRequest`.
    pub fn bad_request(message: impl std::fmt::Display) -> Self {
        Status::bad_request(message).into()
    }

    /// 405 `MethodNotAllowed`.
    pub fn method_not_allowed() -> Self {
        Status::method_not_allowed("the server does not allow this method on the requested resource")
            .with_details(StatusDetails::default())
            .into()
    }

    /// 406 `NotAcceptable`.
    pub fn not_acceptable(accepted: &[&str]) -> Self {
        Status::not_acceptable(format!("only the following media types are accepted: {}", accepted.join(", "))).into()
    }

    /// 415 `UnsupportedMediaType`.
    pub fn unsupported_media_type(content_type: &str, accepted: &[&str]) -> Self {
        Status::unsupported_media_type(format!(
            "the body of the request was in an unknown format ({content_type}) - accepted media types include: {}",
            accepted.join(", ")
        ))
        .into()
    }

    /// 413 `RequestEntityTooLarge` for a body over `limit` bytes.
    pub fn too_large(limit: usize) -> Self {
        Status::request_entity_too_large(format!("limit is {limit}")).into()
    }

    /// 500 `InternalError`.
    pub fn internal(message: impl std::fmt::Display) -> Self {
        Status::internal(message).into()
    }

    /// Converts a storage failure on the object `name` of `info` (`""` for a
    /// collection) with the one mapping, [`rkube_cache::error::storage_status`].
    pub fn from_storage(err: StorageError, info: &ResourceInfo, name: &str) -> Self {
        let target = Target { group: info.group, resource: info.resource, name };
        storage_status(err, target, StorageOp::Object).into()
    }

    /// The `Status` object as JSON.
    pub fn to_status(&self) -> serde_json::Value {
        self.0.to_json()
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = rkube_api::wire::to_json_body(&*self.0).unwrap_or_default();
        let code = StatusCode::from_u16(self.0.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut resp = (code, body).into_response();
        resp.headers_mut().insert("content-type", HeaderValue::from_static("application/json"));
        if let Some(secs) = self.0.retry_after() {
            if let Ok(v) = HeaderValue::from_str(&secs.to_string()) {
                resp.headers_mut().insert("retry-after", v);
            }
        }
        resp
    }
}

/// `<resource>` for the core group, `<resource>.<group>` otherwise (upstream `GroupResource.String()`).
pub fn qualified(info: &ResourceInfo) -> String {
    if info.group.is_empty() {
        info.resource.to_string()
    } else {
        format!("{}.{}", info.resource, info.group)
    }
}
