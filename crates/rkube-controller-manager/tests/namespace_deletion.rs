//! The namespace controller against a real API server: a namespace being
//! deleted goes Terminating, refuses new content, reports upstream's
//! conditions, and disappears once its content is gone.

use crate::common;

use std::time::Duration;

use common::{configmap, eventually, Cluster};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::discovery::ApiResource;
use serde_json::json;

const WAIT: Duration = Duration::from_secs(30);

fn condition(ns: &Namespace, ty: &str) -> Option<(String, String, String)> {
    let c = ns.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == ty)?;
    Some((c.status.clone(), c.reason.clone().unwrap_or_default(), c.message.clone().unwrap_or_default()))
}

#[tokio::test]
async fn a_deleted_namespace_goes_terminating_then_away_with_its_content() {
    let c = Cluster::start("*").await;
    let nss: Api<Namespace> = Api::all(c.client.clone());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "doomed"}})).expect("ns");
    nss.create(&Default::default(), &ns).await.expect("create ns");
    let cms = c.configmaps("doomed");
    c.create(&cms, configmap("plain")).await;
    let mut held = configmap("held");
    held["metadata"]["finalizers"] = json!(["example.com/hold"]);
    c.create(&cms, held).await;
    let secrets = Api::<DynamicObject>::namespaced_with(
        c.client.clone(),
        "doomed",
        &ApiResource::erase::<k8s_openapi::api::core::v1::Secret>(&()),
    );
    c.create(&secrets, json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "stringData": {"a": "b"}}))
        .await;
    let deployments = Api::<DynamicObject>::namespaced_with(
        c.client.clone(),
        "doomed",
        &ApiResource::erase::<k8s_openapi::api::apps::v1::Deployment>(&()),
    );
    c.create(
        &deployments,
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}, "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}
        }}),
    )
    .await;

    let deleted = nss.delete("doomed", &DeleteParams::default()).await.expect("delete ns");
    let marked = deleted.left().expect("the namespace is answered, not a Status");
    assert_eq!(marked.status.and_then(|s| s.phase).as_deref(), Some("Terminating"));

    let err = cms.create(&Default::default(), &serde_json::from_value(configmap("late")).expect("cm")).await;
    match err {
        Err(kube::Error::Api(s)) => {
            assert_eq!((s.code, s.reason.as_str()), (403, "Forbidden"));
            assert_eq!(
                s.message,
                "configmaps \"late\" is forbidden: unable to create new content in namespace doomed because it is being terminated"
            );
        }
        other => panic!("create in a terminating namespace: {other:?}"),
    }

    // Everything but the held ConfigMap goes; the conditions say what holds it.
    let ns = eventually(WAIT, "only the held ConfigMap remains", || async {
        let ns = nss.get("doomed").await.expect("namespace stays while content is held");
        let fin = condition(&ns, "NamespaceFinalizersRemaining")?;
        (fin.0 == "True").then_some(ns)
    })
    .await;
    assert_eq!(
        condition(&ns, "NamespaceFinalizersRemaining"),
        Some((
            "True".into(),
            "SomeFinalizersRemain".into(),
            "Some content in the namespace has finalizers remaining: example.com/hold in 1 resource instances".into()
        ))
    );
    assert_eq!(
        condition(&ns, "NamespaceContentRemaining"),
        Some(("True".into(), "SomeResourcesRemain".into(), "Some resources are remaining: configmaps. has 1 resource instances".into()))
    );
    assert_eq!(
        condition(&ns, "NamespaceDeletionDiscoveryFailure"),
        Some(("False".into(), "ResourcesDiscovered".into(), "All resources successfully discovered".into()))
    );
    assert_eq!(ns.spec.and_then(|s| s.finalizers), Some(vec!["kubernetes".to_string()]));
    assert!(secrets.get_opt("s").await.expect("get").is_none());
    assert!(deployments.get_opt("web").await.expect("get").is_none());
    assert!(cms.get_opt("plain").await.expect("get").is_none());

    let release = json!({"metadata": {"finalizers": null}});
    cms.patch("held", &PatchParams::default(), &Patch::Merge(&release)).await.expect("release");
    eventually(WAIT, "namespace removed", || async { nss.get_opt("doomed").await.expect("get").is_none().then_some(()) })
        .await;
    c.stop().await;
}

#[tokio::test]
async fn without_the_namespace_controller_a_deleted_namespace_stays_terminating() {
    let c = Cluster::start("garbagecollector").await;
    let nss: Api<Namespace> = Api::all(c.client.clone());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "stuck"}})).expect("ns");
    nss.create(&Default::default(), &ns).await.expect("create ns");
    c.create(&c.configmaps("stuck"), configmap("x")).await;
    nss.delete("stuck", &DeleteParams::default()).await.expect("delete ns");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let ns = nss.get("stuck").await.expect("still there");
    assert_eq!(ns.status.and_then(|s| s.phase).as_deref(), Some("Terminating"));
    assert!(c.configmaps("stuck").get_opt("x").await.expect("get").is_some());
    c.stop().await;
}
