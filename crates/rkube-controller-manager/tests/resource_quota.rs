//! The resourcequota controller against a real rkube API server (with the
//! `ResourceQuota` admission plugin on): `status.hard` follows `spec.hard`,
//! `status.used` follows creates, deletes and pod phases, sums cpu
//! requests, and scoped quotas count only the pods their scopes select.

use crate::workload_support as common;

use common::{eventually, Env};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, ResourceQuota, Service};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{json, Value};

async fn start() -> Env {
    let config = rkube_apiserver::ServerConfig {
        admission: rkube_apiserver::admission::AdmissionConfig { resource_quota: true, ..Default::default() },
        ..rkube_apiserver::ServerConfig::default()
    };
    Env::start_with(&["resourcequota-controller"], false, config).await
}

async fn create<K>(env: &Env, ns: &str, obj: Value) -> kube::Result<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope> + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
    K::DynamicType: Default,
{
    let api: Api<K> = Api::namespaced(env.client.clone(), ns);
    api.create(&PostParams::default(), &serde_json::from_value(obj).expect("object")).await
}

fn pod(name: &str, cpu: Option<&str>, spec_extra: Value) -> Value {
    let mut p = json!({"metadata": {"name": name}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}});
    if let Some(cpu) = cpu {
        p["spec"]["containers"][0]["resources"] = json!({"requests": {"cpu": cpu}});
    }
    if let (Some(spec), Some(extra)) = (p["spec"].as_object_mut(), spec_extra.as_object()) {
        spec.extend(extra.clone());
    }
    p
}

async fn quota(env: &Env, ns: &str, name: &str, spec: Value) {
    create::<ResourceQuota>(env, ns, json!({"metadata": {"name": name}, "spec": spec})).await.expect("quota");
}

/// Waits until quota `name`'s `status.used` is `want`.
async fn used_becomes(env: &Env, ns: &str, name: &str, want: Value) {
    let api: Api<ResourceQuota> = Api::namespaced(env.client.clone(), ns);
    let mut last = Value::Null;
    let found = tokio::time::timeout(common::LIMIT, async {
        loop {
            if let Ok(q) = api.get(name).await {
                let v = serde_json::to_value(&q).unwrap_or_default();
                last = v["status"]["used"].clone();
                if last == want && v["status"]["hard"] == v["spec"]["hard"] {
                    return;
                }
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    })
    .await;
    assert!(found.is_ok(), "quota {name}: used {last} never became {want}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_used_follows_pods_configmaps_and_services() {
    let env = start().await;
    env.namespace("rq").await;
    let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), "rq");
    // The namespace may already hold a published CA ConfigMap.
    let base = eventually("configmaps listed", || async { cms.list(&Default::default()).await.ok() }).await.items.len() as i64;
    let hard = json!({"pods": "5", "requests.cpu": "2", "configmaps": "9", "count/configmaps": "9", "services": "3", "services.nodeports": "4"});
    quota(&env, "rq", "q", json!({"hard": hard})).await;
    used_becomes(
        &env,
        "rq",
        "q",
        json!({"pods": "0", "requests.cpu": "0", "configmaps": base.to_string(), "count/configmaps": base.to_string(), "services": "0", "services.nodeports": "0"}),
    )
    .await;

    create::<Pod>(&env, "rq", pod("a", Some("500m"), json!({}))).await.expect("pod a");
    create::<Pod>(&env, "rq", pod("b", Some("250m"), json!({}))).await.expect("pod b");
    create::<ConfigMap>(&env, "rq", json!({"metadata": {"name": "cm"}})).await.expect("configmap");
    let svc = json!({"metadata": {"name": "web"}, "spec": {"type": "NodePort", "ports": [{"name": "a", "port": 80}, {"name": "b", "port": 81}]}});
    create::<Service>(&env, "rq", svc).await.expect("service");
    let n = (base + 1).to_string();
    used_becomes(
        &env,
        "rq",
        "q",
        json!({"pods": "2", "requests.cpu": "750m", "configmaps": n, "count/configmaps": n, "services": "1", "services.nodeports": "2"}),
    )
    .await;

    // A deleted pod and configmap, and a pod that failed, no longer count.
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), "rq");
    pods.delete("a", &DeleteParams { grace_period_seconds: Some(0), ..Default::default() }).await.expect("delete a");
    cms.delete("cm", &DeleteParams::default()).await.expect("delete cm");
    let b = base.to_string();
    used_becomes(
        &env,
        "rq",
        "q",
        json!({"pods": "1", "requests.cpu": "250m", "configmaps": b, "count/configmaps": b, "services": "1", "services.nodeports": "2"}),
    )
    .await;
    pods.patch_status("b", &PatchParams::default(), &Patch::Merge(json!({"status": {"phase": "Failed"}}))).await.expect("fail b");
    used_becomes(
        &env,
        "rq",
        "q",
        json!({"pods": "0", "requests.cpu": "0", "configmaps": b, "count/configmaps": b, "services": "1", "services.nodeports": "2"}),
    )
    .await;
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scoped_quotas_count_only_the_pods_their_scopes_select() {
    let env = start().await;
    env.namespace("scoped").await;
    quota(&env, "scoped", "terminating", json!({"hard": {"pods": "5"}, "scopes": ["Terminating"]})).await;
    quota(&env, "scoped", "best-effort", json!({"hard": {"pods": "5"}, "scopes": ["BestEffort"]})).await;
    let high = json!({"matchExpressions": [{"scopeName": "PriorityClass", "operator": "In", "values": ["high"]}]});
    quota(&env, "scoped", "high", json!({"hard": {"pods": "5", "requests.cpu": "4"}, "scopeSelector": high})).await;
    for name in ["terminating", "best-effort"] {
        used_becomes(&env, "scoped", name, json!({"pods": "0"})).await;
    }
    used_becomes(&env, "scoped", "high", json!({"pods": "0", "requests.cpu": "0"})).await;

    create::<Pod>(&env, "scoped", pod("batch", Some("1"), json!({"activeDeadlineSeconds": 60}))).await.expect("batch");
    create::<Pod>(&env, "scoped", pod("plain", None, json!({}))).await.expect("plain");
    create::<Pod>(&env, "scoped", pod("important", Some("1500m"), json!({"priorityClassName": "high"}))).await.expect("important");
    used_becomes(&env, "scoped", "terminating", json!({"pods": "1"})).await;
    used_becomes(&env, "scoped", "best-effort", json!({"pods": "1"})).await;
    used_becomes(&env, "scoped", "high", json!({"pods": "1", "requests.cpu": "1500m"})).await;
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn once_the_controller_computed_a_quota_admission_refuses_the_pod_beyond_it() {
    let env = start().await;
    env.namespace("one").await;
    quota(&env, "one", "q", json!({"hard": {"pods": "1"}})).await;
    used_becomes(&env, "one", "q", json!({"pods": "0"})).await;
    create::<Pod>(&env, "one", pod("first", None, json!({}))).await.expect("first pod");
    let err = create::<Pod>(&env, "one", pod("second", None, json!({}))).await.expect_err("second pod refused");
    match err {
        kube::Error::Api(s) => {
            assert_eq!(s.code, 403);
            assert_eq!(s.reason, "Forbidden");
            assert_eq!(s.message, "pods \"second\" is forbidden: exceeded quota: q, requested: pods=1, used: pods=1, limited: pods=1");
        }
        other => panic!("unexpected error {other:?}"),
    }
    used_becomes(&env, "one", "q", json!({"pods": "1"})).await;
    env.stop().await;
}
