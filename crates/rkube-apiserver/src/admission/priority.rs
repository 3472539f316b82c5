//! `Priority` (upstream `plugin/pkg/admission/priority`): a pod created
//! with `spec.priorityClassName` gets that PriorityClass's value as
//! `spec.priority`, and its `preemptionPolicy`; a pod without one gets the
//! `globalDefault` class's (the lowest-valued when several claim it), or
//! priority 0. Refused with 403 `Forbidden`: a class that does not exist,
//! and a `priority` or `preemptionPolicy` in the pod that differs from the
//! class's. The scheduler orders and preempts by `spec.priority`.

use serde_json::{json, Value};

use crate::error::ApiResult;
use crate::state::ApiState;

/// What the plugin decided for one pod: `(priority, class name, preemption policy)`.
type Resolved = (i64, Option<String>, Option<String>);

/// Resolves the pod's priority from `classes` (`(name, PriorityClass)`)
/// and writes it into `pod`. Errors: the message of upstream's Forbidden.
pub fn resolve(pod: &mut Value, classes: &[(String, Value)]) -> Result<(), String> {
    let spec = pod.get("spec").cloned().unwrap_or(Value::Null);
    let asked = spec.get("priorityClassName").and_then(Value::as_str).filter(|n| !n.is_empty());
    let (priority, class, policy): Resolved = match asked {
        Some(name) => {
            let c = classes.iter().find(|(n, _)| n == name).ok_or_else(|| format!("no PriorityClass with name {name} was found"))?;
            (value_of(&c.1), Some(name.to_string()), policy_of(&c.1))
        }
        None => match default_class(classes) {
            Some((name, c)) => (value_of(c), Some(name.clone()), policy_of(c)),
            None => (0, None, None),
        },
    };
    if let Some(given) = spec.get("priority").and_then(Value::as_i64) {
        if given != priority {
            return Err(format!(
                "the integer value of priority ({given}) must not be provided in pod spec; priority admission controller computed {priority} from the given PriorityClass name"
            ));
        }
    }
    let policy = policy.unwrap_or_else(|| "PreemptLowerPriority".to_string());
    if let Some(given) = spec.get("preemptionPolicy").and_then(Value::as_str) {
        if given != policy {
            return Err(format!(
                "the string value of PreemptionPolicy ({given}) must not be provided in pod spec; priority admission controller computed {policy} from the given PriorityClass name"
            ));
        }
    }
    if let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) {
        if let Some(name) = class {
            spec.insert("priorityClassName".into(), json!(name));
        }
        spec.insert("priority".into(), json!(priority));
        spec.insert("preemptionPolicy".into(), json!(policy));
    }
    Ok(())
}

fn value_of(class: &Value) -> i64 {
    class.get("value").and_then(Value::as_i64).unwrap_or(0)
}

fn policy_of(class: &Value) -> Option<String> {
    class.get("preemptionPolicy").and_then(Value::as_str).map(str::to_string)
}

/// The `globalDefault` class; the lowest-valued when several are (upstream's
/// `getDefaultPriorityClass`).
fn default_class(classes: &[(String, Value)]) -> Option<&(String, Value)> {
    classes.iter().filter(|(_, c)| c.get("globalDefault").and_then(Value::as_bool) == Some(true)).min_by_key(|(_, c)| value_of(c))
}

/// Runs the plugin on the pod `name` being created, reading the
/// PriorityClasses from the watch cache.
pub async fn admit(st: &ApiState, name: &str, pod: &mut Value) -> ApiResult<()> {
    let classes = super::cached_objects(st, "scheduling.k8s.io", "v1", "priorityclasses").await?;
    resolve(pod, &classes).map_err(|message| super::forbidden("", "pods", name, &message))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn classes() -> Vec<(String, Value)> {
        vec![
            ("high".into(), json!({"value": 1000})),
            ("never".into(), json!({"value": 500, "preemptionPolicy": "Never"})),
            ("low-default".into(), json!({"value": 10, "globalDefault": true})),
        ]
    }

    #[test]
    fn pods_get_their_class_value_or_the_global_default() {
        let mut pod = json!({"spec": {"priorityClassName": "high", "containers": []}});
        resolve(&mut pod, &classes()).unwrap();
        assert_eq!((pod["spec"]["priority"].clone(), pod["spec"]["preemptionPolicy"].clone()), (json!(1000), json!("PreemptLowerPriority")));
        let mut pod = json!({"spec": {"priorityClassName": "never"}});
        resolve(&mut pod, &classes()).unwrap();
        assert_eq!(pod["spec"]["preemptionPolicy"], "Never");
        let mut pod = json!({"spec": {}});
        resolve(&mut pod, &classes()).unwrap();
        assert_eq!((pod["spec"]["priority"].clone(), pod["spec"]["priorityClassName"].clone()), (json!(10), json!("low-default")));
        let mut pod = json!({"spec": {}});
        resolve(&mut pod, &[]).unwrap();
        assert_eq!(pod["spec"]["priority"], 0);
        assert!(pod["spec"].get("priorityClassName").is_none());
    }

    #[test]
    fn unknown_classes_and_contradicting_values_are_refused() {
        let mut pod = json!({"spec": {"priorityClassName": "nope"}});
        assert_eq!(resolve(&mut pod, &classes()).unwrap_err(), "no PriorityClass with name nope was found");
        let mut pod = json!({"spec": {"priorityClassName": "high", "priority": 7}});
        assert!(resolve(&mut pod, &classes()).unwrap_err().starts_with("the integer value of priority (7) must not be provided"));
        let mut pod = json!({"spec": {"priorityClassName": "high", "priority": 1000, "preemptionPolicy": "Never"}});
        assert!(resolve(&mut pod, &classes()).unwrap_err().starts_with("the string value of PreemptionPolicy (Never) must not be provided"));
    }
}
