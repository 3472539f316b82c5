//! Real traffic through the generated rules, in namespaces this test creates:
//!
//! ```text
//!   client ns (rules applied)           b1 ns                 b2 ns
//!   c1 10.201.1.1/24  <──veth──>  e1 10.201.1.2:8080
//!   c2 10.201.2.1/24  <──────────────────veth──────────>  e2 10.201.2.2:8080
//!   route 10.96.0.0/16 dev c1 (service CIDR)
//! ```
//!
//! Each backend runs a tiny python3 HTTP responder answering with its name.
//! A ClusterIP and a NodePort service answer through the rules; scaling the
//! endpoints 2 → 1 → 0 → 2 (partial syncs) changes who answers, 0 endpoints is
//! "connection refused" (REJECT); deleting the service removes its chains.

use crate::common;

use std::collections::BTreeSet;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{ChildGuard, NetNs, Proxy};
use rkube_proxy::engine::machine::SyncKind;
use rkube_proxy::fixtures::{endpoint_slice, service, with_node_port, Ep};

const CLUSTER_IP: &str = "10.96.0.10";
const NODE_PORT: i32 = 30080;

struct Backend {
    _ns: NetNs,
    _server: ChildGuard,
}

/// Answers every request with `HTTP/1.0 200` and the backend's name; argv: address, name.
const HTTP_SERVER: &str = r#"
import socketserver, sys
name = sys.argv[2].encode()
class H(socketserver.BaseRequestHandler):
    def handle(self):
        self.request.recv(65536)
        self.request.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(name), name))
socketserver.ThreadingTCPServer.allow_reuse_address = True
socketserver.ThreadingTCPServer((sys.argv[1], 8080), H).serve_forever()
"#;

fn python() -> &'static str {
    if std::path::Path::new("/usr/bin/python3").exists() { "/usr/bin/python3" } else { "python3" }
}

/// Join `client` and a new backend namespace with a veth pair and start its HTTP server.
fn backend(client: &NetNs, name: &str, subnet: u8) -> Backend {
    let ns = NetNs::new(name);
    let (host_if, peer_if) = (format!("c{subnet}"), format!("e{subnet}"));
    client.exec_ok("ip", &["link", "add", &host_if, "type", "veth", "peer", "name", &peer_if, "netns", &ns.name]);
    client.exec_ok("ip", &["addr", "add", &format!("10.201.{subnet}.1/24"), "dev", &host_if]);
    client.exec_ok("ip", &["link", "set", &host_if, "up"]);
    ns.exec_ok("ip", &["addr", "add", &format!("10.201.{subnet}.2/24"), "dev", &peer_if]);
    ns.exec_ok("ip", &["link", "set", &peer_if, "up"]);
    ns.exec_ok("ip", &["route", "add", "default", "via", &format!("10.201.{subnet}.1")]);

    // A minimal HTTP responder (http.server's reverse DNS lookup at bind time
    // stalls in a namespace without DNS).
    let child = Command::new("ip")
        .args(["netns", "exec", &ns.name, python(), "-c", HTTP_SERVER, &format!("10.201.{subnet}.2"), name])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start python3 HTTP server");
    let b = Backend { _ns: ns, _server: ChildGuard(child) };
    // Wait until the server answers directly (no service rules involved).
    let url = format!("http://10.201.{subnet}.2:8080/who");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let answer = get(client, &url);
        if answer == Ok(name.to_string()) {
            break;
        }
        assert!(Instant::now() < deadline, "backend {name} did not start: last answer {answer:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
    b
}

/// GET `url` from inside `ns`: Ok(body) or Err(curl exit code) (7 = connection refused).
fn get(ns: &NetNs, url: &str) -> Result<String, i32> {
    let out = ns.exec("curl", &["-s", "--noproxy", "*", "--max-time", "2", url]);
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(out.status.code().unwrap_or(-1))
    }
}

fn who_answers(ns: &NetNs, url: &str, tries: usize) -> BTreeSet<String> {
    (0..tries)
        .map(|_| get(ns, url).unwrap_or_else(|code| panic!("request to {url} failed with curl exit {code}")))
        .collect()
}

fn set_endpoints(proxy: &mut Proxy, ips: &[&str]) {
    let eps: Vec<Ep> = ips.iter().map(|ip| Ep::ready(ip)).collect();
    proxy.change(|t| t.update_slice(&endpoint_slice("default", "web", "web-1", "http", 8080, &eps)));
    let r = proxy.sync();
    assert!(r.result.is_ok(), "sync failed: {:?}", r.result);
    assert_eq!(r.kind, SyncKind::Partial);
}

#[test]
fn cluster_ip_and_node_port_traffic_follows_endpoint_changes() {
    let client = NetNs::new("cli");
    let b1 = backend(&client, "b1", 1);
    let b2 = backend(&client, "b2", 2);
    client.exec_ok("ip", &["route", "add", "10.96.0.0/16", "dev", "c1"]);

    let mut proxy = Proxy::new(&client, "node-a");
    let svc = with_node_port(service("default", "web", CLUSTER_IP, "http", 80), NODE_PORT);
    proxy.change(|t| t.update_service(&svc));
    proxy.change(|t| {
        t.update_slice(&endpoint_slice("default", "web", "web-1", "http", 8080, &[Ep::ready("10.201.1.2"), Ep::ready("10.201.2.2")]))
    });
    let r = proxy.sync();
    assert!(r.result.is_ok(), "first sync failed: {:?}", r.result);
    assert!(r.kind.is_full());

    let cluster_url = format!("http://{CLUSTER_IP}/who");
    let node_port_url = format!("http://10.201.1.1:{NODE_PORT}/who");
    let both: BTreeSet<String> = ["b1".to_string(), "b2".to_string()].into();
    assert_eq!(who_answers(&client, &cluster_url, 24), both, "2 endpoints: both answer the ClusterIP");
    assert_eq!(who_answers(&client, &node_port_url, 24), both, "2 endpoints: both answer the NodePort");

    set_endpoints(&mut proxy, &["10.201.2.2"]);
    assert_eq!(who_answers(&client, &cluster_url, 8), ["b2".to_string()].into(), "1 endpoint: only b2");
    assert_eq!(who_answers(&client, &node_port_url, 4), ["b2".to_string()].into());

    set_endpoints(&mut proxy, &[]);
    assert_eq!(get(&client, &cluster_url), Err(7), "0 endpoints: ClusterIP connection refused");
    assert_eq!(get(&client, &node_port_url), Err(7), "0 endpoints: NodePort connection refused");

    set_endpoints(&mut proxy, &["10.201.1.2", "10.201.2.2"]);
    assert_eq!(who_answers(&client, &cluster_url, 24), both, "back to 2 endpoints");

    // Deleting the service removes its chains in the next (partial) sync.
    let before = client.saved_state();
    assert!(before.contains(":KUBE-SVC-"), "service chain present before delete");
    proxy.change(|t| t.delete_service("default", "web"));
    let r = proxy.sync();
    assert!(r.result.is_ok(), "sync after delete failed: {:?}", r.result);
    assert!(r.chains_deleted >= 4, "SVC, EXT and two SEP chains deleted, got {}", r.chains_deleted);
    let after = client.saved_state();
    for prefix in [":KUBE-SVC-", ":KUBE-SEP-", ":KUBE-EXT-"] {
        assert!(!after.contains(prefix), "{prefix} chain left after delete:\n{after}");
    }
    drop((b1, b2));
}
