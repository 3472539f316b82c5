//! One exec or attach over one WebSocket (upstream kubelet's `ServeExec` and `ServeAttach` over
//! `wsstream`); the order below is exec's, attach is described at [`attach`].
//!
//! Order of events: the process is started; an empty message on the lowest channel the server
//! writes (stdout, else stderr, else error) tells the client the stream is up; output is sent
//! as it is read; stdin messages are written to the process, a v5 close of channel 0 (or the
//! client going away) closes its stdin; resize messages set the terminal's size. When the
//! process has exited and its output is drained (bounded by [`OUTPUT_DRAIN`], for background
//! processes that keep the pipes open), the outcome goes on the error channel and the
//! WebSocket is closed normally. A client that goes away with a terminal hangs it up (the
//! process gets `SIGHUP`).

use std::time::Duration;

use futures::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

use super::channel::{self, Incoming, Outcome, Protocol};
use super::TargetResult;
use crate::exec::{self, ExecStreams, Pty};
use crate::process;

/// How long after the handshake the first message waits. client-go's WebSocket client (kubectl
/// 1.30+) starts reading before it has registered its streams and drops messages for streams
/// it does not know yet ("Unknown stream id"), so output sent at once after the handshake can
/// be lost, the exit status with it. Runtimes that take longer to start a process never meet
/// this; here a fast command would.
pub const CLIENT_SETUP_HOLD: Duration = Duration::from_millis(50);

/// How long output is still read after the process exited.
pub const OUTPUT_DRAIN: Duration = Duration::from_secs(2);

/// Where stdin bytes go.
enum StdinSink {
    Pipe(tokio::process::ChildStdin),
    Pty(std::sync::Arc<Pty>),
}

/// A client connection as the sessions see it, whatever carries it (a WebSocket, SPDY
/// streams): channel-framed messages out (`[channel, data...]`; dropping every sender ends
/// the connection normally), decoded client messages in (`None` once the client is gone), and
/// the task that finishes once everything sent was delivered.
pub struct Transport {
    /// Messages to the client.
    pub out: mpsc::Sender<Vec<u8>>,
    /// Messages from the client.
    pub input: mpsc::Receiver<Incoming>,
    /// Ends when the connection is done.
    pub done: tokio::task::JoinHandle<()>,
}

/// The transport of a WebSocket speaking `protocol`.
pub fn websocket(ws: WebSocketStream<TcpStream>, protocol: Option<Protocol>) -> Transport {
    let (sink, mut source) = ws.split();
    let (in_tx, input) = mpsc::channel(32);
    // Reads until the client's close (or end of stream), also once nobody takes its messages:
    // the socket is dropped after the client's close reply, not with the reply unread (a
    // socket closed with unread bytes is reset, and a reset can discard what the client had
    // not read yet: the exit status).
    let reader = tokio::spawn(async move {
        let mut forward = true;
        while let Some(msg) = source.next().await {
            let data = match msg {
                Ok(Message::Binary(b)) => b.to_vec(),
                Ok(Message::Text(t)) => t.as_bytes().to_vec(),
                Ok(Message::Close(_)) | Err(_) => break,
                Ok(_) => continue,
            };
            if forward && in_tx.send(channel::decode(protocol, &data)).await.is_err() {
                forward = false;
            }
        }
    });
    let (out, done) = spawn_writer(sink, reader);
    Transport { out, input, done }
}

/// Runs `cmd` in the target container and streams it over `transport` (see the module docs);
/// `protocol` decides the error channel's format.
pub async fn exec(
    transport: Transport,
    protocol: Option<Protocol>,
    target: TargetResult,
    cmd: Vec<String>,
    streams: ExecStreams,
) {
    let Transport {
        out: out_tx,
        input: mut source,
        done: writer,
    } = transport;
    let spawned = target.and_then(|t| exec::spawn(&t, &cmd, streams).map_err(|e| e.to_string()));
    let exec::Spawned { mut child, pty } = match spawned {
        Ok(s) => s,
        Err(err) => {
            if let Some(payload) = channel::error_payload(protocol, &Outcome::Failed(err)) {
                let _ = out_tx.send(channel::frame(channel::ERROR, &payload)).await;
            }
            drop(out_tx);
            let _ = writer.await;
            return;
        }
    };
    let _ = out_tx.send(ready_frame(streams)).await;

    let pty = pty.map(std::sync::Arc::new);
    let mut pumps = Vec::new();
    if let Some(pty) = &pty {
        let (pty, tx) = (std::sync::Arc::clone(pty), out_tx.clone());
        pumps.push(tokio::spawn(async move {
            let mut buf = vec![0u8; 32 * 1024];
            while let Ok(n) = pty.read(&mut buf).await {
                if n == 0
                    || tx
                        .send(channel::frame(channel::STDOUT, &buf[..n]))
                        .await
                        .is_err()
                {
                    break;
                }
            }
        }));
    } else {
        if let Some(out) = child.stdout.take() {
            pumps.push(tokio::spawn(pump(out, channel::STDOUT, out_tx.clone())));
        }
        if let Some(err) = child.stderr.take() {
            pumps.push(tokio::spawn(pump(err, channel::STDERR, out_tx.clone())));
        }
    }
    let stdin = match (&pty, child.stdin.take()) {
        (Some(pty), _) if streams.stdin => Some(StdinSink::Pty(std::sync::Arc::clone(pty))),
        (None, Some(pipe)) => Some(StdinSink::Pipe(pipe)),
        _ => None,
    };
    let resize_target = pty.clone();
    let mut reader = tokio::spawn(async move {
        let mut stdin = stdin;
        while let Some(msg) = source.recv().await {
            match msg {
                Incoming::Stdin(bytes) => {
                    let ok = match stdin.as_mut() {
                        Some(StdinSink::Pipe(p)) => p.write_all(&bytes).await.is_ok(),
                        Some(StdinSink::Pty(p)) => p.write_all(&bytes).await.is_ok(),
                        None => true,
                    };
                    if !ok {
                        stdin = None;
                    }
                }
                Incoming::Close(channel::STDIN) => {
                    // A terminal ends input with its EOF character, as a user's Ctrl-D.
                    if let Some(StdinSink::Pty(p)) = &stdin {
                        let _ = p.write_all(&[4]).await;
                    }
                    stdin = None;
                }
                Incoming::Resize(sizes) => {
                    if let (Some(pty), Some(last)) = (&resize_target, sizes.last()) {
                        if let Err(err) = pty.resize(last.width, last.height) {
                            tracing::debug!(%err, "terminal resize failed");
                        }
                    }
                }
                Incoming::Close(_) | Incoming::Ignored => {}
            }
        }
    });

    let pid = child.id().and_then(|p| i32::try_from(p).ok());
    let status = tokio::select! {
        status = child.wait() => status,
        _ = &mut reader => {
            // The client went away. A terminal hangs up (SIGHUP, as when a terminal closes);
            // without one, stdin is closed already and the command runs to its end.
            if let (true, Some(pid)) = (streams.tty, pid) {
                // SAFETY: kill(2) on the process we started and have not reaped yet.
                unsafe { libc::kill(pid, libc::SIGHUP) };
            }
            child.wait().await
        }
    };
    let code = status.map(|s| process::exit_code(&s)).unwrap_or(255);
    let aborts: Vec<_> = pumps
        .iter()
        .map(tokio::task::JoinHandle::abort_handle)
        .collect();
    let _ = tokio::time::timeout(OUTPUT_DRAIN, futures::future::join_all(pumps)).await;
    for pump in aborts {
        pump.abort();
    }
    reader.abort();
    let outcome = if code == 0 {
        Outcome::Success
    } else {
        Outcome::Exited { command: cmd, code }
    };
    if let Some(payload) = channel::error_payload(protocol, &outcome) {
        let _ = out_tx.send(channel::frame(channel::ERROR, &payload)).await;
    }
    drop(out_tx);
    let _ = writer.await;
}

type Sink = futures::stream::SplitSink<WebSocketStream<TcpStream>, Message>;

/// How long the client has to answer the server's close before its socket is dropped.
pub const CLOSE_REPLY_WAIT: Duration = Duration::from_secs(2);

/// A task sending each queued message as one binary WebSocket message; when every sender is
/// gone it closes the WebSocket normally (clients read a close without a status code, 1005,
/// as an error) and waits up to [`CLOSE_REPLY_WAIT`] for `reader` to see the client's close.
fn spawn_writer(
    mut sink: Sink,
    mut reader: tokio::task::JoinHandle<()>,
) -> (mpsc::Sender<Vec<u8>>, tokio::task::JoinHandle<()>) {
    let (out_tx, mut out_rx) = mpsc::channel::<Vec<u8>>(32);
    let first_send = tokio::time::Instant::now() + CLIENT_SETUP_HOLD;
    let writer = tokio::spawn(async move {
        while let Some(msg) = out_rx.recv().await {
            tokio::time::sleep_until(first_send).await;
            if sink.send(Message::Binary(msg.into())).await.is_err() {
                reader.abort();
                return;
            }
        }
        let normal = CloseFrame {
            code: CloseCode::Normal,
            reason: "".into(),
        };
        let _ = sink.send(Message::Close(Some(normal))).await;
        let _ = sink.flush().await;
        if tokio::time::timeout(CLOSE_REPLY_WAIT, &mut reader)
            .await
            .is_err()
        {
            reader.abort();
        }
        let _ = sink.close().await;
    });
    (out_tx, writer)
}

/// The first message: empty, on the lowest channel the server writes (upstream's readiness
/// signal).
fn ready_frame(streams: ExecStreams) -> Vec<u8> {
    let channel = if streams.stdout || streams.tty {
        channel::STDOUT
    } else if streams.stderr {
        channel::STDERR
    } else {
        channel::ERROR
    };
    vec![channel]
}

/// Attaches a client to a running container's streams over `transport` (upstream kubelet's
/// `ServeAttach`): output written from now on goes to the client on the channels it asked for;
/// its stdin messages go to the container's stdin (its terminal with `tty`, which resize
/// messages also size); the session ends when the container exits
/// (after its last output) or the client goes away, with a `Success` status. A client that
/// wrote stdin and detaches closes the container's stdin when the spec says `stdinOnce`.
pub async fn attach(
    transport: Transport,
    protocol: Option<Protocol>,
    io: Result<
        (
            std::sync::Arc<crate::attach::AttachIo>,
            tokio::sync::watch::Receiver<bool>,
        ),
        String,
    >,
    streams: ExecStreams,
) {
    let Transport {
        out: out_tx,
        input: mut source,
        done: writer,
    } = transport;
    let (hub, mut exited) = match io {
        Ok(pair) => pair,
        Err(err) => {
            if let Some(payload) = channel::error_payload(protocol, &Outcome::Failed(err)) {
                let _ = out_tx.send(channel::frame(channel::ERROR, &payload)).await;
            }
            drop(out_tx);
            let _ = writer.await;
            return;
        }
    };
    let mut output = hub.subscribe();
    let _ = out_tx.send(ready_frame(streams)).await;
    let wants = move |ch: u8| {
        (ch == channel::STDOUT && streams.stdout)
            || (ch == channel::STDERR && (streams.stderr || streams.tty))
    };
    let writes_stdin = streams.stdin && hub.has_stdin();
    let input_hub = std::sync::Arc::clone(&hub);
    let mut reader = tokio::spawn(async move {
        let mut open = writes_stdin;
        while let Some(msg) = source.recv().await {
            match msg {
                Incoming::Stdin(bytes) if open && input_hub.write_stdin(&bytes).await.is_err() => {
                    open = false
                }
                Incoming::Close(channel::STDIN) => {
                    open = false;
                    if input_hub.stdin_once() {
                        input_hub.close_stdin().await;
                    }
                }
                Incoming::Resize(sizes) => {
                    if let Some(last) = sizes.last() {
                        if let Err(err) = input_hub.resize(last.width, last.height) {
                            tracing::debug!(%err, "terminal resize failed");
                        }
                    }
                }
                _ => {}
            }
        }
    });
    let mut exit_seen = *exited.borrow();
    loop {
        tokio::select! {
            chunk = output.recv() => match chunk {
                Ok((ch, data)) => {
                    if wants(ch) && out_tx.send(channel::frame(ch, &data)).await.is_err() {
                        break;
                    }
                }
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
            },
            changed = exited.changed(), if !exit_seen => {
                exit_seen = changed.is_err() || *exited.borrow();
            }
            _ = &mut reader => break,
        }
        if exit_seen {
            // The container's output was broadcast before its exit was recorded.
            while let Ok((ch, data)) = output.try_recv() {
                if wants(ch) {
                    let _ = out_tx.send(channel::frame(ch, &data)).await;
                }
            }
            break;
        }
    }
    reader.abort();
    if writes_stdin && hub.stdin_once() {
        hub.close_stdin().await;
    }
    if let Some(payload) = channel::error_payload(protocol, &Outcome::Success) {
        let _ = out_tx.send(channel::frame(channel::ERROR, &payload)).await;
    }
    drop(out_tx);
    let _ = writer.await;
}

/// Copies one pipe to the client on `channel` until end of file.
async fn pump(mut pipe: impl AsyncRead + Unpin, channel: u8, tx: mpsc::Sender<Vec<u8>>) {
    let mut buf = vec![0u8; 32 * 1024];
    loop {
        match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if tx.send(channel::frame(channel, &buf[..n])).await.is_err() {
                    return;
                }
            }
        }
    }
}
