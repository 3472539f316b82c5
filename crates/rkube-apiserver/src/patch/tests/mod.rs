//! Tests of the patch engine, one file per concern, each named after the
//! rule it proves and asserting what a client sees (object or Status).

mod apply;
mod fields;
mod json;
mod kubectl;
mod managed;
mod props;
mod smp;

use rkube_api::status::Status;
use serde_json::{json, Value};

use super::{apply_patch, apply_patch_at, PatchError, PatchType};

/// The `time` every test stamps managedFields with.
pub(super) const NOW: &str = "2024-05-01T12:00:00Z";

/// Applies a strategic merge patch to `original` of `kind`.
pub(super) fn smp(kind: &str, original: &Value, patch: Value) -> Result<Value, PatchError> {
    apply_patch(
        kind,
        PatchType::StrategicMerge,
        Some(original),
        patch.to_string().as_bytes(),
        "test",
        false,
    )
}

/// Server-side apply of `config` by `manager` at [`NOW`].
pub(super) fn ssa(
    kind: &str,
    api_version: &str,
    original: Option<&Value>,
    config: &Value,
    manager: &str,
    force: bool,
) -> Result<Value, PatchError> {
    apply_patch_at(
        kind,
        Some(api_version),
        PatchType::Apply,
        original,
        config.to_string().as_bytes(),
        manager,
        force,
        NOW,
    )
}

/// The Status a client would get for `err`.
pub(super) fn status_of(err: PatchError) -> Status {
    Status::from(err)
}

/// A pod as stored, with two containers.
pub(super) fn pod() -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default", "uid": "u1", "resourceVersion": "7",
                     "labels": {"app": "web"}, "finalizers": ["a", "b", "c"]},
        "spec": {
            "containers": [
                {"name": "web", "image": "nginx:1.25", "imagePullPolicy": "IfNotPresent",
                 "ports": [{"containerPort": 80, "protocol": "TCP"}],
                 "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                 "volumeMounts": [{"name": "data", "mountPath": "/data"}]},
                {"name": "sidecar", "image": "busybox:1", "command": ["sleep", "3600"]}
            ],
            "volumes": [{"name": "data", "emptyDir": {}}],
            "tolerations": [{"key": "k1", "operator": "Exists"}],
            "restartPolicy": "Always"
        },
        "status": {"phase": "Running", "conditions": [
            {"type": "Ready", "status": "False"}, {"type": "Initialized", "status": "True"}]}
    })
}

/// The names of the containers of a pod spec at `pointer`.
pub(super) fn names(v: &Value, pointer: &str) -> Vec<String> {
    v.pointer(pointer)
        .and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .map(|i| {
                    i.get("name")
                        .or_else(|| i.get("type"))
                        .and_then(Value::as_str)
                        .unwrap_or("?")
                        .to_string()
                })
                .collect()
        })
        .unwrap_or_default()
}
