//! `TestEnv` itself: start and stop, parallel environments, CRDs installed
//! until Established, built-in controllers switched on.

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, ListParams, PostParams};
use kube::{CustomResource, ResourceExt};
use rkube_testenv::{Error, TestEnv};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, JsonSchema)]
#[kube(group = "testenv.rkube.dev", version = "v1", kind = "Gadget", namespaced, status = "GadgetStatus")]
pub struct GadgetSpec {
    size: i32,
}

#[derive(Deserialize, Serialize, Clone, Debug, Default, JsonSchema)]
pub struct GadgetStatus {
    ready: bool,
}

#[tokio::test]
async fn a_new_environment_is_a_bootstrapped_cluster_and_stops_when_asked() {
    let env = TestEnv::start().await.expect("start");
    let namespaces: Api<Namespace> = Api::all(env.client());
    let names: Vec<String> = namespaces.list(&ListParams::default()).await.expect("list").items.iter().map(|n| n.name_any()).collect();
    for ns in ["default", "kube-system", "kube-public"] {
        assert!(names.contains(&ns.to_string()), "{names:?}");
    }
    assert!(env.base_url().starts_with("http://127.0.0.1:"));
    let text = std::fs::read_to_string(env.kubeconfig_path()).expect("kubeconfig file");
    assert!(text.contains(env.base_url()), "{text}");
    let base = env.base_url().to_string();
    let client = env.client();
    env.stop().await;
    let after: Api<Namespace> = Api::all(client);
    assert!(after.list(&ListParams::default()).await.is_err(), "{base} still answers after stop");
}

#[tokio::test]
async fn parallel_environments_keep_their_objects_apart() {
    let (a, b) = tokio::join!(TestEnv::start(), TestEnv::start());
    let (a, b) = (a.expect("a"), b.expect("b"));
    assert_ne!(a.base_url(), b.base_url());
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "only-in-a"}})).expect("cm");
    Api::<ConfigMap>::namespaced(a.client(), "default").create(&PostParams::default(), &cm).await.expect("create");
    assert!(Api::<ConfigMap>::namespaced(b.client(), "default").get_opt("only-in-a").await.expect("get").is_none());
    a.stop().await;
    b.stop().await;
}

#[tokio::test]
async fn install_crd_returns_once_the_custom_resource_is_served() {
    let env = TestEnv::start().await.expect("start");
    let crd = env.install_crd::<Gadget>().await.expect("install");
    assert_eq!(crd.name_any(), "gadgets.testenv.rkube.dev");
    // Served at once: no retry needed.
    let api: Api<Gadget> = Api::namespaced(env.client(), "default");
    let created = api.create(&PostParams::default(), &Gadget::new("g1", GadgetSpec { size: 3 })).await.expect("create");
    assert_eq!(created.spec.size, 3);
    // A schema violation is refused by the server.
    let bad = json!({"apiVersion": "testenv.rkube.dev/v1", "kind": "Gadget", "metadata": {"name": "g2"}, "spec": {"size": "big"}});
    let dynamic: Api<kube::core::DynamicObject> =
        Api::namespaced_with(env.client(), "default", &kube::discovery::ApiResource::erase::<Gadget>(&()));
    let err = dynamic.create(&PostParams::default(), &serde_json::from_value(bad).expect("obj")).await.expect_err("422");
    assert!(matches!(&err, kube::Error::Api(s) if s.code == 422), "{err}");
    env.stop().await;
}

#[tokio::test]
async fn built_in_controllers_run_only_when_asked_for() {
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}},
    }))
    .expect("deployment");
    let with = TestEnv::builder().controllers(&["deployment"]).start().await.expect("start");
    Api::<Deployment>::namespaced(with.client(), "default").create(&PostParams::default(), &deployment).await.expect("create");
    let rss: Api<ReplicaSet> = Api::namespaced(with.client(), "default");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while rss.list(&ListParams::default()).await.expect("list").items.is_empty() {
        assert!(std::time::Instant::now() < deadline, "no ReplicaSet for the Deployment");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    with.stop().await;

    let without = TestEnv::start().await.expect("start");
    Api::<Deployment>::namespaced(without.client(), "default").create(&PostParams::default(), &deployment).await.expect("create");
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let rss: Api<ReplicaSet> = Api::namespaced(without.client(), "default");
    assert!(rss.list(&ListParams::default()).await.expect("list").items.is_empty());
    without.stop().await;

    let err = TestEnv::builder().controllers(&["frobnicator"]).start().await.expect_err("unknown controller");
    assert!(matches!(&err, Error::Controllers(m) if m.contains("frobnicator")), "{err}");
}
