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

use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::response::Response;
use bytes::{Bytes, BytesMut};
use http_body::{Body as _, Frame, SizeHint};
use http_body_util::BodyExt;

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
