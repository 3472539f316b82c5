//! `spec.podFailurePolicy` matching (upstream `pkg/controller/job/pod_failure_policy.go`):
//! the first rule whose `onExitCodes` or `onPodConditions` matches a failed
//! pod decides whether the failure fails the job, is ignored, or counts
//! toward `backoffLimit`, or fails its index (`FailIndex`).

use k8s_openapi::api::batch::v1::{PodFailurePolicy, PodFailurePolicyRule};
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};

/// What a failed pod means for its job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Fail the job (`FailJob`); the message is the condition's.
    FailJob(String),
    /// Do not count the failure (`Ignore`).
    Ignore,
    /// Count it toward `backoffLimit` (`Count`, or no rule matched).
    Count,
    /// Fail the pod's index (`FailIndex`; counted like `Count` for a job
    /// without `backoffLimitPerIndex`).
    FailIndex,
}

/// Applies `policy` to the failed `pod` (upstream's `matchPodFailurePolicy`).
/// Without a policy or a matching rule, the failure counts.
pub fn evaluate(policy: Option<&PodFailurePolicy>, pod: &Pod) -> Verdict {
    let Some(policy) = policy else { return Verdict::Count };
    let ns = pod.metadata.namespace.as_deref().unwrap_or("");
    let name = pod.metadata.name.as_deref().unwrap_or("");
    for (index, rule) in policy.rules.iter().enumerate() {
        let Some(why) = rule_matches(rule, pod, ns, name) else { continue };
        return match rule.action.as_str() {
            "FailJob" => Verdict::FailJob(format!("{why} matching FailJob rule at index {index}")),
            "Ignore" => Verdict::Ignore,
            "FailIndex" => Verdict::FailIndex,
            _ => Verdict::Count,
        };
    }
    Verdict::Count
}

/// The message fragment naming what matched, when `rule` matches `pod`.
fn rule_matches(rule: &PodFailurePolicyRule, pod: &Pod, ns: &str, name: &str) -> Option<String> {
    if let Some(req) = &rule.on_exit_codes {
        let status = pod.status.as_ref()?;
        let statuses = status.init_container_statuses.iter().flatten().chain(status.container_statuses.iter().flatten());
        for cs in statuses {
            if req.container_name.as_deref().is_some_and(|c| c != cs.name) {
                continue;
            }
            let Some(code) = exit_code(cs) else { continue };
            // Exit code 0 never matches (a container that succeeded did not fail the pod).
            if code == 0 {
                continue;
            }
            let listed = req.values.contains(&code);
            let hit = match req.operator.as_str() {
                "In" => listed,
                "NotIn" => !listed,
                _ => false,
            };
            if hit {
                return Some(format!("Container {} for pod {ns}/{name} failed with exit code {code}", cs.name));
            }
        }
        return None;
    }
    let patterns = rule.on_pod_conditions.as_ref()?;
    let conditions = pod.status.as_ref()?.conditions.as_ref()?;
    for pattern in patterns {
        let want = if pattern.status.is_empty() { "True" } else { pattern.status.as_str() };
        if conditions.iter().any(|c| c.type_ == pattern.type_ && c.status == want) {
            return Some(format!("Pod {ns}/{name} has condition {}", pattern.type_));
        }
    }
    None
}

fn exit_code(cs: &ContainerStatus) -> Option<i32> {
    cs.state.as_ref()?.terminated.as_ref().map(|t| t.exit_code)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(exit: i32, conditions: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns"},
            "status": {"phase": "Failed", "conditions": conditions, "containerStatuses": [
                {"name": "main", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
                 "state": {"terminated": {"exitCode": exit}}},
            ]},
        }))
        .unwrap()
    }

    fn policy(rules: serde_json::Value) -> PodFailurePolicy {
        serde_json::from_value(json!({ "rules": rules })).unwrap()
    }

    #[test]
    fn the_first_matching_rule_decides_on_exit_codes() {
        let p = policy(json!([
            {"action": "Ignore", "onExitCodes": {"operator": "In", "values": [3]}},
            {"action": "FailJob", "onExitCodes": {"containerName": "main", "operator": "In", "values": [42]}},
            {"action": "Count", "onExitCodes": {"operator": "NotIn", "values": [42, 3]}},
        ]));
        assert_eq!(evaluate(Some(&p), &pod(3, json!([]))), Verdict::Ignore);
        assert_eq!(
            evaluate(Some(&p), &pod(42, json!([]))),
            Verdict::FailJob("Container main for pod ns/p failed with exit code 42 matching FailJob rule at index 1".into())
        );
        assert_eq!(evaluate(Some(&p), &pod(1, json!([]))), Verdict::Count);
        assert_eq!(evaluate(None, &pod(42, json!([]))), Verdict::Count);
    }

    #[test]
    fn exit_code_zero_and_other_containers_never_match() {
        let p = policy(json!([{"action": "FailJob", "onExitCodes": {"operator": "NotIn", "values": [1]}}]));
        assert_eq!(evaluate(Some(&p), &pod(0, json!([]))), Verdict::Count);
        let other = policy(json!([{"action": "FailJob", "onExitCodes": {"containerName": "sidecar", "operator": "In", "values": [2]}}]));
        assert_eq!(evaluate(Some(&other), &pod(2, json!([]))), Verdict::Count);
    }

    #[test]
    fn pod_conditions_match_on_type_and_status() {
        let p = policy(json!([{"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}]));
        let disrupted = pod(137, json!([{"type": "DisruptionTarget", "status": "True"}]));
        assert_eq!(
            evaluate(Some(&p), &disrupted),
            Verdict::FailJob("Pod ns/p has condition DisruptionTarget matching FailJob rule at index 0".into())
        );
        let not = pod(137, json!([{"type": "DisruptionTarget", "status": "False"}]));
        assert_eq!(evaluate(Some(&p), &not), Verdict::Count);
    }
}
