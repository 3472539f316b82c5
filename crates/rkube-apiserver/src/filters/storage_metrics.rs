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
//! `deployments.apps`, `widgets.example.com`, ...), or `unknown`. The
//! prefixes come from the resource table, built-in rows and rows registered
//! while the server runs (custom resources) alike; they are recomputed when
//! the table's [`rkube_api::registry::generation`] changes.

use std::sync::{Arc, RwLock};
use std::time::Instant;

use bytes::Bytes;
use rkube_storage::{KeyValue, RangeRequest, RangeResponse, Result, Revision, Storage, Watch};

use crate::filters::metrics::ApiserverMetrics;

/// A [`Storage`] that records the latency of every call of `inner`.
pub struct InstrumentedStorage {
    inner: Arc<dyn Storage>,
    metrics: Arc<ApiserverMetrics>,
    /// `--etcd-prefix`.
    etcd_prefix: String,
    /// The table generation the prefixes were computed at, and
    /// `(key prefix, type label)`, longest prefix first.
    prefixes: RwLock<(u64, Vec<(String, String)>)>,
}

/// `(key prefix, type label)` of every row that owns its storage (built-in
/// or registered), longest prefix first.
fn prefixes_of_table(etcd_prefix: &str) -> Vec<(String, String)> {
    let mut prefixes: Vec<(String, String)> = rkube_api::registry::every()
        .into_iter()
        .filter(|info| info.stored && info.owns_storage())
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
    prefixes.dedup_by(|a, b| a.0 == b.0);
    prefixes
}

impl InstrumentedStorage {
    /// Wraps `inner`; keys start with `etcd_prefix` (`--etcd-prefix`).
    pub fn new(inner: Arc<dyn Storage>, metrics: Arc<ApiserverMetrics>, etcd_prefix: &str) -> Self {
        let generation = rkube_api::registry::generation();
        let prefixes = RwLock::new((generation, prefixes_of_table(etcd_prefix)));
        InstrumentedStorage { inner, metrics, etcd_prefix: etcd_prefix.to_string(), prefixes }
    }

    fn type_of(&self, key: &str) -> String {
        let generation = rkube_api::registry::generation();
        let stale = self.prefixes.read().map(|p| p.0 != generation).unwrap_or(true);
        if stale {
            let fresh = prefixes_of_table(&self.etcd_prefix);
            let mut p = self.prefixes.write().unwrap_or_else(|e| e.into_inner());
            *p = (generation, fresh);
        }
        let p = self.prefixes.read().unwrap_or_else(|e| e.into_inner());
        p.1.iter().find(|(prefix, _)| key.starts_with(prefix.as_str())).map_or_else(|| "unknown".to_string(), |(_, t)| t.clone())
    }

    fn observe(&self, op: &str, key: &str, started: Instant) {
        self.metrics.observe_storage(self.inner.backend_name(), op, &self.type_of(key), started.elapsed());
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

    #[tokio::test]
    async fn custom_resources_registered_later_are_counted_under_their_resource() {
        let dir = tempfile::tempdir().unwrap();
        let inner: Arc<dyn Storage> = Arc::new(rkube_storage::embedded::EmbeddedStorage::open(dir.path()).unwrap());
        let metrics = Arc::new(ApiserverMetrics::new());
        let s = InstrumentedStorage::new(inner, metrics.clone(), "/registry");
        let crd = serde_json::json!({
            "metadata": {"name": "gizmos.metrics.example.com"},
            "spec": {"group": "metrics.example.com", "scope": "Namespaced",
                     "names": {"plural": "gizmos", "singular": "gizmo", "kind": "Gizmo", "listKind": "GizmoList"},
                     "versions": [{"name": "v1", "served": true, "storage": true}]},
            "status": {"acceptedNames": {"plural": "gizmos", "singular": "gizmo", "kind": "Gizmo", "listKind": "GizmoList"}}
        });
        let rows = rkube_api::apiextensions::rows_for(&crd);
        assert_eq!(rows.len(), 1);
        for row in rows {
            rkube_api::registry::register(row).unwrap();
        }
        s.get("/registry/metrics.example.com/gizmos/default/g").await.unwrap();
        rkube_api::registry::unregister("metrics.example.com", "v1", "gizmos");
        let text = metrics.render();
        assert!(
            text.contains("etcd_request_duration_seconds_count{backend=\"embedded\",operation=\"get\",type=\"gizmos.metrics.example.com\"} 1"),
            "{text}"
        );
    }
}
