//! Max-inflight limits (`--max-requests-inflight`, default 400, and
//! `--max-mutating-requests-inflight`, default 200), like upstream's
//! `staging/src/k8s.io/apiserver/pkg/server/filters/maxinflight.go`.
//!
//! Reads (`get`, `list`, non-resource GET) and writes take a slot from their
//! own pool for as long as the request (and its response body) lasts.
//! Long-running requests (watches, streaming subresources) take none. When
//! the pool is empty the request is answered 429 `TooManyRequests` with
//! `Retry-After: 1` (kubectl and client-go retry it), unless the user is in
//! `system:masters`, who is always served. A limit of 0 means unlimited.
//!
//! Upstream answers the 429 with a plain-text body; rkube sends a `Status`
//! (reason `TooManyRequests`, `details.retryAfterSeconds: 1`), which clients
//! also understand and which kubectl prints as `Error from server (TooManyRequests)`.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rkube_api::status::Status;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::error::ApiError;
use crate::filters::authn::UserInfo;
use crate::filters::body::guard_response;
use crate::filters::metrics::ApiserverMetrics;
use crate::filters::requestinfo::context_of;

/// Upstream's `--max-requests-inflight` default.
pub const DEFAULT_MAX_REQUESTS_INFLIGHT: usize = 400;
/// Upstream's `--max-mutating-requests-inflight` default.
pub const DEFAULT_MAX_MUTATING_REQUESTS_INFLIGHT: usize = 200;

/// One pool of slots.
#[derive(Debug)]
struct Pool {
    semaphore: Option<Arc<Semaphore>>,
    limit: usize,
}

impl Pool {
    fn new(limit: usize) -> Self {
        Pool { semaphore: (limit > 0).then(|| Arc::new(Semaphore::new(limit))), limit }
    }

    fn in_use(&self) -> i64 {
        self.semaphore.as_ref().map(|s| (self.limit - s.available_permits()) as i64).unwrap_or(0)
    }
}

/// The two pools and the metrics they report to.
#[derive(Debug)]
pub struct InflightLimiter {
    read_only: Pool,
    mutating: Pool,
    metrics: Arc<ApiserverMetrics>,
}

impl InflightLimiter {
    /// Limits of `max_read_only` and `max_mutating` concurrent requests (0 = unlimited).
    pub fn new(max_read_only: usize, max_mutating: usize, metrics: Arc<ApiserverMetrics>) -> Self {
        InflightLimiter { read_only: Pool::new(max_read_only), mutating: Pool::new(max_mutating), metrics }
    }

    fn pool(&self, read_only: bool) -> &Pool {
        if read_only {
            &self.read_only
        } else {
            &self.mutating
        }
    }
}

/// Holds a slot until the response body is done, then reports the new count.
struct Slot {
    _permit: OwnedSemaphorePermit,
    limiter: Arc<InflightLimiter>,
    read_only: bool,
}

impl Drop for Slot {
    fn drop(&mut self) {
        // The permit is released after this body runs; report the count without it.
        let in_use = self.limiter.pool(self.read_only).in_use() - 1;
        self.limiter.metrics.set_inflight(self.read_only, in_use.max(0));
    }
}

/// The 429 answer.
pub fn too_many_requests() -> Response {
    ApiError::from(Status::too_many_requests("Too many requests, please try again later.", 1)).into_response()
}

/// Middleware enforcing the limits (see the module docs).
pub async fn inflight_middleware(State(l): State<Arc<InflightLimiter>>, req: Request, next: Next) -> Response {
    let ctx = context_of(&req);
    if ctx.attrs.is_long_running() {
        return next.run(req).await;
    }
    let read_only = ctx.attrs.is_read_only();
    let Some(sem) = l.pool(read_only).semaphore.clone() else {
        return next.run(req).await;
    };
    match sem.try_acquire_owned() {
        Ok(permit) => {
            l.metrics.set_inflight(read_only, l.pool(read_only).in_use());
            let slot = Slot { _permit: permit, limiter: l.clone(), read_only };
            let resp = next.run(req).await;
            guard_response(resp, slot)
        }
        Err(_) => {
            if req.extensions().get::<UserInfo>().is_some_and(UserInfo::is_master) {
                return next.run(req).await;
            }
            l.metrics.observe_dropped(&ctx.attrs, ctx.started.elapsed());
            too_many_requests()
        }
    }
}
