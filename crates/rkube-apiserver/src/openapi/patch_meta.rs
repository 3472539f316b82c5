//! Strategic-merge-patch metadata for the published schemas.
//!
//! `k8s-openapi`'s schemas do not carry the `patchStrategy`/`patchMergeKey`
//! Go struct tags of `k8s.io/api`, so rkube lists them here for the types it
//! serves. They become the `x-kubernetes-patch-strategy` and
//! `x-kubernetes-patch-merge-key` extensions that kubectl's client-side
//! `apply` reads to compute a strategic merge patch (without them it would
//! replace lists such as `containers` wholesale).

/// One list (or field) with a patch strategy: `(definition, property, strategy, merge key)`.
/// An empty merge key means a list of primitives merged as a set (`finalizers`).
pub(crate) type PatchMeta = (&'static str, &'static str, &'static str, &'static str);

/// Patch strategies of the fields of the served kinds, from the struct tags
/// in `k8s.io/api` (`core/v1/types.go`, `apps/v1/types.go`) and
/// `k8s.io/apimachinery/pkg/apis/meta/v1/types.go`.
pub(crate) static PATCH_META: &[PatchMeta] = &[
    ("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta", "finalizers", "merge", ""),
    ("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta", "ownerReferences", "merge", "uid"),
    ("io.k8s.api.core.v1.PodSpec", "volumes", "merge,retainKeys", "name"),
    ("io.k8s.api.core.v1.PodSpec", "initContainers", "merge", "name"),
    ("io.k8s.api.core.v1.PodSpec", "containers", "merge", "name"),
    ("io.k8s.api.core.v1.PodSpec", "ephemeralContainers", "merge", "name"),
    ("io.k8s.api.core.v1.PodSpec", "imagePullSecrets", "merge", "name"),
    ("io.k8s.api.core.v1.PodSpec", "hostAliases", "merge", "ip"),
    ("io.k8s.api.core.v1.PodSpec", "topologySpreadConstraints", "merge", "topologyKey"),
    ("io.k8s.api.core.v1.PodSpec", "resourceClaims", "merge,retainKeys", "name"),
    ("io.k8s.api.core.v1.PodSpec", "schedulingGates", "merge", "name"),
    ("io.k8s.api.core.v1.Container", "ports", "merge", "containerPort"),
    ("io.k8s.api.core.v1.Container", "env", "merge", "name"),
    ("io.k8s.api.core.v1.Container", "volumeMounts", "merge", "mountPath"),
    ("io.k8s.api.core.v1.Container", "volumeDevices", "merge", "devicePath"),
    ("io.k8s.api.core.v1.EphemeralContainer", "ports", "merge", "containerPort"),
    ("io.k8s.api.core.v1.EphemeralContainer", "env", "merge", "name"),
    ("io.k8s.api.core.v1.EphemeralContainer", "volumeMounts", "merge", "mountPath"),
    ("io.k8s.api.core.v1.EphemeralContainer", "volumeDevices", "merge", "devicePath"),
    ("io.k8s.api.core.v1.PodStatus", "conditions", "merge", "type"),
    ("io.k8s.api.core.v1.PodStatus", "podIPs", "merge", "ip"),
    ("io.k8s.api.core.v1.PodStatus", "hostIPs", "merge", "ip"),
    ("io.k8s.api.core.v1.PodStatus", "resourceClaimStatuses", "merge,retainKeys", "name"),
    ("io.k8s.api.core.v1.NodeSpec", "podCIDRs", "merge", ""),
    ("io.k8s.api.core.v1.NodeStatus", "conditions", "merge", "type"),
    ("io.k8s.api.core.v1.NodeStatus", "addresses", "merge", "type"),
    ("io.k8s.api.core.v1.NamespaceStatus", "conditions", "merge", "type"),
    ("io.k8s.api.core.v1.ServiceSpec", "ports", "merge", "port"),
    ("io.k8s.api.core.v1.ServiceStatus", "conditions", "merge", "type"),
    ("io.k8s.api.core.v1.ServiceAccount", "secrets", "merge", "name"),
    ("io.k8s.api.apps.v1.DeploymentSpec", "strategy", "retainKeys", ""),
    ("io.k8s.api.apps.v1.DeploymentStatus", "conditions", "merge", "type"),
];

/// The patch strategy and merge key of `property` in `definition`, if any.
/// The merge key is `None` for primitive sets and `retainKeys`-only fields.
pub fn patch_strategy(definition: &str, property: &str) -> Option<(&'static str, Option<&'static str>)> {
    PATCH_META
        .iter()
        .find(|(d, p, _, _)| *d == definition && *p == property)
        .map(|(_, _, strategy, key)| (*strategy, if key.is_empty() { None } else { Some(*key) }))
}
