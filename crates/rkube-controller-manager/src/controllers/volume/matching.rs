//! Which PersistentVolume a claim binds to, as upstream's
//! `pkg/controller/volume/persistentvolume/index.go` (`findBestMatchForClaim`)
//! and `component-helpers/storage/volume` (`FindMatchingVolume`,
//! `CheckVolumeModeMismatches`, `IsVolumeBoundToClaim`).
//!
//! A volume satisfies a claim when its storage class equals the claim's,
//! it offers every access mode the claim asks for, its capacity is at
//! least the claim's `resources.requests.storage`, its volume mode equals
//! the claim's (`Filesystem` by default) and its labels match the claim's
//! `selector`. Among Available volumes that satisfy a claim the smallest
//! wins; a volume pre-bound to the claim (`spec.claimRef`) wins outright.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::ResourceExt;

/// `pv.kubernetes.io/bind-completed`: the claim's binding finished.
pub const ANN_BIND_COMPLETED: &str = "pv.kubernetes.io/bind-completed";
/// `pv.kubernetes.io/bound-by-controller`: the binder (not a user) set the
/// volume's `claimRef` or the claim's `volumeName`.
pub const ANN_BOUND_BY_CONTROLLER: &str = "pv.kubernetes.io/bound-by-controller";
/// `volume.kubernetes.io/selected-node`: the node the scheduler chose for
/// the first pod of a `WaitForFirstConsumer` claim.
pub const ANN_SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
/// `volume.kubernetes.io/storage-provisioner`: the provisioner expected to
/// create the claim's volume.
pub const ANN_STORAGE_PROVISIONER: &str = "volume.kubernetes.io/storage-provisioner";
/// The beta spelling of [`ANN_STORAGE_PROVISIONER`], still written by upstream.
pub const ANN_BETA_STORAGE_PROVISIONER: &str = "volume.beta.kubernetes.io/storage-provisioner";
/// `pv.kubernetes.io/provisioned-by`: the provisioner that created a volume.
pub const ANN_PROVISIONED_BY: &str = "pv.kubernetes.io/provisioned-by";
/// The beta storage class annotation, read before `spec.storageClassName`.
pub const ANN_BETA_STORAGE_CLASS: &str = "volume.beta.kubernetes.io/storage-class";

/// The storage class of a claim (`""` for none): the beta annotation, else
/// `spec.storageClassName`.
pub fn claim_class(claim: &PersistentVolumeClaim) -> String {
    if let Some(c) = claim.annotations().get(ANN_BETA_STORAGE_CLASS) {
        return c.clone();
    }
    claim.spec.as_ref().and_then(|s| s.storage_class_name.clone()).unwrap_or_default()
}

/// The storage class of a volume (`""` for none), read as [`claim_class`].
pub fn volume_class(pv: &PersistentVolume) -> String {
    if let Some(c) = pv.annotations().get(ANN_BETA_STORAGE_CLASS) {
        return c.clone();
    }
    pv.spec.as_ref().and_then(|s| s.storage_class_name.clone()).unwrap_or_default()
}

/// The claim's storage request in thousandths of a byte (0 when unset or unparsable).
pub fn claim_request(claim: &PersistentVolumeClaim) -> i128 {
    claim
        .spec
        .as_ref()
        .and_then(|s| s.resources.as_ref())
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"))
        .and_then(|q| rkube_scheduler::resources::parse_milli(&q.0))
        .unwrap_or(0)
}

/// The volume's capacity in thousandths of a byte (0 when unset or unparsable).
pub fn volume_capacity(pv: &PersistentVolume) -> i128 {
    pv.spec
        .as_ref()
        .and_then(|s| s.capacity.as_ref())
        .and_then(|c| c.get("storage"))
        .and_then(|q| rkube_scheduler::resources::parse_milli(&q.0))
        .unwrap_or(0)
}

/// The volume's phase (`""` when it has no status yet).
pub fn volume_phase(pv: &PersistentVolume) -> &str {
    pv.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("")
}

/// The claim's phase (`""` when it has no status yet).
pub fn claim_phase(claim: &PersistentVolumeClaim) -> &str {
    claim.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("")
}

/// The claim's `spec.volumeName` (`""` when unset).
pub fn claim_volume_name(claim: &PersistentVolumeClaim) -> &str {
    claim.spec.as_ref().and_then(|s| s.volume_name.as_deref()).unwrap_or("")
}

/// Whether `pv.spec.claimRef` names `claim` (namespace and name, and its
/// UID when the reference has one: upstream's `IsVolumeBoundToClaim`).
pub fn is_volume_bound_to_claim(pv: &PersistentVolume, claim: &PersistentVolumeClaim) -> bool {
    let Some(r) = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref()) else { return false };
    if r.name.as_deref() != claim.metadata.name.as_deref() || r.namespace.as_deref() != claim.metadata.namespace.as_deref() {
        return false;
    }
    match r.uid.as_deref() {
        None | Some("") => true,
        Some(uid) => claim.metadata.uid.as_deref() == Some(uid),
    }
}

/// Why `pv` cannot hold `claim`, in upstream's words
/// (`checkVolumeSatisfyClaim`), or `Ok` when it can.
pub fn check_volume_satisfies_claim(pv: &PersistentVolume, claim: &PersistentVolumeClaim) -> Result<(), String> {
    if volume_capacity(pv) < claim_request(claim) {
        return Err("requested PV is too small".into());
    }
    if volume_class(pv) != claim_class(claim) {
        return Err("storageClassName does not match".into());
    }
    if volume_mode(pv.spec.as_ref().and_then(|s| s.volume_mode.as_deref()))
        != volume_mode(claim.spec.as_ref().and_then(|s| s.volume_mode.as_deref()))
    {
        return Err("incompatible volumeMode".into());
    }
    if !has_access_modes(pv, claim) {
        return Err("incompatible accessMode".into());
    }
    Ok(())
}

fn volume_mode(m: Option<&str>) -> &str {
    m.unwrap_or("Filesystem")
}

fn has_access_modes(pv: &PersistentVolume, claim: &PersistentVolumeClaim) -> bool {
    let offered = pv.spec.as_ref().and_then(|s| s.access_modes.as_deref()).unwrap_or(&[]);
    claim.spec.as_ref().and_then(|s| s.access_modes.as_deref()).unwrap_or(&[]).iter().all(|m| offered.contains(m))
}

fn selector_matches(pv: &PersistentVolume, claim: &PersistentVolumeClaim) -> bool {
    match claim.spec.as_ref().and_then(|s| s.selector.as_ref()) {
        None => true,
        Some(sel) => rkube_scheduler::plugins::selectors::label_selector_matches(sel, pv.labels()),
    }
}

/// Whether `pv`'s `spec.nodeAffinity.required` admits the node with `labels`
/// and `name` (a volume without node affinity is reachable from every node).
pub fn volume_fits_node(pv: &PersistentVolume, labels: &BTreeMap<String, String>, name: &str) -> bool {
    let Some(required) = pv.spec.as_ref().and_then(|s| s.node_affinity.as_ref()).and_then(|a| a.required.as_ref()) else {
        return true;
    };
    required.node_selector_terms.iter().any(|t| rkube_scheduler::plugins::selectors::node_selector_term_matches(t, labels, name))
}

/// The node a match is made for: `(name, labels)`.
pub type NodeRef<'a> = (&'a str, &'a BTreeMap<String, String>);

/// The volume of `volumes` `claim` should bind to (upstream's
/// `FindMatchingVolume`): a volume pre-bound to it (if it satisfies it),
/// else the smallest Available, unclaimed, not deleted volume that satisfies
/// it (and, with `node`, whose node affinity admits that node). With
/// `delay_binding` and no `node` only a pre-bound volume is returned.
pub fn find_best_match(
    claim: &PersistentVolumeClaim,
    volumes: &[Arc<PersistentVolume>],
    delay_binding: bool,
    node: Option<NodeRef<'_>>,
) -> Option<Arc<PersistentVolume>> {
    let mut best: Option<&Arc<PersistentVolume>> = None;
    for pv in volumes {
        if pv.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let claimed = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref()).is_some();
        if claimed {
            if is_volume_bound_to_claim(pv, claim) && check_volume_satisfies_claim(pv, claim).is_ok() && selector_matches(pv, claim) {
                return Some(Arc::clone(pv));
            }
            continue;
        }
        if volume_phase(pv) != "Available" || (delay_binding && node.is_none()) {
            continue;
        }
        if let Some((name, labels)) = node {
            if !volume_fits_node(pv, labels, name) {
                continue;
            }
        }
        if check_volume_satisfies_claim(pv, claim).is_err() || !selector_matches(pv, claim) {
            continue;
        }
        if best.is_none_or(|b| volume_capacity(pv) < volume_capacity(b)) {
            best = Some(pv);
        }
    }
    best.cloned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pv(name: &str, size: &str, extra: serde_json::Value) -> Arc<PersistentVolume> {
        let mut v = json!({
            "metadata": {"name": name, "labels": {"tier": "fast"}},
            "spec": {"capacity": {"storage": size}, "accessModes": ["ReadWriteOnce"], "hostPath": {"path": "/x"}},
            "status": {"phase": "Available"},
        });
        merge(&mut v, extra);
        Arc::new(serde_json::from_value(v).unwrap())
    }

    fn pvc(size: &str, extra: serde_json::Value) -> PersistentVolumeClaim {
        let mut v = json!({
            "metadata": {"name": "data", "namespace": "ns", "uid": "u1"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}},
        });
        merge(&mut v, extra);
        serde_json::from_value(v).unwrap()
    }

    fn merge(a: &mut serde_json::Value, b: serde_json::Value) {
        match (a, b) {
            (serde_json::Value::Object(a), serde_json::Value::Object(b)) => {
                for (k, v) in b {
                    merge(a.entry(k).or_insert(serde_json::Value::Null), v);
                }
            }
            (a, b) => *a = b,
        }
    }

    fn matched(claim: &PersistentVolumeClaim, vols: &[Arc<PersistentVolume>]) -> Option<String> {
        find_best_match(claim, vols, false, None).map(|v| v.name_any())
    }

    #[test]
    fn the_smallest_available_volume_that_is_big_enough_wins() {
        let vols = [pv("big", "10Gi", json!({})), pv("small", "1Gi", json!({})), pv("mid", "2Gi", json!({})), pv("tiny", "500Mi", json!({}))];
        assert_eq!(matched(&pvc("1Gi", json!({})), &vols).as_deref(), Some("small"));
        assert_eq!(matched(&pvc("1500Mi", json!({})), &vols).as_deref(), Some("mid"));
        assert_eq!(matched(&pvc("20Gi", json!({})), &vols), None);
    }

    #[test]
    fn class_access_modes_volume_mode_and_selector_must_match() {
        let vols = [
            pv("classy", "1Gi", json!({"spec": {"storageClassName": "gold"}})),
            pv("rox", "1Gi", json!({"spec": {"accessModes": ["ReadOnlyMany"]}})),
            pv("block", "1Gi", json!({"spec": {"volumeMode": "Block"}})),
            pv("plain", "5Gi", json!({"metadata": {"labels": {"tier": "slow"}}})),
        ];
        assert_eq!(matched(&pvc("1Gi", json!({"spec": {"storageClassName": "gold"}})), &vols).as_deref(), Some("classy"));
        assert_eq!(matched(&pvc("1Gi", json!({"spec": {"accessModes": ["ReadOnlyMany"]}})), &vols).as_deref(), Some("rox"));
        assert_eq!(matched(&pvc("1Gi", json!({"spec": {"volumeMode": "Block"}})), &vols).as_deref(), Some("block"));
        assert_eq!(matched(&pvc("1Gi", json!({})), &vols).as_deref(), Some("plain"));
        let fast = pvc("1Gi", json!({"spec": {"selector": {"matchLabels": {"tier": "fast"}}}}));
        assert_eq!(matched(&fast, &vols[3..]), None);
        assert_eq!(
            check_volume_satisfies_claim(&vols[0], &pvc("1Gi", json!({}))).unwrap_err(),
            "storageClassName does not match"
        );
        assert_eq!(check_volume_satisfies_claim(&vols[0], &pvc("2Gi", json!({}))).unwrap_err(), "requested PV is too small");
    }

    #[test]
    fn claimed_released_or_deleted_volumes_are_skipped_but_a_pre_bound_one_wins() {
        let other = json!({"spec": {"claimRef": {"namespace": "ns", "name": "other"}}});
        let mine = json!({"spec": {"claimRef": {"namespace": "ns", "name": "data", "uid": "u1"}}, "status": {"phase": "Available"}});
        let vols = [
            pv("small-other", "1Gi", other),
            pv("released", "1Gi", json!({"status": {"phase": "Released"}})),
            pv("deleting", "1Gi", json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}})),
            pv("big-mine", "9Gi", mine),
            pv("mid", "2Gi", json!({})),
        ];
        assert_eq!(matched(&pvc("1Gi", json!({})), &vols).as_deref(), Some("big-mine"));
        assert_eq!(matched(&pvc("1Gi", json!({})), &vols[..3]), None);
        let stale = pv("stale", "1Gi", json!({"spec": {"claimRef": {"namespace": "ns", "name": "data", "uid": "old"}}}));
        assert_eq!(matched(&pvc("1Gi", json!({})), &[stale]), None);
    }

    #[test]
    fn delayed_binding_matches_only_for_a_node_the_volume_reaches() {
        let affinity = json!({"spec": {"nodeAffinity": {"required": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["n1"]}]}
        ]}}}});
        let vols = [pv("local", "1Gi", affinity)];
        let claim = pvc("1Gi", json!({}));
        assert_eq!(find_best_match(&claim, &vols, true, None), None);
        let n1: BTreeMap<String, String> = [("kubernetes.io/hostname".to_string(), "n1".to_string())].into();
        let n2: BTreeMap<String, String> = [("kubernetes.io/hostname".to_string(), "n2".to_string())].into();
        assert_eq!(find_best_match(&claim, &vols, true, Some(("n1", &n1))).map(|v| v.name_any()).as_deref(), Some("local"));
        assert_eq!(find_best_match(&claim, &vols, true, Some(("n2", &n2))), None);
    }
}
