//! Rules only the embedded backend has: durability across reopen and
//! `kill -9`, the single-open file lock, slow-watcher overflow, and watch
//! replay across pages and across the replay/live boundary.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use rkube_storage::embedded::{EmbeddedOptions, EmbeddedStorage};
use rkube_storage::{EventKind, RangeRequest, Revision, Storage, StorageError, WatchResponse};

const WAIT: Duration = Duration::from_secs(10);
const CHILD_ENV: &str = "RKUBE_STORAGE_KILL9_CHILD_DIR";

fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

/// r1 create a, r2 update a, r3 create b, r4 delete b, compact(r2); reopen; all of it is there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_data_survives_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let (a2, b1, deleted_at) = {
        let s = EmbeddedStorage::open(dir.path()).unwrap();
        let a1 = s.create("/registry/pods/ns/a", b("a1")).await.unwrap();
        let a2 = s.update("/registry/pods/ns/a", b("a2"), a1.mod_revision).await.unwrap();
        let b1 = s.create("/registry/pods/ns/b", b("b1")).await.unwrap();
        let (_, deleted_at) = s.delete("/registry/pods/ns/b", None).await.unwrap();
        s.compact(a2.mod_revision).await.unwrap();
        (a2, b1, deleted_at)
    };
    let s = EmbeddedStorage::open(dir.path()).unwrap();
    assert_eq!(s.current_revision().await.unwrap(), deleted_at);
    assert_eq!(s.compacted_revision().await.unwrap(), a2.mod_revision);
    assert_eq!(s.get("/registry/pods/ns/a").await.unwrap(), Some(a2.clone()));
    assert_eq!(s.get("/registry/pods/ns/b").await.unwrap(), None);
    let at_b1 =
        s.range(RangeRequest { revision: b1.mod_revision, ..RangeRequest::prefix("/registry/pods/") }).await.unwrap();
    assert_eq!(at_b1.kvs, vec![a2.clone(), b1.clone()]);
    let err = s
        .range(RangeRequest { revision: a2.mod_revision - 1, ..RangeRequest::prefix("/registry/pods/") })
        .await
        .unwrap_err();
    assert!(matches!(err, StorageError::Compacted { .. }), "{err:?}");
    // History survives too: a watch from the compacted revision replays r3, r4.
    let mut watch = s.watch("/registry/pods/", a2.mod_revision).await.unwrap();
    let Some(Ok(WatchResponse::Events(events))) = watch.stream.next().await else { panic!("no replay") };
    assert_eq!(
        events.iter().map(|e| (e.kind, e.revision())).collect::<Vec<_>>(),
        [(EventKind::Put, b1.mod_revision), (EventKind::Delete, deleted_at)]
    );
    assert_eq!(events[1].prev_kv, Some(b1));
    // Revisions continue where they stopped.
    let c = s.create("/registry/pods/ns/c", b("c")).await.unwrap();
    assert_eq!(c.mod_revision, deleted_at + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_second_open_of_same_dir_fails_unavailable() {
    let dir = tempfile::tempdir().unwrap();
    let _first = EmbeddedStorage::open(dir.path()).unwrap();
    let err = EmbeddedStorage::open(dir.path()).unwrap_err();
    assert!(matches!(err, StorageError::Unavailable(_)), "{err:?}");
}

/// The writer in the child process of `embedded_acknowledged_writes_survive_kill_9`:
/// 8 concurrent tasks create keys forever, printing `ACK key revision` after each
/// acknowledged create. Does nothing unless started by that test.
#[test]
#[ignore = "child process of embedded_acknowledged_writes_survive_kill_9"]
fn kill9_child_writer() {
    let Ok(dir) = std::env::var(CHILD_ENV) else { return };
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async move {
        let s = std::sync::Arc::new(EmbeddedStorage::open(std::path::Path::new(&dir)).unwrap());
        let tasks: Vec<_> = (0..8)
            .map(|t| {
                let s = s.clone();
                tokio::spawn(async move {
                    for i in 0.. {
                        let key = format!("/registry/pods/ns/t{t}-{i}");
                        let kv = s.create(&key, b("{}")).await.unwrap();
                        println!("ACK {key} {}", kv.mod_revision);
                    }
                })
            })
            .collect();
        for t in tasks {
            let _ = t.await;
        }
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_acknowledged_writes_survive_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    // This test binary holds every file of tests/: the child test's name is its module path.
    let child_test = concat!(module_path!(), "::kill9_child_writer").split_once("::").expect("crate::module").1;
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", child_test, "--ignored", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel::<(String, Revision)>();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let mut parts = line.split_whitespace();
            if parts.next() == Some("ACK") {
                if let (Some(key), Some(Ok(rev))) = (parts.next(), parts.next().map(str::parse::<Revision>)) {
                    if tx.send((key.to_string(), rev)).is_err() {
                        break;
                    }
                }
            }
        }
    });
    let mut acked = Vec::new();
    while acked.len() < 300 {
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(ack) => acked.push(ack),
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("child stopped acknowledging after {} writes: {e}", acked.len());
            }
        }
    }
    // SIGKILL mid-stream: writes are in flight at this instant.
    child.kill().unwrap();
    child.wait().unwrap();
    reader.join().unwrap();
    acked.extend(rx.try_iter());

    let s = EmbeddedStorage::open(dir.path()).unwrap();
    for (key, rev) in &acked {
        let kv = s.get(key).await.unwrap().unwrap_or_else(|| panic!("acknowledged {key} at {rev} lost"));
        assert_eq!(kv.mod_revision, *rev, "{key}");
    }
    let max_acked = acked.iter().map(|(_, r)| *r).max().unwrap();
    assert!(s.current_revision().await.unwrap() >= max_acked);
    // The store is consistent: every revision up to the current one is a key, in order.
    let all = s.range(RangeRequest::prefix("/registry/pods/")).await.unwrap();
    let current = s.current_revision().await.unwrap();
    assert_eq!(all.count, current - 1, "one key per revision after the initial revision 1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_slow_watcher_overflow_ends_stream_with_unavailable() {
    let dir = tempfile::tempdir().unwrap();
    let s = EmbeddedStorage::open_with(dir.path(), EmbeddedOptions { watch_channel_capacity: 2 }).unwrap();
    let mut watch = s.watch("/registry/pods/", 0).await.unwrap();
    // The writer is never blocked by the watcher that does not read.
    for i in 0..5 {
        tokio::time::timeout(WAIT, s.create(&format!("/registry/pods/ns/{i}"), b("x"))).await.unwrap().unwrap();
    }
    let mut delivered = 0;
    let err = loop {
        match tokio::time::timeout(WAIT, watch.stream.next()).await.unwrap() {
            Some(Ok(WatchResponse::Events(events))) => delivered += events.len(),
            Some(Ok(WatchResponse::Progress { .. })) => {}
            Some(Err(e)) => break e,
            None => panic!("stream ended without an error"),
        }
    };
    assert_eq!(delivered, 2, "the queued messages come first");
    assert!(matches!(err, StorageError::Unavailable(ref m) if m.contains("overflowed")), "{err:?}");
    assert!(watch.stream.next().await.is_none(), "the stream ends after the error");
}

/// 2,500 events: replay is read in pages of 1,000, in revision order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_watch_replay_spans_pages_in_revision_order() {
    let dir = tempfile::tempdir().unwrap();
    let s = EmbeddedStorage::open(dir.path()).unwrap();
    let start = s.current_revision().await.unwrap();
    let creates = (0..2500).map(|i| {
        let s = &s;
        async move { s.create(&format!("/registry/pods/ns/{i:05}"), b("x")).await.unwrap() }
    });
    futures::future::join_all(creates).await;
    let end = s.current_revision().await.unwrap();
    assert_eq!(end - start, 2500);
    let mut watch = s.watch("/registry/pods/", start).await.unwrap();
    let mut revisions = Vec::new();
    while revisions.len() < 2500 {
        match tokio::time::timeout(WAIT, watch.stream.next()).await.unwrap() {
            Some(Ok(WatchResponse::Events(events))) => revisions.extend(events.iter().map(|e| e.revision())),
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(revisions, ((start + 1)..=end).collect::<Vec<_>>());
}

/// A watch opened from the past while writes keep landing sees every
/// revision exactly once across the replay → live switch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_watch_replay_to_live_switch_loses_and_repeats_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let s = std::sync::Arc::new(EmbeddedStorage::open(dir.path()).unwrap());
    let start = s.current_revision().await.unwrap();
    for i in 0..50 {
        s.create(&format!("/registry/pods/ns/pre-{i}"), b("x")).await.unwrap();
    }
    let writer = {
        let s = s.clone();
        tokio::spawn(async move {
            for i in 0..200 {
                s.create(&format!("/registry/pods/ns/live-{i}"), b("x")).await.unwrap();
            }
        })
    };
    let mut watch = s.watch("/registry/pods/", start).await.unwrap();
    let mut revisions = Vec::new();
    while revisions.len() < 250 {
        match tokio::time::timeout(WAIT, watch.stream.next()).await.unwrap() {
            Some(Ok(WatchResponse::Events(events))) => revisions.extend(events.iter().map(|e| e.revision())),
            other => panic!("unexpected {other:?}"),
        }
    }
    writer.await.unwrap();
    assert_eq!(revisions, ((start + 1)..=(start + 250)).collect::<Vec<_>>());
}

/// Compaction keeps the newest put at or below the compacted revision and
/// drops deleted keys: a read at the compacted revision is exact.
///
/// r1 a=1, r2 a=2, r3 b=1, r4 delete b, r5 a=3; compact(r4) → read at r4: a=2 only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_compaction_keeps_newest_version_at_compacted_revision() {
    let dir = tempfile::tempdir().unwrap();
    let s = EmbeddedStorage::open(dir.path()).unwrap();
    let a1 = s.create("/registry/pods/ns/a", b("a1")).await.unwrap();
    let a2 = s.update("/registry/pods/ns/a", b("a2"), a1.mod_revision).await.unwrap();
    s.create("/registry/pods/ns/b", b("b1")).await.unwrap();
    let (_, r4) = s.delete("/registry/pods/ns/b", None).await.unwrap();
    let a3 = s.update("/registry/pods/ns/a", b("a3"), a2.mod_revision).await.unwrap();
    s.compact(r4).await.unwrap();
    let at_r4 = s.range(RangeRequest { revision: r4, ..RangeRequest::prefix("/registry/pods/") }).await.unwrap();
    assert_eq!(at_r4.kvs, vec![a2.clone()]);
    let mut watch = s.watch("/registry/pods/", r4).await.unwrap();
    let Some(Ok(WatchResponse::Events(events))) = watch.stream.next().await else { panic!("no replay") };
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].kv, a3);
    assert_eq!(events[0].prev_kv, Some(a2));
    let err = s.compact(r4 + 10).await.unwrap_err();
    assert!(matches!(err, StorageError::FutureRevision { .. }), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_watch_ends_with_unavailable_when_store_closes() {
    let dir = tempfile::tempdir().unwrap();
    let s = EmbeddedStorage::open(dir.path()).unwrap();
    let mut watch = s.watch("/registry/pods/", 0).await.unwrap();
    drop(s);
    let item = tokio::time::timeout(WAIT, watch.stream.next()).await.unwrap();
    assert!(matches!(item, Some(Err(StorageError::Unavailable(_)))), "{item:?}");
    assert!(watch.stream.next().await.is_none());
    // Once the stream is gone too, the directory can be opened again.
    drop(watch);
    EmbeddedStorage::open(dir.path()).unwrap();
}
