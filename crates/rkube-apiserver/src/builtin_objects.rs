//! Objects every cluster has from its first start, created when missing:
//! - the system namespaces (`default`, `kube-system`, `kube-public`, `kube-node-lease`);
//! - the two built-in PriorityClasses `system-cluster-critical` and
//!   `system-node-critical` (upstream `pkg/apis/scheduling/types.go`,
//!   `SystemPriorityClasses`);
//! - the mandatory and suggested API Priority and Fairness FlowSchemas and
//!   PriorityLevelConfigurations ([`crate::flowcontrol::ensure`]: upstream
//!   `staging/src/k8s.io/apiserver/pkg/apis/flowcontrol/bootstrap/default.go`,
//!   kept as upstream's ensurer keeps them);
//! - one local APIService per served group version, as upstream's
//!   autoregistration controller keeps them (`pkg/controlplane/apiserver/aggregator.go`,
//!   with its group and version priorities).
//!
//! Other existing objects are left as they are (a user may have changed them).

use rkube_api::registry::{self, ResourceInfo};
use serde_json::{json, Value};

use crate::error::ApiError;
use crate::state::ApiState;

/// Namespaces that exist from the first start (upstream's system namespaces).
pub const SYSTEM_NAMESPACES: &[&str] = &["default", "kube-system", "kube-public", "kube-node-lease"];

/// Creates `obj` (of `info`, named `name`) unless it exists, with defaults,
/// a uid and a creation timestamp.
pub(crate) async fn create_missing(st: &ApiState, info: &ResourceInfo, mut obj: Value) -> Result<(), ApiError> {
    let name = crate::object::name(&obj).to_string();
    let key = info.object_key(st.prefix(), crate::object::namespace(&obj), &name);
    if st.storage.get(&key).await.map_err(|e| ApiError::from_storage(e, info, &name))?.is_some() {
        return Ok(());
    }
    crate::object::set_meta(&mut obj, "uid", json!(crate::object::new_uid()));
    crate::object::set_meta(&mut obj, "creationTimestamp", json!(rkube_api::time::now_rfc3339()));
    info.strategy.apply_defaults(&mut obj);
    crate::object::set_initial_generation(&mut obj, info.has_spec);
    rkube_api::wire::order_object_keys(&mut obj);
    let bytes = serde_json::to_vec(&obj).map_err(ApiError::internal)?;
    match st.storage.create(&key, bytes.into()).await {
        Ok(_) | Err(rkube_storage::StorageError::AlreadyExists { .. }) => Ok(()),
        Err(e) => Err(ApiError::from_storage(e, info, &name)),
    }
}

fn row(group: &str, resource: &str) -> Result<&'static ResourceInfo, ApiError> {
    registry::lookup(group, "v1", resource).ok_or_else(|| ApiError::internal(format!("{resource} are not served")))
}

/// The local APIService of one group version (`v1.apps`, `v1.` for core).
pub fn api_service(group: &str, version: &str) -> Value {
    let (group_priority, version_priority) = registry::priority(group, version);
    json!({
        "kind": "APIService",
        "apiVersion": "apiregistration.k8s.io/v1",
        "metadata": {"name": format!("{version}.{group}"), "labels": {"kube-aggregator.kubernetes.io/automanaged": "onstart"}},
        "spec": {"group": group, "version": version, "groupPriorityMinimum": group_priority, "versionPriority": version_priority},
        "status": {"conditions": [{
            "type": "Available",
            "status": "True",
            "lastTransitionTime": rkube_api::time::now_rfc3339(),
            "reason": "Local",
            "message": "Local APIServices are always available",
        }]},
    })
}

fn priority_classes() -> [Value; 2] {
    let pc = |name: &str, value: i64, description: &str| {
        json!({
            "kind": "PriorityClass",
            "apiVersion": "scheduling.k8s.io/v1",
            "metadata": {"name": name},
            "value": value,
            "description": description,
        })
    };
    [
        pc(
            "system-node-critical",
            2_000_001_000,
            "Used for system critical pods that must not be moved from their current node.",
        ),
        pc(
            "system-cluster-critical",
            2_000_000_000,
            "Used for system critical pods that must run in the cluster, but can be moved to another node if necessary.",
        ),
    ]
}

/// Creates every missing built-in object (see the module docs).
pub async fn ensure(st: &ApiState) -> Result<(), ApiError> {
    let namespaces = row("", "namespaces")?;
    for ns in SYSTEM_NAMESPACES {
        create_missing(st, namespaces, json!({"kind": "Namespace", "apiVersion": "v1", "metadata": {"name": ns}})).await?;
    }
    let pcs = row("scheduling.k8s.io", "priorityclasses")?;
    for pc in priority_classes() {
        create_missing(st, pcs, pc).await?;
    }
    crate::flowcontrol::ensure(st).await?;
    let services = row("apiregistration.k8s.io", "apiservices")?;
    let mut group_versions: Vec<(&str, &str)> = vec![("", "v1")];
    for (group, versions) in registry::groups() {
        group_versions.extend(versions.into_iter().map(|v| (group, v)));
    }
    for (group, version) in group_versions {
        create_missing(st, services, api_service(group, version)).await?;
    }
    Ok(())
}
