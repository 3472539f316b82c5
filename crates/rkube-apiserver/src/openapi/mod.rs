//! OpenAPI documents for the served kinds, and unknown-field detection.
//!
//! kubectl needs these to validate `create`/`apply` without
//! `--validate=false` and for `kubectl explain`:
//!
//! | endpoint | function | used by |
//! |---|---|---|
//! | `GET /openapi/v2` (JSON) | [`openapi_v2_json`] | older clients, tools |
//! | `GET /openapi/v2` with `Accept:` [`ACCEPT_V2_PROTOBUF`] | [`openapi_v2_protobuf`], reply `Content-Type:` [`CONTENT_TYPE_V2_PROTOBUF`] | kubectl 1.27/1.28 validator setup, apply patch metadata |
//! | `GET /openapi/v3` | [`openapi_v3_index`] | kubectl 1.27+ field-validation check, `explain` |
//! | `GET /openapi/v3/<path>` | [`openapi_v3_group_version`] | same |
//!
//! # How kubectl uses them
//!
//! Measured with `kubectl.1.27` … `kubectl.1.33` running `create -f`:
//! 1.27 and 1.28 first fetch the Swagger 2.0 document as protobuf (their
//! validator is built from it; a document that fails to parse fails the
//! command), then all versions fetch the v3 index and the group version's
//! v3 document. kubectl's `QueryParamVerifier` (cli-runtime) then decides
//! whether the server validates fields itself: it looks (v3 first, then v2)
//! for a PATCH operation tagged with the object's GVK
//! (`x-kubernetes-group-version-kind`) whose parameters include
//! `fieldValidation`. rkube's paths do, so every version sends
//! `?fieldValidation=Strict` and leaves the check to the server, which calls
//! [`unknown_fields`]. Client-side `apply` reads the
//! `x-kubernetes-patch-*` extensions to build strategic merge patches
//! (`$setElementOrder/containers`, merge by `name`), and `kubectl explain`
//! reads the v3 document and finds the kind by its GVK extension.
//!
//! # Where the schemas come from
//!
//! From `k8s-openapi`'s `schemars` implementations (feature `v1_33`), which
//! carry upstream's definition names and descriptions; see `openapi/schemas.rs` for
//! what rkube adds (GVK tags, list kinds, patch strategies). Documents are
//! built once per process and cached in `OnceLock`s.

mod custom;
mod kinds;
mod patch_meta;
mod paths;
mod proto;
mod schemas;
mod unknown;
mod v2;
mod v3;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::sync::OnceLock;

use serde_json::{json, Value};
use sha2::{Digest, Sha512};

pub use patch_meta::patch_strategy;
pub use unknown::{strict_decoding_message, unknown_field_message, unknown_fields};

/// `Accept` media type kubectl 1.27/1.28 (and client-go) send for the v2 document as protobuf.
pub const ACCEPT_V2_PROTOBUF: &str = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf";
/// `Content-Type` of the protobuf v2 reply (note `.v1.0`, not `@v1.0`, as upstream answers).
pub const CONTENT_TYPE_V2_PROTOBUF: &str = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf";
/// `Content-Type` of the JSON documents (v2 JSON, v3 index, v3 group versions).
pub const CONTENT_TYPE_JSON: &str = "application/json";
/// `info.title` of every document.
pub(crate) const INFO_TITLE: &str = "Kubernetes";
/// `info.version` of every document (the Kubernetes API level the schemas come from).
pub(crate) const INFO_VERSION: &str = "v1.33.0";

/// Errors building a document. They indicate a bug in rkube (the inputs are
/// static), and are logged; the affected document is then served empty.
#[derive(Debug, thiserror::Error)]
pub enum OpenApiError {
    /// A JSON value did not have the shape the converter expects.
    #[error("unexpected OpenAPI document shape: {0}")]
    Shape(&'static str),
    /// A value could not be rendered as YAML for a protobuf `Any`.
    #[error("encoding a value as YAML: {0}")]
    Yaml(#[from] serde_yaml::Error),
    /// A document could not be serialized as JSON.
    #[error("encoding a document as JSON: {0}")]
    Json(#[from] serde_json::Error),
}

/// All definitions (Swagger 2.0 references), built once.
pub(crate) fn definitions() -> &'static schemas::Definitions {
    static DEFS: OnceLock<schemas::Definitions> = OnceLock::new();
    DEFS.get_or_init(schemas::build)
}

fn path_items() -> &'static [paths::PathItem] {
    static ITEMS: OnceLock<Vec<paths::PathItem>> = OnceLock::new();
    ITEMS.get_or_init(paths::build)
}

fn v2_value() -> &'static Value {
    static DOC: OnceLock<Value> = OnceLock::new();
    DOC.get_or_init(|| v2::document(definitions(), path_items()))
}

fn log_failure<T: Default>(what: &str, result: Result<T, OpenApiError>) -> T {
    result.unwrap_or_else(|e| {
        tracing::error!(error = %e, "building {what} failed");
        T::default()
    })
}

/// The Swagger 2.0 document as JSON bytes (`GET /openapi/v2`, `Accept: application/json`).
pub fn openapi_v2_json() -> &'static [u8] {
    static BYTES: OnceLock<Vec<u8>> = OnceLock::new();
    BYTES.get_or_init(|| log_failure("the OpenAPI v2 JSON document", serde_json::to_vec(v2_value()).map_err(Into::into)))
}

/// The Swagger 2.0 document encoded as gnostic's `openapi.v2.Document`
/// protobuf message (`GET /openapi/v2` with `Accept:` [`ACCEPT_V2_PROTOBUF`];
/// reply with `Content-Type:` [`CONTENT_TYPE_V2_PROTOBUF`]).
pub fn openapi_v2_protobuf() -> &'static [u8] {
    static BYTES: OnceLock<Vec<u8>> = OnceLock::new();
    BYTES.get_or_init(|| log_failure("the OpenAPI v2 protobuf document", v2::to_protobuf(v2_value())))
}

/// True when an `Accept` header asks for the protobuf v2 document (any of its
/// comma-separated media ranges names [`ACCEPT_V2_PROTOBUF`]).
pub fn wants_v2_protobuf(accept: &str) -> bool {
    accept.split(',').any(|range| {
        let media = range.split(';').next().unwrap_or("").trim();
        media.eq_ignore_ascii_case(ACCEPT_V2_PROTOBUF) || media.eq_ignore_ascii_case(CONTENT_TYPE_V2_PROTOBUF)
    })
}

struct V3Doc {
    bytes: Vec<u8>,
    hash: String,
}

fn v3_docs() -> &'static BTreeMap<String, V3Doc> {
    static DOCS: OnceLock<BTreeMap<String, V3Doc>> = OnceLock::new();
    DOCS.get_or_init(|| {
        let mut out = BTreeMap::new();
        for (group, version) in kinds::group_versions() {
            let doc = v3::group_version_document(definitions(), path_items(), group, version);
            let bytes = log_failure("an OpenAPI v3 document", serde_json::to_vec(&doc).map_err(Into::into));
            let hash = hex_upper(&Sha512::digest(&bytes));
            out.insert(kinds::group_version_path(group, version), V3Doc { bytes, hash });
        }
        out
    })
}

fn hex_upper(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789ABCDEF";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(char::from(DIGITS[usize::from(b >> 4)]));
        s.push(char::from(DIGITS[usize::from(b & 0x0f)]));
    }
    s
}

/// The OpenAPI v3 discovery index (`GET /openapi/v3`):
/// `{"paths": {"api/v1": {"serverRelativeURL": "/openapi/v3/api/v1?hash=<HASH>"}, ...}}`.
/// `<HASH>` is the upper-case hex SHA-512 of the document, as upstream; a
/// client fetching with a matching `hash` may cache the reply forever.
pub fn openapi_v3_index() -> Value {
    let mut paths: serde_json::Map<String, Value> = v3_docs()
        .iter()
        .map(|(path, doc)| (path.clone(), json!({"serverRelativeURL": format!("/openapi/v3/{path}?hash={}", doc.hash)})))
        .collect();
    for path in custom::group_version_paths() {
        if let Some((_, hash)) = custom_v3(&path) {
            paths.insert(path.clone(), json!({"serverRelativeURL": format!("/openapi/v3/{path}?hash={hash}")}));
        }
    }
    json!({ "paths": paths })
}

/// The v3 document of a custom resources' group version and its hash.
fn custom_v3(path: &str) -> Option<(Vec<u8>, String)> {
    let doc = custom::v3_document(path)?;
    let bytes = log_failure("an OpenAPI v3 document", serde_json::to_vec(&doc).map_err(Into::into));
    let hash = hex_upper(&Sha512::digest(&bytes));
    Some((bytes, hash))
}

/// The v3 document of a group version served by custom resources
/// (`apis/<group>/<version>`) and its hash, built from the CRDs served now;
/// `None` when no custom resource serves it (see [`openapi_v3_group_version`]
/// for the built-in ones).
pub fn openapi_v3_custom_group_version(path: &str) -> Option<(Vec<u8>, String)> {
    let path = path.trim_start_matches('/');
    let path = path.strip_prefix("openapi/v3/").unwrap_or(path).trim_end_matches('/');
    custom_v3(path)
}

/// The v2 document as `(JSON, protobuf)` bytes.
pub type V2Bytes = (std::sync::Arc<Vec<u8>>, std::sync::Arc<Vec<u8>>);

/// The v2 document with the custom resources served now, as `(JSON,
/// protobuf)` bytes; `None` when none is served ([`openapi_v2_json`] and
/// [`openapi_v2_protobuf`] apply).
pub fn openapi_v2_with_custom_resources() -> Option<V2Bytes> {
    custom::v2_documents()
}

/// The OpenAPI 3.0 document of one group version, by its index path
/// (`"api/v1"`, `"apis/apps/v1"`; a leading `/` or `openapi/v3/` is ignored).
/// `None` for a group version rkube does not serve.
pub fn openapi_v3_group_version(path: &str) -> Option<&'static [u8]> {
    v3_doc(path).map(|d| d.bytes.as_slice())
}

/// The hash (as in the index's `serverRelativeURL`) of a group version's v3
/// document, for `ETag`s and `?hash=` checks.
pub fn openapi_v3_hash(path: &str) -> Option<&'static str> {
    v3_doc(path).map(|d| d.hash.as_str())
}

fn v3_doc(path: &str) -> Option<&'static V3Doc> {
    let path = path.trim_start_matches('/');
    let path = path.strip_prefix("openapi/v3/").unwrap_or(path);
    v3_docs().get(path.trim_end_matches('/'))
}

/// The `description` of `property` in the definition named `definition`
/// (e.g. `("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta", "name")`), for
/// Table column descriptions.
pub fn property_description(definition: &str, property: &str) -> Option<&'static str> {
    definitions().get(definition)?.get("properties")?.get(property)?.get("description")?.as_str()
}
