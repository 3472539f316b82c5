//! Ephemeral containers (`kubectl debug`): the containers of
//! `spec.ephemeralContainers`, run like regular containers but started once
//! and never restarted, even when the sandbox is re-created, and reported in
//! `status.ephemeralContainerStatuses` (upstream `computePodActions`:
//! "Ephemeral Containers are never restarted").
//!
//! `targetContainerName` (`kubectl debug --target=app`): the ephemeral
//! container joins the process namespace of that container (CRI
//! `NamespaceOption.pid = TARGET`, `target_id` = the target's container id),
//! as kubelet's `startContainer` (`getTargetID`) and
//! `generateLinuxContainerConfig` do: only when the pod would give the
//! container its own PID namespace (not with `hostPID` or
//! `shareProcessNamespace`, which already share one), and with
//! `CreateContainerConfigError` "unable to find target container <name>"
//! while the runtime has no container of that name. On `rkube runtime`, whose
//! containers are host processes in the node's PID namespace, every container
//! already sees every other's processes (`ps` lists the target); the runtime
//! checks that the target exists in the same sandbox.

use k8s_openapi::api::core::v1::{Container, EphemeralContainer, Pod};
use rkube_runtime::cri;

use crate::pleg::PodStatus;

/// An ephemeral container as a [`Container`] (the fields they share; an
/// ephemeral container sets no ports, probes, lifecycle or resources, the
/// API server refuses them). `targetContainerName` is not a container field:
/// [`target_of`] reads it and [`join_target`] applies it.
pub fn as_container(ec: &EphemeralContainer) -> Container {
    Container {
        name: ec.name.clone(),
        image: ec.image.clone(),
        image_pull_policy: ec.image_pull_policy.clone(),
        command: ec.command.clone(),
        args: ec.args.clone(),
        working_dir: ec.working_dir.clone(),
        env: ec.env.clone(),
        env_from: ec.env_from.clone(),
        volume_mounts: ec.volume_mounts.clone(),
        volume_devices: ec.volume_devices.clone(),
        security_context: ec.security_context.clone(),
        stdin: ec.stdin,
        stdin_once: ec.stdin_once,
        tty: ec.tty,
        termination_message_path: ec.termination_message_path.clone(),
        termination_message_policy: ec.termination_message_policy.clone(),
        ..Container::default()
    }
}

/// The pod's ephemeral containers as [`Container`]s, in spec order.
pub fn containers(pod: &Pod) -> Vec<Container> {
    pod.spec.as_ref().and_then(|s| s.ephemeral_containers.as_ref()).into_iter().flatten().map(as_container).collect()
}

/// The `targetContainerName` of the pod's ephemeral container `name` (`None` when it has none
/// or `name` is not an ephemeral container).
pub fn target_of<'a>(pod: &'a Pod, name: &str) -> Option<&'a str> {
    pod.spec
        .as_ref()?
        .ephemeral_containers
        .as_ref()?
        .iter()
        .find(|ec| ec.name == name)?
        .target_container_name
        .as_deref()
        .filter(|t| !t.is_empty())
}

/// The runtime's id of the container `target` names (its newest one, running or not, as
/// upstream's `FindContainerStatusByName`). Errors with kubelet's message when there is none.
pub fn target_id(status: &PodStatus, target: &str) -> Result<String, String> {
    status
        .latest_container(target)
        .map(|c| c.id.clone())
        .ok_or_else(|| format!("unable to find target container {target}"))
}

/// Makes `config` join the PID namespace of container `target_id`: `pid = TARGET` when it
/// would otherwise get its own (`CONTAINER`); a pod-wide or node PID namespace is kept.
pub fn join_target(config: &mut cri::ContainerConfig, target_id: &str) {
    let Some(ns) = config
        .linux
        .get_or_insert_with(Default::default)
        .security_context
        .get_or_insert_with(Default::default)
        .namespace_options
        .as_mut()
    else {
        return;
    };
    if ns.pid == cri::NamespaceMode::Container as i32 {
        ns.pid = cri::NamespaceMode::Target as i32;
        ns.target_id = target_id.to_string();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pod::cri_config::container_config;
    use serde_json::json;

    fn pod(spec: serde_json::Value) -> Pod {
        let mut spec = spec;
        spec["containers"] = json!([{"name": "app", "image": "busybox", "command": ["sleep", "9"]}]);
        spec["ephemeralContainers"] = json!([
            {"name": "dbg", "image": "busybox", "command": ["sh"], "targetContainerName": "app"},
            {"name": "plain", "image": "busybox", "command": ["sh"]},
        ]);
        serde_json::from_value(json!({"metadata": {"name": "p", "namespace": "default", "uid": "u"}, "spec": spec})).expect("pod")
    }

    fn pid_of(config: &cri::ContainerConfig) -> (i32, String) {
        let ns = config.linux.as_ref().and_then(|l| l.security_context.as_ref()).and_then(|s| s.namespace_options.clone()).expect("namespaces");
        (ns.pid, ns.target_id)
    }

    #[test]
    fn a_target_is_joined_only_where_the_container_would_have_its_own_pid_namespace() {
        let (own, shared, node, target) = (
            cri::NamespaceMode::Container as i32,
            cri::NamespaceMode::Pod as i32,
            cri::NamespaceMode::Node as i32,
            cri::NamespaceMode::Target as i32,
        );
        for (spec, expected) in [
            (json!({}), (target, "cid-app".to_string())),
            (json!({"shareProcessNamespace": true}), (shared, String::new())),
            (json!({"hostPID": true}), (node, String::new())),
        ] {
            let p = pod(spec.clone());
            let ec = containers(&p).into_iter().find(|c| c.name == "dbg").expect("dbg");
            let mut config = container_config(&p, &ec, 0, &[]);
            assert_eq!(pid_of(&config).0, if expected.0 == target { own } else { expected.0 }, "{spec}");
            join_target(&mut config, "cid-app");
            assert_eq!(pid_of(&config), expected, "{spec}");
        }
    }

    #[test]
    fn the_target_is_the_newest_container_of_that_name_or_a_config_error() {
        let p = pod(json!({}));
        assert_eq!(target_of(&p, "dbg"), Some("app"));
        assert_eq!(target_of(&p, "plain"), None);
        assert_eq!(target_of(&p, "app"), None, "not an ephemeral container");
        let named = |id: &str, name: &str, created_at: i64| cri::ContainerStatus {
            id: id.into(),
            metadata: Some(cri::ContainerMetadata { name: name.into(), attempt: 0 }),
            created_at,
            ..Default::default()
        };
        let mut status = PodStatus::empty("u");
        assert_eq!(target_id(&status, "app"), Err("unable to find target container app".to_string()));
        // Newest first, as the PLEG sorts them.
        status.container_statuses = vec![named("new", "app", 2), named("other", "side", 3), named("old", "app", 1)];
        status.container_statuses.sort_by_key(|c| std::cmp::Reverse(c.created_at));
        assert_eq!(target_id(&status, "app"), Ok("new".to_string()));
    }
}
