//! Parts shared by the built-in rows ([`super::builtin`]): the subresources
//! and selectable fields that are more than one line, with upstream's names
//! (`pkg/registry/core/pod/storage`, `pkg/registry/core/event`,
//! `pkg/apis/events/v1`).

use super::{bool_field, status, str_field, subresource, SelectableField, SubresourceInfo, STATUS_VERBS};
use crate::strategy;

/// `namespaces/finalize` (PUT only, as upstream's `FinalizeREST`).
pub(super) const FINALIZE: SubresourceInfo =
    SubresourceInfo { updates: "/spec/finalizers", ..subresource("finalize", "Namespace", &["update"], "") };

/// `serviceaccounts/<name>/token`: TokenRequest (create only, nothing stored).
pub(super) const TOKEN: SubresourceInfo =
    subresource("token", "TokenRequest", &["create"], "authentication.k8s.io/v1");

/// `nodes/<name>/proxy[/<path>]`: requests passed to the node's kubelet (upstream
/// `pkg/registry/core/node/rest/proxy.go`; the connect verbs discovery lists).
pub(super) const NODE_PROXY: SubresourceInfo =
    subresource("proxy", "NodeProxyOptions", &["create", "delete", "get", "patch", "update"], "");

/// Pod subresources served today.
pub(super) const POD_SUBRESOURCES: &[SubresourceInfo] = &[
    status("Pod"),
    subresource("binding", "Binding", &["create"], ""),
    // `kubectl debug`: GET, PUT and PATCH of the pod, changing only
    // `spec.ephemeralContainers` (upstream `EphemeralContainersREST`).
    SubresourceInfo {
        updates: "/spec/ephemeralContainers",
        validate_update: Some(strategy::validate_ephemeral_containers_update),
        ..subresource("ephemeralcontainers", "Pod", STATUS_VERBS, "")
    },
    subresource("eviction", "Eviction", &["create"], "policy/v1"),
    subresource("log", "Pod", &["get"], ""),
    subresource("exec", "PodExecOptions", &["create", "get"], ""),
    subresource("attach", "PodAttachOptions", &["create", "get"], ""),
    subresource("portforward", "PodPortForwardOptions", &["create", "get"], ""),
];

/// Selectable fields of pods (upstream `PodToSelectableFields`).
pub(super) const POD_FIELDS: &[SelectableField] = &[
    str_field("spec.nodeName", "spec.nodeName"),
    str_field("spec.restartPolicy", "spec.restartPolicy"),
    str_field("spec.schedulerName", "spec.schedulerName"),
    str_field("spec.serviceAccountName", "spec.serviceAccountName"),
    bool_field("spec.hostNetwork", "spec.hostNetwork"),
    str_field("status.phase", "status.phase"),
    str_field("status.podIP", "status.podIP"),
    str_field("status.nominatedNodeName", "status.nominatedNodeName"),
];

/// Selectable fields of events (upstream `ToSelectableFields` of core events).
pub(super) const EVENT_FIELDS: &[SelectableField] = &[
    str_field("involvedObject.kind", "involvedObject.kind"),
    str_field("involvedObject.namespace", "involvedObject.namespace"),
    str_field("involvedObject.name", "involvedObject.name"),
    str_field("involvedObject.uid", "involvedObject.uid"),
    str_field("involvedObject.apiVersion", "involvedObject.apiVersion"),
    str_field("involvedObject.resourceVersion", "involvedObject.resourceVersion"),
    str_field("involvedObject.fieldPath", "involvedObject.fieldPath"),
    str_field("reason", "reason"),
    str_field("reportingComponent", "reportingComponent"),
    str_field("source", "source.component"),
    str_field("type", "type"),
];

/// Selectable fields of events.k8s.io/v1 events: the core/v1 ones under
/// their events.k8s.io names (upstream `AddFieldLabelConversionsForEvent` of
/// `pkg/apis/events/v1`; `source` has no events.k8s.io name). The
/// conversion maps each to the stored row's label.
pub(super) const EVENT_V1_FIELDS: &[SelectableField] = &[
    str_field("regarding.kind", "regarding.kind"),
    str_field("regarding.namespace", "regarding.namespace"),
    str_field("regarding.name", "regarding.name"),
    str_field("regarding.uid", "regarding.uid"),
    str_field("regarding.apiVersion", "regarding.apiVersion"),
    str_field("regarding.resourceVersion", "regarding.resourceVersion"),
    str_field("regarding.fieldPath", "regarding.fieldPath"),
    str_field("reason", "reason"),
    str_field("reportingController", "reportingController"),
    str_field("type", "type"),
];
