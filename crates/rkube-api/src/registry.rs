//! The resource registry: one static entry per served resource.
//!
//! Each [`ResourceInfo`] says everything the API server needs to serve a
//! resource: its group/version/plural name, kind and list kind, scope, the
//! short names, verbs and categories legacy discovery advertises, its
//! subresources, the fields a field selector may use, and where its objects
//! live in storage. Adding a resource is adding one entry to [`RESOURCES`].
//!
//! # Storage key layout
//!
//! Keys follow kube-apiserver's etcd layout (`pkg/registry/*/storage`), so an
//! etcd written by rkube reads like one written by kube-apiserver with
//! `--storage-media-type=application/json`:
//!
//! | resource | key |
//! |---|---|
//! | namespaced | `<prefix>/<storage_prefix>/<namespace>/<name>` |
//! | cluster-scoped | `<prefix>/<storage_prefix>/<name>` |
//!
//! where `<prefix>` is `--etcd-prefix` (default `/registry`) and
//! `storage_prefix` is upstream's resource prefix. For built-in resources
//! upstream uses the plural resource name without the group (e.g.
//! `/registry/deployments/...`, `/registry/endpointslices/...`,
//! `/registry/leases/...`), with these historical exceptions that rkube keeps:
//! nodes live under `/registry/minions/`, services under
//! `/registry/services/specs/` and endpoints under
//! `/registry/services/endpoints/`. Resources without an upstream layout
//! (none today) would use `<group>/<resource>` like custom resources do.

use serde_json::Value;

/// Verbs of a regular namespaced or cluster-scoped resource
/// (`create`, `delete`, `deletecollection`, `get`, `list`, `patch`, `update`, `watch`).
pub const ALL_VERBS: &[&str] = &["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"];

/// Verbs of namespaces (upstream has no `deletecollection` for them).
pub const NAMESPACE_VERBS: &[&str] = &["create", "delete", "get", "list", "patch", "update", "watch"];

/// Verbs of a `status` subresource.
pub const STATUS_VERBS: &[&str] = &["get", "patch", "update"];

/// How a selectable field's value is read from an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldType {
    /// A string; a missing value reads as `""`.
    Str,
    /// A boolean rendered `"true"`/`"false"`; a missing value reads as `"false"`.
    Bool,
}

/// One field a field selector may use on a resource (upstream `*ToSelectableFields`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SelectableField {
    /// The label used in `fieldSelector`, e.g. `spec.nodeName` or `source`.
    pub label: &'static str,
    /// The dotted JSON path it reads, e.g. `spec.nodeName` or `source.component`.
    pub path: &'static str,
    /// How the value is rendered.
    pub field_type: FieldType,
}

const fn str_field(label: &'static str, path: &'static str) -> SelectableField {
    SelectableField { label, path, field_type: FieldType::Str }
}

const fn bool_field(label: &'static str, path: &'static str) -> SelectableField {
    SelectableField { label, path, field_type: FieldType::Bool }
}

/// A subresource such as `pods/status` or `pods/binding`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SubresourceInfo {
    /// The subresource name (`status`, `binding`).
    pub name: &'static str,
    /// The kind it accepts and returns (`Pod` for `pods/status`, `Binding` for `pods/binding`).
    pub kind: &'static str,
    /// The verbs discovery advertises for it.
    pub verbs: &'static [&'static str],
    /// `apiVersion` of `kind` when it differs from the parent resource's
    /// (`autoscaling/v1` for `Scale`); `""` means the parent's.
    pub api_version: &'static str,
}

/// The `status` subresource of a resource of kind `kind`.
const fn status(kind: &'static str) -> SubresourceInfo {
    SubresourceInfo { name: "status", kind, verbs: STATUS_VERBS, api_version: "" }
}

/// The `scale` subresource (`autoscaling/v1` `Scale`).
const SCALE: SubresourceInfo =
    SubresourceInfo { name: "scale", kind: "Scale", verbs: STATUS_VERBS, api_version: "autoscaling/v1" };

/// Everything the API server knows about one served resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResourceInfo {
    /// API group; `""` for the core (legacy) group.
    pub group: &'static str,
    /// API version, e.g. `v1`.
    pub version: &'static str,
    /// Plural resource name used in URLs, e.g. `pods`.
    pub resource: &'static str,
    /// Kind of one object, e.g. `Pod`.
    pub kind: &'static str,
    /// Kind of a list, e.g. `PodList`.
    pub list_kind: &'static str,
    /// Singular name, e.g. `pod` (discovery `singularName`).
    pub singular: &'static str,
    /// True for namespaced resources.
    pub namespaced: bool,
    /// Short names advertised in discovery (`po`, `svc`, ...).
    pub short_names: &'static [&'static str],
    /// Verbs advertised in discovery.
    pub verbs: &'static [&'static str],
    /// Categories advertised in discovery (`all`).
    pub categories: &'static [&'static str],
    /// Subresources served under `<object>/<name>`.
    pub subresources: &'static [SubresourceInfo],
    /// Storage prefix relative to `--etcd-prefix`, without slashes at the ends
    /// (e.g. `pods`, `services/specs`, `minions`). See the module docs.
    pub storage_prefix: &'static str,
    /// True when `metadata.generation` tracks changes of `spec` (kinds with a spec).
    pub has_spec: bool,
    /// Resource-specific selectable fields, besides `metadata.name` and
    /// `metadata.namespace` which every resource has.
    pub fields: &'static [SelectableField],
    /// True when a PUT of a missing object creates it (201) instead of
    /// answering 404 `NotFound`: upstream's `AllowCreateOnUpdate()` of the
    /// resource's strategy (`pkg/registry/<group>/<resource>/strategy.go`).
    /// Upstream allows it for endpoints, core events, leases and the four RBAC
    /// kinds; every other resource served here refuses it.
    pub allow_create_on_update: bool,
}

const BASE: ResourceInfo = ResourceInfo {
    group: "",
    version: "v1",
    resource: "",
    kind: "",
    list_kind: "",
    singular: "",
    namespaced: true,
    short_names: &[],
    verbs: ALL_VERBS,
    categories: &[],
    subresources: &[],
    storage_prefix: "",
    has_spec: false,
    fields: &[],
    allow_create_on_update: false,
};

/// Every resource rkube serves. Order is discovery order within a group version.
pub static RESOURCES: &[ResourceInfo] = &[
    // ---- core/v1 ----
    ResourceInfo {
        resource: "configmaps",
        kind: "ConfigMap",
        list_kind: "ConfigMapList",
        singular: "configmap",
        short_names: &["cm"],
        storage_prefix: "configmaps",
        ..BASE
    },
    ResourceInfo {
        resource: "endpoints",
        allow_create_on_update: true,
        kind: "Endpoints",
        list_kind: "EndpointsList",
        singular: "endpoints",
        short_names: &["ep"],
        storage_prefix: "services/endpoints",
        ..BASE
    },
    ResourceInfo {
        resource: "events",
        allow_create_on_update: true,
        kind: "Event",
        list_kind: "EventList",
        singular: "event",
        short_names: &["ev"],
        storage_prefix: "events",
        fields: &[
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
        ],
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
        subresources: &[status("Namespace")],
        storage_prefix: "namespaces",
        has_spec: true,
        fields: &[str_field("status.phase", "status.phase")],
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
        ..BASE
    },
    ResourceInfo {
        resource: "pods",
        kind: "Pod",
        list_kind: "PodList",
        singular: "pod",
        short_names: &["po"],
        categories: &["all"],
        subresources: &[
            status("Pod"),
            SubresourceInfo { name: "binding", kind: "Binding", verbs: &["create"], api_version: "" },
        ],
        storage_prefix: "pods",
        has_spec: true,
        fields: &[
            str_field("spec.nodeName", "spec.nodeName"),
            str_field("spec.restartPolicy", "spec.restartPolicy"),
            str_field("spec.schedulerName", "spec.schedulerName"),
            str_field("spec.serviceAccountName", "spec.serviceAccountName"),
            bool_field("spec.hostNetwork", "spec.hostNetwork"),
            str_field("status.phase", "status.phase"),
            str_field("status.podIP", "status.podIP"),
            str_field("status.nominatedNodeName", "status.nominatedNodeName"),
        ],
        ..BASE
    },
    ResourceInfo {
        resource: "secrets",
        kind: "Secret",
        list_kind: "SecretList",
        singular: "secret",
        storage_prefix: "secrets",
        fields: &[str_field("type", "type")],
        ..BASE
    },
    ResourceInfo {
        resource: "serviceaccounts",
        kind: "ServiceAccount",
        list_kind: "ServiceAccountList",
        singular: "serviceaccount",
        short_names: &["sa"],
        storage_prefix: "serviceaccounts",
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
        ..BASE
    },
    // ---- apps/v1 ----
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
        ..BASE
    },
    // ---- coordination.k8s.io/v1 ----
    ResourceInfo {
        group: "coordination.k8s.io",
        resource: "leases",
        allow_create_on_update: true,
        kind: "Lease",
        list_kind: "LeaseList",
        singular: "lease",
        storage_prefix: "leases",
        has_spec: true,
        ..BASE
    },
    // ---- discovery.k8s.io/v1 ----
    ResourceInfo {
        group: "discovery.k8s.io",
        resource: "endpointslices",
        kind: "EndpointSlice",
        list_kind: "EndpointSliceList",
        singular: "endpointslice",
        storage_prefix: "endpointslices",
        fields: &[str_field("addressType", "addressType")],
        ..BASE
    },
    // ---- rbac.authorization.k8s.io/v1 (read by --authorization-mode=RBAC) ----
    ResourceInfo {
        group: "rbac.authorization.k8s.io",
        resource: "clusterrolebindings",
        allow_create_on_update: true,
        kind: "ClusterRoleBinding",
        list_kind: "ClusterRoleBindingList",
        singular: "clusterrolebinding",
        namespaced: false,
        storage_prefix: "clusterrolebindings",
        ..BASE
    },
    ResourceInfo {
        group: "rbac.authorization.k8s.io",
        resource: "clusterroles",
        allow_create_on_update: true,
        kind: "ClusterRole",
        list_kind: "ClusterRoleList",
        singular: "clusterrole",
        namespaced: false,
        storage_prefix: "clusterroles",
        ..BASE
    },
    ResourceInfo {
        group: "rbac.authorization.k8s.io",
        resource: "rolebindings",
        allow_create_on_update: true,
        kind: "RoleBinding",
        list_kind: "RoleBindingList",
        singular: "rolebinding",
        storage_prefix: "rolebindings",
        ..BASE
    },
    ResourceInfo {
        group: "rbac.authorization.k8s.io",
        resource: "roles",
        allow_create_on_update: true,
        kind: "Role",
        list_kind: "RoleList",
        singular: "role",
        storage_prefix: "roles",
        ..BASE
    },
];

impl ResourceInfo {
    /// `apiVersion` of the kind: `v1` for core, `<group>/<version>` otherwise.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// The subresource called `name`, if served.
    pub fn subresource(&self, name: &str) -> Option<&'static SubresourceInfo> {
        self.subresources.iter().find(|s| s.name == name)
    }

    /// True when the resource has a `status` subresource (so the main resource
    /// ignores status changes and `/status` changes only status).
    pub fn has_status_subresource(&self) -> bool {
        self.subresource("status").is_some()
    }

    /// Storage prefix for a list: `<prefix>/<storage_prefix>/` for all
    /// namespaces (or a cluster-scoped resource), `<prefix>/<storage_prefix>/<ns>/`
    /// for one namespace. `etcd_prefix` is `--etcd-prefix` (e.g. `/registry`).
    pub fn list_prefix(&self, etcd_prefix: &str, namespace: Option<&str>) -> String {
        let base = format!("{}/{}/", etcd_prefix.trim_end_matches('/'), self.storage_prefix);
        match namespace {
            Some(ns) if self.namespaced && !ns.is_empty() => format!("{base}{ns}/"),
            _ => base,
        }
    }

    /// Storage key of one object. `namespace` is ignored for cluster-scoped resources.
    pub fn object_key(&self, etcd_prefix: &str, namespace: &str, name: &str) -> String {
        let base = format!("{}/{}/", etcd_prefix.trim_end_matches('/'), self.storage_prefix);
        if self.namespaced {
            format!("{base}{namespace}/{name}")
        } else {
            format!("{base}{name}")
        }
    }

    /// Every field label a field selector may use on this resource, in order.
    pub fn field_labels(&self) -> impl Iterator<Item = &'static str> {
        ["metadata.name", "metadata.namespace"].into_iter().chain(self.fields.iter().map(|f| f.label))
    }
}

/// All resources served.
pub fn all() -> &'static [ResourceInfo] {
    RESOURCES
}

/// The resource `resource` (plural) in `group`/`version`, if served.
pub fn lookup(group: &str, version: &str, resource: &str) -> Option<&'static ResourceInfo> {
    RESOURCES.iter().find(|r| r.group == group && r.version == version && r.resource == resource)
}

/// The resource whose kind is `kind` in the API version `api_version`
/// (`v1`, `apps/v1`), if served.
pub fn lookup_kind(api_version: &str, kind: &str) -> Option<&'static ResourceInfo> {
    let (group, version) = split_api_version(api_version);
    RESOURCES.iter().find(|r| r.group == group && r.version == version && r.kind == kind)
}

/// Splits an `apiVersion` into `(group, version)`: `v1` → `("", "v1")`,
/// `apps/v1` → `("apps", "v1")`.
pub fn split_api_version(api_version: &str) -> (&str, &str) {
    match api_version.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", api_version),
    }
}

/// One served group version, for discovery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupVersion {
    /// Group (`""` for core).
    pub group: &'static str,
    /// Version.
    pub version: &'static str,
}

/// The named (non-core) groups served, in discovery order (sorted by group name),
/// each with its versions (the first is the preferred one).
pub fn groups() -> Vec<(&'static str, Vec<&'static str>)> {
    let mut out: Vec<(&'static str, Vec<&'static str>)> = Vec::new();
    for r in RESOURCES.iter().filter(|r| !r.group.is_empty()) {
        match out.iter_mut().find(|(g, _)| *g == r.group) {
            Some((_, versions)) => {
                if !versions.contains(&r.version) {
                    versions.push(r.version);
                }
            }
            None => out.push((r.group, vec![r.version])),
        }
    }
    out.sort_by(|a, b| a.0.cmp(b.0));
    out
}

/// The resources of one group version, in registry order.
pub fn resources_in<'a>(group: &'a str, version: &'a str) -> impl Iterator<Item = &'static ResourceInfo> + 'a {
    RESOURCES.iter().filter(move |r| r.group == group && r.version == version)
}

/// Reads a dotted path (`spec.nodeName`) from a JSON object.
fn json_path<'a>(obj: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(obj, |v, seg| v.get(seg))
}

/// The value of the selectable field `field` of `obj`, as a field selector sees
/// it (upstream `*ToSelectableFields`), or `None` when `field` is not selectable
/// on this resource (API: 400 `field label not supported`).
///
/// Missing string fields read as `""`; missing booleans as `"false"`.
pub fn field_value(resource: &ResourceInfo, obj: &Value, field: &str) -> Option<String> {
    let (path, field_type) = match field {
        "metadata.name" => ("metadata.name", FieldType::Str),
        "metadata.namespace" => ("metadata.namespace", FieldType::Str),
        _ => {
            let f = resource.fields.iter().find(|f| f.label == field)?;
            (f.path, f.field_type)
        }
    };
    let v = json_path(obj, path);
    Some(match field_type {
        FieldType::Str => match v {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Null) | None => String::new(),
            Some(other) => other.to_string(),
        },
        FieldType::Bool => match v {
            Some(Value::Bool(true)) => "true".to_string(),
            _ => "false".to_string(),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn core_keys_follow_kube_apiserver_layout() {
        let pods = lookup("", "v1", "pods").unwrap();
        assert_eq!(pods.object_key("/registry", "default", "web"), "/registry/pods/default/web");
        assert_eq!(pods.list_prefix("/registry", Some("default")), "/registry/pods/default/");
        assert_eq!(pods.list_prefix("/registry", None), "/registry/pods/");
        let svc = lookup("", "v1", "services").unwrap();
        assert_eq!(svc.object_key("/registry", "ns", "a"), "/registry/services/specs/ns/a");
        let nodes = lookup("", "v1", "nodes").unwrap();
        assert_eq!(nodes.object_key("/registry/", "ignored", "n1"), "/registry/minions/n1");
        let deploy = lookup("apps", "v1", "deployments").unwrap();
        assert_eq!(deploy.object_key("/registry", "ns", "d"), "/registry/deployments/ns/d");
    }

    #[test]
    fn create_on_update_follows_upstream_strategies() {
        let allowed: Vec<&str> = RESOURCES.iter().filter(|r| r.allow_create_on_update).map(|r| r.resource).collect();
        assert_eq!(
            allowed,
            vec!["endpoints", "events", "leases", "clusterrolebindings", "clusterroles", "rolebindings", "roles"]
        );
    }

    #[test]
    fn kinds_and_groups_are_found() {
        assert_eq!(lookup_kind("v1", "Pod").unwrap().resource, "pods");
        assert_eq!(lookup_kind("apps/v1", "Deployment").unwrap().api_version(), "apps/v1");
        assert!(lookup_kind("v1", "Deployment").is_none());
        let groups = groups();
        let names: Vec<_> = groups.iter().map(|g| g.0).collect();
        assert_eq!(names, vec!["apps", "coordination.k8s.io", "discovery.k8s.io", "rbac.authorization.k8s.io"]);
    }

    #[test]
    fn field_value_reads_selectable_fields_only() {
        let pods = lookup("", "v1", "pods").unwrap();
        let pod = json!({"metadata": {"name": "p", "namespace": "ns"}, "spec": {"nodeName": "n1"}});
        assert_eq!(field_value(pods, &pod, "spec.nodeName").as_deref(), Some("n1"));
        assert_eq!(field_value(pods, &pod, "status.phase").as_deref(), Some(""));
        assert_eq!(field_value(pods, &pod, "spec.hostNetwork").as_deref(), Some("false"));
        assert_eq!(field_value(pods, &pod, "spec.containers"), None);
        let events = lookup("", "v1", "events").unwrap();
        let ev = json!({"source": {"component": "kubelet"}, "involvedObject": {"name": "p"}});
        assert_eq!(field_value(events, &ev, "source").as_deref(), Some("kubelet"));
        assert_eq!(field_value(events, &ev, "involvedObject.name").as_deref(), Some("p"));
    }
}
