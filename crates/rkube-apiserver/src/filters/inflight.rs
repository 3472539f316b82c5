//! Max-inflight limits (`--max-requests-inflight`, default 400, and
//! `--max-mutating-requests-inflight`, default 200), like upstream's
//! `staging/src/k8s.io/apiserver/pkg/server/filters/maxinflight.go`, with
//! the queueing of API Priority and Fairness (KEP-1040) in front of them.
//!
//! Reads (`get`, `list`, non-resource GET) and writes take a slot from their
//! own pool for as long as the request (and its response body) lasts.
//! Long-running requests (watches, streaming subresources) take none. Users
//! in `system:masters` are always served (APF's `exempt` priority level).
//!
//! A request that finds its pool full:
//! - with `--enable-priority-and-fairness` (the default, as upstream) waits
//!   in its pool's queue, first come first served, for at most a quarter of
//!   `--request-timeout` (APF's queue wait limit: 15 s by default); a queue
//!   already holding [`QUEUE_LENGTH_LIMIT`] requests, or a wait that runs
//!   out, is answered 429. Not as upstream: there is one FIFO queue per pool,
//!   not FlowSchema classification into priority levels with fair queuing
//!   among flows, so a busy client can delay others by the queue's length;
//! - with `--enable-priority-and-fairness=false` is answered 429 at once
//!   (upstream's max-in-flight filter).
//!
//! The 429 is `TooManyRequests` with `Retry-After: 1` (kubectl and
//! client-go retry it). Upstream answers it with a plain-text body; rkube
//! sends a `Status` (`details.retryAfterSeconds: 1`), which clients also
//! understand and which kubectl prints as `Error from server (TooManyRequests)`.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rkube_api::status::Status;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

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

/// How many requests one pool's queue holds: upstream's bootstrap
/// `global-default` and `workload-low` priority levels have 128 queues of
/// `queueLengthLimit` 50.
pub const QUEUE_LENGTH_LIMIT: usize = 128 * 50;

/// One pool of slots.
#[derive(Debug)]
struct Pool {
    semaphore: Option<Arc<Semaphore>>,
    limit: usize,
    /// Requests waiting for a slot now.
    waiting: AtomicUsize,
}

impl Pool {
    fn new(limit: usize) -> Self {
        Pool { semaphore: (limit > 0).then(|| Arc::new(Semaphore::new(limit))), limit, waiting: AtomicUsize::new(0) }
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
    /// How long a request may wait for a slot (`None`: it may not wait).
    max_wait: Option<Duration>,
    metrics: Arc<ApiserverMetrics>,
}

impl InflightLimiter {
    /// Limits of `max_read_only` and `max_mutating` concurrent requests (0 =
    /// unlimited); a request finding its pool full waits up to `max_wait`
    /// (`None`: answered 429 at once).
    pub fn new(max_read_only: usize, max_mutating: usize, max_wait: Option<Duration>, metrics: Arc<ApiserverMetrics>) -> Self {
        InflightLimiter { read_only: Pool::new(max_read_only), mutating: Pool::new(max_mutating), max_wait, metrics }
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
    let pool = l.pool(read_only);
    let Some(sem) = pool.semaphore.clone() else {
        return next.run(req).await;
    };
    let permit = match sem.clone().try_acquire_owned() {
        Ok(permit) => Some(permit),
        Err(_) if req.extensions().get::<UserInfo>().is_some_and(UserInfo::is_master) => return next.run(req).await,
        Err(_) => match l.max_wait {
            Some(wait) => queue_for_slot(pool, sem, wait).await,
            None => None,
        },
    };
    let Some(permit) = permit else {
        l.metrics.observe_dropped(&ctx.attrs, ctx.started.elapsed());
        return too_many_requests();
    };
    l.metrics.set_inflight(read_only, pool.in_use());
    let slot = Slot { _permit: permit, limiter: l.clone(), read_only };
    let resp = next.run(req).await;
    guard_response(resp, slot)
}

/// Waits in `pool`'s queue (tokio's semaphore serves waiters in order) for
/// at most `wait`; `None` when the queue is full or the wait ran out.
async fn queue_for_slot(pool: &Pool, sem: Arc<Semaphore>, wait: Duration) -> Option<OwnedSemaphorePermit> {
    if pool.waiting.fetch_add(1, Ordering::AcqRel) >= QUEUE_LENGTH_LIMIT {
        pool.waiting.fetch_sub(1, Ordering::AcqRel);
        return None;
    }
    let permit = tokio::time::timeout(wait, sem.acquire_owned()).await.ok().and_then(Result::ok);
    pool.waiting.fetch_sub(1, Ordering::AcqRel);
    permit
}
