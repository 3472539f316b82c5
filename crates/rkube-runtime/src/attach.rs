//! A running container's standard streams for CRI `Attach` (what containerd's container I/O
//! keeps for `kubectl attach`).
//!
//! Output: the container's stdout and stderr are read by the log writer through [`Tee`]
//! readers, which also hand every chunk to the attach hub's broadcast channel; attached
//! clients subscribe and see what is written from then on (a client that falls more than
//! [`OUTPUT_BUFFER`] chunks behind loses the chunks it missed). Input: when the container spec
//! says `stdin: true` its stdin is a pipe the runtime keeps open; attached clients write to it;
//! with `stdinOnce` it is closed when the first attached client that wrote stdin detaches (the
//! container then reads end of file), as kubelet documents for `stdinOnce`. A container with
//! `tty` has one terminal instead: its output is channel 1, input and resizes go to it.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWriteExt, ReadBuf};
use tokio::process::ChildStdin;
use tokio::sync::{broadcast, Mutex};

use crate::exec::Pty;

/// Output chunks kept for a slow attached client.
pub const OUTPUT_BUFFER: usize = 256;

/// One chunk of output: the channel (1 stdout, 2 stderr) and the bytes.
pub type Chunk = (u8, Vec<u8>);

/// Where attached clients' input goes.
#[derive(Debug)]
enum Input {
    Pipe(ChildStdin),
    Terminal(Arc<Pty>),
}

/// The attach hub of one running container.
#[derive(Debug)]
pub struct AttachIo {
    output: broadcast::Sender<Chunk>,
    stdin: Mutex<Option<Input>>,
    terminal: Option<Arc<Pty>>,
    stdin_once: bool,
    stdin_closed: AtomicBool,
}

impl AttachIo {
    /// A hub for a container whose stdin pipe is `stdin` (`None`: the spec did not ask for
    /// stdin), closing it after the first writer when `stdin_once`.
    pub fn new(stdin: Option<ChildStdin>, stdin_once: bool) -> Self {
        Self::with_input(stdin.map(Input::Pipe), None, stdin_once)
    }

    /// A hub for a container with `tty`: its output is the terminal's (read by the log writer
    /// through a [`Tee`]), clients' input is written to the terminal when the spec says
    /// `stdin`, and resizes set the terminal's size. Closing stdin sends the terminal its
    /// end-of-file character (Ctrl-D), as a user would.
    pub fn with_terminal(pty: Arc<Pty>, stdin: bool, stdin_once: bool) -> Self {
        let input = stdin.then(|| Input::Terminal(Arc::clone(&pty)));
        Self::with_input(input, Some(pty), stdin_once)
    }

    fn with_input(input: Option<Input>, terminal: Option<Arc<Pty>>, stdin_once: bool) -> Self {
        let (output, _) = broadcast::channel(OUTPUT_BUFFER);
        let stdin_closed = AtomicBool::new(input.is_none());
        Self {
            output,
            stdin: Mutex::new(input),
            terminal,
            stdin_once,
            stdin_closed,
        }
    }

    /// Whether the container has a terminal (`tty`).
    pub fn is_terminal(&self) -> bool {
        self.terminal.is_some()
    }

    /// Sets the terminal's size; nothing for a container without one.
    ///
    /// # Errors
    /// The ioctl failed.
    pub fn resize(&self, cols: u16, rows: u16) -> io::Result<()> {
        match &self.terminal {
            Some(pty) => pty.resize(cols, rows),
            None => Ok(()),
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
            Some(Input::Pipe(pipe)) => pipe.write_all(data).await,
            Some(Input::Terminal(pty)) => pty.write_all(data).await,
            None => Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "the container's stdin is closed",
            )),
        }
    }

    /// Closes the container's stdin (it reads end of file). Idempotent.
    pub async fn close_stdin(&self) {
        self.stdin_closed.store(true, Ordering::SeqCst);
        if let Some(Input::Terminal(pty)) = self.stdin.lock().await.take() {
            let _ = pty.write_all(&[4]).await;
        }
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
