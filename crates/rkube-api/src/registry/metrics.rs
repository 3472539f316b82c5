//! The resource metrics API, `metrics.k8s.io/v1beta1` (upstream `k8s.io/metrics/pkg/apis/metrics/v1beta1`,
//! served by metrics-server): `nodes` (`NodeMetrics`, cluster-scoped) and `pods` (`PodMetrics`,
//! namespaced), read-only (`get`, `list`).
//!
//! These rows are not in [`super::RESOURCES`]: `k8s-openapi` has no type for them, and nothing is
//! stored under them. The API server adds them with [`super::register`] and answers their reads
//! from the usage it scrapes from the nodes' kubelets.

use super::builtin::READ_VERBS;
use super::{ResourceInfo, BASE};

/// The group of the resource metrics API.
pub const METRICS_GROUP: &str = "metrics.k8s.io";

/// `metrics.k8s.io/v1beta1` `nodes`: one `NodeMetrics` per node with usage samples.
pub const NODE_METRICS: ResourceInfo = ResourceInfo {
    group: METRICS_GROUP,
    version: "v1beta1",
    resource: "nodes",
    kind: "NodeMetrics",
    list_kind: "NodeMetricsList",
    singular: "",
    namespaced: false,
    verbs: READ_VERBS,
    storage_prefix: "metrics.k8s.io/nodes",
    printer: &crate::printers::metrics::NODE_METRICS,
    ..BASE
};

/// `metrics.k8s.io/v1beta1` `pods`: one `PodMetrics` per pod whose containers have usage samples.
pub const POD_METRICS: ResourceInfo = ResourceInfo {
    group: METRICS_GROUP,
    version: "v1beta1",
    resource: "pods",
    kind: "PodMetrics",
    list_kind: "PodMetricsList",
    singular: "",
    namespaced: true,
    verbs: READ_VERBS,
    storage_prefix: "metrics.k8s.io/pods",
    printer: &crate::printers::metrics::POD_METRICS,
    ..BASE
};
