//! The pure helpers of the Deployment controller, after upstream's
//! `pkg/controller/deployment/util/deployment_util.go`: the pod-template
//! hash, maxSurge/maxUnavailable resolution, revision and replica
//! annotations, and the replica arithmetic of rolling updates.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::Value;

/// Label (and RS name suffix) telling the ReplicaSets of a Deployment apart.
pub const POD_TEMPLATE_HASH: &str = "pod-template-hash";
/// Revision of a ReplicaSet (and of its Deployment: the newest one's).
pub const REVISION: &str = "deployment.kubernetes.io/revision";
/// Earlier revisions a reused ReplicaSet had, comma separated.
pub const REVISION_HISTORY: &str = "deployment.kubernetes.io/revision-history";
/// `spec.replicas` of the Deployment when the ReplicaSet was last scaled.
pub const DESIRED_REPLICAS: &str = "deployment.kubernetes.io/desired-replicas";
/// `spec.replicas + maxSurge` of the Deployment when the ReplicaSet was last scaled.
pub const MAX_REPLICAS: &str = "deployment.kubernetes.io/max-replicas";
/// kubectl's deprecated rollback request.
pub const ROLLBACK_TO: &str = "deprecated.deployment.rollback.to";
/// kubectl's last applied configuration (never copied to ReplicaSets).
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Upstream's `SafeEncodeString` alphabet (no vowels, no 0/1/3).
const ALPHANUMS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// FNV-1a, 32 bits.
pub fn fnv32a(data: &[u8]) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in data {
        h ^= u32::from(*b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

/// Maps every byte of `s` into [`ALPHANUMS`] (upstream's `rand.SafeEncodeString`).
pub fn safe_encode(s: &str) -> String {
    s.bytes().map(|b| char::from(ALPHANUMS[usize::from(b) % ALPHANUMS.len()])).collect()
}

/// The `pod-template-hash` of `template` and `collision_count`: FNV-32a,
/// rendered in decimal and then [`safe_encode`]d as upstream's
/// `ComputeHash`. Upstream hashes Go's deep printing of the struct; rkube
/// hashes the template's canonical JSON (sorted keys), so the value is
/// stable but differs from kube-controller-manager's for the same template.
pub fn compute_hash(template: &PodTemplateSpec, collision_count: Option<i32>) -> String {
    let mut bytes = canonical(template).to_string().into_bytes();
    if let Some(c) = collision_count {
        bytes.extend_from_slice(&c.to_le_bytes());
    }
    safe_encode(&fnv32a(&bytes).to_string())
}

/// Whether two templates are equal once `pod-template-hash` is ignored
/// (upstream's `EqualIgnoreHash`).
pub fn equal_ignore_hash(a: &PodTemplateSpec, b: &PodTemplateSpec) -> bool {
    canonical(a) == canonical(b)
}

/// The template as JSON without `pod-template-hash` and without the values
/// Go's `omitempty` drops (`null`, `false`, `""`, empty lists and maps), so
/// a template read back from a client that leaves them out compares equal
/// (upstream compares typed structs, where absent and zero are the same).
fn canonical(t: &PodTemplateSpec) -> Value {
    fn prune(v: Value) -> Option<Value> {
        match v {
            Value::Null | Value::Bool(false) => None,
            Value::String(s) if s.is_empty() => None,
            Value::Array(a) => {
                let a: Vec<Value> = a.into_iter().map(|x| prune(x).unwrap_or(Value::Null)).collect();
                (!a.is_empty()).then_some(Value::Array(a))
            }
            Value::Object(m) => {
                let m: serde_json::Map<String, Value> = m.into_iter().filter_map(|(k, x)| prune(x).map(|x| (k, x))).collect();
                (!m.is_empty()).then_some(Value::Object(m))
            }
            other => Some(other),
        }
    }
    let mut v = serde_json::to_value(t).unwrap_or(Value::Null);
    if let Some(labels) = v.pointer_mut("/metadata/labels").and_then(Value::as_object_mut) {
        labels.remove(POD_TEMPLATE_HASH);
    }
    prune(v).unwrap_or(Value::Null)
}

/// `value` resolved against `total`: an int as is, a percent of `total`
/// rounded up or down (upstream's `GetScaledValueFromIntOrPercent`).
/// Errors: a string that is not `N%`.
pub fn scaled_value(value: &IntOrString, total: i32, round_up: bool) -> Result<i32, String> {
    match value {
        IntOrString::Int(i) => Ok(*i),
        IntOrString::String(s) => {
            let pct: i64 = s
                .strip_suffix('%')
                .and_then(|n| n.parse().ok())
                .ok_or_else(|| format!("invalid value for IntOrString: invalid value {s:?}"))?;
            let prod = pct * i64::from(total);
            let v = if round_up { (prod + 99).div_euclid(100) } else { prod.div_euclid(100) };
            i32::try_from(v).map_err(|_| format!("value {s:?} is out of range"))
        }
    }
}

/// `spec.replicas` (default 1).
pub fn replicas(d: &Deployment) -> i32 {
    d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
}

/// Whether the strategy is `RollingUpdate` (the default).
pub fn is_rolling(d: &Deployment) -> bool {
    d.spec.as_ref().and_then(|s| s.strategy.as_ref()).and_then(|s| s.type_.as_deref()).unwrap_or("RollingUpdate") == "RollingUpdate"
}

/// `(maxSurge, maxUnavailable)` of a rolling Deployment for `desired`
/// replicas: surge rounds up, unavailable down, and both 0 becomes
/// unavailable 1 (upstream's `ResolveFenceposts`; defaults 25%/25%).
pub fn fenceposts(d: &Deployment, desired: i32) -> (i32, i32) {
    let ru = d.spec.as_ref().and_then(|s| s.strategy.as_ref()).and_then(|s| s.rolling_update.as_ref());
    let pct = || IntOrString::String("25%".into());
    let surge_v = ru.and_then(|r| r.max_surge.clone()).unwrap_or_else(pct);
    let unav_v = ru.and_then(|r| r.max_unavailable.clone()).unwrap_or_else(pct);
    let surge = scaled_value(&surge_v, desired, true).unwrap_or(0);
    let mut unavailable = scaled_value(&unav_v, desired, false).unwrap_or(0);
    if surge == 0 && unavailable == 0 {
        unavailable = 1;
    }
    (surge, unavailable)
}

/// maxSurge for the Deployment's replicas (0 unless rolling).
pub fn max_surge(d: &Deployment) -> i32 {
    if !is_rolling(d) {
        return 0;
    }
    fenceposts(d, replicas(d)).0
}

/// maxUnavailable, at most `spec.replicas` (0 unless rolling or when scaled to 0).
pub fn max_unavailable(d: &Deployment) -> i32 {
    let desired = replicas(d);
    if !is_rolling(d) || desired == 0 {
        return 0;
    }
    fenceposts(d, desired).1.min(desired)
}

/// `spec.replicas` of a ReplicaSet (default 1).
pub fn rs_replicas(rs: &ReplicaSet) -> i32 {
    rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
}

/// `status.replicas`, `status.readyReplicas`, `status.availableReplicas`.
pub fn rs_status(rs: &ReplicaSet) -> (i32, i32, i32) {
    rs.status.as_ref().map(|s| (s.replicas, s.ready_replicas.unwrap_or(0), s.available_replicas.unwrap_or(0))).unwrap_or((0, 0, 0))
}

/// An integer annotation of `rs`.
pub fn int_annotation(rs: &ReplicaSet, key: &str) -> Option<i64> {
    rs.metadata.annotations.as_ref()?.get(key)?.parse().ok()
}

/// The revision of `rs` (0 when unset or invalid).
pub fn revision(rs: &ReplicaSet) -> i64 {
    int_annotation(rs, REVISION).unwrap_or(0)
}

/// The highest revision among `rss`.
pub fn max_revision<'a>(rss: impl IntoIterator<Item = &'a ReplicaSet>) -> i64 {
    rss.into_iter().map(revision).max().unwrap_or(0)
}

/// The Deployment annotations copied onto its ReplicaSets: all but the
/// controller's own and kubectl's last-applied configuration (upstream's
/// `skipCopyAnnotation`).
pub fn copyable_annotations(d: &Deployment) -> BTreeMap<String, String> {
    let skip = [LAST_APPLIED, REVISION, REVISION_HISTORY, DESIRED_REPLICAS, MAX_REPLICAS, ROLLBACK_TO];
    d.metadata.annotations.clone().unwrap_or_default().into_iter().filter(|(k, _)| !skip.contains(&k.as_str())).collect()
}

/// Annotations of the new ReplicaSet after a sync at `new_revision`:
/// the Deployment's copyable ones, the revision raised to `new_revision`
/// (recording the old one in the history), and the replica annotations
/// (upstream's `SetNewReplicaSetAnnotations`).
pub fn new_rs_annotations(d: &Deployment, rs: &ReplicaSet, new_revision: i64, exists: bool) -> BTreeMap<String, String> {
    let mut a = rs.metadata.annotations.clone().unwrap_or_default();
    a.extend(copyable_annotations(d));
    let old = a.get(REVISION).and_then(|r| r.parse::<i64>().ok());
    if old.is_none_or(|o| o < new_revision) {
        a.insert(REVISION.into(), new_revision.to_string());
        if let Some(o) = old.filter(|o| *o > 0) {
            let history = match a.get(REVISION_HISTORY) {
                Some(h) if !h.is_empty() => format!("{h},{o}"),
                _ => o.to_string(),
            };
            a.insert(REVISION_HISTORY.into(), history);
        }
    }
    if !exists {
        a.insert(DESIRED_REPLICAS.into(), replicas(d).to_string());
        a.insert(MAX_REPLICAS.into(), (replicas(d) + max_surge(d)).to_string());
    }
    a
}

/// Replicas the new ReplicaSet should have now (upstream's `NewRSNewReplicas`):
/// for Recreate all of them; for RollingUpdate as many more as maxSurge
/// leaves room for above the pods all ReplicaSets ask for.
pub fn new_rs_new_replicas(d: &Deployment, all_spec_replicas: i32, new_rs_replicas: i32) -> i32 {
    let desired = replicas(d);
    if !is_rolling(d) {
        return desired;
    }
    let max_total = desired + max_surge(d);
    if all_spec_replicas >= max_total {
        return new_rs_replicas;
    }
    let up = (max_total - all_spec_replicas).min(desired - new_rs_replicas);
    new_rs_replicas + up.max(0)
}

/// One old ReplicaSet as the scale-down plan sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OldRs {
    /// Name.
    pub name: String,
    /// `spec.replicas`.
    pub replicas: i32,
    /// `status.availableReplicas`.
    pub available: i32,
}

/// How far old ReplicaSets (oldest first) scale down in one rolling step
/// (upstream's `reconcileOldReplicaSets`: first unhealthy replicas, then
/// healthy ones while availability stays at or above
/// `replicas - maxUnavailable`). Returns `(name, new replicas)` per change.
pub fn plan_old_scale_down(d: &Deployment, old: &[OldRs], new_rs: Option<(i32, i32)>) -> Vec<(String, i32)> {
    let old_count: i32 = old.iter().map(|r| r.replicas).sum();
    if old_count == 0 {
        return vec![];
    }
    let (new_spec, new_available) = new_rs.unwrap_or((0, 0));
    let all_count = old_count + new_spec;
    let min_available = replicas(d) - max_unavailable(d);
    let new_unavailable = new_spec - new_available;
    let max_scaled_down = all_count - min_available - new_unavailable;
    if max_scaled_down <= 0 {
        return vec![];
    }
    let mut sizes: Vec<OldRs> = old.to_vec();
    let mut changes: BTreeMap<String, i32> = BTreeMap::new();
    // Unhealthy replicas first.
    let mut cleaned = 0;
    for rs in sizes.iter_mut() {
        if cleaned >= max_scaled_down {
            break;
        }
        if rs.replicas == 0 {
            continue;
        }
        let unhealthy = rs.replicas - rs.available;
        if unhealthy <= 0 {
            continue;
        }
        let down = (max_scaled_down - cleaned).min(unhealthy);
        rs.replicas -= down;
        cleaned += down;
        changes.insert(rs.name.clone(), rs.replicas);
    }
    // Then healthy ones, keeping minAvailable.
    let available: i32 = old.iter().map(|r| r.available).sum::<i32>() + new_available;
    if available > min_available {
        let total = available - min_available;
        let mut done = 0;
        for rs in sizes.iter_mut() {
            if done >= total {
                break;
            }
            if rs.replicas == 0 {
                continue;
            }
            let down = rs.replicas.min(total - done);
            rs.replicas -= down;
            done += down;
            changes.insert(rs.name.clone(), rs.replicas);
        }
    }
    old.iter().filter_map(|o| changes.get(&o.name).filter(|n| **n != o.replicas).map(|n| (o.name.clone(), *n))).collect()
}

/// One active ReplicaSet as proportional scaling sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveRs {
    /// Name.
    pub name: String,
    /// `spec.replicas`.
    pub replicas: i32,
    /// The `max-replicas` annotation, if any.
    pub max_replicas: Option<i32>,
    /// Creation order key (smaller is older).
    pub created: i64,
}

/// Proportional scaling of several live ReplicaSets when the Deployment is
/// resized mid-rollout (upstream's `scale` for RollingUpdate): the extra or
/// missing replicas are shared by each ReplicaSet's fraction of the
/// previous size (`max-replicas`, else `status_replicas`), rounded, and the
/// leftover goes to the largest. Returns the new size per name.
pub fn proportional_sizes(d: &Deployment, live: &[LiveRs], status_replicas: i32) -> Vec<(String, i32)> {
    let desired = replicas(d);
    let surge = max_surge(d);
    let current: i32 = live.iter().map(|r| r.replicas).sum();
    let allowed = if desired > 0 { desired + surge } else { 0 };
    let to_add = allowed - current;
    let mut order: Vec<&LiveRs> = live.iter().collect();
    if to_add > 0 {
        // Larger first; newer first on ties.
        order.sort_by(|a, b| b.replicas.cmp(&a.replicas).then(b.created.cmp(&a.created)));
    } else {
        // Larger first; older first on ties.
        order.sort_by(|a, b| b.replicas.cmp(&a.replicas).then(a.created.cmp(&b.created)));
    }
    let mut added = 0;
    let mut sizes: Vec<(String, i32)> = Vec::new();
    for rs in &order {
        let mut proportion = 0;
        if to_add != 0 && rs.replicas != 0 && to_add != added {
            let fraction = if desired == 0 {
                -rs.replicas
            } else {
                let annotated = rs.max_replicas.unwrap_or(status_replicas);
                if annotated == 0 {
                    0
                } else {
                    let size = f64::from(rs.replicas) * f64::from(desired + surge) / f64::from(annotated);
                    size.round() as i32 - rs.replicas
                }
            };
            let left = to_add - added;
            proportion = if to_add > 0 { fraction.min(left) } else { fraction.max(left) };
        }
        added += proportion;
        sizes.push((rs.name.clone(), rs.replicas + proportion));
    }
    if to_add != added {
        if let Some(first) = sizes.first_mut() {
            first.1 = (first.1 + to_add - added).max(0);
        }
    }
    sizes
}

#[cfg(test)]
mod tests;
