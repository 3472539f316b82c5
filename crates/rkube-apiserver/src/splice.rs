//! Splicing the two ends of an upgraded connection: a client and the backend its upgrade was
//! proxied to (the API server between kubectl and a kubelet, the kubelet between the API server
//! and a runtime's streaming server), as upstream's `UpgradeAwareHandler` does in
//! `k8s.io/apimachinery/pkg/util/proxy/upgradeaware.go`.
//!
//! [`tokio::io::copy_bidirectional`] is not used: it gives up both directions when one fails.
//! A backend that has sent its last bytes and closed its socket makes the client's last bytes
//! (a WebSocket close reply, say) fail to arrive; the backend's last bytes (an exec's exit
//! status and its close frame) must still reach the client, or the client reads an abnormal
//! closure instead of the status.

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

/// How long the client may still send once the backend is done (it has closed its side, or
/// failed); past it the connection is dropped, so a client that never closes does not hold it.
pub const CLIENT_LINGER: Duration = Duration::from_secs(10);

/// Bytes moved by [`splice`], with the first error of each direction.
#[derive(Debug, Default)]
pub struct Spliced {
    /// Bytes from the client to the backend.
    pub up: u64,
    /// Bytes from the backend to the client.
    pub down: u64,
    /// Why client → backend stopped, if not at the client's end of stream.
    pub up_error: Option<std::io::Error>,
    /// Why backend → client stopped, if not at the backend's end of stream.
    pub down_error: Option<std::io::Error>,
}

/// Copies `client` → `backend` and `backend` → `client` at once; each direction shuts down the
/// writing side when its reading side ends. A failure in one direction leaves the other running:
/// backend → client runs until the backend's end of stream (or a failure of its own); once it is
/// done, client → backend gets [`CLIENT_LINGER`] more. Returns when both are done or the linger
/// is over.
pub async fn splice<C, B>(client: C, backend: B) -> Spliced
where
    C: AsyncRead + AsyncWrite + Unpin,
    B: AsyncRead + AsyncWrite + Unpin,
{
    let (mut client_read, mut client_write) = tokio::io::split(client);
    let (mut backend_read, mut backend_write) = tokio::io::split(backend);
    let up = async {
        let copied = tokio::io::copy(&mut client_read, &mut backend_write).await;
        let _ = backend_write.shutdown().await;
        copied
    };
    let down = async {
        let copied = tokio::io::copy(&mut backend_read, &mut client_write).await;
        let _ = client_write.shutdown().await;
        copied
    };
    tokio::pin!(up, down);
    let mut out = Spliced::default();
    let mut up_done = false;
    let down_result = tokio::select! {
        d = &mut down => d,
        u = &mut up => {
            up_done = true;
            record(u, &mut out.up, &mut out.up_error);
            down.await
        }
    };
    record(down_result, &mut out.down, &mut out.down_error);
    if !up_done {
        match tokio::time::timeout(CLIENT_LINGER, up).await {
            Ok(u) => record(u, &mut out.up, &mut out.up_error),
            Err(_) => {
                out.up_error = Some(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "client did not close",
                ))
            }
        }
    }
    out
}

fn record(result: std::io::Result<u64>, bytes: &mut u64, error: &mut Option<std::io::Error>) {
    match result {
        Ok(n) => *bytes = n,
        Err(e) => *error = Some(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    /// The backend writes its last bytes and goes away while the client is still writing: the
    /// client still reads every byte the backend sent, then end of stream.
    #[tokio::test]
    async fn the_backends_last_bytes_reach_the_client_when_the_client_cannot_write() {
        let (client_outer, client_inner) = tokio::io::duplex(64);
        let (backend_inner, mut backend_outer) = tokio::io::duplex(64);
        let spliced = tokio::spawn(splice(client_inner, backend_inner));
        backend_outer
            .write_all(b"exit status")
            .await
            .expect("backend writes");
        drop(backend_outer);
        let (mut client_read, mut client_write) = tokio::io::split(client_outer);
        // Writes toward a backend that is gone fail inside the splice, not here.
        let _ = client_write.write_all(&[7; 16]).await;
        let mut got = Vec::new();
        client_read
            .read_to_end(&mut got)
            .await
            .expect("client reads to end of stream");
        assert_eq!(got, b"exit status");
        drop(client_write);
        let s = spliced.await.expect("splice task");
        assert_eq!(s.down, 11);
        assert!(s.down_error.is_none(), "{:?}", s.down_error);
    }

    /// A client that closes its side still gets everything the backend sends afterwards.
    #[tokio::test]
    async fn a_client_half_close_reaches_the_backend_and_the_answer_still_flows() {
        let (client_outer, client_inner) = tokio::io::duplex(64);
        let (backend_inner, backend_outer) = tokio::io::duplex(64);
        let spliced = tokio::spawn(splice(client_inner, backend_inner));
        let (mut client_read, mut client_write) = tokio::io::split(client_outer);
        let (mut backend_read, mut backend_write) = tokio::io::split(backend_outer);
        client_write
            .write_all(b"request")
            .await
            .expect("client writes");
        client_write.shutdown().await.expect("client half-closes");
        let mut request = Vec::new();
        backend_read
            .read_to_end(&mut request)
            .await
            .expect("backend reads to end");
        assert_eq!(request, b"request");
        backend_write
            .write_all(b"answer")
            .await
            .expect("backend answers");
        backend_write.shutdown().await.expect("backend closes");
        let mut answer = Vec::new();
        client_read
            .read_to_end(&mut answer)
            .await
            .expect("client reads to end");
        assert_eq!(answer, b"answer");
        let s = spliced.await.expect("splice task");
        assert_eq!((s.up, s.down), (7, 6));
    }
}
