//! ControllerRevisions: the template history of StatefulSets and
//! DaemonSets, as upstream's `pkg/controller/history/controller_history.go`
//! and the `getStatefulSetRevisions` / `constructHistory` steps of their
//! controllers.
//!
//! A revision holds the patch that restores its template
//! (`{"spec":{"template":{…,"$patch":"replace"}}}`, what `kubectl rollout
//! undo` applies), a `revision` number increasing with each new template,
//! and the label `controller.kubernetes.io/hash`. It is named
//! `<owner>-<hash>`; a name taken by a revision with other data bumps the
//! owner's `status.collisionCount` and hashes again.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::ResourceExt;
use serde_json::{json, Value};

use crate::controllers::deployment::util::{fnv32a, safe_encode};
use crate::pod_control;

/// Label of a revision carrying its hash (upstream's `ControllerRevisionHashLabel`).
pub const HASH_LABEL: &str = "controller.kubernetes.io/hash";

/// Label of a pod naming the revision it was made from
/// (`apps/v1` `ControllerRevisionHashLabelKey`): the revision's name for
/// StatefulSet pods, its hash for DaemonSet pods.
pub const POD_REVISION_LABEL: &str = "controller-revision-hash";

/// Upstream's `DefaultRevisionHistoryLimit` for both kinds.
pub const DEFAULT_HISTORY_LIMIT: i32 = 10;

/// The revision data of a pod template (JSON of `spec.template`): the patch
/// that puts it back in place.
pub fn patch_for_template(template: &Value) -> Value {
    let mut t = template.clone();
    if let Value::Object(m) = &mut t {
        m.insert("$patch".into(), Value::String("replace".into()));
    }
    json!({"spec": {"template": t}})
}

/// The template a revision's data restores (`$patch` removed), if any.
pub fn template_of(revision: &ControllerRevision) -> Option<Value> {
    let mut t = revision.data.as_ref()?.0.get("spec")?.get("template")?.clone();
    if let Value::Object(m) = &mut t {
        m.remove("$patch");
    }
    Some(t)
}

/// The hash of revision data with a collision probe (upstream's
/// `HashControllerRevision`: FNV-32a, then `SafeEncodeString` of the decimal
/// value). rkube hashes the data's JSON with sorted keys, so names are
/// stable across restarts but differ from kube-controller-manager's.
pub fn hash(data: &Value, collision_count: i32) -> String {
    let mut bytes = data.to_string().into_bytes();
    if collision_count != 0 {
        bytes.extend_from_slice(&collision_count.to_le_bytes());
    }
    safe_encode(&fnv32a(&bytes).to_string())
}

/// `<owner>-<hash>`, the owner's name cut to leave room (upstream's
/// `ControllerRevisionName`: at most 223 characters of prefix).
pub fn revision_name(owner: &str, hash: &str) -> String {
    let prefix: String = owner.chars().take(223).collect();
    format!("{prefix}-{hash}")
}

/// The revisions owned (as controller) by the owner with `uid`, oldest
/// revision number first (ties by name, as upstream's `SortControllerRevisions`).
pub fn owned(all: &[std::sync::Arc<ControllerRevision>], uid: &str) -> Vec<ControllerRevision> {
    let mut out: Vec<ControllerRevision> = all
        .iter()
        .filter(|r| pod_control::controller_of(&r.metadata).is_some_and(|o| o.uid == uid))
        .map(|r| r.as_ref().clone())
        .collect();
    out.sort_by(|a, b| a.revision.cmp(&b.revision).then_with(|| a.name_any().cmp(&b.name_any())));
    out
}

/// What [`ensure`] settled on.
#[derive(Debug, Clone)]
pub struct Revisions {
    /// The revision of the owner's template now.
    pub update: ControllerRevision,
    /// `status.collisionCount` after any collisions met on the way.
    pub collision_count: i32,
}

/// Finds or makes the revision of `template` for an owner, given its
/// `existing` revisions (oldest first), as upstream's
/// `getStatefulSetRevisions` / `constructHistory`: the newest revision
/// with the same data is reused as is; an older one with the same data is
/// renumbered to the next revision; else a new one is created with the
/// next number (`max + 1`). Errors: the API server's, after 10 name collisions
/// a conflict-shaped error.
pub async fn ensure(
    api: &Api<ControllerRevision>,
    owner: &OwnerReference,
    template_labels: &BTreeMap<String, String>,
    template: &Value,
    existing: &[ControllerRevision],
    mut collision_count: i32,
) -> Result<Revisions, kube::Error> {
    let data = patch_for_template(template);
    let next = existing.iter().map(|r| r.revision).max().unwrap_or(0) + 1;
    let same: Vec<&ControllerRevision> =
        existing.iter().filter(|r| r.data.as_ref().map(|d| &d.0) == Some(&data)).collect();
    if let Some(found) = same.last() {
        let newest = existing.last().map(|r| r.name_any());
        if newest == Some(found.name_any()) {
            return Ok(Revisions { update: (*found).clone(), collision_count });
        }
        let patch = json!({"revision": next});
        let renumbered = api.patch(&found.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await?;
        return Ok(Revisions { update: renumbered, collision_count });
    }
    for _ in 0..10 {
        let h = hash(&data, collision_count);
        let mut labels = template_labels.clone();
        labels.insert(HASH_LABEL.into(), h.clone());
        let rev = ControllerRevision {
            metadata: ObjectMeta {
                name: Some(revision_name(&owner.name, &h)),
                labels: Some(labels),
                owner_references: Some(vec![owner.clone()]),
                ..ObjectMeta::default()
            },
            data: Some(RawExtension(data.clone())),
            revision: next,
        };
        match api.create(&PostParams::default(), &rev).await {
            Ok(created) => return Ok(Revisions { update: created, collision_count }),
            Err(kube::Error::Api(s)) if s.code == 409 => {
                // A revision of this name exists: ours with the same data
                // (a lagging cache) is reused, anything else is a collision.
                let there = api.get(&rev.name_any()).await?;
                let ours = pod_control::controller_of(&there.metadata).is_some_and(|o| o.uid == owner.uid);
                if ours && there.data.as_ref().map(|d| &d.0) == Some(&data) {
                    return Ok(Revisions { update: there, collision_count });
                }
                collision_count += 1;
            }
            Err(e) => return Err(e),
        }
    }
    let message = format!("too many ControllerRevision name collisions for {}", owner.name);
    Err(kube::Error::Api(kube::core::Status::failure(&message, "Conflict").with_code(409).boxed()))
}

/// Deletes the oldest revisions not in `live` until at most `limit` of
/// them remain (upstream's `truncateHistory` / `cleanupHistory`); `live`
/// holds the names of the revisions pods use and the current and update
/// revisions. Errors: the API server's (a missing revision is fine).
pub async fn truncate(
    api: &Api<ControllerRevision>,
    existing: &[ControllerRevision],
    live: &[String],
    limit: i32,
) -> Result<(), kube::Error> {
    let old: Vec<&ControllerRevision> = existing.iter().filter(|r| !live.contains(&r.name_any())).collect();
    let excess = old.len().saturating_sub(usize::try_from(limit.max(0)).unwrap_or(0));
    for r in old.into_iter().take(excess) {
        match api.delete(&r.name_any(), &DeleteParams::default()).await {
            Ok(_) => {}
            Err(e) if pod_control::is_not_found(&e) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn revision_data_is_a_replace_patch_of_the_template_and_reads_back() {
        let t = json!({"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c"}]}});
        let data = patch_for_template(&t);
        assert_eq!(data["spec"]["template"]["$patch"], "replace");
        let rev = ControllerRevision { data: Some(RawExtension(data)), ..ControllerRevision::default() };
        assert_eq!(template_of(&rev), Some(t));
    }

    #[test]
    fn hashes_change_with_the_data_and_the_collision_count() {
        let a = patch_for_template(&json!({"spec": {"containers": [{"name": "a"}]}}));
        let b = patch_for_template(&json!({"spec": {"containers": [{"name": "b"}]}}));
        assert_eq!(hash(&a, 0), hash(&a.clone(), 0));
        assert_ne!(hash(&a, 0), hash(&b, 0));
        assert_ne!(hash(&a, 0), hash(&a, 1));
        assert!(hash(&a, 0).chars().all(|c| "bcdfghjklmnpqrstvwxz2456789".contains(c)));
        assert_eq!(revision_name("web", "abc"), "web-abc");
        assert_eq!(revision_name(&"x".repeat(300), "h").len(), 225);
    }
}
