//! A real rkube API server on 127.0.0.1:0 in this process (embedded store
//! in a temp dir, plain HTTP), kube clients for it, and object builders.

#![allow(dead_code)]

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, PostParams};
use rkube_apiserver::ServerConfig;
use serde_json::{json, Value};

/// A running API server; stops when dropped.
pub struct TestServer {
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    _server: rkube_apiserver::testing::InProcessServer,
    _dir: tempfile::TempDir,
}

impl TestServer {
    /// Starts a server over a fresh embedded store.
    pub async fn start() -> TestServer {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let dir = tempfile::tempdir().expect("temp dir");
        let server = rkube_apiserver::testing::InProcessServer::start(dir.path(), ServerConfig::default()).await;
        TestServer { base: server.base.clone(), _server: server, _dir: dir }
    }

    /// A kube-rs client of the server.
    pub fn client(&self) -> kube::Client {
        kube::Client::try_from(kube::Config::new(self.base.parse().expect("server URL"))).expect("kube client")
    }
}

/// Creates a node with `cpu` cores, 8Gi memory and 110 pods allocatable,
/// `extra` merged into the object (labels, taints).
pub async fn create_node(client: &kube::Client, name: &str, cpu: &str, extra: Value) -> Node {
    let mut v = json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": {},
        "status": {"allocatable": {"cpu": cpu, "memory": "8Gi", "pods": "110"},
                   "capacity": {"cpu": cpu, "memory": "8Gi", "pods": "110"}},
    });
    if let (Some(base), Some(more)) = (v.as_object_mut(), extra.as_object()) {
        for (k, val) in more {
            match (base.get_mut(k), val) {
                (Some(Value::Object(b)), Value::Object(m)) => {
                    for (mk, mv) in m {
                        match (b.get_mut(mk), mv) {
                            (Some(Value::Object(bb)), Value::Object(mm)) => bb.extend(mm.clone()),
                            _ => {
                                b.insert(mk.clone(), mv.clone());
                            }
                        }
                    }
                }
                _ => {
                    base.insert(k.clone(), val.clone());
                }
            }
        }
    }
    let node: Node = serde_json::from_value(v.clone()).expect("node");
    let api: Api<Node> = Api::all(client.clone());
    let created = api.create(&PostParams::default(), &node).await.expect("create node");
    if created.status.as_ref().and_then(|s| s.allocatable.as_ref()).is_none() {
        // The create dropped the status: set it through the subresource.
        let mut with_status = created.clone();
        with_status.status = node.status.clone();
        return api
            .replace_status(name, &PostParams::default(), &with_status)
            .await
            .expect("node status");
    }
    created
}

/// Creates pod `name` in `default` requesting `cpu`, with `extra` spec fields.
pub async fn create_pod(client: &kube::Client, name: &str, cpu: &str, extra: Value) -> Pod {
    let mut spec = json!({
        "containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": cpu}}}],
    });
    if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
        s.extend(e.clone());
    }
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"}, "spec": spec,
    }))
    .expect("pod");
    Api::<Pod>::namespaced(client.clone(), "default").create(&PostParams::default(), &pod).await.expect("create pod")
}

/// Polls `f` every 100ms until it returns `Some`, for up to `secs` seconds.
pub async fn eventually<T, F, Fut>(secs: u64, what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f().await {
            return v;
        }
        if tokio::time::Instant::now() > deadline {
            panic!("timed out waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The node pod `name` is bound to, once it is.
pub async fn bound_node(client: &kube::Client, name: &str, secs: u64) -> String {
    let api: Api<Pod> = Api::namespaced(client.clone(), "default");
    eventually(secs, &format!("pod {name} bound"), || {
        let api = api.clone();
        async move {
            let p = api.get(name).await.ok()?;
            p.spec.and_then(|s| s.node_name).filter(|n| !n.is_empty())
        }
    })
    .await
}
