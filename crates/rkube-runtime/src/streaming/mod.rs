//! The runtime's streaming server (upstream `pkg/kubelet/cri/streaming`, as CRI runtimes serve
//! it): CRI `Exec`, `Attach` and `PortForward` answer a one-time URL on this server; a client
//! (the kubelet, proxying `kubectl exec`/`attach` or a port-forward) opens a WebSocket there and
//! speaks the channel protocol of [`channel`] with the process ([`session`]), or the port-forward
//! protocol of [`portforward`].
//!
//! URLs are `http://<addr>/<exec|attach|portforward>/<token>`; a token is good for one connection within
//! [`TOKEN_TTL`] of the CRI call (upstream's request cache: one minute). The server listens on
//! loopback only (containerd's default `stream_server_address`), on a port the OS picks.
//! Unknown or expired tokens get 404; a request that is no WebSocket handshake gets 400.

pub mod channel;
pub mod portforward;
pub mod session;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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

    async fn serve_conn(self: Arc<Self>, tcp: TcpStream, runtime: Arc<Runtime>) {
        let mut chosen: Option<(Pending, Option<Protocol>)> = None;
        let slot = &mut chosen;
        let server = &self;
        // The callback's signature is tungstenite's (`Callback`), error response included.
        #[allow(clippy::result_large_err)]
        let callback = move |req: &WsRequest, mut resp: WsResponse| -> Result<WsResponse, ErrorResponse> {
            let offers = req.headers().get_all("sec-websocket-protocol").iter().filter_map(|v| v.to_str().ok());
            let protocol = match Protocol::negotiate(offers) {
                Ok(p) => p,
                Err(offered) => return Err(error_response(StatusCode::BAD_REQUEST, format!("no supported protocol in {offered}"))),
            };
            let Some(request) = server.take(req.uri().path()) else {
                return Err(error_response(StatusCode::NOT_FOUND, "unknown or expired stream token".into()));
            };
            if let Some(p) = protocol {
                resp.headers_mut().insert("sec-websocket-protocol", HeaderValue::from_static(p.name()));
            }
            *slot = Some((request, protocol));
            Ok(resp)
        };
        let ws = match tokio_tungstenite::accept_hdr_async(tcp, callback).await {
            Ok(ws) => ws,
            Err(err) => {
                tracing::debug!(%err, "streaming handshake failed");
                return;
            }
        };
        let Some((request, protocol)) = chosen else { return };
        match request {
            Pending::Exec { container_id, cmd, streams } => {
                let target = runtime.exec_target(&container_id).map_err(|e| e.to_string());
                session::exec(ws, protocol, target, cmd, streams).await;
            }
            Pending::Attach { container_id, streams } => {
                let io = runtime.attach_io(&container_id).map_err(|e| e.to_string());
                session::attach(ws, protocol, io, streams).await;
            }
            Pending::PortForward { ports } => portforward::serve(ws, ports).await,
        }
    }
}

fn error_response(code: StatusCode, text: String) -> ErrorResponse {
    let mut resp = ErrorResponse::new(Some(text));
    *resp.status_mut() = code;
    resp
}

/// The target of an exec, as [`Runtime::exec_target`] reports it.
pub type TargetResult = Result<ExecTarget, String>;
