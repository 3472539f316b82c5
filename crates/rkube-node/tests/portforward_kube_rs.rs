//! kube-rs `Api::portforward` (its `ws` feature: WebSocket port-forward channels) against
//! `rkube up` (in-process) + `run_local_node`: `pods/portforward` goes from the API server to
//! the node agent's kubelet API and on to the runtime's streaming server, which connects to
//! the port in the pod (pods share the host's network here). An HTTP request through the
//! forwarded stream gets the file the pod serves; a second stream works the same way.

use crate::common;

use std::time::Duration;

use common::phases_until;
use k8s_openapi::api::core::v1::Pod;
use kube::api::PostParams;
use kube::Api;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A free loopback port (bound, then released for the pod to bind).
fn free_port() -> u16 {
    let l = std::net::TcpListener::bind(("127.0.0.1", 0)).expect("bind");
    l.local_addr().expect("addr").port()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rs_port_forwards_to_an_http_server_in_a_pod() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster = common::LocalCluster::start(dir.path(), |_| {}).await;
    let client = cluster.client.clone();
    let site = dir.path().join("site");
    std::fs::create_dir_all(&site).expect("site dir");
    std::fs::write(site.join("hello.txt"), "hello through the forward\n").expect("file");
    let port = free_port();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "python",
            "command": ["python3", "-m", "http.server", port.to_string(), "--bind", "0.0.0.0", "--directory", site.to_str().expect("utf-8")],
            "readinessProbe": {"tcpSocket": {"port": port}, "periodSeconds": 1}}]}
    }))
    .expect("pod");
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("create");
    phases_until(&pods, "web", "Running", Duration::from_secs(20)).await;
    // Ready once the server listens.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !pods
        .get("web")
        .await
        .ok()
        .and_then(|p| p.status)
        .and_then(|s| s.container_statuses)
        .is_some_and(|c| c.iter().all(|c| c.ready))
    {
        assert!(
            std::time::Instant::now() < deadline,
            "web never became ready"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    for _ in 0..2 {
        let mut pf = pods.portforward("web", &[port]).await.expect("portforward");
        let mut stream = pf.take_stream(port).expect("the port's stream");
        stream
            .write_all(b"GET /hello.txt HTTP/1.0\r\nHost: web\r\n\r\n")
            .await
            .expect("write the request");
        let mut answer = Vec::new();
        tokio::time::timeout(Duration::from_secs(20), stream.read_to_end(&mut answer))
            .await
            .expect("the server closes after answering")
            .expect("read");
        let text = String::from_utf8_lossy(&answer);
        assert!(text.starts_with("HTTP/1.0 200"), "{text}");
        assert!(
            text.ends_with("\r\n\r\nhello through the forward\n"),
            "{text}"
        );
        drop(stream);
        pf.abort();
    }

    cluster.stop().await;
}
