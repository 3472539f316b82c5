//! The job controller's pod plumbing: pods from the template (labels,
//! completion index, tracking finalizer), the tracking finalizer's removal,
//! and pod predicates (upstream `pkg/controller/job/job_controller.go`,
//! `indexed_job_utils.go`).

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{EnvVar, EnvVarSource, ObjectFieldSelector, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, Patch, PatchParams};
use kube::ResourceExt;
use serde_json::json;

use crate::pod_control;

/// The finalizer the job controller puts on its pods until it has counted
/// them in the job status (upstream `batch.kubernetes.io/job-tracking`).
pub const TRACKING_FINALIZER: &str = "batch.kubernetes.io/job-tracking";
/// Annotation and label carrying an Indexed job pod's completion index.
pub const COMPLETION_INDEX: &str = "batch.kubernetes.io/job-completion-index";
/// The environment variable an Indexed job pod reads its index from.
pub const COMPLETION_INDEX_ENV: &str = "JOB_COMPLETION_INDEX";

/// The pod phase (`""` when unset).
pub fn phase(pod: &Pod) -> &str {
    pod.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("")
}

/// `Succeeded` or `Failed`.
pub fn is_terminal(pod: &Pod) -> bool {
    matches!(phase(pod), "Succeeded" | "Failed")
}

/// Whether the pod still carries [`TRACKING_FINALIZER`].
pub fn has_tracking_finalizer(pod: &Pod) -> bool {
    pod.finalizers().iter().any(|f| f == TRACKING_FINALIZER)
}

/// The completion index of an Indexed job's pod: the annotation, else the
/// label; `None` when missing or not a number.
pub fn completion_index(pod: &Pod) -> Option<i32> {
    let text = pod.annotations().get(COMPLETION_INDEX).or_else(|| pod.labels().get(COMPLETION_INDEX))?;
    text.parse().ok().filter(|i: &i32| *i >= 0)
}

/// A pod for `job` (upstream's `GetPodFromTemplate` plus the job's
/// additions): named `<job>-` (`<job>-<index>-` for Indexed) by the API
/// server, the template's labels and annotations, the tracking finalizer,
/// `owner` as controller; with `index`, the completion-index annotation and
/// label, hostname `<job>-<index>` and `JOB_COMPLETION_INDEX` in every
/// container; with `failure_count`, the index's failures so far
/// ([`super::per_index::INDEX_FAILURE_COUNT`]).
pub fn pod_for(job: &Job, owner: OwnerReference, index: Option<i32>, failure_count: Option<i32>) -> Option<Pod> {
    let template = job.spec.as_ref()?.template.clone();
    let name = job.name_any();
    let prefix = match index {
        Some(i) => format!("{name}-{i}"),
        None => name.clone(),
    };
    let mut pod = pod_control::pod_from_template(&template, &prefix, owner);
    pod.metadata.finalizers.get_or_insert_with(Vec::new).push(TRACKING_FINALIZER.to_string());
    if let Some(count) = failure_count {
        pod.metadata.annotations.get_or_insert_with(BTreeMap::new).insert(super::per_index::INDEX_FAILURE_COUNT.into(), count.to_string());
    }
    if let Some(i) = index {
        let idx = i.to_string();
        pod.metadata.annotations.get_or_insert_with(BTreeMap::new).insert(COMPLETION_INDEX.into(), idx.clone());
        pod.metadata.labels.get_or_insert_with(BTreeMap::new).insert(COMPLETION_INDEX.into(), idx);
        if let Some(spec) = pod.spec.as_mut() {
            if spec.hostname.is_none() {
                spec.hostname = Some(format!("{name}-{i}"));
            }
            let env = EnvVar {
                name: COMPLETION_INDEX_ENV.into(),
                value: None,
                value_from: Some(EnvVarSource {
                    field_ref: Some(ObjectFieldSelector {
                        api_version: None,
                        field_path: format!("metadata.annotations['{COMPLETION_INDEX}']"),
                    }),
                    ..EnvVarSource::default()
                }),
            };
            for c in spec.containers.iter_mut().chain(spec.init_containers.iter_mut().flatten()) {
                let vars = c.env.get_or_insert_with(Vec::new);
                if !vars.iter().any(|v| v.name == COMPLETION_INDEX_ENV) {
                    vars.push(env.clone());
                }
            }
        }
    }
    Some(pod)
}

/// Removes [`TRACKING_FINALIZER`] from `pod` with a strategic merge patch
/// `$deleteFromPrimitiveList/finalizers` (upstream's
/// `removeTrackingFinalizerPatch`, `pkg/controller/job/job_controller.go`):
/// the server drops that one entry from the pod as it is now, so other
/// finalizers are kept and a write the cache has not seen yet (a kubelet's
/// status update) does not make it fail. A pod already gone is `Ok`; any
/// other error is returned, and the caller must not count the pod as done
/// with (the next sync tries again).
pub async fn remove_tracking_finalizer(api: &Api<Pod>, pod: &Pod) -> Result<(), kube::Error> {
    if !has_tracking_finalizer(pod) {
        return Ok(());
    }
    let patch = json!({"metadata": {"$deleteFromPrimitiveList/finalizers": [TRACKING_FINALIZER]}});
    match api.patch(&pod.name_any(), &PatchParams::default(), &Patch::Strategic(patch)).await {
        Ok(_) => Ok(()),
        Err(e) if pod_control::is_not_found(&e) => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indexed_pods_carry_their_index_hostname_and_the_tracking_finalizer() {
        let job: Job = serde_json::from_value(json!({
            "metadata": {"name": "work", "namespace": "ns", "uid": "u1"},
            "spec": {"completionMode": "Indexed", "template": {
                "metadata": {"labels": {"job-name": "work"}},
                "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "i"}]}}},
        }))
        .unwrap();
        let owner = OwnerReference { name: "work".into(), uid: "u1".into(), kind: "Job".into(), api_version: "batch/v1".into(), controller: Some(true), block_owner_deletion: Some(true) };
        let pod = pod_for(&job, owner, Some(2), None).unwrap();
        assert_eq!(pod.metadata.generate_name.as_deref(), Some("work-2-"));
        assert_eq!(pod.metadata.finalizers, Some(vec![TRACKING_FINALIZER.to_string()]));
        assert_eq!(completion_index(&pod), Some(2));
        assert_eq!(pod.labels().get(COMPLETION_INDEX).map(String::as_str), Some("2"));
        let spec = pod.spec.unwrap();
        assert_eq!(spec.hostname.as_deref(), Some("work-2"));
        let env = &spec.containers[0].env.as_ref().unwrap()[0];
        assert_eq!(env.name, COMPLETION_INDEX_ENV);
    }
}
