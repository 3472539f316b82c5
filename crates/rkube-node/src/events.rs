//! Events the node agent reports about pods, with kubelet's reasons and
//! messages (upstream `pkg/kubelet/events/event.go`; reporting controller
//! `kubelet`, instance the node's name), through kube-runtime's events
//! `Recorder` (events.k8s.io/v1, which `kubectl describe` and `kubectl get
//! events` show).

use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};

/// `Failed`: a container could not be configured, created or started.
pub const FAILED: &str = "Failed";
/// `FailedMount`: a volume could not be set up.
pub const FAILED_MOUNT: &str = "FailedMount";
/// `Pulled`: the image is present.
pub const PULLED: &str = "Pulled";
/// `Created`: a container was created.
pub const CREATED: &str = "Created";
/// `Started`: a container was started.
pub const STARTED: &str = "Started";
/// `Killing`: a container is being stopped.
pub const KILLING: &str = "Killing";
/// `FailedPostStartHook`: a postStart hook failed (the container is killed).
pub const FAILED_POST_START_HOOK: &str = "FailedPostStartHook";
/// `FailedPreStopHook`: a preStop hook failed (the stop goes on).
pub const FAILED_PRE_STOP_HOOK: &str = "FailedPreStopHook";
/// `Unhealthy`: a probe failed.
pub const UNHEALTHY: &str = "Unhealthy";
/// `BackOff`: a container is waiting out its restart back-off.
pub const BACK_OFF: &str = "BackOff";
/// `ErrImageNeverPull`: the image is absent and its pull policy is `Never`.
pub const ERR_IMAGE_NEVER_PULL: &str = "ErrImageNeverPull";
/// `InvalidEnvironmentVariableNames`: `envFrom` keys that are no variable names were skipped.
pub const INVALID_ENV_NAMES: &str = "InvalidEnvironmentVariableNames";

/// Publishes the agent's events about pods.
#[derive(Clone)]
pub struct PodEvents {
    client: kube::Client,
    node: String,
}

impl PodEvents {
    /// Events reported by `kubelet` on `node`.
    pub fn new(client: kube::Client, node: impl Into<String>) -> Self {
        PodEvents {
            client,
            node: node.into(),
        }
    }

    /// The reference to `pod`, or to its container `container`
    /// (`fieldPath: spec.containers{name}`, or `spec.initContainers{name}`).
    pub fn reference(pod: &Pod, container: Option<(&str, bool)>) -> ObjectReference {
        ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            name: pod.metadata.name.clone(),
            namespace: pod.metadata.namespace.clone(),
            uid: pod.metadata.uid.clone(),
            resource_version: pod.metadata.resource_version.clone(),
            field_path: container.map(|(name, init)| {
                if init {
                    format!("spec.initContainers{{{name}}}")
                } else {
                    format!("spec.containers{{{name}}}")
                }
            }),
        }
    }

    /// Publishes an event; failures are logged (events are best effort).
    /// Each note is its own event: kube-runtime's recorder would fold
    /// events of one reason and object into a series whatever their note,
    /// while upstream's correlator keys on the message too.
    pub async fn publish(
        &self,
        regarding: &ObjectReference,
        warning: bool,
        reason: &str,
        note: String,
    ) {
        let reporter = Reporter {
            controller: "kubelet".into(),
            instance: Some(self.node.clone()),
        };
        let recorder = Recorder::new(self.client.clone(), reporter);
        let type_ = if warning {
            EventType::Warning
        } else {
            EventType::Normal
        };
        let ev = Event {
            type_,
            reason: reason.into(),
            note: Some(note),
            action: reason.into(),
            secondary: None,
        };
        if let Err(err) = recorder.publish(&ev, regarding).await {
            tracing::debug!(reason, %err, "could not record an event");
        }
    }
}
