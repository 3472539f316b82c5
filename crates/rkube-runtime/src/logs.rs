//! Container log files in the CRI log format (what kubelet's `kubectl logs` path parses).
//!
//! One line per record: `<timestamp RFC3339Nano> <stream> <tag> <content>\n`, where stream is
//! `stdout` or `stderr` and tag is `F` (full line) or `P` (partial: a piece of a line longer than
//! [`MAX_LINE_BYTES`]; the last piece of a split line is `F`, and so is text the stream ended with
//! without a newline). Format as in upstream `pkg/kubelet/kuberuntime/logs` and containerd's
//! `pkg/cri/io/logger.go`.

use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

/// Longest piece of a line written as one record (containerd's default `max_container_log_line_size`).
pub const MAX_LINE_BYTES: usize = 16 * 1024;

/// Errors of the log writer.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// The log file or its directory could not be created or written.
    #[error("container log {path}: {source}")]
    Io {
        /// The log file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
}

/// Which output stream a record came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    /// The process's standard output.
    Stdout,
    /// The process's standard error.
    Stderr,
}

impl Stream {
    fn as_str(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }
}

/// Formats a time as Go's `time.RFC3339Nano` does (UTC, fraction without trailing zeros).
pub fn rfc3339_nano(ts_ns: i64) -> String {
    let secs = ts_ns.div_euclid(1_000_000_000);
    let nanos = ts_ns.rem_euclid(1_000_000_000) as u32;
    let dt: DateTime<Utc> = DateTime::from_timestamp(secs, nanos).unwrap_or_default();
    let base = dt.format("%Y-%m-%dT%H:%M:%S").to_string();
    if nanos == 0 {
        return format!("{base}Z");
    }
    let frac = format!("{nanos:09}");
    format!("{base}.{}Z", frac.trim_end_matches('0'))
}

/// Formats one record (without splitting); `content` must not contain a newline.
pub fn format_record(ts_ns: i64, stream: Stream, partial: bool, content: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(content.len() + 48);
    out.extend_from_slice(rfc3339_nano(ts_ns).as_bytes());
    out.push(b' ');
    out.extend_from_slice(stream.as_str().as_bytes());
    out.extend_from_slice(if partial { b" P " } else { b" F " });
    out.extend_from_slice(content);
    out.push(b'\n');
    out
}

struct Piece {
    stream: Stream,
    partial: bool,
    content: Vec<u8>,
}

/// A request to reopen a container's log file (CRI `ReopenContainerLog`): the answer says
/// whether the file at the log path could be opened again.
pub type Reopen = tokio::sync::oneshot::Sender<Result<(), LogError>>;

/// Copies a process's stdout and stderr into a CRI-format log file until both reach end of file.
///
/// Runs as one task per container; returns when both streams are closed (which the runtime
/// forces by killing the container's process group after its main process exits). A message on
/// `reopen` makes it open `path` again, after the node agent renamed the file to rotate it
/// (upstream kubelet's `pkg/kubelet/logs/container_log_manager.go`): records written before the
/// answer are in the old file, records after it in the new one. A file that cannot be opened
/// again is answered with the error, and records keep going to the old file.
pub async fn copy_to_log(
    path: Option<PathBuf>,
    stdout: impl AsyncRead + Unpin + Send + 'static,
    stderr: impl AsyncRead + Unpin + Send + 'static,
    now_ns: impl Fn() -> i64 + Send + 'static,
    mut reopen: mpsc::Receiver<Reopen>,
) -> Result<(), LogError> {
    let (tx, mut rx) = mpsc::channel::<Piece>(256);
    let out = tokio::spawn(read_lines(stdout, Stream::Stdout, tx.clone()));
    let err = tokio::spawn(read_lines(stderr, Stream::Stderr, tx));
    let mut file = match &path {
        Some(p) => Some(open_log(p).await?),
        None => None,
    };
    let mut reopening = true;
    loop {
        let piece = tokio::select! {
            piece = rx.recv() => piece,
            ask = reopen.recv(), if reopening => {
                match ask {
                    Some(answer) => {
                        let result = match &path {
                            Some(p) => open_log(p).await.map(|f| file = Some(f)),
                            None => Ok(()),
                        };
                        let _ = answer.send(result);
                    }
                    None => reopening = false,
                }
                continue;
            }
        };
        let Some(piece) = piece else { break };
        if let (Some(f), Some(p)) = (file.as_mut(), path.as_ref()) {
            let record = format_record(now_ns(), piece.stream, piece.partial, &piece.content);
            let res = async {
                f.write_all(&record).await?;
                f.flush().await
            }
            .await;
            res.map_err(|source| LogError::Io {
                path: p.clone(),
                source,
            })?;
        }
    }
    let _ = out.await;
    let _ = err.await;
    Ok(())
}

async fn open_log(path: &Path) -> Result<tokio::fs::File, LogError> {
    let io_err = |source| LogError::Io {
        path: path.to_path_buf(),
        source,
    };
    if let Some(dir) = path.parent() {
        tokio::fs::create_dir_all(dir).await.map_err(io_err)?;
    }
    tokio::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .await
        .map_err(io_err)
}

async fn read_lines(reader: impl AsyncRead + Unpin, stream: Stream, tx: mpsc::Sender<Piece>) {
    let mut reader = BufReader::new(reader);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        // Read at most one piece's worth, so an endless line cannot grow the buffer forever.
        let n = match (&mut reader)
            .take(MAX_LINE_BYTES as u64)
            .read_until(b'\n', &mut buf)
            .await
        {
            Ok(n) => n,
            Err(_) => return,
        };
        if n == 0 {
            return;
        }
        let full = buf.last() == Some(&b'\n');
        if full {
            buf.pop();
        }
        // A piece cut at MAX_LINE_BYTES without a newline is partial; so is nothing else.
        let partial = !full && n == MAX_LINE_BYTES;
        let piece = Piece {
            stream,
            partial,
            content: std::mem::take(&mut buf),
        };
        if tx.send(piece).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_nano_trims_trailing_zeros_like_go() {
        assert_eq!(rfc3339_nano(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339_nano(1_500_000_000), "1970-01-01T00:00:01.5Z");
        assert_eq!(
            rfc3339_nano(1_000_000_001),
            "1970-01-01T00:00:01.000000001Z"
        );
    }

    #[test]
    fn record_has_cri_shape() {
        let r = format_record(1_000_000_000, Stream::Stderr, false, b"hi there");
        assert_eq!(r, b"1970-01-01T00:00:01Z stderr F hi there\n");
        let p = format_record(1_000_000_000, Stream::Stdout, true, b"x");
        assert_eq!(p, b"1970-01-01T00:00:01Z stdout P x\n");
    }

    #[tokio::test]
    async fn long_lines_are_split_into_partial_records() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("c/0.log");
        let mut long = vec![b'a'; MAX_LINE_BYTES + 10];
        long.push(b'\n');
        long.extend_from_slice(b"tail");
        copy_to_log(
            Some(path.clone()),
            std::io::Cursor::new(long),
            std::io::Cursor::new(Vec::new()),
            || 0,
            mpsc::channel(1).1,
        )
        .await
        .expect("copy");
        let text = std::fs::read_to_string(&path).expect("read log");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[0].starts_with("1970-01-01T00:00:00Z stdout P aaa"));
        assert_eq!(
            lines[1],
            format!("1970-01-01T00:00:00Z stdout F {}", "a".repeat(10))
        );
        assert_eq!(lines[2], "1970-01-01T00:00:00Z stdout F tail");
    }
}

#[cfg(test)]
mod reopen_tests {
    use super::*;

    /// Records written before a reopen stay in the renamed file; later ones go to a new file
    /// at the log path.
    #[tokio::test]
    async fn a_reopen_after_a_rename_sends_later_records_to_a_new_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("c/0.log");
        let (mut out_w, out_r) = tokio::io::duplex(1024);
        let (reopen_tx, reopen_rx) = mpsc::channel(1);
        let copier = tokio::spawn(copy_to_log(
            Some(path.clone()),
            out_r,
            tokio::io::empty(),
            || 0,
            reopen_rx,
        ));
        out_w.write_all(b"before\n").await.expect("write");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while std::fs::read_to_string(&path)
            .unwrap_or_default()
            .is_empty()
        {
            assert!(
                std::time::Instant::now() < deadline,
                "first record never written"
            );
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        let rotated = dir.path().join("c/0.log.20261127-000000");
        std::fs::rename(&path, &rotated).expect("rename");
        let (answer, done) = tokio::sync::oneshot::channel();
        reopen_tx.send(answer).await.expect("ask");
        done.await.expect("answered").expect("reopened");
        out_w.write_all(b"after\n").await.expect("write");
        drop(out_w);
        copier.await.expect("task").expect("copy");
        assert_eq!(
            std::fs::read_to_string(&rotated).expect("rotated"),
            "1970-01-01T00:00:00Z stdout F before\n"
        );
        assert_eq!(
            std::fs::read_to_string(&path).expect("new"),
            "1970-01-01T00:00:00Z stdout F after\n"
        );
    }
}
