//! One node on a private containerd, as the containerd tests run it: containerd with the local
//! busybox image imported under the sandbox image's and the pods' names, an in-process `rkube
//! up` API server, and the node agent configured from `rkube node` flags
//! (`--container-runtime-endpoint=unix://<socket>`), its kubelet API serving a certificate of
//! the API server's CA so `pods/log` and `pods/exec` reach it.

use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::Parser;
use rkube_node::cri::{CriClient, RuntimeApi};
use serde_json::json;

use super::daemon::Containerd;
use crate::common;

/// The sandbox image name containerd is configured with.
pub const PAUSE_IMAGE: &str = "registry.k8s.io/pause:3.6";
/// The pods' image (tagged, so `imagePullPolicy` defaults to IfNotPresent: no registry pull).
pub const IMAGE: &str = "rkube.test/busybox:1.36";
/// The node's name.
pub const NODE: &str = "containerd-node";

#[derive(Parser)]
struct NodeFlags {
    #[command(flatten)]
    args: rkube_node::cli::NodeArgs,
}

/// containerd, the API server and the node agent of one test.
pub struct ContainerdNode {
    /// The private containerd.
    pub containerd: Containerd,
    /// The in-process API server (stopped on drop).
    pub api: common::Apiserver,
    /// An admin client of it.
    pub client: kube::Client,
    /// The node agent.
    pub agent: rkube_node::agent::AgentHandle,
    /// containerd's CRI endpoint (`unix://...`).
    pub endpoint: String,
    /// `--pod-logs-directory`.
    pub logs: PathBuf,
}

impl ContainerdNode {
    /// Starts everything in `dir` with `busybox` (a static binary) as the image.
    pub async fn start(dir: &Path, busybox: &Path) -> ContainerdNode {
        let started = Instant::now();
        let containerd = Containerd::start(&dir.join("ctrd"), PAUSE_IMAGE).await.expect("start containerd");
        let tarball = dir.join("image.tar");
        super::oci::write_busybox_image(busybox, &[PAUSE_IMAGE, IMAGE], &tarball).expect("build OCI image");
        containerd.import(&tarball).await.expect("import image");
        let images = containerd.ctr(&["images", "ls", "-q"]).await.expect("ctr images ls");
        assert!(
            images.lines().any(|l| l == IMAGE) && images.lines().any(|l| l == PAUSE_IMAGE),
            "images: {images}"
        );
        eprintln!(
            "containerd up with snapshotter {} and image imported after {:?}",
            containerd.snapshotter,
            started.elapsed()
        );
        let (api, client) = common::apiserver(dir).await;
        let endpoint = containerd.endpoint();
        let logs = dir.join("pods");
        let (cert, key) =
            rkube_node::local::sign_serving_cert(&dir.join("api"), &dir.join("kubelet-pki"), NODE).expect("kubelet serving certificate");
        let ca = dir.join("api/pki/ca.crt");
        let flags = NodeFlags::parse_from([
            "node",
            "--kubeconfig",
            api.kubeconfig.to_str().expect("utf-8"),
            &format!("--container-runtime-endpoint={endpoint}"),
            &format!("--hostname-override={NODE}"),
            "--healthz-port=0",
            // A free port: kubelet's 10250 may be taken by a test running beside this one.
            "--port=0",
            "--address=127.0.0.1",
            // The API server reaches the kubelet API at the node's address.
            "--node-ip=127.0.0.1",
            &format!("--tls-cert-file={}", cert.display()),
            &format!("--tls-private-key-file={}", key.display()),
            &format!("--client-ca-file={}", ca.display()),
            "--pod-logs-directory",
            logs.to_str().expect("utf-8"),
        ]);
        let config = rkube_node::cli::node_config(flags.args).expect("node config");
        let agent = rkube_node::agent::start(config, client.clone()).await.expect("node agent on containerd");
        ContainerdNode { containerd, api, client, agent, endpoint, logs }
    }

    /// Stops the agent, removes every sandbox from containerd, stops containerd (by PID) and
    /// the API server.
    pub async fn shutdown(self) {
        let ContainerdNode { mut containerd, api, agent, endpoint, .. } = self;
        agent.shutdown().await;
        if let Ok(cri) = CriClient::connect_lazy(&endpoint) {
            for s in cri.list_pod_sandbox().await.unwrap_or_default() {
                let _ = cri.stop_pod_sandbox(&s.id).await;
                let _ = cri.remove_pod_sandbox(&s.id).await;
            }
        }
        containerd.shutdown();
        drop(api);
    }
}

/// A host-network pod (no CNI needed) bound to [`NODE`] running `command` in [`IMAGE`].
pub fn host_network_pod(name: &str, restart: &str, command: &[&str]) -> k8s_openapi::api::core::v1::Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeName": NODE,
            "hostNetwork": true,
            "restartPolicy": restart,
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "main", "image": IMAGE, "command": command}],
        }
    }))
    .expect("pod")
}
