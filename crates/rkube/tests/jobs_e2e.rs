//! End to end: `rkube up --node` runs the job and cronjob controllers
//! in-process; Jobs made with the real kubectl 1.27 and 1.33 run their pods
//! as host processes (`/bin/sh -c 'exit 0'`) to `Complete`, a failing Job
//! ends `Failed` with `BackoffLimitExceeded`, and `kubectl create job
//! --from=cronjob/x` runs the CronJob's template to completion.
//!
//! The cluster process is killed by PID when its guard drops; the pods
//! (host processes) die with it.

use crate::common;

use std::time::Duration;

use common::{Backend, Cluster, Kubectl};
use serde_json::Value;

/// Longest wait for a node or a condition.
const LIMIT: Duration = Duration::from_secs(120);

#[track_caller]
fn wait_for<T>(cluster: &Cluster, what: &str, f: impl FnMut() -> Option<T>) -> T {
    cluster.wait_until(what, LIMIT, f)
}

fn node_ready(cluster: &Cluster, k: &Kubectl) {
    cluster.wait_for_ready_node(k, LIMIT);
}

fn job_manifest(name: &str, command: &str, spec: &str) -> String {
    format!(
        "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: {name}\nspec:\n{spec}  template:\n    spec:\n      restartPolicy: Never\n      containers:\n      - name: main\n        image: busybox\n        command: [\"/bin/sh\", \"-c\", \"{command}\"]\n"
    )
}

/// The `True` condition of `job` of type `type_`, as (reason, message).
fn condition(job: &Value, type_: &str) -> Option<(String, String)> {
    job["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == type_ && c["status"] == "True").map(|c| {
        (c["reason"].as_str().unwrap_or("").to_string(), c["message"].as_str().unwrap_or("").to_string())
    })
}

fn jobs_complete_fail_and_run_from_cronjobs(version: &str) {
    let cluster = Cluster::builder(Backend::Embedded).arg("--node").start();
    let k = cluster.kubectl(version);
    node_ready(&cluster, &k);

    // completions 3, parallelism 2: Complete, 3 succeeded.
    let ok = job_manifest("ok", "exit 0", "  completions: 3\n  parallelism: 2\n");
    k.run_stdin(&["create", "-f", "-"], &ok).success();
    k.ok(&["wait", "--for=condition=complete", "job/ok", "--timeout=120s"]);
    let job = k.json(&["get", "job", "ok"]);
    assert_eq!((job["status"]["succeeded"].as_i64(), job["status"]["active"].as_i64()), (Some(3), Some(0)), "{job}");
    assert_eq!(condition(&job, "Complete").map(|c| c.0), Some("CompletionsReached".to_string()), "{job}");
    let pods = k.json(&["get", "pods", "-l", "job-name=ok"]);
    let phases: Vec<&str> = pods["items"].as_array().into_iter().flatten().filter_map(|p| p["status"]["phase"].as_str()).collect();
    assert_eq!(phases, ["Succeeded"; 3], "{pods}");

    // exit 1 with backoffLimit 1: two pods fail (10s backoff between them), then Failed.
    let boom = job_manifest("boom", "exit 1", "  backoffLimit: 1\n");
    k.run_stdin(&["create", "-f", "-"], &boom).success();
    k.ok(&["wait", "--for=condition=failed", "job/boom", "--timeout=120s"]);
    let job = k.json(&["get", "job", "boom"]);
    assert_eq!(condition(&job, "Failed"), Some(("BackoffLimitExceeded".into(), "Job has reached the specified backoff limit".into())), "{job}");
    assert_eq!(job["status"]["failed"].as_i64(), Some(2), "{job}");

    // A CronJob's template run now with `create job --from`.
    k.ok(&["create", "cronjob", "tick", "--image=busybox", "--schedule=0 0 1 1 *", "--", "/bin/sh", "-c", "exit 0"]);
    k.ok(&["create", "job", "manual", "--from=cronjob/tick"]);
    k.ok(&["wait", "--for=condition=complete", "job/manual", "--timeout=120s"]);
    let job = k.json(&["get", "job", "manual"]);
    assert_eq!(job["metadata"]["annotations"]["cronjob.kubernetes.io/instantiate"], "manual", "{job}");
    assert_eq!(job["metadata"]["ownerReferences"][0]["kind"], "CronJob", "{job}");

    let events = wait_for(&cluster, "the Completed events", || {
        let out = k.ok(&["get", "events"]).stdout;
        (out.matches("Job completed").count() >= 2).then_some(out)
    });
    assert!(events.contains("SuccessfulCreate") && events.contains("Created pod: ok-"), "{events}");
    assert!(events.contains("Completed"), "{events}");
    assert!(events.contains("BackoffLimitExceeded"), "{events}");
}

per_kubectl_version!(jobs_complete_fail_and_run_from_cronjobs);
