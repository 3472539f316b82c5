//! autoscaling/v1 `horizontalpodautoscalers` are the stored autoscaling/v2
//! HPAs in the older version (upstream `pkg/apis/autoscaling/v1/conversion.go`):
//! v1 holds one CPU target; the rest of v2 travels in the
//! `autoscaling.alpha.kubernetes.io/*` annotations and comes back intact.

use crate::common;

use common::TestServer;
use serde_json::{json, Value};

const V1: &str = "/apis/autoscaling/v1/namespaces/default/horizontalpodautoscalers";
const V2: &str = "/apis/autoscaling/v2/namespaces/default/horizontalpodautoscalers";

fn annotation(obj: &Value, name: &str) -> Value {
    let text = obj["metadata"]["annotations"][name].as_str().unwrap_or_else(|| panic!("{name} in {obj}"));
    serde_json::from_str(text).expect("annotation is JSON")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v2_only_metrics_and_behavior_round_trip_through_v1_annotations() {
    let s = TestServer::embedded().await;
    let v2 = json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "web"},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
            "minReplicas": 2, "maxReplicas": 10,
            "metrics": [
                {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 60}}},
                {"type": "Resource", "resource": {"name": "memory", "target": {"type": "AverageValue", "averageValue": "500Mi"}}},
                {"type": "Pods", "pods": {"metric": {"name": "qps"}, "target": {"type": "AverageValue", "averageValue": "100"}}}],
            "behavior": {"scaleDown": {"stabilizationWindowSeconds": 120}}}});
    let created = s.post(V2, &v2).await;
    assert_eq!(created.code, 201, "{}", created.text);

    let v1 = s.get(&format!("{V1}/web")).await;
    assert_eq!(v1.code, 200, "{}", v1.text);
    assert_eq!(v1.body["apiVersion"], "autoscaling/v1");
    assert_eq!(v1.body["spec"]["targetCPUUtilizationPercentage"], 60);
    assert_eq!(v1.body["spec"]["minReplicas"], 2);
    assert!(v1.body["spec"].get("metrics").is_none(), "{}", v1.text);
    assert_eq!(
        annotation(&v1.body, "autoscaling.alpha.kubernetes.io/metrics"),
        json!([{"type": "Resource", "resource": {"name": "memory", "targetAverageValue": "500Mi"}},
               {"type": "Pods", "pods": {"metricName": "qps", "targetAverageValue": "100"}}])
    );
    let behavior = annotation(&v1.body, "autoscaling.alpha.kubernetes.io/behavior");
    assert_eq!(behavior["ScaleDown"]["StabilizationWindowSeconds"], 120, "{behavior}");
    let listed = s.get(V1).await;
    assert_eq!(listed.body["kind"], "HorizontalPodAutoscalerList");
    assert_eq!(listed.body["items"][0], v1.body);

    // `kubectl get hpa.v1.autoscaling` prints what v2 prints (targets from the annotation too).
    let table = "application/json;as=Table;v=v1;g=meta.k8s.io";
    let (t1, t2) = (s.get_as(V1, table).await, s.get_as(V2, table).await);
    assert_eq!(t1.code, 200, "{}", t1.text);
    assert_eq!(t1.body["columnDefinitions"], t2.body["columnDefinitions"]);
    // The same cells, but TARGETS lists the CPU target last: a v1 object
    // holds the other metrics in the annotation and upstream's conversion
    // appends the CPU target after them.
    let (c1, c2) = (&t1.body["rows"][0]["cells"], &t2.body["rows"][0]["cells"]);
    for i in [0, 1, 3, 4, 5] {
        assert_eq!(c1[i], c2[i], "cell {i}: {c1} vs {c2}");
    }
    let targets = |c: &Value| {
        let mut parts: Vec<String> = c[2].as_str().unwrap_or("").split(", ").map(str::to_string).collect();
        parts.sort();
        parts
    };
    assert_eq!(targets(c1), targets(c2));
    assert_eq!(t1.body["rows"][0]["cells"][1], "Deployment/web", "{}", t1.text);

    // A v1 update of the CPU target keeps the v2-only metrics and behavior.
    let mut changed = v1.body.clone();
    changed["spec"]["targetCPUUtilizationPercentage"] = json!(75);
    let put = s.put(&format!("{V1}/web"), &changed).await;
    assert_eq!(put.code, 200, "{}", put.text);
    let back = s.get(&format!("{V2}/web")).await;
    assert_eq!(back.code, 200, "{}", back.text);
    let metrics = back.body["spec"]["metrics"].as_array().expect("metrics");
    assert_eq!(metrics.len(), 3, "{}", back.text);
    assert!(metrics.contains(&json!({"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 75}}})));
    assert!(metrics.contains(&v2["spec"]["metrics"][1]), "{}", back.text);
    assert!(metrics.contains(&v2["spec"]["metrics"][2]), "{}", back.text);
    assert_eq!(back.body["spec"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"], 120, "{}", back.text);
    assert!(back.body["metadata"].get("annotations").is_none(), "round-trip annotations are not stored: {}", back.text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v1_hpas_default_to_80_percent_cpu_and_watch_in_v1() {
    let s = TestServer::embedded().await;
    let start = s.get(V1).await;
    let mut watch = s.watch(&format!("{V1}?watch=true&resourceVersion={}", start.rv())).await;
    let v1 = json!({"apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "api"},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "api"}, "maxReplicas": 4}});
    let created = s.post(V1, &v1).await;
    assert_eq!(created.code, 201, "{}", created.text);
    assert_eq!(created.body["spec"]["targetCPUUtilizationPercentage"], 80);
    assert_eq!(created.body["spec"]["minReplicas"], 1);
    let v2 = s.get(&format!("{V2}/api")).await;
    assert_eq!(
        v2.body["spec"]["metrics"],
        json!([{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}}}])
    );
    let ev = watch.next().await;
    assert_eq!(ev["type"], "ADDED", "{ev}");
    assert_eq!(ev["object"]["apiVersion"], "autoscaling/v1");
    assert_eq!(ev["object"]["spec"]["targetCPUUtilizationPercentage"], 80);

    // A v2 body sent to the v1 endpoint is converted, not relabelled.
    let v2_body = json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "sent-as-v2"},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "api"}, "maxReplicas": 4,
            "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 55}}}]}});
    let r = s.post(V1, &v2_body).await;
    assert_eq!(r.code, 201, "{}", r.text);
    assert_eq!(r.body["apiVersion"], "autoscaling/v1");
    assert_eq!(r.body["spec"]["targetCPUUtilizationPercentage"], 55);
    assert!(r.body["spec"].get("metrics").is_none(), "{}", r.text);

    let bad = json!({"apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "bad"},
        "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "x"}, "minReplicas": 3, "maxReplicas": 2}});
    let r = s.post(V1, &bad).await;
    r.assert_status(422, "Invalid");
    assert_eq!(r.body["details"]["causes"][0]["field"], "spec.maxReplicas");
}

/// Discovery keeps v2 preferred and lists v1 after it, as upstream; each
/// version has its local APIService.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn autoscaling_discovery_prefers_v2_and_lists_v1() {
    let s = TestServer::embedded().await;
    let group = s.get("/apis/autoscaling").await;
    assert_eq!(group.code, 200, "{}", group.text);
    assert_eq!(group.body["preferredVersion"]["groupVersion"], "autoscaling/v2");
    let versions: Vec<&str> =
        group.body["versions"].as_array().unwrap().iter().filter_map(|v| v["version"].as_str()).collect();
    assert_eq!(versions, ["v2", "v1"]);
    let resources = s.get("/apis/autoscaling/v1").await;
    assert_eq!(resources.body["resources"][0]["name"], "horizontalpodautoscalers");
    assert_eq!(resources.body["resources"][0]["shortNames"], json!(["hpa"]));
    for (gv, schema) in [
        ("autoscaling/v1", "io.k8s.api.autoscaling.v1.HorizontalPodAutoscaler"),
        ("events.k8s.io/v1", "io.k8s.api.events.v1.Event"),
    ] {
        let doc = s.get(&format!("/openapi/v3/apis/{gv}")).await;
        assert_eq!(doc.code, 200, "{gv}: {}", doc.text);
        assert!(doc.body["components"]["schemas"].get(schema).is_some(), "{schema} in the {gv} OpenAPI v3 document");
    }
    for name in ["v1.autoscaling", "v2.autoscaling", "v1.events.k8s.io"] {
        let svc = s.get(&format!("/apis/apiregistration.k8s.io/v1/apiservices/{name}")).await;
        assert_eq!(svc.code, 200, "{name}: {}", svc.text);
    }
}
