//! A running container's standard streams for CRI `Attach` (what containerd's container I/O
//! keeps for `kubectl attach`).
//!
//! Output: the container's stdout and stderr are read by the log writer through [`Tee`]
//! readers, which also hand every chunk to the attach hub's broadcast channel; attached
//! clients subscribe and see what is written from then on (a client that falls more than
//! [`OUTPUT_BUFFER`] chunks behind loses the chunks it missed). Input: when the container spec
//! says `stdin: true` its stdin is a pipe the runtime keeps open; attached clients write to it;
//! with `stdinOnce` it is closed when the first attached client that wrote stdin detaches (the
//! container then reads end of file), as kubelet documents for `stdinOnce`.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWriteExt, ReadBuf};
use tokio::process::ChildStdin;
use tokio::sync::{broadcast, Mutex};

/// Output chunks kept for a slow attached client.
pub const OUTPUT_BUFFER: usize = 256;

/// One chunk of output: the channel (1 stdout, 2 stderr) and the bytes.
pub type Chunk = (u8, Vec<u8>);

/// The attach hub of one running container.
#[derive(Debug)]
pub struct AttachIo {
    output: broadcast::Sender<Chunk>,
    stdin: Mutex<Option<ChildStdin>>,
    stdin_once: bool,
    stdin_closed: AtomicBool,
}

impl AttachIo {
    /// A hub for a container whose stdin pipe is `stdin` (`None`: the spec did not ask for
    /// stdin), closing it after the first writer when `stdin_once`.
    pub fn new(stdin: Option<ChildStdin>, stdin_once: bool) -> Self {
        let (output, _) = broadcast::channel(OUTPUT_BUFFER);
        let stdin_closed = AtomicBool::new(stdin.is_none());
        Self {
            output,
            stdin: Mutex::new(stdin),
            stdin_once,
            stdin_closed,
        }
    }

    /// A reader of `inner` that also broadcasts what it reads on `channel`.
    pub fn tee<R>(&self, inner: R, channel: u8) -> Tee<R> {
        Tee {
            inner,
            channel,
            tx: self.output.clone(),
        }
    }

    /// Output written from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Chunk> {
        self.output.subscribe()
    }

    /// Whether the container has a stdin a client may write.
    pub fn has_stdin(&self) -> bool {
        !self.stdin_closed.load(Ordering::SeqCst)
    }

    /// Whether stdin is closed after the first client detaches.
    pub fn stdin_once(&self) -> bool {
        self.stdin_once
    }

    /// Writes `data` to the container's stdin.
    ///
    /// # Errors
    /// The container has no open stdin, or the pipe broke (the process exited or closed it).
    pub async fn write_stdin(&self, data: &[u8]) -> io::Result<()> {
        let mut stdin = self.stdin.lock().await;
        match stdin.as_mut() {
            Some(pipe) => pipe.write_all(data).await,
            None => Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "the container's stdin is closed",
            )),
        }
    }

    /// Closes the container's stdin (it reads end of file). Idempotent.
    pub async fn close_stdin(&self) {
        self.stdin_closed.store(true, Ordering::SeqCst);
        drop(self.stdin.lock().await.take());
    }
}

/// An [`AsyncRead`] that broadcasts every chunk it reads (see [`AttachIo::tee`]).
#[derive(Debug)]
pub struct Tee<R> {
    inner: R,
    channel: u8,
    tx: broadcast::Sender<Chunk>,
}

impl<R: AsyncRead + Unpin> AsyncRead for Tee<R> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let res = Pin::new(&mut this.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = &res {
            let fresh = &buf.filled()[before..];
            if !fresh.is_empty() && this.tx.receiver_count() > 0 {
                // No subscriber is not an error: nobody is attached.
                let _ = this.tx.send((this.channel, fresh.to_vec()));
            }
        }
        res
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    #[tokio::test]
    async fn tee_passes_bytes_through_and_broadcasts_them_to_subscribers() {
        let hub = AttachIo::new(None, false);
        let mut rx = hub.subscribe();
        let mut tee = hub.tee(&b"hello"[..], 2);
        let mut out = String::new();
        tee.read_to_string(&mut out).await.expect("read");
        assert_eq!(out, "hello");
        assert_eq!(rx.recv().await.expect("chunk"), (2, b"hello".to_vec()));
        assert!(!hub.has_stdin());
        assert_eq!(
            hub.write_stdin(b"x").await.expect_err("no stdin").kind(),
            io::ErrorKind::BrokenPipe
        );
    }
}
