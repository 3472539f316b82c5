//! Harness: a real rkube API server on 127.0.0.1:0 in this process over an
//! embedded store in a temp dir (plain HTTP, no authorization), the
//! controllers under test started against it with a kube client, and a
//! stand-in kubelet that marks pods Running and Ready (there is no node)
//! and finishes pods labelled `exit-code` (`Succeeded` for `0`, else
//! `Failed` with that container exit code) once they ran.

#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::ResourceExt;
use rkube_controller_manager::cli::{self, ControllerManager};
use rkube_controller_manager::context::{ControllerConfig, ControllerContext};
use rkube_controller_manager::controllers;
use serde_json::json;

/// How long any condition may take.
pub const LIMIT: Duration = Duration::from_secs(30);

/// A server, a client for it, and the running controllers.
pub struct Env {
    /// A client of the server.
    pub client: kube::Client,
    cm: Option<ControllerManager>,
    server: Option<rkube_apiserver::testing::InProcessServer>,
    kubelet: Option<tokio::task::JoinHandle<()>>,
    extra_stop: tokio::sync::watch::Sender<bool>,
    extra: Vec<tokio::task::JoinHandle<anyhow::Result<()>>>,
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
    /// Most active (not terminating, not finished) pods at once.
    pub max_active: usize,
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
        let server = rkube_apiserver::testing::InProcessServer::start(dir.path(), config).await;
        let client = kube::Client::try_from(kube::Config::new(server.base.parse().expect("url"))).expect("client");
        let spec: Vec<String> = names.iter().map(|s| s.to_string()).collect();
        let (selected, _) = controllers::select(&spec).expect("controllers");
        let cm = cli::start(client.clone(), &selected);
        let seen = Arc::new(Mutex::new(Observed::default()));
        let kubelet = kubelet.then(|| tokio::spawn(stand_in_kubelet(client.clone(), seen.clone())));
        let (extra_stop, _) = tokio::sync::watch::channel(false);
        Env { client, cm: Some(cm), server: Some(server), kubelet, extra_stop, extra: Vec::new(), seen, _dir: dir }
    }

    /// Runs a controller started outside the table (`run` given a context
    /// for this server), stopped with the others by [`Env::stop`].
    pub fn spawn<F, Fut>(&mut self, run: F)
    where
        F: FnOnce(ControllerContext) -> Fut,
        Fut: std::future::Future<Output = anyhow::Result<()>> + Send + 'static,
    {
        let ctx = ControllerContext { client: self.client.clone(), stop: self.extra_stop.subscribe(), config: std::sync::Arc::new(ControllerConfig::default()) };
        self.extra.push(tokio::spawn(run(ctx)));
    }

    /// Stops the controllers and the server.
    pub async fn stop(mut self) {
        if let Some(k) = self.kubelet.take() {
            k.abort();
        }
        if let Some(cm) = self.cm.take() {
            cm.shutdown().await;
        }
        let _ = self.extra_stop.send(true);
        for t in self.extra.drain(..) {
            let _ = t.await;
        }
        self.server.take();
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
            let phase = |p: &Pod| p.status.as_ref().and_then(|s| s.phase.clone()).unwrap_or_default();
            let finished = |p: &Pod| matches!(phase(p).as_str(), "Succeeded" | "Failed");
            {
                let mut s = seen.lock().unwrap_or_else(|e| e.into_inner());
                s.max_live = s.max_live.max(live.len());
                s.max_active = s.max_active.max(live.iter().filter(|p| !finished(p)).count());
                let hashes: BTreeSet<String> = live.iter().filter_map(|p| p.labels().get("pod-template-hash").cloned()).collect();
                if s.live_hashes.last() != Some(&hashes) {
                    s.live_hashes.push(hashes);
                }
            }
            for p in live {
                let running = phase(p) == "Running";
                if finished(p) {
                    continue;
                }
                if let (true, Some(code)) = (running, p.labels().get("exit-code").and_then(|c| c.parse::<i32>().ok())) {
                    finish(&api, p, code).await;
                    continue;
                }
                if running || p.labels().contains_key("never-ready") {
                    continue;
                }
                let now = k8s_openapi::jiff::Timestamp::now().to_string();
                // Guarded by the listed resourceVersion: a pod changed since the
                // list (a test finished it, a controller deleted it) is left
                // alone, as a kubelet never takes a pod back from a terminal phase.
                let status = json!({"metadata": {"resourceVersion": p.resource_version()}, "status": {"phase": "Running", "conditions": [
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

/// Ends `pod` as its only container exiting with `code`, unless it changed
/// since it was listed.
async fn finish(api: &Api<Pod>, pod: &Pod, code: i32) {
    let phase = if code == 0 { "Succeeded" } else { "Failed" };
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let container = pod.spec.as_ref().and_then(|s| s.containers.first()).map(|c| c.name.clone()).unwrap_or_default();
    let status = json!({"metadata": {"resourceVersion": pod.resource_version()}, "status": {"phase": phase, "conditions": [
        {"type": "Ready", "status": "False", "lastTransitionTime": now},
    ], "containerStatuses": [{"name": container, "image": "", "imageID": "", "ready": false, "restartCount": 0,
        "state": {"terminated": {"exitCode": code, "finishedAt": now}}}]}});
    let pods: Api<Pod> = Api::namespaced(api.clone().into_client(), &pod.namespace().unwrap_or_default());
    let _ = pods.patch_status(&pod.name_any(), &PatchParams::default(), &Patch::Merge(&status)).await;
}

/// Labels map from pairs.
pub fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}
