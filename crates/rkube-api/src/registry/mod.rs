//! The resource table: one row per served resource.
//!
//! Each [`ResourceInfo`] says everything the API server needs to serve a
//! resource: its group/version/plural name, kind and list kind, scope, the
//! short names, verbs and categories legacy discovery advertises, its
//! subresources, the fields a field selector may use, where its objects
//! live in storage, the typed schema it is decoded with ([`TypedKind`], from
//! `k8s-openapi`) and its [`Strategy`] (defaulting, create-time preparation,
//! validation, the `/scale` mapping). Discovery, OpenAPI, tables, field
//! selectors and the watch cache all read these rows.
//!
//! Built-in rows are [`RESOURCES`] (see [`builtin`]); rows added while the
//! server runs (custom resources) go through [`register`] and are found by
//! the same lookups. Adding a built-in type is one row plus its strategy.
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

use std::sync::RwLock;

use serde_json::Value;

mod builtin;
mod builtin_parts;
pub mod conversion;
pub mod hpa_conversion;
pub mod metrics;
pub mod typed;

pub use builtin::RESOURCES;
pub use conversion::Conversion;
pub use typed::TypedKind;

pub use crate::strategy::{DeleteRules, Lifecycle, ScaleSelector, Strategy, ValidateFn};
pub use crate::printers::Printer;

/// Verbs of a regular namespaced or cluster-scoped resource
/// (`create`, `delete`, `deletecollection`, `get`, `list`, `patch`, `update`, `watch`).
pub const ALL_VERBS: &[&str] = &["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"];

/// Verbs of namespaces (upstream has no `deletecollection` for them).
pub const NAMESPACE_VERBS: &[&str] = &["create", "delete", "get", "list", "patch", "update", "watch"];

/// Verbs of a create-only resource (the review APIs: upstream storage that
/// implements only `rest.Creater`).
pub const CREATE_VERBS: &[&str] = &["create"];

/// Verbs of a `status` subresource.
pub const STATUS_VERBS: &[&str] = &["get", "patch", "update"];

/// How a selectable field's value is read from an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldType {
    /// A string; a missing value reads as `""`.
    Str,
    /// A boolean rendered `"true"`/`"false"`; a missing value reads as `"false"`.
    Bool,
    /// An integer rendered in decimal; a missing value reads as `"0"`
    /// (upstream formats `int32` fields with `strconv.Itoa`).
    Int,
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

pub(crate) const fn str_field(label: &'static str, path: &'static str) -> SelectableField {
    SelectableField { label, path, field_type: FieldType::Str }
}

pub(crate) const fn bool_field(label: &'static str, path: &'static str) -> SelectableField {
    SelectableField { label, path, field_type: FieldType::Bool }
}

pub(crate) const fn int_field(label: &'static str, path: &'static str) -> SelectableField {
    SelectableField { label, path, field_type: FieldType::Int }
}

/// A subresource such as `pods/status` or `pods/binding`.
#[derive(Debug, Clone, Copy)]
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
    /// For a subresource whose PUT/PATCH writes one part of the parent
    /// object: the JSON pointer of that part (`/status`, `/spec/finalizers`,
    /// `/status/conditions`, `/spec/ephemeralContainers`); every other change
    /// of the request is ignored, as upstream's per-subresource strategies'
    /// `PrepareForUpdate` do. `""` for subresources that are not such an
    /// update (`binding`, `log`, `scale`, ...).
    pub updates: &'static str,
    /// Validation of an update through this subresource, used instead of
    /// the row's strategy validation (upstream's subresource strategy
    /// `ValidateUpdate`, e.g. `ValidatePodEphemeralContainersUpdate`);
    /// `None`: the row's strategy validates.
    pub validate_update: Option<ValidateFn>,
}

impl PartialEq for SubresourceInfo {
    /// Subresources are the same when everything but the validation function
    /// (which cannot be compared meaningfully) is.
    fn eq(&self, other: &Self) -> bool {
        (self.name, self.kind, self.verbs, self.api_version, self.updates)
            == (other.name, other.kind, other.verbs, other.api_version, other.updates)
    }
}

impl Eq for SubresourceInfo {}

/// A subresource that is not a partial update of its parent
/// ([`SubresourceInfo::updates`] empty).
pub(crate) const fn subresource(
    name: &'static str,
    kind: &'static str,
    verbs: &'static [&'static str],
    api_version: &'static str,
) -> SubresourceInfo {
    SubresourceInfo { name, kind, verbs, api_version, updates: "", validate_update: None }
}

/// The `status` subresource of a resource of kind `kind`: PUT/PATCH change `status` only.
pub(crate) const fn status(kind: &'static str) -> SubresourceInfo {
    SubresourceInfo { updates: "/status", ..subresource("status", kind, STATUS_VERBS, "") }
}

/// The `approval` subresource of CertificateSigningRequests (upstream
/// `pkg/registry/certificates/certificates/storage`'s `ApprovalREST`): it
/// changes only `status.conditions`.
pub(crate) const APPROVAL: SubresourceInfo = SubresourceInfo {
    updates: "/status/conditions",
    ..subresource("approval", "CertificateSigningRequest", STATUS_VERBS, "")
};

/// The `scale` subresource (`autoscaling/v1` `Scale`).
pub(crate) const SCALE: SubresourceInfo =
    subresource("scale", "Scale", STATUS_VERBS, "autoscaling/v1");

/// Everything the API server knows about one served resource.
#[derive(Debug, Clone, Copy)]
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
    /// False for create-only rows whose objects are computed on each POST and
    /// never stored: the review APIs (TokenReview, SubjectAccessReview, ...;
    /// upstream `pkg/registry/authentication/`, `pkg/registry/authorization/`).
    /// Such a row has no list kind (`list_kind` is `""`), no storage prefix
    /// (its keys are never used), no watch cache, and only the `create` verb;
    /// its POST goes to a handler instead of storage. True for every other row.
    pub stored: bool,
    /// The `k8s-openapi` type objects are decoded with (unknown-field
    /// detection, type errors, the OpenAPI schema); `None` for resources
    /// without a built-in type (custom resources).
    pub typed: Option<TypedKind>,
    /// Defaulting, create-time preparation, validation and `/scale`.
    pub strategy: Strategy,
    /// For a row serving another version of objects stored by another row
    /// (events.k8s.io/v1 `events` over core/v1 `events`): the stored row and
    /// the conversions between the two forms (upstream stores one version
    /// per resource and converts on read and write). `None` for rows that
    /// own their storage.
    pub conversion: Option<Conversion>,
    /// For a custom resource (a row registered from a
    /// CustomResourceDefinition): its schema, printer columns and `/scale`
    /// paths ([`crate::apiextensions::CustomResource`]). `None` for built-in rows.
    pub custom: Option<&'static crate::apiextensions::CustomResource>,
    /// How `kubectl get` prints objects of this row (server-side Table
    /// columns and cells, upstream `pkg/printers/internalversion`);
    /// [`crate::printers::DEFAULT`] (NAME, AGE) unless the row names one.
    /// Custom resources print their `additionalPrinterColumns` instead.
    pub printer: &'static Printer,
    /// True when a DELETE that removes the object answers the object
    /// itself; false when it answers a `Success` Status naming it (upstream
    /// `Store.ReturnDeletedObject` of the resource's
    /// `pkg/registry/<group>/<resource>/storage`: true for pods, services,
    /// namespaces, serviceaccounts, persistentvolumes,
    /// persistentvolumeclaims, storageclasses, volumeattachments,
    /// csidrivers and csinodes in 1.33). A DELETE that only marks the
    /// object (finalizers, graceful deletion) answers the object either way.
    pub return_deleted_object: bool,
}

impl PartialEq for ResourceInfo {
    /// Rows are the same when they serve the same group, version and resource.
    fn eq(&self, other: &Self) -> bool {
        self.group == other.group && self.version == other.version && self.resource == other.resource
    }
}

impl Eq for ResourceInfo {}

/// A row with every field at its most common value; rows override what differs.
pub(crate) const BASE: ResourceInfo = ResourceInfo {
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
    stored: true,
    typed: None,
    strategy: Strategy::NONE,
    conversion: None,
    custom: None,
    printer: &crate::printers::DEFAULT,
    return_deleted_object: false,
};

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

    /// The row whose objects this row serves: the stored version's row for
    /// a converted row ([`ResourceInfo::conversion`]), else the row itself.
    pub fn storage_row(&'static self) -> &'static ResourceInfo {
        match &self.conversion {
            Some(c) => lookup(c.stored_group, c.stored_version, self.resource).unwrap_or(self),
            None => self,
        }
    }

    /// A stored object in this row's form (unchanged for rows without a conversion).
    pub fn to_served(&self, obj: Value) -> Value {
        match &self.conversion {
            Some(c) => (c.to_served)(obj, &self.api_version()),
            None => obj,
        }
    }

    /// An object of this row in the stored version's form (unchanged for
    /// rows without a conversion).
    pub fn to_stored(&self, obj: Value) -> Value {
        match &self.conversion {
            Some(c) => {
                let stored = if c.stored_group.is_empty() { c.stored_version.to_string() } else { format!("{}/{}", c.stored_group, c.stored_version) };
                (c.to_stored)(obj, &stored)
            }
            None => obj,
        }
    }

    /// Whether this row owns its storage: the rows serving another row's
    /// objects ([`ResourceInfo::conversion`] naming another version) do not.
    pub fn owns_storage(&'static self) -> bool {
        std::ptr::eq(self.storage_row(), self)
    }

    /// The stored row's label for this row's field label `label`
    /// (`regarding.name` → `involvedObject.name`); `label` itself for rows
    /// without a conversion and for labels the conversion does not rename.
    pub fn stored_field_label<'a>(&self, label: &'a str) -> &'a str {
        match &self.conversion {
            Some(c) => c.field_labels.iter().find(|(served, _)| *served == label).map_or(label, |(_, stored)| stored),
            None => label,
        }
    }

    /// Every field label a field selector may use on this resource, in order.
    pub fn field_labels(&self) -> impl Iterator<Item = &'static str> {
        ["metadata.name", "metadata.namespace"].into_iter().chain(self.fields.iter().map(|f| f.label))
    }
}

/// The built-in resources (the rows compiled in), in discovery order.
pub fn all() -> &'static [ResourceInfo] {
    RESOURCES
}

/// The built-in rows that own storage (every row but the create-only ones,
/// see [`ResourceInfo::stored`], and the rows serving another row's objects
/// in another version, see [`ResourceInfo::conversion`]): what the watch
/// cache, namespace deletion and storage metrics walk.
pub fn stored() -> impl Iterator<Item = &'static ResourceInfo> {
    RESOURCES.iter().filter(|r| r.stored && r.conversion.is_none())
}

/// Rows added while the server runs ([`register`]); each is leaked once,
/// so lookups can hand out `&'static` rows like the built-in ones.
static DYNAMIC: RwLock<Vec<&'static ResourceInfo>> = RwLock::new(Vec::new());

/// Bumped by every [`register`] and [`unregister`] that changes the table.
static GENERATION: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// A number that changes whenever rows are added or removed while the
/// server runs, for documents built from the table (OpenAPI) to know when
/// to rebuild.
pub fn generation() -> u64 {
    GENERATION.load(std::sync::atomic::Ordering::SeqCst)
}

/// Every served resource: the built-in rows, then those added by [`register`].
pub fn every() -> Vec<&'static ResourceInfo> {
    let dynamic = DYNAMIC.read().unwrap_or_else(|e| e.into_inner());
    RESOURCES.iter().chain(dynamic.iter().copied()).collect()
}

/// Errors of [`register`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegisterError {
    /// A built-in row already serves this group, version and resource.
    #[error("{resource}.{group}/{version} is a built-in resource")]
    BuiltIn {
        /// Group.
        group: String,
        /// Version.
        version: String,
        /// Plural resource name.
        resource: String,
    },
}

/// Adds (or replaces) a row while the server runs, e.g. for a custom
/// resource, and returns it as every lookup will. Replacing keeps the old
/// row alive (rows are leaked: a handful per CustomResourceDefinition change).
pub fn register(info: ResourceInfo) -> Result<&'static ResourceInfo, RegisterError> {
    if RESOURCES.contains(&info) {
        return Err(RegisterError::BuiltIn {
            group: info.group.to_string(),
            version: info.version.to_string(),
            resource: info.resource.to_string(),
        });
    }
    let row: &'static ResourceInfo = Box::leak(Box::new(info));
    let mut dynamic = DYNAMIC.write().unwrap_or_else(|e| e.into_inner());
    dynamic.retain(|r| **r != *row);
    dynamic.push(row);
    GENERATION.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    Ok(row)
}

/// Removes a row added by [`register`]; returns whether one was there.
pub fn unregister(group: &str, version: &str, resource: &str) -> bool {
    let mut dynamic = DYNAMIC.write().unwrap_or_else(|e| e.into_inner());
    let before = dynamic.len();
    dynamic.retain(|r| !(r.group == group && r.version == version && r.resource == resource));
    let removed = dynamic.len() != before;
    if removed {
        GENERATION.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
    removed
}

/// The first row, built-in or registered, that `pred` accepts.
fn find(pred: impl Fn(&ResourceInfo) -> bool) -> Option<&'static ResourceInfo> {
    if let Some(r) = RESOURCES.iter().find(|r| pred(r)) {
        return Some(r);
    }
    let dynamic = DYNAMIC.read().unwrap_or_else(|e| e.into_inner());
    dynamic.iter().copied().find(|r| pred(r))
}

/// The resource `resource` (plural) in `group`/`version`, if served.
pub fn lookup(group: &str, version: &str, resource: &str) -> Option<&'static ResourceInfo> {
    find(|r| r.group == group && r.version == version && r.resource == resource)
}

/// The resource whose kind is `kind` in the API version `api_version`
/// (`v1`, `apps/v1`), if served.
pub fn lookup_kind(api_version: &str, kind: &str) -> Option<&'static ResourceInfo> {
    let (group, version) = split_api_version(api_version);
    find(|r| r.group == group && r.version == version && r.kind == kind)
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

/// `(groupPriorityMinimum, versionPriority)` of a group version: upstream's
/// `apiVersionPriorities` for the built-in groups (kube-apiserver's
/// `pkg/controlplane/apiserver/aggregator.go`), which its local APIServices
/// carry and which order discovery; any other group gets 1000/15 (what a
/// CRD's APIService gets for its group).
pub fn priority(group: &str, version: &str) -> (i64, i64) {
    match (group, version) {
        ("", _) => (18000, 1),
        ("apiregistration.k8s.io", _) | ("apps", _) => (17800, 15),
        ("events.k8s.io", _) => (17750, 15),
        ("authentication.k8s.io", _) => (17700, 15),
        ("authorization.k8s.io", _) => (17600, 15),
        ("autoscaling", "v2") => (17500, 30),
        ("autoscaling", _) => (17500, 15),
        ("batch", _) => (17400, 15),
        ("certificates.k8s.io", _) => (17300, 15),
        ("networking.k8s.io", _) => (17200, 15),
        ("policy", _) => (17100, 15),
        ("rbac.authorization.k8s.io", _) => (17000, 15),
        ("storage.k8s.io", _) => (16800, 15),
        ("apiextensions.k8s.io", _) | ("admissionregistration.k8s.io", _) => (16700, 15),
        ("scheduling.k8s.io", _) => (16600, 15),
        ("coordination.k8s.io", _) => (16500, 15),
        ("node.k8s.io", _) => (16300, 15),
        ("discovery.k8s.io", _) => (16200, 15),
        ("flowcontrol.apiserver.k8s.io", _) => (16100, 21),
        // metrics-server's APIService.
        ("metrics.k8s.io", _) => (100, 100),
        _ => (1000, 15),
    }
}

/// The named (non-core) groups served, in discovery order (upstream's
/// aggregator order: [`priority`]'s groupPriorityMinimum, highest first,
/// then by name), each with its versions (registry order: the first is the
/// preferred one).
pub fn groups() -> Vec<(&'static str, Vec<&'static str>)> {
    let mut out: Vec<(&'static str, Vec<&'static str>)> = Vec::new();
    for r in every().into_iter().filter(|r| !r.group.is_empty()) {
        match out.iter_mut().find(|(g, _)| *g == r.group) {
            Some((_, versions)) => {
                if !versions.contains(&r.version) {
                    versions.push(r.version);
                }
            }
            None => out.push((r.group, vec![r.version])),
        }
    }
    out.sort_by_key(|(g, vs)| (std::cmp::Reverse(priority(g, vs[0]).0), *g));
    out
}

/// The resources of one group version, in registry order.
pub fn resources_in<'a>(group: &'a str, version: &'a str) -> impl Iterator<Item = &'static ResourceInfo> + 'a {
    every().into_iter().filter(move |r| r.group == group && r.version == version)
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
        FieldType::Int => match v {
            Some(Value::Number(n)) => n.to_string(),
            _ => "0".to_string(),
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
            vec!["endpoints", "events", "leases", "events", "clusterrolebindings", "clusterroles", "rolebindings", "roles"]
        );
    }

    #[test]
    fn kinds_and_groups_are_found() {
        assert_eq!(lookup_kind("v1", "Pod").unwrap().resource, "pods");
        assert_eq!(lookup_kind("apps/v1", "Deployment").unwrap().api_version(), "apps/v1");
        assert!(lookup_kind("v1", "Deployment").is_none());
        let groups = groups();
        let names: Vec<_> = groups.iter().map(|g| g.0).collect();
        assert_eq!(
            names,
            vec![
                // kube-apiserver 1.33's `kubectl get --raw /apis` order.
                "apiregistration.k8s.io",
                "apps",
                "events.k8s.io",
                "authentication.k8s.io",
                "authorization.k8s.io",
                "autoscaling",
                "batch",
                "certificates.k8s.io",
                "networking.k8s.io",
                "policy",
                "rbac.authorization.k8s.io",
                "storage.k8s.io",
                "admissionregistration.k8s.io",
                "apiextensions.k8s.io",
                "scheduling.k8s.io",
                "coordination.k8s.io",
                "node.k8s.io",
                "discovery.k8s.io",
                "flowcontrol.apiserver.k8s.io",
            ]
        );
    }

    #[test]
    fn rows_agree_with_the_k8s_openapi_types() {
        for row in RESOURCES {
            let typed = row.typed.expect("every built-in row has a type");
            let (api_version, kind, plural, namespaced) = (typed.resource)();
            assert_eq!(api_version, row.api_version(), "{}", row.resource);
            assert_eq!(kind, row.kind, "{}", row.resource);
            assert_eq!(plural, row.resource);
            assert_eq!(namespaced, row.namespaced, "{}", row.resource);
            if row.stored {
                assert_eq!(row.list_kind, format!("{kind}List"));
            }
        }
    }

    #[test]
    fn review_rows_are_create_only_and_never_stored() {
        let unstored: Vec<(&str, &str)> = RESOURCES.iter().filter(|r| !r.stored).map(|r| (r.group, r.resource)).collect();
        assert_eq!(
            unstored,
            vec![
                ("authentication.k8s.io", "selfsubjectreviews"),
                ("authentication.k8s.io", "tokenreviews"),
                ("authorization.k8s.io", "localsubjectaccessreviews"),
                ("authorization.k8s.io", "selfsubjectaccessreviews"),
                ("authorization.k8s.io", "selfsubjectrulesreviews"),
                ("authorization.k8s.io", "subjectaccessreviews"),
            ]
        );
        for row in RESOURCES.iter().filter(|r| !r.stored) {
            assert_eq!(row.verbs, CREATE_VERBS, "{}", row.resource);
            assert_eq!((row.list_kind, row.storage_prefix), ("", ""), "{}", row.resource);
            assert!(row.subresources.is_empty(), "{}", row.resource);
        }
        let converted = RESOURCES.iter().filter(|r| r.conversion.is_some()).count();
        assert_eq!(stored().count(), RESOURCES.len() - 6 - converted);
        assert!(stored().all(|r| !r.storage_prefix.is_empty()));
    }

    #[test]
    fn rows_are_unique_and_in_discovery_order() {
        let keys: Vec<(&str, &str, &str)> = RESOURCES.iter().map(|r| (r.group, r.version, r.resource)).collect();
        let mut sorted = keys.clone();
        sorted.sort_by(|a, b| (!a.0.is_empty(), a.0, a.2).cmp(&(!b.0.is_empty(), b.0, b.2)));
        sorted.dedup();
        assert_eq!(keys, sorted);
    }

    #[test]
    fn rows_registered_at_run_time_are_found() {
        let row = ResourceInfo {
            group: "example.com",
            resource: "widgets",
            kind: "Widget",
            list_kind: "WidgetList",
            singular: "widget",
            storage_prefix: "example.com/widgets",
            ..BASE
        };
        let registered = register(row).unwrap();
        assert!(std::ptr::eq(lookup("example.com", "v1", "widgets").unwrap(), registered));
        assert_eq!(lookup_kind("example.com/v1", "Widget").unwrap().resource, "widgets");
        assert!(groups().iter().any(|(g, _)| *g == "example.com"));
        assert!(every().iter().any(|r| r.resource == "widgets"));
        assert!(matches!(register(*lookup("", "v1", "pods").unwrap()), Err(RegisterError::BuiltIn { .. })));
        assert!(unregister("example.com", "v1", "widgets"));
        assert!(lookup("example.com", "v1", "widgets").is_none());
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

    #[test]
    fn converted_rows_share_the_stored_rows_storage() {
        let v1 = lookup("events.k8s.io", "v1", "events").unwrap();
        let core = lookup("", "v1", "events").unwrap();
        assert!(std::ptr::eq(v1.storage_row(), core));
        assert!(std::ptr::eq(core.storage_row(), core));
        assert_eq!(v1.object_key("/registry", "ns", "e"), core.object_key("/registry", "ns", "e"));
        assert!(!stored().any(|r| r.group == "events.k8s.io"));
        assert_eq!(v1.stored_field_label("regarding.name"), "involvedObject.name");
        assert_eq!(v1.stored_field_label("reportingController"), "reportingComponent");
        assert_eq!(v1.stored_field_label("type"), "type");
        for label in v1.field_labels() {
            let stored = v1.stored_field_label(label);
            assert!(core.field_labels().any(|l| l == stored), "{label} -> {stored}");
        }
    }
}
