//! End to end: `kubectl exec`, `cp`, `attach`, `port-forward` and `debug` on `rkube up --node`, with
//! kubectl 1.27 (SPDY/3.1) and 1.33 (WebSocket `v5.channel.k8s.io`; port-forward as SPDY
//! tunnelled in a WebSocket). The API server proxies the upgrade to the node agent's kubelet
//! API, which proxies it to the runtime's streaming server, which speaks the protocol and runs
//! the command in the container's context (or connects to the pod's port).
//!
//! Every process is killed by PID when its guard drops (the cluster).

use crate::common;

use std::io::{Read, Write};
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
    let cluster = Cluster::builder(Backend::Embedded)
        .arg("--node")
        .arg(format!("--token-auth-file={}", tokens.display()))
        .start();
    let k = cluster.kubectl(version);
    cluster.wait_for_ready_node(&k, LIMIT);
    k.ok(&[
        "run",
        "box",
        "--image=busybox",
        "--restart=Never",
        "--env=GREETING=hello",
        "--",
        "sleep",
        "3600",
    ]);
    let deadline = Instant::now() + LIMIT;
    loop {
        let p = k.json(&["get", "pod", "box"]);
        if p["status"]["containerStatuses"][0]["state"]["running"].is_object() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "box not running: {}\n--- server log ---\n{}",
            p["status"],
            cluster.server_log()
        );
        thread::sleep(Duration::from_millis(200));
    }
    (cluster, k, fixtures)
}

fn kubectl_exec_prints_output_and_exits_with_the_commands_code(version: &str) {
    let (_cluster, k, _fixtures) = cluster_with_box(version);
    let hi = k
        .run(&[
            "exec",
            "box",
            "--",
            "sh",
            "-c",
            "echo hi; echo oops >&2; exit 3",
        ])
        .exit_code(3);
    assert_eq!(hi.stdout, "hi\n");
    assert!(hi.stderr.starts_with("oops\n"), "{:?}", hi.stderr);
    assert!(
        hi.stderr.contains("command terminated with exit code 3"),
        "{:?}",
        hi.stderr
    );
    let env = k.ok(&["exec", "box", "--", "sh", "-c", "echo $GREETING"]);
    assert_eq!((env.stdout.as_str(), env.stderr.as_str()), ("hello\n", ""));
    // stdin, ended by the v5 close message when kubectl's stdin ends.
    let upper = k
        .run_stdin(
            &["exec", "-i", "box", "--", "tr", "a-z", "A-Z"],
            "abc\ndef\n",
        )
        .success();
    assert_eq!(upper.stdout, "ABC\nDEF\n");
    // A command that cannot start is the runtime's internal error.
    let missing = k.run(&["exec", "box", "--", "no-such-command-here"]);
    assert_eq!(missing.code, Some(1), "{missing:?}");
    assert!(
        missing
            .stderr
            .contains("error executing command in container"),
        "{:?}",
        missing.stderr
    );
    // A container name the pod does not have.
    k.fails_with(
        &["exec", "box", "-c", "nope", "--", "true"],
        "Error from server (BadRequest): container nope is not valid for pod box",
    );
}

/// Runs kubectl with `args` on a terminal of its own (`script`), `input` typed into it.
fn on_a_terminal(k: &Kubectl, args: &[&str], input: &str) -> common::process::Finished {
    let cmd = k.command(args);
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
    common::process::run(script, Some(input), Duration::from_secs(45))
}

#[test]
fn kubectl_1_33_exec_with_a_terminal_gets_a_tty() {
    let (_cluster, k, _fixtures) = cluster_with_box("1.33");
    // `script` gives kubectl a terminal of its own, so `-t` is honoured.
    let args = [
        "exec",
        "-it",
        "box",
        "--",
        "sh",
        "-c",
        "test -t 0 && test -t 1 && echo on-a-tty",
    ];
    let out = on_a_terminal(&k, &args, "");
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(
        out.stdout.contains("on-a-tty\r\n"),
        "a terminal turns \\n into \\r\\n: {:?}",
        out.stdout
    );
}

/// `kubectl run -it`: a pod whose container has `stdin`, `stdinOnce` and `tty`; the runtime
/// gives its process a terminal, kubectl attaches to it, what is typed reaches the shell, and
/// the log holds the terminal's output (`\r\n` line ends).
fn kubectl_run_it_gives_the_container_a_terminal(version: &str) {
    let (_cluster, k, _fixtures) = cluster_with_box(version);
    let args = [
        "run",
        "shell",
        "-i",
        "-t",
        "--restart=Never",
        "--image=busybox",
        "--",
        "sh",
    ];
    let out = on_a_terminal(&k, &args, "test -t 0 && echo term-$((40+2))\nexit 7\n");
    assert!(
        out.stdout.contains("term-42"),
        "the shell ran on a terminal: {out:?}"
    );
    let pod = k.json(&["get", "pod", "shell"]);
    let c = &pod["spec"]["containers"][0];
    assert_eq!(
        (
            c["stdin"].as_bool(),
            c["stdinOnce"].as_bool(),
            c["tty"].as_bool()
        ),
        (Some(true), Some(true), Some(true))
    );
    let deadline = Instant::now() + LIMIT;
    loop {
        let p = k.json(&["get", "pod", "shell"]);
        let code = &p["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"];
        if code.is_number() {
            assert_eq!(code, 7, "{}", p["status"]);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the shell did not exit: {}",
            p["status"]
        );
        thread::sleep(Duration::from_millis(200));
    }
    let logs = k.ok(&["logs", "shell"]).stdout;
    assert!(logs.contains("term-42\r\n"), "{logs:?}");
}

fn kubectl_cp_copies_files_into_and_out_of_a_pod(version: &str) {
    let (cluster, k, _fixtures) = cluster_with_box(version);
    // Pods are host processes here: the pod's /tmp is the host's.
    let remote_dir = cluster.dir().join("in-pod");
    std::fs::create_dir_all(&remote_dir).expect("dir");
    let local = cluster.write_file("notes.txt", "first line\nsecond line\n");
    let remote = format!("box:{}/notes.txt", remote_dir.display());
    k.ok(&["cp", &local.display().to_string(), &remote]);
    let cat = k.ok(&[
        "exec",
        "box",
        "--",
        "cat",
        &format!("{}/notes.txt", remote_dir.display()),
    ]);
    assert_eq!(cat.stdout, "first line\nsecond line\n");

    k.ok(&[
        "exec",
        "box",
        "--",
        "sh",
        "-c",
        &format!(
            "printf 'made in the pod\\n' > {}/made.txt",
            remote_dir.display()
        ),
    ]);
    let back = cluster.dir().join("back.txt");
    k.ok(&[
        "cp",
        &format!("box:{}/made.txt", remote_dir.display()),
        &back.display().to_string(),
    ]);
    assert_eq!(
        std::fs::read_to_string(&back).expect("copied back"),
        "made in the pod\n"
    );
}

#[test]
fn exec_needs_the_pods_exec_permission() {
    let (cluster, k, _fixtures) = cluster_with_box("1.33");
    k.ok(&[
        "create",
        "role",
        "pod-reader",
        "--verb=get,list",
        "--resource=pods",
    ]);
    k.ok(&[
        "create",
        "rolebinding",
        "bob-reads-pods",
        "--role=pod-reader",
        "--user=bob",
    ]);
    let bob = cluster.kubectl_with(
        "1.33",
        &cluster.write_kubeconfig_for("bob", &Credentials::Token("bob-secret".into())),
    );
    bob.ok(&["get", "pod", "box"]);
    // kubectl 1.33 tries a WebSocket GET (verb get), then falls back to SPDY's POST (verb create).
    bob.fails_with(
        &["exec", "box", "--", "true"],
        r#"Error from server (Forbidden): pods "box" is forbidden: User "bob" cannot create resource "pods/exec" in API group "" in the namespace "default""#,
    );
    let raw = bob.run(&[
        "get",
        "--raw",
        "/api/v1/namespaces/default/pods/box/exec?command=true&stdout=true",
    ]);
    assert!(
        raw.stderr.contains(r#"User "bob" cannot get resource "pods/exec" in API group "" in the namespace "default""#),
        "{:?}",
        raw.stderr
    );
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

fn kubectl_attach_feeds_stdin_and_stdin_once_ends_it(version: &str) {
    let (cluster, k, _fixtures) = cluster_with_box(version);
    k.run_stdin(&["apply", "-f", "-"], READER).success();
    let deadline = Instant::now() + LIMIT;
    while !k.json(&["get", "pod", "reader"])["status"]["containerStatuses"][0]["state"]["running"]
        .is_object()
    {
        assert!(
            Instant::now() < deadline,
            "reader not running:\n{}",
            cluster.server_log()
        );
        thread::sleep(Duration::from_millis(200));
    }
    // kubectl's stdin ends after one line: with stdinOnce the container then reads end of
    // file, says bye and exits, which ends the attach.
    let attached = k
        .run_stdin(&["attach", "-i", "reader"], "hello\n")
        .success();
    assert_eq!(attached.stdout, "got hello\nbye\n");
    let deadline = Instant::now() + LIMIT;
    while k.json(&["get", "pod", "reader"])["status"]["phase"] != "Succeeded" {
        assert!(
            Instant::now() < deadline,
            "reader did not complete:\n{}",
            cluster.server_log()
        );
        thread::sleep(Duration::from_millis(200));
    }
}

fn kubectl_port_forward_fetches_from_an_http_server_in_a_pod(version: &str) {
    let (cluster, k, _fixtures) = cluster_with_box(version);
    let site = cluster.dir().join("site");
    std::fs::create_dir_all(&site).expect("site dir");
    std::fs::write(site.join("hello.txt"), "hello through port-forward\n").expect("page");
    let pod_port = common::cluster::free_port();
    let listen = format!("127.0.0.1:{pod_port}");
    let home = site.display().to_string();
    k.ok(&[
        "run",
        "web",
        "--image=busybox",
        "--restart=Never",
        "--",
        "busybox",
        "httpd",
        "-f",
        "-p",
        &listen,
        "-h",
        &home,
    ]);
    let deadline = Instant::now() + LIMIT;
    while std::net::TcpStream::connect(&listen).is_err() {
        assert!(
            Instant::now() < deadline,
            "httpd never listened:\n{}",
            cluster.server_log()
        );
        thread::sleep(Duration::from_millis(200));
    }
    let local = common::cluster::free_port();
    let mapping = format!("{local}:{pod_port}");
    let mut forward = k.spawn(&["port-forward", "pod/web", &mapping]);
    forward.expect_line("`Forwarding from`", LIMIT, |l| {
        l.starts_with("Forwarding from 127.0.0.1:")
    });
    // Two connections in turn: each gets its own pair of streams.
    for _ in 0..2 {
        let mut conn = std::net::TcpStream::connect(("127.0.0.1", local))
            .expect("connect to the forwarded port");
        conn.set_read_timeout(Some(LIMIT)).expect("timeout");
        conn.write_all(b"GET /hello.txt HTTP/1.0\r\nHost: pod\r\n\r\n")
            .expect("request");
        let mut answer = String::new();
        conn.read_to_string(&mut answer).expect("response");
        assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer:?}");
        assert!(
            answer.ends_with("\r\n\r\nhello through port-forward\n"),
            "{answer:?}"
        );
    }
    drop(forward);
}

/// `kubectl debug -i <pod> --image=busybox -- <cmd>` completes: the node agent starts the
/// ephemeral container once and reports it in `status.ephemeralContainerStatuses`, kubectl
/// attaches (or, once it has exited, reads its log), and `kubectl logs -c` shows its output.
fn kubectl_debug_runs_an_ephemeral_container_to_completion(version: &str) {
    let (cluster, k, _fixtures) = cluster_with_box(version);
    k.ok(&[
        "debug",
        "-i",
        "box",
        "--image=busybox",
        "--container=dbg",
        "--",
        "sh",
        "-c",
        "echo from-debug",
    ]);
    let deadline = Instant::now() + LIMIT;
    let status = loop {
        let p = k.json(&["get", "pod", "box"]);
        let s = p["status"]["ephemeralContainerStatuses"][0].clone();
        if s["state"]["terminated"].is_object() {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "dbg not terminated: {}
--- server log ---
{}",
            p["status"],
            cluster.server_log()
        );
        thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(status["name"], "dbg");
    assert_eq!(status["state"]["terminated"]["exitCode"], 0, "{status}");
    assert_eq!(status["ready"], false);
    assert_eq!(k.ok(&["logs", "box", "-c", "dbg"]).stdout, "from-debug\n");
    // The pod's own container kept running; the ephemeral one is not restarted.
    thread::sleep(Duration::from_secs(2));
    let p = k.json(&["get", "pod", "box"]);
    assert!(
        p["status"]["containerStatuses"][0]["state"]["running"].is_object(),
        "{}",
        p["status"]
    );
    assert_eq!(
        p["status"]["ephemeralContainerStatuses"][0]["restartCount"], 0,
        "{}",
        p["status"]
    );
}

/// `kubectl debug -i <pod> --target=<container>` (1.33, as `kubectl debug -it --target=app`
/// sends it) on `rkube up --node`: the ephemeral container names its target, the node agent asks
/// the runtime for the target's PID namespace (CRI `TARGET` with the target's container id), and
/// on `rkube runtime`, whose containers are host processes in the node's PID namespace, the
/// debugging container runs and sees the target's process in `/proc`.
#[test]
fn kubectl_debug_with_a_target_runs_and_sees_the_targets_process() {
    let (cluster, k, _fixtures) = cluster_with_box("1.33");
    // A command line no other test's process has. A process that exits
    // while the loop runs makes the shell's own `<` fail, hence the braces
    // around the redirection.
    let marker = (1_000_000 + std::process::id()).to_string();
    k.ok(&["run", "app", "--image=busybox", "--restart=Never", "--", "sleep", &marker]);
    let deadline = Instant::now() + LIMIT;
    while !k.json(&["get", "pod", "app"])["status"]["containerStatuses"][0]["state"]["running"].is_object() {
        assert!(Instant::now() < deadline, "app not running:\n{}", cluster.server_log());
        thread::sleep(Duration::from_millis(200));
    }
    let script = format!(
        "for d in /proc/[0-9]*; do if [ \"$({{ tr '\\0' ' ' < $d/cmdline; }} 2>/dev/null)\" = 'sleep {marker} ' ]; then echo found-target; fi; done"
    );
    k.ok(&["debug", "-i", "app", "--image=busybox", "--target=app", "--container=dbg", "--", "sh", "-c", &script]);
    let deadline = Instant::now() + LIMIT;
    let p = loop {
        let p = k.json(&["get", "pod", "app"]);
        if p["status"]["ephemeralContainerStatuses"][0]["state"]["terminated"].is_object() {
            break p;
        }
        assert!(Instant::now() < deadline, "dbg not terminated: {}\n{}", p["status"], cluster.server_log());
        thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(p["spec"]["ephemeralContainers"][0]["targetContainerName"], "app");
    let status = &p["status"]["ephemeralContainerStatuses"][0];
    assert_eq!(status["state"]["terminated"]["exitCode"], 0, "{status}");
    assert_eq!(k.ok(&["logs", "app", "-c", "dbg"]).stdout, "found-target\n");
}

per_kubectl_version!(
    kubectl_run_it_gives_the_container_a_terminal,
    kubectl_debug_runs_an_ephemeral_container_to_completion,
    kubectl_exec_prints_output_and_exits_with_the_commands_code,
    kubectl_cp_copies_files_into_and_out_of_a_pod,
    kubectl_attach_feeds_stdin_and_stdin_once_ends_it,
    kubectl_port_forward_fetches_from_an_http_server_in_a_pod,
);
