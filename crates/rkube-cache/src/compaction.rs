//! The watch caches' side of storage compaction (KEP-4988; upstream
//! `staging/src/k8s.io/apiserver/pkg/storage/cacher/compactor.go`): every
//! server with a watch cache watches `compact_rev_key` (written by
//! [`rkube_storage::compactor`]) and tells every cache the compacted revision
//! ([`Caches::on_compaction`]): snapshots below it are dropped, so Exact /
//! continue LISTs below it go to storage and get 410 `Expired`, and WATCHes
//! from below it get an `ERROR` 410 ([`crate::layer`]).

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use rkube_storage::etcd::COMPACT_REV_KEY;
use rkube_storage::{EventKind, Revision, Storage, StorageError, WatchResponse};
use tokio::task::JoinHandle;

use crate::backoff::Backoff;
use crate::layer::Caches;

/// The revision a `compact_rev_key` value names (0 when unparsable).
fn parse_value(v: &[u8]) -> Revision {
    std::str::from_utf8(v).ok().and_then(|s| s.trim().parse().ok()).unwrap_or(0)
}

/// Watches `compact_rev_key` and tells `caches` every compaction (until aborted).
/// Re-opens the watch after a failure ([`Backoff`]: 1 s doubling to 30 s, with jitter).
pub fn spawn_compaction_watch(storage: Arc<dyn Storage>, caches: Arc<Caches>) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(30));
        loop {
            match follow(storage.as_ref(), &caches).await {
                Ok(()) => backoff.reset(),
                Err(e) => tracing::debug!(error = %e, "compact_rev_key watch ended"),
            }
            tokio::time::sleep(backoff.next_delay()).await;
        }
    })
}

/// Reads the key, then follows its changes until the watch ends.
async fn follow(storage: &dyn Storage, caches: &Caches) -> Result<(), StorageError> {
    let after = match storage.get(COMPACT_REV_KEY).await? {
        Some(kv) => {
            caches.on_compaction(parse_value(&kv.value));
            kv.mod_revision
        }
        None => storage.current_revision().await?,
    };
    let watch = storage.watch(COMPACT_REV_KEY, after).await?;
    let mut stream = watch.stream;
    while let Some(msg) = stream.next().await {
        if let WatchResponse::Events(events) = msg? {
            for ev in events.iter().filter(|e| e.kind == EventKind::Put && e.kv.key == COMPACT_REV_KEY) {
                let rev = parse_value(&ev.kv.value);
                if rev > 0 {
                    tracing::debug!(revision = rev, "storage compacted; dropping older snapshots");
                }
                caches.on_compaction(rev);
            }
        }
    }
    Ok(())
}
