//! The `Priority` admission plugin (upstream `plugin/pkg/admission/priority`)
//! over HTTP: pods get `spec.priority` and `spec.preemptionPolicy` from their
//! PriorityClass, or from the `globalDefault` one, and are refused with 403
//! for a class that does not exist or a priority that contradicts theirs.

use crate::common;

use common::TestServer;
use rkube_apiserver::admission::AdmissionConfig;
use rkube_apiserver::ServerConfig;
use serde_json::{json, Value};

const PODS: &str = "/api/v1/namespaces/default/pods";
const CLASSES: &str = "/apis/scheduling.k8s.io/v1/priorityclasses";

async fn server() -> TestServer {
    let config = ServerConfig { admission: AdmissionConfig { priority: true, ..Default::default() }, ..ServerConfig::default() };
    TestServer::embedded_with(config).await
}

fn pod(name: &str, class: Option<&str>) -> Value {
    let mut p = common::pod(name);
    if let Some(c) = class {
        p["spec"]["priorityClassName"] = json!(c);
    }
    p
}

async fn class(srv: &TestServer, name: &str, value: i64, extra: Value) {
    let mut c = json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}, "value": value});
    if let (Some(obj), Some(extra)) = (c.as_object_mut(), extra.as_object()) {
        obj.extend(extra.clone());
    }
    let r = srv.post(CLASSES, &c).await;
    assert_eq!(r.code, 201, "{}", r.text);
}

/// Polls until a pod created with `class` is admitted (the plugin reads
/// classes from the watch cache, which follows the create closely).
async fn admitted(srv: &TestServer, name: &str, class: Option<&str>) -> Value {
    for _ in 0..50 {
        let r = srv.post(PODS, &pod(name, class)).await;
        if r.code == 201 {
            return r.body;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    panic!("pod {name} with class {class:?} was never admitted");
}

#[tokio::test]
async fn pods_get_the_priority_of_their_class() {
    let srv = server().await;
    let plain = admitted(&srv, "plain", None).await;
    assert_eq!((plain["spec"]["priority"].clone(), plain["spec"]["preemptionPolicy"].clone()), (json!(0), json!("PreemptLowerPriority")));
    assert!(plain["spec"].get("priorityClassName").is_none());
    let critical = admitted(&srv, "critical", Some("system-node-critical")).await;
    assert_eq!(critical["spec"]["priority"], 2_000_001_000);
    class(&srv, "batch-low", 100, json!({"preemptionPolicy": "Never"})).await;
    let low = admitted(&srv, "low", Some("batch-low")).await;
    assert_eq!((low["spec"]["priority"].clone(), low["spec"]["preemptionPolicy"].clone()), (json!(100), json!("Never")));
    // A global default applies to pods that name no class.
    class(&srv, "everyone", 7, json!({"globalDefault": true})).await;
    let mut defaulted = Value::Null;
    for i in 0..50 {
        defaulted = admitted(&srv, &format!("later-{i}"), None).await;
        if defaulted["spec"]["priority"] == 7 {
            break;
        }
    }
    assert_eq!((defaulted["spec"]["priority"].clone(), defaulted["spec"]["priorityClassName"].clone()), (json!(7), json!("everyone")));
}

#[tokio::test]
async fn unknown_classes_and_contradicting_priorities_are_forbidden() {
    let srv = server().await;
    let r = srv.post(PODS, &pod("lost", Some("nope"))).await;
    r.assert_status(403, "Forbidden");
    assert_eq!(r.message(), "pods \"lost\" is forbidden: no PriorityClass with name nope was found");
    let mut p = pod("sneaky", Some("system-cluster-critical"));
    p["spec"]["priority"] = json!(5);
    let r = srv.post(PODS, &p).await;
    r.assert_status(403, "Forbidden");
    assert_eq!(
        r.message(),
        "pods \"sneaky\" is forbidden: the integer value of priority (5) must not be provided in pod spec; priority admission controller computed 2000000000 from the given PriorityClass name"
    );
    assert_eq!(srv.get(&format!("{PODS}/lost")).await.code, 404, "nothing stored");
}
