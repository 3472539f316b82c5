//! The `scale` subresource (`autoscaling/v1` `Scale`) of deployments,
//! replica sets, stateful sets and replication controllers, as upstream's
//! `ScaleREST` (`pkg/registry/apps/deployment/storage/storage.go` and its
//! siblings): GET renders the object as a Scale; PUT/PATCH change only
//! `spec.replicas` (`kubectl scale` patches it). The row's
//! [`rkube_api::registry::ScaleSelector`] says how the selector is read.
//! Custom resources use their CRD's `specReplicasPath`,
//! `statusReplicasPath` and `labelSelectorPath` instead.

use axum::response::Response;
use rkube_api::field_error::FieldError;
use rkube_api::registry::{ResourceInfo, ScaleSelector};
use serde_json::{json, Map, Value};

use super::update::{commit, Commit, MAX_ATTEMPTS};
use super::Ctx;
use crate::error::{ApiError, ApiResult};
use crate::filters::trace::{self, steps};
use crate::media;
use crate::object;

/// `key=value` pairs of a label map, sorted, comma-separated.
fn map_selector(labels: &Map<String, Value>) -> String {
    let mut pairs: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or(""))).collect();
    pairs.sort();
    pairs.join(",")
}

/// A `metav1.LabelSelector` as its string form (upstream
/// `metav1.LabelSelectorAsSelector(...).String()`): requirements sorted by key.
fn label_selector_string(selector: &Value) -> String {
    let mut reqs: Vec<(String, String)> = Vec::new();
    if let Some(ml) = selector.get("matchLabels").and_then(Value::as_object) {
        for (k, v) in ml {
            reqs.push((k.clone(), format!("{k}={}", v.as_str().unwrap_or(""))));
        }
    }
    for e in selector.get("matchExpressions").and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[]) {
        let key = e.get("key").and_then(Value::as_str).unwrap_or("").to_string();
        let mut values: Vec<&str> =
            e.get("values").and_then(Value::as_array).map(|a| a.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
        values.sort();
        let text = match e.get("operator").and_then(Value::as_str).unwrap_or("") {
            "In" => format!("{key} in ({})", values.join(",")),
            "NotIn" => format!("{key} notin ({})", values.join(",")),
            "Exists" => key.clone(),
            "DoesNotExist" => format!("!{key}"),
            _ => continue,
        };
        reqs.push((key, text));
    }
    reqs.sort();
    reqs.into_iter().map(|(_, t)| t).collect::<Vec<_>>().join(",")
}

/// The `Scale` of a scalable object of `info`.
pub fn to_scale(info: &ResourceInfo, obj: &Value) -> Value {
    let meta = obj.get("metadata").cloned().unwrap_or_else(|| json!({}));
    let mut m = Map::new();
    for k in ["name", "namespace", "uid", "resourceVersion", "creationTimestamp"] {
        if let Some(v) = meta.get(k) {
            m.insert(k.to_string(), v.clone());
        }
    }
    if let Some(paths) = info.custom.and_then(|c| c.scale.as_ref()) {
        // Custom resources (upstream `scaleFromCustomResource`): the CRD's
        // paths; absent replicas read as 0, an absent selector as "".
        let int_at = |path: &str| obj.pointer(&json_pointer(path)).and_then(Value::as_i64).unwrap_or(0);
        let selector = paths
            .label_selector
            .as_deref()
            .and_then(|p| obj.pointer(&json_pointer(p)))
            .and_then(Value::as_str)
            .unwrap_or("");
        return json!({
            "kind": "Scale",
            "apiVersion": "autoscaling/v1",
            "metadata": m,
            "spec": {"replicas": int_at(&paths.spec_replicas)},
            "status": {"replicas": int_at(&paths.status_replicas), "selector": selector},
        });
    }
    let selector = match (info.strategy.scale, obj.pointer("/spec/selector")) {
        (Some(ScaleSelector::Map), Some(Value::Object(labels))) => map_selector(labels),
        (Some(ScaleSelector::LabelSelector), Some(sel)) => label_selector_string(sel),
        _ => String::new(),
    };
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": m,
        "spec": {"replicas": obj.pointer("/spec/replicas").and_then(Value::as_i64).unwrap_or(1)},
        "status": {
            "replicas": obj.pointer("/status/replicas").and_then(Value::as_i64).unwrap_or(0),
            "selector": selector,
        },
    })
}

/// A CRD's simple JSON path (`.spec.replicas`) as a JSON pointer (`/spec/replicas`).
fn json_pointer(path: &str) -> String {
    path.trim_start_matches('.').split('.').map(|seg| format!("/{seg}")).collect()
}

/// Sets the value at a CRD JSON path in `obj`, creating parent objects.
fn set_path(obj: &mut Value, path: &str, value: Value) {
    let segs: Vec<&str> = path.trim_start_matches('.').split('.').collect();
    let Some((last, parents)) = segs.split_last() else { return };
    let mut cur = obj;
    for seg in parents {
        let Some(map) = cur.as_object_mut() else { return };
        let next = map.entry(seg.to_string()).or_insert_with(|| json!({}));
        if !next.is_object() {
            *next = json!({});
        }
        cur = next;
    }
    if let Some(map) = cur.as_object_mut() {
        map.insert(last.to_string(), value);
    }
}

/// GET `<resource>/<name>/scale`.
pub async fn get(ctx: &Ctx) -> ApiResult<Response> {
    let name = ctx.name().to_string();
    trace::step(steps::GET_START);
    let Some((obj, _)) = ctx.load(&ctx.key(&name), &name).await? else {
        return Err(ApiError::not_found(ctx.ri.info, &name));
    };
    trace::step(steps::GET_DONE);
    trace::step(steps::ABOUT_TO_WRITE);
    Ok(media::respond(200, ctx.render.output, &to_scale(ctx.ri.info, &obj)))
}

/// PUT (`patch` = None) or PATCH `<resource>/<name>/scale`.
pub async fn write(ctx: &Ctx, body: &[u8], patch: Option<crate::patch::PatchType>) -> ApiResult<Response> {
    let info = ctx.ri.info;
    let name = ctx.name().to_string();
    let key = ctx.key(&name);
    let dry_run = ctx.dry_run()?;
    let manager = ctx.field_manager()?;
    trace::step(if patch.is_some() { steps::PATCH_START } else { steps::STORE_START });
    for _ in 0..MAX_ATTEMPTS {
        let Some((old, kv)) = ctx.load(&key, &name).await? else {
            return Err(ApiError::not_found(info, &name));
        };
        trace::step(steps::READ_CURRENT);
        let scale = to_scale(info, &old);
        let wanted = match patch {
            None => media::decode_object(&media::content_type(&ctx.headers), body)?,
            Some(t) => {
                let now = rkube_api::time::now_rfc3339();
                crate::patch::apply_patch_at(
                    "Scale",
                    Some("autoscaling/v1"),
                    t,
                    Some(&scale),
                    body,
                    &manager,
                    false,
                    &now,
                )
                .map_err(|e| ApiError::from(e.status()))?
            }
        };
        let rv = object::meta_str(&wanted, "resourceVersion");
        if !rv.is_empty() && rv != kv.mod_revision.to_string() {
            return Err(ApiError::stale(info, &name));
        }
        // A resourceVersion the client sent is a precondition; the one a
        // patch carries over from the current Scale is not (a lost race retries).
        let explicit_rv = match patch {
            None => !rv.is_empty(),
            Some(crate::patch::PatchType::Json) => false,
            Some(_) => String::from_utf8_lossy(body).contains("resourceVersion"),
        };
        let replicas = wanted.pointer("/spec/replicas").and_then(Value::as_i64).unwrap_or(0);
        if replicas < 0 {
            let cause =
                FieldError::invalid_json("spec.replicas", &json!(replicas), "must be greater than or equal to 0");
            let scale_info = rkube_api::registry::ResourceInfo { kind: "Scale", group: "autoscaling", ..*info };
            return Err(ApiError::invalid(&scale_info, &name, vec![cause.into()]));
        }
        let mut new = Value::clone(&old);
        if let Some(paths) = info.custom.and_then(|c| c.scale.as_ref()) {
            set_path(&mut new, &paths.spec_replicas, json!(replicas));
        } else if let Some(spec) = new.get_mut("spec").and_then(Value::as_object_mut) {
            spec.insert("replicas".into(), json!(replicas));
        }
        object::bump_generation(&old, &mut new, info.has_spec);
        let now = rkube_api::time::now_rfc3339();
        let api_version = info.api_version();
        let rec = crate::patch::UpdateRecord {
            manager: &manager,
            api_version: &api_version,
            subresource: "scale",
            now: &now,
        };
        crate::patch::record_update(&rec, Some(&old), &mut new);
        trace::step(steps::ADMISSION_DONE);
        let committed = commit(ctx, &key, &old, &kv, new, dry_run).await?;
        trace::step(steps::STORED);
        match committed {
            Commit::Done(obj, _) => {
                trace::step(steps::ABOUT_TO_WRITE);
                return Ok(media::respond(200, ctx.render.output, &to_scale(ctx.ri.info, &obj)));
            }
            Commit::Unchanged => {
                trace::step(steps::ABOUT_TO_WRITE);
                return Ok(media::respond(200, ctx.render.output, &to_scale(ctx.ri.info, &old)));
            }
            Commit::Retry if explicit_rv => return Err(ApiError::stale(info, &name)),
            Commit::Retry => continue,
        }
    }
    Err(ApiError::stale(info, &name))
}
