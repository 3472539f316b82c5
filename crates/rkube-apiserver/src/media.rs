//! Content negotiation: request bodies in, responses out.
//!
//! Follows `staging/src/k8s.io/apiserver/pkg/endpoints/handlers/negotiation`:
//! - request bodies are JSON or YAML (and the patch media types for PATCH),
//!   at most [`MAX_BODY_BYTES`] (413 `RequestEntityTooLarge` above), an
//!   unknown `Content-Type` is 415 `UnsupportedMediaType`, a malformed body is
//!   400 `BadRequest` carrying the decoder's message;
//! - responses are JSON, YAML, protobuf (built-in kinds,
//!   [`crate::protobuf_body`]), a server-side `Table`
//!   (`application/json;as=Table;v=v1;g=meta.k8s.io`) or
//!   `PartialObjectMetadata(List)` when the `Accept` header asks for them; an
//!   `Accept` naming only unsupported types (e.g. protobuf for a custom
//!   resource) is 406.

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use crate::error::{ApiError, ApiResult};

/// Largest request body accepted (upstream's 3 MiB `MaxRequestBodyBytes`).
pub const MAX_BODY_BYTES: usize = 3 * 1024 * 1024;

/// Media types accepted for create/update bodies.
pub const BODY_TYPES: &[&str] = &["application/json", "application/yaml", "application/vnd.kubernetes.protobuf"];

/// Media types a response can be rendered as (built-in kinds add protobuf).
pub const RESPONSE_TYPES: &[&str] = &["application/json", "application/yaml"];

/// Media types a response of a built-in kind can be rendered as.
pub const BUILTIN_RESPONSE_TYPES: &[&str] =
    &["application/json", "application/yaml", "application/vnd.kubernetes.protobuf"];

/// One parsed media range of an `Accept` header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MediaRange {
    /// `type/subtype`, lowercased.
    pub essence: String,
    /// Parameters (`as`, `g`, `v`, ...), names lowercased.
    pub params: Vec<(String, String)>,
}

impl MediaRange {
    /// A parameter's value.
    pub fn param(&self, name: &str) -> Option<&str> {
        self.params.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }
}

/// Parses a media type list (`Accept`) or a single type (`Content-Type`).
pub fn parse_media_ranges(header: &str) -> Vec<MediaRange> {
    header
        .split(',')
        .filter_map(|part| {
            let mut pieces = part.split(';');
            let essence = pieces.next()?.trim().to_ascii_lowercase();
            if essence.is_empty() {
                return None;
            }
            let params = pieces
                .filter_map(|p| {
                    let (k, v) = p.split_once('=')?;
                    Some((k.trim().to_ascii_lowercase(), v.trim().trim_matches('"').to_string()))
                })
                .collect();
            Some(MediaRange { essence, params })
        })
        .collect()
}

pub use crate::table::{IncludeObject as IncludeObjectPolicy, TableVersion};

/// The representation a response is rendered in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    /// Plain JSON.
    Json,
    /// YAML.
    Yaml,
    /// A `meta.k8s.io` `Table` of the given version.
    Table(TableVersion),
    /// `PartialObjectMetadata` / `PartialObjectMetadataList`.
    PartialMetadata,
    /// `application/vnd.kubernetes.protobuf` (built-in kinds only).
    Protobuf,
}

/// Picks the response representation from `Accept`, the first listed type
/// the server can write; protobuf only when `protobuf` (the resource is a
/// built-in kind with a schema).
///
/// Returns 406 when every listed type is unsupported (e.g. protobuf only,
/// for a custom resource).
pub fn negotiate_output(headers: &HeaderMap, protobuf: bool) -> ApiResult<Output> {
    let accept = headers.get("accept").and_then(|v| v.to_str().ok()).unwrap_or("");
    if accept.trim().is_empty() {
        return Ok(Output::Json);
    }
    for range in parse_media_ranges(accept) {
        let essence = range.essence.as_str();
        match essence {
            "application/json" | "application/*" | "*/*" => match range.param("as") {
                None => return Ok(Output::Json),
                Some("Table") if matches!(range.param("g"), Some("meta.k8s.io") | None) => match range.param("v") {
                    Some("v1") | None => return Ok(Output::Table(TableVersion::V1)),
                    Some("v1beta1") => return Ok(Output::Table(TableVersion::V1Beta1)),
                    _ => continue,
                },
                Some("PartialObjectMetadata") | Some("PartialObjectMetadataList")
                    if matches!(range.param("g"), Some("meta.k8s.io") | None) =>
                {
                    return Ok(Output::PartialMetadata)
                }
                _ => continue,
            },
            "application/yaml" => {
                if range.param("as").is_none() {
                    return Ok(Output::Yaml);
                }
            }
            // Tables and metadata-only answers stay JSON (`as=` in protobuf is not served).
            rkube_api::protobuf::PROTOBUF_CONTENT_TYPE if protobuf && range.param("as").is_none() => {
                return Ok(Output::Protobuf)
            }
            _ => continue,
        }
    }
    Err(ApiError::not_acceptable(if protobuf { BUILTIN_RESPONSE_TYPES } else { RESPONSE_TYPES }))
}

/// Reads `?includeObject=` (`None`, `Metadata` (default), `Object`); 400 otherwise.
pub fn include_object(value: Option<&str>) -> ApiResult<IncludeObjectPolicy> {
    IncludeObjectPolicy::from_query(value).map_err(ApiError::bad_request)
}

/// The `Content-Type` essence of a request (`application/json` when absent).
pub fn content_type(headers: &HeaderMap) -> String {
    headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| parse_media_ranges(v).into_iter().next())
        .map(|r| r.essence)
        .unwrap_or_else(|| "application/json".to_string())
}

/// Reads a request body, enforcing [`MAX_BODY_BYTES`] (413 above it).
///
/// Over the limit, the rest of the body is drained
/// ([`crate::filters::body::drain`]) before answering 413, so the client
/// (still sending) reads the answer instead of a broken pipe, as Go's server
/// does.
pub async fn read_body(body: Body) -> ApiResult<bytes::Bytes> {
    use http_body_util::BodyExt;
    let mut body = body;
    let mut buf = bytes::BytesMut::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| ApiError::bad_request(format!("unable to read the request body: {e}")))?;
        let Ok(chunk) = frame.into_data() else { continue };
        if buf.len() + chunk.len() > MAX_BODY_BYTES {
            crate::filters::body::drain(body, buf.len() + chunk.len()).await;
            return Err(ApiError::too_large(MAX_BODY_BYTES));
        }
        buf.extend_from_slice(&chunk);
    }
    Ok(buf.freeze())
}

/// Decodes a create/update body (JSON or YAML) into a JSON object.
///
/// Errors: 415 for other media types, 400 for malformed bodies or non-objects.
/// Bodies nested deeper than [`crate::patch::MAX_NESTING_DEPTH`] levels are
/// malformed (400): that is serde_json's recursion limit, which also reads
/// stored objects back (upstream's Go decoder stops at 10,000 levels).
/// YAML is held to the same limit before it is parsed ([`crate::yaml_depth`]),
/// so its cost stays linear in the body's size. Bodies of
/// [`BLOCKING_DECODE_BYTES`] or more are decoded with the worker thread handed
/// over to the runtime's other tasks, so a slow decode neither stalls other
/// requests nor keeps the request timeout from answering.
pub fn decode_object(content_type: &str, body: &[u8]) -> ApiResult<Value> {
    decode_body(content_type, body).map(|(value, _)| value)
}

/// [`decode_object`], with the keys of a JSON body ([`crate::strict::KeyScan`])
/// for repeated-key reporting (`fieldValidation`); `None` for other media
/// types. The keys are scanned only when the body repeats one
/// ([`crate::strict::decode_json`]).
pub fn decode_body(content_type: &str, body: &[u8]) -> ApiResult<(Value, Option<crate::strict::KeyScan>)> {
    let (value, keys) = off_the_workers(body.len(), || decode_any(content_type, body))?;
    if !value.is_object() {
        return Err(ApiError::bad_request("the request body must be a JSON object"));
    }
    Ok((value, keys))
}

fn decode_any(content_type: &str, body: &[u8]) -> ApiResult<(Value, Option<crate::strict::KeyScan>)> {
    Ok((match content_type {
        "application/json" => {
            return crate::strict::decode_json(body)
                .map_err(|e| ApiError::bad_request(format!("couldn't get version/kind; json parse error: {e}")));
        }
        "application/yaml" | "application/x-yaml" | "text/yaml" => decode_yaml(body)?,
        rkube_api::protobuf::PROTOBUF_CONTENT_TYPE => {
            rkube_api::protobuf::decode_object(body).map_err(|e| match e {
                rkube_api::protobuf::ProtobufError::UnknownKind { .. } => {
                    ApiError::unsupported_media_type(content_type, BODY_TYPES)
                }
                other => ApiError::bad_request(other),
            })?
        }
        other => return Err(ApiError::unsupported_media_type(other, BODY_TYPES)),
    }, None))
}

/// Bodies at least this large (bytes) are decoded under
/// [`tokio::task::block_in_place`] on a multi-threaded runtime.
pub const BLOCKING_DECODE_BYTES: usize = 64 * 1024;

/// Runs `decode` (of a body of `len` bytes) with the worker thread handed
/// over to the other tasks when the body is large and the runtime can do it.
pub(crate) fn off_the_workers<T>(len: usize, decode: impl FnOnce() -> T) -> T {
    use tokio::runtime::{Handle, RuntimeFlavor};
    let multi_thread = Handle::try_current().is_ok_and(|h| h.runtime_flavor() == RuntimeFlavor::MultiThread);
    if len >= BLOCKING_DECODE_BYTES && multi_thread {
        tokio::task::block_in_place(decode)
    } else {
        decode()
    }
}

/// Decodes YAML into JSON (400 on malformed YAML).
///
/// Nesting is held to what the JSON decoder accepts
/// ([`crate::patch::MAX_NESTING_DEPTH`]; the YAML decoder allows one level
/// more), so every body stored can be decoded again.
pub fn decode_yaml(body: &[u8]) -> ApiResult<Value> {
    yaml_to_json(body).map_err(|e| ApiError::bad_request(format!("error converting YAML to JSON: yaml: {e}")))
}

/// Why a YAML text was not decoded.
#[derive(Debug, thiserror::Error)]
pub(crate) enum YamlError {
    /// Nested deeper than [`crate::patch::MAX_NESTING_DEPTH`].
    #[error("exceeded max depth of {max}")]
    TooDeep {
        /// The limit.
        max: usize,
    },
    /// The YAML decoder's message.
    #[error("{0}")]
    Malformed(String),
}

/// One YAML document as JSON, refused before parsing when it nests deeper
/// than [`crate::patch::MAX_NESTING_DEPTH`] ([`crate::yaml_depth::check`]),
/// and after parsing when the value does (what the scan counts short); a
/// text in the plain subset ([`crate::yaml_value::plain_block_mapping`]) is
/// read without either check, its reader bounding the nesting below the
/// limit; aliases may not expand it past one node per byte
/// ([`crate::yaml_value::parsed`]).
///
/// A body that is JSON (what `kubectl apply --server-side` sends as
/// `application/apply-patch+yaml`) is decoded by the JSON decoder, about three
/// times faster than the YAML one on large bodies (`rkube bench bodies`
/// compares the two encodings per request): JSON is YAML's flow style, and every
/// JSON text decodes to the same value both ways (quoted strings, JSON
/// numbers and literals, the last of repeated keys). A body that starts like
/// JSON but is not (unquoted flow scalars, comments, several documents, a
/// byte-order mark, nesting past the JSON decoder's limit) goes to the YAML
/// decoder, so its errors are the YAML decoder's.
pub(crate) fn yaml_to_json(body: &[u8]) -> Result<Value, YamlError> {
    let max = crate::patch::MAX_NESTING_DEPTH;
    if looks_like_json(body) && !has_surrogate_escape(body) {
        if let Some(value) = crate::json_value::from_slice(body).ok().filter(|v| !has_negative_zero(v)) {
            if crate::patch::json::nesting_depth(&value) > max {
                return Err(YamlError::TooDeep { max });
            }
            return Ok(value);
        }
    }
    // The plain subset bounds its own nesting, below the limit, in one
    // linear pass: the scan is for what the YAML parser reads. (A text the
    // plain reader gives up on late, deep nesting after megabytes of plain
    // text, is read twice before it is refused: still linear.)
    const { assert!(crate::yaml_value::PLAIN_MAX_NESTING <= crate::patch::MAX_NESTING_DEPTH) };
    if let Some(value) = crate::yaml_value::plain_block_mapping(body) {
        return Ok(value);
    }
    crate::yaml_depth::check(body, max).map_err(|_| YamlError::TooDeep { max })?;
    let value = crate::yaml_value::parsed(body).map_err(YamlError::Malformed)?;
    if crate::patch::json::nesting_depth(&value) > max {
        return Err(YamlError::TooDeep { max });
    }
    Ok(value)
}

/// Whether `body`'s first byte that is not JSON whitespace opens a JSON object.
fn looks_like_json(body: &[u8]) -> bool {
    body.iter().find(|b| !matches!(b, b' ' | b'\t' | b'\r' | b'\n')) == Some(&b'{')
}

/// Whether `body` has a `\u` escape of a UTF-16 surrogate (`\uD800` to
/// `\uDFFF`, either case); an escaped backslash before a `u` counts too
/// (so such a body takes the slower YAML decoder, which decides).
fn has_surrogate_escape(body: &[u8]) -> bool {
    body.windows(4).any(|w| w[0] == b'\\' && w[1] == b'u' && matches!(w[2], b'd' | b'D') && matches!(w[3], b'8'..=b'9' | b'a'..=b'f' | b'A'..=b'F'))
}

/// Whether a float in `value` is `-0.0` (iteratively: `value` may nest as
/// deep as the JSON decoder allows).
fn has_negative_zero(value: &Value) -> bool {
    let mut todo = vec![value];
    while let Some(v) = todo.pop() {
        match v {
            Value::Number(n) if n.is_f64() && n.as_f64().is_some_and(|f| f == 0.0 && f.is_sign_negative()) => return true,
            Value::Array(items) => todo.extend(items),
            Value::Object(map) => todo.extend(map.values()),
            _ => {}
        }
    }
    false
}

/// Renders `value` with HTTP status `code` as JSON (followed by `\n`, as
/// kube-apiserver's `json.Encoder` writes it: [`rkube_api::wire::to_json_body`])
/// or YAML.
pub fn respond(code: u16, output: Output, value: &Value) -> Response {
    let (body, ctype) = match output {
        Output::Table(v) if value.get("kind").and_then(Value::as_str) == Some("Table") => {
            match rkube_api::wire::to_json_body(value) {
                Ok(b) => (b, v.content_type()),
                Err(e) => return ApiError::internal(e).into_response(),
            }
        }
        Output::Yaml => match serde_yaml::to_string(value) {
            Ok(s) => (s.into_bytes(), "application/yaml"),
            Err(e) => return ApiError::internal(e).into_response(),
        },
        Output::Protobuf => match crate::protobuf_body::value_body(value) {
            Ok(Some(b)) => (b, crate::protobuf_body::CONTENT_TYPE),
            // A kind without a schema (a review's answer, say) goes as JSON.
            Ok(None) => match rkube_api::wire::to_json_body(value) {
                Ok(b) => (b, "application/json"),
                Err(e) => return ApiError::internal(e).into_response(),
            },
            Err(e) => return e.into_response(),
        },
        _ => match rkube_api::wire::to_json_body(value) {
            Ok(b) => (b, "application/json"),
            Err(e) => return ApiError::internal(e).into_response(),
        },
    };
    respond_bytes(code, body, ctype)
}

/// A response of `code` with an encoded `body` of type `ctype`.
pub fn respond_bytes(code: u16, body: Vec<u8>, ctype: &'static str) -> Response {
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::OK);
    let mut resp = (status, body).into_response();
    resp.headers_mut().insert("content-type", HeaderValue::from_static(ctype));
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accept(v: &str) -> ApiResult<Output> {
        let mut h = HeaderMap::new();
        h.insert("accept", HeaderValue::from_str(v).unwrap());
        negotiate_output(&h, false)
    }

    #[test]
    fn kubectl_get_accept_header_selects_table() {
        let v = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
        assert_eq!(accept(v).unwrap(), Output::Table(TableVersion::V1));
    }

    #[test]
    fn protobuf_only_accept_is_not_acceptable() {
        assert_eq!(accept("application/vnd.kubernetes.protobuf").unwrap_err().code(), 406);
        assert_eq!(accept("application/vnd.kubernetes.protobuf, application/json").unwrap(), Output::Json);
        assert_eq!(accept("application/yaml").unwrap(), Output::Yaml);
        assert_eq!(accept("*/*").unwrap(), Output::Json);
    }

    #[test]
    fn protobuf_is_chosen_for_built_in_kinds_in_the_client_order() {
        let mut h = HeaderMap::new();
        h.insert("accept", HeaderValue::from_static("application/vnd.kubernetes.protobuf, application/json"));
        assert_eq!(negotiate_output(&h, true).unwrap(), Output::Protobuf);
        assert_eq!(negotiate_output(&h, false).unwrap(), Output::Json);
        h.insert("accept", HeaderValue::from_static("application/json, application/vnd.kubernetes.protobuf"));
        assert_eq!(negotiate_output(&h, true).unwrap(), Output::Json);
        // Tables are JSON whatever the client prefers.
        h.insert(
            "accept",
            HeaderValue::from_static("application/vnd.kubernetes.protobuf;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1;g=meta.k8s.io"),
        );
        assert_eq!(negotiate_output(&h, true).unwrap(), Output::Table(TableVersion::V1));
        h.insert("accept", HeaderValue::from_static("application/vnd.kubernetes.protobuf"));
        let e = negotiate_output(&h, false).unwrap_err();
        assert_eq!(e.code(), 406);
    }

    #[test]
    fn malformed_bodies_are_bad_requests() {
        assert_eq!(decode_object("application/json", b"{").unwrap_err().code(), 400);
        assert_eq!(decode_object("application/json", b"[]").unwrap_err().code(), 400);
        assert_eq!(decode_object("text/plain", b"{}").unwrap_err().code(), 415);
        let v = decode_object("application/yaml", b"kind: Pod\nmetadata:\n  name: a\n").unwrap();
        assert_eq!(v["metadata"]["name"], "a");
    }
    #[test]
    fn json_bodies_of_a_yaml_type_decode_as_the_yaml_decoder_decodes_them() {
        let texts: &[&str] = &[
            r#"{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "labels": {"x": "1"}}, "data": {"k": "v\u00e9\n"}}"#,
            r#"{"n": [1, -0, -0.0, 0, 2.5, 1e3, 1E+3, 0.1e-2, -7e-2, -12, 18446744073709551615, -9223372036854775808, 1.7976931348623157e308, 5e-324], "o": {}}"#,
            r#"{"l": [true, false, null, "", "\/", "\u00e9\u20ac", "a\tb", "yes", "0x1F", "~"]}"#,
            r#"  {"repeated": 1, "repeated": 2, "after": [[], {}]}"#,
        ];
        for text in texts {
            let fast = yaml_to_json(text.as_bytes()).unwrap();
            let yaml = crate::yaml_value::from_slice(text.as_bytes()).unwrap();
            assert_eq!(fast, yaml, "{text}");
            assert_eq!(serde_json::to_string(&fast).unwrap(), serde_json::to_string(&yaml).unwrap(), "key order of {text}");
        }
    }

    #[test]
    fn flow_yaml_that_is_not_json_goes_to_the_yaml_decoder() {
        assert_eq!(yaml_to_json(b"{a: b, c: [1, x]}").unwrap(), serde_json::json!({"a": "b", "c": [1, "x"]}));
        let e = yaml_to_json(br#"{"s": "\ud83d\ude00"}"#).unwrap_err();
        assert!(e.to_string().contains("invalid Unicode character escape"), "{e}");
        // Beyond 64 bits: a float, as in a JSON body (the YAML decoder refuses it).
        assert_eq!(yaml_to_json(br#"{"n": 18446744073709551616}"#).unwrap()["n"].as_f64(), Some(18446744073709551616.0));
        assert_eq!(yaml_to_json(b"{\"a\": 1} # a comment\n").unwrap(), serde_json::json!({"a": 1}));
        // Errors are the YAML decoder's, and nesting is held to the JSON limit either way.
        let e = yaml_to_json(b"{\"a\": [}").unwrap_err();
        assert!(matches!(e, YamlError::Malformed(_)), "{e}");
        let max = crate::patch::MAX_NESTING_DEPTH;
        let deep = format!("{{\"a\": {}{}}}", "[".repeat(max), "]".repeat(max));
        assert!(matches!(yaml_to_json(deep.as_bytes()), Err(YamlError::TooDeep { .. })));
        let deeper = format!("{{\"a\": {}{}}}", "[".repeat(4 * max), "]".repeat(4 * max));
        assert!(matches!(yaml_to_json(deeper.as_bytes()), Err(YamlError::TooDeep { .. })));
    }
}
