use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use super::*;
use crate::fixtures::{endpoint_slice, service, Ep};
use crate::model::Protocol;

fn tracker() -> ChangeTracker {
    ChangeTracker::new("node-a", SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000))
}

fn nn(ns: &str, name: &str) -> NamespacedName {
    NamespacedName::new(ns, name)
}

fn spn(ns: &str, name: &str, port: &str) -> ServicePortName {
    ServicePortName { service: nn(ns, name), port: port.into(), protocol: Protocol::Tcp }
}

#[test]
fn service_add_marks_service_pending_and_identical_update_does_not() {
    let mut t = tracker();
    assert!(t.update_service(&service("ns", "a", "10.96.0.1", "http", 80)));
    assert_eq!(t.begin_sync().services, [nn("ns", "a")].into());
    t.finish_sync(true);
    assert!(!t.update_service(&service("ns", "a", "10.96.0.1", "http", 80)));
    assert!(t.pending().is_empty());
    assert!(t.update_service(&service("ns", "a", "10.96.0.1", "http", 81)));
    assert_eq!(t.pending().services, [nn("ns", "a")].into());
}

#[test]
fn headless_and_external_name_services_are_not_tracked() {
    let mut t = tracker();
    assert!(!t.update_service(&service("ns", "headless", "None", "http", 80)));
    let mut ext = service("ns", "ext", "10.96.0.9", "http", 80);
    crate::fixtures::spec_mut(&mut ext).type_ = Some("ExternalName".into());
    assert!(!t.update_service(&ext));
    assert_eq!(t.service_port_count(), 0);
}

#[test]
fn service_delete_marks_service_pending() {
    let mut t = tracker();
    t.update_service(&service("ns", "a", "10.96.0.1", "http", 80));
    t.begin_sync();
    t.finish_sync(true);
    assert!(t.delete_service("ns", "a"));
    assert_eq!(t.pending().services, [nn("ns", "a")].into());
    assert!(!t.delete_service("ns", "a"), "deleting twice changes nothing");
}

#[test]
fn slice_change_marks_its_service_and_identical_slice_does_not() {
    let mut t = tracker();
    let s = endpoint_slice("ns", "a", "a-1", "http", 8080, &[Ep::ready("10.0.0.1")]);
    assert!(t.update_slice(&s));
    assert_eq!(t.pending().services, [nn("ns", "a")].into());
    t.begin_sync();
    t.finish_sync(true);
    assert!(!t.update_slice(&s));
    assert!(t.pending().is_empty());
    assert!(t.delete_slice(&s));
    assert_eq!(t.pending().services, [nn("ns", "a")].into());
    assert!(t.endpoints(&spn("ns", "a", "http")).is_empty());
}

#[test]
fn endpoints_are_merged_across_slices_sorted_and_deduplicated() {
    let mut t = tracker();
    t.update_slice(&endpoint_slice("ns", "a", "a-1", "http", 80, &[Ep::ready("10.0.0.9"), Ep::ready("10.0.0.2")]));
    // Same IP in a second slice, terminating there: the ready copy wins.
    t.update_slice(&endpoint_slice("ns", "a", "a-2", "http", 80, &[Ep::terminating_serving("10.0.0.2")]));
    let eps = t.endpoints(&spn("ns", "a", "http"));
    let addrs: Vec<&str> = eps.iter().map(|e| e.addr.as_str()).collect();
    assert_eq!(addrs, ["10.0.0.2:80", "10.0.0.9:80"]);
    assert!(eps[0].ready && !eps[0].terminating);
}

#[test]
fn endpoint_on_this_node_is_local() {
    let mut t = tracker();
    t.update_slice(&endpoint_slice(
        "ns",
        "a",
        "a-1",
        "http",
        80,
        &[Ep::ready("10.0.0.1").on("node-a"), Ep::ready("10.0.0.2").on("node-b")],
    ));
    let eps = t.endpoints(&spn("ns", "a", "http"));
    assert!(eps[0].is_local);
    assert!(!eps[1].is_local);
}

#[test]
fn failed_sync_returns_its_changes_to_pending() {
    let mut t = tracker();
    t.update_service(&service("ns", "a", "10.96.0.1", "http", 80));
    let ticket = t.begin_sync();
    assert_eq!(ticket.services, [nn("ns", "a")].into());
    // A change arriving while the sync runs.
    t.update_service(&service("ns", "b", "10.96.0.2", "http", 80));
    t.finish_sync(false);
    assert_eq!(t.pending().services, [nn("ns", "a"), nn("ns", "b")].into());
}

#[test]
fn successful_sync_keeps_changes_that_arrived_during_it() {
    let mut t = tracker();
    t.update_service(&service("ns", "a", "10.96.0.1", "http", 80));
    t.begin_sync();
    t.update_service(&service("ns", "b", "10.96.0.2", "http", 80));
    t.finish_sync(true);
    assert_eq!(t.pending().services, [nn("ns", "b")].into());
}

#[test]
fn trigger_times_before_start_are_ignored() {
    let mut t = tracker();
    let mut old = endpoint_slice("ns", "a", "a-1", "http", 80, &[Ep::ready("10.0.0.1")]);
    old.metadata.annotations = Some(BTreeMap::from([(
        crate::model::ANNOTATION_LAST_CHANGE_TRIGGER_TIME.to_string(),
        "1970-01-01T00:00:10Z".to_string(),
    )]));
    t.update_slice(&old);
    assert!(t.pending().trigger_times.is_empty());
    let mut new = endpoint_slice("ns", "a", "a-1", "http", 80, &[Ep::ready("10.0.0.2")]);
    new.metadata.annotations = Some(BTreeMap::from([(
        crate::model::ANNOTATION_LAST_CHANGE_TRIGGER_TIME.to_string(),
        "2030-01-01T00:00:00Z".to_string(),
    )]));
    t.update_slice(&new);
    assert_eq!(t.pending().trigger_times.len(), 1);
}

#[test]
fn node_label_change_is_pending_once() {
    let mut t = tracker();
    let labels = BTreeMap::from([("topology.kubernetes.io/zone".to_string(), "z1".to_string())]);
    assert!(t.set_node_labels(labels.clone()));
    assert!(t.begin_sync().node_labels_changed);
    t.finish_sync(true);
    assert!(!t.set_node_labels(labels));
    assert!(!t.pending().node_labels_changed);
}
