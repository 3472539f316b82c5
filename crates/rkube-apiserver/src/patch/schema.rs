//! The merge schema of the built-in kinds: which lists merge by which key.
//!
//! Strategic merge patch (SMP) reads the `patchStrategy`/`patchMergeKey` Go
//! struct tags of `k8s.io/api` (`staging/src/k8s.io/api/core/v1/types.go`,
//! `apps/v1/types.go`, ...); server-side apply (SSA) reads the
//! `x-kubernetes-list-type`/`x-kubernetes-list-map-keys` OpenAPI extensions
//! (structured-merge-diff's schema). The two mostly agree but not always
//! (container `ports` merge by `containerPort` in SMP but are keyed by
//! `containerPort`+`protocol` in SSA), so each list carries both.
//!
//! Everything not listed here has the default shape [`Shape::Any`]: objects
//! merge field by field, lists are atomic (replaced whole), which is exactly
//! what both mechanisms do for a field without tags.
//!
//! `retainKeys` strategies (pod `volumes[]` items, deployment `spec.strategy`)
//! need no entry: on the server the `$retainKeys` directive in the patch is
//! self-describing.

/// The shape of a value, as far as merging cares.
#[derive(Debug)]
pub(crate) enum Shape {
    /// No schema: objects merge field by field, lists are atomic.
    Any,
    /// An object with some known fields; fields not listed are [`Shape::Any`].
    Struct(&'static [Field]),
    /// An object owned and replaced as a whole by SSA (`+structType=atomic`,
    /// `+mapType=atomic`, e.g. `LabelSelector`, a service's `spec.selector`).
    /// SMP still merges it field by field (it has no patch strategy).
    AtomicMap,
    /// A list with a merge strategy.
    List(&'static ListSpec),
}

/// A named field of a [`Shape::Struct`].
#[derive(Debug)]
pub(crate) struct Field {
    /// JSON name.
    pub name: &'static str,
    /// The field's shape.
    pub shape: &'static Shape,
    /// Present in the zero-valued Go object upstream compares a created
    /// object against (a non-pointer struct, or a field without `omitempty`),
    /// so creating it does not make a manager own the node itself (no `.`
    /// entry in `FieldsV1`).
    pub value_struct: bool,
}

/// How a list merges under each mechanism.
#[derive(Debug)]
pub(crate) struct ListSpec {
    /// Strategic merge patch behaviour.
    pub smp: SmpList,
    /// Server-side apply behaviour.
    pub ssa: SsaList,
    /// Shape of the items.
    pub items: &'static Shape,
}

/// SMP list strategy (`patchStrategy` tag).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SmpList {
    /// No strategy: the patch list replaces the live list.
    Replace,
    /// `patchStrategy:"merge"` on a list of scalars: union, deduplicated.
    MergePrimitive,
    /// `patchStrategy:"merge" patchMergeKey:"<key>"`: items matched by key.
    MergeKey(&'static str),
}

/// SSA list type (`x-kubernetes-list-type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SsaList {
    /// `atomic`: owned and replaced as a whole.
    Atomic,
    /// `set`: scalars identified by value (`v:` path elements).
    Set,
    /// `map`: items identified by these keys (`k:` path elements).
    Map(&'static [MapKey]),
}

/// One key of an SSA associative list, with the default used when an item
/// omits it (e.g. `protocol` defaults to `TCP` for ports).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MapKey {
    /// Key field name.
    pub name: &'static str,
    /// String default applied when the item has no such field.
    pub default: Option<&'static str>,
}

/// The empty schema.
pub(crate) static ANY: Shape = Shape::Any;
static ATOMIC_MAP: Shape = Shape::AtomicMap;

const fn field(name: &'static str, shape: &'static Shape) -> Field {
    Field {
        name,
        shape,
        value_struct: false,
    }
}

const fn value_struct(name: &'static str, shape: &'static Shape) -> Field {
    Field {
        name,
        shape,
        value_struct: true,
    }
}

const fn key(name: &'static str) -> MapKey {
    MapKey {
        name,
        default: None,
    }
}

const fn key_default(name: &'static str, default: &'static str) -> MapKey {
    MapKey {
        name,
        default: Some(default),
    }
}

// ---- lists shared by many kinds -------------------------------------------

static NAME_KEY: [MapKey; 1] = [key("name")];
static TYPE_KEY: [MapKey; 1] = [key("type")];
static IP_KEY: [MapKey; 1] = [key("ip")];

/// Keyed by `name` in both mechanisms, items of unknown shape.
static NAMED_LIST: ListSpec = ListSpec {
    smp: SmpList::MergeKey("name"),
    ssa: SsaList::Map(&NAME_KEY),
    items: &ANY,
};
static NAMED: Shape = Shape::List(&NAMED_LIST);

/// `conditions` of most statuses: keyed by `type`.
static CONDITIONS_LIST: ListSpec = ListSpec {
    smp: SmpList::MergeKey("type"),
    ssa: SsaList::Map(&TYPE_KEY),
    items: &ANY,
};
static CONDITIONS: Shape = Shape::List(&CONDITIONS_LIST);

/// `ip`-keyed lists (`hostAliases`, `podIPs`, `hostIPs`).
static IP_LIST: ListSpec = ListSpec {
    smp: SmpList::MergeKey("ip"),
    ssa: SsaList::Map(&IP_KEY),
    items: &ANY,
};
static BY_IP: Shape = Shape::List(&IP_LIST);

/// A list of scalars with `patchStrategy:"merge"` / `listType=set`.
static PRIMITIVE_SET_LIST: ListSpec = ListSpec {
    smp: SmpList::MergePrimitive,
    ssa: SsaList::Set,
    items: &ANY,
};
static PRIMITIVE_SET: Shape = Shape::List(&PRIMITIVE_SET_LIST);

// ---- ObjectMeta -------------------------------------------------------------

static UID_KEY: [MapKey; 1] = [key("uid")];
static OWNER_REFERENCES_LIST: ListSpec = ListSpec {
    smp: SmpList::MergeKey("uid"),
    ssa: SsaList::Map(&UID_KEY),
    items: &ANY,
};
static OWNER_REFERENCES: Shape = Shape::List(&OWNER_REFERENCES_LIST);

/// `metav1.ObjectMeta`: `finalizers` is a merged set, `ownerReferences`
/// merge by `uid`.
pub(crate) static OBJECT_META: Shape = Shape::Struct(&[
    field("finalizers", &PRIMITIVE_SET),
    field("ownerReferences", &OWNER_REFERENCES),
]);

// ---- core/v1 Container -----------------------------------------------------

static CONTAINER_PORT_KEYS: [MapKey; 2] = [key("containerPort"), key_default("protocol", "TCP")];
static CONTAINER_PORTS_LIST: ListSpec = ListSpec {
    smp: SmpList::MergeKey("containerPort"),
    ssa: SsaList::Map(&CONTAINER_PORT_KEYS),
    items: &ANY,
};
static CONTAINER_PORTS: Shape = Shape::List(&CONTAINER_PORTS_LIST);

static MOUNT_PATH_KEY: [MapKey; 1] = [key("mountPath")];
static VOLUME_MOUNTS_LIST: ListSpec = ListSpec {
    smp: SmpList::MergeKey("mountPath"),
    ssa: SsaList::Map(&MOUNT_PATH_KEY),
    items: &ANY,
};
static VOLUME_MOUNTS: Shape = Shape::List(&VOLUME_MOUNTS_LIST);

static DEVICE_PATH_KEY: [MapKey; 1] = [key("devicePath")];
static VOLUME_DEVICES_LIST: ListSpec = ListSpec {
    smp: SmpList::MergeKey("devicePath"),
    ssa: SsaList::Map(&DEVICE_PATH_KEY),
    items: &ANY,
};
static VOLUME_DEVICES: Shape = Shape::List(&VOLUME_DEVICES_LIST);

/// `ResourceRequirements.claims`: `listType=map` keyed by name, no patch tag.
static RESOURCE_CLAIMS_REQ_LIST: ListSpec = ListSpec {
    smp: SmpList::Replace,
    ssa: SsaList::Map(&NAME_KEY),
    items: &ANY,
};
static RESOURCE_REQUIREMENTS: Shape =
    Shape::Struct(&[field("claims", &Shape::List(&RESOURCE_CLAIMS_REQ_LIST))]);

/// `core/v1.Container` (also `EphemeralContainer`, whose common fields are the same).
static CONTAINER: Shape = Shape::Struct(&[
    field("ports", &CONTAINER_PORTS),
    field("env", &NAMED),
    field("volumeMounts", &VOLUME_MOUNTS),
    field("volumeDevices", &VOLUME_DEVICES),
    value_struct("resources", &RESOURCE_REQUIREMENTS),
]);

static CONTAINERS_LIST: ListSpec = ListSpec {
    smp: SmpList::MergeKey("name"),
    ssa: SsaList::Map(&NAME_KEY),
    items: &CONTAINER,
};
static CONTAINERS: Shape = Shape::List(&CONTAINERS_LIST);

// ---- core/v1 PodSpec / PodStatus ---------------------------------------------

static TOPOLOGY_SPREAD_KEYS: [MapKey; 2] = [key("topologyKey"), key("whenUnsatisfiable")];
static TOPOLOGY_SPREAD_LIST: ListSpec = ListSpec {
    smp: SmpList::MergeKey("topologyKey"),
    ssa: SsaList::Map(&TOPOLOGY_SPREAD_KEYS),
    items: &ANY,
};

/// `core/v1.PodSpec`. `tolerations`, `readinessGates`, `dnsConfig` lists and
/// affinity terms have no patch strategy (atomic).
static POD_SPEC: Shape = Shape::Struct(&[
    field("volumes", &NAMED),
    field("initContainers", &CONTAINERS),
    // `containers` has no `omitempty`: the zero PodSpec has `"containers": null`.
    value_struct("containers", &CONTAINERS),
    field("ephemeralContainers", &CONTAINERS),
    field("imagePullSecrets", &NAMED),
    field("hostAliases", &BY_IP),
    field(
        "topologySpreadConstraints",
        &Shape::List(&TOPOLOGY_SPREAD_LIST),
    ),
    field("resourceClaims", &NAMED),
    field("schedulingGates", &NAMED),
]);

/// `core/v1.PodStatus`. Container statuses have no patch strategy (atomic).
static POD_STATUS: Shape = Shape::Struct(&[
    field("conditions", &CONDITIONS),
    field("podIPs", &BY_IP),
    field("hostIPs", &BY_IP),
    field("resourceClaimStatuses", &NAMED),
]);

/// `core/v1.PodTemplateSpec`.
static POD_TEMPLATE_SPEC: Shape = Shape::Struct(&[
    value_struct("metadata", &OBJECT_META),
    value_struct("spec", &POD_SPEC),
]);

// ---- kinds -----------------------------------------------------------------------

static POD: Shape = Shape::Struct(&[
    value_struct("metadata", &OBJECT_META),
    value_struct("spec", &POD_SPEC),
    value_struct("status", &POD_STATUS),
]);

static POD_TEMPLATE: Shape = Shape::Struct(&[
    value_struct("metadata", &OBJECT_META),
    value_struct("template", &POD_TEMPLATE_SPEC),
]);

/// Specs of Deployment, ReplicaSet, StatefulSet and DaemonSet (the union of
/// their template-bearing fields; `volumeClaimTemplates` is atomic).
static WORKLOAD_SPEC: Shape = Shape::Struct(&[
    value_struct("template", &POD_TEMPLATE_SPEC),
    field("selector", &ATOMIC_MAP),
    value_struct("strategy", &ANY),
    value_struct("updateStrategy", &ANY),
]);

static STATUS_WITH_CONDITIONS: Shape = Shape::Struct(&[field("conditions", &CONDITIONS)]);

static WORKLOAD: Shape = Shape::Struct(&[
    value_struct("metadata", &OBJECT_META),
    value_struct("spec", &WORKLOAD_SPEC),
    value_struct("status", &STATUS_WITH_CONDITIONS),
]);

/// `batch/v1.JobStatus.conditions`: merge by `type` in SMP, but `listType=atomic`.
static JOB_CONDITIONS_LIST: ListSpec = ListSpec {
    smp: SmpList::MergeKey("type"),
    ssa: SsaList::Atomic,
    items: &ANY,
};
static JOB_STATUS: Shape =
    Shape::Struct(&[field("conditions", &Shape::List(&JOB_CONDITIONS_LIST))]);

static JOB_SPEC: Shape = Shape::Struct(&[
    value_struct("template", &POD_TEMPLATE_SPEC),
    field("selector", &ATOMIC_MAP),
]);

static JOB: Shape = Shape::Struct(&[
    value_struct("metadata", &OBJECT_META),
    value_struct("spec", &JOB_SPEC),
    value_struct("status", &JOB_STATUS),
]);

static JOB_TEMPLATE_SPEC: Shape = Shape::Struct(&[
    value_struct("metadata", &OBJECT_META),
    value_struct("spec", &JOB_SPEC),
]);

static CRON_JOB: Shape = Shape::Struct(&[
    value_struct("metadata", &OBJECT_META),
    value_struct(
        "spec",
        &Shape::Struct(&[value_struct("jobTemplate", &JOB_TEMPLATE_SPEC)]),
    ),
    value_struct("status", &ANY),
]);

static SERVICE_PORT_KEYS: [MapKey; 2] = [key("port"), key_default("protocol", "TCP")];
/// `ServiceSpec.ports`: SMP merges by `port` only (upstream's tag), SSA keys
/// by `port`+`protocol`.
static SERVICE_PORTS_LIST: ListSpec = ListSpec {
    smp: SmpList::MergeKey("port"),
    ssa: SsaList::Map(&SERVICE_PORT_KEYS),
    items: &ANY,
};

static SERVICE: Shape = Shape::Struct(&[
    value_struct("metadata", &OBJECT_META),
    value_struct(
        "spec",
        &Shape::Struct(&[
            field("ports", &Shape::List(&SERVICE_PORTS_LIST)),
            field("selector", &ATOMIC_MAP),
        ]),
    ),
    value_struct("status", &STATUS_WITH_CONDITIONS),
]);

static NODE: Shape = Shape::Struct(&[
    value_struct("metadata", &OBJECT_META),
    value_struct("spec", &Shape::Struct(&[field("podCIDRs", &PRIMITIVE_SET)])),
    value_struct(
        "status",
        &Shape::Struct(&[
            field("conditions", &CONDITIONS),
            field("addresses", &Shape::List(&ADDRESSES_LIST)),
        ]),
    ),
]);
static ADDRESSES_LIST: ListSpec = ListSpec {
    smp: SmpList::MergeKey("type"),
    ssa: SsaList::Map(&TYPE_KEY),
    items: &ANY,
};

static NAMESPACE: Shape = Shape::Struct(&[
    value_struct("metadata", &OBJECT_META),
    value_struct("spec", &ANY),
    value_struct("status", &STATUS_WITH_CONDITIONS),
]);

static SERVICE_ACCOUNT: Shape = Shape::Struct(&[
    value_struct("metadata", &OBJECT_META),
    field("secrets", &NAMED),
]);

/// Any other kind (ConfigMap, Secret, Endpoints, EndpointSlice, Event, Lease,
/// unknown kinds): only `metadata` has merge keys.
static GENERIC: Shape = Shape::Struct(&[
    value_struct("metadata", &OBJECT_META),
    value_struct("spec", &ANY),
    value_struct("status", &ANY),
]);

/// The schema of objects of `kind` in `api_version`: a custom resource's
/// from its CRD ([`super::custom_schema`]), else the built-in [`root`].
pub(crate) fn root_for(api_version: &str, kind: &str) -> &'static Shape {
    rkube_api::registry::lookup_kind(api_version, kind).and_then(super::custom_schema::root).unwrap_or_else(|| root(kind))
}

/// The schema of objects of the built-in `kind`.
pub(crate) fn root(kind: &str) -> &'static Shape {
    match kind {
        "Pod" => &POD,
        "PodTemplate" => &POD_TEMPLATE,
        "Deployment" | "ReplicaSet" | "StatefulSet" | "DaemonSet" | "ReplicationController" => {
            &WORKLOAD
        }
        "Job" => &JOB,
        "CronJob" => &CRON_JOB,
        "Service" => &SERVICE,
        "Node" => &NODE,
        "Namespace" => &NAMESPACE,
        "ServiceAccount" => &SERVICE_ACCOUNT,
        _ => &GENERIC,
    }
}

impl Shape {
    /// The named field of a struct, if the schema knows it.
    pub(crate) fn field(&self, name: &str) -> Option<&'static Field> {
        match self {
            Shape::Struct(fields) => fields.iter().find(|f| f.name == name),
            _ => None,
        }
    }

    /// Shape of the value under `name` ([`ANY`] when unknown).
    pub(crate) fn child(&self, name: &str) -> &'static Shape {
        self.field(name).map_or(&ANY, |f| f.shape)
    }

    /// Whether `name` is a non-pointer struct field (see [`Field::value_struct`]).
    pub(crate) fn is_value_struct(&self, name: &str) -> bool {
        self.field(name).is_some_and(|f| f.value_struct)
    }

    /// The list spec, when this is a list with a strategy.
    pub(crate) fn list(&self) -> Option<&'static ListSpec> {
        match self {
            Shape::List(spec) => Some(spec),
            _ => None,
        }
    }

    /// SMP strategy of a list with this shape ([`SmpList::Replace`] by default).
    pub(crate) fn smp_list(&self) -> SmpList {
        self.list().map_or(SmpList::Replace, |l| l.smp)
    }

    /// SSA list type of a list with this shape ([`SsaList::Atomic`] by default).
    pub(crate) fn ssa_list(&self) -> SsaList {
        self.list().map_or(SsaList::Atomic, |l| l.ssa)
    }

    /// Shape of list items ([`ANY`] by default).
    pub(crate) fn items(&self) -> &'static Shape {
        self.list().map_or(&ANY, |l| l.items)
    }

    /// Whether SSA treats an object of this shape as one atomic value.
    pub(crate) fn is_atomic_map(&self) -> bool {
        matches!(self, Shape::AtomicMap)
    }
}
