//! Starting against an etcd that is not up yet (KEP-4568's start-up case).
//!
//! [`open_storage_resilient`] opens the backend like
//! [`open_storage`]; when etcd does not answer, it returns a
//! [`LazyStorage`] instead of failing: every call answers `Unavailable`
//! (HTTP 503 / a failing `/readyz` `etcd` check / caches that keep retrying
//! and answer 429) until a background task has connected, then everything
//! goes to the real [`EtcdStorage`]. kube-apiserver likewise starts and
//! serves health endpoints while its etcd client keeps dialing.

use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use anyhow::Context;
use bytes::Bytes;
use rkube_storage::etcd::EtcdStorage;
use rkube_storage::{KeyValue, RangeRequest, RangeResponse, Result, Revision, Storage, StorageError, Watch};

/// Longest wait of one connection attempt.
pub const CONNECT_ATTEMPT: Duration = Duration::from_secs(2);
/// Pause between attempts.
pub const RETRY: Duration = Duration::from_millis(500);

/// Storage that becomes the etcd backend once etcd answers (see the module docs).
pub struct LazyStorage {
    inner: Arc<OnceLock<EtcdStorage>>,
    endpoints: Vec<String>,
    task: tokio::task::AbortHandle,
}

impl Drop for LazyStorage {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl LazyStorage {
    /// Starts connecting to `endpoints` in the background (needs a tokio runtime).
    pub fn connect_in_background(endpoints: Vec<String>) -> LazyStorage {
        let inner: Arc<OnceLock<EtcdStorage>> = Arc::new(OnceLock::new());
        let cell = inner.clone();
        let eps = endpoints.clone();
        let task = tokio::spawn(async move {
            loop {
                match tokio::time::timeout(CONNECT_ATTEMPT, EtcdStorage::connect(&eps)).await {
                    Ok(Ok(s)) => {
                        tracing::info!(endpoints = ?eps, version = s.server_version(), "connected to etcd");
                        let _ = cell.set(s);
                        return;
                    }
                    Ok(Err(e)) => tracing::debug!(error = %e, "etcd not reachable yet"),
                    Err(_) => tracing::debug!("etcd connection attempt timed out"),
                }
                tokio::time::sleep(RETRY).await;
            }
        })
        .abort_handle();
        LazyStorage { inner, endpoints, task }
    }

    /// True once connected.
    pub fn connected(&self) -> bool {
        self.inner.get().is_some()
    }

    fn get_inner(&self) -> Result<&EtcdStorage> {
        self.inner
            .get()
            .ok_or_else(|| StorageError::Unavailable(format!("etcd at {:?} is not reachable yet", self.endpoints)))
    }
}

#[async_trait::async_trait]
impl Storage for LazyStorage {
    fn backend_name(&self) -> &'static str {
        "etcd"
    }
    async fn get(&self, key: &str) -> Result<Option<KeyValue>> {
        self.get_inner()?.get(key).await
    }
    async fn range(&self, req: RangeRequest) -> Result<RangeResponse> {
        self.get_inner()?.range(req).await
    }
    async fn create(&self, key: &str, value: Bytes) -> Result<KeyValue> {
        self.get_inner()?.create(key, value).await
    }
    async fn update(&self, key: &str, value: Bytes, expected_mod_revision: Revision) -> Result<KeyValue> {
        self.get_inner()?.update(key, value, expected_mod_revision).await
    }
    async fn delete(&self, key: &str, expected_mod_revision: Option<Revision>) -> Result<(KeyValue, Revision)> {
        self.get_inner()?.delete(key, expected_mod_revision).await
    }
    async fn watch(&self, prefix: &str, after_revision: Revision) -> Result<Watch> {
        self.get_inner()?.watch(prefix, after_revision).await
    }
    async fn current_revision(&self) -> Result<Revision> {
        self.get_inner()?.current_revision().await
    }
    async fn compacted_revision(&self) -> Result<Revision> {
        self.get_inner()?.compacted_revision().await
    }
    async fn compact(&self, revision: Revision) -> Result<()> {
        self.get_inner()?.compact(revision).await
    }
    fn progress_notify_reliable(&self) -> bool {
        self.inner.get().is_some_and(|s| s.progress_notify_reliable())
    }
}

/// Opens the backend `--storage-backend` names; an etcd that does not
/// answer within [`CONNECT_ATTEMPT`] gives a [`LazyStorage`] (logged) instead of an error.
pub async fn open_storage_resilient(
    backend: &str,
    data_dir: &Path,
    etcd_servers: &[String],
) -> anyhow::Result<Arc<dyn Storage>> {
    if matches!(backend, "etcd3" | "etcd") && !etcd_servers.is_empty() {
        match tokio::time::timeout(CONNECT_ATTEMPT, EtcdStorage::connect(etcd_servers)).await {
            Ok(Ok(s)) => return Ok(Arc::new(s)),
            Ok(Err(e)) => tracing::warn!(error = %e, "etcd is not reachable; serving while connecting in the background"),
            Err(_) => tracing::warn!("etcd did not answer in time; serving while connecting in the background"),
        }
        return Ok(Arc::new(LazyStorage::connect_in_background(etcd_servers.to_vec())));
    }
    open_storage(backend, data_dir, etcd_servers).await
}

/// Errors opening the storage backend the command-line flags name.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// `--storage-backend` names no backend.
    #[error("unknown --storage-backend {0:?}: use embedded or etcd3")]
    UnknownBackend(String),
    /// `--storage-backend=etcd3` without `--etcd-servers`.
    #[error("--etcd-servers must be set with --storage-backend=etcd3")]
    NoEtcdServers,
}

/// Opens the storage backend the flags name.
pub async fn open_storage(backend: &str, data_dir: &Path, etcd_servers: &[String]) -> anyhow::Result<Arc<dyn Storage>> {
    match backend {
        "embedded" => {
            std::fs::create_dir_all(data_dir).with_context(|| format!("creating data dir {}", data_dir.display()))?;
            let store = rkube_storage::embedded::EmbeddedStorage::open(data_dir)
                .with_context(|| format!("opening the embedded store in {}", data_dir.display()))?;
            Ok(Arc::new(store))
        }
        "etcd3" | "etcd" => {
            if etcd_servers.is_empty() {
                return Err(CliError::NoEtcdServers.into());
            }
            let store = rkube_storage::etcd::EtcdStorage::connect(etcd_servers)
                .await
                .with_context(|| format!("connecting to etcd at {}", etcd_servers.join(",")))?;
            Ok(Arc::new(store))
        }
        other => Err(CliError::UnknownBackend(other.to_string()).into()),
    }
}
