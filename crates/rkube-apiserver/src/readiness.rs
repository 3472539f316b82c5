//! Creating the system namespaces when storage is not reachable yet (etcd
//! still starting): [`bootstrap_or_retry`] retries in the background instead
//! of failing the start (upstream does it in a post-start hook too). The
//! `storage-readiness` hook itself lives in `rkube_cache::storage_readiness`.

use std::time::Duration;

use crate::state::ApiState;

/// Retry period of [`bootstrap_or_retry`].
pub const BOOTSTRAP_RETRY: Duration = Duration::from_millis(500);

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
