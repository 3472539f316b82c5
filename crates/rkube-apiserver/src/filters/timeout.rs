//! Request timeouts (`--request-timeout`, default 60s; a request's
//! `?timeout=` may only shorten it), like upstream's
//! `WithTimeoutForNonLongRunningRequests` and `WithRequestDeadline`.
//!
//! A non-long-running request still running at its deadline is answered
//! 504 `Timeout` (`Timeout: request did not complete within requested timeout - context deadline exceeded`);
//! its handler keeps running to completion in the background, as upstream's
//! does, so a write is never cut in half. An unparsable `timeout` is 400.
//!
//! Watches are not cut: [`watch_timeout`] computes their server-side
//! duration from `--min-request-timeout` (default 1800 s), randomized to
//! `[min, 2·min)` like upstream, unless the client asked for `timeoutSeconds`.

use std::time::Duration;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rkube_api::status::Status;

use crate::error::ApiError;
use crate::filters::requestinfo::context_of;

/// Upstream's `--request-timeout` default.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// Upstream's `--min-request-timeout` default, seconds.
pub const DEFAULT_MIN_REQUEST_TIMEOUT: u64 = 1800;

/// Errors parsing Go durations.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DurationError {
    /// Not a Go duration (`30s`, `1m30s`, `500ms`, `1h`).
    #[error("time: invalid duration {0:?}")]
    Invalid(String),
}

/// Parses a Go duration flag value (`300ms`, `1.5h`, `2h45m`, `0`) with
/// [`rkube_api::time::parse_go_duration`]. Negative durations are rejected.
pub fn parse_go_duration(s: &str) -> Result<Duration, DurationError> {
    let t = s.trim();
    match rkube_api::time::parse_go_duration(t) {
        // Flags take no negative durations (nor, by i64 nanoseconds, over 292 years).
        Some(ns) if !t.starts_with('-') && ns >= 0 => {
            Ok(Duration::from_nanos(ns as u64))
        }
        _ => Err(DurationError::Invalid(s.to_string())),
    }
}

/// The server-side duration of a watch: `timeoutSeconds` when given, else a
/// random duration in `[min, 2·min)` seconds, `min` being
/// `--min-request-timeout` (upstream `handlers/get.go`, `ListResource`).
pub fn watch_timeout(min_request_timeout_secs: u64, timeout_seconds: Option<u64>) -> Duration {
    if let Some(t) = timeout_seconds {
        return Duration::from_secs(t);
    }
    let min = min_request_timeout_secs.max(1);
    let jitter = (uuid::Uuid::new_v4().as_u128() % (min as u128 * 1000)) as u64;
    Duration::from_millis(min * 1000 + jitter)
}

/// The 504 answer.
pub fn timeout_response() -> Response {
    ApiError::from(Status::timeout("request did not complete within requested timeout - context deadline exceeded", 0))
        .into_response()
}

/// Middleware enforcing `limit` on non-long-running requests (0 = none).
pub async fn timeout_middleware(State(limit): State<Duration>, req: Request, next: Next) -> Response {
    let ctx = context_of(&req);
    if ctx.attrs.is_long_running() {
        return next.run(req).await;
    }
    let mut deadline = limit;
    if let Some(q) = req.uri().query() {
        let asked = q.split('&').find_map(|kv| kv.strip_prefix("timeout="));
        if let Some(v) = asked {
            let v = v.replace("%C2%B5", "µ");
            match parse_go_duration(&v) {
                Ok(d) if !d.is_zero() && (limit.is_zero() || d < limit) => deadline = d,
                Ok(_) => {}
                Err(_) => {
                    return ApiError::from(Status::bad_request(format!(
                        "invalid timeout specified in the request URL: {v:?}"
                    )))
                    .into_response()
                }
            }
        }
    }
    if deadline.is_zero() {
        return next.run(req).await;
    }
    let handler = tokio::spawn(next.run(req));
    match tokio::time::timeout(deadline, handler).await {
        Ok(Ok(resp)) => resp,
        Ok(Err(join)) if join.is_panic() => std::panic::resume_unwind(join.into_panic()),
        Ok(Err(_)) => crate::filters::requestinfo::panic_response(),
        Err(_) => {
            tracing::info!(path = %ctx.attrs.path, audit_id = %ctx.audit_id, ?deadline, "request timed out");
            timeout_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_parse() {
        assert_eq!(parse_go_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_go_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_go_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_go_duration("1.5h"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_go_duration("0"), Ok(Duration::ZERO));
        for bad in ["", "10", "1x", "-1s", "s", "1..5s"] {
            assert!(parse_go_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn watch_timeouts_are_randomized_between_min_and_twice_min() {
        assert_eq!(watch_timeout(1800, Some(5)), Duration::from_secs(5));
        for _ in 0..50 {
            let d = watch_timeout(10, None);
            assert!(d >= Duration::from_secs(10) && d < Duration::from_secs(20), "{d:?}");
        }
    }
}
