//! Disconnecting clients that stop reading.
//!
//! A LIST answer is sent as the socket takes it (`handlers::read`), so a
//! client that asks and never reads costs little memory, but its connection
//! and the cache snapshot it pins would stay for as long as the client likes.
//! [`WriteStallGuard`] wraps a connection's I/O: when a write (or flush) has
//! made no progress for the guard's timeout, because the peer's receive
//! window stayed full, the write fails with `TimedOut` and hyper closes the
//! connection. Any progress restarts the clock, so a slow reader that keeps
//! reading is never cut, and an idle connection (nothing to write: a quiet
//! watch, keep-alive) is never timed.
//!
//! Upstream gets the same bound differently: Go's HTTP server blocks the
//! handler in `Write`, and the request-timeout filter
//! (`k8s.io/apiserver/pkg/server/filters/timeout.go`) aborts the handler and
//! its connection when the deadline passes mid-body.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

/// How long a write may wait for the peer to take bytes before the
/// connection is closed: kube-apiserver's default `--request-timeout`.
pub const WRITE_STALL_TIMEOUT: Duration = Duration::from_secs(60);

/// An I/O object whose writes fail with [`io::ErrorKind::TimedOut`] after
/// `timeout` without progress (see the module docs). Reads pass through.
#[derive(Debug)]
pub struct WriteStallGuard<IO> {
    inner: IO,
    timeout: Duration,
    /// Armed when a write or flush returned `Pending`; dropped on progress.
    stalled_since: Option<Pin<Box<Sleep>>>,
}

impl<IO> WriteStallGuard<IO> {
    /// Wraps `inner`; a zero `timeout` disables the guard.
    pub fn new(inner: IO, timeout: Duration) -> Self {
        WriteStallGuard { inner, timeout, stalled_since: None }
    }

    /// The wrapped I/O object.
    pub fn get_ref(&self) -> &IO {
        &self.inner
    }

    /// Maps the inner poll's result: progress disarms the timer; `Pending`
    /// arms it (once) and turns into `TimedOut` when it has run out.
    fn watch<T>(&mut self, cx: &mut Context<'_>, polled: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        match polled {
            Poll::Ready(r) => {
                self.stalled_since = None;
                Poll::Ready(r)
            }
            Poll::Pending if self.timeout.is_zero() => Poll::Pending,
            Poll::Pending => {
                let timeout = self.timeout;
                let timer = self.stalled_since.get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
                match timer.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("the client read nothing for {}s; closing the connection", timeout.as_secs()),
                    ))),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for WriteStallGuard<IO> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for WriteStallGuard<IO> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.watch(cx, polled)
    }

    fn poll_write_vectored(mut self: Pin<&mut Self>, cx: &mut Context<'_>, bufs: &[io::IoSlice<'_>]) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.watch(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.inner).poll_flush(cx);
        self.watch(cx, polled)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.inner).poll_shutdown(cx);
        self.watch(cx, polled)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test(start_paused = true)]
    async fn a_write_the_peer_never_takes_times_out() {
        let (client, mut peer) = tokio::io::duplex(1024);
        let mut guarded = WriteStallGuard::new(client, Duration::from_secs(5));
        let err = guarded.write_all(&[0u8; 64 * 1024]).await.expect_err("the peer reads nothing");
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        // What fit in the pipe was written before the stall.
        let mut got = vec![0u8; 1024];
        peer.read_exact(&mut got).await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_reader_that_keeps_reading_is_not_cut() {
        let (client, mut peer) = tokio::io::duplex(1024);
        let mut guarded = WriteStallGuard::new(client, Duration::from_secs(5));
        let reader = tokio::spawn(async move {
            let mut total = 0;
            let mut buf = [0u8; 512];
            while total < 64 * 1024 {
                // Each read comes after 4 s: under the timeout every time,
                // though the whole body takes far longer than it.
                tokio::time::sleep(Duration::from_secs(4)).await;
                total += peer.read(&mut buf).await.unwrap();
            }
            total
        });
        guarded.write_all(&[0u8; 64 * 1024]).await.expect("progress keeps the connection");
        assert_eq!(reader.await.unwrap(), 64 * 1024);
    }

    #[tokio::test(start_paused = true)]
    async fn a_zero_timeout_never_cuts() {
        let (client, peer) = tokio::io::duplex(16);
        let mut guarded = WriteStallGuard::new(client, Duration::ZERO);
        let write = guarded.write_all(&[0u8; 64]);
        assert!(tokio::time::timeout(Duration::from_secs(3600), write).await.is_err(), "still waiting");
        drop(peer);
    }
}
