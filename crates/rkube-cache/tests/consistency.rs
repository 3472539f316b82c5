//! Property: after any sequence of creates, updates and deletes on the real
//! embedded store, interleaved with LISTs at random past resourceVersions,
//! every LIST the cache serves from a snapshot equals storage's range at the
//! same revision — whole, and walked page by page.

use crate::common;

use common::*;
use proptest::prelude::*;
use rkube_api::list_options::ListOptions;
use rkube_cache::{Cacher, ListResult, ServedFrom};

#[derive(Debug, Clone)]
enum Op {
    /// Create, update (new node/label) or delete pod `n`, whichever applies; `alt` picks update vs delete.
    Touch { n: u8, node: u8, alt: bool },
    /// LIST at a random revision among those written so far.
    ListAt { pick: usize, limit: u8 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0u8..6, 0u8..3, any::<bool>()).prop_map(|(n, node, alt)| Op::Touch { n, node, alt }),
        1 => (any::<usize>(), 0u8..4).prop_map(|(pick, limit)| Op::ListAt { pick, limit }),
    ]
}

fn opts(q: &str) -> ListOptions {
    ListOptions::from_query(q).unwrap()
}

/// Lists the whole state at `rv`, following continue tokens with page size `limit` (0 = one page).
async fn walk(cacher: &Cacher, rv: i64, limit: u8) -> (Vec<(String, i64, serde_json::Value)>, Vec<ServedFrom>) {
    let first = if limit == 0 {
        format!("resourceVersion={rv}&resourceVersionMatch=Exact")
    } else {
        format!("resourceVersion={rv}&resourceVersionMatch=Exact&limit={limit}")
    };
    let mut page: ListResult = cacher.list(None, &opts(&first)).await.expect("list");
    let mut items = list_state(&page);
    let mut from = vec![page.served_from];
    while let Some(t) = page.continue_token.clone() {
        page = cacher.list(None, &opts(&format!("limit={limit}&continue={t}"))).await.expect("page");
        assert_eq!(page.resource_version, rv);
        items.extend(list_state(&page));
        from.push(page.served_from);
    }
    (items, from)
}

async fn run(ops: Vec<Op>) {
    let b = embedded();
    let s = b.storage.as_ref();
    let cacher = Cacher::new(b.storage.clone(), pod_config());
    wait_for(&cacher, 0).await;
    let mut revs = vec![cacher.resource_version()];
    for op in ops {
        match op {
            Op::Touch { n, node, alt } => {
                let name = format!("p{n}");
                let exists = s.get(&key("ns", &name)).await.unwrap().is_some();
                let rv = match (exists, alt) {
                    (false, _) => create(s, "ns", &name, &format!("n{node}")).await.mod_revision,
                    (true, false) => update(s, "ns", &name, &format!("n{node}"), &format!("v{node}")).await.mod_revision,
                    (true, true) => delete(s, "ns", &name).await,
                };
                revs.push(rv);
            }
            Op::ListAt { pick, limit } => {
                let rv = revs[pick % revs.len()];
                let (items, from) = walk(&cacher, rv, limit).await;
                assert!(from.iter().all(|f| *f == ServedFrom::Snapshot), "at {rv}: {from:?}");
                assert_eq!(items, storage_state(s, rv).await, "LIST at {rv} (limit {limit})");
            }
        }
    }
    wait_for(&cacher, *revs.last().unwrap()).await;
    for rv in revs {
        let (items, from) = walk(&cacher, rv, 0).await;
        assert_eq!(from, [ServedFrom::Snapshot]);
        assert_eq!(items, storage_state(s, rv).await, "LIST at {rv}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    #[test]
    fn cache_list_at_every_snapshot_revision_equals_storage_range(ops in proptest::collection::vec(op(), 1..30)) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(run(ops));
    }
}
