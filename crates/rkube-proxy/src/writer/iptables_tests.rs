//! Golden tests of the generated restore input (like upstream's
//! `TestOverallIPTablesRules` and friends). Expected files live in
//! `src/writer/testdata/`; `UPDATE_GOLDEN=1 cargo test -p rkube-proxy golden_`
//! rewrites them (review the diff before committing).

use std::collections::{BTreeSet, HashSet};
use std::path::PathBuf;
use std::time::SystemTime;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;

use super::*;
use crate::fixtures::*;
use crate::model::{Ipv4Cidr, NamespacedName};
use crate::tracker::ChangeTracker;
use crate::writer::RuleConfig;

const NODE: &str = "test-node";

fn tracker(services: &[Service], slices: &[EndpointSlice]) -> ChangeTracker {
    let mut t = ChangeTracker::new(NODE, SystemTime::UNIX_EPOCH);
    for s in services {
        t.update_service(s);
    }
    for s in slices {
        t.update_slice(s);
    }
    t
}

fn config() -> RuleConfig {
    RuleConfig { cluster_cidr: Ipv4Cidr::parse("10.0.0.0/8").ok(), ..RuleConfig::default() }
}

fn write(t: &ChangeTracker, mode: SyncMode<'_>, programmed: &HashSet<Chain>) -> RestoreInput {
    let none = HashSet::new();
    IptablesWriter::new().write(&SyncRequest {
        tracker: t,
        config: &config(),
        mode,
        programmed_chains: programmed,
        existing_chains: &none,
        node_ips: &[],
        large_cluster_mode: false,
    })
}

fn full(t: &ChangeTracker) -> RestoreInput {
    write(t, SyncMode::Full, &HashSet::new())
}

/// Compare with `testdata/<name>.golden`, or rewrite it under `UPDATE_GOLDEN=1`.
fn assert_golden(name: &str, actual: &str) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src/writer/testdata").join(format!("{name}.golden"));
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(path.parent().expect("has parent")).expect("create testdata");
        std::fs::write(&path, actual).expect("write golden");
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    if expected != actual {
        panic!("restore input differs from {}\n--- expected\n{expected}\n--- actual\n{actual}", path.display());
    }
}

/// Lines of `data` belonging to `chain` (its declaration and rules).
fn chain_lines<'a>(data: &'a str, chain: &str) -> Vec<&'a str> {
    let decl = format!(":{chain} ");
    let rule = format!("-A {chain} ");
    data.lines().filter(|l| l.starts_with(&decl) || l.starts_with(&rule)).collect()
}

#[test]
fn golden_overall_mix_of_service_types_matches_upstream_layout() {
    // The services of upstream's TestOverallIPTablesRules: ClusterIP, Local LoadBalancer
    // with external IP, NodePort, external IP, LoadBalancer with source ranges and
    // session affinity, and a service without endpoints.
    let services = vec![
        service("ns1", "svc1", "172.30.0.41", "p80", 80),
        with_external_ips(
            with_external_policy_local(with_load_balancer(service("ns2", "svc2", "172.30.0.42", "p80", 80), 3001, &["1.2.3.4"]), 30000),
            &["192.168.99.22"],
        ),
        with_node_port(service("ns3", "svc3", "172.30.0.43", "p80", 80), 3003),
        with_external_ips(service("ns4", "svc4", "172.30.0.44", "p80", 80), &["192.168.99.33"]),
        with_client_ip_affinity(
            with_source_ranges(with_load_balancer(service("ns5", "svc5", "172.30.0.45", "p80", 80), 3002, &["5.6.7.8"]), &[" 203.0.113.0/25"]),
            10800,
        ),
        service("ns6", "svc6", "172.30.0.46", "p80", 80),
    ];
    let slices = vec![
        endpoint_slice("ns1", "svc1", "svc1-1", "p80", 80, &[Ep::ready("10.180.0.1")]),
        endpoint_slice("ns2", "svc2", "svc2-1", "p80", 80, &[Ep::ready("10.180.0.2")]),
        endpoint_slice("ns3", "svc3", "svc3-1", "p80", 80, &[Ep::ready("10.180.0.3")]),
        endpoint_slice("ns4", "svc4", "svc4-1", "p80", 80, &[Ep::ready("10.180.0.4"), Ep::ready("10.180.0.5").on(NODE)]),
        endpoint_slice("ns5", "svc5", "svc5-1", "p80", 80, &[Ep::ready("10.180.0.3")]),
    ];
    let out = full(&tracker(&services, &slices));
    assert_golden("overall", &out.data);
    // The metric count equals the rules actually written on a full sync.
    let nat = out.data.split("*nat").nth(1).unwrap_or_default();
    assert_eq!(out.nat_rules_total, nat.lines().filter(|l| l.starts_with("-A ")).count());
    assert_eq!(out.nat_rules_written, out.nat_rules_total);
}

#[test]
fn golden_cluster_ip_with_two_endpoints_load_balances_with_probability() {
    let t = tracker(
        &[service("ns1", "svc1", "172.30.0.41", "p80", 80)],
        &[endpoint_slice("ns1", "svc1", "svc1-1", "p80", 8080, &[Ep::ready("10.180.0.1"), Ep::ready("10.180.0.2")])],
    );
    let out = full(&t);
    assert_golden("cluster_ip_two_endpoints", &out.data);
    let svc = chain_lines(&out.data, "KUBE-SVC-XPGD46QRK7WJZT7O");
    assert!(svc[2].contains("--probability 0.5000000000"), "first of two endpoints: 1/2");
    assert!(!svc[3].contains("--probability"), "last endpoint is unconditional");
}

#[test]
fn probabilities_are_one_over_remaining_with_ten_decimals() {
    let eps: Vec<Ep> = (1..=3).map(|i| Ep::ready(&format!("10.180.0.{i}"))).collect();
    let t = tracker(&[service("ns1", "svc1", "172.30.0.41", "p80", 80)], &[endpoint_slice("ns1", "svc1", "s", "p80", 80, &eps)]);
    let out = full(&t);
    let probs: Vec<&str> = chain_lines(&out.data, "KUBE-SVC-XPGD46QRK7WJZT7O")
        .iter()
        .filter_map(|l| l.split("--probability ").nth(1))
        .map(|rest| rest.split(' ').next().unwrap_or_default())
        .collect();
    assert_eq!(probs, ["0.3333333333", "0.5000000000"]);
}

#[test]
fn golden_node_port_service_jumps_through_ext_chain() {
    let t = tracker(
        &[with_node_port(service("ns3", "svc3", "172.30.0.43", "p80", 80), 3003)],
        &[endpoint_slice("ns3", "svc3", "svc3-1", "p80", 80, &[Ep::ready("10.180.0.3")])],
    );
    assert_golden("node_port", &full(&t).data);
}

#[test]
fn golden_external_traffic_policy_local_uses_svl_and_ext_chains() {
    let svc = with_external_policy_local(with_node_port(service("ns2", "svc2", "172.30.0.42", "p80", 80), 3001), 0);
    let t = tracker(
        &[svc],
        &[endpoint_slice("ns2", "svc2", "svc2-1", "p80", 80, &[Ep::ready("10.180.0.1").on(NODE), Ep::ready("10.180.0.2").on("other-node")])],
    );
    let out = full(&t);
    assert_golden("external_policy_local", &out.data);
    // SVL holds only the local endpoint; SVC holds both.
    let svl = chain_lines(&out.data, "KUBE-SVL-GNZBNJ2PO5MGZ6GT");
    assert_eq!(svl.len(), 2, "{svl:?}");
    assert!(svl[1].contains("10.180.0.1:80"));
}

#[test]
fn golden_internal_traffic_policy_local_without_local_endpoints_drops_cluster_ip() {
    let svc = with_internal_policy_local(service("ns1", "svc1", "172.30.0.41", "p80", 80));
    let t = tracker(&[svc], &[endpoint_slice("ns1", "svc1", "svc1-1", "p80", 80, &[Ep::ready("10.180.0.2").on("other-node")])]);
    let out = full(&t);
    assert_golden("internal_policy_local_no_local", &out.data);
    assert!(out.data.contains("\"ns1/svc1:p80 has no local endpoints\" -m tcp -p tcp -d 172.30.0.41 --dport 80 -j DROP"));
}

#[test]
fn golden_service_without_endpoints_is_rejected_in_filter() {
    let svc = with_external_ips(with_load_balancer(service("ns1", "svc1", "172.30.0.41", "p80", 80), 3001, &["1.2.3.4"]), &["192.168.99.11"]);
    let out = full(&tracker(&[svc], &[]));
    assert_golden("no_endpoints_reject", &out.data);
    assert!(out.active_chains.is_empty(), "no nat chains for a service without endpoints");
}

#[test]
fn golden_client_ip_session_affinity_uses_recent_match() {
    let svc = with_client_ip_affinity(service("ns1", "svc1", "172.30.0.41", "p80", 80), 300);
    let t = tracker(&[svc], &[endpoint_slice("ns1", "svc1", "svc1-1", "p80", 80, &[Ep::ready("10.180.0.1"), Ep::ready("10.180.0.2")])]);
    let out = full(&t);
    assert_golden("session_affinity", &out.data);
    assert_eq!(out.data.matches("--rcheck --seconds 300 --reap").count(), 2);
    assert_eq!(out.data.matches("-m recent --name KUBE-SEP-").count(), 4);
}

#[test]
fn golden_terminating_endpoints_serve_only_when_no_endpoint_is_ready() {
    let svc = service("ns1", "svc1", "172.30.0.41", "p80", 80);
    let mixed = tracker(
        std::slice::from_ref(&svc),
        &[endpoint_slice("ns1", "svc1", "s", "p80", 80, &[Ep::ready("10.180.0.1"), Ep::terminating_serving("10.180.0.2"), Ep::terminating_not_serving("10.180.0.3")])],
    );
    let out = full(&mixed);
    assert_golden("terminating_with_ready", &out.data);
    assert!(!out.data.contains("10.180.0.2:80") && !out.data.contains("10.180.0.3:80"));

    let only_terminating = tracker(
        &[svc],
        &[endpoint_slice("ns1", "svc1", "s", "p80", 80, &[Ep::terminating_serving("10.180.0.2"), Ep::terminating_not_serving("10.180.0.3")])],
    );
    let out = full(&only_terminating);
    assert_golden("terminating_only", &out.data);
    assert!(out.data.contains("--to-destination 10.180.0.2:80"));
    assert!(!out.data.contains("10.180.0.3:80"));
}

#[test]
fn large_cluster_mode_drops_per_endpoint_comments() {
    let t = tracker(
        &[service("ns1", "svc1", "172.30.0.41", "p80", 80)],
        &[endpoint_slice("ns1", "svc1", "s", "p80", 80, &[Ep::ready("10.180.0.1")])],
    );
    let none = HashSet::new();
    let out = IptablesWriter::new().write(&SyncRequest {
        tracker: &t,
        config: &config(),
        mode: SyncMode::Full,
        programmed_chains: &none,
        existing_chains: &none,
        node_ips: &[],
        large_cluster_mode: true,
    });
    assert!(out.data.contains("-A KUBE-SEP-SXIVWICOYRO3J4NJ -s 10.180.0.1 -j KUBE-MARK-MASQ"));
    assert!(out.data.contains("-A KUBE-SVC-XPGD46QRK7WJZT7O -j KUBE-SEP-SXIVWICOYRO3J4NJ"));
}

#[test]
fn nodeport_addresses_restrict_the_nodeports_jump_to_node_ips() {
    let t = tracker(&[with_node_port(service("ns3", "svc3", "172.30.0.43", "p80", 80), 3003)], &[]);
    let none = HashSet::new();
    let cfg = RuleConfig { node_port_addresses: vec![Ipv4Cidr::parse("192.168.0.0/16").unwrap()], ..config() };
    let ips = ["192.168.1.5".parse().unwrap(), "127.0.0.1".parse().unwrap()];
    let out = IptablesWriter::new().write(&SyncRequest {
        tracker: &t,
        config: &cfg,
        mode: SyncMode::Full,
        programmed_chains: &none,
        existing_chains: &none,
        node_ips: &ips,
        large_cluster_mode: false,
    });
    let tail: Vec<&str> = out.data.lines().filter(|l| l.ends_with("-j KUBE-NODEPORTS")).collect();
    assert_eq!(tail.len(), 1);
    assert!(tail[0].contains("-d 192.168.1.5 -j KUBE-NODEPORTS"));
}

fn two_services() -> (Vec<Service>, Vec<EndpointSlice>) {
    (
        vec![service("ns1", "svc1", "172.30.0.41", "p80", 80), service("ns2", "svc2", "172.30.0.42", "p80", 80)],
        vec![
            endpoint_slice("ns1", "svc1", "s1", "p80", 80, &[Ep::ready("10.180.0.1")]),
            endpoint_slice("ns2", "svc2", "s2", "p80", 80, &[Ep::ready("10.180.0.2")]),
        ],
    )
}

#[test]
fn golden_partial_sync_writes_only_changed_services_chains() {
    let (services, slices) = two_services();
    let mut t = tracker(&services, &slices);
    let first = full(&t);
    t.begin_sync();
    t.finish_sync(true);
    // svc2 scales 1 -> 2 endpoints.
    t.update_slice(&endpoint_slice("ns2", "svc2", "s2", "p80", 80, &[Ep::ready("10.180.0.2"), Ep::ready("10.180.0.3")]));
    let changes = t.begin_sync();
    assert_eq!(changes.services, [NamespacedName::new("ns2", "svc2")].into());
    let out = write(&t, SyncMode::Partial { changed: &changes.services }, &first.active_chains);
    assert_golden("partial_one_changed", &out.data);
    assert!(!out.data.contains(":KUBE-SVC-XPGD46QRK7WJZT7O"), "unchanged svc1 chains are not written");
    assert!(out.data.contains("-j KUBE-SVC-XPGD46QRK7WJZT7O"), "KUBE-SERVICES is written whole");
    assert_eq!(out.services_written, 1);
    assert!(out.nat_rules_written < out.nat_rules_total);
    assert_eq!(out.nat_rules_total, full(&t).nat_rules_total, "counts include unchanged chains");
}

#[test]
fn golden_deleted_service_chains_are_declared_and_deleted_in_same_input() {
    let (services, slices) = two_services();
    let mut t = tracker(&services, &slices);
    let first = full(&t);
    t.begin_sync();
    t.finish_sync(true);
    t.delete_service("ns2", "svc2");
    t.delete_slice(&slices[1]);
    let changes = t.begin_sync();
    let out = write(&t, SyncMode::Partial { changed: &changes.services }, &first.active_chains);
    assert_golden("partial_service_deleted", &out.data);
    for chain in ["KUBE-SVC-GNZBNJ2PO5MGZ6GT", "KUBE-SEP-RS4RBKLTHTF2IUXJ"] {
        let decl = out.data.find(&format!(":{chain} - [0:0]")).expect("declared");
        let del = out.data.find(&format!("-X {chain}\n")).expect("deleted");
        assert!(decl < del);
    }
    assert_eq!(out.chains_deleted, 2);
}

#[test]
fn partial_sync_rewrites_unchanged_service_whose_chain_is_not_known_to_exist() {
    // kubernetes#121362: never jump to a chain this restore does not create and the
    // last one did not leave in place.
    let (services, slices) = two_services();
    let mut t = tracker(&services, &slices);
    let mut programmed = full(&t).active_chains;
    programmed.retain(|c| c.as_str() != "KUBE-SVC-XPGD46QRK7WJZT7O");
    t.begin_sync();
    t.finish_sync(true);
    let nothing = BTreeSet::new();
    let out = write(&t, SyncMode::Partial { changed: &nothing }, &programmed);
    assert!(out.data.contains(":KUBE-SVC-XPGD46QRK7WJZT7O - [0:0]"));
    assert!(!out.data.contains(":KUBE-SVC-GNZBNJ2PO5MGZ6GT"));
}

#[test]
fn full_sync_deletes_stale_service_chains_found_in_kernel() {
    let (services, slices) = two_services();
    let t = tracker(&services, &slices);
    let none = HashSet::new();
    let existing: HashSet<Chain> = [Chain::new("KUBE-SEP-STALESTALESTALE1"), Chain::new("DOCKER-USER")].into();
    let out = IptablesWriter::new().write(&SyncRequest {
        tracker: &t,
        config: &config(),
        mode: SyncMode::Full,
        programmed_chains: &none,
        existing_chains: &existing,
        node_ips: &[],
        large_cluster_mode: false,
    });
    assert!(out.data.contains("-X KUBE-SEP-STALESTALESTALE1\n"));
    assert!(!out.data.contains("DOCKER-USER"), "chains that are not ours are left alone");
}

#[test]
fn split_nat_writes_self_contained_transactions_with_descending_declarations() {
    // Seven services with two endpoints each: 3 chains per service, 4 chains per
    // transaction → a transaction after every second service; the seventh
    // service's chains go with the top-level transaction.
    let services: Vec<Service> =
        (0..7).map(|i| service("ns", &format!("svc{i}"), &format!("172.30.1.{}", i + 1), "p80", 80)).collect();
    let slices: Vec<EndpointSlice> = (0..7)
        .map(|i| {
            let eps = [Ep::ready(&format!("10.180.{i}.1")), Ep::ready(&format!("10.180.{i}.2"))];
            endpoint_slice("ns", &format!("svc{i}"), "s", "p80", 80, &eps)
        })
        .collect();
    let t = tracker(&services, &slices);
    let none = HashSet::new();
    let existing: HashSet<Chain> = [Chain::new("KUBE-SEP-STALESTALESTALE1")].into();
    let mut writer = IptablesWriter::new();
    writer.split_nat(Some(4));
    let out = writer.write(&SyncRequest {
        tracker: &t,
        config: &config(),
        mode: SyncMode::Full,
        programmed_chains: &none,
        existing_chains: &existing,
        node_ips: &[],
        large_cluster_mode: false,
    });
    let single = full(&t);
    assert_eq!(out.nat_transactions, 4, "three per-service transactions and the top-level one");
    assert_eq!(single.nat_transactions, 1);
    assert_eq!(out.nat_rules_total, single.nat_rules_total);

    let nat: Vec<&str> = out.data.split("*nat\n").skip(1).collect();
    assert_eq!(nat.len(), 4);
    let mut declared_before: HashSet<String> = HashSet::new();
    for (i, tx) in nat.iter().enumerate() {
        let decls: Vec<&str> =
            tx.lines().filter_map(|l| l.strip_prefix(':')).map(|l| l.split(' ').next().unwrap_or("")).collect();
        let per_service: Vec<&str> = decls.iter().copied().filter(|c| chains::is_service_chain(c)).collect();
        let mut sorted = per_service.clone();
        sorted.sort_unstable_by(|a, b| b.cmp(a));
        assert_eq!(per_service, sorted, "transaction {i} declares per-service chains in descending order");
        declared_before.extend(decls.iter().map(|c| c.to_string()));
        for rule in tx.lines().filter(|l| l.starts_with("-A ")) {
            let words: Vec<&str> = rule.split(' ').collect();
            assert!(declared_before.contains(words[1]), "rule of an undeclared chain: {rule}");
            let target = words.last().copied().unwrap_or("");
            if target.starts_with("KUBE-") {
                assert!(declared_before.contains(target), "jump to a chain not yet declared: {rule}");
            }
        }
        let last = i == nat.len() - 1;
        assert_eq!(tx.contains("-A KUBE-MARK-MASQ "), i == 0, "KUBE-MARK-MASQ is written once, first");
        assert_eq!(tx.contains("-A KUBE-SERVICES "), last, "KUBE-SERVICES switches in the last transaction");
        assert_eq!(tx.contains("-X KUBE-SEP-STALESTALESTALE1\n"), last);
        assert_eq!(per_service.len(), if last { 4 } else { 6 }, "3 chains per service (+1 stale in the last)");
        assert!(tx.ends_with("COMMIT\n"));
    }
    // The same rules as one transaction, only regrouped.
    let mut a: Vec<&str> = out.data.lines().filter(|l| l.starts_with("-A ")).collect();
    let mut b: Vec<&str> = single.data.lines().filter(|l| l.starts_with("-A ")).collect();
    a.sort_unstable();
    b.sort_unstable();
    assert_eq!(a, b);
}
