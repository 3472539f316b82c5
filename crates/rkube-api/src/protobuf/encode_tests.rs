//! Encoding responses: what rkube writes must decode with an independent
//! protobuf implementation (the `k8s-pb` crate's prost types, generated from
//! Kubernetes' `.proto` files) into the same object, and back.

use super::*;
use prost::Message;
use serde_json::json;

use k8s_pb::api::core::v1 as core;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;

/// Strips the envelope, checking it as upstream's decoder would, and returns
/// (apiVersion, kind, raw).
fn open_envelope(body: &[u8]) -> (String, String, Vec<u8>) {
    let rest = body.strip_prefix(MAGIC.as_slice()).expect("magic");
    let unknown = k8s_pb::apimachinery::pkg::runtime::Unknown::decode(rest).expect("runtime.Unknown");
    let tm = unknown.type_meta.expect("typeMeta");
    assert_eq!(unknown.content_encoding.as_deref(), Some(""));
    assert_eq!(unknown.content_type.as_deref(), Some(""));
    (tm.api_version.unwrap_or_default(), tm.kind.unwrap_or_default(), unknown.raw.unwrap_or_default())
}

/// Encodes `obj` with rkube, decodes it with prost as `M`, re-encodes it
/// with prost and decodes that with rkube: the result must be `obj` again.
fn round_trip_through_prost<M: Message + Default>(obj: Value) -> M {
    let body = encode_object(&obj).expect("encode");
    let (api_version, kind, raw) = open_envelope(&body);
    assert_eq!(Some(api_version.as_str()), obj["apiVersion"].as_str());
    assert_eq!(Some(kind.as_str()), obj["kind"].as_str());
    let typed = M::decode(raw.as_slice()).expect("prost decodes what rkube wrote");
    let again = envelope(&api_version, &kind, &typed.encode_to_vec());
    assert_eq!(decode_object(&again).expect("rkube decodes what prost wrote"), obj);
    typed
}

fn pod() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": "web-0", "namespace": "default", "uid": "6f9d-1", "resourceVersion": "42", "generation": 3,
            "creationTimestamp": "2026-11-26T10:00:00Z",
            "deletionTimestamp": "2026-11-26T10:05:00Z", "deletionGracePeriodSeconds": 30,
            "labels": {"b": "2", "a": "1"}, "annotations": {"note": "x"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web", "uid": "u1", "controller": true, "blockOwnerDeletion": true}],
            "finalizers": ["f/one"],
            "managedFields": [{"manager": "kubectl", "operation": "Apply", "apiVersion": "v1", "time": "2026-11-26T10:00:00Z",
                               "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:labels": {"f:a": {}}}}}]
        },
        "spec": {
            "containers": [{
                "name": "app", "image": "busybox", "command": ["sh", "-c", "sleep 1d"],
                "ports": [{"containerPort": 8080, "protocol": "TCP", "name": "http"}],
                "env": [{"name": "A", "value": "1"},
                        {"name": "B", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "k", "optional": false}}},
                        {"name": "C", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}}}],
                "resources": {"limits": {"cpu": "500m", "memory": "128Mi"}, "requests": {"cpu": "100m"}},
                "readinessProbe": {"httpGet": {"path": "/", "port": "http", "scheme": "HTTP"}, "periodSeconds": 5},
                "livenessProbe": {"tcpSocket": {"port": 8080}, "failureThreshold": 3},
                "securityContext": {"runAsUser": 0, "readOnlyRootFilesystem": true}
            }],
            "volumes": [{"name": "cfg", "configMap": {"name": "cfg", "defaultMode": 420}},
                        {"name": "scratch", "emptyDir": {"medium": "Memory", "sizeLimit": "64Mi"}}],
            "restartPolicy": "Always", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
            "nodeName": "node-1", "priority": -5, "enableServiceLinks": true,
            "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}]
        },
        "status": {
            "phase": "Running", "podIP": "10.0.0.5", "podIPs": [{"ip": "10.0.0.5"}],
            "startTime": "2026-11-26T10:00:01Z",
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-26T10:00:03Z"}],
            "containerStatuses": [{"name": "app", "ready": true, "restartCount": 0, "image": "busybox", "imageID": "", "started": true,
                                   "state": {"running": {"startedAt": "2026-11-26T10:00:02Z"}}}]
        }
    })
}

#[test]
fn a_pod_written_by_rkube_decodes_with_prost_and_comes_back_equal() {
    let mut expected = pod();
    // imageID "" is omitted on decode (Go omits empty strings the same way).
    expected["status"]["containerStatuses"][0].as_object_mut().unwrap().remove("imageID");
    let p: core::Pod = round_trip_through_prost(expected);
    let meta = p.metadata.as_ref().unwrap();
    assert_eq!(meta.name.as_deref(), Some("web-0"));
    assert_eq!(meta.generation, Some(3));
    assert_eq!(meta.creation_timestamp.as_ref().and_then(|t| t.seconds), Some(1_795_687_200));
    let spec = p.spec.as_ref().unwrap();
    assert_eq!(spec.priority, Some(-5), "negative int32 survives");
    let c = &spec.containers[0];
    assert_eq!(c.resources.as_ref().unwrap().limits["memory"].string.as_deref(), Some("128Mi"));
    let port = c.readiness_probe.as_ref().unwrap().handler.as_ref().unwrap().http_get.as_ref().unwrap().port.as_ref().unwrap();
    assert_eq!((port.r#type, port.str_val.as_deref()), (Some(1), Some("http")));
    let fields = meta.managed_fields[0].fields_v1.as_ref().unwrap().raw.as_deref().unwrap();
    assert_eq!(serde_json::from_slice::<Value>(fields).unwrap(), json!({"f:metadata": {"f:labels": {"f:a": {}}}}));
}

#[test]
fn workload_and_cluster_kinds_round_trip_through_prost() {
    round_trip_through_prost::<k8s_pb::api::apps::v1::Deployment>(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "web"}},
                 "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 1}},
                 "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}},
        "status": {"observedGeneration": 1, "conditions": [{"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"}]}
    }));
    round_trip_through_prost::<core::Secret>(json!({
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "type": "Opaque",
        "data": {"a": "MQ==", "empty": ""}
    }));
    round_trip_through_prost::<k8s_pb::api::coordination::v1::Lease>(json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "l"},
        "spec": {"holderIdentity": "me", "leaseDurationSeconds": 15, "renewTime": "2026-11-26T10:00:00.123456Z"}
    }));
    round_trip_through_prost::<k8s_pb::api::events::v1::Event>(json!({
        "apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "e", "namespace": "default"},
        "eventTime": "2026-11-26T10:00:00.000001Z", "reportingController": "c", "reportingInstance": "i",
        "action": "Pull", "reason": "Pulled", "type": "Normal", "regarding": {"kind": "Pod", "name": "p"}
    }));
    round_trip_through_prost::<k8s_pb::api::batch::v1::CronJob>(json!({
        "apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "c"},
        "spec": {"schedule": "*/1 * * * *", "jobTemplate": {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "i"}], "restartPolicy": "Never"}}}}}
    }));
    round_trip_through_prost::<k8s_pb::api::rbac::v1::ClusterRole>(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "r"},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}, {"nonResourceURLs": ["/healthz"], "verbs": ["get"]}],
        "aggregationRule": {"clusterRoleSelectors": [{"matchExpressions": [{"key": "k", "operator": "In", "values": ["v"]}]}]}
    }));
    round_trip_through_prost::<k8s_pb::api::autoscaling::v2::HorizontalPodAutoscaler>(json!({
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "h"},
        "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "web", "apiVersion": "apps/v1"}, "minReplicas": 1, "maxReplicas": 5,
                 "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}}}]}
    }));
    round_trip_through_prost::<k8s_pb::api::certificates::v1::CertificateSigningRequest>(json!({
        "apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest", "metadata": {"name": "c"},
        "spec": {"request": "AAEC", "signerName": "kubernetes.io/kube-apiserver-client", "usages": ["client auth"],
                 "username": "u", "extra": {"k": ["a", "b"]}, "expirationSeconds": 3600}
    }));
}

#[test]
fn lists_and_statuses_round_trip_through_prost() {
    round_trip_through_prost::<core::ConfigMapList>(json!({
        "apiVersion": "v1", "kind": "ConfigMapList",
        "metadata": {"resourceVersion": "9", "continue": "tok", "remainingItemCount": 3},
        "items": [{"metadata": {"name": "a"}, "data": {"k": "v"}}, {"metadata": {"name": "b"}}]
    }));
    let s: meta::Status = round_trip_through_prost(json!({
        "apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure",
        "message": "pods \"x\" not found", "reason": "NotFound", "details": {"name": "x", "kind": "pods"}, "code": 404
    }));
    assert_eq!(s.code, Some(404));
}

#[test]
fn kubectl_bodies_survive_decode_then_encode() {
    for body in [
        &include_bytes!("testdata/kubectl-1.33-create-deployment.bin")[..],
        include_bytes!("testdata/kubectl-1.33-create-namespace.bin"),
        include_bytes!("testdata/kubectl-1.33-create-configmap.bin"),
        include_bytes!("testdata/kubectl-1.33-create-secret.bin"),
    ] {
        let obj = decode_object(body).unwrap();
        assert_eq!(decode_object(&encode_object(&obj).unwrap()).unwrap(), obj);
    }
}

#[test]
fn equal_objects_give_equal_bytes_whatever_their_key_order() {
    let a = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "labels": {"x": "1", "y": "2"}}, "data": {"b": "2", "a": "1"}});
    let b = json!({"kind": "ConfigMap", "data": {"a": "1", "b": "2"}, "metadata": {"labels": {"y": "2", "x": "1"}, "name": "a"}, "apiVersion": "v1"});
    assert_eq!(encode_object(&a).unwrap(), encode_object(&b).unwrap());
}

#[test]
fn watch_frames_are_length_prefixed_watch_events() {
    let obj = encode_object(&json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}})).unwrap();
    let frame = watch_event_frame("ADDED", &obj);
    let len = u32::from_be_bytes(frame[..4].try_into().unwrap()) as usize;
    assert_eq!(len, frame.len() - 4);
    let ev = meta::WatchEvent::decode(&frame[4..]).unwrap();
    assert_eq!(ev.r#type.as_deref(), Some("ADDED"));
    assert_eq!(ev.object.and_then(|o| o.raw).unwrap(), obj);
}

#[test]
fn values_that_do_not_fit_their_field_are_errors_not_panics() {
    let bad = [
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": 5}}),
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {}, "data": {"a": "not base64!"}}),
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"creationTimestamp": "yesterday"}}),
        json!({"apiVersion": "v1", "kind": "Pod", "spec": {"priority": 5_000_000_000i64}}),
        json!({"apiVersion": "v1", "kind": "Pod", "spec": {"containers": {"name": "c"}}}),
    ];
    for obj in bad {
        assert!(matches!(encode_object(&obj), Err(ProtobufError::Malformed(_))), "{obj}");
    }
    assert!(matches!(
        encode_object(&json!({"apiVersion": "example.com/v1", "kind": "Widget"})),
        Err(ProtobufError::UnknownKind { .. })
    ));
}

#[test]
fn go_durations_parse_as_go_prints_them() {
    for ns in [0i64, 1, 999, 1_500, 300_000_000, 1_500_000_000, 3_600_000_000_000, 5_400_000_000_000, -60_000_000_000] {
        assert_eq!(crate::time::parse_go_duration(&crate::time::format_go_duration(ns)), Some(ns), "{}", crate::time::format_go_duration(ns));
    }
    assert_eq!(crate::time::parse_go_duration("1h30m"), Some(5_400_000_000_000));
    assert_eq!(crate::time::parse_go_duration("10us"), Some(10_000));
    assert_eq!(crate::time::parse_go_duration("5"), None);
    assert_eq!(crate::time::parse_go_duration(""), None);
    assert_eq!(crate::time::parse_go_duration("3d"), None);
}

#[test]
fn varint_lengths() {
    for v in [0u64, 1, 127, 128, 16_383, 16_384, u32::MAX as u64, u64::MAX] {
        let mut out = Vec::new();
        encode::put_varint(&mut out, v);
        assert_eq!(varint_len(v), out.len(), "{v}");
    }
}

/// Go structs embedded with `json:",inline"` outside core/v1, and a field
/// whose JSON name is capitalized (`DaemonEndpoint.Port`): each was lost on
/// the protobuf path before the schema said so.
#[test]
fn inline_structs_and_odd_json_names_survive() {
    round_trip_through_prost::<k8s_pb::api::admissionregistration::v1::ValidatingWebhookConfiguration>(json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration", "metadata": {"name": "w"},
        "webhooks": [{"name": "a.example.com", "clientConfig": {"url": "https://example.com"}, "sideEffects": "None",
                      "admissionReviewVersions": ["v1"],
                      "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "scope": "*"}]}]
    }));
    round_trip_through_prost::<k8s_pb::api::admissionregistration::v1::ValidatingAdmissionPolicy>(json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy", "metadata": {"name": "p"},
        "spec": {"matchConstraints": {"resourceRules": [{"resourceNames": ["x"], "operations": ["UPDATE"], "apiGroups": ["apps"],
                                                          "apiVersions": ["v1"], "resources": ["deployments"]}]},
                 "validations": [{"expression": "true"}]}
    }));
    round_trip_through_prost::<k8s_pb::api::networking::v1::Ingress>(json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": {"name": "i"},
        "spec": {"rules": [{"host": "a.example.com", "http": {"paths": [{"path": "/", "pathType": "Prefix",
                 "backend": {"service": {"name": "s", "port": {"number": 80}}}}]}}]}
    }));
    let node: core::Node = round_trip_through_prost(json!({
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"},
        "status": {"daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}}}
    }));
    assert_eq!(node.status.unwrap().daemon_endpoints.unwrap().kubelet_endpoint.unwrap().port, Some(10250));
}

#[test]
fn list_summaries_count_items_without_decoding_them() {
    let list = json!({"apiVersion": "v1", "kind": "ConfigMapList", "metadata": {"resourceVersion": "12", "continue": "c"},
                      "items": [{"metadata": {"name": "a"}}, {"metadata": {"name": "b"}}, {"metadata": {"name": "c"}}]});
    let s = list_summary(&encode_object(&list).unwrap()).unwrap();
    assert_eq!(s, ListSummary { items: 3, resource_version: "12".into(), continue_token: "c".into() });
    assert_eq!(list_summary(b"{}"), Err(ProtobufError::MissingMagic));
}

/// CustomResourceDefinitions, whose schemas use apiextensions' union types
/// (`JSON`, schema-or-bool, schema-or-list, schema-or-strings) and `$ref`.
#[test]
fn custom_resource_definitions_round_trip_through_prost() {
    let crd: k8s_pb::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition =
        round_trip_through_prost(json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {
                "group": "example.com", "scope": "Namespaced",
                "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList", "shortNames": ["wd"]},
                "versions": [{
                    "name": "v1", "served": true, "storage": true,
                    "subresources": {"status": {}, "scale": {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas"}},
                    "additionalPrinterColumns": [{"name": "Size", "type": "integer", "jsonPath": ".spec.size"}],
                    "schema": {"openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {"type": "object", "required": ["size"], "x-kubernetes-preserve-unknown-fields": true,
                                "properties": {
                                    "size": {"type": "integer", "minimum": 1, "maximum": 9.5, "default": 3},
                                    "mode": {"type": "string", "enum": ["a", "b"], "example": "a"},
                                    "tags": {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set"},
                                    "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                                    "free": {"type": "object", "additionalProperties": true},
                                    "port": {"x-kubernetes-int-or-string": true, "anyOf": [{"type": "integer"}, {"type": "string"}]},
                                    "pair": {"type": "array", "items": [{"type": "string"}, {"type": "integer"}]},
                                    "deps": {"type": "object", "dependencies": {"a": ["b"], "c": {"required": ["d"]}}},
                                    "ref": {"$ref": "#/definitions/x"}
                                },
                                "x-kubernetes-validations": [{"rule": "self.size < 10", "message": "too big"}]},
                            "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
                        }
                    }}
                }]
            },
            "status": {"storedVersions": ["v1"], "acceptedNames": {"plural": "widgets", "kind": "Widget"},
                       "conditions": [{"type": "Established", "status": "True", "lastTransitionTime": "2026-11-26T10:00:00Z", "reason": "InitialNamesAccepted"}]}
        }));
    let schema = crd.spec.unwrap().versions[0].schema.clone().unwrap().open_apiv3_schema.unwrap();
    let spec = &schema.properties["spec"];
    assert_eq!(spec.properties["size"].default.as_ref().and_then(|d| d.raw.as_deref()), Some(&b"3"[..]));
    assert_eq!(spec.properties["ref"].r#ref.as_deref(), Some("#/definitions/x"));
    assert_eq!(spec.properties["free"].additional_properties.as_ref().and_then(|a| a.allows), Some(true));
}
