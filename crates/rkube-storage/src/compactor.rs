//! Storage compaction shared by every API server on one storage (upstream
//! `staging/src/k8s.io/apiserver/pkg/storage/etcd3/compact.go`).
//!
//! Every `--etcd-compaction-interval` each server tries a compare-and-swap on
//! the key [`COMPACT_REV_KEY`], guarded by the key's state it saw last time,
//! and writes the revision it recorded in the previous round. Exactly one
//! server wins a round (the others' guards fail because the key changed); the
//! winner compacts storage to that revision, so history is kept for at least
//! one interval. Each round also records the current revision for the next one.
//!
//! ```text
//! round k:  CAS(compact_rev_key unchanged since I last saw it) put(rev_{k-1})
//!           won  → compact(rev_{k-1})   (nothing in the first round: rev_0 = 0)
//!           lost → learn the key's state; no compaction
//!           rev_k := current revision
//! ```
//!
//! Upstream guards on the key's `version`; the [`Storage`] trait guards
//! writes on `mod_revision`, which changes on exactly the same writes, so
//! the outcome is the same (and both kinds of servers interoperate on one etcd).
//! The guard for "absent" is [`Storage::create`]. The watch caches learn
//! each compaction by watching the key (`rkube_cache::compaction`).

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;

use crate::etcd::COMPACT_REV_KEY;
use crate::{Revision, Storage, StorageError};

/// Errors of one compaction round.
#[derive(Debug, thiserror::Error)]
pub enum CompactionError {
    /// Storage failed.
    #[error("compaction: {0}")]
    Storage(#[from] StorageError),
}

/// What one server remembers between rounds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CompactorState {
    /// `mod_revision` of `compact_rev_key` when last seen (0: absent / never seen).
    pub seen: Revision,
    /// The revision recorded last round: what the next winner compacts to.
    pub rev: Revision,
}

/// The outcome of one round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Round {
    /// This server won the compare-and-swap and compacted storage to the revision.
    Compacted(Revision),
    /// This server won the first round: it recorded a revision, nothing to compact yet.
    Recorded,
    /// Another server wrote the key since this one last saw it.
    Lost,
}

fn decimal(rev: Revision) -> bytes::Bytes {
    bytes::Bytes::from(rev.to_string())
}

/// One compaction round (see the module docs); updates `state`.
pub async fn compact_once(storage: &dyn Storage, state: &mut CompactorState) -> Result<Round, CompactionError> {
    let attempt = if state.seen == 0 {
        storage.create(COMPACT_REV_KEY, decimal(state.rev)).await
    } else {
        storage.update(COMPACT_REV_KEY, decimal(state.rev), state.seen).await
    };
    let won = match attempt {
        Ok(kv) => {
            state.seen = kv.mod_revision;
            true
        }
        Err(StorageError::AlreadyExists { .. }) | Err(StorageError::Conflict { .. }) | Err(StorageError::NotFound { .. }) => {
            state.seen = storage.get(COMPACT_REV_KEY).await?.map(|kv| kv.mod_revision).unwrap_or(0);
            false
        }
        Err(e) => return Err(e.into()),
    };
    let to_compact = state.rev;
    state.rev = storage.current_revision().await?;
    if !won {
        return Ok(Round::Lost);
    }
    if to_compact == 0 {
        return Ok(Round::Recorded);
    }
    match storage.compact(to_compact).await {
        // Someone compacted further already: nothing lost.
        Ok(()) | Err(StorageError::Compacted { .. }) => Ok(Round::Compacted(to_compact)),
        Err(e) => Err(e.into()),
    }
}

/// Runs a round every `interval` until aborted.
pub fn spawn_compactor(storage: Arc<dyn Storage>, interval: Duration) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut state = CompactorState::default();
        loop {
            tokio::time::sleep(interval).await;
            match compact_once(storage.as_ref(), &mut state).await {
                Ok(Round::Compacted(rev)) => {
                    tracing::info!(revision = rev, "etcd: compacted rev ({rev})");
                }
                Ok(Round::Recorded) => tracing::info!(next = state.rev, "compaction: won compact_rev_key, recorded revision"),
                Ok(Round::Lost) => tracing::info!(next = state.rev, "compaction: another apiserver holds compact_rev_key this round"),
                Err(e) => tracing::warn!(error = %e, "etcd: could not compact"),
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two servers on one store: per round only one wins; the winner
    /// compacts to the revision recorded the round before.
    #[tokio::test]
    async fn compaction_cas_lets_one_server_win_per_round() {
        let dir = tempfile::tempdir().unwrap();
        let storage = crate::embedded::EmbeddedStorage::open(dir.path()).unwrap();
        let (mut a, mut b) = (CompactorState::default(), CompactorState::default());
        storage.create("/registry/x/1", "{}".into()).await.unwrap();
        assert_eq!(compact_once(&storage, &mut a).await.unwrap(), Round::Recorded);
        assert_eq!(compact_once(&storage, &mut b).await.unwrap(), Round::Lost);
        let recorded = a.rev;
        storage.create("/registry/x/2", "{}".into()).await.unwrap();
        // Round 2: a saw the latest key state and wins; b's view is stale.
        assert_eq!(compact_once(&storage, &mut a).await.unwrap(), Round::Compacted(recorded));
        assert_eq!(compact_once(&storage, &mut b).await.unwrap(), Round::Lost);
        assert_eq!(storage.compacted_revision().await.unwrap(), recorded);
        // b learnt the key state: in the next round whoever goes first wins.
        let before = b.rev;
        assert_eq!(compact_once(&storage, &mut b).await.unwrap(), Round::Compacted(before));
        assert_eq!(compact_once(&storage, &mut a).await.unwrap(), Round::Lost);
    }
}
