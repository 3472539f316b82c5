//! The garbage collector's steps on the server: verifying owners missing
//! from the graph (a metadata GET), deleting dependents (with a UID
//! precondition and a propagation policy), and removing ownerReferences and
//! GC finalizers (JSON merge patches guarded by the resourceVersion the
//! graph saw; a conflict is retried on the next pass).
//!
//! Upstream: `garbagecollector.go` (`isDangling`, `deleteObject`,
//! `removeFinalizer`), `patch.go`.

use std::collections::HashMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, Preconditions, PropagationPolicy};
use kube::discovery::Scope;
use serde_json::json;

use super::graph::{Absent, Decision, Graph, Node, Policy, ORPHAN};
use crate::controllers::discovery::Discovered;

/// Takes the graph's decisions: first learns about unknown owners, then
/// carries out every other decision. Failures are logged and retried on a
/// later pass.
pub async fn take(client: &kube::Client, found: &Discovered, graph: &Graph, absent: &mut HashMap<String, Absent>) {
    let mut plan = graph.plan(absent);
    if plan.iter().any(|d| matches!(d, Decision::Verify { .. })) {
        for d in &plan {
            if let Decision::Verify { dependent, owner } = d {
                if absent.contains_key(&owner.uid) {
                    continue;
                }
                let ns = graph.get(dependent).and_then(|n| n.namespace.clone());
                match verify(client, found, owner, ns.as_deref()).await {
                    Ok(Some(state)) => {
                        absent.insert(owner.uid.clone(), state);
                    }
                    Ok(None) => {}
                    Err(e) => tracing::debug!(owner = %owner.name, error = %e, "garbage collector: owner lookup failed"),
                }
            }
        }
        plan = graph.plan(absent);
    }
    for d in plan {
        if let Err(e) = decide(client, graph, &d).await {
            tracing::debug!(decision = ?d, error = %e, "garbage collector: step failed; retrying later");
        }
    }
}

/// Whether the owner `r` of an object in `ns` exists (`None`: its kind is
/// not served, so nothing can be known).
async fn verify(
    client: &kube::Client,
    found: &Discovered,
    r: &OwnerReference,
    ns: Option<&str>,
) -> kube::Result<Option<Absent>> {
    let Some((ar, caps)) = found.by_kind(&r.api_version, &r.kind) else { return Ok(None) };
    let api: Api<DynamicObject> = match (&caps.scope, ns) {
        (Scope::Namespaced, Some(ns)) => Api::namespaced_with(client.clone(), ns, ar),
        (Scope::Namespaced, None) => return Ok(Some(Absent::Gone)),
        (Scope::Cluster, _) => Api::all_with(client.clone(), ar),
    };
    Ok(Some(match api.get_metadata_opt(&r.name).await? {
        Some(m) if m.metadata.uid.as_deref() == Some(r.uid.as_str()) => Absent::Exists,
        _ => Absent::Gone,
    }))
}

fn api_for(client: &kube::Client, n: &Node) -> Api<DynamicObject> {
    match &n.namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, n.resource.as_ref()),
        None => Api::all_with(client.clone(), n.resource.as_ref()),
    }
}

/// 404 and 409 mean the graph was behind: nothing to do now.
fn tolerate(r: kube::Result<()>) -> kube::Result<()> {
    match r {
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => Ok(()),
        other => other,
    }
}

async fn decide(client: &kube::Client, graph: &Graph, d: &Decision) -> kube::Result<()> {
    match d {
        Decision::Verify { .. } => Ok(()),
        Decision::Delete { uid, policy, unblock } => {
            let Some(n) = graph.get(uid) else { return Ok(()) };
            if !unblock.is_empty() {
                let owners: Vec<OwnerReference> = n
                    .owners
                    .iter()
                    .cloned()
                    .map(|mut r| {
                        if unblock.contains(&r.uid) {
                            r.block_owner_deletion = Some(false);
                        }
                        r
                    })
                    .collect();
                tolerate(patch_owners(client, n, &owners).await)?;
            }
            let dp = DeleteParams {
                propagation_policy: Some(match policy {
                    Policy::Background => PropagationPolicy::Background,
                    Policy::Foreground => PropagationPolicy::Foreground,
                    Policy::Orphan => PropagationPolicy::Orphan,
                }),
                preconditions: Some(Preconditions { uid: Some(n.uid.clone()), resource_version: None }),
                ..DeleteParams::default()
            };
            tracing::info!(kind = %n.resource.kind, namespace = ?n.namespace, name = %n.name, ?policy, "garbage collector: deleting dependent");
            tolerate(api_for(client, n).delete(&n.name, &dp).await.map(|_| ()))
        }
        Decision::RemoveOwnerRefs { uid, owners } => {
            let Some(n) = graph.get(uid) else { return Ok(()) };
            let kept: Vec<OwnerReference> = n.owners.iter().filter(|r| !owners.contains(&r.uid)).cloned().collect();
            tolerate(patch_owners(client, n, &kept).await)
        }
        Decision::RemoveFinalizer { uid, finalizer } => {
            let Some(n) = graph.get(uid) else { return Ok(()) };
            tolerate(remove_finalizer(client, n, finalizer).await)
        }
        Decision::Orphan { uid, dependents } => {
            let Some(owner) = graph.get(uid) else { return Ok(()) };
            for dep in dependents.iter().filter_map(|d| graph.get(d)) {
                let kept: Vec<OwnerReference> = dep.owners.iter().filter(|r| r.uid != owner.uid).cloned().collect();
                // A dependent already gone is fine; a conflict must not let
                // the owner go while it still names the owner.
                match patch_owners(client, dep, &kept).await {
                    Err(kube::Error::Api(e)) if e.code == 404 => {}
                    other => other?,
                }
            }
            tolerate(remove_finalizer(client, owner, ORPHAN).await)
        }
    }
}

/// Sets `n`'s ownerReferences to `owners` (removed when empty), guarded by
/// the resourceVersion the graph saw.
async fn patch_owners(client: &kube::Client, n: &Node, owners: &[OwnerReference]) -> kube::Result<()> {
    let value = if owners.is_empty() { serde_json::Value::Null } else { json!(owners) };
    let patch = json!({"metadata": {"resourceVersion": n.resource_version, "ownerReferences": value}});
    api_for(client, n).patch(&n.name, &PatchParams::default(), &Patch::Merge(&patch)).await.map(|_| ())
}

async fn remove_finalizer(client: &kube::Client, n: &Node, finalizer: &str) -> kube::Result<()> {
    let kept: Vec<&String> = n.finalizers.iter().filter(|f| *f != finalizer).collect();
    let value = if kept.is_empty() { serde_json::Value::Null } else { json!(kept) };
    let patch = json!({"metadata": {"resourceVersion": n.resource_version, "finalizers": value}});
    tracing::info!(kind = %n.resource.kind, namespace = ?n.namespace, name = %n.name, finalizer, "garbage collector: removing finalizer");
    api_for(client, n).patch(&n.name, &PatchParams::default(), &Patch::Merge(&patch)).await.map(|_| ())
}
