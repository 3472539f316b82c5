//! The `DefaultStorageClass` admission plugin over HTTP: a claim created
//! without a storage class gets the default StorageClass's name; an explicit
//! class, or `""`, is kept; with no default class nothing changes.

use crate::common;

use common::TestServer;
use rkube_apiserver::admission::AdmissionConfig;
use rkube_apiserver::ServerConfig;
use serde_json::{json, Value};

const CLAIMS: &str = "/api/v1/namespaces/default/persistentvolumeclaims";
const CLASSES: &str = "/apis/storage.k8s.io/v1/storageclasses";

fn claim(name: &str, class: Option<&str>) -> Value {
    let mut c = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}});
    if let Some(class) = class {
        c["spec"]["storageClassName"] = json!(class);
    }
    c
}

#[tokio::test]
async fn claims_without_a_class_get_the_default_storage_class() {
    let config = ServerConfig { admission: AdmissionConfig { default_storage_class: true, ..Default::default() }, ..ServerConfig::default() };
    let srv = TestServer::embedded_with(config).await;
    let before = srv.post(CLAIMS, &claim("before", None)).await;
    assert_eq!(before.code, 201, "{}", before.text);
    assert_eq!(before.body["spec"].get("storageClassName"), None);
    let sc = json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "provisioner": "rancher.io/local-path",
        "metadata": {"name": "local-path", "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}}});
    assert_eq!(srv.post(CLASSES, &sc).await.code, 201);
    // The plugin reads classes from the watch cache, which follows the create closely.
    let mut defaulted = Value::Null;
    for i in 0..50 {
        let r = srv.post(CLAIMS, &claim(&format!("c{i}"), None)).await;
        assert_eq!(r.code, 201, "{}", r.text);
        defaulted = r.body["spec"]["storageClassName"].clone();
        if !defaulted.is_null() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(defaulted, "local-path");
    let empty = srv.post(CLAIMS, &claim("empty", Some(""))).await;
    assert_eq!(empty.body["spec"]["storageClassName"], "");
    let gold = srv.post(CLAIMS, &claim("gold", Some("gold"))).await;
    assert_eq!(gold.body["spec"]["storageClassName"], "gold");
}
