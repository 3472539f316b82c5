//! Harness: a real rkube API server on 127.0.0.1:0 in this process over an
//! embedded store in a temp dir (plain HTTP, no authorization), the
//! controllers under test started against it with a kube client, and a
//! stand-in kubelet that marks pods Running and Ready (there is no node).

#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::ResourceExt;
use rkube_controller_manager::cli::{self, ControllerManager};
use rkube_controller_manager::controllers;
use serde_json::json;
use tokio::sync::oneshot;

/// How long any condition may take.
pub const LIMIT: Duration = Duration::from_secs(30);

/// A server, a client for it, and the running controllers.
pub struct Env {
    /// A client of the server.
    pub client: kube::Client,
    cm: Option<ControllerManager>,
    stop: Option<oneshot::Sender<()>>,
    kubelet: Option<tokio::task::JoinHandle<()>>,
    /// What the stand-in kubelet saw: per label `app`, the most pods alive
    /// at once and the fewest ready once the first rollout was done.
    pub seen: Arc<Mutex<Observed>>,
    _dir: tempfile::TempDir,
}

/// What the stand-in kubelet observed over time.
#[derive(Debug, Default, Clone)]
pub struct Observed {
    /// Most live (not terminating) pods at once.
    pub max_live: usize,
    /// Sets of `pod-template-hash` values live at once, each time it changed.
    pub live_hashes: Vec<BTreeSet<String>>,
}

impl Env {
    /// Starts a server and the controllers `names` (upstream names); with
    /// `kubelet`, every pod not labelled `never-ready` is marked Running and
    /// Ready shortly after it appears.
    pub async fn start(names: &[&str], kubelet: bool) -> Env {
        Self::start_with(names, kubelet, rkube_apiserver::ServerConfig::default()).await
    }

    /// [`Env::start`] with a server configured by `config`.
    pub async fn start_with(names: &[&str], kubelet: bool, config: rkube_apiserver::ServerConfig) -> Env {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let dir = tempfile::tempdir().expect("temp dir");
        let storage: Arc<dyn rkube_storage::Storage> =
            Arc::new(rkube_storage::embedded::EmbeddedStorage::open(dir.path()).expect("embedded store"));
        let st = rkube_apiserver::ApiState::new(storage, config);
        rkube_apiserver::bootstrap(&st).await.expect("bootstrap");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (tx, rx) = oneshot::channel::<()>();
        tokio::spawn(async move {
            let _ = rkube_apiserver::serve(listener, st, async move {
                let _ = rx.await;
            })
            .await;
        });
        let config = kube::Config::new(format!("http://{addr}").parse().expect("url"));
        let client = kube::Client::try_from(config).expect("client");
        let spec: Vec<String> = names.iter().map(|s| s.to_string()).collect();
        let (selected, _) = controllers::select(&spec).expect("controllers");
        let cm = cli::start(client.clone(), &selected);
        let seen = Arc::new(Mutex::new(Observed::default()));
        let kubelet = kubelet.then(|| tokio::spawn(stand_in_kubelet(client.clone(), seen.clone())));
        Env { client, cm: Some(cm), stop: Some(tx), kubelet, seen, _dir: dir }
    }

    /// Stops the controllers and the server.
    pub async fn stop(mut self) {
        if let Some(k) = self.kubelet.take() {
            k.abort();
        }
        if let Some(cm) = self.cm.take() {
            cm.shutdown().await;
        }
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }

    /// Creates namespace `ns`.
    pub async fn namespace(&self, ns: &str) {
        let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(self.client.clone());
        let obj = serde_json::from_value(json!({"metadata": {"name": ns}})).expect("namespace");
        api.create(&Default::default(), &obj).await.expect("create namespace");
    }

    /// Live (not terminating) pods of `ns` with label `app=<app>`.
    pub async fn live_pods(&self, ns: &str, app: &str) -> Vec<Pod> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        let list = api.list(&ListParams::default().labels(&format!("app={app}"))).await.expect("list pods");
        list.items.into_iter().filter(|p| p.metadata.deletion_timestamp.is_none()).collect()
    }
}

/// Polls `f` until it returns `Some` or [`LIMIT`] passes (then panics with `what`).
pub async fn eventually<T, F, Fut>(what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + LIMIT;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Marks every pending pod (without the label `never-ready`) Running and
/// Ready through `pods/status`, and records what is live at once.
async fn stand_in_kubelet(client: kube::Client, seen: Arc<Mutex<Observed>>) {
    let api: Api<Pod> = Api::all(client);
    loop {
        if let Ok(list) = api.list(&ListParams::default()).await {
            let live: Vec<&Pod> = list.items.iter().filter(|p| p.metadata.deletion_timestamp.is_none()).collect();
            {
                let mut s = seen.lock().unwrap_or_else(|e| e.into_inner());
                s.max_live = s.max_live.max(live.len());
                let hashes: BTreeSet<String> = live.iter().filter_map(|p| p.labels().get("pod-template-hash").cloned()).collect();
                if s.live_hashes.last() != Some(&hashes) {
                    s.live_hashes.push(hashes);
                }
            }
            for p in live {
                let running = p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
                if running || p.labels().contains_key("never-ready") {
                    continue;
                }
                let now = k8s_openapi::jiff::Timestamp::now().to_string();
                let status = json!({"status": {"phase": "Running", "conditions": [
                    {"type": "Ready", "status": "True", "lastTransitionTime": now},
                ]}});
                let ns = p.namespace().unwrap_or_default();
                let pods: Api<Pod> = Api::namespaced(api.clone().into_client(), &ns);
                let _ = pods.patch_status(&p.name_any(), &PatchParams::default(), &Patch::Merge(&status)).await;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Labels map from pairs.
pub fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}
