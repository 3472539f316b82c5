//! The node agent's HTTP endpoints (kubelet's healthz port, 10248 by default): `/healthz`
//! (fails with `[-]pleg failed: ...` when the PLEG is unhealthy, as kubelet's `pleg` check) and
//! `/metrics` (Prometheus text).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use prometheus_client::registry::Registry;

use crate::shutdown::Shutdown;

/// A health check: `Err(reason)` when unhealthy.
pub type HealthCheck = Arc<dyn Fn() -> Result<(), String> + Send + Sync>;

#[derive(Clone)]
struct Endpoints {
    pleg: HealthCheck,
    registry: Arc<Registry>,
}

async fn healthz(State(e): State<Endpoints>) -> impl IntoResponse {
    match (e.pleg)() {
        Ok(()) => (StatusCode::OK, "ok".to_string()),
        Err(reason) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("[+]ping ok\n[-]pleg failed: {reason}\nhealthz check failed\n"),
        ),
    }
}

async fn metrics(State(e): State<Endpoints>) -> impl IntoResponse {
    let mut text = String::new();
    match prometheus_client::encoding::text::encode(&mut text, &e.registry) {
        Ok(()) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")],
            text,
        ),
        Err(_) => (StatusCode::INTERNAL_SERVER_ERROR, [(header::CONTENT_TYPE, "text/plain")], "encode failed".into()),
    }
}

/// Binds `addr` (port 0: any free port) and serves until `shutdown`; returns the bound address.
pub async fn serve(
    addr: SocketAddr,
    pleg: HealthCheck,
    registry: Arc<Registry>,
    mut shutdown: Shutdown,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let app = Router::new()
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics))
        .with_state(Endpoints { pleg, registry });
    let task = tokio::spawn(async move {
        let stop = async move { shutdown.wait().await };
        if let Err(err) = axum::serve(listener, app).with_graceful_shutdown(stop).await {
            tracing::warn!(%err, "healthz server failed");
        }
    });
    Ok((bound, task))
}
