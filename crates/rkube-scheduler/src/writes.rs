//! What the scheduler writes to the API server besides events (upstream
//! `schedule_one.go` binding, `preemption.go` victims, `util.go`
//! `PatchPodStatus`, VolumeBinding's PreBind): bindings, the
//! `PodScheduled=False` condition, preemption victims and claims' selected
//! node. Each is one request (or a few) with kube's client; a request the
//! API server turns away with 429 and `Retry-After` is tried again by the
//! client itself (`rkube_component::client`'s Retry-After layer, as
//! client-go's REST client does).

use k8s_openapi::api::core::v1::{Binding, ObjectReference, PersistentVolumeClaim, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, Patch, PatchParams, PostParams};

use crate::scheduler::DEFAULT_SCHEDULER;

/// Marks `victim` with the `DisruptionTarget` condition (reason
/// `PreemptionByScheduler`) and deletes it gracefully. A victim already
/// gone is not an error.
pub async fn evict(client: &kube::Client, victim: &Pod) -> Result<(), kube::Error> {
    let ns = victim.metadata.namespace.as_deref().unwrap_or("default");
    let name = victim.metadata.name.as_deref().unwrap_or("");
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let now = k8s_openapi::jiff::Timestamp::now()
        .round(k8s_openapi::jiff::Unit::Second)
        .map(|t| t.to_string())
        .unwrap_or_default();
    let patch = serde_json::json!({"status": {"conditions": [{
        "type": "DisruptionTarget", "status": "True", "reason": crate::preemption::PREEMPTION_BY_SCHEDULER,
        "message": format!("{DEFAULT_SCHEDULER}: preempting to accommodate a higher priority pod"), "lastTransitionTime": now,
    }]}});
    let gone = |e: &kube::Error| matches!(e, kube::Error::Api(s) if s.code == 404);
    let (pp, patch) = (PatchParams::default(), Patch::Strategic(patch));
    match api.patch_status(name, &pp, &patch).await {
        Err(e) if gone(&e) => return Ok(()),
        Err(e) => return Err(e),
        Ok(_) => {}
    }
    let dp = kube::api::DeleteParams::default();
    match api.delete(name, &dp).await {
        Err(e) if gone(&e) => Ok(()),
        Err(e) => Err(e),
        Ok(_) => Ok(()),
    }
}

/// Annotates the claims `names` (in `pod`'s namespace) with
/// `volume.kubernetes.io/selected-node: <node>` (upstream VolumeBinding's
/// PreBind for claims to provision), so their volume is made for `node`.
pub async fn select_node_for_claims(
    client: &kube::Client,
    pod: &Pod,
    names: &[String],
    node: &str,
) -> Result<(), kube::Error> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let api: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    for name in names {
        let patch = serde_json::json!({"metadata": {"annotations": {crate::plugins::volumes::SELECTED_NODE: node}}});
        let (pp, patch) = (PatchParams::default(), Patch::Merge(patch));
        api.patch(name, &pp, &patch).await?;
    }
    Ok(())
}

/// POSTs the Binding of `pod` to `node` (`pods/binding`, with the pod's
/// UID).
pub async fn bind(client: &kube::Client, pod: &Pod, node: &str) -> Result<(), kube::Error> {
    let name = pod.metadata.name.clone().unwrap_or_default();
    let namespace = pod
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    let binding = Binding {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(namespace.clone()),
            uid: pod.metadata.uid.clone(),
            ..ObjectMeta::default()
        },
        target: ObjectReference {
            kind: Some("Node".into()),
            name: Some(node.into()),
            api_version: Some("v1".into()),
            ..ObjectReference::default()
        },
    };
    let api: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    let pp = PostParams::default();
    let _: serde_json::Value = api.create_subresource("binding", &name, &pp, &binding).await?;
    Ok(())
}

/// Sets `PodScheduled=False`, reason `Unschedulable`, with `message` on the
/// pod's status (a strategic merge patch of `pods/status`), unless the pod
/// already has that condition; `lastTransitionTime` changes only with the status.
pub async fn mark_unschedulable(
    client: &kube::Client,
    pod: &Pod,
    message: &str,
) -> Result<(), kube::Error> {
    let current = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "PodScheduled"));
    if current.is_some_and(|c| {
        c.status == "False"
            && c.reason.as_deref() == Some("Unschedulable")
            && c.message.as_deref() == Some(message)
    }) {
        return Ok(());
    }
    let transition = match current {
        Some(c) if c.status == "False" => c.last_transition_time.as_ref().map(|t| t.0.to_string()),
        _ => None,
    }
    .unwrap_or_else(|| {
        k8s_openapi::jiff::Timestamp::now()
            .round(k8s_openapi::jiff::Unit::Second)
            .map(|t| t.to_string())
            .unwrap_or_default()
    });
    let patch = serde_json::json!({"status": {"conditions": [{
        "type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message,
        "lastProbeTime": null, "lastTransitionTime": transition,
    }]}});
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let (name, pp, patch) = (
        pod.metadata.name.as_deref().unwrap_or(""),
        PatchParams::default(),
        Patch::Strategic(patch),
    );
    api.patch_status(name, &pp, &patch).await?;
    Ok(())
}
