use std::time::{Duration, Instant};

use super::*;

const MIN: Duration = Duration::from_secs(1);
const PERIOD: Duration = Duration::from_secs(30);

fn machine() -> (SyncMachine, Instant) {
    let t = Timing { min_sync_period: MIN, sync_period: PERIOD, retry_period: PERIOD, full_sync_period: Duration::from_secs(3600) };
    (SyncMachine::new(t), Instant::now())
}

/// Drive to a completed, successful first sync at `t0`.
fn synced(m: &mut SyncMachine, t0: Instant) {
    m.step(Input::InformersSynced, t0);
    let kind = match m.poll(t0) {
        Action::Sync(k) => k,
        other => panic!("expected first sync, got {other:?}"),
    };
    m.step(Input::SyncFinished { ok: true, kind }, t0);
}

#[test]
fn no_sync_before_informers_synced() {
    let (mut m, t0) = machine();
    m.step(Input::Changed, t0);
    assert_eq!(m.poll(t0), Action::WaitUntil(None));
    assert_eq!(m.phase(), Phase::WaitingForInformers);
}

#[test]
fn first_sync_is_full() {
    let (mut m, t0) = machine();
    m.step(Input::InformersSynced, t0);
    assert_eq!(m.poll(t0), Action::Sync(SyncKind::Full(FullReason::FirstSync)));
    assert_eq!(m.phase(), Phase::Busy);
    assert_eq!(m.poll(t0), Action::WaitUntil(None), "one sync at a time");
}

#[test]
fn changes_are_batched_by_min_sync_period_measured_start_to_start() {
    let (mut m, t0) = machine();
    synced(&mut m, t0);
    let t1 = t0 + Duration::from_millis(300);
    m.step(Input::Changed, t1);
    m.step(Input::Changed, t1);
    // Allowed only one min-sync-period after the previous start.
    assert_eq!(m.poll(t1), Action::WaitUntil(Some(t0 + MIN)));
    assert_eq!(m.poll(t0 + MIN), Action::Sync(SyncKind::Partial));
    m.step(Input::SyncFinished { ok: true, kind: SyncKind::Partial }, t0 + MIN + Duration::from_millis(700));
    // Next change right after a long sync: start-to-start, so allowed at t0 + 2*MIN.
    m.step(Input::Changed, t0 + MIN + Duration::from_millis(800));
    assert_eq!(m.poll(t0 + MIN + Duration::from_millis(800)), Action::WaitUntil(Some(t0 + MIN * 2)));
}

#[test]
fn nothing_due_waits_for_the_check_period() {
    let (mut m, t0) = machine();
    synced(&mut m, t0);
    assert_eq!(m.poll(t0), Action::WaitUntil(Some(t0 + PERIOD)));
}

#[test]
fn failed_partial_sync_is_retried_as_full() {
    let (mut m, t0) = machine();
    synced(&mut m, t0);
    let t1 = t0 + Duration::from_secs(5);
    m.step(Input::Changed, t1);
    assert_eq!(m.poll(t1), Action::Sync(SyncKind::Partial));
    m.step(Input::SyncFinished { ok: false, kind: SyncKind::Partial }, t1);
    // Retried after the sync period even with no new change, and as a full sync.
    let before = t1 + PERIOD - Duration::from_secs(1);
    assert_eq!(m.poll(before), Action::CheckChains, "the periodic check is due first");
    m.step(Input::CheckFinished { intact: true }, before);
    assert_eq!(m.poll(before), Action::WaitUntil(Some(t1 + PERIOD)));
    assert_eq!(m.poll(t1 + PERIOD), Action::Sync(SyncKind::Full(FullReason::AfterFailure)));
}

#[test]
fn change_after_failure_syncs_full_without_waiting_for_retry() {
    let (mut m, t0) = machine();
    synced(&mut m, t0);
    let t1 = t0 + Duration::from_secs(5);
    m.step(Input::Changed, t1);
    m.poll(t1);
    m.step(Input::SyncFinished { ok: false, kind: SyncKind::Partial }, t1);
    m.step(Input::Changed, t1 + MIN);
    assert_eq!(m.poll(t1 + MIN), Action::Sync(SyncKind::Full(FullReason::AfterFailure)));
}

#[test]
fn full_sync_is_owed_until_one_succeeds() {
    let (mut m, t0) = machine();
    m.step(Input::InformersSynced, t0);
    assert_eq!(m.poll(t0), Action::Sync(SyncKind::Full(FullReason::FirstSync)));
    m.step(Input::SyncFinished { ok: false, kind: SyncKind::Full(FullReason::FirstSync) }, t0);
    assert_eq!(m.poll(t0 + MIN), Action::Sync(SyncKind::Full(FullReason::FirstSync)));
    m.step(Input::SyncFinished { ok: true, kind: SyncKind::Full(FullReason::FirstSync) }, t0 + MIN);
    m.step(Input::Changed, t0 + MIN * 2);
    assert_eq!(m.poll(t0 + MIN * 2), Action::Sync(SyncKind::Partial));
}

#[test]
fn node_label_change_forces_full_sync() {
    let (mut m, t0) = machine();
    synced(&mut m, t0);
    m.step(Input::NodeLabelsChanged, t0 + MIN);
    assert_eq!(m.poll(t0 + MIN), Action::Sync(SyncKind::Full(FullReason::NodeLabelsChanged)));
}

#[test]
fn full_sync_happens_at_least_hourly_without_changes() {
    let (mut m, t0) = machine();
    synced(&mut m, t0);
    let mut now = t0;
    // Checks every sync period find everything intact.
    loop {
        match m.poll(now) {
            Action::CheckChains => m.step(Input::CheckFinished { intact: true }, now),
            Action::Sync(kind) => {
                assert_eq!(kind, SyncKind::Full(FullReason::Periodic));
                assert!(now >= t0 + Duration::from_secs(3600));
                break;
            }
            Action::WaitUntil(Some(at)) => now = at,
            Action::WaitUntil(None) => panic!("machine stalled"),
        }
    }
}

#[test]
fn partial_syncs_do_not_postpone_the_hourly_full_sync() {
    let (mut m, t0) = machine();
    synced(&mut m, t0);
    let late = t0 + Duration::from_secs(3599);
    m.step(Input::Changed, late);
    assert_eq!(m.poll(late), Action::Sync(SyncKind::Partial));
    m.step(Input::SyncFinished { ok: true, kind: SyncKind::Partial }, late);
    m.step(Input::Changed, t0 + Duration::from_secs(3601));
    assert_eq!(m.poll(t0 + Duration::from_secs(3601)), Action::Sync(SyncKind::Full(FullReason::Periodic)));
}

#[test]
fn flushed_chains_found_by_check_force_full_sync() {
    let (mut m, t0) = machine();
    synced(&mut m, t0);
    assert_eq!(m.poll(t0 + PERIOD), Action::CheckChains);
    m.step(Input::CheckFinished { intact: false }, t0 + PERIOD);
    assert_eq!(m.poll(t0 + PERIOD), Action::Sync(SyncKind::Full(FullReason::ChainsMissing)));
}

#[test]
fn checks_continue_while_partial_syncs_run_often() {
    let (mut m, t0) = machine();
    synced(&mut m, t0);
    let mut now = t0;
    let mut checked = false;
    for _ in 0..100 {
        now += MIN;
        m.step(Input::Changed, now);
        match m.poll(now) {
            Action::Sync(kind) => m.step(Input::SyncFinished { ok: true, kind }, now),
            Action::CheckChains => {
                checked = true;
                break;
            }
            other => panic!("unexpected {other:?}"),
        }
        if let Action::CheckChains = m.poll(now) {
            checked = true;
            break;
        }
    }
    assert!(checked, "the sync-period check must not starve");
}
