//! Discovery, /version and health endpoints as clients see them.

use crate::common;

use common::TestServer;
use serde_json::Value;

const AGG_V2: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";
const AGG_V2BETA1: &str = "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList";

#[tokio::test]
async fn legacy_discovery_lists_resources_with_short_names_and_verbs() {
    let s = TestServer::embedded().await;
    let api = s.get("/api").await;
    assert_eq!(api.body["kind"], "APIVersions");
    assert_eq!(api.body["versions"], serde_json::json!(["v1"]));
    let v1 = s.get("/api/v1").await;
    assert_eq!(v1.body["kind"], "APIResourceList");
    assert_eq!(v1.body["groupVersion"], "v1");
    let res = v1.body["resources"].as_array().unwrap();
    let find = |n: &str| res.iter().find(|r| r["name"] == n).cloned().unwrap_or(Value::Null);
    let pods = find("pods");
    assert_eq!(pods["singularName"], "pod");
    assert_eq!(pods["namespaced"], true);
    assert_eq!(pods["kind"], "Pod");
    assert_eq!(pods["shortNames"], serde_json::json!(["po"]));
    assert_eq!(pods["categories"], serde_json::json!(["all"]));
    assert!(pods["verbs"].as_array().unwrap().iter().any(|v| v == "watch"));
    assert_eq!(find("pods/binding")["kind"], "Binding");
    assert_eq!(find("pods/status")["verbs"], serde_json::json!(["get", "patch", "update"]));
    for (name, short) in
        [("services", "svc"), ("nodes", "no"), ("namespaces", "ns"), ("configmaps", "cm"), ("endpoints", "ep")]
    {
        assert_eq!(find(name)["shortNames"][0], short, "{name}");
    }
    assert_eq!(find("namespaces")["namespaced"], false);
    let apis = s.get("/apis").await;
    assert_eq!(apis.body["kind"], "APIGroupList");
    let names: Vec<&str> =
        apis.body["groups"].as_array().unwrap().iter().map(|g| g["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        vec![
            // kube-apiserver's order: groupPriorityMinimum, highest first, then name.
            "apiregistration.k8s.io",
            "apps",
            "events.k8s.io",
            "authentication.k8s.io",
            "authorization.k8s.io",
            "autoscaling",
            "batch",
            "certificates.k8s.io",
            "networking.k8s.io",
            "policy",
            "rbac.authorization.k8s.io",
            "storage.k8s.io",
            "admissionregistration.k8s.io",
            "apiextensions.k8s.io",
            "scheduling.k8s.io",
            "coordination.k8s.io",
            "node.k8s.io",
            "discovery.k8s.io",
            "flowcontrol.apiserver.k8s.io",
            // metrics-server's APIService (groupPriorityMinimum 100), served by rkube itself.
            "metrics.k8s.io",
        ]
    );
    let apps = s.get("/apis/apps/v1").await;
    assert_eq!(apps.body["groupVersion"], "apps/v1");
    let deployments = apps.body["resources"].as_array().unwrap().iter().find(|r| r["name"] == "deployments").unwrap();
    assert_eq!(deployments["shortNames"], serde_json::json!(["deploy"]));
    let scale = apps.body["resources"].as_array().unwrap().iter().find(|r| r["name"] == "statefulsets/scale").unwrap();
    assert_eq!(scale["kind"], "Scale");
    assert_eq!(scale["group"], "autoscaling");
    assert_eq!(s.get("/apis/apps").await.body["preferredVersion"]["groupVersion"], "apps/v1");
    s.get("/apis/nope.example.com/v1").await.assert_status(404, "NotFound");
}

#[tokio::test]
async fn aggregated_discovery_only_when_asked_with_exact_content_type() {
    let s = TestServer::embedded().await;
    let plain = s.get("/apis").await;
    assert_eq!(plain.headers["content-type"], "application/json");
    assert_eq!(plain.body["kind"], "APIGroupList");
    let accept = format!("{AGG_V2},{AGG_V2BETA1},application/json");
    let agg = s.get_as("/apis", &accept).await;
    assert_eq!(agg.headers["content-type"], AGG_V2);
    assert_eq!(agg.body["kind"], "APIGroupDiscoveryList");
    assert_eq!(agg.body["apiVersion"], "apidiscovery.k8s.io/v2");
    let apps = agg.body["items"].as_array().unwrap().iter().find(|i| i["metadata"]["name"] == "apps").unwrap();
    let resources = apps["versions"][0]["resources"].as_array().unwrap();
    let deployments = resources.iter().find(|r| r["resource"] == "deployments").unwrap();
    assert_eq!(deployments["scope"], "Namespaced");
    assert_eq!(deployments["categories"], serde_json::json!(["all"]));
    let old = s.get_as("/api", &format!("{AGG_V2BETA1},application/json")).await;
    assert_eq!(old.headers["content-type"], AGG_V2BETA1);
    let core = &old.body["items"][0]["versions"][0];
    assert_eq!(core["version"], "v1");
    let pods = core["resources"].as_array().unwrap().iter().find(|r| r["resource"] == "pods").unwrap();
    assert_eq!(pods["shortNames"][0], "po");
    assert_eq!(pods["subresources"][0]["subresource"], "status");
}

#[tokio::test]
async fn version_reports_kubernetes_1_33() {
    let s = TestServer::embedded().await;
    let v = s.get("/version").await;
    assert_eq!(v.code, 200);
    assert_eq!(v.body["major"], "1");
    assert_eq!(v.body["minor"], "33");
    assert_eq!(v.body["gitVersion"], "v1.33.0-rkube");
    assert!(v.body["platform"].as_str().unwrap().starts_with("linux/"));
}

#[tokio::test]
async fn health_endpoints_answer_ok_and_verbose_lists_checks() {
    let s = TestServer::embedded().await;
    // /readyz waits for the watch caches (storage-readiness); give them a moment.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while s.get("/readyz").await.code != 200 && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    for ep in ["/healthz", "/livez", "/readyz"] {
        let r = s.get(ep).await;
        assert_eq!((r.code, r.text.as_str()), (200, "ok"), "{ep}");
    }
    let r = s.get("/readyz?verbose").await;
    assert_eq!(r.code, 200);
    assert!(r.text.contains("[+]ping ok\n"), "{}", r.text);
    assert!(r.text.contains("[+]etcd ok\n"), "{}", r.text);
    assert!(r.text.ends_with("readyz check passed\n"), "{}", r.text);
    assert_eq!(s.get("/livez/etcd").await.text, "ok");
    s.get("/livez/nope").await.assert_status(404, "NotFound");
}

#[tokio::test]
async fn system_namespaces_exist_at_first_start() {
    let s = TestServer::embedded().await;
    for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        let r = s.get(&format!("/api/v1/namespaces/{ns}")).await;
        assert_eq!(r.code, 200, "{ns}");
        assert_eq!(r.body["status"]["phase"], "Active");
        assert_eq!(r.body["metadata"]["labels"]["kubernetes.io/metadata.name"], ns);
    }
}

#[tokio::test]
async fn openapi_v3_index_and_documents_are_served() {
    let s = TestServer::embedded().await;
    let idx = s.get("/openapi/v3").await;
    assert_eq!(idx.code, 200);
    let url = idx.body["paths"]["api/v1"]["serverRelativeURL"].as_str().unwrap().to_string();
    let doc = s.get(&url).await;
    assert_eq!(doc.code, 200);
    assert!(doc.body["components"]["schemas"].is_object());
    assert_eq!(s.get("/openapi/v2").await.code, 200);
    s.get("/openapi/v3/apis/nope/v1").await.assert_status(404, "NotFound");
}
