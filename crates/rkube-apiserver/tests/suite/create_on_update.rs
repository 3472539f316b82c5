//! PUT of a missing object: created (201) for resources whose upstream
//! strategy has `AllowCreateOnUpdate() == true` (leases, endpoints, events,
//! RBAC), 404 `NotFound` for the others (configmaps, pods, ...).

use serde_json::{json, Value};

use crate::common::{configmap, TestServer};

const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/default/leases";
const CMS: &str = "/api/v1/namespaces/default/configmaps";

fn lease(name: &str, holder: &str) -> Value {
    json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15},
    })
}

pub async fn put_of_missing_lease_creates_it_with_201(s: &TestServer) {
    let r = s.put(&format!("{LEASES}/leader?fieldManager=elector"), &lease("leader", "a")).await;
    assert_eq!(r.code, 201, "{}", r.text);
    assert_eq!(r.body["kind"], "Lease");
    assert_eq!(r.body["metadata"]["name"], "leader");
    assert_eq!(r.body["metadata"]["namespace"], "default");
    assert_eq!(r.body["metadata"]["uid"].as_str().map(str::len), Some(36));
    assert!(r.rv().parse::<i64>().unwrap_or(0) > 0, "{}", r.text);
    assert_eq!(r.body["metadata"]["managedFields"][0]["manager"], "elector");
    assert_eq!(r.body["spec"]["holderIdentity"], "a");
    let created = json!({"f:spec": {"f:holderIdentity": {}, "f:leaseDurationSeconds": {}}});
    assert_eq!(r.body["metadata"]["managedFields"][0]["fieldsV1"], created, "{}", r.text);
    let got = s.get(&format!("{LEASES}/leader")).await;
    assert_eq!(got.code, 200, "{}", got.text);
    assert_eq!(got.text, r.text, "read back as answered");
    // A second PUT is an ordinary update (200, same uid).
    let r2 = s.put(&format!("{LEASES}/leader"), &lease("leader", "b")).await;
    assert_eq!(r2.code, 200, "{}", r2.text);
    assert_eq!(r2.body["metadata"]["uid"], r.body["metadata"]["uid"]);
    assert_eq!(r2.body["spec"]["holderIdentity"], "b");
    // The name in the body must still match the URL.
    let r3 = s.put(&format!("{LEASES}/other"), &lease("leader", "c")).await;
    r3.assert_status(400, "BadRequest");
    assert_eq!(r3.message(), "the name of the object (leader) does not match the name on the URL (other)");
    // Endpoints allow it too.
    let ep = json!({"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "svc"}, "subsets": []});
    let r4 = s.put("/api/v1/namespaces/default/endpoints/svc", &ep).await;
    assert_eq!(r4.code, 201, "{}", r4.text);
}

pub async fn put_of_missing_configmap_is_404_not_found(s: &TestServer) {
    let r = s.put(&format!("{CMS}/ghost"), &configmap("ghost")).await;
    r.assert_status(404, "NotFound");
    assert_eq!(r.message(), "configmaps \"ghost\" not found");
    assert_eq!(r.body["details"], json!({"name": "ghost", "kind": "configmaps"}));
    assert_eq!(s.get(&format!("{CMS}/ghost")).await.code, 404, "nothing was created");
}
