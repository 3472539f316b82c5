//! Persistent volume controllers:
//! - [`binder`]: `persistentvolume-binder-controller` (upstream
//!   `pkg/controller/volume/persistentvolume`), binding claims to volumes
//!   and keeping their phases;
//! - [`localpath`]: `local-path-provisioner-controller`, the provisioner k3s
//!   ships (`rancher.io/local-path`), creating hostPath volumes for claims
//!   of its class under one root directory;
//! - [`protection`]: `persistentvolumeclaim-protection-controller` and
//!   `persistentvolume-protection-controller`, the in-use finalizers;
//! - [`matching`]: which volume a claim binds to.
//!
//! The controllers keep reflectors of claims, volumes and StorageClasses
//! ([`VolumeCaches`]) and sync every object after any change (and every
//! [`RESYNC`], upstream's `--pvclaimbinder-sync-period` default), so a
//! failed write is retried on the next pass.

pub mod binder;
pub mod localpath;
pub mod matching;
pub mod protection;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::ResourceExt;
use tokio::sync::Notify;

use crate::context::ControllerContext;

/// How often every object is synced even without changes (15s).
pub const RESYNC: Duration = Duration::from_secs(15);

/// Reflected claims, volumes and StorageClasses, and a signal on change.
#[derive(Clone)]
pub struct VolumeCaches {
    /// Every PersistentVolumeClaim.
    pub claims: Store<PersistentVolumeClaim>,
    /// Every PersistentVolume.
    pub volumes: Store<PersistentVolume>,
    /// Every StorageClass.
    pub classes: Store<StorageClass>,
    changed: Arc<Notify>,
}

fn reflect<K>(api: Api<K>, changed: Arc<Notify>) -> (Store<K>, tokio::task::JoinHandle<()>)
where
    K: kube::Resource<DynamicType = ()> + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
{
    let (store, writer) = reflector::store();
    let stream = reflector::reflector(writer, watcher::watcher(api, watcher::Config::default())).default_backoff().touched_objects();
    let task = tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(ev) = stream.next().await {
            if let Err(e) = ev {
                tracing::debug!(error = %e, "volume cache watch failed; retrying");
            }
            changed.notify_one();
        }
    });
    (store, task)
}

impl VolumeCaches {
    /// Starts the reflectors and waits until they have listed everything.
    async fn start(client: &kube::Client) -> anyhow::Result<(VolumeCaches, Vec<tokio::task::JoinHandle<()>>)> {
        let changed = Arc::new(Notify::new());
        let (claims, t1) = reflect(Api::<PersistentVolumeClaim>::all(client.clone()), changed.clone());
        let (volumes, t2) = reflect(Api::<PersistentVolume>::all(client.clone()), changed.clone());
        let (classes, t3) = reflect(Api::<StorageClass>::all(client.clone()), changed.clone());
        claims.wait_until_ready().await?;
        volumes.wait_until_ready().await?;
        classes.wait_until_ready().await?;
        Ok((VolumeCaches { claims, volumes, classes, changed }, vec![t1, t2, t3]))
    }

    /// Every volume, by name.
    pub fn volumes_by_name(&self) -> HashMap<String, Arc<PersistentVolume>> {
        self.volumes.state().into_iter().map(|v| (v.name_any(), v)).collect()
    }

    /// The StorageClass named `name`.
    pub fn class(&self, name: &str) -> Option<Arc<StorageClass>> {
        self.classes.get(&reflector::ObjectRef::new(name))
    }

    /// The claim `namespace/name`.
    pub fn claim(&self, namespace: &str, name: &str) -> Option<Arc<PersistentVolumeClaim>> {
        self.claims.get(&reflector::ObjectRef::new(name).within(namespace))
    }
}

/// How soon a pass that waits on something the caches do not watch (pods)
/// asks to run again.
pub const RETRY: Duration = Duration::from_secs(1);

/// Runs `pass` over the caches after every change (batched for 50ms) and
/// every [`RESYNC`] (every [`RETRY`] after a pass that returned `true`),
/// until `ctx` says stop.
async fn run_passes<S, F>(ctx: ControllerContext, mut state: S, pass: F) -> anyhow::Result<()>
where
    F: for<'a> Fn(&'a kube::Client, &'a VolumeCaches, &'a mut S) -> futures::future::BoxFuture<'a, bool>,
{
    let (caches, tasks) = tokio::select! {
        r = VolumeCaches::start(&ctx.client) => r?,
        _ = ctx.stopped() => return Ok(()),
    };
    let stopped = ctx.stopped();
    tokio::pin!(stopped);
    loop {
        let soon = pass(&ctx.client, &caches, &mut state).await;
        tokio::select! {
            _ = &mut stopped => break,
            _ = caches.changed.notified() => tokio::time::sleep(Duration::from_millis(50)).await,
            _ = tokio::time::sleep(if soon { RETRY } else { RESYNC }) => {}
        }
    }
    for t in tasks {
        t.abort();
    }
    Ok(())
}

/// Whether a write failed because the object changed or went away meanwhile
/// (409 or 404): the next pass sees the new state.
pub(crate) fn is_stale(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409 || s.code == 404)
}
