//! The `storage-readiness` post-start hook (KEP-4568, gate
//! `WatchCacheInitializationPostStartHook`; upstream
//! `staging/src/k8s.io/apiserver/pkg/storage/cacher/ready.go` and the
//! `StorageReadinessHook` of `pkg/server/storage_readiness_hook.go`).
//!
//! `/readyz` reports `poststarthook/storage-readiness` failing until every
//! enabled cache has been ready, or until `--storage-initialization-timeout`
//! passed (then it logs a warning and passes). Once passed it never fails
//! again: a later re-initialization of one cache shows up only as 429s for
//! that resource. Like upstream's hook, it polls every [`POLL`].
//!
//! ```text
//! waiting ──every cache ready──▶ passed (forever)
//!    └────timeout (warning)─────▶ passed
//! ```

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;

use crate::layer::Caches;

/// Poll period of the hook (upstream: 100 ms).
pub const POLL: Duration = Duration::from_millis(100);

/// The hook's state: passed or not (never flips back).
#[derive(Debug, Default)]
pub struct StorageReadiness {
    passed: AtomicBool,
}

impl StorageReadiness {
    /// A hook that has already passed (gate off, or no caches).
    pub fn passed() -> Arc<StorageReadiness> {
        Arc::new(StorageReadiness { passed: AtomicBool::new(true) })
    }

    /// Whether the hook passed.
    pub fn passed_now(&self) -> bool {
        self.passed.load(Ordering::Acquire)
    }
}

/// Which enabled caches are not ready (resource names).
fn not_ready(caches: &Caches) -> Vec<&'static str> {
    caches
        .entries()
        .iter()
        .filter(|e| e.enabled() && !e.cacher.ready_state().is_ready())
        .map(|e| e.info.resource)
        .collect()
}

/// Starts the hook: passes once every enabled cache is ready, or after `timeout`.
pub fn spawn_hook(caches: Arc<Caches>, timeout: Duration) -> (Arc<StorageReadiness>, JoinHandle<()>) {
    let state = Arc::new(StorageReadiness::default());
    let out = state.clone();
    let task = tokio::spawn(async move {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let waiting = not_ready(&caches);
            if waiting.is_empty() {
                tracing::info!("Storage is ready for all registered resources");
                break;
            }
            if tokio::time::Instant::now() >= deadline {
                tracing::warn!(
                    not_ready = ?waiting,
                    timeout_secs = timeout.as_secs_f64(),
                    "Deadline exceeded while waiting for storage readiness... ignoring"
                );
                break;
            }
            tokio::time::sleep(POLL).await;
        }
        state.passed.store(true, Ordering::Release);
    });
    (out, task)
}
