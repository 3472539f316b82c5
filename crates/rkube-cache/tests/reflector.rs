//! The reflector on real storage: re-initialization after a broken storage
//! watch, on the embedded store and on a real etcd, with readers checking
//! that every LIST they get is a state storage really had.

use crate::common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use futures::StreamExt;
use rkube_api::list_options::ListOptions;
use rkube_cache::{CacheError, Cacher, ReadyState, ServedFrom};

fn opts(q: &str) -> ListOptions {
    ListOptions::from_query(q).unwrap()
}

#[tokio::test]
async fn reflector_reinitializes_after_broken_watch_without_torn_view() {
    reinit_case(embedded()).await;
}

#[tokio::test]
async fn reflector_reinitializes_after_broken_watch_without_torn_view_on_etcd() {
    reinit_case(etcd().await).await;
}

async fn reinit_case(b: Backend) {
    let real = b.storage.clone();
    for i in 0..20 {
        create(real.as_ref(), "ns", &format!("p{i:02}"), "n1").await;
    }
    let faulty = Faulty::new(real.clone());
    let mut config = pod_config();
    config.tuning.initial_backoff = Duration::from_millis(50);
    let cacher = Cacher::new(faulty.clone(), config);
    wait_for(&cacher, real.current_revision().await.unwrap()).await;
    let mut watch = cacher.watch(None, &opts("watch=true&resourceVersion=0")).await.unwrap();

    // Readers: every cache LIST must equal storage at the list's revision.
    let stop = Arc::new(AtomicBool::new(false));
    let checked = Arc::new(AtomicUsize::new(0));
    let refused = Arc::new(AtomicUsize::new(0));
    let reader = {
        let (cacher, real, stop, checked, refused) =
            (cacher.clone(), real.clone(), stop.clone(), checked.clone(), refused.clone());
        tokio::spawn(async move {
            while !stop.load(Ordering::SeqCst) {
                match cacher.list(None, &opts("resourceVersion=0")).await {
                    Ok(r) => {
                        assert_eq!(r.served_from, ServedFrom::Cache);
                        assert_eq!(list_state(&r), storage_state(real.as_ref(), r.resource_version).await, "torn view at {}", r.resource_version);
                        checked.fetch_add(1, Ordering::SeqCst);
                    }
                    Err(CacheError::NotReady { .. }) => {
                        refused.fetch_add(1, Ordering::SeqCst);
                    }
                    Err(e) => panic!("unexpected list error {e}"),
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        })
    };

    // Break the watch while writes keep coming; hold the re-list so the
    // cache is seen re-initializing.
    faulty.hold_lists(true);
    faulty.break_watches();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while cacher.ready_state().is_ready() {
        assert!(tokio::time::Instant::now() < deadline, "never noticed the broken watch");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(matches!(cacher.ready_state(), ReadyState::Reinitializing { .. }));
    let err = cacher.watch(None, &opts("watch=true&resourceVersion=0")).await.unwrap_err();
    assert!(matches!(err, CacheError::NotReady { .. }), "{err:?}");
    for i in 0..10 {
        update(real.as_ref(), "ns", &format!("p{i:02}"), "n2", "after").await;
    }
    delete(real.as_ref(), "ns", "p19").await;
    // The old watch was closed when the cache went unready.
    let mut seen = 0;
    while tokio::time::timeout(Duration::from_secs(5), watch.next()).await.expect("old watch must end").is_some() {
        seen += 1;
    }
    assert_eq!(seen, 20, "only the initial events were delivered before the break");
    tokio::time::sleep(Duration::from_millis(50)).await;
    faulty.hold_lists(false);
    let want_rv = real.current_revision().await.unwrap();
    wait_for(&cacher, want_rv).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    stop.store(true, Ordering::SeqCst);
    reader.await.expect("reader saw only consistent states");

    let r = cacher.list(None, &opts("resourceVersion=0")).await.unwrap();
    assert_eq!(list_state(&r), storage_state(real.as_ref(), r.resource_version).await);
    assert_eq!(r.items.len(), 19);
    assert!(checked.load(Ordering::SeqCst) > 0 && refused.load(Ordering::SeqCst) > 0);
    // A new watch after re-initialization follows new writes.
    let mut w = cacher.watch(None, &opts(&format!("watch=true&resourceVersion={}", r.resource_version))).await.unwrap();
    let rv = create(real.as_ref(), "ns", "late", "n1").await.mod_revision;
    let ev = tokio::time::timeout(Duration::from_secs(5), w.next()).await.unwrap().unwrap();
    assert_eq!((ev.type_name(), ev.resource_version()), ("ADDED", Some(rv)));
}
