//! The pure part of the DaemonSet controller, after upstream's
//! `pkg/controller/daemon` (`daemon_controller.go` `podsShouldBeOnNode`,
//! `manage`, `updateDaemonSetStatus`; `update.go` `rollingUpdate`;
//! `util/daemonset_util.go`): which nodes should run a daemon pod, the
//! pods to create and delete, the rolling update with `maxUnavailable` or
//! `maxSurge`, and the status counts.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{NodeSelectorRequirement, NodeSelectorTerm, PodSpec, Taint, Toleration};
use rkube_scheduler::plugins::selectors::{node_selector_term_matches, tolerates};

/// Whether a node should run the daemon pod, and whether a pod already
/// there may stay (upstream's `NodeShouldRunDaemonPod`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fit {
    /// The pod's node name, node selector and required node affinity match
    /// and every `NoSchedule`/`NoExecute` taint is tolerated.
    pub should_run: bool,
    /// A pod already there may keep running (every `NoExecute` taint is
    /// tolerated, and name, selector and affinity match).
    pub should_continue: bool,
}

/// [`Fit`] of a node (`name`, `labels`, `taints`) for pods of `spec` (the
/// DaemonSet's template with [`add_daemon_tolerations`] applied).
pub fn fit(spec: &PodSpec, name: &str, labels: &BTreeMap<String, String>, taints: &[Taint]) -> Fit {
    let none = Fit { should_run: false, should_continue: false };
    if spec.node_name.as_deref().is_some_and(|n| !n.is_empty() && n != name) {
        return none;
    }
    let selector_ok = spec.node_selector.iter().flatten().all(|(k, v)| labels.get(k) == Some(v));
    let required = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| n.required_during_scheduling_ignored_during_execution.as_ref());
    // Upstream tests the pod as placed on this node: its matchFields are
    // replaced by the node's name, so only the expressions decide.
    let affinity_ok = required.is_none_or(|r| {
        r.node_selector_terms.iter().any(|t| {
            let t = NodeSelectorTerm { match_expressions: t.match_expressions.clone(), match_fields: Some(vec![name_requirement(name)]) };
            node_selector_term_matches(&t, labels, name)
        })
    });
    if !selector_ok || !affinity_ok {
        return none;
    }
    let tolerations = spec.tolerations.as_deref().unwrap_or(&[]);
    let untolerated = |effect: &str| taints.iter().filter(|t| t.effect == effect).any(|t| !tolerations.iter().any(|tol| tolerates(tol, t)));
    let no_execute = untolerated("NoExecute");
    let no_schedule = untolerated("NoSchedule");
    Fit { should_run: !no_execute && !no_schedule, should_continue: !no_execute }
}

fn name_requirement(node: &str) -> NodeSelectorRequirement {
    NodeSelectorRequirement { key: "metadata.name".into(), operator: "In".into(), values: Some(vec![node.to_string()]) }
}

/// Adds the tolerations every daemon pod gets unless it has them
/// (upstream's `AddOrUpdateDaemonPodTolerations`): `not-ready` and
/// `unreachable` (`NoExecute`), `disk-pressure`, `memory-pressure`,
/// `pid-pressure`, `unschedulable` (`NoSchedule`), and
/// `network-unavailable` (`NoSchedule`) for host-network pods.
pub fn add_daemon_tolerations(spec: &mut PodSpec) {
    let mut wanted = vec![
        ("node.kubernetes.io/not-ready", "NoExecute"),
        ("node.kubernetes.io/unreachable", "NoExecute"),
        ("node.kubernetes.io/disk-pressure", "NoSchedule"),
        ("node.kubernetes.io/memory-pressure", "NoSchedule"),
        ("node.kubernetes.io/pid-pressure", "NoSchedule"),
        ("node.kubernetes.io/unschedulable", "NoSchedule"),
    ];
    if spec.host_network == Some(true) {
        wanted.push(("node.kubernetes.io/network-unavailable", "NoSchedule"));
    }
    let list = spec.tolerations.get_or_insert_with(Vec::new);
    for (key, effect) in wanted {
        let has = list.iter().any(|t| t.key.as_deref() == Some(key) && t.effect.as_deref() == Some(effect) && t.operator.as_deref() == Some("Exists"));
        if !has {
            list.retain(|t| !(t.key.as_deref() == Some(key) && t.effect.as_deref() == Some(effect)));
            list.push(Toleration { key: Some(key.into()), operator: Some("Exists".into()), effect: Some(effect.into()), ..Toleration::default() });
        }
    }
}

/// Pins a daemon pod to `node` through required node affinity, keeping the
/// template's expressions (upstream's `ReplaceDaemonSetPodNodeNameNodeAffinity`):
/// every term's `matchFields` become `metadata.name In [node]`.
pub fn pin_to_node(spec: &mut PodSpec, node: &str) {
    let affinity = spec.affinity.get_or_insert_with(Default::default);
    let node_affinity = affinity.node_affinity.get_or_insert_with(Default::default);
    let required = node_affinity.required_during_scheduling_ignored_during_execution.get_or_insert_with(Default::default);
    if required.node_selector_terms.is_empty() {
        required.node_selector_terms.push(NodeSelectorTerm::default());
    }
    for term in &mut required.node_selector_terms {
        term.match_fields = Some(vec![name_requirement(node)]);
    }
}

/// The node a daemon pod is for: `spec.nodeName`, else the single
/// `metadata.name` its required node affinity names (upstream's `GetTargetNodeName`).
pub fn target_node(spec: &PodSpec) -> Option<String> {
    if let Some(n) = spec.node_name.as_deref().filter(|n| !n.is_empty()) {
        return Some(n.to_string());
    }
    let terms = &spec.affinity.as_ref()?.node_affinity.as_ref()?.required_during_scheduling_ignored_during_execution.as_ref()?.node_selector_terms;
    terms.iter().find_map(|t| {
        t.match_fields.as_ref()?.iter().find_map(|r| match (r.key.as_str(), r.operator.as_str(), r.values.as_deref()) {
            ("metadata.name", "In", Some([v])) => Some(v.clone()),
            _ => None,
        })
    })
}

/// What the planner knows of one daemon pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DaemonPod {
    /// `metadata.name`.
    pub name: String,
    /// Its node ([`target_node`]).
    pub node: String,
    /// Whether its `controller-revision-hash` is the DaemonSet's hash now.
    pub updated: bool,
    /// `metadata.deletionTimestamp` is set.
    pub terminating: bool,
    /// Phase `Failed`.
    pub failed: bool,
    /// Phase `Succeeded`.
    pub succeeded: bool,
    /// `Ready` condition `True`.
    pub ready: bool,
    /// Ready for `minReadySeconds`.
    pub available: bool,
    /// Age rank: lower is older (creation time, then name).
    pub age_rank: usize,
}

/// A node as the planner sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeFit {
    /// Node name.
    pub name: String,
    /// Its [`Fit`].
    pub fit: Fit,
}

/// The update strategy's numbers, resolved against the desired count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rolling {
    /// `maxSurge`: nodes that may run an old and a new pod at once.
    pub max_surge: usize,
    /// `maxUnavailable`: nodes that may be without an available pod.
    pub max_unavailable: usize,
}

/// Why a pod is deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Why {
    /// It failed (`FailedDaemonPod` is reported) or succeeded.
    Finished,
    /// Its node should not run it, is gone, or runs another daemon pod.
    Excess,
    /// An old revision replaced by the rolling update.
    Update,
}

/// The pods to create and delete now.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// Nodes that get a new pod.
    pub create_on: Vec<String>,
    /// Pods to delete, with why.
    pub delete: Vec<(String, Why)>,
}

/// Decides creations and deletions (upstream's `manage` then
/// `rollingUpdate`, on one snapshot). `rolling` is `None` for `OnDelete`.
pub fn plan(nodes: &[NodeFit], pods: &[DaemonPod], rolling: Option<Rolling>) -> Plan {
    let mut out = Plan::default();
    let mut by_node: BTreeMap<&str, Vec<&DaemonPod>> = BTreeMap::new();
    for p in pods {
        by_node.entry(p.node.as_str()).or_default().push(p);
    }
    for list in by_node.values_mut() {
        list.sort_by_key(|p| p.age_rank);
    }
    let known: BTreeSet<&str> = nodes.iter().map(|n| n.name.as_str()).collect();
    // Pods for nodes that do not exist (or none) go.
    for p in pods.iter().filter(|p| !known.contains(p.node.as_str()) && !p.terminating) {
        out.delete.push((p.name.clone(), Why::Excess));
    }
    let surge = rolling.is_some_and(|r| r.max_surge > 0);
    for n in nodes {
        let here: &[&DaemonPod] = by_node.get(n.name.as_str()).map(Vec::as_slice).unwrap_or(&[]);
        if !n.fit.should_continue {
            out.delete.extend(here.iter().filter(|p| !p.terminating).map(|p| (p.name.clone(), Why::Excess)));
            continue;
        }
        let mut running: Vec<&DaemonPod> = Vec::new();
        for p in here.iter().filter(|p| !p.terminating) {
            if p.failed || p.succeeded {
                out.delete.push((p.name.clone(), Why::Finished));
            } else {
                running.push(p);
            }
        }
        if running.is_empty() {
            if n.fit.should_run {
                out.create_on.push(n.name.clone());
            }
            continue;
        }
        if running.len() > 1 {
            let keep = keep_on_node(&running, surge);
            out.delete.extend(running.iter().filter(|p| !keep.contains(&p.name.as_str())).map(|p| (p.name.clone(), Why::Excess)));
        }
    }
    if let Some(r) = rolling {
        let taken: BTreeSet<String> = out.delete.iter().map(|(n, _)| n.clone()).collect();
        let update = if r.max_surge > 0 { surge_update(nodes, &by_node, r.max_surge) } else { unavailable_update(nodes, &by_node, r.max_unavailable) };
        out.delete.extend(update.delete.into_iter().filter(|(n, _)| !taken.contains(n)));
        out.create_on.extend(update.create_on);
    }
    out
}

/// Which of several running pods of a node stay: the oldest; with surge,
/// the oldest updated pod, plus the oldest available old pod while the
/// updated one is not yet available.
fn keep_on_node<'a>(running: &[&'a DaemonPod], surge: bool) -> Vec<&'a str> {
    if !surge {
        return running.first().map(|p| vec![p.name.as_str()]).unwrap_or_default();
    }
    let new = running.iter().find(|p| p.updated);
    let old_available = running.iter().find(|p| !p.updated && p.available);
    match (new, old_available) {
        (Some(n), Some(o)) if !n.available => vec![n.name.as_str(), o.name.as_str()],
        (Some(n), _) => vec![n.name.as_str()],
        (None, _) => running.first().map(|p| vec![p.name.as_str()]).unwrap_or_default(),
    }
}

/// The oldest live new and old pod of a node.
fn new_and_old<'a>(pods: &[&'a DaemonPod]) -> (Option<&'a DaemonPod>, Option<&'a DaemonPod>) {
    let live = || pods.iter().copied().filter(|p| !p.terminating && !p.failed && !p.succeeded);
    (live().find(|p| p.updated), live().find(|p| !p.updated))
}

/// Rolling update without surge: old pods that are not available go at
/// once; available ones go while fewer than `max_unavailable` nodes lack
/// an available pod.
fn unavailable_update(nodes: &[NodeFit], by_node: &BTreeMap<&str, Vec<&DaemonPod>>, max_unavailable: usize) -> Plan {
    let mut out = Plan::default();
    let mut unavailable = 0usize;
    let mut candidates = Vec::new();
    for n in nodes.iter().filter(|n| n.fit.should_run) {
        let (new, old) = new_and_old(by_node.get(n.name.as_str()).map(Vec::as_slice).unwrap_or(&[]));
        match (new, old) {
            (None, None) | (Some(_), Some(_)) => unavailable += 1,
            (Some(p), None) => unavailable += usize::from(!p.available),
            (None, Some(p)) if !p.available => out.delete.push((p.name.clone(), Why::Update)),
            (None, Some(p)) => candidates.push(p.name.clone()),
        }
    }
    unavailable += out.delete.len();
    let room = max_unavailable.saturating_sub(unavailable);
    out.delete.extend(candidates.into_iter().take(room).map(|n| (n, Why::Update)));
    out
}

/// Rolling update with surge: a node whose old pod is not available gets
/// its new pod at once; others get one while fewer than `max_surge` nodes
/// run both; an old pod goes once the new pod of its node is available.
fn surge_update(nodes: &[NodeFit], by_node: &BTreeMap<&str, Vec<&DaemonPod>>, max_surge: usize) -> Plan {
    let mut out = Plan::default();
    let mut surging = 0usize;
    let mut candidates = Vec::new();
    for n in nodes.iter().filter(|n| n.fit.should_run) {
        let (new, old) = new_and_old(by_node.get(n.name.as_str()).map(Vec::as_slice).unwrap_or(&[]));
        match (new, old) {
            (Some(new), Some(old)) if new.available => out.delete.push((old.name.clone(), Why::Update)),
            (Some(_), Some(_)) => surging += 1,
            (None, Some(old)) if !old.available => out.create_on.push(n.name.clone()),
            (None, Some(_)) => candidates.push(n.name.clone()),
            _ => {}
        }
    }
    let room = max_surge.saturating_sub(surging);
    out.create_on.extend(candidates.into_iter().take(room));
    out
}

/// `DaemonSetStatus`'s counts (upstream's `updateDaemonSetStatus`): per node
/// that should run the pod, whether it has one and whether the oldest is
/// ready, available and updated; pods on other nodes are misscheduled.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counts {
    /// `desiredNumberScheduled`.
    pub desired: i32,
    /// `currentNumberScheduled`.
    pub current: i32,
    /// `numberMisscheduled`.
    pub misscheduled: i32,
    /// `numberReady`.
    pub ready: i32,
    /// `numberAvailable`.
    pub available: i32,
    /// `updatedNumberScheduled`.
    pub updated: i32,
}

impl Counts {
    /// `numberUnavailable`: desired minus available.
    pub fn unavailable(&self) -> i32 {
        (self.desired - self.available).max(0)
    }
}

/// Counts the daemon pods that are not finished and being deleted.
pub fn count(nodes: &[NodeFit], pods: &[DaemonPod]) -> Counts {
    let mut c = Counts::default();
    for n in nodes {
        let mut here: Vec<&DaemonPod> = pods.iter().filter(|p| p.node == n.name && !(p.terminating && (p.failed || p.succeeded))).collect();
        here.sort_by_key(|p| p.age_rank);
        match (n.fit.should_run, here.first()) {
            (true, first) => {
                c.desired += 1;
                let Some(p) = first else { continue };
                c.current += 1;
                if p.ready {
                    c.ready += 1;
                    if p.available {
                        c.available += 1;
                    }
                }
                if p.updated {
                    c.updated += 1;
                }
            }
            (false, Some(_)) => c.misscheduled += 1,
            (false, None) => {}
        }
    }
    c
}

#[cfg(test)]
mod tests;
