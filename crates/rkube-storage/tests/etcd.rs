//! Rules only the etcd backend has: the test etcd helper, the server-version
//! check for progress notifications, compaction seen by a second client
//! (several apiservers share one etcd), periodic progress notifications, and
//! what callers see when etcd goes away.

use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use rkube_storage::etcd::{progress_notify_reliable_for, EtcdStorage};
use rkube_storage::testing::{EtcdServer, EtcdServerError};
use rkube_storage::{Storage, StorageError, WatchResponse};

const WAIT: Duration = Duration::from_secs(10);

#[test]
fn test_etcd_missing_binary_is_an_error_not_a_skip() {
    let err = EtcdServer::start_binary("/nonexistent/etcd").unwrap_err();
    assert!(matches!(err, EtcdServerError::Spawn(_)), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_etcd_is_killed_and_cleaned_up_on_drop() {
    let server = EtcdServer::start().unwrap();
    let (pid, dir) = (server.pid(), server.data_dir().to_path_buf());
    assert!(server.endpoint().starts_with("http://127.0.0.1:"));
    assert!(std::path::Path::new(&format!("/proc/{pid}")).exists());
    drop(server);
    // The PID is reaped, so /proc/PID is gone (or reused by an unrelated process: not etcd).
    let cmdline = std::fs::read_to_string(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    assert!(!cmdline.contains("etcd"), "etcd {pid} still running");
    assert!(!dir.exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_progress_notify_reliable_follows_server_version() {
    let server = EtcdServer::start().unwrap();
    let s = EtcdStorage::connect(&[server.endpoint()]).await.unwrap();
    assert!(s.server_version().starts_with("3."), "{}", s.server_version());
    assert_eq!(s.progress_notify_reliable(), progress_notify_reliable_for(s.server_version()));
    if s.server_version() == "3.4.23" {
        assert!(!s.progress_notify_reliable(), "Debian's 3.4.23 has etcd issue 15220");
    }
}

/// Two apiservers on one etcd: a compaction by one is reported by the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_compaction_by_one_client_is_seen_by_another() {
    let server = EtcdServer::start().unwrap();
    let first = EtcdStorage::connect(&[server.endpoint()]).await.unwrap();
    let second = EtcdStorage::connect(&[server.endpoint()]).await.unwrap();
    let a = first.create("/registry/pods/ns/a", Bytes::from_static(b"1")).await.unwrap();
    let a2 = first.update("/registry/pods/ns/a", Bytes::from_static(b"2"), a.mod_revision).await.unwrap();
    assert_eq!(second.compacted_revision().await.unwrap(), 0);
    first.compact(a2.mod_revision).await.unwrap();
    assert_eq!(second.compacted_revision().await.unwrap(), a2.mod_revision);
}

/// The test etcd runs with `--experimental-watch-progress-notify-interval=1s`:
/// an idle watch gets progress notifications without asking.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_idle_watch_gets_periodic_progress() {
    let server = EtcdServer::start().unwrap();
    let s = EtcdStorage::connect(&[server.endpoint()]).await.unwrap();
    let kv = s.create("/registry/pods/ns/a", Bytes::from_static(b"1")).await.unwrap();
    let mut watch = s.watch("/registry/pods/", kv.mod_revision).await.unwrap();
    let item = tokio::time::timeout(WAIT, watch.stream.next()).await.unwrap().unwrap().unwrap();
    assert!(matches!(item, WatchResponse::Progress { revision } if revision >= kv.mod_revision), "{item:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_gone_ends_watch_with_unavailable_and_fails_requests() {
    let server = EtcdServer::start().unwrap();
    let s = EtcdStorage::connect(&[server.endpoint()]).await.unwrap();
    let mut watch = s.watch("/registry/pods/", 0).await.unwrap();
    drop(server);
    let err = loop {
        match tokio::time::timeout(WAIT, watch.stream.next()).await.unwrap() {
            Some(Ok(_)) => continue,
            Some(Err(e)) => break e,
            None => panic!("watch ended without an error"),
        }
    };
    assert!(matches!(err, StorageError::Unavailable(_)), "{err:?}");
    assert!(watch.stream.next().await.is_none());
    let err = tokio::time::timeout(Duration::from_secs(20), s.get("/registry/pods/ns/a")).await.unwrap().unwrap_err();
    assert!(matches!(err, StorageError::Unavailable(_)), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_connect_to_nothing_is_unavailable() {
    // A port nobody listens on: bind, read it, release.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let result =
        tokio::time::timeout(Duration::from_secs(20), EtcdStorage::connect(&[format!("http://127.0.0.1:{port}")]))
            .await
            .unwrap();
    assert!(matches!(result, Err(StorageError::Unavailable(_))), "{result:?}");
}

/// Requested progress is answered at once, not at the next 1 s periodic
/// notification: five requests in a row get five answers well within 2 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_requested_progress_is_answered_promptly() {
    let server = EtcdServer::start().unwrap();
    let s = EtcdStorage::connect(&[server.endpoint()]).await.unwrap();
    let kv = s.create("/registry/pods/ns/a", Bytes::from_static(b"1")).await.unwrap();
    let mut watch = s.watch("/registry/pods/", 0).await.unwrap();
    let started = std::time::Instant::now();
    for _ in 0..5 {
        watch.progress.request_progress();
        let item = tokio::time::timeout(WAIT, watch.stream.next()).await.unwrap().unwrap().unwrap();
        assert!(matches!(item, WatchResponse::Progress { revision } if revision >= kv.mod_revision), "{item:?}");
    }
    assert!(started.elapsed() < Duration::from_secs(2), "took {:?}", started.elapsed());
}
