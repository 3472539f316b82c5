//! Start-up readiness (KEP-4568):
//!
//! - the post-start hook `storage-readiness` (gate
//!   `WatchCacheInitializationPostStartHook`): `/readyz` reports
//!   `poststarthook/storage-readiness` failing until every built-in
//!   resource's cache has been ready, or until `--storage-initialization-timeout`
//!   passed (then it logs a warning and passes). Once passed it never fails
//!   again: a later re-initialization of one cache shows up only as 429s for
//!   that resource. Like upstream's `StorageReadinessHook`, the check polls
//!   every 100 ms.
//! - [`bootstrap_or_retry`]: creating the system namespaces when storage is
//!   not reachable yet (etcd still starting) is retried in the background
//!   instead of failing the start (upstream does it in a post-start hook too).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;

use crate::cache_source::Caches;
use crate::state::ApiState;

/// Poll period of the hook (upstream: 100 ms).
pub const POLL: Duration = Duration::from_millis(100);

/// Retry period of [`bootstrap_or_retry`].
pub const BOOTSTRAP_RETRY: Duration = Duration::from_millis(500);

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

/// Creates the system namespaces ([`crate::server::bootstrap`]). When storage
/// is unavailable (HTTP 503 from the storage error), keeps retrying every
/// [`BOOTSTRAP_RETRY`] in the background and returns `Ok` so the server can
/// start serving (and answer `/readyz` honestly) meanwhile. Other errors are returned.
pub async fn bootstrap_or_retry(st: &ApiState) -> Result<(), crate::error::ApiError> {
    match crate::server::bootstrap(st).await {
        Ok(()) => Ok(()),
        Err(e) if e.code() == 503 => {
            tracing::warn!(error = %e, "storage is not reachable yet; creating system namespaces in the background");
            let st = st.clone();
            let mut stop = st.shutdown.subscribe();
            tokio::spawn(async move {
                loop {
                    tokio::select! {
                        _ = tokio::time::sleep(BOOTSTRAP_RETRY) => {}
                        _ = stop.wait_for(|s| *s) => return,
                    }
                    match crate::server::bootstrap(&st).await {
                        Ok(()) => {
                            tracing::info!("system namespaces are in place");
                            return;
                        }
                        Err(e) => tracing::debug!(error = %e, "bootstrap retry failed"),
                    }
                }
            });
            Ok(())
        }
        Err(e) => Err(e),
    }
}
