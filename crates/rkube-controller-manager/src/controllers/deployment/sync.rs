//! Applies one Deployment sync against the API server: claim ReplicaSets,
//! find or create the new one with its revision, then scale (paused or
//! resized), roll (RollingUpdate) or recreate (Recreate), clean up old
//! revisions and write the status.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentStatus, ReplicaSet, ReplicaSetSpec};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::ResourceExt;
use serde_json::json;

use super::status::{self as st, condition, set_condition, PROGRESSING};
use super::util::{self, replicas, rs_replicas, rs_status};
use super::State;
use crate::pod_control::{self, Claim};

/// One sync of `d` (upstream's `syncDeployment`).
pub async fn sync_deployment(mut d: Deployment, state: &State) -> Result<Action, kube::Error> {
    let ns = d.namespace().unwrap_or_default();
    if d.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let Some(sel) = super::selector(&d) else {
        let r = pod_control::object_ref(&d);
        state.events.warning(&r, "SelectingAll", "This deployment is selecting all pods. A non-empty selector is required.".into()).await;
        return Ok(Action::await_change());
    };
    let Some(owner) = pod_control::controller_ref(&d) else { return Ok(Action::await_change()) };
    let rs_api: Api<ReplicaSet> = Api::namespaced(state.client.clone(), &ns);
    let mut rss: Vec<ReplicaSet> = Vec::new();
    for rs in state.replica_sets.state().iter().filter(|rs| rs.namespace().as_deref() == Some(ns.as_str())) {
        let decision = pod_control::claim(&owner.uid, false, kube::core::SelectorExt::matches(&sel, rs.labels()), &rs.metadata);
        match decision {
            Claim::Keep => rss.push(rs.as_ref().clone()),
            Claim::Adopt => {
                pod_control::apply_claim(&rs_api, rs.as_ref(), &decision, &owner).await?;
                rss.push(rs.as_ref().clone());
            }
            Claim::Release => pod_control::apply_claim(&rs_api, rs.as_ref(), &decision, &owner).await?,
            Claim::Ignore => {}
        }
    }
    rss.sort_by_key(|rs| (rs.metadata.creation_timestamp.as_ref().map(|t| t.0), rs.name_any()));
    let mut s = Sync { d: &mut d, state, rs_api, rss };
    if let Some(status) = st::paused_condition(s.d, Timestamp::now()) {
        s.write_status(status).await?;
    }
    let paused = s.d.spec.as_ref().and_then(|sp| sp.paused).unwrap_or(false);
    if paused || s.is_scaling_event() {
        s.sync_scale(paused).await
    } else if util::is_rolling(s.d) {
        s.rollout_rolling().await
    } else {
        s.rollout_recreate().await
    }
}

struct Sync<'a> {
    d: &'a mut Deployment,
    state: &'a State,
    rs_api: Api<ReplicaSet>,
    /// Owned ReplicaSets, oldest first, updated after every write (indexes
    /// stay valid for the whole sync: new ones are appended, deleted ones
    /// kept, with no replicas to count).
    rss: Vec<ReplicaSet>,
}

impl Sync<'_> {
    fn new_index(&self) -> Option<usize> {
        let template = self.d.spec.as_ref().map(|s| s.template.clone()).unwrap_or_default();
        self.rss.iter().position(|rs| rs.spec.as_ref().and_then(|s| s.template.as_ref()).is_some_and(|t| util::equal_ignore_hash(t, &template)))
    }

    fn olds(&self, new: Option<usize>) -> Vec<&ReplicaSet> {
        self.rss.iter().enumerate().filter(|(i, _)| Some(*i) != new).map(|(_, rs)| rs).collect()
    }

    fn is_scaling_event(&self) -> bool {
        let want = i64::from(replicas(self.d));
        self.rss
            .iter()
            .filter(|rs| rs_replicas(rs) > 0)
            .any(|rs| util::int_annotation(rs, util::DESIRED_REPLICAS).is_some_and(|v| v != want))
    }

    async fn write_status(&mut self, status: DeploymentStatus) -> Result<(), kube::Error> {
        if self.d.status.as_ref() == Some(&status) {
            return Ok(());
        }
        let api: Api<Deployment> = Api::namespaced(self.state.client.clone(), &self.d.namespace().unwrap_or_default());
        let patch = json!({"status": status});
        let out = api.patch_status(&self.d.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await?;
        self.d.status = out.status;
        self.d.metadata.resource_version = out.metadata.resource_version;
        Ok(())
    }

    /// Finds the new ReplicaSet (raising its revision) or creates it when
    /// `create` (upstream's `getAllReplicaSetsAndSyncRevision`).
    async fn sync_revision(&mut self, create: bool) -> Result<Option<usize>, kube::Error> {
        let new = self.new_index();
        let max_old = util::max_revision(self.olds(new));
        let new_revision = max_old + 1;
        let now = Timestamp::now();
        let idx = match new {
            Some(i) => {
                let rs = &self.rss[i];
                let annotations = util::new_rs_annotations(self.d, rs, new_revision, true);
                let min_ready = self.d.spec.as_ref().and_then(|s| s.min_ready_seconds);
                let rs_min_ready = rs.spec.as_ref().and_then(|s| s.min_ready_seconds);
                if Some(&annotations) != rs.metadata.annotations.as_ref() || min_ready.unwrap_or(0) != rs_min_ready.unwrap_or(0) {
                    let patch = json!({"metadata": {"annotations": annotations}, "spec": {"minReadySeconds": min_ready}});
                    self.rss[i] = self.rs_api.patch(&rs.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await?;
                }
                if st::progress_deadline(self.d).is_some() && st::get_condition(&self.d.status.clone().unwrap_or_default(), PROGRESSING).is_none() {
                    let mut s = self.d.status.clone().unwrap_or_default();
                    let msg = format!("Found new replica set {:?}", self.rss[i].name_any());
                    set_condition(&mut s, condition(PROGRESSING, "True", "FoundNewReplicaSet", msg, now));
                    self.write_status(s).await?;
                }
                i
            }
            None if !create => return Ok(None),
            None => self.create_new_rs(new_revision, now).await?,
        };
        let rev = util::revision(&self.rss[idx]);
        if st::deployment_revision_differs(self.d, rev) {
            let api: Api<Deployment> = Api::namespaced(self.state.client.clone(), &self.d.namespace().unwrap_or_default());
            let patch = json!({"metadata": {"annotations": {util::REVISION: rev.to_string()}}});
            let out = api.patch(&self.d.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await?;
            self.d.metadata.annotations = out.metadata.annotations;
        }
        Ok(Some(idx))
    }

    async fn create_new_rs(&mut self, new_revision: i64, now: Timestamp) -> Result<usize, kube::Error> {
        let spec = self.d.spec.clone().unwrap_or_default();
        let collision = self.d.status.as_ref().and_then(|s| s.collision_count);
        let hash = util::compute_hash(&spec.template, collision);
        let mut template = spec.template.clone();
        template.metadata.get_or_insert_with(ObjectMeta::default).labels.get_or_insert_with(BTreeMap::new).insert(util::POD_TEMPLATE_HASH.into(), hash.clone());
        let mut selector = spec.selector.clone();
        selector.match_labels.get_or_insert_with(BTreeMap::new).insert(util::POD_TEMPLATE_HASH.into(), hash.clone());
        let name = format!("{}-{hash}", self.d.name_any());
        let old_total: i32 = self.rss.iter().map(rs_replicas).sum();
        let size = util::new_rs_new_replicas(self.d, old_total, 0);
        let blank = ReplicaSet::default();
        let rs = ReplicaSet {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: self.d.namespace(),
                labels: template.metadata.as_ref().and_then(|m| m.labels.clone()),
                annotations: Some(util::new_rs_annotations(self.d, &blank, new_revision, false)),
                owner_references: pod_control::controller_ref(self.d).map(|r| vec![r]),
                ..ObjectMeta::default()
            },
            spec: Some(ReplicaSetSpec { replicas: Some(size), min_ready_seconds: spec.min_ready_seconds, selector, template: Some(template) }),
            status: None,
        };
        let created = match self.rs_api.create(&PostParams::default(), &rs).await {
            Ok(c) => c,
            Err(kube::Error::Api(e)) if e.code == 409 => {
                // A ReplicaSet of that name exists: ours with the same template
                // is the new one; otherwise bump collisionCount and retry.
                let existing = self.rs_api.get(&name).await?;
                let ours = pod_control::controller_of(&existing.metadata).map(|r| r.uid.clone()) == self.d.metadata.uid;
                let same = existing.spec.as_ref().and_then(|s| s.template.as_ref()).is_some_and(|t| util::equal_ignore_hash(t, &spec.template));
                if ours && same {
                    self.rss.push(existing);
                    return Ok(self.rss.len() - 1);
                }
                let mut s = self.d.status.clone().unwrap_or_default();
                s.collision_count = Some(collision.unwrap_or(0) + 1);
                self.write_status(s).await?;
                return Err(kube::Error::Api(e));
            }
            Err(e) => return Err(e),
        };
        if size > 0 {
            let r = pod_control::object_ref(self.d);
            self.state.events.normal(&r, "ScalingReplicaSet", format!("Scaled up replica set {name} from 0 to {size}")).await;
        }
        if st::progress_deadline(self.d).is_some() {
            let mut s = self.d.status.clone().unwrap_or_default();
            set_condition(&mut s, condition(PROGRESSING, "True", "NewReplicaSetCreated", format!("Created new replica set {name:?}"), now));
            self.write_status(s).await?;
        }
        self.rss.push(created);
        Ok(self.rss.len() - 1)
    }

    /// Scales ReplicaSet `i` to `size`, refreshing its replica annotations,
    /// with a `ScalingReplicaSet` event when the size changes.
    async fn scale(&mut self, i: usize, size: i32) -> Result<bool, kube::Error> {
        let rs = &self.rss[i];
        let old = rs_replicas(rs);
        let desired = replicas(self.d).to_string();
        let max = (replicas(self.d) + util::max_surge(self.d)).to_string();
        let ann = rs.metadata.annotations.clone().unwrap_or_default();
        let ann_ok = ann.get(util::DESIRED_REPLICAS) == Some(&desired) && ann.get(util::MAX_REPLICAS) == Some(&max);
        if old == size && ann_ok {
            return Ok(false);
        }
        let patch = json!({"metadata": {"annotations": {util::DESIRED_REPLICAS: desired, util::MAX_REPLICAS: max}}, "spec": {"replicas": size}});
        let name = rs.name_any();
        self.rss[i] = self.rs_api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
        if old != size {
            let op = if size > old { "up" } else { "down" };
            let r = pod_control::object_ref(self.d);
            self.state.events.normal(&r, "ScalingReplicaSet", format!("Scaled {op} replica set {name} from {old} to {size}")).await;
        }
        Ok(old != size)
    }

    fn index_of(&self, name: &str) -> Option<usize> {
        self.rss.iter().position(|rs| rs.metadata.name.as_deref() == Some(name))
    }

    /// Paused or resized: scale only (upstream's `sync` and `scale`).
    async fn sync_scale(&mut self, paused: bool) -> Result<Action, kube::Error> {
        let new = self.sync_revision(false).await?;
        let want = replicas(self.d);
        let active: Vec<usize> = (0..self.rss.len()).filter(|i| rs_replicas(&self.rss[*i]) > 0).collect();
        let target = match (active.len(), new) {
            (0, Some(n)) => Some(n),
            (0, None) if !self.rss.is_empty() => Some(self.rss.len() - 1),
            (1, _) => Some(active[0]),
            _ => None,
        };
        if let Some(i) = target {
            self.scale(i, want).await?;
        } else if new.is_some_and(|n| {
            let rs = &self.rss[n];
            util::int_annotation(rs, util::DESIRED_REPLICAS) == Some(i64::from(want)) && rs_replicas(rs) == want && rs_status(rs).2 == want
        }) {
            for i in active.into_iter().filter(|i| Some(*i) != new) {
                self.scale(i, 0).await?;
            }
        } else if util::is_rolling(self.d) {
            let live: Vec<util::LiveRs> = active
                .iter()
                .map(|i| {
                    let rs = &self.rss[*i];
                    util::LiveRs {
                        name: rs.name_any(),
                        replicas: rs_replicas(rs),
                        max_replicas: util::int_annotation(rs, util::MAX_REPLICAS).and_then(|v| i32::try_from(v).ok()),
                        created: rs.metadata.creation_timestamp.as_ref().map(|t| t.0.as_second()).unwrap_or(0),
                    }
                })
                .collect();
            let status_replicas = self.d.status.as_ref().and_then(|s| s.replicas).unwrap_or(0);
            for (name, size) in util::proportional_sizes(self.d, &live, status_replicas) {
                if let Some(i) = self.index_of(&name) {
                    self.scale(i, size).await?;
                }
            }
        }
        if paused {
            self.cleanup(new).await?;
        }
        let all: Vec<&ReplicaSet> = self.rss.iter().collect();
        let s = st::calculate_status(self.d, &all, new.map(|n| &self.rss[n]), Timestamp::now());
        self.write_status(s).await?;
        Ok(Action::requeue(Duration::from_secs(300)))
    }

    /// RollingUpdate (upstream's `rolloutRolling`).
    async fn rollout_rolling(&mut self) -> Result<Action, kube::Error> {
        let Some(n) = self.sync_revision(true).await? else { return self.rollout_status(None).await };
        let want = replicas(self.d);
        let new_size = rs_replicas(&self.rss[n]);
        if new_size > want {
            self.scale(n, want).await?;
            return self.rollout_status(Some(n)).await;
        }
        if new_size < want {
            let all_total: i32 = self.rss.iter().map(rs_replicas).sum();
            let target = util::new_rs_new_replicas(self.d, all_total, new_size);
            if target != new_size {
                self.scale(n, target).await?;
                return self.rollout_status(Some(n)).await;
            }
        }
        let old: Vec<util::OldRs> = self
            .olds(Some(n))
            .into_iter()
            .filter(|rs| rs_replicas(rs) > 0)
            .map(|rs| util::OldRs { name: rs.name_any(), replicas: rs_replicas(rs), available: rs_status(rs).2 })
            .collect();
        let new_rs = &self.rss[n];
        let plan = util::plan_old_scale_down(self.d, &old, Some((rs_replicas(new_rs), rs_status(new_rs).2)));
        if !plan.is_empty() {
            for (name, size) in plan {
                if let Some(i) = self.index_of(&name) {
                    self.scale(i, size).await?;
                }
            }
            return self.rollout_status(Some(n)).await;
        }
        if st::complete(self.d, &self.d.status.clone().unwrap_or_default()) {
            self.cleanup(Some(n)).await?;
        }
        self.rollout_status(Some(n)).await
    }

    /// Recreate (upstream's `rolloutRecreate`): old ReplicaSets to 0, wait
    /// for their pods to stop, then the new one at full size.
    async fn rollout_recreate(&mut self) -> Result<Action, kube::Error> {
        let new = self.sync_revision(false).await?;
        let mut scaled = false;
        for i in 0..self.rss.len() {
            if Some(i) != new && rs_replicas(&self.rss[i]) > 0 {
                scaled |= self.scale(i, 0).await?;
            }
        }
        if scaled || self.old_pods_running(new).await? {
            return self.rollout_status(new).await;
        }
        let Some(n) = (match new {
            Some(n) => Some(n),
            None => self.sync_revision(true).await?,
        }) else {
            return self.rollout_status(None).await;
        };
        let want = replicas(self.d);
        if rs_replicas(&self.rss[n]) != want {
            self.scale(n, want).await?;
        }
        if st::complete(self.d, &self.d.status.clone().unwrap_or_default()) {
            self.cleanup(Some(n)).await?;
        }
        self.rollout_status(Some(n)).await
    }

    /// Whether any pod of an old ReplicaSet is not yet `Succeeded`/`Failed`.
    async fn old_pods_running(&self, new: Option<usize>) -> Result<bool, kube::Error> {
        let olds = self.olds(new);
        if olds.iter().any(|rs| rs_status(rs).0 > 0) {
            return Ok(true);
        }
        let uids: Vec<String> = olds.iter().filter_map(|rs| rs.metadata.uid.clone()).collect();
        if uids.is_empty() {
            return Ok(false);
        }
        let pods: Api<Pod> = Api::namespaced(self.state.client.clone(), &self.d.namespace().unwrap_or_default());
        let list = pods.list(&ListParams::default()).await?;
        Ok(list.items.iter().any(|p| {
            let owned = pod_control::controller_of(&p.metadata).is_some_and(|r| uids.contains(&r.uid));
            let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
            owned && !matches!(phase, Some("Succeeded") | Some("Failed"))
        }))
    }

    /// Deletes the oldest scaled-down ReplicaSets beyond
    /// `revisionHistoryLimit` (upstream's `cleanupDeployment`).
    async fn cleanup(&mut self, new: Option<usize>) -> Result<(), kube::Error> {
        let Some(limit) = self.d.spec.as_ref().and_then(|s| s.revision_history_limit) else { return Ok(()) };
        let mut old: Vec<ReplicaSet> = self.olds(new).into_iter().filter(|rs| rs.metadata.deletion_timestamp.is_none()).cloned().collect();
        let excess = old.len().saturating_sub(usize::try_from(limit.max(0)).unwrap_or(0));
        if excess == 0 {
            return Ok(());
        }
        old.sort_by_key(|rs| (util::revision(rs), rs.metadata.creation_timestamp.as_ref().map(|t| t.0)));
        for rs in old.iter().take(excess) {
            let observed = rs.status.as_ref().and_then(|s| s.observed_generation).unwrap_or(0);
            if rs_status(rs).0 != 0 || rs_replicas(rs) != 0 || rs.metadata.generation.unwrap_or(0) > observed {
                continue;
            }
            match self.rs_api.delete(&rs.name_any(), &DeleteParams::default()).await {
                Ok(_) => {}
                Err(e) if pod_control::is_not_found(&e) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Writes the rollout status and requeues a stuck rollout at its deadline.
    async fn rollout_status(&mut self, new: Option<usize>) -> Result<Action, kube::Error> {
        let now = Timestamp::now();
        let all: Vec<&ReplicaSet> = self.rss.iter().collect();
        let s = st::rollout_status(self.d, &all, new.map(|n| &self.rss[n]), now);
        let after = st::requeue_after(self.d, &s, now);
        self.write_status(s).await?;
        Ok(Action::requeue(after.unwrap_or(Duration::from_secs(300))))
    }
}
