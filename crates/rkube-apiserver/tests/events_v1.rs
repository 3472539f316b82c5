//! events.k8s.io/v1 `events` are the core/v1 `events` in another version,
//! as upstream serves them: one stored object, converted on every read and
//! write (`pkg/apis/events/v1/conversion.go`), field selectors in the
//! events.k8s.io names, upstream's events.k8s.io/v1 validation.

use crate::common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use common::TestServer;
use rkube_apiserver::state::ServerConfig;
use serde_json::{json, Value};

const CORE: &str = "/api/v1/namespaces/default/events";
const V1: &str = "/apis/events.k8s.io/v1/namespaces/default/events";
const TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io";

/// A server that caches events (upstream's default and rkube's is no cache
/// for events), so both read paths are exercised.
async fn caching_events() -> TestServer {
    let mut config = ServerConfig::default();
    config.watch_cache.sizes = BTreeMap::from([("events".to_string(), 100)]);
    TestServer::embedded_with(config).await
}

/// kubectl 1.33 from `$RKUBE_KUBECTL_DIR`, else the `kubectl` on `PATH`.
fn kubectl_bin() -> PathBuf {
    match std::env::var_os("RKUBE_KUBECTL_DIR") {
        Some(dir) => PathBuf::from(dir).join("kubectl.1.33"),
        None => PathBuf::from("kubectl"),
    }
}

/// Runs kubectl against `s` (plain HTTP, no credentials); stdout on success.
async fn kubectl(s: &TestServer, dir: &std::path::Path, args: &[&str]) -> String {
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {}\nusers:\n- name: u\n  user: {{}}\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\n    namespace: default\ncurrent-context: c\n",
            s.base
        ),
    )
    .expect("write kubeconfig");
    let out = tokio::time::timeout(
        Duration::from_secs(60),
        tokio::process::Command::new(kubectl_bin())
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .arg(format!("--cache-dir={}", dir.join("cache").display()))
            .args(args)
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("kubectl finished within 60s")
    .expect("kubectl runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "kubectl {args:?}: {}\n{stdout}", String::from_utf8_lossy(&out.stderr));
    stdout
}

fn kube_client(s: &TestServer) -> kube::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    kube::Client::try_from(kube::Config::new(s.base.parse().expect("server URL"))).expect("kube client")
}

/// kube-rs's `Recorder` writes events.k8s.io/v1 events (and patches their
/// `series` on a repeat); core/v1 readers and `kubectl get events` see them
/// with the core names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rs_recorder_events_are_core_v1_events_kubectl_lists() {
    use kube::runtime::events::{Event, EventType, Recorder, Reporter};
    use kube::Resource;
    let s = caching_events().await;
    assert_eq!(s.post("/api/v1/namespaces/default/configmaps", &common::configmap("cm1")).await.code, 201);
    let client = kube_client(&s);
    let cms: kube::Api<k8s_openapi::api::core::v1::ConfigMap> = kube::Api::namespaced(client.clone(), "default");
    let cm = cms.get("cm1").await.expect("get configmap");
    let reporter = Reporter { controller: "rkube-test".into(), instance: Some("instance-1".into()) };
    let recorder = Recorder::new(client, reporter);
    let event = Event {
        type_: EventType::Normal,
        reason: "Tested".into(),
        note: Some("hello from kube-rs".into()),
        action: "Test".into(),
        secondary: None,
    };
    recorder.publish(&event, &cm.object_ref(&())).await.expect("publish");

    let list = s.get(CORE).await;
    assert_eq!(list.code, 200, "{}", list.text);
    let items = list.body["items"].as_array().expect("items");
    assert_eq!(items.len(), 1, "{}", list.text);
    let ev = &items[0];
    assert_eq!(ev["apiVersion"], "v1");
    assert_eq!(ev["involvedObject"]["kind"], "ConfigMap");
    assert_eq!(ev["involvedObject"]["name"], "cm1");
    assert_eq!(ev["message"], "hello from kube-rs");
    assert_eq!(ev["reason"], "Tested");
    assert_eq!(ev["reportingComponent"], "rkube-test");
    assert_eq!(ev["reportingInstance"], "instance-1");
    assert_eq!(ev["action"], "Test");
    assert!(ev["eventTime"].as_str().is_some_and(|t| !t.is_empty()), "{ev}");
    assert!(ev.get("note").is_none() && ev.get("regarding").is_none(), "{ev}");

    // A repeat is a merge patch through events.k8s.io/v1 setting `series`.
    recorder.publish(&event, &cm.object_ref(&())).await.expect("publish again");
    let name = ev["metadata"]["name"].as_str().expect("name");
    let again = s.get(&format!("{CORE}/{name}")).await;
    assert_eq!(again.body["series"]["count"], 2, "{}", again.text);

    let dir = tempfile::tempdir().expect("temp dir");
    let out = kubectl(&s, dir.path(), &["get", "events"]).await;
    let mut lines = out.lines();
    let header: Vec<&str> = lines.next().unwrap_or("").split_whitespace().collect();
    assert_eq!(header, ["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"], "{out}");
    let row = lines.next().unwrap_or("");
    for want in ["Normal", "Tested", "configmap/cm1", "hello from kube-rs"] {
        assert!(row.contains(want), "{want} in {out}");
    }
    let out = kubectl(&s, dir.path(), &["get", "events.v1.events.k8s.io"]).await;
    assert!(out.lines().nth(1).is_some_and(|l| l.contains("configmap/cm1") && l.contains("Tested")), "{out}");
}

fn core_event(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Event",
        "metadata": {"name": name, "namespace": "default"},
        "involvedObject": {"kind": "Pod", "name": "p1", "namespace": "default"},
        "reason": "Started", "message": "started container", "type": "Normal",
        "source": {"component": "kubelet", "host": "node-1"},
        "firstTimestamp": "2024-01-01T00:00:00Z", "lastTimestamp": "2024-01-01T00:00:05Z", "count": 3})
}

async fn core_events_read_and_watch_through_events_k8s_io(s: TestServer) {
    let start = s.get(V1).await;
    assert_eq!(start.code, 200, "{}", start.text);
    assert_eq!(start.body["kind"], "EventList");
    assert_eq!(start.body["apiVersion"], "events.k8s.io/v1");
    let mut watch = s.watch(&format!("{V1}?watch=true&resourceVersion={}", start.rv())).await;
    assert_eq!(watch.code, 200);

    let created = s.post(CORE, &core_event("e1")).await;
    assert_eq!(created.code, 201, "{}", created.text);
    let ev = watch.next().await;
    assert_eq!(ev["type"], "ADDED", "{ev}");
    let obj = &ev["object"];
    assert_eq!(obj["apiVersion"], "events.k8s.io/v1");
    assert_eq!(obj["kind"], "Event");
    assert_eq!(obj["regarding"], json!({"kind": "Pod", "name": "p1", "namespace": "default"}));
    assert_eq!(obj["note"], "started container");
    assert_eq!(obj["deprecatedSource"], json!({"component": "kubelet", "host": "node-1"}));
    assert_eq!(obj["deprecatedCount"], 3);
    assert_eq!(obj["deprecatedFirstTimestamp"], "2024-01-01T00:00:00Z");
    assert_eq!(obj["deprecatedLastTimestamp"], "2024-01-01T00:00:05Z");
    assert_eq!(obj["metadata"]["resourceVersion"], created.body["metadata"]["resourceVersion"]);
    assert!(obj.get("involvedObject").is_none() && obj.get("message").is_none(), "{obj}");

    let got = s.get(&format!("{V1}/e1")).await;
    assert_eq!(got.code, 200, "{}", got.text);
    assert_eq!(&got.body, obj);

    // Field selectors in the events.k8s.io names; core-only labels are refused.
    let hit = s.get(&format!("{V1}?fieldSelector=regarding.name%3Dp1,type%3DNormal")).await;
    assert_eq!(hit.code, 200, "{}", hit.text);
    assert_eq!(hit.body["items"].as_array().map(Vec::len), Some(1), "{}", hit.text);
    let miss = s.get(&format!("{V1}?fieldSelector=regarding.name%3Dother")).await;
    assert_eq!(miss.body["items"], json!([]), "{}", miss.text);
    let bad = s.get(&format!("{V1}?fieldSelector=involvedObject.name%3Dp1")).await;
    bad.assert_status(400, "BadRequest");
    assert_eq!(bad.message(), "field label not supported: involvedObject.name");

    // The events.k8s.io table is the events table.
    let table = s.get_as(V1, TABLE).await;
    assert_eq!(table.code, 200, "{}", table.text);
    let cols: Vec<&str> =
        table.body["columnDefinitions"].as_array().unwrap().iter().filter_map(|c| c["name"].as_str()).collect();
    assert_eq!(&cols[..7], &["Last Seen", "Type", "Reason", "Object", "Subobject", "Source", "Message"]);
    let cells = &table.body["rows"][0]["cells"];
    assert_eq!(cells[3], "pod/p1");
    assert_eq!(cells[5], "kubelet, node-1");
    assert_eq!(cells[6], "started container");

    // A write through events.k8s.io lands in the core object (old events
    // without eventTime keep passing: upstream's legacy validation).
    let patched = s.patch(&format!("{V1}/e1"), "application/merge-patch+json", r#"{"note":"patched"}"#).await;
    assert_eq!(patched.code, 200, "{}", patched.text);
    assert_eq!(patched.body["note"], "patched");
    assert_eq!(s.get(&format!("{CORE}/e1")).await.body["message"], "patched");
    let modified = watch.next().await;
    assert_eq!(modified["type"], "MODIFIED", "{modified}");
    assert_eq!(modified["object"]["note"], "patched");

    let deleted = s.delete(&format!("{V1}/e1"), None).await;
    assert_eq!(deleted.code, 200, "{}", deleted.text);
    assert_eq!(s.get(&format!("{CORE}/e1")).await.code, 404);
    let gone = watch.next().await;
    assert_eq!(gone["type"], "DELETED", "{gone}");
    assert_eq!(gone["object"]["apiVersion"], "events.k8s.io/v1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn core_events_read_and_watch_through_events_k8s_io_from_the_cache() {
    core_events_read_and_watch_through_events_k8s_io(caching_events().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn core_events_read_and_watch_through_events_k8s_io_from_storage() {
    core_events_read_and_watch_through_events_k8s_io(TestServer::embedded().await).await;
}

/// Upstream `ValidateEventCreate` / `ValidateEventUpdate` for events.k8s.io/v1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_k8s_io_v1_validation_follows_upstream() {
    let s = TestServer::embedded().await;
    let bare = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "bare"},
        "regarding": {"kind": "Pod", "name": "p"}, "type": "Normal"});
    let r = s.post(V1, &bare).await;
    r.assert_status(422, "Invalid");
    let fields: Vec<&str> =
        r.body["details"]["causes"].as_array().unwrap().iter().filter_map(|c| c["field"].as_str()).collect();
    assert_eq!(fields, ["eventTime"], "{}", r.text);

    let mut ev = bare.clone();
    ev["metadata"]["name"] = json!("full");
    ev["eventTime"] = json!("2024-01-01T00:00:00.000000Z");
    ev["deprecatedCount"] = json!(2);
    let r = s.post(V1, &ev).await;
    r.assert_status(422, "Invalid");
    let fields: Vec<&str> =
        r.body["details"]["causes"].as_array().unwrap().iter().filter_map(|c| c["field"].as_str()).collect();
    for want in ["reportingController", "reportingInstance", "action", "reason", "deprecatedCount"] {
        assert!(fields.contains(&want), "{want} in {}", r.text);
    }

    ev["deprecatedCount"] = json!(null);
    ev["reportingController"] = json!("example.com/ctl");
    ev["reportingInstance"] = json!("i1");
    ev["action"] = json!("Act");
    ev["reason"] = json!("Because");
    let r = s.post(V1, &ev).await;
    assert_eq!(r.code, 201, "{}", r.text);
    let core = s.get(&format!("{CORE}/full")).await;
    assert_eq!(core.body["reportingComponent"], "example.com/ctl");

    let mut changed = r.body.clone();
    changed["reason"] = json!("Other");
    let r = s.put(&format!("{V1}/full"), &changed).await;
    r.assert_status(422, "Invalid");
    assert_eq!(r.body["details"]["causes"][0]["field"], "reason");
    assert!(r.message().contains("field is immutable"), "{}", r.text);
}

/// A protobuf field: `tag` with wire type `wire` and `payload` (already
/// varint-encoded for wire type 0).
fn pb_field(tag: u64, wire: u64, payload: &[u8]) -> Vec<u8> {
    let mut out = varint((tag << 3) | wire);
    if wire == 2 {
        out.extend(varint(payload.len() as u64));
    }
    out.extend_from_slice(payload);
    out
}

fn varint(mut n: u64) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let byte = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(byte);
            return out;
        }
        out.push(byte | 0x80);
    }
}

/// client-go sends protobuf first: an events.k8s.io/v1 Event body in the
/// Kubernetes protobuf envelope is decoded with the events.k8s.io schema
/// and stored as the core event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protobuf_events_k8s_io_bodies_are_stored_as_core_events() {
    let s = TestServer::embedded().await;
    let s_ = |tag, text: &str| pb_field(tag, 2, text.as_bytes());
    let meta = s_(1, "pb");
    let event_time = [pb_field(1, 0, &varint(1_704_067_200)), pb_field(2, 0, &varint(5_000))].concat();
    let regarding = [s_(1, "Pod"), s_(2, "default"), s_(3, "p1")].concat();
    let event = [
        pb_field(1, 2, &meta),
        pb_field(2, 2, &event_time),
        s_(4, "example.com/ctl"),
        s_(5, "i1"),
        s_(6, "Act"),
        s_(7, "Because"),
        pb_field(8, 2, &regarding),
        s_(10, "from protobuf"),
        s_(11, "Normal"),
    ]
    .concat();
    let type_meta = [s_(1, "events.k8s.io/v1"), s_(2, "Event")].concat();
    let body = [b"k8s\x00".as_slice(), &pb_field(1, 2, &type_meta), &pb_field(2, 2, &event)].concat();
    let r = s
        .send("POST", V1, Some("application/vnd.kubernetes.protobuf"), Some("application/json"), Some(body))
        .await;
    assert_eq!(r.code, 201, "{}", r.text);
    assert_eq!(r.body["note"], "from protobuf");
    let core = s.get(&format!("{CORE}/pb")).await;
    assert_eq!(core.code, 200, "{}", core.text);
    assert_eq!(core.body["message"], "from protobuf");
    assert_eq!(core.body["involvedObject"]["name"], "p1");
    assert_eq!(core.body["reportingComponent"], "example.com/ctl");
    assert_eq!(core.body["eventTime"], "2024-01-01T00:00:00.000005Z");
}
