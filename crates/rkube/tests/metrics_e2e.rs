//! End to end: resource metrics on `rkube up --node --metric-resolution=1s`, with kubectl 1.27
//! and 1.33, around one pod whose busybox shell burns a core and holds ~4 MB:
//!
//! - the node agent's kubelet API, called directly over HTTPS with the admin's client
//!   certificate: `/stats/summary` (the pod's container with CPU time and a working set),
//!   `/metrics/resource` (upstream's metric names and labels), `/pods`; 403 for a user without
//!   `nodes/stats`;
//! - `nodes/proxy` through the API server (`kubectl get --raw .../proxy/stats/summary`), and
//!   403 for a user without it;
//! - `metrics.k8s.io/v1beta1`: discovery, NodeMetrics and PodMetrics shapes, selectors, 404 for
//!   a pod without samples, RBAC 403 and `view`'s aggregated access, tables;
//! - `kubectl top node` and `kubectl top pod` print non-zero CPU and memory.
//!
//! Every process is killed by PID when its guard drops.

use crate::common;

use std::time::Duration;

use common::{Backend, Cluster, Credentials, Kubectl, Table};
use serde_json::Value;

/// Longest wait for a pod transition or for metrics to appear (two scrapes 1 s apart).
const LIMIT: Duration = Duration::from_secs(60);

/// A shell that holds a 4 MB variable and loops forever.
const BURN: &str = "x=$(head -c 4000000 /dev/zero | tr '\\000' a); while :; do :; done";

/// `rkube up --node` scraping every second, with bob (token `bob-secret`, no roles) and carol
/// (token `carol-secret`, `view` in `default` once bound) in its token file.
fn cluster() -> (Cluster, tempfile::TempDir) {
    let fixtures = tempfile::tempdir().expect("tempdir");
    let tokens = fixtures.path().join("tokens.csv");
    std::fs::write(&tokens, "bob-secret,bob,2001\ncarol-secret,carol,2002\n").expect("token file");
    let cluster = Cluster::builder(Backend::Embedded)
        .arg("--node")
        .arg("--metric-resolution=1s")
        .arg(format!("--token-auth-file={}", tokens.display()))
        .start();
    (cluster, fixtures)
}

/// `kubectl get --raw <path>` as JSON.
#[track_caller]
fn raw_json(k: &Kubectl, path: &str) -> Value {
    let f = k.ok(&["get", "--raw", path]);
    serde_json::from_str(&f.stdout).unwrap_or_else(|e| panic!("{}: {e}: {}", f.cmdline, f.stdout))
}

/// The value of a CPU quantity in millicores (`950m`, `123456n`, `1`).
fn millicores(q: &str) -> f64 {
    if let Some(n) = q.strip_suffix('n') {
        n.parse::<f64>().unwrap_or(0.0) / 1e6
    } else if let Some(m) = q.strip_suffix('m') {
        m.parse().unwrap_or(0.0)
    } else {
        q.parse::<f64>().unwrap_or(0.0) * 1000.0
    }
}

/// The value of a memory quantity in bytes (`4Ki`, `12Mi`, `1000`).
fn bytes(q: &str) -> f64 {
    for (suffix, scale) in [("Ki", 1024.0), ("Mi", 1024.0 * 1024.0), ("Gi", 1024.0 * 1024.0 * 1024.0)] {
        if let Some(n) = q.strip_suffix(suffix) {
            return n.parse::<f64>().unwrap_or(0.0) * scale;
        }
    }
    q.parse().unwrap_or(0.0)
}

/// The `kubectl top` row of `name` once it shows non-zero CPU (`CPU(cores)` column, e.g.
/// `987m`), as (cpu millicores, memory cell).
fn top_row(cluster: &Cluster, k: &Kubectl, args: &[&str], name: &str) -> (f64, String) {
    cluster.wait_until(&format!("`kubectl {}` showing {name} with CPU", args.join(" ")), LIMIT, || {
        let f = k.run(args);
        if f.code != Some(0) {
            return None;
        }
        let t = Table::parse(&f.stdout);
        let row = t.rows.iter().find(|r| r.first().map(String::as_str) == Some(name))?;
        let cpu = t.cell(row, "CPU(cores)").trim_end_matches('m').parse::<f64>().ok()?;
        (cpu > 0.0).then(|| (cpu, t.cell(row, "MEMORY(bytes)").to_string()))
    })
}

fn kubectl_top_and_the_metrics_api_show_a_burning_pod(version: &str) {
    let (cluster, _fixtures) = cluster();
    let k = cluster.kubectl(version);
    cluster.wait_for_ready_node(&k, LIMIT);
    let node = k.json(&["get", "nodes"])["items"][0].clone();
    let node_name = node["metadata"]["name"].as_str().expect("node name").to_string();
    let kubelet_port = node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"].as_u64().expect("kubelet port");
    k.ok(&["run", "burner", "--image=busybox", "--restart=Never", "--", "/bin/sh", "-c", BURN]);

    // The kubelet API directly: the summary shows the container burning.
    let info = cluster.kubeconfig_info();
    let kubelet = common::KubeconfigInfo { server: format!("https://127.0.0.1:{kubelet_port}"), ..info.clone() };
    let admin = kubelet.client(&info.credentials).expect("client");
    let summary: Value = cluster.wait_until("the summary listing burner with CPU and memory", LIMIT, || {
        let (code, body) = admin.get("/stats/summary").ok()?;
        let s: Value = serde_json::from_str(&body).ok()?;
        let pod = s["pods"].as_array()?.iter().find(|p| p["podRef"]["name"] == "burner")?.clone();
        let c = &pod["containers"][0];
        let busy = c["cpu"]["usageCoreNanoSeconds"].as_u64()? > 100_000_000 && c["memory"]["workingSetBytes"].as_u64()? > 4_000_000;
        (code == 200 && busy).then_some(s)
    });
    assert_eq!(summary["node"]["nodeName"], node_name.as_str());
    assert!(summary["node"]["cpu"]["usageCoreNanoSeconds"].as_u64().is_some_and(|n| n > 0), "{}", summary["node"]);
    assert!(summary["node"]["memory"]["workingSetBytes"].as_u64().is_some_and(|n| n > 0), "{}", summary["node"]);
    let pod = summary["pods"].as_array().into_iter().flatten().find(|p| p["podRef"]["name"] == "burner").expect("burner");
    assert_eq!((pod["podRef"]["namespace"].as_str(), pod["containers"][0]["name"].as_str()), (Some("default"), Some("burner")));
    assert!(pod["startTime"].as_str().is_some_and(|t| t.ends_with('Z')), "{pod}");
    let (code, page) = admin.get("/metrics/resource").expect("GET /metrics/resource");
    assert_eq!(code, 200);
    for prefix in [
        "container_cpu_usage_seconds_total{container=\"burner\",namespace=\"default\",pod=\"burner\"} ",
        "container_memory_working_set_bytes{container=\"burner\",namespace=\"default\",pod=\"burner\"} ",
        "container_start_time_seconds{container=\"burner\",namespace=\"default\",pod=\"burner\"} ",
        "pod_cpu_usage_seconds_total{namespace=\"default\",pod=\"burner\"} ",
        "node_cpu_usage_seconds_total ",
        "node_memory_working_set_bytes ",
        "scrape_error 0",
    ] {
        assert!(page.lines().any(|l| l.starts_with(prefix)), "{prefix:?} in\n{page}");
    }
    let (code, pods) = admin.get("/pods").expect("GET /pods");
    let pods: Value = serde_json::from_str(&pods).expect("PodList");
    assert_eq!((code, pods["kind"].as_str()), (200, Some("PodList")));
    assert!(pods["items"].as_array().into_iter().flatten().any(|p| p["metadata"]["name"] == "burner"), "{pods}");
    let bob_kubelet = kubelet.client(&Credentials::Token("bob-secret".into())).expect("client");
    assert_eq!(
        bob_kubelet.get("/stats/summary").expect("GET"),
        (403, "Forbidden (user=bob, verb=get, resource=nodes, subresource(s)=[stats])".to_string())
    );

    // nodes/proxy through the API server.
    let proxied = raw_json(&k, &format!("/api/v1/nodes/{node_name}/proxy/stats/summary"));
    assert_eq!(proxied["node"]["nodeName"], node_name.as_str());
    let raw = k.ok(&["get", "--raw", &format!("/api/v1/nodes/{node_name}/proxy/metrics/resource")]);
    assert!(raw.stdout.contains("node_cpu_usage_seconds_total "), "{}", raw.stdout);
    let bob = cluster.kubectl_with(version, &cluster.write_kubeconfig_for("bob", &Credentials::Token("bob-secret".into())));
    bob.fails_with(
        &["get", "--raw", &format!("/api/v1/nodes/{node_name}/proxy/stats/summary")],
        &format!(r#"Error from server (Forbidden): nodes "{node_name}" is forbidden: User "bob" cannot get resource "nodes/proxy" in API group "" at the cluster scope"#),
    );

    // kubectl top, once two scrapes have happened.
    let (cpu, memory) = top_row(&cluster, &k, &["top", "pod", "burner"], "burner");
    assert!(cpu >= 1.0 && bytes(&memory) >= 4_000_000.0, "burner: {cpu}m, {memory}");
    top_row(&cluster, &k, &["top", "pod"], "burner");
    top_row(&cluster, &k, &["top", "pod", "-l", "run=burner", "--containers"], "burner");
    let (node_cpu, node_memory) = top_row(&cluster, &k, &["top", "node"], &node_name);
    assert!(node_cpu >= 1.0 && bytes(&node_memory) > 0.0, "{node_name}: {node_cpu}m, {node_memory}");

    // The API behind it.
    let groups = raw_json(&k, "/apis");
    let metrics_group = groups["groups"].as_array().into_iter().flatten().find(|g| g["name"] == "metrics.k8s.io").expect("metrics.k8s.io in /apis");
    assert_eq!(metrics_group["preferredVersion"]["groupVersion"], "metrics.k8s.io/v1beta1");
    let service = k.json(&["get", "apiservice", "v1beta1.metrics.k8s.io"]);
    assert!(service["spec"].get("service").is_none(), "a local APIService: {service}");
    let pm = raw_json(&k, "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods/burner");
    assert_eq!((pm["kind"].as_str(), pm["apiVersion"].as_str()), (Some("PodMetrics"), Some("metrics.k8s.io/v1beta1")));
    assert_eq!(pm["metadata"]["labels"]["run"], "burner", "the pod's labels: {pm}");
    assert!(pm["window"].as_str().is_some_and(|w| w.ends_with('s')) && pm["timestamp"].as_str().is_some_and(|t| t.ends_with('Z')), "{pm}");
    assert_eq!(pm["containers"][0]["name"], "burner");
    let usage = &pm["containers"][0]["usage"];
    assert!(millicores(usage["cpu"].as_str().unwrap_or("")) > 1.0 && bytes(usage["memory"].as_str().unwrap_or("")) > 4e6, "{usage}");
    let by_label = raw_json(&k, "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods?labelSelector=run%3Dburner");
    assert_eq!(by_label["kind"], "PodMetricsList");
    assert_eq!(by_label["items"].as_array().map(Vec::len), Some(1), "{by_label}");
    let none = raw_json(&k, "/apis/metrics.k8s.io/v1beta1/pods?fieldSelector=metadata.name%3Dnope");
    assert_eq!(none["items"].as_array().map(Vec::len), Some(0), "{none}");
    let nodes = raw_json(&k, &format!("/apis/metrics.k8s.io/v1beta1/nodes?fieldSelector=metadata.name%3D{node_name}"));
    assert_eq!((nodes["kind"].as_str(), nodes["items"][0]["metadata"]["name"].as_str()), (Some("NodeMetricsList"), Some(node_name.as_str())));
    assert!(millicores(nodes["items"][0]["usage"]["cpu"].as_str().unwrap_or("")) > 1.0, "{nodes}");
    k.fails_with(
        &["get", "--raw", "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods/nope"],
        r#"Error from server (NotFound): podmetrics.metrics.k8s.io "nope" not found"#,
    );
    let table = Table::parse(&k.ok(&["get", "podmetrics"]).stdout);
    assert_eq!(table.header_strs(), ["NAME", "CPU", "MEMORY", "WINDOW"]);
    let row = table.row("NAME", "burner");
    assert!(millicores(table.cell(&row, "CPU")) > 1.0 && table.cell(&row, "WINDOW").ends_with('s'), "{row:?}");

    // RBAC: nothing for bob; carol gets metrics through `view`'s aggregated rule.
    let denied = bob.run(&["top", "pod", "burner"]);
    assert_ne!(denied.code, Some(0));
    assert!(denied.stderr.contains(r#"User "bob" cannot"#) && denied.stderr.contains(r#"in API group "metrics.k8s.io""#), "{}", denied.stderr);
    k.ok(&["create", "rolebinding", "carol-view", "--clusterrole=view", "--user=carol"]);
    let carol = cluster.kubectl_with(version, &cluster.write_kubeconfig_for("carol", &Credentials::Token("carol-secret".into())));
    top_row(&cluster, &carol, &["top", "pod", "burner"], "burner");
}

per_kubectl_version!(kubectl_top_and_the_metrics_api_show_a_burning_pod);
