//! Body helpers shared by the filters.
//!
//! - [`guard_response`]: keeps a guard value alive until the response body has
//!   been sent (or dropped), so work that must last as long as a streaming
//!   response (a watch's gauge, its `ResponseComplete` audit event, an inflight
//!   slot, a trace) ends exactly when the body does. Size hints pass through,
//!   so `Content-Length` is unchanged.
//! - [`capture`]: reads a body up to a cap for the audit log and hands back an
//!   equivalent body; over the cap, the body streams on untouched and nothing
//!   is captured.
//! - [`drain`] and [`DrainOnDrop`]: read and discard what is left of a
//!   request body, within [`MAX_DRAIN_BYTES`] and [`MAX_DRAIN_TIME`], so the
//!   client that is still sending gets the answer: as Go's server drains a
//!   body its handler did not read (`net/http`'s `maxPostHandlerReadBytes`,
//!   and the HTTP/2 server's handling of a handler that returned early).

use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::response::Response;
use bytes::{Bytes, BytesMut};
use http_body::{Body as _, Frame, SizeHint};
use http_body_util::BodyExt;

/// The most of a request body read and discarded after its answer is known.
pub(crate) const MAX_DRAIN_BYTES: usize = 64 * 1024 * 1024;

/// How long that drain may take.
pub(crate) const MAX_DRAIN_TIME: std::time::Duration = std::time::Duration::from_secs(10);

/// Reads and discards `body` until it ends, fails, `already` plus what was
/// read reaches [`MAX_DRAIN_BYTES`], or [`MAX_DRAIN_TIME`] has passed.
pub(crate) async fn drain<B: http_body::Body + Unpin>(mut body: B, already: usize) {
    let deadline = tokio::time::Instant::now() + MAX_DRAIN_TIME;
    let mut drained = already;
    while drained < MAX_DRAIN_BYTES {
        match tokio::time::timeout_at(deadline, body.frame()).await {
            Ok(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    drained += bytes::Buf::remaining(data);
                }
            }
            _ => break,
        }
    }
}

/// Answers HTTP/2 requests only once their body was read: when the handler
/// answered without reading it (401, 404, 415 ...), what is left is drained
/// ([`drain`]) before the answer goes out. Otherwise the answer ends the
/// stream while the client is still sending, and the client either resets
/// the stream or ends its upload short (curl), which the HTTP/2 layer then
/// resets as a protocol error; curl reports either as "Stream error in the
/// HTTP/2 framing layer" instead of the answer. Go's server reads the body of
/// a handler that returned early in the same way. HTTP/1.1 requests pass.
pub(crate) async fn complete_http2_answers(req: axum::extract::Request, next: axum::middleware::Next) -> Response {
    if req.version() != axum::http::Version::HTTP_2 {
        return next.run(req).await;
    }
    let (tx, mut rx) = tokio::sync::oneshot::channel();
    let req = req.map(|b| Body::new(DrainOnDrop { inner: Some(b), unread: Some(tx) }));
    let resp = next.run(req).await;
    if let Ok(rest) = rx.try_recv() {
        drain(rest, 0).await;
    }
    resp
}

/// A request body that, dropped before its end, hands what is left to
/// [`complete_http2_answers`] (or, when that already answered, drains it in
/// the background so the stream is not reset).
struct DrainOnDrop {
    inner: Option<Body>,
    unread: Option<tokio::sync::oneshot::Sender<Body>>,
}

impl http_body::Body for DrainOnDrop {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        match self.get_mut().inner.as_mut() {
            Some(b) => Pin::new(b).poll_frame(cx),
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.as_ref().is_none_or(|b| b.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.as_ref().map(|b| b.size_hint()).unwrap_or_else(|| SizeHint::with_exact(0))
    }
}

impl Drop for DrainOnDrop {
    fn drop(&mut self) {
        let Some(body) = self.inner.take() else { return };
        if body.is_end_stream() {
            return;
        }
        let body = match self.unread.take().map(|tx| tx.send(body)) {
            Some(Ok(())) => return,
            Some(Err(body)) => body,
            None => return,
        };
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(drain(body, 0));
        }
    }
}

/// A body that drops `guard` when the inner body ends or is dropped.
struct GuardBody<G> {
    inner: Body,
    guard: Option<G>,
}

impl<G: Send + Unpin + 'static> http_body::Body for GuardBody<G> {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        if matches!(polled, Poll::Ready(None) | Poll::Ready(Some(Err(_)))) {
            this.guard.take();
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// `resp` with `guard` dropped when its body is finished or dropped.
pub(crate) fn guard_response<G: Send + Unpin + 'static>(resp: Response, guard: G) -> Response {
    let (parts, body) = resp.into_parts();
    Response::from_parts(parts, Body::new(GuardBody { inner: body, guard: Some(guard) }))
}

/// Reads `body` up to `cap` bytes. Returns an equivalent body and, when the
/// whole body fit, its bytes. A body known to be larger is not read at all.
pub(crate) async fn capture(body: Body, cap: usize) -> (Body, Option<Bytes>) {
    if body.size_hint().lower() as usize > cap {
        return (body, None);
    }
    let mut body = body;
    let mut chunks: Vec<Bytes> = Vec::new();
    let mut total = 0usize;
    loop {
        match body.frame().await {
            None => break,
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    total += data.len();
                    chunks.push(data);
                    if total > cap {
                        let head = futures::stream::iter(chunks.into_iter().map(Ok::<Bytes, axum::Error>));
                        let rest = body.into_data_stream();
                        use futures::StreamExt;
                        return (Body::from_stream(head.chain(rest)), None);
                    }
                }
            }
            Some(Err(e)) => {
                let head = futures::stream::iter(chunks.into_iter().map(Ok::<Bytes, axum::Error>));
                use futures::StreamExt;
                let failed = head.chain(futures::stream::once(async move { Err(e) }));
                return (Body::from_stream(failed), None);
            }
        }
    }
    let bytes = if chunks.len() == 1 {
        chunks.pop().unwrap_or_default()
    } else {
        let mut buf = BytesMut::with_capacity(total);
        for c in chunks {
            buf.extend_from_slice(&c);
        }
        buf.freeze()
    };
    (Body::from(bytes.clone()), Some(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    struct Flag(Arc<AtomicBool>);
    impl Drop for Flag {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    #[tokio::test]
    async fn guard_lives_until_the_body_is_read() {
        let done = Arc::new(AtomicBool::new(false));
        let resp = guard_response(Response::new(Body::from("hello")), Flag(done.clone()));
        assert_eq!(resp.body().size_hint().exact(), Some(5), "content length is kept");
        assert!(!done.load(Ordering::SeqCst));
        let bytes = resp.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(&bytes[..], b"hello");
        assert!(done.load(Ordering::SeqCst));
    }

    #[tokio::test]
    async fn capture_returns_small_bodies_and_streams_large_ones() {
        let (body, got) = capture(Body::from("abc"), 10).await;
        assert_eq!(got.as_deref(), Some(&b"abc"[..]));
        assert_eq!(&body.collect().await.unwrap().to_bytes()[..], b"abc");

        let stream = futures::stream::iter(vec![Ok::<_, std::io::Error>(Bytes::from("12345")), Ok(Bytes::from("67890"))]);
        let (body, got) = capture(Body::from_stream(stream), 6).await;
        assert!(got.is_none());
        assert_eq!(&body.collect().await.unwrap().to_bytes()[..], b"1234567890", "nothing lost");

        let (_, got) = capture(Body::from(vec![0u8; 100]), 10).await;
        assert!(got.is_none());
    }
}
