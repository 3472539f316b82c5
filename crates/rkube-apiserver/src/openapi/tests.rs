//! Tests of the published documents: shapes kubectl's parsers require,
//! references, GVK tags, the protobuf encoding, and unknown-field paths.

use std::collections::BTreeSet;

use prost::Message;
use serde_json::{json, Value};

use super::kinds::{self, KINDS};
use super::*;

fn v2() -> Value {
    serde_json::from_slice(openapi_v2_json()).expect("v2 document is JSON")
}

fn v3(path: &str) -> Value {
    serde_json::from_slice(openapi_v3_group_version(path).expect("group version served")).expect("v3 document is JSON")
}

fn gvk_tags(schema: &Value) -> Vec<(String, String, String)> {
    schema
        .get("x-kubernetes-group-version-kind")
        .and_then(Value::as_array)
        .map(|tags| {
            tags.iter()
                .map(|t| {
                    let s = |k: &str| t.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
                    (s("group"), s("version"), s("kind"))
                })
                .collect()
        })
        .unwrap_or_default()
}

fn all_refs(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            if let Some(r) = m.get("$ref").and_then(Value::as_str) {
                out.push(r.to_string());
            }
            m.values().for_each(|x| all_refs(x, out));
        }
        Value::Array(a) => a.iter().for_each(|x| all_refs(x, out)),
        _ => {}
    }
}

#[test]
fn every_served_kind_and_list_is_tagged_with_its_gvk() {
    let doc = v2();
    let defs = &doc["definitions"];
    for k in KINDS.iter() {
        let tags = gvk_tags(&defs[k.definition.as_str()]);
        assert_eq!(tags, vec![(k.group.to_string(), k.version.to_string(), k.kind.to_string())], "{}", k.definition);
        if let (Some(list_kind), Some(list_def)) = (k.list_kind, kinds::list_definition(k)) {
            let tags = gvk_tags(&defs[list_def.as_str()]);
            assert_eq!(tags, vec![(k.group.to_string(), k.version.to_string(), list_kind.to_string())]);
            assert_eq!(defs[list_def.as_str()]["required"], json!(["items"]));
        }
    }
    let status = gvk_tags(&defs["io.k8s.apimachinery.pkg.apis.meta.v1.Status"]);
    assert_eq!(status, vec![(String::new(), "v1".into(), "Status".into())]);
    let delete = gvk_tags(&defs["io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions"]);
    assert!(delete.contains(&("apps".into(), "v1".into(), "DeleteOptions".into())));
}

#[test]
fn resource_kinds_do_not_require_metadata() {
    let doc = v2();
    let pod = &doc["definitions"]["io.k8s.api.core.v1.Pod"];
    assert!(pod.get("required").is_none(), "{:?}", pod.get("required"));
    assert_eq!(pod["properties"]["metadata"]["$ref"], "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta");
}

#[test]
fn v2_references_all_resolve_to_definitions() {
    let doc = v2();
    let mut refs = Vec::new();
    all_refs(&doc, &mut refs);
    assert!(refs.len() > 100);
    for r in refs {
        let name = r.strip_prefix("#/definitions/").unwrap_or_else(|| panic!("non-definition ref {r}"));
        assert!(doc["definitions"].get(name).is_some(), "dangling ref {r}");
    }
}

#[test]
fn v3_documents_are_self_contained_and_tag_their_kinds() {
    for (group, version) in kinds::group_versions() {
        let path = kinds::group_version_path(group, version);
        let doc = v3(&path);
        assert_eq!(doc["openapi"], "3.0.0");
        let mut refs = Vec::new();
        all_refs(&doc, &mut refs);
        for r in refs {
            let name = r.strip_prefix("#/components/schemas/").unwrap_or_else(|| panic!("{path}: ref {r}"));
            assert!(doc["components"]["schemas"].get(name).is_some(), "{path}: dangling ref {r}");
        }
        for k in KINDS.iter().filter(|k| k.group == group && k.version == version) {
            let tags = gvk_tags(&doc["components"]["schemas"][k.definition.as_str()]);
            assert_eq!(tags.len(), 1, "{path}: {}", k.definition);
        }
        // A $ref never has siblings in OpenAPI 3.0 output. (A `properties`
        // map is not a schema: JSONSchemaProps has a property named `$ref`.)
        let mut stack = vec![&doc];
        while let Some(v) = stack.pop() {
            match v {
                Value::Object(m) => {
                    if m.contains_key("$ref") {
                        assert_eq!(m.len(), 1, "{path}: $ref with siblings: {v}");
                    }
                    for (k, child) in m {
                        match (k.as_str(), child) {
                            ("properties", Value::Object(props)) => stack.extend(props.values()),
                            _ => stack.push(child),
                        }
                    }
                }
                Value::Array(a) => stack.extend(a.iter()),
                _ => {}
            }
        }
    }
}

#[test]
fn v3_index_lists_each_group_version_with_its_hash() {
    let index = openapi_v3_index();
    for path in ["api/v1", "apis/apps/v1", "apis/discovery.k8s.io/v1", "apis/coordination.k8s.io/v1"] {
        let url = index["paths"][path]["serverRelativeURL"].as_str().unwrap_or_else(|| panic!("{path} missing"));
        let hash = openapi_v3_hash(path).expect("hash");
        assert_eq!(url, format!("/openapi/v3/{path}?hash={hash}"));
        assert_eq!(hash.len(), 128);
    }
    assert!(openapi_v3_group_version("apis/batch/v1").is_some(), "batch/v1 is served");
    assert!(openapi_v3_group_version("apis/example.com/v1").is_none());
    assert_eq!(openapi_v3_group_version("/openapi/v3/api/v1"), openapi_v3_group_version("api/v1"));
}

/// The PATCH operation of every kind carries its GVK and `fieldValidation`,
/// which is what kubectl's QueryParamVerifier (v2 and v3) looks for.
#[test]
fn patch_operations_advertise_field_validation_for_every_kind() {
    let check = |paths: &Value, flavor: &str| {
        let patchable = |k: &&kinds::KindSchema| {
            rkube_api::registry::every()
                .iter()
                .any(|r| r.group == k.group && r.version == k.version && r.kind == k.kind && r.verbs.contains(&"patch"))
        };
        for k in KINDS.iter().filter(patchable) {
            let want = json!({"group": k.group, "kind": k.kind, "version": k.version});
            let op = paths
                .as_object()
                .expect("paths")
                .values()
                .filter_map(|item| item.get("patch"))
                .find(|op| op["x-kubernetes-group-version-kind"] == want)
                .unwrap_or_else(|| panic!("{flavor}: no PATCH for {}", k.kind));
            let names: Vec<&str> = op["parameters"].as_array().expect("params").iter().filter_map(|p| p["name"].as_str()).collect();
            assert!(names.contains(&"fieldValidation"), "{flavor} {}: {names:?}", k.kind);
        }
    };
    check(&v2()["paths"], "v2");
    let mut all = serde_json::Map::new();
    for (g, v) in kinds::group_versions() {
        if let Some(p) = v3(&kinds::group_version_path(g, v))["paths"].as_object() {
            all.extend(p.clone());
        }
    }
    check(&Value::Object(all), "v3");
}

#[test]
fn expected_paths_exist() {
    let doc = v2();
    for p in [
        "/api/v1/namespaces/{namespace}/pods",
        "/api/v1/namespaces/{namespace}/pods/{name}",
        "/api/v1/namespaces/{namespace}/pods/{name}/status",
        "/api/v1/namespaces/{namespace}/pods/{name}/binding",
        "/api/v1/pods",
        "/api/v1/nodes/{name}",
        "/api/v1/namespaces",
        "/apis/apps/v1/namespaces/{namespace}/deployments/{name}",
        "/apis/discovery.k8s.io/v1/endpointslices",
        "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases",
    ] {
        assert!(doc["paths"].get(p).is_some(), "missing {p}");
    }
    let create = &doc["paths"]["/api/v1/namespaces/{namespace}/pods"]["post"];
    assert_eq!(create["operationId"], "createCoreV1NamespacedPod");
    assert_eq!(create["parameters"][0]["in"], "body");
}

#[test]
fn strategic_merge_metadata_is_published() {
    let doc = v2();
    let containers = &doc["definitions"]["io.k8s.api.core.v1.PodSpec"]["properties"]["containers"];
    assert_eq!(containers["x-kubernetes-patch-merge-key"], "name");
    assert_eq!(containers["x-kubernetes-patch-strategy"], "merge");
    let ports = &doc["definitions"]["io.k8s.api.core.v1.ServiceSpec"]["properties"]["ports"];
    assert_eq!(ports["x-kubernetes-patch-merge-key"], "port");
    assert_eq!(patch_strategy("io.k8s.api.core.v1.PodSpec", "volumes"), Some(("merge,retainKeys", Some("name"))));
    // Every table entry names a real property.
    for (d, p, _, _) in patch_meta::PATCH_META {
        assert!(doc["definitions"][*d]["properties"].get(*p).is_some(), "{d}.{p}");
    }
}

/// The rules kube-openapi's `proto.NewOpenAPIData` enforces when kubectl
/// parses the v2 document (`pkg/util/proto/document.go`).
#[test]
fn v2_definitions_parse_under_kubectl_rules() {
    fn check(s: &Value, at: &str) {
        let m = s.as_object().unwrap_or_else(|| panic!("{at}: schema not an object"));
        let types: Vec<&str> = match m.get("type") {
            None => vec![],
            Some(Value::String(t)) => vec![t.as_str()],
            Some(other) => panic!("{at}: type {other}"),
        };
        if m.contains_key("$ref") {
            assert!(types.is_empty() && m.get("properties").is_none(), "{at}: ref with type/properties");
            return;
        }
        match types.first().copied() {
            Some("array") => check(m.get("items").unwrap_or_else(|| panic!("{at}: array without items")), &format!("{at}[]")),
            Some("object") | None => {
                if let Some(props) = m.get("properties").and_then(Value::as_object) {
                    for (k, v) in props {
                        check(v, &format!("{at}.{k}"));
                    }
                } else if let Some(ap @ Value::Object(_)) = m.get("additionalProperties") {
                    check(ap, &format!("{at}{{}}"));
                }
            }
            Some("string" | "integer" | "number" | "boolean") => {}
            Some(other) => panic!("{at}: unknown primitive type {other}"),
        }
    }
    let doc = v2();
    for (name, def) in doc["definitions"].as_object().expect("definitions") {
        check(def, name);
    }
}

// ---- protobuf round trip -------------------------------------------------

fn yaml_value(any: &Option<proto::Any>) -> Option<Value> {
    any.as_ref().map(|a| serde_yaml::from_str::<Value>(&a.yaml).expect("yaml"))
}

fn ext(out: &mut serde_json::Map<String, Value>, exts: &[proto::NamedAny]) {
    for e in exts {
        out.insert(e.name.clone(), yaml_value(&e.value).expect("extension value"));
    }
}

fn schema_json(s: &proto::Schema) -> Value {
    let mut m = serde_json::Map::new();
    let mut put_str = |k: &str, v: &str| {
        if !v.is_empty() {
            m.insert(k.into(), v.into());
        }
    };
    put_str("$ref", &s.r#ref);
    put_str("format", &s.format);
    put_str("description", &s.description);
    put_str("pattern", &s.pattern);
    if let Some(t) = &s.r#type {
        m.insert("type".into(), t.value.first().cloned().unwrap_or_default().into());
    }
    if !s.required.is_empty() {
        m.insert("required".into(), json!(s.required));
    }
    if !s.r#enum.is_empty() {
        m.insert("enum".into(), s.r#enum.iter().map(|a| yaml_value(&Some(a.clone())).expect("enum")).collect());
    }
    if let Some(d) = yaml_value(&s.default) {
        m.insert("default".into(), d);
    }
    if let Some(items) = &s.items {
        m.insert("items".into(), schema_json(&items.schema[0]));
    }
    if let Some(props) = &s.properties {
        let p: serde_json::Map<String, Value> = props
            .additional_properties
            .iter()
            .map(|n| (n.name.clone(), schema_json(n.value.as_ref().expect("property schema"))))
            .collect();
        m.insert("properties".into(), Value::Object(p));
    }
    if let Some(ap) = &s.additional_properties {
        let v = match &ap.oneof {
            Some(proto::additional_properties_item::Oneof::Schema(s)) => schema_json(s),
            Some(proto::additional_properties_item::Oneof::Boolean(b)) => Value::Bool(*b),
            None => Value::Null,
        };
        m.insert("additionalProperties".into(), v);
    }
    if !s.all_of.is_empty() {
        m.insert("allOf".into(), s.all_of.iter().map(schema_json).collect());
    }
    ext(&mut m, &s.vendor_extension);
    Value::Object(m)
}

#[test]
fn protobuf_document_decodes_to_the_json_document() {
    let bytes = openapi_v2_protobuf();
    assert!(bytes.len() > 10_000);
    let decoded = proto::Document::decode(bytes).expect("protobuf decodes");
    let doc = v2();
    assert_eq!(decoded.swagger, "2.0");
    assert_eq!(decoded.info.as_ref().map(|i| i.title.as_str()), Some("Kubernetes"));

    // Definitions: every schema decodes back to the JSON one.
    let defs = decoded.definitions.expect("definitions");
    assert_eq!(defs.additional_properties.len(), doc["definitions"].as_object().expect("defs").len());
    for named in &defs.additional_properties {
        let back = schema_json(named.value.as_ref().expect("schema"));
        assert_eq!(back, doc["definitions"][&named.name], "definition {}", named.name);
    }

    // Paths: the same set, and the PATCH of pods keeps its GVK extension and
    // fieldValidation query parameter (what QueryParamVerifier reads).
    let paths = decoded.paths.expect("paths");
    let names: BTreeSet<&str> = paths.path.iter().map(|p| p.name.as_str()).collect();
    let json_names: BTreeSet<&str> = doc["paths"].as_object().expect("paths").keys().map(String::as_str).collect();
    assert_eq!(names, json_names);
    let pod = paths
        .path
        .iter()
        .find(|p| p.name == "/api/v1/namespaces/{namespace}/pods/{name}")
        .and_then(|p| p.value.as_ref())
        .and_then(|p| p.patch.as_ref())
        .expect("pod patch");
    let gvk = pod.vendor_extension.iter().find(|e| e.name == "x-kubernetes-group-version-kind").expect("gvk");
    assert_eq!(yaml_value(&gvk.value), Some(json!({"group": "", "kind": "Pod", "version": "v1"})));
    let has_field_validation = pod.parameters.iter().any(|p| match &p.oneof {
        Some(proto::parameters_item::Oneof::Parameter(proto::Parameter {
            oneof: Some(proto::parameter::Oneof::NonBodyParameter(proto::NonBodyParameter {
                oneof: Some(proto::non_body_parameter::Oneof::QueryParameterSubSchema(q)),
            })),
        })) => q.name == "fieldValidation",
        _ => false,
    });
    assert!(has_field_validation);
}

#[test]
fn accept_header_selects_protobuf() {
    assert!(wants_v2_protobuf("application/com.github.proto-openapi.spec.v2@v1.0+protobuf"));
    assert!(wants_v2_protobuf("application/json;q=0.9, application/com.github.proto-openapi.spec.v2@v1.0+protobuf"));
    assert!(!wants_v2_protobuf("application/json"));
}

// ---- unknown fields --------------------------------------------------------

#[test]
fn unknown_fields_reports_paths_like_strict_decoding() {
    let pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "labels": {"any-label": "x"}, "annotations": {"a/b": "c"}, "bogus": 1},
        "spec": {
            "containers": [
                {"name": "c", "image": "busybox", "env": [{"name": "A", "value": "1"}]},
                {"name": "d", "imagee": "busybox", "resources": {"limits": {"cpu": "1"}}}
            ],
            "nodeSelector": {"k": "v"},
            "unknownSpec": {"deep": true}
        },
        "status": {"phase": "Running"}
    });
    assert_eq!(
        unknown_fields("Pod", "", &pod),
        vec!["metadata.bogus".to_string(), "spec.containers[1].imagee".to_string(), "spec.unknownSpec".to_string()]
    );
    assert_eq!(
        strict_decoding_message(&["spec.containers[0].imagee".to_string()]),
        "strict decoding error: unknown field \"spec.containers[0].imagee\""
    );
}

#[test]
fn unknown_fields_skips_strategic_merge_directives() {
    let patch = json!({
        "metadata": {"annotations": {"a": "b"}},
        "spec": {
            "$setElementOrder/containers": [{"name": "c"}],
            "containers": [{"$setElementOrder/env": [{"name": "A"}], "name": "c", "env": [{"name": "A", "value": "2"}], "imagee": "x"}],
            "$retainKeys": ["containers"],
            "$deleteFromPrimitiveList/x": ["y"]
        }
    });
    assert_eq!(unknown_fields("Pod", "", &patch), vec!["spec.containers[0].imagee".to_string()]);
}

#[test]
fn unknown_fields_accepts_valid_objects_of_every_kind() {
    let cases = [
        ("ConfigMap", "", json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"x": "y"}, "binaryData": {"b": "AA=="}})),
        ("Deployment", "apps", json!({
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"a": "b"}},
                     "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%"}},
                     "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c", "image": "i", "ports": [{"containerPort": 80}]}]}}}
        })),
        ("Service", "", json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}, "spec": {"selector": {"a": "b"}, "ports": [{"port": 80, "targetPort": "http"}]}})),
        ("EndpointSlice", "discovery.k8s.io", json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "metadata": {"name": "e"}, "addressType": "IPv4", "endpoints": [{"addresses": ["10.0.0.1"], "conditions": {"ready": true}}], "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]})),
        ("Lease", "coordination.k8s.io", json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "l"}, "spec": {"holderIdentity": "me", "leaseDurationSeconds": 15}})),
        ("Namespace", "", json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "n", "managedFields": [{"manager": "m", "fieldsV1": {"f:metadata": {}}}]}})),
    ];
    for (kind, group, obj) in cases {
        assert_eq!(unknown_fields(kind, group, &obj), Vec::<String>::new(), "{kind}");
    }
    assert!(unknown_fields("Widget", "example.com", &json!({"x": 1})).is_empty());
}

#[test]
fn table_column_descriptions_come_from_the_schemas() {
    let d = property_description("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta", "name").expect("name description");
    assert!(d.contains("unique within a namespace"), "{d}");
}
