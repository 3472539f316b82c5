//! Conversions between two served versions of one stored resource.
//!
//! Upstream keeps one version of each resource in etcd and converts every
//! object on its way in and out (`pkg/apis/<group>/<version>/conversion.go`
//! through the internal type). rkube converts directly between the stored
//! version's JSON and the served version's JSON: a row with a
//! [`Conversion`] shares the storage prefix (and the watch cache) of the
//! stored row, and the read path and the write handlers call
//! [`Conversion::to_served`] and [`Conversion::to_stored`].
//!
//! Served today: events.k8s.io/v1 `events` over core/v1 `events`
//! ([`EVENTS_V1`]), autoscaling/v1 `horizontalpodautoscalers` over
//! autoscaling/v2 ([`HPA_V1`], [`super::hpa_conversion`]), and the versions
//! of a custom resource with more than one ([`custom_resource`]: upstream's
//! `None` conversion strategy, which changes `apiVersion` only, or its
//! `Webhook` strategy, where the API server asks the CRD's conversion
//! webhook and this crate's functions are not used: [`Conversion::by_webhook`]).

use serde_json::{Map, Value};

/// How a row's objects convert to and from the stored version's row.
#[derive(Debug, Clone, Copy)]
pub struct Conversion {
    /// Group of the row that owns storage (`""` for core).
    pub stored_group: &'static str,
    /// Version of the row that owns storage.
    pub stored_version: &'static str,
    /// Stored JSON → served JSON, given the served `apiVersion` (sets it and `kind`).
    pub to_served: fn(Value, &str) -> Value,
    /// Served JSON → stored JSON, given the stored `apiVersion` (sets it and `kind`).
    pub to_stored: fn(Value, &str) -> Value,
    /// Field selector labels this row names differently, as
    /// `(served label, stored label)` (upstream `AddFieldLabelConversionFunc`).
    pub field_labels: &'static [(&'static str, &'static str)],
    /// The objects are converted by a conversion webhook (a CRD with
    /// `spec.conversion.strategy: Webhook`): an async, fallible call the API
    /// server makes, not [`Conversion::to_served`] / [`Conversion::to_stored`].
    /// Whatever serves such a row in process (the watch cache) hands out
    /// objects in the stored form, as they are.
    pub by_webhook: bool,
}

/// Moves the fields of `obj` into a new object of `api_version`/`kind`:
/// `metadata`, then each `(from, to)` of `renames` (in the target type's
/// field order) that `obj` has, then anything else unchanged. Anything but
/// an object is returned as it is.
fn rename(obj: Value, api_version: &str, kind: &str, renames: &[(&str, &str)]) -> Value {
    let Value::Object(mut src) = obj else { return obj };
    let mut out = Map::with_capacity(src.len() + 2);
    src.remove("kind");
    src.remove("apiVersion");
    out.insert("kind".into(), Value::String(kind.to_string()));
    out.insert("apiVersion".into(), Value::String(api_version.to_string()));
    if let Some(meta) = src.remove("metadata") {
        out.insert("metadata".into(), meta);
    }
    for (from, to) in renames {
        if let Some(v) = src.remove(*from) {
            out.insert((*to).to_string(), v);
        }
    }
    out.extend(src);
    Value::Object(out)
}

/// events.k8s.io/v1 fields in `Event` order, with the core/v1 field each
/// comes from (upstream `pkg/apis/events/v1/conversion.go` and the
/// generated conversions: `regarding` is `involvedObject`, `note` is
/// `message`, `reportingController` is `reportingComponent`, the
/// `deprecated*` fields are core's `source`, `firstTimestamp`,
/// `lastTimestamp` and `count`; `series` has the same `count` and
/// `lastObservedTime` in both versions).
const EVENT_FIELDS: &[(&str, &str)] = &[
    ("eventTime", "eventTime"),
    ("series", "series"),
    ("reportingComponent", "reportingController"),
    ("reportingInstance", "reportingInstance"),
    ("action", "action"),
    ("reason", "reason"),
    ("involvedObject", "regarding"),
    ("related", "related"),
    ("message", "note"),
    ("type", "type"),
    ("source", "deprecatedSource"),
    ("firstTimestamp", "deprecatedFirstTimestamp"),
    ("lastTimestamp", "deprecatedLastTimestamp"),
    ("count", "deprecatedCount"),
];

/// core/v1 fields in `Event` order, with the events.k8s.io/v1 field each comes from.
const CORE_EVENT_FIELDS: &[(&str, &str)] = &[
    ("regarding", "involvedObject"),
    ("reason", "reason"),
    ("note", "message"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
    ("type", "type"),
    ("eventTime", "eventTime"),
    ("series", "series"),
    ("action", "action"),
    ("related", "related"),
    ("reportingController", "reportingComponent"),
    ("reportingInstance", "reportingInstance"),
];

/// A core/v1 Event as an events.k8s.io/v1 Event.
pub fn event_to_v1(obj: Value) -> Value {
    rename(obj, "events.k8s.io/v1", "Event", EVENT_FIELDS)
}

/// An events.k8s.io/v1 Event as a core/v1 Event.
pub fn event_to_core(obj: Value) -> Value {
    rename(obj, "v1", "Event", CORE_EVENT_FIELDS)
}

fn events_to_served(obj: Value, _: &str) -> Value {
    event_to_v1(obj)
}

fn events_to_stored(obj: Value, _: &str) -> Value {
    event_to_core(obj)
}

fn hpa_to_served(obj: Value, _: &str) -> Value {
    super::hpa_conversion::hpa_to_v1(obj)
}

fn hpa_to_stored(obj: Value, _: &str) -> Value {
    super::hpa_conversion::hpa_to_v2(obj)
}

/// `obj` with `apiVersion` set to `api_version`, nothing else changed:
/// upstream's `None` conversion of custom resources
/// (`apiextensions-apiserver/pkg/apiserver/conversion/nop_converter.go`).
pub fn set_api_version(obj: Value, api_version: &str) -> Value {
    let Value::Object(mut map) = obj else { return obj };
    map.insert("apiVersion".into(), Value::String(api_version.to_string()));
    Value::Object(map)
}

/// The conversion of every version of a custom resource whose CRD lists
/// more than one version (or stored more than one): objects are stored in
/// `group`/`storage_version` and served in the row's version by changing
/// `apiVersion` (the `None` strategy), or, when `by_webhook` (the `Webhook`
/// strategy), by the API server calling the CRD's conversion webhook
/// ([`Conversion::by_webhook`]).
pub fn custom_resource(group: &'static str, storage_version: &'static str, by_webhook: bool) -> Conversion {
    Conversion {
        stored_group: group,
        stored_version: storage_version,
        to_served: set_api_version,
        to_stored: set_api_version,
        field_labels: &[],
        by_webhook,
    }
}

/// events.k8s.io/v1 `events`, stored as core/v1 `events`. Field selectors
/// use the events.k8s.io names (upstream `AddFieldLabelConversionsForEvent`
/// of `pkg/apis/events/v1`).
pub const EVENTS_V1: Conversion = Conversion {
    stored_group: "",
    stored_version: "v1",
    to_served: events_to_served,
    to_stored: events_to_stored,
    field_labels: &[
        ("regarding.kind", "involvedObject.kind"),
        ("regarding.namespace", "involvedObject.namespace"),
        ("regarding.name", "involvedObject.name"),
        ("regarding.uid", "involvedObject.uid"),
        ("regarding.apiVersion", "involvedObject.apiVersion"),
        ("regarding.resourceVersion", "involvedObject.resourceVersion"),
        ("regarding.fieldPath", "involvedObject.fieldPath"),
        ("reportingController", "reportingComponent"),
    ],
    by_webhook: false,
};

/// autoscaling/v1 `horizontalpodautoscalers`, stored as autoscaling/v2
/// (v2-only fields in `autoscaling.alpha.kubernetes.io/*` annotations).
pub const HPA_V1: Conversion = Conversion {
    stored_group: "autoscaling",
    stored_version: "v2",
    to_served: hpa_to_served,
    to_stored: hpa_to_stored,
    field_labels: &[],
    by_webhook: false,
};

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn events_convert_both_ways_without_loss() {
        let core = json!({
            "kind": "Event", "apiVersion": "v1",
            "metadata": {"name": "e", "namespace": "ns"},
            "involvedObject": {"kind": "Pod", "name": "p"},
            "reason": "Started", "message": "hello",
            "source": {"component": "kubelet"},
            "firstTimestamp": "2024-01-01T00:00:00Z", "lastTimestamp": "2024-01-01T00:00:01Z", "count": 3,
            "type": "Normal", "eventTime": "2024-01-01T00:00:00.000000Z",
            "series": {"count": 2, "lastObservedTime": "2024-01-01T00:00:01.000000Z"},
            "action": "Start", "related": {"kind": "Node", "name": "n"},
            "reportingComponent": "kubelet", "reportingInstance": "n1",
        });
        let v1 = event_to_v1(core.clone());
        assert_eq!(v1["apiVersion"], "events.k8s.io/v1");
        assert_eq!(v1["regarding"], json!({"kind": "Pod", "name": "p"}));
        assert_eq!(v1["note"], "hello");
        assert_eq!(v1["reportingController"], "kubelet");
        assert_eq!(v1["deprecatedSource"], json!({"component": "kubelet"}));
        assert_eq!(v1["deprecatedCount"], 3);
        assert_eq!(v1["series"]["count"], 2);
        assert!(v1.get("involvedObject").is_none() && v1.get("message").is_none());
        let keys: Vec<&str> = v1.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(&keys[..4], &["kind", "apiVersion", "metadata", "eventTime"]);
        assert_eq!(event_to_core(v1), core);
    }
}
