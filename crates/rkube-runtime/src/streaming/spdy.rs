//! SPDY/3.1 framing, as client-go's streaming clients speak it (the `spdystream` library under
//! `k8s.io/apimachinery/pkg/util/httpstream/spdy`; protocol: draft-mbelshe-httpbis-spdy-00).
//!
//! Only what a server of `exec`, `attach` and `port-forward` needs: reading `SYN_STREAM`,
//! `DATA`, `RST_STREAM`, `PING`, `GOAWAY` (others are skipped), and writing `SYN_REPLY`,
//! `DATA`, `PING` and `GOAWAY`. Header blocks are zlib streams primed with the SPDY/3
//! dictionary ([`dictionary`]); each direction of a connection has one compression context for
//! all its header blocks. Flow control (`WINDOW_UPDATE`) is not enforced, as `spdystream`
//! does not enforce it either.

use std::io;

use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};
use tokio::io::{AsyncRead, AsyncReadExt};

/// Frame flag: the sender's last frame on the stream.
pub const FLAG_FIN: u8 = 0x01;
/// Largest frame payload accepted (spdystream's own limit is 16 MiB).
pub const MAX_FRAME: usize = 16 << 20;

const VERSION: u16 = 3;
const SYN_STREAM: u16 = 1;
const SYN_REPLY: u16 = 2;
const RST_STREAM: u16 = 3;
const PING: u16 = 6;
const GOAWAY: u16 = 7;

/// Header names and words, each written with a 4-byte big-endian length, that open the SPDY/3
/// header dictionary (draft-mbelshe-httpbis-spdy-00, section 2.6.10.1).
const DICTIONARY_WORDS: &[&str] = &[
    "options", "head", "post", "put", "delete", "trace", "accept", "accept-charset", "accept-encoding",
    "accept-language", "accept-ranges", "age", "allow", "authorization", "cache-control", "connection",
    "content-base", "content-encoding", "content-language", "content-length", "content-location", "content-md5",
    "content-range", "content-type", "date", "etag", "expect", "expires", "from", "host", "if-match",
    "if-modified-since", "if-none-match", "if-range", "if-unmodified-since", "last-modified", "location",
    "max-forwards", "pragma", "proxy-authenticate", "proxy-authorization", "range", "referer", "retry-after",
    "server", "te", "trailer", "transfer-encoding", "upgrade", "user-agent", "vary", "via", "warning",
    "www-authenticate", "method", "get", "status", "200 OK", "version", "HTTP/1.1", "url", "public",
    "set-cookie", "keep-alive", "origin",
];

/// The text that closes the SPDY/3 header dictionary, as is.
const DICTIONARY_TAIL: &str = concat!(
    "100101201202205206300302303304305306307402405406407408409410411412413414415416417502504505",
    "203 Non-Authoritative Information204 No Content301 Moved Permanently400 Bad Request401 Unauthorized",
    "403 Forbidden404 Not Found500 Internal Server Error501 Not Implemented503 Service Unavailable",
    "Jan Feb Mar Apr May Jun Jul Aug Sept Oct Nov Dec 00:00:00 Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMT",
    "chunked,text/html,image/png,image/jpg,image/gif,application/xml,application/xhtml+xml,text/plain,",
    "text/javascript,publicprivatemax-age=gzip,deflate,sdchcharset=utf-8charset=iso-8859-1,utf-,*,enq=0.",
);

/// The SPDY/3 zlib dictionary of header blocks (1423 bytes).
pub fn dictionary() -> Vec<u8> {
    let mut d = Vec::with_capacity(1423);
    for w in DICTIONARY_WORDS {
        d.extend_from_slice(&(w.len() as u32).to_be_bytes());
        d.extend_from_slice(w.as_bytes());
    }
    d.extend_from_slice(DICTIONARY_TAIL.as_bytes());
    d
}

/// Headers of a stream: lower-case names, values in order.
pub type Headers = Vec<(String, String)>;

/// The first value of header `name` (lower case).
pub fn header<'a>(headers: &'a Headers, name: &str) -> Option<&'a str> {
    headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

/// One frame read from a client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frame {
    /// A new stream opened by the client.
    SynStream {
        /// Odd for client streams.
        stream_id: u32,
        /// No data follows.
        fin: bool,
        /// Its headers.
        headers: Headers,
    },
    /// Data on a stream.
    Data {
        /// The stream.
        stream_id: u32,
        /// The client's last frame on the stream.
        fin: bool,
        /// The bytes.
        data: Vec<u8>,
    },
    /// The client reset a stream.
    RstStream {
        /// The stream.
        stream_id: u32,
    },
    /// A ping to be answered with the same id.
    Ping {
        /// The id.
        id: u32,
    },
    /// The client is going away.
    GoAway,
    /// A frame this server has no use for (`SETTINGS`, `WINDOW_UPDATE`, `HEADERS`, ...).
    Other,
}

fn bad(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.into())
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

/// Reads frames from a client, inflating header blocks with one shared context.
pub struct FrameReader<R> {
    inner: R,
    inflate: Decompress,
    dictionary: Vec<u8>,
}

impl<R: AsyncRead + Unpin> FrameReader<R> {
    /// A reader over `inner`.
    pub fn new(inner: R) -> Self {
        Self { inner, inflate: Decompress::new(true), dictionary: dictionary() }
    }

    /// The next frame; `Ok(None)` at a clean end of the connection.
    ///
    /// # Errors
    /// I/O errors, a frame larger than [`MAX_FRAME`], a version other than 3, a header block
    /// that does not inflate or parse.
    pub async fn next(&mut self) -> io::Result<Option<Frame>> {
        let mut head = [0u8; 8];
        match self.inner.read_exact(&mut head).await {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
            Err(e) => return Err(e),
        }
        let flags = head[4];
        let len = (usize::from(head[5]) << 16) | (usize::from(head[6]) << 8) | usize::from(head[7]);
        if len > MAX_FRAME {
            return Err(bad(format!("SPDY frame of {len} bytes is too large")));
        }
        let mut body = vec![0u8; len];
        self.inner.read_exact(&mut body).await?;
        if head[0] & 0x80 == 0 {
            let stream_id = be32(&head[..4]) & 0x7fff_ffff;
            return Ok(Some(Frame::Data { stream_id, fin: flags & FLAG_FIN != 0, data: body }));
        }
        let version = u16::from_be_bytes([head[0] & 0x7f, head[1]]);
        if version != VERSION {
            return Err(bad(format!("SPDY version {version} is not supported")));
        }
        let kind = u16::from_be_bytes([head[2], head[3]]);
        let frame = match kind {
            SYN_STREAM if body.len() >= 10 => {
                let stream_id = be32(&body[..4]) & 0x7fff_ffff;
                let headers = self.headers(&body[10..])?;
                Frame::SynStream { stream_id, fin: flags & FLAG_FIN != 0, headers }
            }
            RST_STREAM if body.len() >= 8 => Frame::RstStream { stream_id: be32(&body[..4]) & 0x7fff_ffff },
            PING if body.len() >= 4 => Frame::Ping { id: be32(&body[..4]) },
            GOAWAY => Frame::GoAway,
            SYN_STREAM | RST_STREAM | PING => return Err(bad("short SPDY control frame")),
            _ => Frame::Other,
        };
        Ok(Some(frame))
    }

    /// Inflates and parses one header block.
    fn headers(&mut self, block: &[u8]) -> io::Result<Headers> {
        let mut out = Vec::with_capacity(block.len() * 4 + 64);
        let mut input = block;
        loop {
            let before_in = self.inflate.total_in();
            if out.capacity() - out.len() < 1024 {
                out.reserve(4096);
            }
            match self.inflate.decompress_vec(input, &mut out, FlushDecompress::Sync) {
                Ok(Status::StreamEnd) => break,
                Ok(_) => {}
                Err(e) if e.needs_dictionary().is_some() => {
                    self.inflate.set_dictionary(&self.dictionary).map_err(|e| bad(format!("SPDY header dictionary: {e}")))?;
                }
                Err(e) => return Err(bad(format!("SPDY header block: {e}"))),
            }
            let used = usize::try_from(self.inflate.total_in() - before_in).unwrap_or(input.len());
            input = &input[used.min(input.len())..];
            if input.is_empty() && out.len() < out.capacity() {
                break;
            }
        }
        parse_header_block(&out)
    }
}

/// Parses an inflated header block: a count, then length-prefixed names and values (values
/// holding several entries separated by NUL).
///
/// # Errors
/// A block cut short or with names or values that are not UTF-8.
pub fn parse_header_block(b: &[u8]) -> io::Result<Headers> {
    let mut pos = 0;
    let mut take = |n: usize| -> io::Result<&[u8]> {
        let end = pos + n;
        let s = b.get(pos..end).ok_or_else(|| bad("SPDY header block is cut short"))?;
        pos = end;
        Ok(s)
    };
    let count = be32(take(4)?);
    let mut headers = Vec::new();
    for _ in 0..count {
        let n = be32(take(4)?) as usize;
        let name = std::str::from_utf8(take(n)?).map_err(|_| bad("SPDY header name is not UTF-8"))?.to_ascii_lowercase();
        let n = be32(take(4)?) as usize;
        let value = std::str::from_utf8(take(n)?).map_err(|_| bad("SPDY header value is not UTF-8"))?;
        for v in value.split('\0') {
            headers.push((name.clone(), v.to_string()));
        }
    }
    Ok(headers)
}

/// Encodes frames to a client, deflating header blocks with one shared context.
pub struct FrameWriter {
    deflate: Compress,
}

impl Default for FrameWriter {
    fn default() -> Self {
        Self::new()
    }
}

fn control(kind: u16, flags: u8, body: &[u8]) -> Vec<u8> {
    let len = body.len() as u32;
    let mut f = Vec::with_capacity(8 + body.len());
    f.extend_from_slice(&(0x8000 | VERSION).to_be_bytes());
    f.extend_from_slice(&kind.to_be_bytes());
    f.push(flags);
    f.extend_from_slice(&len.to_be_bytes()[1..]);
    f.extend_from_slice(body);
    f
}

impl FrameWriter {
    /// A writer with a fresh compression context primed with the dictionary.
    pub fn new() -> Self {
        let mut deflate = Compress::new(Compression::default(), true);
        // Setting a dictionary on a fresh zlib stream cannot fail.
        let _ = deflate.set_dictionary(&dictionary());
        Self { deflate }
    }

    fn header_block(&mut self, headers: &[(&str, &str)]) -> Vec<u8> {
        let mut raw = Vec::new();
        raw.extend_from_slice(&(headers.len() as u32).to_be_bytes());
        for (k, v) in headers {
            raw.extend_from_slice(&(k.len() as u32).to_be_bytes());
            raw.extend_from_slice(k.as_bytes());
            raw.extend_from_slice(&(v.len() as u32).to_be_bytes());
            raw.extend_from_slice(v.as_bytes());
        }
        let mut out = Vec::with_capacity(raw.len() + 64);
        let mut input = &raw[..];
        loop {
            if out.capacity() - out.len() < 64 {
                out.reserve(256);
            }
            let before = self.deflate.total_in();
            if self.deflate.compress_vec(input, &mut out, FlushCompress::Sync).is_err() {
                break;
            }
            let used = usize::try_from(self.deflate.total_in() - before).unwrap_or(input.len());
            input = &input[used.min(input.len())..];
            // A sync flush is complete once it left room in the output.
            if input.is_empty() && out.len() < out.capacity() {
                break;
            }
        }
        out
    }

    /// `SYN_REPLY` accepting `stream_id`.
    pub fn syn_reply(&mut self, stream_id: u32, headers: &[(&str, &str)]) -> Vec<u8> {
        let mut body = (stream_id & 0x7fff_ffff).to_be_bytes().to_vec();
        body.extend_from_slice(&self.header_block(headers));
        control(SYN_REPLY, 0, &body)
    }

    /// `DATA` on `stream_id` (with `fin`, the server's last frame on it).
    pub fn data(stream_id: u32, fin: bool, data: &[u8]) -> Vec<u8> {
        let mut f = Vec::with_capacity(8 + data.len());
        f.extend_from_slice(&(stream_id & 0x7fff_ffff).to_be_bytes());
        f.push(if fin { FLAG_FIN } else { 0 });
        f.extend_from_slice(&(data.len() as u32).to_be_bytes()[1..]);
        f.extend_from_slice(data);
        f
    }

    /// `PING` answering the client's `id`.
    pub fn ping(id: u32) -> Vec<u8> {
        control(PING, 0, &id.to_be_bytes())
    }

    /// `GOAWAY` after `last_stream` (status OK).
    pub fn go_away(last_stream: u32) -> Vec<u8> {
        let mut body = last_stream.to_be_bytes().to_vec();
        body.extend_from_slice(&0u32.to_be_bytes());
        control(GOAWAY, 0, &body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dictionary_is_the_spdy3_one() {
        let d = dictionary();
        assert_eq!(d.len(), 1423);
        assert_eq!(&d[..11], b"\x00\x00\x00\x07options");
        assert!(d.ends_with(b"enq=0."));
    }

    /// Client frames built with our own writer's codec (header blocks share one context).
    fn syn_stream(w: &mut FrameWriter, id: u32, headers: &[(&str, &str)]) -> Vec<u8> {
        let mut body = id.to_be_bytes().to_vec();
        body.extend_from_slice(&[0, 0, 0, 0, 0, 0]);
        body.extend_from_slice(&w.header_block(headers));
        control(SYN_STREAM, 0, &body)
    }

    #[tokio::test]
    async fn frames_round_trip_with_one_compression_context_per_direction() {
        let mut client = FrameWriter::new();
        let mut wire = Vec::new();
        wire.extend(syn_stream(&mut client, 1, &[("streamtype", "error")]));
        wire.extend(syn_stream(&mut client, 3, &[("streamtype", "data"), ("port", "8080"), ("requestid", "0")]));
        wire.extend(FrameWriter::data(3, true, b"hello"));
        wire.extend(FrameWriter::ping(7));
        let mut r = FrameReader::new(&wire[..]);
        let one = r.next().await.expect("read").expect("frame");
        assert_eq!(one, Frame::SynStream { stream_id: 1, fin: false, headers: vec![("streamtype".into(), "error".into())] });
        let Some(Frame::SynStream { stream_id: 3, headers, .. }) = r.next().await.expect("read") else { panic!("second stream") };
        assert_eq!((header(&headers, "port"), header(&headers, "requestid")), (Some("8080"), Some("0")));
        assert_eq!(r.next().await.expect("read"), Some(Frame::Data { stream_id: 3, fin: true, data: b"hello".to_vec() }));
        assert_eq!(r.next().await.expect("read"), Some(Frame::Ping { id: 7 }));
        assert_eq!(r.next().await.expect("read"), None);
    }

    #[test]
    fn header_blocks_split_nul_separated_values_and_refuse_short_input() {
        let mut raw = 1u32.to_be_bytes().to_vec();
        raw.extend_from_slice(&4u32.to_be_bytes());
        raw.extend_from_slice(b"Port");
        raw.extend_from_slice(&7u32.to_be_bytes());
        raw.extend_from_slice(b"80\x008080");
        let h = parse_header_block(&raw).expect("parse");
        assert_eq!(h, vec![("port".to_string(), "80".to_string()), ("port".to_string(), "8080".to_string())]);
        assert!(parse_header_block(&raw[..10]).is_err());
    }
}
