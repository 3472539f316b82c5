//! One job sync against a real API server (in this process, on loopback)
//! with a pod cache the test feeds by hand, so a cache older than the server
//! is exact rather than a matter of timing.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::reflector::{self, store::Writer};
use kube::runtime::watcher::Event;
use kube::ResourceExt;
use serde_json::json;

use super::{pods, sync, JobOptions, State, CONTROLLER};
use crate::events::EventSink;
use crate::expectations::Expectations;

struct Server {
    client: kube::Client,
    _server: rkube_apiserver::testing::InProcessServer,
    _dir: tempfile::TempDir,
}

async fn server() -> Server {
    let dir = tempfile::tempdir().expect("temp dir");
    let server = rkube_apiserver::testing::InProcessServer::start(dir.path(), rkube_apiserver::ServerConfig::default()).await;
    let client = kube::Client::try_from(kube::Config::new(server.base.parse().expect("url"))).expect("client");
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "ns"}})).expect("namespace");
    Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &ns).await.expect("create namespace");
    Server { client, _server: server, _dir: dir }
}

fn state(client: &kube::Client, pods: reflector::Store<Pod>) -> State {
    State {
        client: client.clone(),
        pods,
        expectations: Expectations::default(),
        events: EventSink::new(client.clone(), CONTROLLER),
        options: JobOptions::default(),
        backoff: Mutex::new(HashMap::new()),
        counted: Mutex::new(Default::default()),
    }
}

/// Replaces the cache's content with `pods` and marks it ready.
fn fill(writer: &mut Writer<Pod>, pods: impl IntoIterator<Item = Pod>) {
    writer.apply_watcher_event(&Event::Init);
    for p in pods {
        writer.apply_watcher_event(&Event::InitApply(p));
    }
    writer.apply_watcher_event(&Event::InitDone);
}

/// A pod the success policy made the controller delete was counted as
/// failed (it is in `uncountedTerminatedPods.failed`), and something (the
/// kubelet) wrote its status after the cache's copy: the sync that moves it
/// into `failed` must still take its tracking finalizer off, or the pod
/// stays terminating for good and the Job never gets `Complete`.
#[tokio::test]
async fn a_counted_pod_changed_since_the_cache_saw_it_loses_its_finalizer_and_the_job_completes() {
    let s = server().await;
    let jobs: Api<Job> = Api::namespaced(s.client.clone(), "ns");
    let pod_api: Api<Pod> = Api::namespaced(s.client.clone(), "ns");
    let job: Job = serde_json::from_value(json!({
        "metadata": {"name": "leader"},
        "spec": {"completionMode": "Indexed", "completions": 3, "parallelism": 3,
                 "successPolicy": {"rules": [{"succeededIndexes": "0", "succeededCount": 1}]},
                 "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox"}]}}},
    }))
    .expect("job");
    let job = jobs.create(&PostParams::default(), &job).await.expect("create job");
    let owner = crate::pod_control::controller_ref(&job).expect("owner");
    let pod = pods::pod_for(&job, owner, Some(1), None).expect("pod");
    let pod = pod_api.create(&PostParams::default(), &pod).await.expect("create pod");
    let name = pod.name_any();
    pod_api.delete(&name, &DeleteParams::default()).await.expect("delete pod");
    // What the cache holds: the pod terminating, with the finalizer.
    let cached = pod_api.get(&name).await.expect("get pod");
    assert!(cached.metadata.deletion_timestamp.is_some() && pods::has_tracking_finalizer(&cached));
    // A later status write the cache has not seen yet.
    let late = json!({"status": {"phase": "Running"}});
    pod_api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&late)).await.expect("late status write");

    // The job as the step that counted the pod left it.
    let mut counted = jobs.get("leader").await.expect("job");
    counted.status = Some(
        serde_json::from_value(json!({
            "succeeded": 1, "failed": 0, "completedIndexes": "0", "active": 0,
            "uncountedTerminatedPods": {"succeeded": [], "failed": [cached.uid().expect("uid")]},
            "conditions": [{"type": "SuccessCriteriaMet", "status": "True", "reason": "SuccessPolicy",
                            "message": "Matched rules at index 0", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
        }))
        .expect("status"),
    );
    let counted = jobs.replace_status("leader", &PostParams::default(), &counted).await.expect("status");

    let (store, mut writer) = reflector::store::<Pod>();
    fill(&mut writer, [cached]);
    let st = Arc::new(state(&s.client, store));
    let _ = sync::reconcile(Arc::new(counted), st.clone()).await;

    // The cache catches up with the server; the next sync ends the job.
    let now_on_server = pod_api.get_opt(&name).await.expect("get pod");
    if let Some(p) = &now_on_server {
        assert!(!pods::has_tracking_finalizer(p) || !st.is_counted(&p.uid().unwrap_or_default()), "a pod the job counted kept its tracking finalizer: {:?}", p.finalizers());
    }
    fill(&mut writer, now_on_server);
    for _ in 0..3 {
        let fresh = jobs.get("leader").await.expect("job");
        let _ = sync::reconcile(Arc::new(fresh), st.clone()).await;
    }
    let status = jobs.get("leader").await.expect("job").status.expect("status");
    let complete = status.conditions.iter().flatten().find(|c| c.type_ == "Complete" && c.status == "True");
    assert_eq!(complete.and_then(|c| c.reason.as_deref()), Some("SuccessPolicy"), "{status:?}");
    assert_eq!((status.failed, status.terminating, status.active), (Some(1), Some(0), Some(0)));
    assert!(pod_api.get_opt(&name).await.expect("get pod").is_none(), "the pod is gone once its finalizer is off");
}
