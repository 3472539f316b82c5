//! Leader election on a `coordination.k8s.io/v1` Lease, as upstream's
//! `k8s.io/client-go/tools/leaderelection` (`leaderelection.go`,
//! `resourcelock/leaselock.go`) with the flags of `component-base`'s
//! `LeaderElectionConfiguration`.
//!
//! Several replicas of a component (against one or several API servers) race
//! for one Lease (`kube-system/kube-scheduler`, ...). Each attempt reads the
//! Lease and lets the pure step [`decide`] say what to do:
//!
//! ```text
//!   no Lease ─────────────────────────────► Create (transitions 0)
//!   held by another, not expired ─────────► Wait
//!   held by another, expired / released ──► TakeOver (transitions + 1)
//!   held by us ───────────────────────────► Renew (acquireTime kept)
//! ```
//!
//! Writes carry the Lease's `resourceVersion`, so two candidates never both
//! win: the loser gets a 409 Conflict and tries again later. "Expired" is
//! judged, as upstream, on this process's own clock: the time it last saw the
//! Lease's record change plus the record's `leaseDurationSeconds`.
//!
//! [`LeaderElector::run`] acquires (retrying every `--leader-elect-retry-period`
//! with jitter 1.2), then starts the component's work and renews every retry
//! period; when no renewal succeeds within `--leader-elect-renew-deadline` the
//! lease is lost, the work is told to stop and `run` returns
//! [`LeaderError::LeaseLost`] (upstream's components exit then). On a stop
//! request the work stops and the Lease is released (holder cleared,
//! `leaseDurationSeconds: 1`), so another replica takes over at once.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::sync::watch;

/// Upstream's jitter factor for acquire retries (`JitterFactor = 1.2`).
pub const JITTER_FACTOR: f64 = 1.2;

/// How long past its lease a leader that has not renewed still reports
/// healthy (`NewLeaderHealthzAdaptor(20 * time.Second)` in kube-scheduler
/// and kube-controller-manager).
pub const HEALTHZ_TOLERANCE: Duration = Duration::from_secs(20);

/// Errors of leader election.
#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    /// Bad flag values (messages as upstream's validation).
    #[error("{0}")]
    Config(String),
    /// No renewal succeeded within the renew deadline.
    #[error("leaderelection lost for {namespace}/{name}")]
    LeaseLost {
        /// The Lease's namespace.
        namespace: String,
        /// The Lease's name.
        name: String,
    },
    /// The work ended with an error.
    #[error(transparent)]
    Work(anyhow::Error),
}

/// Parses a Go duration flag value (`15s`, `1m30s`, `500ms`).
fn parse_duration(s: &str) -> Result<Duration, String> {
    rkube_apiserver::filters::timeout::parse_go_duration(s).map_err(|e| e.to_string())
}

/// Leader election flags of kube-scheduler and kube-controller-manager
/// (`component-base/config/options.BindLeaderElectionFlags`), with
/// upstream's defaults.
#[derive(clap::Args, Debug, Clone)]
pub struct LeaderElectionArgs {
    /// Start a leader election client and gain leadership before executing the main loop.
    /// Enable this when running replicated components for high availability.
    #[arg(long = "leader-elect", default_value_t = true, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub leader_elect: bool,
    /// The duration that non-leader candidates will wait after observing a leadership
    /// renewal until attempting to acquire leadership of a led but unrenewed leader slot.
    #[arg(long = "leader-elect-lease-duration", default_value = "15s", value_parser = parse_duration)]
    pub leader_elect_lease_duration: Duration,
    /// The interval between attempts by the acting master to renew a leadership slot
    /// before it stops leading. This must be less than the lease duration.
    #[arg(long = "leader-elect-renew-deadline", default_value = "10s", value_parser = parse_duration)]
    pub leader_elect_renew_deadline: Duration,
    /// The duration the clients should wait between attempting acquisition and renewal of a leadership.
    #[arg(long = "leader-elect-retry-period", default_value = "2s", value_parser = parse_duration)]
    pub leader_elect_retry_period: Duration,
    /// The type of resource object that is used for locking during leader election.
    /// Supported options are 'leases'.
    #[arg(long = "leader-elect-resource-lock", default_value = "leases")]
    pub leader_elect_resource_lock: String,
    /// The name of resource object that is used for locking during leader election
    /// (default: the component's name, `kube-scheduler` or `kube-controller-manager`).
    #[arg(long = "leader-elect-resource-name")]
    pub leader_elect_resource_name: Option<String>,
    /// The namespace of resource object that is used for locking during leader election.
    #[arg(long = "leader-elect-resource-namespace", default_value = "kube-system")]
    pub leader_elect_resource_namespace: String,
}

impl Default for LeaderElectionArgs {
    fn default() -> Self {
        LeaderElectionArgs {
            leader_elect: true,
            leader_elect_lease_duration: Duration::from_secs(15),
            leader_elect_renew_deadline: Duration::from_secs(10),
            leader_elect_retry_period: Duration::from_secs(2),
            leader_elect_resource_lock: "leases".into(),
            leader_elect_resource_name: None,
            leader_elect_resource_namespace: "kube-system".into(),
        }
    }
}

impl LeaderElectionArgs {
    /// The election settings, or `None` with `--leader-elect=false`;
    /// `component` names the Lease when `--leader-elect-resource-name` is
    /// not given. Errors as upstream's validation: a lock other than
    /// `leases`, `leaseDuration <= renewDeadline`, or
    /// `renewDeadline <= retryPeriod * 1.2`.
    pub fn config(&self, component: &str) -> Result<Option<LeaderElectionConfig>, LeaderError> {
        if !self.leader_elect {
            return Ok(None);
        }
        if self.leader_elect_resource_lock != "leases" {
            return Err(LeaderError::Config(format!(
                "leaderElection.resourceLock: Invalid value: {:?}: resourceLock value must be \"leases\"",
                self.leader_elect_resource_lock
            )));
        }
        let (lease, renew, retry) =
            (self.leader_elect_lease_duration, self.leader_elect_renew_deadline, self.leader_elect_retry_period);
        if lease <= renew {
            return Err(LeaderError::Config("leaseDuration must be greater than renewDeadline".into()));
        }
        if renew.as_secs_f64() <= retry.as_secs_f64() * JITTER_FACTOR {
            return Err(LeaderError::Config("renewDeadline must be greater than retryPeriod*JitterFactor".into()));
        }
        Ok(Some(LeaderElectionConfig {
            namespace: self.leader_elect_resource_namespace.clone(),
            name: self.leader_elect_resource_name.clone().unwrap_or_else(|| component.to_string()),
            identity: default_identity(),
            lease_duration: lease,
            renew_deadline: renew,
            retry_period: retry,
            release_on_cancel: true,
        }))
    }
}

/// `<hostname>_<uuid>`, upstream's holder identity for its components.
pub fn default_identity() -> String {
    let host = hostname::get().map(|h| h.to_string_lossy().into_owned()).unwrap_or_default();
    format!("{host}_{}", uuid::Uuid::new_v4())
}

/// Validated election settings.
#[derive(Debug, Clone)]
pub struct LeaderElectionConfig {
    /// The Lease's namespace.
    pub namespace: String,
    /// The Lease's name (also the `name` label of `leader_election_master_status`).
    pub name: String,
    /// This candidate's `holderIdentity`.
    pub identity: String,
    /// `leaseDurationSeconds` written into the Lease.
    pub lease_duration: Duration,
    /// How long a leader keeps retrying a renewal before giving up.
    pub renew_deadline: Duration,
    /// Between acquire attempts (jittered) and renewals.
    pub retry_period: Duration,
    /// Clear the holder when stopped (upstream `ReleaseOnCancel`).
    pub release_on_cancel: bool,
}

/// What one attempt does with the Lease it read, from [`decide`].
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// No Lease: create it, holding it.
    Create(LeaseSpec),
    /// We hold it: write a new `renewTime`.
    Renew(LeaseSpec),
    /// Another holder's lease expired (or was released): take it.
    TakeOver(LeaseSpec),
    /// Another candidate holds a live lease.
    Wait {
        /// Its `holderIdentity`.
        holder: String,
    },
}

/// The pure step of an acquire-or-renew attempt: `current` is the Lease's
/// spec as read (None: no Lease), `observed_at` when this process first saw
/// that record, `now`/`wall` the monotonic and wall clocks.
pub fn decide(
    current: Option<&LeaseSpec>,
    observed_at: Instant,
    cfg: &LeaderElectionConfig,
    now: Instant,
    wall: Timestamp,
) -> Decision {
    let fresh = |transitions: i32, acquired: Option<MicroTime>| LeaseSpec {
        holder_identity: Some(cfg.identity.clone()),
        lease_duration_seconds: Some(cfg.lease_duration.as_secs().max(1).min(i32::MAX as u64) as i32),
        acquire_time: Some(acquired.unwrap_or(MicroTime(wall))),
        renew_time: Some(MicroTime(wall)),
        lease_transitions: Some(transitions),
        ..LeaseSpec::default()
    };
    let Some(cur) = current else { return Decision::Create(fresh(0, None)) };
    let holder = cur.holder_identity.clone().unwrap_or_default();
    let transitions = cur.lease_transitions.unwrap_or(0);
    if holder == cfg.identity {
        return Decision::Renew(fresh(transitions, cur.acquire_time.clone()));
    }
    let duration = Duration::from_secs(cur.lease_duration_seconds.unwrap_or(0).max(0) as u64);
    if !holder.is_empty() && observed_at + duration > now {
        return Decision::Wait { holder };
    }
    Decision::TakeOver(fresh(transitions + 1, None))
}

#[derive(Debug, Default)]
struct StatusInner {
    leading: bool,
    lost: bool,
    last_renew: Option<Instant>,
}

/// This candidate's standing, shared with the health checks and metrics.
#[derive(Debug)]
pub struct ElectionStatus {
    name: String,
    lease_duration: Duration,
    inner: Mutex<StatusInner>,
    master: Family<Vec<(String, String)>, Gauge>,
}

impl ElectionStatus {
    fn new(name: &str, lease_duration: Duration) -> Self {
        ElectionStatus {
            name: name.to_string(),
            lease_duration,
            inner: Mutex::new(StatusInner::default()),
            master: Family::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, StatusInner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn set(&self, leading: bool, lost: bool) {
        let mut s = self.lock();
        s.leading = leading;
        s.lost |= lost;
        if leading {
            s.last_renew = Some(Instant::now());
        }
        self.master.get_or_create(&vec![("name".to_string(), self.name.clone())]).set(i64::from(leading));
    }

    fn renewed(&self) {
        self.lock().last_renew = Some(Instant::now());
    }

    /// Whether this candidate leads now.
    pub fn is_leader(&self) -> bool {
        self.lock().leading
    }

    /// The `leaderElection` health check, as upstream's `HealthzAdaptor`:
    /// fails once the lease was lost, or while leading when the last
    /// renewal is older than the lease duration plus [`HEALTHZ_TOLERANCE`];
    /// a candidate that does not lead is healthy.
    pub fn check(&self) -> Result<(), String> {
        let s = self.lock();
        if s.lost {
            return Err(format!("lost leadership on lease {}", self.name));
        }
        match (s.leading, s.last_renew) {
            (true, Some(t)) if t.elapsed() > self.lease_duration + HEALTHZ_TOLERANCE => {
                Err(format!("failed election to renew leadership on lease {}", self.name))
            }
            _ => Ok(()),
        }
    }

    /// Registers `leader_election_master_status{name}` (1 while leading, else 0).
    pub fn register(&self, registry: &mut Registry) {
        self.master.get_or_create(&vec![("name".to_string(), self.name.clone())]).set(i64::from(self.is_leader()));
        registry.register(
            "leader_election_master_status",
            "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master. 'name' is the string used to identify the lease. Please make sure to group by name.",
            self.master.clone(),
        );
    }
}

/// The last Lease this candidate read or wrote, and when its record changed.
#[derive(Debug)]
struct Observed {
    lease: Option<Lease>,
    at: Instant,
}

/// A leader election candidate for one Lease.
pub struct LeaderElector {
    api: Api<Lease>,
    cfg: LeaderElectionConfig,
    status: Arc<ElectionStatus>,
    observed: Mutex<Observed>,
}

impl LeaderElector {
    /// A candidate writing the Lease through `client`.
    pub fn new(client: kube::Client, cfg: LeaderElectionConfig) -> Self {
        let status = Arc::new(ElectionStatus::new(&cfg.name, cfg.lease_duration));
        LeaderElector {
            api: Api::namespaced(client, &cfg.namespace),
            cfg,
            status,
            observed: Mutex::new(Observed { lease: None, at: Instant::now() }),
        }
    }

    /// The settings.
    pub fn config(&self) -> &LeaderElectionConfig {
        &self.cfg
    }

    /// The shared status (health check, metric).
    pub fn status(&self) -> Arc<ElectionStatus> {
        Arc::clone(&self.status)
    }

    fn observed(&self) -> std::sync::MutexGuard<'_, Observed> {
        self.observed.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// One attempt: read the Lease, [`decide`], write with the read
    /// `resourceVersion`. `Ok(true)` when this candidate holds the Lease
    /// afterwards; a 409 Conflict or a live holder is `Ok(false)`.
    pub async fn try_acquire_or_renew(&self) -> Result<bool, kube::Error> {
        let read = self.api.get_opt(&self.cfg.name).await?;
        let now = Instant::now();
        let observed_at = {
            let mut o = self.observed();
            let old = o.lease.as_ref().and_then(|l| l.spec.clone());
            let new = read.as_ref().and_then(|l| l.spec.clone());
            if old != new || o.lease.is_none() {
                o.at = now;
            }
            o.lease = read.clone();
            o.at
        };
        let decision = decide(read.as_ref().and_then(|l| l.spec.as_ref()), observed_at, &self.cfg, now, Timestamp::now());
        let written = match decision {
            Decision::Wait { holder } => {
                tracing::debug!(lease = %self.cfg.name, %holder, "lock is held by another candidate and has not yet expired");
                return Ok(false);
            }
            Decision::Create(spec) => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.cfg.name.clone()),
                        namespace: Some(self.cfg.namespace.clone()),
                        ..ObjectMeta::default()
                    },
                    spec: Some(spec),
                };
                self.api.create(&PostParams::default(), &lease).await
            }
            Decision::Renew(spec) | Decision::TakeOver(spec) => {
                let mut lease = read.unwrap_or_default();
                lease.spec = Some(spec);
                self.api.replace(&self.cfg.name, &PostParams::default(), &lease).await
            }
        };
        match written {
            Ok(lease) => {
                let mut o = self.observed();
                o.lease = Some(lease);
                o.at = Instant::now();
                Ok(true)
            }
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Clears the holder of a Lease this candidate holds (holder `""`,
    /// `leaseDurationSeconds: 1`, transitions kept), as upstream's release.
    pub async fn release(&self) -> Result<(), kube::Error> {
        let Some(mut lease) = self.observed().lease.clone() else { return Ok(()) };
        let Some(spec) = lease.spec.as_mut() else { return Ok(()) };
        if spec.holder_identity.as_deref() != Some(self.cfg.identity.as_str()) {
            return Ok(());
        }
        let wall = MicroTime(Timestamp::now());
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(wall.clone());
        spec.acquire_time = Some(wall);
        self.api.replace(&self.cfg.name, &PostParams::default(), &lease).await?;
        Ok(())
    }

    /// Campaigns until leading (or `stop` turns true: `Ok(())`), then runs
    /// `work` with its own stop signal while renewing. Returns the work's
    /// result when it ends by itself or after a stop request (releasing the
    /// Lease), or [`LeaderError::LeaseLost`] after telling the work to stop
    /// when no renewal succeeded within the renew deadline.
    pub async fn run<F, Fut>(&self, mut stop: watch::Receiver<bool>, work: F) -> Result<(), LeaderError>
    where
        F: FnOnce(watch::Receiver<bool>) -> Fut,
        Fut: Future<Output = anyhow::Result<()>> + Send + 'static,
    {
        let retry = self.cfg.retry_period;
        tracing::info!(lease = %format!("{}/{}", self.cfg.namespace, self.cfg.name), identity = %self.cfg.identity, "attempting to acquire leader lease");
        loop {
            match self.try_acquire_or_renew().await {
                Ok(true) => break,
                Ok(false) => {}
                Err(e) => tracing::warn!(error = %e, lease = %self.cfg.name, "error retrieving resource lock"),
            }
            tokio::select! {
                _ = tokio::time::sleep(jittered(retry)) => {}
                _ = stopped(&mut stop) => return Ok(()),
            }
        }
        tracing::info!(lease = %format!("{}/{}", self.cfg.namespace, self.cfg.name), identity = %self.cfg.identity, "successfully acquired lease");
        self.status.set(true, false);
        let (work_stop, work_rx) = watch::channel(false);
        let mut task = tokio::spawn(work(work_rx));
        let outcome = loop {
            tokio::select! {
                _ = tokio::time::sleep(retry) => {}
                _ = stopped(&mut stop) => break Ok(()),
                done = &mut task => {
                    let result = match done {
                        Ok(r) => r.map_err(LeaderError::Work),
                        Err(e) => Err(LeaderError::Work(anyhow::anyhow!("work task failed: {e}"))),
                    };
                    self.finish(false).await;
                    return result;
                }
            }
            if !self.renew_within_deadline().await {
                break Err(LeaderError::LeaseLost { namespace: self.cfg.namespace.clone(), name: self.cfg.name.clone() });
            }
            self.status.renewed();
        };
        let _ = work_stop.send(true);
        let result = match task.await {
            Ok(r) => r.map_err(LeaderError::Work),
            Err(e) => Err(LeaderError::Work(anyhow::anyhow!("work task failed: {e}"))),
        };
        let lost = outcome.is_err();
        if lost {
            tracing::error!(lease = %self.cfg.name, "failed to renew lease: timed out waiting for the condition; leaderelection lost");
        }
        self.finish(lost).await;
        outcome.and(result)
    }

    /// Retries renewals every retry period until one succeeds or the renew
    /// deadline passes.
    async fn renew_within_deadline(&self) -> bool {
        let attempts = async {
            loop {
                match self.try_acquire_or_renew().await {
                    Ok(true) => return,
                    Ok(false) => {}
                    Err(e) => tracing::warn!(error = %e, lease = %self.cfg.name, "failed to renew lease"),
                }
                tokio::time::sleep(self.cfg.retry_period).await;
            }
        };
        tokio::time::timeout(self.cfg.renew_deadline, attempts).await.is_ok()
    }

    async fn finish(&self, lost: bool) {
        self.status.set(false, lost);
        if !lost && self.cfg.release_on_cancel {
            if let Err(e) = self.release().await {
                tracing::warn!(error = %e, lease = %self.cfg.name, "failed to release lease");
            }
        }
    }
}

/// `d` plus a random share of up to `JITTER_FACTOR * d` (`wait.Jitter`).
fn jittered(d: Duration) -> Duration {
    let r = (uuid::Uuid::new_v4().as_u128() % 1_000_000) as f64 / 1_000_000.0;
    d + d.mul_f64(r * JITTER_FACTOR)
}

/// Resolves when `stop` turns true or its sender is gone.
pub async fn stopped(stop: &mut watch::Receiver<bool>) {
    while !*stop.borrow_and_update() {
        if stop.changed().await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> LeaderElectionConfig {
        LeaderElectionArgs::default().config("kube-scheduler").unwrap().unwrap()
    }

    fn spec(holder: &str, duration: i32, transitions: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: (!holder.is_empty()).then(|| holder.to_string()),
            lease_duration_seconds: Some(duration),
            lease_transitions: Some(transitions),
            acquire_time: Some(MicroTime(Timestamp::UNIX_EPOCH)),
            renew_time: Some(MicroTime(Timestamp::UNIX_EPOCH)),
            ..LeaseSpec::default()
        }
    }

    #[test]
    fn decide_follows_upstream_acquire_rules() {
        let c = cfg();
        let t0 = Instant::now();
        let wall = Timestamp::now();
        let me = c.identity.clone();
        // (current lease, seconds since its record was observed, expected)
        let cases: Vec<(Option<LeaseSpec>, u64, &str, i32)> = vec![
            (None, 0, "create", 0),
            (Some(spec("other", 15, 3)), 5, "wait", 3),
            (Some(spec("other", 15, 3)), 16, "takeover", 4),
            (Some(spec("", 1, 3)), 0, "takeover", 4),
            (Some(spec(&me, 15, 3)), 100, "renew", 3),
        ];
        for (cur, ago, want, transitions) in cases {
            let d = decide(cur.as_ref(), t0, &c, t0 + Duration::from_secs(ago), wall);
            let (got, s) = match d {
                Decision::Create(s) => ("create", Some(s)),
                Decision::Renew(s) => ("renew", Some(s)),
                Decision::TakeOver(s) => ("takeover", Some(s)),
                Decision::Wait { holder } => {
                    assert_eq!(holder, "other");
                    ("wait", None)
                }
            };
            assert_eq!(got, want, "{cur:?} observed {ago}s ago");
            if let Some(s) = s {
                assert_eq!(s.holder_identity.as_deref(), Some(me.as_str()));
                assert_eq!(s.lease_transitions, Some(transitions));
                assert_eq!(s.lease_duration_seconds, Some(15));
                assert_eq!(s.renew_time, Some(MicroTime(wall)));
                let kept = want == "renew";
                assert_eq!(s.acquire_time == Some(MicroTime(Timestamp::UNIX_EPOCH)), kept, "acquireTime kept only on renew");
            }
        }
    }

    #[test]
    fn flags_are_validated_like_upstream() {
        let base = LeaderElectionArgs::default();
        assert!(LeaderElectionArgs { leader_elect: false, ..base.clone() }.config("x").unwrap().is_none());
        let bad = |a: LeaderElectionArgs| a.config("x").unwrap_err().to_string();
        assert_eq!(
            bad(LeaderElectionArgs { leader_elect_resource_lock: "endpoints".into(), ..base.clone() }),
            "leaderElection.resourceLock: Invalid value: \"endpoints\": resourceLock value must be \"leases\""
        );
        assert_eq!(
            bad(LeaderElectionArgs { leader_elect_lease_duration: Duration::from_secs(10), ..base.clone() }),
            "leaseDuration must be greater than renewDeadline"
        );
        assert_eq!(
            bad(LeaderElectionArgs { leader_elect_retry_period: Duration::from_secs(9), ..base.clone() }),
            "renewDeadline must be greater than retryPeriod*JitterFactor"
        );
        let c = LeaderElectionArgs { leader_elect_resource_name: Some("mine".into()), ..base }.config("x").unwrap().unwrap();
        assert_eq!((c.namespace.as_str(), c.name.as_str()), ("kube-system", "mine"));
        let (host, id) = c.identity.rsplit_once('_').unwrap();
        assert_eq!(host, hostname::get().unwrap().to_string_lossy());
        assert!(uuid::Uuid::parse_str(id).is_ok());
    }

    #[test]
    fn health_check_fails_after_the_lease_is_lost() {
        let s = ElectionStatus::new("kube-scheduler", Duration::from_secs(15));
        assert!(s.check().is_ok(), "a follower is healthy");
        s.set(true, false);
        assert!(s.check().is_ok());
        s.set(false, true);
        assert_eq!(s.check().unwrap_err(), "lost leadership on lease kube-scheduler");
    }
}
