//! Non-resource endpoints: `/version`, the health checks `/healthz`,
//! `/livez`, `/readyz` (with `?verbose`, `?exclude=`, and `/<endpoint>/<check>`),
//! and the OpenAPI documents (delegated to [`crate::openapi`]).
//!
//! Health output follows upstream `staging/src/k8s.io/apiserver/pkg/server/healthz`:
//! `ok` when every check passes; verbose lists `[+]<check> ok` lines and ends
//! with `<endpoint> check passed`; a failing check is `[-]<check> failed:
//! reason withheld` and the endpoint answers 500 with the full list;
//! `/<endpoint>/<check>` answers `ok` or 500 `internal server error: <reason>`;
//! an `exclude` naming no check adds a `warn:` line. The post-start hook
//! `storage-readiness` is listed on all three while it is registered.

use std::time::Duration;

use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::error::ApiError;
use crate::state::ApiState;

/// Kubernetes minor version rkube speaks.
pub const KUBE_MINOR: &str = "33";

/// `gitVersion` reported by `/version`.
pub const GIT_VERSION: &str = "v1.33.0-rkube";

/// `GET /version`.
pub fn version() -> Response {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    let body = json!({
        "major": "1",
        "minor": KUBE_MINOR,
        "emulationMajor": "1",
        "emulationMinor": KUBE_MINOR,
        "minCompatibilityMajor": "1",
        "minCompatibilityMinor": "32",
        "gitVersion": GIT_VERSION,
        "gitCommit": format!("rkube-{}", env!("CARGO_PKG_VERSION")),
        "gitTreeState": "clean",
        "buildDate": "1970-01-01T00:00:00Z",
        "goVersion": "none (rkube is written in Rust)",
        "compiler": "rustc",
        "platform": format!("{}/{}", std::env::consts::OS, arch),
    });
    // Upstream writes it with `WriteRawJSON`: indented by two spaces, no
    // trailing newline (`apiserver/pkg/server/routes/version.go`).
    let mut resp = (StatusCode::OK, serde_json::to_vec_pretty(&body).unwrap_or_default()).into_response();
    resp.headers_mut().insert("content-type", HeaderValue::from_static("application/json"));
    resp
}

/// Which health endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    /// `/healthz` (deprecated upstream, still served).
    Healthz,
    /// `/livez`.
    Livez,
    /// `/readyz`.
    Readyz,
}

impl Endpoint {
    fn name(self) -> &'static str {
        match self {
            Endpoint::Healthz => "healthz",
            Endpoint::Livez => "livez",
            Endpoint::Readyz => "readyz",
        }
    }

    /// The checks of this endpoint, in upstream's order. Post-start hooks
    /// are boot-sequence checks: upstream adds them to `/healthz`, `/livez`
    /// and `/readyz` alike (`AddBootSequenceHealthChecks`; `/livez` with
    /// `--livez-grace-period`, default 0).
    fn checks(self, storage_readiness_hook: bool) -> Vec<&'static str> {
        let mut v = vec!["ping", "log", "etcd"];
        if self == Endpoint::Readyz {
            v.push("etcd-readiness");
        }
        if storage_readiness_hook {
            v.push(STORAGE_READINESS_CHECK);
        }
        if self == Endpoint::Readyz {
            v.push("shutdown");
        }
        v
    }
}

/// Name of the check of the `storage-readiness` post-start hook (KEP-4568).
pub const STORAGE_READINESS_CHECK: &str = "poststarthook/storage-readiness";

/// Storage is reachable when it answers its current revision within 2 s.
async fn storage_check(st: &ApiState) -> Result<(), String> {
    match tokio::time::timeout(Duration::from_secs(2), st.storage.current_revision()).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("etcd did not answer within 2s".to_string()),
    }
}

/// `/readyz`'s storage checks also fail while the backend's writes fail
/// ([`rkube_storage::Storage::write_health`], e.g. a full disk under the
/// embedded store), so load balancers stop sending writes here. `/livez`
/// and `/healthz` check reachability only: a restart frees no disk space.
async fn storage_write_check(st: &ApiState) -> Result<(), String> {
    storage_check(st).await?;
    match tokio::time::timeout(Duration::from_secs(2), st.storage.write_health()).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("storage write health did not answer within 2s".to_string()),
    }
}

/// Runs one check; the error is its reason (logged, and the body of
/// `/<endpoint>/<check>`; withheld from the root endpoint's output).
async fn run_check(st: &ApiState, ep: Endpoint, name: &str) -> Result<(), String> {
    match name {
        "etcd" | "etcd-readiness" if ep == Endpoint::Readyz => storage_write_check(st).await,
        "etcd" | "etcd-readiness" => storage_check(st).await,
        // upstream postStartHookHealthz: "not finished" until the hook returned.
        STORAGE_READINESS_CHECK if !st.cache.storage_ready() => Err("not finished".to_string()),
        _ => Ok(()),
    }
}

/// `GET /<endpoint>[/<check>]?verbose&exclude=...` (`check` may contain a
/// slash: `/readyz/poststarthook/storage-readiness`).
pub async fn health(st: &ApiState, ep: Endpoint, check: Option<&str>, query: &[(String, String)]) -> Response {
    let text = |code: StatusCode, body: String| {
        let mut r = (code, body).into_response();
        r.headers_mut().insert("content-type", HeaderValue::from_static("text/plain; charset=utf-8"));
        r.headers_mut().insert("x-content-type-options", HeaderValue::from_static("nosniff"));
        r
    };
    let checks = ep.checks(st.cache.storage_readiness_hook_registered());
    if let Some(c) = check {
        if !checks.contains(&c) {
            return ApiError::path_not_found().into_response();
        }
        return match run_check(st, ep, c).await {
            Ok(()) => text(StatusCode::OK, "ok".into()),
            Err(reason) => text(StatusCode::INTERNAL_SERVER_ERROR, format!("internal server error: {reason}\n")),
        };
    }
    let verbose = query.iter().any(|(k, _)| k == "verbose");
    let mut excluded: Vec<&str> = query.iter().filter(|(k, _)| k == "exclude").map(|(_, v)| v.trim()).collect();
    let mut lines = Vec::new();
    let mut failed = Vec::new();
    for c in &checks {
        if excluded.iter().any(|e| e == c) {
            excluded.retain(|e| e != c);
            lines.push(format!("[+]{c} excluded: ok"));
            continue;
        }
        match run_check(st, ep, c).await {
            Ok(()) => lines.push(format!("[+]{c} ok")),
            Err(reason) => {
                lines.push(format!("[-]{c} failed: reason withheld"));
                failed.push(format!("[-]{c} failed: {reason}"));
            }
        }
    }
    if !excluded.is_empty() {
        excluded.sort_unstable();
        excluded.dedup();
        let names: Vec<String> = excluded.iter().map(|e| format!("{e:?}")).collect();
        tracing::warn!("cannot exclude some health checks, no health checks are installed matching {}", names.join(","));
        lines.push(format!("warn: some health checks cannot be excluded: no matches for {}", names.join(",")));
    }
    if !failed.is_empty() {
        tracing::debug!("{} check failed:\n{}", ep.name(), failed.join("\n"));
        lines.push(format!("{} check failed", ep.name()));
        return text(StatusCode::INTERNAL_SERVER_ERROR, lines.join("\n") + "\n");
    }
    if verbose {
        lines.push(format!("{} check passed", ep.name()));
        text(StatusCode::OK, lines.join("\n") + "\n")
    } else {
        text(StatusCode::OK, "ok".into())
    }
}

fn bytes_response(bytes: &'static [u8], content_type: &'static str) -> Response {
    let mut r = (StatusCode::OK, bytes).into_response();
    r.headers_mut().insert("content-type", HeaderValue::from_static(content_type));
    r
}

/// `GET /openapi/v2` (JSON, or protobuf when asked).
pub fn openapi_v2(headers: &HeaderMap) -> Response {
    let accept = headers.get("accept").and_then(|v| v.to_str().ok()).unwrap_or("");
    if let Some((json, protobuf)) = crate::openapi::openapi_v2_with_custom_resources() {
        let (bytes, content_type) = if crate::openapi::wants_v2_protobuf(accept) {
            (protobuf, crate::openapi::CONTENT_TYPE_V2_PROTOBUF)
        } else {
            (json, crate::openapi::CONTENT_TYPE_JSON)
        };
        let mut r = (StatusCode::OK, bytes.as_ref().clone()).into_response();
        r.headers_mut().insert("content-type", HeaderValue::from_static(content_type));
        return r;
    }
    if crate::openapi::wants_v2_protobuf(accept) {
        bytes_response(crate::openapi::openapi_v2_protobuf(), crate::openapi::CONTENT_TYPE_V2_PROTOBUF)
    } else {
        bytes_response(crate::openapi::openapi_v2_json(), crate::openapi::CONTENT_TYPE_JSON)
    }
}

/// `GET /openapi/v3`.
pub fn openapi_v3_index() -> Response {
    let body = serde_json::to_vec(&crate::openapi::openapi_v3_index()).unwrap_or_default();
    let mut r = (StatusCode::OK, body).into_response();
    r.headers_mut().insert("content-type", HeaderValue::from_static(crate::openapi::CONTENT_TYPE_JSON));
    r
}

/// `GET /openapi/v3/<path>` (404 for group versions not served).
pub fn openapi_v3(path: &str) -> Response {
    match crate::openapi::openapi_v3_group_version(path) {
        Some(bytes) => {
            let mut r = bytes_response(bytes, crate::openapi::CONTENT_TYPE_JSON);
            if let Some(hash) = crate::openapi::openapi_v3_hash(path) {
                if let Ok(v) = HeaderValue::from_str(&format!("\"{hash}\"")) {
                    r.headers_mut().insert("etag", v);
                }
            }
            r
        }
        None => match crate::openapi::openapi_v3_custom_group_version(path) {
            Some((bytes, hash)) => {
                let mut r = (StatusCode::OK, bytes).into_response();
                r.headers_mut().insert("content-type", HeaderValue::from_static(crate::openapi::CONTENT_TYPE_JSON));
                if let Ok(v) = HeaderValue::from_str(&format!("\"{hash}\"")) {
                    r.headers_mut().insert("etag", v);
                }
                r
            }
            None => ApiError::path_not_found().into_response(),
        },
    }
}
