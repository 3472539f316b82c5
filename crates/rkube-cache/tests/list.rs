//! LIST served by a cacher over the real embedded store (and real etcd for
//! consistent reads): the routing rows of upstream's `shouldDelegateList`
//! (`storage/cacher/delegator.go`), snapshots, pagination.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use rkube_api::list_options::ListOptions;
use rkube_api::status::Status;
use rkube_cache::{CacheError, Cacher, ServedFrom};
use rkube_storage::Storage;

fn opts(q: &str) -> ListOptions {
    ListOptions::from_query(q).unwrap_or_else(|s| panic!("bad query {q}: {}", s.message()))
}

/// Creates pods p0..pn on node-(i%3) in namespace ns; returns the revision after each write.
async fn seed(s: &dyn Storage, n: usize) -> Vec<i64> {
    let mut revs = Vec::new();
    for i in 0..n {
        revs.push(create(s, "ns", &format!("p{i:02}"), &format!("node-{}", i % 3)).await.mod_revision);
    }
    revs
}

#[tokio::test]
async fn list_exact_rv_served_from_snapshot() {
    let b = embedded();
    let s = b.storage.as_ref();
    let revs = seed(s, 3).await;
    let cacher = Cacher::new(b.storage.clone(), pod_config());
    // Writes after the list: snapshots exist for each of them.
    let r_upd = update(s, "ns", "p00", "node-9", "b").await.mod_revision;
    let r_del = delete(s, "ns", "p01").await;
    let r_new = create(s, "ns", "p99", "node-1").await.mod_revision;
    wait_for(&cacher, r_new).await;
    let storage_lists = cacher.metrics().storage_list_count();

    for rv in [revs[2], r_upd, r_del, r_new] {
        for q in [format!("resourceVersion={rv}&resourceVersionMatch=Exact"), format!("resourceVersion={rv}&limit=100")] {
            let got = cacher.list(None, &opts(&q)).await.unwrap();
            assert_eq!(got.served_from, ServedFrom::Snapshot, "{q}");
            assert_eq!(got.resource_version, rv, "{q}: list RV is the requested one");
            assert_eq!(list_state(&got), storage_state(s, rv).await, "{q}: same as storage at {rv}");
        }
    }
    // A revision between two events maps to the earlier snapshot.
    assert_eq!(cacher.metrics().storage_list_count(), storage_lists, "no storage read for snapshot lists");
    // Before the initial list's revision there is no snapshot: storage answers.
    let got = cacher.list(None, &opts(&format!("resourceVersion={}&resourceVersionMatch=Exact", revs[0]))).await.unwrap();
    assert_eq!(got.served_from, ServedFrom::Storage);
    assert_eq!(list_state(&got), storage_state(s, revs[0]).await);
}

#[tokio::test]
async fn continue_token_pages_from_snapshot_after_writes() {
    let b = embedded();
    let s = b.storage.as_ref();
    seed(s, 10).await;
    let cacher = Cacher::new(b.storage.clone(), pod_config());
    let rv0 = s.current_revision().await.unwrap();
    wait_for(&cacher, rv0).await;

    let first = cacher.list(None, &opts("limit=4")).await.unwrap();
    assert_eq!(first.served_from, ServedFrom::Cache, "consistent read from cache");
    assert_eq!(first.items.len(), 4);
    assert_eq!(first.remaining_item_count, Some(6));
    let list_rv = first.resource_version;
    let want = storage_state(s, list_rv).await;

    // Writes between pages must not show up in later pages.
    delete(s, "ns", "p05").await;
    update(s, "ns", "p08", "node-1", "changed").await;
    let last = create(s, "ns", "p06x", "node-1").await.mod_revision;
    wait_for(&cacher, last).await;
    let storage_lists = cacher.metrics().storage_list_count();

    let mut all = list_state(&first);
    let mut token = first.continue_token.clone();
    let mut pages = 1;
    while let Some(t) = token {
        let page = cacher.list(None, &opts(&format!("limit=4&continue={t}"))).await.unwrap();
        assert_eq!(page.served_from, ServedFrom::Snapshot);
        assert_eq!(page.resource_version, list_rv);
        all.extend(list_state(&page));
        token = page.continue_token.clone();
        pages += 1;
        if token.is_none() {
            assert_eq!(page.remaining_item_count, None);
        }
    }
    assert_eq!(pages, 3);
    assert_eq!(all, want, "the walk is the state at the first page's RV");
    assert_eq!(cacher.metrics().storage_list_count(), storage_lists, "zero storage range reads during the walk");
}

#[tokio::test]
#[allow(clippy::type_complexity)]
async fn list_routing_rows_are_served_where_spec_says() {
    let b = embedded();
    let s = b.storage.as_ref();
    let revs = seed(s, 6).await;
    let cacher = Cacher::new(b.storage.clone(), pod_config());
    wait_for(&cacher, revs[5]).await;
    let cur = cacher.resource_version();
    // (query, namespace, served from, items, continue expected, remainingItemCount)
    let cases: Vec<(String, Option<&str>, ServedFrom, usize, bool, Option<i64>)> = vec![
        ("resourceVersion=0".into(), None, ServedFrom::Cache, 6, false, None),
        ("resourceVersion=0&limit=2".into(), None, ServedFrom::Cache, 6, false, None),
        ("".into(), Some("ns"), ServedFrom::Cache, 6, false, None),
        ("".into(), Some("other"), ServedFrom::Cache, 0, false, None),
        (format!("resourceVersion={}", revs[1]), None, ServedFrom::Cache, 6, false, None),
        (format!("resourceVersion={}&resourceVersionMatch=NotOlderThan&limit=4", revs[1]), None, ServedFrom::Cache, 4, true, Some(2)),
        ("limit=4&labelSelector=app%3Da".into(), None, ServedFrom::Cache, 4, true, None),
        ("fieldSelector=spec.nodeName%3Dnode-1".into(), None, ServedFrom::Cache, 2, false, None),
        ("fieldSelector=spec.nodeName%3Dnode-1&limit=1".into(), None, ServedFrom::Cache, 1, true, None),
        (format!("resourceVersion={}&resourceVersionMatch=Exact&labelSelector=app%3Dnone", cur), None, ServedFrom::Snapshot, 0, false, None),
        (format!("resourceVersion={cur}&limit=2"), None, ServedFrom::Snapshot, 2, true, Some(4)),
        // Before the cache's first list: no snapshot covers it, storage answers.
        (format!("resourceVersion={}&limit=2", revs[3]), None, ServedFrom::Storage, 2, true, Some(2)),
    ];
    for (q, ns, from, n, more, remaining) in cases {
        let r = cacher.list(ns, &opts(&q)).await.unwrap_or_else(|e| panic!("{q}: {e}"));
        assert_eq!(
            (r.served_from, r.items.len(), r.continue_token.is_some(), r.remaining_item_count),
            (from, n, more, remaining),
            "query {q:?} ns {ns:?}"
        );
    }
    // Index-served node list and its filter agree.
    let r = cacher.list(None, &opts("fieldSelector=spec.nodeName%3Dnode-2")).await.unwrap();
    assert!(r.items.iter().all(|o| o.field("spec.nodeName") == Some("node-2")));
    assert_eq!(cacher.metrics().cache_list_count(), 12);
    assert_eq!(cacher.metrics().storage_list_count(), 1);
}

#[tokio::test]
async fn list_not_older_than_future_rv_times_out_with_504() {
    let b = embedded();
    let cacher = Cacher::new(b.storage.clone(), pod_config());
    wait_for(&cacher, 0).await;
    tokio::time::pause();
    let cur = cacher.resource_version();
    let started = tokio::time::Instant::now();
    let err = cacher.list(None, &opts(&format!("resourceVersion={}", cur + 50))).await.unwrap_err();
    assert!(started.elapsed() >= Duration::from_secs(3));
    let status = Status::from(err);
    assert_eq!((status.code(), status.reason(), status.retry_after()), (504, "Timeout", Some(1)));
    assert_eq!(status.message(), format!("Timeout: Too large resource version: {}, current: {cur}", cur + 50));
}

#[tokio::test]
async fn not_ready_lists_go_to_storage_only_when_limited_without_selectors() {
    let b = embedded();
    seed(b.storage.as_ref(), 3).await;
    let faulty = Faulty::new(b.storage.clone());
    faulty.fail_watches(true); // lists work, the watch never opens: the cache stays Pending
    let cacher = Cacher::new(faulty.clone(), pod_config());
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!cacher.ready_state().is_ready());
    // (query, Ok(served from) or 429)
    let cases: [(&str, Option<ServedFrom>); 6] = [
        ("resourceVersion=0", None),
        ("", None),
        ("labelSelector=app%3Da&limit=5", None),
        ("fieldSelector=spec.nodeName%3Dnode-1", None),
        ("resourceVersion=0&limit=5", Some(ServedFrom::Storage)),
        ("limit=2", Some(ServedFrom::Storage)),
    ];
    for (q, want) in cases {
        match (cacher.list(None, &opts(q)).await, want) {
            (Ok(r), Some(from)) => assert_eq!(r.served_from, from, "{q}"),
            (Err(e), None) => {
                let s = Status::from(e);
                assert_eq!((s.code(), s.reason(), s.message()), (429, "TooManyRequests", "storage is (re)initializing"), "{q}");
                assert!(s.retry_after().is_some_and(|r| (1..=30).contains(&r)), "{q}");
            }
            (got, want) => panic!("{q}: got {got:?}, want {want:?}"),
        }
    }
    // GET reads storage while not ready; WATCH is refused at once.
    assert!(cacher.get("ns/p00", Some("0")).await.unwrap().is_some());
    let w = cacher.watch(None, &opts("watch=true&resourceVersion=0")).await;
    assert!(matches!(w, Err(CacheError::NotReady { .. })), "{w:?}");
    faulty.fail_watches(false);
    wait_for(&cacher, 0).await;
    assert_eq!(cacher.list(None, &opts("resourceVersion=0")).await.unwrap().served_from, ServedFrom::Cache);
    let _ = Arc::clone(&faulty);
}

#[tokio::test]
async fn consistent_read_waits_for_current_revision() {
    // Embedded store: progress notifications on request are reliable.
    let b = embedded();
    consistent_read_case(&b, Duration::from_secs(0)).await;
}

#[tokio::test]
async fn consistent_read_waits_for_current_revision_on_etcd() {
    // Real etcd 3.4.23: requested progress is trusted only once the watch is
    // synced; until then consistent reads go to etcd, afterwards to the cache.
    let b = etcd().await;
    consistent_read_case(&b, Duration::from_secs(5)).await;
}

async fn consistent_read_case(b: &Backend, sync_wait: Duration) {
    let s = b.storage.as_ref();
    seed(s, 3).await;
    let cacher = Cacher::new(b.storage.clone(), pod_config());
    wait_for(&cacher, s.current_revision().await.unwrap()).await;
    // Writes elsewhere move storage's revision but bring no event to this cache:
    // only a progress notification lets it prove it is fresh.
    for i in 0..5 {
        s.create(&format!("/registry/configmaps/ns/c{i}"), bytes::Bytes::from_static(b"{}")).await.unwrap();
    }
    let target = s.current_revision().await.unwrap();
    assert!(cacher.resource_version() < target);
    let deadline = tokio::time::Instant::now() + sync_wait;
    let r = loop {
        let r = cacher.list(None, &opts("")).await.unwrap();
        if r.served_from == ServedFrom::Cache || tokio::time::Instant::now() >= deadline {
            break r;
        }
        assert_eq!(r.served_from, ServedFrom::Storage, "before the etcd watch is synced");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(r.served_from, ServedFrom::Cache);
    assert!(r.resource_version >= target, "list RV {} < storage revision {target}", r.resource_version);
    assert_eq!(list_state(&r), storage_state(s, r.resource_version).await);
    assert!(cacher.metrics().consistent_read_count(true, false) >= 1);
    // Read-your-writes: a pod created just now is in the next consistent list.
    create(s, "ns", "fresh", "node-1").await;
    let r = cacher.list(None, &opts("")).await.unwrap();
    assert!(r.items.iter().any(|o| o.name == "fresh"), "consistent list misses a write");
}
