//! End to end: the `rkube up --node` binary (API server + scheduler + `rkube runtime` + node agent in
//! one process) driven by the real kubectl 1.27 and 1.33.
//!
//! What a user sees: `kubectl run` of a short command goes Pending → Running → Completed in
//! `kubectl get pods -w`; a long `sleep` pod reaches Running as a real host process (a child of
//! the `rkube up --node` process), and `kubectl delete pod` stops that process.
//!
//! Every process is killed by PID when its guard drops (the cluster, the `get -w` watch); the
//! containers die with `rkube up --node` through `PR_SET_PDEATHSIG`.

use crate::common;

use std::collections::HashSet;
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use common::{str_at, Backend, Cluster, Kubectl};

/// Longest wait for any pod transition.
const POD_LIMIT: Duration = Duration::from_secs(30);

/// `rkube up --node` with the node registered `Ready`; returns the node's name.
#[track_caller]
fn up_node(cluster: &Cluster, kubectl: &Kubectl) -> String {
    let deadline = Instant::now() + POD_LIMIT;
    loop {
        let nodes = kubectl.json(&["get", "nodes"]);
        let ready = nodes["items"].as_array().into_iter().flatten().find(|n| {
            n["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        });
        if let Some(node) = ready {
            return str_at(node, "/metadata/name").to_owned();
        }
        assert!(
            Instant::now() < deadline,
            "no Ready node within {POD_LIMIT:?}; nodes: {nodes}\n--- server log ---\n{}",
            cluster.server_log()
        );
        thread::sleep(Duration::from_millis(200));
    }
}

/// (name, STATUS) of a `kubectl get pods -w` row; `None` for the header and other lines.
fn row(line: &str) -> Option<(&str, &str)> {
    let cols: Vec<&str> = line.split_whitespace().collect();
    match cols.as_slice() {
        [name, _ready, status, ..] if *name != "NAME" => Some((name, status)),
        _ => None,
    }
}

/// The STATUS values of `pod` in the rows seen, consecutive repeats merged.
fn statuses_of(seen: &[String], pod: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for (name, status) in seen.iter().filter_map(|l| row(l)) {
        if name == pod && out.last().map(String::as_str) != Some(status) {
            out.push(status.to_owned());
        }
    }
    out
}

/// PIDs of processes whose argv is exactly `argv` (read from `/proc/<pid>/cmdline`).
fn pids_with_argv(argv: &[&str]) -> Vec<u32> {
    let want: Vec<u8> = argv.iter().flat_map(|a| a.bytes().chain([0])).collect();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return vec![];
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == want))
        .collect()
}

/// The parent PID and state letter of `pid` (from `/proc/<pid>/stat`), `None` once it is gone.
fn parent_and_state(pid: u32) -> Option<(u32, char)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(") ")?;
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    Some((ppid, state))
}

/// A per-test unique `sleep` argument (about an hour), so `/proc` finds exactly our process.
fn unique_hour() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("3600.{}{:09}", std::process::id(), nanos)
}

fn kubectl_run_goes_pending_running_completed_and_delete_stops_the_process(version: &str) {
    let cluster = Cluster::builder(Backend::Embedded).arg("--node").start();
    let k = cluster.kubectl(version);
    let node = up_node(&cluster, &k);

    // A long-running pod first: its `Running` row proves the watch below has listed, so every
    // row of the short pod comes from watch events after its creation.
    let hour = unique_hour();
    k.ok(&[
        "run",
        "long",
        "--image=busybox",
        "--restart=Never",
        "--",
        "sleep",
        &hour,
    ]);
    let mut watch = k.spawn(&["get", "pods", "-w"]);
    watch.expect_line("`long ... Running`", POD_LIMIT, |l| {
        row(l) == Some(("long", "Running"))
    });

    k.ok(&[
        "run",
        "demo",
        "--image=busybox",
        "--restart=Never",
        "--",
        "sh",
        "-c",
        "sleep 2; exit 0",
    ]);
    watch.expect_line("`demo ... Completed`", POD_LIMIT, |l| {
        row(l) == Some(("demo", "Completed"))
    });
    let demo = statuses_of(watch.seen(), "demo");
    let order: Vec<&str> = demo
        .iter()
        .map(String::as_str)
        .filter(|s| ["Pending", "Running", "Completed"].contains(s))
        .collect();
    assert_eq!(
        order,
        ["Pending", "Running", "Completed"],
        "STATUS column of demo: {demo:?}"
    );
    assert_eq!(
        demo.first().map(String::as_str),
        Some("Pending"),
        "STATUS column of demo: {demo:?}"
    );
    let done = k.json(&["get", "pod", "demo"]);
    assert_eq!(str_at(&done, "/status/phase"), "Succeeded");
    assert_eq!(
        str_at(&done, "/spec/nodeName"),
        node,
        "bound to the local node by the scheduler"
    );
    assert_eq!(
        done.pointer("/status/containerStatuses/0/state/terminated/exitCode"),
        Some(&0.into())
    );
    assert_eq!(
        str_at(&done, "/status/containerStatuses/0/state/terminated/reason"),
        "Completed"
    );

    // The long pod is a host process, child of `rkube up --node` (its runtime).
    let pids = pids_with_argv(&["sleep", &hour]);
    assert_eq!(
        pids.len(),
        1,
        "exactly one `sleep {hour}` process: {pids:?}"
    );
    let pid = pids[0];
    let server = cluster.server_pid().expect("server running");
    assert_eq!(
        parent_and_state(pid).map(|(ppid, _)| ppid),
        Some(server),
        "sleep {pid} is a child of rkube up --node"
    );
    let running = k.json(&["get", "pod", "long"]);
    assert_eq!(str_at(&running, "/status/phase"), "Running");
    assert!(
        running
            .pointer("/status/containerStatuses/0/state/running")
            .is_some(),
        "{running}"
    );

    // `kubectl delete` waits until the object is gone; by then the process must be gone too
    // (SIGTERM within the 30 s grace period; `sleep` dies on it at once).
    let started = Instant::now();
    k.ok(&["delete", "pod", "long"]);
    let took = started.elapsed();
    assert!(took < Duration::from_secs(15), "delete took {took:?}");
    let deadline = Instant::now() + Duration::from_secs(5);
    while let Some((_, state)) = parent_and_state(pid) {
        assert!(
            Instant::now() < deadline,
            "sleep {pid} still exists (state {state}) after kubectl delete"
        );
        thread::sleep(Duration::from_millis(50));
    }
    assert!(!Path::new(&format!("/proc/{pid}")).exists());
    k.fails_with(
        &["get", "pod", "long"],
        r#"Error from server (NotFound): pods "long" not found"#,
    );
    let left: HashSet<String> = common::item_names(&k.json(&["get", "pods"]))
        .into_iter()
        .collect();
    assert_eq!(left, HashSet::from(["demo".to_string()]));
    drop(watch);
}

/// The exit code of `pod`'s first container once it terminated.
#[track_caller]
fn exit_code(cluster: &Cluster, k: &Kubectl, pod: &str) -> i64 {
    let deadline = Instant::now() + POD_LIMIT;
    loop {
        let p = k.json(&["get", "pod", pod]);
        if let Some(code) = p["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"].as_i64() {
            return code;
        }
        assert!(
            Instant::now() < deadline,
            "{pod} did not terminate within {POD_LIMIT:?}: {}\n--- server log ---\n{}",
            p["status"],
            cluster.server_log()
        );
        thread::sleep(Duration::from_millis(200));
    }
}

/// A pod reads the ServiceAccount token, CA and namespace the node agent
/// mounted at `/var/run/secrets/kubernetes.io/serviceaccount` and calls the
/// API with them: 403 until a RoleBinding lets its ServiceAccount list pods,
/// then 200 (each pod exits 0 only on the code it expects). Needs root (a private mount
/// namespace per container); skipped with a message otherwise.
fn pod_calls_the_api_with_its_projected_token(version: &str) {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipping: mounting volumes into host processes needs root");
        return;
    }
    let cluster = Cluster::builder(Backend::Embedded).arg("--node").start();
    let k = cluster.kubectl(version);
    up_node(&cluster, &k);
    let sa = "/var/run/secrets/kubernetes.io/serviceaccount";
    // Exits 0 only when the namespace file says `default` and the API answers `expected`.
    let script = |expected: u16| {
        format!(
            "test \"$(cat {sa}/namespace)\" = default && code=$(curl -s -o /dev/null -w '%{{http_code}}' --cacert {sa}/ca.crt \
             -H \"Authorization: Bearer $(cat {sa}/token)\" https://127.0.0.1:{}/api/v1/namespaces/default/pods) && \
             echo \"$code\" && test \"$code\" = {expected}",
            cluster.port
        )
    };
    k.ok(&["run", "denied", "--image=busybox", "--restart=Never", "--", "sh", "-c", &script(403)]);
    assert_eq!(exit_code(&cluster, &k, "denied"), 0, "the token authenticates (403, not 401) but RBAC does not allow the list yet");
    k.ok(&["create", "rolebinding", "default-view", "--clusterrole=view", "--serviceaccount=default:default"]);
    k.ok(&["run", "allowed", "--image=busybox", "--restart=Never", "--", "sh", "-c", &script(200)]);
    assert_eq!(exit_code(&cluster, &k, "allowed"), 0, "the token authenticates and the binding allows the list");
}

mod kubectl_1_27 {
    #[test]
    fn kubectl_run_goes_pending_running_completed_and_delete_stops_the_process() {
        super::kubectl_run_goes_pending_running_completed_and_delete_stops_the_process("1.27");
    }

    #[test]
    fn pod_calls_the_api_with_its_projected_token() {
        super::pod_calls_the_api_with_its_projected_token("1.27");
    }
}

mod kubectl_1_33 {
    #[test]
    fn kubectl_run_goes_pending_running_completed_and_delete_stops_the_process() {
        super::kubectl_run_goes_pending_running_completed_and_delete_stops_the_process("1.33");
    }

    #[test]
    fn pod_calls_the_api_with_its_projected_token() {
        super::pod_calls_the_api_with_its_projected_token("1.33");
    }
}
