//! End to end: `kubectl logs` (kubectl 1.27 and 1.33) on `rkube up --node`. The API server's
//! `pods/log` goes to the node agent's kubelet API (HTTPS, the API server's kubelet client
//! certificate), which reads the container's CRI log file.
//!
//! Also the kubelet API itself, called directly: 401 without credentials, 403 for a user
//! without `nodes/proxy`, 200 for the admin certificate.
//!
//! Every process is killed by PID when its guard drops (the cluster, `kubectl logs -f`).

use crate::common;

use std::thread;
use std::time::{Duration, Instant};

use common::{Backend, Cluster, Credentials, Kubectl};

/// Longest wait for any pod transition or log line.
const LIMIT: Duration = Duration::from_secs(30);

/// `rkube up --node` with bob (token `bob-secret`, no roles) in its token file.
fn cluster_with_bob() -> (Cluster, tempfile::TempDir) {
    let fixtures = tempfile::tempdir().expect("tempdir");
    let tokens = fixtures.path().join("tokens.csv");
    std::fs::write(&tokens, "bob-secret,bob,2001\n").expect("token file");
    let cluster =
        Cluster::builder(Backend::Embedded).arg("--node").arg(format!("--token-auth-file={}", tokens.display())).start();
    (cluster, fixtures)
}

/// Waits for a Ready node and returns it.
#[track_caller]
fn ready_node(cluster: &Cluster, k: &Kubectl) -> serde_json::Value {
    let deadline = Instant::now() + LIMIT;
    loop {
        let nodes = k.json(&["get", "nodes"]);
        let ready = nodes["items"].as_array().into_iter().flatten().find(|n| {
            n["status"]["conditions"].as_array().into_iter().flatten().any(|c| c["type"] == "Ready" && c["status"] == "True")
        });
        if let Some(node) = ready {
            return node.clone();
        }
        assert!(Instant::now() < deadline, "no Ready node: {nodes}\n--- server log ---\n{}", cluster.server_log());
        thread::sleep(Duration::from_millis(200));
    }
}

/// Waits until `pod`'s containers all run.
#[track_caller]
fn running(cluster: &Cluster, k: &Kubectl, pod: &str) {
    let deadline = Instant::now() + LIMIT;
    loop {
        let p = k.json(&["get", "pod", pod]);
        let statuses = p["status"]["containerStatuses"].as_array().cloned().unwrap_or_default();
        if !statuses.is_empty() && statuses.iter().all(|s| s["state"]["running"].is_object()) {
            return;
        }
        assert!(Instant::now() < deadline, "{pod} not running: {}\n--- server log ---\n{}", p["status"], cluster.server_log());
        thread::sleep(Duration::from_millis(200));
    }
}

/// Runs `kubectl logs <args>` until its stdout is `want` (the container may not have written
/// everything yet).
#[track_caller]
fn logs_become(k: &Kubectl, args: &[&str], want: &str) {
    let mut a = vec!["logs"];
    a.extend_from_slice(args);
    let deadline = Instant::now() + LIMIT;
    loop {
        let f = k.run(&a);
        if f.code == Some(0) && f.stdout == want {
            return;
        }
        assert!(Instant::now() < deadline, "`{}`: code {:?}, stdout {:?}, stderr {:?}; want {want:?}", f.cmdline, f.code, f.stdout, f.stderr);
        thread::sleep(Duration::from_millis(200));
    }
}

/// The payload of an HTTP/1.1 chunked body (the kubelet streams logs).
fn dechunk(body: &str) -> String {
    let mut out = String::new();
    let mut rest = body;
    while let Some((size, after)) = rest.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 || after.len() < n {
            break;
        }
        out.push_str(&after[..n]);
        rest = after[n..].trim_start_matches("\r\n");
    }
    out
}

const TWO_CONTAINERS: &str = r#"
apiVersion: v1
kind: Pod
metadata:
  name: duo
spec:
  containers:
  - name: a
    image: busybox
    command: ["/bin/sh", "-c", "echo from-a; sleep 3600"]
  - name: b
    image: busybox
    command: ["/bin/sh", "-c", "echo from-b; sleep 3600"]
"#;

fn kubectl_logs_reads_container_output_through_the_kubelet_api(version: &str) {
    let (cluster, _fixtures) = cluster_with_bob();
    let k = cluster.kubectl(version);
    let node = ready_node(&cluster, &k);
    let addresses = node["status"]["addresses"].as_array().cloned().unwrap_or_default();
    assert!(
        addresses.iter().any(|a| a["type"] == "InternalIP" && a["address"] == "127.0.0.1"),
        "InternalIP 127.0.0.1 in {addresses:?}"
    );
    assert!(addresses.iter().any(|a| a["type"] == "Hostname"), "Hostname in {addresses:?}");
    let kubelet_port = node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"].as_u64().unwrap_or(0);
    assert!(kubelet_port > 0, "daemonEndpoints: {}", node["status"]["daemonEndpoints"]);

    k.ok(&["run", "lines", "--image=busybox", "--restart=Never", "--", "/bin/sh", "-c", "for i in 1 2 3; do echo line $i; done; sleep 3600"]);
    running(&cluster, &k, "lines");
    logs_become(&k, &["lines"], "line 1\nline 2\nline 3\n");
    assert_eq!(k.ok(&["logs", "lines", "--tail=1"]).stdout, "line 3\n");
    assert_eq!(k.ok(&["logs", "lines", "--limit-bytes=9"]).stdout, "line 1\nli");
    assert_eq!(k.ok(&["logs", "lines", "--since=1h"]).stdout, "line 1\nline 2\nline 3\n");
    assert_eq!(k.ok(&["logs", "lines", "-c", "lines"]).stdout, "line 1\nline 2\nline 3\n");
    let stamped = k.ok(&["logs", "lines", "--timestamps"]).stdout;
    let stamped: Vec<&str> = stamped.lines().collect();
    assert_eq!(stamped.len(), 3, "{stamped:?}");
    for (i, line) in stamped.iter().enumerate() {
        let (ts, rest) = line.split_once(' ').unwrap_or_default();
        assert_eq!(rest, format!("line {}", i + 1));
        assert!(ts.len() >= 20 && ts.ends_with('Z') && ts.as_bytes()[10] == b'T', "RFC 3339 timestamp: {line:?}");
    }
    k.fails_with(
        &["logs", "lines", "--previous"],
        r#"Error from server (BadRequest): previous terminated container "lines" in pod "lines" not found"#,
    );

    // logs -f gets a line written after it started.
    k.ok(&["run", "ticker", "--image=busybox", "--restart=Never", "--", "/bin/sh", "-c", "i=0; while true; do i=$((i+1)); echo tick $i; sleep 0.5; done"]);
    running(&cluster, &k, "ticker");
    let mut follow = k.spawn(&["logs", "-f", "ticker"]);
    follow.expect_line("`tick 1`", LIMIT, |l| l == "tick 1");
    let snapshot = k.ok(&["logs", "ticker"]).stdout;
    let last: u64 = snapshot.lines().last().and_then(|l| l.strip_prefix("tick ")).and_then(|n| n.parse().ok()).unwrap_or(0);
    assert!(last >= 1, "{snapshot:?}");
    let next = format!("tick {}", last + 1);
    follow.expect_line(&format!("`{next}`, written after the snapshot"), LIMIT, |l| l == next);
    drop(follow);

    // Two containers: -c picks one; without it kubectl defaults to the first, and the API
    // itself asks for a name.
    k.run_stdin(&["apply", "-f", "-"], TWO_CONTAINERS).success();
    running(&cluster, &k, "duo");
    logs_become(&k, &["duo", "-c", "b"], "from-b\n");
    let defaulted = k.ok(&["logs", "duo"]);
    assert_eq!(defaulted.stdout, "from-a\n");
    assert!(defaulted.stderr.contains(r#"Defaulted container "a" out of: a, b"#), "{}", defaulted.stderr);
    k.fails_with(
        &["get", "--raw", "/api/v1/namespaces/default/pods/duo/log"],
        "Error from server (BadRequest): a container name must be specified for pod duo, choose one of: [a b]",
    );
    // kubectl checks the name itself; the API answers the same.
    k.fails_with(&["logs", "duo", "-c", "nope"], "error: container nope is not valid for pod duo");
    k.fails_with(
        &["get", "--raw", "/api/v1/namespaces/default/pods/duo/log?container=nope"],
        "Error from server (BadRequest): container nope is not valid for pod duo",
    );

    // RBAC: pods/log is its own subresource.
    k.ok(&["create", "role", "pod-reader", "--verb=get", "--resource=pods"]);
    k.ok(&["create", "rolebinding", "bob-reads-pods", "--role=pod-reader", "--user=bob"]);
    let bob = cluster.kubectl_with(version, &cluster.write_kubeconfig_for("bob", &Credentials::Token("bob-secret".into())));
    bob.ok(&["get", "pod", "lines"]);
    bob.fails_with(
        &["logs", "lines"],
        r#"Error from server (Forbidden): pods "lines" is forbidden: User "bob" cannot get resource "pods/log" in API group "" in the namespace "default""#,
    );

    // The kubelet API directly.
    let info = cluster.kubeconfig_info();
    let kubelet = common::KubeconfigInfo { server: format!("https://127.0.0.1:{kubelet_port}"), ..info.clone() };
    let path = "/containerLogs/default/lines/lines?tailLines=2";
    let anonymous = kubelet.client(&Credentials::None).expect("client").get(path).expect("GET");
    assert_eq!(anonymous, (401, "Unauthorized".to_string()));
    let as_bob = kubelet.client(&Credentials::Token("bob-secret".into())).expect("client").get(path).expect("GET");
    assert_eq!(as_bob, (403, "Forbidden (user=bob, verb=get, resource=nodes, subresource(s)=[proxy])".to_string()));
    let (code, body) = kubelet.client(&info.credentials).expect("client").get(path).expect("GET");
    assert_eq!((code, dechunk(&body)), (200, "line 2\nline 3\n".to_string()));
}

/// `rkube up --insecure --node`: no PKI, so the kubelet API serves a self-signed certificate
/// and allows everyone, and the API server reads logs without a client certificate.
#[test]
fn insecure_up_node_serves_logs_too() {
    let cluster = Cluster::builder(Backend::Embedded).insecure().arg("--node").start();
    let k = cluster.kubectl("1.33");
    ready_node(&cluster, &k);
    k.ok(&["run", "hello", "--image=busybox", "--restart=Never", "--", "/bin/sh", "-c", "echo hello; sleep 3600"]);
    running(&cluster, &k, "hello");
    logs_become(&k, &["hello"], "hello\n");
}

per_kubectl_version!(kubectl_logs_reads_container_output_through_the_kubelet_api);
