//! Routes pod updates (a kube-rs watch of `spec.nodeName=<node>`) and PLEG events to per-pod
//! workers, and cleans up sandboxes whose pod is gone (upstream `kubelet.go` `syncLoop` +
//! `HandlePodCleanups`).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::Api;
use tokio::sync::mpsc;

use super::worker::{PodWorker, WorkerEnv, WorkerMsg};
use crate::cri::RuntimeApi;
use crate::pleg::PodLifecycleEvent;
use crate::shutdown::Shutdown;

/// How often orphaned sandboxes are looked for.
const HOUSEKEEPING_PERIOD: Duration = Duration::from_secs(10);

/// The pods bound to this node as the agent last received them, by uid (what kubelet's
/// `/pods` endpoint lists; upstream `pkg/kubelet/pod/pod_manager.go`). Shared by the
/// [`PodManager`], which keeps it current, and the kubelet API, which reads it.
#[derive(Clone, Debug, Default)]
pub struct PodStore(Arc<std::sync::RwLock<HashMap<String, Arc<Pod>>>>);

impl PodStore {
    /// Every known pod, ordered by namespace and name.
    pub fn list(&self) -> Vec<Arc<Pod>> {
        let map = self.0.read().unwrap_or_else(|p| p.into_inner());
        let mut pods: Vec<Arc<Pod>> = map.values().cloned().collect();
        pods.sort_by(|a, b| (&a.metadata.namespace, &a.metadata.name).cmp(&(&b.metadata.namespace, &b.metadata.name)));
        pods
    }

    fn insert(&self, uid: String, pod: Arc<Pod>) {
        self.0.write().unwrap_or_else(|p| p.into_inner()).insert(uid, pod);
    }

    fn remove(&self, uid: &str) {
        self.0.write().unwrap_or_else(|p| p.into_inner()).remove(uid);
    }
}

/// The dispatcher.
pub struct PodManager {
    env: Arc<WorkerEnv>,
    store: PodStore,
    workers: HashMap<String, mpsc::UnboundedSender<WorkerMsg>>,
    done_tx: mpsc::UnboundedSender<String>,
    done_rx: mpsc::UnboundedReceiver<String>,
    /// Pods seen since the last watch (re)start; complete once `InitDone` arrived.
    listed: HashSet<String>,
    synced: bool,
}

impl PodManager {
    /// A manager without workers, keeping `store` current.
    pub fn new(env: Arc<WorkerEnv>, store: PodStore) -> Self {
        let (done_tx, done_rx) = mpsc::unbounded_channel();
        Self { env, store, workers: HashMap::new(), done_tx, done_rx, listed: HashSet::new(), synced: false }
    }

    fn dispatch(&mut self, pod: Pod) {
        let Some(uid) = pod.metadata.uid.clone() else { return };
        self.listed.insert(uid.clone());
        let pod = Arc::new(pod);
        self.store.insert(uid.clone(), Arc::clone(&pod));
        if let Some(tx) = self.workers.get(&uid) {
            if tx.send(WorkerMsg::Update(Arc::clone(&pod))).is_ok() {
                return;
            }
        }
        let (tx, rx) = mpsc::unbounded_channel();
        let worker = PodWorker::new(Arc::clone(&self.env), pod);
        tokio::spawn(worker.run(rx, self.done_tx.clone()));
        self.workers.insert(uid, tx);
    }

    fn removed(&mut self, uid: &str) {
        if let Some(tx) = self.workers.get(uid) {
            let _ = tx.send(WorkerMsg::Removed);
        }
    }

    /// Kills and removes sandboxes of pods this node no longer has.
    async fn housekeeping(&self) {
        if !self.synced {
            return;
        }
        let Ok(sandboxes) = self.env.cri.list_pod_sandbox().await else { return };
        for s in sandboxes {
            let uid = s.metadata.as_ref().map(|m| m.uid.clone()).unwrap_or_default();
            if !self.workers.contains_key(&uid) {
                tracing::info!(sandbox = %s.id, pod_uid = %uid, "removing orphaned pod sandbox");
                let _ = self.env.cri.stop_pod_sandbox(&s.id).await;
                let _ = self.env.cri.remove_pod_sandbox(&s.id).await;
            }
        }
    }

    /// Runs until `shutdown`.
    pub async fn run(mut self, mut pleg: mpsc::Receiver<PodLifecycleEvent>, mut shutdown: Shutdown) {
        let api: Api<Pod> = Api::all(self.env.client.clone());
        let config = watcher::Config::default().fields(&format!("spec.nodeName={}", self.env.node_name));
        let mut pods = watcher::watcher(api, config).default_backoff().boxed();
        let mut housekeeping = tokio::time::interval(HOUSEKEEPING_PERIOD);
        loop {
            tokio::select! {
                ev = pods.next() => match ev {
                    Some(Ok(Event::Apply(pod) | Event::InitApply(pod))) => self.dispatch(pod),
                    Some(Ok(Event::Delete(pod))) => {
                        if let Some(uid) = pod.metadata.uid.as_deref() {
                            self.listed.remove(uid);
                            self.removed(uid);
                        }
                    }
                    Some(Ok(Event::Init)) => self.listed.clear(),
                    Some(Ok(Event::InitDone)) => {
                        // Pods deleted while the watch was down get no Delete event.
                        let gone: Vec<String> =
                            self.workers.keys().filter(|u| !self.listed.contains(*u)).cloned().collect();
                        for uid in gone {
                            self.removed(&uid);
                        }
                        self.synced = true;
                    }
                    Some(Err(err)) => tracing::warn!(%err, "pod watch failed; retrying"),
                    None => return,
                },
                ev = pleg.recv() => match ev {
                    Some(ev) => {
                        if let Some(tx) = self.workers.get(&ev.id) {
                            let _ = tx.send(WorkerMsg::Sync);
                        }
                    }
                    None => return,
                },
                Some(uid) = self.done_rx.recv() => {
                    self.workers.remove(&uid);
                    self.store.remove(&uid);
                }
                _ = housekeeping.tick() => self.housekeeping().await,
                _ = shutdown.wait() => return,
            }
        }
    }
}
