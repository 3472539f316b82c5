//! End to end: `kubectl exec`, `kubectl cp` and `kubectl attach` on `rkube up --node`. kubectl 1.33 speaks
//! WebSocket (`v5.channel.k8s.io`) to the API server's `pods/exec`, which proxies the upgrade to
//! the node agent's kubelet API, which proxies it to the runtime's streaming server, which runs
//! the command in the container's context.
//!
//! kubectl 1.27 speaks SPDY/3.1 only, which rkube does not serve yet: it gets a clear error at
//! once, not a hang.
//!
//! Every process is killed by PID when its guard drops (the cluster).

mod common;

use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use common::{Backend, Cluster, Credentials, Kubectl};

/// Longest wait for any pod transition.
const LIMIT: Duration = Duration::from_secs(30);

/// `rkube up --node` with bob (token `bob-secret`, no roles) in its token file, and a Running
/// pod `box` (`sleep 3600`, working directory `/tmp`, env `GREETING=hello`).
fn cluster_with_box(version: &str) -> (Cluster, Kubectl, tempfile::TempDir) {
    let fixtures = tempfile::tempdir().expect("tempdir");
    let tokens = fixtures.path().join("tokens.csv");
    std::fs::write(&tokens, "bob-secret,bob,2001\n").expect("token file");
    let cluster =
        Cluster::builder(Backend::Embedded).arg("--node").arg(format!("--token-auth-file={}", tokens.display())).start();
    let k = cluster.kubectl(version);
    cluster.wait_for_ready_node(&k, LIMIT);
    k.ok(&["run", "box", "--image=busybox", "--restart=Never", "--env=GREETING=hello", "--", "sleep", "3600"]);
    let deadline = Instant::now() + LIMIT;
    loop {
        let p = k.json(&["get", "pod", "box"]);
        if p["status"]["containerStatuses"][0]["state"]["running"].is_object() {
            break;
        }
        assert!(Instant::now() < deadline, "box not running: {}\n--- server log ---\n{}", p["status"], cluster.server_log());
        thread::sleep(Duration::from_millis(200));
    }
    (cluster, k, fixtures)
}

#[test]
fn kubectl_1_33_exec_prints_output_and_exits_with_the_commands_code() {
    let (_cluster, k, _fixtures) = cluster_with_box("1.33");
    let hi = k.run(&["exec", "box", "--", "sh", "-c", "echo hi; echo oops >&2; exit 3"]).exit_code(3);
    assert_eq!(hi.stdout, "hi\n");
    assert!(hi.stderr.starts_with("oops\n"), "{:?}", hi.stderr);
    assert!(hi.stderr.contains("command terminated with exit code 3"), "{:?}", hi.stderr);
    let env = k.ok(&["exec", "box", "--", "sh", "-c", "echo $GREETING"]);
    assert_eq!((env.stdout.as_str(), env.stderr.as_str()), ("hello\n", ""));
    // stdin, ended by the v5 close message when kubectl's stdin ends.
    let upper = k.run_stdin(&["exec", "-i", "box", "--", "tr", "a-z", "A-Z"], "abc\ndef\n").success();
    assert_eq!(upper.stdout, "ABC\nDEF\n");
    // A command that cannot start is the runtime's internal error.
    let missing = k.run(&["exec", "box", "--", "no-such-command-here"]);
    assert_eq!(missing.code, Some(1), "{missing:?}");
    assert!(missing.stderr.contains("error executing command in container"), "{:?}", missing.stderr);
    // A container name the pod does not have.
    k.fails_with(&["exec", "box", "-c", "nope", "--", "true"], "Error from server (BadRequest): container nope is not valid for pod box");
}

#[test]
fn kubectl_1_33_exec_with_a_terminal_gets_a_tty() {
    let (_cluster, k, _fixtures) = cluster_with_box("1.33");
    // `script` gives kubectl a terminal of its own, so `-t` is honoured.
    let cmd = k.command(&["exec", "-it", "box", "--", "sh", "-c", "test -t 0 && test -t 1 && echo on-a-tty"]);
    let quoted: Vec<String> = std::iter::once(cmd.get_program().to_string_lossy().into_owned())
        .chain(cmd.get_args().map(|a| a.to_string_lossy().into_owned()))
        .map(|a| format!("'{}'", a.replace('\'', "'\\''")))
        .collect();
    let mut script = Command::new("script");
    script.args(["-qec", &quoted.join(" "), "/dev/null"]);
    for (key, value) in cmd.get_envs() {
        match value {
            Some(v) => script.env(key, v),
            None => script.env_remove(key),
        };
    }
    let out = common::process::run(script, Some(""), Duration::from_secs(45));
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(out.stdout.contains("on-a-tty\r\n"), "a terminal turns \\n into \\r\\n: {:?}", out.stdout);
}

#[test]
fn kubectl_1_33_cp_copies_files_into_and_out_of_a_pod() {
    let (cluster, k, _fixtures) = cluster_with_box("1.33");
    // Pods are host processes here: the pod's /tmp is the host's.
    let remote_dir = cluster.dir().join("in-pod");
    std::fs::create_dir_all(&remote_dir).expect("dir");
    let local = cluster.write_file("notes.txt", "first line\nsecond line\n");
    let remote = format!("box:{}/notes.txt", remote_dir.display());
    k.ok(&["cp", &local.display().to_string(), &remote]);
    let cat = k.ok(&["exec", "box", "--", "cat", &format!("{}/notes.txt", remote_dir.display())]);
    assert_eq!(cat.stdout, "first line\nsecond line\n");

    k.ok(&["exec", "box", "--", "sh", "-c", &format!("printf 'made in the pod\\n' > {}/made.txt", remote_dir.display())]);
    let back = cluster.dir().join("back.txt");
    k.ok(&["cp", &format!("box:{}/made.txt", remote_dir.display()), &back.display().to_string()]);
    assert_eq!(std::fs::read_to_string(&back).expect("copied back"), "made in the pod\n");
}

#[test]
fn exec_needs_the_pods_exec_permission() {
    let (cluster, k, _fixtures) = cluster_with_box("1.33");
    k.ok(&["create", "role", "pod-reader", "--verb=get,list", "--resource=pods"]);
    k.ok(&["create", "rolebinding", "bob-reads-pods", "--role=pod-reader", "--user=bob"]);
    let bob = cluster.kubectl_with("1.33", &cluster.write_kubeconfig_for("bob", &Credentials::Token("bob-secret".into())));
    bob.ok(&["get", "pod", "box"]);
    // kubectl 1.33 tries a WebSocket GET (verb get), then falls back to SPDY's POST (verb create).
    bob.fails_with(
        &["exec", "box", "--", "true"],
        r#"Error from server (Forbidden): pods "box" is forbidden: User "bob" cannot create resource "pods/exec" in API group "" in the namespace "default""#,
    );
    let raw = bob.run(&["get", "--raw", "/api/v1/namespaces/default/pods/box/exec?command=true&stdout=true"]);
    assert!(
        raw.stderr.contains(r#"User "bob" cannot get resource "pods/exec" in API group "" in the namespace "default""#),
        "{:?}",
        raw.stderr
    );
}

#[test]
fn kubectl_1_27_exec_gets_a_clear_error_for_spdy() {
    let (_cluster, k, _fixtures) = cluster_with_box("1.27");
    let started = Instant::now();
    k.fails_with(
        &["exec", "box", "--", "true"],
        "Error from server (BadRequest): SPDY/3.1 streaming is not implemented in rkube yet: upgrade to a WebSocket (v5.channel.k8s.io; kubectl 1.30 or later)",
    );
    assert!(started.elapsed() < Duration::from_secs(20), "answered at once, not after a timeout");
}

const READER: &str = r#"
apiVersion: v1
kind: Pod
metadata:
  name: reader
spec:
  restartPolicy: Never
  containers:
  - name: reader
    image: busybox
    stdin: true
    stdinOnce: true
    command: ["/bin/sh", "-c", "while read l; do echo \"got $l\"; done; echo bye"]
"#;

#[test]
fn kubectl_1_33_attach_feeds_stdin_and_stdin_once_ends_it() {
    let (cluster, k, _fixtures) = cluster_with_box("1.33");
    k.run_stdin(&["apply", "-f", "-"], READER).success();
    let deadline = Instant::now() + LIMIT;
    while !k.json(&["get", "pod", "reader"])["status"]["containerStatuses"][0]["state"]["running"].is_object() {
        assert!(Instant::now() < deadline, "reader not running:\n{}", cluster.server_log());
        thread::sleep(Duration::from_millis(200));
    }
    // kubectl's stdin ends after one line: with stdinOnce the container then reads end of
    // file, says bye and exits, which ends the attach.
    let attached = k.run_stdin(&["attach", "-i", "reader"], "hello\n").success();
    assert_eq!(attached.stdout, "got hello\nbye\n");
    let deadline = Instant::now() + LIMIT;
    while k.json(&["get", "pod", "reader"])["status"]["phase"] != "Succeeded" {
        assert!(Instant::now() < deadline, "reader did not complete:\n{}", cluster.server_log());
        thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn kubectl_1_33_port_forward_gets_a_clear_error_for_its_spdy_tunnel() {
    let (_cluster, k, _fixtures) = cluster_with_box("1.33");
    let started = Instant::now();
    let f = k.run(&["port-forward", "box", "0:8080"]);
    assert_eq!(f.code, Some(1), "{f:?}");
    assert!(
        f.stderr.contains("SPDY/3.1 port forwarding (kubectl port-forward) is not implemented in rkube yet"),
        "{:?}",
        f.stderr
    );
    assert!(started.elapsed() < Duration::from_secs(20), "answered at once, not after a timeout");
}
