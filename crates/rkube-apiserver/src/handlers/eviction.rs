//! `pods/<name>/eviction` (policy/v1 `Eviction`): a delete that honours
//! PodDisruptionBudgets, as upstream's `EvictionREST`
//! (`pkg/registry/core/pod/storage/eviction.go`):
//! - pods that are pending, finished or already terminating are deleted at once;
//! - a pod selected by more than one budget is refused (500);
//! - a budget whose status the disruption controller has not caught up with
//!   (`observedGeneration` behind `generation`), or with no disruptions
//!   allowed, refuses with 429 `TooManyRequests` and a `DisruptionBudget`
//!   cause (kubectl drain retries those);
//! - otherwise the budget's `disruptionsAllowed` is decremented and the pod
//!   recorded in `disruptedPods`, guarded by the budget's resourceVersion,
//!   then the pod is deleted with the eviction's `deleteOptions`.

use axum::response::Response;
use rkube_api::registry;
use rkube_api::status::{Status, StatusCause, StatusDetails};
use rkube_storage::RangeRequest;
use serde_json::{json, Value};

use super::delete::{delete_one, options_from_value};
use super::Ctx;
use crate::error::{ApiError, ApiResult};
use crate::media;
use crate::object;

/// Upstream's message for an eviction a budget refuses.
const VIOLATION: &str = "Cannot evict pod as it would violate the pod's disruption budget.";

fn refused(cause: String) -> ApiError {
    Status::new(429, "TooManyRequests", VIOLATION)
        .with_details(StatusDetails { causes: vec![StatusCause::new("DisruptionBudget", cause, "")], ..StatusDetails::default() })
        .into()
}

/// Whether a policy/v1 budget's selector selects `labels` (an empty selector selects every pod).
fn selects(pdb: &Value, labels: &serde_json::Map<String, Value>) -> bool {
    match pdb.pointer("/spec/selector") {
        None | Some(Value::Null) => false,
        Some(sel) => rkube_api::selector::label_selector_matches(sel, labels),
    }
}

/// POST `pods/<name>/eviction`.
pub async fn create(ctx: &Ctx, body: &[u8]) -> ApiResult<Response> {
    let pods = ctx.ri.info;
    let name = ctx.name().to_string();
    let ns = ctx.namespace().to_string();
    let eviction = media::decode_object(&media::content_type(&ctx.headers), body)?;
    match eviction.get("kind").and_then(Value::as_str) {
        Some("Eviction") | None => {}
        Some(k) => {
            return Err(ApiError::bad_request(format!(
                "the kind in the data ({k}) does not match the expected kind (Eviction)"
            )))
        }
    }
    let evicted = object::name(&eviction);
    if !evicted.is_empty() && evicted != name {
        return Err(ApiError::bad_request(format!("name in URL does not match name in Eviction object: {name} != {evicted}")));
    }
    let opts = options_from_value(ctx, eviction.get("deleteOptions").filter(|v| !v.is_null()))?;
    let Some((pod, _)) = ctx.load(&ctx.key(&name), &name).await? else {
        return Err(ApiError::not_found(pods, &name));
    };
    let phase = pod.pointer("/status/phase").and_then(Value::as_str).unwrap_or("");
    let budgeted = !matches!(phase, "Pending" | "Succeeded" | "Failed") && !object::is_terminating(&pod);
    if budgeted {
        take_disruption(ctx, &pod, &name, opts.dry_run).await?;
    }
    delete_one(ctx, pods, &ns, &name, &opts).await?;
    let mut ok = Status::success();
    ok.code = 201;
    Ok(media::respond(201, ctx.render.output, &ok.to_json()))
}

/// Checks the pod's budget and records the disruption (see the module docs).
async fn take_disruption(ctx: &Ctx, pod: &Value, name: &str, dry_run: bool) -> ApiResult<()> {
    let pdbs = registry::lookup("policy", "v1", "poddisruptionbudgets")
        .ok_or_else(|| ApiError::internal("poddisruptionbudgets are not served"))?;
    let empty = serde_json::Map::new();
    let labels = pod.pointer("/metadata/labels").and_then(Value::as_object).unwrap_or(&empty);
    let prefix = pdbs.list_prefix(ctx.st.prefix(), Some(ctx.namespace()));
    let listed = ctx.st.storage.range(RangeRequest::prefix(&prefix)).await.map_err(|e| ApiError::from_storage(e, pdbs, ""))?;
    let mut matching = Vec::new();
    for kv in listed.kvs {
        let pdb: Value = serde_json::from_slice(&kv.value).map_err(ApiError::internal)?;
        if selects(&pdb, labels) {
            matching.push((pdb, kv));
        }
    }
    let (mut pdb, kv) = match matching.len() {
        0 => return Ok(()),
        1 => matching.remove(0),
        _ => {
            return Err(ApiError::internal(
                "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
            ))
        }
    };
    let pdb_name = object::name(&pdb).to_string();
    let generation = pdb.pointer("/metadata/generation").and_then(Value::as_i64).unwrap_or(0);
    let observed = pdb.pointer("/status/observedGeneration").and_then(Value::as_i64).unwrap_or(0);
    if observed < generation || pdb.pointer("/status/observedGeneration").is_none() {
        return Err(refused(format!("The disruption budget {pdb_name} is still being processed by the server.")));
    }
    let allowed = pdb.pointer("/status/disruptionsAllowed").and_then(Value::as_i64).unwrap_or(0);
    if allowed <= 0 {
        let desired = pdb.pointer("/status/desiredHealthy").and_then(Value::as_i64).unwrap_or(0);
        let current = pdb.pointer("/status/currentHealthy").and_then(Value::as_i64).unwrap_or(0);
        return Err(refused(format!(
            "The disruption budget {pdb_name} needs {desired} healthy pods and has {current} currently"
        )));
    }
    if dry_run {
        return Ok(());
    }
    pdb["status"]["disruptionsAllowed"] = json!(allowed - 1);
    pdb["status"]["disruptedPods"][name] = json!(rkube_api::time::now_rfc3339());
    let bytes = serde_json::to_vec(&pdb).map_err(ApiError::internal)?;
    match ctx.st.storage.update(&kv.key, bytes.into(), kv.mod_revision).await {
        Ok(_) => Ok(()),
        // Another eviction got in between: the client retries, as upstream's 429 asks.
        Err(rkube_storage::StorageError::Conflict { .. }) => {
            Err(refused(format!("The disruption budget {pdb_name} was updated concurrently; retry the eviction")))
        }
        Err(e) => Err(ApiError::from_storage(e, pdbs, &pdb_name)),
    }
}
