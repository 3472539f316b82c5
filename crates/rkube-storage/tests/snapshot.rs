//! `rkube snapshot save | restore | check` on the embedded store (issue 13,
//! item 4): a save while writes go on is consistent at one revision and
//! holds every write acknowledged before it; a restore keeps that revision;
//! a restore never silently replaces a store, never one a server has open,
//! and never sends resourceVersions backwards.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use rkube_storage::embedded::{snapshot, EmbeddedStorage, DB_FILE, MARKER_FILE};
use rkube_storage::{RangeRequest, Revision, Storage, StorageError};

const PREFIX: &str = "/registry/configmaps/default/";

async fn contents(s: &EmbeddedStorage) -> BTreeMap<String, Revision> {
    let all = s.range(RangeRequest::prefix(PREFIX)).await.unwrap();
    all.kvs.into_iter().map(|kv| (kv.key, kv.mod_revision)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn save_under_writes_then_restore_has_every_acknowledged_object_at_the_saved_revision() {
    let dir = tempfile::tempdir().unwrap();
    let (live, restored, file) = (dir.path().join("live"), dir.path().join("restored"), dir.path().join("snap.db"));
    let s = Arc::new(EmbeddedStorage::open(&live).unwrap());
    let acked = Arc::new(Mutex::new(BTreeMap::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let (s, acked, stop) = (s.clone(), acked.clone(), stop.clone());
            tokio::spawn(async move {
                let mut i = 0;
                while !stop.load(Ordering::Relaxed) {
                    let key = format!("{PREFIX}w{w}-{i:05}");
                    let kv = s.create(&key, Bytes::from(format!("{{\"i\":{i}}}"))).await.unwrap();
                    acked.lock().unwrap().insert(key, kv.mod_revision);
                    i += 1;
                }
            })
        })
        .collect();
    while acked.lock().unwrap().len() < 200 {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let before_save = acked.lock().unwrap().clone();
    let status = {
        let (live, file) = (live.clone(), file.clone());
        tokio::task::spawn_blocking(move || snapshot::save(&live, &file)).await.unwrap().unwrap()
    };
    let mid_writes = acked.lock().unwrap().len();
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.await.unwrap();
    }
    let acked = acked.lock().unwrap().clone();
    assert!(acked.len() > before_save.len(), "no write ran during the save ({mid_writes} acked)");
    assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o600);
    assert!(!dir.path().join("snap.db.part").exists());

    // Consistent at one revision: exactly the writes at or below it.
    let expected: BTreeMap<String, Revision> =
        acked.iter().filter(|(_, rev)| **rev <= status.revision).map(|(k, r)| (k.clone(), *r)).collect();
    for (key, rev) in &before_save {
        assert_eq!(expected.get(key), Some(rev), "{key} acknowledged before the save is missing");
    }
    assert_eq!(status.keys as usize, expected.len());
    assert_eq!(snapshot::check(&file).unwrap(), status);

    let restored_status = snapshot::restore(&file, &restored, false).unwrap();
    assert_eq!(restored_status.revision, status.revision);
    let r = EmbeddedStorage::open(&restored).unwrap();
    assert_eq!(r.current_revision().await.unwrap(), status.revision);
    assert_eq!(contents(&r).await, expected);
    assert!(restored.join(MARKER_FILE).exists());
    assert_eq!(std::fs::metadata(&restored).unwrap().permissions().mode() & 0o777, 0o700);
    assert_eq!(std::fs::metadata(restored.join(DB_FILE)).unwrap().permissions().mode() & 0o777, 0o600);
    let next = r.create(&format!("{PREFIX}after-restore"), Bytes::from_static(b"{}")).await.unwrap();
    assert_eq!(next.mod_revision, status.revision + 1);
}

use std::os::unix::fs::PermissionsExt;

#[tokio::test]
async fn restore_refuses_an_existing_store_without_overwrite_and_a_store_a_server_has_open() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b, file) = (dir.path().join("a"), dir.path().join("b"), dir.path().join("snap.db"));
    let s = EmbeddedStorage::open(&a).unwrap();
    s.create(&format!("{PREFIX}x"), Bytes::from_static(b"{}")).await.unwrap();
    snapshot::save(&a, &file).unwrap();
    {
        let other = EmbeddedStorage::open(&b).unwrap();
        other.create(&format!("{PREFIX}y"), Bytes::from_static(b"{}")).await.unwrap();
        let err = snapshot::restore(&file, &b, true).unwrap_err();
        assert!(matches!(err, StorageError::Unavailable(_)), "{err:?}");
        assert!(err.to_string().ends_with("is already open: stop the server before restoring"), "{err}");
    }
    let err = snapshot::restore(&file, &b, false).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "storage internal error: {} already holds a store (revision 2); pass --overwrite to replace it with the snapshot",
            b.join(DB_FILE).display()
        )
    );
    let other = EmbeddedStorage::open(&b).unwrap();
    assert_eq!(contents(&other).await.into_keys().collect::<Vec<_>>(), [format!("{PREFIX}y")]);
}

#[tokio::test]
async fn restore_over_a_newer_store_keeps_its_revision_and_marks_it_compacted() {
    let dir = tempfile::tempdir().unwrap();
    let (data, file) = (dir.path().join("data"), dir.path().join("snap.db"));
    let saved_rev = {
        let s = EmbeddedStorage::open(&data).unwrap();
        s.create(&format!("{PREFIX}old"), Bytes::from_static(b"{}")).await.unwrap();
        snapshot::save(&data, &file).unwrap();
        for i in 0..5 {
            s.create(&format!("{PREFIX}new-{i}"), Bytes::from_static(b"{}")).await.unwrap();
        }
        assert_eq!(s.current_revision().await.unwrap(), 7);
        snapshot::check(&file).unwrap().revision
    };
    assert_eq!(saved_rev, 2);
    let status = snapshot::restore(&file, &data, true).unwrap();
    assert_eq!((status.revision, status.compacted_revision, status.keys), (7, 7, 1));
    let s = EmbeddedStorage::open(&data).unwrap();
    assert_eq!(s.current_revision().await.unwrap(), 7);
    let err = s.watch(PREFIX, 3).await.unwrap_err();
    assert_eq!(err, StorageError::Compacted { requested: 3, compacted: 7 });
    assert_eq!(contents(&s).await, BTreeMap::from([(format!("{PREFIX}old"), 2)]));
    assert_eq!(s.create(&format!("{PREFIX}next"), Bytes::from_static(b"{}")).await.unwrap().mod_revision, 8);
}

#[test]
fn check_rejects_missing_empty_and_foreign_files() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.db");
    assert_eq!(
        snapshot::check(&missing).unwrap_err().to_string(),
        format!("storage internal error: {}: no such file", missing.display())
    );
    let empty = dir.path().join("empty.db");
    std::fs::write(&empty, b"").unwrap();
    assert_eq!(
        snapshot::check(&empty).unwrap_err().to_string(),
        format!("storage internal error: {}: the file is empty (0 bytes), not an rkube store", empty.display())
    );
    let garbage = dir.path().join("garbage.db");
    std::fs::write(&garbage, vec![7u8; 10_000]).unwrap();
    let err = snapshot::check(&garbage).unwrap_err().to_string();
    assert!(
        err.starts_with(&format!("storage internal error: {}: not a readable redb file: ", garbage.display())),
        "{err}"
    );
}

#[tokio::test]
async fn check_rejects_a_snapshot_with_damaged_pages() {
    let dir = tempfile::tempdir().unwrap();
    let (data, file) = (dir.path().join("data"), dir.path().join("snap.db"));
    let s = EmbeddedStorage::open(&data).unwrap();
    for i in 0..200 {
        s.create(&format!("{PREFIX}cm-{i:03}"), Bytes::from(format!("{{\"i\":{i},\"pad\":\"{}\"}}", "p".repeat(500))))
            .await
            .unwrap();
    }
    snapshot::save(&data, &file).unwrap();
    let mut bytes = std::fs::read(&file).unwrap();
    let damaged: Vec<usize> = (0..bytes.len()).filter(|i| bytes[*i] == b'p').step_by(97).collect();
    assert!(!damaged.is_empty());
    for i in damaged {
        bytes[i] = b'q';
    }
    std::fs::write(&file, &bytes).unwrap();
    let err = snapshot::check(&file).unwrap_err().to_string();
    assert!(err.starts_with(&format!("storage internal error: {}: integrity check failed: ", file.display())), "{err}");
}
