//! Exec, attach and port-forward over SPDY/3.1 (client-go's SPDY executor and port-forwarder;
//! upstream kubelet's `remotecommand/httpstream.go` and `portforward/httpstream.go`).
//!
//! Exec and attach: the client opens one stream per channel, named by its `streamType` header
//! (`error`, `stdin`, `stdout`, `stderr`, `resize`); each gets a `SYN_REPLY` at once. Once the
//! streams the request asked for are all open (or after [`STREAM_WAIT`]), the session of
//! [`super::session`] runs over them: its channel-framed output goes as `DATA` on the matching
//! stream, stdin and resize data come from the client's streams, and the client's `FIN` on
//! stdin closes stdin. At the end every stream the server writes gets a `FIN`, and the
//! connection stays until the client closes it (bounded by [`CLOSE_WAIT`]).
//!
//! Port-forward: for each connection the client opens an `error` and a `data` stream with the
//! same `requestID` and the `port`; the server connects to that port on the host's loopback,
//! copies both ways, writes failures on the error stream, and ends both streams with `FIN`
//! when the pod's side closes. The session lasts until the client closes the connection.

use std::collections::HashMap;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

use super::channel::{self, Incoming};
use super::session::Transport;
use super::spdy::{header, Frame, FrameReader, FrameWriter};
use crate::exec::ExecStreams;

/// How long the server waits for the client to open the streams it asked for.
pub const STREAM_WAIT: Duration = Duration::from_secs(30);
/// How long the connection stays open for the client to close it after the last frame.
pub const CLOSE_WAIT: Duration = Duration::from_secs(10);

/// A task writing raw frames to `wr` in order; ends when every sender is gone.
fn spawn_frame_writer<W: AsyncWrite + Unpin + Send + 'static>(mut wr: W) -> (mpsc::Sender<Vec<u8>>, tokio::task::JoinHandle<()>) {
    let (tx, mut rx) = mpsc::channel::<Vec<u8>>(64);
    let task = tokio::spawn(async move {
        while let Some(frame) = rx.recv().await {
            if wr.write_all(&frame).await.is_err() {
                return;
            }
        }
        let _ = wr.flush().await;
    });
    (tx, task)
}

/// The stream types an exec or attach client opens for `streams`.
fn expected(streams: ExecStreams) -> Vec<&'static str> {
    let mut want = vec!["error"];
    if streams.stdin {
        want.push("stdin");
    }
    if streams.stdout {
        want.push("stdout");
    }
    if streams.stderr && !streams.tty {
        want.push("stderr");
    }
    if streams.tty {
        want.push("resize");
    }
    want
}

/// Opens the SPDY streams of an exec or attach on `io` and returns them as a [`Transport`]
/// (see the module docs).
pub async fn exec_transport<IO>(io: IO, streams: ExecStreams) -> Transport
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (rd, wr) = tokio::io::split(io);
    let (raw, writer) = spawn_frame_writer(wr);
    let (in_tx, input) = mpsc::channel::<Incoming>(32);
    let (ids_tx, ids_rx) = tokio::sync::oneshot::channel::<HashMap<String, u32>>();
    let want = expected(streams);
    let raw_in = raw.clone();
    let reader = tokio::spawn(async move {
        let mut frames = FrameReader::new(rd);
        let mut replies = FrameWriter::new();
        let mut ids: HashMap<String, u32> = HashMap::new();
        let mut ids_tx = Some(ids_tx);
        let deadline = tokio::time::Instant::now() + STREAM_WAIT;
        loop {
            let next = if ids_tx.is_some() {
                match tokio::time::timeout_at(deadline, frames.next()).await {
                    Ok(f) => f,
                    Err(_) => {
                        // Go on with the streams there are.
                        if let Some(tx) = ids_tx.take() {
                            let _ = tx.send(ids.clone());
                        }
                        continue;
                    }
                }
            } else {
                frames.next().await
            };
            let frame = match next {
                Ok(Some(f)) => f,
                Ok(None) | Err(_) => break,
            };
            match frame {
                Frame::SynStream { stream_id, headers, .. } => {
                    let kind = header(&headers, "streamtype").unwrap_or("").to_string();
                    if raw_in.send(replies.syn_reply(stream_id, &[])).await.is_err() {
                        break;
                    }
                    ids.insert(kind, stream_id);
                    if want.iter().all(|w| ids.contains_key(*w)) {
                        if let Some(tx) = ids_tx.take() {
                            let _ = tx.send(ids.clone());
                        }
                    }
                }
                Frame::Data { stream_id, fin, data } => {
                    let msg = if ids.get("stdin") == Some(&stream_id) {
                        let mut msgs = Vec::new();
                        if !data.is_empty() {
                            msgs.push(Incoming::Stdin(data));
                        }
                        if fin {
                            msgs.push(Incoming::Close(channel::STDIN));
                        }
                        msgs
                    } else if ids.get("resize") == Some(&stream_id) {
                        vec![Incoming::Resize(channel::parse_resize(&data))]
                    } else {
                        vec![]
                    };
                    for m in msg {
                        if in_tx.send(m).await.is_err() {
                            break;
                        }
                    }
                }
                Frame::RstStream { stream_id } if ids.get("stdin") == Some(&stream_id) => {
                    let _ = in_tx.send(Incoming::Close(channel::STDIN)).await;
                }
                Frame::Ping { id } => {
                    let _ = raw_in.send(FrameWriter::ping(id)).await;
                }
                Frame::GoAway => break,
                _ => {}
            }
        }
    });
    let ids = ids_rx.await.unwrap_or_default();
    let (out, mut out_rx) = mpsc::channel::<Vec<u8>>(32);
    let done = tokio::spawn(async move {
        let stream_of = |ch: u8| match ch {
            channel::STDOUT => ids.get("stdout"),
            channel::STDERR => ids.get("stderr"),
            channel::ERROR => ids.get("error"),
            _ => None,
        };
        while let Some(msg) = out_rx.recv().await {
            let Some((&ch, data)) = msg.split_first() else { continue };
            if data.is_empty() {
                continue; // WebSocket readiness messages have no SPDY counterpart.
            }
            if let Some(&id) = stream_of(ch) {
                if raw.send(FrameWriter::data(id, false, data)).await.is_err() {
                    break;
                }
            }
        }
        for kind in ["stdout", "stderr", "error"] {
            if let Some(&id) = ids.get(kind) {
                let _ = raw.send(FrameWriter::data(id, true, &[])).await;
            }
        }
        drop(raw);
        let _ = tokio::time::timeout(CLOSE_WAIT, reader).await;
        let _ = writer.await;
    });
    Transport { out, input, done }
}

/// One forwarded connection being set up: its streams so far.
#[derive(Default)]
struct Pair {
    error: Option<u32>,
    data: Option<u32>,
    port: u16,
    input: Option<mpsc::Sender<Option<Vec<u8>>>>,
}

/// Serves SPDY port-forwarding on `io` until the client closes it (see the module docs).
pub async fn port_forward<IO>(io: IO)
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (rd, wr) = tokio::io::split(io);
    let (raw, writer) = spawn_frame_writer(wr);
    let mut frames = FrameReader::new(rd);
    let mut replies = FrameWriter::new();
    let mut pairs: HashMap<String, Pair> = HashMap::new();
    let mut by_data: HashMap<u32, mpsc::Sender<Option<Vec<u8>>>> = HashMap::new();
    loop {
        let frame = match frames.next().await {
            Ok(Some(f)) => f,
            Ok(None) | Err(_) => break,
        };
        match frame {
            Frame::SynStream { stream_id, headers, .. } => {
                if raw.send(replies.syn_reply(stream_id, &[])).await.is_err() {
                    break;
                }
                let request = header(&headers, "requestid").unwrap_or("").to_string();
                let port = header(&headers, "port").and_then(|p| p.parse::<u16>().ok()).unwrap_or(0);
                let pair = pairs.entry(request.clone()).or_default();
                pair.port = port;
                match header(&headers, "streamtype") {
                    Some("error") => pair.error = Some(stream_id),
                    Some("data") => pair.data = Some(stream_id),
                    _ => {}
                }
                if let (Some(error), Some(data), None) = (pair.error, pair.data, &pair.input) {
                    let (tx, rx) = mpsc::channel::<Option<Vec<u8>>>(32);
                    pair.input = Some(tx.clone());
                    by_data.insert(data, tx);
                    tokio::spawn(forward(pair.port, data, error, rx, raw.clone()));
                    pairs.remove(&request);
                }
            }
            Frame::Data { stream_id, fin, data } => {
                if let Some(tx) = by_data.get(&stream_id) {
                    if !data.is_empty() {
                        let _ = tx.send(Some(data)).await;
                    }
                    if fin {
                        let _ = tx.send(None).await;
                        by_data.remove(&stream_id);
                    }
                }
            }
            Frame::RstStream { stream_id } => {
                by_data.remove(&stream_id);
            }
            Frame::Ping { id } => {
                let _ = raw.send(FrameWriter::ping(id)).await;
            }
            Frame::GoAway => break,
            Frame::Other => {}
        }
    }
    drop(by_data);
    drop(raw);
    let _ = writer.await;
}

/// One forwarded connection: loopback `port`, fed from `input` (`None`: the client's FIN).
async fn forward(port: u16, data: u32, error: u32, mut input: mpsc::Receiver<Option<Vec<u8>>>, raw: mpsc::Sender<Vec<u8>>) {
    let tcp = match TcpStream::connect(("127.0.0.1", port)).await {
        Ok(t) => t,
        Err(err) => {
            let msg = format!("error forwarding port {port} to pod: failed to connect to localhost:{port}: {err}");
            let _ = raw.send(FrameWriter::data(error, false, msg.as_bytes())).await;
            let _ = raw.send(FrameWriter::data(error, true, &[])).await;
            let _ = raw.send(FrameWriter::data(data, true, &[])).await;
            return;
        }
    };
    let (mut rd, mut wr) = tcp.into_split();
    let upload = tokio::spawn(async move {
        while let Some(Some(bytes)) = input.recv().await {
            if wr.write_all(&bytes).await.is_err() {
                return;
            }
        }
        let _ = wr.shutdown().await;
    });
    let mut buf = vec![0u8; 32 * 1024];
    loop {
        match rd.read(&mut buf).await {
            Ok(0) => break,
            Ok(n) => {
                if raw.send(FrameWriter::data(data, false, &buf[..n])).await.is_err() {
                    break;
                }
            }
            Err(err) => {
                let msg = format!("error forwarding port {port} to pod: {err}");
                let _ = raw.send(FrameWriter::data(error, false, msg.as_bytes())).await;
                break;
            }
        }
    }
    let _ = raw.send(FrameWriter::data(data, true, &[])).await;
    let _ = raw.send(FrameWriter::data(error, true, &[])).await;
    upload.abort();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exec_clients_open_one_stream_per_channel_asked_for() {
        let s = |stdin, stdout, stderr, tty| ExecStreams { stdin, stdout, stderr, tty };
        assert_eq!(expected(s(false, true, true, false)), vec!["error", "stdout", "stderr"]);
        assert_eq!(expected(s(true, true, false, true)), vec!["error", "stdin", "stdout", "resize"]);
    }
}
