//! The Endpoints and EndpointSlice controllers against a real rkube API
//! server in this process (embedded store, plain HTTP on 127.0.0.1:0): a
//! Service's endpoints follow its pods' IPs, readiness and labels, and its
//! Endpoints go with it.

use crate::common;

use std::time::Duration;

use k8s_openapi::api::core::v1::{Endpoints, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

/// Polls `check` for up to 20 s.
async fn eventually<T, F, Fut>(what: &str, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    common::eventually(Duration::from_secs(20), what, check).await
}

async fn create_pod(pods: &Api<Pod>, name: &str, ip: &str, ready: bool) {
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app": "web"}},
        "spec": {"nodeName": "node-1", "containers": [{"name": "c", "image": "busybox",
            "ports": [{"name": "http", "containerPort": 8080}]}]},
    }))
    .expect("pod");
    pods.create(&PostParams::default(), &pod).await.expect("create pod");
    set_ready(pods, name, ip, ready).await;
}

async fn set_ready(pods: &Api<Pod>, name: &str, ip: &str, ready: bool) {
    let status = json!({"status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}],
        "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }, "lastTransitionTime": "2026-01-01T00:00:00Z"}]}});
    pods.patch_status(name, &PatchParams::default(), &Patch::Merge(&status)).await.expect("pod status");
}

fn ips(ep: &Endpoints) -> (Vec<String>, Vec<String>) {
    let subsets = ep.subsets.clone().unwrap_or_default();
    let ready = subsets.iter().flat_map(|s| s.addresses.clone().unwrap_or_default()).map(|a| a.ip).collect();
    let not_ready = subsets.iter().flat_map(|s| s.not_ready_addresses.clone().unwrap_or_default()).map(|a| a.ip).collect();
    (ready, not_ready)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoints_and_slices_follow_pods_readiness_and_labels() {
    let cluster = common::Cluster::start("endpoints-controller,endpointslice-controller").await;
    let client = cluster.client.clone();

    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let endpoints: Api<Endpoints> = Api::namespaced(client.clone(), "default");
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), "default");
    create_pod(&pods, "web-a", "10.88.0.1", true).await;
    create_pod(&pods, "web-b", "10.88.0.2", false).await;
    let svc: Service = serde_json::from_value(json!({
        "metadata": {"name": "web", "labels": {"tier": "front"}},
        "spec": {"selector": {"app": "web"}, "ports": [{"name": "http", "port": 80, "targetPort": "http"}]},
    }))
    .expect("service");
    services.create(&PostParams::default(), &svc).await.expect("create service");

    let ep = eventually("Endpoints with one ready and one not-ready address", || async {
        let ep = endpoints.get_opt("web").await.ok()??;
        (ips(&ep) == (vec!["10.88.0.1".to_string()], vec!["10.88.0.2".to_string()])).then_some(ep)
    })
    .await;
    let subset = &ep.subsets.as_ref().expect("subsets")[0];
    assert_eq!(serde_json::to_value(&subset.ports).unwrap(), json!([{"name": "http", "port": 8080, "protocol": "TCP"}]));
    let labels = ep.metadata.labels.clone().unwrap_or_default();
    assert_eq!(labels.get("tier").map(String::as_str), Some("front"));
    assert_eq!(labels.get("endpointslice.kubernetes.io/skip-mirror").map(String::as_str), Some("true"));
    assert!(ep.metadata.annotations.unwrap_or_default().contains_key("endpoints.kubernetes.io/last-change-trigger-time"));

    let by_service = ListParams::default().labels("kubernetes.io/service-name=web");
    let slice = eventually("an EndpointSlice with both pods", || async {
        let list = slices.list(&by_service).await.ok()?;
        (list.items.len() == 1 && list.items[0].endpoints.len() == 2).then(|| list.items[0].clone())
    })
    .await;
    let v = serde_json::to_value(&slice).unwrap();
    assert_eq!(v["addressType"], "IPv4");
    assert_eq!(v["metadata"]["labels"]["endpointslice.kubernetes.io/managed-by"], "endpointslice-controller.k8s.io");
    assert_eq!(v["metadata"]["ownerReferences"][0]["name"], "web");
    assert_eq!(v["endpoints"][0]["addresses"], json!(["10.88.0.1"]));
    assert_eq!(v["endpoints"][0]["conditions"], json!({"ready": true, "serving": true, "terminating": false}));
    assert_eq!(v["endpoints"][1]["conditions"]["ready"], false);
    assert_eq!(v["endpoints"][1]["targetRef"]["name"], "web-b");

    // web-b becomes ready; web-a leaves the Service by a label change.
    set_ready(&pods, "web-b", "10.88.0.2", true).await;
    pods.patch("web-a", &PatchParams::default(), &Patch::Merge(&json!({"metadata": {"labels": {"app": "other"}}}))).await.expect("relabel");
    eventually("Endpoints with web-b only", || async {
        let ep = endpoints.get_opt("web").await.ok()??;
        (ips(&ep) == (vec!["10.88.0.2".to_string()], vec![])).then_some(())
    })
    .await;
    eventually("the slice with web-b only, ready", || async {
        let list = slices.list(&by_service).await.ok()?;
        let eps = &list.items.first()?.endpoints;
        (list.items.len() == 1 && eps.len() == 1 && eps[0].addresses == ["10.88.0.2"] && eps[0].conditions.as_ref()?.ready == Some(true))
            .then_some(())
    })
    .await;

    // A hand edit of the Endpoints is undone.
    endpoints.patch("web", &PatchParams::default(), &Patch::Merge(&json!({"subsets": [{"addresses": [{"ip": "10.99.9.9"}], "ports": [{"port": 1}]}]}))).await.expect("edit");
    eventually("the controller restores the Endpoints", || async {
        let ep = endpoints.get_opt("web").await.ok()??;
        (ips(&ep) == (vec!["10.88.0.2".to_string()], vec![])).then_some(())
    })
    .await;

    // The Endpoints go with the Service.
    services.delete("web", &DeleteParams::default()).await.expect("delete service");
    eventually("the Endpoints are deleted", || async { endpoints.get_opt("web").await.ok()?.is_none().then_some(()) }).await;

    cluster.stop().await;
}
