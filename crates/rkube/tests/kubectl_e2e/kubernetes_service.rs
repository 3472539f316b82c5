//! The `default/kubernetes` Service, Endpoints and EndpointSlice every
//! cluster has: kubectl sees them pointing at the API server it talks to.

use serde_json::json;

use crate::common::{str_at, Cluster, Kubectl};

/// `kubectl get svc,endpoints,endpointslices` in `default` shows the
/// `kubernetes` Service (10.96.0.1:443 → the serving port) and its endpoints
/// (127.0.0.1:<port>), like on a real cluster.
pub fn default_kubernetes_service_points_at_the_apiserver(c: &mut Cluster, k: &Kubectl) {
    let port = u64::from(c.port);
    let svc = k.json(&["get", "service", "kubernetes", "-n", "default"]);
    assert_eq!(str_at(&svc, "/spec/clusterIP"), "10.96.0.1");
    assert_eq!(
        svc["spec"]["ports"],
        json!([{"name": "https", "port": 443, "protocol": "TCP", "targetPort": port}])
    );
    assert_eq!(str_at(&svc, "/metadata/labels/provider"), "kubernetes");
    assert_eq!(str_at(&svc, "/metadata/labels/component"), "apiserver");
    let eps = k.json(&["get", "endpoints", "kubernetes", "-n", "default"]);
    assert_eq!(
        eps["subsets"],
        json!([{"addresses": [{"ip": "127.0.0.1"}], "ports": [{"name": "https", "port": port, "protocol": "TCP"}]}])
    );
    let slices = k.json(&[
        "get",
        "endpointslices",
        "-n",
        "default",
        "-l",
        "kubernetes.io/service-name=kubernetes",
    ]);
    let items = slices["items"].as_array().cloned().unwrap_or_default();
    assert_eq!(items.len(), 1, "{slices:#}");
    assert_eq!(items[0]["endpoints"][0]["addresses"], json!(["127.0.0.1"]));
    assert_eq!(items[0]["ports"][0]["port"], json!(port));
}
