//! The pure part of the StatefulSet controller: which pod to create or
//! delete next, and the status to report, as upstream's
//! `pkg/controller/statefulset/stateful_set_control.go`
//! (`updateStatefulSet`, `completeRollingUpdate`) and
//! `stateful_set_utils.go`.
//!
//! Pods are identified by ordinal (`<set>-<ordinal>`). Ordinals
//! `[start, start + replicas)` are the set's replicas; any other pod of the
//! set is *condemned* and goes, highest ordinal first. With
//! `podManagementPolicy: OrderedReady` one step happens at a time and only
//! while every lower ordinal is Running and Ready; with `Parallel` every
//! missing pod is created and every condemned pod deleted at once. A
//! `RollingUpdate` then replaces pods not at the update revision from the
//! highest ordinal down to `partition`, one at a time, each only after the
//! ones above it are healthy again.

/// What the planner knows of one pod of the set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodView {
    /// `metadata.name`.
    pub name: String,
    /// The ordinal parsed from the name.
    pub ordinal: i32,
    /// Its `controller-revision-hash` label (a revision name).
    pub revision: String,
    /// `metadata.deletionTimestamp` is set.
    pub terminating: bool,
    /// Phase `Running` and `Ready` condition `True`.
    pub running_ready: bool,
    /// Running and ready for at least `minReadySeconds`.
    pub available: bool,
    /// Phase `Failed` or `Succeeded`: the pod is replaced.
    pub finished: bool,
}

impl PodView {
    fn healthy(&self) -> bool {
        self.available && !self.terminating
    }
}

/// The set as the planner sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetView {
    /// `spec.replicas`.
    pub replicas: i32,
    /// `spec.ordinals.start` (0 by default).
    pub start: i32,
    /// `podManagementPolicy: OrderedReady` (else `Parallel`).
    pub ordered_ready: bool,
    /// `updateStrategy.type: RollingUpdate` (else `OnDelete`).
    pub rolling_update: bool,
    /// `updateStrategy.rollingUpdate.partition` (0 by default).
    pub partition: i32,
    /// The name of the revision pods below the partition keep.
    pub current_revision: String,
    /// The name of the revision of the template now.
    pub update_revision: String,
    /// `metadata.deletionTimestamp` is set: nothing is created or deleted.
    pub deleting: bool,
}

/// Which revision's template a new pod is made from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Which {
    /// `status.currentRevision` (below the partition of a rolling update).
    Current,
    /// `status.updateRevision`.
    Update,
}

/// Why a pod is deleted (it names the event).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    /// It failed or succeeded and is recreated (`RecreatingFailedPod`).
    Finished,
    /// Its ordinal is outside the replicas (scale down).
    Condemned,
    /// It is at an old revision (rolling update).
    Update,
}

/// One step of a sync.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Create the pod of `ordinal` from the `which` revision.
    Create {
        /// The ordinal.
        ordinal: i32,
        /// Its revision.
        which: Which,
    },
    /// Delete the pod `name`.
    Delete {
        /// Pod name.
        name: String,
        /// Why.
        why: Why,
    },
}

/// The steps to take now for `set` given its pods (any order), in order.
pub fn plan(set: &SetView, pods: &[PodView]) -> Vec<Step> {
    let mut steps = Vec::new();
    if set.deleting {
        return steps;
    }
    let monotonic = set.ordered_ready;
    let replicas = usize::try_from(set.replicas.max(0)).unwrap_or(0);
    let mut slots: Vec<Option<&PodView>> = vec![None; replicas];
    let mut condemned: Vec<&PodView> = Vec::new();
    for p in pods {
        let slot = i64::from(p.ordinal) - i64::from(set.start);
        match usize::try_from(slot).ok().filter(|s| *s < replicas) {
            Some(s) if slots[s].is_none() => slots[s] = Some(p),
            _ => condemned.push(p),
        }
    }
    condemned.sort_by_key(|p| std::cmp::Reverse(p.ordinal));

    for (slot, pod) in slots.iter().enumerate() {
        let ordinal = set.start + i32::try_from(slot).unwrap_or(i32::MAX);
        match pod {
            None => {
                let which = if set.rolling_update && i64::try_from(slot).unwrap_or(i64::MAX) < i64::from(set.partition) {
                    Which::Current
                } else {
                    Which::Update
                };
                steps.push(Step::Create { ordinal, which });
                if monotonic {
                    return steps;
                }
            }
            Some(p) if p.finished && !p.terminating => {
                steps.push(Step::Delete { name: p.name.clone(), why: Why::Finished });
                if monotonic {
                    return steps;
                }
            }
            Some(p) if !p.healthy() && monotonic => return steps,
            Some(_) => {}
        }
    }

    for p in &condemned {
        if p.terminating {
            if monotonic {
                return steps;
            }
            continue;
        }
        steps.push(Step::Delete { name: p.name.clone(), why: Why::Condemned });
        if monotonic {
            return steps;
        }
    }

    if !set.rolling_update {
        return steps;
    }
    // Parallel creations and deletions settle before the update goes on.
    if !steps.is_empty() {
        return steps;
    }
    let floor = usize::try_from(set.partition.max(0)).unwrap_or(0);
    for slot in (floor..replicas).rev() {
        let Some(p) = slots[slot] else { return steps };
        if p.revision != set.update_revision && !p.terminating {
            steps.push(Step::Delete { name: p.name.clone(), why: Why::Update });
            return steps;
        }
        if !p.healthy() {
            return steps;
        }
    }
    steps
}

/// `StatefulSetStatus`'s counts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counts {
    /// Pods of the set.
    pub replicas: i32,
    /// Of those, Running and Ready.
    pub ready_replicas: i32,
    /// Of those, ready for `minReadySeconds`.
    pub available_replicas: i32,
    /// Not terminating, at the current revision.
    pub current_replicas: i32,
    /// Not terminating, at the update revision.
    pub updated_replicas: i32,
}

/// Counts the set's pods (upstream's status pass over every pod).
pub fn count(set: &SetView, pods: &[PodView]) -> Counts {
    let mut c = Counts::default();
    for p in pods {
        c.replicas += 1;
        if p.running_ready {
            c.ready_replicas += 1;
            if p.available {
                c.available_replicas += 1;
            }
        }
        if !p.terminating {
            if p.revision == set.current_revision {
                c.current_replicas += 1;
            }
            if p.revision == set.update_revision {
                c.updated_replicas += 1;
            }
        }
    }
    c
}

/// Whether a rolling update is complete, so the update revision becomes
/// the current one (upstream's `completeRollingUpdate`: every pod updated
/// and ready).
pub fn rolling_update_complete(set: &SetView, counts: &Counts) -> bool {
    set.rolling_update && counts.updated_replicas == counts.replicas && counts.ready_replicas == counts.replicas
}

/// The ordinal of a pod named `name` if it is `<set>-<ordinal>` (upstream's
/// `getParentNameAndOrdinal`), else `None`.
pub fn ordinal_of(set: &str, name: &str) -> Option<i32> {
    let rest = name.strip_prefix(set)?.strip_prefix('-')?;
    if rest.is_empty() || !rest.bytes().all(|b| b.is_ascii_digit()) || (rest.len() > 1 && rest.starts_with('0')) {
        return None;
    }
    rest.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(replicas: i32, ordered: bool) -> SetView {
        SetView {
            replicas,
            start: 0,
            ordered_ready: ordered,
            rolling_update: true,
            partition: 0,
            current_revision: "web-a".into(),
            update_revision: "web-a".into(),
            deleting: false,
        }
    }

    fn pod(ordinal: i32, revision: &str, healthy: bool) -> PodView {
        PodView {
            name: format!("web-{ordinal}"),
            ordinal,
            revision: revision.into(),
            terminating: false,
            running_ready: healthy,
            available: healthy,
            finished: false,
        }
    }

    fn create(ordinal: i32, which: Which) -> Step {
        Step::Create { ordinal, which }
    }

    fn delete(name: &str, why: Why) -> Step {
        Step::Delete { name: name.into(), why }
    }

    #[test]
    fn ordered_ready_creates_one_pod_at_a_time_after_the_previous_is_ready() {
        let s = set(3, true);
        assert_eq!(plan(&s, &[]), vec![create(0, Which::Update)]);
        assert_eq!(plan(&s, &[pod(0, "web-a", false)]), vec![]);
        assert_eq!(plan(&s, &[pod(0, "web-a", true)]), vec![create(1, Which::Update)]);
        assert_eq!(plan(&s, &[pod(0, "web-a", true), pod(1, "web-a", true), pod(2, "web-a", true)]), vec![]);
    }

    #[test]
    fn parallel_creates_every_missing_pod_and_deletes_every_condemned_one_at_once() {
        let s = set(3, false);
        assert_eq!(plan(&s, &[pod(1, "web-a", false)]), vec![create(0, Which::Update), create(2, Which::Update)]);
        let down = set(1, false);
        let pods = [pod(0, "web-a", true), pod(1, "web-a", false), pod(2, "web-a", true)];
        assert_eq!(plan(&down, &pods), vec![delete("web-2", Why::Condemned), delete("web-1", Why::Condemned)]);
    }

    #[test]
    fn ordered_scale_down_removes_the_highest_ordinal_first_and_waits_for_it_to_go() {
        let s = set(1, true);
        let mut pods = vec![pod(0, "web-a", true), pod(1, "web-a", true), pod(2, "web-a", true)];
        assert_eq!(plan(&s, &pods), vec![delete("web-2", Why::Condemned)]);
        pods[2].terminating = true;
        assert_eq!(plan(&s, &pods), vec![]);
        pods.pop();
        assert_eq!(plan(&s, &pods), vec![delete("web-1", Why::Condemned)]);
    }

    #[test]
    fn rolling_update_replaces_from_the_highest_ordinal_down_to_the_partition() {
        let mut s = set(3, true);
        s.update_revision = "web-b".into();
        let mut pods = vec![pod(0, "web-a", true), pod(1, "web-a", true), pod(2, "web-a", true)];
        assert_eq!(plan(&s, &pods), vec![delete("web-2", Why::Update)]);
        // The replacement is created at the update revision, then waited for.
        pods.pop();
        assert_eq!(plan(&s, &pods), vec![create(2, Which::Update)]);
        pods.push(pod(2, "web-b", false));
        assert_eq!(plan(&s, &pods), vec![]);
        pods[2].running_ready = true;
        pods[2].available = true;
        assert_eq!(plan(&s, &pods), vec![delete("web-1", Why::Update)]);
        // A partition keeps lower ordinals, and recreates them at the current revision.
        s.partition = 2;
        assert_eq!(plan(&s, &pods), vec![]);
        assert_eq!(plan(&s, &pods[1..]), vec![create(0, Which::Current)]);
    }

    #[test]
    fn on_delete_never_replaces_running_pods() {
        let mut s = set(2, true);
        s.rolling_update = false;
        s.update_revision = "web-b".into();
        assert_eq!(plan(&s, &[pod(0, "web-a", true), pod(1, "web-a", true)]), vec![]);
        assert_eq!(plan(&s, &[pod(0, "web-a", true)]), vec![create(1, Which::Update)]);
    }

    #[test]
    fn finished_pods_are_deleted_to_be_recreated_and_a_deleting_set_does_nothing() {
        let s = set(2, true);
        let mut failed = pod(0, "web-a", false);
        failed.finished = true;
        assert_eq!(plan(&s, &[failed.clone(), pod(1, "web-a", true)]), vec![delete("web-0", Why::Finished)]);
        let mut gone = s.clone();
        gone.deleting = true;
        assert_eq!(plan(&gone, &[failed]), vec![]);
    }

    #[test]
    fn ordinals_start_shifts_the_replica_range() {
        let mut s = set(2, false);
        s.start = 5;
        assert_eq!(plan(&s, &[pod(0, "web-a", true)]), vec![create(5, Which::Update), create(6, Which::Update), delete("web-0", Why::Condemned)]);
    }

    #[test]
    fn counts_and_completion_follow_revisions_and_readiness() {
        let mut s = set(2, true);
        s.update_revision = "web-b".into();
        let mut t = pod(1, "web-b", true);
        t.terminating = true;
        let c = count(&s, &[pod(0, "web-a", true), t]);
        assert_eq!(c, Counts { replicas: 2, ready_replicas: 2, available_replicas: 2, current_replicas: 1, updated_replicas: 0 });
        assert!(!rolling_update_complete(&s, &c));
        let done = count(&s, &[pod(0, "web-b", true), pod(1, "web-b", true)]);
        assert!(rolling_update_complete(&s, &done));
    }

    #[test]
    fn ordinals_are_parsed_only_from_the_sets_own_names() {
        assert_eq!(ordinal_of("web", "web-12"), Some(12));
        assert_eq!(ordinal_of("web", "web-0"), Some(0));
        assert_eq!(ordinal_of("web", "web-01"), None);
        assert_eq!(ordinal_of("web", "webx-1"), None);
        assert_eq!(ordinal_of("web", "web-a"), None);
        assert_eq!(ordinal_of("web", "web-"), None);
    }
}
