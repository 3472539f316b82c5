//! Helpers for tests against real iptables: network namespaces the test creates
//! (uniquely named, always deleted by a Drop guard) and child processes killed by PID.
#![allow(dead_code)]

use std::process::{Child, Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use rkube_proxy::engine::machine::{FullReason, SyncKind};
use rkube_proxy::engine::{IptablesBackend, SyncBackend, SyncReport};
use rkube_proxy::iptables::{normalize_save, ExecIptables, Iptables, Table};
use rkube_proxy::model::Ipv4Cidr;
use rkube_proxy::tracker::ChangeTracker;
use rkube_proxy::writer::RuleConfig;

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// Run a command, returning its output; panics only if it cannot be started.
pub fn run(program: &str, args: &[&str]) -> Output {
    Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program} {args:?}: {e}"))
}

/// Run a command that must succeed.
pub fn must(program: &str, args: &[&str]) -> String {
    let out = run(program, args);
    assert!(
        out.status.success(),
        "{program} {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A network namespace created by this test and deleted on drop.
#[derive(Debug)]
pub struct NetNs {
    pub name: String,
}

impl NetNs {
    /// Create `rkp-<tag>-<pid>-<n>` with its loopback up.
    pub fn new(tag: &str) -> Self {
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let name = format!("rkp-{tag}-{}-{n}", std::process::id());
        must("ip", &["netns", "add", &name]);
        let ns = NetNs { name };
        ns.exec_ok("ip", &["link", "set", "lo", "up"]);
        ns
    }

    /// Run `program args` inside the namespace.
    pub fn exec(&self, program: &str, args: &[&str]) -> Output {
        let mut full = vec!["netns", "exec", self.name.as_str(), program];
        full.extend_from_slice(args);
        run("ip", &full)
    }

    /// Run inside the namespace; must succeed; returns stdout.
    pub fn exec_ok(&self, program: &str, args: &[&str]) -> String {
        let out = self.exec(program, args);
        assert!(
            out.status.success(),
            "in {}: {program} {args:?} failed: {}",
            self.name,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// An iptables handle acting inside the namespace (legacy binaries when
    /// `RKUBE_TEST_IPTABLES=legacy`).
    pub fn iptables(&self) -> ExecIptables {
        let ipt = ExecIptables::in_netns(self.name.clone());
        if std::env::var("RKUBE_TEST_IPTABLES").as_deref() == Ok("legacy") {
            ipt.legacy()
        } else {
            ipt
        }
    }

    /// Normalized `iptables-save` of the nat and filter tables.
    pub fn saved_state(&self) -> String {
        let mut ipt = self.iptables();
        let nat = ipt.save(Table::Nat).expect("iptables-save nat");
        let filter = ipt.save(Table::Filter).expect("iptables-save filter");
        format!("*nat\n{}*filter\n{}", normalize_save(&nat), normalize_save(&filter))
    }
}

impl Drop for NetNs {
    fn drop(&mut self) {
        let _ = run("ip", &["netns", "del", &self.name]);
    }
}

/// A child process killed (by PID) and reaped on drop.
#[derive(Debug)]
pub struct ChildGuard(pub Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The rule config tests use: pods in 10.244.0.0/16.
pub fn test_config() -> RuleConfig {
    RuleConfig { cluster_cidr: Ipv4Cidr::parse("10.244.0.0/16").ok(), ..RuleConfig::default() }
}

/// A tracker plus an iptables backend aimed at a namespace, synced by hand.
pub struct Proxy {
    pub tracker: Arc<Mutex<ChangeTracker>>,
    pub backend: IptablesBackend<ExecIptables>,
    pub synced_once: bool,
}

impl Proxy {
    pub fn new(ns: &NetNs, node: &str) -> Self {
        Proxy {
            tracker: Arc::new(Mutex::new(ChangeTracker::new(node, SystemTime::UNIX_EPOCH))),
            backend: IptablesBackend::new(ns.iptables(), test_config()),
            synced_once: false,
        }
    }

    /// Apply a change to the tracker.
    pub fn change<R>(&self, f: impl FnOnce(&mut ChangeTracker) -> R) -> R {
        f(&mut self.tracker.lock().expect("tracker lock"))
    }

    /// Sync: full the first time, partial afterwards (as the sync machine would).
    pub fn sync(&mut self) -> SyncReport {
        let kind = if self.synced_once { SyncKind::Partial } else { SyncKind::Full(FullReason::FirstSync) };
        self.sync_kind(kind)
    }

    pub fn sync_kind(&mut self, kind: SyncKind) -> SyncReport {
        let report = self.backend.sync(&self.tracker, kind);
        if report.result.is_ok() {
            self.synced_once = true;
        }
        report
    }
}
