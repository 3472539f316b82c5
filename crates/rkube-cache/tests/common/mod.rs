//! Helpers for the cache's integration tests: real storage backends (the
//! embedded store in a temp dir, a real etcd), pods, and a decorator that
//! can cut a real store's watch streams (a broken watch) or hold its LISTs.
#![allow(dead_code)]

pub mod load;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use rkube_cache::{Cacher, CacherConfig, ListResult};
use rkube_storage::embedded::EmbeddedStorage;
use rkube_storage::testing::EtcdServer;
use rkube_storage::{
    prefix_end, KeyValue, RangeRequest, RangeResponse, Revision, Storage, StorageError, Watch, WatchResponse,
};
use serde_json::Value;
use tokio::sync::watch;

pub const PODS: &str = "/registry/pods/";

/// A real storage backend kept alive with whatever it needs (temp dir, etcd process).
pub struct Backend {
    pub storage: Arc<dyn Storage>,
    _dir: Option<tempfile::TempDir>,
    _etcd: Option<EtcdServer>,
}

pub fn embedded() -> Backend {
    let dir = tempfile::tempdir().expect("temp dir");
    let storage = EmbeddedStorage::open(dir.path()).expect("open embedded store");
    Backend { storage: Arc::new(storage), _dir: Some(dir), _etcd: None }
}

pub async fn etcd() -> Backend {
    let server = EtcdServer::start().expect("start etcd (apt-get install -y etcd-server)");
    let storage = rkube_storage::etcd::EtcdStorage::connect(&[server.endpoint()]).await.expect("connect etcd");
    Backend { storage: Arc::new(storage), _dir: None, _etcd: Some(server) }
}

/// Pods' selectable fields (upstream `pod.ToSelectableFields`, the ones tests use).
pub fn pod_fields(v: &Value) -> Vec<(String, String)> {
    let s = |p: &str| v.pointer(p).and_then(Value::as_str).unwrap_or("").to_string();
    vec![("spec.nodeName".into(), s("/spec/nodeName")), ("status.phase".into(), s("/status/phase"))]
}

pub fn pod_config() -> CacherConfig {
    let mut c = CacherConfig::new(PODS, "", "pods");
    c.field_extractor = rkube_cache::FieldExtractor::Fn(pod_fields);
    c.index_node_name = true;
    c
}

pub fn pod(ns: &str, name: &str, node: &str, app: &str) -> Bytes {
    let v = serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": {"app": app}},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]},
        "status": {"phase": "Running"},
    });
    Bytes::from(serde_json::to_vec(&v).unwrap())
}

pub fn key(ns: &str, name: &str) -> String {
    format!("{PODS}{ns}/{name}")
}

pub async fn create(s: &dyn Storage, ns: &str, name: &str, node: &str) -> KeyValue {
    s.create(&key(ns, name), pod(ns, name, node, "a")).await.expect("create")
}

pub async fn update(s: &dyn Storage, ns: &str, name: &str, node: &str, app: &str) -> KeyValue {
    let k = key(ns, name);
    let cur = s.get(&k).await.expect("get").expect("exists");
    s.update(&k, pod(ns, name, node, app), cur.mod_revision).await.expect("update")
}

pub async fn delete(s: &dyn Storage, ns: &str, name: &str) -> Revision {
    s.delete(&key(ns, name), None).await.expect("delete").1
}

/// Waits (real time, ≤ 20 s) until the cache is ready and at least at `rv`.
pub async fn wait_for(c: &Cacher, rv: i64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !(c.ready_state().is_ready() && c.resource_version() >= rv) {
        assert!(tokio::time::Instant::now() < deadline, "cache not ready at {rv}: {:?} rv {}", c.ready_state(), c.resource_version());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// (key, resourceVersion, json) of every object of the storage range at `rev` (0 = latest).
pub async fn storage_state(s: &dyn Storage, rev: i64) -> Vec<(String, i64, Value)> {
    let resp = s
        .range(RangeRequest { start: PODS.into(), end: prefix_end(PODS), revision: rev, limit: 0, count_only: false })
        .await
        .expect("range");
    resp.kvs
        .iter()
        .map(|kv| {
            let mut v: Value = serde_json::from_slice(&kv.value).unwrap();
            v["metadata"]["resourceVersion"] = Value::String(kv.mod_revision.to_string());
            (kv.key[PODS.len()..].to_string(), kv.mod_revision, v)
        })
        .collect()
}

/// The same triple for a cache LIST result.
pub fn list_state(r: &ListResult) -> Vec<(String, i64, Value)> {
    r.items.iter().map(|o| (o.key.clone(), o.resource_version, serde_json::from_slice(&o.json).unwrap())).collect()
}

/// A real store with two faults tests can switch: `break_watches()` ends
/// every open watch stream with `Unavailable` (as a lost connection does),
/// and `hold_lists(true)` makes range reads wait until released.
pub struct Faulty {
    inner: Arc<dyn Storage>,
    epoch: watch::Sender<u64>,
    hold: watch::Sender<bool>,
    pub broken: AtomicBool,
    pub ranges: Mutex<u64>,
    fail_watch: AtomicBool,
}

impl Faulty {
    pub fn new(inner: Arc<dyn Storage>) -> Arc<Faulty> {
        Arc::new(Faulty {
            inner,
            epoch: watch::Sender::new(0),
            hold: watch::Sender::new(false),
            broken: AtomicBool::new(false),
            ranges: Mutex::new(0),
            fail_watch: AtomicBool::new(false),
        })
    }
    pub fn break_watches(&self) {
        self.broken.store(true, Ordering::SeqCst);
        self.epoch.send_modify(|e| *e += 1);
    }
    /// New watches fail with `Unavailable` while set (a cache never gets ready).
    pub fn fail_watches(&self, fail: bool) {
        self.fail_watch.store(fail, Ordering::SeqCst);
    }
    pub fn hold_lists(&self, hold: bool) {
        self.hold.send_replace(hold);
    }
}

#[async_trait::async_trait]
impl Storage for Faulty {
    fn backend_name(&self) -> &'static str {
        self.inner.backend_name()
    }
    async fn get(&self, key: &str) -> rkube_storage::Result<Option<KeyValue>> {
        self.inner.get(key).await
    }
    async fn range(&self, req: RangeRequest) -> rkube_storage::Result<RangeResponse> {
        let mut rx = self.hold.subscribe();
        let _ = rx.wait_for(|h| !*h).await;
        *self.ranges.lock().unwrap() += 1;
        self.inner.range(req).await
    }
    async fn create(&self, key: &str, value: Bytes) -> rkube_storage::Result<KeyValue> {
        self.inner.create(key, value).await
    }
    async fn update(&self, key: &str, value: Bytes, rev: Revision) -> rkube_storage::Result<KeyValue> {
        self.inner.update(key, value, rev).await
    }
    async fn delete(&self, key: &str, rev: Option<Revision>) -> rkube_storage::Result<(KeyValue, Revision)> {
        self.inner.delete(key, rev).await
    }
    async fn watch(&self, prefix: &str, after: Revision) -> rkube_storage::Result<Watch> {
        if self.fail_watch.load(Ordering::SeqCst) {
            return Err(StorageError::Unavailable("watch refused by test".into()));
        }
        let w = self.inner.watch(prefix, after).await?;
        let mut epoch = self.epoch.subscribe();
        epoch.borrow_and_update();
        let cut = async move {
            let _ = epoch.changed().await;
        };
        let stream = w
            .stream
            .take_until(cut)
            .chain(futures::stream::once(async {
                Err::<WatchResponse, _>(StorageError::Unavailable("watch broken by test".into()))
            }));
        Ok(Watch { stream: Box::pin(stream), progress: w.progress })
    }
    async fn current_revision(&self) -> rkube_storage::Result<Revision> {
        self.inner.current_revision().await
    }
    async fn compacted_revision(&self) -> rkube_storage::Result<Revision> {
        self.inner.compacted_revision().await
    }
    async fn compact(&self, revision: Revision) -> rkube_storage::Result<()> {
        self.inner.compact(revision).await
    }
    fn progress_notify_reliable(&self) -> bool {
        self.inner.progress_notify_reliable()
    }
}
