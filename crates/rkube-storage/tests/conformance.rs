//! The storage conformance suite: every rule of the `Storage` contract
//! (etcd v3's semantics, `server/storage/mvcc/kv.go`), run unchanged against both backends.
//!
//! Each rule is one `async fn(&dyn Storage)` below; `conformance_suite!`
//! instantiates all of them as `embedded::RULE` (a fresh store in a temp dir)
//! and `etcd::RULE` (a fresh real etcd on free loopback ports, started with
//! `rkube_storage::testing::EtcdServer` and killed by PID at the end).
//!
//! Revision diagrams in comments: `rN` is the revision a write got, relative
//! to the revision `r0` read at the start (a fresh etcd starts at 1, like the
//! embedded store, but the suite never assumes it).

use std::any::Any;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use rkube_storage::embedded::EmbeddedStorage;
use rkube_storage::etcd::EtcdStorage;
use rkube_storage::testing::EtcdServer;
use rkube_storage::{
    Event, EventKind, KeyValue, RangeRequest, Revision, Storage, StorageError, Watch, WatchResponse, WatchStream,
};

/// A backend under test plus whatever must live as long as it (temp dir, etcd process).
struct Backend {
    storage: Arc<dyn Storage>,
    _keep: Box<dyn Any + Send>,
}

async fn embedded() -> Backend {
    let dir = tempfile::tempdir().expect("temp dir");
    let storage = EmbeddedStorage::open(dir.path()).expect("open embedded store");
    Backend { storage: Arc::new(storage), _keep: Box::new(dir) }
}

async fn etcd() -> Backend {
    let server = EtcdServer::start().expect("start etcd (apt-get install -y etcd-server)");
    let storage = EtcdStorage::connect(&[server.endpoint()]).await.expect("connect to etcd");
    Backend { storage: Arc::new(storage), _keep: Box::new(server) }
}

macro_rules! conformance_suite {
    ($backend:ident: $($rule:ident),* $(,)?) => {
        mod $backend {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $rule() {
                    let backend = super::$backend().await;
                    super::$rule(&*backend.storage).await;
                }
            )*
        }
    };
}

macro_rules! rules {
    ($($backend:ident),*) => {$(
        conformance_suite!($backend:
            revisions_increment_by_one_per_committed_write,
            failed_guards_take_no_revision,
            create_of_existing_key_fails_already_exists,
            update_guard_mismatch_conflicts_with_actual_revision,
            update_and_delete_of_missing_key_not_found,
            delete_guarded_by_mod_revision,
            get_of_missing_key_is_none,
            range_at_older_revision_returns_old_values,
            range_with_empty_end_reads_one_key,
            range_limit_sets_more_and_counts_whole_range,
            range_at_future_revision_fails_future_revision,
            range_below_compacted_revision_fails_compacted,
            compact_twice_at_same_revision_fails_compacted,
            watch_from_past_revision_replays_with_prev_kv_then_live,
            watch_from_zero_starts_after_current_revision,
            watch_from_compacted_revision_fails_compacted,
            watch_delete_event_carries_prev_kv,
            requested_progress_reports_revision_at_least_last_write,
            concurrent_creates_of_one_key_exactly_one_wins,
            prefix_isolation_for_range_and_watch,
            large_values_read_back_whole_after_updates_and_compaction,
        );
    )*};
}

rules!(embedded, etcd);

// ---------------------------------------------------------------- helpers

fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

const WAIT: Duration = Duration::from_secs(10);

/// Reads watch responses until `n` events arrived (progress skipped).
async fn next_events(stream: &mut WatchStream, n: usize) -> Vec<Event> {
    let mut events = Vec::new();
    while events.len() < n {
        let item = tokio::time::timeout(WAIT, stream.next())
            .await
            .unwrap_or_else(|_| panic!("timed out with {} of {n} events: {events:?}", events.len()))
            .expect("watch stream ended early");
        match item.expect("watch error") {
            WatchResponse::Events(batch) => events.extend(batch),
            WatchResponse::Progress { .. } => {}
        }
    }
    assert_eq!(events.len(), n, "more events than expected: {events:?}");
    events
}

/// Asserts a watch from a compacted revision fails with `Compacted`, either
/// at `watch()` or as the stream's first item (etcd cancels after `created`).
async fn assert_watch_compacted(result: rkube_storage::Result<Watch>) {
    let err = match result {
        Err(e) => e,
        Ok(mut w) => loop {
            let item = tokio::time::timeout(WAIT, w.stream.next())
                .await
                .expect("no answer to a compacted watch")
                .expect("stream ended without an error");
            match item {
                Ok(WatchResponse::Progress { .. }) => continue,
                Ok(other) => panic!("compacted watch delivered {other:?}"),
                Err(e) => break e,
            }
        },
    };
    assert!(matches!(err, StorageError::Compacted { .. }), "expected Compacted, got {err:?}");
}

fn keys(kvs: &[KeyValue]) -> Vec<&str> {
    kvs.iter().map(|kv| kv.key.as_str()).collect()
}

// ---------------------------------------------------------------- rules

/// r0 --create--> r0+1 --update--> r0+2 --delete--> r0+3
async fn revisions_increment_by_one_per_committed_write(s: &dyn Storage) {
    let r0 = s.current_revision().await.unwrap();
    let created = s.create("/registry/pods/ns/a", b("v1")).await.unwrap();
    assert_eq!((created.create_revision, created.mod_revision, created.version), (r0 + 1, r0 + 1, 1));
    assert_eq!(created.value, b("v1"));
    let updated = s.update("/registry/pods/ns/a", b("v2"), created.mod_revision).await.unwrap();
    assert_eq!((updated.create_revision, updated.mod_revision, updated.version), (r0 + 1, r0 + 2, 2));
    let (last, deleted_at) = s.delete("/registry/pods/ns/a", Some(updated.mod_revision)).await.unwrap();
    assert_eq!(deleted_at, r0 + 3);
    assert_eq!(last, updated);
    assert_eq!(s.current_revision().await.unwrap(), r0 + 3);
    // A re-create starts a new generation: version 1 again.
    let again = s.create("/registry/pods/ns/a", b("v3")).await.unwrap();
    assert_eq!((again.create_revision, again.mod_revision, again.version), (r0 + 4, r0 + 4, 1));
    assert_eq!(s.get("/registry/pods/ns/a").await.unwrap(), Some(again));
}

async fn failed_guards_take_no_revision(s: &dyn Storage) {
    let kv = s.create("/registry/pods/ns/a", b("v1")).await.unwrap();
    let r = s.current_revision().await.unwrap();
    assert!(s.create("/registry/pods/ns/a", b("x")).await.is_err());
    assert!(s.update("/registry/pods/ns/a", b("x"), kv.mod_revision - 1).await.is_err());
    assert!(s.delete("/registry/pods/ns/missing", None).await.is_err());
    assert_eq!(s.current_revision().await.unwrap(), r);
    assert_eq!(s.get("/registry/pods/ns/a").await.unwrap(), Some(kv));
}

async fn create_of_existing_key_fails_already_exists(s: &dyn Storage) {
    s.create("/registry/pods/ns/a", b("v1")).await.unwrap();
    let err = s.create("/registry/pods/ns/a", b("v2")).await.unwrap_err();
    assert_eq!(err, StorageError::AlreadyExists { key: "/registry/pods/ns/a".into() });
    assert_eq!(s.get("/registry/pods/ns/a").await.unwrap().unwrap().value, b("v1"));
}

async fn update_guard_mismatch_conflicts_with_actual_revision(s: &dyn Storage) {
    let v1 = s.create("/registry/pods/ns/a", b("v1")).await.unwrap();
    let v2 = s.update("/registry/pods/ns/a", b("v2"), v1.mod_revision).await.unwrap();
    // A writer still holding v1's resourceVersion loses.
    let err = s.update("/registry/pods/ns/a", b("stale"), v1.mod_revision).await.unwrap_err();
    assert_eq!(
        err,
        StorageError::Conflict {
            key: "/registry/pods/ns/a".into(),
            expected: v1.mod_revision,
            actual: v2.mod_revision
        }
    );
    assert_eq!(s.get("/registry/pods/ns/a").await.unwrap().unwrap().value, b("v2"));
}

async fn update_and_delete_of_missing_key_not_found(s: &dyn Storage) {
    let missing = || StorageError::NotFound { key: "/registry/pods/ns/none".into() };
    assert_eq!(s.update("/registry/pods/ns/none", b("x"), 0).await.unwrap_err(), missing());
    assert_eq!(s.update("/registry/pods/ns/none", b("x"), 5).await.unwrap_err(), missing());
    assert_eq!(s.delete("/registry/pods/ns/none", None).await.unwrap_err(), missing());
    assert_eq!(s.delete("/registry/pods/ns/none", Some(5)).await.unwrap_err(), missing());
    assert_eq!(s.get("/registry/pods/ns/none").await.unwrap(), None);
}

async fn delete_guarded_by_mod_revision(s: &dyn Storage) {
    let v1 = s.create("/registry/pods/ns/a", b("v1")).await.unwrap();
    let v2 = s.update("/registry/pods/ns/a", b("v2"), v1.mod_revision).await.unwrap();
    let err = s.delete("/registry/pods/ns/a", Some(v1.mod_revision)).await.unwrap_err();
    assert_eq!(
        err,
        StorageError::Conflict {
            key: "/registry/pods/ns/a".into(),
            expected: v1.mod_revision,
            actual: v2.mod_revision
        }
    );
    let (last, rev) = s.delete("/registry/pods/ns/a", Some(v2.mod_revision)).await.unwrap();
    assert_eq!(last, v2);
    assert_eq!(rev, v2.mod_revision + 1);
    assert_eq!(s.get("/registry/pods/ns/a").await.unwrap(), None);
    // Unguarded delete.
    s.create("/registry/pods/ns/b", b("v1")).await.unwrap();
    let (last, _) = s.delete("/registry/pods/ns/b", None).await.unwrap();
    assert_eq!(last.value, b("v1"));
}

async fn get_of_missing_key_is_none(s: &dyn Storage) {
    assert_eq!(s.get("/registry/pods/ns/none").await.unwrap(), None);
    s.create("/registry/pods/ns/a", b("v1")).await.unwrap();
    assert_eq!(s.get("/registry/pods/ns/a/").await.unwrap(), None);
    assert_eq!(s.get("/registry/pods/ns/").await.unwrap(), None);
}

/// r1 create a=1, r2 create b=1, r3 update a=2, r4 delete b, r5 create c=1
async fn range_at_older_revision_returns_old_values(s: &dyn Storage) {
    let a1 = s.create("/registry/pods/ns/a", b("a1")).await.unwrap();
    let b1 = s.create("/registry/pods/ns/b", b("b1")).await.unwrap();
    let a2 = s.update("/registry/pods/ns/a", b("a2"), a1.mod_revision).await.unwrap();
    s.delete("/registry/pods/ns/b", None).await.unwrap();
    let c1 = s.create("/registry/pods/ns/c", b("c1")).await.unwrap();

    let at_r2 =
        s.range(RangeRequest { revision: b1.mod_revision, ..RangeRequest::prefix("/registry/pods/") }).await.unwrap();
    assert_eq!(at_r2.kvs, vec![a1.clone(), b1.clone()]);
    assert_eq!((at_r2.count, at_r2.more, at_r2.revision), (2, false, b1.mod_revision));

    let at_r1 =
        s.range(RangeRequest { revision: a1.mod_revision, ..RangeRequest::prefix("/registry/pods/") }).await.unwrap();
    assert_eq!(at_r1.kvs, vec![a1.clone()]);

    let at_r4 = s
        .range(RangeRequest { revision: c1.mod_revision - 1, ..RangeRequest::prefix("/registry/pods/") })
        .await
        .unwrap();
    assert_eq!(at_r4.kvs, vec![a2.clone()]);

    let latest = s.range(RangeRequest::prefix("/registry/pods/")).await.unwrap();
    assert_eq!(latest.kvs, vec![a2, c1.clone()]);
    assert_eq!(latest.revision, s.current_revision().await.unwrap());
    assert_eq!(latest.revision, c1.mod_revision);
}

/// Values larger than the embedded store keeps in its `latest` table (64
/// KiB: it keeps their header there and the value once, in history) read
/// back whole from every read path: get, range now and at an older
/// revision, the prev_kv of updates and deletes, watch replay, and after a
/// compaction that leaves the live version as the key's only one.
async fn large_values_read_back_whole_after_updates_and_compaction(s: &dyn Storage) {
    let large = |c: u8| Bytes::from(vec![c; 200 * 1024]);
    let mut watch = s.watch("/registry/configmaps/", s.current_revision().await.unwrap()).await.unwrap();
    let a1 = s.create("/registry/configmaps/ns/a", large(b'1')).await.unwrap();
    let b1 = s.create("/registry/configmaps/ns/b", b("small")).await.unwrap();
    let a2 = s.update("/registry/configmaps/ns/a", large(b'2'), a1.mod_revision).await.unwrap();
    let b2 = s.update("/registry/configmaps/ns/b", large(b'3'), b1.mod_revision).await.unwrap();
    let b3 = s.update("/registry/configmaps/ns/b", b("small again"), b2.mod_revision).await.unwrap();
    assert_eq!(s.get("/registry/configmaps/ns/a").await.unwrap(), Some(a2.clone()));
    assert_eq!(s.get("/registry/configmaps/ns/b").await.unwrap(), Some(b3.clone()));
    let now = s.range(RangeRequest::prefix("/registry/configmaps/")).await.unwrap();
    assert_eq!(now.kvs, vec![a2.clone(), b3.clone()]);
    let then = s
        .range(RangeRequest { revision: b2.mod_revision, ..RangeRequest::prefix("/registry/configmaps/") })
        .await
        .unwrap();
    assert_eq!(then.kvs, vec![a2.clone(), b2.clone()]);
    let events = next_events(&mut watch.stream, 5).await;
    assert_eq!(events[2], Event { kind: EventKind::Put, kv: a2.clone(), prev_kv: Some(a1.clone()) });
    assert_eq!(events[3], Event { kind: EventKind::Put, kv: b2.clone(), prev_kv: Some(b1) });
    assert_eq!(events[4], Event { kind: EventKind::Put, kv: b3.clone(), prev_kv: Some(b2) });

    s.compact(b3.mod_revision).await.unwrap();
    assert_eq!(s.get("/registry/configmaps/ns/a").await.unwrap(), Some(a2.clone()));
    let now = s.range(RangeRequest::prefix("/registry/configmaps/")).await.unwrap();
    assert_eq!(now.kvs, vec![a2.clone(), b3]);
    let (deleted, _) = s.delete("/registry/configmaps/ns/a", Some(a2.mod_revision)).await.unwrap();
    assert_eq!(deleted, a2);
    assert_eq!(s.get("/registry/configmaps/ns/a").await.unwrap(), None);
}

async fn range_with_empty_end_reads_one_key(s: &dyn Storage) {
    s.create("/registry/pods/ns/a", b("a")).await.unwrap();
    let ab = s.create("/registry/pods/ns/ab", b("ab")).await.unwrap();
    let one = s.range(RangeRequest { start: "/registry/pods/ns/ab".into(), ..Default::default() }).await.unwrap();
    assert_eq!(one.kvs, vec![ab]);
    assert_eq!(one.count, 1);
}

async fn range_limit_sets_more_and_counts_whole_range(s: &dyn Storage) {
    for name in ["a", "b", "c", "d", "e"] {
        s.create(&format!("/registry/pods/ns/{name}"), b(name)).await.unwrap();
    }
    let page1 = s.range(RangeRequest { limit: 2, ..RangeRequest::prefix("/registry/pods/") }).await.unwrap();
    assert_eq!(keys(&page1.kvs), ["/registry/pods/ns/a", "/registry/pods/ns/b"]);
    assert!(page1.more);
    assert_eq!(page1.count, 5);
    // Continue after the last key, at the first page's revision (as a continue token does).
    let next_start = format!("{}\0", page1.kvs[1].key);
    let page2 = s
        .range(RangeRequest {
            start: next_start,
            limit: 2,
            revision: page1.revision,
            ..RangeRequest::prefix("/registry/pods/")
        })
        .await
        .unwrap();
    assert_eq!(keys(&page2.kvs), ["/registry/pods/ns/c", "/registry/pods/ns/d"]);
    assert!(page2.more);
    assert_eq!(page2.count, 3);
    let all = s.range(RangeRequest { limit: 5, ..RangeRequest::prefix("/registry/pods/") }).await.unwrap();
    assert_eq!((all.kvs.len(), all.more, all.count), (5, false, 5));
    let counted = s.range(RangeRequest { count_only: true, ..RangeRequest::prefix("/registry/pods/") }).await.unwrap();
    assert_eq!((counted.kvs.len(), counted.count), (0, 5));
}

async fn range_at_future_revision_fails_future_revision(s: &dyn Storage) {
    s.create("/registry/pods/ns/a", b("a")).await.unwrap();
    let current = s.current_revision().await.unwrap();
    let err =
        s.range(RangeRequest { revision: current + 10, ..RangeRequest::prefix("/registry/pods/") }).await.unwrap_err();
    assert!(matches!(err, StorageError::FutureRevision { requested, .. } if requested == current + 10), "{err:?}");
}

/// r1 create a=1, r2 update a=2, r3 create b; compact(r2): reads at r1 fail, at r2 work.
async fn range_below_compacted_revision_fails_compacted(s: &dyn Storage) {
    let a1 = s.create("/registry/pods/ns/a", b("a1")).await.unwrap();
    let a2 = s.update("/registry/pods/ns/a", b("a2"), a1.mod_revision).await.unwrap();
    let b1 = s.create("/registry/pods/ns/b", b("b1")).await.unwrap();
    s.compact(a2.mod_revision).await.unwrap();
    assert!(s.compacted_revision().await.unwrap() >= a2.mod_revision);

    let err = s
        .range(RangeRequest { revision: a1.mod_revision, ..RangeRequest::prefix("/registry/pods/") })
        .await
        .unwrap_err();
    assert!(
        matches!(err, StorageError::Compacted { requested, compacted } if requested == a1.mod_revision && compacted >= a2.mod_revision),
        "{err:?}"
    );
    let at_compacted =
        s.range(RangeRequest { revision: a2.mod_revision, ..RangeRequest::prefix("/registry/pods/") }).await.unwrap();
    assert_eq!(at_compacted.kvs, vec![a2.clone()]);
    let latest = s.range(RangeRequest::prefix("/registry/pods/")).await.unwrap();
    assert_eq!(latest.kvs, vec![a2, b1]);
}

async fn compact_twice_at_same_revision_fails_compacted(s: &dyn Storage) {
    let a = s.create("/registry/pods/ns/a", b("a1")).await.unwrap();
    s.update("/registry/pods/ns/a", b("a2"), a.mod_revision).await.unwrap();
    s.compact(a.mod_revision).await.unwrap();
    let err = s.compact(a.mod_revision).await.unwrap_err();
    assert!(matches!(err, StorageError::Compacted { .. }), "{err:?}");
}

/// r1 create a, r2 update a, r3 delete a, r4 create b; watch after r1 → r2, r3, r4, then live r5.
async fn watch_from_past_revision_replays_with_prev_kv_then_live(s: &dyn Storage) {
    let a1 = s.create("/registry/pods/ns/a", b("a1")).await.unwrap();
    let a2 = s.update("/registry/pods/ns/a", b("a2"), a1.mod_revision).await.unwrap();
    let (_, r3) = s.delete("/registry/pods/ns/a", None).await.unwrap();
    let b1 = s.create("/registry/pods/ns/b", b("b1")).await.unwrap();
    let mut watch = s.watch("/registry/pods/", a1.mod_revision).await.unwrap();
    let replayed = next_events(&mut watch.stream, 3).await;
    assert_eq!(replayed[0], Event { kind: EventKind::Put, kv: a2.clone(), prev_kv: Some(a1.clone()) });
    assert_eq!(replayed[1].kind, EventKind::Delete);
    assert_eq!(replayed[1].kv.key, "/registry/pods/ns/a");
    assert_eq!(replayed[1].kv.mod_revision, r3);
    assert_eq!(replayed[1].prev_kv, Some(a2));
    assert_eq!(replayed[2], Event { kind: EventKind::Put, kv: b1.clone(), prev_kv: None });
    assert!(replayed[2].is_create());

    let b2 = s.update("/registry/pods/ns/b", b("b2"), b1.mod_revision).await.unwrap();
    let live = next_events(&mut watch.stream, 1).await;
    assert_eq!(live[0], Event { kind: EventKind::Put, kv: b2, prev_kv: Some(b1) });
}

async fn watch_from_zero_starts_after_current_revision(s: &dyn Storage) {
    s.create("/registry/pods/ns/before", b("x")).await.unwrap();
    let mut watch = s.watch("/registry/pods/", 0).await.unwrap();
    let after = s.create("/registry/pods/ns/after", b("y")).await.unwrap();
    let events = next_events(&mut watch.stream, 1).await;
    assert_eq!(events[0].kv, after);
}

async fn watch_from_compacted_revision_fails_compacted(s: &dyn Storage) {
    let a = s.create("/registry/pods/ns/a", b("a1")).await.unwrap();
    let a2 = s.update("/registry/pods/ns/a", b("a2"), a.mod_revision).await.unwrap();
    let a3 = s.update("/registry/pods/ns/a", b("a3"), a2.mod_revision).await.unwrap();
    s.compact(a3.mod_revision).await.unwrap();
    // Events after a.mod_revision start at a2, which is gone.
    assert_watch_compacted(s.watch("/registry/pods/", a.mod_revision).await).await;
    // Watching from the compacted revision itself still works.
    let mut ok = s.watch("/registry/pods/", a3.mod_revision).await.unwrap();
    let a4 = s.update("/registry/pods/ns/a", b("a4"), a3.mod_revision).await.unwrap();
    let events = next_events(&mut ok.stream, 1).await;
    assert_eq!(events[0], Event { kind: EventKind::Put, kv: a4, prev_kv: Some(a3) });
}

async fn watch_delete_event_carries_prev_kv(s: &dyn Storage) {
    let a = s.create("/registry/pods/ns/a", b("a1")).await.unwrap();
    let mut watch = s.watch("/registry/pods/", 0).await.unwrap();
    let (_, rev) = s.delete("/registry/pods/ns/a", Some(a.mod_revision)).await.unwrap();
    let events = next_events(&mut watch.stream, 1).await;
    assert_eq!(events[0].kind, EventKind::Delete);
    assert_eq!(events[0].revision(), rev);
    assert_eq!(events[0].kv.key, "/registry/pods/ns/a");
    assert!(events[0].kv.value.is_empty());
    assert_eq!((events[0].kv.create_revision, events[0].kv.version), (0, 0));
    assert_eq!(events[0].prev_kv, Some(a));
}

async fn requested_progress_reports_revision_at_least_last_write(s: &dyn Storage) {
    let mut watch = s.watch("/registry/pods/", 0).await.unwrap();
    let mut last: Revision = 0;
    for name in ["a", "b", "c"] {
        last = s.create(&format!("/registry/pods/ns/{name}"), b(name)).await.unwrap().mod_revision;
    }
    // Unrelated writes move the revision without events for this watch.
    let other = s.create("/registry/services/ns/x", b("x")).await.unwrap().mod_revision;
    watch.progress.request_progress();
    let mut seen = Vec::new();
    let progress = loop {
        let item = tokio::time::timeout(WAIT, watch.stream.next()).await.expect("no progress").expect("stream ended");
        match item.expect("watch error") {
            WatchResponse::Events(events) => seen.extend(events.into_iter().map(|e| e.revision())),
            WatchResponse::Progress { revision } if revision >= last => break revision,
            WatchResponse::Progress { .. } => {}
        }
    };
    assert!(progress >= last);
    // Every event at or below the progress revision came before it.
    assert_eq!(seen, vec![last - 2, last - 1, last]);
    assert!(other > last);
}

async fn concurrent_creates_of_one_key_exactly_one_wins(s: &dyn Storage) {
    let results =
        futures::future::join_all((0..16).map(|i| s.create("/registry/pods/ns/race", b(&format!("v{i}"))))).await;
    let winners: Vec<&KeyValue> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
    assert_eq!(winners.len(), 1, "{results:?}");
    for r in &results {
        if let Err(e) = r {
            assert_eq!(e, &StorageError::AlreadyExists { key: "/registry/pods/ns/race".into() });
        }
    }
    assert_eq!(s.get("/registry/pods/ns/race").await.unwrap().as_ref(), Some(winners[0]));
}

async fn prefix_isolation_for_range_and_watch(s: &dyn Storage) {
    let mut watch = s.watch("/registry/pods/", 0).await.unwrap();
    s.create("/registry/podsx/ns/b", b("x")).await.unwrap();
    s.create("/registry/pods", b("bare")).await.unwrap();
    let pod = s.create("/registry/pods/ns/a", b("a")).await.unwrap();
    s.create("/registry/podsecuritypolicies/p", b("p")).await.unwrap();
    let range = s.range(RangeRequest::prefix("/registry/pods/")).await.unwrap();
    assert_eq!(range.kvs, vec![pod.clone()]);
    assert_eq!(range.count, 1);
    let events = next_events(&mut watch.stream, 1).await;
    assert_eq!(events[0].kv, pod);
    // Nothing else arrives for this prefix.
    let pod2 = s.update("/registry/pods/ns/a", b("a2"), pod.mod_revision).await.unwrap();
    let events = next_events(&mut watch.stream, 1).await;
    assert_eq!(events[0].kv, pod2);
}
