//! `Event` validation for both API versions of events (upstream
//! `pkg/apis/core/validation/events.go`, `ValidateEventCreate` and
//! `ValidateEventUpdate`), one mechanism over the two JSON forms
//! ([`EventFields`]):
//!
//! - every event, on create and update, passes upstream's
//!   `legacyValidateEvent`: an event without `eventTime` has an
//!   `involvedObject.namespace` equal to its own namespace (or empty, when
//!   the event lives in `default`); one with `eventTime` names its involved
//!   object's namespace unless it lives in `default` or `kube-system`, its
//!   reporting controller (a qualified name) and instance, an action and a
//!   reason, with upstream's length limits; the event's namespace is a
//!   DNS-1123 subdomain;
//! - core/v1 requests get nothing more (upstream keeps v1 lenient for old
//!   clients);
//! - events.k8s.io/v1 requests also need an `eventTime`, a `Normal` or
//!   `Warning` type and unset `deprecated*` fields on create, and keep the
//!   identifying fields on update.
//!
//! Paths are upstream's: the internal field names (`involvedObject`,
//! `message`) whatever the version, except the reporting controller, which
//! core/v1 calls `reportingComponent`.

use serde_json::Value;

use super::{immutable, str_at, Strategy};
use crate::field_error::FieldError;
use crate::validation::{is_dns1123_subdomain, is_qualified_name};

/// Where one API version of events keeps the fields the legacy rules read.
struct EventFields {
    /// The involved object (`/regarding`, `/involvedObject`).
    involved_object: &'static str,
    /// The reporting controller (`/reportingController`, `/reportingComponent`).
    reporting_controller: &'static str,
    /// Its name in error paths (`reportingController`, `reportingComponent`).
    reporting_controller_field: &'static str,
    /// The message (`/note`, `/message`).
    message: &'static str,
}

/// events.k8s.io/v1 field names.
const EVENTS_V1: EventFields = EventFields {
    involved_object: "/regarding",
    reporting_controller: "/reportingController",
    reporting_controller_field: "reportingController",
    message: "/note",
};

/// core/v1 field names.
const CORE_V1: EventFields = EventFields {
    involved_object: "/involvedObject",
    reporting_controller: "/reportingComponent",
    reporting_controller_field: "reportingComponent",
    message: "/message",
};

/// Upstream `ReportingInstanceLengthLimit`, `ActionLengthLimit`, `ReasonLengthLimit`.
const SHORT_LIMIT: usize = 128;
/// Upstream `NoteLengthLimit`.
const NOTE_LIMIT: usize = 1024;

/// True when the value at `pointer` is a set (non-null, non-empty) timestamp.
fn time_set(obj: &Value, pointer: &str) -> bool {
    obj.pointer(pointer).is_some_and(|v| !v.is_null() && v.as_str() != Some(""))
}

fn at_most(obj: &Value, pointer: &str, field: &str, limit: usize, errs: &mut Vec<FieldError>) {
    // Upstream compares Go string lengths: bytes.
    if str_at(obj, pointer).len() > limit {
        errs.push(FieldError::invalid(field, "", format!("can have at most {limit} characters")));
    }
}

/// Upstream `legacyValidateEvent`, over the JSON form `f` of the request's version.
fn legacy(obj: &Value, f: &EventFields, errs: &mut Vec<FieldError>) {
    let namespace = str_at(obj, "/metadata/namespace");
    let involved_ns = obj.pointer(f.involved_object).map(|o| str_at(o, "/namespace")).unwrap_or("");
    if !time_set(obj, "/eventTime") {
        // Old-style events: the involved object's namespace is the event's
        // (or empty, for events in `default` from old clients).
        let matches = if involved_ns.is_empty() { namespace.is_empty() || namespace == "default" } else { involved_ns == namespace };
        if !matches {
            errs.push(FieldError::invalid("involvedObject.namespace", involved_ns, "does not match event.namespace"));
        }
    } else {
        if involved_ns.is_empty() && namespace != "default" && namespace != "kube-system" {
            errs.push(FieldError::invalid("involvedObject.namespace", "", "does not match event.namespace"));
        }
        let controller = str_at(obj, f.reporting_controller);
        if controller.is_empty() {
            errs.push(FieldError::required(f.reporting_controller_field, ""));
        }
        for msg in is_qualified_name(controller) {
            errs.push(FieldError::invalid(f.reporting_controller_field, controller, msg));
        }
        if str_at(obj, "/reportingInstance").is_empty() {
            errs.push(FieldError::required("reportingInstance", ""));
        }
        at_most(obj, "/reportingInstance", "reportingInstance", SHORT_LIMIT, errs);
        if str_at(obj, "/action").is_empty() {
            errs.push(FieldError::required("action", ""));
        }
        at_most(obj, "/action", "action", SHORT_LIMIT, errs);
        if str_at(obj, "/reason").is_empty() {
            errs.push(FieldError::required("reason", ""));
        }
        at_most(obj, "/reason", "reason", SHORT_LIMIT, errs);
        at_most(obj, f.message, "message", NOTE_LIMIT, errs);
    }
    for msg in is_dns1123_subdomain(namespace) {
        errs.push(FieldError::invalid("namespace", namespace, msg));
    }
}

/// Upstream `validateV1EventSeries`.
fn series(obj: &Value, errs: &mut Vec<FieldError>) {
    let Some(series) = obj.get("series").filter(|s| !s.is_null()) else { return };
    if series.get("count").and_then(Value::as_i64).unwrap_or(0) < 2 {
        errs.push(FieldError::invalid("series.count", "", "should be at least 2"));
    }
    if !time_set(series, "/lastObservedTime") {
        errs.push(FieldError::required("series.lastObservedTime", ""));
    }
}

fn validate(obj: &Value, old: Option<&Value>, errs: &mut Vec<FieldError>) {
    legacy(obj, &EVENTS_V1, errs);
    let Some(old) = old else {
        series(obj, errs);
        if !time_set(obj, "/eventTime") {
            errs.push(FieldError::required("eventTime", ""));
        }
        let ty = str_at(obj, "/type");
        if ty != "Normal" && ty != "Warning" {
            errs.push(FieldError::invalid("type", "", format!("has invalid value: {ty}")));
        }
        for (pointer, field) in [
            ("/deprecatedFirstTimestamp", "deprecatedFirstTimestamp"),
            ("/deprecatedLastTimestamp", "deprecatedLastTimestamp"),
        ] {
            if time_set(obj, pointer) {
                errs.push(FieldError::invalid(field, "", "needs to be unset"));
            }
        }
        if obj.get("deprecatedCount").and_then(Value::as_i64).unwrap_or(0) != 0 {
            errs.push(FieldError::invalid("deprecatedCount", "", "needs to be unset"));
        }
        if !str_at(obj, "/deprecatedSource/component").is_empty() || !str_at(obj, "/deprecatedSource/host").is_empty() {
            errs.push(FieldError::invalid("deprecatedSource", "", "needs to be unset"));
        }
        return;
    };
    if obj.get("series") != old.get("series") {
        series(obj, errs);
    }
    for (pointer, field) in [
        ("/regarding", "involvedObject"),
        ("/reason", "reason"),
        ("/related", "related"),
        ("/type", "type"),
        ("/eventTime", "eventTime"),
        ("/action", "action"),
        ("/reportingController", "reportingController"),
        ("/reportingInstance", "reportingInstance"),
    ] {
        immutable(obj, Some(old), pointer, field, errs);
    }
}

/// events.k8s.io/v1 events: validation only (no defaults upstream).
pub(crate) const EVENT_V1: Strategy = Strategy { validate, ..Strategy::NONE };

/// core/v1 requests: the legacy rules only, on create and update.
fn validate_core(obj: &Value, _old: Option<&Value>, errs: &mut Vec<FieldError>) {
    legacy(obj, &CORE_V1, errs);
}

/// core/v1 events: validation only (no defaults upstream).
pub(crate) const EVENT: Strategy = Strategy { validate: validate_core, ..Strategy::NONE };

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn causes(obj: &Value, old: Option<&Value>) -> Vec<String> {
        EVENT_V1.validate_object(obj, old).iter().map(|e| e.field.clone()).collect()
    }

    #[test]
    fn new_v1_events_need_their_reporting_fields() {
        let ok = json!({"metadata": {"namespace": "default"}, "eventTime": "2024-01-01T00:00:00.000000Z",
            "reportingController": "example.com/ctl", "reportingInstance": "i", "action": "Do", "reason": "R",
            "type": "Normal", "regarding": {"kind": "Node", "name": "n"}});
        assert!(causes(&ok, None).is_empty(), "{:?}", causes(&ok, None));
        let bare = json!({"metadata": {"namespace": "default"}, "type": "Normal"});
        assert_eq!(causes(&bare, None), vec!["eventTime"]);
        let mut no_ctl = ok.clone();
        no_ctl["reportingController"] = json!("");
        no_ctl["deprecatedCount"] = json!(2);
        // Required, then the two qualified-name errors of "" (empty, pattern), as upstream.
        assert_eq!(causes(&no_ctl, None), vec!["reportingController"; 3].into_iter().chain(["deprecatedCount"]).collect::<Vec<_>>());
        let mut changed = ok.clone();
        changed["reason"] = json!("Other");
        assert_eq!(causes(&changed, Some(&ok)), vec!["reason"]);
    }

    fn core_causes(obj: &Value, old: Option<&Value>) -> Vec<String> {
        EVENT.validate_object(obj, old).iter().map(ToString::to_string).collect()
    }

    #[test]
    fn core_events_without_event_time_match_their_involved_objects_namespace() {
        let ok = json!({"metadata": {"namespace": "ns1"}, "involvedObject": {"kind": "Pod", "namespace": "ns1"}});
        assert!(core_causes(&ok, None).is_empty());
        let other = json!({"metadata": {"namespace": "ns1"}, "involvedObject": {"kind": "Pod", "namespace": "ns2"}});
        assert_eq!(core_causes(&other, None), ["involvedObject.namespace: Invalid value: \"ns2\": does not match event.namespace"]);
        let cluster = json!({"metadata": {"namespace": "default"}, "involvedObject": {"kind": "Node"}});
        assert!(core_causes(&cluster, None).is_empty());
        let reported = json!({"metadata": {"namespace": "ns1"}, "eventTime": "2024-01-01T00:00:00.000000Z",
            "involvedObject": {"namespace": "ns1"}, "reportingInstance": "i", "action": "A", "reason": "R"});
        // Required, then the two qualified-name errors of "".
        let causes = core_causes(&reported, None);
        assert_eq!(causes.len(), 3, "{causes:?}");
        assert_eq!(causes[0], "reportingComponent: Required value");
    }
}
