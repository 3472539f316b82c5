//! Reading container logs in the CRI log format for `/containerLogs` (upstream
//! `pkg/kubelet/kuberuntime/logs/logs.go` semantics): records
//! `<RFC3339Nano> <stdout|stderr> <P|F> <text>`; partial (`P`) records are joined with the
//! following ones up to the closing `F` record into one line; the prefix is dropped unless
//! `timestamps` is asked for, in which case the line starts with the first piece's timestamp
//! as written. `sinceSeconds`/`sinceTime` drop lines written before the instant, `tailLines`
//! keeps the last N lines, `limitBytes` cuts the output after N bytes.

use k8s_openapi::jiff::Timestamp;

/// One output stream of a container.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogStream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

/// One record of a CRI log file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record<'a> {
    /// The timestamp as written (RFC 3339 with nanoseconds).
    pub time_text: &'a str,
    /// The parsed timestamp.
    pub time: Timestamp,
    /// Which stream.
    pub stream: LogStream,
    /// `true` for a `P` record (a piece of a longer line).
    pub partial: bool,
    /// The text, without the record's newline.
    pub text: &'a [u8],
}

/// Why a record could not be parsed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// Fewer than the four space-separated fields.
    #[error("log record has too few fields")]
    Fields,
    /// The timestamp is not RFC 3339.
    #[error("log record timestamp {0:?} is not RFC 3339")]
    Time(String),
    /// The stream is neither `stdout` nor `stderr`.
    #[error("log record stream {0:?} is unknown")]
    Stream(String),
    /// The tag is neither `P` nor `F`.
    #[error("log record tag {0:?} is unknown")]
    Tag(String),
}

/// Parses one record (one line of the file, without its newline).
///
/// # Errors
/// [`ParseError`] for a line that is not a CRI record.
pub fn parse_record(line: &[u8]) -> Result<Record<'_>, ParseError> {
    let mut parts = line.splitn(4, |b| *b == b' ');
    let time_bytes = parts.next().ok_or(ParseError::Fields)?;
    let stream_bytes = parts.next().ok_or(ParseError::Fields)?;
    let tag = parts.next().ok_or(ParseError::Fields)?;
    // A record of an empty line may lack the final space.
    let text = parts.next().unwrap_or(&[]);
    let time_text = std::str::from_utf8(time_bytes).map_err(|_| ParseError::Time(String::from_utf8_lossy(time_bytes).into()))?;
    let time: Timestamp = time_text.parse().map_err(|_| ParseError::Time(time_text.to_string()))?;
    let stream = match stream_bytes {
        b"stdout" => LogStream::Stdout,
        b"stderr" => LogStream::Stderr,
        other => return Err(ParseError::Stream(String::from_utf8_lossy(other).into())),
    };
    let partial = match tag {
        b"P" => true,
        b"F" => false,
        other => return Err(ParseError::Tag(String::from_utf8_lossy(other).into())),
    };
    Ok(Record { time_text, time, stream, partial, text })
}

/// One whole log line (partial records joined).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogLine {
    /// Timestamp of its first record.
    pub time: Timestamp,
    /// That timestamp as written in the file.
    pub time_text: String,
    /// Which stream.
    pub stream: LogStream,
    /// The text without a trailing newline.
    pub text: Vec<u8>,
}

impl LogLine {
    /// The bytes sent to the client: `[<timestamp> ]<text>\n`.
    pub fn render(&self, timestamps: bool) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.text.len() + 40);
        if timestamps {
            out.extend_from_slice(self.time_text.as_bytes());
            out.push(b' ');
        }
        out.extend_from_slice(&self.text);
        out.push(b'\n');
        out
    }
}

/// Joins records into lines as bytes arrive; keeps an unfinished record (no newline yet) and
/// unfinished partial lines per stream until the rest comes.
#[derive(Debug, Default)]
pub struct LineDecoder {
    buffer: Vec<u8>,
    pending: [Option<LogLine>; 2],
}

impl LineDecoder {
    /// Feeds bytes read from the file; returns the lines they complete. Records that do not
    /// parse are skipped (as kubelet logs and skips them).
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<LogLine> {
        self.buffer.extend_from_slice(bytes);
        let mut lines = Vec::new();
        let mut consumed = 0;
        while let Some(pos) = self.buffer[consumed..].iter().position(|b| *b == b'\n') {
            let end = consumed + pos;
            if let Ok(rec) = parse_record(&self.buffer[consumed..end]) {
                let slot = match rec.stream {
                    LogStream::Stdout => 0,
                    LogStream::Stderr => 1,
                };
                let line = self.pending[slot].get_or_insert_with(|| LogLine {
                    time: rec.time,
                    time_text: rec.time_text.to_string(),
                    stream: rec.stream,
                    text: Vec::new(),
                });
                line.text.extend_from_slice(rec.text);
                if !rec.partial {
                    if let Some(done) = self.pending[slot].take() {
                        lines.push(done);
                    }
                }
            } else {
                tracing::debug!("skipping a container log record that does not parse");
            }
            consumed = end + 1;
        }
        self.buffer.drain(..consumed);
        lines
    }
}

/// Which lines and bytes to send (upstream `PodLogOptions` as the kubelet applies them).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Selection {
    /// Drop lines written before this instant (`sinceSeconds` resolved, or `sinceTime`).
    pub since: Option<Timestamp>,
    /// Keep only the last N lines of what is already written.
    pub tail_lines: Option<u64>,
    /// Stop after this many bytes of output.
    pub limit_bytes: Option<u64>,
    /// Prefix each line with its timestamp.
    pub timestamps: bool,
}

impl Selection {
    /// Whether `line` passes `since`.
    pub fn wanted(&self, line: &LogLine) -> bool {
        self.since.is_none_or(|since| line.time >= since)
    }

    /// The lines of the existing log to send: `since` applied, then the last `tail_lines`.
    pub fn initial(&self, lines: Vec<LogLine>) -> Vec<LogLine> {
        let mut kept: Vec<LogLine> = lines.into_iter().filter(|l| self.wanted(l)).collect();
        if let Some(n) = self.tail_lines {
            let n = usize::try_from(n).unwrap_or(usize::MAX);
            if kept.len() > n {
                kept.drain(..kept.len() - n);
            }
        }
        kept
    }
}

/// Counts output against `limitBytes`.
#[derive(Debug)]
pub struct ByteBudget {
    left: Option<u64>,
}

impl ByteBudget {
    /// A budget of `limit` bytes (`None`: unlimited).
    pub fn new(limit: Option<u64>) -> Self {
        Self { left: limit }
    }

    /// Cuts `bytes` to what is left and charges it; `None` once the budget is spent.
    pub fn take(&mut self, mut bytes: Vec<u8>) -> Option<Vec<u8>> {
        match &mut self.left {
            None => Some(bytes),
            Some(0) => None,
            Some(left) => {
                let n = usize::try_from(*left).unwrap_or(usize::MAX).min(bytes.len());
                bytes.truncate(n);
                *left -= n as u64;
                Some(bytes)
            }
        }
    }

    /// Whether nothing more may be sent.
    pub fn spent(&self) -> bool {
        self.left == Some(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().expect("timestamp")
    }

    #[test]
    fn records_of_both_streams_and_tags_parse() {
        let r = parse_record(b"2026-01-02T03:04:05.123456789Z stdout F hello world").expect("parses");
        assert_eq!((r.stream, r.partial, r.text), (LogStream::Stdout, false, &b"hello world"[..]));
        assert_eq!(r.time, ts("2026-01-02T03:04:05.123456789Z"));
        let r = parse_record(b"2026-01-02T03:04:05Z stderr P part").expect("parses");
        assert_eq!((r.stream, r.partial, r.text), (LogStream::Stderr, true, &b"part"[..]));
        assert_eq!(parse_record(b"2026-01-02T03:04:05Z stdout F").expect("empty line").text, b"");
        assert_eq!(parse_record(b"nonsense"), Err(ParseError::Fields));
        assert!(matches!(parse_record(b"yesterday stdout F x"), Err(ParseError::Time(_))));
        assert!(matches!(parse_record(b"2026-01-02T03:04:05Z stdin F x"), Err(ParseError::Stream(_))));
        assert!(matches!(parse_record(b"2026-01-02T03:04:05Z stdout X x"), Err(ParseError::Tag(_))));
    }

    #[test]
    fn partial_records_join_per_stream_and_split_reads_wait_for_the_newline() {
        let mut d = LineDecoder::default();
        let text = b"2026-01-02T03:04:05.1Z stdout P ab\n2026-01-02T03:04:05.2Z stderr F err\n2026-01-02T03:04:05.3Z stdout F cd\n2026-01-02T03:04:05.4Z stdout F e";
        let lines = d.feed(text);
        assert_eq!(lines.len(), 2);
        assert_eq!((lines[0].stream, lines[0].text.as_slice()), (LogStream::Stderr, &b"err"[..]));
        assert_eq!((lines[1].stream, lines[1].text.as_slice()), (LogStream::Stdout, &b"abcd"[..]));
        assert_eq!(lines[1].time_text, "2026-01-02T03:04:05.1Z", "a joined line keeps its first record's time");
        let rest = d.feed(b"f\n");
        assert_eq!(rest.len(), 1);
        assert_eq!(rest[0].text, b"ef");
    }

    #[test]
    fn rendering_strips_the_prefix_unless_timestamps() {
        let mut d = LineDecoder::default();
        let line = d.feed(b"2026-01-02T03:04:05.5Z stdout F hi\n").remove(0);
        assert_eq!(line.render(false), b"hi\n");
        assert_eq!(line.render(true), b"2026-01-02T03:04:05.5Z hi\n");
    }

    #[test]
    fn since_then_tail_select_lines_and_limit_bytes_cuts_output() {
        let mut d = LineDecoder::default();
        let lines = d.feed(
            b"2026-01-02T03:04:01Z stdout F one\n2026-01-02T03:04:02Z stdout F two\n2026-01-02T03:04:03Z stdout F three\n",
        );
        let texts = |ls: Vec<LogLine>| ls.into_iter().map(|l| String::from_utf8_lossy(&l.text).into_owned()).collect::<Vec<_>>();
        assert_eq!(texts(Selection { tail_lines: Some(1), ..Default::default() }.initial(lines.clone())), ["three"]);
        assert_eq!(texts(Selection { tail_lines: Some(0), ..Default::default() }.initial(lines.clone())), Vec::<String>::new());
        assert_eq!(texts(Selection { tail_lines: Some(10), ..Default::default() }.initial(lines.clone())), ["one", "two", "three"]);
        let since = Selection { since: Some(ts("2026-01-02T03:04:02Z")), ..Default::default() };
        assert_eq!(texts(since.initial(lines.clone())), ["two", "three"]);
        let both = Selection { since: Some(ts("2026-01-02T03:04:02Z")), tail_lines: Some(1), ..Default::default() };
        assert_eq!(texts(both.initial(lines)), ["three"]);
        let mut budget = ByteBudget::new(Some(6));
        assert_eq!(budget.take(b"one\n".to_vec()), Some(b"one\n".to_vec()));
        assert_eq!(budget.take(b"two\n".to_vec()), Some(b"tw".to_vec()));
        assert!(budget.spent());
        assert_eq!(budget.take(b"x\n".to_vec()), None);
        assert_eq!(ByteBudget::new(None).take(b"all".to_vec()), Some(b"all".to_vec()));
    }
}
