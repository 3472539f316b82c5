//! The embedded store's files (issue 13, items 4 and 5): the data dir is
//! 0700 and the store files 0600, also when they already existed with wider
//! modes; a data dir that has held a cluster refuses to start on a missing
//! or empty store, saying what it found and how to start anew on purpose.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use bytes::Bytes;
use rkube_storage::embedded::{EmbeddedStorage, DB_FILE, MARKER_FILE};
use rkube_storage::{Storage, StorageError};

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).expect("stat").permissions().mode() & 0o777
}

#[tokio::test]
async fn new_data_dir_is_0700_and_store_files_0600() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let _s = EmbeddedStorage::open(&data).unwrap();
    assert_eq!(mode(&data), 0o700);
    assert_eq!(mode(&data.join(DB_FILE)), 0o600);
    assert_eq!(mode(&data.join(MARKER_FILE)), 0o600);
}

#[tokio::test]
async fn existing_world_readable_data_dir_and_store_are_narrowed_on_open() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    drop(EmbeddedStorage::open(&data).unwrap());
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(data.join(DB_FILE), std::fs::Permissions::from_mode(0o644)).unwrap();
    let _s = EmbeddedStorage::open(&data).unwrap();
    assert_eq!(mode(&data), 0o700);
    assert_eq!(mode(&data.join(DB_FILE)), 0o600);
}

/// Opens, writes one key, closes: the dir has now held a cluster.
async fn used_data_dir(data: &Path) {
    let s = EmbeddedStorage::open(data).unwrap();
    s.create("/registry/configmaps/default/a", Bytes::from_static(b"{}")).await.unwrap();
}

fn refusal(data: &Path, found: &str) -> String {
    let (db, marker) = (data.join(DB_FILE), data.join(MARKER_FILE));
    format!(
        "storage internal error: embedded store {} {found}, but {} says this data dir has held a cluster: starting \
         would serve an empty cluster whose resourceVersions went backwards. Restore a snapshot with `rkube snapshot \
         restore FILE --data-dir {}`, or delete {} to start an empty cluster on purpose",
        db.display(),
        marker.display(),
        data.display(),
        marker.display()
    )
}

#[tokio::test]
async fn missing_store_in_a_data_dir_that_held_a_cluster_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    used_data_dir(&data).await;
    std::fs::remove_file(data.join(DB_FILE)).unwrap();
    let err = EmbeddedStorage::open(&data).unwrap_err();
    assert!(matches!(err, StorageError::Internal(_)), "{err:?}");
    assert_eq!(err.to_string(), refusal(&data, "is missing"));
    assert!(!data.join(DB_FILE).exists(), "the refusal created the store file");
}

#[tokio::test]
async fn empty_store_in_a_data_dir_that_held_a_cluster_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    used_data_dir(&data).await;
    std::fs::write(data.join(DB_FILE), b"").unwrap();
    let err = EmbeddedStorage::open(&data).unwrap_err();
    assert_eq!(err.to_string(), refusal(&data, "is empty (0 bytes)"));
    assert_eq!(std::fs::metadata(data.join(DB_FILE)).unwrap().len(), 0, "the refusal wrote the store file");
}

#[tokio::test]
async fn deleting_the_marker_starts_an_empty_cluster_on_purpose() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    used_data_dir(&data).await;
    std::fs::remove_file(data.join(DB_FILE)).unwrap();
    std::fs::remove_file(data.join(MARKER_FILE)).unwrap();
    let s = EmbeddedStorage::open(&data).unwrap();
    assert_eq!(s.current_revision().await.unwrap(), 1);
    assert!(data.join(MARKER_FILE).exists(), "the new store wrote its marker");
}

#[tokio::test]
async fn store_from_before_the_marker_gets_one_on_open() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    used_data_dir(&data).await;
    std::fs::remove_file(data.join(MARKER_FILE)).unwrap();
    let s = EmbeddedStorage::open(&data).unwrap();
    assert_eq!(s.current_revision().await.unwrap(), 2);
    assert!(data.join(MARKER_FILE).exists());
}
