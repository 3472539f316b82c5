//! One DaemonSet sync: claim pods, settle the revision, apply the
//! [`plan`](super::plan), report status, trim history (upstream's
//! `syncDaemonSet`).

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet};
use k8s_openapi::api::core::v1::{Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use serde_json::{json, Value};

use super::plan::{self, DaemonPod, NodeFit, Rolling, Why};
use super::{selector, State};
use crate::controllers::deployment::util::scaled_value;
use crate::controllers::replicaset::api_message;
use crate::controllers::replicaset::status::slow_start_batches;
use crate::expectations::Seen;
use crate::history;
use crate::pod_control;
use crate::pod_util;

/// Syncs `ds` once. Errors: the API server's (the sync is retried).
pub async fn sync_daemon_set(ds: &DaemonSet, state: &State) -> Result<Action, kube::Error> {
    let Some(owner) = pod_control::controller_ref(ds) else { return Ok(Action::await_change()) };
    let ns = ds.namespace().unwrap_or_default();
    let name = ds.name_any();
    let key = format!("{ns}/{name}");
    let spec = ds.spec.clone().unwrap_or_default();
    let deleting = ds.meta().deletion_timestamp.is_some();
    let pods_api: Api<Pod> = Api::namespaced(state.client.clone(), &ns);

    let in_ns: Vec<Pod> = state.pods.state().iter().filter(|p| p.namespace().as_deref() == Some(ns.as_str())).map(|p| p.as_ref().clone()).collect();
    let sel = selector(ds);
    let candidates: Vec<&Pod> = in_ns.iter().collect();
    let mine = pod_control::claim_pods(&pods_api, &owner, deleting, sel.as_ref(), &candidates).await?;

    // The revision of the template now; its hash labels the pods made from it.
    let rev_api: Api<ControllerRevision> = Api::namespaced(state.client.clone(), &ns);
    let existing = history::owned(&state.revisions.state(), &owner.uid);
    let template = serde_json::to_value(&spec.template).unwrap_or(Value::Null);
    let template_labels = spec.template.metadata.as_ref().and_then(|m| m.labels.clone()).unwrap_or_default();
    let status = ds.status.clone().unwrap_or_default();
    let settled = history::ensure(&rev_api, &owner, &template_labels, &template, &existing, status.collision_count.unwrap_or(0)).await?;
    let hash = settled.update.labels().get(history::HASH_LABEL).cloned().unwrap_or_default();

    let mut pod_spec: PodSpec = spec.template.spec.clone().unwrap_or_default();
    plan::add_daemon_tolerations(&mut pod_spec);
    let nodes: Vec<NodeFit> = state
        .nodes
        .state()
        .iter()
        .map(|n| {
            let taints = n.spec.as_ref().and_then(|s| s.taints.clone()).unwrap_or_default();
            NodeFit { name: n.name_any(), fit: plan::fit(&pod_spec, &n.name_any(), n.labels(), &taints) }
        })
        .collect();
    let min_ready = spec.min_ready_seconds.unwrap_or(0);
    let now = Timestamp::now();
    let mut ordered: Vec<&Pod> = mine.iter().collect();
    ordered.sort_by_key(|p| (p.metadata.creation_timestamp.clone().map(|t| t.0), p.name_any()));
    let views: Vec<DaemonPod> = ordered
        .iter()
        .enumerate()
        .map(|(age_rank, p)| {
            let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
            let ready = pod_util::is_ready(p);
            DaemonPod {
                name: p.name_any(),
                node: p.spec.as_ref().and_then(plan::target_node).unwrap_or_default(),
                updated: is_pod_updated(ds, p, &hash),
                terminating: p.metadata.deletion_timestamp.is_some(),
                failed: phase == Some("Failed"),
                succeeded: phase == Some("Succeeded"),
                ready,
                available: ready && pod_util::is_available(p, min_ready, now),
                age_rank,
            }
        })
        .collect();
    let counts = plan::count(&nodes, &views);

    let seen = in_ns.iter().map(|p| Seen {
        name: p.metadata.name.as_deref().unwrap_or(""),
        uid: p.metadata.uid.as_deref().unwrap_or(""),
        terminating: p.metadata.deletion_timestamp.is_some(),
    });
    if !deleting && state.expectations.satisfied(&key, seen) {
        let rolling = rolling(ds, counts.desired);
        let steps = plan::plan(&nodes, &views, rolling);
        let regarding = pod_control::object_ref(ds);
        delete_pods(&steps.delete, &mine, &key, &pods_api, state, &regarding).await?;
        create_pods(ds, &owner, &pod_spec, &hash, &steps.create_on, &key, &pods_api, state, &regarding).await?;
    }

    let next = json!({
        "observedGeneration": ds.meta().generation.unwrap_or(0),
        "desiredNumberScheduled": counts.desired,
        "currentNumberScheduled": counts.current,
        "numberMisscheduled": counts.misscheduled,
        "numberReady": counts.ready,
        "numberAvailable": counts.available,
        "numberUnavailable": counts.unavailable(),
        "updatedNumberScheduled": counts.updated,
        "collisionCount": settled.collision_count,
    });
    let before = serde_json::to_value(&status).unwrap_or(Value::Null);
    let changed = next.as_object().is_some_and(|m| m.iter().any(|(k, v)| before.get(k).unwrap_or(&json!(0)) != v));
    if changed && !deleting {
        let api: Api<DaemonSet> = Api::namespaced(state.client.clone(), &ns);
        match api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&json!({"status": next}))).await {
            Ok(_) => {}
            Err(e) if pod_control::is_not_found(&e) => return Ok(Action::await_change()),
            Err(e) => return Err(e),
        }
    }

    // History: keep the revisions live pods were made from, and `revisionHistoryLimit` more.
    let pod_hashes: BTreeSet<String> = mine.iter().filter_map(|p| p.labels().get(history::POD_REVISION_LABEL).cloned()).collect();
    let all = history::owned(&state.revisions.state(), &owner.uid);
    let mut live: Vec<String> =
        all.iter().filter(|r| r.labels().get(history::HASH_LABEL).is_some_and(|h| pod_hashes.contains(h))).map(|r| r.name_any()).collect();
    live.push(settled.update.name_any());
    history::truncate(&rev_api, &all, &live, spec.revision_history_limit.unwrap_or(history::DEFAULT_HISTORY_LIMIT)).await?;

    if min_ready > 0 && views.iter().any(|v| v.ready && !v.available) {
        return Ok(Action::requeue(Duration::from_secs(u64::try_from(min_ready).unwrap_or(1))));
    }
    Ok(Action::requeue(Duration::from_secs(300)))
}

/// `maxSurge` and `maxUnavailable` of a `RollingUpdate` DaemonSet, scaled
/// to `desired` nodes and rounded up (upstream's `updatedDesiredNodeCounts`:
/// both 0 means one unavailable); `None` for `OnDelete`.
fn rolling(ds: &DaemonSet, desired: i32) -> Option<Rolling> {
    let strategy = ds.spec.as_ref()?.update_strategy.clone().unwrap_or_default();
    if strategy.type_.as_deref() == Some("OnDelete") {
        return None;
    }
    let ru = strategy.rolling_update.unwrap_or_default();
    let resolve = |v: Option<IntOrString>, default: i32| {
        v.map(|v| scaled_value(&v, desired, true).unwrap_or(default)).unwrap_or(default).max(0)
    };
    let surge = resolve(ru.max_surge, 0);
    let mut unavailable = resolve(ru.max_unavailable, 1);
    if surge == 0 && unavailable == 0 {
        unavailable = 1;
    }
    Some(Rolling { max_surge: usize::try_from(surge).unwrap_or(0), max_unavailable: usize::try_from(unavailable).unwrap_or(1) })
}

async fn delete_pods(
    victims: &[(String, Why)],
    mine: &[Pod],
    key: &str,
    pods_api: &Api<Pod>,
    state: &State,
    regarding: &k8s_openapi::api::core::v1::ObjectReference,
) -> Result<(), kube::Error> {
    let find = |n: &str| mine.iter().find(|p| p.name_any() == n);
    state.expectations.expect_deletions(key, victims.iter().filter_map(|(n, _)| find(n)?.metadata.uid.clone()));
    for (pod_name, why) in victims {
        let pod = find(pod_name);
        let failed = pod.and_then(|p| p.status.as_ref()?.phase.clone()).as_deref() == Some("Failed");
        if *why == Why::Finished && failed {
            let node = pod.and_then(|p| p.spec.as_ref().and_then(plan::target_node)).unwrap_or_default();
            let ns = pod.and_then(|p| p.namespace()).unwrap_or_default();
            let note = format!("Found failed daemon pod {ns}/{pod_name} on node {node}, will try to kill it");
            state.events.warning(regarding, "FailedDaemonPod", note).await;
        }
        match pods_api.delete(pod_name, &DeleteParams::default()).await {
            Ok(_) => state.events.normal(regarding, "SuccessfulDelete", format!("Deleted pod: {pod_name}")).await,
            Err(e) if pod_control::is_not_found(&e) => {}
            Err(e) => {
                state.events.warning(regarding, "FailedDelete", format!("Error deleting: {}", api_message(&e))).await;
                return Err(e);
            }
        }
    }
    Ok(())
}

/// The label of a daemon pod naming the DaemonSet's template generation it
/// was made from (upstream `DaemonSetTemplateGenerationKey`).
pub const POD_TEMPLATE_GENERATION_LABEL: &str = "pod-template-generation";

/// The DaemonSet's template generation, from its
/// `deprecated.daemonset.template.generation` annotation (upstream's
/// `GetTemplateGeneration`); `None` when absent or not a number.
pub fn template_generation(ds: &DaemonSet) -> Option<i64> {
    ds.annotations().get(rkube_api::strategy::DAEMON_SET_TEMPLATE_GENERATION)?.parse().ok()
}

/// Whether `pod` runs the DaemonSet's current template: its
/// `controller-revision-hash` is `hash`, or its `pod-template-generation` is
/// the DaemonSet's template generation (upstream's `IsPodUpdated`).
pub fn is_pod_updated(ds: &DaemonSet, pod: &Pod, hash: &str) -> bool {
    let labels = pod.labels();
    let hash_matches = !hash.is_empty() && labels.get(history::POD_REVISION_LABEL).map(String::as_str) == Some(hash);
    let generation_matches = template_generation(ds)
        .is_some_and(|g| labels.get(POD_TEMPLATE_GENERATION_LABEL).map(String::as_str) == Some(g.to_string().as_str()));
    hash_matches || generation_matches
}

/// The daemon pod for `node` (upstream's `CreatePodTemplate` plus the
/// node affinity): the template's labels, `controller-revision-hash` and
/// `pod-template-generation`, the daemon tolerations, pinned to `node`,
/// named `<ds>-<random>`.
pub fn daemon_pod(ds: &DaemonSet, owner: &OwnerReference, spec: &PodSpec, hash: &str, node: &str) -> Pod {
    let meta = ds.spec.as_ref().and_then(|s| s.template.metadata.clone()).unwrap_or_default();
    let mut labels = meta.labels.unwrap_or_default();
    if let Some(generation) = template_generation(ds) {
        labels.insert(POD_TEMPLATE_GENERATION_LABEL.into(), generation.to_string());
    }
    labels.insert(history::POD_REVISION_LABEL.into(), hash.into());
    let mut spec = spec.clone();
    plan::pin_to_node(&mut spec, node);
    Pod {
        metadata: ObjectMeta {
            generate_name: Some(format!("{}-", ds.name_any())),
            labels: Some(labels),
            annotations: meta.annotations,
            finalizers: meta.finalizers,
            owner_references: Some(vec![owner.clone()]),
            ..ObjectMeta::default()
        },
        spec: Some(spec),
        status: None,
    }
}

#[allow(clippy::too_many_arguments)]
async fn create_pods(
    ds: &DaemonSet,
    owner: &OwnerReference,
    spec: &PodSpec,
    hash: &str,
    nodes: &[String],
    key: &str,
    pods_api: &Api<Pod>,
    state: &State,
    regarding: &k8s_openapi::api::core::v1::ObjectReference,
) -> Result<(), kube::Error> {
    let mut left = nodes.iter();
    for batch in slow_start_batches(nodes.len()) {
        let chunk: Vec<&String> = left.by_ref().take(batch).collect();
        let pp = PostParams::default();
        let pods: Vec<Pod> = chunk.iter().map(|n| daemon_pod(ds, owner, spec, hash, n)).collect();
        let results = futures::future::join_all(pods.iter().map(|p| pods_api.create(&pp, p))).await;
        let mut created = Vec::new();
        let mut failed = None;
        for r in results {
            match r {
                Ok(p) => created.push(p.name_any()),
                Err(e) => failed = Some(e),
            }
        }
        state.expectations.expect_creations(key, created.clone());
        for name in created {
            state.events.normal(regarding, "SuccessfulCreate", format!("Created pod: {name}")).await;
        }
        if let Some(e) = failed {
            state.events.warning(regarding, "FailedCreate", format!("Error creating: {}", api_message(&e))).await;
            return Err(e);
        }
    }
    Ok(())
}
