//! A LIST body built lazily from pieces the response already holds: an
//! opening, each item's bytes (each after its own prefix: a `,` in JSON,
//! a field header in protobuf), a closing; cut into chunks of about a given
//! size, each made only when the connection asks for it. A response then
//! holds references to the items plus one chunk, never a copy of the body.

use bytes::{Bytes, BytesMut};

/// The chunks of `head`, then for each item `prefix(index, len, chunk)`
/// followed by `bytes(item)`, then `tail`, about `chunk_bytes` each (an item
/// is never split). The caller knows the total length (for
/// `Content-Length`).
pub fn splice<T: Send + 'static>(
    head: Vec<u8>,
    items: Vec<T>,
    bytes: impl Fn(&T) -> &[u8] + Send + 'static,
    prefix: impl Fn(usize, usize, &mut BytesMut) + Send + 'static,
    tail: &'static [u8],
    chunk_bytes: usize,
) -> impl Iterator<Item = Bytes> + Send + 'static {
    let mut head = Some(head);
    let mut next = 0usize;
    let mut closed = false;
    std::iter::from_fn(move || {
        if closed {
            return None;
        }
        let mut chunk = BytesMut::with_capacity(chunk_bytes + 16);
        if let Some(h) = head.take() {
            chunk.extend_from_slice(&h);
        }
        while next < items.len() && (chunk.is_empty() || chunk.len() + bytes(&items[next]).len() < chunk_bytes) {
            let b = bytes(&items[next]);
            prefix(next, b.len(), &mut chunk);
            chunk.extend_from_slice(b);
            next += 1;
        }
        if next == items.len() {
            chunk.extend_from_slice(tail);
            closed = true;
        }
        Some(chunk.freeze())
    })
}
