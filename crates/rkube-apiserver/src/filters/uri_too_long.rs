//! A `Status` body on hyper's `414 URI Too Long`.
//!
//! hyper refuses a request line whose URI exceeds what `http::Uri` holds
//! (64 KiB) before any handler runs, answering `414 URI Too Long` with an
//! empty body and closing the connection. Every other failure a client sees
//! is a Kubernetes `Status`, so [`StatusOn414`] wraps an HTTP/1 connection's
//! I/O and, when hyper writes that canned answer, writes it with a JSON
//! `Status` body instead (code 414, no reason: metav1 has none for it, as
//! upstream's generic `NewGenericServerResponse` leaves it unknown). Nothing
//! else written on the connection changes. (Go's server has no URI limit of
//! its own; its 1 MiB header limit answers 431, as hyper does above ~400 KiB.)

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The `Status` body sent with a 414 (with its trailing newline).
pub fn status_body() -> Vec<u8> {
    let status = rkube_api::status::Status::new(414, "", "the request URI is too long");
    rkube_api::wire::to_json_body(&status).unwrap_or_default()
}

/// hyper's head for the 414, with the body's headers added, followed by the
/// body; `None` when `head` is not that answer (starts with `HTTP/1.x 414 `,
/// ends with the blank line, declares an empty body).
fn rewrite(head: &[u8]) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(head).ok()?;
    if !(text.starts_with("HTTP/1.1 414 ") || text.starts_with("HTTP/1.0 414 ")) {
        return None;
    }
    let headers = text.strip_suffix("\r\n\r\n")?;
    let kept: Vec<&str> = headers.split("\r\n").filter(|l| !l.eq_ignore_ascii_case("content-length: 0")).collect();
    if kept.len() == headers.split("\r\n").count() {
        return None;
    }
    let body = status_body();
    let mut out = kept.join("\r\n").into_bytes();
    out.extend_from_slice(
        format!("\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n", body.len()).as_bytes(),
    );
    out.extend_from_slice(&body);
    Some(out)
}

/// An HTTP/1 connection's I/O that gives hyper's 414 a `Status` body.
pub struct StatusOn414<T> {
    inner: T,
    /// Rewritten bytes accepted from hyper and not yet written to `inner`.
    pending: Vec<u8>,
    written: usize,
}

impl<T> StatusOn414<T> {
    /// Wraps `inner`.
    pub fn new(inner: T) -> Self {
        StatusOn414 { inner, pending: Vec::new(), written: 0 }
    }
}

impl<T: AsyncWrite + Unpin> StatusOn414<T> {
    /// Writes what is pending; `Ready(Ok)` once all of it is out.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.written < self.pending.len() {
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &self.pending[self.written..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.written += n;
        }
        self.pending.clear();
        self.written = 0;
        Poll::Ready(Ok(()))
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for StatusOn414<T> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for StatusOn414<T> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        ready!(self.poll_drain(cx))?;
        if let Some(replacement) = rewrite(buf) {
            self.pending = replacement;
            self.written = 0;
            // hyper's bytes count as written; the replacement drains from
            // here, the next write, flush or shutdown.
            let _ = self.poll_drain(cx)?;
            return Poll::Ready(Ok(buf.len()));
        }
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_drain(cx))?;
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_drain(cx))?;
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_hypers_empty_414_is_rewritten() {
        let head = b"HTTP/1.1 414 URI Too Long\r\nconnection: close\r\ncontent-length: 0\r\ndate: x\r\n\r\n";
        let out = String::from_utf8(rewrite(head).unwrap()).unwrap();
        let body = String::from_utf8(status_body()).unwrap();
        assert_eq!(
            body,
            "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"the request URI is too long\",\"code\":414}\n"
        );
        assert_eq!(
            out,
            format!(
                "HTTP/1.1 414 URI Too Long\r\nconnection: close\r\ndate: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            )
        );
        assert_eq!(rewrite(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"), None);
        assert_eq!(rewrite(b"HTTP/1.1 414 URI Too Long\r\ncontent-length: 12\r\n\r\n"), None);
        assert_eq!(rewrite(b"{\"kind\":\"Status\"}"), None);
    }
}
