//! events.k8s.io/v1 `Event` validation (upstream
//! `pkg/apis/core/validation/events.go`, `ValidateEventCreate` and
//! `ValidateEventUpdate` with request version events.k8s.io/v1): new events
//! name their reporting controller and instance, an action, a reason and an
//! `eventTime`, and leave the `deprecated*` fields unset; on update the
//! identifying fields are immutable. Paths are upstream's (some name the
//! internal fields: `involvedObject`, `message`).

use serde_json::Value;

use super::{immutable, str_at, Strategy};
use crate::field_error::FieldError;
use crate::validation::is_qualified_name;

/// Upstream `ReportingInstanceLengthLimit`, `ActionLengthLimit`, `ReasonLengthLimit`.
const SHORT_LIMIT: usize = 128;
/// Upstream `NoteLengthLimit`.
const NOTE_LIMIT: usize = 1024;

/// True when the value at `pointer` is a set (non-null, non-empty) timestamp.
fn time_set(obj: &Value, pointer: &str) -> bool {
    obj.pointer(pointer).is_some_and(|v| !v.is_null() && v.as_str() != Some(""))
}

fn at_most(obj: &Value, pointer: &str, field: &str, limit: usize, errs: &mut Vec<FieldError>) {
    if str_at(obj, pointer).chars().count() > limit {
        errs.push(FieldError::invalid(field, "", format!("can have at most {limit} characters")));
    }
}

/// Upstream `legacyValidateEvent` for an event with `eventTime` set (the
/// only kind events.k8s.io/v1 accepts), plus the namespace's name format.
fn legacy(obj: &Value, errs: &mut Vec<FieldError>) {
    let namespace = str_at(obj, "/metadata/namespace");
    if time_set(obj, "/eventTime") {
        if str_at(obj, "/regarding/namespace").is_empty() && namespace != "default" && namespace != "kube-system" {
            errs.push(FieldError::invalid("involvedObject.namespace", "", "does not match event.namespace"));
        }
        let controller = str_at(obj, "/reportingController");
        if controller.is_empty() {
            errs.push(FieldError::required("reportingController", ""));
        }
        for msg in is_qualified_name(controller) {
            errs.push(FieldError::invalid("reportingController", controller, msg));
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
        at_most(obj, "/note", "message", NOTE_LIMIT, errs);
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
    legacy(obj, errs);
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
}
