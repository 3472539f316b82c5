//! Concurrency limits: API Priority and Fairness (KEP-1040,
//! `--enable-priority-and-fairness`, the default) or upstream's max-inflight
//! limits (`--max-requests-inflight`, default 400, and
//! `--max-mutating-requests-inflight`, default 200;
//! `staging/src/k8s.io/apiserver/pkg/server/filters/maxinflight.go`).
//! Long-running requests (watches, streaming subresources) are never limited.
//!
//! With priority and fairness, once the server's configuration controller
//! ([`crate::flowcontrol`]) has installed the FlowSchemas and priority
//! levels, each request is classified and takes a seat of its priority
//! level, as [`crate::filters::apf`] describes (the levels share
//! `--max-requests-inflight` + `--max-mutating-requests-inflight` seats;
//! a full level queues or rejects); the answer (429 included) carries the
//! `X-Kubernetes-PF-FlowSchema-UID` and `X-Kubernetes-PF-PriorityLevel-UID`
//! headers.
//!
//! Otherwise (priority and fairness off, or no configuration installed yet,
//! as with a filter chain in front of something else than the API server)
//! reads (`get`, `list`, non-resource GET) and writes take a slot from their
//! own pool for as long as the request (and its response body) lasts. Users
//! in `system:masters` are always served. A request that finds its pool full:
//! - with `--enable-priority-and-fairness` waits in its pool's queue, first
//!   come first served, for at most a quarter of `--request-timeout` (APF's
//!   queue wait limit: 15 s by default); a queue already holding
//!   [`QUEUE_LENGTH_LIMIT`] requests, or a wait that runs out, is answered 429;
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
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use axum::http::HeaderValue;
use prometheus_client::metrics::gauge::Gauge;

use crate::error::ApiError;
use crate::filters::apf::{Classification, FlowControl, PriorityLevel, FLOW_SCHEMA_UID_HEADER, PRIORITY_LEVEL_UID_HEADER};
use crate::filters::authn::UserInfo;
use crate::filters::body::guard_response;
use crate::filters::metrics::ApiserverMetrics;
use crate::filters::requestinfo::{context_of, RequestContext};

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
    /// API Priority and Fairness (`None` when off).
    flow_control: Option<Arc<FlowControl>>,
    /// With priority and fairness: requests executing now, read-only and mutating.
    executing: [AtomicI64; 2],
}

impl InflightLimiter {
    /// Limits of `max_read_only` and `max_mutating` concurrent requests (0 =
    /// unlimited); a request finding its pool full waits up to `max_wait`
    /// (`None`: answered 429 at once, and priority and fairness is off; with
    /// it on, the priority levels share `max_read_only + max_mutating` seats).
    pub fn new(max_read_only: usize, max_mutating: usize, max_wait: Option<Duration>, metrics: Arc<ApiserverMetrics>) -> Self {
        let flow_control =
            max_wait.map(|_| Arc::new(FlowControl::new(max_read_only + max_mutating, Some(metrics.clone()))));
        InflightLimiter {
            read_only: Pool::new(max_read_only),
            mutating: Pool::new(max_mutating),
            max_wait,
            metrics,
            flow_control,
            executing: [AtomicI64::new(0), AtomicI64::new(0)],
        }
    }

    /// The priority and fairness classifier (`None` with
    /// `--enable-priority-and-fairness=false`), for the configuration controller.
    pub fn flow_control(&self) -> Option<Arc<FlowControl>> {
        self.flow_control.clone()
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
    if let Some(fc) = &l.flow_control {
        let class = match req.extensions().get::<UserInfo>() {
            Some(user) => fc.classify(user, &ctx.attrs),
            None => fc.classify(&UserInfo::default(), &ctx.attrs),
        };
        if let Some(class) = class {
            return dispatch(&l, class, &ctx, req, next).await;
        }
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
    let _queued = Queued::enter(&pool.waiting, QUEUE_LENGTH_LIMIT, None)?;
    tokio::time::timeout(wait, sem.acquire_owned()).await.ok().and_then(Result::ok)
}

/// A place in a queue: counted in `waiting` (and `gauge`) from [`Queued::enter`] until dropped,
/// so a request whose client goes away while it waits (its future dropped mid-wait) leaves
/// the queue as upstream's does, instead of holding its place for ever.
struct Queued<'a> {
    waiting: &'a AtomicUsize,
    gauge: Option<&'a Gauge>,
}

impl<'a> Queued<'a> {
    /// Takes a place unless `capacity` requests already wait (`None`).
    fn enter(waiting: &'a AtomicUsize, capacity: usize, gauge: Option<&'a Gauge>) -> Option<Self> {
        if waiting.fetch_add(1, Ordering::AcqRel) >= capacity {
            waiting.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        if let Some(g) = gauge {
            g.inc();
        }
        Some(Queued { waiting, gauge })
    }
}

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        self.waiting.fetch_sub(1, Ordering::AcqRel);
        if let Some(g) = self.gauge {
            g.dec();
        }
    }
}

/// Holds a priority level's seat (none for exempt levels) until the response
/// body is done, then updates the executing counts.
struct Seat {
    _permit: Option<OwnedSemaphorePermit>,
    /// The level it borrowed its seat for (given back on drop).
    borrowed_by: Option<Arc<PriorityLevel>>,
    executing: Gauge,
    limiter: Arc<InflightLimiter>,
    read_only: bool,
}

impl Drop for Seat {
    fn drop(&mut self) {
        if let Some(level) = &self.borrowed_by {
            level.stop_borrowing();
        }
        self.executing.dec();
        let n = self.limiter.executing[usize::from(!self.read_only)].fetch_sub(1, Ordering::AcqRel) - 1;
        self.limiter.metrics.set_inflight(self.read_only, n.max(0));
    }
}

/// Adds the `X-Kubernetes-PF-*` headers naming `c`'s FlowSchema and level.
fn with_pf_headers(mut resp: Response, c: &Classification) -> Response {
    for (name, uid) in [(FLOW_SCHEMA_UID_HEADER, &c.flow_schema_uid), (PRIORITY_LEVEL_UID_HEADER, &c.level.uid)] {
        if let Ok(v) = HeaderValue::from_str(uid) {
            resp.headers_mut().insert(name, v);
        }
    }
    resp
}

/// The 429 of priority and fairness, counted with upstream's `reason`.
fn reject(l: &InflightLimiter, c: &Classification, ctx: &RequestContext, reason: &str) -> Response {
    l.metrics.flowcontrol_rejected(&c.flow_schema, &c.level.name, reason);
    l.metrics.observe_dropped(&ctx.attrs, ctx.started.elapsed());
    with_pf_headers(too_many_requests(), c)
}

/// A seat: the level's own, or one borrowed from the pool (`true`).
type Taken = (OwnedSemaphorePermit, bool);

/// A free seat now, the level's own first.
fn try_take(level: &PriorityLevel, own: &Arc<Semaphore>, pool: &Arc<Semaphore>) -> Option<Taken> {
    if let Ok(p) = own.clone().try_acquire_owned() {
        return Some((p, false));
    }
    if level.start_borrowing() {
        if let Ok(p) = pool.clone().try_acquire_owned() {
            return Some((p, true));
        }
        level.stop_borrowing();
    }
    None
}

/// Runs a classified request on a seat of its level (see [`crate::filters::apf`]).
async fn dispatch(l: &Arc<InflightLimiter>, c: Classification, ctx: &RequestContext, req: Request, next: Next) -> Response {
    let level = c.level.clone();
    let taken = match &level.semaphore {
        None => None,
        Some(own) => match try_take(&level, own, &c.lendable_pool) {
            Some(t) => Some(t),
            None if level.reject => return reject(l, &c, ctx, "concurrency-limit"),
            None => {
                let inqueue = l.metrics.flowcontrol_inqueue(&c.flow_schema, &level.name);
                let wait = l.max_wait.unwrap_or_default();
                match queue_for_seat(&level, own, &c.lendable_pool, wait, &inqueue).await {
                    Ok(t) => Some(t),
                    Err(reason) => return reject(l, &c, ctx, reason),
                }
            }
        },
    };
    let (permit, borrowed) = match taken {
        Some((p, borrowed)) => (Some(p), borrowed),
        None => (None, false),
    };
    let read_only = ctx.attrs.is_read_only();
    let executing = l.metrics.flowcontrol_dispatched(&c.flow_schema, &level.name);
    let n = l.executing[usize::from(!read_only)].fetch_add(1, Ordering::AcqRel) + 1;
    l.metrics.set_inflight(read_only, n);
    let seat = Seat { _permit: permit, borrowed_by: borrowed.then(|| level.clone()), executing, limiter: l.clone(), read_only };
    let resp = next.run(req).await;
    with_pf_headers(guard_response(resp, seat), &c)
}

/// Waits in `level`'s queue for at most `wait` for a seat of its own or of
/// the pool, whichever frees first; `Err` with upstream's rejection reason
/// when the queue is full (`queue-full`) or the wait ran out (`time-out`).
async fn queue_for_seat(
    level: &PriorityLevel,
    own: &Arc<Semaphore>,
    pool: &Arc<Semaphore>,
    wait: Duration,
    inqueue: &Gauge,
) -> Result<Taken, &'static str> {
    let Some(_queued) = Queued::enter(&level.waiting, level.queue_capacity, Some(inqueue)) else {
        return Err("queue-full");
    };
    let deadline = tokio::time::Instant::now() + wait;
    let first = tokio::time::timeout_at(deadline, async {
        tokio::select! {
            p = own.clone().acquire_owned() => p.ok().map(|p| (p, false)),
            p = pool.clone().acquire_owned(), if level.may_borrow() => p.ok().map(|p| (p, true)),
        }
    })
    .await;
    let taken = match first {
        // The level reached its borrowing limit meanwhile: give the pool's seat back, wait for its own.
        Ok(Some((p, true))) if !level.start_borrowing() => {
            drop(p);
            tokio::time::timeout_at(deadline, own.clone().acquire_owned()).await.ok().and_then(Result::ok).map(|p| (p, false))
        }
        Ok(t) => t,
        Err(_) => None,
    };
    taken.ok_or("time-out")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request whose client goes away while it waits (its future dropped mid-wait) leaves
    /// the queue: the count and the in-queue gauge go back, so the queue never fills with
    /// requests that are gone.
    #[tokio::test]
    async fn a_dropped_waiter_leaves_the_queue() {
        let pool = Pool::new(1);
        let sem = Arc::new(Semaphore::new(0));
        {
            let wait = queue_for_slot(&pool, sem.clone(), Duration::from_secs(60));
            tokio::pin!(wait);
            assert!(futures::poll!(wait.as_mut()).is_pending());
            assert_eq!(pool.waiting.load(Ordering::Acquire), 1);
        }
        assert_eq!(pool.waiting.load(Ordering::Acquire), 0);

        let waiting = AtomicUsize::new(0);
        let gauge = Gauge::default();
        {
            let queued = Queued::enter(&waiting, 1, Some(&gauge));
            assert!(queued.is_some());
            assert!(Queued::enter(&waiting, 1, Some(&gauge)).is_none(), "a full queue refuses");
            assert_eq!((waiting.load(Ordering::Acquire), gauge.get()), (1, 1));
        }
        assert_eq!((waiting.load(Ordering::Acquire), gauge.get()), (0, 0));
    }
}
