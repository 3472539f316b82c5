//! Ephemeral containers (`kubectl debug`): the containers of
//! `spec.ephemeralContainers`, run like regular containers but started once
//! and never restarted, even when the sandbox is re-created, and reported in
//! `status.ephemeralContainerStatuses` (upstream `computePodActions`:
//! "Ephemeral Containers are never restarted").

use k8s_openapi::api::core::v1::{Container, EphemeralContainer, Pod};

/// An ephemeral container as a [`Container`] (the fields they share; an
/// ephemeral container sets no ports, probes, lifecycle or resources, the
/// API server refuses them). `targetContainerName` is dropped: the
/// container shares the pod's sandbox, not the target's process namespace.
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
