//! A full disk under the embedded store, as a client sees it (issue 13,
//! item 3): a real `apiserver` process (same flags as `rkube apiserver`)
//! with its data dir on a small tmpfs the test mounts and unmounts (root;
//! skipped with a message when it cannot mount). Writes that fail for lack
//! of space get 503 `ServiceUnavailable` with `Retry-After` naming the
//! cause, reads go on, `/readyz` fails its `etcd` check while `/livez`
//! stays up, and after the space is freed writes succeed again with no
//! restart and no acknowledged object lost.
//!
//! Reads are served from storage (`--watch-cache=false`), so "reads go on"
//! is the store's own doing, not the watch cache's.

use crate::cache_support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use cache_support::Apiserver;
use rkube_storage::testing::Tmpfs;
use rkube_storage::Storage;
use serde_json::{json, Value};

const CM: &str = "/api/v1/namespaces/default/configmaps";

fn configmap(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": "x".repeat(8 << 10)}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_disk_gives_503_naming_the_cause_fails_readyz_and_recovers_without_restart() {
    let fs = match Tmpfs::mount(24 << 20) {
        Ok(fs) => fs,
        Err(why) => {
            eprintln!("SKIPPED: cannot mount a tmpfs for the disk-full test: {why}");
            return;
        }
    };
    let data = fs.path().join("data");
    let mut acked = BTreeMap::new();
    {
        let s = Apiserver::spawn_in(Some(&data), &["--watch-cache=false"], &[]);
        s.api.wait_ready(30).await;
        for i in 0..10 {
            let name = format!("before-{i:02}");
            acked.insert(name.clone(), s.api.create(CM, &configmap(&name)).await.rv());
        }
        fs.fill().expect("fill the tmpfs");

        // Creates until one fails (redb may place a few in free pages of its file).
        let mut refused = None;
        for i in 0..5000 {
            let name = format!("full-{i:04}");
            let r = s.api.send("POST", CM, Some(&configmap(&name))).await;
            if r.code == 201 {
                acked.insert(name, r.rv());
            } else {
                refused = Some(r);
                break;
            }
        }
        let r = refused.expect("a create failed on the full disk");
        assert_eq!((r.code, r.reason()), (503, "ServiceUnavailable"), "{}", r.text);
        assert_eq!(r.body["kind"], "Status");
        assert_eq!(r.body["details"]["retryAfterSeconds"], 1, "{}", r.text);
        assert_eq!(r.retry_after(), Some(1));
        let message = r.body["message"].as_str().unwrap_or("");
        let db = data.join("rkube.redb");
        assert!(
            message.starts_with(&format!("storage write failed: embedded store {}: ", db.display()))
                && message.contains("No space left on device (os error 28)")
                && message.ends_with("; nothing was written"),
            "{message}"
        );

        // Reads go on; readiness fails on its storage check, liveness does not.
        let list = s.api.get(CM).await;
        assert_eq!(list.code, 200, "{}", list.text);
        assert_eq!(list.names().len(), acked.len());
        let one = s.api.get(&format!("{CM}/before-00")).await;
        assert_eq!(one.code, 200, "{}", one.text);
        let readyz = s.api.get("/readyz?verbose").await;
        assert_eq!(readyz.code, 500, "{}", readyz.text);
        assert!(readyz.text.contains("[-]etcd failed: reason withheld\n"), "{}", readyz.text);
        let etcd = s.api.get("/readyz/etcd").await;
        assert_eq!(etcd.code, 500);
        assert!(
            etcd.text.starts_with("internal server error: embedded store ")
                && etcd.text.contains("No space left on device"),
            "{}",
            etcd.text
        );
        assert_eq!(s.api.get("/livez").await.code, 200);
        assert_eq!(s.api.get("/livez/etcd").await.code, 200);

        // Space back: /readyz recovers by itself and writes succeed, same process.
        fs.free().expect("free the tmpfs");
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let r = s.api.get("/readyz").await;
            if r.code == 200 {
                break;
            }
            assert!(Instant::now() < deadline, "/readyz did not recover: {}", r.text);
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        for i in 0..10 {
            let name = format!("after-{i:02}");
            acked.insert(name.clone(), s.api.create(CM, &configmap(&name)).await.rv());
        }
    }

    // The server is gone (killed by PID on drop): every acknowledged object is in the store.
    let store = rkube_storage::embedded::EmbeddedStorage::open(&data).expect("reopen the store");
    let prefix = "/registry/configmaps/default/";
    let stored: BTreeMap<String, i64> = store
        .range(rkube_storage::RangeRequest::prefix(prefix))
        .await
        .expect("range")
        .kvs
        .into_iter()
        .map(|kv| (kv.key.trim_start_matches(prefix).to_string(), kv.mod_revision))
        .collect();
    assert_eq!(stored, acked);
}
