//! Backoff limit per index (KEP-3850, upstream `pkg/controller/job/
//! backoff_utils.go` and `indexed_job_utils.go`): an Indexed job with
//! `spec.backoffLimitPerIndex` retries each index on its own. Every pod
//! carries how many times its index failed before it
//! (`batch.kubernetes.io/job-index-failure-count`); an index whose pod fails
//! past the limit, or whose pod matches a `FailIndex` rule, is listed in
//! `status.failedIndexes` and not started again. The job fails when more
//! indexes failed than `spec.maxFailedIndexes`, or once every index has
//! either succeeded or failed and some failed.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::batch::v1::JobSpec;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

use super::decide::Failure;
use super::pods;

/// The annotation counting an index's failures before this pod.
pub const INDEX_FAILURE_COUNT: &str = "batch.kubernetes.io/job-index-failure-count";

/// The limit, when the job retries per index (Indexed with `backoffLimitPerIndex`).
pub fn limit(spec: &JobSpec) -> Option<i32> {
    spec.backoff_limit_per_index.filter(|_| spec.completion_mode.as_deref() == Some("Indexed"))
}

/// How many times `pod`'s index failed before it (0 when not annotated).
pub fn failure_count(pod: &Pod) -> i32 {
    pod.annotations().get(INDEX_FAILURE_COUNT).and_then(|v| v.parse().ok()).filter(|n: &i32| *n >= 0).unwrap_or(0)
}

/// Whether the failure of `pod` leaves its index past `limit` failures.
pub fn exhausts(pod: &Pod, limit: i32) -> bool {
    failure_count(pod).saturating_add(1) > limit
}

/// The failure count each replacement pod of `indexes` starts with: one
/// more than the most failures a failed (or deleted) pod of that index
/// carried, 0 for an index none of whose pods failed (upstream's
/// `getNewIndexFailureCounts`).
pub fn next_failure_counts<'a>(pods: impl IntoIterator<Item = &'a Pod>, indexes: &[i32]) -> BTreeMap<i32, i32> {
    let mut counts: BTreeMap<i32, i32> = indexes.iter().map(|i| (*i, 0)).collect();
    for p in pods {
        let failed = pods::phase(p) == "Failed" || p.metadata.deletion_timestamp.is_some();
        if let (true, Some(i)) = (failed, pods::completion_index(p)) {
            if let Some(c) = counts.get_mut(&i) {
                *c = (*c).max(failure_count(p).saturating_add(1));
            }
        }
    }
    counts
}

/// Why the job fails for its failed indexes, if it does: more than
/// `maxFailedIndexes` failed (`MaxFailedIndexesExceeded`), or every index
/// is done and some failed (`FailedIndexes`).
pub fn failure(spec: &JobSpec, failed: &BTreeSet<i32>, succeeded: &BTreeSet<i32>) -> Option<Failure> {
    let max = spec.max_failed_indexes.and_then(|m| usize::try_from(m).ok());
    if max.is_some_and(|m| failed.len() > m) {
        return Some(Failure { reason: "MaxFailedIndexesExceeded", message: "Job has exceeded the specified maximal number of failed indexes".into() });
    }
    let completions = usize::try_from(spec.completions.unwrap_or(0)).unwrap_or(0);
    if !failed.is_empty() && failed.union(succeeded).count() >= completions {
        return Some(Failure { reason: "FailedIndexes", message: "Job has failed indexes".into() });
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(index: i32, phase: &str, count: Option<i32>) -> Pod {
        let mut annotations = json!({"batch.kubernetes.io/job-completion-index": index.to_string()});
        if let Some(c) = count {
            annotations[INDEX_FAILURE_COUNT] = json!(c.to_string());
        }
        serde_json::from_value(json!({"metadata": {"name": format!("p{index}"), "annotations": annotations}, "status": {"phase": phase}})).expect("pod")
    }

    #[test]
    fn failures_are_counted_per_index_from_the_pods_annotations() {
        assert!(!exhausts(&pod(0, "Failed", None), 1));
        assert!(exhausts(&pod(0, "Failed", Some(1)), 1));
        assert!(exhausts(&pod(0, "Failed", None), 0));
        let pods = [pod(0, "Failed", Some(1)), pod(0, "Failed", None), pod(1, "Running", Some(3)), pod(2, "Failed", Some(0))];
        let next = next_failure_counts(pods.iter(), &[0, 1, 2, 3]);
        assert_eq!(next, BTreeMap::from([(0, 2), (1, 0), (2, 1), (3, 0)]));
    }

    #[test]
    fn the_job_fails_past_max_failed_indexes_or_when_every_index_is_done() {
        let spec: JobSpec = serde_json::from_value(json!({"completions": 4, "completionMode": "Indexed", "backoffLimitPerIndex": 1,
            "maxFailedIndexes": 1, "template": {}})).expect("spec");
        let set = |v: &[i32]| v.iter().copied().collect::<BTreeSet<i32>>();
        assert_eq!(failure(&spec, &set(&[0]), &set(&[1])), None);
        assert_eq!(failure(&spec, &set(&[0, 3]), &set(&[])).map(|f| f.reason), Some("MaxFailedIndexesExceeded"));
        assert_eq!(failure(&spec, &set(&[0]), &set(&[1, 2, 3])).map(|f| f.reason), Some("FailedIndexes"));
        assert_eq!(failure(&spec, &set(&[]), &set(&[0, 1, 2, 3])), None);
    }
}
