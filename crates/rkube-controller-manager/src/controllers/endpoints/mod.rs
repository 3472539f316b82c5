//! `endpoints-controller` and `endpointslice-controller`: the Endpoints
//! object and the EndpointSlices of every Service with a selector, from the
//! pods it selects and their readiness (upstream `pkg/controller/endpoint`,
//! `pkg/controller/endpointslice`). `rkube proxy` routes a ClusterIP from
//! the slices; `endpoints.kubernetes.io/last-change-trigger-time` lets it
//! report network programming latency.
//!
//! Each controller keeps kube-runtime reflectors of Services, Pods and what
//! it writes, and a work queue of Service keys:
//! - a Service event queues that Service;
//! - a Pod event queues the Services of its namespace that select it, and
//!   those whose current endpoints name it (so a pod whose labels changed
//!   leaves its old Service);
//! - an event on a written object queues its Service (a hand edit is undone).
//!
//! Once every reflector has listed, every Service is queued. A failed sync
//! is retried after an exponential delay per key (5 ms doubling to 1000 s,
//! client-go's default controller rate limiter).

pub mod desired;
pub mod legacy;
pub mod slices;

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::StreamExt;
use tokio::time::Instant;
use k8s_openapi::api::core::v1::{Endpoints, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher;

use crate::context::ControllerContext;
use crate::work_queue::{reflected, Key, Queue, Trigger};

/// Which object the controller writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Writes {
    Endpoints,
    Slices,
}

/// Starts `endpoints-controller`.
pub fn start_endpoints(ctx: ControllerContext) -> BoxFuture<'static, anyhow::Result<()>> {
    Box::pin(run(ctx, Writes::Endpoints))
}

/// Starts `endpointslice-controller`.
pub fn start_slices(ctx: ControllerContext) -> BoxFuture<'static, anyhow::Result<()>> {
    Box::pin(run(ctx, Writes::Slices))
}

fn key_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> Key {
    (meta.namespace.clone().unwrap_or_default(), meta.name.clone().unwrap_or_default())
}

/// The stores a sync reads.
#[derive(Clone)]
struct Stores {
    services: Store<Service>,
    pods: Store<Pod>,
    endpoints: Store<Endpoints>,
    slices: Store<EndpointSlice>,
}

impl Stores {
    /// Services of `pod`'s namespace that select it or whose written
    /// objects name it.
    fn services_for_pod(&self, pod: &Pod, writes: Writes) -> Vec<Key> {
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        let mut keys: Vec<Key> =
            self.services.state().iter().filter(|s| desired::selects(s, pod)).map(|s| key_of(&s.metadata)).collect();
        let names_pod = |r: &Option<k8s_openapi::api::core::v1::ObjectReference>| r.as_ref().and_then(|r| r.name.as_deref()) == Some(name);
        match writes {
            Writes::Endpoints => {
                for ep in self.endpoints.state().iter().filter(|e| e.metadata.namespace.as_deref() == Some(ns.as_str())) {
                    let subsets = ep.subsets.iter().flatten();
                    let mut addrs = subsets.flat_map(|s| s.addresses.iter().flatten().chain(s.not_ready_addresses.iter().flatten()));
                    if addrs.any(|a| names_pod(&a.target_ref)) {
                        keys.push(key_of(&ep.metadata));
                    }
                }
            }
            Writes::Slices => {
                for slice in self.slices.state().iter().filter(|s| s.metadata.namespace.as_deref() == Some(ns.as_str())) {
                    if slice.endpoints.iter().any(|e| names_pod(&e.target_ref)) {
                        if let Some(svc) = slice.metadata.labels.as_ref().and_then(|l| l.get(slices::SERVICE_NAME_LABEL)) {
                            keys.push((ns.clone(), svc.clone()));
                        }
                    }
                }
            }
        }
        keys
    }

    fn pods_in(&self, ns: &str) -> Vec<Arc<Pod>> {
        self.pods.state().into_iter().filter(|p| p.metadata.namespace.as_deref() == Some(ns)).collect()
    }
}

async fn run(ctx: ControllerContext, writes: Writes) -> anyhow::Result<()> {
    let client = ctx.client.clone();
    let (services, svc_w) = reflector::store::<Service>();
    let (pods, pod_w) = reflector::store::<Pod>();
    let (endpoints, ep_w) = reflector::store::<Endpoints>();
    let (slices_store, slice_w) = reflector::store::<EndpointSlice>();
    let stores = Stores { services, pods, endpoints, slices: slices_store };
    let pod_stores = stores.clone();
    let mut streams = vec![
        reflected(Api::<Service>::all(client.clone()), watcher::Config::default(), svc_w, 0, |s: &Service| vec![key_of(&s.metadata)]),
        reflected(Api::<Pod>::all(client.clone()), watcher::Config::default(), pod_w, 1, move |p: &Pod| {
            pod_stores.services_for_pod(p, writes)
        }),
    ];
    streams.push(match writes {
        Writes::Endpoints => {
            reflected(Api::<Endpoints>::all(client.clone()), watcher::Config::default(), ep_w, 2, |e: &Endpoints| vec![key_of(&e.metadata)])
        }
        Writes::Slices => {
            let managed = watcher::Config::default().labels(&format!("{}={}", slices::MANAGED_BY_LABEL, slices::MANAGED_BY));
            reflected(Api::<EndpointSlice>::all(client.clone()), managed, slice_w, 2, |s: &EndpointSlice| {
                let ns = s.metadata.namespace.clone().unwrap_or_default();
                s.metadata.labels.as_ref().and_then(|l| l.get(slices::SERVICE_NAME_LABEL)).map(|svc| vec![(ns, svc.clone())]).unwrap_or_default()
            })
        }
    });
    let mut events = futures::stream::select_all(streams);
    let mut listed = [false; 3];
    let mut queue = Queue::default();
    loop {
        let ready = listed.iter().all(|l| *l);
        let next_retry = queue.next_retry();
        tokio::select! {
            _ = ctx.stopped() => return Ok(()),
            ev = events.next() => match ev {
                Some(Trigger::Listed(i)) => {
                    let was_ready = ready;
                    listed[i] = true;
                    if !was_ready && listed.iter().all(|l| *l) {
                        for s in stores.services.state() {
                            queue.add(key_of(&s.metadata));
                        }
                        if writes == Writes::Endpoints {
                            // Endpoints left by Services deleted while nothing ran.
                            for e in stores.endpoints.state() {
                                queue.add(key_of(&e.metadata));
                            }
                        }
                    }
                }
                Some(Trigger::Keys(keys)) => keys.into_iter().for_each(|k| queue.add(k)),
                None => anyhow::bail!("the watches ended"),
            },
            _ = tokio::time::sleep_until(next_retry.unwrap_or_else(|| Instant::now() + Duration::from_secs(3600))), if next_retry.is_some() => {
                queue.promote_due();
            }
            _ = std::future::ready(()), if ready && queue.has_work() => {
                if let Some(key) = queue.pop() {
                    let result = match writes {
                        Writes::Endpoints => sync_endpoints(&client, &stores, &key).await,
                        Writes::Slices => sync_slices(&client, &stores, &key).await,
                    };
                    match result {
                        Ok(()) => queue.forget(&key),
                        Err(e) => {
                            tracing::warn!(service = %format!("{}/{}", key.0, key.1), error = %format!("{e:#}"), "syncing endpoints failed; retrying");
                            queue.retry(key);
                        }
                    }
                }
            }
        }
    }
}

pub(crate) fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

async fn sync_endpoints(client: &kube::Client, stores: &Stores, (ns, name): &Key) -> anyhow::Result<()> {
    let api: Api<Endpoints> = Api::namespaced(client.clone(), ns);
    let existing = stores.endpoints.get(&ObjectRef::new(name).within(ns));
    let Some(svc) = stores.services.get(&ObjectRef::new(name).within(ns)) else {
        // The Service is gone: so are its Endpoints (upstream deletes them too).
        if existing.is_some() {
            match api.delete(name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(e) if is_not_found(&e) => {}
                Err(e) => return Err(e.into()),
            }
        }
        return Ok(());
    };
    if !desired::is_managed(&svc) || svc.metadata.deletion_timestamp.is_some() {
        return Ok(());
    }
    let want = legacy::desired_endpoints(&svc, &stores.pods_in(ns));
    match existing {
        None => {
            api.create(&PostParams::default(), &want).await?;
        }
        Some(have) if legacy::differs(&have, &want) => {
            let mut next = (*have).clone();
            next.subsets = want.subsets;
            next.metadata.labels = want.metadata.labels;
            let mut annotations = next.metadata.annotations.take().unwrap_or_default();
            annotations.extend(want.metadata.annotations.unwrap_or_default());
            next.metadata.annotations = Some(annotations);
            api.replace(name, &PostParams::default(), &next).await?;
        }
        Some(_) => {}
    }
    Ok(())
}

async fn sync_slices(client: &kube::Client, stores: &Stores, (ns, name): &Key) -> anyhow::Result<()> {
    let Some(svc) = stores.services.get(&ObjectRef::new(name).within(ns)) else {
        // The Service is gone: the garbage collector removes its slices (ownerReferences).
        return Ok(());
    };
    if !desired::is_managed(&svc) || svc.metadata.deletion_timestamp.is_some() {
        return Ok(());
    }
    let pods = stores.pods_in(ns);
    let existing: Vec<Arc<EndpointSlice>> = stores
        .slices
        .state()
        .into_iter()
        .filter(|s| {
            s.metadata.namespace.as_deref() == Some(ns.as_str())
                && s.metadata.labels.as_ref().and_then(|l| l.get(slices::SERVICE_NAME_LABEL)) == Some(name)
        })
        .collect();
    let trigger = desired::last_change_trigger_time(&svc, pods.iter().map(|p| p.as_ref()));
    let api: Api<EndpointSlice> = Api::namespaced(client.clone(), ns);
    for action in slices::plan(&svc, slices::desired_contents(&svc, &pods), &existing, trigger.as_deref()) {
        match action {
            slices::Action::Create(s) => {
                api.create(&PostParams::default(), &s).await?;
            }
            slices::Action::Update(s) => {
                let slice_name = s.metadata.name.clone().unwrap_or_default();
                api.replace(&slice_name, &PostParams::default(), &s).await?;
            }
            slices::Action::Delete(slice_name) => match api.delete(&slice_name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(e) if is_not_found(&e) => {}
                Err(e) => return Err(e.into()),
            },
        }
    }
    Ok(())
}
