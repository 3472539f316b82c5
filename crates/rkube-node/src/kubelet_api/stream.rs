//! `/exec/<namespace>/<pod>/<container>`, `/attach/...` and `/portForward/<namespace>/<pod>` of
//! the kubelet API (upstream kubelet's `getExec`, `getAttach`, `getPortForward`): asks the
//! runtime for a streaming URL (CRI `Exec`, `Attach`, `PortForward`) and proxies the client's upgrade request
//! to it, then splices the two connections ([`rkube_apiserver::splice`]; upstream kubelet's proxying
//! mode of `pkg/kubelet/cri/streaming`). The channel protocol is spoken by the runtime's
//! streaming server; this proxy does not look into the stream.
//!
//! Query parameters, as the API server sends them: `port` (port-forward: repeated or
//! comma-separated; required for the WebSocket channel protocol only, SPDY names ports per
//! stream); `command` (repeated, in order; exec only), `input`,
//! `output`, `error`, `tty` (`1` or `true` turns a stream on). Errors are plain text: 400 for
//! no command or no stream, 404 for an unknown pod or container, 500 when the runtime refuses,
//! and the runtime streaming server's own answer when it does not switch protocols.

use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::{header, HeaderMap, HeaderName, StatusCode};
use axum::response::Response;
use hyper_util::rt::TokioIo;
use rkube_runtime::cri;

use super::{instances, text, Ctx};
use crate::cri::{RuntimeApi as _, LABEL_POD_NAME, LABEL_POD_NAMESPACE};

/// Request headers of an upgrade passed on to the streaming server.
pub const UPGRADE_HEADERS: &[&str] = &[
    "upgrade",
    "connection",
    "sec-websocket-key",
    "sec-websocket-version",
    "sec-websocket-protocol",
    "sec-websocket-extensions",
    "x-stream-protocol-version",
];

/// The streaming options of `/exec` (kubelet's `remotecommand` options from the query).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExecQuery {
    /// The command and its arguments.
    pub command: Vec<String>,
    /// `input`.
    pub stdin: bool,
    /// `output`.
    pub stdout: bool,
    /// `error` (dropped with `tty`, as kubelet does: a terminal has one output).
    pub stderr: bool,
    /// `tty`.
    pub tty: bool,
}

impl ExecQuery {
    /// Decodes the query string of `/exec`.
    ///
    /// # Errors
    /// The message of a 400: no command, or no stream asked for.
    pub fn parse(query: &str) -> Result<Self, String> {
        let q = Self::parse_streams(query)?;
        if q.command.is_empty() {
            return Err("you must specify at least 1 command".into());
        }
        Ok(q)
    }

    /// Decodes the query string of `/attach` (no command).
    ///
    /// # Errors
    /// The message of a 400: no stream asked for.
    pub fn parse_streams(query: &str) -> Result<Self, String> {
        let mut q = ExecQuery::default();
        for (k, v) in form_urlencoded::parse(query.as_bytes()) {
            let on = matches!(v.as_ref(), "1" | "true" | "True" | "TRUE" | "t" | "T");
            match k.as_ref() {
                "command" => q.command.push(v.into_owned()),
                "input" => q.stdin = on,
                "output" => q.stdout = on,
                "error" => q.stderr = on,
                "tty" => q.tty = on,
                _ => {}
            }
        }
        if !(q.stdin || q.stdout || q.stderr) {
            return Err("you must specify at least 1 of stdin, stdout, stderr".into());
        }
        q.stderr &= !q.tty;
        Ok(q)
    }
}

/// Serves `/exec/<namespace>/<pod>/<container>` (see the module docs).
pub(crate) async fn exec(
    State(ctx): State<Ctx>,
    Path((namespace, pod, container)): Path<(String, String, String)>,
    req: Request,
) -> Response {
    let query = match ExecQuery::parse(req.uri().query().unwrap_or("")) {
        Ok(q) => q,
        Err(msg) => return text(StatusCode::BAD_REQUEST, msg),
    };
    let id = match running_container(&ctx, &namespace, &pod, &container).await {
        Ok(id) => id,
        Err(resp) => return *resp,
    };
    let exec = cri::ExecRequest {
        container_id: id,
        cmd: query.command,
        tty: query.tty,
        stdin: query.stdin,
        stdout: query.stdout,
        stderr: query.stderr,
    };
    match ctx.cri.exec(exec).await {
        Ok(url) => proxy_upgrade(req, &url).await,
        Err(err) => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("error executing command in container: {err}"),
        ),
    }
}

/// Serves `/attach/<namespace>/<pod>/<container>` (CRI `Attach`; the module docs, without a
/// command).
pub(crate) async fn attach(
    State(ctx): State<Ctx>,
    Path((namespace, pod, container)): Path<(String, String, String)>,
    req: Request,
) -> Response {
    let query = match ExecQuery::parse_streams(req.uri().query().unwrap_or("")) {
        Ok(q) => q,
        Err(msg) => return text(StatusCode::BAD_REQUEST, msg),
    };
    let id = match running_container(&ctx, &namespace, &pod, &container).await {
        Ok(id) => id,
        Err(resp) => return *resp,
    };
    let attach = cri::AttachRequest {
        container_id: id,
        stdin: query.stdin,
        tty: query.tty,
        stdout: query.stdout,
        stderr: query.stderr,
    };
    match ctx.cri.attach(attach).await {
        Ok(url) => proxy_upgrade(req, &url).await,
        Err(err) => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("error attaching to container: {err}"),
        ),
    }
}

/// The ports of `/portForward` (kubelet's `port` parameters, each a comma-separated list).
///
/// # Errors
/// The message of a 400, in upstream kubelet's words.
pub fn parse_ports(query: &str) -> Result<Vec<i32>, String> {
    let mut ports = Vec::new();
    for (k, v) in form_urlencoded::parse(query.as_bytes()) {
        if k != "port" {
            continue;
        }
        if v.is_empty() {
            return Err("query parameter \"port\" cannot be empty".into());
        }
        for p in v.split(',') {
            let port: u16 = p
                .trim()
                .parse()
                .map_err(|_| format!("unable to parse {v:?} as a port"))?;
            if port < 1 {
                return Err(format!("port {v:?} must be > 0"));
            }
            ports.push(i32::from(port));
        }
    }
    Ok(ports)
}

/// Whether the request asks for the WebSocket channel port-forward protocol, whose ports must
/// be in the query (SPDY clients, tunnelled or not, name them per stream).
fn needs_query_ports(headers: &HeaderMap) -> bool {
    let websocket = headers
        .get_all(header::UPGRADE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.eq_ignore_ascii_case("websocket"));
    let tunnel = headers
        .get_all(header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|p| p.trim().starts_with("SPDY/"));
    websocket && !tunnel
}

/// Serves `/portForward/<namespace>/<pod>` (CRI `PortForward` on the pod's ready sandbox).
pub(crate) async fn port_forward(
    State(ctx): State<Ctx>,
    Path((namespace, pod)): Path<(String, String)>,
    req: Request,
) -> Response {
    let ports = match parse_ports(req.uri().query().unwrap_or("")) {
        Ok(p) if p.is_empty() && needs_query_ports(req.headers()) => {
            return text(
                StatusCode::BAD_REQUEST,
                "query parameter \"port\" is required",
            )
        }
        Ok(p) => p,
        Err(msg) => return text(StatusCode::BAD_REQUEST, msg),
    };
    let sandboxes = match ctx.cri.list_pod_sandbox().await {
        Ok(all) => all,
        Err(err) => {
            return text(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("listing pod sandboxes: {err}"),
            )
        }
    };
    let ready = sandboxes.into_iter().find(|s| {
        s.state == cri::PodSandboxState::SandboxReady as i32
            && s.labels.get(LABEL_POD_NAMESPACE).map(String::as_str) == Some(namespace.as_str())
            && s.labels.get(LABEL_POD_NAME).map(String::as_str) == Some(pod.as_str())
    });
    let Some(sandbox) = ready else {
        return text(StatusCode::NOT_FOUND, "pod does not exist");
    };
    match ctx
        .cri
        .port_forward(cri::PortForwardRequest {
            pod_sandbox_id: sandbox.id,
            port: ports,
        })
        .await
    {
        Ok(url) => proxy_upgrade(req, &url).await,
        Err(err) => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("error forwarding ports: {err}"),
        ),
    }
}

/// The id of the running instance of the pod's container, or the 404 / 500 to answer.
pub(crate) async fn running_container(
    ctx: &Ctx,
    namespace: &str,
    pod: &str,
    container: &str,
) -> Result<String, Box<Response>> {
    let all = match ctx.cri.list_containers().await {
        Ok(all) => all,
        Err(err) => {
            return Err(Box::new(text(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("listing containers: {err}"),
            )))
        }
    };
    let (pod_known, found) = instances(all, namespace, pod, container);
    if !pod_known {
        return Err(Box::new(text(StatusCode::NOT_FOUND, "pod does not exist")));
    }
    match found
        .iter()
        .find(|c| c.state == cri::ContainerState::ContainerRunning as i32)
    {
        Some(c) => Ok(c.id.clone()),
        None => Err(Box::new(text(
            StatusCode::NOT_FOUND,
            format!("container not found ({container:?})"),
        ))),
    }
}

/// Sends `req`'s upgrade to `target` (an `http://` URL) and, once it switches protocols,
/// answers the client with the same 101 and splices the two connections.
pub async fn proxy_upgrade(mut req: Request, target: &str) -> Response {
    let uri: http::Uri = match target.parse() {
        Ok(u) => u,
        Err(err) => {
            return text(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("bad streaming URL {target:?}: {err}"),
            )
        }
    };
    let Some(authority) = uri.authority().map(|a| a.as_str().to_string()) else {
        return text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("bad streaming URL {target:?}"),
        );
    };
    let path = uri.path_and_query().map_or("/", |p| p.as_str()).to_string();
    let tcp = match tokio::net::TcpStream::connect(&authority).await {
        Ok(t) => t,
        Err(err) => {
            return text(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("connecting to the streaming server: {err}"),
            )
        }
    };
    let (mut sender, conn) = match hyper::client::conn::http1::handshake(TokioIo::new(tcp)).await {
        Ok(pair) => pair,
        Err(err) => {
            return text(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("streaming server: {err}"),
            )
        }
    };
    tokio::spawn(async move {
        if let Err(err) = conn.with_upgrades().await {
            tracing::debug!(%err, "streaming server connection ended");
        }
    });
    let mut upstream = http::Request::builder()
        .method(req.method().clone())
        .uri(path)
        .header(header::HOST, &authority);
    if let Some(headers) = upstream.headers_mut() {
        copy_headers(req.headers(), headers, UPGRADE_HEADERS);
    }
    let upstream = match upstream.body(Body::empty()) {
        Ok(r) => r,
        Err(err) => return text(StatusCode::INTERNAL_SERVER_ERROR, err.to_string()),
    };
    let mut answer = match sender.send_request(upstream).await {
        Ok(a) => a,
        Err(err) => {
            return text(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("streaming server: {err}"),
            )
        }
    };
    if answer.status() != StatusCode::SWITCHING_PROTOCOLS {
        let code = answer.status();
        let body = http_body_util::BodyExt::collect(answer.into_body())
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        return text(code, String::from_utf8_lossy(&body).into_owned());
    }
    let mut response = Response::builder().status(StatusCode::SWITCHING_PROTOCOLS);
    if let Some(headers) = response.headers_mut() {
        for (k, v) in answer.headers() {
            headers.append(k, v.clone());
        }
    }
    let client_side = hyper::upgrade::on(&mut req);
    let runtime_side = hyper::upgrade::on(&mut answer);
    tokio::spawn(async move {
        let (client, runtime) = match tokio::try_join!(client_side, runtime_side) {
            Ok(pair) => pair,
            Err(err) => {
                tracing::debug!(%err, "stream upgrade failed");
                return;
            }
        };
        let spliced =
            rkube_apiserver::splice::splice(TokioIo::new(client), TokioIo::new(runtime)).await;
        tracing::debug!(?spliced, "stream ended");
    });
    response
        .body(Body::empty())
        .unwrap_or_else(|_| text(StatusCode::INTERNAL_SERVER_ERROR, "building the response"))
}

/// Appends every value of each header in `names` from `from` to `to`.
pub fn copy_headers(from: &HeaderMap, to: &mut HeaderMap, names: &[&str]) {
    for name in names {
        let Ok(name) = HeaderName::from_bytes(name.as_bytes()) else {
            continue;
        };
        for v in from.get_all(&name) {
            to.append(name.clone(), v.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exec_query_takes_the_commands_in_order_and_needs_a_stream() {
        let q = ExecQuery::parse("command=sh&command=-c&command=echo%20hi&output=1&error=1")
            .expect("valid");
        assert_eq!(q.command, vec!["sh", "-c", "echo hi"]);
        assert!(q.stdout && q.stderr && !q.stdin && !q.tty);
        let q = ExecQuery::parse("command=sh&input=1&output=1&error=1&tty=1").expect("valid");
        assert!(
            q.tty && q.stdin && !q.stderr,
            "a terminal has no separate stderr"
        );
        assert_eq!(
            ExecQuery::parse("output=1"),
            Err("you must specify at least 1 command".into())
        );
        assert_eq!(
            ExecQuery::parse("command=ls"),
            Err("you must specify at least 1 of stdin, stdout, stderr".into())
        );
        assert_eq!(
            parse_ports("port=80&port=8080,9090"),
            Ok(vec![80, 8080, 9090])
        );
        assert_eq!(
            parse_ports(""),
            Ok(vec![]),
            "SPDY clients name ports per stream"
        );
        let mut h = HeaderMap::new();
        h.insert(header::UPGRADE, "websocket".parse().expect("value"));
        assert!(needs_query_ports(&h));
        h.insert(
            header::SEC_WEBSOCKET_PROTOCOL,
            "SPDY/3.1+portforward.k8s.io".parse().expect("value"),
        );
        assert!(!needs_query_ports(&h), "kubectl's tunnelled SPDY");
        assert!(!needs_query_ports(&HeaderMap::new()));
        assert_eq!(
            parse_ports("port=x"),
            Err("unable to parse \"x\" as a port".into())
        );
        assert_eq!(parse_ports("port=0"), Err("port \"0\" must be > 0".into()));
        let attach = ExecQuery::parse_streams("input=1&output=1").expect("attach takes no command");
        assert!(attach.command.is_empty() && attach.stdin && attach.stdout);
    }
}
