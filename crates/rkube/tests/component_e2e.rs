//! End to end: the `rkube scheduler` and `rkube controller-manager` binaries
//! against `rkube up` (HTTPS, RBAC, the admin kubeconfig): each takes its
//! Lease in `kube-system` with the leader election flags given
//! (`holderIdentity` `<hostname>_<uuid>`), the scheduler serves `/healthz`
//! and `/metrics` over HTTPS on `--bind-address`/`--secure-port`, and on
//! SIGTERM it exits 0 and releases its Lease. kubectl 1.33 reads the Leases;
//! curl reads the health endpoints. Every process is killed by PID on drop.

use crate::common;

use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use common::cluster::{free_port, rkube_bin};
use common::process::{self, ChildGuard};
use common::{Backend, Cluster, Kubectl};
use serde_json::Value;

const LIMIT: Duration = Duration::from_secs(30);

fn spawn(args: &[&str], name: &str) -> ChildGuard {
    let child = Command::new(rkube_bin())
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn rkube");
    ChildGuard::new(child, name)
}

/// The Lease `kube-system/<name>` once it has a holder.
#[track_caller]
fn held_lease(k: &Kubectl, name: &str) -> Value {
    let deadline = Instant::now() + LIMIT;
    loop {
        let out = k.run(&["get", "lease", "-n", "kube-system", name, "-o", "json"]);
        if out.code == Some(0) {
            let lease: Value = serde_json::from_str(&out.stdout).expect("lease JSON");
            if lease.pointer("/spec/holderIdentity").and_then(Value::as_str).is_some_and(|h| !h.is_empty()) {
                return lease;
            }
        }
        assert!(Instant::now() < deadline, "no holder of lease {name}: {}", out.stderr);
        thread::sleep(Duration::from_millis(200));
    }
}

fn curl(url: &str) -> (String, String) {
    let mut cmd = Command::new("curl");
    cmd.args(["-sk", "-w", "\n%{http_code}", url]);
    let out = process::run(cmd, None, Duration::from_secs(10));
    let (body, code) = out.stdout.rsplit_once('\n').unwrap_or(("", ""));
    (code.to_string(), body.to_string())
}

fn host_of(lease: &Value) -> String {
    let holder = lease.pointer("/spec/holderIdentity").and_then(Value::as_str).unwrap_or("");
    let (host, uuid) = holder.rsplit_once('_').unwrap_or_else(|| panic!("holder {holder} is not <hostname>_<uuid>"));
    assert_eq!(uuid.len(), 36, "{holder}");
    host.to_string()
}

#[test]
fn scheduler_and_controller_manager_elect_leaders_and_serve_health() {
    let cluster = Cluster::start(Backend::Embedded);
    let k = cluster.kubectl("1.33");
    let kubeconfig = cluster.data_dir().join("kubeconfig");
    let kubeconfig = kubeconfig.to_str().expect("utf-8 path");
    let port = free_port().to_string();
    let mut scheduler = spawn(
        &[
            "scheduler", "--kubeconfig", kubeconfig, "--bind-address", "127.0.0.1", "--secure-port", &port,
            "--leader-elect-lease-duration", "4s", "--leader-elect-renew-deadline", "3s", "--leader-elect-retry-period", "1s",
        ],
        "rkube scheduler",
    );
    let _cm = spawn(&["controller-manager", "--kubeconfig", kubeconfig, "--secure-port", "0"], "rkube controller-manager");
    let sched_lease = held_lease(&k, "kube-scheduler");
    assert_eq!(sched_lease.pointer("/spec/leaseDurationSeconds"), Some(&Value::from(4)));
    assert_eq!(sched_lease.pointer("/spec/leaseTransitions"), Some(&Value::from(0)));
    let cm_lease = held_lease(&k, "kube-controller-manager");
    assert_eq!(cm_lease.pointer("/spec/leaseDurationSeconds"), Some(&Value::from(15)), "upstream's default");
    assert_eq!(host_of(&sched_lease), host_of(&cm_lease));

    let base = format!("https://127.0.0.1:{port}");
    let deadline = Instant::now() + LIMIT;
    let metrics = loop {
        let (code, body) = curl(&format!("{base}/metrics"));
        if code == "200" && body.contains("leader_election_master_status{name=\"kube-scheduler\"} 1") {
            break body;
        }
        assert!(Instant::now() < deadline, "metrics: {code} {body}");
        thread::sleep(Duration::from_millis(200));
    };
    assert!(metrics.contains("scheduler_pending_pods{queue=\"active\"}"), "{metrics}");
    for path in ["/healthz", "/livez", "/readyz"] {
        assert_eq!(curl(&format!("{base}{path}")), ("200".to_string(), "ok".to_string()), "{path}");
    }

    scheduler.signal("TERM");
    let status = scheduler.wait_timeout(Duration::from_secs(15)).expect("scheduler exits on SIGTERM");
    assert!(status.success(), "{status:?}");
    let released: Value = k.json(&["get", "lease", "-n", "kube-system", "kube-scheduler"]);
    assert_eq!(released.pointer("/spec/holderIdentity"), None, "released: {released}");
}
