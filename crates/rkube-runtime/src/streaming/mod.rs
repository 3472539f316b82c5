//! The runtime's streaming server (upstream `pkg/kubelet/cri/streaming`, as CRI runtimes serve
//! it): CRI `Exec`, `Attach` and `PortForward` answer a one-time URL on this server; a client
//! (the kubelet, proxying `kubectl exec`/`attach`/`port-forward`) upgrades the connection there:
//!
//! - to a WebSocket with the channel protocol of [`channel`] ([`session`]), or the WebSocket
//!   port-forward protocol ([`portforward`]);
//! - to SPDY/3.1 (`Upgrade: SPDY/3.1`, the protocol named by `X-Stream-Protocol-Version`),
//!   client-go's protocol before 1.30 ([`spdy`], [`spdy_session`]);
//! - to a WebSocket carrying SPDY frames (`SPDY/3.1+portforward.k8s.io`, kubectl 1.31+'s
//!   port-forward tunnel).
//!
//! URLs are `http://<addr>/<exec|attach|portforward>/<token>`; a token is good for one connection within
//! [`TOKEN_TTL`] of the CRI call (upstream's request cache: one minute). The server listens on
//! loopback only (containerd's default `stream_server_address`), on a port the OS picks.
//! Unknown or expired tokens get 404; a request that is no WebSocket handshake gets 400.

pub mod channel;
pub mod portforward;
pub mod spdy;
pub mod spdy_session;
pub mod session;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request as WsRequest, Response as WsResponse};
use tokio_tungstenite::tungstenite::http::{HeaderValue, StatusCode};

use crate::exec::{ExecStreams, ExecTarget};
use crate::runtime::Runtime;
use channel::Protocol;

/// How long a URL handed out by `Exec`/`Attach` stays usable.
pub const TOKEN_TTL: Duration = Duration::from_secs(60);

/// A streaming request waiting for its client.
#[derive(Clone, Debug)]
pub enum Pending {
    /// `Exec`: run `cmd` in the container.
    Exec {
        /// The container.
        container_id: String,
        /// The command.
        cmd: Vec<String>,
        /// The streams asked for.
        streams: ExecStreams,
    },
    /// `Attach`: the container's own streams.
    Attach {
        /// The container.
        container_id: String,
        /// The streams asked for.
        streams: ExecStreams,
    },
    /// `PortForward`: TCP ports of the pod (the host's loopback).
    PortForward {
        /// The ports, in the order their channels are numbered.
        ports: Vec<u16>,
    },
}

impl Pending {
    /// The first path segment of its URL.
    fn kind(&self) -> &'static str {
        match self {
            Pending::Exec { .. } => "exec",
            Pending::Attach { .. } => "attach",
            Pending::PortForward { .. } => "portforward",
        }
    }
}

/// The streaming server: its address and the pending requests.
#[derive(Debug)]
pub struct StreamingServer {
    addr: SocketAddr,
    pending: Mutex<HashMap<String, (Instant, Pending)>>,
}

impl StreamingServer {
    /// Binds `127.0.0.1:0` and serves until `stopping` turns true.
    ///
    /// # Errors
    /// The address cannot be bound.
    pub async fn start(runtime: Arc<Runtime>, mut stopping: watch::Receiver<bool>) -> std::io::Result<Arc<Self>> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let server = Arc::new(Self { addr: listener.local_addr()?, pending: Mutex::new(HashMap::new()) });
        let this = Arc::clone(&server);
        tokio::spawn(async move {
            loop {
                let conn = tokio::select! {
                    c = listener.accept() => c,
                    _ = stopping.wait_for(|s| *s) => return,
                };
                match conn {
                    Ok((tcp, _)) => {
                        tokio::spawn(Arc::clone(&this).serve_conn(tcp, Arc::clone(&runtime)));
                    }
                    Err(err) => tracing::debug!(%err, "streaming server accept failed"),
                }
            }
        });
        tracing::info!(addr = %server.addr, "rkube runtime streaming server listening");
        Ok(server)
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Instant, Pending)>> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records `request` and returns its one-time URL (`http://<addr>/<kind>/<token>`).
    pub fn register(&self, request: Pending) -> String {
        let token = uuid::Uuid::new_v4().simple().to_string();
        let kind = request.kind();
        let mut pending = self.lock();
        let now = Instant::now();
        pending.retain(|_, (at, _)| now.duration_since(*at) < TOKEN_TTL);
        pending.insert(token.clone(), (now, request));
        format!("http://{}/{kind}/{token}", self.addr)
    }

    /// Takes the request of `path` (`/<kind>/<token>`) if it is pending and fresh.
    fn take(&self, path: &str) -> Option<Pending> {
        let (kind, token) = path.trim_start_matches('/').split_once('/')?;
        let mut pending = self.lock();
        let (at, request) = pending.remove(token)?;
        (request.kind() == kind && at.elapsed() < TOKEN_TTL).then_some(request)
    }

    async fn serve_conn(self: Arc<Self>, mut tcp: TcpStream, runtime: Arc<Runtime>) {
        if let Some(head) = peek_head(&tcp).await {
            if head.upgrade.to_ascii_lowercase().contains("spdy/3.1") {
                let mut consumed = vec![0u8; head.len];
                if tcp.read_exact(&mut consumed).await.is_ok() {
                    self.serve_spdy(tcp, head, runtime).await;
                }
                return;
            }
        }
        let mut chosen: Option<(Pending, Negotiated)> = None;
        let slot = &mut chosen;
        let server = &self;
        // The callback's signature is tungstenite's (`Callback`), error response included.
        #[allow(clippy::result_large_err)]
        let callback = move |req: &WsRequest, mut resp: WsResponse| -> Result<WsResponse, ErrorResponse> {
            let offers: Vec<&str> = req.headers().get_all("sec-websocket-protocol").iter().filter_map(|v| v.to_str().ok()).collect();
            let Some(request) = server.take(req.uri().path()) else {
                return Err(error_response(StatusCode::NOT_FOUND, "unknown or expired stream token".into()));
            };
            let tunnel = matches!(request, Pending::PortForward { .. })
                && offers.iter().flat_map(|o| o.split(',')).any(|o| o.trim() == SPDY_TUNNEL_PROTOCOL);
            let negotiated = if tunnel {
                resp.headers_mut().insert("sec-websocket-protocol", HeaderValue::from_static(SPDY_TUNNEL_PROTOCOL));
                Negotiated::SpdyTunnel
            } else {
                match Protocol::negotiate(offers.iter().copied()) {
                    Ok(p) => {
                        if let Some(p) = p {
                            resp.headers_mut().insert("sec-websocket-protocol", HeaderValue::from_static(p.name()));
                        }
                        Negotiated::Channels(p)
                    }
                    Err(offered) => {
                        return Err(error_response(StatusCode::BAD_REQUEST, format!("no supported protocol in {offered}")))
                    }
                }
            };
            *slot = Some((request, negotiated));
            Ok(resp)
        };
        let ws = match tokio_tungstenite::accept_hdr_async(tcp, callback).await {
            Ok(ws) => ws,
            Err(err) => {
                tracing::debug!(%err, "streaming handshake failed");
                return;
            }
        };
        let Some((request, negotiated)) = chosen else { return };
        let protocol = match negotiated {
            Negotiated::SpdyTunnel => {
                spdy_session::port_forward(websocket_bytes(ws)).await;
                return;
            }
            Negotiated::Channels(p) => p,
        };
        match request {
            Pending::Exec { container_id, cmd, streams } => {
                let target = runtime.exec_target(&container_id).map_err(|e| e.to_string());
                session::exec(session::websocket(ws, protocol), protocol, target, cmd, streams).await;
            }
            Pending::Attach { container_id, streams } => {
                let io = runtime.attach_io(&container_id).map_err(|e| e.to_string());
                session::attach(session::websocket(ws, protocol), protocol, io, streams).await;
            }
            Pending::PortForward { ports } => portforward::serve(ws, ports).await,
        }
    }

    /// An `Upgrade: SPDY/3.1` request whose head was read: answers 101 with the negotiated
    /// `X-Stream-Protocol-Version` and runs the session (see [`spdy_session`]).
    async fn serve_spdy(&self, mut tcp: TcpStream, head: Head, runtime: Arc<Runtime>) {
        let Some(request) = self.take(&head.path) else {
            let _ = tcp.write_all(&plain_response(404, "Not Found", "unknown or expired stream token")).await;
            return;
        };
        let offered: Vec<&str> = head.stream_protocols.iter().flat_map(|v| v.split(',')).map(str::trim).collect();
        let chosen = match &request {
            Pending::PortForward { .. } => offered.iter().find(|p| **p == PORT_FORWARD_PROTOCOL).map(|p| p.to_string()),
            _ => offered.iter().find_map(|p| Protocol::from_name(p)).map(|p| p.name().to_string()),
        };
        let Some(chosen) = chosen else {
            let msg = format!("unable to upgrade: unable to negotiate protocol: client supports {offered:?}");
            let _ = tcp.write_all(&plain_response(403, "Forbidden", &msg)).await;
            return;
        };
        let switching = format!(
            "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: {chosen}\r\n\r\n"
        );
        if tcp.write_all(switching.as_bytes()).await.is_err() {
            return;
        }
        let protocol = Protocol::from_name(&chosen);
        match request {
            Pending::Exec { container_id, cmd, streams } => {
                let target = runtime.exec_target(&container_id).map_err(|e| e.to_string());
                let transport = spdy_session::exec_transport(tcp, streams).await;
                session::exec(transport, protocol, target, cmd, streams).await;
            }
            Pending::Attach { container_id, streams } => {
                let io = runtime.attach_io(&container_id).map_err(|e| e.to_string());
                let transport = spdy_session::exec_transport(tcp, streams).await;
                session::attach(transport, protocol, io, streams).await;
            }
            Pending::PortForward { .. } => spdy_session::port_forward(tcp).await,
        }
    }
}

/// The WebSocket subprotocol of kubectl 1.31+'s port-forward: SPDY frames in binary messages.
pub const SPDY_TUNNEL_PROTOCOL: &str = "SPDY/3.1+portforward.k8s.io";
/// The `X-Stream-Protocol-Version` of SPDY port-forwarding.
pub const PORT_FORWARD_PROTOCOL: &str = "portforward.k8s.io";

/// What a WebSocket handshake agreed on.
enum Negotiated {
    /// The channel protocol (`None`: the client named none).
    Channels(Option<Protocol>),
    /// SPDY port-forwarding tunnelled in binary messages.
    SpdyTunnel,
}

/// The request head of a connection, as far as the dispatch needs it.
struct Head {
    /// Bytes of the head, final blank line included.
    len: usize,
    path: String,
    upgrade: String,
    stream_protocols: Vec<String>,
}

/// Reads (without consuming) the request head of `tcp`; `None` when none arrives within a few
/// seconds, it is larger than 16 KiB, or it does not parse.
async fn peek_head(tcp: &TcpStream) -> Option<Head> {
    let mut buf = vec![0u8; 16 * 1024];
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let n = tcp.peek(&mut buf).await.ok()?;
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut req = httparse::Request::new(&mut headers);
        match req.parse(&buf[..n]) {
            Ok(httparse::Status::Complete(len)) => {
                let values = |name: &str| -> Vec<String> {
                    req.headers
                        .iter()
                        .filter(|h| h.name.eq_ignore_ascii_case(name))
                        .filter_map(|h| std::str::from_utf8(h.value).ok().map(str::to_string))
                        .collect()
                };
                return Some(Head {
                    len,
                    path: req.path.unwrap_or("/").to_string(),
                    upgrade: values("upgrade").join(","),
                    stream_protocols: values("x-stream-protocol-version"),
                });
            }
            Ok(httparse::Status::Partial) if n < buf.len() && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            _ => return None,
        }
    }
}

/// A complete plain-text HTTP/1.1 response that closes the connection.
fn plain_response(code: u16, reason: &str, body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 {code} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// The bytes carried in a WebSocket's binary messages, as one duplex byte stream (kubectl's
/// tunnelled SPDY): each write becomes one binary message.
fn websocket_bytes(ws: tokio_tungstenite::WebSocketStream<TcpStream>) -> tokio::io::DuplexStream {
    use futures::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;
    let (ours, theirs) = tokio::io::duplex(256 * 1024);
    let (mut rd, mut wr) = tokio::io::split(theirs);
    let (mut sink, mut source) = ws.split();
    tokio::spawn(async move {
        while let Some(Ok(msg)) = source.next().await {
            match msg {
                Message::Binary(b) if wr.write_all(&b).await.is_err() => break,
                Message::Close(_) => break,
                _ => {}
            }
        }
        let _ = wr.shutdown().await;
    });
    tokio::spawn(async move {
        let mut buf = vec![0u8; 32 * 1024];
        loop {
            match rd.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if sink.send(Message::Binary(buf[..n].to_vec().into())).await.is_err() {
                        break;
                    }
                }
            }
        }
        let _ = sink.close().await;
    });
    ours
}

fn error_response(code: StatusCode, text: String) -> ErrorResponse {
    let mut resp = ErrorResponse::new(Some(text));
    *resp.status_mut() = code;
    resp
}

/// The target of an exec, as [`Runtime::exec_target`] reports it.
pub type TargetResult = Result<ExecTarget, String>;
