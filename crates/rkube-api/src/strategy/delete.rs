//! What a DELETE does to an object besides removing it: graceful deletion
//! (upstream `RESTGracefulDeleteStrategy.CheckGracefulDelete`) and a
//! lifecycle that keeps a deleted object until its own spec lets it go
//! (namespaces: upstream `pkg/registry/core/namespace/storage` `Delete`).
//! The API server's DELETE handler reads these from the row's strategy and
//! has no per-resource cases.

use serde_json::{json, Value};

/// Computes the grace period of a graceful delete of `obj` given the
/// request's `gracePeriodSeconds` (`None` when not given): `Some(seconds > 0)`
/// marks the object with `deletionTimestamp = now + seconds` and keeps it,
/// `None` deletes it at once.
pub type GracefulFn = fn(obj: &Value, requested: Option<i64>) -> Option<i64>;

/// A lifecycle that keeps a deleted object until its own spec releases it
/// (namespaces: `Terminating` until `spec.finalizers` is empty).
#[derive(Debug, Clone, Copy)]
pub struct Lifecycle {
    /// True while `obj`'s spec still holds it (a namespace's `spec.finalizers`
    /// is not empty); a DELETE then only marks it, and an update that empties
    /// `metadata.finalizers` does not remove it.
    pub held: fn(obj: &Value) -> bool,
    /// Marks an object whose deletion started (a namespace's
    /// `status.phase: Terminating`).
    pub mark: fn(obj: &mut Value),
    /// Names that may never be deleted (upstream `NamespaceLifecycle`
    /// admission: `default`, `kube-system`, `kube-public`); a DELETE of one
    /// is 403 `Forbidden` with [`Lifecycle::undeletable_message`].
    pub undeletable: &'static [&'static str],
    /// The message of that 403 after `<resource> "<name>" is forbidden: `.
    pub undeletable_message: &'static str,
}

/// The delete rules of a strategy.
#[derive(Debug, Clone, Copy)]
pub struct DeleteRules {
    /// Graceful deletion (pods bound to a node); `None`: never graceful.
    pub graceful: Option<GracefulFn>,
    /// A lifecycle keeping deleted objects (namespaces); `None`: none.
    pub lifecycle: Option<Lifecycle>,
}

impl DeleteRules {
    /// Immediate deletion, no lifecycle.
    pub const NONE: DeleteRules = DeleteRules { graceful: None, lifecycle: None };
}

/// Upstream `podStrategy.CheckGracefulDelete`: a pod bound to a node and
/// not finished is deleted gracefully, with the requested grace period or
/// else `spec.terminationGracePeriodSeconds` (30 when unset); grace 0, an
/// unbound pod or a `Succeeded`/`Failed` one goes at once.
pub(crate) fn pod_grace(obj: &Value, requested: Option<i64>) -> Option<i64> {
    let node = obj.pointer("/spec/nodeName").and_then(Value::as_str).unwrap_or("");
    let phase = obj.pointer("/status/phase").and_then(Value::as_str).unwrap_or("");
    if node.is_empty() || phase == "Succeeded" || phase == "Failed" {
        return None;
    }
    let grace = requested
        .or_else(|| obj.pointer("/spec/terminationGracePeriodSeconds").and_then(Value::as_i64))
        .unwrap_or(30);
    (grace > 0).then_some(grace)
}

/// A namespace's `spec.finalizers` (`kubernetes` until the namespace
/// controller has removed its content).
pub fn namespace_spec_finalizers(obj: &Value) -> Vec<String> {
    obj.pointer("/spec/finalizers")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_string)).collect())
        .unwrap_or_default()
}

fn namespace_held(obj: &Value) -> bool {
    !namespace_spec_finalizers(obj).is_empty()
}

fn namespace_mark(obj: &mut Value) {
    if let Some(m) = obj.as_object_mut() {
        let status = m.entry("status").or_insert_with(|| json!({}));
        if let Some(s) = status.as_object_mut() {
            s.insert("phase".into(), json!("Terminating"));
        }
    }
}

/// Namespaces that can never be deleted (upstream `NamespaceLifecycle`'s
/// immortal namespaces).
pub const IMMORTAL_NAMESPACES: &[&str] = &["default", "kube-system", "kube-public"];

/// The namespace lifecycle (upstream namespace REST `Delete` and
/// `ShouldDeleteNamespaceDuringUpdate`).
pub(crate) const NAMESPACE_LIFECYCLE: Lifecycle = Lifecycle {
    held: namespace_held,
    mark: namespace_mark,
    undeletable: IMMORTAL_NAMESPACES,
    undeletable_message: "this namespace may not be deleted",
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_bound_unfinished_pods_are_deleted_gracefully() {
        let bound = json!({"spec": {"nodeName": "n1", "terminationGracePeriodSeconds": 10}, "status": {"phase": "Running"}});
        assert_eq!(pod_grace(&bound, None), Some(10));
        assert_eq!(pod_grace(&bound, Some(3)), Some(3));
        assert_eq!(pod_grace(&bound, Some(0)), None);
        assert_eq!(pod_grace(&json!({"spec": {}}), None), None);
        let done = json!({"spec": {"nodeName": "n1"}, "status": {"phase": "Succeeded"}});
        assert_eq!(pod_grace(&done, None), None);
    }
}
