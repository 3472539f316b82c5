//! Storage latency: [`InstrumentedStorage`] wraps any [`Storage`] backend and
//! observes every call in `etcd_request_duration_seconds{backend, operation, type}`
//! (upstream `staging/src/k8s.io/apiserver/pkg/storage/etcd3/metrics`), for
//! the embedded store and etcd alike; `backend` is
//! [`Storage::backend_name`].
//!
//! `operation` is one of `get`, `list`, `count` (a count-only range),
//! `create`, `update`, `delete`, `watch` (time to open the watch),
//! `currentRevision`, `compactedRevision`, `compact`. `type` is the resource
//! the key belongs to, found by its storage prefix (`pods`,
//! `deployments.apps`, ...), or `unknown`.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use rkube_storage::{KeyValue, RangeRequest, RangeResponse, Result, Revision, Storage, Watch};

use crate::filters::metrics::ApiserverMetrics;

/// A [`Storage`] that records the latency of every call of `inner`.
pub struct InstrumentedStorage {
    inner: Arc<dyn Storage>,
    metrics: Arc<ApiserverMetrics>,
    /// `(key prefix, type label)`, longest prefix first.
    prefixes: Vec<(String, String)>,
}

impl InstrumentedStorage {
    /// Wraps `inner`; keys start with `etcd_prefix` (`--etcd-prefix`).
    pub fn new(inner: Arc<dyn Storage>, metrics: Arc<ApiserverMetrics>, etcd_prefix: &str) -> Self {
        let mut prefixes: Vec<(String, String)> = rkube_api::registry::stored()
            .map(|info| {
                let ty = if info.group.is_empty() {
                    info.resource.to_string()
                } else {
                    format!("{}.{}", info.resource, info.group)
                };
                (info.list_prefix(etcd_prefix, None), ty)
            })
            .collect();
        prefixes.sort_by_key(|p| std::cmp::Reverse(p.0.len()));
        InstrumentedStorage { inner, metrics, prefixes }
    }

    fn type_of(&self, key: &str) -> &str {
        self.prefixes.iter().find(|(p, _)| key.starts_with(p.as_str())).map(|(_, t)| t.as_str()).unwrap_or("unknown")
    }

    fn observe(&self, op: &str, key: &str, started: Instant) {
        self.metrics.observe_storage(self.inner.backend_name(), op, self.type_of(key), started.elapsed());
    }
}

#[async_trait::async_trait]
impl Storage for InstrumentedStorage {
    fn backend_name(&self) -> &'static str {
        self.inner.backend_name()
    }

    async fn get(&self, key: &str) -> Result<Option<KeyValue>> {
        let t = Instant::now();
        let r = self.inner.get(key).await;
        self.observe("get", key, t);
        r
    }

    async fn range(&self, req: RangeRequest) -> Result<RangeResponse> {
        let t = Instant::now();
        let key = req.start.clone();
        let op = if req.count_only { "count" } else { "list" };
        let r = self.inner.range(req).await;
        self.observe(op, &key, t);
        r
    }

    async fn create(&self, key: &str, value: Bytes) -> Result<KeyValue> {
        let t = Instant::now();
        let r = self.inner.create(key, value).await;
        self.observe("create", key, t);
        r
    }

    async fn update(&self, key: &str, value: Bytes, expected_mod_revision: Revision) -> Result<KeyValue> {
        let t = Instant::now();
        let r = self.inner.update(key, value, expected_mod_revision).await;
        self.observe("update", key, t);
        r
    }

    async fn delete(&self, key: &str, expected_mod_revision: Option<Revision>) -> Result<(KeyValue, Revision)> {
        let t = Instant::now();
        let r = self.inner.delete(key, expected_mod_revision).await;
        self.observe("delete", key, t);
        r
    }

    async fn watch(&self, prefix: &str, after_revision: Revision) -> Result<Watch> {
        let t = Instant::now();
        let r = self.inner.watch(prefix, after_revision).await;
        self.observe("watch", prefix, t);
        r
    }

    async fn current_revision(&self) -> Result<Revision> {
        let t = Instant::now();
        let r = self.inner.current_revision().await;
        self.observe("currentRevision", "", t);
        r
    }

    async fn compacted_revision(&self) -> Result<Revision> {
        let t = Instant::now();
        let r = self.inner.compacted_revision().await;
        self.observe("compactedRevision", "", t);
        r
    }

    async fn compact(&self, revision: Revision) -> Result<()> {
        let t = Instant::now();
        let r = self.inner.compact(revision).await;
        self.observe("compact", "", t);
        r
    }

    fn progress_notify_reliable(&self) -> bool {
        self.inner.progress_notify_reliable()
    }

    async fn write_health(&self) -> Result<()> {
        self.inner.write_health().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn storage_calls_are_observed_per_backend_operation_and_type() {
        let dir = tempfile::tempdir().unwrap();
        let inner: Arc<dyn Storage> = Arc::new(rkube_storage::embedded::EmbeddedStorage::open(dir.path()).unwrap());
        let metrics = Arc::new(ApiserverMetrics::new());
        let s = InstrumentedStorage::new(inner, metrics.clone(), "/registry");
        s.create("/registry/pods/default/web", Bytes::from_static(b"{}")).await.unwrap();
        s.get("/registry/deployments/default/d").await.unwrap();
        s.range(RangeRequest::prefix("/registry/pods/")).await.unwrap();
        let text = metrics.render();
        assert!(text.contains("etcd_request_duration_seconds_count{backend=\"embedded\",operation=\"create\",type=\"pods\"} 1"), "{text}");
        assert!(text.contains("etcd_request_duration_seconds_count{backend=\"embedded\",operation=\"get\",type=\"deployments.apps\"} 1"), "{text}");
        assert!(text.contains("etcd_request_duration_seconds_count{backend=\"embedded\",operation=\"list\",type=\"pods\"} 1"), "{text}");
    }
}
