//! The scheduler's metrics, named and labelled as upstream's
//! (`pkg/scheduler/metrics/metrics.go`).

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use crate::queue::Queue;

type Labels = Vec<(String, String)>;
type Histograms = Family<Labels, Histogram, fn() -> Histogram>;

fn attempt_histogram() -> Histogram {
    // upstream: ExponentialBuckets(0.001, 2, 15)
    Histogram::new(exponential_buckets(0.001, 2.0, 15))
}

fn sli_histogram() -> Histogram {
    // upstream: ExponentialBuckets(0.01, 2, 20)
    Histogram::new(exponential_buckets(0.01, 2.0, 20))
}

/// The scheduler's metrics; register them with [`SchedulerMetrics::register`].
#[derive(Debug, Clone)]
pub struct SchedulerMetrics {
    /// `scheduler_schedule_attempts_total{result,profile}`: `scheduled`,
    /// `unschedulable` or `error`.
    pub schedule_attempts: Family<Labels, Counter>,
    /// `scheduler_pending_pods{queue}`: `active`, `backoff`, `unschedulable`, `gated`.
    pub pending_pods: Family<Labels, Gauge>,
    /// `scheduler_scheduling_attempt_duration_seconds{result,profile}`:
    /// filtering, scoring and (for bound pods) binding, in seconds.
    pub attempt_duration: Histograms,
    /// `scheduler_pod_scheduling_sli_duration_seconds{attempts}`: from the
    /// pod's first queueing to its binding, in seconds.
    pub sli_duration: Histograms,
}

impl Default for SchedulerMetrics {
    fn default() -> Self {
        SchedulerMetrics {
            schedule_attempts: Family::default(),
            pending_pods: Family::default(),
            attempt_duration: Family::new_with_constructor(attempt_histogram),
            sli_duration: Family::new_with_constructor(sli_histogram),
        }
    }
}

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

impl SchedulerMetrics {
    /// Adds the metrics to `registry`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "scheduler_schedule_attempts",
            "Number of attempts to schedule pods, by the result. 'unschedulable' means a pod could not be scheduled, while 'error' means an internal scheduler problem.",
            self.schedule_attempts.clone(),
        );
        registry.register(
            "scheduler_pending_pods",
            "Number of pending pods, by the queue type. 'active' means number of pods in activeQ; 'backoff' means number of pods in backoffQ; 'unschedulable' means number of pods in unschedulablePods that the scheduler attempted to schedule and failed; 'gated' is the number of unschedulable pods that the scheduler never attempted to schedule because they are gated.",
            self.pending_pods.clone(),
        );
        registry.register(
            "scheduler_scheduling_attempt_duration_seconds",
            "Scheduling attempt latency in seconds (scheduling algorithm + binding)",
            self.attempt_duration.clone(),
        );
        registry.register(
            "scheduler_pod_scheduling_sli_duration_seconds",
            "E2e latency for a pod being scheduled, from the time the pod enters the scheduling queue and might involve multiple scheduling attempts.",
            self.sli_duration.clone(),
        );
    }

    /// Counts an attempt with `result` and its duration.
    pub fn attempt(&self, profile: &str, result: &str, seconds: f64) {
        let l = labels(&[("result", result), ("profile", profile)]);
        self.schedule_attempts.get_or_create(&l).inc();
        self.attempt_duration.get_or_create(&l).observe(seconds);
    }

    /// Records a pod bound after `attempts` attempts, `seconds` after it was first queued.
    pub fn bound(&self, attempts: u32, seconds: f64) {
        self.sli_duration.get_or_create(&labels(&[("attempts", &attempts.to_string())])).observe(seconds);
    }

    /// Sets `scheduler_pending_pods` from the queue's counts and the gated pods.
    pub fn pending(&self, counts: [(Queue, i64); 3], gated: i64) {
        for (q, n) in counts {
            self.pending_pods.get_or_create(&labels(&[("queue", q.label())])).set(n);
        }
        self.pending_pods.get_or_create(&labels(&[("queue", "gated")])).set(gated);
    }
}
