//! autoscaling/v1 `HorizontalPodAutoscaler` ↔ the stored autoscaling/v2 one
//! (upstream `pkg/apis/autoscaling/v1/conversion.go`).
//!
//! v1 holds one CPU utilization target (`spec.targetCPUUtilizationPercentage`,
//! `status.currentCPUUtilizationPercentage`). Everything else of v2 travels in
//! annotations, as upstream writes them:
//!
//! | annotation | holds |
//! |---|---|
//! | `autoscaling.alpha.kubernetes.io/metrics` | the spec metrics other than a CPU utilization target, as v1 `MetricSpec`s |
//! | `autoscaling.alpha.kubernetes.io/current-metrics` | every current metric, as v1 `MetricStatus`es |
//! | `autoscaling.alpha.kubernetes.io/behavior` | `spec.behavior` (upstream marshals its internal type: Go field names) |
//! | `autoscaling.alpha.kubernetes.io/conditions` | `status.conditions` |
//!
//! Reading v1 drops annotations of these names the stored object had and
//! writes fresh ones; writing v1 reads them back and removes them.

use serde_json::{json, Map, Value};

const METRICS: &str = "autoscaling.alpha.kubernetes.io/metrics";
const CURRENT_METRICS: &str = "autoscaling.alpha.kubernetes.io/current-metrics";
const BEHAVIOR: &str = "autoscaling.alpha.kubernetes.io/behavior";
const CONDITIONS: &str = "autoscaling.alpha.kubernetes.io/conditions";
const ROUND_TRIP: [&str; 4] = [METRICS, CURRENT_METRICS, BEHAVIOR, CONDITIONS];

/// Upstream `autoscaling.DefaultCPUUtilization`: the target of an HPA that names no metric.
pub const DEFAULT_CPU_UTILIZATION: i64 = 80;

/// True when an autoscaling/v1 HPA carries spec metrics in the round-trip annotation.
pub fn has_annotated_metrics(v1: &Value) -> bool {
    v1.pointer("/metadata/annotations").and_then(|a| a.get(METRICS)).is_some()
}

/// Copies `from[key]` to `to[as_key]` when present and not null.
fn put(to: &mut Map<String, Value>, as_key: &str, from: Option<&Value>) {
    if let Some(v) = from.filter(|v| !v.is_null()) {
        to.insert(as_key.to_string(), v.clone());
    }
}

fn obj(v: Map<String, Value>) -> Value {
    Value::Object(v)
}

/// True for the v2 metric v1 holds in `targetCPUUtilizationPercentage`.
fn is_cpu_utilization(m: &Value) -> bool {
    m["type"] == "Resource" && m["resource"]["name"] == "cpu" && m["resource"]["target"]["averageUtilization"].is_number()
}

/// A v2 `MetricSpec` as a v1 (annotation) `MetricSpec`.
fn spec_to_v1(m: &Value) -> Value {
    let mut out = Map::new();
    put(&mut out, "type", m.get("type"));
    let target = |src: &Value, out: &mut Map<String, Value>, util: &str, avg: &str, value: Option<&str>| {
        put(out, util, src.pointer("/target/averageUtilization"));
        put(out, avg, src.pointer("/target/averageValue"));
        if let Some(value) = value {
            put(out, value, src.pointer("/target/value"));
        }
    };
    if let Some(r) = m.get("resource").filter(|v| v.is_object()) {
        let mut o = Map::new();
        put(&mut o, "name", r.get("name"));
        target(r, &mut o, "targetAverageUtilization", "targetAverageValue", None);
        out.insert("resource".into(), obj(o));
    }
    if let Some(r) = m.get("containerResource").filter(|v| v.is_object()) {
        let mut o = Map::new();
        put(&mut o, "name", r.get("name"));
        put(&mut o, "container", r.get("container"));
        target(r, &mut o, "targetAverageUtilization", "targetAverageValue", None);
        out.insert("containerResource".into(), obj(o));
    }
    if let Some(p) = m.get("pods").filter(|v| v.is_object()) {
        let mut o = Map::new();
        put(&mut o, "metricName", p.pointer("/metric/name"));
        put(&mut o, "targetAverageValue", p.pointer("/target/averageValue"));
        put(&mut o, "selector", p.pointer("/metric/selector"));
        out.insert("pods".into(), obj(o));
    }
    if let Some(x) = m.get("object").filter(|v| v.is_object()) {
        let mut o = Map::new();
        put(&mut o, "target", x.get("describedObject"));
        put(&mut o, "metricName", x.pointer("/metric/name"));
        put(&mut o, "targetValue", x.pointer("/target/value"));
        put(&mut o, "selector", x.pointer("/metric/selector"));
        put(&mut o, "averageValue", x.pointer("/target/averageValue"));
        out.insert("object".into(), obj(o));
    }
    if let Some(x) = m.get("external").filter(|v| v.is_object()) {
        let mut o = Map::new();
        put(&mut o, "metricName", x.pointer("/metric/name"));
        put(&mut o, "metricSelector", x.pointer("/metric/selector"));
        put(&mut o, "targetValue", x.pointer("/target/value"));
        put(&mut o, "targetAverageValue", x.pointer("/target/averageValue"));
        out.insert("external".into(), obj(o));
    }
    obj(out)
}

/// `{"name", "selector"}` of a v2 `MetricIdentifier`.
fn identifier(name: Option<&Value>, selector: Option<&Value>) -> Value {
    let mut o = Map::new();
    put(&mut o, "name", name);
    put(&mut o, "selector", selector);
    obj(o)
}

/// A v2 `MetricTarget` of `kind` (`Utilization`, `AverageValue`, `Value`).
fn metric_target(kind: &str, utilization: Option<&Value>, average: Option<&Value>, value: Option<&Value>) -> Value {
    let mut o = Map::new();
    o.insert("type".into(), json!(kind));
    put(&mut o, "value", value);
    put(&mut o, "averageValue", average);
    put(&mut o, "averageUtilization", utilization);
    obj(o)
}

/// A v1 (annotation) `MetricSpec` as a v2 `MetricSpec` (upstream's
/// `Convert_v1_*MetricSource_To_autoscaling_*`: the target type follows
/// which value is set).
fn spec_to_v2(m: &Value) -> Value {
    let mut out = Map::new();
    put(&mut out, "type", m.get("type"));
    let resource_target = |r: &Value| {
        let util = r.get("targetAverageUtilization").filter(|v| !v.is_null());
        let kind = if util.is_some() { "Utilization" } else { "AverageValue" };
        metric_target(kind, util, r.get("targetAverageValue"), None)
    };
    if let Some(r) = m.get("resource").filter(|v| v.is_object()) {
        let mut o = Map::new();
        put(&mut o, "name", r.get("name"));
        o.insert("target".into(), resource_target(r));
        out.insert("resource".into(), obj(o));
    }
    if let Some(r) = m.get("containerResource").filter(|v| v.is_object()) {
        let mut o = Map::new();
        put(&mut o, "name", r.get("name"));
        o.insert("target".into(), resource_target(r));
        put(&mut o, "container", r.get("container"));
        out.insert("containerResource".into(), obj(o));
    }
    if let Some(p) = m.get("pods").filter(|v| v.is_object()) {
        let target = metric_target("AverageValue", None, p.get("targetAverageValue"), None);
        out.insert("pods".into(), json!({"metric": identifier(p.get("metricName"), p.get("selector")), "target": target}));
    }
    if let Some(x) = m.get("object").filter(|v| v.is_object()) {
        let avg = x.get("averageValue").filter(|v| !v.is_null());
        let kind = if avg.is_some() { "AverageValue" } else { "Value" };
        let mut o = Map::new();
        put(&mut o, "describedObject", x.get("target"));
        o.insert("target".into(), metric_target(kind, None, avg, x.get("targetValue")));
        o.insert("metric".into(), identifier(x.get("metricName"), x.get("selector")));
        out.insert("object".into(), obj(o));
    }
    if let Some(x) = m.get("external").filter(|v| v.is_object()) {
        let value = x.get("targetValue").filter(|v| !v.is_null());
        let kind = if value.is_some() { "Value" } else { "AverageValue" };
        let target = metric_target(kind, None, x.get("targetAverageValue"), value);
        out.insert("external".into(), json!({"metric": identifier(x.get("metricName"), x.get("metricSelector")), "target": target}));
    }
    obj(out)
}

/// A v2 `MetricStatus` as a v1 (annotation) `MetricStatus`.
fn status_to_v1(m: &Value) -> Value {
    let mut out = Map::new();
    put(&mut out, "type", m.get("type"));
    for key in ["resource", "containerResource"] {
        if let Some(r) = m.get(key).filter(|v| v.is_object()) {
            let mut o = Map::new();
            put(&mut o, "name", r.get("name"));
            put(&mut o, "container", r.get("container"));
            put(&mut o, "currentAverageUtilization", r.pointer("/current/averageUtilization"));
            put(&mut o, "currentAverageValue", r.pointer("/current/averageValue"));
            out.insert(key.into(), obj(o));
        }
    }
    if let Some(p) = m.get("pods").filter(|v| v.is_object()) {
        let mut o = Map::new();
        put(&mut o, "metricName", p.pointer("/metric/name"));
        put(&mut o, "currentAverageValue", p.pointer("/current/averageValue"));
        put(&mut o, "selector", p.pointer("/metric/selector"));
        out.insert("pods".into(), obj(o));
    }
    if let Some(x) = m.get("object").filter(|v| v.is_object()) {
        let mut o = Map::new();
        put(&mut o, "target", x.get("describedObject"));
        put(&mut o, "metricName", x.pointer("/metric/name"));
        put(&mut o, "currentValue", x.pointer("/current/value"));
        put(&mut o, "selector", x.pointer("/metric/selector"));
        put(&mut o, "averageValue", x.pointer("/current/averageValue"));
        out.insert("object".into(), obj(o));
    }
    if let Some(x) = m.get("external").filter(|v| v.is_object()) {
        let mut o = Map::new();
        put(&mut o, "metricName", x.pointer("/metric/name"));
        put(&mut o, "metricSelector", x.pointer("/metric/selector"));
        put(&mut o, "currentValue", x.pointer("/current/value"));
        put(&mut o, "currentAverageValue", x.pointer("/current/averageValue"));
        out.insert("external".into(), obj(o));
    }
    obj(out)
}

/// A v1 (annotation) `MetricStatus` as a v2 `MetricStatus`.
fn status_to_v2(m: &Value) -> Value {
    let mut out = Map::new();
    put(&mut out, "type", m.get("type"));
    let current = |util: Option<&Value>, avg: Option<&Value>, value: Option<&Value>| {
        let mut o = Map::new();
        put(&mut o, "value", value);
        put(&mut o, "averageValue", avg);
        put(&mut o, "averageUtilization", util);
        obj(o)
    };
    for key in ["resource", "containerResource"] {
        if let Some(r) = m.get(key).filter(|v| v.is_object()) {
            let mut o = Map::new();
            put(&mut o, "name", r.get("name"));
            o.insert("current".into(), current(r.get("currentAverageUtilization"), r.get("currentAverageValue"), None));
            put(&mut o, "container", r.get("container"));
            out.insert(key.into(), obj(o));
        }
    }
    if let Some(p) = m.get("pods").filter(|v| v.is_object()) {
        let cur = current(None, p.get("currentAverageValue"), None);
        out.insert("pods".into(), json!({"metric": identifier(p.get("metricName"), p.get("selector")), "current": cur}));
    }
    if let Some(x) = m.get("object").filter(|v| v.is_object()) {
        let mut o = Map::new();
        o.insert("metric".into(), identifier(x.get("metricName"), x.get("selector")));
        o.insert("current".into(), current(None, x.get("averageValue"), x.get("currentValue")));
        put(&mut o, "describedObject", x.get("target"));
        out.insert("object".into(), obj(o));
    }
    if let Some(x) = m.get("external").filter(|v| v.is_object()) {
        let cur = current(None, x.get("currentAverageValue"), x.get("currentValue"));
        out.insert("external".into(), json!({"metric": identifier(x.get("metricName"), x.get("metricSelector")), "current": cur}));
    }
    obj(out)
}

/// Renames every object key with `f`, recursively (behavior's Go field names).
fn rename_keys(v: &Value, f: &dyn Fn(&str) -> String) -> Value {
    match v {
        Value::Object(m) => obj(m.iter().map(|(k, v)| (f(k), rename_keys(v, f))).collect()),
        Value::Array(a) => Value::Array(a.iter().map(|v| rename_keys(v, f)).collect()),
        other => other.clone(),
    }
}

fn with_first(s: &str, upper: bool) -> String {
    let mut chars = s.chars();
    match chars.next() {
        Some(c) if upper => c.to_uppercase().chain(chars).collect(),
        Some(c) => c.to_lowercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// The object's annotations map, created when absent.
fn annotations(o: &mut Map<String, Value>) -> &mut Map<String, Value> {
    let meta = o.entry("metadata").or_insert_with(|| json!({}));
    if !meta.is_object() {
        *meta = json!({});
    }
    let ann = meta.as_object_mut().expect("made an object above").entry("annotations").or_insert_with(|| json!({}));
    if !ann.is_object() {
        *ann = json!({});
    }
    ann.as_object_mut().expect("made an object above")
}

/// Removes the round-trip annotations; returns them by name.
fn take_round_trip(o: &mut Map<String, Value>) -> Map<String, Value> {
    let mut taken = Map::new();
    let ann = annotations(o);
    for key in ROUND_TRIP {
        if let Some(v) = ann.remove(key) {
            taken.insert(key.to_string(), v);
        }
    }
    let empty = ann.is_empty();
    if empty {
        if let Some(meta) = o.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.remove("annotations");
        }
    }
    taken
}

fn json_string(v: &Value) -> Value {
    Value::String(serde_json::to_string(v).unwrap_or_default())
}

/// A stored autoscaling/v2 HPA as an autoscaling/v1 HPA.
pub fn hpa_to_v1(v: Value) -> Value {
    let Value::Object(mut src) = v else { return v };
    take_round_trip(&mut src);
    let spec = src.remove("spec").unwrap_or_else(|| json!({}));
    let status = src.remove("status");
    let metrics: Vec<Value> = spec.get("metrics").and_then(Value::as_array).cloned().unwrap_or_default();
    let mut v1_spec = Map::new();
    put(&mut v1_spec, "scaleTargetRef", spec.get("scaleTargetRef"));
    put(&mut v1_spec, "minReplicas", spec.get("minReplicas"));
    put(&mut v1_spec, "maxReplicas", spec.get("maxReplicas"));
    if let Some(cpu) = metrics.iter().find(|m| is_cpu_utilization(m)) {
        put(&mut v1_spec, "targetCPUUtilizationPercentage", cpu.pointer("/resource/target/averageUtilization"));
    }
    let mut round_trip: Vec<(&str, Value)> = Vec::new();
    let others: Vec<Value> = metrics.iter().filter(|m| !is_cpu_utilization(m)).map(spec_to_v1).collect();
    if !others.is_empty() {
        round_trip.push((METRICS, json_string(&Value::Array(others))));
    }
    let mut v1_status = Map::new();
    if let Some(status) = &status {
        put(&mut v1_status, "observedGeneration", status.get("observedGeneration"));
        put(&mut v1_status, "lastScaleTime", status.get("lastScaleTime"));
        put(&mut v1_status, "currentReplicas", status.get("currentReplicas"));
        put(&mut v1_status, "desiredReplicas", status.get("desiredReplicas"));
        let current: Vec<Value> = status.get("currentMetrics").and_then(Value::as_array).cloned().unwrap_or_default();
        let cpu = current.iter().find(|m| m["type"] == "Resource" && m["resource"]["name"] == "cpu");
        put(&mut v1_status, "currentCPUUtilizationPercentage", cpu.and_then(|m| m.pointer("/resource/current/averageUtilization")));
        if !current.is_empty() {
            round_trip.push((CURRENT_METRICS, json_string(&Value::Array(current.iter().map(status_to_v1).collect()))));
        }
    }
    if let Some(behavior) = spec.get("behavior").filter(|b| !b.is_null()) {
        round_trip.push((BEHAVIOR, json_string(&rename_keys(behavior, &|k| with_first(k, true)))));
    }
    if let Some(conds) = status.as_ref().and_then(|s| s.get("conditions")).and_then(Value::as_array).filter(|c| !c.is_empty()) {
        round_trip.push((CONDITIONS, json_string(&Value::Array(conds.clone()))));
    }
    if !round_trip.is_empty() {
        let ann = annotations(&mut src);
        for (k, v) in round_trip {
            ann.insert(k.to_string(), v);
        }
    }
    let mut out = Map::new();
    out.insert("kind".into(), json!("HorizontalPodAutoscaler"));
    out.insert("apiVersion".into(), json!("autoscaling/v1"));
    src.remove("kind");
    src.remove("apiVersion");
    if let Some(meta) = src.remove("metadata") {
        out.insert("metadata".into(), meta);
    }
    out.insert("spec".into(), obj(v1_spec));
    if status.is_some() {
        out.insert("status".into(), obj(v1_status));
    }
    out.extend(src);
    obj(out)
}

/// The JSON held in a round-trip annotation (`None` when absent or not JSON, as upstream ignores it then).
fn decoded(taken: &Map<String, Value>, key: &str) -> Option<Value> {
    taken.get(key).and_then(Value::as_str).and_then(|s| serde_json::from_str(s).ok())
}

/// An autoscaling/v1 HPA as the stored autoscaling/v2 HPA.
pub fn hpa_to_v2(v: Value) -> Value {
    let Value::Object(mut src) = v else { return v };
    let taken = take_round_trip(&mut src);
    let spec = src.remove("spec").unwrap_or_else(|| json!({}));
    let status = src.remove("status");
    let mut metrics: Vec<Value> = decoded(&taken, METRICS)
        .and_then(|m| m.as_array().cloned())
        .map(|m| m.iter().map(spec_to_v2).collect())
        .unwrap_or_default();
    // Upstream applies v1's implicit 80 % CPU target here, where the
    // annotation's metrics are known.
    let cpu = spec.get("targetCPUUtilizationPercentage").filter(|v| !v.is_null()).cloned();
    if cpu.is_some() || metrics.is_empty() {
        let cpu = cpu.unwrap_or(json!(DEFAULT_CPU_UTILIZATION));
        metrics.push(json!({"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": cpu}}}));
    }
    let mut v2_spec = Map::new();
    put(&mut v2_spec, "scaleTargetRef", spec.get("scaleTargetRef"));
    put(&mut v2_spec, "minReplicas", spec.get("minReplicas"));
    put(&mut v2_spec, "maxReplicas", spec.get("maxReplicas"));
    if !metrics.is_empty() {
        v2_spec.insert("metrics".into(), Value::Array(metrics));
    }
    if let Some(behavior) = decoded(&taken, BEHAVIOR).filter(|b| b.as_object().is_some_and(|m| !m.is_empty())) {
        v2_spec.insert("behavior".into(), rename_keys(&behavior, &|k| with_first(k, false)));
    }
    let mut out = Map::new();
    out.insert("kind".into(), json!("HorizontalPodAutoscaler"));
    out.insert("apiVersion".into(), json!("autoscaling/v2"));
    src.remove("kind");
    src.remove("apiVersion");
    if let Some(meta) = src.remove("metadata") {
        out.insert("metadata".into(), meta);
    }
    out.insert("spec".into(), obj(v2_spec));
    if let Some(status) = status {
        let mut s = Map::new();
        put(&mut s, "observedGeneration", status.get("observedGeneration"));
        put(&mut s, "lastScaleTime", status.get("lastScaleTime"));
        put(&mut s, "currentReplicas", status.get("currentReplicas"));
        put(&mut s, "desiredReplicas", status.get("desiredReplicas"));
        let mut current: Vec<Value> = decoded(&taken, CURRENT_METRICS)
            .and_then(|m| m.as_array().cloned())
            .map(|m| m.iter().map(status_to_v2).collect())
            .unwrap_or_default();
        if current.is_empty() {
            if let Some(cpu) = status.get("currentCPUUtilizationPercentage").filter(|v| !v.is_null()) {
                current.push(json!({"type": "Resource", "resource": {"name": "cpu", "current": {"averageUtilization": cpu}}}));
            }
        }
        if !current.is_empty() {
            s.insert("currentMetrics".into(), Value::Array(current));
        }
        if let Some(conds) = decoded(&taken, CONDITIONS).filter(Value::is_array) {
            s.insert("conditions".into(), conds);
        }
        out.insert("status".into(), obj(s));
    }
    out.extend(src);
    obj(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v2_only_fields_round_trip_through_v1_annotations() {
        let v2 = json!({"kind": "HorizontalPodAutoscaler", "apiVersion": "autoscaling/v2",
            "metadata": {"name": "h", "annotations": {"keep": "me"}},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "d"},
                "minReplicas": 1, "maxReplicas": 5,
                "metrics": [
                    {"type": "Pods", "pods": {"metric": {"name": "qps"}, "target": {"type": "AverageValue", "averageValue": "10"}}},
                    {"type": "Resource", "resource": {"name": "memory", "target": {"type": "AverageValue", "averageValue": "1Gi"}}},
                    {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 70}}}],
                "behavior": {"scaleDown": {"stabilizationWindowSeconds": 60, "selectPolicy": "Max",
                    "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}]}}},
            "status": {"currentReplicas": 2, "desiredReplicas": 2,
                "currentMetrics": [{"type": "Resource", "resource": {"name": "cpu", "current": {"averageUtilization": 40}}}],
                "conditions": [{"type": "AbleToScale", "status": "True", "reason": "R"}]}});
        let v1 = hpa_to_v1(v2.clone());
        assert_eq!(v1["apiVersion"], "autoscaling/v1");
        assert_eq!(v1["spec"]["targetCPUUtilizationPercentage"], 70);
        assert_eq!(v1["status"]["currentCPUUtilizationPercentage"], 40);
        let ann = &v1["metadata"]["annotations"];
        assert_eq!(ann["keep"], "me");
        let metrics: Value = serde_json::from_str(ann[METRICS].as_str().unwrap()).unwrap();
        assert_eq!(metrics[0], json!({"type": "Pods", "pods": {"metricName": "qps", "targetAverageValue": "10"}}));
        assert_eq!(metrics[1], json!({"type": "Resource", "resource": {"name": "memory", "targetAverageValue": "1Gi"}}));
        assert!(ann[BEHAVIOR].as_str().unwrap().contains("\"ScaleDown\""), "{ann}");
        let back = hpa_to_v2(v1);
        assert_eq!(back, v2);
    }
}
