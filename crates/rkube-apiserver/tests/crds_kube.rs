//! kube-rs against a real in-process server, the way operators use CRDs:
//! a `#[derive(CustomResource)]` type with a schemars schema, its CRD
//! applied server-side from `CustomResourceExt::crd()`, awaited with
//! `conditions::is_crd_established`, then CRUD, a status patch and the
//! scale subresource (modelled on kube-rs's own
//! `derived_resource_queryable_and_has_subresources`).

use crate::common;

use std::time::Duration;

use common::TestServer;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::wait::{await_condition, conditions};
use kube::{CustomResource, CustomResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

/// The spec of a `Foo` (group `kube.example.com`).
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, JsonSchema)]
#[kube(group = "kube.example.com", version = "v1", kind = "Foo", namespaced)]
#[kube(status = "FooStatus", shortname = "fo")]
#[kube(scale(spec_replicas_path = ".spec.replicas", status_replicas_path = ".status.replicas"))]
#[kube(printcolumn(name = "Replicas", type_ = "integer", json_path = ".spec.replicas"))]
pub struct FooSpec {
    name: String,
    info: Option<String>,
    replicas: i32,
}

/// The status of a `Foo`.
#[derive(Deserialize, Serialize, Clone, Debug, Default, JsonSchema)]
pub struct FooStatus {
    is_bad: bool,
    replicas: i32,
}

fn client(s: &TestServer) -> kube::Client {
    let config = kube::Config::new(s.base.parse().expect("server URL"));
    kube::Client::try_from(config).expect("kube client")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn derived_custom_resources_are_queryable_and_have_subresources() {
    let s = TestServer::embedded().await;
    let client = client(&s);
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = Foo::crd();
    let name = crd.metadata.name.clone().expect("CRD name");
    assert_eq!(name, "foos.kube.example.com");
    crds.patch(&name, &PatchParams::apply("crds-test"), &Patch::Apply(&crd)).await.expect("server-side apply of the CRD");
    let established = tokio::time::timeout(Duration::from_secs(10), await_condition(crds.clone(), &name, conditions::is_crd_established()))
        .await
        .expect("Established within 10 s")
        .expect("watching the CRD");
    assert!(established.is_some());

    let foos: Api<Foo> = Api::namespaced(client, "default");
    let foo = Foo::new("baz", FooSpec { name: "baz".into(), info: Some("old baz".into()), replicas: 1 });
    let created = foos.create(&PostParams::default(), &foo).await.expect("create");
    assert_eq!(created.spec.replicas, 1);
    assert_eq!(created.metadata.generation, Some(1));

    let listed = foos.list(&ListParams::default()).await.expect("list");
    assert_eq!(listed.items.len(), 1);
    assert_eq!(listed.items[0].spec.info.as_deref(), Some("old baz"));

    let mut got = foos.get("baz").await.expect("get");
    got.spec.info = Some("new baz".into());
    let replaced = foos.replace("baz", &PostParams::default(), &got).await.expect("replace");
    assert_eq!(replaced.spec.info.as_deref(), Some("new baz"));
    assert_eq!(replaced.metadata.generation, Some(2));

    // Status: a merge patch on /status.
    let status = json!({"status": FooStatus { is_bad: true, replicas: 1 }});
    let patched = foos.patch_status("baz", &PatchParams::default(), &Patch::Merge(&status)).await.expect("patch status");
    assert_eq!(patched.status.as_ref().map(|s| s.is_bad), Some(true));
    assert_eq!(patched.metadata.generation, Some(2), "status changes keep the generation");

    // Scale: read, then patch spec.replicas through it.
    let scale = foos.get_scale("baz").await.expect("get scale");
    assert_eq!(scale.spec.and_then(|s| s.replicas), Some(1));
    assert_eq!(scale.status.map(|s| s.replicas), Some(1));
    let patch = json!({"spec": {"replicas": 2}});
    let scaled = foos.patch_scale("baz", &PatchParams::default(), &Patch::Merge(&patch)).await.expect("patch scale");
    assert_eq!(scaled.spec.and_then(|s| s.replicas), Some(2));
    assert_eq!(foos.get("baz").await.expect("get").spec.replicas, 2);

    foos.delete("baz", &DeleteParams::default()).await.expect("delete");
    let gone = foos.get_opt("baz").await.expect("get after delete");
    assert!(gone.is_none());
}
