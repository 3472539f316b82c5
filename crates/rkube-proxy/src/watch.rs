//! kube-rs watchers for Services, EndpointSlices and this node, feeding the
//! [`ChangeTracker`] and notifying the sync loop (upstream's informers and
//! `OnServiceAdd/Update/Delete`, `OnEndpointSlice*`, `OnNode*` handlers).
//!
//! Relists (a watcher restart after a 410 or a lost connection) are handled
//! by diffing the relisted objects against the ones known before: objects that
//! vanished are deleted from the tracker. The applier's map of known objects is
//! the only object cache (no reflector store beside it).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::mpsc::UnboundedSender;

use crate::engine::runner::Notice;
use crate::metrics::Metrics;
use crate::tracker::ChangeTracker;

/// Which informers finished their initial list.
#[derive(Debug, Default)]
pub struct InformerSync {
    services: bool,
    slices: bool,
    notified: bool,
}

/// Shared handles every watch task uses.
#[derive(Debug, Clone)]
pub struct WatchContext {
    /// The tracked state.
    pub tracker: Arc<Mutex<ChangeTracker>>,
    /// Notices to the sync loop.
    pub notices: UnboundedSender<Notice>,
    /// Change counters.
    pub metrics: Arc<Metrics>,
    /// Initial-list progress.
    pub synced: Arc<Mutex<InformerSync>>,
}

impl WatchContext {
    fn mark_synced(&self, services: bool) {
        let Ok(mut s) = self.synced.lock() else { return };
        if services {
            s.services = true;
        } else {
            s.slices = true;
        }
        if s.services && s.slices && !s.notified {
            s.notified = true;
            let _ = self.notices.send(Notice::InformersSynced);
        }
    }

    /// Run `f` on the tracker; false if the lock is poisoned.
    fn with_tracker(&self, f: impl FnOnce(&mut ChangeTracker) -> bool) -> bool {
        match self.tracker.lock() {
            Ok(mut t) => f(&mut t),
            Err(_) => false,
        }
    }
}

/// How one resource kind updates the tracker.
trait Tracked: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static {
    const IS_SERVICE: bool;
    fn apply(tracker: &mut ChangeTracker, obj: &Self) -> bool;
    fn delete(tracker: &mut ChangeTracker, obj: &Self) -> bool;
}

impl Tracked for Service {
    const IS_SERVICE: bool = true;
    fn apply(tracker: &mut ChangeTracker, obj: &Self) -> bool {
        tracker.update_service(obj)
    }
    fn delete(tracker: &mut ChangeTracker, obj: &Self) -> bool {
        tracker.delete_service(
            obj.metadata.namespace.as_deref().unwrap_or_default(),
            obj.metadata.name.as_deref().unwrap_or_default(),
        )
    }
}

impl Tracked for EndpointSlice {
    const IS_SERVICE: bool = false;
    fn apply(tracker: &mut ChangeTracker, obj: &Self) -> bool {
        tracker.update_slice(obj)
    }
    fn delete(tracker: &mut ChangeTracker, obj: &Self) -> bool {
        tracker.delete_slice(obj)
    }
}

/// Applies watch events of one kind to the tracker, remembering the objects it has
/// seen so a relist (`Init` … `InitDone`) can delete the ones that vanished.
struct EventApplier<K: Tracked> {
    known: HashMap<ObjectRef<K>, K>,
    relisted: HashSet<ObjectRef<K>>,
}

impl<K: Tracked> EventApplier<K> {
    fn new() -> Self {
        Self { known: HashMap::new(), relisted: HashSet::new() }
    }

    /// Apply one event. Returns (tracker changed, a list just completed).
    fn apply(&mut self, event: Event<K>, tracker: &mut ChangeTracker) -> (bool, bool) {
        match event {
            Event::Apply(obj) | Event::InitApply(obj) => {
                let key = ObjectRef::from_obj(&obj);
                self.relisted.insert(key.clone());
                let changed = K::apply(tracker, &obj);
                self.known.insert(key, obj);
                (changed, false)
            }
            Event::Delete(obj) => {
                self.known.remove(&ObjectRef::from_obj(&obj));
                (K::delete(tracker, &obj), false)
            }
            Event::Init => {
                self.relisted.clear();
                (false, false)
            }
            Event::InitDone => {
                let gone: Vec<ObjectRef<K>> =
                    self.known.keys().filter(|k| !self.relisted.contains(*k)).cloned().collect();
                let mut changed = false;
                for key in gone {
                    if let Some(obj) = self.known.remove(&key) {
                        changed |= K::delete(tracker, &obj);
                    }
                }
                (changed, true)
            }
        }
    }
}

async fn run_watch<K: Tracked>(api: Api<K>, ctx: WatchContext) {
    let stream = watcher::watcher(api, watcher::Config::default()).default_backoff();
    futures::pin_mut!(stream);
    let mut applier = EventApplier::<K>::new();
    while let Some(event) = stream.next().await {
        let event = match event {
            Ok(ev) => ev,
            Err(err) => {
                tracing::warn!(kind = %K::kind(&()), "watch error (retrying with backoff): {err}");
                continue;
            }
        };
        let Ok((changed, listed)) = ctx.tracker.lock().map(|mut t| applier.apply(event, &mut t)) else {
            tracing::error!("change tracker lock poisoned; stopping the watch");
            return;
        };
        if listed {
            tracing::debug!(kind = %K::kind(&()), objects = applier.known.len(), "list done");
            ctx.mark_synced(K::IS_SERVICE);
        }
        if changed {
            if K::IS_SERVICE {
                ctx.metrics.service_changes.inc();
            } else {
                ctx.metrics.endpoint_changes.inc();
            }
            let _ = ctx.notices.send(Notice::Changed);
        }
    }
}

/// Watch all Services until the stream ends.
pub async fn watch_services(client: Client, ctx: WatchContext) {
    run_watch(Api::<Service>::all(client), ctx).await;
}

/// Watch all EndpointSlices until the stream ends.
pub async fn watch_endpoint_slices(client: Client, ctx: WatchContext) {
    run_watch(Api::<EndpointSlice>::all(client), ctx).await;
}

/// Watch this node's labels (`metadata.name=<node_name>`); a change forces a full sync.
pub async fn watch_node(client: Client, node_name: String, ctx: WatchContext) {
    let api = Api::<Node>::all(client);
    let cfg = watcher::Config::default().fields(&format!("metadata.name={node_name}"));
    let stream = watcher::watcher(api, cfg).default_backoff();
    futures::pin_mut!(stream);
    while let Some(event) = stream.next().await {
        let labels: Option<BTreeMap<String, String>> = match event {
            Ok(Event::Apply(node)) | Ok(Event::InitApply(node)) if node.metadata.name.as_deref() == Some(&node_name) => {
                Some(node.metadata.labels.unwrap_or_default())
            }
            Ok(Event::Delete(node)) if node.metadata.name.as_deref() == Some(&node_name) => Some(BTreeMap::new()),
            Ok(_) => None,
            Err(err) => {
                tracing::debug!("node watch error (retrying with backoff): {err}");
                None
            }
        };
        if let Some(labels) = labels {
            if ctx.with_tracker(|t| t.set_node_labels(labels)) {
                let _ = ctx.notices.send(Notice::NodeLabelsChanged);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use super::*;
    use crate::fixtures::{endpoint_slice, service, Ep};

    #[test]
    fn relist_deletes_objects_that_vanished_while_disconnected() {
        let mut t = ChangeTracker::new("node-a", SystemTime::UNIX_EPOCH);
        let mut services = EventApplier::<Service>::new();
        let a = service("ns", "a", "10.96.0.1", "p", 80);
        let b = service("ns", "b", "10.96.0.2", "p", 80);
        assert_eq!(services.apply(Event::Init, &mut t), (false, false));
        assert_eq!(services.apply(Event::InitApply(a.clone()), &mut t), (true, false));
        assert_eq!(services.apply(Event::InitApply(b), &mut t), (true, false));
        assert_eq!(services.apply(Event::InitDone, &mut t), (false, true));
        assert_eq!(t.service_port_count(), 2);
        t.begin_sync();
        t.finish_sync(true);

        // The watch restarts; b was deleted meanwhile and only a is listed.
        services.apply(Event::Init, &mut t);
        assert_eq!(services.apply(Event::InitApply(a), &mut t), (false, false), "unchanged a");
        assert_eq!(services.apply(Event::InitDone, &mut t), (true, true), "b deleted at InitDone");
        assert_eq!(t.service_port_count(), 1);
        assert_eq!(t.pending().services, [crate::model::NamespacedName::new("ns", "b")].into());
    }

    #[test]
    fn slice_delete_event_removes_its_endpoints() {
        let mut t = ChangeTracker::new("node-a", SystemTime::UNIX_EPOCH);
        let mut slices = EventApplier::<EndpointSlice>::new();
        let s = endpoint_slice("ns", "a", "a-1", "p", 8080, &[Ep::ready("10.244.0.1")]);
        assert_eq!(slices.apply(Event::Apply(s.clone()), &mut t), (true, false));
        assert_eq!(slices.apply(Event::Delete(s), &mut t), (true, false));
        let spn = crate::model::ServicePortName {
            service: crate::model::NamespacedName::new("ns", "a"),
            port: "p".into(),
            protocol: crate::model::Protocol::Tcp,
        };
        assert!(t.endpoints(&spn).is_empty());
    }
}
