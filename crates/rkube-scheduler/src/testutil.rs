//! Builders for the unit tests: nodes and pods from JSON.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod};
use serde_json::{json, Value};

use crate::snapshot::Snapshot;

fn merge(base: &mut Value, over: Value) {
    match (base, over) {
        (Value::Object(b), Value::Object(o)) => {
            for (k, v) in o {
                merge(b.entry(k).or_insert(Value::Null), v);
            }
        }
        (b, o) => *b = o,
    }
}

/// A node with 2 cpu, 4Gi and 110 pods allocatable, `over` merged in.
pub fn node(name: &str, over: Value) -> Arc<Node> {
    let mut v = json!({
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {"allocatable": {"cpu": "2", "memory": "4Gi", "pods": "110"}},
    });
    if over.pointer("/status/allocatable").is_some() {
        v["status"]["allocatable"] = json!({});
    }
    merge(&mut v, over);
    Arc::new(serde_json::from_value(v).expect("node"))
}

/// A pod in `default` with `spec` (one container `c` unless given);
/// `labels` under `spec.labels` go to the metadata.
pub fn pod(name: &str, mut spec: Value) -> Pod {
    if spec.get("containers").is_none() {
        spec["containers"] = json!([{"name": "c"}]);
    }
    let labels = spec.as_object_mut().and_then(|o| o.remove("labels")).unwrap_or(json!({}));
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}"), "labels": labels},
        "spec": spec,
    }))
    .expect("pod")
}

/// A snapshot of `nodes` with `pods` (assigned ones count).
pub fn snapshot(nodes: Vec<Arc<Node>>, pods: Vec<Pod>) -> Snapshot {
    Snapshot::new(nodes, pods.into_iter().map(Arc::new), Vec::new())
}
