use super::*;
use serde_json::json;

fn pod(containers: serde_json::Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": "p", "namespace": "shop", "uid": "u1", "labels": {"app": "web"}, "annotations": {"team": "a"}},
        "spec": {"serviceAccountName": "builder", "containers": containers},
    }))
    .unwrap()
}

fn dw() -> DownwardValues {
    DownwardValues {
        allocatable: BTreeMap::from([("cpu".to_string(), 4000), ("memory".to_string(), 8 * 1024 * 1024 * 1024 * 1000)]),
        pod_ip: "10.0.0.5".into(),
        host_ip: "127.0.0.1".into(),
        node_name: "node-a".into(),
    }
}

fn data(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn sources() -> Sources {
    Sources::from_maps(
        [("cfg".to_string(), data(&[("MODE", "fast"), ("LEVEL", "3"), ("1bad", "x")]))],
        [("creds".to_string(), data(&[("password", "s3cret")]))],
    )
}

fn env_of(p: &Pod) -> Result<Vec<(String, String)>, ConfigError> {
    let c = &p.spec.as_ref().unwrap().containers[0];
    environment(p, c, &dw(), &sources()).map(|(e, _)| e)
}

fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
    p.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

#[test]
fn env_from_sources_come_first_with_prefixes_and_env_entries_override_in_place() {
    let p = pod(json!([{"name": "c", "envFrom": [{"configMapRef": {"name": "cfg"}}, {"prefix": "DB_", "secretRef": {"name": "creds"}}],
                        "env": [{"name": "MODE", "value": "slow"}, {"name": "URL", "value": "http://$(MODE):$(LEVEL)/$(NOPE)"}]}]));
    let c = &p.spec.as_ref().unwrap().containers[0];
    let (env, skipped) = environment(&p, c, &dw(), &sources()).unwrap();
    assert_eq!(env, pairs(&[("LEVEL", "3"), ("MODE", "slow"), ("DB_password", "s3cret"), ("URL", "http://slow:3/$(NOPE)")]));
    assert_eq!(skipped.len(), 1);
    assert_eq!(skipped[0].message(), "Keys [1bad] from the EnvFrom configMap shop/cfg were skipped since they are considered invalid environment variable names.");
}

#[test]
fn key_refs_read_config_maps_and_secrets_and_missing_ones_fail_unless_optional() {
    let p = pod(json!([{"name": "c", "env": [
        {"name": "A", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "LEVEL"}}},
        {"name": "B", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "password"}}},
        {"name": "C", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "nope", "optional": true}}},
        {"name": "D", "valueFrom": {"secretKeyRef": {"name": "gone", "key": "k", "optional": true}}}]}]));
    assert_eq!(env_of(&p).unwrap(), pairs(&[("A", "3"), ("B", "s3cret")]));
    let cases = [
        (json!({"configMapKeyRef": {"name": "missing", "key": "k"}}), "configmap \"missing\" not found"),
        (json!({"configMapKeyRef": {"name": "cfg", "key": "k"}}), "couldn't find key k in ConfigMap shop/cfg"),
        (json!({"secretKeyRef": {"name": "missing", "key": "k"}}), "secret \"missing\" not found"),
        (json!({"secretKeyRef": {"name": "creds", "key": "k"}}), "couldn't find key k in Secret shop/creds"),
    ];
    for (from, message) in cases {
        let p = pod(json!([{"name": "c", "env": [{"name": "X", "valueFrom": from}]}]));
        assert_eq!(env_of(&p), Err(ConfigError(message.into())));
    }
    let p = pod(json!([{"name": "c", "envFrom": [{"configMapRef": {"name": "missing"}}]}]));
    assert_eq!(env_of(&p), Err(ConfigError("configmap \"missing\" not found".into())));
    let p = pod(json!([{"name": "c", "envFrom": [{"secretRef": {"name": "missing", "optional": true}}]}]));
    assert_eq!(env_of(&p), Ok(vec![]));
}

#[test]
fn field_refs_read_the_pod_and_the_node() {
    let p = pod(json!([{"name": "c", "env": [
        {"name": "N", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
        {"name": "TEAM", "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['team']"}}},
        {"name": "SA", "valueFrom": {"fieldRef": {"fieldPath": "spec.serviceAccountName"}}},
        {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "HOST", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}}]}]));
    let want = [("N", "p"), ("NS", "shop"), ("APP", "web"), ("TEAM", "a"), ("SA", "builder"), ("NODE", "node-a"), ("IP", "10.0.0.5"), ("HOST", "127.0.0.1")];
    assert_eq!(env_of(&p).unwrap(), pairs(&want));
}

#[test]
fn resource_refs_round_up_by_the_divisor_and_unset_limits_are_the_nodes() {
    let p = pod(json!([{"name": "c", "resources": {"requests": {"cpu": "250m", "memory": "64Mi"}, "limits": {"memory": "128Mi"}},
        "env": [
            {"name": "REQ_CPU", "valueFrom": {"resourceFieldRef": {"resource": "requests.cpu"}}},
            {"name": "REQ_CPU_M", "valueFrom": {"resourceFieldRef": {"resource": "requests.cpu", "divisor": "1m"}}},
            {"name": "LIM_MEM_MI", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}}},
            {"name": "LIM_CPU", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}},
            {"name": "REQ_MEM", "valueFrom": {"resourceFieldRef": {"resource": "requests.memory"}}}]}]));
    let want = [("REQ_CPU", "1"), ("REQ_CPU_M", "250"), ("LIM_MEM_MI", "128"), ("LIM_CPU", "4"), ("REQ_MEM", "67108864")];
    assert_eq!(env_of(&p).unwrap(), pairs(&want));
}

#[test]
fn expansion_follows_upstream_escapes_and_leaves_unknown_names() {
    let env = pairs(&[("A", "1"), ("B", "two")]);
    assert_eq!(expand("$(A)-$(B)", &env), "1-two");
    assert_eq!(expand("$$(A)", &env), "$(A)");
    assert_eq!(expand("$(C) $A $", &env), "$(C) $A $");
    assert_eq!(expand("$(A", &env), "$(A");
    let c: Container = serde_json::from_value(json!({"name": "c", "command": ["echo", "$(A)"], "args": ["$(B)$$"]})).unwrap();
    let (_, command, args) = cri_parts(&env, &c);
    assert_eq!((command, args), (vec!["echo".to_string(), "1".into()], vec!["two$".to_string()]));
}

#[test]
fn env_var_names_follow_upstream_rules() {
    for ok in ["A", "a_b", "_x", "-x", ".x", "x.y-z9"] {
        assert!(is_env_var_name(ok), "{ok}");
    }
    for bad in ["", "1a", "a b", "a=b", "ä"] {
        assert!(!is_env_var_name(bad), "{bad}");
    }
}
