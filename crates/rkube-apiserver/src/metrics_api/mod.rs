//! The resource metrics API, `metrics.k8s.io/v1beta1`, served by the API server itself as
//! metrics-server serves it (upstream `sigs.k8s.io/metrics-server/pkg/api`, types of
//! `k8s.io/metrics/pkg/apis/metrics/v1beta1`), behind the local APIService
//! `v1beta1.metrics.k8s.io` that every served group version gets
//! ([`crate::builtin_objects`]), so discovery lists it and `kubectl top` finds it.
//!
//! - `GET /apis/metrics.k8s.io/v1beta1/nodes[/<name>]`: `NodeMetrics` (`NodeMetricsList`) of the
//!   Nodes that have usage, with the Node's labels; `labelSelector` and
//!   `fieldSelector=metadata.name=...` select among them.
//! - `GET /apis/metrics.k8s.io/v1beta1[/namespaces/<ns>]/pods[/<name>]`: `PodMetrics` of the
//!   pods whose containers all have usage, with the pod's labels.
//!
//! Each object has `timestamp` (the newest sample), `window` (the time between the two samples
//! the CPU rate comes from, a Go duration) and `usage` (`cpu` in `n`, `m` or whole cores,
//! `memory` in bytes, `Ki`, `Mi`, ... as `resource.Quantity` canonicalizes them); pods list each
//! container's usage under `containers`. A node or pod with fewer than two samples is absent:
//! GET answers 404 `nodemetrics.metrics.k8s.io "<name>" not found` (`podmetrics...` for pods).
//! The samples come from [`scraper`] into [`store`].

pub mod scraper;
pub mod store;

use axum::response::Response;
use rkube_api::list_options::ListOptions;
use rkube_api::registry::metrics::{METRICS_GROUP, NODE_METRICS, POD_METRICS};
use rkube_api::status::Status;
use serde_json::{json, Map, Value};

use crate::error::{ApiError, ApiResult};
use crate::handlers::Ctx;
use crate::source::stored_objects;
use store::Usage;

/// Adds the `metrics.k8s.io/v1beta1` rows to the resource table (idempotent). Called when a
/// server state is built, before discovery or the APIServices are served.
pub fn register_rows() {
    for row in [NODE_METRICS, POD_METRICS] {
        if rkube_api::registry::lookup(row.group, row.version, row.resource).is_none() {
            // A built-in row of the same name cannot exist: these are the only rows of the group.
            let _ = rkube_api::registry::register(row);
        }
    }
}

/// True for a request to the resource metrics API.
pub fn is_metrics(ctx: &Ctx) -> bool {
    ctx.ri.info.group == METRICS_GROUP
}

/// A CPU rate as `resource.Quantity` writes it: whole cores, else millicores, else nanocores.
pub fn cpu_quantity(nano_cores: u64) -> String {
    if nano_cores.is_multiple_of(1_000_000_000) {
        format!("{}", nano_cores / 1_000_000_000)
    } else if nano_cores.is_multiple_of(1_000_000) {
        format!("{}m", nano_cores / 1_000_000)
    } else {
        format!("{nano_cores}n")
    }
}

/// Bytes as a binary-SI `resource.Quantity` writes them: the largest of `Ki`, `Mi`, `Gi`, `Ti`,
/// `Pi`, `Ei` that divides them, else plain bytes.
pub fn memory_quantity(bytes: u64) -> String {
    const SUFFIXES: [&str; 6] = ["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
    if bytes == 0 {
        return "0".to_string();
    }
    let (mut value, mut suffix) = (bytes, "");
    for s in SUFFIXES {
        if !value.is_multiple_of(1024) {
            break;
        }
        value /= 1024;
        suffix = s;
    }
    format!("{value}{suffix}")
}

/// A Go duration string of `ms` milliseconds (`15s`, `15.003s`, `1m30s`).
fn go_duration(ms: i64) -> String {
    rkube_api::time::format_go_duration(ms.saturating_mul(1_000_000))
}

fn rfc3339_ms(ms: i64) -> String {
    chrono::DateTime::from_timestamp(ms.div_euclid(1000), 0)
        .map(|t| t.format("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_default()
}

fn usage_json(u: &Usage) -> Value {
    json!({"cpu": cpu_quantity(u.nano_cores), "memory": memory_quantity(u.memory_bytes)})
}

fn metadata(obj: &Value, namespace: Option<&str>) -> Value {
    let mut m = Map::new();
    m.insert("name".into(), obj["metadata"]["name"].clone());
    if let Some(ns) = namespace {
        m.insert("namespace".into(), json!(ns));
    }
    m.insert("creationTimestamp".into(), json!(rkube_api::time::now_rfc3339()));
    if let Some(labels) = obj["metadata"]["labels"].as_object().filter(|l| !l.is_empty()) {
        m.insert("labels".into(), Value::Object(labels.clone()));
    }
    Value::Object(m)
}

/// The `NodeMetrics` of `node` (a stored Node), if it has usage.
fn node_metrics(ctx: &Ctx, node: &Value) -> Option<Value> {
    let u = ctx.st.resource_metrics.node_usage(node["metadata"]["name"].as_str()?)?;
    Some(json!({
        "kind": "NodeMetrics",
        "apiVersion": "metrics.k8s.io/v1beta1",
        "metadata": metadata(node, None),
        "timestamp": rfc3339_ms(u.ts_ms),
        "window": go_duration(u.window_ms),
        "usage": usage_json(&u),
    }))
}

/// The `PodMetrics` of `pod` (a stored Pod), if every container has usage.
fn pod_metrics(ctx: &Ctx, pod: &Value) -> Option<Value> {
    let ns = pod["metadata"]["namespace"].as_str()?;
    let containers = ctx.st.resource_metrics.pod_usage(ns, pod["metadata"]["name"].as_str()?)?;
    let newest = containers.iter().map(|(_, u)| *u).max_by_key(|u| u.ts_ms)?;
    let containers: Vec<Value> = containers.iter().map(|(name, u)| json!({"name": name, "usage": usage_json(u)})).collect();
    Some(json!({
        "kind": "PodMetrics",
        "apiVersion": "metrics.k8s.io/v1beta1",
        "metadata": metadata(pod, Some(ns)),
        "timestamp": rfc3339_ms(newest.ts_ms),
        "window": go_duration(newest.window_ms),
        "containers": containers,
    }))
}

/// The stored objects of core `resource` (`nodes`, `pods`), in `namespace` when given.
async fn stored(ctx: &Ctx, resource: &str, namespace: Option<&str>) -> ApiResult<Vec<Value>> {
    let info = rkube_api::registry::lookup("", "v1", resource).ok_or_else(|| ApiError::internal("no core resource"))?;
    stored_objects(&ctx.st, info, namespace).await
}

/// The kind metrics-server names in its 404s (`nodemetrics`, `podmetrics`).
fn not_found(ctx: &Ctx, name: &str) -> ApiError {
    let resource = if ctx.ri.info.resource == "nodes" { "nodemetrics" } else { "podmetrics" };
    Status::not_found(METRICS_GROUP, resource, name).into()
}

fn metrics_of(ctx: &Ctx, obj: &Value) -> Option<Value> {
    if ctx.ri.info.resource == "nodes" {
        node_metrics(ctx, obj)
    } else {
        pod_metrics(ctx, obj)
    }
}

/// GET of one `NodeMetrics` or `PodMetrics`.
///
/// # Errors
/// 404 as metrics-server for an object without usage (or that does not exist).
pub async fn get(ctx: &Ctx) -> ApiResult<Response> {
    let name = ctx.name();
    let ns = ctx.ri.namespace.as_deref();
    let objects = stored(ctx, ctx.ri.info.resource, ns).await?;
    let obj = objects.iter().find(|o| o["metadata"]["name"].as_str() == Some(name)).and_then(|o| metrics_of(ctx, o));
    let obj = obj.ok_or_else(|| not_found(ctx, name))?;
    Ok(crate::render::object(ctx.ri.info, ctx.render, 200, &obj, &[]))
}

/// LIST of `NodeMetrics` or `PodMetrics` (in a namespace or all), filtered by `labelSelector`
/// (the object's labels) and `fieldSelector` (`metadata.name`, `metadata.namespace`).
///
/// # Errors
/// 400 for a selector that does not parse or a field that is not selectable.
pub async fn list(ctx: &Ctx) -> ApiResult<Response> {
    let opts = ListOptions::from_query(&ctx.raw_query)?;
    if let Some(f) = opts.field_selector.fields().find(|f| !["metadata.name", "metadata.namespace"].contains(f)) {
        return Err(ApiError::bad_request(format!("field label not supported: {f}")));
    }
    let objects = stored(ctx, ctx.ri.info.resource, ctx.ri.namespace.as_deref()).await?;
    let mut items = Vec::new();
    for obj in &objects {
        let empty = Map::new();
        let labels = obj["metadata"]["labels"].as_object().unwrap_or(&empty);
        if !opts.label_selector.matches(labels) {
            continue;
        }
        let fields_match = opts.field_selector.matches(|f| match f {
            "metadata.name" => obj["metadata"]["name"].as_str().map(str::to_string),
            _ => Some(obj["metadata"]["namespace"].as_str().unwrap_or("").to_string()),
        });
        if fields_match {
            items.extend(metrics_of(ctx, obj));
        }
    }
    items.sort_by(|a, b| {
        let key = |v: &Value| (v["metadata"]["namespace"].as_str().unwrap_or("").to_string(), v["metadata"]["name"].as_str().unwrap_or("").to_string());
        key(a).cmp(&key(b))
    });
    Ok(crate::render::list(ctx.ri.info, ctx.render, items, Map::new()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_are_written_as_resource_quantity_canonicalizes_them() {
        assert_eq!(cpu_quantity(123_456_789), "123456789n");
        assert_eq!(cpu_quantity(5_000_000), "5m");
        assert_eq!(cpu_quantity(2_000_000_000), "2");
        assert_eq!(cpu_quantity(0), "0");
        assert_eq!(memory_quantity(4096), "4Ki");
        assert_eq!(memory_quantity(3 * 1024 * 1024), "3Mi");
        assert_eq!(memory_quantity(1000), "1000");
        assert_eq!(memory_quantity(0), "0");
        assert_eq!(go_duration(15_000), "15s");
        assert_eq!(go_duration(15_003), "15.003s");
        assert_eq!(rfc3339_ms(1_000_500), "1970-01-01T00:16:40Z");
    }
}
