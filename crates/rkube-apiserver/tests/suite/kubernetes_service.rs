//! The `default/kubernetes` Service, Endpoints and EndpointSlice
//! (`rkube_apiserver::kubernetes_service`), as a client reads them over HTTP.

use std::net::IpAddr;

use rkube_apiserver::ipalloc::Cidr;
use rkube_apiserver::kubernetes_service::{reconcile, ApiserverEndpoint};
use serde_json::json;

use crate::common::TestServer;

const SVC: &str = "/api/v1/namespaces/default/services/kubernetes";
const EPS: &str = "/api/v1/namespaces/default/endpoints/kubernetes";
const SLICE: &str = "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices/kubernetes";

fn me(ip: &str, port: u16) -> ApiserverEndpoint {
    ApiserverEndpoint { ip: ip.parse::<IpAddr>().expect("ip"), port }
}

async fn run(s: &TestServer, ep: ApiserverEndpoint) {
    let cidr = Cidr::parse("10.96.0.0/12").expect("cidr");
    reconcile(s.storage.as_ref(), "/registry", cidr, ep).await.expect("reconcile");
}

async fn rvs(s: &TestServer) -> [String; 3] {
    [s.get(SVC).await.rv(), s.get(EPS).await.rv(), s.get(SLICE).await.rv()]
}

pub async fn kubernetes_service_points_at_the_apiserver_and_is_idempotent(s: &TestServer) {
    run(s, me("127.0.0.1", 6443)).await;
    let svc = s.get(SVC).await;
    assert_eq!(svc.code, 200, "{}", svc.text);
    assert_eq!(svc.body["metadata"]["labels"], json!({"component": "apiserver", "provider": "kubernetes"}));
    assert_eq!(svc.body["spec"]["clusterIP"], "10.96.0.1");
    assert_eq!(svc.body["spec"]["type"], "ClusterIP");
    assert_eq!(svc.body["spec"]["sessionAffinity"], "None");
    assert_eq!(
        svc.body["spec"]["ports"],
        json!([{"name": "https", "port": 443, "protocol": "TCP", "targetPort": 6443}])
    );
    let eps = s.get(EPS).await;
    assert_eq!(eps.code, 200, "{}", eps.text);
    assert_eq!(eps.body["metadata"]["labels"], json!({"endpointslice.kubernetes.io/skip-mirror": "true"}));
    assert_eq!(
        eps.body["subsets"],
        json!([{"addresses": [{"ip": "127.0.0.1"}], "ports": [{"name": "https", "port": 6443, "protocol": "TCP"}]}])
    );
    let slices = s.get("/apis/discovery.k8s.io/v1/namespaces/default/endpointslices?labelSelector=kubernetes.io/service-name=kubernetes").await;
    let items = slices.body["items"].as_array().cloned().unwrap_or_default();
    assert_eq!(items.len(), 1, "{}", slices.text);
    let slice = &items[0];
    assert_eq!(slice["metadata"]["name"], "kubernetes");
    assert_eq!(slice["addressType"], "IPv4");
    assert_eq!(slice["endpoints"], json!([{"addresses": ["127.0.0.1"], "conditions": {"ready": true}}]));
    assert_eq!(slice["ports"], json!([{"name": "https", "port": 6443, "protocol": "TCP"}]));

    // A restart (same address and port) writes nothing.
    let before = rvs(s).await;
    run(s, me("127.0.0.1", 6443)).await;
    assert_eq!(rvs(s).await, before, "reconciling again changes no resourceVersion");

    // A second API server on the same port adds its address; neither then rewrites.
    run(s, me("10.0.0.9", 6443)).await;
    run(s, me("127.0.0.1", 6443)).await;
    let eps = s.get(EPS).await;
    assert_eq!(eps.body["subsets"][0]["addresses"], json!([{"ip": "10.0.0.9"}, {"ip": "127.0.0.1"}]));
    let settled = rvs(s).await;
    run(s, me("10.0.0.9", 6443)).await;
    assert_eq!(rvs(s).await, settled);

    // A user's change to the Service is corrected; a deleted Endpoints comes back.
    let mut edited = s.get(SVC).await.body;
    edited["spec"]["ports"][0]["targetPort"] = json!(9999);
    edited["metadata"]["labels"] = json!({"mine": "yes"});
    assert_eq!(s.put(SVC, &edited).await.code, 200);
    assert_eq!(s.delete(EPS, None).await.code, 200);
    run(s, me("127.0.0.1", 6443)).await;
    let svc2 = s.get(SVC).await;
    assert_eq!(svc2.body["spec"]["ports"][0]["targetPort"], 6443);
    assert_eq!(svc2.body["metadata"]["labels"]["provider"], "kubernetes");
    assert_eq!(svc2.body["metadata"]["uid"], svc.body["metadata"]["uid"], "updated in place");
    assert_eq!(s.get(EPS).await.body["subsets"][0]["addresses"], json!([{"ip": "127.0.0.1"}]));

    // The reserved address is never handed to another Service.
    let other = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
        "spec": {"ports": [{"port": 80}]}});
    let r = s.post("/api/v1/namespaces/default/services", &other).await;
    assert_eq!(r.code, 201, "{}", r.text);
    assert_ne!(r.body["spec"]["clusterIP"], "10.96.0.1");
}
