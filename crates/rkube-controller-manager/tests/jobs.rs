//! The job controller against a real rkube API server, with the stand-in
//! kubelet finishing pods labelled `exit-code`: what a client sees of the
//! Job's status, conditions, pods and events.

use crate::workload_support as common;

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

/// A Job whose pods run until deleted (no `exit-code` label for the stand-in kubelet).
fn long_running_job(name: &str, spec: Value) -> Job {
    let mut v = json!({
        "metadata": {"name": name},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox", "command": ["sleep", "3600"]}]}}},
    });
    if let (Some(dst), Some(src)) = (v["spec"].as_object_mut(), spec.as_object()) {
        dst.extend(src.clone());
    }
    serde_json::from_value(v).expect("job")
}

/// The Job's pods: `(terminating, not terminating)` names.
async fn pods_of(env: &Env, ns: &str) -> (Vec<String>, Vec<String>) {
    let pods = Api::<Pod>::namespaced(env.client.clone(), ns).list(&ListParams::default()).await.expect("pods").items;
    let (terminating, live): (Vec<Pod>, Vec<Pod>) = pods.into_iter().partition(|p| p.metadata.deletion_timestamp.is_some());
    (terminating.iter().map(|p| p.name_any()).collect(), live.iter().map(|p| p.name_any()).collect())
}

/// `podReplacementPolicy: Failed` (KEP-3939): a deleted pod is replaced only
/// once it has failed; until then it counts in `status.terminating`, not in
/// `failed`. The default (`TerminatingOrFailed`) replaces it at once.
#[tokio::test]
async fn pod_replacement_policy_failed_waits_for_the_terminating_pod_to_fail() {
    let env = fast_env().await;
    env.namespace("j7").await;
    let api: Api<Job> = Api::namespaced(env.client.clone(), "j7");
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), "j7");
    for (name, policy) in [("failed", "Failed"), ("default", "TerminatingOrFailed")] {
        let spec = if policy == "Failed" { json!({"podReplacementPolicy": "Failed"}) } else { json!({}) };
        api.create(&PostParams::default(), &long_running_job(name, spec)).await.expect("create");
        let j = eventually("the defaulted policy", || async { api.get(name).await.ok().filter(|j| j.status.as_ref().and_then(|s| s.active) == Some(1)) }).await;
        assert_eq!(j.spec.as_ref().and_then(|s| s.pod_replacement_policy.as_deref()), Some(policy));
    }
    let first = |job: &'static str| {
        let pods = pods.clone();
        async move {
            let list = pods.list(&ListParams::default().labels(&format!("job-name={job}"))).await.expect("pods").items;
            list.into_iter().next().expect("a pod").name_any()
        }
    };
    let (victim_failed, victim_default) = (first("failed").await, first("default").await);
    pods.delete(&victim_failed, &Default::default()).await.expect("delete");
    pods.delete(&victim_default, &Default::default()).await.expect("delete");

    // The default policy replaces its pod and counts it failed at once.
    eventually("the default job's replacement", || async {
        let s = api.get("default").await.ok()?.status?;
        (s.active == Some(1) && s.failed == Some(1)).then_some(())
    })
    .await;
    // The Failed policy: terminating 1, nothing failed, no replacement (over the same time and more).
    let s = eventually("terminating 1", || async { api.get("failed").await.ok()?.status.filter(|s| s.terminating == Some(1)) }).await;
    assert_eq!((s.active, s.failed.unwrap_or(0)), (Some(0), 0));
    tokio::time::sleep(Duration::from_secs(2)).await;
    let list = pods.list(&ListParams::default().labels("job-name=failed")).await.expect("pods").items;
    assert_eq!(list.iter().map(|p| p.name_any()).collect::<Vec<_>>(), vec![victim_failed.clone()], "no replacement while terminating");
    assert_eq!(api.get("failed").await.expect("job").status.and_then(|s| s.failed).unwrap_or(0), 0);

    // Once the pod has failed, it counts and is replaced.
    let status = json!({"status": {"phase": "Failed"}});
    pods.patch_status(&victim_failed, &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&status)).await.expect("fail the pod");
    eventually("the Failed-policy job's replacement", || async {
        let s = api.get("failed").await.ok()?.status?;
        (s.active == Some(1) && s.failed == Some(1) && s.terminating == Some(0)).then_some(())
    })
    .await;
    let (_, live) = pods_of(&env, "j7").await;
    assert_eq!(live.len(), 2, "one running pod per job: {live:?}");
    env.stop().await;
}

/// With `podReplacementPolicy: Failed`, an Indexed job's terminating pod
/// keeps its index: no second pod of index 0 until the first has failed.
#[tokio::test]
async fn a_terminating_pod_of_an_indexed_job_keeps_its_index_until_it_fails() {
    let env = fast_env().await;
    env.namespace("j8").await;
    let api: Api<Job> = Api::namespaced(env.client.clone(), "j8");
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), "j8");
    let spec = json!({"completionMode": "Indexed", "completions": 2, "parallelism": 2, "podReplacementPolicy": "Failed"});
    api.create(&PostParams::default(), &long_running_job("idx", spec)).await.expect("create");
    eventually("2 active", || async { api.get("idx").await.ok()?.status.filter(|s| s.active == Some(2)) }).await;
    let index_of = |p: &Pod| p.annotations().get("batch.kubernetes.io/job-completion-index").cloned().unwrap_or_default();
    let list = pods.list(&ListParams::default()).await.expect("pods").items;
    let zero = list.iter().find(|p| index_of(p) == "0").expect("index 0").name_any();
    pods.delete(&zero, &Default::default()).await.expect("delete");
    eventually("terminating 1", || async { api.get("idx").await.ok()?.status.filter(|s| s.terminating == Some(1) && s.active == Some(1)) }).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let zeros = |list: &[Pod]| list.iter().filter(|p| index_of(p) == "0").count();
    assert_eq!(zeros(&pods.list(&ListParams::default()).await.expect("pods").items), 1, "index 0 not started twice while its pod terminates");
    let status = json!({"status": {"phase": "Failed"}});
    pods.patch_status(&zero, &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&status)).await.expect("fail the pod");
    eventually("index 0 started again", || async {
        let s = api.get("idx").await.ok()?.status?;
        (s.active == Some(2) && s.failed == Some(1)).then_some(())
    })
    .await;
    let live: Vec<Pod> = pods.list(&ListParams::default()).await.expect("pods").items.into_iter().filter(|p| p.metadata.deletion_timestamp.is_none()).collect();
    assert_eq!(zeros(&live), 1);
    env.stop().await;
}

/// `successPolicy` (KEP-3998): an Indexed job whose rule is met is
/// `SuccessCriteriaMet` with reason `SuccessPolicy`, its other pods go, and it
/// ends `Complete` with that reason, before all its completions succeeded.
#[tokio::test]
async fn an_indexed_job_meeting_its_success_policy_completes_early() {
    let env = fast_env().await;
    env.namespace("j9").await;
    let api: Api<Job> = Api::namespaced(env.client.clone(), "j9");
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), "j9");
    let spec = json!({"completionMode": "Indexed", "completions": 3, "parallelism": 3,
                      "successPolicy": {"rules": [{"succeededIndexes": "1-2"}, {"succeededIndexes": "0", "succeededCount": 1}]}});
    api.create(&PostParams::default(), &long_running_job("leader", spec)).await.expect("create");
    eventually("3 active", || async { api.get("leader").await.ok()?.status.filter(|s| s.active == Some(3)) }).await;
    let list = pods.list(&ListParams::default()).await.expect("pods").items;
    let leader = list.iter().find(|p| p.annotations().get("batch.kubernetes.io/job-completion-index").map(String::as_str) == Some("0")).expect("index 0");
    let status = json!({"status": {"phase": "Succeeded"}});
    pods.patch_status(&leader.name_any(), &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&status)).await.expect("succeed index 0");
    let cond = terminal_condition(&api, "leader").await;
    assert_eq!((cond.type_.as_str(), cond.reason.as_deref(), cond.message.as_deref()), ("Complete", Some("SuccessPolicy"), Some("Matched rules at index 1")));
    let j = api.get("leader").await.expect("job");
    assert_eq!(condition_types(&j), vec!["SuccessCriteriaMet", "Complete"]);
    let s = j.status.expect("status");
    assert_eq!((s.succeeded, s.active, s.completed_indexes.as_deref()), (Some(1), Some(0), Some("0")));
    let (_, live) = pods_of(&env, "j9").await;
    assert_eq!(live, vec![leader.name_any()], "the other indexes' pods are gone");
    env.stop().await;
}

/// `backoffLimitPerIndex` (KEP-3850): each index is retried on its own, its
/// pods carry the index's failures so far, an index failing past the limit is
/// listed in `failedIndexes`, and the job fails once every index is done.
#[tokio::test]
async fn each_index_is_retried_up_to_its_own_backoff_limit() {
    let env = fast_env().await;
    env.namespace("j10").await;
    let api: Api<Job> = Api::namespaced(env.client.clone(), "j10");
    let spec = json!({"completionMode": "Indexed", "completions": 2, "parallelism": 2, "backoffLimitPerIndex": 1});
    api.create(&PostParams::default(), &job("retry", 1, spec)).await.expect("create");
    let cond = terminal_condition(&api, "retry").await;
    assert_eq!((cond.type_.as_str(), cond.reason.as_deref(), cond.message.as_deref()), ("Failed", Some("FailedIndexes"), Some("Job has failed indexes")));
    let s = api.get("retry").await.expect("job").status.expect("status");
    assert_eq!((s.failed, s.succeeded, s.failed_indexes.as_deref(), s.completed_indexes.as_deref()), (Some(4), Some(0), Some("0,1"), Some("")));
    let pods = Api::<Pod>::namespaced(env.client.clone(), "j10").list(&ListParams::default()).await.expect("pods").items;
    let mut seen: Vec<(String, String)> = pods
        .iter()
        .map(|p| {
            let a = p.annotations();
            (a.get("batch.kubernetes.io/job-completion-index").cloned().unwrap_or_default(), a.get("batch.kubernetes.io/job-index-failure-count").cloned().unwrap_or_default())
        })
        .collect();
    seen.sort();
    assert_eq!(seen, [("0", "0"), ("0", "1"), ("1", "0"), ("1", "1")].map(|(a, b)| (a.to_string(), b.to_string())));
    env.stop().await;
}

/// More failed indexes than `maxFailedIndexes` fail the job at once
/// (`MaxFailedIndexesExceeded`); a `FailIndex` rule fails an index on its
/// first matching failure, whatever its per-index limit.
#[tokio::test]
async fn fail_index_rules_and_max_failed_indexes_end_the_job() {
    let env = fast_env().await;
    env.namespace("j11").await;
    let api: Api<Job> = Api::namespaced(env.client.clone(), "j11");
    let spec = json!({"completionMode": "Indexed", "completions": 3, "parallelism": 1, "backoffLimitPerIndex": 5, "maxFailedIndexes": 0,
        "podFailurePolicy": {"rules": [{"action": "FailIndex", "onExitCodes": {"operator": "In", "values": [1]}}]}});
    api.create(&PostParams::default(), &job("strict", 1, spec)).await.expect("create");
    let cond = terminal_condition(&api, "strict").await;
    assert_eq!(
        (cond.type_.as_str(), cond.reason.as_deref(), cond.message.as_deref()),
        ("Failed", Some("MaxFailedIndexesExceeded"), Some("Job has exceeded the specified maximal number of failed indexes"))
    );
    let s = api.get("strict").await.expect("job").status.expect("status");
    assert_eq!((s.failed, s.failed_indexes.as_deref()), (Some(1), Some("0")), "one failure of index 0 failed it and the job");
    env.stop().await;
}
