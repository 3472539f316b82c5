//! `componentstatuses` (core/v1, read-only): the health of the control
//! plane's components, computed on each request rather than stored, as
//! upstream's `pkg/registry/core/componentstatus/rest.go` does by probing
//! each component. rkube reports the components it runs in this process:
//! its storage, named `etcd-0` like upstream's first storage server
//! (healthy when a read succeeds).

use axum::response::Response;
use serde_json::{json, Map, Value};

use super::Ctx;
use crate::error::{ApiError, ApiResult};
use crate::render;

/// One `ComponentStatus` with a single `Healthy` condition.
fn component(name: &str, healthy: bool, message: &str, error: &str) -> Value {
    let mut condition = json!({"type": "Healthy", "status": if healthy { "True" } else { "False" }});
    if !message.is_empty() {
        condition["message"] = json!(message);
    }
    if !error.is_empty() {
        condition["error"] = json!(error);
    }
    json!({"kind": "ComponentStatus", "apiVersion": "v1", "metadata": {"name": name}, "conditions": [condition]})
}

/// Every component, probed now.
async fn probe(ctx: &Ctx) -> Vec<Value> {
    let probe_key = format!("{}/health", ctx.st.prefix().trim_end_matches('/'));
    let storage = match ctx.st.storage.get(&probe_key).await {
        Ok(_) => component("etcd-0", true, "ok", ""),
        Err(e) => component("etcd-0", false, "", &e.to_string()),
    };
    vec![storage]
}

/// GET `componentstatuses/<name>`.
pub async fn get(ctx: &Ctx) -> ApiResult<Response> {
    let name = ctx.name();
    let found = probe(ctx).await.into_iter().find(|c| c.pointer("/metadata/name").and_then(Value::as_str) == Some(name));
    let obj = found.ok_or_else(|| ApiError::not_found(ctx.ri.info, name))?;
    Ok(render::object(ctx.ri.info, ctx.render, 200, &obj, &[]))
}

/// GET `componentstatuses` (selectors and paging do not apply: the list is tiny and computed).
pub async fn list(ctx: &Ctx) -> ApiResult<Response> {
    Ok(render::list(ctx.ri.info, ctx.render, probe(ctx).await, Map::new()))
}
