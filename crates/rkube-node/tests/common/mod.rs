//! Harness shared by the node's end-to-end tests (`e2e_node.rs`, `containerd.rs`): an
//! in-process `rkube up` API server (its public entry point, embedded store), a pod-phase
//! watcher, kube-rs exec, and a plain HTTP/1.0 GET for the agent's `/healthz` and `/metrics`.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::Parser;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::watcher::{self, Event};
use kube::Api;

#[derive(Parser)]
struct Up {
    #[command(flatten)]
    args: rkube_apiserver::cli::UpArgs,
}

/// An in-process `rkube up` (embedded store); aborted on drop.
pub struct Apiserver {
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
    /// Its admin kubeconfig.
    pub kubeconfig: PathBuf,
}

impl Drop for Apiserver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Starts `rkube up --data-dir <dir>/api --port 0` and waits until `kube-node-lease` exists.
pub async fn apiserver(dir: &Path) -> (Apiserver, kube::Client) {
    let data = dir.join("api");
    let up = Up::parse_from([
        "up",
        "--data-dir",
        data.to_str().expect("utf-8 path"),
        "--port",
        "0",
    ]);
    let task = tokio::spawn(rkube_apiserver::cli::run_up(up.args));
    let kubeconfig = data.join("kubeconfig");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        assert!(Instant::now() < deadline, "API server did not come up");
        assert!(!task.is_finished(), "rkube up exited");
        if kubeconfig.exists() {
            if let Ok(client) = rkube_node::local::client_from_kubeconfig(&kubeconfig).await {
                let ns: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
                if ns.get("kube-node-lease").await.is_ok() {
                    return (Apiserver { task, kubeconfig }, client);
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `status.phase` of a pod (`<none>` when unset).
pub fn phase(p: &Pod) -> String {
    p.status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_else(|| "<none>".into())
}

/// Watches one pod and returns the distinct phases it went through until `until`, and the pod
/// then (panics after `within`).
pub async fn phases_until(
    pods: &Api<Pod>,
    name: &str,
    until: &str,
    within: Duration,
) -> (Vec<String>, Pod) {
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut stream = watcher::watcher(pods.clone(), config).boxed();
    let deadline = tokio::time::Instant::now() + within;
    let mut seen: Vec<String> = Vec::new();
    loop {
        let ev = tokio::time::timeout_at(deadline, stream.next())
            .await
            .unwrap_or_else(|_| {
                panic!("{name} did not reach {until} within {within:?}; phases seen {seen:?}")
            })
            .expect("watch open")
            .expect("watch event");
        let (Event::Apply(p) | Event::InitApply(p)) = ev else {
            continue;
        };
        let ph = phase(&p);
        if seen.last() != Some(&ph) {
            seen.push(ph.clone());
        }
        if ph == until {
            return (seen, p);
        }
    }
}

/// Watches one pod until its phase is `until`; returns it (panics after `within`).
pub async fn wait_phase(pods: &Api<Pod>, name: &str, until: &str, within: Duration) -> Pod {
    phases_until(pods, name, until, within).await.1
}

/// A plain HTTP/1.0 GET; returns (status code, body).
pub async fn http_get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr)
        .await
        .expect("connect healthz");
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").as_bytes())
        .await
        .expect("write");
    let mut buf = String::new();
    s.read_to_string(&mut buf).await.expect("read");
    let code = buf
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = buf
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (code, body)
}

/// Runs `command` in `pod` and returns (stdout, stderr, the error channel's Status).
pub async fn exec(
    pods: &Api<Pod>,
    pod: &str,
    command: &[&str],
) -> (
    String,
    String,
    Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Status>,
) {
    let params = kube::api::AttachParams::default().stdout(true).stderr(true);
    let mut attached = pods
        .exec(pod, command.iter().copied(), &params)
        .await
        .expect("exec");
    let (mut out, mut err) = (String::new(), String::new());
    let mut stdout = attached.stdout().expect("stdout");
    let mut stderr = attached.stderr().expect("stderr");
    let status = attached.take_status().expect("status");
    let read = async {
        let (a, b) = tokio::join!(
            tokio::io::AsyncReadExt::read_to_string(&mut stdout, &mut out),
            tokio::io::AsyncReadExt::read_to_string(&mut stderr, &mut err)
        );
        a.expect("stdout");
        b.expect("stderr");
        status.await
    };
    let status = tokio::time::timeout(Duration::from_secs(20), read)
        .await
        .expect("exec ends");
    (out, err, status)
}

/// An in-process `rkube up` with its data in `<dir>/api`, a local node sharing that data dir
/// (so it finds the `rkube up` PKI and gets its serving certificate through a CSR), and the
/// scheduler: the setup of the kube-rs node tests. [`LocalCluster::stop`] stops all three.
pub struct LocalCluster {
    pub api: Apiserver,
    pub client: kube::Client,
    pub node: rkube_node::NodeHandle,
    scheduler: rkube_scheduler::cli::SchedulerHandle,
}

impl LocalCluster {
    /// Starts the three; `configure` adjusts the node agent's config.
    pub async fn start(dir: &Path, configure: impl FnOnce(&mut rkube_node::agent::NodeConfig)) -> LocalCluster {
        let (api, client) = apiserver(dir).await;
        let node = rkube_node::local::run_local_node_with(&api.kubeconfig, dir.join("api"), configure)
            .await
            .expect("local node");
        let scheduler = rkube_scheduler::cli::start(client.clone(), Default::default()).await.expect("scheduler");
        LocalCluster { api, client, node, scheduler }
    }

    /// Stops the scheduler, the node, then the API server.
    pub async fn stop(self) {
        self.scheduler.shutdown().await.expect("scheduler stops");
        self.node.shutdown().await;
        drop(self.api);
    }
}
