//! The built-in rows of the resource table: every GA resource of
//! Kubernetes 1.33's API groups that rkube serves, with upstream's names,
//! scopes, short names, categories, subresources, selectable fields and
//! etcd key prefixes (`pkg/registry/<group>/<resource>/storage/storage.go`),
//! each with its `k8s-openapi` type and its strategy ([`crate::strategy`]).
//!
//! Order is discovery order: core first, then the named groups sorted by
//! name, resources sorted by name within a group version (as
//! kube-apiserver's discovery lists them).

use k8s_openapi::api::{
    admissionregistration, apps, authentication, authorization, autoscaling, batch, certificates, coordination, core, discovery, events, flowcontrol,
    networking, node, policy, rbac, scheduling, storage,
};
use k8s_openapi::{apiextensions_apiserver, kube_aggregator};

use super::typed::{typed, TypedKind};
use super::{
    bool_field, int_field, status, str_field, ResourceInfo, SelectableField, SubresourceInfo, BASE, CREATE_VERBS,
    NAMESPACE_VERBS, APPROVAL, SCALE,
};
use crate::strategy;

/// Verbs of read-only resources (componentstatuses).
pub const READ_VERBS: &[&str] = &["get", "list"];

/// `namespaces/finalize` (PUT only, as upstream's `FinalizeREST`).
const FINALIZE: SubresourceInfo = SubresourceInfo { name: "finalize", kind: "Namespace", verbs: &["update"], api_version: "" };

/// `serviceaccounts/<name>/token`: TokenRequest (create only, nothing stored).
const TOKEN: SubresourceInfo =
    SubresourceInfo { name: "token", kind: "TokenRequest", verbs: &["create"], api_version: "authentication.k8s.io/v1" };

/// Pod subresources served today.
const POD_SUBRESOURCES: &[SubresourceInfo] = &[
    status("Pod"),
    SubresourceInfo { name: "binding", kind: "Binding", verbs: &["create"], api_version: "" },
    SubresourceInfo { name: "eviction", kind: "Eviction", verbs: &["create"], api_version: "policy/v1" },
    SubresourceInfo { name: "log", kind: "Pod", verbs: &["get"], api_version: "" },
    SubresourceInfo { name: "exec", kind: "PodExecOptions", verbs: &["create", "get"], api_version: "" },
    SubresourceInfo { name: "attach", kind: "PodAttachOptions", verbs: &["create", "get"], api_version: "" },
    SubresourceInfo { name: "portforward", kind: "PodPortForwardOptions", verbs: &["create", "get"], api_version: "" },
];

/// Selectable fields of pods (upstream `PodToSelectableFields`).
const POD_FIELDS: &[SelectableField] = &[
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
const EVENT_FIELDS: &[SelectableField] = &[
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
const EVENT_V1_FIELDS: &[SelectableField] = &[
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

/// A create-only review row: answered on each POST and never stored
/// ([`ResourceInfo::stored`]), as upstream's `tokenreview`,
/// `selfsubjectreview`, `*subjectaccessreview` and `selfsubjectrulesreview` REST storage.
const fn review(
    group: &'static str,
    resource: &'static str,
    kind: &'static str,
    singular: &'static str,
    namespaced: bool,
    typed: TypedKind,
) -> ResourceInfo {
    ResourceInfo { group, resource, kind, singular, namespaced, verbs: CREATE_VERBS, stored: false, typed: Some(typed), ..BASE }
}

const AUTHN: &str = "authentication.k8s.io";
const AUTHZ: &str = "authorization.k8s.io";

/// Every built-in resource rkube serves, in discovery order.
pub static RESOURCES: &[ResourceInfo] = &[
    ResourceInfo {
        resource: "componentstatuses",
        kind: "ComponentStatus",
        list_kind: "ComponentStatusList",
        singular: "componentstatus",
        namespaced: false,
        short_names: &["cs"],
        verbs: READ_VERBS,
        storage_prefix: "componentstatuses",
        typed: Some(typed::<core::v1::ComponentStatus>()),
        ..BASE
    },
    ResourceInfo {
        resource: "configmaps",
        kind: "ConfigMap",
        list_kind: "ConfigMapList",
        singular: "configmap",
        short_names: &["cm"],
        storage_prefix: "configmaps",
        typed: Some(typed::<core::v1::ConfigMap>()),
        strategy: strategy::CONFIG_MAP,
        ..BASE
    },
    ResourceInfo {
        resource: "endpoints",
        kind: "Endpoints",
        list_kind: "EndpointsList",
        singular: "endpoints",
        short_names: &["ep"],
        storage_prefix: "services/endpoints",
        allow_create_on_update: true,
        typed: Some(typed::<core::v1::Endpoints>()),
        strategy: strategy::ENDPOINTS,
        ..BASE
    },
    ResourceInfo {
        resource: "events",
        kind: "Event",
        list_kind: "EventList",
        singular: "event",
        short_names: &["ev"],
        storage_prefix: "events",
        fields: EVENT_FIELDS,
        allow_create_on_update: true,
        typed: Some(typed::<core::v1::Event>()),
        ..BASE
    },
    ResourceInfo {
        resource: "limitranges",
        kind: "LimitRange",
        list_kind: "LimitRangeList",
        singular: "limitrange",
        short_names: &["limits"],
        storage_prefix: "limitranges",
        has_spec: true,
        typed: Some(typed::<core::v1::LimitRange>()),
        ..BASE
    },
    ResourceInfo {
        resource: "namespaces",
        kind: "Namespace",
        list_kind: "NamespaceList",
        singular: "namespace",
        namespaced: false,
        short_names: &["ns"],
        verbs: NAMESPACE_VERBS,
        subresources: &[status("Namespace"), FINALIZE],
        storage_prefix: "namespaces",
        has_spec: true,
        fields: &[str_field("status.phase", "status.phase")],
        typed: Some(typed::<core::v1::Namespace>()),
        strategy: strategy::NAMESPACE,
        ..BASE
    },
    ResourceInfo {
        resource: "nodes",
        kind: "Node",
        list_kind: "NodeList",
        singular: "node",
        namespaced: false,
        short_names: &["no"],
        subresources: &[status("Node")],
        storage_prefix: "minions",
        has_spec: true,
        fields: &[bool_field("spec.unschedulable", "spec.unschedulable")],
        typed: Some(typed::<core::v1::Node>()),
        strategy: strategy::NODE,
        ..BASE
    },
    ResourceInfo {
        resource: "persistentvolumeclaims",
        kind: "PersistentVolumeClaim",
        list_kind: "PersistentVolumeClaimList",
        singular: "persistentvolumeclaim",
        short_names: &["pvc"],
        subresources: &[status("PersistentVolumeClaim")],
        storage_prefix: "persistentvolumeclaims",
        has_spec: true,
        typed: Some(typed::<core::v1::PersistentVolumeClaim>()),
        strategy: strategy::PERSISTENT_VOLUME_CLAIM,
        ..BASE
    },
    ResourceInfo {
        resource: "persistentvolumes",
        kind: "PersistentVolume",
        list_kind: "PersistentVolumeList",
        singular: "persistentvolume",
        namespaced: false,
        short_names: &["pv"],
        subresources: &[status("PersistentVolume")],
        storage_prefix: "persistentvolumes",
        has_spec: true,
        typed: Some(typed::<core::v1::PersistentVolume>()),
        strategy: strategy::PERSISTENT_VOLUME,
        ..BASE
    },
    ResourceInfo {
        resource: "pods",
        kind: "Pod",
        list_kind: "PodList",
        singular: "pod",
        short_names: &["po"],
        categories: &["all"],
        subresources: POD_SUBRESOURCES,
        storage_prefix: "pods",
        has_spec: true,
        fields: POD_FIELDS,
        typed: Some(typed::<core::v1::Pod>()),
        strategy: strategy::POD,
        ..BASE
    },
    ResourceInfo {
        resource: "podtemplates",
        kind: "PodTemplate",
        list_kind: "PodTemplateList",
        singular: "podtemplate",
        storage_prefix: "podtemplates",
        typed: Some(typed::<core::v1::PodTemplate>()),
        strategy: strategy::POD_TEMPLATE,
        ..BASE
    },
    ResourceInfo {
        resource: "replicationcontrollers",
        kind: "ReplicationController",
        list_kind: "ReplicationControllerList",
        singular: "replicationcontroller",
        short_names: &["rc"],
        categories: &["all"],
        subresources: &[status("ReplicationController"), SCALE],
        storage_prefix: "controllers",
        has_spec: true,
        fields: &[int_field("status.replicas", "status.replicas")],
        typed: Some(typed::<core::v1::ReplicationController>()),
        strategy: strategy::REPLICATION_CONTROLLER,
        ..BASE
    },
    ResourceInfo {
        resource: "resourcequotas",
        kind: "ResourceQuota",
        list_kind: "ResourceQuotaList",
        singular: "resourcequota",
        short_names: &["quota"],
        subresources: &[status("ResourceQuota")],
        storage_prefix: "resourcequotas",
        has_spec: true,
        typed: Some(typed::<core::v1::ResourceQuota>()),
        strategy: strategy::STATUS_RESET,
        ..BASE
    },
    ResourceInfo {
        resource: "secrets",
        kind: "Secret",
        list_kind: "SecretList",
        singular: "secret",
        storage_prefix: "secrets",
        fields: &[str_field("type", "type")],
        typed: Some(typed::<core::v1::Secret>()),
        strategy: strategy::SECRET,
        ..BASE
    },
    ResourceInfo {
        resource: "serviceaccounts",
        kind: "ServiceAccount",
        list_kind: "ServiceAccountList",
        singular: "serviceaccount",
        short_names: &["sa"],
        subresources: &[TOKEN],
        storage_prefix: "serviceaccounts",
        typed: Some(typed::<core::v1::ServiceAccount>()),
        ..BASE
    },
    ResourceInfo {
        resource: "services",
        kind: "Service",
        list_kind: "ServiceList",
        singular: "service",
        short_names: &["svc"],
        categories: &["all"],
        subresources: &[status("Service")],
        storage_prefix: "services/specs",
        has_spec: true,
        fields: &[str_field("spec.clusterIP", "spec.clusterIP"), str_field("spec.type", "spec.type")],
        typed: Some(typed::<core::v1::Service>()),
        strategy: strategy::SERVICE,
        ..BASE
    },
    ResourceInfo {
        group: "admissionregistration.k8s.io",
        resource: "mutatingwebhookconfigurations",
        kind: "MutatingWebhookConfiguration",
        list_kind: "MutatingWebhookConfigurationList",
        singular: "mutatingwebhookconfiguration",
        namespaced: false,
        categories: &["api-extensions"],
        storage_prefix: "mutatingwebhookconfigurations",
        typed: Some(typed::<admissionregistration::v1::MutatingWebhookConfiguration>()),
        strategy: strategy::MUTATING_WEBHOOK_CONFIGURATION,
        ..BASE
    },
    ResourceInfo {
        group: "admissionregistration.k8s.io",
        resource: "validatingadmissionpolicies",
        kind: "ValidatingAdmissionPolicy",
        list_kind: "ValidatingAdmissionPolicyList",
        singular: "validatingadmissionpolicy",
        namespaced: false,
        categories: &["api-extensions"],
        subresources: &[status("ValidatingAdmissionPolicy")],
        storage_prefix: "validatingadmissionpolicies",
        has_spec: true,
        typed: Some(typed::<admissionregistration::v1::ValidatingAdmissionPolicy>()),
        strategy: strategy::VALIDATING_ADMISSION_POLICY,
        ..BASE
    },
    ResourceInfo {
        group: "admissionregistration.k8s.io",
        resource: "validatingadmissionpolicybindings",
        kind: "ValidatingAdmissionPolicyBinding",
        list_kind: "ValidatingAdmissionPolicyBindingList",
        singular: "validatingadmissionpolicybinding",
        namespaced: false,
        categories: &["api-extensions"],
        storage_prefix: "validatingadmissionpolicybindings",
        has_spec: true,
        typed: Some(typed::<admissionregistration::v1::ValidatingAdmissionPolicyBinding>()),
        strategy: strategy::VALIDATING_ADMISSION_POLICY_BINDING,
        ..BASE
    },
    ResourceInfo {
        group: "admissionregistration.k8s.io",
        resource: "validatingwebhookconfigurations",
        kind: "ValidatingWebhookConfiguration",
        list_kind: "ValidatingWebhookConfigurationList",
        singular: "validatingwebhookconfiguration",
        namespaced: false,
        categories: &["api-extensions"],
        storage_prefix: "validatingwebhookconfigurations",
        typed: Some(typed::<admissionregistration::v1::ValidatingWebhookConfiguration>()),
        strategy: strategy::VALIDATING_WEBHOOK_CONFIGURATION,
        ..BASE
    },
    ResourceInfo {
        group: "apiextensions.k8s.io",
        resource: "customresourcedefinitions",
        kind: "CustomResourceDefinition",
        list_kind: "CustomResourceDefinitionList",
        singular: "customresourcedefinition",
        namespaced: false,
        short_names: &["crd", "crds"],
        categories: &["api-extensions"],
        subresources: &[status("CustomResourceDefinition")],
        storage_prefix: "apiextensions.k8s.io/customresourcedefinitions",
        has_spec: true,
        typed: Some(typed::<apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>()),
        strategy: crate::apiextensions::crd::CUSTOM_RESOURCE_DEFINITION,
        ..BASE
    },
    ResourceInfo {
        group: "apiregistration.k8s.io",
        resource: "apiservices",
        kind: "APIService",
        list_kind: "APIServiceList",
        singular: "apiservice",
        namespaced: false,
        categories: &["api-extensions"],
        subresources: &[status("APIService")],
        storage_prefix: "apiregistration.k8s.io/apiservices",
        has_spec: true,
        typed: Some(typed::<kube_aggregator::pkg::apis::apiregistration::v1::APIService>()),
        strategy: strategy::STATUS_RESET,
        ..BASE
    },
    ResourceInfo {
        group: "apps",
        resource: "controllerrevisions",
        kind: "ControllerRevision",
        list_kind: "ControllerRevisionList",
        singular: "controllerrevision",
        storage_prefix: "controllerrevisions",
        typed: Some(typed::<apps::v1::ControllerRevision>()),
        ..BASE
    },
    ResourceInfo {
        group: "apps",
        resource: "daemonsets",
        kind: "DaemonSet",
        list_kind: "DaemonSetList",
        singular: "daemonset",
        short_names: &["ds"],
        categories: &["all"],
        subresources: &[status("DaemonSet")],
        storage_prefix: "daemonsets",
        has_spec: true,
        typed: Some(typed::<apps::v1::DaemonSet>()),
        strategy: strategy::DAEMON_SET,
        ..BASE
    },
    ResourceInfo {
        group: "apps",
        resource: "deployments",
        kind: "Deployment",
        list_kind: "DeploymentList",
        singular: "deployment",
        short_names: &["deploy"],
        categories: &["all"],
        subresources: &[status("Deployment"), SCALE],
        storage_prefix: "deployments",
        has_spec: true,
        typed: Some(typed::<apps::v1::Deployment>()),
        strategy: strategy::DEPLOYMENT,
        ..BASE
    },
    ResourceInfo {
        group: "apps",
        resource: "replicasets",
        kind: "ReplicaSet",
        list_kind: "ReplicaSetList",
        singular: "replicaset",
        short_names: &["rs"],
        categories: &["all"],
        subresources: &[status("ReplicaSet"), SCALE],
        storage_prefix: "replicasets",
        has_spec: true,
        fields: &[int_field("status.replicas", "status.replicas")],
        typed: Some(typed::<apps::v1::ReplicaSet>()),
        strategy: strategy::REPLICA_SET,
        ..BASE
    },
    ResourceInfo {
        group: "apps",
        resource: "statefulsets",
        kind: "StatefulSet",
        list_kind: "StatefulSetList",
        singular: "statefulset",
        short_names: &["sts"],
        categories: &["all"],
        subresources: &[status("StatefulSet"), SCALE],
        storage_prefix: "statefulsets",
        has_spec: true,
        typed: Some(typed::<apps::v1::StatefulSet>()),
        strategy: strategy::STATEFUL_SET,
        ..BASE
    },
    review(AUTHN, "selfsubjectreviews", "SelfSubjectReview", "selfsubjectreview", false, typed::<authentication::v1::SelfSubjectReview>()),
    review(AUTHN, "tokenreviews", "TokenReview", "tokenreview", false, typed::<authentication::v1::TokenReview>()),
    review(AUTHZ, "localsubjectaccessreviews", "LocalSubjectAccessReview", "localsubjectaccessreview", true,
        typed::<authorization::v1::LocalSubjectAccessReview>()),
    review(AUTHZ, "selfsubjectaccessreviews", "SelfSubjectAccessReview", "selfsubjectaccessreview", false,
        typed::<authorization::v1::SelfSubjectAccessReview>()),
    review(AUTHZ, "selfsubjectrulesreviews", "SelfSubjectRulesReview", "selfsubjectrulesreview", false,
        typed::<authorization::v1::SelfSubjectRulesReview>()),
    review(AUTHZ, "subjectaccessreviews", "SubjectAccessReview", "subjectaccessreview", false,
        typed::<authorization::v1::SubjectAccessReview>()),
    ResourceInfo {
        group: "autoscaling",
        version: "v2",
        resource: "horizontalpodautoscalers",
        kind: "HorizontalPodAutoscaler",
        list_kind: "HorizontalPodAutoscalerList",
        singular: "horizontalpodautoscaler",
        short_names: &["hpa"],
        categories: &["all"],
        subresources: &[status("HorizontalPodAutoscaler")],
        storage_prefix: "horizontalpodautoscalers",
        has_spec: true,
        typed: Some(typed::<autoscaling::v2::HorizontalPodAutoscaler>()),
        strategy: strategy::HORIZONTAL_POD_AUTOSCALER,
        ..BASE
    },
    ResourceInfo {
        group: "autoscaling",
        resource: "horizontalpodautoscalers",
        kind: "HorizontalPodAutoscaler",
        list_kind: "HorizontalPodAutoscalerList",
        singular: "horizontalpodautoscaler",
        short_names: &["hpa"],
        categories: &["all"],
        subresources: &[status("HorizontalPodAutoscaler")],
        storage_prefix: "horizontalpodautoscalers",
        has_spec: true,
        typed: Some(typed::<autoscaling::v1::HorizontalPodAutoscaler>()),
        strategy: strategy::HORIZONTAL_POD_AUTOSCALER_V1,
        conversion: Some(super::conversion::HPA_V1),
        ..BASE
    },
    ResourceInfo {
        group: "batch",
        resource: "cronjobs",
        kind: "CronJob",
        list_kind: "CronJobList",
        singular: "cronjob",
        short_names: &["cj"],
        categories: &["all"],
        subresources: &[status("CronJob")],
        storage_prefix: "cronjobs",
        has_spec: true,
        typed: Some(typed::<batch::v1::CronJob>()),
        strategy: strategy::CRON_JOB,
        ..BASE
    },
    ResourceInfo {
        group: "batch",
        resource: "jobs",
        kind: "Job",
        list_kind: "JobList",
        singular: "job",
        categories: &["all"],
        subresources: &[status("Job")],
        storage_prefix: "jobs",
        has_spec: true,
        fields: &[int_field("status.successful", "status.successful")],
        typed: Some(typed::<batch::v1::Job>()),
        strategy: strategy::JOB,
        ..BASE
    },
    ResourceInfo {
        group: "certificates.k8s.io",
        resource: "certificatesigningrequests",
        kind: "CertificateSigningRequest",
        list_kind: "CertificateSigningRequestList",
        singular: "certificatesigningrequest",
        namespaced: false,
        short_names: &["csr"],
        subresources: &[APPROVAL, status("CertificateSigningRequest")],
        storage_prefix: "certificatesigningrequests",
        has_spec: true,
        fields: &[str_field("spec.signerName", "spec.signerName")],
        typed: Some(typed::<certificates::v1::CertificateSigningRequest>()),
        strategy: strategy::CERTIFICATE_SIGNING_REQUEST,
        ..BASE
    },
    ResourceInfo {
        group: "coordination.k8s.io",
        resource: "leases",
        kind: "Lease",
        list_kind: "LeaseList",
        singular: "lease",
        storage_prefix: "leases",
        has_spec: true,
        allow_create_on_update: true,
        typed: Some(typed::<coordination::v1::Lease>()),
        ..BASE
    },
    ResourceInfo {
        group: "discovery.k8s.io",
        resource: "endpointslices",
        kind: "EndpointSlice",
        list_kind: "EndpointSliceList",
        singular: "endpointslice",
        storage_prefix: "endpointslices",
        fields: &[str_field("addressType", "addressType")],
        typed: Some(typed::<discovery::v1::EndpointSlice>()),
        strategy: strategy::ENDPOINT_SLICE,
        ..BASE
    },
    ResourceInfo {
        group: "events.k8s.io",
        resource: "events",
        kind: "Event",
        list_kind: "EventList",
        singular: "event",
        short_names: &["ev"],
        storage_prefix: "events",
        fields: EVENT_V1_FIELDS,
        allow_create_on_update: true,
        typed: Some(typed::<events::v1::Event>()),
        strategy: strategy::EVENT_V1,
        conversion: Some(super::conversion::EVENTS_V1),
        ..BASE
    },
    ResourceInfo {
        group: "flowcontrol.apiserver.k8s.io",
        resource: "flowschemas",
        kind: "FlowSchema",
        list_kind: "FlowSchemaList",
        singular: "flowschema",
        namespaced: false,
        subresources: &[status("FlowSchema")],
        storage_prefix: "flowschemas",
        has_spec: true,
        typed: Some(typed::<flowcontrol::v1::FlowSchema>()),
        strategy: strategy::FLOW_SCHEMA,
        ..BASE
    },
    ResourceInfo {
        group: "flowcontrol.apiserver.k8s.io",
        resource: "prioritylevelconfigurations",
        kind: "PriorityLevelConfiguration",
        list_kind: "PriorityLevelConfigurationList",
        singular: "prioritylevelconfiguration",
        namespaced: false,
        subresources: &[status("PriorityLevelConfiguration")],
        storage_prefix: "prioritylevelconfigurations",
        has_spec: true,
        typed: Some(typed::<flowcontrol::v1::PriorityLevelConfiguration>()),
        strategy: strategy::PRIORITY_LEVEL_CONFIGURATION,
        ..BASE
    },
    ResourceInfo {
        group: "networking.k8s.io",
        resource: "ingressclasses",
        kind: "IngressClass",
        list_kind: "IngressClassList",
        singular: "ingressclass",
        namespaced: false,
        storage_prefix: "ingressclasses",
        has_spec: true,
        typed: Some(typed::<networking::v1::IngressClass>()),
        ..BASE
    },
    ResourceInfo {
        group: "networking.k8s.io",
        resource: "ingresses",
        kind: "Ingress",
        list_kind: "IngressList",
        singular: "ingress",
        short_names: &["ing"],
        subresources: &[status("Ingress")],
        storage_prefix: "ingress",
        has_spec: true,
        typed: Some(typed::<networking::v1::Ingress>()),
        strategy: strategy::INGRESS,
        ..BASE
    },
    ResourceInfo {
        group: "networking.k8s.io",
        resource: "ipaddresses",
        kind: "IPAddress",
        list_kind: "IPAddressList",
        singular: "ipaddress",
        namespaced: false,
        short_names: &["ip"],
        storage_prefix: "ipaddresses",
        has_spec: true,
        typed: Some(typed::<networking::v1::IPAddress>()),
        ..BASE
    },
    ResourceInfo {
        group: "networking.k8s.io",
        resource: "networkpolicies",
        kind: "NetworkPolicy",
        list_kind: "NetworkPolicyList",
        singular: "networkpolicy",
        short_names: &["netpol"],
        storage_prefix: "networkpolicies",
        has_spec: true,
        typed: Some(typed::<networking::v1::NetworkPolicy>()),
        strategy: strategy::NETWORK_POLICY,
        ..BASE
    },
    ResourceInfo {
        group: "networking.k8s.io",
        resource: "servicecidrs",
        kind: "ServiceCIDR",
        list_kind: "ServiceCIDRList",
        singular: "servicecidr",
        namespaced: false,
        subresources: &[status("ServiceCIDR")],
        storage_prefix: "servicecidrs",
        has_spec: true,
        typed: Some(typed::<networking::v1::ServiceCIDR>()),
        strategy: strategy::STATUS_RESET,
        ..BASE
    },
    ResourceInfo {
        group: "node.k8s.io",
        resource: "runtimeclasses",
        kind: "RuntimeClass",
        list_kind: "RuntimeClassList",
        singular: "runtimeclass",
        namespaced: false,
        storage_prefix: "runtimeclasses",
        typed: Some(typed::<node::v1::RuntimeClass>()),
        strategy: strategy::RUNTIME_CLASS,
        ..BASE
    },
    ResourceInfo {
        group: "policy",
        resource: "poddisruptionbudgets",
        kind: "PodDisruptionBudget",
        list_kind: "PodDisruptionBudgetList",
        singular: "poddisruptionbudget",
        short_names: &["pdb"],
        subresources: &[status("PodDisruptionBudget")],
        storage_prefix: "poddisruptionbudgets",
        has_spec: true,
        typed: Some(typed::<policy::v1::PodDisruptionBudget>()),
        strategy: strategy::POD_DISRUPTION_BUDGET,
        ..BASE
    },
    ResourceInfo {
        group: "rbac.authorization.k8s.io",
        resource: "clusterrolebindings",
        kind: "ClusterRoleBinding",
        list_kind: "ClusterRoleBindingList",
        singular: "clusterrolebinding",
        namespaced: false,
        storage_prefix: "clusterrolebindings",
        allow_create_on_update: true,
        typed: Some(typed::<rbac::v1::ClusterRoleBinding>()),
        ..BASE
    },
    ResourceInfo {
        group: "rbac.authorization.k8s.io",
        resource: "clusterroles",
        kind: "ClusterRole",
        list_kind: "ClusterRoleList",
        singular: "clusterrole",
        namespaced: false,
        storage_prefix: "clusterroles",
        allow_create_on_update: true,
        typed: Some(typed::<rbac::v1::ClusterRole>()),
        ..BASE
    },
    ResourceInfo {
        group: "rbac.authorization.k8s.io",
        resource: "rolebindings",
        kind: "RoleBinding",
        list_kind: "RoleBindingList",
        singular: "rolebinding",
        storage_prefix: "rolebindings",
        allow_create_on_update: true,
        typed: Some(typed::<rbac::v1::RoleBinding>()),
        ..BASE
    },
    ResourceInfo {
        group: "rbac.authorization.k8s.io",
        resource: "roles",
        kind: "Role",
        list_kind: "RoleList",
        singular: "role",
        storage_prefix: "roles",
        allow_create_on_update: true,
        typed: Some(typed::<rbac::v1::Role>()),
        ..BASE
    },
    ResourceInfo {
        group: "scheduling.k8s.io",
        resource: "priorityclasses",
        kind: "PriorityClass",
        list_kind: "PriorityClassList",
        singular: "priorityclass",
        namespaced: false,
        short_names: &["pc"],
        storage_prefix: "priorityclasses",
        typed: Some(typed::<scheduling::v1::PriorityClass>()),
        strategy: strategy::PRIORITY_CLASS,
        ..BASE
    },
    ResourceInfo {
        group: "storage.k8s.io",
        resource: "csidrivers",
        kind: "CSIDriver",
        list_kind: "CSIDriverList",
        singular: "csidriver",
        namespaced: false,
        storage_prefix: "csidrivers",
        has_spec: true,
        typed: Some(typed::<storage::v1::CSIDriver>()),
        strategy: strategy::CSI_DRIVER,
        ..BASE
    },
    ResourceInfo {
        group: "storage.k8s.io",
        resource: "csinodes",
        kind: "CSINode",
        list_kind: "CSINodeList",
        singular: "csinode",
        namespaced: false,
        storage_prefix: "csinodes",
        has_spec: true,
        typed: Some(typed::<storage::v1::CSINode>()),
        ..BASE
    },
    ResourceInfo {
        group: "storage.k8s.io",
        resource: "csistoragecapacities",
        kind: "CSIStorageCapacity",
        list_kind: "CSIStorageCapacityList",
        singular: "csistoragecapacity",
        storage_prefix: "csistoragecapacities",
        typed: Some(typed::<storage::v1::CSIStorageCapacity>()),
        ..BASE
    },
    ResourceInfo {
        group: "storage.k8s.io",
        resource: "storageclasses",
        kind: "StorageClass",
        list_kind: "StorageClassList",
        singular: "storageclass",
        namespaced: false,
        short_names: &["sc"],
        storage_prefix: "storageclasses",
        typed: Some(typed::<storage::v1::StorageClass>()),
        strategy: strategy::STORAGE_CLASS,
        ..BASE
    },
    ResourceInfo {
        group: "storage.k8s.io",
        resource: "volumeattachments",
        kind: "VolumeAttachment",
        list_kind: "VolumeAttachmentList",
        singular: "volumeattachment",
        namespaced: false,
        subresources: &[status("VolumeAttachment")],
        storage_prefix: "volumeattachments",
        has_spec: true,
        typed: Some(typed::<storage::v1::VolumeAttachment>()),
        strategy: strategy::STATUS_RESET,
        ..BASE
    },
];
