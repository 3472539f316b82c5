//! The kinds whose schemas rkube publishes: every row of the resource table
//! with a `k8s-openapi` type (`rkube_api::registry`), whose JSON schemas
//! `k8s-openapi` generates.
//!
//! Every top-level kind here gets the `x-kubernetes-group-version-kind`
//! extension (kubectl maps a GVK to its schema with it). List kinds have no
//! `k8s-openapi` schema; [`super::schemas`] builds them from their item kind.

use std::sync::LazyLock;

use k8s_openapi::api::core;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use rkube_api::registry;
use k8s_openapi::schemars::{JsonSchema, SchemaGenerator};

/// Adds the schema of `T` (and everything it references) to the generator.
pub(crate) type AddSchema = fn(&mut SchemaGenerator);

fn add<T: JsonSchema>(generator: &mut SchemaGenerator) {
    // Only the side effect (the definitions it registers) is wanted.
    let _reference = generator.subschema_for::<T>();
}

/// One top-level kind with a published schema.
#[derive(Debug, Clone)]
pub(crate) struct KindSchema {
    /// API group (`""` for core).
    pub group: &'static str,
    /// API version.
    pub version: &'static str,
    /// Kind, e.g. `Pod`.
    pub kind: &'static str,
    /// OpenAPI definition name, e.g. `io.k8s.api.core.v1.Pod`.
    pub definition: String,
    /// List kind and its item description (`PodList`), when the kind is listable.
    pub list_kind: Option<&'static str>,
    /// Registers the schema with a generator.
    pub add: AddSchema,
}

/// Kinds that are bodies of subresources rather than resources of their own.
fn body_kinds() -> Vec<KindSchema> {
    let binding = rkube_api::registry::typed::body::<core::v1::Binding>();
    vec![KindSchema {
        group: "",
        version: "v1",
        kind: "Binding",
        definition: (binding.definition)(),
        list_kind: None,
        add: binding.add_schema,
    }]
}

/// The kinds of every row of the resource table with a `k8s-openapi` type
/// (rows without one, e.g. custom resources, publish their own schemas),
/// plus `Binding`.
pub(crate) static KINDS: LazyLock<Vec<KindSchema>> = LazyLock::new(|| {
    let mut out: Vec<KindSchema> = registry::every()
        .into_iter()
        .filter_map(|r| {
            let typed = r.typed?;
            Some(KindSchema {
                group: r.group,
                version: r.version,
                kind: r.kind,
                definition: (typed.definition)(),
                list_kind: r.stored.then_some(r.list_kind),
                add: typed.add_schema,
            })
        })
        .collect();
    out.extend(body_kinds());
    out
});

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
    for k in KINDS.iter() {
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
