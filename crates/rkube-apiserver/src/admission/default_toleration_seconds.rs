//! `DefaultTolerationSeconds` (upstream
//! `plugin/pkg/admission/defaulttolerationseconds`): a pod created without
//! a NoExecute toleration of `node.kubernetes.io/not-ready` (or of
//! `node.kubernetes.io/unreachable`) gets one, operator `Exists`, for
//! `--default-not-ready-toleration-seconds` (or
//! `--default-unreachable-toleration-seconds`), 300 s by default. So when a
//! node goes down, the taint eviction controller waits that long before
//! evicting its pods. A toleration with that key, or with no key, and the
//! effect `NoExecute` or none, counts as one already.

use serde_json::{json, Value};

/// The taint keys the plugin adds tolerations for.
pub const NOT_READY: &str = "node.kubernetes.io/not-ready";
/// See [`NOT_READY`].
pub const UNREACHABLE: &str = "node.kubernetes.io/unreachable";

/// Adds the missing default tolerations to `pod` (a Pod object being created).
pub fn admit(pod: &mut Value, not_ready_seconds: i64, unreachable_seconds: i64) {
    let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else { return };
    let tolerations = spec.entry("tolerations").or_insert_with(|| json!([]));
    if tolerations.is_null() {
        *tolerations = json!([]);
    }
    let Some(list) = tolerations.as_array_mut() else { return };
    let tolerates = |list: &[Value], key: &str| {
        list.iter().any(|t| {
            let k = t.get("key").and_then(Value::as_str).unwrap_or("");
            let effect = t.get("effect").and_then(Value::as_str).unwrap_or("");
            (k == key || k.is_empty()) && (effect == "NoExecute" || effect.is_empty())
        })
    };
    for (key, seconds) in [(NOT_READY, not_ready_seconds), (UNREACHABLE, unreachable_seconds)] {
        if !tolerates(list, key) {
            list.push(json!({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": seconds}));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pods_get_both_tolerations_unless_they_have_them() {
        let mut pod = json!({"spec": {"containers": []}});
        admit(&mut pod, 300, 200);
        assert_eq!(
            pod["spec"]["tolerations"],
            json!([
                {"key": NOT_READY, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
                {"key": UNREACHABLE, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 200},
            ])
        );
        // Their own toleration of one key (any effect) stays; the other is added.
        let mut pod = json!({"spec": {"tolerations": [{"key": UNREACHABLE, "operator": "Exists", "tolerationSeconds": 5}]}});
        admit(&mut pod, 300, 300);
        assert_eq!(pod["spec"]["tolerations"].as_array().unwrap().len(), 2);
        assert_eq!(pod["spec"]["tolerations"][1]["key"], NOT_READY);
        // A keyless Exists toleration of everything: nothing added.
        let mut pod = json!({"spec": {"tolerations": [{"operator": "Exists"}]}});
        admit(&mut pod, 300, 300);
        assert_eq!(pod["spec"]["tolerations"].as_array().unwrap().len(), 1);
        // A NoSchedule toleration of the key does not count.
        let mut pod = json!({"spec": {"tolerations": [{"key": NOT_READY, "operator": "Exists", "effect": "NoSchedule"}]}});
        admit(&mut pod, 300, 300);
        assert_eq!(pod["spec"]["tolerations"].as_array().unwrap().len(), 3);
    }
}
