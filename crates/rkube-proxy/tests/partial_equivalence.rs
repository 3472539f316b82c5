//! KEP-3453's correctness contract, checked against real `iptables-restore`:
//! after any sequence of Service/EndpointSlice changes, applying the partial
//! restores in order leaves the same (normalized) `iptables-save` state as one
//! full restore of the final state. Each case uses two fresh network
//! namespaces the test creates and deletes.

use crate::common;

use common::{NetNs, Proxy};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use proptest::prelude::*;
use rkube_proxy::engine::machine::SyncKind;
use rkube_proxy::fixtures::*;
use rkube_proxy::tracker::ChangeTracker;

const NODE: &str = "node-a";
const SERVICES: usize = 4;

#[derive(Debug, Clone)]
enum Op {
    /// Create or update service `idx` in one of several shapes.
    Service { idx: usize, variant: u8 },
    DeleteService(usize),
    /// Replace service `idx`'s slice with endpoints (ip suffix, state).
    Endpoints { idx: usize, eps: Vec<(u8, u8)> },
    DeleteSlice(usize),
    /// Sync now (partial), batching the changes since the previous sync.
    Sync,
}

fn make_service(idx: usize, variant: u8) -> Service {
    let ip = format!("10.96.0.{}", 10 + idx);
    let port = if variant == 1 { 81 } else { 80 };
    let base = service("ns", &format!("svc{idx}"), &ip, "p", port);
    let node_port = 30000 + i32::try_from(idx).unwrap_or(0);
    match variant {
        2 => with_node_port(base, node_port),
        3 => with_external_policy_local(with_node_port(base, node_port), 0),
        4 => with_client_ip_affinity(base, 600),
        5 => with_internal_policy_local(base),
        6 => with_source_ranges(with_load_balancer(base, node_port, &[&format!("192.0.2.{}", idx + 1)]), &["203.0.113.0/24"]),
        7 => with_external_ips(base, &[&format!("198.51.100.{}", idx + 1)]),
        _ => base,
    }
}

fn make_slice(idx: usize, eps: &[(u8, u8)]) -> EndpointSlice {
    let eps: Vec<Ep> = eps
        .iter()
        .map(|(n, state)| {
            let ip = format!("10.244.{idx}.{n}");
            match state {
                0 => Ep::ready(&ip).on(NODE),
                1 => Ep::ready(&ip).on("node-b"),
                2 => Ep::terminating_serving(&ip).on(NODE),
                _ => Ep::terminating_not_serving(&ip).on("node-b"),
            }
        })
        .collect();
    endpoint_slice("ns", &format!("svc{idx}"), &format!("svc{idx}-abc"), "p", 8080, &eps)
}

fn apply(t: &mut ChangeTracker, op: &Op) {
    match op {
        Op::Service { idx, variant } => {
            t.update_service(&make_service(*idx, *variant));
        }
        Op::DeleteService(idx) => {
            t.delete_service("ns", &format!("svc{idx}"));
        }
        Op::Endpoints { idx, eps } => {
            t.update_slice(&make_slice(*idx, eps));
        }
        Op::DeleteSlice(idx) => {
            t.delete_slice(&make_slice(*idx, &[]));
        }
        Op::Sync => {}
    }
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..SERVICES, 0u8..8).prop_map(|(idx, variant)| Op::Service { idx, variant }),
        1 => (0..SERVICES).prop_map(Op::DeleteService),
        4 => (0..SERVICES, proptest::collection::vec((1u8..5, 0u8..4), 0..4))
            .prop_map(|(idx, eps)| Op::Endpoints { idx, eps }),
        1 => (0..SERVICES).prop_map(Op::DeleteSlice),
        3 => Just(Op::Sync),
    ]
}

fn check(initial: &[Op], ops: &[Op]) -> Result<(), TestCaseError> {
    // A: first sync full (as after start), then a partial sync per Sync marker and at the end.
    let ns_a = NetNs::new("pa");
    let mut a = Proxy::new(&ns_a, NODE);
    for o in initial {
        a.change(|t| apply(t, o));
    }
    let r = a.sync();
    prop_assert!(r.result.is_ok(), "initial full sync failed: {:?}", r.result);
    // A's partial syncs write their per-service chains in nat transactions of at
    // most a few chains (B writes them in one), so splitting is covered too.
    a.backend.writer_mut().split_nat(Some(3));
    let mut partials = 0;
    for o in ops.iter().chain(std::iter::once(&Op::Sync)) {
        if let Op::Sync = o {
            let r = a.sync();
            prop_assert!(r.result.is_ok(), "partial sync failed: {:?}", r.result);
            prop_assert_eq!(r.kind, SyncKind::Partial);
            partials += 1;
        } else {
            a.change(|t| apply(t, o));
        }
    }
    prop_assert!(partials >= 1);

    // B: one full restore of the final state into a fresh namespace.
    let ns_b = NetNs::new("pb");
    let mut b = Proxy::new(&ns_b, NODE);
    for o in initial.iter().chain(ops) {
        b.change(|t| apply(t, o));
    }
    let r = b.sync();
    prop_assert!(r.result.is_ok(), "full sync failed: {:?}", r.result);

    prop_assert_eq!(ns_a.saved_state(), ns_b.saved_state());
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn partial_restores_in_order_equal_one_full_restore_of_final_state(
        initial in proptest::collection::vec(op(), 0..6),
        ops in proptest::collection::vec(op(), 1..14),
    ) {
        check(&initial, &ops)?;
    }
}

/// A fixed sequence through the interesting transitions (1 → 0 → 2 endpoints,
/// policy change, delete), so the property is exercised even with few random cases.
#[test]
fn partial_restores_equal_full_restore_for_scaling_and_deletion_sequence() {
    let initial = vec![
        Op::Service { idx: 0, variant: 3 },
        Op::Endpoints { idx: 0, eps: vec![(1, 0)] },
        Op::Service { idx: 1, variant: 4 },
        Op::Endpoints { idx: 1, eps: vec![(1, 1), (2, 1)] },
    ];
    let ops = vec![
        Op::Endpoints { idx: 0, eps: vec![] },
        Op::Sync,
        Op::Endpoints { idx: 0, eps: vec![(2, 0), (3, 1)] },
        Op::Service { idx: 1, variant: 6 },
        Op::Sync,
        Op::Endpoints { idx: 1, eps: vec![(2, 2), (3, 3)] },
        Op::Sync,
        Op::DeleteService(0),
        Op::DeleteSlice(0),
        Op::Sync,
        Op::Service { idx: 0, variant: 0 },
        Op::Endpoints { idx: 0, eps: vec![(4, 1)] },
    ];
    if let Err(e) = check(&initial, &ops) {
        panic!("{e}");
    }
}
