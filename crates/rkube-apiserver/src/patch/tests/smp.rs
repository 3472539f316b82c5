//! Strategic merge patch rules (upstream `strategicpatch/patch.go`).

use serde_json::{json, Value};

use super::{names, pod, smp, status_of};

/// Applies `patch` to a pod and returns the value at `pointer`.
fn pod_after(patch: Value, pointer: &str) -> Value {
    let out = smp("Pod", &pod(), patch).expect("patch applies");
    out.pointer(pointer).cloned().unwrap_or(Value::Null)
}

#[test]
fn smp_merges_containers_by_name() {
    let out = smp(
        "Pod",
        &pod(),
        json!({"spec": {"containers": [{"name": "sidecar", "image": "busybox:2"}]}}),
    )
    .unwrap();
    assert_eq!(names(&out, "/spec/containers"), ["web", "sidecar"]);
    assert_eq!(
        out["spec"]["containers"][1],
        json!({"name": "sidecar", "image": "busybox:2", "command": ["sleep", "3600"]})
    );
    assert_eq!(
        out["spec"]["containers"][0]["image"], "nginx:1.25",
        "the other container is untouched"
    );
}

#[test]
fn smp_new_list_item_goes_before_server_only_items_without_order() {
    // Upstream's mergeSortedSlice: a patch item the live list does not have
    // is placed first when no $setElementOrder says otherwise.
    let out = smp(
        "Pod",
        &pod(),
        json!({"spec": {"containers": [{"name": "new", "image": "x"}]}}),
    )
    .unwrap();
    assert_eq!(names(&out, "/spec/containers"), ["new", "web", "sidecar"]);
}

#[test]
fn smp_delete_directive_removes_list_item() {
    let env = pod_after(
        json!({"spec": {"containers": [{"name": "web", "env": [{"name": "A", "$patch": "delete"}]}]}}),
        "/spec/containers/0/env",
    );
    assert_eq!(env, json!([{"name": "B", "value": "2"}]));
}

#[test]
fn smp_set_element_order_reorders() {
    let out = smp(
        "Pod",
        &pod(),
        json!({"spec": {"$setElementOrder/containers": [{"name": "sidecar"}, {"name": "web"}]}}),
    )
    .unwrap();
    assert_eq!(names(&out, "/spec/containers"), ["sidecar", "web"]);
}

#[test]
fn smp_set_element_order_places_new_item() {
    let out = smp(
        "Pod",
        &pod(),
        json!({"spec": {
            "$setElementOrder/containers": [{"name": "web"}, {"name": "mid"}, {"name": "sidecar"}],
            "containers": [{"name": "mid", "image": "m:1"}]
        }}),
    )
    .unwrap();
    assert_eq!(names(&out, "/spec/containers"), ["web", "mid", "sidecar"]);
}

#[test]
fn smp_set_element_order_orders_primitive_lists() {
    let fin = smp(
        "Pod",
        &pod(),
        json!({"metadata": {"$setElementOrder/finalizers": ["c", "a", "b"]}}),
    )
    .unwrap();
    assert_eq!(fin["metadata"]["finalizers"], json!(["c", "a", "b"]));
}

#[test]
fn smp_set_element_order_mismatching_patch_list_is_bad_request() {
    let err = smp(
        "Pod",
        &pod(),
        json!({"spec": {
            "$setElementOrder/containers": [{"name": "web"}],
            "containers": [{"name": "other", "image": "x"}]
        }}),
    )
    .unwrap_err();
    let st = status_of(err);
    assert_eq!((st.code, st.reason.as_str()), (400, "BadRequest"));
    assert!(
        st.message.contains("doesn't match $setElementOrder list"),
        "{}",
        st.message
    );
}

#[test]
fn smp_retain_keys_clears_unlisted() {
    let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
        "spec": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}}}});
    let out = smp(
        "Deployment",
        &deployment,
        json!({"spec": {"strategy": {"$retainKeys": ["type"], "rollingUpdate": null, "type": "Recreate"}}}),
    )
    .unwrap();
    assert_eq!(out["spec"]["strategy"], json!({"type": "Recreate"}));
}

#[test]
fn smp_retain_keys_in_list_item_replaces_volume_source() {
    let vols = pod_after(
        json!({"spec": {"volumes": [{"name": "data", "$retainKeys": ["configMap", "name"], "configMap": {"name": "cm"}}]}}),
        "/spec/volumes",
    );
    assert_eq!(vols, json!([{"name": "data", "configMap": {"name": "cm"}}]));
}

#[test]
fn smp_retain_keys_rejects_field_not_listed() {
    let err = smp(
        "Pod",
        &pod(),
        json!({"spec": {"$retainKeys": ["containers"], "restartPolicy": "Never"}}),
    )
    .unwrap_err();
    let st = status_of(err);
    assert_eq!((st.code, st.reason.as_str()), (422, "Invalid"));
    let causes = st.details.map(|d| d.causes).unwrap_or_default();
    assert_eq!(
        causes[0].message,
        "patch content doesn't match retainKeys list"
    );
}

#[test]
fn smp_retain_keys_not_a_list_is_bad_request() {
    let st = status_of(
        smp(
            "Pod",
            &pod(),
            json!({"spec": {"$retainKeys": "containers"}}),
        )
        .unwrap_err(),
    );
    assert_eq!(
        (st.code, st.message.as_str()),
        (400, "invalid patch format of retainKeys")
    );
}

#[test]
fn smp_delete_from_primitive_list() {
    let fin = pod_after(
        json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["b"]}}),
        "/metadata/finalizers",
    );
    assert_eq!(fin, json!(["a", "c"]));
}

#[test]
fn smp_delete_from_primitive_list_malformed_key_is_bad_request() {
    let st = status_of(
        smp(
            "Pod",
            &pod(),
            json!({"metadata": {"$deleteFromPrimitiveList": ["b"]}}),
        )
        .unwrap_err(),
    );
    assert_eq!(
        (st.code, st.message.as_str()),
        (400, "invalid patch format of primitive list")
    );
}

#[test]
fn smp_primitive_merge_list_is_a_set_union() {
    let fin = pod_after(
        json!({"metadata": {"finalizers": ["b", "d"]}}),
        "/metadata/finalizers",
    );
    assert_eq!(fin, json!(["a", "b", "d", "c"]));
}

#[test]
fn smp_replace_directive_in_list_replaces_whole_list() {
    let c = pod_after(
        json!({"spec": {"containers": [{"$patch": "replace"}, {"name": "only", "image": "x"}]}}),
        "/spec/containers",
    );
    assert_eq!(c, json!([{"name": "only", "image": "x"}]));
}

#[test]
fn smp_replace_directive_in_map_replaces_map() {
    let labels = pod_after(
        json!({"metadata": {"labels": {"$patch": "replace", "tier": "db"}}}),
        "/metadata/labels",
    );
    assert_eq!(labels, json!({"tier": "db"}));
}

#[test]
fn smp_delete_directive_in_map_clears_it() {
    let labels = pod_after(
        json!({"metadata": {"labels": {"$patch": "delete"}}}),
        "/metadata/labels",
    );
    assert_eq!(labels, json!({}));
}

#[test]
fn smp_merge_directive_is_accepted_as_plain_merge() {
    let labels = pod_after(
        json!({"metadata": {"labels": {"$patch": "merge", "tier": "db"}}}),
        "/metadata/labels",
    );
    assert_eq!(labels, json!({"app": "web", "tier": "db"}));
}

#[test]
fn smp_null_deletes_map_key() {
    let out = smp(
        "Pod",
        &pod(),
        json!({"metadata": {"labels": {"app": null}}, "spec": {"restartPolicy": null}}),
    )
    .unwrap();
    assert_eq!(out["metadata"]["labels"], json!({}));
    assert!(out["spec"].get("restartPolicy").is_none());
}

#[test]
fn smp_list_without_strategy_is_replaced_atomically() {
    let t = pod_after(
        json!({"spec": {"tolerations": [{"key": "k2", "operator": "Exists"}]}}),
        "/spec/tolerations",
    );
    assert_eq!(t, json!([{"key": "k2", "operator": "Exists"}]));
}

#[test]
fn smp_merge_keys_of_builtin_lists() {
    // (kind, original, patch, pointer, expected)
    let cases: Vec<(&str, Value, Value, &str, Value)> = vec![
        (
            "Pod",
            pod(),
            json!({"spec": {"containers": [{"name": "web", "ports": [{"containerPort": 443}]}]}}),
            "/spec/containers/0/ports",
            json!([{"containerPort": 443}, {"containerPort": 80, "protocol": "TCP"}]),
        ),
        (
            "Pod",
            pod(),
            json!({"spec": {"containers": [{"name": "web", "volumeMounts": [{"mountPath": "/data", "readOnly": true}]}]}}),
            "/spec/containers/0/volumeMounts",
            json!([{"name": "data", "mountPath": "/data", "readOnly": true}]),
        ),
        (
            "Pod",
            pod(),
            json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}}),
            "/status/conditions",
            json!([{"type": "Ready", "status": "True"}, {"type": "Initialized", "status": "True"}]),
        ),
        (
            "Service",
            json!({"kind": "Service", "spec": {"ports": [{"port": 80, "targetPort": 8080}, {"port": 443}]}}),
            json!({"spec": {"ports": [{"port": 80, "targetPort": 9090}]}}),
            "/spec/ports",
            json!([{"port": 80, "targetPort": 9090}, {"port": 443}]),
        ),
        (
            "Node",
            json!({"kind": "Node", "status": {"conditions": [{"type": "Ready", "status": "False"}],
                   "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}]}}),
            json!({"status": {"addresses": [{"type": "Hostname", "address": "n1"}]}}),
            "/status/addresses",
            json!([{"type": "Hostname", "address": "n1"}, {"type": "InternalIP", "address": "10.0.0.1"}]),
        ),
        (
            "ConfigMap",
            json!({"kind": "ConfigMap", "metadata": {"ownerReferences": [{"uid": "1", "name": "a"}]}}),
            json!({"metadata": {"ownerReferences": [{"uid": "1", "name": "b"}]}}),
            "/metadata/ownerReferences",
            json!([{"uid": "1", "name": "b"}]),
        ),
        (
            "Deployment",
            json!({"kind": "Deployment", "spec": {"template": {"spec": {"containers": [{"name": "a", "image": "a:1"}]}}}}),
            json!({"spec": {"template": {"spec": {"containers": [{"name": "a", "image": "a:2"}]}}}}),
            "/spec/template/spec/containers",
            json!([{"name": "a", "image": "a:2"}]),
        ),
        (
            "EndpointSlice",
            json!({"kind": "EndpointSlice", "endpoints": [{"addresses": ["10.0.0.1"]}]}),
            json!({"endpoints": [{"addresses": ["10.0.0.2"]}]}),
            "/endpoints",
            json!([{"addresses": ["10.0.0.2"]}]),
        ),
    ];
    for (kind, original, patch, pointer, expected) in cases {
        let out =
            smp(kind, &original, patch.clone()).unwrap_or_else(|e| panic!("{kind} {patch}: {e}"));
        assert_eq!(
            out.pointer(pointer),
            Some(&expected),
            "{kind} patched with {patch}"
        );
    }
}

#[test]
fn smp_directives_never_reach_the_stored_object() {
    let out = smp(
        "Pod",
        &pod(),
        json!({"spec": {
            "securityContext": {"$patch": "replace", "runAsUser": 1, "fsGroup": null},
            "initContainers": [{"name": "init", "image": "i", "env": [{"name": "X", "$patch": "delete"}]}],
            "$unknownDirective": 1
        }}),
    )
    .unwrap();
    assert_eq!(out["spec"]["securityContext"], json!({"runAsUser": 1}));
    assert_eq!(
        out["spec"]["initContainers"],
        json!([{"name": "init", "image": "i", "env": []}])
    );
    assert!(out["spec"].get("$unknownDirective").is_none());
}

#[test]
fn smp_malformed_patches_are_client_errors() {
    // (patch, code, message fragment)
    let cases: Vec<(Value, u16, &str)> = vec![
        (json!([1, 2]), 400, "cannot unmarshal array"),
        (
            json!({"spec": {"containers": [{"image": "no-name"}]}}),
            400,
            "does not contain declared merge key: name",
        ),
        (
            json!({"spec": {"containers": [{"name": "web", "$patch": "explode"}]}}),
            400,
            "unknown patch type: explode",
        ),
        (
            json!({"metadata": {"labels": {"$patch": 3}}}),
            400,
            "unknown patch type: 3",
        ),
        (
            json!({"spec": {"initContainers": [["nested"]]}}),
            422,
            "lists of lists are not supported",
        ),
        (
            json!({"spec": {"containers": ["web"]}}),
            400,
            "list element types are not identical",
        ),
        (
            json!({"spec": {"$setElementOrder/containers": {"name": "web"}}}),
            400,
            "invalid patch format of setElementOrder list",
        ),
        (
            json!({"metadata": {"$deleteFromPrimitiveList/finalizers": "a"}}),
            400,
            "invalid patch format of primitive list",
        ),
    ];
    for (patch, code, fragment) in cases {
        let st = status_of(smp("Pod", &pod(), patch.clone()).expect_err("patch must fail"));
        let detail = st
            .details
            .as_ref()
            .and_then(|d| d.causes.first())
            .map(|c| c.message.clone())
            .unwrap_or_default();
        assert_eq!(st.code, code, "{patch}: {}", st.message);
        assert!(
            st.message.contains(fragment) || detail.contains(fragment),
            "{patch}: {} / {detail}",
            st.message
        );
    }
}

#[test]
fn smp_invalid_json_body_is_bad_request() {
    let err = super::apply_patch(
        "Pod",
        super::PatchType::StrategicMerge,
        Some(&pod()),
        b"{not json",
        "m",
        false,
    )
    .unwrap_err();
    assert_eq!(status_of(err).code, 400);
}

#[test]
fn smp_large_lists_merge_without_quadratic_blowup() {
    // 20k env vars live, 20k in the patch (half new): a ~1 MiB body, well
    // under the 3 MiB request limit. Upstream made this path linear too
    // (strategicpatch order index); a quadratic merge would take minutes.
    let n = 20_000;
    let live_env: Vec<Value> = (0..n)
        .map(|i| json!({"name": format!("V{i}"), "value": "old"}))
        .collect();
    let patch_env: Vec<Value> = (n / 2..n + n / 2)
        .map(|i| json!({"name": format!("V{i}"), "value": "new"}))
        .collect();
    let mut original = pod();
    original["spec"]["containers"][0]["env"] = Value::Array(live_env);
    let started = std::time::Instant::now();
    let out = smp(
        "Pod",
        &original,
        json!({"spec": {"containers": [{"name": "web", "env": patch_env}]}}),
    )
    .unwrap();
    let elapsed = started.elapsed();
    let env = out["spec"]["containers"][0]["env"].as_array().unwrap();
    assert_eq!(env.len(), n + n / 2);
    assert_eq!(env[0], json!({"name": "V0", "value": "old"}));
    assert_eq!(
        env[n / 2],
        json!({"name": format!("V{}", n / 2), "value": "new"})
    );
    assert!(
        elapsed < std::time::Duration::from_secs(10),
        "took {elapsed:?}"
    );
}

/// Cases from upstream's `customStrategicMergePatchTestCaseData` /
/// `customStrategicMergePatchRawTestCases` (patch_test.go), with their
/// `mergingList` (merge key `name`) played by pod `containers` (`value` →
/// `image`) and `mergingIntList` by `metadata.finalizers`.
#[test]
fn smp_upstream_ordering_and_directive_cases() {
    fn c(name: &str) -> Value {
        json!({"name": name})
    }
    fn cv(name: &str, image: &str) -> Value {
        json!({"name": name, "image": image})
    }
    fn obj(containers: Value, finalizers: Value) -> Value {
        json!({"kind": "Pod", "metadata": {"finalizers": finalizers}, "spec": {"containers": containers}})
    }
    // (description, original, patch, expected)
    let cases: Vec<(&str, Value, Value, Value)> = vec![
        (
            "unique scalars when merging lists",
            obj(json!([]), json!(["1", "2"])),
            json!({"metadata": {"finalizers": ["2", "3"]}}),
            obj(json!([]), json!(["1", "2", "3"])),
        ),
        (
            "preserve the order from the patch in a merging list",
            obj(json!([c("1"), cv("2", "b"), c("3")]), json!([])),
            json!({"spec": {"containers": [cv("3", "c"), cv("1", "a"), json!({"name": "2", "other": "x"})]}}),
            obj(
                json!([
                    cv("3", "c"),
                    cv("1", "a"),
                    json!({"name": "2", "image": "b", "other": "x"})
                ]),
                json!([]),
            ),
        ),
        (
            "preserve the order from the patch in a merging list 2",
            obj(json!([c("1"), cv("2", "b"), c("3")]), json!([])),
            json!({"spec": {"containers": [cv("3", "c"), cv("1", "a")]}}),
            obj(json!([cv("2", "b"), cv("3", "c"), cv("1", "a")]), json!([])),
        ),
        (
            "preserve the order from the patch in a merging int list",
            obj(json!([]), json!(["1", "2", "3"])),
            json!({"metadata": {"finalizers": ["3", "1", "2"]}}),
            obj(json!([]), json!(["3", "1", "2"])),
        ),
        (
            "preserve the order from the patch in a merging int list 2",
            obj(json!([]), json!(["1", "2", "3"])),
            json!({"metadata": {"finalizers": ["3", "1"]}}),
            obj(json!([]), json!(["2", "3", "1"])),
        ),
        (
            "$setElementOrder contains item that is not present in the list to be merged",
            obj(json!([c("1"), c("3")]), json!([])),
            json!({"spec": {"$setElementOrder/containers": [c("3"), c("2"), c("1")],
                            "containers": [cv("3", "3"), cv("1", "1")]}}),
            obj(json!([cv("3", "3"), cv("1", "1")]), json!([])),
        ),
        (
            "$setElementOrder contains item that is not present in the int list to be merged",
            obj(json!([]), json!(["1", "3"])),
            json!({"metadata": {"$setElementOrder/finalizers": ["3", "2", "1"]}}),
            obj(json!([]), json!(["3", "1"])),
        ),
        (
            "delete all duplicate entries in a merging list (1.33 semantics)",
            obj(
                json!([c("1"), c("1"), cv("2", "a"), c("3"), c("3")]),
                json!([]),
            ),
            json!({"spec": {"containers": [{"name": "1", "$patch": "delete"}, {"name": "3", "$patch": "delete"}]}}),
            obj(json!([cv("2", "a")]), json!([])),
        ),
        (
            "delete all items from merging list",
            obj(json!([c("1"), c("2")]), json!([])),
            json!({"spec": {"containers": [{"$patch": "replace"}]}}),
            obj(json!([]), json!([])),
        ),
        (
            "merge empty merging lists",
            obj(json!([]), json!([])),
            json!({"spec": {"containers": []}}),
            obj(json!([]), json!([])),
        ),
    ];
    for (description, original, patch, expected) in cases {
        let got = smp("Pod", &original, patch).unwrap_or_else(|e| panic!("{description}: {e}"));
        assert_eq!(got.to_string(), expected.to_string(), "{description}");
    }

    // Raw cases that must fail because the patch list contradicts $setElementOrder.
    for (original, patch) in [
        (
            obj(json!([c("1"), c("3"), c("2")]), json!([])),
            json!({"spec": {"$setElementOrder/containers": [c("1"), c("2"), c("3")],
                            "containers": [cv("3", "3"), cv("1", "1")]}}),
        ),
        (
            obj(json!([]), json!(["1", "3", "2"])),
            json!({"metadata": {"$setElementOrder/finalizers": ["1", "2", "3"], "finalizers": ["3", "1"]}}),
        ),
    ] {
        let st = status_of(smp("Pod", &original, patch).unwrap_err());
        assert!(st.message.contains("doesn't match"), "{}", st.message);
    }
}
