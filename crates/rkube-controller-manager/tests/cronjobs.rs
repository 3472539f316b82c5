//! The cronjob controller (on a clock the test moves), the
//! ttl-after-finished controller and the pod garbage collector against a
//! real rkube API server, with the stand-in kubelet running pods.

use crate::workload_support as common;

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use common::{eventually, Env};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::ResourceExt;
use rkube_controller_manager::controllers::cronjob;
use rkube_controller_manager::controllers::podgc::{self, PodGcOptions};
use serde_json::{json, Value};

/// A clock `offset` seconds ahead of the system's.
struct TestClock {
    offset: Arc<AtomicI64>,
}

impl TestClock {
    fn start(env: &mut Env) -> TestClock {
        let offset = Arc::new(AtomicI64::new(0));
        let o = offset.clone();
        env.spawn(move |ctx| cronjob::run(ctx, Arc::new(move || Utc::now() + chrono::Duration::seconds(o.load(Ordering::SeqCst)))));
        TestClock { offset }
    }

    fn set(&self, secs: i64) {
        self.offset.store(secs, Ordering::SeqCst);
    }
}

fn cron_job(name: &str, extra: Value, pod_labels: Value) -> CronJob {
    let mut v = json!({
        "metadata": {"name": name},
        "spec": {"schedule": "* * * * *", "timeZone": "UTC", "jobTemplate": {"spec": {"template": {
            "metadata": {"labels": pod_labels},
            "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox"}]}}}}},
    });
    if let (Some(dst), Some(src)) = (v["spec"].as_object_mut(), extra.as_object()) {
        dst.extend(src.clone());
    }
    serde_json::from_value(v).expect("cronjob")
}

/// Touches the CronJob so the controller syncs it now (after the clock moved).
async fn poke(api: &Api<CronJob>, name: &str, n: i64) {
    let patch = json!({"metadata": {"annotations": {"test/poke": n.to_string()}}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await.expect("poke");
}

async fn jobs(env: &Env, ns: &str) -> Vec<Job> {
    let mut items = Api::<Job>::namespaced(env.client.clone(), ns).list(&ListParams::default()).await.expect("jobs").items;
    items.retain(|j| j.metadata.deletion_timestamp.is_none());
    items.sort_by_key(|j| j.name_any());
    items
}

async fn events(env: &Env, ns: &str, reason: &str) -> Vec<String> {
    let api: Api<Event> = Api::namespaced(env.client.clone(), ns);
    let list = api.list(&ListParams::default()).await.expect("events");
    list.items.into_iter().filter(|e| e.reason.as_deref() == Some(reason)).filter_map(|e| e.note).collect()
}

fn is_complete(j: &Job) -> bool {
    j.status.iter().flat_map(|s| s.conditions.iter().flatten()).any(|c| c.type_ == "Complete" && c.status == "True")
}

#[tokio::test]
async fn an_every_minute_cronjob_starts_a_job_named_after_its_schedule_time_and_records_its_success() {
    let mut env = Env::start(&["job"], true).await;
    let clock = TestClock::start(&mut env);
    env.namespace("cj1").await;
    let api: Api<CronJob> = Api::namespaced(env.client.clone(), "cj1");
    api.create(&PostParams::default(), &cron_job("tick", json!({}), json!({"exit-code": "0"}))).await.expect("create");
    clock.set(61);
    poke(&api, "tick", 1).await;
    let job = eventually("a job", || async { jobs(&env, "cj1").await.into_iter().next() }).await;
    let stamp = job.annotations().get("batch.kubernetes.io/cronjob-scheduled-timestamp").cloned().expect("scheduled-timestamp annotation");
    let at: DateTime<Utc> = DateTime::parse_from_rfc3339(&stamp).expect("RFC 3339").with_timezone(&Utc);
    assert_eq!(at.timestamp() % 60, 0, "{stamp}");
    assert_eq!(job.name_any(), format!("tick-{}", at.timestamp() / 60));
    assert_eq!(job.owner_references().first().map(|r| (r.kind.as_str(), r.controller)), Some(("CronJob", Some(true))));
    let status = eventually("lastSuccessfulTime", || async { api.get("tick").await.ok()?.status.filter(|s| s.last_successful_time.is_some()) }).await;
    assert_eq!(status.last_schedule_time.map(|t| t.0.as_second()), Some(at.timestamp()));
    assert!(status.active.unwrap_or_default().is_empty(), "the finished job left the active list");
    // The job controller's SuccessfulCreate events name pods; the cronjob controller's name the job.
    let created: Vec<String> = events(&env, "cj1", "SuccessfulCreate").await.into_iter().filter(|n| n.starts_with("Created job")).collect();
    assert_eq!(created, vec![format!("Created job {}", job.name_any())]);
    let saw = eventually("SawCompletedJob", || async { Some(events(&env, "cj1", "SawCompletedJob").await).filter(|e| !e.is_empty()) }).await;
    assert_eq!(saw, vec![format!("Saw completed job: {}, condition: Complete", job.name_any())]);
    env.stop().await;
}

#[tokio::test]
async fn forbid_skips_a_run_while_one_is_active_and_replace_deletes_it_for_the_new_one() {
    let mut env = Env::start(&["job"], true).await;
    let clock = TestClock::start(&mut env);
    env.namespace("cj2").await;
    let api: Api<CronJob> = Api::namespaced(env.client.clone(), "cj2");
    // Pods run forever (no exit-code label): the first job stays active.
    api.create(&PostParams::default(), &cron_job("busy", json!({"concurrencyPolicy": "Forbid"}), json!({"app": "busy"}))).await.expect("create");
    clock.set(61);
    poke(&api, "busy", 1).await;
    let first = eventually("the first job active", || async {
        let s = api.get("busy").await.ok()?.status?;
        s.active?.first()?.name.clone()
    })
    .await;
    clock.set(121);
    poke(&api, "busy", 2).await;
    let skipped = eventually("JobAlreadyActive", || async { Some(events(&env, "cj2", "JobAlreadyActive").await).filter(|e| !e.is_empty()) }).await;
    assert_eq!(skipped[0], "Not starting job because prior execution is running and concurrency policy is Forbid");
    assert_eq!(jobs(&env, "cj2").await.iter().map(|j| j.name_any()).collect::<Vec<_>>(), vec![first.clone()]);

    // Move the clock first: the policy change itself triggers a sync, which
    // starts the most recent schedule time only.
    clock.set(181);
    api.patch("busy", &PatchParams::default(), &Patch::Merge(json!({"spec": {"concurrencyPolicy": "Replace"}}))).await.expect("replace");
    let second = eventually("a second job replacing the first", || async {
        let names: Vec<String> = jobs(&env, "cj2").await.iter().map(|j| j.name_any()).collect();
        (names.len() == 1 && names[0] != first).then(|| names[0].clone())
    })
    .await;
    let deleted = events(&env, "cj2", "SuccessfulDelete").await;
    assert_eq!(deleted, vec![format!("Deleted job {first}")]);
    eventually("the active list names the new job", || async {
        let a = api.get("busy").await.ok()?.status?.active?;
        (a.len() == 1 && a[0].name.as_deref() == Some(second.as_str())).then_some(())
    })
    .await;
    env.stop().await;
}

#[tokio::test]
async fn finished_jobs_beyond_the_successful_history_limit_are_deleted_oldest_first() {
    let mut env = Env::start(&["job"], true).await;
    let clock = TestClock::start(&mut env);
    env.namespace("cj3").await;
    let api: Api<CronJob> = Api::namespaced(env.client.clone(), "cj3");
    api.create(&PostParams::default(), &cron_job("hist", json!({"successfulJobsHistoryLimit": 1}), json!({"exit-code": "0"}))).await.expect("create");
    let mut names = Vec::new();
    for (i, offset) in [61, 121, 181].into_iter().enumerate() {
        clock.set(offset);
        poke(&api, "hist", offset).await;
        let done = eventually("a new completed job", || async {
            let js = jobs(&env, "cj3").await;
            js.into_iter().find(|j| is_complete(j) && !names.contains(&j.name_any())).map(|j| j.name_any())
        })
        .await;
        names.push(done);
        assert_eq!(names.len(), i + 1);
    }
    poke(&api, "hist", 1000).await;
    let left = eventually("one job kept", || async {
        let js: Vec<String> = jobs(&env, "cj3").await.iter().map(|j| j.name_any()).collect();
        (js.len() == 1).then_some(js)
    })
    .await;
    assert_eq!(left, vec![names[2].clone()], "the newest is kept");
    // The event follows the deletion: wait for both.
    let deleted = eventually("two SuccessfulDelete events", || async { Some(events(&env, "cj3", "SuccessfulDelete").await).filter(|e| e.len() >= 2) }).await;
    let mut want = vec![format!("Deleted job {}", names[0]), format!("Deleted job {}", names[1])];
    let mut got = deleted.clone();
    want.sort();
    got.sort();
    assert_eq!(got, want);
    env.stop().await;
}

#[tokio::test]
async fn a_finished_job_is_deleted_ttl_seconds_after_it_finished() {
    let env = Env::start(&["job", "ttl-after-finished", "garbagecollector"], true).await;
    env.namespace("ttl").await;
    let api: Api<Job> = Api::namespaced(env.client.clone(), "ttl");
    let job: Job = serde_json::from_value(json!({
        "metadata": {"name": "short"},
        "spec": {"ttlSecondsAfterFinished": 1, "template": {"metadata": {"labels": {"exit-code": "0"}},
                 "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox"}]}}},
    }))
    .expect("job");
    api.create(&PostParams::default(), &job).await.expect("create");
    eventually("the job complete", || async { api.get("short").await.ok().filter(is_complete) }).await;
    eventually("the job deleted", || async { api.get_opt("short").await.ok().and_then(|j| j.is_none().then_some(())) }).await;
    let pods = Api::<Pod>::namespaced(env.client.clone(), "ttl");
    eventually("its pods deleted with it", || async { pods.list(&ListParams::default()).await.ok().filter(|l| l.items.is_empty()) }).await;
    env.stop().await;
}

#[tokio::test]
async fn pods_of_a_deleted_node_are_force_deleted_terminating_ones_included() {
    let mut env = Env::start(&[], false).await;
    env.spawn(|ctx| podgc::run(ctx, PodGcOptions { check_period: Duration::from_millis(200), quarantine: Duration::from_millis(500) }));
    env.namespace("gc").await;
    let nodes: Api<Node> = Api::all(env.client.clone());
    nodes.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "n1"}})).expect("node")).await.expect("node");
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), "gc");
    for name in ["running", "terminating"] {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "busybox"}]},
        }))
        .expect("pod");
        pods.create(&PostParams::default(), &pod).await.expect("pod");
    }
    pods.delete("terminating", &DeleteParams::default()).await.expect("delete");
    let t = pods.get("terminating").await.expect("a bound pod terminates gracefully");
    assert!(t.metadata.deletion_timestamp.is_some());
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(pods.list(&ListParams::default()).await.expect("pods").items.len(), 2, "pods of a live node stay");
    nodes.delete("n1", &DeleteParams::default()).await.expect("delete node");
    eventually("both pods gone", || async { pods.list(&ListParams::default()).await.ok().filter(|l| l.items.is_empty()) }).await;
    env.stop().await;
}

#[tokio::test]
async fn a_running_job_the_cronjob_owns_but_did_not_start_is_reported_unexpected_and_not_adopted() {
    let mut env = Env::start(&[], false).await;
    let _clock = TestClock::start(&mut env);
    env.namespace("cj4").await;
    let api: Api<CronJob> = Api::namespaced(env.client.clone(), "cj4");
    let cj = api.create(&PostParams::default(), &cron_job("rare", json!({"schedule": "0 0 1 1 *"}), json!({}))).await.expect("create");
    // What `kubectl create job manual --from=cronjob/rare` sends.
    let manual: Job = serde_json::from_value(json!({
        "metadata": {"name": "manual", "annotations": {"cronjob.kubernetes.io/instantiate": "manual"},
                     "ownerReferences": [{"apiVersion": "batch/v1", "kind": "CronJob", "name": "rare", "uid": cj.uid(), "controller": true}]},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox"}]}}},
    }))
    .expect("job");
    Api::<Job>::namespaced(env.client.clone(), "cj4").create(&PostParams::default(), &manual).await.expect("job");
    let warned = eventually("UnexpectedJob", || async { Some(events(&env, "cj4", "UnexpectedJob").await).filter(|e| !e.is_empty()) }).await;
    assert_eq!(warned[0], "Saw a job that the controller did not create or forgot: manual");
    let status = api.get("rare").await.expect("cronjob").status.unwrap_or_default();
    assert!(status.active.unwrap_or_default().is_empty(), "not adopted into status.active");
    env.stop().await;
}
