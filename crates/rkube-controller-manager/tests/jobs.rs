//! The job controller against a real rkube API server, with the stand-in
//! kubelet finishing pods labelled `exit-code`: what a client sees of the
//! Job's status, conditions, pods and events.

#[path = "workload_support/mod.rs"]
mod common;

use std::time::Duration;

use common::{eventually, Env};
use k8s_openapi::api::batch::v1::{Job, JobCondition};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams, PostParams};
use kube::ResourceExt;
use rkube_controller_manager::controllers::job::{self, JobOptions};
use serde_json::{json, Value};

fn job(name: &str, exit_code: i32, spec: Value) -> Job {
    let mut v = json!({
        "metadata": {"name": name},
        "spec": {"template": {"metadata": {"labels": {"exit-code": exit_code.to_string()}},
                              "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox", "command": ["sh", "-c", "exit 0"]}]}}},
    });
    if let (Some(dst), Some(src)) = (v["spec"].as_object_mut(), spec.as_object()) {
        dst.extend(src.clone());
    }
    serde_json::from_value(v).expect("job")
}

/// A job controller with a 100ms backoff, so failing pods are replaced at once.
async fn fast_env() -> Env {
    let mut env = Env::start(&[], true).await;
    env.spawn(|ctx| job::run(ctx, JobOptions { backoff_base: Duration::from_millis(100), backoff_max: Duration::from_millis(400) }));
    env
}

async fn terminal_condition(api: &Api<Job>, name: &str) -> JobCondition {
    eventually("a Complete or Failed condition", || async {
        let j = api.get(name).await.ok()?;
        j.status?.conditions?.into_iter().find(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True")
    })
    .await
}

async fn events(env: &Env, ns: &str, reason: &str) -> Vec<String> {
    let api: Api<Event> = Api::namespaced(env.client.clone(), ns);
    let list = api.list(&ListParams::default()).await.expect("events");
    list.items.into_iter().filter(|e| e.reason.as_deref() == Some(reason)).filter_map(|e| e.note).collect()
}

fn condition_types(j: &Job) -> Vec<String> {
    j.status.iter().flat_map(|s| s.conditions.iter().flatten()).filter(|c| c.status == "True").map(|c| c.type_.clone()).collect()
}

#[tokio::test]
async fn a_job_with_three_completions_and_parallelism_two_completes_never_running_more_than_two() {
    let env = Env::start(&["job"], true).await;
    env.namespace("j1").await;
    let api: Api<Job> = Api::namespaced(env.client.clone(), "j1");
    api.create(&PostParams::default(), &job("work", 0, json!({"completions": 3, "parallelism": 2}))).await.expect("create");
    let cond = terminal_condition(&api, "work").await;
    assert_eq!((cond.type_.as_str(), cond.reason.as_deref(), cond.message.as_deref()), ("Complete", Some("CompletionsReached"), Some("Reached expected number of succeeded pods")));
    let j = api.get("work").await.expect("job");
    let s = j.status.clone().expect("status");
    assert_eq!((s.succeeded, s.failed, s.active, s.terminating), (Some(3), Some(0), Some(0), Some(0)));
    assert!(s.start_time.is_some() && s.completion_time.is_some());
    assert_eq!(condition_types(&j), vec!["SuccessCriteriaMet", "Complete"]);
    let uncounted = s.uncounted_terminated_pods.unwrap_or_default();
    assert!(uncounted.succeeded.unwrap_or_default().is_empty() && uncounted.failed.unwrap_or_default().is_empty());
    assert!(env.seen.lock().expect("seen").max_active <= 2, "never more than parallelism pods active");

    let pods = Api::<Pod>::namespaced(env.client.clone(), "j1").list(&ListParams::default()).await.expect("pods").items;
    assert_eq!(pods.len(), 3);
    let uid = j.uid().unwrap_or_default();
    for p in &pods {
        assert!(p.finalizers().is_empty(), "tracking finalizer removed once counted: {:?}", p.finalizers());
        let labels = p.labels();
        assert_eq!(labels.get("batch.kubernetes.io/controller-uid"), Some(&uid));
        assert_eq!(labels.get("batch.kubernetes.io/job-name").map(String::as_str), Some("work"));
        assert_eq!(labels.get("job-name").map(String::as_str), Some("work"));
        let owner = p.owner_references().first().cloned().expect("owner");
        assert_eq!((owner.kind.as_str(), owner.name.as_str(), owner.controller), ("Job", "work", Some(true)));
    }
    let created = eventually("3 SuccessfulCreate events", || async { Some(events(&env, "j1", "SuccessfulCreate").await).filter(|e| e.len() == 3) }).await;
    assert!(created.iter().all(|n| n.starts_with("Created pod: work-")), "{created:?}");
    let completed = eventually("a Completed event", || async { Some(events(&env, "j1", "Completed").await).filter(|e| !e.is_empty()) }).await;
    assert_eq!(completed, vec!["Job completed".to_string()]);
    env.stop().await;
}

#[tokio::test]
async fn a_failing_job_fails_with_backoff_limit_exceeded_after_backoff_limit_plus_one_failures() {
    let env = fast_env().await;
    env.namespace("j2").await;
    let api: Api<Job> = Api::namespaced(env.client.clone(), "j2");
    api.create(&PostParams::default(), &job("boom", 1, json!({"backoffLimit": 1}))).await.expect("create");
    let cond = terminal_condition(&api, "boom").await;
    assert_eq!((cond.type_.as_str(), cond.reason.as_deref(), cond.message.as_deref()), ("Failed", Some("BackoffLimitExceeded"), Some("Job has reached the specified backoff limit")));
    let j = api.get("boom").await.expect("job");
    let s = j.status.clone().expect("status");
    assert_eq!((s.failed, s.succeeded, s.active), (Some(2), Some(0), Some(0)));
    assert!(s.completion_time.is_none(), "a failed job has no completionTime");
    assert_eq!(condition_types(&j), vec!["FailureTarget", "Failed"]);
    let warned = eventually("a BackoffLimitExceeded event", || async { Some(events(&env, "j2", "BackoffLimitExceeded").await).filter(|e| !e.is_empty()) }).await;
    assert_eq!(warned, vec!["Job has reached the specified backoff limit".to_string()]);
    env.stop().await;
}

#[tokio::test]
async fn an_indexed_job_runs_one_pod_per_index_and_reports_completed_indexes() {
    let env = Env::start(&["job"], true).await;
    env.namespace("j3").await;
    let api: Api<Job> = Api::namespaced(env.client.clone(), "j3");
    api.create(&PostParams::default(), &job("idx", 0, json!({"completions": 3, "parallelism": 3, "completionMode": "Indexed"}))).await.expect("create");
    let cond = terminal_condition(&api, "idx").await;
    assert_eq!(cond.type_, "Complete");
    let s = api.get("idx").await.expect("job").status.expect("status");
    assert_eq!((s.completed_indexes.as_deref(), s.succeeded), (Some("0-2"), Some(3)));
    let pods = Api::<Pod>::namespaced(env.client.clone(), "j3").list(&ListParams::default()).await.expect("pods").items;
    let mut seen: Vec<(String, String, String)> = pods
        .iter()
        .map(|p| {
            let index = p.annotations().get("batch.kubernetes.io/job-completion-index").cloned().unwrap_or_default();
            assert_eq!(p.labels().get("batch.kubernetes.io/job-completion-index"), Some(&index));
            let host = p.spec.as_ref().and_then(|s| s.hostname.clone()).unwrap_or_default();
            assert!(p.name_any().starts_with(&format!("idx-{index}-")), "{}", p.name_any());
            (index, host, p.spec.as_ref().map(|s| s.containers[0].env.clone().unwrap_or_default()[0].name.clone()).unwrap_or_default())
        })
        .collect();
    seen.sort();
    let want: Vec<(String, String, String)> = (0..3).map(|i| (i.to_string(), format!("idx-{i}"), "JOB_COMPLETION_INDEX".to_string())).collect();
    assert_eq!(seen, want);
    env.stop().await;
}

#[tokio::test]
async fn a_fail_job_pod_failure_policy_rule_fails_the_job_on_its_exit_code() {
    let env = fast_env().await;
    env.namespace("j4").await;
    let api: Api<Job> = Api::namespaced(env.client.clone(), "j4");
    let policy = json!({"rules": [{"action": "FailJob", "onExitCodes": {"containerName": "main", "operator": "In", "values": [42]}}]});
    api.create(&PostParams::default(), &job("policy", 42, json!({"backoffLimit": 6, "podFailurePolicy": policy}))).await.expect("create");
    let cond = terminal_condition(&api, "policy").await;
    assert_eq!((cond.type_.as_str(), cond.reason.as_deref()), ("Failed", Some("PodFailurePolicy")));
    let pods = Api::<Pod>::namespaced(env.client.clone(), "j4").list(&ListParams::default()).await.expect("pods").items;
    assert_eq!(pods.len(), 1, "no retry after a FailJob match");
    let want = format!("Container main for pod j4/{} failed with exit code 42 matching FailJob rule at index 0", pods[0].name_any());
    assert_eq!(cond.message.as_deref(), Some(want.as_str()));
    assert_eq!(api.get("policy").await.expect("job").status.and_then(|s| s.failed), Some(1));
    env.stop().await;
}

#[tokio::test]
async fn a_suspended_job_runs_no_pods_until_resumed() {
    let env = fast_env().await;
    env.namespace("j5").await;
    let api: Api<Job> = Api::namespaced(env.client.clone(), "j5");
    api.create(&PostParams::default(), &job("held", 0, json!({"suspend": true, "completions": 2}))).await.expect("create");
    let cond = eventually("a Suspended condition", || async {
        api.get("held").await.ok()?.status?.conditions?.into_iter().find(|c| c.type_ == "Suspended")
    })
    .await;
    assert_eq!((cond.status.as_str(), cond.reason.as_deref(), cond.message.as_deref()), ("True", Some("JobSuspended"), Some("Job suspended")));
    tokio::time::sleep(Duration::from_millis(500)).await;
    let pods = Api::<Pod>::namespaced(env.client.clone(), "j5").list(&ListParams::default()).await.expect("pods").items;
    assert!(pods.is_empty(), "a suspended job creates no pods");
    let patch = json!({"spec": {"suspend": false}});
    api.patch("held", &Default::default(), &kube::api::Patch::Merge(&patch)).await.expect("resume");
    assert_eq!(terminal_condition(&api, "held").await.type_, "Complete");
    let j = api.get("held").await.expect("job");
    let resumed = j.status.and_then(|s| s.conditions).unwrap_or_default().into_iter().find(|c| c.type_ == "Suspended").expect("suspended condition");
    assert_eq!((resumed.status.as_str(), resumed.reason.as_deref()), ("False", Some("JobResumed")));
    env.stop().await;
}

#[tokio::test]
async fn a_job_running_past_active_deadline_seconds_fails_with_deadline_exceeded_and_its_pods_go() {
    let env = Env::start(&["job"], true).await;
    env.namespace("j6").await;
    let api: Api<Job> = Api::namespaced(env.client.clone(), "j6");
    // Pods without `exit-code` run until deleted.
    let mut slow = job("slow", 0, json!({"activeDeadlineSeconds": 1, "parallelism": 2, "completions": 2}));
    if let Some(meta) = slow.spec.as_mut().and_then(|s| s.template.metadata.as_mut()) {
        meta.labels = Some(common::labels(&[("app", "slow")]));
    }
    api.create(&PostParams::default(), &slow).await.expect("create");
    let cond = terminal_condition(&api, "slow").await;
    assert_eq!((cond.type_.as_str(), cond.reason.as_deref(), cond.message.as_deref()), ("Failed", Some("DeadlineExceeded"), Some("Job was active longer than specified deadline")));
    let s = api.get("slow").await.expect("job").status.expect("status");
    assert_eq!((s.active, s.failed, s.succeeded), (Some(0), Some(2), Some(0)), "deleted running pods count as failed");
    eventually("the job's pods gone", || async { Some(env.live_pods("j6", "slow").await).filter(|p| p.is_empty()) }).await;
    let warned = eventually("a DeadlineExceeded event", || async { Some(events(&env, "j6", "DeadlineExceeded").await).filter(|e| !e.is_empty()) }).await;
    assert_eq!(warned, vec!["Job was active longer than specified deadline".to_string()]);
    let deleted = events(&env, "j6", "SuccessfulDelete").await;
    assert_eq!(deleted.len(), 2, "{deleted:?}");
    env.stop().await;
}
