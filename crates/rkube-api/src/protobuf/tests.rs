//! Decoding bodies that real kubectl 1.33 sent (captured by the lead with
//! `kubectl.1.33 --server http://127.0.0.1:PORT create ...` against a recorder).

use super::*;
use serde_json::json;

fn fixture(name: &str) -> &'static [u8] {
    match name {
        "namespace" => include_bytes!("testdata/kubectl-1.33-create-namespace.bin"),
        "deployment" => include_bytes!("testdata/kubectl-1.33-create-deployment.bin"),
        "configmap" => include_bytes!("testdata/kubectl-1.33-create-configmap.bin"),
        "secret" => include_bytes!("testdata/kubectl-1.33-create-secret.bin"),
        _ => unreachable!(),
    }
}

#[test]
fn kubectl_create_namespace_body_decodes_to_json() {
    let v = decode_object(fixture("namespace")).unwrap();
    assert_eq!(v, json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "foo"}, "spec": {}, "status": {}}));
}

#[test]
fn kubectl_create_configmap_and_secret_keep_their_data_maps() {
    let cm = decode_object(fixture("configmap")).unwrap();
    assert_eq!(cm["kind"], "ConfigMap");
    assert_eq!(cm["metadata"]["name"], "cm");
    assert_eq!(cm["data"], json!({"a": "1"}));
    let secret = decode_object(fixture("secret")).unwrap();
    assert_eq!(secret["kind"], "Secret");
    // []byte values are base64 in JSON, as Go encodes them.
    assert_eq!(secret["data"], json!({"a": "MQ=="}));
}

#[test]
fn kubectl_create_deployment_keeps_zero_replicas_and_pod_template() {
    let d = decode_object(fixture("deployment")).unwrap();
    assert_eq!(d["apiVersion"], "apps/v1");
    assert_eq!(d["kind"], "Deployment");
    assert_eq!(d["metadata"]["name"], "web");
    assert_eq!(d["metadata"]["labels"], json!({"app": "web"}));
    // replicas is a pointer in Go: an explicit 0 must survive.
    assert_eq!(d["spec"]["replicas"], 0);
    assert_eq!(d["spec"]["selector"]["matchLabels"], json!({"app": "web"}));
    let c = &d["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(c["name"], "nginx");
    assert_eq!(c["image"], "nginx:1.25");
    assert_eq!(c["ports"][0]["containerPort"], 80);
    // zero metav1.Time is omitted, like Go's JSON output.
    assert!(d["metadata"].get("creationTimestamp").is_none());
    assert!(d["spec"]["template"]["metadata"].get("creationTimestamp").is_none());
}

#[test]
fn body_without_magic_is_rejected() {
    assert_eq!(decode_object(b"{\"kind\":\"Pod\"}"), Err(ProtobufError::MissingMagic));
}

#[test]
fn truncated_body_is_malformed_not_a_panic() {
    let body = fixture("deployment");
    for cut in 4..body.len() {
        let _ = decode_object(&body[..cut]);
    }
    assert!(matches!(decode_object(&body[..body.len() - 3]), Err(ProtobufError::Malformed(_))));
}

#[test]
fn unknown_kind_is_reported() {
    // k8s\0 + Unknown{typeMeta{apiVersion "v1", kind "Nope"}}
    let mut body = b"k8s\0".to_vec();
    let tm = [&[0x0a, 2][..], b"v1", &[0x12, 4], b"Nope"].concat();
    body.extend([0x0a, tm.len() as u8]);
    body.extend(tm);
    assert_eq!(
        decode_object(&body),
        Err(ProtobufError::UnknownKind { api_version: "v1".into(), kind: "Nope".into() })
    );
}

#[test]
fn special_types_follow_go_json() {
    // IntOrString {type 1, strVal "http"} and {type 0, intVal 8080}
    assert_eq!(decode_message("apimachinery.pkg.util.intstr.IntOrString", &[0x08, 1, 0x1a, 4, b'h', b't', b't', b'p']).unwrap(), json!("http"));
    assert_eq!(decode_message("apimachinery.pkg.util.intstr.IntOrString", &[0x10, 0x90, 0x3f]).unwrap(), json!(8080));
    // Time {seconds 1700000000}
    let mut t = vec![0x08];
    let mut v: u64 = 1_700_000_000;
    while v >= 0x80 {
        t.push((v as u8) | 0x80);
        v >>= 7;
    }
    t.push(v as u8);
    assert_eq!(decode_message("apimachinery.pkg.apis.meta.v1.Time", &t).unwrap(), json!("2023-11-14T22:13:20Z"));
    assert_eq!(crate::time::format_go_duration(3_600_000_000_000), "1h0m0s");
    assert_eq!(crate::time::format_go_duration(1_500_000_000), "1.5s");
    assert_eq!(crate::time::format_go_duration(300_000_000), "300ms");
}

#[test]
fn message_names_map_groups_to_packages() {
    assert_eq!(message_name("v1", "Pod").as_deref(), Some("api.core.v1.Pod"));
    assert_eq!(message_name("apps/v1", "Deployment").as_deref(), Some("api.apps.v1.Deployment"));
    assert_eq!(message_name("discovery.k8s.io/v1", "EndpointSlice").as_deref(), Some("api.discovery.v1.EndpointSlice"));
    assert_eq!(message_name("v1", "DeleteOptions").as_deref(), Some("apimachinery.pkg.apis.meta.v1.DeleteOptions"));
    assert_eq!(message_name("v1", "Nope"), None);
}

#[test]
fn embedded_go_structs_are_flattened_like_json_inline() {
    // ConfigMapKeySelector { localObjectReference(1) { name(1) "cfg" }, key(2) "k" }
    let body = [0x0a, 5, 0x0a, 3, b'c', b'f', b'g', 0x12, 1, b'k'];
    assert_eq!(decode_message("api.core.v1.ConfigMapKeySelector", &body).unwrap(), json!({"name": "cfg", "key": "k"}));
    // Probe { handler(1) { exec(1) { command(1) "true" } }, periodSeconds(4) 5 }
    let exec = [0x0a, 4, b't', b'r', b'u', b'e'];
    let handler = [&[0x0a, exec.len() as u8][..], &exec].concat();
    let probe = [&[0x0a, handler.len() as u8][..], &handler, &[0x20, 5]].concat();
    assert_eq!(
        decode_message("api.core.v1.Probe", &probe).unwrap(),
        json!({"exec": {"command": ["true"]}, "periodSeconds": 5})
    );
}

#[test]
fn acronym_field_names_match_kubernetes_json() {
    // NodeSpec podCIDRs(7), PolicyRule nonResourceURLs(5)
    assert_eq!(decode_message("api.core.v1.NodeSpec", &[0x3a, 1, b'a']).unwrap(), json!({"podCIDRs": ["a"]}));
    assert_eq!(decode_message("api.rbac.v1.PolicyRule", &[0x2a, 1, b'/']).unwrap(), json!({"nonResourceURLs": ["/"]}));
}

/// A length-delimited field `tag` holding `bytes` (lengths < 128 here).
fn len_field(tag: u8, bytes: &[u8]) -> Vec<u8> {
    assert!(bytes.len() < 128);
    let mut out = vec![(tag << 3) | 2, bytes.len() as u8];
    out.extend_from_slice(bytes);
    out
}

#[test]
fn subject_access_review_bodies_decode_with_extras_as_string_lists() {
    // What client-go sends for `kubectl auth can-i` style reviews, built by hand:
    // spec {resourceAttributes {verb, resource}, user, extra {k: [a, b]}}.
    let attrs = [len_field(2, b"get"), len_field(5, b"pods")].concat();
    let extra_value = [len_field(1, b"a"), len_field(1, b"b")].concat();
    let entry = [len_field(1, b"k"), len_field(2, &extra_value)].concat();
    let spec = [len_field(1, &attrs), len_field(3, b"alice"), len_field(5, &entry)].concat();
    let raw = len_field(2, &spec);
    let type_meta = [len_field(1, b"authorization.k8s.io/v1"), len_field(2, b"SubjectAccessReview")].concat();
    let body = [MAGIC.as_slice(), &len_field(1, &type_meta), &len_field(2, &raw)].concat();
    assert_eq!(
        decode_object(&body).unwrap(),
        json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
               "spec": {"resourceAttributes": {"verb": "get", "resource": "pods"}, "user": "alice", "extra": {"k": ["a", "b"]}}})
    );
    let type_meta = [len_field(1, b"authentication.k8s.io/v1"), len_field(2, b"SelfSubjectReview")].concat();
    let body = [MAGIC.as_slice(), &len_field(1, &type_meta), &len_field(2, b"")].concat();
    assert_eq!(decode_object(&body).unwrap(), json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}));
}
