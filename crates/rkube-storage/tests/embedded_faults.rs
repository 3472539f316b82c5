//! The embedded store under a full disk (issue 13, item 3), on a small
//! tmpfs the test mounts (root) and unmounts: a write that fails for lack of
//! space answers `NoSpace` naming the cause, reads keep working,
//! `write_health` reports the fault, writes resume without a reopen by the
//! caller once space is freed, and no acknowledged write is lost.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use bytes::Bytes;
use rkube_storage::embedded::EmbeddedStorage;
use rkube_storage::testing::Tmpfs;
use rkube_storage::{RangeRequest, Storage, StorageError};

const PREFIX: &str = "/registry/configmaps/default/";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_disk_fails_writes_with_no_space_keeps_reads_and_recovers_without_restart() {
    let fs = match Tmpfs::mount(16 << 20) {
        Ok(fs) => fs,
        Err(why) => {
            eprintln!("SKIPPED: cannot mount a tmpfs for the disk-full test: {why}");
            return;
        }
    };
    let data = fs.path().join("data");
    let value = Bytes::from(vec![b'x'; 8 << 10]);
    let mut acked = BTreeMap::new();
    {
        let s = EmbeddedStorage::open(&data).expect("open on tmpfs");
        for i in 0..20 {
            let key = format!("{PREFIX}before-{i:03}");
            acked
                .insert(key.clone(), s.create(&key, value.clone()).await.expect("create before the fill").mod_revision);
        }
        fs.fill().expect("fill the tmpfs");

        // Writes fail (redb may still place a few in free pages of its file).
        let mut failure = None;
        for i in 0..10_000 {
            let key = format!("{PREFIX}full-{i:05}");
            match s.create(&key, value.clone()).await {
                Ok(kv) => {
                    acked.insert(key, kv.mod_revision);
                }
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            }
        }
        let failure = failure.expect("a write failed on the full disk");
        let StorageError::NoSpace(message) = &failure else { panic!("not NoSpace: {failure:?}") };
        assert!(message.contains("No space left on device"), "{message}");
        assert!(message.contains(&data.join("rkube.redb").display().to_string()), "{message}");
        assert!(message.ends_with("nothing was written"), "{message}");

        // Reads keep working; health reports the fault.
        let (first, rev) = acked.iter().next().expect("acked");
        assert_eq!(s.get(first).await.expect("read while full").expect("present").mod_revision, *rev);
        let listed = s.range(RangeRequest::prefix(PREFIX)).await.expect("list while full");
        assert_eq!(listed.kvs.len(), acked.len());
        let health = s.write_health().await.expect_err("unhealthy while full");
        assert!(matches!(health, StorageError::NoSpace(_)), "{health:?}");
        let again = s.create(&format!("{PREFIX}still-full"), value.clone()).await.expect_err("still full");
        assert!(matches!(again, StorageError::NoSpace(_)), "{again:?}");

        // Space back: health recovers within a few probes, writes succeed, no restart.
        fs.free().expect("free the tmpfs");
        let deadline = Instant::now() + Duration::from_secs(10);
        while let Err(e) = s.write_health().await {
            assert!(Instant::now() < deadline, "still unhealthy after space came back: {e}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        for i in 0..20 {
            let key = format!("{PREFIX}after-{i:03}");
            acked.insert(key.clone(), s.create(&key, value.clone()).await.expect("create after freeing").mod_revision);
        }
        let revs: Vec<i64> = acked.values().copied().collect();
        let mut sorted = revs.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), revs.len(), "a revision was handed out twice");
    }

    // Reopened from the file: every acknowledged write is there.
    let s = EmbeddedStorage::open(&data).expect("reopen");
    let stored: BTreeMap<String, i64> = s
        .range(RangeRequest::prefix(PREFIX))
        .await
        .expect("list")
        .kvs
        .into_iter()
        .map(|kv| (kv.key, kv.mod_revision))
        .collect();
    assert_eq!(stored, acked);
}
