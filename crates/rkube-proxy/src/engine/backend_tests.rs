//! [`IptablesBackend`] against a scripted [`Iptables`]: what a sync reports to the
//! metrics, without touching the system.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use super::machine::{FullReason, SyncKind};
use super::*;
use crate::fixtures::{endpoint_slice, service, Ep};
use crate::iptables::{self, Iptables, Table};
use crate::metrics::Metrics;
use crate::model::ANNOTATION_LAST_CHANGE_TRIGGER_TIME;
use crate::tracker::ChangeTracker;

/// Accepts every restore except the ones it was told to fail; saves empty tables.
#[derive(Default)]
struct Scripted {
    fail_restores: usize,
    restores: usize,
}

impl Iptables for Scripted {
    fn restore_all(&mut self, _data: &[u8]) -> iptables::Result<()> {
        self.restores += 1;
        if self.fail_restores > 0 {
            self.fail_restores -= 1;
            return Err(iptables::Error::Failed {
                command: "iptables-restore".into(),
                status: "exit status: 1".into(),
                stderr: "iptables-restore: line 3 failed".into(),
                context: String::new(),
            });
        }
        Ok(())
    }
    fn save(&mut self, _table: Table) -> iptables::Result<String> {
        Ok(String::new())
    }
    fn ensure_chain(&mut self, _table: Table, _chain: &str) -> iptables::Result<()> {
        Ok(())
    }
    fn ensure_rule_prepend(&mut self, _table: Table, _chain: &str, _args: &[&str]) -> iptables::Result<()> {
        Ok(())
    }
    fn local_ipv4_addresses(&mut self) -> iptables::Result<Vec<Ipv4Addr>> {
        Ok(Vec::new())
    }
}

/// `<name> <value>` from the text exposition.
fn sample(text: &str, name: &str) -> Option<f64> {
    text.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

const COUNT: &str = "kubeproxy_network_programming_duration_seconds_count";
const SUM: &str = "kubeproxy_network_programming_duration_seconds_sum";

fn tracker_with_annotated_slice(start: SystemTime, trigger: SystemTime) -> Mutex<ChangeTracker> {
    let mut t = ChangeTracker::new("node-a", start);
    t.update_service(&service("ns", "web", "10.96.0.10", "http", 80));
    let mut slice = endpoint_slice("ns", "web", "web-1", "http", 8080, &[Ep::ready("10.244.0.5")]);
    let stamp = chrono::DateTime::<chrono::Utc>::from(trigger).to_rfc3339_opts(chrono::SecondsFormat::Nanos, true);
    slice.metadata.annotations = Some(BTreeMap::from([(ANNOTATION_LAST_CHANGE_TRIGGER_TIME.to_string(), stamp)]));
    t.update_slice(&slice);
    Mutex::new(t)
}

#[test]
fn network_programming_duration_counts_the_sync_that_programs_an_annotated_slice() {
    let start = SystemTime::now() - Duration::from_secs(60);
    let trigger = SystemTime::now() - Duration::from_secs(3);
    let tracker = tracker_with_annotated_slice(start, trigger);
    let mut backend = IptablesBackend::new(Scripted::default(), RuleConfig::default());
    let metrics = Metrics::new();

    let report = backend.sync(&tracker, SyncKind::Full(FullReason::FirstSync));
    assert!(report.result.is_ok());
    assert_eq!(report.trigger_times.len(), 1);
    metrics.observe_sync(&report, SystemTime::now());
    let text = metrics.encode();
    assert_eq!(sample(&text, COUNT), Some(1.0), "{text}");
    let secs = sample(&text, SUM).unwrap_or(0.0);
    assert!((3.0..30.0).contains(&secs), "latency from the annotation to the restore: {secs}");

    // Nothing changed since: the next sync observes nothing.
    let report = backend.sync(&tracker, SyncKind::Partial);
    assert!(report.trigger_times.is_empty());
    metrics.observe_sync(&report, SystemTime::now());
    assert_eq!(sample(&metrics.encode(), COUNT), Some(1.0));
}

#[test]
fn network_programming_duration_waits_for_the_retry_when_a_restore_fails() {
    let start = SystemTime::now() - Duration::from_secs(60);
    let tracker = tracker_with_annotated_slice(start, SystemTime::now() - Duration::from_secs(1));
    let mut backend = IptablesBackend::new(Scripted { fail_restores: 1, restores: 0 }, RuleConfig::default());
    let metrics = Metrics::new();

    let failed = backend.sync(&tracker, SyncKind::Full(FullReason::FirstSync));
    assert!(failed.result.is_err());
    metrics.observe_sync(&failed, SystemTime::now());
    assert_eq!(sample(&metrics.encode(), COUNT), Some(0.0), "rules not programmed: no observation");

    let retried = backend.sync(&tracker, SyncKind::Full(FullReason::AfterFailure));
    assert!(retried.result.is_ok());
    assert_eq!(retried.trigger_times.len(), 1, "the failed sync's trigger time is kept for the retry");
    metrics.observe_sync(&retried, SystemTime::now());
    assert_eq!(sample(&metrics.encode(), COUNT), Some(1.0));
}

#[test]
fn trigger_times_from_before_the_proxy_started_are_not_observed() {
    let start = SystemTime::now();
    let tracker = tracker_with_annotated_slice(start, start - Duration::from_secs(600));
    let mut backend = IptablesBackend::new(Scripted::default(), RuleConfig::default());
    let report = backend.sync(&tracker, SyncKind::Full(FullReason::FirstSync));
    assert!(report.result.is_ok());
    assert!(report.trigger_times.is_empty());
}
