//! Creating children from a template, controller references, and claiming
//! (adopting orphans that match a selector, releasing children that no
//! longer match), as upstream's `PodControl` and `ControllerRefManager`
//! (`pkg/controller/controller_utils.go`, `controller_ref_manager.go`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ObjectReference, Pod, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Api, Patch, PatchParams};
use kube::core::{Selector, SelectorExt};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::json;

/// The controller reference to `owner` (`controller: true`,
/// `blockOwnerDeletion: true`), or `None` when it has no name or UID yet.
pub fn controller_ref<K: Resource<DynamicType = ()>>(owner: &K) -> Option<OwnerReference> {
    Some(OwnerReference {
        api_version: K::api_version(&()).into_owned(),
        kind: K::kind(&()).into_owned(),
        name: owner.meta().name.clone()?,
        uid: owner.meta().uid.clone()?,
        controller: Some(true),
        block_owner_deletion: Some(true),
    })
}

/// The reference events about `obj` point at.
pub fn object_ref<K: Resource<DynamicType = ()>>(obj: &K) -> ObjectReference {
    obj.object_ref(&())
}

/// The `controller: true` owner reference of `meta`, if any.
pub fn controller_of(meta: &ObjectMeta) -> Option<&OwnerReference> {
    meta.owner_references.as_ref()?.iter().find(|r| r.controller == Some(true))
}

/// A pod to create from `template`, named `<prefix>-<random>` by the API
/// server (`generateName`), carrying the template's labels, annotations and
/// finalizers and `owner` as controller (upstream's `GetPodFromTemplate`).
pub fn pod_from_template(template: &PodTemplateSpec, prefix: &str, owner: OwnerReference) -> Pod {
    let meta = template.metadata.clone().unwrap_or_default();
    Pod {
        metadata: ObjectMeta {
            generate_name: Some(format!("{prefix}-")),
            labels: meta.labels,
            annotations: meta.annotations,
            finalizers: meta.finalizers,
            owner_references: Some(vec![owner]),
            ..ObjectMeta::default()
        },
        spec: template.spec.clone(),
        status: None,
    }
}

/// Whether `selector` selects `labels` (`None`, an invalid selector, selects nothing).
pub fn selects(selector: Option<&Selector>, labels: &BTreeMap<String, String>) -> bool {
    selector.is_some_and(|s| !s.selects_all() && s.matches(labels))
}

/// What [`claim`] decided for one child.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// Already ours and still selected.
    Keep,
    /// An orphan the selector matches: set our controller reference.
    Adopt,
    /// Ours but no longer selected: drop our reference.
    Release,
    /// Not ours to consider.
    Ignore,
}

/// Upstream's `ClaimObject` for one child of an owner with `owner_uid`:
/// owned and selected children are kept, owned and unselected released
/// (unless the owner is being deleted), selected orphans adopted (unless
/// the owner or the child is being deleted), the rest ignored.
pub fn claim(owner_uid: &str, owner_deleting: bool, selected: bool, child: &ObjectMeta) -> Claim {
    match controller_of(child) {
        Some(r) if r.uid != owner_uid => Claim::Ignore,
        Some(_) if selected => Claim::Keep,
        Some(_) if owner_deleting => Claim::Ignore,
        Some(_) => Claim::Release,
        None if !selected || owner_deleting || child.deletion_timestamp.is_some() => Claim::Ignore,
        None => Claim::Adopt,
    }
}

/// Applies an [`Claim::Adopt`] or [`Claim::Release`] to `child` with a JSON
/// merge patch of its owner references, guarded by its resourceVersion.
/// Errors: the API server's (a conflict means the child changed; the next
/// sync decides again).
pub async fn apply_claim<C>(api: &Api<C>, child: &C, decision: &Claim, owner: &OwnerReference) -> Result<(), kube::Error>
where
    C: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let mut refs: Vec<OwnerReference> = child.meta().owner_references.clone().unwrap_or_default();
    match decision {
        Claim::Adopt => refs.push(owner.clone()),
        Claim::Release => refs.retain(|r| r.uid != owner.uid),
        Claim::Keep | Claim::Ignore => return Ok(()),
    }
    let patch = json!({"metadata": {"ownerReferences": refs, "resourceVersion": child.resource_version()}});
    api.patch(&child.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await.map(|_| ())
}

/// Claims `candidates` for the owner `owner` (upstream's
/// `PodControllerRefManager.ClaimPods`): its own pods that `selector` still
/// selects are kept, selected orphans adopted, its unselected pods
/// released; returns the pods it owns afterwards. A child that changed or
/// went meanwhile (409, 404) is left for the next sync. Errors: any other
/// API error.
pub async fn claim_pods(
    api: &Api<Pod>,
    owner: &OwnerReference,
    deleting: bool,
    selector: Option<&Selector>,
    candidates: &[&Pod],
) -> Result<Vec<Pod>, kube::Error> {
    let mut mine = Vec::new();
    for p in candidates.iter().copied() {
        let decision = claim(&owner.uid, deleting, selects(selector, p.labels()), &p.metadata);
        match decision {
            Claim::Keep => mine.push(p.clone()),
            Claim::Adopt | Claim::Release => match apply_claim(api, p, &decision, owner).await {
                Ok(()) if decision == Claim::Adopt => mine.push(p.clone()),
                Ok(()) => {}
                Err(e) if is_not_found(&e) || is_conflict(&e) => {}
                Err(e) => return Err(e),
            },
            Claim::Ignore => {}
        }
    }
    Ok(mine)
}

/// Whether `err` is the API server's 404.
pub fn is_not_found(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(s) if s.code == 404)
}

/// Whether `err` is the API server's 409.
pub fn is_conflict(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(s) if s.code == 409)
}

/// Whether `err` says the object is gone or changed under the writer (404
/// or 409): a write a controller drops, to redo on its next pass.
pub fn is_gone(err: &kube::Error) -> bool {
    is_not_found(err) || is_conflict(err)
}

/// `r` with [`is_gone`] errors turned into success.
pub fn ignore_gone(r: Result<(), kube::Error>) -> Result<(), kube::Error> {
    match r {
        Err(e) if is_gone(&e) => Ok(()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(owner: Option<&str>) -> ObjectMeta {
        ObjectMeta {
            owner_references: owner.map(|u| {
                vec![OwnerReference { uid: u.into(), controller: Some(true), ..OwnerReference::default() }]
            }),
            ..ObjectMeta::default()
        }
    }

    #[test]
    fn claiming_adopts_selected_orphans_and_releases_unselected_children() {
        assert_eq!(claim("me", false, true, &meta(Some("me"))), Claim::Keep);
        assert_eq!(claim("me", false, false, &meta(Some("me"))), Claim::Release);
        assert_eq!(claim("me", true, false, &meta(Some("me"))), Claim::Ignore);
        assert_eq!(claim("me", false, true, &meta(Some("other"))), Claim::Ignore);
        assert_eq!(claim("me", false, true, &meta(None)), Claim::Adopt);
        assert_eq!(claim("me", true, true, &meta(None)), Claim::Ignore);
        assert_eq!(claim("me", false, false, &meta(None)), Claim::Ignore);
    }
}
