//! Test harness: a real rkube API server on 127.0.0.1:0 in this process
//! (embedded store in a temp dir, plain HTTP, no authentication), a kube
//! client for it, and the controller manager started with
//! `rkube_controller_manager::cli::start`.

#![allow(dead_code)]

use std::future::Future;
use std::time::{Duration, Instant};

use kube::api::{Api, DynamicObject};
use rkube_controller_manager::cli::{self, ControllerManager};
use rkube_controller_manager::controllers;
use serde_json::Value;

/// A running API server, a client for it and (maybe) controllers.
pub struct Cluster {
    /// A client for the server.
    pub client: kube::Client,
    /// The configuration `client` was made from.
    pub client_config: kube::Config,
    /// The running controllers (`None` for a bare server).
    pub controllers: Option<ControllerManager>,
    server: Option<rkube_apiserver::testing::InProcessServer>,
    _dir: tempfile::TempDir,
}

impl Cluster {
    /// A server and the controllers `--controllers=<spec>` selects.
    pub async fn start(spec: &str) -> Cluster {
        Self::start_with(spec, Default::default()).await
    }

    /// [`Cluster::start`] with controller settings `config`.
    pub async fn start_with(spec: &str, settings: rkube_controller_manager::context::ControllerConfig) -> Cluster {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let dir = tempfile::tempdir().expect("temp dir");
        let server = rkube_apiserver::testing::InProcessServer::start(dir.path(), rkube_apiserver::ServerConfig::default()).await;
        let config = kube::Config::new(server.base.parse().expect("url"));
        let client = kube::Client::try_from(config.clone()).expect("client");
        let names: Vec<String> = spec.split(',').map(String::from).collect();
        let (selected, _) = controllers::select(&names).expect("controllers");
        let controllers = (!selected.is_empty()).then(|| cli::start_with(client.clone(), &selected, settings));
        Cluster { client, client_config: config, controllers, server: Some(server), _dir: dir }
    }

    /// Stops the controllers, then the server.
    pub async fn stop(mut self) {
        if let Some(cm) = self.controllers.take() {
            cm.shutdown().await;
        }
        self.server.take();
    }

    /// The core/v1 `ConfigMap` API in `ns`.
    pub fn configmaps(&self, ns: &str) -> Api<DynamicObject> {
        let ar = kube::discovery::ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&());
        Api::namespaced_with(self.client.clone(), ns, &ar)
    }

    /// Creates `obj` (JSON) through `api`, returning what the server stored.
    pub async fn create(&self, api: &Api<DynamicObject>, obj: Value) -> DynamicObject {
        let obj: DynamicObject = serde_json::from_value(obj).expect("object");
        api.create(&Default::default(), &obj).await.expect("create")
    }
}

/// Polls `check` every 100ms until it returns `Some`, or panics after
/// `timeout` with `what`.
pub async fn eventually<T, F, Fut>(timeout: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(start.elapsed() < timeout, "timed out after {timeout:?} waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A ConfigMap manifest named `name`.
pub fn configmap(name: &str) -> Value {
    serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": "v"}})
}

/// An ownerReference to `owner` (a ConfigMap).
pub fn owned_by(owner: &DynamicObject, block: bool) -> Value {
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": owner.metadata.name,
        "uid": owner.metadata.uid,
        "blockOwnerDeletion": block,
    })
}
