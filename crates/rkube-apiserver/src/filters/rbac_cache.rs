//! RBAC objects from memory: [`RbacCache`] keeps every Role, ClusterRole,
//! RoleBinding and ClusterRoleBinding decoded and indexed by subject
//! ([`crate::filters::rbac_index`]), filled by one reflector per kind over a
//! storage watch (upstream's RBAC authorizer reads informer caches, fed by
//! the API server's own watch cache).
//!
//! Each reflector lists `<prefix>/<resource>/` from storage, then watches
//! from the list's revision and applies every event; a broken or compacted
//! watch is listed again after a jittered backoff ([`rkube_cache::backoff`]).
//! A storage watch (not [`rkube_cache::CacheLayer`]) because it works the
//! same with `--watch-cache=false`, and because its progress notifications
//! tell exactly when every write up to a revision has been applied, which
//! [`RbacSource::wait_fresh`] needs.
//!
//! Until a kind's first list is applied, its reads go to storage
//! ([`crate::filters::rbac::StorageRbacSource`]), so nothing is denied for
//! want of a synced cache.
//!
//! Read-your-writes: after a successful RBAC write through this server the
//! escalation filter calls [`RbacSource::wait_fresh`], which waits (at most
//! [`FRESH_WAIT`]) until every reflector has seen storage's current
//! revision; the client's next request is then authorized with the write
//! applied. Other API servers on the same store see it within the watch's
//! latency (milliseconds), as upstream.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use futures::StreamExt;
use rkube_cache::backoff::Backoff;
use rkube_storage::{EventKind, ProgressRequester, RangeRequest, Storage, WatchResponse};

use crate::filters::authn::UserInfo;
use crate::filters::rbac::{Binding, RbacError, RbacSource, Role, StorageRbacSource};
use crate::filters::rbac_index::{RbacIndex, RbacKind, StoredClusterRole};

/// Longest [`RbacSource::wait_fresh`] waits for the reflectors.
pub const FRESH_WAIT: Duration = Duration::from_secs(2);

/// One reflector's progress.
struct KindState {
    /// The first list was applied.
    synced: AtomicBool,
    /// The highest revision whose events are all applied (0 before the first list).
    observed: tokio::sync::watch::Sender<i64>,
    /// Asks the current watch for a progress notification.
    progress: Mutex<Option<Arc<dyn ProgressRequester>>>,
}

struct Inner {
    storage: Arc<dyn Storage>,
    prefix: String,
    index: RwLock<RbacIndex>,
    kinds: [KindState; 4],
    /// Bumped after every change to the ClusterRoles (the aggregation controller waits on it).
    cluster_roles_changed: tokio::sync::watch::Sender<u64>,
    fallback: StorageRbacSource,
}

/// RBAC objects from memory, kept by watches (see the module docs).
/// Dropping it stops the reflectors.
pub struct RbacCache {
    inner: Arc<Inner>,
    tasks: Vec<tokio::task::AbortHandle>,
}

impl Drop for RbacCache {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

fn read(l: &RwLock<RbacIndex>) -> std::sync::RwLockReadGuard<'_, RbacIndex> {
    l.read().unwrap_or_else(|p| p.into_inner())
}

fn write(l: &RwLock<RbacIndex>) -> std::sync::RwLockWriteGuard<'_, RbacIndex> {
    l.write().unwrap_or_else(|p| p.into_inner())
}

impl RbacCache {
    /// Starts the reflectors over keys under `etcd_prefix` (`--etcd-prefix`).
    /// Needs a tokio runtime.
    pub fn start(storage: Arc<dyn Storage>, etcd_prefix: &str) -> Arc<RbacCache> {
        let kind_state = || KindState {
            synced: AtomicBool::new(false),
            observed: tokio::sync::watch::channel(0).0,
            progress: Mutex::new(None),
        };
        let inner = Arc::new(Inner {
            fallback: StorageRbacSource::new(storage.clone(), etcd_prefix),
            storage,
            prefix: etcd_prefix.trim_end_matches('/').to_string(),
            index: RwLock::new(RbacIndex::new()),
            kinds: [kind_state(), kind_state(), kind_state(), kind_state()],
            cluster_roles_changed: tokio::sync::watch::channel(0).0,
        });
        let tasks = RbacKind::ALL.iter().map(|k| tokio::spawn(reflect(inner.clone(), *k)).abort_handle()).collect();
        Arc::new(RbacCache { inner, tasks })
    }

    fn synced(&self, kind: RbacKind) -> bool {
        self.inner.kinds[kind.index()].synced.load(Ordering::Acquire)
    }

    /// Whether every kind's first list has been applied.
    pub fn has_synced(&self) -> bool {
        RbacKind::ALL.iter().all(|k| self.synced(*k))
    }

    /// Waits until every kind's first list has been applied.
    pub async fn wait_synced(&self) {
        for k in &self.inner.kinds {
            let mut rx = k.observed.subscribe();
            if !k.synced.load(Ordering::Acquire) {
                let _ = rx.wait_for(|_| k.synced.load(Ordering::Acquire)).await;
            }
        }
    }

    /// Every ClusterRole as stored, by name (after [`RbacCache::wait_synced`]).
    pub fn stored_cluster_roles(&self) -> BTreeMap<String, StoredClusterRole> {
        read(&self.inner.index).stored_cluster_roles()
    }

    /// Changes whenever the ClusterRoles change (for the aggregation controller).
    pub fn cluster_roles_changed(&self) -> tokio::sync::watch::Receiver<u64> {
        self.inner.cluster_roles_changed.subscribe()
    }

    /// The storage the reflectors read.
    pub fn storage(&self) -> &Arc<dyn Storage> {
        &self.inner.storage
    }

    /// The `--etcd-prefix`, without a trailing `/`.
    pub fn prefix(&self) -> &str {
        &self.inner.prefix
    }
}

/// Lists and watches one kind forever (see the module docs).
async fn reflect(inner: Arc<Inner>, kind: RbacKind) {
    let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(30));
    loop {
        let err = list_and_watch(&inner, kind, &mut backoff).await;
        tracing::debug!(resource = kind.resource(), error = %err, "RBAC reflector: listing again");
        *inner.kinds[kind.index()].progress.lock().unwrap_or_else(|p| p.into_inner()) = None;
        tokio::time::sleep(backoff.next_delay()).await;
    }
}

/// One list, then the watch until it breaks; returns why it stopped.
async fn list_and_watch(inner: &Inner, kind: RbacKind, backoff: &mut Backoff) -> String {
    let dir = format!("{}/{}/", inner.prefix, kind.resource());
    let state = &inner.kinds[kind.index()];
    let resp = match inner.storage.range(RangeRequest::prefix(&dir)).await {
        Ok(r) => r,
        Err(e) => return e.to_string(),
    };
    {
        let mut idx = write(&inner.index);
        idx.clear(kind);
        for kv in &resp.kvs {
            let rest = kv.key.strip_prefix(dir.as_str()).unwrap_or(&kv.key);
            if let Err(e) = idx.put(kind, &kv.key, rest, &kv.value, kv.mod_revision) {
                tracing::warn!(error = %e, "skipping undecodable RBAC object");
            }
        }
    }
    state.synced.store(true, Ordering::Release);
    state.observed.send_replace(resp.revision);
    if kind == RbacKind::ClusterRole {
        inner.cluster_roles_changed.send_modify(|g| *g += 1);
    }
    let watch = match inner.storage.watch(&dir, resp.revision).await {
        Ok(w) => w,
        Err(e) => return e.to_string(),
    };
    *state.progress.lock().unwrap_or_else(|p| p.into_inner()) = Some(watch.progress.clone());
    let mut stream = watch.stream;
    let mut healthy = false;
    while let Some(msg) = stream.next().await {
        let revision = match msg {
            Err(e) => return e.to_string(),
            Ok(WatchResponse::Progress { revision }) => revision,
            Ok(WatchResponse::Events(events)) => {
                let mut last = 0;
                {
                    let mut idx = write(&inner.index);
                    for ev in &events {
                        last = last.max(ev.revision());
                        let rest = ev.kv.key.strip_prefix(dir.as_str()).unwrap_or(&ev.kv.key);
                        match ev.kind {
                            EventKind::Put => {
                                if let Err(e) = idx.put(kind, &ev.kv.key, rest, &ev.kv.value, ev.kv.mod_revision) {
                                    tracing::warn!(error = %e, "dropping undecodable RBAC object");
                                }
                            }
                            EventKind::Delete => idx.delete(kind, rest),
                        }
                    }
                }
                if kind == RbacKind::ClusterRole {
                    inner.cluster_roles_changed.send_modify(|g| *g += 1);
                }
                last
            }
        };
        if !healthy {
            backoff.reset();
            healthy = true;
        }
        state.observed.send_if_modified(|o| {
            let newer = revision > *o;
            if newer {
                *o = revision;
            }
            newer
        });
    }
    "watch ended".to_string()
}

#[async_trait::async_trait]
impl RbacSource for RbacCache {
    async fn role(&self, namespace: &str, name: &str) -> Result<Option<Role>, RbacError> {
        Ok(self.role_shared(namespace, name).await?.map(|r| (*r).clone()))
    }
    async fn cluster_role(&self, name: &str) -> Result<Option<Role>, RbacError> {
        Ok(self.cluster_role_shared(name).await?.map(|r| (*r).clone()))
    }
    async fn role_bindings(&self, namespace: &str) -> Result<Vec<Binding>, RbacError> {
        if !self.synced(RbacKind::RoleBinding) {
            return self.inner.fallback.role_bindings(namespace).await;
        }
        Ok(read(&self.inner.index).role_bindings(namespace).iter().map(|b| (**b).clone()).collect())
    }
    async fn cluster_role_bindings(&self) -> Result<Vec<Binding>, RbacError> {
        if !self.synced(RbacKind::ClusterRoleBinding) {
            return self.inner.fallback.cluster_role_bindings().await;
        }
        Ok(read(&self.inner.index).cluster_role_bindings().iter().map(|b| (**b).clone()).collect())
    }
    async fn role_shared(&self, namespace: &str, name: &str) -> Result<Option<Arc<Role>>, RbacError> {
        if !self.synced(RbacKind::Role) {
            return self.inner.fallback.role_shared(namespace, name).await;
        }
        Ok(read(&self.inner.index).role(namespace, name))
    }
    async fn cluster_role_shared(&self, name: &str) -> Result<Option<Arc<Role>>, RbacError> {
        if !self.synced(RbacKind::ClusterRole) {
            return self.inner.fallback.cluster_role_shared(name).await;
        }
        Ok(read(&self.inner.index).cluster_role(name))
    }
    async fn role_bindings_for(&self, namespace: &str, user: &UserInfo) -> Result<Vec<Arc<Binding>>, RbacError> {
        if !self.synced(RbacKind::RoleBinding) {
            return self.inner.fallback.role_bindings_for(namespace, user).await;
        }
        Ok(read(&self.inner.index).role_bindings_for(namespace, user))
    }
    async fn cluster_role_bindings_for(&self, user: &UserInfo) -> Result<Vec<Arc<Binding>>, RbacError> {
        if !self.synced(RbacKind::ClusterRoleBinding) {
            return self.inner.fallback.cluster_role_bindings_for(user).await;
        }
        Ok(read(&self.inner.index).cluster_role_bindings_for(user))
    }
    async fn wait_fresh(&self) {
        let Ok(revision) = self.inner.storage.current_revision().await else { return };
        let reliable = self.inner.storage.progress_notify_reliable();
        let wait = async {
            for k in &self.inner.kinds {
                let mut rx = k.observed.subscribe();
                if *rx.borrow_and_update() >= revision {
                    continue;
                }
                if reliable {
                    let progress = k.progress.lock().unwrap_or_else(|p| p.into_inner()).clone();
                    if let Some(p) = progress {
                        p.request_progress();
                    }
                }
                let _ = rx.wait_for(|o| *o >= revision).await;
            }
        };
        if tokio::time::timeout(FRESH_WAIT, wait).await.is_err() {
            tracing::debug!(revision, "RBAC cache not fresh after {FRESH_WAIT:?}; answering anyway");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn user(name: &str) -> UserInfo {
        UserInfo { username: name.into(), uid: String::new(), groups: vec![], extra: Default::default() }
    }

    #[tokio::test]
    async fn reflectors_follow_storage_and_wait_fresh_sees_the_last_write() {
        let dir = tempfile::tempdir().unwrap();
        let storage: Arc<dyn Storage> = Arc::new(rkube_storage::embedded::EmbeddedStorage::open(dir.path()).unwrap());
        let crb = |who: &str| {
            serde_json::to_vec(&json!({"kind": "ClusterRoleBinding", "metadata": {"name": "b"},
                "subjects": [{"kind": "User", "name": who}], "roleRef": {"kind": "ClusterRole", "name": "view"}}))
            .unwrap()
        };
        storage.create("/registry/clusterrolebindings/b", crb("alice").into()).await.unwrap();
        let cache = RbacCache::start(storage.clone(), "/registry");
        tokio::time::timeout(Duration::from_secs(10), cache.wait_synced()).await.unwrap();
        assert!(cache.has_synced());
        assert_eq!(cache.cluster_role_bindings_for(&user("alice")).await.unwrap().len(), 1);
        let kv = storage.get("/registry/clusterrolebindings/b").await.unwrap().unwrap();
        storage.update("/registry/clusterrolebindings/b", crb("bob").into(), kv.mod_revision).await.unwrap();
        // An unrelated write moves the revision past the binding's.
        storage.create("/registry/configmaps/default/x", b"{}".to_vec().into()).await.unwrap();
        cache.wait_fresh().await;
        assert!(cache.cluster_role_bindings_for(&user("alice")).await.unwrap().is_empty());
        assert_eq!(cache.cluster_role_bindings_for(&user("bob")).await.unwrap().len(), 1);
        storage.delete("/registry/clusterrolebindings/b", None).await.unwrap();
        cache.wait_fresh().await;
        assert!(cache.cluster_role_bindings_for(&user("bob")).await.unwrap().is_empty());
        assert!(cache.cluster_role_bindings().await.unwrap().is_empty());
    }
}
