//! The example: a kube-runtime `Controller` for a custom resource, tested
//! against a `TestEnv`. `ConfigMapGenerator` objects get a ConfigMap with
//! their `spec.content` (owned by them), a status saying which, and a
//! finalizer that records the cleanup before the object goes.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::finalizer::{finalizer, Event};
use kube::runtime::watcher;
use kube::{CustomResource, Resource, ResourceExt};
use rkube_testenv::TestEnv;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, JsonSchema)]
#[kube(group = "example.rkube.dev", version = "v1", kind = "ConfigMapGenerator", namespaced, status = "GeneratorStatus")]
pub struct ConfigMapGeneratorSpec {
    content: String,
}

#[derive(Deserialize, Serialize, Clone, Debug, Default, JsonSchema)]
pub struct GeneratorStatus {
    config_map: String,
}

const FINALIZER: &str = "example.rkube.dev/cleanup";

#[derive(Debug, thiserror::Error)]
enum ReconcileError {
    #[error(transparent)]
    Kube(#[from] kube::Error),
    #[error("{0}")]
    Finalizer(String),
}

struct Ctx {
    client: kube::Client,
}

async fn reconcile(g: Arc<ConfigMapGenerator>, ctx: Arc<Ctx>) -> Result<Action, ReconcileError> {
    let ns = g.namespace().unwrap_or_default();
    let api: Api<ConfigMapGenerator> = Api::namespaced(ctx.client.clone(), &ns);
    finalizer(&api, FINALIZER, g, |event| async {
        match event {
            Event::Apply(g) => apply(&g, &ctx.client).await,
            Event::Cleanup(g) => {
                // Leave a trace of the cleanup the test can see.
                let cms: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &ns);
                let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": format!("{}-cleaned", g.name_any())}}))
                    .map_err(kube::Error::SerdeError)?;
                cms.create(&PostParams::default(), &cm).await?;
                Ok(Action::await_change())
            }
        }
    })
    .await
    .map_err(|e| ReconcileError::Finalizer(e.to_string()))
}

async fn apply(g: &ConfigMapGenerator, client: &kube::Client) -> Result<Action, kube::Error> {
    let ns = g.namespace().unwrap_or_default();
    let name = format!("{}-generated", g.name_any());
    let owner = g.controller_owner_ref(&()).into_iter().collect::<Vec<_>>();
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": name, "ownerReferences": owner},
                    "data": {"content": g.spec.content}});
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    cms.patch(&name, &PatchParams::apply("generator").force(), &Patch::Apply(&cm)).await?;
    let api: Api<ConfigMapGenerator> = Api::namespaced(client.clone(), &ns);
    let status = json!({"status": {"config_map": name}});
    api.patch_status(&g.name_any(), &PatchParams::default(), &Patch::Merge(&status)).await?;
    Ok(Action::requeue(Duration::from_secs(300)))
}

fn error_policy(_g: Arc<ConfigMapGenerator>, _e: &ReconcileError, _ctx: Arc<Ctx>) -> Action {
    Action::requeue(Duration::from_millis(200))
}

async fn eventually<T, F, Fut>(what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(std::time::Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_controller_reconciles_its_custom_resource_against_a_test_env() {
    let env = TestEnv::start().await.expect("start");
    env.install_crd::<ConfigMapGenerator>().await.expect("install CRD");
    let client = env.client();
    let generators: Api<ConfigMapGenerator> = Api::namespaced(client.clone(), "default");
    let controller = tokio::spawn(
        Controller::new(generators.clone(), watcher::Config::default())
            .owns(Api::<ConfigMap>::namespaced(client.clone(), "default"), watcher::Config::default())
            .run(reconcile, error_policy, Arc::new(Ctx { client: client.clone() }))
            .for_each(|r| async move {
                if let Err(e) = r {
                    eprintln!("reconcile: {e:?}");
                }
            }),
    );

    generators
        .create(&PostParams::default(), &ConfigMapGenerator::new("greeting", ConfigMapGeneratorSpec { content: "hello".into() }))
        .await
        .expect("create");
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let cm = eventually("the generated ConfigMap", || async { cms.get_opt("greeting-generated").await.ok().flatten() }).await;
    assert_eq!(cm.data.unwrap_or_default().get("content").map(String::as_str), Some("hello"));
    assert_eq!(cm.metadata.owner_references.unwrap_or_default()[0].kind, "ConfigMapGenerator");
    let g = eventually("the status", || async {
        generators.get("greeting").await.ok().filter(|g| g.status.as_ref().is_some_and(|s| s.config_map == "greeting-generated"))
    })
    .await;
    assert!(g.finalizers().iter().any(|f| f == FINALIZER), "{:?}", g.finalizers());

    // An update reaches the ConfigMap.
    let patch = json!({"spec": {"content": "bonjour"}});
    generators.patch("greeting", &PatchParams::default(), &Patch::Merge(&patch)).await.expect("update");
    eventually("the new content", || async {
        let cm = cms.get_opt("greeting-generated").await.ok().flatten()?;
        (cm.data?.get("content").map(String::as_str) == Some("bonjour")).then_some(())
    })
    .await;

    // Deletion runs the finalizer's cleanup, then the object goes.
    generators.delete("greeting", &DeleteParams::default()).await.expect("delete");
    eventually("the cleanup trace", || async { cms.get_opt("greeting-cleaned").await.ok().flatten() }).await;
    eventually("the generator gone", || async { generators.get_opt("greeting").await.ok().filter(|g| g.is_none()) }).await;
    controller.abort();
    env.stop().await;
}
