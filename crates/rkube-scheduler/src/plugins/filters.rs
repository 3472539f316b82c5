//! Per-node filters that need only the pod and the node (upstream
//! `plugins/{nodeunschedulable,nodename,tainttoleration,nodeaffinity,nodeports,noderesources}`),
//! with upstream's reasons.

use k8s_openapi::api::core::v1::{Pod, Taint};

use super::selectors::{node_selector_term_matches, tolerates, tolerations};
use super::{Code, Status};
use crate::resources::{pod_requests, Resource};
use crate::snapshot::{host_ports, NodeInfo, Snapshot};

/// NodeUnschedulable's reason.
pub const ERR_NODE_UNSCHEDULABLE: &str = "node(s) were unschedulable";
/// NodeName's reason.
pub const ERR_NODE_NAME: &str = "node(s) didn't match the requested node name";
/// NodeAffinity's reason.
pub const ERR_NODE_AFFINITY: &str = "node(s) didn't match Pod's node affinity/selector";
/// NodePorts' reason.
pub const ERR_NODE_PORTS: &str = "node(s) didn't have free ports for the requested pod ports";
/// NodeResourcesFit's reason when the node holds its maximum of pods.
pub const ERR_TOO_MANY_PODS: &str = "Too many pods";
/// The taint kubectl cordon stands for (`node.kubernetes.io/unschedulable`).
pub const TAINT_UNSCHEDULABLE: &str = "node.kubernetes.io/unschedulable";

/// NodeUnschedulable: a node with `spec.unschedulable` takes only pods
/// tolerating the `node.kubernetes.io/unschedulable:NoSchedule` taint.
pub fn node_unschedulable(pod: &Pod, node: &NodeInfo, _: &Snapshot) -> Result<(), Status> {
    let cordoned = node.node.spec.as_ref().and_then(|s| s.unschedulable).unwrap_or(false);
    let taint = Taint { key: TAINT_UNSCHEDULABLE.into(), effect: "NoSchedule".into(), ..Taint::default() };
    if cordoned && !tolerations(pod).iter().any(|t| tolerates(t, &taint)) {
        return Err(Status::new("NodeUnschedulable", Code::UnschedulableAndUnresolvable, ERR_NODE_UNSCHEDULABLE));
    }
    Ok(())
}

/// NodeName: a pod naming a node in `spec.nodeName` fits only there.
pub fn node_name(pod: &Pod, node: &NodeInfo, _: &Snapshot) -> Result<(), Status> {
    match pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) {
        Some(n) if !n.is_empty() && n != node.name => {
            Err(Status::new("NodeName", Code::UnschedulableAndUnresolvable, ERR_NODE_NAME))
        }
        _ => Ok(()),
    }
}

/// The node's taints.
pub fn taints(node: &NodeInfo) -> &[Taint] {
    node.node.spec.as_ref().and_then(|s| s.taints.as_deref()).unwrap_or(&[])
}

/// TaintToleration: every `NoSchedule` and `NoExecute` taint must be
/// tolerated; the first untolerated one is named
/// (`node(s) had untolerated taint {key: value}`).
pub fn taint_toleration(pod: &Pod, node: &NodeInfo, _: &Snapshot) -> Result<(), Status> {
    let tols = tolerations(pod);
    let untolerated = taints(node)
        .iter()
        .filter(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
        .find(|t| !tols.iter().any(|tol| tolerates(tol, t)));
    match untolerated {
        Some(t) => Err(Status::new(
            "TaintToleration",
            Code::UnschedulableAndUnresolvable,
            format!("node(s) had untolerated taint {{{}: {}}}", t.key, t.value.as_deref().unwrap_or("")),
        )),
        None => Ok(()),
    }
}

/// Whether the node satisfies the pod's `nodeSelector` and required node
/// affinity (any one of its terms).
pub fn matches_node_selector_and_affinity(pod: &Pod, node: &NodeInfo) -> bool {
    let Some(spec) = pod.spec.as_ref() else { return true };
    let empty = Default::default();
    let labels = node.labels().unwrap_or(&empty);
    let selector_ok = spec.node_selector.iter().flatten().all(|(k, v)| labels.get(k) == Some(v));
    let required = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|na| na.required_during_scheduling_ignored_during_execution.as_ref());
    let affinity_ok = required.is_none_or(|r| r.node_selector_terms.iter().any(|t| node_selector_term_matches(t, labels, &node.name)));
    selector_ok && affinity_ok
}

/// NodeAffinity: `nodeSelector` and `requiredDuringSchedulingIgnoredDuringExecution`.
pub fn node_affinity(pod: &Pod, node: &NodeInfo, _: &Snapshot) -> Result<(), Status> {
    if matches_node_selector_and_affinity(pod, node) {
        Ok(())
    } else {
        Err(Status::new("NodeAffinity", Code::UnschedulableAndUnresolvable, ERR_NODE_AFFINITY))
    }
}

/// NodePorts: the pod's host ports must be free on the node.
pub fn node_ports(pod: &Pod, node: &NodeInfo, _: &Snapshot) -> Result<(), Status> {
    let wanted = host_ports(pod);
    if wanted.iter().any(|w| node.used_ports.iter().any(|u| u.conflicts(w))) {
        return Err(Status::new("NodePorts", Code::Unschedulable, ERR_NODE_PORTS));
    }
    Ok(())
}

/// NodeResourcesFit: the pod's requests must fit in allocatable minus what
/// assigned pods request: pod count (`Too many pods`), then cpu, memory,
/// ephemeral storage and each extended resource (`Insufficient <name>`).
pub fn node_resources_fit(pod: &Pod, node: &NodeInfo, _: &Snapshot) -> Result<(), Status> {
    resources_fit(&pod_requests(pod, false), node)
}

/// [`node_resources_fit`] for a pod whose requests (`pod_requests(pod, false)`)
/// are `req`, so a cycle reads them once rather than once per node.
pub fn resources_fit(req: &Resource, node: &NodeInfo) -> Result<(), Status> {
    let mut reasons = Vec::new();
    if node.pods.len() as i64 + 1 > node.allocatable.pods {
        reasons.push(ERR_TOO_MANY_PODS.to_string());
    }
    let (alloc, used) = (&node.allocatable, &node.requested);
    if req.milli_cpu > 0 && req.milli_cpu > alloc.milli_cpu - used.milli_cpu {
        reasons.push("Insufficient cpu".into());
    }
    if req.memory > 0 && req.memory > alloc.memory - used.memory {
        reasons.push("Insufficient memory".into());
    }
    if req.ephemeral_storage > 0 && req.ephemeral_storage > alloc.ephemeral_storage - used.ephemeral_storage {
        reasons.push("Insufficient ephemeral-storage".into());
    }
    for (name, amount) in &req.scalar {
        let free = alloc.scalar.get(name).copied().unwrap_or(0) - used.scalar.get(name).copied().unwrap_or(0);
        if *amount > 0 && *amount > free {
            reasons.push(format!("Insufficient {name}"));
        }
    }
    if reasons.is_empty() {
        Ok(())
    } else {
        Err(Status { plugin: "NodeResourcesFit", code: Code::Unschedulable, reasons })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{node, pod, snapshot};
    use serde_json::json;

    /// A filter plugin's function.
    type Filter = fn(&Pod, &NodeInfo, &Snapshot) -> Result<(), Status>;

    #[test]
    fn filters_reject_with_upstream_reasons() {
        let n = |v| node("n1", v);
        // (filter, pod spec, node, expected reasons; empty = fits)
        let cases: Vec<(Filter, serde_json::Value, _, Vec<&str>)> = vec![
            (node_unschedulable, json!({}), n(json!({"spec": {"unschedulable": true}})), vec![ERR_NODE_UNSCHEDULABLE]),
            (
                node_unschedulable,
                json!({"tolerations": [{"key": TAINT_UNSCHEDULABLE, "operator": "Exists", "effect": "NoSchedule"}]}),
                n(json!({"spec": {"unschedulable": true}})),
                vec![],
            ),
            (node_name, json!({"nodeName": "n2"}), n(json!({})), vec![ERR_NODE_NAME]),
            (
                taint_toleration,
                json!({}),
                n(json!({"spec": {"taints": [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]}})),
                vec!["node(s) had untolerated taint {dedicated: gpu}"],
            ),
            (
                taint_toleration,
                json!({}),
                n(json!({"spec": {"taints": [{"key": "soft", "effect": "PreferNoSchedule"}]}})),
                vec![],
            ),
            (
                taint_toleration,
                json!({"tolerations": [{"key": "dedicated", "operator": "Equal", "value": "gpu"}]}),
                n(json!({"spec": {"taints": [{"key": "dedicated", "value": "gpu", "effect": "NoExecute"}]}})),
                vec![],
            ),
            (node_affinity, json!({"nodeSelector": {"disk": "ssd"}}), n(json!({})), vec![ERR_NODE_AFFINITY]),
            (node_affinity, json!({"nodeSelector": {"disk": "ssd"}}), n(json!({"metadata": {"labels": {"disk": "ssd"}}})), vec![]),
            (
                node_affinity,
                json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]},
                ]}}}}),
                n(json!({})),
                vec![],
            ),
            (
                node_affinity,
                json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "cores", "operator": "Gt", "values": ["8"]}]},
                ]}}}}),
                n(json!({"metadata": {"labels": {"cores": "4"}}})),
                vec![ERR_NODE_AFFINITY],
            ),
            (
                node_resources_fit,
                json!({"containers": [{"name": "c", "resources": {"requests": {"cpu": "3", "memory": "8Gi", "example.com/gpu": "1"}}}]}),
                n(json!({})),
                vec!["Insufficient cpu", "Insufficient memory", "Insufficient example.com/gpu"],
            ),
            (
                node_resources_fit,
                json!({"containers": [{"name": "c", "resources": {"requests": {"cpu": "2", "memory": "4Gi"}}}]}),
                n(json!({})),
                vec![],
            ),
        ];
        for (i, (filter, spec, node, want)) in cases.into_iter().enumerate() {
            let p = pod("p", spec);
            let snap = snapshot(vec![node.clone()], vec![]);
            let got = filter(&p, &snap.nodes[0], &snap).err().map(|s| s.reasons).unwrap_or_default();
            assert_eq!(got, want, "case {i}");
        }
    }

    #[test]
    fn assigned_pods_use_up_resources_and_ports() {
        let n = node("n1", json!({"status": {"allocatable": {"cpu": "2", "memory": "4Gi", "pods": "2"}}}));
        let big = |name: &str| {
            let mut s = json!({"nodeName": "n1", "containers": [{"name": "c", "resources": {"requests": {"cpu": "1500m"}},
                "ports": [{"containerPort": 80, "hostPort": 8080}]}]});
            s["nodeName"] = json!("n1");
            pod(name, s)
        };
        let snap = snapshot(vec![n], vec![big("a")]);
        let incoming = big("b");
        let mut unassigned = incoming.clone();
        if let Some(s) = unassigned.spec.as_mut() {
            s.node_name = None;
        }
        let st = node_resources_fit(&unassigned, &snap.nodes[0], &snap).unwrap_err();
        assert_eq!(st.reasons, vec!["Insufficient cpu"]);
        assert_eq!(node_ports(&unassigned, &snap.nodes[0], &snap).unwrap_err().reasons, vec![ERR_NODE_PORTS]);
        let three = snapshot(vec![node("n1", json!({"status": {"allocatable": {"cpu": "8", "memory": "4Gi", "pods": "1"}}}))], vec![big("a")]);
        let small = pod("c", json!({"containers": [{"name": "c"}]}));
        assert_eq!(node_resources_fit(&small, &three.nodes[0], &three).unwrap_err().reasons, vec![ERR_TOO_MANY_PODS]);
    }
}
