//! `disruption-controller`: the status of every PodDisruptionBudget
//! (upstream `pkg/controller/disruption/disruption.go`), which the eviction
//! API reads to allow or refuse an eviction (`kubectl drain`).
//!
//! For each budget: the pods its selector picks in its namespace (an empty
//! selector picks them all); `expectedPods` (the pods, or, for a percentage
//! `minAvailable` and for `maxUnavailable`, the replicas of the pods'
//! controllers: Deployment through its ReplicaSet, ReplicaSet,
//! ReplicationController, StatefulSet); `desiredHealthy` (`minAvailable`, or
//! expected minus `maxUnavailable`, percentages rounded up as upstream);
//! `currentHealthy` (Ready pods not being deleted and not in
//! `disruptedPods`); `disruptionsAllowed`; and the `DisruptionAllowed`
//! condition (`SufficientPods`, `InsufficientPods`, `SyncFailed`).
//! `disruptedPods` entries (written by the eviction API) are dropped once
//! their pod is being deleted or after 2 minutes (upstream's
//! `DeletionTimeout`).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::StreamExt;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{Pod, ReplicationController};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams};
use kube::core::{Selector, SelectorExt};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher;
use tokio::time::Instant;

use crate::context::ControllerContext;
use crate::work_queue::{reflected, Key, Queue, Trigger};

/// How long an eviction's `disruptedPods` entry counts (upstream's `DeletionTimeout`).
pub const DELETION_TIMEOUT: Duration = Duration::from_secs(120);

/// Starts `disruption-controller`.
pub fn start(ctx: ControllerContext) -> BoxFuture<'static, anyhow::Result<()>> {
    Box::pin(run(ctx))
}

/// The pods of `pods` that `pdb` selects (same namespace; an empty selector
/// selects all, a missing or invalid one none).
pub fn selected<'a>(pdb: &PodDisruptionBudget, pods: &'a [Arc<Pod>]) -> Vec<&'a Arc<Pod>> {
    let ns = pdb.metadata.namespace.as_deref();
    let Some(selector) = pdb.spec.as_ref().and_then(|s| s.selector.clone()) else { return Vec::new() };
    let Ok(selector) = Selector::try_from(selector) else { return Vec::new() };
    pods.iter()
        .filter(|p| p.metadata.namespace.as_deref() == ns)
        .filter(|p| selector.matches(&p.metadata.labels.clone().unwrap_or_default()))
        .collect()
}

fn is_healthy(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none()
        && pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// `value` of `total` (an int, or a percentage rounded up), as upstream's
/// `GetScaledValueFromIntOrPercent(value, total, true)`.
pub fn scaled(value: &IntOrString, total: i32) -> Result<i32, String> {
    match value {
        IntOrString::Int(n) => Ok(*n),
        IntOrString::String(s) => {
            let pct: i64 = s.strip_suffix('%').and_then(|n| n.parse().ok()).ok_or_else(|| format!("invalid value for IntOrString: invalid value {s:?}"))?;
            Ok(((pct * i64::from(total) + 99) / 100) as i32)
        }
    }
}

/// Whether `pdb` needs the pods' controllers' replicas to count expected pods.
pub fn needs_scale(pdb: &PodDisruptionBudget) -> bool {
    let spec = pdb.spec.as_ref();
    spec.and_then(|s| s.max_unavailable.as_ref()).is_some() || matches!(spec.and_then(|s| s.min_available.as_ref()), Some(IntOrString::String(_)))
}

/// The status `pdb` should have. `expected_from_controllers`: the summed
/// replicas of the selected pods' controllers (`Err` with the reason when a
/// pod has none, or a controller could not be read); used only when
/// [`needs_scale`]. `now`: for `disruptedPods` expiry and condition times.
pub fn compute_status(
    pdb: &PodDisruptionBudget,
    pods: &[&Arc<Pod>],
    expected_from_controllers: Result<i32, String>,
    now: Timestamp,
) -> PodDisruptionBudgetStatus {
    let old = pdb.status.clone().unwrap_or_default();
    let spec = pdb.spec.clone().unwrap_or_default();
    let by_name: HashMap<&str, &Arc<Pod>> = pods.iter().map(|p| (p.metadata.name.as_deref().unwrap_or_default(), *p)).collect();
    let disrupted: BTreeMap<String, Time> = old
        .disrupted_pods
        .clone()
        .unwrap_or_default()
        .into_iter()
        .filter(|(name, t)| {
            let alive = by_name.get(name.as_str()).is_some_and(|p| p.metadata.deletion_timestamp.is_none());
            let fresh = now.duration_since(t.0).as_secs_f64() < DELETION_TIMEOUT.as_secs_f64();
            alive && fresh
        })
        .collect();
    let current_healthy = pods.iter().filter(|p| is_healthy(p) && !disrupted.contains_key(p.metadata.name.as_deref().unwrap_or_default())).count() as i32;
    let counted = if needs_scale(pdb) { expected_from_controllers } else { Ok(pods.len() as i32) };
    let computed = counted.and_then(|expected| {
        let desired = match (&spec.max_unavailable, &spec.min_available) {
            (Some(max), _) => (expected - scaled(max, expected)?).max(0),
            (None, Some(min)) => scaled(min, expected)?,
            (None, None) => 1,
        };
        Ok((expected, desired))
    });
    let (expected, desired, allowed, condition) = match computed {
        Ok((expected, desired)) => {
            let allowed = (current_healthy - desired).max(0);
            let (status, reason) = if allowed > 0 { ("True", "SufficientPods") } else { ("False", "InsufficientPods") };
            (expected, desired, allowed, (status, reason, String::new()))
        }
        Err(message) => (old.expected_pods, old.desired_healthy, 0, ("False", "SyncFailed", message)),
    };
    let old_condition = old.conditions.as_ref().and_then(|cs| cs.iter().find(|c| c.type_ == "DisruptionAllowed"));
    let transition = match old_condition {
        Some(c) if c.status == condition.0 => c.last_transition_time.clone(),
        _ => Time(now),
    };
    PodDisruptionBudgetStatus {
        observed_generation: pdb.metadata.generation,
        disrupted_pods: (!disrupted.is_empty()).then_some(disrupted),
        disruptions_allowed: allowed,
        current_healthy,
        desired_healthy: desired,
        expected_pods: expected,
        conditions: Some(vec![Condition {
            type_: "DisruptionAllowed".into(),
            status: condition.0.into(),
            reason: condition.1.into(),
            message: condition.2,
            observed_generation: pdb.metadata.generation,
            last_transition_time: transition,
        }]),
    }
}

/// The summed replicas of the distinct controllers of `pods` (upstream's
/// `getExpectedScale`); `Err` when a pod has no controller or one cannot be read.
async fn expected_from_controllers(client: &kube::Client, ns: &str, pods: &[&Arc<Pod>]) -> Result<i32, String> {
    let mut seen: HashMap<String, i32> = HashMap::new();
    for pod in pods {
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        let owner = crate::pod_control::controller_of(&pod.metadata).ok_or_else(|| format!("found no controllers for pod {name:?}"))?;
        if seen.contains_key(&owner.uid) {
            continue;
        }
        let read_err = |e: kube::Error| format!("reading the controller of pod {name:?}: {e}");
        let replicas = match (owner.api_version.as_str(), owner.kind.as_str()) {
            ("apps/v1", "ReplicaSet") => {
                let rs = Api::<ReplicaSet>::namespaced(client.clone(), ns).get(&owner.name).await.map_err(read_err)?;
                match crate::pod_control::controller_of(&rs.metadata).filter(|o| o.kind == "Deployment") {
                    Some(d) => {
                        let dep = Api::<Deployment>::namespaced(client.clone(), ns).get(&d.name).await.map_err(read_err)?;
                        if seen.contains_key(&d.uid) {
                            seen.insert(owner.uid.clone(), 0);
                            continue;
                        }
                        seen.insert(d.uid.clone(), dep.spec.and_then(|s| s.replicas).unwrap_or(1));
                        seen.insert(owner.uid.clone(), 0);
                        continue;
                    }
                    None => rs.spec.and_then(|s| s.replicas).unwrap_or(1),
                }
            }
            ("v1", "ReplicationController") => {
                Api::<ReplicationController>::namespaced(client.clone(), ns).get(&owner.name).await.map_err(read_err)?.spec.and_then(|s| s.replicas).unwrap_or(1)
            }
            ("apps/v1", "StatefulSet") => {
                Api::<StatefulSet>::namespaced(client.clone(), ns).get(&owner.name).await.map_err(read_err)?.spec.and_then(|s| s.replicas).unwrap_or(1)
            }
            (_, kind) => return Err(format!("pod {name:?} is controlled by a {kind}, which has no scale rkube knows")),
        };
        seen.insert(owner.uid.clone(), replicas);
    }
    Ok(seen.values().sum())
}

fn key_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> Key {
    (meta.namespace.clone().unwrap_or_default(), meta.name.clone().unwrap_or_default())
}

async fn run(ctx: ControllerContext) -> anyhow::Result<()> {
    let client = ctx.client.clone();
    let (pdbs, pdb_w) = reflector::store::<PodDisruptionBudget>();
    let (pods, pod_w) = reflector::store::<Pod>();
    let pdbs_for_pods = pdbs.clone();
    let streams = vec![
        reflected(Api::<PodDisruptionBudget>::all(client.clone()), watcher::Config::default(), pdb_w, 0, |p: &PodDisruptionBudget| {
            vec![key_of(&p.metadata)]
        }),
        reflected(Api::<Pod>::all(client.clone()), watcher::Config::default(), pod_w, 1, move |pod: &Pod| {
            // Every budget of the pod's namespace: a pod whose labels changed
            // must leave the budgets that selected it too.
            pdbs_for_pods.state().iter().filter(|b| b.metadata.namespace == pod.metadata.namespace).map(|b| key_of(&b.metadata)).collect()
        }),
    ];
    let mut events = futures::stream::select_all(streams);
    let mut listed = [false; 2];
    let mut queue = Queue::default();
    // Budgets with `disruptedPods` entries are looked at again when those expire.
    let mut recheck: BTreeMap<Instant, Key> = BTreeMap::new();
    loop {
        let ready = listed.iter().all(|l| *l);
        let next_retry = queue.next_retry();
        let next_recheck = recheck.keys().next().copied();
        tokio::select! {
            _ = ctx.stopped() => return Ok(()),
            ev = events.next() => match ev {
                Some(Trigger::Listed(i)) => {
                    let was_ready = ready;
                    listed[i] = true;
                    if !was_ready && listed.iter().all(|l| *l) {
                        for b in pdbs.state() {
                            queue.add(key_of(&b.metadata));
                        }
                    }
                }
                Some(Trigger::Keys(keys)) => keys.into_iter().for_each(|k| queue.add(k)),
                None => anyhow::bail!("the watches ended"),
            },
            _ = tokio::time::sleep_until(next_retry.unwrap_or_else(Instant::now)), if next_retry.is_some() => queue.promote_due(),
            _ = tokio::time::sleep_until(next_recheck.unwrap_or_else(Instant::now)), if next_recheck.is_some() => {
                if let Some((_, key)) = recheck.pop_first() {
                    queue.add(key);
                }
            }
            _ = std::future::ready(()), if ready && queue.has_work() => {
                if let Some(key) = queue.pop() {
                    match sync(&client, &pdbs, &pods, &key).await {
                        Ok(Some(expiry)) => {
                            queue.forget(&key);
                            recheck.insert(Instant::now() + expiry, key);
                        }
                        Ok(None) => queue.forget(&key),
                        Err(e) => {
                            tracing::warn!(pdb = %format!("{}/{}", key.0, key.1), error = %format!("{e:#}"), "syncing PodDisruptionBudget status failed; retrying");
                            queue.retry(key);
                        }
                    }
                }
            }
        }
    }
}

/// Writes the budget's status when it changed; returns when its earliest
/// `disruptedPods` entry expires, if it has any.
async fn sync(client: &kube::Client, pdbs: &Store<PodDisruptionBudget>, pods: &Store<Pod>, (ns, name): &Key) -> anyhow::Result<Option<Duration>> {
    let Some(pdb) = pdbs.get(&ObjectRef::new(name).within(ns)) else { return Ok(None) };
    if pdb.metadata.deletion_timestamp.is_some() {
        return Ok(None);
    }
    let all = pods.state();
    let chosen = selected(&pdb, &all);
    let expected = if needs_scale(&pdb) { expected_from_controllers(client, ns, &chosen).await } else { Ok(chosen.len() as i32) };
    let now = Timestamp::now();
    let status = compute_status(&pdb, &chosen, expected, now);
    let expiry = status.disrupted_pods.as_ref().and_then(|d| {
        d.values().map(|t| DELETION_TIMEOUT.saturating_sub(Duration::from_secs_f64(now.duration_since(t.0).as_secs_f64().max(0.0)))).min()
    });
    let unchanged = pdb.status.as_ref().is_some_and(|old| {
        let mut a = old.clone();
        let mut b = status.clone();
        // Condition times alone are no change.
        for s in [&mut a, &mut b] {
            for c in s.conditions.iter_mut().flatten() {
                c.last_transition_time = Time(Timestamp::UNIX_EPOCH);
            }
        }
        a == b
    });
    if !unchanged {
        let api: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), ns);
        let patch = serde_json::json!({"status": status});
        api.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
    }
    Ok(expiry)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pdb(spec: serde_json::Value) -> PodDisruptionBudget {
        serde_json::from_value(json!({"metadata": {"name": "b", "namespace": "default", "generation": 2}, "spec": spec})).unwrap()
    }

    fn pod(name: &str, ready: bool, labels: serde_json::Value) -> Arc<Pod> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "default", "labels": labels},
                "status": {"conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]},
            }))
            .unwrap(),
        )
    }

    #[test]
    fn min_available_counts_ready_selected_pods() {
        let b = pdb(json!({"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}}));
        let pods = [pod("a", true, json!({"app": "web"})), pod("b", true, json!({"app": "web"})), pod("c", true, json!({"app": "web"})), pod("d", false, json!({"app": "web"})), pod("x", true, json!({"app": "db"}))];
        let chosen = selected(&b, &pods);
        assert_eq!(chosen.len(), 4);
        let s = compute_status(&b, &chosen, Err("unused".into()), Timestamp::now());
        assert_eq!((s.expected_pods, s.current_healthy, s.desired_healthy, s.disruptions_allowed), (4, 3, 2, 1));
        assert_eq!(s.observed_generation, Some(2));
        let c = &s.conditions.unwrap()[0];
        assert_eq!((c.type_.as_str(), c.status.as_str(), c.reason.as_str()), ("DisruptionAllowed", "True", "SufficientPods"));
    }

    #[test]
    fn max_unavailable_and_percentages_use_the_controllers_scale_rounded_up() {
        let b = pdb(json!({"maxUnavailable": "25%", "selector": {}}));
        let pods = [pod("a", true, json!({})), pod("b", true, json!({}))];
        let chosen = selected(&b, &pods);
        assert_eq!(chosen.len(), 2, "an empty selector selects every pod of the namespace");
        // 25% of 3 rounds up to 1 unavailable: desired 2, healthy 2, none allowed.
        let s = compute_status(&b, &chosen, Ok(3), Timestamp::now());
        assert_eq!((s.expected_pods, s.desired_healthy, s.disruptions_allowed), (3, 2, 0));
        assert_eq!(s.conditions.unwrap()[0].reason, "InsufficientPods");
        let failed = compute_status(&b, &chosen, Err("found no controllers for pod \"a\"".into()), Timestamp::now());
        let c = &failed.conditions.unwrap()[0];
        assert_eq!((c.status.as_str(), c.reason.as_str(), failed.disruptions_allowed), ("False", "SyncFailed", 0));
        assert_eq!(scaled(&IntOrString::String("50%".into()), 3), Ok(2));
        assert!(scaled(&IntOrString::String("x".into()), 3).is_err());
    }

    #[test]
    fn disrupted_pods_do_not_count_until_they_expire() {
        let now = Timestamp::now();
        let mut b = pdb(json!({"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}}));
        let recent = Time(now - std::time::Duration::from_secs(10));
        let old = Time(now - std::time::Duration::from_secs(300));
        b.status = Some(PodDisruptionBudgetStatus {
            disrupted_pods: Some(BTreeMap::from([("a".to_string(), recent), ("b".to_string(), old)])),
            ..Default::default()
        });
        let pods = [pod("a", true, json!({"app": "web"})), pod("b", true, json!({"app": "web"}))];
        let s = compute_status(&b, &selected(&b, &pods), Ok(0), now);
        assert_eq!(s.disrupted_pods.as_ref().map(|d| d.keys().cloned().collect::<Vec<_>>()), Some(vec!["a".to_string()]));
        assert_eq!((s.current_healthy, s.disruptions_allowed), (1, 0));
    }
}
