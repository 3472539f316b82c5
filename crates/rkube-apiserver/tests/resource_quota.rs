//! The `ResourceQuota` admission plugin (upstream
//! `plugin/pkg/admission/resourcequota`) over HTTP: creates beyond a
//! quota's `status.hard` are refused with upstream's 403 messages, admitted
//! ones are charged to `status.used` at once. The tests write quota status
//! themselves (through `/status`), as the resourcequota controller would.

use crate::common;

use common::TestServer;
use rkube_apiserver::admission::AdmissionConfig;
use rkube_apiserver::ServerConfig;
use serde_json::{json, Value};

async fn server() -> TestServer {
    let config = ServerConfig { admission: AdmissionConfig { resource_quota: true, ..Default::default() }, ..ServerConfig::default() };
    TestServer::embedded_with(config).await
}

/// Creates quota `q` in `ns` with `hard`, and writes its status (`hard`, `used`).
async fn quota(srv: &TestServer, ns: &str, hard: Value, used: Option<Value>) {
    let path = format!("/api/v1/namespaces/{ns}/resourcequotas");
    let created = srv.post(&path, &json!({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "q"}, "spec": {"hard": hard}})).await;
    assert_eq!(created.code, 201, "{}", created.text);
    if let Some(used) = used {
        let mut obj = created.body;
        obj["status"] = json!({"hard": hard, "used": used});
        let r = srv.put(&format!("{path}/q/status"), &obj).await;
        assert_eq!(r.code, 200, "{}", r.text);
    }
}

async fn used(srv: &TestServer, ns: &str) -> Value {
    srv.get(&format!("/api/v1/namespaces/{ns}/resourcequotas/q")).await.body["status"]["used"].clone()
}

fn pod(name: &str, cpu: Option<&str>) -> Value {
    let mut p = common::pod(name);
    if let Some(cpu) = cpu {
        p["spec"]["containers"][0]["resources"] = json!({"requests": {"cpu": cpu}});
    }
    p
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_beyond_the_quota_are_refused_with_upstreams_exceeded_message() {
    let srv = server().await;
    srv.namespace("q1").await;
    quota(&srv, "q1", json!({"pods": "2"}), Some(json!({"pods": "0"}))).await;
    for name in ["p1", "p2"] {
        let r = srv.post("/api/v1/namespaces/q1/pods", &pod(name, None)).await;
        assert_eq!(r.code, 201, "{}", r.text);
    }
    assert_eq!(used(&srv, "q1").await, json!({"pods": "2"}));
    let r = srv.post("/api/v1/namespaces/q1/pods", &pod("p3", None)).await;
    r.assert_status(403, "Forbidden");
    assert_eq!(r.message(), "pods \"p3\" is forbidden: exceeded quota: q, requested: pods=1, used: pods=2, limited: pods=2");
    assert_eq!(r.body["details"], json!({"name": "p3", "kind": "pods"}));
    // A dry run is checked but not charged.
    let r = srv.post("/api/v1/namespaces/q1/configmaps?dryRun=All", &common::configmap("cm")).await;
    assert_eq!(r.code, 201, "{}", r.text);
    assert_eq!(used(&srv, "q1").await, json!({"pods": "2"}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configmap_counts_and_cpu_requests_are_limited_and_cpu_quotas_require_requests() {
    let srv = server().await;
    srv.namespace("q2").await;
    let hard = json!({"count/configmaps": "1", "requests.cpu": "1"});
    quota(&srv, "q2", hard, Some(json!({"count/configmaps": "0", "requests.cpu": "0"}))).await;
    let r = srv.post("/api/v1/namespaces/q2/configmaps", &common::configmap("cm1")).await;
    assert_eq!(r.code, 201, "{}", r.text);
    let r = srv.post("/api/v1/namespaces/q2/configmaps", &common::configmap("cm2")).await;
    r.assert_status(403, "Forbidden");
    assert_eq!(
        r.message(),
        "configmaps \"cm2\" is forbidden: exceeded quota: q, requested: count/configmaps=1, used: count/configmaps=1, limited: count/configmaps=1"
    );

    let r = srv.post("/api/v1/namespaces/q2/pods", &pod("a", Some("600m"))).await;
    assert_eq!(r.code, 201, "{}", r.text);
    let r = srv.post("/api/v1/namespaces/q2/pods", &pod("b", Some("600m"))).await;
    r.assert_status(403, "Forbidden");
    assert_eq!(
        r.message(),
        "pods \"b\" is forbidden: exceeded quota: q, requested: requests.cpu=600m, used: requests.cpu=600m, limited: requests.cpu=1"
    );
    let r = srv.post("/api/v1/namespaces/q2/pods", &pod("c", None)).await;
    r.assert_status(403, "Forbidden");
    assert_eq!(r.message(), "pods \"c\" is forbidden: failed quota: q: must specify requests.cpu for: c");
    let r = srv.post("/api/v1/namespaces/q2/pods", &pod("d", Some("400m"))).await;
    assert_eq!(r.code, 201, "{}", r.text);
    assert_eq!(used(&srv, "q2").await, json!({"count/configmaps": "1", "requests.cpu": "1"}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quota_without_usage_for_a_tracked_resource_refuses_with_status_unknown() {
    let srv = server().await;
    srv.namespace("q3").await;
    // No status yet: the quota does not take part (upstream matches on status.hard).
    quota(&srv, "q3", json!({"pods": "1"}), None).await;
    let r = srv.post("/api/v1/namespaces/q3/pods", &pod("free", None)).await;
    assert_eq!(r.code, 201, "{}", r.text);
    let path = "/api/v1/namespaces/q3/resourcequotas/q";
    let mut obj = srv.get(path).await.body;
    obj["status"] = json!({"hard": {"pods": "1", "services": "1"}, "used": {"services": "0"}});
    let r = srv.put(&format!("{path}/status"), &obj).await;
    assert_eq!(r.code, 200, "{}", r.text);
    let r = srv.post("/api/v1/namespaces/q3/pods", &pod("blocked", None)).await;
    r.assert_status(403, "Forbidden");
    assert_eq!(r.message(), "pods \"blocked\" is forbidden: status unknown for quota: q, resources: pods");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_creates_against_a_quota_of_one_admit_exactly_one() {
    let srv = std::sync::Arc::new(server().await);
    srv.namespace("q4").await;
    quota(&srv, "q4", json!({"count/configmaps": "1"}), Some(json!({"count/configmaps": "0"}))).await;
    let mut tasks = Vec::new();
    for i in 0..6 {
        let srv = srv.clone();
        tasks.push(tokio::spawn(async move { srv.post("/api/v1/namespaces/q4/configmaps", &common::configmap(&format!("cm{i}"))).await }));
    }
    let mut codes = Vec::new();
    for t in tasks {
        let r = t.await.expect("task");
        if r.code != 201 {
            r.assert_status(403, "Forbidden");
            assert!(r.message().contains("exceeded quota: q, requested: count/configmaps=1, used: count/configmaps=1"), "{}", r.text);
        }
        codes.push(r.code);
    }
    assert_eq!(codes.iter().filter(|c| **c == 201).count(), 1, "{codes:?}");
    let list = srv.get("/api/v1/namespaces/q4/configmaps").await.body;
    let names: Vec<&str> = list["items"].as_array().into_iter().flatten().filter_map(|i| i["metadata"]["name"].as_str()).collect();
    assert_eq!(names.iter().filter(|n| n.starts_with("cm")).count(), 1, "{names:?}");
    assert_eq!(used(&srv, "q4").await, json!({"count/configmaps": "1"}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_update_is_charged_the_node_ports_it_adds() {
    let srv = server().await;
    srv.namespace("q5").await;
    quota(&srv, "q5", json!({"services": "2", "services.nodeports": "1"}), Some(json!({"services": "0", "services.nodeports": "0"}))).await;
    let svc = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
        "spec": {"ports": [{"name": "a", "port": 80}, {"name": "b", "port": 81}]}});
    let r = srv.post("/api/v1/namespaces/q5/services", &svc).await;
    assert_eq!(r.code, 201, "{}", r.text);
    assert_eq!(used(&srv, "q5").await, json!({"services": "1", "services.nodeports": "0"}));
    let r = srv.patch("/api/v1/namespaces/q5/services/web", "application/merge-patch+json", r#"{"spec":{"type":"NodePort"}}"#).await;
    r.assert_status(403, "Forbidden");
    assert_eq!(
        r.message(),
        "services \"web\" is forbidden: exceeded quota: q, requested: services.nodeports=2, used: services.nodeports=0, limited: services.nodeports=1"
    );
    // A label change costs nothing and passes.
    let r = srv.patch("/api/v1/namespaces/q5/services/web", "application/merge-patch+json", r#"{"metadata":{"labels":{"a":"b"}}}"#).await;
    assert_eq!(r.code, 200, "{}", r.text);
    assert_eq!(used(&srv, "q5").await, json!({"services": "1", "services.nodeports": "0"}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limit_ranges_default_container_resources_and_refuse_out_of_bounds_pods() {
    let config = ServerConfig {
        admission: AdmissionConfig { resource_quota: true, limit_ranger: true, ..Default::default() },
        ..ServerConfig::default()
    };
    let srv = TestServer::embedded_with(config).await;
    srv.namespace("lr").await;
    let lr = json!({"apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": "limits"}, "spec": {"limits": [
        {"type": "Container", "max": {"cpu": "1"}, "min": {"cpu": "100m"}, "defaultRequest": {"cpu": "200m"}}]}});
    let r = srv.post("/api/v1/namespaces/lr/limitranges", &lr).await;
    assert_eq!(r.code, 201, "{}", r.text);
    // With a requests.cpu quota, the defaulted request satisfies "must specify".
    quota(&srv, "lr", json!({"requests.cpu": "1"}), Some(json!({"requests.cpu": "0"}))).await;
    let r = srv.post("/api/v1/namespaces/lr/pods", &pod("defaulted", None)).await;
    assert_eq!(r.code, 201, "{}", r.text);
    assert_eq!(r.body["spec"]["containers"][0]["resources"], json!({"requests": {"cpu": "200m"}, "limits": {"cpu": "1"}}));
    assert_eq!(
        r.body["metadata"]["annotations"]["kubernetes.io/limit-ranger"],
        "LimitRanger plugin set: cpu request for container c; cpu limit for container c"
    );
    assert_eq!(used(&srv, "lr").await, json!({"requests.cpu": "200m"}));
    let mut big = pod("big", Some("50m"));
    big["spec"]["containers"][0]["resources"]["limits"] = json!({"cpu": "2"});
    let r = srv.post("/api/v1/namespaces/lr/pods", &big).await;
    r.assert_status(403, "Forbidden");
    assert_eq!(
        r.message(),
        "pods \"big\" is forbidden: [minimum cpu usage per Container is 100m, but request is 50m, maximum cpu usage per Container is 1, but limit is 2]"
    );
}
