//! `garbage-collector-controller` (alias `garbagecollector`): deletes objects
//! whose owners are gone and carries out foreground and orphan deletion.
//!
//! - Every 30 seconds it rediscovers the server's resources and watches the
//!   metadata (`PartialObjectMetadata`) of each one it can list, watch and
//!   delete, except events (upstream's ignored resources);
//! - the watches feed one [`graph::Graph`] of ownerReferences;
//! - after changes (at most every 100ms) and every 5 seconds, once every
//!   watch has listed (or 30 seconds passed), it takes the graph's decisions ([`graph::Graph::plan`])
//!   on the server ([`actions`]).
//!
//! Upstream: `pkg/controller/garbagecollector` (`GarbageCollector`,
//! `GraphBuilder`).

pub mod actions;
pub mod graph;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::StreamExt;
use kube::api::{Api, DynamicObject};
use kube::core::PartialObjectMeta;
use kube::discovery::{verbs, ApiResource};
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use tokio::sync::mpsc;

use self::graph::{Absent, Graph, Node};
use super::discovery::{self, Discovered};
use crate::context::ControllerContext;

/// How often the resources to watch are rediscovered (upstream's
/// `--garbage-collector` resync period default of 30s).
const DISCOVERY_PERIOD: Duration = Duration::from_secs(30);
/// How often the whole graph is re-examined without changes.
const RESYNC_PERIOD: Duration = Duration::from_secs(5);
/// How long the first pass waits for every watch to list.
const SYNC_TIMEOUT: Duration = Duration::from_secs(30);
/// Changes are batched for this long before a pass.
const BATCH: Duration = Duration::from_millis(100);

/// Starts the controller (the [`super::CONTROLLERS`] row's start function).
pub fn start(ctx: ControllerContext) -> BoxFuture<'static, anyhow::Result<()>> {
    Box::pin(run(ctx))
}

/// A change seen by one watch.
enum Change {
    /// The watch (re)started listing.
    Init(Arc<ApiResource>),
    /// An object exists now (from a list or a watch event).
    Apply(Arc<ApiResource>, PartialObjectMeta<DynamicObject>),
    /// An object was deleted.
    Delete(PartialObjectMeta<DynamicObject>),
    /// The list that began with `Init` is complete.
    InitDone(Arc<ApiResource>),
}

/// Whether `ar` is collected: listable, watchable and deletable, and not an
/// event (upstream's `ignoredResources`).
fn collected(ar: &ApiResource, caps: &kube::discovery::ApiCapabilities) -> bool {
    let ops = [verbs::LIST, verbs::WATCH, verbs::DELETE];
    ops.iter().all(|v| caps.supports_operation(v)) && ar.plural != "events"
}

async fn run(ctx: ControllerContext) -> anyhow::Result<()> {
    let client = ctx.client.clone();
    let (tx, mut rx) = mpsc::channel::<Change>(1024);
    let mut watched: HashMap<(String, String, String), tokio::task::JoinHandle<()>> = HashMap::new();
    let mut unsynced: HashSet<String> = HashSet::new();
    let mut seen_in_list: HashMap<String, HashSet<String>> = HashMap::new();
    let mut graph = Graph::default();
    let mut absent: HashMap<String, Absent> = HashMap::new();
    let mut found = Discovered::default();
    let mut next_discovery = tokio::time::Instant::now();
    let mut resync = tokio::time::interval(RESYNC_PERIOD);
    let mut dirty = false;
    let sync_deadline = tokio::time::Instant::now() + SYNC_TIMEOUT;
    loop {
        if tokio::time::Instant::now() >= next_discovery {
            next_discovery = tokio::time::Instant::now() + DISCOVERY_PERIOD;
            match discovery::preferred_resources(&client).await {
                Ok(d) => {
                    for (ar, _) in d.resources.iter().filter(|(ar, caps)| collected(ar, caps)) {
                        let key = (ar.group.clone(), ar.version.clone(), ar.plural.clone());
                        if watched.contains_key(&key) {
                            continue;
                        }
                        unsynced.insert(resource_key(ar));
                        let task = tokio::spawn(watch(client.clone(), Arc::new(ar.clone()), tx.clone()));
                        watched.insert(key, task);
                    }
                    found = d;
                }
                Err(e) => tracing::warn!(error = %e, "garbage collector: discovery failed"),
            }
            // What was learnt about unwatched owners may have changed.
            absent.retain(|_, a| *a == Absent::Gone);
        }
        let wait = tokio::time::sleep(if dirty { BATCH } else { Duration::from_secs(3600) });
        tokio::select! {
            _ = ctx.stopped() => break,
            change = rx.recv() => {
                let Some(change) = change else { break };
                dirty = true;
                for uid in apply(&mut graph, &mut unsynced, &mut seen_in_list, change) {
                    // A deleted UID never comes back: what a lookup learnt
                    // before its watch event arrived is now stale.
                    absent.insert(uid, Absent::Gone);
                }
                continue;
            }
            _ = wait => {}
            _ = resync.tick() => {}
            _ = tokio::time::sleep_until(next_discovery) => continue,
        }
        dirty = false;
        // Act once every watch has listed (or, as upstream, after waiting
        // long enough for a watch that cannot).
        if !unsynced.is_empty() && tokio::time::Instant::now() < sync_deadline {
            continue;
        }
        actions::take(&client, &found, &graph, &mut absent).await;
    }
    for (_, task) in watched {
        task.abort();
    }
    Ok(())
}

fn resource_key(ar: &ApiResource) -> String {
    format!("{}/{}", ar.api_version, ar.plural)
}

/// Applies one change to the graph; returns the UIDs it learnt are deleted.
fn apply(
    graph: &mut Graph,
    unsynced: &mut HashSet<String>,
    seen: &mut HashMap<String, HashSet<String>>,
    change: Change,
) -> Vec<String> {
    let mut deleted = Vec::new();
    match change {
        Change::Init(ar) => {
            seen.insert(resource_key(&ar), HashSet::new());
        }
        Change::Apply(ar, meta) => {
            if let Some(s) = seen.get_mut(&resource_key(&ar)) {
                s.insert(meta.metadata.uid.clone().unwrap_or_default());
            }
            if let Some(node) = node_of(ar, meta) {
                graph.upsert(node);
            }
        }
        Change::Delete(meta) => {
            if let Some(uid) = meta.metadata.uid {
                graph.remove(&uid);
                deleted.push(uid);
            }
        }
        Change::InitDone(ar) => {
            let key = resource_key(&ar);
            if let Some(listed) = seen.remove(&key) {
                for uid in graph.uids_of(&ar) {
                    if !listed.contains(&uid) {
                        graph.remove(&uid);
                        deleted.push(uid);
                    }
                }
            }
            unsynced.remove(&key);
        }
    }
    deleted
}

/// The graph node of an object of `ar` (`None` without a UID).
pub fn node_of(resource: Arc<ApiResource>, meta: PartialObjectMeta<DynamicObject>) -> Option<Node> {
    let m = meta.metadata;
    Some(Node {
        resource,
        name: m.name.unwrap_or_default(),
        namespace: m.namespace,
        uid: m.uid?,
        resource_version: m.resource_version.unwrap_or_default(),
        owners: m.owner_references.unwrap_or_default(),
        finalizers: m.finalizers.unwrap_or_default(),
        deleting: m.deletion_timestamp.is_some(),
    })
}

/// Watches the metadata of every object of `ar` and forwards the changes;
/// ends when the receiver is gone.
async fn watch(client: kube::Client, ar: Arc<ApiResource>, tx: mpsc::Sender<Change>) {
    let api: Api<PartialObjectMeta<DynamicObject>> = Api::all_with(client, ar.as_ref());
    let mut stream = watcher::watcher(api, watcher::Config::default()).default_backoff().boxed();
    while let Some(ev) = stream.next().await {
        let change = match ev {
            Ok(Event::Init) => Change::Init(ar.clone()),
            Ok(Event::InitApply(m)) | Ok(Event::Apply(m)) => Change::Apply(ar.clone(), m),
            Ok(Event::Delete(m)) => Change::Delete(m),
            Ok(Event::InitDone) => Change::InitDone(ar.clone()),
            Err(e) => {
                tracing::debug!(resource = %resource_key(&ar), error = %e, "garbage collector watch");
                continue;
            }
        };
        if tx.send(change).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::ObjectMeta;

    fn ar() -> Arc<ApiResource> {
        Arc::new(ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&()))
    }

    fn meta(uid: &str) -> PartialObjectMeta<DynamicObject> {
        PartialObjectMeta {
            types: None,
            metadata: ObjectMeta { name: Some(uid.into()), uid: Some(uid.into()), ..ObjectMeta::default() },
            _phantom: std::marker::PhantomData,
        }
    }

    #[test]
    fn a_relist_drops_the_objects_it_no_longer_lists_and_reports_them_deleted() {
        let (mut g, mut unsynced, mut seen) = (Graph::default(), HashSet::from([resource_key(&ar())]), HashMap::new());
        for c in [Change::Init(ar()), Change::Apply(ar(), meta("a")), Change::Apply(ar(), meta("b")), Change::InitDone(ar())] {
            assert!(apply(&mut g, &mut unsynced, &mut seen, c).is_empty());
        }
        assert!(unsynced.is_empty(), "the resource counts as listed");
        assert_eq!(g.len(), 2);
        // The watch restarts and "b" was deleted meanwhile.
        apply(&mut g, &mut unsynced, &mut seen, Change::Init(ar()));
        apply(&mut g, &mut unsynced, &mut seen, Change::Apply(ar(), meta("a")));
        assert_eq!(apply(&mut g, &mut unsynced, &mut seen, Change::InitDone(ar())), vec!["b".to_string()]);
        assert!(g.get("b").is_none() && g.get("a").is_some());
        assert_eq!(apply(&mut g, &mut unsynced, &mut seen, Change::Delete(meta("a"))), vec!["a".to_string()]);
        assert!(g.is_empty());
    }
}
