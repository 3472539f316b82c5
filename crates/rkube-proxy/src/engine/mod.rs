//! The sync engine: [`machine::SyncMachine`] decides *when* and *what kind*;
//! a [`SyncBackend`] carries a sync out. [`IptablesBackend`] is the iptables
//! backend (generation with [`IptablesWriter`], apply with an [`Iptables`]);
//! an nftables backend plugs into the same machine and runtime loop.
//!
//! One sync ([`SyncBackend::sync`]):
//! 1. full syncs only: ensure the jump rules from the built-in chains and the
//!    canary chains, and read existing chains (`iptables-save`) to find stale ones;
//! 2. under the tracker lock: hand pending changes to the sync
//!    ([`ChangeTracker::begin_sync`]) and generate the restore input;
//! 3. without the lock: `iptables-restore --noflush --counters`;
//! 4. under the lock: [`ChangeTracker::finish_sync`] (failures keep the changes).

pub mod machine;
pub mod runner;

use std::collections::{BTreeMap, HashSet};
use std::net::Ipv4Addr;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use crate::chains::{self, Chain};
use crate::iptables::{Iptables, SavedTable, Table};
use crate::tracker::ChangeTracker;
use crate::writer::iptables::{IptablesWriter, NAT_TRANSACTION_CHAINS};
use crate::writer::{is_large_cluster, RuleConfig, RuleWriter, SyncMode, SyncRequest};
use machine::{FullReason, SyncKind};

/// Errors of one sync or check.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An iptables command failed.
    #[error(transparent)]
    Iptables(#[from] crate::iptables::Error),
    /// Another thread panicked while holding the tracker lock.
    #[error("change tracker lock poisoned")]
    Poisoned,
}

/// Result alias for this module.
pub type Result<T> = std::result::Result<T, Error>;

/// What one sync did.
#[derive(Debug)]
pub struct SyncReport {
    /// What actually ran (a partial sync is upgraded to full when large-cluster mode flips).
    pub kind: SyncKind,
    /// Success, or why the restore failed.
    pub result: Result<()>,
    /// Wall time of generation plus restore.
    pub duration: Duration,
    /// Time spent generating the restore input.
    pub generation: Duration,
    /// Time spent in `iptables-restore` (the rest of `duration` is generation and,
    /// on full syncs, reading the current rules).
    pub restore: Duration,
    /// Size of the restore input in bytes.
    pub bytes: usize,
    /// Service ports whose per-service chains were written.
    pub services_written: usize,
    /// Stale chains deleted.
    pub chains_deleted: usize,
    /// nat rules after the sync.
    pub nat_rules_total: usize,
    /// nat rules written.
    pub nat_rules_written: usize,
    /// filter rules written.
    pub filter_rules: usize,
    /// Trigger times of the EndpointSlice changes this sync programmed (on success).
    pub trigger_times: Vec<SystemTime>,
}

/// A backend the runtime loop drives.
pub trait SyncBackend: Send {
    /// Run one sync of `kind` over the tracked state.
    fn sync(&mut self, tracker: &Mutex<ChangeTracker>, kind: SyncKind) -> SyncReport;
    /// Whether the rules are as the last successful sync left them (upstream
    /// `iptables.Monitor` canary, extended to rule counts so a flushed KUBE-* chain is
    /// noticed too).
    fn check_intact(&mut self) -> Result<bool>;
}

/// Jump rules from built-in chains into kube-proxy's chains (upstream `iptablesJumpChains`):
/// (table, source chain, target chain, extra match args, comment).
const JUMP_RULES: &[(Table, &str, &str, &[&str], &str)] = &[
    (Table::Filter, "INPUT", chains::KUBE_EXTERNAL_SERVICES, &["-m", "conntrack", "--ctstate", "NEW"], "kubernetes externally-visible service portals"),
    (Table::Filter, "FORWARD", chains::KUBE_EXTERNAL_SERVICES, &["-m", "conntrack", "--ctstate", "NEW"], "kubernetes externally-visible service portals"),
    (Table::Filter, "INPUT", chains::KUBE_NODEPORTS, &[], "kubernetes health check service ports"),
    (Table::Filter, "FORWARD", chains::KUBE_SERVICES, &["-m", "conntrack", "--ctstate", "NEW"], "kubernetes service portals"),
    (Table::Filter, "OUTPUT", chains::KUBE_SERVICES, &["-m", "conntrack", "--ctstate", "NEW"], "kubernetes service portals"),
    (Table::Filter, "FORWARD", chains::KUBE_FORWARD, &[], "kubernetes forwarding rules"),
    (Table::Filter, "INPUT", chains::KUBE_PROXY_FIREWALL, &["-m", "conntrack", "--ctstate", "NEW"], "kubernetes load balancer firewall"),
    (Table::Filter, "OUTPUT", chains::KUBE_PROXY_FIREWALL, &["-m", "conntrack", "--ctstate", "NEW"], "kubernetes load balancer firewall"),
    (Table::Filter, "FORWARD", chains::KUBE_PROXY_FIREWALL, &["-m", "conntrack", "--ctstate", "NEW"], "kubernetes load balancer firewall"),
    (Table::Nat, "OUTPUT", chains::KUBE_SERVICES, &[], "kubernetes service portals"),
    (Table::Nat, "PREROUTING", chains::KUBE_SERVICES, &[], "kubernetes service portals"),
    (Table::Nat, "POSTROUTING", chains::KUBE_POSTROUTING, &[], "kubernetes postrouting rules"),
];

/// nat chains written whole on every sync.
const NAT_TOP_LEVEL: [&str; 4] =
    [chains::KUBE_SERVICES, chains::KUBE_NODEPORTS, chains::KUBE_POSTROUTING, chains::KUBE_MARK_MASQ];
/// filter chains written whole on every sync.
const FILTER_TOP_LEVEL: [&str; 5] = [
    chains::KUBE_SERVICES,
    chains::KUBE_EXTERNAL_SERVICES,
    chains::KUBE_FORWARD,
    chains::KUBE_NODEPORTS,
    chains::KUBE_PROXY_FIREWALL,
];

/// Tables holding the canary chain.
const CANARY_TABLES: [Table; 3] = [Table::Mangle, Table::Nat, Table::Filter];

/// kube-proxy's iptables mode as a [`SyncBackend`].
pub struct IptablesBackend<I: Iptables> {
    iptables: I,
    writer: IptablesWriter,
    config: RuleConfig,
    /// Per-service nat chains present after the last successful restore.
    /// Invariant: updated only when a restore succeeded; cleared on failure so the
    /// (full) retry re-reads the kernel.
    programmed_chains: HashSet<Chain>,
    /// KUBE-* rule counts (nat, filter) after the last successful restore.
    expected_rules: Option<(usize, usize)>,
    large_cluster_mode: Option<bool>,
    /// Whether the iptables backend (nf_tables or legacy) has been asked yet.
    backend_known: bool,
}

impl<I: Iptables> IptablesBackend<I> {
    /// A backend writing rules shaped by `config` through `iptables`.
    pub fn new(iptables: I, config: RuleConfig) -> Self {
        Self {
            iptables,
            writer: IptablesWriter::new(),
            config,
            programmed_chains: HashSet::new(),
            expected_rules: None,
            large_cluster_mode: None,
            backend_known: false,
        }
    }

    /// The rule writer (tests and benchmarks tune how it splits nat transactions;
    /// the first full sync sets that from the iptables backend).
    pub fn writer_mut(&mut self) -> &mut IptablesWriter {
        &mut self.writer
    }

    /// The iptables handle (tests use it to inspect or disturb the namespace).
    pub fn iptables_mut(&mut self) -> &mut I {
        &mut self.iptables
    }

    /// `iptables-save` of the tables the proxy touches.
    fn save_all(&mut self) -> Result<BTreeMap<Table, SavedTable>> {
        let texts = self.iptables.save_tables(&CANARY_TABLES)?;
        Ok(texts.into_iter().map(|(table, text)| (table, SavedTable::parse(&text))).collect())
    }

    /// Steps before a full sync: jump rules and canaries (spawning `iptables` only
    /// for what `iptables-save` shows missing), and the kernel's service chains.
    fn prepare_full(&mut self) -> Result<HashSet<Chain>> {
        if !self.backend_known {
            let split = self.iptables.is_nf_tables()?.then_some(NAT_TRANSACTION_CHAINS);
            self.writer.split_nat(split);
            self.backend_known = true;
        }
        let saved = self.save_all()?;
        let has_chain = |table: Table, chain: &str| saved.get(&table).is_some_and(|t| t.chains.contains_key(chain));
        for (table, src, dst, extra, comment) in JUMP_RULES {
            if !has_chain(*table, dst) {
                self.iptables.ensure_chain(*table, dst)?;
            }
            let mut args: Vec<&str> = extra.to_vec();
            args.extend(["-m", "comment", "--comment", comment, "-j", dst]);
            let mut line = format!("-A {src} ");
            for a in extra.iter() {
                line.push_str(a);
                line.push(' ');
            }
            line.push_str(&format!("-m comment --comment \"{comment}\" -j {dst}"));
            let present = saved
                .get(table)
                .and_then(|t| t.chains.get(*src))
                .is_some_and(|rules| rules.contains(&line));
            if !present {
                self.iptables.ensure_rule_prepend(*table, src, &args)?;
            }
        }
        for table in CANARY_TABLES {
            if !has_chain(table, chains::KUBE_PROXY_CANARY) {
                self.iptables.ensure_chain(table, chains::KUBE_PROXY_CANARY)?;
            }
        }
        Ok(saved
            .get(&Table::Nat)
            .map(|nat| nat.chains.keys().filter(|c| chains::is_service_chain(c)).map(|c| Chain::new(c)).collect())
            .unwrap_or_default())
    }

    fn node_ips(&mut self) -> Result<Vec<Ipv4Addr>> {
        if self.config.node_port_addresses.is_empty() {
            return Ok(Vec::new());
        }
        let cidrs = &self.config.node_port_addresses;
        let ips = self.iptables.local_ipv4_addresses()?;
        Ok(ips.into_iter().filter(|ip| cidrs.iter().any(|c| c.contains(*ip))).collect())
    }
}

impl<I: Iptables> SyncBackend for IptablesBackend<I> {
    fn sync(&mut self, tracker: &Mutex<ChangeTracker>, requested: SyncKind) -> SyncReport {
        let start = Instant::now();
        let mut report = SyncReport {
            kind: requested,
            result: Ok(()),
            duration: Duration::ZERO,
            generation: Duration::ZERO,
            restore: Duration::ZERO,
            bytes: 0,
            services_written: 0,
            chains_deleted: 0,
            nat_rules_total: 0,
            nat_rules_written: 0,
            filter_rules: 0,
            trigger_times: Vec::new(),
        };
        let fail = |mut report: SyncReport, err: Error, tracker: &Mutex<ChangeTracker>| {
            if let Ok(mut t) = tracker.lock() {
                t.finish_sync(false);
            }
            report.result = Err(err);
            report.duration = start.elapsed();
            report
        };

        // Large-cluster mode changes how every per-endpoint rule is written.
        let large = match tracker.lock() {
            Ok(t) => is_large_cluster(&t),
            Err(_) => return fail(report, Error::Poisoned, tracker),
        };
        let kind = if self.large_cluster_mode.is_some_and(|m| m != large) && !requested.is_full() {
            SyncKind::Full(FullReason::LargeClusterModeChanged)
        } else {
            requested
        };
        report.kind = kind;

        let existing = if kind.is_full() {
            match self.prepare_full() {
                Ok(e) => e,
                Err(e) => return fail(report, e, tracker),
            }
        } else {
            HashSet::new()
        };
        let node_ips = match self.node_ips() {
            Ok(ips) => ips,
            Err(e) => return fail(report, e, tracker),
        };

        let gen_start = Instant::now();
        let (input, changes) = {
            let Ok(mut t) = tracker.lock() else { return fail(report, Error::Poisoned, tracker) };
            let changes = t.begin_sync();
            let mode = if kind.is_full() { SyncMode::Full } else { SyncMode::Partial { changed: &changes.services } };
            let request = SyncRequest {
                tracker: &t,
                config: &self.config,
                mode,
                programmed_chains: &self.programmed_chains,
                existing_chains: &existing,
                node_ips: &node_ips,
                large_cluster_mode: large,
            };
            (self.writer.write(&request), changes)
        };
        report.generation = gen_start.elapsed();
        report.bytes = input.data.len();
        report.services_written = input.services_written;
        report.chains_deleted = input.chains_deleted;
        report.nat_rules_total = input.nat_rules_total;
        report.nat_rules_written = input.nat_rules_written;
        report.filter_rules = input.filter_rules;

        let restore_start = Instant::now();
        let restored = self.iptables.restore_all(input.data.as_bytes());
        report.restore = restore_start.elapsed();
        if let Err(e) = restored {
            // The kernel state is unknown now: forget what we believed was there.
            self.programmed_chains.clear();
            self.expected_rules = None;
            return fail(report, e.into(), tracker);
        }
        self.programmed_chains = input.active_chains;
        self.large_cluster_mode = Some(large);
        // KUBE-* rules in nat: top-level and per-service; in filter: all written.
        self.expected_rules = Some((input.nat_rules_total, input.filter_rules));
        if let Ok(mut t) = tracker.lock() {
            t.finish_sync(true);
        }
        report.trigger_times = changes.trigger_times;
        report.duration = start.elapsed();
        report
    }

    fn check_intact(&mut self) -> Result<bool> {
        let saved = self.save_all()?;
        if CANARY_TABLES.iter().any(|t| !saved.get(t).is_some_and(|s| s.chains.contains_key(chains::KUBE_PROXY_CANARY))) {
            return Ok(false);
        }
        let Some((nat_rules, filter_rules)) = self.expected_rules else { return Ok(true) };
        let (Some(nat), Some(filter)) = (saved.get(&Table::Nat), saved.get(&Table::Filter)) else { return Ok(false) };
        let nat_owned = |c: &str| NAT_TOP_LEVEL.contains(&c) || chains::is_service_chain(c);
        if nat.rule_count(nat_owned) != nat_rules
            || self.programmed_chains.iter().any(|c| !nat.chains.contains_key(c.as_str()))
        {
            return Ok(false);
        }
        Ok(filter.rule_count(|c| FILTER_TOP_LEVEL.contains(&c)) == filter_rules)
    }
}

#[cfg(test)]
#[path = "backend_tests.rs"]
mod tests;
