//! `GET|POST /api/v1/namespaces/<ns>/pods/<name>/exec`, `.../attach` and `.../portforward`: the
//! `pods/exec`, `pods/attach` and `pods/portforward` subresources (upstream `ExecREST`,
//! `AttachREST`, `PortForwardREST` in `pkg/registry/core/pod/rest/subresources.go` and
//! `ExecLocation`, `AttachLocation`, `PortForwardLocation` in
//! `pkg/registry/core/pod/strategy.go`), proxied to the kubelet of the pod's node.
//! Port-forward takes no container; its `ports` become kubelet `port` parameters.
//!
//! The container is chosen as for `pods/log` (400s of upstream's `ValidateContainer`), the pod
//! must be on a node (400 `pod <name> does not have a host assigned`); the client's upgrade
//! request (WebSocket or SPDY/3.1, with its `Upgrade`, `Connection`, `Sec-WebSocket-*` and
//! `X-Stream-Protocol-Version` headers) goes to `/exec/<ns>/<pod>/<container>` (or `/attach/...`)
//! on the kubelet with the `PodExecOptions` (`PodAttachOptions`) as kubelet parameters
//! (`command`..., `input`, `output`, `error`, `tty`), authenticated with the API server's kubelet client certificate. Once the kubelet
//! switches protocols, the client gets the same 101 and the two connections are spliced
//! (upstream's `UpgradeAwareHandler`); the channel protocol passes through untouched.
//!
//! Every protocol passes through (WebSocket channels, SPDY/3.1, kubectl 1.31+'s SPDY tunnelled
//! in a WebSocket); a request without `Upgrade` is a 400 `Upgrade request required`. A kubelet
//! error comes back as a `Status` with its code and text.

use axum::body::Body;
use axum::http::{HeaderName, Method, StatusCode};
use axum::response::Response;
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;

use super::pod_log::{choose_container, kubelet_address, kubelet_client, status_for};
use super::Ctx;
use crate::error::{ApiError, ApiResult};

/// Request headers of an upgrade passed on to the kubelet.
pub const UPGRADE_HEADERS: &[&str] = &[
    "upgrade",
    "connection",
    "sec-websocket-key",
    "sec-websocket-version",
    "sec-websocket-protocol",
    "sec-websocket-extensions",
    "x-stream-protocol-version",
];

fn truthy(v: Option<&str>) -> bool {
    matches!(v, Some("true" | "1" | "t" | "T" | "True" | "TRUE"))
}

/// The kubelet query of an exec: `PodExecOptions` (`command`, `stdin`, `stdout`, `stderr`,
/// `tty`) in kubelet's names (`command`, `input`, `output`, `error`, `tty`).
pub fn kubelet_exec_query(query: &[(String, String)]) -> String {
    let last = |k: &str| {
        query
            .iter()
            .rev()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.as_str())
    };
    let mut out = form_urlencoded::Serializer::new(String::new());
    for (_, c) in query.iter().filter(|(k, _)| k == "command") {
        out.append_pair("command", c);
    }
    for (theirs, kubelets) in [
        ("stdin", "input"),
        ("stdout", "output"),
        ("stderr", "error"),
        ("tty", "tty"),
    ] {
        if truthy(last(theirs)) {
            out.append_pair(kubelets, "1");
        }
    }
    out.finish()
}

/// The kubelet query of an attach: `PodAttachOptions` (`stdin`, `stdout`, `stderr`, `tty`) in
/// kubelet's names.
pub fn kubelet_attach_query(query: &[(String, String)]) -> String {
    let no_command: Vec<(String, String)> = query
        .iter()
        .filter(|(k, _)| k != "command")
        .cloned()
        .collect();
    kubelet_exec_query(&no_command)
}

/// A streaming subresource of pods.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    /// `pods/exec` → kubelet `/exec`.
    Exec,
    /// `pods/attach` → kubelet `/attach`.
    Attach,
    /// `pods/portforward` → kubelet `/portForward`.
    PortForward,
}

/// The kubelet query of a port-forward: `PodPortForwardOptions.ports` (repeated or
/// comma-separated) as kubelet's `port` parameters.
pub fn kubelet_port_forward_query(query: &[(String, String)]) -> String {
    let mut out = form_urlencoded::Serializer::new(String::new());
    for (_, v) in query.iter().filter(|(k, _)| k == "ports") {
        for p in v.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            out.append_pair("port", p);
        }
    }
    out.finish()
}

/// Serves `pods/exec` or `pods/attach` (see the module docs); `upgrade` is the client
/// connection's pending upgrade.
///
/// # Errors
/// 404 for a missing pod; the 400s above; a kubelet error's code; 500 when the kubelet cannot be
/// reached.
pub async fn connect(
    ctx: &Ctx,
    method: &Method,
    upgrade: Option<OnUpgrade>,
    stream: Stream,
) -> ApiResult<Response> {
    let name = ctx.name();
    let (pod, _) = ctx
        .load(&ctx.key(name), name)
        .await?
        .ok_or_else(|| ApiError::not_found(ctx.ri.info, name))?;
    let container = match stream {
        Stream::PortForward => String::new(),
        _ => choose_container(&pod, ctx.q("container"))?,
    };
    let node_name = pod["spec"]["nodeName"].as_str().unwrap_or("");
    if node_name.is_empty() {
        return Err(ApiError::bad_request(format!(
            "pod {name} does not have a host assigned"
        )));
    }
    if ctx.headers.get("upgrade").is_none() {
        return Err(ApiError::bad_request("Upgrade request required"));
    }
    let upgrade = upgrade.ok_or_else(|| {
        ApiError::bad_request("the connection cannot be upgraded (HTTP/1.1 is required)")
    })?;
    let host_port = kubelet_address(&ctx.st, node_name).await?;
    let ns = ctx.namespace();
    let (path, url) = match stream {
        Stream::Exec => (
            "exec",
            format!(
                "https://{host_port}/exec/{ns}/{name}/{container}?{}",
                kubelet_exec_query(&ctx.query)
            ),
        ),
        Stream::Attach => (
            "attach",
            format!(
                "https://{host_port}/attach/{ns}/{name}/{container}?{}",
                kubelet_attach_query(&ctx.query)
            ),
        ),
        Stream::PortForward => (
            "portforward",
            format!(
                "https://{host_port}/portForward/{ns}/{name}?{}",
                kubelet_port_forward_query(&ctx.query)
            ),
        ),
    };
    let client = kubelet_client(&ctx.st)?;
    let mut request = client.http.request(method.clone(), &url);
    for name in UPGRADE_HEADERS {
        let Ok(header) = HeaderName::from_bytes(name.as_bytes()) else {
            continue;
        };
        for v in ctx.headers.get_all(&header) {
            request = request.header(header.clone(), v.clone());
        }
    }
    let answer = request
        .send()
        .await
        .map_err(|e| ApiError::internal(format!("{method} {url:?}: {e}")))?;
    if answer.status() != StatusCode::SWITCHING_PROTOCOLS {
        let code = answer.status().as_u16();
        let body = answer.bytes().await.unwrap_or_default();
        return Err(status_for(
            code,
            &String::from_utf8_lossy(&body[..body.len().min(1024)]),
        ));
    }
    let mut response = Response::builder().status(StatusCode::SWITCHING_PROTOCOLS);
    if let Some(headers) = response.headers_mut() {
        for (k, v) in answer.headers() {
            headers.append(k, v.clone());
        }
    }
    tokio::spawn(async move {
        let kubelet = answer.upgrade();
        let (client, kubelet) = match tokio::join!(upgrade, kubelet) {
            (Ok(c), Ok(k)) => (c, k),
            (c, k) => {
                tracing::debug!(client = ?c.err(), kubelet = ?k.err(), "pods/{path} upgrade failed");
                return;
            }
        };
        let spliced = crate::splice::splice(TokioIo::new(client), kubelet).await;
        tracing::debug!(?spliced, "pods/{path} stream ended");
    });
    response.body(Body::empty()).map_err(ApiError::internal)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exec_options_become_kubelet_parameters() {
        let q = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<Vec<_>>()
        };
        let query = q(&[
            ("command", "sh"),
            ("command", "-c"),
            ("command", "echo a&b"),
            ("stdout", "true"),
            ("stderr", "1"),
            ("stdin", "false"),
        ]);
        assert_eq!(
            kubelet_exec_query(&query),
            "command=sh&command=-c&command=echo+a%26b&output=1&error=1"
        );
        assert_eq!(
            kubelet_exec_query(&q(&[("command", "ls"), ("stdin", "true"), ("tty", "true")])),
            "command=ls&input=1&tty=1"
        );
        assert_eq!(
            kubelet_attach_query(&q(&[
                ("command", "ls"),
                ("stdin", "true"),
                ("stdout", "true")
            ])),
            "input=1&output=1"
        );
        assert_eq!(
            kubelet_port_forward_query(&q(&[("ports", "80,8080"), ("ports", "9090")])),
            "port=80&port=8080&port=9090"
        );
    }
}
