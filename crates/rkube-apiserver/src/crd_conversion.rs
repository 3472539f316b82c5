//! Conversion webhooks of CustomResourceDefinitions (upstream
//! `staging/src/k8s.io/apiextensions-apiserver/pkg/apiserver/conversion/webhook_converter.go`).
//!
//! A CRD with `spec.conversion.strategy: Webhook` and several versions has
//! its custom resources stored in the storage version; every time one is
//! read, listed or watched in another version, or written in another
//! version than the storage one, the API server sends the CRD's webhook a
//! `ConversionReview` (`apiextensions.k8s.io/v1` or `v1beta1`, the first of
//! `conversionReviewVersions` rkube knows) with `request.uid`,
//! `desiredAPIVersion` and the `objects` that are not in that version yet
//! (none: no call). A LIST sends all its items in one review.
//!
//! The answer is checked as upstream does: `v1` answers must be
//! `apiextensions.k8s.io/v1, Kind=ConversionReview` with the same
//! `response.uid`; `response.result.status` must be `Success`; there must
//! be one converted object per object sent, each with the desired
//! `apiVersion` and the same `kind`, `metadata.name`, `namespace` and `uid`;
//! its metadata is then the original's with the webhook's `labels` and
//! `annotations` only (upstream `restoreObjectMeta`, both validated).
//! Any failure answers the client `500 InternalError` with
//! `conversion webhook for <group>/<version>, Kind=<kind> failed: <why>`
//! (or upstream's other `conversion webhook for ...` messages).
//!
//! The HTTPS call is the admission webhooks' ([`crate::admission::webhook::call::post`]:
//! `url` or `service`, `caBundle`), bounded by [`TIMEOUT`] and
//! [`max_response_bytes`].
//!
//! The watch cache holds the storage version ([`rkube_api::registry::Conversion::by_webhook`]
//! keeps it from converting); [`served_objects`] and [`served`] convert on
//! the way out, [`stored`] on the way in.

use std::sync::Arc;
use std::time::Duration;

use rkube_api::registry::ResourceInfo;
use rkube_cache::CachedObject;
use serde_json::{json, Map, Value};

use crate::admission::webhook::call::{post, PostError};
use crate::error::{ApiError, ApiResult};
use crate::state::ApiState;

/// How long a conversion webhook may take: upstream's webhook client
/// default of 30 s (a CRD's conversion has no `timeoutSeconds`).
pub const TIMEOUT: Duration = Duration::from_secs(30);

/// The `ConversionReview` versions rkube sends, in the order upstream tries them.
pub const REVIEW_VERSIONS: &[&str] = &["v1", "v1beta1"];

/// The largest answer read from a conversion webhook for a request of
/// `request_bytes`: 4 times the request plus 3 MiB (the objects come back
/// once, possibly a little larger), so a LIST's batch can be answered and
/// a runaway webhook cannot fill memory.
pub fn max_response_bytes(request_bytes: usize) -> usize {
    request_bytes.saturating_mul(4).saturating_add(3 * 1024 * 1024)
}

/// The CRD's `spec.conversion.webhook` when `info`'s objects convert
/// through a webhook, else `None`.
fn webhook_of(info: &ResourceInfo) -> Option<&'static Value> {
    if !info.conversion.is_some_and(|c| c.by_webhook) {
        return None;
    }
    info.custom.and_then(|c| c.conversion_webhook.as_ref())
}

/// Whether `info`'s objects are converted by [`convert`] (a row of a CRD
/// whose conversion strategy is `Webhook`).
pub fn by_webhook(info: &ResourceInfo) -> bool {
    webhook_of(info).is_some()
}

fn api_version_of(v: &Value) -> &str {
    v.get("apiVersion").and_then(Value::as_str).unwrap_or("")
}

fn kind_of(v: &Value) -> &str {
    v.get("kind").and_then(Value::as_str).unwrap_or("")
}

/// Go's `GroupVersionKind.String()`: `<group>/<version>, Kind=<kind>`
/// (`/v1, Kind=Status` for the core group).
fn gvk(api_version: &str, kind: &str) -> String {
    if api_version.contains('/') {
        format!("{api_version}, Kind={kind}")
    } else {
        format!("/{api_version}, Kind={kind}")
    }
}

/// `objects` (custom resources of `info`'s CRD) in `desired`
/// (`<group>/<version>`), through the CRD's conversion webhook: the objects
/// already in `desired` are kept, the others are sent in one review (no
/// call when there are none). `list_kind`: the objects are a list's items
/// (error messages name the list's kind, as upstream). Errors are `500
/// InternalError` Statuses naming the failure (module doc).
pub async fn convert(st: &ApiState, info: &ResourceInfo, mut objects: Vec<Value>, desired: &str, list: bool) -> ApiResult<Vec<Value>> {
    let Some(webhook) = webhook_of(info) else { return Ok(objects) };
    let pending: Vec<usize> = (0..objects.len()).filter(|&i| api_version_of(&objects[i]) != desired).collect();
    let Some(&first) = pending.first() else { return Ok(objects) };
    let from = api_version_of(&objects[first]).to_string();
    let kind = if list { info.list_kind } else { kind_of(&objects[first]) };
    let what = gvk(&from, if kind.is_empty() { info.kind } else { kind });
    let sent: Vec<Value> = pending.iter().map(|&i| objects[i].clone()).collect();
    let converted = call(st, webhook, sent, desired).await.map_err(|why| {
        ApiError::internal(match why {
            Failure::Call(why) => format!("conversion webhook for {what} failed: {why}"),
            Failure::Other(msg) => format!("conversion webhook for {what} {msg}"),
        })
    })?;
    for (n, (i, mut out)) in pending.into_iter().zip(converted).enumerate() {
        let original = &objects[i];
        let at = if list { format!("at index {n}") } else { "at index 0".to_string() };
        let invalid = |why: String| ApiError::internal(format!("conversion webhook for {what} returned invalid converted object {at}: {why}"));
        let got = api_version_of(&out);
        if got != desired {
            return Err(invalid(format!("invalid groupVersion (expected {desired}, received {got})")));
        }
        let (want_kind, got_kind) = (kind_of(original), kind_of(&out));
        if want_kind != got_kind {
            return Err(invalid(format!("invalid kind (expected {want_kind}, received {got_kind})")));
        }
        check_same_identity(original, &out).map_err(invalid)?;
        restore_object_meta(original, &mut out)
            .map_err(|why| ApiError::internal(format!("conversion webhook for {what} returned invalid metadata in object {at}: {why}")))?;
        objects[i] = out;
    }
    Ok(objects)
}

/// Why a review failed: the call or its answer (`... failed: <why>`), or
/// another upstream message (`... returned 2 objects, expected 1`).
enum Failure {
    Call(String),
    Other(String),
}

/// Sends one review of `objects` to `webhook` and returns the converted
/// objects, as many as were sent.
async fn call(st: &ApiState, webhook: &Value, objects: Vec<Value>, desired: &str) -> Result<Vec<Value>, Failure> {
    let accepted = webhook.get("conversionReviewVersions").and_then(Value::as_array).cloned().unwrap_or_default();
    let Some(review_version) = accepted.iter().filter_map(Value::as_str).find(|v| REVIEW_VERSIONS.contains(v)) else {
        return Err(Failure::Call("no supported conversion review versions".into()));
    };
    let review_version = review_version.to_string();
    let uid = uuid::Uuid::new_v4().to_string();
    let count = objects.len();
    let review = json!({
        "apiVersion": format!("apiextensions.k8s.io/{review_version}"),
        "kind": "ConversionReview",
        "request": {"uid": uid, "desiredAPIVersion": desired, "objects": objects},
    });
    let body = serde_json::to_vec(&review).map_err(|e| Failure::Call(e.to_string()))?;
    let limit = max_response_bytes(body.len());
    let client_config = webhook.get("clientConfig").cloned().unwrap_or(Value::Null);
    let posted = post(st, &client_config, body, TIMEOUT, limit).await.map_err(|e| match e {
        PostError::Setup(e) => Failure::Call(e.0),
        PostError::Exchange(e) => Failure::Call(e),
    })?;
    if !(200..300).contains(&posted.code) {
        let text = String::from_utf8_lossy(&posted.body);
        return Err(Failure::Call(format!("the server responded with the status code {}: {text}", posted.code)));
    }
    let answer: Value = serde_json::from_slice(&posted.body).map_err(|e| Failure::Call(format!("decoding the response: {e}")))?;
    let converted = check_answer(&answer, &review_version, &uid).map_err(Failure::Call)?;
    if converted.len() != count {
        return Err(Failure::Other(format!("returned {} objects, expected {count}", converted.len())));
    }
    Ok(converted)
}

/// Upstream's `getConvertedObjectsFromResponse`: the converted objects of a
/// successful answer, else why it is not one. `v1beta1` answers are not
/// checked for their type or uid (upstream kept that for compatibility).
pub fn check_answer(answer: &Value, review_version: &str, uid: &str) -> Result<Vec<Value>, String> {
    if review_version == "v1" {
        let (av, kind) = (api_version_of(answer), kind_of(answer));
        if av != "apiextensions.k8s.io/v1" || kind != "ConversionReview" {
            return Err(format!("expected webhook response of apiextensions.k8s.io/v1, Kind=ConversionReview, got {}", gvk(av, kind)));
        }
    }
    let Some(response) = answer.get("response").filter(|r| r.is_object()) else {
        return Err("no response provided".into());
    };
    if review_version == "v1" {
        let got = response.get("uid").and_then(Value::as_str).unwrap_or("");
        if got != uid {
            return Err(format!("expected response.uid={uid:?}, got {got:?}"));
        }
    }
    let status = response.pointer("/result/status").and_then(Value::as_str).unwrap_or("");
    if status != "Success" {
        let message = response.pointer("/result/message").and_then(Value::as_str).unwrap_or("");
        if !message.is_empty() {
            return Err(message.to_string());
        }
        return Err(format!("response.result.status was '{status}', not 'Success'"));
    }
    Ok(response.get("convertedObjects").and_then(Value::as_array).cloned().unwrap_or_default())
}

fn meta_str<'a>(v: &'a Value, field: &str) -> &'a str {
    v.pointer(&format!("/metadata/{field}")).and_then(Value::as_str).unwrap_or("")
}

/// Upstream's `validateConvertedObject`: the converted object keeps the
/// original's name, namespace and uid.
fn check_same_identity(original: &Value, converted: &Value) -> Result<(), String> {
    for (field, what) in [("name", "name"), ("namespace", "namespace"), ("uid", "UID")] {
        let (want, got) = (meta_str(original, field), meta_str(converted, field));
        if want != got {
            return Err(format!("must have the same {what}: {want} != {got}"));
        }
    }
    Ok(())
}

/// Upstream's `restoreObjectMeta`: `converted`'s metadata becomes
/// `original`'s, but for `labels` and `annotations`, which are the
/// webhook's (absent when it dropped them), string-valued and, when
/// changed, valid label or annotation maps.
pub fn restore_object_meta(original: &Value, converted: &mut Value) -> Result<(), String> {
    let answered = match converted.get("metadata") {
        None => return Err("missing metadata in converted object".into()),
        Some(Value::Object(m)) => m.clone(),
        Some(other) => return Err(format!("invalid metadata of type {} in converted object", json_type(other))),
    };
    let mut meta = match original.get("metadata") {
        Some(Value::Object(m)) => m.clone(),
        _ => Map::new(),
    };
    for field in ["labels", "annotations"] {
        let new = match answered.get(field) {
            None | Some(Value::Null) => {
                meta.remove(field);
                continue;
            }
            Some(Value::Object(m)) => m,
            Some(other) => return Err(format!("invalid metadata.{field} of type {} in converted object", json_type(other))),
        };
        if let Some((k, v)) = new.iter().find(|(_, v)| !v.is_string()) {
            return Err(format!("metadata.{field}[{k}] must be a string, but is {} in converted object", json_type(v)));
        }
        if meta.get(field) != Some(&Value::Object(new.clone())) {
            // Upstream names the annotations' path `metadata.annotation` here.
            let (errs, path) = if field == "labels" {
                (rkube_api::validation::validate_labels(new), "metadata.labels")
            } else {
                (rkube_api::validation::validate_annotations(new), "metadata.annotation")
            };
            if !errs.is_empty() {
                let all: Vec<String> = errs.iter().map(|c| format!("{path}: {}", c.message)).collect();
                return Err(if all.len() == 1 { all.concat() } else { format!("[{}]", all.join(", ")) });
            }
        }
        meta.insert(field.to_string(), Value::Object(new.clone()));
    }
    if let Some(m) = converted.as_object_mut() {
        m.insert("metadata".into(), Value::Object(meta));
    }
    Ok(())
}

/// Go's name for the type of a JSON value in upstream's messages.
fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "<nil>",
        Value::Bool(_) => "bool",
        Value::Number(_) => "int64",
        Value::String(_) => "string",
        Value::Array(_) => "[]interface {}",
        Value::Object(_) => "map[string]interface {}",
    }
}

/// A stored object of `info` (a decoded value) in `info`'s version:
/// through the webhook for a `Webhook` CRD, else [`ResourceInfo::to_served`].
pub async fn served(st: &ApiState, info: &ResourceInfo, obj: Value) -> ApiResult<Value> {
    if !by_webhook(info) {
        return Ok(info.to_served(obj));
    }
    let mut out = convert(st, info, vec![obj], &info.api_version(), false).await?;
    out.pop().ok_or_else(|| ApiError::internal("conversion returned no object"))
}

/// An object of `info` (in `info`'s version) in the storage version:
/// through the webhook for a `Webhook` CRD, else [`ResourceInfo::to_stored`].
pub async fn stored(st: &ApiState, info: &ResourceInfo, obj: Value) -> ApiResult<Value> {
    let Some(c) = info.conversion.filter(|_| by_webhook(info)) else {
        return Ok(info.to_stored(obj));
    };
    let desired = format!("{}/{}", c.stored_group, c.stored_version);
    let mut out = convert(st, info, vec![obj], &desired, false).await?;
    out.pop().ok_or_else(|| ApiError::internal("conversion returned no object"))
}

/// Cached objects (the storage version) of `info` in `info`'s version,
/// converted in one review ([`convert`] with `list`); unchanged for rows
/// that do not convert through a webhook. Converted objects get new JSON
/// and no cached encodings.
pub async fn served_objects(st: &ApiState, info: &ResourceInfo, objs: Vec<Arc<CachedObject>>, list: bool) -> ApiResult<Vec<Arc<CachedObject>>> {
    if !by_webhook(info) {
        return Ok(objs);
    }
    let desired = info.api_version();
    let values = objs
        .iter()
        .map(|o| serde_json::from_slice::<Value>(&o.json).map_err(|e| ApiError::internal(format!("cached object is not JSON: {e}"))))
        .collect::<ApiResult<Vec<Value>>>()?;
    if values.iter().all(|v| api_version_of(v) == desired) {
        return Ok(objs);
    }
    let converted = convert(st, info, values, &desired, list).await?;
    let mut out = Vec::with_capacity(objs.len());
    for (obj, mut v) in objs.into_iter().zip(converted) {
        rkube_api::wire::order_object_keys(&mut v);
        let json = serde_json::to_vec(&v).map_err(ApiError::internal)?;
        let mut copy = (*obj).clone();
        copy.json = json.into();
        copy.encodings = Default::default();
        out.push(Arc::new(copy));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restoring_metadata_keeps_the_originals_but_labels_and_annotations() {
        let original = json!({"metadata": {"name": "a", "uid": "u", "resourceVersion": "5", "labels": {"x": "1"}}});
        let mut converted = json!({"metadata": {"name": "a", "uid": "u", "resourceVersion": "9", "generation": 7,
                                                "labels": {"x": "2"}, "annotations": {"note": "v2"}}});
        restore_object_meta(&original, &mut converted).unwrap();
        assert_eq!(converted["metadata"], json!({"name": "a", "uid": "u", "resourceVersion": "5", "labels": {"x": "2"}, "annotations": {"note": "v2"}}));
        let mut dropped = json!({"metadata": {"name": "a"}});
        restore_object_meta(&original, &mut dropped).unwrap();
        assert!(dropped["metadata"].get("labels").is_none(), "{dropped}");
        let mut bad = json!({"metadata": {"labels": {"x": 1}}});
        assert_eq!(restore_object_meta(&original, &mut bad).unwrap_err(), "metadata.labels[x] must be a string, but is int64 in converted object");
        let mut bad = json!({"metadata": {"labels": {"-x": "1"}}});
        assert!(restore_object_meta(&original, &mut bad).unwrap_err().starts_with("metadata.labels: Invalid value: \"-x\""));
        assert_eq!(restore_object_meta(&original, &mut json!({})).unwrap_err(), "missing metadata in converted object");
    }

    #[test]
    fn answers_are_checked_as_upstream_does() {
        let ok = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
                        "response": {"uid": "u1", "result": {"status": "Success"}, "convertedObjects": [{"a": 1}]}});
        assert_eq!(check_answer(&ok, "v1", "u1").unwrap(), vec![json!({"a": 1})]);
        assert_eq!(check_answer(&ok, "v1", "u2").unwrap_err(), "expected response.uid=\"u2\", got \"u1\"");
        assert_eq!(check_answer(&ok, "v1beta1", "u2").unwrap().len(), 1, "v1beta1 answers are not checked for their uid");
        let failed = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
                            "response": {"uid": "u1", "result": {"status": "Failure", "message": "no way"}}});
        assert_eq!(check_answer(&failed, "v1", "u1").unwrap_err(), "no way");
        let failed = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview", "response": {"uid": "u1", "result": {}}});
        assert_eq!(check_answer(&failed, "v1", "u1").unwrap_err(), "response.result.status was '', not 'Success'");
        let wrong = json!({"apiVersion": "v1", "kind": "Status"});
        assert_eq!(
            check_answer(&wrong, "v1", "u1").unwrap_err(),
            "expected webhook response of apiextensions.k8s.io/v1, Kind=ConversionReview, got /v1, Kind=Status"
        );
    }
}
