//! The official Python client (`kubernetes` on PyPI) against rkube: paged
//! LIST, WATCH from a list's resourceVersion, a NotFound error, and the
//! review APIs (TokenReview, SubjectAccessReview), and pod logs and exec on `rkube up --node`.
//!
//! The interpreter is `$RKUBE_PYTHON` (`.ci/run` makes the virtualenv
//! `target/python-venv` with `pip install kubernetes` and sets it), else that
//! virtualenv if present, else `python3`.

use crate::common;

use std::process::Command;
use std::time::Duration;

use common::{process, Backend, Cluster};
use serde_json::json;

/// `$RKUBE_PYTHON`, else the virtualenv `.ci/run` leaves in
/// `target/python-venv`, else `python3`.
fn python() -> String {
    if let Ok(p) = std::env::var("RKUBE_PYTHON") {
        return p;
    }
    let venv = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../target/python-venv/bin/python"
    );
    if std::path::Path::new(venv).is_file() {
        return venv.to_owned();
    }
    "python3".to_owned()
}

/// Asserts `py` can import the `kubernetes` package.
fn assert_client_installed(py: &str) {
    let probe = process::run(
        {
            let mut c = Command::new(py);
            c.args(["-c", "import kubernetes"]);
            c
        },
        None,
        Duration::from_secs(60),
    );
    assert_eq!(
        probe.code,
        Some(0),
        "{py} cannot import the `kubernetes` package (run .ci/run, or set RKUBE_PYTHON to a venv with `pip install kubernetes`): {}",
        probe.stderr
    );
}

fn list_watch(backend: Backend) {
    let py = python();
    assert_client_installed(&py);
    let cluster = Cluster::start(backend);
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/list_watch.py");
    let mut cmd = Command::new(&py);
    cmd.arg(script)
        .arg(&cluster.kubeconfig)
        .env("HOME", cluster.dir());
    let out = process::run(cmd, None, Duration::from_secs(90)).success();
    let got: serde_json::Value = out.json();
    assert_eq!(got["names"], json!(["cm-0", "cm-1", "cm-2"]), "{got}");
    assert_eq!(
        got["pages"],
        json!(2),
        "3 objects at limit=2 are 2 pages: {got}"
    );
    assert_eq!(
        got["events"],
        json!([["ADDED", "late"], ["MODIFIED", "cm-0"], ["DELETED", "cm-1"]]),
        "{got}"
    );
    assert_eq!(
        got["groups"],
        json!([
            "admissionregistration.k8s.io",
            "apiextensions.k8s.io",
            "apiregistration.k8s.io",
            "apps",
            "authentication.k8s.io",
            "authorization.k8s.io",
            "autoscaling",
            "batch",
            "certificates.k8s.io",
            "coordination.k8s.io",
            "discovery.k8s.io",
            "events.k8s.io",
            "flowcontrol.apiserver.k8s.io",
            "metrics.k8s.io",
            "networking.k8s.io",
            "node.k8s.io",
            "policy",
            "rbac.authorization.k8s.io",
            "scheduling.k8s.io",
            "storage.k8s.io",
        ]),
        "the Python client sees every group: {got}"
    );
    assert_eq!(
        got["typed_lists"],
        json!({
            "batch/v1 jobs": 0,
            "apps/v1 daemonsets": 0,
            "v1 replicationcontrollers": 0,
            "apiregistration.k8s.io/v1 apiservices": true,
            "certificates.k8s.io/v1 certificatesigningrequests": 0,
        }),
        "{got}"
    );
    assert_eq!(
        got["not_found"],
        json!({"status": 404, "reason": "NotFound", "message": "configmaps \"nope\" not found"}),
        "{got}"
    );
}

#[test]
fn python_client_pages_lists_and_watches_on_embedded() {
    list_watch(Backend::Embedded);
}

#[test]
fn python_client_pages_lists_and_watches_on_etcd() {
    list_watch(Backend::Etcd);
}

/// `create_token_review` authenticates a `--token-auth-file` token (and
/// reports an unknown one), `create_subject_access_review` follows the RBAC
/// bindings kubectl made: what the client decodes from rkube's answers.
#[test]
fn python_client_token_review_and_subject_access_review() {
    let py = python();
    assert_client_installed(&py);
    let tokens = tempfile::tempdir().expect("tempdir");
    let file = tokens.path().join("tokens.csv");
    std::fs::write(&file, "alice-secret,alice,1001,\"dev\"\n").expect("token file");
    let cluster = Cluster::builder(Backend::Embedded)
        .arg(format!("--token-auth-file={}", file.display()))
        .start();
    let admin = cluster.kubectl("1.33");
    admin.ok(&["create", "role", "pod-reader", "-n", "default", "--verb=get,list", "--resource=pods"]);
    admin.ok(&["create", "rolebinding", "alice-reads", "-n", "default", "--role=pod-reader", "--user=alice"]);
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/reviews.py");
    let mut cmd = Command::new(&py);
    cmd.arg(script)
        .arg(&cluster.kubeconfig)
        .arg("alice-secret")
        .env("HOME", cluster.dir());
    let got = process::run(cmd, None, Duration::from_secs(90)).success().json();
    assert_eq!(
        got["token"],
        json!({"authenticated": true, "username": "alice", "uid": "1001",
               "groups": ["dev", "system:authenticated"], "error": null}),
        "{got}"
    );
    assert_eq!(
        got["bad_token"],
        json!({"authenticated": null, "username": null, "uid": null, "groups": null,
               "error": "invalid bearer token"}),
        "{got}"
    );
    assert_eq!(
        got["list_pods"],
        json!({"allowed": true, "denied": null,
               "reason": "RBAC: allowed by RoleBinding \"alice-reads\" of Role \"pod-reader\" to User \"alice\" in namespace \"default\""}),
        "{got}"
    );
    assert_eq!(got["delete_pods"], json!({"allowed": false, "denied": null, "reason": null}), "{got}");
}

/// `read_namespaced_pod_log` on `rkube up --node`: the whole log, `tail_lines`,
/// `limit_bytes`, and the API's 400 for a container the pod lacks.
#[test]
fn python_client_reads_pod_logs_from_the_node() {
    let py = python();
    assert_client_installed(&py);
    let cluster = Cluster::builder(Backend::Embedded).arg("--node").start();
    let k = cluster.kubectl("1.33");
    k.ok(&["run", "printer", "--image=busybox", "--restart=Never", "--", "/bin/sh", "-c", "echo one; echo two; sleep 3600"]);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    // Scheduled, running and both lines written.
    while k.run(&["logs", "printer"]).stdout != "one\ntwo\n" {
        assert!(std::time::Instant::now() < deadline, "printer never logged both lines:\n{}", cluster.server_log());
        std::thread::sleep(Duration::from_millis(200));
    }
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/pod_log.py");
    let mut cmd = Command::new(&py);
    cmd.arg(script).arg(&cluster.kubeconfig).arg("printer").env("HOME", cluster.dir());
    let got = process::run(cmd, None, Duration::from_secs(90)).success().json();
    assert_eq!(got["all"], json!("one\ntwo\n"), "{got}");
    assert_eq!(got["tail"], json!("two\n"), "{got}");
    assert_eq!(got["limit"], json!("one"), "{got}");
    assert_eq!(
        got["bad_container"],
        json!({"status": 400, "reason": "BadRequest", "message": "container nope is not valid for pod printer"}),
        "{got}"
    );
}

/// `stream(connect_get_namespaced_pod_exec, ...)` on `rkube up --node` (the client's
/// WebSocket exec): the whole output at once, then stdin, separate stdout and stderr, and
/// the exit code the client reads from the error channel's `Status`.
#[test]
fn python_client_execs_in_a_pod_over_websocket() {
    let py = python();
    assert_client_installed(&py);
    let cluster = Cluster::builder(Backend::Embedded).arg("--node").start();
    let k = cluster.kubectl("1.33");
    k.ok(&["run", "shell", "--image=busybox", "--restart=Never", "--", "sleep", "3600"]);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !k.json(&["get", "pod", "shell"])["status"]["containerStatuses"][0]["state"]["running"].is_object() {
        assert!(std::time::Instant::now() < deadline, "shell never ran:\n{}", cluster.server_log());
        std::thread::sleep(Duration::from_millis(200));
    }
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/pod_exec.py");
    let mut cmd = Command::new(&py);
    cmd.arg(script).arg(&cluster.kubeconfig).arg("shell").env("HOME", cluster.dir());
    let got = process::run(cmd, None, Duration::from_secs(90)).success().json();
    assert_eq!(got["output"], json!("hello\nworld\n"), "{got}");
    assert_eq!(got["stdout"], json!("got ping\n"), "{got}");
    assert_eq!(got["stderr"], json!("bad\n"), "{got}");
    assert_eq!(got["returncode"], json!(4), "{got}");
}

/// `portforward(connect_get_namespaced_pod_portforward, ...)` on `rkube up --node` (the
/// client's WebSocket port-forward protocol): an HTTP GET to busybox `httpd` in a pod.
#[test]
fn python_client_port_forwards_to_an_http_server_in_a_pod() {
    let py = python();
    assert_client_installed(&py);
    let cluster = Cluster::builder(Backend::Embedded).arg("--node").start();
    let k = cluster.kubectl("1.33");
    let site = cluster.dir().join("site");
    std::fs::create_dir_all(&site).expect("site dir");
    std::fs::write(site.join("hello.txt"), "hello through the tunnel\n").expect("page");
    let port = common::cluster::free_port().to_string();
    let listen = format!("127.0.0.1:{port}");
    let home = site.display().to_string();
    k.ok(&["run", "web", "--image=busybox", "--restart=Never", "--", "busybox", "httpd", "-f", "-p", &listen, "-h", &home]);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(&listen).is_err() {
        assert!(std::time::Instant::now() < deadline, "httpd never listened:\n{}", cluster.server_log());
        std::thread::sleep(Duration::from_millis(200));
    }
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/pod_portforward.py");
    let mut cmd = Command::new(&py);
    cmd.arg(script).arg(&cluster.kubeconfig).arg("web").arg(&port).env("HOME", cluster.dir());
    let got = process::run(cmd, None, Duration::from_secs(90)).success().json();
    assert_eq!(got["status_line"], json!("HTTP/1.1 200 OK"), "{got}");
    assert_eq!(got["body"], json!("hello through the tunnel\n"), "{got}");
    assert_eq!(got["error"], json!(null), "{got}");
}
