//! What an operator reads, for the filter-chain tests (`filters.rs`,
//! `operability.rs`, `filters_real_server.rs`): the process's `tracing` log
//! captured in memory (so a test can find the `Trace[...]` entry of one
//! request), and the JSON-lines audit log file.
#![allow(dead_code)]

use std::path::Path;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use serde_json::Value;

/// Everything logged by this test binary so far (raw bytes).
fn logs() -> &'static Mutex<Vec<u8>> {
    static LOGS: OnceLock<Mutex<Vec<u8>>> = OnceLock::new();
    LOGS.get_or_init(|| Mutex::new(Vec::new()))
}

struct LogWriter;
impl std::io::Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        logs().lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Sends this process's `tracing` output (INFO and up, no colours) to the
/// in-memory log, once per test binary.
pub fn init_logging() {
    static INIT: OnceLock<()> = OnceLock::new();
    INIT.get_or_init(|| {
        let _ = tracing_subscriber::fmt()
            .with_writer(|| LogWriter)
            .with_ansi(false)
            .with_max_level(tracing::Level::INFO)
            .try_init();
    });
}

/// Everything logged by this test binary so far, as text.
pub fn logged() -> String {
    String::from_utf8_lossy(&logs().lock().unwrap()).into_owned()
}

/// The lines of the trace logged for the request with `audit_id`, waiting
/// for it up to 10 s (it is logged when the response body is done). Every
/// line starts with `Trace[<id>]: `.
pub async fn trace_of(audit_id: &str) -> Vec<String> {
    for _ in 0..200 {
        let text = logged();
        let mut lines = text.lines().skip_while(|l| !(l.contains("Trace[") && l.contains(audit_id)));
        if let Some(head) = lines.next() {
            let id = head.split("Trace[").nth(1).and_then(|r| r.split(']').next()).unwrap_or("").to_string();
            let prefix = format!("Trace[{id}]: ");
            let head = head[head.find(&prefix).unwrap_or(0)..].to_string();
            let mut out = vec![head];
            out.extend(lines.take_while(|l| l.starts_with(&prefix)).map(str::to_string));
            if out.last().is_some_and(|l| l.ends_with("END")) {
                return out;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("no trace for audit ID {audit_id}");
}

/// The step names of a trace, in order (`---"<name>" ...` lines).
pub fn step_names(trace: &[String]) -> Vec<String> {
    trace.iter().filter_map(|l| l.split("---\"").nth(1)?.split('"').next().map(str::to_string)).collect()
}

/// The audit events in the JSON-lines audit log at `path` (none when it does
/// not exist yet); panics on a line that is not JSON.
pub fn read_audit(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap_or_else(|e| panic!("audit line is not JSON ({e}): {l}")))
        .collect()
}
