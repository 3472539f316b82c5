use super::*;
use serde_json::json;

fn spec(v: serde_json::Value) -> PodSpec {
    let mut s: PodSpec = serde_json::from_value(v).unwrap();
    add_daemon_tolerations(&mut s);
    s
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn taint(key: &str, effect: &str) -> Taint {
    Taint { key: key.into(), effect: effect.into(), ..Taint::default() }
}

fn node(name: &str) -> NodeFit {
    NodeFit { name: name.into(), fit: Fit { should_run: true, should_continue: true } }
}

fn pod(name: &str, node: &str, updated: bool, available: bool, age_rank: usize) -> DaemonPod {
    DaemonPod {
        name: name.into(),
        node: node.into(),
        updated,
        terminating: false,
        failed: false,
        succeeded: false,
        ready: available,
        available,
        age_rank,
    }
}

#[test]
fn node_selector_affinity_and_taints_decide_where_daemon_pods_run() {
    let s = spec(json!({"containers": [], "nodeSelector": {"disk": "ssd"}}));
    assert!(fit(&s, "n1", &labels(&[("disk", "ssd")]), &[]).should_run);
    assert_eq!(fit(&s, "n1", &labels(&[]), &[]), Fit { should_run: false, should_continue: false });
    let s = spec(json!({"containers": []}));
    // NoSchedule keeps a running pod; NoExecute evicts it; the default
    // tolerations cover not-ready and unschedulable.
    assert_eq!(fit(&s, "n1", &labels(&[]), &[taint("dedicated", "NoSchedule")]), Fit { should_run: false, should_continue: true });
    assert_eq!(fit(&s, "n1", &labels(&[]), &[taint("dedicated", "NoExecute")]), Fit { should_run: false, should_continue: false });
    let tolerated = [taint("node.kubernetes.io/not-ready", "NoExecute"), taint("node.kubernetes.io/unschedulable", "NoSchedule")];
    assert!(fit(&s, "n1", &labels(&[]), &tolerated).should_run);
    let s = spec(json!({"containers": [], "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}}}));
    assert!(fit(&s, "n1", &labels(&[("zone", "a")]), &[]).should_run);
    assert!(!fit(&s, "n1", &labels(&[("zone", "b")]), &[]).should_run);
    let s = spec(json!({"containers": [], "nodeName": "n2"}));
    assert!(!fit(&s, "n1", &labels(&[]), &[]).should_run);
}

#[test]
fn default_tolerations_are_added_once_and_network_unavailable_only_for_host_network() {
    let mut s = spec(json!({"containers": []}));
    assert_eq!(s.tolerations.as_ref().map(Vec::len), Some(6));
    add_daemon_tolerations(&mut s);
    assert_eq!(s.tolerations.as_ref().map(Vec::len), Some(6));
    let host = spec(json!({"containers": [], "hostNetwork": true}));
    assert!(host.tolerations.unwrap().iter().any(|t| t.key.as_deref() == Some("node.kubernetes.io/network-unavailable")));
}

#[test]
fn pinning_replaces_match_fields_and_keeps_expressions_and_reads_back() {
    let mut s = spec(json!({"containers": [], "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}],
                               "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["old"]}]}]}}}}));
    pin_to_node(&mut s, "n7");
    let v = serde_json::to_value(&s.affinity).unwrap();
    let term = &v["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0];
    assert_eq!(term["matchFields"], json!([{"key": "metadata.name", "operator": "In", "values": ["n7"]}]));
    assert_eq!(term["matchExpressions"][0]["key"], "zone");
    assert_eq!(target_node(&s).as_deref(), Some("n7"));
    let mut plain = spec(json!({"containers": []}));
    pin_to_node(&mut plain, "n1");
    assert_eq!(target_node(&plain).as_deref(), Some("n1"));
}

#[test]
fn manage_creates_on_empty_nodes_and_deletes_failed_excess_and_orphaned_pods() {
    let nodes = [node("a"), node("b"), node("c"), NodeFit { name: "d".into(), fit: Fit { should_run: false, should_continue: false } }];
    let mut failed = pod("b1", "b", true, false, 0);
    failed.failed = true;
    let pods = [pod("c1", "c", true, true, 0), pod("c2", "c", true, true, 1), failed, pod("d1", "d", true, true, 0), pod("x1", "gone", true, true, 0)];
    let p = plan(&nodes, &pods, None);
    assert_eq!(p.create_on, vec!["a".to_string(), "b".to_string()]);
    let mut deleted = p.delete.clone();
    deleted.sort();
    assert_eq!(deleted, vec![("b1".into(), Why::Finished), ("c2".into(), Why::Excess), ("d1".into(), Why::Excess), ("x1".into(), Why::Excess)]);
}

#[test]
fn rolling_update_without_surge_replaces_at_most_max_unavailable_nodes_at_a_time() {
    let nodes = [node("a"), node("b"), node("c")];
    let old = [pod("a1", "a", false, true, 0), pod("b1", "b", false, true, 0), pod("c1", "c", false, false, 0)];
    let r = Some(Rolling { max_surge: 0, max_unavailable: 2 });
    // c1 is unavailable: it goes at once and counts; one available more may go.
    let p = plan(&nodes, &old, r);
    assert!(p.create_on.is_empty());
    assert_eq!(p.delete, vec![("c1".into(), Why::Update), ("a1".into(), Why::Update)]);
    // A node without a pod counts as unavailable.
    let p = plan(&nodes, &old[..2], Some(Rolling { max_surge: 0, max_unavailable: 1 }));
    assert_eq!(p.create_on, vec!["c".to_string()]);
    assert!(p.delete.is_empty());
}

#[test]
fn rolling_update_with_surge_starts_new_pods_before_removing_old_ones() {
    let nodes = [node("a"), node("b")];
    let r = Some(Rolling { max_surge: 1, max_unavailable: 0 });
    let old = [pod("a1", "a", false, true, 0), pod("b1", "b", false, true, 0)];
    let p = plan(&nodes, &old, r);
    assert_eq!((p.create_on.clone(), p.delete.clone()), (vec!["a".to_string()], vec![]));
    // New pod not yet available: both stay, no more surge.
    let both = [pod("a1", "a", false, true, 0), pod("a2", "a", true, false, 1), pod("b1", "b", false, true, 0)];
    let p = plan(&nodes, &both, r);
    assert_eq!((p.create_on.clone(), p.delete.clone()), (vec![], vec![]));
    // Available: the old one goes.
    let ready = [pod("a1", "a", false, true, 0), pod("a2", "a", true, true, 1), pod("b1", "b", false, true, 0)];
    let p = plan(&nodes, &ready, r);
    assert_eq!(p.delete, vec![("a1".into(), Why::Excess)]);
}

#[test]
fn status_counts_the_oldest_pod_of_each_node() {
    let nodes = [node("a"), node("b"), node("c"), NodeFit { name: "d".into(), fit: Fit { should_run: false, should_continue: true } }];
    let pods = [pod("a1", "a", true, true, 0), pod("b1", "b", false, false, 0), pod("d1", "d", true, true, 0)];
    let c = count(&nodes, &pods);
    assert_eq!(c, Counts { desired: 3, current: 2, misscheduled: 1, ready: 1, available: 1, updated: 1 });
    assert_eq!(c.unavailable(), 2);
}
