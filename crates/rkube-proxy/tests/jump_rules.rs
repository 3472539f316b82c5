//! Full syncs install kube-proxy's jump rules from the built-in chains once,
//! and later full syncs find them in `iptables-save` without re-adding them.

use crate::common;

use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use common::{test_config, NetNs};
use rkube_proxy::engine::machine::{FullReason, SyncKind};
use rkube_proxy::engine::{IptablesBackend, SyncBackend};
use rkube_proxy::fixtures::{endpoint_slice, service, Ep};
use rkube_proxy::iptables::{self, ExecIptables, Iptables, Table};
use rkube_proxy::tracker::ChangeTracker;

/// Counts the `ensure_*` calls that reach the real iptables.
struct Counting {
    inner: ExecIptables,
    ensures: Arc<Mutex<usize>>,
}

impl Iptables for Counting {
    fn restore_all(&mut self, data: &[u8]) -> iptables::Result<()> {
        self.inner.restore_all(data)
    }
    fn save(&mut self, table: Table) -> iptables::Result<String> {
        self.inner.save(table)
    }
    fn ensure_chain(&mut self, table: Table, chain: &str) -> iptables::Result<()> {
        *self.ensures.lock().expect("lock") += 1;
        self.inner.ensure_chain(table, chain)
    }
    fn ensure_rule_prepend(&mut self, table: Table, chain: &str, args: &[&str]) -> iptables::Result<()> {
        *self.ensures.lock().expect("lock") += 1;
        self.inner.ensure_rule_prepend(table, chain, args)
    }
    fn local_ipv4_addresses(&mut self) -> iptables::Result<Vec<Ipv4Addr>> {
        self.inner.local_ipv4_addresses()
    }
}

#[test]
fn full_syncs_install_jump_rules_once_and_then_find_them_in_save_output() {
    let ns = NetNs::new("jump");
    let ensures = Arc::new(Mutex::new(0));
    let mut backend = IptablesBackend::new(Counting { inner: ns.iptables(), ensures: ensures.clone() }, test_config());
    let tracker = Mutex::new(ChangeTracker::new("node-a", SystemTime::UNIX_EPOCH));
    {
        let mut t = tracker.lock().expect("lock");
        t.update_service(&service("ns", "a", "10.96.0.1", "p", 80));
        t.update_slice(&endpoint_slice("ns", "a", "a-1", "p", 8080, &[Ep::ready("10.244.0.1")]));
    }
    let full = SyncKind::Full(FullReason::FirstSync);
    assert!(backend.sync(&tracker, full).result.is_ok());
    let first = *ensures.lock().expect("lock");
    assert!(first >= 12, "first full sync creates chains and jump rules ({first} ensures)");

    assert!(backend.sync(&tracker, SyncKind::Full(FullReason::Periodic)).result.is_ok());
    assert_eq!(*ensures.lock().expect("lock"), first, "second full sync found everything in iptables-save");

    let nat = ns.exec_ok("iptables-save", &["-t", "nat"]);
    let jumps = |chain: &str| nat.lines().filter(|l| l.starts_with(&format!("-A {chain} ")) && l.ends_with("-j KUBE-SERVICES")).count();
    assert_eq!(jumps("OUTPUT"), 1, "{nat}");
    assert_eq!(jumps("PREROUTING"), 1, "{nat}");
    let filter = ns.exec_ok("iptables-save", &["-t", "filter"]);
    assert_eq!(filter.lines().filter(|l| l.starts_with("-A FORWARD ") && l.ends_with("-j KUBE-PROXY-FIREWALL")).count(), 1);
    for table in ["mangle", "nat", "filter"] {
        assert!(ns.exec_ok("iptables-save", &["-t", table]).contains(":KUBE-PROXY-CANARY"), "canary in {table}");
    }
}
