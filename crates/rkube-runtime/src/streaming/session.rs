//! One exec over one WebSocket (upstream kubelet's `ServeExec` over `wsstream`).
//!
//! Order of events: the process is started; an empty message on the lowest channel the server
//! writes (stdout, else stderr, else error) tells the client the stream is up; output is sent
//! as it is read; stdin messages are written to the process, a v5 close of channel 0 (or the
//! client going away) closes its stdin; resize messages set the terminal's size. When the
//! process has exited and its output is drained (bounded by [`OUTPUT_DRAIN`], for background
//! processes that keep the pipes open), the outcome goes on the error channel and the
//! WebSocket is closed normally.

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

/// How long output is still read after the process exited.
pub const OUTPUT_DRAIN: Duration = Duration::from_secs(2);

/// Where stdin bytes go.
enum StdinSink {
    Pipe(tokio::process::ChildStdin),
    Pty(std::sync::Arc<Pty>),
}

/// Runs `cmd` in the target container and streams it over `ws` (see the module docs).
pub async fn exec(
    ws: WebSocketStream<TcpStream>,
    protocol: Option<Protocol>,
    target: TargetResult,
    cmd: Vec<String>,
    streams: ExecStreams,
) {
    let (mut sink, mut source) = ws.split();
    let (out_tx, mut out_rx) = mpsc::channel::<Vec<u8>>(32);
    let writer = tokio::spawn(async move {
        while let Some(msg) = out_rx.recv().await {
            if sink.send(Message::Binary(msg.into())).await.is_err() {
                return;
            }
        }
        // Clients read a close without a status code (1005) as an error: close normally.
        let normal = CloseFrame { code: CloseCode::Normal, reason: "".into() };
        let _ = sink.send(Message::Close(Some(normal))).await;
        let _ = sink.close().await;
    });
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
    let ready = if streams.stdout || streams.tty {
        channel::STDOUT
    } else if streams.stderr {
        channel::STDERR
    } else {
        channel::ERROR
    };
    let _ = out_tx.send(vec![ready]).await;

    let pty = pty.map(std::sync::Arc::new);
    let mut pumps = Vec::new();
    if let Some(pty) = &pty {
        let (pty, tx) = (std::sync::Arc::clone(pty), out_tx.clone());
        pumps.push(tokio::spawn(async move {
            let mut buf = vec![0u8; 32 * 1024];
            while let Ok(n) = pty.read(&mut buf).await {
                if n == 0 || tx.send(channel::frame(channel::STDOUT, &buf[..n])).await.is_err() {
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
    let reader = tokio::spawn(async move {
        let mut stdin = stdin;
        while let Some(msg) = source.next().await {
            let data = match msg {
                Ok(Message::Binary(b)) => b.to_vec(),
                Ok(Message::Text(t)) => t.as_bytes().to_vec(),
                Ok(Message::Close(_)) | Err(_) => break,
                Ok(_) => continue,
            };
            match channel::decode(protocol, &data) {
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

    let code = child.wait().await.map(|s| process::exit_code(&s)).unwrap_or(255);
    let aborts: Vec<_> = pumps.iter().map(tokio::task::JoinHandle::abort_handle).collect();
    let _ = tokio::time::timeout(OUTPUT_DRAIN, futures::future::join_all(pumps)).await;
    for pump in aborts {
        pump.abort();
    }
    reader.abort();
    let outcome = if code == 0 { Outcome::Success } else { Outcome::Exited { command: cmd, code } };
    if let Some(payload) = channel::error_payload(protocol, &outcome) {
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
