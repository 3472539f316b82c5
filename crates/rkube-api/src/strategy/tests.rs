use serde_json::json;

use crate::registry::{self, lookup};

fn defaulted(group: &str, resource: &str, mut obj: serde_json::Value) -> serde_json::Value {
    lookup(group, "v1", resource)
        .or_else(|| lookup(group, "v2", resource))
        .unwrap()
        .strategy
        .apply_defaults(&mut obj);
    obj
}

#[test]
fn defaults_are_idempotent_for_every_row() {
    let samples = [
        json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}}}),
        json!({"spec": {"jobTemplate": {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "b"}]}}}}}}),
        json!({"spec": {"limited": {"limitResponse": {"type": "Queue"}}}, "webhooks": [{"name": "w", "rules": [{}]}]}),
    ];
    for row in registry::all() {
        for sample in &samples {
            let mut once = sample.clone();
            row.strategy.apply_defaults(&mut once);
            let mut twice = once.clone();
            row.strategy.apply_defaults(&mut twice);
            assert_eq!(once, twice, "{} defaults are not idempotent", row.resource);
        }
    }
}

#[test]
fn workload_templates_get_pod_defaults() {
    let d = defaulted(
        "apps",
        "statefulsets",
        json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "nginx:1.25"}]}}}}),
    );
    assert_eq!(d["spec"]["podManagementPolicy"], "OrderedReady");
    assert_eq!(
        d["spec"]["updateStrategy"],
        json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0}})
    );
    assert_eq!(d["spec"]["template"]["spec"]["restartPolicy"], "Always");
    assert_eq!(
        d["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"],
        "IfNotPresent"
    );
    let ds = defaulted("apps", "daemonsets", json!({"spec": {}}));
    assert_eq!(
        ds["spec"]["updateStrategy"]["rollingUpdate"],
        json!({"maxUnavailable": 1, "maxSurge": 0})
    );
}

#[test]
fn jobs_default_like_set_defaults_job() {
    let j = defaulted(
        "batch",
        "jobs",
        json!({"spec": {"template": {"spec": {"restartPolicy": "Never", "containers": []}}}}),
    );
    assert_eq!(j["spec"]["completions"], 1);
    assert_eq!(j["spec"]["parallelism"], 1);
    assert_eq!(j["spec"]["backoffLimit"], 6);
    assert_eq!(j["spec"]["completionMode"], "NonIndexed");
    assert_eq!(j["spec"]["podReplacementPolicy"], "TerminatingOrFailed");
    let parallel = defaulted("batch", "jobs", json!({"spec": {"parallelism": 3}}));
    assert!(
        parallel["spec"].get("completions").is_none(),
        "completions stay unset when parallelism is set"
    );
}

#[test]
fn job_prepare_generates_the_selector_and_pod_labels() {
    let jobs = lookup("batch", "v1", "jobs").unwrap();
    let mut job =
        json!({"metadata": {"name": "pi", "uid": "u-1"}, "spec": {"template": {"spec": {}}}});
    jobs.strategy.prepare(&mut job);
    assert_eq!(
        job["spec"]["selector"],
        json!({"matchLabels": {"batch.kubernetes.io/controller-uid": "u-1"}})
    );
    let labels = &job["spec"]["template"]["metadata"]["labels"];
    assert_eq!(labels["batch.kubernetes.io/job-name"], "pi");
    assert_eq!(labels["controller-uid"], "u-1");
    assert_eq!(job["status"], json!({}));
}

#[test]
fn workload_selector_must_match_template_labels() {
    let rs = lookup("apps", "v1", "replicasets").unwrap();
    let bad = json!({"spec": {"selector": {"matchLabels": {"app": "a"}}, "template": {"metadata": {"labels": {"app": "b"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}}});
    let errs = rs.strategy.validate_object(&bad, None);
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert_eq!(errs[0].field, "spec.template.metadata.labels");
    assert_eq!(
        errs[0].detail,
        "`selector` does not match template `labels`"
    );
    let exprs = json!({"spec": {"selector": {"matchExpressions": [{"key": "app", "operator": "In", "values": ["b"]}]}, "template": {"metadata": {"labels": {"app": "b"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}}});
    assert!(rs.strategy.validate_object(&exprs, None).is_empty());
}

#[test]
fn immutable_fields_are_refused_on_update() {
    let sc = lookup("storage.k8s.io", "v1", "storageclasses").unwrap();
    let old = json!({"provisioner": "a", "parameters": {"x": "1"}});
    let new = json!({"provisioner": "b", "parameters": {"x": "1"}});
    let errs = sc.strategy.validate_object(&new, Some(&old));
    assert_eq!(errs.len(), 1);
    assert_eq!(errs[0].field, "provisioner");
    assert_eq!(errs[0].detail, "field is immutable");
}

#[test]
fn job_templates_need_on_failure_or_never() {
    let jobs = lookup("batch", "v1", "jobs").unwrap();
    let job = json!({"spec": {"template": {"spec": {"restartPolicy": "Always", "containers": [{"name": "c", "image": "i"}]}}}});
    let errs = jobs.strategy.validate_object(&job, None);
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert_eq!(errs[0].field, "spec.template.spec.restartPolicy");
}

#[test]
fn job_success_policies_are_validated_as_upstream() {
    let jobs = lookup("batch", "v1", "jobs").unwrap();
    let with = |mode: &str, policy: serde_json::Value| {
        let job = json!({"spec": {"completions": 5, "completionMode": mode, "successPolicy": policy,
            "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "i"}]}}}});
        jobs.strategy
            .validate_object(&job, None)
            .iter()
            .map(|e| format!("{}: {}", e.field, e.body()))
            .collect::<Vec<_>>()
    };
    assert!(with(
        "Indexed",
        json!({"rules": [{"succeededIndexes": "0,2-4", "succeededCount": 4}]})
    )
    .is_empty());
    let errs = with("NonIndexed", json!({"rules": [{"succeededCount": 1}]}));
    assert_eq!(errs.len(), 1);
    assert!(
        errs[0].starts_with("spec.successPolicy: Invalid value: ")
            && errs[0].ends_with(": requires indexed completion mode"),
        "{errs:?}"
    );
    assert_eq!(with("Indexed", json!({"rules": []})), ["spec.successPolicy.rules: Required value: at least one rules must be specified when the successPolicy is specified"]);
    assert_eq!(
        with("Indexed", json!({"rules": [{}]})),
        ["spec.successPolicy.rules[0]: Required value: at least one of succeededCount or succeededIndexes must be specified"]
    );
    assert_eq!(
        with("Indexed", json!({"rules": [{"succeededIndexes": "1,5"}]})),
        ["spec.successPolicy.rules[0].succeededIndexes: Invalid value: \"1,5\": error parsing succeededIndexes: too large index: 5"]
    );
    assert_eq!(
        with("Indexed", json!({"rules": [{"succeededIndexes": "0-1", "succeededCount": 3}]})),
        ["spec.successPolicy.rules[0].succeededCount: Invalid value: 3: must be less than or equal to 2 (the number of indexes in the specified succeededIndexes field)"]
    );
    assert_eq!(
        with("Indexed", json!({"rules": [{"succeededCount": 6}]})),
        ["spec.successPolicy.rules[0].succeededCount: Invalid value: 6: must be less than or equal to 5 (the number of specified completions)"]
    );
    let many: Vec<serde_json::Value> = (0..21).map(|_| json!({"succeededCount": 1})).collect();
    assert_eq!(
        with("Indexed", json!({"rules": many})),
        ["spec.successPolicy.rules: Too many: 21: must have at most 20 items"]
    );
}

#[test]
fn per_index_backoff_limits_are_validated_as_upstream() {
    let jobs = lookup("batch", "v1", "jobs").unwrap();
    let with = |extra: serde_json::Value| {
        let mut job = json!({"spec": {"completions": 5, "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "i"}]}}}});
        if let (Some(spec), Some(extra)) = (job["spec"].as_object_mut(), extra.as_object()) {
            spec.extend(extra.clone());
        }
        jobs.strategy
            .validate_object(&job, None)
            .iter()
            .map(|e| format!("{}: {}", e.field, e.body()))
            .collect::<Vec<_>>()
    };
    assert!(with(
        json!({"completionMode": "Indexed", "backoffLimitPerIndex": 1, "maxFailedIndexes": 5})
    )
    .is_empty());
    assert_eq!(
        with(json!({"backoffLimitPerIndex": 1})),
        ["spec.backoffLimitPerIndex: Invalid value: 1: requires indexed completion mode"]
    );
    assert_eq!(
        with(json!({"completionMode": "Indexed", "maxFailedIndexes": 1})),
        ["spec.backoffLimitPerIndex: Required value: when maxFailedIndexes is specified"]
    );
    assert_eq!(
        with(
            json!({"completionMode": "Indexed", "backoffLimitPerIndex": -1, "maxFailedIndexes": 6})
        ),
        [
            "spec.backoffLimitPerIndex: Invalid value: -1: must be greater than or equal to 0",
            "spec.maxFailedIndexes: Invalid value: 6: must be less than or equal to completions"
        ]
    );
}

#[test]
fn pod_defaults_match_upstream() {
    let pods = lookup("", "v1", "pods").unwrap();
    let mut pod = json!({"kind": "Pod", "spec": {"containers": [{"name": "c", "image": "nginx:1.25", "ports": [{"containerPort": 80}]}]}});
    pods.strategy.apply_defaults(&mut pod);
    pods.strategy.prepare(&mut pod);
    assert_eq!(pod["spec"]["restartPolicy"], "Always");
    assert_eq!(pod["spec"]["dnsPolicy"], "ClusterFirst");
    assert_eq!(pod["spec"]["terminationGracePeriodSeconds"], 30);
    assert_eq!(pod["spec"]["schedulerName"], "default-scheduler");
    let c = &pod["spec"]["containers"][0];
    assert_eq!(c["imagePullPolicy"], "IfNotPresent");
    assert_eq!(c["terminationMessagePath"], "/dev/termination-log");
    assert_eq!(c["ports"][0]["protocol"], "TCP");
    assert_eq!(pod["status"]["phase"], "Pending");
    assert_eq!(pod["status"]["qosClass"], "BestEffort");
    let mut probed = json!({"spec": {"containers": [{"name": "c", "image": "x:1",
        "readinessProbe": {"httpGet": {"port": 80}}, "livenessProbe": {"tcpSocket": {"port": 80}, "periodSeconds": 2}}]}});
    pods.strategy.apply_defaults(&mut probed);
    let c = &probed["spec"]["containers"][0];
    assert_eq!(
        c["readinessProbe"],
        json!({"httpGet": {"port": 80, "path": "/", "scheme": "HTTP"}, "timeoutSeconds": 1, "periodSeconds": 10, "successThreshold": 1, "failureThreshold": 3})
    );
    assert_eq!(
        c["livenessProbe"]["periodSeconds"], 2,
        "a value given is kept"
    );
    assert_eq!(c["livenessProbe"]["failureThreshold"], 3);
    for (image, policy) in [
        ("nginx", "Always"),
        ("registry:5000/nginx", "Always"),
        ("nginx:latest", "Always"),
        ("a@sha256:x", "IfNotPresent"),
    ] {
        let mut p = json!({"spec": {"containers": [{"name": "c", "image": image}]}});
        pods.strategy.apply_defaults(&mut p);
        assert_eq!(
            p["spec"]["containers"][0]["imagePullPolicy"], policy,
            "{image}"
        );
    }
}

#[test]
fn endpointslice_ports_get_name_and_protocol() {
    let s = defaulted(
        "discovery.k8s.io",
        "endpointslices",
        json!({"ports": [{"port": 80}]}),
    );
    assert_eq!(s["ports"][0]["name"], "");
    assert_eq!(s["ports"][0]["protocol"], "TCP");
}

#[test]
fn service_ports_default_target_port() {
    let s = defaulted("", "services", json!({"spec": {"ports": [{"port": 80}]}}));
    assert_eq!(s["spec"]["type"], "ClusterIP");
    assert_eq!(s["spec"]["ports"][0]["targetPort"], 80);
    assert_eq!(s["spec"]["ports"][0]["protocol"], "TCP");
}

#[test]
fn pods_need_containers_with_images() {
    let pods = lookup("", "v1", "pods").unwrap();
    let errs = pods.strategy.validate_object(
        &json!({"metadata": {"name": "a"}, "spec": {"containers": [{"name": "c"}]}}),
        None,
    );
    assert_eq!(errs.len(), 1);
    assert_eq!(errs[0].field, "spec.containers[0].image");
}
