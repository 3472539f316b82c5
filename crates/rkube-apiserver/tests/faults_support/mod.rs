//! Helpers of `tests/faults.rs`: an HTTP client that never panics on a dead
//! server (the kill -9 test), a watch reader that tells an idle stream from
//! an ended one, a re-watching / re-listing watcher that records every event
//! it received, the checker comparing those records with the storage's own
//! history, storages whose watches can be held broken (so a cache stays not
//! ready as long as a test wants). The in-process server, the reqwest client
//! and `rv_of` are `cache_support`'s (which `tests/faults.rs` also declares).
#![allow(dead_code)]

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use rkube_apiserver::ServerConfig;
use rkube_storage::{EventKind, RangeRequest, Revision, Storage, WatchResponse};
use serde_json::Value;

pub use crate::cache_support::rv_of;
use crate::cache_support::{client_with_timeout, InProcess, Line, WatchHook, WatchHooked, WatchReader};

/// One answer: status, JSON body (Null when not JSON), raw text.
#[derive(Debug, Clone)]
pub struct Answer {
    /// HTTP status.
    pub code: u16,
    /// JSON body.
    pub body: Value,
    /// Raw text.
    pub text: String,
}

impl Answer {
    /// `Status.reason`.
    pub fn reason(&self) -> &str {
        self.body["reason"].as_str().unwrap_or("")
    }
    /// `metadata.resourceVersion` as a number (0 when absent).
    pub fn rv(&self) -> i64 {
        rv_of(&self.body)
    }
}

/// An HTTP client whose calls return `None` instead of panicking when the
/// server is unreachable.
#[derive(Clone)]
pub struct Client {
    base: String,
    http: reqwest::Client,
}

impl Client {
    /// A client for `http://host:port`.
    pub fn new(base: &str) -> Client {
        Client { base: base.to_string(), http: client_with_timeout(Duration::from_secs(20)) }
    }

    /// Sends `method path` with an optional body of `content_type`.
    pub async fn send(&self, method: &str, path: &str, body: Option<(&str, String)>) -> Option<Answer> {
        let m = reqwest::Method::from_bytes(method.as_bytes()).ok()?;
        let mut req = self.http.request(m, format!("{}{}", self.base, path));
        if let Some((ct, b)) = body {
            req = req.header("content-type", ct).body(b);
        }
        let resp = req.send().await.ok()?;
        let code = resp.status().as_u16();
        let text = resp.text().await.ok()?;
        let body = serde_json::from_str(&text).unwrap_or(Value::Null);
        Some(Answer { code, body, text })
    }

    /// GET.
    pub async fn get(&self, path: &str) -> Option<Answer> {
        self.send("GET", path, None).await
    }

    /// POST JSON.
    pub async fn post(&self, path: &str, body: &Value) -> Option<Answer> {
        self.send("POST", path, Some(("application/json", body.to_string()))).await
    }

    /// Opens a watch: `Err(answer)` when the server did not answer 200.
    pub async fn watch(&self, path: &str) -> Option<Result<EventStream, Answer>> {
        let resp = self.http.get(format!("{}{}", self.base, path)).timeout(Duration::from_secs(3600)).send().await.ok()?;
        let code = resp.status().as_u16();
        if code != 200 {
            let text = resp.text().await.ok()?;
            let body = serde_json::from_str(&text).unwrap_or(Value::Null);
            return Some(Err(Answer { code, body, text }));
        }
        Some(Ok(EventStream { reader: WatchReader::from_response(resp) }))
    }
}

/// What reading a watch stream gave.
#[derive(Debug)]
pub enum Next {
    /// One event.
    Event(Value),
    /// Nothing within the wait.
    Idle,
    /// The stream ended (or broke).
    End,
}

/// Newline-delimited watch events (a line that is not JSON ends the stream).
pub struct EventStream {
    reader: WatchReader,
}

impl EventStream {
    /// The next event, waiting at most `wait`.
    pub async fn next(&mut self, wait: Duration) -> Next {
        match self.reader.next_line(wait).await {
            Line::Line(line) => serde_json::from_slice(&line).map_or(Next::End, Next::Event),
            Line::Idle => Next::Idle,
            Line::End => Next::End,
        }
    }
}

/// One event as a client saw it: type, object name, resourceVersion.
pub type Seen = (String, String, i64);

/// A stretch of one watcher's life without a re-list: it started at
/// `start_rv` (after a LIST answering `relist`, for every segment but the
/// first) and received `events` in order.
#[derive(Debug, Clone, Default)]
pub struct Segment {
    /// The resourceVersion the watch (re)started from.
    pub start_rv: i64,
    /// `(name, resourceVersion)` of every item of the LIST that began the segment.
    pub relist: Option<Vec<(String, i64)>>,
    /// Every event received.
    pub events: Vec<Seen>,
}

/// A re-watching watcher's record.
#[derive(Debug, Default)]
pub struct WatchLog {
    /// Segments, in order.
    pub segments: Vec<Segment>,
    /// Non-200 answers and `ERROR` events: `(code, reason)`.
    pub refusals: Vec<(u16, String)>,
    /// Times the stream ended and was re-opened from the last resourceVersion.
    pub rewatches: usize,
}

/// Lists `path` until it answers 200; returns `(list RV, [(name, rv)])`.
async fn relist(c: &Client, path: &str, log: &Mutex<WatchLog>) -> (i64, Vec<(String, i64)>) {
    loop {
        if let Some(a) = c.get(path).await {
            if a.code == 200 {
                let items = a.body["items"]
                    .as_array()
                    .map(|v| {
                        v.iter()
                            .map(|i| (i.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("").to_string(), rv_of(i)))
                            .collect()
                    })
                    .unwrap_or_default();
                return (a.rv(), items);
            }
            log.lock().unwrap().refusals.push((a.code, a.reason().to_string()));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A client-go-like watcher of `path` (a collection): LIST, then WATCH from
/// the list's resourceVersion; when the stream ends re-WATCH from the last
/// resourceVersion seen; on 429 / 5xx retry after 200 ms; on `ERROR` 410
/// (or HTTP 410) re-LIST and start a new segment. Stops once it has seen
/// `target` (when non-zero) or when `stop` is set.
pub async fn run_watcher(c: Client, path: String, target: Arc<AtomicI64>, stop: Arc<AtomicBool>, log: Arc<Mutex<WatchLog>>) {
    let (mut rv, items) = relist(&c, &path, &log).await;
    log.lock().unwrap().segments.push(Segment { start_rv: rv, relist: Some(items), events: Vec::new() });
    let sep = if path.contains('?') { '&' } else { '?' };
    loop {
        let t = target.load(Ordering::Acquire);
        if (t > 0 && rv >= t) || stop.load(Ordering::Acquire) {
            return;
        }
        let w = c.watch(&format!("{path}{sep}watch=1&resourceVersion={rv}")).await;
        let mut stream = match w {
            Some(Ok(s)) => s,
            Some(Err(a)) if a.code == 410 => {
                log.lock().unwrap().refusals.push((410, a.reason().to_string()));
                let (l, items) = relist(&c, &path, &log).await;
                rv = l;
                log.lock().unwrap().segments.push(Segment { start_rv: l, relist: Some(items), events: Vec::new() });
                continue;
            }
            Some(Err(a)) => {
                log.lock().unwrap().refusals.push((a.code, a.reason().to_string()));
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
            None => {
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        loop {
            let t = target.load(Ordering::Acquire);
            if (t > 0 && rv >= t) || stop.load(Ordering::Acquire) {
                return;
            }
            match stream.next(Duration::from_millis(300)).await {
                Next::Idle => continue,
                Next::End => {
                    log.lock().unwrap().rewatches += 1;
                    break;
                }
                Next::Event(ev) => {
                    let ty = ev["type"].as_str().unwrap_or("").to_string();
                    if ty == "ERROR" {
                        let code = ev["object"]["code"].as_u64().unwrap_or(0) as u16;
                        log.lock().unwrap().refusals.push((code, ev["object"]["reason"].as_str().unwrap_or("").to_string()));
                        if code == 410 {
                            let (l, items) = relist(&c, &path, &log).await;
                            rv = l;
                            let seg = Segment { start_rv: l, relist: Some(items), events: Vec::new() };
                            log.lock().unwrap().segments.push(seg);
                        }
                        break;
                    }
                    if ty == "BOOKMARK" {
                        continue;
                    }
                    let name = ev["object"]["metadata"]["name"].as_str().unwrap_or("").to_string();
                    let ev_rv = rv_of(&ev["object"]);
                    rv = ev_rv;
                    if let Some(seg) = log.lock().unwrap().segments.last_mut() {
                        seg.events.push((ty, name, ev_rv));
                    }
                }
            }
        }
    }
}

/// The storage's history of `prefix` in `(after, upto]` as watch events:
/// `(type, name, revision)` with ADDED for a put that created the key.
pub async fn history(storage: &dyn Storage, prefix: &str, after: Revision, upto: Revision) -> Vec<Seen> {
    let mut out = Vec::new();
    if upto <= after {
        return out;
    }
    let w = storage.watch(prefix, after).await.expect("history watch");
    let mut stream = w.stream;
    let mut last = after;
    while last < upto {
        let msg = tokio::time::timeout(Duration::from_secs(10), stream.next())
            .await
            .expect("history watch stalled")
            .expect("history watch ended")
            .expect("history watch failed");
        match msg {
            WatchResponse::Events(events) => {
                for e in events {
                    let rev = e.revision();
                    last = last.max(rev);
                    if rev > upto {
                        continue;
                    }
                    let name = e.kv.key.rsplit('/').next().unwrap_or("").to_string();
                    let ty = match e.kind {
                        EventKind::Delete => "DELETED",
                        EventKind::Put if e.kv.create_revision == e.kv.mod_revision => "ADDED",
                        EventKind::Put => "MODIFIED",
                    };
                    out.push((ty.to_string(), name, rev));
                }
            }
            WatchResponse::Progress { revision } => last = last.max(revision),
        }
    }
    out
}

/// `(name, mod_revision)` of every key under `prefix` at `revision`.
pub async fn state_at(storage: &dyn Storage, prefix: &str, revision: Revision) -> Vec<(String, i64)> {
    let mut req = RangeRequest::prefix(prefix);
    req.revision = revision;
    let r = storage.range(req).await.expect("range at revision");
    r.kvs.iter().map(|kv| (kv.key.rsplit('/').next().unwrap_or("").to_string(), kv.mod_revision)).collect()
}

/// Compares one watcher's record with the storage's history: within each
/// segment the events must be exactly the history after its start (no
/// loss, no duplicate, same order and types); a segment begun by a re-list
/// must have listed exactly the storage's state at its list revision; the
/// last segment must reach `final_rv`. Returns the number of events checked.
pub async fn check_against_history(storage: &dyn Storage, prefix: &str, log: &WatchLog, final_rv: i64) -> usize {
    let mut checked = 0;
    for (i, seg) in log.segments.iter().enumerate() {
        let last = i + 1 == log.segments.len();
        if let Some(items) = &seg.relist {
            let mut want = state_at(storage, prefix, seg.start_rv).await;
            let mut got = items.clone();
            want.sort();
            got.sort();
            assert_eq!(got, want, "segment {i}: the LIST at {} differs from storage's state there", seg.start_rv);
        }
        let end = if last { final_rv } else { seg.events.last().map(|e| e.2).unwrap_or(seg.start_rv) };
        let want = history(storage, prefix, seg.start_rv, end).await;
        if seg.events != want {
            let got_revs: Vec<i64> = seg.events.iter().map(|e| e.2).collect();
            let want_revs: Vec<i64> = want.iter().map(|e| e.2).collect();
            let missing: Vec<&i64> = want_revs.iter().filter(|r| !got_revs.contains(r)).collect();
            let mut dups = got_revs.clone();
            dups.sort();
            let dup: Vec<i64> = dups.windows(2).filter(|w| w[0] == w[1]).map(|w| w[0]).collect();
            let mut problems = Vec::new();
            if !missing.is_empty() {
                problems.push(format!("lost revisions {missing:?}"));
            }
            if !dup.is_empty() {
                problems.push(format!("duplicated revisions {dup:?}"));
            }
            if problems.is_empty() {
                problems.push("different order or types".to_string());
            }
            panic!(
                "segment {i} (from {} to {end}): {}; {} events received, {} in storage history\nreceived {:?}\nhistory  {:?}",
                seg.start_rv,
                problems.join(", "),
                seg.events.len(),
                want.len(),
                seg.events,
                want
            );
        }
        checked += want.len();
    }
    checked
}

/// Fails watches of prefixes containing `marker` (as a broken etcd watch
/// would) until released.
pub struct HoldMarked {
    marker: String,
    released: AtomicBool,
}

impl WatchHook for HoldMarked {
    fn watch<'a>(
        &'a self,
        inner: &'a dyn Storage,
        prefix: &'a str,
        after: Revision,
    ) -> futures::future::BoxFuture<'a, rkube_storage::Result<rkube_storage::Watch>> {
        Box::pin(async move {
            if prefix.contains(&self.marker) && !self.released.load(Ordering::Acquire) {
                return Err(rkube_storage::StorageError::Unavailable(format!("watch of {prefix} held by the test")));
            }
            inner.watch(prefix, after).await
        })
    }
}

/// Storage whose watches of prefixes containing `marker` fail (as a broken
/// etcd watch would) until [`HeldWatchStorage::release`]: the cache of that
/// resource lists, cannot watch, and stays not ready. Everything else passes through.
pub type HeldWatchStorage = WatchHooked<HoldMarked>;

impl HeldWatchStorage {
    /// Wraps `inner`, holding watches of prefixes containing `marker`.
    pub fn new(inner: Arc<dyn Storage>, marker: &str) -> Arc<HeldWatchStorage> {
        Arc::new(WatchHooked::wrap(inner, HoldMarked { marker: marker.to_string(), released: AtomicBool::new(false) }))
    }
    /// Lets watches through from now on.
    pub fn release(&self) {
        self.hook.released.store(true, Ordering::Release);
    }
}

/// Starts a server in this process over `storage` with `config` (system
/// namespaces created), serving on 127.0.0.1:0 without waiting for
/// `/readyz`; it stops on drop.
pub async fn serve(storage: Arc<dyn Storage>, config: ServerConfig) -> InProcess {
    InProcess::start_unready(storage, config).await
}
