//! `/healthz` on `--healthz-bind-address` and `/metrics` on `--metrics-bind-address`.
//!
//! Health follows upstream `pkg/proxy/healthcheck/proxier_health.go`: the proxy
//! is unhealthy when a change has been queued for longer than the health
//! timeout (kube-proxy uses 2 × `--iptables-sync-period`) without a successful
//! sync since, i.e. when syncs stop. The body is upstream's JSON
//! (`lastUpdated`, `currentTime`, `nodeEligible`); the code is 200 or 503.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;

use crate::metrics::Metrics;

/// Errors serving HTTP.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The server stopped with an I/O error.
    #[error("http server: {0}")]
    Serve(#[from] std::io::Error),
}

#[derive(Debug)]
struct HealthState {
    last_updated: SystemTime,
    oldest_pending: Option<SystemTime>,
}

/// The proxier's health (upstream `ProxierHealthServer` state), shared by the sync
/// loop and the HTTP handler.
#[derive(Debug)]
pub struct ProxyHealth {
    timeout: Duration,
    state: Mutex<HealthState>,
}

impl ProxyHealth {
    /// Healthy until a queued change waits longer than `timeout`.
    pub fn new(timeout: Duration, now: SystemTime) -> Self {
        Self { timeout, state: Mutex::new(HealthState { last_updated: now, oldest_pending: None }) }
    }

    /// A change was queued at `now` (upstream `QueuedUpdate`).
    pub fn queued(&self, now: SystemTime) {
        if let Ok(mut s) = self.state.lock() {
            s.oldest_pending.get_or_insert(now);
        }
    }

    /// Rules were synced successfully at `now` (upstream `Updated`).
    pub fn updated(&self, now: SystemTime) {
        if let Ok(mut s) = self.state.lock() {
            s.last_updated = now;
            s.oldest_pending = None;
        }
    }

    /// `(healthy, lastUpdated)` at `now`.
    pub fn status(&self, now: SystemTime) -> (bool, SystemTime) {
        match self.state.lock() {
            Ok(s) => {
                let late = s
                    .oldest_pending
                    .is_some_and(|q| now.duration_since(q).unwrap_or(Duration::ZERO) > self.timeout);
                (!late, s.last_updated)
            }
            Err(_) => (false, SystemTime::UNIX_EPOCH),
        }
    }
}

fn rfc3339(t: SystemTime) -> String {
    chrono::DateTime::<chrono::Utc>::from(t).to_rfc3339_opts(chrono::SecondsFormat::Nanos, true)
}

async fn healthz(State(health): State<Arc<ProxyHealth>>) -> impl IntoResponse {
    let now = SystemTime::now();
    let (healthy, last) = health.status(now);
    let body = format!(
        "{{\"lastUpdated\": \"{}\",\"currentTime\": \"{}\", \"nodeEligible\": true}}",
        rfc3339(last),
        rfc3339(now)
    );
    let code = if healthy { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    (code, [(header::CONTENT_TYPE, "application/json")], body)
}

async fn metrics(State(metrics): State<Arc<Metrics>>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")],
        metrics.encode(),
    )
}

/// Serve `/healthz` and `/livez` on `listener` until the task is dropped.
pub async fn serve_healthz(listener: tokio::net::TcpListener, health: Arc<ProxyHealth>) -> Result<(), Error> {
    let app = Router::new().route("/healthz", get(healthz)).route("/livez", get(healthz)).with_state(health);
    axum::serve(listener, app).await?;
    Ok(())
}

/// Serve `/metrics` on `listener` until the task is dropped.
pub async fn serve_metrics(listener: tokio::net::TcpListener, m: Arc<Metrics>) -> Result<(), Error> {
    let app = Router::new().route("/metrics", get(metrics)).with_state(m);
    axum::serve(listener, app).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn health_goes_stale_when_queued_change_is_not_synced_in_time() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1000);
        let h = ProxyHealth::new(Duration::from_secs(60), t0);
        assert!(h.status(t0).0);
        h.queued(t0 + Duration::from_secs(1));
        assert!(h.status(t0 + Duration::from_secs(61)).0, "not late yet");
        h.queued(t0 + Duration::from_secs(30));
        assert!(!h.status(t0 + Duration::from_secs(62)).0, "oldest queued change is what counts");
        h.updated(t0 + Duration::from_secs(63));
        assert!(h.status(t0 + Duration::from_secs(500)).0, "a sync clears the pending change");
    }
}
