//! The kinds whose schemas rkube publishes, mapped to the `k8s-openapi` types
//! that carry their JSON schemas.
//!
//! Every top-level kind here gets the `x-kubernetes-group-version-kind`
//! extension (kubectl maps a GVK to its schema with it). List kinds have no
//! `k8s-openapi` schema; [`super::schemas`] builds them from their item kind.

use k8s_openapi::api::{apps, coordination, core, discovery, rbac};
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_openapi::schemars::{JsonSchema, SchemaGenerator};

/// Adds the schema of `T` (and everything it references) to the generator.
pub(crate) type AddSchema = fn(&mut SchemaGenerator);

fn add<T: JsonSchema>(generator: &mut SchemaGenerator) {
    // Only the side effect (the definitions it registers) is wanted.
    let _reference = generator.subschema_for::<T>();
}

/// One top-level kind with a published schema.
#[derive(Debug, Clone, Copy)]
pub(crate) struct KindSchema {
    /// API group (`""` for core).
    pub group: &'static str,
    /// API version.
    pub version: &'static str,
    /// Kind, e.g. `Pod`.
    pub kind: &'static str,
    /// OpenAPI definition name, e.g. `io.k8s.api.core.v1.Pod`.
    pub definition: &'static str,
    /// List kind and its item description (`PodList`), when the kind is listable.
    pub list_kind: Option<&'static str>,
    /// Registers the schema with a generator.
    pub add: AddSchema,
}

const fn kind(
    group: &'static str,
    version: &'static str,
    kind: &'static str,
    definition: &'static str,
    list_kind: Option<&'static str>,
    add: AddSchema,
) -> KindSchema {
    KindSchema { group, version, kind, definition, list_kind, add }
}

/// The resource kinds rkube serves (see `rkube_api::registry`) plus `Binding`.
pub(crate) static KINDS: &[KindSchema] = &[
    kind("", "v1", "Namespace", "io.k8s.api.core.v1.Namespace", Some("NamespaceList"), add::<core::v1::Namespace>),
    kind("", "v1", "Pod", "io.k8s.api.core.v1.Pod", Some("PodList"), add::<core::v1::Pod>),
    kind("", "v1", "Node", "io.k8s.api.core.v1.Node", Some("NodeList"), add::<core::v1::Node>),
    kind("", "v1", "Service", "io.k8s.api.core.v1.Service", Some("ServiceList"), add::<core::v1::Service>),
    kind("", "v1", "Endpoints", "io.k8s.api.core.v1.Endpoints", Some("EndpointsList"), add::<core::v1::Endpoints>),
    kind("", "v1", "ConfigMap", "io.k8s.api.core.v1.ConfigMap", Some("ConfigMapList"), add::<core::v1::ConfigMap>),
    kind("", "v1", "Secret", "io.k8s.api.core.v1.Secret", Some("SecretList"), add::<core::v1::Secret>),
    kind(
        "",
        "v1",
        "ServiceAccount",
        "io.k8s.api.core.v1.ServiceAccount",
        Some("ServiceAccountList"),
        add::<core::v1::ServiceAccount>,
    ),
    kind("", "v1", "Event", "io.k8s.api.core.v1.Event", Some("EventList"), add::<core::v1::Event>),
    kind("", "v1", "Binding", "io.k8s.api.core.v1.Binding", None, add::<core::v1::Binding>),
    kind(
        "discovery.k8s.io",
        "v1",
        "EndpointSlice",
        "io.k8s.api.discovery.v1.EndpointSlice",
        Some("EndpointSliceList"),
        add::<discovery::v1::EndpointSlice>,
    ),
    kind(
        "coordination.k8s.io",
        "v1",
        "Lease",
        "io.k8s.api.coordination.v1.Lease",
        Some("LeaseList"),
        add::<coordination::v1::Lease>,
    ),
    kind(
        "apps",
        "v1",
        "Deployment",
        "io.k8s.api.apps.v1.Deployment",
        Some("DeploymentList"),
        add::<apps::v1::Deployment>,
    ),
    kind(
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRole",
        "io.k8s.api.rbac.v1.ClusterRole",
        Some("ClusterRoleList"),
        add::<rbac::v1::ClusterRole>,
    ),
    kind(
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRoleBinding",
        "io.k8s.api.rbac.v1.ClusterRoleBinding",
        Some("ClusterRoleBindingList"),
        add::<rbac::v1::ClusterRoleBinding>,
    ),
    kind(
        "rbac.authorization.k8s.io",
        "v1",
        "Role",
        "io.k8s.api.rbac.v1.Role",
        Some("RoleList"),
        add::<rbac::v1::Role>,
    ),
    kind(
        "rbac.authorization.k8s.io",
        "v1",
        "RoleBinding",
        "io.k8s.api.rbac.v1.RoleBinding",
        Some("RoleBindingList"),
        add::<rbac::v1::RoleBinding>,
    ),
];

/// A meta.k8s.io type published alongside the kinds, with the GVKs upstream
/// tags it with (`Status` is a `v1` kind; `DeleteOptions` and `WatchEvent`
/// are tagged once per served group version).
#[derive(Debug, Clone, Copy)]
pub(crate) struct MetaSchema {
    /// OpenAPI definition name.
    pub definition: &'static str,
    /// The kind name used in the GVK extension.
    pub kind: &'static str,
    /// True when it is tagged for every served group version, false for core `v1` only.
    pub per_group_version: bool,
    /// Registers the schema with a generator.
    pub add: AddSchema,
}

/// meta.k8s.io types referenced by the published paths.
pub(crate) static META: &[MetaSchema] = &[
    MetaSchema {
        definition: "io.k8s.apimachinery.pkg.apis.meta.v1.Status",
        kind: "Status",
        per_group_version: false,
        add: add::<meta::Status>,
    },
    MetaSchema {
        definition: "io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions",
        kind: "DeleteOptions",
        per_group_version: true,
        add: add::<meta::DeleteOptions>,
    },
    MetaSchema {
        definition: "io.k8s.apimachinery.pkg.apis.meta.v1.WatchEvent",
        kind: "WatchEvent",
        per_group_version: true,
        add: add::<meta::WatchEvent<core::v1::Pod>>,
    },
    MetaSchema {
        definition: "io.k8s.apimachinery.pkg.apis.meta.v1.APIResourceList",
        kind: "APIResourceList",
        per_group_version: false,
        add: add::<meta::APIResourceList>,
    },
    MetaSchema {
        definition: "io.k8s.apimachinery.pkg.apis.meta.v1.APIGroupList",
        kind: "APIGroupList",
        per_group_version: false,
        add: add::<meta::APIGroupList>,
    },
    MetaSchema {
        definition: "io.k8s.apimachinery.pkg.apis.meta.v1.APIGroup",
        kind: "APIGroup",
        per_group_version: false,
        add: add::<meta::APIGroup>,
    },
    MetaSchema {
        definition: "io.k8s.apimachinery.pkg.apis.meta.v1.APIVersions",
        kind: "APIVersions",
        per_group_version: false,
        add: add::<meta::APIVersions>,
    },
    MetaSchema {
        definition: "io.k8s.apimachinery.pkg.apis.meta.v1.Patch",
        kind: "",
        per_group_version: false,
        add: add::<meta::Patch>,
    },
];

/// The group versions with published kinds, core first, as `(group, version)`.
pub(crate) fn group_versions() -> Vec<(&'static str, &'static str)> {
    let mut out: Vec<(&'static str, &'static str)> = Vec::new();
    for k in KINDS {
        if !out.contains(&(k.group, k.version)) {
            out.push((k.group, k.version));
        }
    }
    out
}

/// The kind schema for `group`/`kind` (any version; the first match).
pub(crate) fn lookup(group: &str, kind: &str) -> Option<&'static KindSchema> {
    KINDS.iter().find(|k| k.group == group && k.kind == kind)
}

/// Definition name of a list kind: the item definition with its last segment replaced.
pub(crate) fn list_definition(k: &KindSchema) -> Option<String> {
    let list_kind = k.list_kind?;
    let prefix = k.definition.rsplit_once('.').map(|(p, _)| p)?;
    Some(format!("{prefix}.{list_kind}"))
}

/// The URL path prefix of a group version: `api/v1`, `apis/apps/v1` (no leading slash).
pub(crate) fn group_version_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}
