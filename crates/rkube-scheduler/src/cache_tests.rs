//! The cache's snapshot against a snapshot built from scratch, as the
//! scheduler built one every cycle before the cache (every pod of the
//! store, the assumed ones in place of their pending versions).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod};
use proptest::prelude::*;
use serde_json::json;

use super::{pod_key, Cache};
use crate::resources::Resource;
use crate::snapshot::{NodeInfo, Snapshot};
use crate::testutil::{node, pod};

/// What the informers' stores hold, and the pods assumed, as the scheduler saw them.
#[derive(Default)]
struct World {
    nodes: BTreeMap<String, Arc<Node>>,
    pods: BTreeMap<String, Arc<Pod>>,
    assumed: HashMap<String, Arc<Pod>>,
}

fn assigned(p: &Pod) -> bool {
    p.spec.as_ref().and_then(|s| s.node_name.as_deref()).is_some_and(|n| !n.is_empty())
}

impl World {
    /// The snapshot built from scratch.
    fn full(&mut self) -> Snapshot {
        let mut pods: HashMap<String, Arc<Pod>> = self.pods.iter().map(|(k, p)| (k.clone(), Arc::clone(p))).collect();
        self.assumed.retain(|k, _| pods.get(k).is_some_and(|p| !assigned(p)));
        for (k, p) in &self.assumed {
            pods.insert(k.clone(), Arc::clone(p));
        }
        let pending: Vec<Arc<Pod>> = pods.values().filter(|p| !assigned(p)).cloned().collect();
        Snapshot::new(self.nodes.values().cloned(), pods.into_values(), Vec::new()).with_nominated(pending)
    }
}

/// Drops scalar resources at zero (a sum taken back to zero and one never added are the same).
fn norm(r: &Resource) -> Resource {
    let mut r = r.clone();
    r.scalar.retain(|_, v| *v != 0);
    r
}

/// A node as comparable data: pods, ports and anti-affinity pods in a fixed order.
fn comparable(n: &NodeInfo) -> impl PartialEq + std::fmt::Debug {
    let mut pods: Vec<(String, Pod)> = n.pods.iter().map(|p| (pod_key(p), (**p).clone())).collect();
    pods.sort_by(|a, b| a.0.cmp(&b.0));
    let mut ports: Vec<(String, String, i32)> = n.used_ports.iter().map(|p| (p.protocol.clone(), p.ip.clone(), p.port)).collect();
    ports.sort();
    let mut anti: Vec<String> = n.pods_with_required_anti_affinity.iter().map(|p| pod_key(p)).collect();
    anti.sort();
    (
        (n.name.clone(), (*n.node).clone(), pods),
        (norm(&n.requested), norm(&n.non_zero_requested), n.allocatable.clone(), ports, anti),
    )
}

fn assert_same(got: &Snapshot, want: &Snapshot) {
    let names = |s: &Snapshot| s.nodes.iter().map(|n| n.name.clone()).collect::<Vec<_>>();
    assert_eq!(names(got), names(want), "nodes");
    for (g, w) in got.nodes.iter().zip(&want.nodes) {
        assert_eq!(comparable(g), comparable(w), "node {}", w.name);
    }
    let nominated = |s: &Snapshot| {
        let mut v: Vec<(String, Pod)> = s.nominated.iter().map(|p| (pod_key(p), (**p).clone())).collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    };
    assert_eq!(nominated(got), nominated(want), "nominated pods");
}

/// One thing that happens to the cluster or the scheduler.
#[derive(Debug, Clone)]
enum Op {
    /// A Node added or updated (`variant` picks its allocatable and labels).
    ApplyNode { node: u8, variant: u8 },
    DeleteNode { node: u8 },
    /// A pod added or updated.
    ApplyPod { pod: u8, spec: PodSpec },
    DeletePod { pod: u8 },
    /// The scheduler places a pending pod on a node.
    Assume { pod: u8, node: u8 },
    /// Its binding failed.
    Forget { pod: u8 },
    /// The pod informer relists; `missed` was deleted without the cache hearing of it.
    ResyncPods { missed: Option<u8> },
    /// The node informer relists; `missed` was deleted without the cache hearing of it.
    ResyncNodes { missed: Option<u8> },
}

#[derive(Debug, Clone)]
struct PodSpec {
    node: Option<u8>,
    /// 0 Pending, 1 Running, 2 Succeeded, 3 Failed.
    phase: u8,
    cpu_millis: u16,
    gpu: u8,
    host_port: Option<u16>,
    anti_affinity: bool,
    nominated: Option<u8>,
    deleting: bool,
    label: u8,
}

const NODES: u8 = 4;
const PODS: u8 = 8;

fn node_name(i: u8) -> String {
    format!("n{i}")
}

fn pod_name(i: u8) -> String {
    format!("p{i}")
}

fn make_node(i: u8, variant: u8) -> Arc<Node> {
    node(
        &node_name(i),
        json!({"metadata": {"labels": {"zone": format!("z{}", variant % 2)}},
               "status": {"allocatable": {"cpu": format!("{}", 2 + variant % 3), "memory": "8Gi", "pods": "110", "example.com/gpu": "2"}}}),
    )
}

fn make_pod(i: u8, s: &PodSpec) -> Arc<Pod> {
    let mut requests = json!({"cpu": format!("{}m", s.cpu_millis), "memory": "64Mi"});
    if s.gpu > 0 {
        requests["example.com/gpu"] = json!(s.gpu.to_string());
    }
    let mut container = json!({"name": "c", "resources": {"requests": requests}});
    if let Some(port) = s.host_port {
        container["ports"] = json!([{"containerPort": 80, "hostPort": 8000 + port % 3}]);
    }
    let mut spec = json!({"containers": [container], "labels": {"app": format!("a{}", s.label % 2)}});
    if let Some(n) = s.node {
        spec["nodeName"] = json!(node_name(n));
    }
    if s.anti_affinity {
        spec["affinity"] = json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "a0"}}, "topologyKey": "kubernetes.io/hostname"}]}});
    }
    let mut p = pod(&pod_name(i), spec);
    let phase = ["Pending", "Running", "Succeeded", "Failed"][usize::from(s.phase % 4)];
    let mut status = json!({"phase": phase});
    if let Some(n) = s.nominated {
        status["nominatedNodeName"] = json!(node_name(n));
    }
    p.status = serde_json::from_value(status).ok();
    if s.deleting {
        p.metadata.deletion_timestamp = serde_json::from_value(json!("2026-01-01T00:00:00Z")).ok();
    }
    Arc::new(p)
}

fn pod_spec() -> impl Strategy<Value = PodSpec> {
    (
        (proptest::option::of(0..NODES), 0..4u8, 0..400u16, 0..2u8),
        (proptest::option::weighted(0.3, 0..3u16), proptest::bool::weighted(0.2), proptest::option::weighted(0.2, 0..NODES)),
        (proptest::bool::weighted(0.1), 0..2u8),
    )
        .prop_map(|((node, phase, cpu_millis, gpu), (host_port, anti_affinity, nominated), (deleting, label))| PodSpec {
            node,
            phase,
            cpu_millis,
            gpu,
            host_port,
            anti_affinity,
            nominated,
            deleting,
            label,
        })
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..NODES, 0..6u8).prop_map(|(node, variant)| Op::ApplyNode { node, variant }),
        1 => (0..NODES).prop_map(|node| Op::DeleteNode { node }),
        8 => (0..PODS, pod_spec()).prop_map(|(pod, spec)| Op::ApplyPod { pod, spec }),
        2 => (0..PODS).prop_map(|pod| Op::DeletePod { pod }),
        4 => (0..PODS, 0..NODES).prop_map(|(pod, node)| Op::Assume { pod, node }),
        1 => (0..PODS).prop_map(|pod| Op::Forget { pod }),
        1 => proptest::option::of(0..PODS).prop_map(|missed| Op::ResyncPods { missed }),
        1 => proptest::option::of(0..NODES).prop_map(|missed| Op::ResyncNodes { missed }),
    ]
}

/// Applies `op` to the world and tells the cache what the scheduler's loop would.
fn run(op: &Op, world: &mut World, cache: &mut Cache) {
    match op {
        Op::ApplyNode { node, variant } => {
            let n = make_node(*node, *variant);
            world.nodes.insert(node_name(*node), Arc::clone(&n));
            cache.apply_node(n);
        }
        Op::DeleteNode { node } => {
            if world.nodes.remove(&node_name(*node)).is_some() {
                cache.delete_node(&node_name(*node));
            }
        }
        Op::ApplyPod { pod, spec } => {
            let p = make_pod(*pod, spec);
            let key = pod_key(&p);
            if assigned(&p) {
                world.assumed.remove(&key);
            }
            world.pods.insert(key, Arc::clone(&p));
            cache.apply_pod(p);
        }
        Op::DeletePod { pod } => {
            let key = format!("default/{}", pod_name(*pod));
            if let Some(p) = world.pods.remove(&key) {
                world.assumed.remove(&key);
                cache.delete_pod(&p);
            }
        }
        Op::Assume { pod, node } => {
            // As the loop: only a pod it wants (pending, not deleting, not finished) and not assumed yet.
            let key = format!("default/{}", pod_name(*pod));
            let Some(p) = world.pods.get(&key) else { return };
            let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
            let wanted = !assigned(p) && p.metadata.deletion_timestamp.is_none() && !matches!(phase, Some("Succeeded" | "Failed"));
            if !wanted || cache.is_assumed(&key) {
                return;
            }
            let mut placed = (**p).clone();
            placed.spec.get_or_insert_with(Default::default).node_name = Some(node_name(*node));
            let placed = Arc::new(placed);
            world.assumed.insert(key, Arc::clone(&placed));
            cache.assume(placed);
        }
        Op::Forget { pod } => {
            let key = format!("default/{}", pod_name(*pod));
            world.assumed.remove(&key);
            cache.forget(&key);
        }
        Op::ResyncPods { missed } => {
            if let Some(i) = missed {
                world.pods.remove(&format!("default/{}", pod_name(*i)));
            }
            cache.resync_pods(world.pods.values().cloned());
        }
        Op::ResyncNodes { missed } => {
            if let Some(i) = missed {
                world.nodes.remove(&node_name(*i));
            }
            cache.resync_nodes(world.nodes.values().cloned());
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// After any sequence of node and pod adds, updates and deletes, assumes,
    /// forgets and relists, the snapshot kept up to date after every step
    /// and one taken afresh both equal the snapshot built from scratch.
    #[test]
    fn incremental_snapshot_equals_a_full_rebuild(ops in proptest::collection::vec(op(), 1..60)) {
        let (mut world, mut cache) = (World::default(), Cache::new());
        let mut kept = Snapshot::default();
        for op in &ops {
            run(op, &mut world, &mut cache);
            cache.update_snapshot(&mut kept);
            assert_same(&kept, &world.full());
        }
        let mut fresh = Snapshot::default();
        cache.update_snapshot(&mut fresh);
        assert_same(&fresh, &world.full());
        prop_assert_eq!(cache.node_count(), world.nodes.len());
    }
}

#[test]
fn an_assumed_pod_counts_until_seen_bound_or_forgotten() {
    let mut cache = Cache::new();
    cache.apply_node(make_node(0, 0));
    cache.apply_node(make_node(1, 0));
    let spec = PodSpec { node: None, phase: 0, cpu_millis: 500, gpu: 0, host_port: None, anti_affinity: false, nominated: None, deleting: false, label: 0 };
    let pending = make_pod(0, &spec);
    cache.apply_pod(Arc::clone(&pending));
    let mut snap = Snapshot::default();
    cache.update_snapshot(&mut snap);
    assert!(snap.nodes.iter().all(|n| n.pods.is_empty()));

    let mut placed = (*pending).clone();
    placed.spec.get_or_insert_with(Default::default).node_name = Some("n1".into());
    cache.assume(Arc::new(placed));
    // An update of the still-pending pod keeps the assumed placement.
    cache.apply_pod(Arc::clone(&pending));
    cache.update_snapshot(&mut snap);
    assert_eq!(snap.node("n1").map(|n| (n.pods.len(), n.requested.milli_cpu)), Some((1, 500)));
    assert!(cache.is_assumed("default/p0"));

    // Its binding failed: the room is given back.
    cache.forget("default/p0");
    cache.update_snapshot(&mut snap);
    assert_eq!(snap.node("n1").map(|n| (n.pods.len(), n.requested.milli_cpu)), Some((0, 0)));

    // Assumed on n1 but seen bound to n0: it counts on n0 only, and forgetting it no longer undoes it.
    let mut placed = (*pending).clone();
    placed.spec.get_or_insert_with(Default::default).node_name = Some("n1".into());
    cache.assume(Arc::new(placed));
    cache.apply_pod(make_pod(0, &PodSpec { node: Some(0), ..spec }));
    cache.forget("default/p0");
    cache.update_snapshot(&mut snap);
    assert_eq!(snap.node("n0").map(|n| n.pods.len()), Some(1));
    assert_eq!(snap.node("n1").map(|n| n.pods.len()), Some(0));
}

#[test]
fn pods_on_a_node_not_yet_known_count_once_it_comes() {
    let mut cache = Cache::new();
    let spec = PodSpec { node: Some(3), phase: 1, cpu_millis: 250, gpu: 1, host_port: Some(1), anti_affinity: true, nominated: None, deleting: false, label: 0 };
    cache.apply_pod(make_pod(0, &spec));
    let mut snap = Snapshot::default();
    cache.update_snapshot(&mut snap);
    assert!(snap.nodes.is_empty(), "no Node yet");
    cache.apply_node(make_node(3, 0));
    cache.update_snapshot(&mut snap);
    let n3 = snap.node("n3").expect("n3");
    assert_eq!((n3.pods.len(), n3.requested.milli_cpu, n3.used_ports.len(), n3.pods_with_required_anti_affinity.len()), (1, 250, 1, 1));
    assert_eq!(n3.requested.scalar.get("example.com/gpu"), Some(&1));
    // The Node goes, its pod stays counted (as upstream) and shows again with the Node.
    cache.delete_node("n3");
    cache.update_snapshot(&mut snap);
    assert!(snap.nodes.is_empty());
    cache.apply_node(make_node(3, 1));
    cache.update_snapshot(&mut snap);
    assert_eq!(snap.node("n3").map(|n| n.pods.len()), Some(1));
}

/// A full rebuild of a 1,000-node, 30,000-pod snapshot against an update
/// after one pod is bound: `cargo test -p rkube-scheduler --release --lib -- --ignored --nocapture bench_snapshot`.
#[test]
#[ignore = "benchmark: run with --ignored --nocapture"]
fn bench_snapshot() {
    let mut world = World::default();
    let mut cache = Cache::new();
    for i in 0..1000u32 {
        let n = node(&format!("node-{i:04}"), json!({"status": {"allocatable": {"cpu": "64", "memory": "256Gi", "pods": "110"}}}));
        world.nodes.insert(format!("node-{i:04}"), Arc::clone(&n));
        cache.apply_node(n);
    }
    let request = json!([{"name": "c", "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}]);
    for i in 0..30_000u32 {
        let p = Arc::new(pod(&format!("p-{i}"), json!({"nodeName": format!("node-{:04}", i % 1000), "containers": request})));
        world.pods.insert(pod_key(&p), Arc::clone(&p));
        cache.apply_pod(p);
    }
    let mut kept = Snapshot::default();
    cache.update_snapshot(&mut kept);
    let t = std::time::Instant::now();
    let full = world.full();
    let full_ms = t.elapsed().as_secs_f64() * 1e3;
    let mut times: Vec<f64> = (0..200u32)
        .map(|i| {
            let p = Arc::new(pod(&format!("new-{i}"), json!({"nodeName": format!("node-{:04}", (i * 7) % 1000), "containers": request})));
            let t = std::time::Instant::now();
            cache.apply_pod(p);
            cache.update_snapshot(&mut kept);
            t.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    times.sort_by(f64::total_cmp);
    assert_eq!(full.nodes.len(), kept.nodes.len());
    println!("bench_snapshot: 1000 nodes, 30000 pods: full rebuild {full_ms:.1} ms; one pod added + update_snapshot {:.1} µs (median of 200)", times[100]);
}
