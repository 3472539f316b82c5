//! End to end: `rkube up` + `rkube proxy` (rules applied in a network namespace
//! this test creates) + real kubectl. Applying a Service and an EndpointSlice
//! makes the ClusterIP answer from the namespace; deleting the EndpointSlice
//! makes it refuse connections (REJECT). Owned by the rkube-proxy work (issue 6).

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

struct Netns(String);

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).output();
    }
}

fn run(program: &str, args: &[&str]) -> Output {
    Command::new(program).args(args).output().unwrap_or_else(|e| panic!("cannot run {program}: {e}"))
}

fn must(program: &str, args: &[&str]) -> String {
    let out = run(program, args);
    assert!(out.status.success(), "{program} {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn kubectl() -> String {
    match std::env::var("RKUBE_KUBECTL_DIR") {
        Ok(dir) => format!("{dir}/kubectl.1.33"),
        Err(_) => "kubectl".to_string(),
    }
}

fn kubectl_apply(kubeconfig: &str, yaml: &str) {
    let mut child = Command::new(kubectl())
        .args(["--kubeconfig", kubeconfig, "apply", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start kubectl");
    if let Some(mut stdin) = child.stdin.take() {
        std::io::Write::write_all(&mut stdin, yaml.as_bytes()).expect("write manifest");
    }
    let out = child.wait_with_output().expect("kubectl apply");
    assert!(out.status.success(), "kubectl apply: {}", String::from_utf8_lossy(&out.stderr));
}

/// curl from inside `ns`: Ok(body) or Err(curl exit code; 7 = connection refused).
fn get(ns: &str, url: &str) -> Result<String, i32> {
    let out = run("ip", &["netns", "exec", ns, "curl", "-s", "--noproxy", "*", "--max-time", "2", url]);
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(out.status.code().unwrap_or(-1))
    }
}

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

const SERVER: &str = r#"
import socketserver
class H(socketserver.BaseRequestHandler):
    def handle(self):
        self.request.recv(65536)
        self.request.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello")
socketserver.ThreadingTCPServer.allow_reuse_address = True
socketserver.ThreadingTCPServer(("10.202.1.2", 8080), H).serve_forever()
"#;

#[test]
fn kubectl_applied_service_and_endpoint_slice_make_cluster_ip_answer_through_rkube_proxy() {
    let bin = env!("CARGO_BIN_EXE_rkube");
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let data_s = data.to_string_lossy().into_owned();

    let mut up = Command::new(bin)
        .args(["up", "--data-dir", &data_s, "--port", "0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start rkube up");
    let stdout = up.stdout.take().expect("stdout");
    let _up = Guard(up);
    let line = BufReader::new(stdout).lines().map_while(Result::ok).find(|l| l.contains("KUBECONFIG="));
    let kubeconfig = line.and_then(|l| l.split("KUBECONFIG=").nth(1).map(str::to_string)).expect("rkube up printed KUBECONFIG");

    // client namespace (rules) <-veth-> backend namespace (HTTP server on 10.202.1.2:8080).
    let tag = std::process::id();
    let client = Netns(format!("rkp-e2e-{tag}"));
    let backend = Netns(format!("rkp-e2eb-{tag}"));
    must("ip", &["netns", "add", &client.0]);
    must("ip", &["netns", "add", &backend.0]);
    for ns in [&client.0, &backend.0] {
        must("ip", &["-n", ns, "link", "set", "lo", "up"]);
    }
    must("ip", &["-n", &client.0, "link", "add", "c1", "type", "veth", "peer", "name", "e1", "netns", &backend.0]);
    must("ip", &["-n", &client.0, "addr", "add", "10.202.1.1/24", "dev", "c1"]);
    must("ip", &["-n", &client.0, "link", "set", "c1", "up"]);
    must("ip", &["-n", &backend.0, "addr", "add", "10.202.1.2/24", "dev", "e1"]);
    must("ip", &["-n", &backend.0, "link", "set", "e1", "up"]);
    must("ip", &["-n", &backend.0, "route", "add", "default", "via", "10.202.1.1"]);
    must("ip", &["-n", &client.0, "route", "add", "10.96.0.0/12", "dev", "c1"]);
    let python = if std::path::Path::new("/usr/bin/python3").exists() { "/usr/bin/python3" } else { "python3" };
    let _server = Guard(
        Command::new("ip")
            .args(["netns", "exec", &backend.0, python, "-c", SERVER])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start HTTP server"),
    );
    wait_until("backend HTTP server", || get(&client.0, "http://10.202.1.2:8080/").is_ok());

    // A free loopback port for the proxy's /metrics (network_programming_duration_seconds).
    let metrics_address = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port");
        probe.local_addr().expect("local address").to_string()
    };
    let _proxy = Guard(
        Command::new(bin)
            .args(["proxy", "--kubeconfig", &kubeconfig, "--hostname-override", "node-a"])
            .args(["--cluster-cidr", "10.244.0.0/16", "--network-namespace", &client.0])
            .args(["--healthz-bind-address", "127.0.0.1:0", "--metrics-bind-address", &metrics_address])
            .args(["--iptables-min-sync-period", "100ms"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start rkube proxy"),
    );

    kubectl_apply(
        &kubeconfig,
        "apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: default}\nspec:\n  ports: [{name: http, port: 80, targetPort: 8080, protocol: TCP}]\n",
    );
    let cluster_ip = must(&kubectl(), &["--kubeconfig", &kubeconfig, "get", "svc", "web", "-o", "jsonpath={.spec.clusterIP}"]);
    assert!(!cluster_ip.is_empty(), "service got a cluster IP");
    // Stamped like the endpointslice controller does: the time of the change that
    // triggered this EndpointSlice update (RFC 3339, UTC); taken once the proxy serves
    // /metrics, i.e. after it started (earlier trigger times are ignored, as upstream).
    let metrics_url = format!("http://{metrics_address}/metrics");
    let scrape = || run("curl", &["-s", "-f", "--noproxy", "*", "--max-time", "2", &metrics_url]);
    wait_until("rkube proxy to serve /metrics", || scrape().status.success());
    let trigger_time = must("date", &["-u", "+%Y-%m-%dT%H:%M:%S.%NZ"]).trim().to_string();
    kubectl_apply(
        &kubeconfig,
        &format!(
            "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: web-1\n  namespace: default\n  labels: {{kubernetes.io/service-name: web}}\n  annotations: {{endpoints.kubernetes.io/last-change-trigger-time: \"{trigger_time}\"}}\naddressType: IPv4\nports: [{{name: http, port: 8080, protocol: TCP}}]\nendpoints: [{{addresses: [\"10.202.1.2\"], conditions: {{ready: true}}}}]\n"
        ),
    );
    let url = format!("http://{cluster_ip}/");
    wait_until("ClusterIP to answer", || get(&client.0, &url).as_deref() == Ok("hello"));

    // The sync that programmed the slice is counted in network_programming_duration_seconds,
    // measured from the annotation's trigger time.
    let sample = |text: &str, name: &str| -> Option<f64> {
        text.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
    };
    let mut metrics = String::new();
    wait_until("network_programming_duration_seconds to count the sync", || {
        metrics = String::from_utf8_lossy(&scrape().stdout).into_owned();
        sample(&metrics, "kubeproxy_network_programming_duration_seconds_count").is_some_and(|c| c >= 1.0)
    });
    let seconds = sample(&metrics, "kubeproxy_network_programming_duration_seconds_sum").unwrap_or(-1.0);
    assert!((0.0..30.0).contains(&seconds), "trigger time to programmed rules: {seconds} s\n{metrics}");

    must(&kubectl(), &["--kubeconfig", &kubeconfig, "delete", "endpointslice", "web-1"]);
    wait_until("ClusterIP to refuse connections", || get(&client.0, &url) == Err(7));
}
