//! End to end: `rkube up` (in-process, its public entry point) + `run_local_node` (runtime,
//! agent with evented PLEG) + the scheduler. Pods are created without `nodeName`, bound by the scheduler,
//! run as host processes, and their status reaches the API server.

use crate::common;

use std::time::{Duration, Instant};

use common::{apiserver, http_get, phases_until};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{DeleteParams, PostParams};
use kube::Api;
use rkube_node::pleg::metrics::CacheSource;
use serde_json::json;

fn pod(name: &str, restart: &str, command: &[&str]) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "restartPolicy": restart,
            "containers": [{"name": "main", "image": "busybox", "command": command}],
        }
    }))
    .expect("pod")
}

fn exit_code(p: &Pod) -> Option<i32> {
    p.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .first()?
        .state
        .as_ref()?
        .terminated
        .as_ref()
        .map(|t| t.exit_code)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_run_on_the_local_node_and_report_phases_exit_codes_and_deletion() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (api, client) = apiserver(dir.path()).await;
    let node = rkube_node::run_local_node(&api.kubeconfig, dir.path()).await.expect("local node");
    let scheduler = rkube_scheduler::cli::start(client.clone(), Default::default()).await.expect("scheduler");

    // The Node registers Ready, with a lease.
    let nodes: Api<Node> = Api::all(client.clone());
    let n = nodes.get(&node.node_name).await.expect("node registered");
    let ready = n.status.as_ref().and_then(|s| s.conditions.as_ref()).and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"));
    assert_eq!(ready.map(|c| c.status.as_str()), Some("True"));
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    assert!(leases.get(&node.node_name).await.is_ok(), "lease created");

    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");

    // A command that exits 0: Pending → Running → Succeeded, bound by the scheduler.
    pods.create(&PostParams::default(), &pod("ok", "Never", &["sh", "-c", "sleep 1; exit 0"])).await.expect("create ok");
    let (phases, done) = phases_until(&pods, "ok", "Succeeded", Duration::from_secs(20)).await;
    assert!(phases.contains(&"Running".to_string()), "phases {phases:?}");
    assert_eq!(phases.last().map(String::as_str), Some("Succeeded"));
    assert_eq!(done.spec.as_ref().and_then(|s| s.node_name.as_deref()), Some(node.node_name.as_str()));
    assert_eq!(exit_code(&done), Some(0));
    assert!(done.status.as_ref().and_then(|s| s.pod_ip.as_ref()).is_some());

    // Exit 3 under Never: Failed with the exit code.
    pods.create(&PostParams::default(), &pod("bad", "Never", &["sh", "-c", "exit 3"])).await.expect("create bad");
    let (_, failed) = phases_until(&pods, "bad", "Failed", Duration::from_secs(20)).await;
    assert_eq!(exit_code(&failed), Some(3));

    // /healthz is ok and /metrics carries the PLEG metrics under kubelet's names.
    let addr = node.agent().healthz_addr;
    let (code, body) = http_get(addr, "/healthz").await;
    assert_eq!((code, body.as_str()), (200, "ok"));
    let (code, metrics) = http_get(addr, "/metrics").await;
    assert_eq!(code, 200);
    for name in ["kube_pod_missed_events 0", "kubelet_evented_pleg_connection_success_count 1", "kubelet_pleg_relist_duration_seconds_count"] {
        assert!(metrics.contains(name), "{name} missing from /metrics");
    }

    // The statuses came from container events, not from relisting.
    let m = &node.agent().metrics;
    assert!(m.cache_updates_by(CacheSource::Event) > 0);
    assert_eq!(m.missed_events.get(), 0);

    // Deleting a running pod stops its process and removes the object.
    pods.create(&PostParams::default(), &pod("sleeper", "Always", &["sleep", "1000"])).await.expect("create sleeper");
    phases_until(&pods, "sleeper", "Running", Duration::from_secs(20)).await;
    let pids = node.runtime().runtime().running_pids();
    assert_eq!(pids.len(), 1, "only the sleeper runs, once (no duplicate container)");
    pods.delete("sleeper", &DeleteParams::default()).await.expect("delete");
    let deadline = Instant::now() + Duration::from_secs(20);
    while pods.get_opt("sleeper").await.expect("get").is_some() {
        assert!(Instant::now() < deadline, "pod object not removed after its containers stopped");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(!rkube_runtime::process::process_exists(pids[0]), "sleep {} still running", pids[0]);

    scheduler.shutdown().await.expect("scheduler stops");
    node.shutdown().await;
    drop(api);
}
