//! The patch engine: `PATCH` bodies applied to stored objects, and the
//! `metadata.managedFields` bookkeeping of every write.
//!
//! [`apply_patch`] takes a live object (a JSON value as stored) and a request
//! body and returns the patched object; the caller validates it, checks that
//! name/namespace/uid did not change, bumps `resourceVersion` and stores it.
//! The four [`PatchType`]s follow upstream
//! (`staging/src/k8s.io/apiserver/pkg/endpoints/handlers/patch.go`):
//!
//! | content type | module | upstream source |
//! |---|---|---|
//! | `application/json-patch+json` | `json` | RFC 6902 (`evanphx/json-patch`) |
//! | `application/merge-patch+json` | `json` | RFC 7396 |
//! | `application/strategic-merge-patch+json` | `strategic` | `apimachinery/pkg/util/strategicpatch` |
//! | `application/apply-patch+yaml` | `apply` | `sigs.k8s.io/structured-merge-diff`, `apimachinery/pkg/util/managedfields` |
//!
//! The merge keys of the built-in kinds live in `schema`; field paths and
//! the `FieldsV1` format in `fieldpath`; schema-aware walks in `typed`;
//! managedFields entries in [`managed`].
//!
//! Server-side apply records its own `Apply` entry in `managedFields`. For
//! every other write (create, update, JSON/merge/strategic patch) the caller
//! records the writer with [`update_managed_fields`] after the patch.
//!
//! Errors are [`PatchError`]s; `Status::from(err)` gives the Kubernetes
//! `Status` upstream returns (code, reason, message, causes). Nothing here
//! panics on any input.

pub(crate) mod apply;
mod custom_schema;
pub(crate) mod fieldpath;
mod fields_v1;
pub(crate) mod json;
pub mod managed;
pub(crate) mod schema;
pub(crate) mod strategic;
pub(crate) mod typed;

#[cfg(test)]
mod tests;

use rkube_api::status::{Status, StatusCause, StatusDetails};
use serde_json::Value;

pub use apply::LAST_APPLIED_ANNOTATION;
pub use json::{MAX_JSON_PATCH_COPY_BYTES, MAX_JSON_PATCH_OPERATIONS, MAX_NESTING_DEPTH};
pub use managed::{record_update, UnwrittenEntries, UpdateRecord, OPERATION_APPLY, OPERATION_UPDATE};

/// The patch formats, by request `Content-Type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchType {
    /// `application/json-patch+json` (RFC 6902).
    Json,
    /// `application/merge-patch+json` (RFC 7396).
    Merge,
    /// `application/strategic-merge-patch+json`.
    StrategicMerge,
    /// `application/apply-patch+yaml` (server-side apply; the body may be JSON).
    Apply,
}

impl PatchType {
    /// The patch type of a `Content-Type` header value; parameters
    /// (`; charset=utf-8`) and case are ignored. `None` for anything else
    /// (the caller answers 415 `UnsupportedMediaType`).
    pub fn from_content_type(ct: &str) -> Option<PatchType> {
        let base = ct
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        match base.as_str() {
            "application/json-patch+json" => Some(PatchType::Json),
            "application/merge-patch+json" => Some(PatchType::Merge),
            "application/strategic-merge-patch+json" => Some(PatchType::StrategicMerge),
            "application/apply-patch+yaml" => Some(PatchType::Apply),
            _ => None,
        }
    }

    /// The content type, e.g. `application/merge-patch+json`.
    pub fn content_type(self) -> &'static str {
        match self {
            PatchType::Json => "application/json-patch+json",
            PatchType::Merge => "application/merge-patch+json",
            PatchType::StrategicMerge => "application/strategic-merge-patch+json",
            PatchType::Apply => "application/apply-patch+yaml",
        }
    }
}

/// One server-side apply conflict: a field another manager owns with a
/// different value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApplyConflict {
    /// The other manager as upstream prints it: `"kubectl"` or
    /// `"kubectl-client-side-apply" using apps/v1`.
    pub manager: String,
    /// The field path, e.g. `.spec.replicas` or
    /// `.spec.template.spec.containers[name="web"].image`.
    pub path: String,
}

/// Why a patch failed. See [`PatchError::status`] for the `Status` each
/// variant becomes.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PatchError {
    /// The body or a directive in it is malformed: 400 `BadRequest`.
    #[error("{0}")]
    BadRequest(String),
    /// The patch is well-formed but cannot be applied (a JSON patch
    /// operation failed, lists of lists, a field outside `$retainKeys`):
    /// 422 `Invalid` "the server rejected our request due to an error in our
    /// request", the detail in a cause (upstream `NewGenericServerResponse(422)`).
    #[error("{0}")]
    Unprocessable(String),
    /// The patched document is not an object (a merge patch that is an
    /// array or scalar): 422 `Invalid` on field `patch`.
    #[error("{0}")]
    InvalidResult(String),
    /// More than [`MAX_JSON_PATCH_OPERATIONS`] operations: 413 `RequestEntityTooLarge`.
    #[error("The allowed maximum operations in a JSON patch is {max}, got {got}")]
    TooManyOperations {
        /// The limit.
        max: usize,
        /// Operations sent.
        got: usize,
    },
    /// A non-apply patch of an object that does not exist: 404 `NotFound`
    /// (normally answered by the caller before calling).
    #[error("the object to patch does not exist")]
    NotFound,
    /// Server-side apply conflicts (without `force`): 409 `Conflict` with one
    /// `FieldManagerConflict` cause per field.
    #[error("{}", conflict_message(.0))]
    Conflicts(Vec<ApplyConflict>),
    /// Server-side apply could not type the configuration (an associative
    /// list item without its key, duplicate keys): 500 with no reason, as
    /// upstream (`failed to create typed patch object (...)`).
    #[error("{0}")]
    TypedConversion(String),
}

/// Upstream's `getConflictMessage`.
fn conflict_message(conflicts: &[ApplyConflict]) -> String {
    if let [only] = conflicts {
        return format!(
            "Apply failed with 1 conflict: conflict with {}: {}",
            only.manager, only.path
        );
    }
    let mut managers: Vec<&str> = conflicts.iter().map(|c| c.manager.as_str()).collect();
    managers.sort_unstable();
    managers.dedup();
    let mut lines = Vec::new();
    for m in managers {
        lines.push(format!("conflicts with {m}:"));
        lines.extend(
            conflicts
                .iter()
                .filter(|c| c.manager == m)
                .map(|c| format!("- {}", c.path)),
        );
    }
    format!(
        "Apply failed with {} conflicts: {}",
        conflicts.len(),
        lines.join("\n")
    )
}

const GENERIC_422: &str = "the server rejected our request due to an error in our request";

impl PatchError {
    /// The HTTP status code.
    pub fn code(&self) -> u16 {
        match self {
            PatchError::BadRequest(_) => 400,
            PatchError::Unprocessable(_) | PatchError::InvalidResult(_) => 422,
            PatchError::TooManyOperations { .. } => 413,
            PatchError::NotFound => 404,
            PatchError::Conflicts(_) => 409,
            PatchError::TypedConversion(_) => 500,
        }
    }

    /// The `Status` reason (`""` for the 500, as upstream sends it).
    pub fn reason(&self) -> &'static str {
        match self {
            PatchError::BadRequest(_) => "BadRequest",
            PatchError::Unprocessable(_) | PatchError::InvalidResult(_) => "Invalid",
            PatchError::TooManyOperations { .. } => "RequestEntityTooLarge",
            PatchError::NotFound => "NotFound",
            PatchError::Conflicts(_) => "Conflict",
            PatchError::TypedConversion(_) => "",
        }
    }

    /// The `Status` message.
    pub fn message(&self) -> String {
        self.status().message
    }

    /// The `Status` object the client receives.
    pub fn status(&self) -> Status {
        match self {
            PatchError::BadRequest(m) => Status::bad_request(m),
            PatchError::Unprocessable(m) => {
                Status::new(422, "Invalid", GENERIC_422).with_details(StatusDetails {
                    causes: vec![StatusCause::new("UnexpectedServerResponse", m.clone(), "")],
                    ..StatusDetails::default()
                })
            }
            PatchError::InvalidResult(m) => Status::invalid(
                "",
                "",
                "",
                vec![StatusCause::new("FieldValueInvalid", m.clone(), "patch")],
            ),
            PatchError::TooManyOperations { .. } => Status::request_entity_too_large(self),
            PatchError::NotFound => Status::new(404, "NotFound", self.to_string()),
            PatchError::Conflicts(conflicts) => {
                Status::new(409, "Conflict", conflict_message(conflicts)).with_details(
                    StatusDetails {
                        causes: conflicts
                            .iter()
                            .map(|c| {
                                StatusCause::new(
                                    "FieldManagerConflict",
                                    format!("conflict with {}", c.manager),
                                    c.path.clone(),
                                )
                            })
                            .collect(),
                        ..StatusDetails::default()
                    },
                )
            }
            PatchError::TypedConversion(m) => Status::new(500, "", m.clone()),
        }
    }
}

impl From<PatchError> for Status {
    fn from(e: PatchError) -> Status {
        e.status()
    }
}

/// The current time as a `metav1.Time` string (`2024-05-01T12:00:00Z`).
fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// Applies `patch` (the request body) of `patch_type` to `original`, the
/// stored object of `kind` (`"Pod"`, `"Deployment"`, ...).
///
/// `original` is `None` only for server-side apply creating the object;
/// other types get [`PatchError::NotFound`]. For [`PatchType::Apply`],
/// `field_manager` and `force` are the `fieldManager`/`force` query
/// parameters and the result carries the applier's managedFields entry; the
/// request apiVersion is taken from `original` (use [`apply_patch_at`] to
/// check it on create too). For the other types `field_manager`/`force` are
/// unused: call [`update_managed_fields`] on the result.
pub fn apply_patch(
    kind: &str,
    patch_type: PatchType,
    original: Option<&Value>,
    patch: &[u8],
    field_manager: &str,
    force: bool,
) -> Result<Value, PatchError> {
    apply_patch_at(
        kind,
        None,
        patch_type,
        original,
        patch,
        field_manager,
        force,
        &now(),
    )
}

/// Server-side apply of `patch` creating an object of `kind` (nothing
/// stored under its name): [`apply_patch_at`] with no original, except that
/// the managedFields entries may come back unwritten, for the create path
/// to write once the object has passed validation ([`UnwrittenEntries`]).
pub fn apply_create_at(
    kind: &str,
    api_version: &str,
    patch: &[u8],
    field_manager: &str,
    force: bool,
    now: &str,
) -> Result<(Value, UnwrittenEntries), PatchError> {
    let req = apply::ApplyRequest {
        kind,
        api_version: Some(api_version),
        original: None,
        body: patch,
        manager: field_manager,
        force,
        now,
    };
    apply::apply_leaving_create_entries(&req, true)
}

/// [`apply_patch`] with the request's group/version (`"apps/v1"`; checked
/// against the applied configuration's `apiVersion` like upstream) and the
/// `metav1.Time` string to stamp managedFields with.
#[allow(clippy::too_many_arguments)]
pub fn apply_patch_at(
    kind: &str,
    api_version: Option<&str>,
    patch_type: PatchType,
    original: Option<&Value>,
    patch: &[u8],
    field_manager: &str,
    force: bool,
    now: &str,
) -> Result<Value, PatchError> {
    let patched = match patch_type {
        PatchType::Apply => {
            return apply::server_side_apply(&apply::ApplyRequest {
                kind,
                api_version,
                original,
                body: patch,
                manager: field_manager,
                force,
                now,
            })
        }
        PatchType::Json => json::json_patch(original.ok_or(PatchError::NotFound)?, patch)?,
        PatchType::Merge => json::merge_patch(original.ok_or(PatchError::NotFound)?, patch)?,
        PatchType::StrategicMerge => {
            let original = original.ok_or(PatchError::NotFound)?;
            let patch: Value =
                crate::json_value::from_slice(patch).map_err(|e| PatchError::BadRequest(e.to_string()))?;
            strategic::strategic_merge(original, patch, schema::root(kind))?
        }
    };
    if !patched.is_object() {
        return Err(PatchError::InvalidResult(format!(
            "Invalid value: {:?}: json: cannot unmarshal {} into Go value of type {kind}",
            patched.to_string(),
            if patched.is_array() { "array" } else { "value" }
        )));
    }
    Ok(patched)
}

/// Records in `new.metadata.managedFields` the fields `manager` set or
/// changed going from `old` to `new`, for create (`operation` `"Create"`,
/// `old` = `None`), update and non-apply patches (`"Update"`). Both are
/// recorded as upstream's `Update` operation at `api_version` (`"v1"`,
/// `"apps/v1"`). The kind (for merge keys) is read from `new.kind`.
pub fn update_managed_fields(
    manager: &str,
    operation: &str,
    api_version: &str,
    old: Option<&Value>,
    new: &mut Value,
) {
    let old = if operation == "Create" { None } else { old };
    let now = now();
    record_update(
        &UpdateRecord {
            manager,
            api_version,
            subresource: "",
            now: &now,
        },
        old,
        new,
    );
}
