//! The async loop around [`SyncMachine`]: feeds it notices and time, and runs
//! the syncs and checks it asks for on a blocking thread (one at a time).

use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime};

use tokio::sync::{mpsc, watch};

use super::machine::{Action, Input, SyncKind, SyncMachine, Timing};
use super::SyncBackend;
use crate::healthz::ProxyHealth;
use crate::metrics::Metrics;
use crate::tracker::ChangeTracker;

/// What the watchers tell the loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Notice {
    /// Both the Service and the EndpointSlice informers finished their first list.
    InformersSynced,
    /// The tracker has pending changes.
    Changed,
    /// The node's labels changed.
    NodeLabelsChanged,
}

/// Progress of the loop, published for tests and status.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoopStatus {
    /// Successful syncs so far.
    pub syncs_ok: u64,
    /// Failed syncs so far.
    pub syncs_failed: u64,
    /// Full syncs (successful or not) so far.
    pub full_syncs: u64,
    /// Checks for flushed chains so far.
    pub checks: u64,
    /// Kind of the last sync.
    pub last_kind: Option<SyncKind>,
}

/// Shared pieces the loop reports into.
#[derive(Debug, Clone)]
pub struct Observers {
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// `/healthz` state.
    pub health: Arc<ProxyHealth>,
    /// Loop progress.
    pub status: watch::Sender<LoopStatus>,
}

/// Run until every notice sender is dropped. `backend` does the syncs.
pub async fn run_sync_loop<B: SyncBackend + 'static>(
    backend: B,
    tracker: Arc<Mutex<ChangeTracker>>,
    timing: Timing,
    mut notices: mpsc::UnboundedReceiver<Notice>,
    observers: Observers,
) {
    let mut machine = SyncMachine::new(timing);
    let mut backend = Some(backend);
    loop {
        let action = machine.poll(Instant::now());
        match action {
            Action::Sync(kind) => {
                let Some(mut b) = backend.take() else { return };
                let t = tracker.clone();
                let joined = tokio::task::spawn_blocking(move || {
                    let report = b.sync(&t, kind);
                    (b, report)
                })
                .await;
                let Ok((b, report)) = joined else {
                    tracing::error!("sync task panicked; stopping the proxy loop");
                    return;
                };
                backend = Some(b);
                let ok = report.result.is_ok();
                let now = SystemTime::now();
                observers.metrics.observe_sync(&report, now);
                match &report.result {
                    Ok(()) => {
                        observers.health.updated(now);
                        tracing::info!(
                            kind = ?report.kind,
                            elapsed = ?report.duration,
                            bytes = report.bytes,
                            services_written = report.services_written,
                            chains_deleted = report.chains_deleted,
                            "SyncProxyRules complete"
                        );
                    }
                    Err(err) => tracing::error!(kind = ?report.kind, "sync failed: {err}"),
                }
                observers.status.send_modify(|s| {
                    if ok {
                        s.syncs_ok += 1;
                    } else {
                        s.syncs_failed += 1;
                    }
                    s.full_syncs += u64::from(report.kind.is_full());
                    s.last_kind = Some(report.kind);
                });
                machine.step(Input::SyncFinished { ok, kind: report.kind }, Instant::now());
            }
            Action::CheckChains => {
                let Some(mut b) = backend.take() else { return };
                let joined = tokio::task::spawn_blocking(move || {
                    let r = b.check_intact();
                    (b, r)
                })
                .await;
                let Ok((b, result)) = joined else {
                    tracing::error!("check task panicked; stopping the proxy loop");
                    return;
                };
                backend = Some(b);
                let intact = match result {
                    Ok(intact) => intact,
                    Err(err) => {
                        tracing::warn!("checking for flushed chains failed: {err}");
                        false
                    }
                };
                if !intact {
                    tracing::info!("proxy chains were flushed or changed externally; next sync is full");
                }
                observers.status.send_modify(|s| s.checks += 1);
                machine.step(Input::CheckFinished { intact }, Instant::now());
            }
            Action::WaitUntil(deadline) => {
                let sleep = async {
                    match deadline {
                        Some(at) => tokio::time::sleep_until(tokio::time::Instant::from_std(at)).await,
                        None => std::future::pending::<()>().await,
                    }
                };
                tokio::select! {
                    notice = notices.recv() => {
                        let Some(notice) = notice else { return };
                        let input = match notice {
                            Notice::InformersSynced => Input::InformersSynced,
                            Notice::Changed => {
                                let now = SystemTime::now();
                                observers.metrics.observe_queued(now);
                                observers.health.queued(now);
                                Input::Changed
                            }
                            Notice::NodeLabelsChanged => Input::NodeLabelsChanged,
                        };
                        machine.step(input, Instant::now());
                    }
                    () = sleep => {}
                }
            }
        }
    }
}
