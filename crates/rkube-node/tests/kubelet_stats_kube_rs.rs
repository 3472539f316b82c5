//! The kubelet API's resource endpoints, read by a kube-rs client through the API server's
//! `nodes/proxy` (`rkube up` in-process + `run_local_node`, the API server's kubelet client
//! certificate on the way to the node agent's HTTPS kubelet API): `/stats/summary` shows a
//! container burning CPU and holding memory, `/metrics/resource` names it with upstream's
//! labels (and `/metrics/cadvisor` with cAdvisor's), `/pods` lists the pod, `/metrics` is the
//! agent's own registry, and `/run` answers a command's output. Where the runtime may make
//! cgroups (root), the container's figures come from its own cgroup, which carries its memory
//! limit: `availableBytes` is that limit less the working set.

use crate::common;

use std::time::{Duration, Instant};

use common::phases_until;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{ListParams, ObjectList, PostParams};
use kube::Api;
use serde_json::{json, Value};

/// A GET through the API server, as text.
async fn get_text(client: &kube::Client, path: &str) -> String {
    let req = http::Request::get(path).body(Vec::new()).expect("request");
    client.request_text(req).await.unwrap_or_else(|e| panic!("GET {path}: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rs_reads_the_kubelets_summary_resource_metrics_and_pods_through_nodes_proxy() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster = common::LocalCluster::start(dir.path(), |_| {}).await;
    let client = cluster.client.clone();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "burner", "namespace": "default"},
        "spec": {"containers": [{"name": "loop", "image": "busybox", "command": ["sh", "-c",
            "x=$(head -c 4000000 /dev/zero | tr '\\000' a); while :; do :; done"],
            "resources": {"limits": {"memory": "64Mi"}}}]}
    }))
    .expect("pod");
    pods.create(&PostParams::default(), &pod).await.expect("create");
    phases_until(&pods, "burner", "Running", Duration::from_secs(30)).await;
    let nodes: Api<Node> = Api::all(client.clone());
    let node_name = nodes.list(&ListParams::default()).await.expect("nodes").items[0].metadata.name.clone().expect("name");
    let proxy = format!("/api/v1/nodes/{node_name}/proxy");

    let deadline = Instant::now() + Duration::from_secs(30);
    let summary: Value = loop {
        let s: Value = serde_json::from_str(&get_text(&client, &format!("{proxy}/stats/summary")).await).expect("JSON summary");
        let burner = s["pods"].as_array().into_iter().flatten().find(|p| p["podRef"]["name"] == "burner");
        let c = burner.map(|p| p["containers"][0].clone()).unwrap_or_default();
        let cpu = c["cpu"]["usageCoreNanoSeconds"].as_u64().unwrap_or(0);
        let memory = c["memory"]["workingSetBytes"].as_u64().unwrap_or(0);
        if cpu > 100_000_000 && memory > 4_000_000 {
            break s;
        }
        assert!(Instant::now() < deadline, "burner not burning in the summary: {s}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    assert_eq!(summary["node"]["nodeName"], node_name.as_str());
    let burner = summary["pods"].as_array().into_iter().flatten().find(|p| p["podRef"]["name"] == "burner").expect("burner");
    assert_eq!(burner["podRef"]["namespace"], "default");
    assert!(burner["podRef"]["uid"].as_str().is_some_and(|u| !u.is_empty()));
    assert_eq!(burner["containers"][0]["name"], "loop");
    assert!(burner["cpu"]["usageCoreNanoSeconds"].as_u64() >= burner["containers"][0]["cpu"]["usageCoreNanoSeconds"].as_u64());
    // The runtime decides the same way on this host.
    let memory = &burner["containers"][0]["memory"];
    if rkube_runtime::cgroups::detect(true).is_cgroup() {
        let working = memory["workingSetBytes"].as_u64().expect("working set");
        assert_eq!(memory["availableBytes"].as_u64(), Some((64 << 20) - working), "limit less working set: {memory}");
        assert!(memory["pageFaults"].as_u64() > Some(0) && memory["usageBytes"].as_u64() >= Some(working), "{memory}");
    } else {
        assert_eq!(memory["availableBytes"], Value::Null, "no cgroup, no limit to measure against: {memory}");
    }

    let page = get_text(&client, &format!("{proxy}/metrics/resource")).await;
    let line = page
        .lines()
        .find(|l| l.starts_with("container_cpu_usage_seconds_total{container=\"loop\",namespace=\"default\",pod=\"burner\"} "))
        .unwrap_or_else(|| panic!("no burner CPU line in\n{page}"));
    let fields: Vec<&str> = line.split(' ').collect();
    assert_eq!(fields.len(), 3, "value and timestamp: {line}");
    assert!(fields[1].parse::<f64>().is_ok_and(|v| v > 0.1), "{line}");
    assert!(fields[2].parse::<i64>().is_ok_and(|ms| ms > 1_600_000_000_000), "timestamp in ms: {line}");

    let cadvisor = get_text(&client, &format!("{proxy}/metrics/cadvisor")).await;
    let line = cadvisor
        .lines()
        .find(|l| l.starts_with("container_cpu_usage_seconds_total{container=\"loop\",id=\"/") && l.contains("image=\"busybox\"") && l.contains("pod=\"burner\",cpu=\"total\"}"))
        .unwrap_or_else(|| panic!("no burner CPU line in\n{cadvisor}"));
    assert!(line.split(' ').nth(1).and_then(|v| v.parse::<f64>().ok()).is_some_and(|v| v > 0.1), "{line}");
    assert!(cadvisor.lines().any(|l| l.starts_with("machine_cpu_cores ")), "{cadvisor}");

    let listed: ObjectList<Pod> = serde_json::from_str(&get_text(&client, &format!("{proxy}/pods")).await).expect("PodList");
    assert!(listed.items.iter().any(|p| p.metadata.name.as_deref() == Some("burner")));
    let own = get_text(&client, &format!("{proxy}/metrics")).await;
    assert!(own.contains("kubelet_pleg_relist_duration_seconds"), "{own}");

    // `/run`: a command's output; 400 without one, 404 for a container the pod lacks.
    let run = |path: String| {
        let client = client.clone();
        async move {
            let req = http::Request::post(path).body(Vec::new()).expect("request");
            let resp = client.send(req.map(kube::client::Body::from)).await.expect("send");
            let code = resp.status().as_u16();
            let body = http_body_util::BodyExt::collect(resp.into_body()).await.map(|b| b.to_bytes()).unwrap_or_default();
            (code, String::from_utf8_lossy(&body).into_owned())
        }
    };
    assert_eq!(run(format!("{proxy}/run/default/burner/loop?cmd=echo%20hello%20there")).await, (200, "hello there\n".to_string()));
    assert_eq!(run(format!("{proxy}/run/default/burner/loop")).await.0, 400);
    assert_eq!(run(format!("{proxy}/run/default/burner/nope?cmd=true")).await.0, 404);

    cluster.stop().await;
}
