//! VolumeBinding, simplified (upstream
//! `pkg/scheduler/framework/plugins/volumebinding`): the PersistentVolumeClaims
//! a pod uses decide where it may run.
//!
//! - [`pre_filter`]: a claim that does not exist, is being deleted, or is
//!   unbound with `volumeBindingMode: Immediate` (the default) makes the pod
//!   unschedulable everywhere (`pod has unbound immediate PersistentVolumeClaims`);
//! - [`filter`]: a claim bound to a volume with `nodeAffinity` admits only
//!   nodes it matches (`node(s) had volume node affinity conflict`); an
//!   unbound `WaitForFirstConsumer` claim of a class without a dynamic
//!   provisioner (`kubernetes.io/no-provisioner`) needs an Available volume
//!   of its class, big enough, reachable from the node (`node(s) didn't
//!   find available persistent volumes to bind`);
//! - [`claims_to_select`]: the unbound `WaitForFirstConsumer` claims the
//!   scheduler annotates with `volume.kubernetes.io/selected-node` before it
//!   binds the pod (upstream's PreBind), so the binder or a provisioner
//!   gives them a volume on that node.
//!
//! Upstream's scheduler also binds such claims to pre-existing volumes
//! itself and waits for the binding before binding the pod; rkube's leaves
//! both to the `persistentvolume-binder-controller` and the node agent
//! (which retries the mount until the claim is bound).

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;

use super::{Code, Status};
use crate::snapshot::{NodeInfo, Snapshot};

/// The plugin's name.
pub const NAME: &str = "VolumeBinding";
/// PreFilter's message for a pod with an unbound `Immediate` claim.
pub const ERR_UNBOUND_IMMEDIATE: &str = "pod has unbound immediate PersistentVolumeClaims";
/// Filter's reason for a bound volume whose node affinity rejects the node.
pub const ERR_NODE_CONFLICT: &str = "node(s) had volume node affinity conflict";
/// Filter's reason when no static volume could serve a delayed claim on the node.
pub const ERR_NO_VOLUME: &str = "node(s) didn't find available persistent volumes to bind";
/// Filter's reason for a claim bound to a volume that does not exist.
pub const ERR_PV_MISSING: &str = "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)";
/// The provisioner name of classes that never provision.
pub const NO_PROVISIONER: &str = "kubernetes.io/no-provisioner";

/// Claims (by `namespace/name`), volumes and StorageClasses (by name).
#[derive(Debug, Clone, Default)]
pub struct VolumeState {
    /// PersistentVolumeClaims by `namespace/name`.
    pub claims: HashMap<String, Arc<PersistentVolumeClaim>>,
    /// PersistentVolumes by name.
    pub volumes: HashMap<String, Arc<PersistentVolume>>,
    /// StorageClasses by name.
    pub classes: HashMap<String, Arc<StorageClass>>,
}

/// The claim names of `pod`'s `persistentVolumeClaim` volumes.
fn claim_names(pod: &Pod) -> impl Iterator<Item = &str> {
    pod.spec.as_ref().and_then(|s| s.volumes.as_deref()).unwrap_or_default().iter().filter_map(|v| v.persistent_volume_claim.as_ref()).map(|c| c.claim_name.as_str())
}

fn class_of(claim: &PersistentVolumeClaim) -> &str {
    claim.spec.as_ref().and_then(|s| s.storage_class_name.as_deref()).unwrap_or("")
}

fn volume_name(claim: &PersistentVolumeClaim) -> &str {
    claim.spec.as_ref().and_then(|s| s.volume_name.as_deref()).unwrap_or("")
}

impl VolumeState {
    fn is_delayed(&self, claim: &PersistentVolumeClaim) -> bool {
        self.classes.get(class_of(claim)).is_some_and(|c| c.volume_binding_mode.as_deref() == Some("WaitForFirstConsumer"))
    }

    /// `pod`'s claims, each found or, when missing, its name.
    fn claims_of<'a>(&'a self, pod: &'a Pod) -> impl Iterator<Item = Result<&'a Arc<PersistentVolumeClaim>, &'a str>> {
        let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
        claim_names(pod).map(move |n| self.claims.get(&format!("{ns}/{n}")).ok_or(n))
    }
}

/// Upstream's PreFilter: `Err(message)` makes the pod unschedulable on every node.
pub fn pre_filter(pod: &Pod, snapshot: &Snapshot) -> Result<(), String> {
    let state = &snapshot.volumes;
    let mut unbound_immediate = false;
    for claim in state.claims_of(pod) {
        let claim = claim.map_err(|name| format!("persistentvolumeclaim {name:?} not found"))?;
        if claim.metadata.deletion_timestamp.is_some() {
            return Err(format!("persistentvolumeclaim {:?} is being deleted", claim.metadata.name.as_deref().unwrap_or("")));
        }
        if volume_name(claim).is_empty() && !state.is_delayed(claim) {
            unbound_immediate = true;
        }
    }
    if unbound_immediate {
        return Err(ERR_UNBOUND_IMMEDIATE.into());
    }
    Ok(())
}

/// Upstream's Filter: whether `node` can reach every volume of `pod`.
pub fn filter(pod: &Pod, node: &NodeInfo, snapshot: &Snapshot) -> Result<(), Status> {
    let state = &snapshot.volumes;
    let empty = Default::default();
    let labels = node.labels().unwrap_or(&empty);
    let reject = |reason: &str| Status::new(NAME, Code::UnschedulableAndUnresolvable, reason);
    for claim in state.claims_of(pod).flatten() {
        let bound = volume_name(claim);
        if !bound.is_empty() {
            let pv = state.volumes.get(bound).ok_or_else(|| reject(ERR_PV_MISSING))?;
            if !fits(pv, labels, &node.name) {
                return Err(reject(ERR_NODE_CONFLICT));
            }
            continue;
        }
        let no_provisioner = state.classes.get(class_of(claim)).is_some_and(|c| c.provisioner == NO_PROVISIONER);
        if state.is_delayed(claim) && no_provisioner && !state.volumes.values().any(|pv| static_match(pv, claim, labels, &node.name)) {
            return Err(reject(ERR_NO_VOLUME));
        }
    }
    Ok(())
}

fn fits(pv: &PersistentVolume, labels: &std::collections::BTreeMap<String, String>, node: &str) -> bool {
    match pv.spec.as_ref().and_then(|s| s.node_affinity.as_ref()).and_then(|a| a.required.as_ref()) {
        None => true,
        Some(req) => req.node_selector_terms.iter().any(|t| super::selectors::node_selector_term_matches(t, labels, node)),
    }
}

/// An Available, unclaimed volume of the claim's class, big enough, reachable from the node.
fn static_match(pv: &PersistentVolume, claim: &PersistentVolumeClaim, labels: &std::collections::BTreeMap<String, String>, node: &str) -> bool {
    let spec = pv.spec.as_ref();
    let storage = |q: Option<&k8s_openapi::apimachinery::pkg::api::resource::Quantity>| {
        q.and_then(|q| crate::resources::parse_milli(&q.0)).unwrap_or(0)
    };
    let capacity = storage(spec.and_then(|s| s.capacity.as_ref()).and_then(|c| c.get("storage")));
    let request = storage(claim.spec.as_ref().and_then(|s| s.resources.as_ref()).and_then(|r| r.requests.as_ref()).and_then(|r| r.get("storage")));
    pv.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Available")
        && spec.and_then(|s| s.claim_ref.as_ref()).is_none()
        && spec.and_then(|s| s.storage_class_name.as_deref()).unwrap_or("") == class_of(claim)
        && capacity >= request
        && fits(pv, labels, node)
}

/// The unbound `WaitForFirstConsumer` claims of `pod` (their names) whose
/// `volume.kubernetes.io/selected-node` is not `node` yet.
pub fn claims_to_select(pod: &Pod, snapshot: &Snapshot, node: &str) -> Vec<String> {
    let state = &snapshot.volumes;
    state
        .claims_of(pod)
        .flatten()
        .filter(|c| volume_name(c).is_empty() && state.is_delayed(c))
        .filter(|c| c.metadata.annotations.as_ref().and_then(|a| a.get(SELECTED_NODE)).map(String::as_str) != Some(node))
        .filter_map(|c| c.metadata.name.clone())
        .collect()
}

/// `volume.kubernetes.io/selected-node`.
pub const SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{node, pod, snapshot};
    use serde_json::json;

    fn state() -> VolumeState {
        let claim = |name: &str, class: &str, volume: &str| -> (String, Arc<PersistentVolumeClaim>) {
            let c = json!({"metadata": {"name": name, "namespace": "default"},
                "spec": {"storageClassName": class, "volumeName": volume, "resources": {"requests": {"storage": "1Gi"}}}});
            (format!("default/{name}"), Arc::new(serde_json::from_value(c).unwrap()))
        };
        let pv = |name: &str, host: Option<&str>, extra: serde_json::Value| -> (String, Arc<PersistentVolume>) {
            let mut v = json!({"metadata": {"name": name}, "spec": {"capacity": {"storage": "1Gi"}, "storageClassName": "static"}, "status": {"phase": "Available"}});
            if let Some(h) = host {
                v["spec"]["nodeAffinity"] = json!({"required": {"nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "kubernetes.io/hostname", "operator": "In", "values": [h]}]}]}});
            }
            if let Some(o) = extra.as_object() {
                for (k, val) in o {
                    v["spec"][k] = val.clone();
                }
            }
            (name.to_string(), Arc::new(serde_json::from_value(v).unwrap()))
        };
        let class = |name: &str, provisioner: &str, mode: &str| -> (String, Arc<StorageClass>) {
            let c = json!({"metadata": {"name": name}, "provisioner": provisioner, "volumeBindingMode": mode});
            (name.to_string(), Arc::new(serde_json::from_value(c).unwrap()))
        };
        VolumeState {
            claims: [claim("on-n1", "", "pv-n1"), claim("immediate", "fast", ""), claim("later", "local-path", ""), claim("static", "static", "")].into(),
            volumes: [pv("pv-n1", Some("n1"), json!({"claimRef": {"namespace": "default", "name": "on-n1"}})), pv("local-n2", Some("n2"), json!({}))].into(),
            classes: [
                class("fast", "example.com/x", "Immediate"),
                class("local-path", "rancher.io/local-path", "WaitForFirstConsumer"),
                class("static", NO_PROVISIONER, "WaitForFirstConsumer"),
            ]
            .into(),
        }
    }

    fn using(claims: &[&str]) -> Pod {
        let volumes: Vec<_> = claims.iter().map(|c| json!({"name": c, "persistentVolumeClaim": {"claimName": c}})).collect();
        pod("p", json!({"volumes": volumes}))
    }

    fn snap() -> Snapshot {
        let mut s = snapshot(vec![node("n1", json!({})), node("n2", json!({}))], vec![]);
        s.volumes = Arc::new(state());
        s
    }

    #[test]
    fn a_bound_local_volume_pins_the_pod_to_its_node() {
        let s = snap();
        let p = using(&["on-n1"]);
        assert_eq!(pre_filter(&p, &s), Ok(()));
        assert_eq!(filter(&p, &s.nodes[0], &s), Ok(()));
        let err = filter(&p, &s.nodes[1], &s).unwrap_err();
        assert_eq!((err.code, err.reasons.clone()), (Code::UnschedulableAndUnresolvable, vec![ERR_NODE_CONFLICT.to_string()]));
        assert_eq!(crate::framework::schedule_pod(&p, &s).unwrap(), "n1");
    }

    #[test]
    fn unbound_immediate_or_missing_claims_make_the_pod_unschedulable() {
        let s = snap();
        assert_eq!(pre_filter(&using(&["immediate"]), &s), Err(ERR_UNBOUND_IMMEDIATE.to_string()));
        assert_eq!(pre_filter(&using(&["nope"]), &s), Err("persistentvolumeclaim \"nope\" not found".to_string()));
        assert_eq!(
            crate::framework::schedule_pod(&using(&["immediate"]), &s).unwrap_err().to_string(),
            "0/2 nodes are available: pod has unbound immediate PersistentVolumeClaims. \
             preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
        );
    }

    #[test]
    fn delayed_claims_are_selected_for_the_chosen_node_and_static_ones_need_a_reachable_volume() {
        let s = snap();
        let p = using(&["later"]);
        assert_eq!(pre_filter(&p, &s), Ok(()));
        assert_eq!(filter(&p, &s.nodes[0], &s), Ok(()));
        assert_eq!(claims_to_select(&p, &s, "n1"), vec!["later".to_string()]);
        assert!(claims_to_select(&using(&["on-n1"]), &s, "n1").is_empty());
        let st = using(&["static"]);
        assert_eq!(filter(&st, &s.nodes[0], &s).unwrap_err().reasons, vec![ERR_NO_VOLUME.to_string()]);
        assert_eq!(filter(&st, &s.nodes[1], &s), Ok(()));
    }
}
