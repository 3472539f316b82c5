//! kube-rs `Api::exec` (its `ws` feature: WebSocket, `v4.channel.k8s.io`) against `rkube up`
//! (in-process) + `run_local_node`: `pods/exec` goes from the API server to the node agent's
//! kubelet API and on to the runtime's streaming server. The client reads stdout, stderr and
//! the `Status` of the error channel (success, and a non-zero exit code).

use crate::common;

use std::time::Duration;

use common::{exec, phases_until};
use k8s_openapi::api::core::v1::Pod;
use kube::api::PostParams;
use kube::Api;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rs_execs_in_a_pod_and_reads_the_exit_status() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster = common::LocalCluster::start(dir.path(), |_| {}).await;
    let client = cluster.client.clone();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "shell", "namespace": "default"},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox", "command": ["sleep", "3600"]}]}
    }))
    .expect("pod");
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("create");
    phases_until(&pods, "shell", "Running", Duration::from_secs(20)).await;

    let (out, err, status) = exec(
        &pods,
        "shell",
        &["sh", "-c", "echo to-out; echo to-err >&2"],
    )
    .await;
    assert_eq!((out.as_str(), err.as_str()), ("to-out\n", "to-err\n"));
    assert_eq!(status.and_then(|s| s.status).as_deref(), Some("Success"));

    let (out, _, status) = exec(&pods, "shell", &["sh", "-c", "echo before; exit 5"]).await;
    assert_eq!(out, "before\n");
    let status = status.expect("a failure status");
    assert_eq!(
        (status.status.as_deref(), status.reason.as_deref()),
        (Some("Failure"), Some("NonZeroExitCode"))
    );
    let causes = status.details.and_then(|d| d.causes).unwrap_or_default();
    assert_eq!(causes.len(), 1, "{causes:?}");
    assert_eq!(
        (causes[0].reason.as_deref(), causes[0].message.as_deref()),
        (Some("ExitCode"), Some("5"))
    );

    cluster.stop().await;
}
