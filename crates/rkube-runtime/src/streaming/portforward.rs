//! Port forwarding over one WebSocket (upstream kubelet's WebSocket port-forward protocol,
//! `pkg/kubelet/cri/streaming/portforward/websocket.go`; what the Python client's
//! `portforward()` speaks).
//!
//! The URL's request names the ports; port `i` (in request order) gets channel `2i` for data
//! and `2i+1` for errors. The server first writes each port number (2 bytes, little endian) on
//! both of its channels, then connects to the port on the host's loopback (pods share the
//! host's network here) and copies: data messages from the client go to the TCP connection,
//! bytes from it go back on the data channel; a failure to connect or copy is written as text
//! on the error channel. The WebSocket closes normally once every connection has ended.

use futures::{SinkExt, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

use super::channel;

/// Data channel of the `index`-th port; its error channel is the next one.
pub fn data_channel(index: usize) -> Option<u8> {
    u8::try_from(index.checked_mul(2)?).ok().filter(|c| *c < channel::CLOSE - 1)
}

/// The first message of each channel of `port`: the channel byte, then the port number as two
/// little-endian bytes.
pub fn port_prefix(channel: u8, port: u16) -> Vec<u8> {
    let [lo, hi] = port.to_le_bytes();
    vec![channel, lo, hi]
}

/// Forwards `ports` over `ws` (see the module docs).
pub async fn serve(ws: WebSocketStream<TcpStream>, ports: Vec<u16>) {
    let (mut sink, mut source) = ws.split();
    let (out_tx, mut out_rx) = mpsc::channel::<Vec<u8>>(32);
    let writer = tokio::spawn(async move {
        while let Some(msg) = out_rx.recv().await {
            if sink.send(Message::Binary(msg.into())).await.is_err() {
                return;
            }
        }
        let normal = CloseFrame { code: CloseCode::Normal, reason: "".into() };
        let _ = sink.send(Message::Close(Some(normal))).await;
        let _ = sink.close().await;
    });
    let mut inputs: Vec<(u8, mpsc::Sender<Vec<u8>>)> = Vec::new();
    let mut forwards = Vec::new();
    for (i, port) in ports.into_iter().enumerate() {
        let Some(data) = data_channel(i) else { break };
        let _ = out_tx.send(port_prefix(data, port)).await;
        let _ = out_tx.send(port_prefix(data + 1, port)).await;
        let (in_tx, in_rx) = mpsc::channel::<Vec<u8>>(32);
        inputs.push((data, in_tx));
        forwards.push(tokio::spawn(forward(port, data, in_rx, out_tx.clone())));
    }
    drop(out_tx);
    let reader = tokio::spawn(async move {
        while let Some(msg) = source.next().await {
            let data = match msg {
                Ok(Message::Binary(b)) => b.to_vec(),
                Ok(Message::Close(_)) | Err(_) => break,
                Ok(_) => continue,
            };
            let Some((&ch, rest)) = data.split_first() else { continue };
            if let Some((_, tx)) = inputs.iter().find(|(c, _)| *c == ch) {
                // A connection that ended drops its receiver; later data is discarded.
                let _ = tx.send(rest.to_vec()).await;
            }
        }
    });
    futures::future::join_all(forwards).await;
    reader.abort();
    let _ = writer.await;
}

/// One port's connection: loopback `port`, fed from `input`, answered on channel `data`.
async fn forward(port: u16, data: u8, mut input: mpsc::Receiver<Vec<u8>>, out: mpsc::Sender<Vec<u8>>) {
    let tcp = match TcpStream::connect(("127.0.0.1", port)).await {
        Ok(t) => t,
        Err(err) => {
            let msg = format!("error forwarding port {port} to pod: failed to connect to localhost:{port}: {err}");
            let _ = out.send(channel::frame(data + 1, msg.as_bytes())).await;
            return;
        }
    };
    let (mut rd, mut wr) = tcp.into_split();
    let upload = async move {
        while let Some(bytes) = input.recv().await {
            if wr.write_all(&bytes).await.is_err() {
                break;
            }
        }
        let _ = wr.shutdown().await;
    };
    let download = async {
        let mut buf = vec![0u8; 32 * 1024];
        loop {
            match rd.read(&mut buf).await {
                Ok(0) => return,
                Ok(n) => {
                    if out.send(channel::frame(data, &buf[..n])).await.is_err() {
                        return;
                    }
                }
                Err(err) => {
                    let msg = format!("error forwarding port {port} to pod: {err}");
                    let _ = out.send(channel::frame(data + 1, msg.as_bytes())).await;
                    return;
                }
            }
        }
    };
    // The connection is over when the pod's side closes it.
    tokio::select! {
        _ = download => {}
        _ = async { upload.await; std::future::pending::<()>().await } => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_port_gets_a_data_and_an_error_channel_announced_with_its_number() {
        assert_eq!((data_channel(0), data_channel(1), data_channel(3)), (Some(0), Some(2), Some(6)));
        assert_eq!(data_channel(200), None, "channels are one byte");
        assert_eq!(port_prefix(2, 8080), vec![2, 0x90, 0x1f]);
    }
}
