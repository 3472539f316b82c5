//! The sync decision as an explicit state machine with a pure step function.
//!
//! Follows upstream's `BoundedFrequencyRunner` + `syncProxyRules` decisions and
//! KEP-3453, with two upstream bugs designed out: a failed sync keeps its
//! changes (kubernetes#112604, see [`crate::tracker`]) and a full sync happens
//! at least every [`Timing::full_sync_period`] (kubernetes#129128).
//!
//! ```text
//!                 InformersSynced
//!  WaitingForInformers ─────────────► Idle ◄──────────────┐
//!                                      │ poll(): a sync is │ SyncFinished /
//!                                      │ due and allowed   │ CheckFinished
//!                                      ▼                   │
//!                                   Busy (Sync | Check) ───┘
//! ```
//!
//! A sync is *due* when changes are pending, a full sync is owed (first sync,
//! node labels changed, chains found missing, retry after a failure), or the
//! hourly full sync is reached; it is *allowed* once
//! `--iptables-min-sync-period` has passed since the previous sync *started*.
//! A full sync is owed until a sync succeeds. Every `--iptables-sync-period`
//! the machine asks for a check of externally flushed chains.

use std::time::{Duration, Instant};

/// Periods that drive the machine (kube-proxy flag defaults).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// `--iptables-min-sync-period`, start to start (default 1 s).
    pub min_sync_period: Duration,
    /// `--iptables-sync-period`: external-flush check interval (default 30 s).
    pub sync_period: Duration,
    /// Delay before retrying a failed sync when no new change arrives (kube-proxy
    /// uses `RetryAfter(syncPeriod)`: the same 30 s).
    pub retry_period: Duration,
    /// Longest time between full syncs (1 h; kubernetes#129128).
    pub full_sync_period: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Self {
            min_sync_period: Duration::from_secs(1),
            sync_period: Duration::from_secs(30),
            retry_period: Duration::from_secs(30),
            full_sync_period: Duration::from_secs(3600),
        }
    }
}

/// Why a sync writes every chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FullReason {
    /// First sync after start.
    FirstSync,
    /// The previous sync failed.
    AfterFailure,
    /// The node's labels changed (topology).
    NodeLabelsChanged,
    /// The periodic check found chains flushed or missing.
    ChainsMissing,
    /// No full sync for `full_sync_period`.
    Periodic,
    /// The endpoint count crossed the large-cluster threshold, which changes how every
    /// per-endpoint rule is written (decided by the backend, not the machine).
    LargeClusterModeChanged,
}

/// What kind of sync to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncKind {
    /// Write every chain.
    Full(FullReason),
    /// Write the top-level chains and the changed services' chains.
    Partial,
}

impl SyncKind {
    /// Whether this is a full sync.
    pub fn is_full(self) -> bool {
        matches!(self, SyncKind::Full(_))
    }
}

/// Events fed to the machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Input {
    /// The initial Service and EndpointSlice lists are in.
    InformersSynced,
    /// A Service or EndpointSlice change is pending.
    Changed,
    /// The node's labels changed.
    NodeLabelsChanged,
    /// The sync started by the last [`Action::Sync`] ended; `kind` is what actually
    /// ran (a backend may upgrade partial to full).
    SyncFinished {
        /// Whether the restore succeeded.
        ok: bool,
        /// What ran.
        kind: SyncKind,
    },
    /// The check started by [`Action::CheckChains`] ended.
    CheckFinished {
        /// All chains were found as written.
        intact: bool,
    },
}

/// What the runtime should do next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Run a sync now; report with [`Input::SyncFinished`].
    Sync(SyncKind),
    /// Check for flushed chains now; report with [`Input::CheckFinished`].
    CheckChains,
    /// Nothing to do until this instant (or `None`: until the next input).
    WaitUntil(Option<Instant>),
}

/// Where the machine is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Before the informers' initial lists; only `InformersSynced` moves on (to `Idle`).
    WaitingForInformers,
    /// Nothing running; `poll` may start a sync or check (→ `Busy`).
    Idle,
    /// A sync or check runs; its `*Finished` input returns to `Idle`.
    Busy,
}

/// The sync state machine. Pure: time comes in as arguments.
#[derive(Debug, Clone)]
pub struct SyncMachine {
    timing: Timing,
    phase: Phase,
    /// Changes pending since the last sync started.
    changes_pending: bool,
    /// A full sync is owed, and why (cleared only by a successful sync).
    full_owed: Option<FullReason>,
    /// After a failure: when to retry even without new changes.
    retry_at: Option<Instant>,
    last_sync_start: Option<Instant>,
    last_full_success: Option<Instant>,
    next_check: Option<Instant>,
}

impl SyncMachine {
    /// A machine waiting for the informers.
    pub fn new(timing: Timing) -> Self {
        Self {
            timing,
            phase: Phase::WaitingForInformers,
            changes_pending: false,
            full_owed: Some(FullReason::FirstSync),
            retry_at: None,
            last_sync_start: None,
            last_full_success: None,
            next_check: None,
        }
    }

    /// Current phase.
    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// The timing in force.
    pub fn timing(&self) -> Timing {
        self.timing
    }

    /// Feed an event observed at `now`.
    pub fn step(&mut self, input: Input, now: Instant) {
        match input {
            Input::InformersSynced => {
                if self.phase == Phase::WaitingForInformers {
                    self.phase = Phase::Idle;
                }
            }
            Input::Changed => self.changes_pending = true,
            Input::NodeLabelsChanged => {
                self.changes_pending = true;
                self.owe_full(FullReason::NodeLabelsChanged);
            }
            Input::SyncFinished { ok, kind } => {
                self.phase = Phase::Idle;
                if ok {
                    self.retry_at = None;
                    if kind.is_full() {
                        self.full_owed = None;
                        self.last_full_success = Some(now);
                    }
                } else {
                    // Queue another sync; it will be full (KEP-3453).
                    self.owe_full(FullReason::AfterFailure);
                    self.retry_at = Some(now + self.timing.retry_period);
                }
            }
            Input::CheckFinished { intact } => {
                self.phase = Phase::Idle;
                self.next_check = Some(now + self.timing.sync_period);
                if !intact {
                    self.owe_full(FullReason::ChainsMissing);
                }
            }
        }
    }

    fn owe_full(&mut self, reason: FullReason) {
        // Keep the first reason (FirstSync stays FirstSync until it succeeds).
        if self.full_owed.is_none() {
            self.full_owed = Some(reason);
        }
    }

    /// The kind of sync that would run at `now`.
    pub fn sync_kind(&self, now: Instant) -> SyncKind {
        if let Some(reason) = self.full_owed {
            return SyncKind::Full(reason);
        }
        match self.last_full_success {
            Some(t) if now.duration_since(t) < self.timing.full_sync_period => SyncKind::Partial,
            _ => SyncKind::Full(FullReason::Periodic),
        }
    }

    /// When a sync becomes due, if ever (ignoring the min-sync-period).
    fn due_at(&self, now: Instant) -> Option<Instant> {
        let full_owed_now = matches!(self.full_owed, Some(r) if r != FullReason::AfterFailure);
        if self.changes_pending || full_owed_now {
            return Some(now);
        }
        let periodic = self.last_full_success.map(|t| t + self.timing.full_sync_period);
        [self.retry_at, periodic].into_iter().flatten().min()
    }

    /// Decide what to do at `now`. Starting a sync or check moves to `Busy`.
    pub fn poll(&mut self, now: Instant) -> Action {
        if self.phase != Phase::Idle {
            return Action::WaitUntil(None);
        }
        let allowed_at = self.last_sync_start.map(|t| t + self.timing.min_sync_period);
        let sync_at = self.due_at(now).map(|due| allowed_at.map_or(due, |a| a.max(due)));
        if let Some(at) = sync_at {
            if at <= now {
                let kind = self.sync_kind(now);
                self.phase = Phase::Busy;
                self.changes_pending = false;
                self.last_sync_start = Some(now);
                self.next_check.get_or_insert(now + self.timing.sync_period);
                return Action::Sync(kind);
            }
        }
        // Checks start one sync period after the first sync.
        let check_at = self.next_check;
        if let Some(at) = check_at {
            if at <= now {
                self.phase = Phase::Busy;
                return Action::CheckChains;
            }
        }
        Action::WaitUntil([sync_at, check_at].into_iter().flatten().min())
    }
}

#[cfg(test)]
#[path = "machine_tests.rs"]
mod tests;
