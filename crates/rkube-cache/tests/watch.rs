//! WATCH served by a cacher over the real embedded store: initial events,
//! history, 410 / 504, WatchList, bookmarks, node routing, slow watchers.

use crate::common;

use std::time::Duration;

use common::*;
use futures::StreamExt;
use rkube_api::list_options::ListOptions;
use rkube_api::status::Status;
use rkube_cache::{CacheError, CacheWatch, Cacher, WatchEvent};

fn opts(q: &str) -> ListOptions {
    ListOptions::from_query(q).unwrap_or_else(|s| panic!("bad query {q}: {}", s.message()))
}

/// The next event within 5 s, as (type, name, resourceVersion).
async fn next(w: &mut CacheWatch) -> Option<(&'static str, String, i64)> {
    let ev = tokio::time::timeout(Duration::from_secs(5), w.next()).await.expect("no event within 5 s")?;
    let name = ev.object().map(|o| o.name.clone()).unwrap_or_default();
    Some((ev.type_name(), name, ev.resource_version().unwrap_or(0)))
}

/// Asserts nothing arrives for 100 ms.
async fn quiet(w: &mut CacheWatch) {
    assert!(tokio::time::timeout(Duration::from_millis(100), w.next()).await.is_err(), "unexpected event");
}

#[tokio::test]
async fn watch_from_rv0_sends_current_state_then_changes() {
    let b = embedded();
    let s = b.storage.as_ref();
    create(s, "ns", "a", "n1").await;
    create(s, "ns", "b", "n1").await;
    let cacher = Cacher::new(b.storage.clone(), pod_config());
    wait_for(&cacher, 0).await;
    for q in ["watch=true&resourceVersion=0", "watch=true"] {
        let mut w = cacher.watch(None, &opts(q)).await.unwrap();
        assert_eq!(next(&mut w).await.unwrap().0, "ADDED", "{q}");
        assert_eq!(next(&mut w).await.unwrap().0, "ADDED", "{q}");
        quiet(&mut w).await;
        let rv = update(s, "ns", "a", "n1", "x").await.mod_revision;
        assert_eq!(next(&mut w).await, Some(("MODIFIED", "a".into(), rv)), "{q}");
    }
}

#[tokio::test]
async fn watch_from_rv_replays_history_after_it() {
    let b = embedded();
    let s = b.storage.as_ref();
    let cacher = Cacher::new(b.storage.clone(), pod_config());
    wait_for(&cacher, 0).await;
    let r1 = create(s, "ns", "a", "n1").await.mod_revision;
    let r2 = update(s, "ns", "a", "n1", "x").await.mod_revision;
    let r3 = delete(s, "ns", "a").await;
    wait_for(&cacher, r3).await;
    let mut w = cacher.watch(None, &opts(&format!("watch=true&resourceVersion={r1}"))).await.unwrap();
    assert_eq!(next(&mut w).await, Some(("MODIFIED", "a".into(), r2)));
    let ev = tokio::time::timeout(Duration::from_secs(5), w.next()).await.unwrap().unwrap();
    let WatchEvent::Deleted(obj) = ev else { panic!("want DELETED, got {ev:?}") };
    let json: serde_json::Value = serde_json::from_slice(&obj.json).unwrap();
    assert_eq!(json["metadata"]["resourceVersion"], r3.to_string(), "DELETED carries the deletion RV");
    assert_eq!(json["metadata"]["labels"]["app"], "x", "DELETED carries the last state");
}

#[tokio::test]
async fn watch_too_old_rv_gets_410() {
    let b = embedded();
    let s = b.storage.as_ref();
    let mut config = pod_config();
    config.history_size = Some(4); // --watch-cache-sizes=pods#4
    let cacher = Cacher::new(b.storage.clone(), config);
    wait_for(&cacher, 0).await;
    let first = create(s, "ns", "a", "n1").await.mod_revision;
    let mut last = first;
    for i in 0..6 {
        last = update(s, "ns", "a", "n1", &format!("v{i}")).await.mod_revision;
    }
    wait_for(&cacher, last).await;
    let mut w = cacher.watch(None, &opts(&format!("watch=true&resourceVersion={first}"))).await.unwrap();
    let ev = w.next().await.expect("an ERROR event");
    let WatchEvent::Error(err) = ev else { panic!("want ERROR, got {ev:?}") };
    let status = Status::from(err);
    assert_eq!((status.code(), status.reason()), (410, "Expired"));
    assert_eq!(status.message(), format!("too old resource version: {first} ({})", last - 4));
    assert!(w.next().await.is_none(), "the stream ends after the error");
    // The wire line a client reads.
    let line = WatchEvent::Error(CacheError::TooOldResourceVersion { requested: 1, oldest: 2 }).to_json_line("Pod", "v1");
    let v: serde_json::Value = serde_json::from_slice(&line).unwrap();
    assert_eq!((v["type"].as_str(), v["object"]["code"].as_u64()), (Some("ERROR"), Some(410)));
}

#[tokio::test]
async fn watch_too_new_rv_times_out_with_504_after_3s() {
    let b = embedded();
    let cacher = Cacher::new(b.storage.clone(), pod_config());
    wait_for(&cacher, 0).await;
    tokio::time::pause();
    let cur = cacher.resource_version();
    let started = tokio::time::Instant::now();
    let err = cacher.watch(None, &opts(&format!("watch=true&resourceVersion={}", cur + 10))).await.unwrap_err();
    let waited = started.elapsed();
    assert!(waited >= Duration::from_secs(3) && waited < Duration::from_secs(4), "waited {waited:?}");
    let status = Status::from(err);
    assert_eq!((status.code(), status.reason(), status.retry_after()), (504, "Timeout", Some(1)));
    let causes = &status.details.as_ref().expect("details").causes;
    assert_eq!(causes[0].reason, "ResourceVersionTooLarge");
}

#[tokio::test]
async fn watch_list_sends_initial_events_then_end_bookmark() {
    let b = embedded();
    let s = b.storage.as_ref();
    create(s, "ns", "a", "n1").await;
    create(s, "ns", "b", "n2").await;
    let cacher = Cacher::new(b.storage.clone(), pod_config());
    wait_for(&cacher, 0).await;
    let q = "watch=true&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan";
    let mut w = cacher.watch(None, &opts(q)).await.unwrap();
    let rv = cacher.resource_version();
    assert_eq!(next(&mut w).await.unwrap().0, "ADDED");
    assert_eq!(next(&mut w).await.unwrap().0, "ADDED");
    let ev = w.next().await.unwrap();
    let WatchEvent::Bookmark(bm) = &ev else { panic!("want BOOKMARK, got {ev:?}") };
    assert!(bm.initial_events_end);
    assert_eq!(bm.resource_version, rv);
    let line: serde_json::Value = serde_json::from_slice(&ev.to_json_line("Pod", "v1")).unwrap();
    assert_eq!(line["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"], "true");
    assert_eq!(line["object"]["metadata"]["resourceVersion"], rv.to_string());
    let r = create(s, "ns", "c", "n1").await.mod_revision;
    assert_eq!(next(&mut w).await, Some(("ADDED", "c".into(), r)));
}

#[tokio::test]
async fn bookmark_sent_two_seconds_before_deadline() {
    let b = embedded();
    let cacher = Cacher::new(b.storage.clone(), pod_config());
    wait_for(&cacher, 0).await;
    tokio::time::pause();
    let started = tokio::time::Instant::now();
    let mut w = cacher.watch(None, &opts("watch=true&resourceVersion=0&allowWatchBookmarks=true&timeoutSeconds=10")).await.unwrap();
    let ev = w.next().await.expect("a bookmark");
    assert!(matches!(ev, WatchEvent::Bookmark(b) if !b.initial_events_end), "{ev:?}");
    let at = started.elapsed();
    // Bookmarks are bucketed by the second, as upstream: "2 s before" within that second.
    assert!(at >= Duration::from_secs(7) && at < Duration::from_secs(9), "bookmark at {at:?}");
    assert!(w.next().await.is_none(), "the watch ends at its deadline");
    assert!(started.elapsed() >= Duration::from_secs(10));
    // Without allowWatchBookmarks, none.
    let mut w = cacher.watch(None, &opts("watch=true&resourceVersion=0&timeoutSeconds=5")).await.unwrap();
    assert!(w.next().await.is_none());
}

#[tokio::test]
async fn node_watcher_receives_only_its_pods_events_including_move_off() {
    let b = embedded();
    let s = b.storage.as_ref();
    let cacher = Cacher::new(b.storage.clone(), pod_config());
    wait_for(&cacher, 0).await;
    let rv = cacher.resource_version();
    let mut n1 = cacher.watch(None, &opts(&format!("watch=true&resourceVersion={rv}&fieldSelector=spec.nodeName%3Dn1"))).await.unwrap();
    let mut all = cacher.watch(None, &opts(&format!("watch=true&resourceVersion={rv}"))).await.unwrap();

    let ra = create(s, "ns", "a", "n1").await.mod_revision;
    let rb = create(s, "ns", "b", "n2").await.mod_revision;
    let ra2 = update(s, "ns", "a", "n1", "v2").await.mod_revision;
    let rb2 = update(s, "ns", "b", "n1", "v2").await.mod_revision; // moves onto n1
    let ra3 = update(s, "ns", "a", "n2", "v3").await.mod_revision; // moves off n1
    let rb3 = delete(s, "ns", "b").await;

    let want_n1 = [
        ("ADDED", "a", ra),
        ("MODIFIED", "a", ra2),
        ("ADDED", "b", rb2),
        ("DELETED", "a", ra3),
        ("DELETED", "b", rb3),
    ];
    for (t, n, r) in want_n1 {
        assert_eq!(next(&mut n1).await, Some((t, n.to_string(), r)));
    }
    quiet(&mut n1).await;
    let want_all = [
        ("ADDED", "a", ra),
        ("ADDED", "b", rb),
        ("MODIFIED", "a", ra2),
        ("MODIFIED", "b", rb2),
        ("MODIFIED", "a", ra3),
        ("DELETED", "b", rb3),
    ];
    for (t, n, r) in want_all {
        assert_eq!(next(&mut all).await, Some((t, n.to_string(), r)));
    }
    // The move-off DELETED carries a's last state on n1 at the move's revision.
    let mut again = cacher.watch(None, &opts(&format!("watch=true&resourceVersion={ra2}&fieldSelector=spec.nodeName%3Dn1"))).await.unwrap();
    let _added_b = again.next().await;
    let WatchEvent::Deleted(obj) = again.next().await.unwrap() else { panic!("want DELETED") };
    let json: serde_json::Value = serde_json::from_slice(&obj.json).unwrap();
    assert_eq!((json["spec"]["nodeName"].as_str(), json["metadata"]["resourceVersion"].as_str()), (Some("n1"), Some(ra3.to_string().as_str())));
}

#[tokio::test]
async fn slow_watcher_terminated_without_delaying_others() {
    let b = embedded();
    let s = b.storage.as_ref();
    let mut config = pod_config();
    config.tuning.watcher_buffer = 4;
    // A generous budget keeps this test about the rule, not the machine's speed:
    // if the dispatcher waited on the slow watcher, the fast one would wait a
    // whole budget (1 s) for some event; scheduling noise stays far below that.
    let budget = Duration::from_secs(1);
    config.tuning.slow_watcher_budget = budget;
    let cacher = Cacher::new(b.storage.clone(), config);
    wait_for(&cacher, 0).await;
    let rv = cacher.resource_version();
    let q = format!("watch=true&resourceVersion={rv}");
    let mut slow = cacher.watch(None, &opts(&q)).await.unwrap(); // never read until the end
    let mut fast = cacher.watch(None, &opts(&q)).await.unwrap();
    assert_eq!(cacher.watcher_count(), 2);

    let n = 40;
    let mut worst = Duration::ZERO;
    for i in 0..n {
        let r = create(s, "ns", &format!("p{i}"), "n1").await.mod_revision;
        // Measured from the acknowledged write, so the store's fsync is not counted.
        let written = tokio::time::Instant::now();
        let got = next(&mut fast).await.unwrap();
        worst = worst.max(written.elapsed());
        assert_eq!(got.2, r);
    }
    assert!(worst < budget, "the fast watcher waited {worst:?} for an event (slow-watcher budget {budget:?})");
    tokio::time::sleep(budget + Duration::from_millis(500)).await;
    assert_eq!(cacher.metrics().terminated_watchers(), 1);
    assert_eq!(cacher.watcher_count(), 1);
    // The slow watcher gets what fit in its buffer, then its stream ends.
    let mut got = 0;
    while tokio::time::timeout(Duration::from_secs(1), slow.next()).await.expect("stream must end").is_some() {
        got += 1;
    }
    assert!(got < n, "terminated watcher received {got} of {n}");
}

#[tokio::test]
async fn disabled_cache_serves_lists_and_watches_from_storage() {
    let b = embedded();
    let s = b.storage.as_ref();
    let r0 = create(s, "ns", "a", "n1").await.mod_revision;
    let mut config = pod_config();
    config.history_size = Some(0); // --watch-cache-sizes=pods#0
    let cacher = Cacher::new(b.storage.clone(), config);
    let r = cacher.list(None, &opts("resourceVersion=0")).await.unwrap();
    assert_eq!((r.served_from, r.items.len()), (rkube_cache::ServedFrom::Storage, 1));
    let mut all = cacher.watch(None, &opts("watch=true&resourceVersion=0")).await.unwrap();
    let mut n2 = cacher.watch(None, &opts(&format!("watch=true&resourceVersion={r0}&fieldSelector=spec.nodeName%3Dn2"))).await.unwrap();
    assert_eq!(next(&mut all).await, Some(("ADDED", "a".into(), r0)));
    let r1 = update(s, "ns", "a", "n2", "x").await.mod_revision;
    let r2 = delete(s, "ns", "a").await;
    assert_eq!(next(&mut all).await, Some(("MODIFIED", "a".into(), r1)));
    assert_eq!(next(&mut all).await, Some(("DELETED", "a".into(), r2)));
    assert_eq!(next(&mut n2).await, Some(("ADDED", "a".into(), r1)));
    assert_eq!(next(&mut n2).await, Some(("DELETED", "a".into(), r2)));
}

/// A cacher of size 0 serves bookmarks from the storage watch: every
/// minute it asks storage for a progress notification and sends it on as
/// a `BOOKMARK` (upstream's etcd3 watcher with progress notify).
#[tokio::test(start_paused = true)]
async fn size_0_cacher_watch_sends_bookmarks_from_storage_progress() {
    let b = embedded();
    let r0 = create(b.storage.as_ref(), "ns", "a", "n1").await.mod_revision;
    let mut config = pod_config();
    config.history_size = Some(0);
    let cacher = Cacher::new(b.storage.clone(), config);
    let q = format!("watch=true&resourceVersion={r0}&allowWatchBookmarks=true");
    let mut w = cacher.watch(None, &opts(&q)).await.unwrap();
    let ev = tokio::time::timeout(Duration::from_secs(90), w.next()).await.expect("a bookmark within 90 s");
    match ev {
        Some(WatchEvent::Bookmark(bm)) => assert_eq!((bm.resource_version, bm.initial_events_end), (r0, false)),
        other => panic!("want BOOKMARK at {r0}, got {other:?}"),
    }
    // Without allowWatchBookmarks: nothing.
    let mut quiet_watch = cacher.watch(None, &opts(&format!("watch=true&resourceVersion={r0}"))).await.unwrap();
    assert!(tokio::time::timeout(Duration::from_secs(90), quiet_watch.next()).await.is_err());
}
