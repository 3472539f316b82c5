//! CRI sandbox and container configs from a pod spec (upstream
//! `kuberuntime_sandbox.go` `generatePodSandboxConfig`, `kuberuntime_container.go`
//! `generateContainerConfig`), for a runtime that runs host processes.
//!
//! Log layout as kubelet's: `<pod logs root>/<namespace>_<name>_<uid>/<container>/<attempt>.log`.

use std::collections::HashMap;
use std::path::Path;

use k8s_openapi::api::core::v1::{Container, Pod};
use rkube_runtime::cri;

use crate::cri::{LABEL_CONTAINER_NAME, LABEL_POD_NAME, LABEL_POD_NAMESPACE, LABEL_POD_UID};

/// Name, namespace and uid of a pod ("" when missing).
pub fn pod_identity(pod: &Pod) -> (String, String, String) {
    let m = &pod.metadata;
    (
        m.name.clone().unwrap_or_default(),
        m.namespace.clone().unwrap_or_else(|| "default".into()),
        m.uid.clone().unwrap_or_default(),
    )
}

fn pod_labels(pod: &Pod) -> HashMap<String, String> {
    let (name, namespace, uid) = pod_identity(pod);
    let mut labels: HashMap<String, String> = pod
        .metadata
        .labels
        .clone()
        .unwrap_or_default()
        .into_iter()
        .collect();
    labels.insert(LABEL_POD_NAME.into(), name);
    labels.insert(LABEL_POD_NAMESPACE.into(), namespace);
    labels.insert(LABEL_POD_UID.into(), uid);
    labels
}

/// Whether the pod uses the node's network namespace (`spec.hostNetwork`).
pub fn is_host_network(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.host_network)
        .unwrap_or(false)
}

/// The pod's namespace modes (upstream `kuberuntime/util.go` `namespacesForPod`): network and
/// IPC of the node when `hostNetwork`/`hostIPC`, else of the pod; PID of the node with
/// `hostPID`, of the pod with `shareProcessNamespace`, else the container's own.
pub fn namespaces_for_pod(pod: &Pod) -> cri::NamespaceOption {
    use cri::NamespaceMode::{Container as OwnNs, Node, Pod as PodNs};
    let spec = pod.spec.as_ref();
    let on = |f: fn(&k8s_openapi::api::core::v1::PodSpec) -> Option<bool>| {
        spec.and_then(f).unwrap_or(false)
    };
    let network = if on(|s| s.host_network) { Node } else { PodNs };
    let ipc = if on(|s| s.host_ipc) { Node } else { PodNs };
    let pid = if on(|s| s.host_pid) {
        Node
    } else if on(|s| s.share_process_namespace) {
        PodNs
    } else {
        OwnNs
    };
    cri::NamespaceOption {
        network: network as i32,
        pid: pid as i32,
        ipc: ipc as i32,
        ..Default::default()
    }
}

/// The sandbox config for `attempt`. Host-network pods get no hostname (they keep the node's
/// UTS namespace, as kubelet's `generatePodSandboxConfig` does; runc refuses a hostname there).
pub fn sandbox_config(pod: &Pod, attempt: u32, logs_root: &Path) -> cri::PodSandboxConfig {
    let (name, namespace, uid) = pod_identity(pod);
    let hostname = if is_host_network(pod) {
        String::new()
    } else {
        pod.spec
            .as_ref()
            .and_then(|s| s.hostname.clone())
            .unwrap_or_else(|| name.clone())
    };
    let security_context = cri::LinuxSandboxSecurityContext {
        namespace_options: Some(namespaces_for_pod(pod)),
        ..Default::default()
    };
    cri::PodSandboxConfig {
        metadata: Some(cri::PodSandboxMetadata {
            name: name.clone(),
            uid: uid.clone(),
            namespace: namespace.clone(),
            attempt,
        }),
        hostname,
        log_directory: logs_root
            .join(format!("{namespace}_{name}_{uid}"))
            .display()
            .to_string(),
        labels: pod_labels(pod),
        annotations: pod
            .metadata
            .annotations
            .clone()
            .unwrap_or_default()
            .into_iter()
            .collect(),
        linux: Some(cri::LinuxPodSandboxConfig {
            security_context: Some(security_context),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// What the downward API (`fieldRef`, `resourceFieldRef`) reads besides
/// the pod itself.
#[derive(Clone, Debug, Default)]
pub struct DownwardValues {
    /// The node's allocatable resources in thousandths of their unit (an
    /// unset limit reads as these).
    pub allocatable: std::collections::BTreeMap<String, i128>,
    /// `status.podIP`.
    pub pod_ip: String,
    /// `status.hostIP`.
    pub host_ip: String,
    /// `spec.nodeName`.
    pub node_name: String,
}

/// The container config for `attempt` (the restart count), with the
/// environment made by [`super::env::environment`] (command and args are
/// expanded from it).
pub fn container_config(
    pod: &Pod,
    container: &Container,
    attempt: u32,
    env: &[(String, String)],
) -> cri::ContainerConfig {
    let (envs, command, args) = super::env::cri_parts(env, container);
    let mut labels = pod_labels(pod);
    labels.insert(LABEL_CONTAINER_NAME.into(), container.name.clone());
    cri::ContainerConfig {
        metadata: Some(cri::ContainerMetadata {
            name: container.name.clone(),
            attempt,
        }),
        image: Some(cri::ImageSpec {
            image: container.image.clone().unwrap_or_default(),
            ..Default::default()
        }),
        command,
        args,
        working_dir: container.working_dir.clone().unwrap_or_default(),
        envs,
        labels,
        annotations: HashMap::from([(
            "io.kubernetes.container.restartCount".to_string(),
            attempt.to_string(),
        )]),
        log_path: format!("{}/{attempt}.log", container.name),
        // For `kubectl attach`: the runtime keeps stdin open (and closes it after the first
        // attach with `stdinOnce`).
        stdin: container.stdin.unwrap_or(false),
        stdin_once: container.stdin_once.unwrap_or(false),
        // `kubectl run -it`: the runtime gives the process a terminal.
        tty: container.tty.unwrap_or(false),
        linux: Some(cri::LinuxContainerConfig {
            security_context: Some(cri::LinuxContainerSecurityContext {
                namespace_options: Some(namespaces_for_pod(pod)),
                ..Default::default()
            }),
            resources: Some(cri::LinuxContainerResources {
                memory_limit_in_bytes: memory_limit_bytes(container),
                ..Default::default()
            }),
        }),
        ..Default::default()
    }
}

/// `resources.limits.memory` in whole bytes, rounded up as kubelet's `Quantity.Value()` does
/// (`kuberuntime_container_linux.go` `generateLinuxContainerResources`); 0 (no limit) when unset
/// or not a quantity.
pub fn memory_limit_bytes(container: &Container) -> i64 {
    let milli = container
        .resources
        .as_ref()
        .and_then(|r| r.limits.as_ref())
        .and_then(|l| l.get("memory"))
        .and_then(|q| rkube_scheduler::resources::parse_milli(&q.0))
        .unwrap_or(0);
    i64::try_from((milli + 999).div_euclid(1000)).unwrap_or(i64::MAX).max(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn container(limits: serde_json::Value) -> Container {
        serde_json::from_value(serde_json::json!({"name": "c", "resources": {"limits": limits}})).expect("container")
    }

    #[test]
    fn memory_limit_is_whole_bytes_rounded_up_and_zero_when_unset() {
        assert_eq!(memory_limit_bytes(&container(serde_json::json!({"memory": "64Mi"}))), 64 << 20);
        assert_eq!(memory_limit_bytes(&container(serde_json::json!({"memory": "1500m"}))), 2);
        assert_eq!(memory_limit_bytes(&container(serde_json::json!({"cpu": "1"}))), 0);
        let config = container_config(&Pod::default(), &container(serde_json::json!({"memory": "1Gi"})), 0, &[]);
        let resources = config.linux.and_then(|l| l.resources).expect("resources");
        assert_eq!(resources.memory_limit_in_bytes, 1 << 30, "the CRI request carries the limit");
    }
}
