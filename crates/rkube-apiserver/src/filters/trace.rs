//! Trace logs and the runtime log level, like upstream's `k8s.io/utils/trace`
//! and `PUT /debug/flags/v`.
//!
//! A [`Trace`] records named steps of one operation. [`Trace::log_if_long`]
//! logs it only when the whole operation took at least the threshold
//! (500 ms for API requests, `DEFAULT_TRACE_THRESHOLD`); then each step
//! that took at least its share (`threshold / (steps + 1)`) is shown, and at
//! verbosity ≥ 4 every step is. The text has upstream's shape:
//!
//! ```text
//! Trace[1375012925]: "List" accept:application/json,audit-id:6f6d...,client:127.0.0.1,method:GET,protocol:HTTP/1.1,resource:pods,scope:namespace,url:/api/v1/namespaces/default/pods,user-agent:kubectl/v1.33.0,verb:LIST (02-Jan-2006 15:04:05.000) (total time: 612ms):
//! Trace[1375012925]: ---"Listing from storage done" count:5000 543ms (15:04:05.553)
//! Trace[1375012925]: [612.345678ms] [612.345678ms] END
//! ```
//!
//! [`trace_middleware`] opens one trace per non-long-running resource request
//! (named `Get`, `List`, `Create`, `Update`, `Patch`, `Delete` like upstream's
//! handlers) and makes it the task's current trace, so handler code adds
//! steps with [`step`] / [`step_with`] without passing anything around
//! (or through the [`Trace`] request extension); the names each verb's
//! handler records are in [`steps`]. Fields: `accept`, `audit-id`, `client`,
//! `method` (rkube's; the HTTP method), `protocol`, `name` (when the path names
//! an object), `resource`, `scope`, `url`, `user-agent`, `verb` (the metrics verb). The trace is logged (target
//! `trace`, level INFO, whatever `-v` is; upstream needs `-v=2`) when the
//! response body is finished.
//!
//! The verbosity ([`verbosity`], [`set_verbosity`]) is process-global, like
//! klog's `-v`. [`logging_filter`] makes a `tracing` subscriber follow it at
//! runtime; [`debug_flags_v`] serves `PUT /debug/flags/v`.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Local};

use crate::filters::body::guard_response;
use crate::filters::requestinfo::context_of;

/// Requests slower than this log their trace (upstream's 500 ms).
pub const DEFAULT_TRACE_THRESHOLD: Duration = Duration::from_millis(500);

static VERBOSITY: AtomicU8 = AtomicU8::new(0);

/// The current log verbosity (klog's `-v`).
pub fn verbosity() -> u8 {
    VERBOSITY.load(Ordering::Relaxed)
}

/// Sets the log verbosity; returns the previous one. Subscribers built with
/// [`logging_filter`] follow at once.
pub fn set_verbosity(v: u8) -> u8 {
    let prev = VERBOSITY.swap(v, Ordering::Relaxed);
    tracing::callsite::rebuild_interest_cache();
    prev
}

/// The most detailed `tracing` level shown at verbosity `v`: INFO for 0–1,
/// DEBUG for 2–4, TRACE for 5 and more (the mapping `rkube`'s `-v` uses).
pub fn level_for(v: u8) -> tracing::Level {
    match v {
        0 | 1 => tracing::Level::INFO,
        2..=4 => tracing::Level::DEBUG,
        _ => tracing::Level::TRACE,
    }
}

/// A per-layer `tracing_subscriber` filter that enables events up to
/// [`level_for`]`(`[`verbosity`]`())`, re-read on every event so that
/// `PUT /debug/flags/v` takes effect immediately.
pub fn logging_filter() -> tracing_subscriber::filter::FilterFn<impl Fn(&tracing::Metadata<'_>) -> bool> {
    tracing_subscriber::filter::filter_fn(|meta| *meta.level() <= level_for(verbosity()))
}

/// Sends logs to stderr at verbosity `v` (then following `PUT /debug/flags/v`),
/// like kube-apiserver's `-v`. With `RUST_LOG` set, that filter is used
/// instead and the verbosity only affects trace logs. Does nothing when a
/// global subscriber is already installed.
pub fn init_logging(v: u8) {
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    use tracing_subscriber::Layer as _;
    set_verbosity(v);
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let layer = tracing_subscriber::fmt::layer().with_writer(std::io::stderr).with_ansi(ansi);
    let _ = match tracing_subscriber::EnvFilter::try_from_default_env() {
        Ok(env) => tracing_subscriber::registry().with(layer.with_filter(env)).try_init(),
        Err(_) => tracing_subscriber::registry().with(layer.with_filter(logging_filter())).try_init(),
    };
}

/// One recorded step.
#[derive(Debug, Clone)]
struct Step {
    at: Instant,
    wall: DateTime<Local>,
    msg: String,
    fields: Vec<(String, String)>,
}

#[derive(Debug)]
struct TraceInner {
    name: String,
    fields: Vec<(String, String)>,
    start: Instant,
    start_wall: DateTime<Local>,
    steps: Vec<Step>,
}

/// A trace of one operation; clones share the same steps.
#[derive(Debug, Clone)]
pub struct Trace {
    inner: Arc<Mutex<TraceInner>>,
}

tokio::task_local! {
    static CURRENT: Trace;
}

impl Trace {
    /// Starts a trace named `name` with key-value `fields` (upstream `utiltrace.New`).
    pub fn new(name: impl Into<String>, fields: Vec<(String, String)>) -> Trace {
        Trace {
            inner: Arc::new(Mutex::new(TraceInner {
                name: name.into(),
                fields,
                start: Instant::now(),
                start_wall: Local::now(),
                steps: Vec::with_capacity(6),
            })),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, TraceInner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records the end of a step (call it when the step is done).
    pub fn step(&self, msg: impl Into<String>) {
        self.step_with(msg, Vec::new());
    }

    /// Records the end of a step with key-value fields (e.g. `count:5000`).
    pub fn step_with(&self, msg: impl Into<String>, fields: Vec<(String, String)>) {
        let step = Step { at: Instant::now(), wall: Local::now(), msg: msg.into(), fields };
        self.lock().steps.push(step);
    }

    /// Number of steps so far.
    pub fn steps(&self) -> usize {
        self.lock().steps.len()
    }

    /// Time since the trace started.
    pub fn elapsed(&self) -> Duration {
        self.lock().start.elapsed()
    }

    /// Logs the trace if it has run for at least `threshold`; returns the
    /// logged text (without a trailing newline), or `None` when it was short.
    pub fn log_if_long(&self, threshold: Duration) -> Option<String> {
        let text = self.render(threshold, Instant::now(), verbosity() >= 4, trace_id())?;
        tracing::info!(target: "trace", "{text}");
        Some(text)
    }

    /// The text [`Trace::log_if_long`] would log for a trace ending at `end`
    /// (`None` when shorter than `threshold`). `all_steps` shows every step.
    fn render(&self, threshold: Duration, end: Instant, all_steps: bool, id: u32) -> Option<String> {
        let t = self.lock();
        let total = end.saturating_duration_since(t.start);
        if total < threshold {
            return None;
        }
        let step_threshold = threshold / (t.steps.len() as u32 + 1);
        let mut b = String::new();
        let _ = write!(b, "Trace[{id}]: {} ", go_quote(&t.name));
        if !t.fields.is_empty() {
            b.push_str(&format_fields(&t.fields));
            b.push(' ');
        }
        let _ = write!(
            b,
            "({}) (total time: {}ms):",
            t.start_wall.format("%d-%b-%Y %H:%M:%S%.3f"),
            total.as_millis()
        );
        let mut last = t.start;
        for s in &t.steps {
            let d = s.at.saturating_duration_since(last);
            if step_threshold.is_zero() || d >= step_threshold || all_steps {
                let _ = write!(b, "\nTrace[{id}]: ---{} ", go_quote(&s.msg));
                if !s.fields.is_empty() {
                    b.push_str(&format_fields(&s.fields));
                    b.push(' ');
                }
                let _ = write!(b, "{}ms ({})", d.as_millis(), s.wall.format("%H:%M:%S%.3f"));
            }
            last = s.at;
        }
        let _ = write!(b, "\nTrace[{id}]: [{}] [{}] END", go_duration(total), go_duration(total));
        Some(b)
    }
}

/// The step names the handlers record, upstream's where upstream has one
/// (`staging/src/k8s.io/apiserver/pkg/endpoints/handlers/{get,create,update,patch,delete}.go`).
/// A step marks the moment it names; its duration is the time since the
/// previous step.
///
/// | verb | steps |
/// |---|---|
/// | GET | `GET_START`, `GET_DONE`, `ABOUT_TO_WRITE` |
/// | LIST | `LIST_START`, `LIST_DONE` (`count`), `ABOUT_TO_WRITE` |
/// | CREATE | `CONVERT_START`, `CONVERT_DONE`, `STORE_START`, `ADMISSION_DONE`, `STORED`, `ABOUT_TO_WRITE` |
/// | UPDATE | `CONVERT_START`, `CONVERT_DONE`, `STORE_START`, then per attempt `READ_CURRENT`, `ADMISSION_DONE`, `STORED`; `ABOUT_TO_WRITE` |
/// | PATCH | `PATCH_START`, then per attempt `READ_CURRENT`, `PATCH_APPLIED`, `ADMISSION_DONE`, `STORED`; `ABOUT_TO_WRITE` |
/// | DELETE | `DELETE_OPTIONS`, `DELETE_START`, `DELETED`, `ABOUT_TO_WRITE` |
/// | DELETECOLLECTION | `DELETE_OPTIONS`, `LIST_DONE` (`count`), `DELETED` (`count`), `ABOUT_TO_WRITE` |
///
/// The trace filter adds `SERIALIZED` when the handler returned (the body
/// is rendered by then) and `WRITTEN` when the body was sent. A handler
/// that fails stops recording at the failing step.
pub mod steps {
    /// GET: request parsed, about to read the object (storage or watch cache).
    pub const GET_START: &str = "About to Get from storage";
    /// GET: the object was read.
    pub const GET_DONE: &str = "Get from storage done";
    /// LIST: about to parse the options and read the list.
    pub const LIST_START: &str = "About to List from storage";
    /// LIST: options parsed, selectors applied, page read (`count` field).
    pub const LIST_DONE: &str = "Listing from storage done";
    /// CREATE/UPDATE: body read, about to decode it.
    pub const CONVERT_START: &str = "About to convert to expected version";
    /// CREATE/UPDATE: body decoded.
    pub const CONVERT_DONE: &str = "Conversion done";
    /// CREATE/UPDATE: about to run admission, validation and the write.
    pub const STORE_START: &str = "About to store object in database";
    /// UPDATE/PATCH: the current object was read (once per attempt).
    pub const READ_CURRENT: &str = "Current object read from storage";
    /// PATCH: options checked, about to apply the patch.
    pub const PATCH_START: &str = "About to apply patch";
    /// PATCH: patch applied, about to run admission and validation.
    pub const PATCH_APPLIED: &str = "About to check admission control";
    /// Writes: defaults, admission (namespace lifecycle, allocations) and validation done.
    pub const ADMISSION_DONE: &str = "Admission and validation done";
    /// Writes: the object was written (or the write was skipped: no-op or dry run).
    pub const STORED: &str = "Object stored in database";
    /// DELETE: `DeleteOptions` decoded from body and query.
    pub const DELETE_OPTIONS: &str = "Decoded delete options";
    /// DELETE: about to delete (or mark) the object.
    pub const DELETE_START: &str = "About to delete object from database";
    /// DELETE: deleted or marked for deletion.
    pub const DELETED: &str = "Object deleted from database";
    /// Every verb: the result is ready, about to render the response.
    pub const ABOUT_TO_WRITE: &str = "About to write a response";
    /// Trace filter: the handler returned its rendered response.
    pub const SERIALIZED: &str = "Transformed response object";
    /// Trace filter: the response body was sent.
    pub const WRITTEN: &str = "Writing http response done";
}

/// The `count:<n>` field of LIST steps.
pub fn count(n: usize) -> Vec<(String, String)> {
    vec![("count".to_string(), n.to_string())]
}

/// Adds a step to the current task's trace (no-op outside a traced request).
pub fn step(msg: &str) {
    let _ = CURRENT.try_with(|t| t.step(msg));
}

/// Adds a step with fields to the current task's trace (no-op outside one).
pub fn step_with(msg: &str, fields: Vec<(String, String)>) {
    let _ = CURRENT.try_with(|t| t.step_with(msg, fields));
}

/// The current task's trace, if the request is traced.
pub fn current() -> Option<Trace> {
    CURRENT.try_with(|t| t.clone()).ok()
}

/// Runs `fut` with `trace` as the task's current trace.
pub async fn with_trace<F: std::future::Future>(trace: Trace, fut: F) -> F::Output {
    CURRENT.scope(trace, fut).await
}

fn trace_id() -> u32 {
    (uuid::Uuid::new_v4().as_u128() as u32) & 0x7fff_ffff
}

fn format_fields(fields: &[(String, String)]) -> String {
    fields.iter().map(|(k, v)| format!("{k}:{v}")).collect::<Vec<_>>().join(",")
}

fn go_quote(s: &str) -> String {
    rkube_api::field_error::go_quote(s)
}

/// Formats `d` like Go's `time.Duration.String()`: `0s`, `750ns`, `1.5µs`,
/// `612.345678ms`, `1.5s`, `2m0.5s`, `1h0m0s` ([`rkube_api::time::format_go_duration`]).
pub fn go_duration(d: Duration) -> String {
    rkube_api::time::format_go_duration(i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

/// Settings of [`trace_middleware`].
#[derive(Debug, Clone, Copy)]
pub struct TraceConfig {
    /// Requests at least this slow are logged.
    pub threshold: Duration,
}

impl Default for TraceConfig {
    fn default() -> Self {
        TraceConfig { threshold: DEFAULT_TRACE_THRESHOLD }
    }
}

/// Logs the trace when the response body is done.
struct TraceGuard {
    trace: Trace,
    threshold: Duration,
}

impl Drop for TraceGuard {
    fn drop(&mut self) {
        self.trace.step(steps::WRITTEN);
        self.trace.log_if_long(self.threshold);
    }
}

/// Middleware tracing each non-long-running resource request (see the module docs).
pub async fn trace_middleware(State(cfg): State<TraceConfig>, mut req: Request, next: Next) -> Response {
    let ctx = context_of(&req);
    let a = &ctx.attrs;
    if !a.is_resource_request || a.is_long_running() {
        return next.run(req).await;
    }
    let name = match a.verb.as_str() {
        "get" => "Get",
        "list" => "List",
        "create" => "Create",
        "update" => "Update",
        "patch" => "Patch",
        "delete" | "deletecollection" => "Delete",
        other => other,
    }
    .to_string();
    let mut fields = vec![
        ("accept".to_string(), ctx.accept.clone()),
        ("audit-id".to_string(), ctx.audit_id.clone()),
        ("client".to_string(), ctx.source_ips.last().cloned().unwrap_or_default()),
        ("method".to_string(), req.method().to_string()),
        ("protocol".to_string(), ctx.protocol.clone()),
        ("resource".to_string(), a.resource.clone()),
        ("scope".to_string(), a.scope().to_string()),
        ("url".to_string(), a.path.clone()),
        ("user-agent".to_string(), ctx.user_agent.clone()),
        ("verb".to_string(), a.metrics_verb()),
    ];
    if !a.name.is_empty() {
        fields.insert(5, ("name".to_string(), a.name.clone()));
    }
    let trace = Trace::new(name, fields);
    req.extensions_mut().insert(trace.clone());
    let resp = with_trace(trace.clone(), next.run(req)).await;
    trace.step(steps::SERIALIZED);
    guard_response(resp, TraceGuard { trace, threshold: cfg.threshold })
}

fn plain(code: StatusCode, text: String) -> Response {
    let mut resp = (code, format!("{text}\n")).into_response();
    resp.headers_mut().insert("content-type", HeaderValue::from_static("text/plain"));
    resp.headers_mut().insert("x-content-type-options", HeaderValue::from_static("nosniff"));
    resp
}

/// `PUT /debug/flags/v` with the new verbosity as the body: 200
/// `successfully set klog.logging.verbosity to <v>`; 400 for a body that is
/// not a number in 0–255; 406 `unsupported http method` for other methods
/// (upstream `routes.StringFlagPutHandler`). Who may call it is decided by
/// the authorization filter (non-resource URL `/debug/flags/v`, verb `put`).
pub async fn debug_flags_v(method: Method, body: Bytes) -> Response {
    if method != Method::PUT {
        return plain(StatusCode::NOT_ACCEPTABLE, "unsupported http method".into());
    }
    let raw = String::from_utf8_lossy(&body);
    let value = raw.trim();
    match value.parse::<i64>() {
        Ok(v) if (0..=255).contains(&v) => {
            set_verbosity(v as u8);
            tracing::info!(verbosity = v, "log verbosity changed through /debug/flags/v");
            plain(StatusCode::OK, format!("successfully set klog.logging.verbosity to {value}"))
        }
        Ok(_) => plain(
            StatusCode::BAD_REQUEST,
            format!("failed set klog.logging.verbosity {value}: value out of range (0-255)"),
        ),
        Err(_) => plain(
            StatusCode::BAD_REQUEST,
            format!(
                "failed set klog.logging.verbosity {value}: strconv.ParseInt: parsing {}: invalid syntax",
                go_quote(value)
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trace_with_steps(offsets_ms: &[u64]) -> (Trace, Instant) {
        let t = Trace::new("List", vec![("url".into(), "/api/v1/pods".into()), ("verb".into(), "LIST".into())]);
        let start = t.lock().start;
        for (i, ms) in offsets_ms.iter().enumerate() {
            let at = start + Duration::from_millis(*ms);
            let fields = if i == 1 { vec![("count".to_string(), "5000".to_string())] } else { vec![] };
            t.lock().steps.push(Step { at, wall: Local::now(), msg: format!("step {i}"), fields });
        }
        (t, start)
    }

    #[test]
    fn short_traces_are_not_logged() {
        let (t, start) = trace_with_steps(&[10]);
        assert!(t.render(Duration::from_millis(500), start + Duration::from_millis(499), false, 1).is_none());
    }

    #[test]
    fn long_trace_shows_only_steps_over_their_share() {
        // 3 steps → share = 500ms / 4 = 125ms. Step 0 took 10ms, step 1 543ms, step 2 59ms.
        let (t, start) = trace_with_steps(&[10, 553, 612]);
        let text = t.render(Duration::from_millis(500), start + Duration::from_millis(612), false, 42).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert!(lines[0].starts_with("Trace[42]: \"List\" url:/api/v1/pods,verb:LIST ("), "{text}");
        assert!(lines[0].ends_with(") (total time: 612ms):"), "{text}");
        assert!(lines[1].starts_with("Trace[42]: ---\"step 1\" count:5000 543ms ("), "{text}");
        assert_eq!(lines[2], "Trace[42]: [612ms] [612ms] END");
    }

    #[test]
    fn verbose_trace_shows_every_step() {
        let (t, start) = trace_with_steps(&[10, 553, 612]);
        let text = t.render(Duration::from_millis(500), start + Duration::from_millis(700), true, 7).unwrap();
        assert_eq!(text.lines().count(), 5, "{text}");
        assert!(text.contains("---\"step 0\" 10ms"));
        assert!(text.contains("---\"step 2\" 59ms"));
    }

    #[test]
    fn durations_print_like_go() {
        assert_eq!(go_duration(Duration::ZERO), "0s");
        assert_eq!(go_duration(Duration::from_nanos(750)), "750ns");
        assert_eq!(go_duration(Duration::from_nanos(1500)), "1.5µs");
        assert_eq!(go_duration(Duration::from_nanos(612_345_678)), "612.345678ms");
        assert_eq!(go_duration(Duration::from_millis(1500)), "1.5s");
        assert_eq!(go_duration(Duration::from_millis(120_500)), "2m0.5s");
        assert_eq!(go_duration(Duration::from_secs(3600)), "1h0m0s");
    }

    #[tokio::test]
    async fn steps_reach_the_current_trace_only_inside_its_scope() {
        let t = Trace::new("Get", vec![]);
        step("outside");
        with_trace(t.clone(), async {
            step("inside");
            step_with("with fields", vec![("count".into(), "1".into())]);
        })
        .await;
        assert_eq!(t.steps(), 2);
        assert!(current().is_none());
    }

    #[tokio::test]
    async fn debug_flags_v_sets_verbosity_and_rejects_garbage() {
        let before = verbosity();
        let r = debug_flags_v(Method::GET, Bytes::new()).await;
        assert_eq!(r.status(), StatusCode::NOT_ACCEPTABLE);
        let r = debug_flags_v(Method::PUT, Bytes::from_static(b"abc")).await;
        assert_eq!(r.status(), StatusCode::BAD_REQUEST);
        let body = http_body_util::BodyExt::collect(r.into_body()).await.unwrap().to_bytes();
        assert_eq!(
            std::str::from_utf8(&body).unwrap(),
            "failed set klog.logging.verbosity abc: strconv.ParseInt: parsing \"abc\": invalid syntax\n"
        );
        assert_eq!(verbosity(), before);
        let r = debug_flags_v(Method::PUT, Bytes::from_static(b"300")).await;
        assert_eq!(r.status(), StatusCode::BAD_REQUEST);

        // A subscriber using logging_filter follows the verbosity at runtime.
        use tracing_subscriber::layer::SubscriberExt as _;
        use tracing_subscriber::Layer as _;
        let sub = tracing_subscriber::registry()
            .with(tracing_subscriber::fmt::layer().with_writer(std::io::sink).with_filter(logging_filter()));
        tracing::subscriber::with_default(sub, || {
            set_verbosity(0);
            assert!(tracing::enabled!(tracing::Level::INFO));
            assert!(!tracing::enabled!(tracing::Level::DEBUG));
            set_verbosity(4);
            assert!(tracing::enabled!(tracing::Level::DEBUG));
            assert!(!tracing::enabled!(tracing::Level::TRACE));
            set_verbosity(6);
            assert!(tracing::enabled!(tracing::Level::TRACE));
        });
        let r = debug_flags_v(Method::PUT, Bytes::from_static(b"2")).await;
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(verbosity(), 2);
        set_verbosity(before);
    }
}
