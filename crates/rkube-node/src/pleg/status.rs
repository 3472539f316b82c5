//! The runtime's view of one pod (upstream `kubecontainer.PodStatus`), built from a
//! `PodSandboxStatus` inspection or from a `ContainerEventResponse`.

use rkube_runtime::cri;

use super::{PlegState, Timestamp};

/// Sandboxes and containers of one pod as the runtime reported them at `timestamp`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PodStatus {
    /// The pod's uid.
    pub id: String,
    /// Pod name (from sandbox metadata).
    pub name: String,
    /// Pod namespace (from sandbox metadata).
    pub namespace: String,
    /// Pod IPs (from the newest ready sandbox; kept from the previous status once the sandbox
    /// is gone, as upstream `getPodIPs` does).
    pub ips: Vec<String>,
    /// Sandbox statuses, newest first.
    pub sandbox_statuses: Vec<cri::PodSandboxStatus>,
    /// Container statuses of those sandboxes, newest first.
    pub container_statuses: Vec<cri::ContainerStatus>,
    /// Runtime time of the reading, ns.
    pub timestamp: Timestamp,
}

impl PodStatus {
    /// An empty status (the pod has nothing in the runtime).
    pub fn empty(id: &str) -> Self {
        PodStatus { id: id.to_string(), ..Default::default() }
    }

    /// The status a `ContainerEventResponse` describes, stamped with its `created_at`; `None`
    /// when the event lacks the sandbox status or its metadata (containerd#7785).
    pub fn from_event(event: &cri::ContainerEventResponse) -> Option<Self> {
        let sandbox = event.pod_sandbox_status.as_ref()?;
        let meta = sandbox.metadata.as_ref()?;
        let mut status = PodStatus {
            id: meta.uid.clone(),
            name: meta.name.clone(),
            namespace: meta.namespace.clone(),
            ips: sandbox_ips(sandbox),
            sandbox_statuses: vec![sandbox.clone()],
            container_statuses: event.containers_statuses.clone(),
            timestamp: Timestamp(event.created_at),
        };
        status.sort();
        Some(status)
    }

    /// Combines the inspections of a pod's sandboxes. The timestamp is the oldest reading's (the
    /// whole status is at least that new); `fallback` stands in for runtimes that send 0.
    pub fn from_inspections(
        id: &str,
        inspections: Vec<(cri::PodSandboxStatus, Vec<cri::ContainerStatus>, i64)>,
        fallback: Timestamp,
    ) -> Self {
        let mut status = PodStatus::empty(id);
        let mut ts: Option<i64> = None;
        for (sandbox, containers, stamp) in inspections {
            if let Some(meta) = &sandbox.metadata {
                status.name = meta.name.clone();
                status.namespace = meta.namespace.clone();
            }
            ts = Some(match (ts, stamp) {
                (_, 0) => 0,
                (Some(0), _) => 0,
                (Some(t), s) => t.min(s),
                (None, s) => s,
            });
            status.sandbox_statuses.push(sandbox);
            status.container_statuses.extend(containers);
        }
        status.sort();
        if let Some(newest) = status.sandbox_statuses.first() {
            status.ips = sandbox_ips(newest);
        }
        status.timestamp = match ts {
            Some(t) if t > 0 => Timestamp(t),
            _ => fallback,
        };
        status
    }

    fn sort(&mut self) {
        self.sandbox_statuses.sort_by_key(|s| std::cmp::Reverse(s.created_at));
        self.container_statuses.sort_by_key(|c| std::cmp::Reverse(c.created_at));
    }

    /// The newest sandbox, if any.
    pub fn newest_sandbox(&self) -> Option<&cri::PodSandboxStatus> {
        self.sandbox_statuses.first()
    }

    /// The PLEG state of a container or sandbox id in this status.
    pub fn state_of(&self, id: &str) -> PlegState {
        if let Some(c) = self.container_statuses.iter().find(|c| c.id == id) {
            return PlegState::from_container(c.state);
        }
        if let Some(s) = self.sandbox_statuses.iter().find(|s| s.id == id) {
            return PlegState::from_sandbox(s.state);
        }
        PlegState::NonExistent
    }

    /// The newest status of the container named `name` (label `io.kubernetes.container.name`,
    /// else metadata name).
    pub fn latest_container(&self, name: &str) -> Option<&cri::ContainerStatus> {
        self.container_statuses.iter().find(|c| container_name(c) == name)
    }
}

/// A container status's name in the pod spec.
pub fn container_name(c: &cri::ContainerStatus) -> &str {
    c.labels
        .get(crate::cri::LABEL_CONTAINER_NAME)
        .map(String::as_str)
        .or_else(|| c.metadata.as_ref().map(|m| m.name.as_str()))
        .unwrap_or("")
}

fn sandbox_ips(s: &cri::PodSandboxStatus) -> Vec<String> {
    let Some(net) = &s.network else { return vec![] };
    let mut ips = Vec::new();
    if !net.ip.is_empty() {
        ips.push(net.ip.clone());
    }
    ips.extend(net.additional_ips.iter().map(|ip| ip.ip.clone()));
    ips
}
