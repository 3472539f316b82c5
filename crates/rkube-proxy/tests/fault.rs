//! Failure handling through the real sync loop ([`run_sync_loop`]) against real
//! iptables in a namespace the test creates:
//! - a partial restore that fails (the test removed a chain behind the proxy's
//!   back) is followed by a full restore that repairs the state; the failure
//!   metrics increment; the change that was pending is not lost (kubernetes#112604);
//! - a KUBE-* chain flushed externally is found by the `--iptables-sync-period`
//!   check and repaired by a full sync.

use crate::common;

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use common::{test_config, NetNs, Proxy};
use rkube_proxy::engine::machine::Timing;
use rkube_proxy::engine::runner::{run_sync_loop, LoopStatus, Notice, Observers};
use rkube_proxy::engine::IptablesBackend;
use rkube_proxy::fixtures::{endpoint_slice, service, Ep};
use rkube_proxy::healthz::ProxyHealth;
use rkube_proxy::metrics::Metrics;
use tokio::sync::{mpsc, watch};

const NODE: &str = "node-a";

struct Running {
    tracker: Arc<std::sync::Mutex<rkube_proxy::tracker::ChangeTracker>>,
    notices: mpsc::UnboundedSender<Notice>,
    status: watch::Receiver<LoopStatus>,
    metrics: Arc<Metrics>,
    task: tokio::task::JoinHandle<()>,
}

/// Start the loop with `sync_period` between flush checks and `retry_period` before
/// retrying a failed sync.
fn start(ns: &NetNs, sync_period: Duration, retry_period: Duration) -> Running {
    let proxy = Proxy::new(ns, NODE);
    let backend = IptablesBackend::new(ns.iptables(), test_config());
    let metrics = Arc::new(Metrics::new());
    let (status_tx, status) = watch::channel(LoopStatus::default());
    let observers = Observers {
        metrics: metrics.clone(),
        health: Arc::new(ProxyHealth::new(sync_period * 2, SystemTime::now())),
        status: status_tx,
    };
    let (notices, rx) = mpsc::unbounded_channel();
    let timing = Timing { min_sync_period: Duration::from_millis(50), sync_period, retry_period, ..Timing::default() };
    let task = tokio::spawn(run_sync_loop(backend, proxy.tracker.clone(), timing, rx, observers));
    Running { tracker: proxy.tracker, notices, status, metrics, task }
}

async fn wait_for(status: &mut watch::Receiver<LoopStatus>, what: &str, pred: impl Fn(&LoopStatus) -> bool) -> LoopStatus {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let current = status.borrow().clone();
        if pred(&current) {
            return current;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(!left.is_zero(), "timed out waiting for {what}; status {current:?}");
        let _ = tokio::time::timeout(left, status.changed()).await;
    }
}

fn two_services(r: &Running) {
    let mut t = r.tracker.lock().expect("lock");
    t.update_service(&service("ns", "a", "10.96.0.1", "p", 80));
    t.update_slice(&endpoint_slice("ns", "a", "a-1", "p", 8080, &[Ep::ready("10.244.0.1")]));
    t.update_service(&service("ns", "b", "10.96.0.2", "p", 80));
    t.update_slice(&endpoint_slice("ns", "b", "b-1", "p", 8080, &[Ep::ready("10.244.0.2")]));
}

/// Normalized state of a fresh namespace after one full restore of the same final state.
fn expected_state(final_state: impl Fn(&mut rkube_proxy::tracker::ChangeTracker)) -> String {
    let ns = NetNs::new("fx");
    let mut p = Proxy::new(&ns, NODE);
    p.change(|t| final_state(t));
    let r = p.sync();
    assert!(r.result.is_ok(), "reference full sync failed: {:?}", r.result);
    ns.saved_state()
}

fn svc_chain_of(ns: &NetNs, cluster_ip: &str) -> String {
    let nat = ns.exec_ok("iptables-save", &["-t", "nat"]);
    nat.lines()
        .find(|l| l.starts_with("-A KUBE-SERVICES") && l.contains(&format!("-d {cluster_ip}/32")))
        .and_then(|l| l.rsplit(' ').next())
        .map(str::to_string)
        .unwrap_or_else(|| panic!("no KUBE-SERVICES rule for {cluster_ip} in:\n{nat}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_partial_restore_is_repaired_by_full_restore_without_losing_changes() {
    let ns = NetNs::new("fault");
    // No flush check during the test (it would repair the chain before the partial
    // sync fails); retry quickly.
    let mut r = start(&ns, Duration::from_secs(3600), Duration::from_millis(300));
    two_services(&r);
    r.notices.send(Notice::InformersSynced).expect("loop alive");
    wait_for(&mut r.status, "first full sync", |s| s.syncs_ok == 1 && s.full_syncs == 1).await;

    // Behind the proxy's back: remove service a's KUBE-SVC chain (and the rule using it).
    let chain_a = svc_chain_of(&ns, "10.96.0.1");
    ns.exec_ok("iptables", &["-t", "nat", "-F", "KUBE-SERVICES"]);
    ns.exec_ok("iptables", &["-t", "nat", "-F", &chain_a]);
    ns.exec_ok("iptables", &["-t", "nat", "-X", &chain_a]);

    // Only service b changes: the partial restore rewrites KUBE-SERVICES (jumping to
    // the missing chain of a) but not a's chains, so iptables-restore fails.
    r.tracker
        .lock()
        .expect("lock")
        .update_slice(&endpoint_slice("ns", "b", "b-1", "p", 8080, &[Ep::ready("10.244.0.2"), Ep::ready("10.244.0.3")]));
    r.notices.send(Notice::Changed).expect("loop alive");
    let after_failure = wait_for(&mut r.status, "failed partial sync", |s| s.syncs_failed == 1).await;
    assert_eq!(after_failure.syncs_ok, 1);

    // The retry (after the retry period) is a full sync and succeeds.
    let repaired = wait_for(&mut r.status, "repairing full sync", |s| s.syncs_ok == 2).await;
    assert_eq!(repaired.full_syncs, 2, "the retry was a full sync: {repaired:?}");

    let text = r.metrics.encode();
    assert!(text.contains("kubeproxy_sync_proxy_rules_iptables_partial_restore_failures_total 1"), "{text}");
    assert!(text.contains("kubeproxy_sync_proxy_rules_iptables_restore_failures_total 1"), "{text}");

    // Repaired, and b's change (made before the failure) is in the rules.
    let expected = expected_state(|t| {
        t.update_service(&service("ns", "a", "10.96.0.1", "p", 80));
        t.update_slice(&endpoint_slice("ns", "a", "a-1", "p", 8080, &[Ep::ready("10.244.0.1")]));
        t.update_service(&service("ns", "b", "10.96.0.2", "p", 80));
        t.update_slice(&endpoint_slice("ns", "b", "b-1", "p", 8080, &[Ep::ready("10.244.0.2"), Ep::ready("10.244.0.3")]));
    });
    assert_eq!(ns.saved_state(), expected);
    assert!(r.tracker.lock().expect("lock").pending().is_empty(), "nothing left pending");
    r.task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn externally_flushed_chain_is_detected_by_sync_period_check_and_repaired() {
    let ns = NetNs::new("flush");
    let mut r = start(&ns, Duration::from_millis(300), Duration::from_millis(300));
    two_services(&r);
    r.notices.send(Notice::InformersSynced).expect("loop alive");
    wait_for(&mut r.status, "first full sync", |s| s.syncs_ok == 1).await;
    let good = ns.saved_state();
    // Let one check pass with everything intact: no sync follows it.
    let checked = wait_for(&mut r.status, "an intact check", |s| s.checks >= 1).await;
    assert_eq!(checked.syncs_ok, 1, "an intact check does not sync");

    ns.exec_ok("iptables", &["-t", "nat", "-F", "KUBE-SERVICES"]);
    assert_ne!(ns.saved_state(), good);
    let s = wait_for(&mut r.status, "repair after flush", |s| s.syncs_ok == 2).await;
    assert_eq!(s.full_syncs, 2, "repair is a full sync");
    assert_eq!(ns.saved_state(), good);
    r.task.abort();
}
