//! `/api/v1/nodes/<name>/proxy[/<path>]`: the `nodes/proxy` subresource (upstream
//! `pkg/registry/core/node/rest/proxy.go` and `ResourceLocation` in
//! `pkg/registry/core/node/strategy.go`).
//!
//! The request (method, body, `Content-Type`, `Accept`, query string) goes to the node's kubelet
//! at `https://<address>:<kubelet port>/<path>` — the address and port from the Node's status
//! ([`super::pod_log::kubelet_address`]) — with the API server's kubelet client certificate, and
//! the kubelet's answer (status code, `Content-Type`, body) streams back unchanged, as upstream's
//! proxy handler passes it through. A kubelet that cannot be reached is 503
//! `ServiceUnavailable`. Authorization is RBAC's `nodes/proxy` with the verb of the method
//! (`get`, `create`, `update`, `patch`, `delete`).

use axum::body::Body;
use axum::http::{header, Method, StatusCode};
use axum::response::Response;
use futures::TryStreamExt;

use super::pod_log::{kubelet_address, kubelet_client};
use super::Ctx;
use crate::error::{ApiError, ApiResult};

/// Headers of the client's request passed on to the kubelet.
const FORWARDED_HEADERS: &[header::HeaderName] = &[header::CONTENT_TYPE, header::ACCEPT];

/// The kubelet path of a `nodes/<name>/proxy/...` request: what follows `proxy` in `segments`
/// (the path after the group version, split on `/`), joined with `/`; `""` for the kubelet's root.
pub fn proxied_path(segments: &[&str]) -> String {
    let parts: Vec<&str> = segments.iter().copied().filter(|s| !s.is_empty()).collect();
    parts.get(3..).map(|rest| rest.join("/")).unwrap_or_default()
}

/// Serves a `nodes/<name>/proxy/<path>` request (see the module docs).
///
/// # Errors
/// 404 for an unknown node; 500 for a node without a kubelet address; 503 when the kubelet
/// cannot be reached.
pub async fn proxy(ctx: &Ctx, method: &Method, path: &str, body: Body) -> ApiResult<Response> {
    let node_name = ctx.name();
    let host_port = kubelet_address(&ctx.st, node_name).await?;
    let mut url = format!("https://{host_port}/{path}");
    if !ctx.raw_query.is_empty() {
        url.push('?');
        url.push_str(&ctx.raw_query);
    }
    let client = kubelet_client(&ctx.st)?;
    let body = crate::media::read_body(body).await?;
    let mut request = client.http.request(method.clone(), &url).body(body);
    for name in FORWARDED_HEADERS {
        for v in ctx.headers.get_all(name) {
            request = request.header(name.clone(), v.clone());
        }
    }
    let answer = request.send().await.map_err(|e| {
        rkube_api::status::Status::service_unavailable(format!("error trying to reach service: {e}"))
    })?;
    let code = StatusCode::from_u16(answer.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    let mut response = Response::builder().status(code);
    if let Some(ct) = answer.headers().get(header::CONTENT_TYPE) {
        response = response.header(header::CONTENT_TYPE, ct.clone());
    }
    let stream = answer.bytes_stream().map_err(std::io::Error::other);
    response.body(Body::from_stream(stream)).map_err(ApiError::internal)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_proxied_path_is_what_follows_proxy() {
        assert_eq!(proxied_path(&["nodes", "n1", "proxy", "stats", "summary"]), "stats/summary");
        assert_eq!(proxied_path(&["nodes", "n1", "proxy"]), "");
        assert_eq!(proxied_path(&["nodes", "n1", "proxy", "", "metrics", "resource"]), "metrics/resource");
    }
}
