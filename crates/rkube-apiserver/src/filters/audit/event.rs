//! The audit.k8s.io/v1 `Event`, serialized as one JSON line (field order as
//! upstream's Go struct: kind, apiVersion, level, auditID, stage, requestURI,
//! verb, user, sourceIPs, userAgent, objectRef, responseStatus,
//! requestObject, responseObject, requestReceivedTimestamp, stageTimestamp,
//! annotations). Timestamps are `metav1.MicroTime`
//! (`2006-01-02T15:04:05.000000Z`).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::Value;

use crate::filters::audit::policy::{Level, Stage};
use crate::filters::authn::UserInfo;

/// `audit.k8s.io/v1` `ObjectReference`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectReference {
    /// Resource (plural).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub resource: String,
    /// Namespace.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// Name.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// UID (from a logged object).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub uid: String,
    /// API group (omitted for core).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub api_group: String,
    /// API version.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub api_version: String,
    /// resourceVersion (from a logged object).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub resource_version: String,
    /// Subresource.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub subresource: String,
}

/// One audit event.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    /// `Event`.
    pub kind: &'static str,
    /// `audit.k8s.io/v1`.
    pub api_version: &'static str,
    /// The policy level.
    pub level: Level,
    /// The request's audit ID (also the `Audit-Id` response header).
    #[serde(rename = "auditID")]
    pub audit_id: String,
    /// The stage this event reports.
    pub stage: Stage,
    /// Path and query.
    #[serde(rename = "requestURI")]
    pub request_uri: String,
    /// Kubernetes verb (`get`, `list`, `watch`, `create`, ...) or the
    /// lowercase HTTP method for non-resource requests.
    pub verb: String,
    /// Who.
    pub user: UserInfo,
    /// Who the request ran as, when it impersonated someone (`username`, `uid`, `groups`, `extra`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub impersonated_user: Option<Value>,
    /// Client addresses.
    #[serde(rename = "sourceIPs", skip_serializing_if = "Vec::is_empty")]
    pub source_ips: Vec<String>,
    /// `User-Agent`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub user_agent: String,
    /// The object addressed (resource requests only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub object_ref: Option<ObjectReference>,
    /// The response code, and for failures the Status' status, message, reason and details.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_status: Option<Value>,
    /// The request body (levels Request and RequestResponse), as sent.
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "raw")]
    pub request_object: Option<Arc<RawValue>>,
    /// The response body (level RequestResponse, not for watches), as sent.
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "raw")]
    pub response_object: Option<Arc<RawValue>>,
    /// When the request arrived.
    pub request_received_timestamp: String,
    /// When this stage was reached.
    pub stage_timestamp: String,
    /// Decisions of other filters (`authorization.k8s.io/decision`, ...).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// Writes a shared raw JSON value as is.
fn raw<S: serde::Serializer>(v: &Option<Arc<RawValue>>, s: S) -> Result<S::Ok, S::Error> {
    match v {
        Some(r) => r.as_ref().serialize(s),
        None => s.serialize_none(),
    }
}

impl Event {
    /// The event as one JSON line (with the trailing newline).
    pub fn to_line(&self) -> Vec<u8> {
        let mut v = serde_json::to_vec(self).unwrap_or_default();
        v.push(b'\n');
        v
    }
}

/// A `responseStatus` with only the code (success).
pub fn status_code_only(code: u16) -> Value {
    serde_json::json!({"metadata": {}, "code": code})
}

/// A `responseStatus` from a `Status` body: upstream copies status, message,
/// reason, details and code.
pub fn status_from_body(code: u16, status: &Value) -> Value {
    let mut out = serde_json::Map::new();
    out.insert("metadata".into(), Value::Object(Default::default()));
    for k in ["status", "message", "reason", "details"] {
        if let Some(v) = status.get(k) {
            out.insert(k.into(), v.clone());
        }
    }
    out.insert("code".into(), Value::from(code));
    Value::Object(out)
}

/// Removes `metadata.managedFields` from `obj` and from the items of a list.
pub fn strip_managed_fields(obj: &mut Value) {
    if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("managedFields");
    }
    if let Some(items) = obj.get_mut("items").and_then(Value::as_array_mut) {
        for i in items {
            strip_managed_fields(i);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_serialize_in_upstream_field_order() {
        let ev = Event {
            kind: "Event",
            api_version: "audit.k8s.io/v1",
            level: Level::Metadata,
            audit_id: "id".into(),
            stage: Stage::ResponseComplete,
            request_uri: "/api/v1/namespaces/default/pods".into(),
            verb: "list".into(),
            user: UserInfo { username: "alice".into(), uid: String::new(), groups: vec!["system:authenticated".into()], extra: Default::default() },
            impersonated_user: None,
            source_ips: vec!["127.0.0.1".into()],
            user_agent: String::new(),
            object_ref: Some(ObjectReference {
                resource: "pods".into(),
                namespace: "default".into(),
                api_version: "v1".into(),
                ..Default::default()
            }),
            response_status: Some(status_code_only(200)),
            request_object: None,
            response_object: None,
            request_received_timestamp: "2024-01-01T00:00:00.000000Z".into(),
            stage_timestamp: "2024-01-01T00:00:00.001000Z".into(),
            annotations: BTreeMap::new(),
        };
        let line = String::from_utf8(ev.to_line()).unwrap();
        assert_eq!(
            line,
            concat!(
                r#"{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"id","stage":"ResponseComplete","#,
                r#""requestURI":"/api/v1/namespaces/default/pods","verb":"list","user":{"username":"alice","groups":["system:authenticated"]},"#,
                r#""sourceIPs":["127.0.0.1"],"objectRef":{"resource":"pods","namespace":"default","apiVersion":"v1"},"#,
                r#""responseStatus":{"metadata":{},"code":200},"requestReceivedTimestamp":"2024-01-01T00:00:00.000000Z","#,
                r#""stageTimestamp":"2024-01-01T00:00:00.001000Z"}"#,
                "\n"
            )
        );
    }

    #[test]
    fn managed_fields_are_stripped_from_objects_and_list_items() {
        let mut v = serde_json::json!({"metadata": {"name": "a", "managedFields": []}, "items": [{"metadata": {"managedFields": [1]}}]});
        strip_managed_fields(&mut v);
        assert_eq!(v, serde_json::json!({"metadata": {"name": "a"}, "items": [{"metadata": {}}]}));
    }
}
