//! ValidatingAdmissionPolicies and their bindings, evaluated on writes:
//! denials with upstream's message, code and reason, `Warn` as a `Warning`
//! header, variables, `messageExpression`, parameters, match constraints
//! and `failurePolicy`.

use crate::common;

use std::time::{Duration, Instant};

use common::TestServer;
use serde_json::{json, Value};

const POLICIES: &str = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies";
const BINDINGS: &str = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings";
const CMS: &str = "/api/v1/namespaces/default/configmaps";

fn configmaps_rule() -> Value {
    json!({"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["configmaps"]}]})
}

/// Creates a policy and its binding, and waits until the watch cache has them.
async fn install(s: &TestServer, name: &str, spec: Value, binding_spec: Value) {
    let policy = json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
                        "metadata": {"name": name}, "spec": spec});
    let r = s.post(POLICIES, &policy).await;
    assert_eq!(r.code, 201, "{}", r.text);
    let mut bspec = binding_spec;
    bspec["policyName"] = json!(name);
    let binding = json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
                         "metadata": {"name": format!("{name}-binding")}, "spec": bspec});
    let r = s.post(BINDINGS, &binding).await;
    assert_eq!(r.code, 201, "{}", r.text);
    let rv: i64 = r.rv().parse().unwrap_or(0);
    let started = Instant::now();
    loop {
        let cached: i64 = s.get(&format!("{BINDINGS}?resourceVersion=0")).await.rv().parse().unwrap_or(0);
        if cached >= rv {
            return;
        }
        assert!(started.elapsed() < Duration::from_secs(5), "binding not cached within 5 s");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn cm(name: &str, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_validation_denies_with_upstreams_status() {
    let s = TestServer::embedded().await;
    let spec = json!({"matchConstraints": configmaps_rule(), "validations": [
        {"expression": "!has(object.data) || size(object.data) <= 2", "message": "at most 2 keys"},
        {"expression": "object.metadata.name != 'forbidden'", "reason": "Forbidden"},
    ]});
    install(&s, "max-keys", spec, json!({"validationActions": ["Deny"]})).await;
    assert_eq!(s.post(CMS, &cm("small", json!({"a": "1"}))).await.code, 201);
    let r = s.post(CMS, &cm("big", json!({"a": "1", "b": "2", "c": "3"}))).await;
    r.assert_status(422, "Invalid");
    let why = "ValidatingAdmissionPolicy 'max-keys' with binding 'max-keys-binding' denied request: at most 2 keys";
    assert_eq!(r.message(), format!("configmaps \"big\" is forbidden: {why}"));
    assert_eq!(r.body["details"], json!({"name": "big", "kind": "configmaps", "causes": [{"message": why}]}));
    let r = s.post(CMS, &cm("forbidden", json!({}))).await;
    r.assert_status(403, "Forbidden");
    assert_eq!(
        r.message(),
        "configmaps \"forbidden\" is forbidden: ValidatingAdmissionPolicy 'max-keys' with binding 'max-keys-binding' denied request: failed expression: object.metadata.name != 'forbidden'"
    );
    // Updates are checked too; other resources are not.
    let r = s.patch(&format!("{CMS}/small"), "application/merge-patch+json", r#"{"data":{"b":"2","c":"3"}}"#).await;
    r.assert_status(422, "Invalid");
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "big"}, "stringData": {"a": "1", "b": "2", "c": "3"}});
    assert_eq!(s.post("/api/v1/namespaces/default/secrets", &secret).await.code, 201);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warn_bindings_answer_with_a_warning_and_variables_feed_message_expressions() {
    let s = TestServer::embedded().await;
    let spec = json!({
        "matchConstraints": configmaps_rule(),
        "variables": [{"name": "keys", "expression": "has(object.data) ? size(object.data) : 0"}],
        "validations": [{"expression": "variables.keys <= 1", "messageExpression": "'has ' + string(variables.keys) + ' keys'"}],
        "auditAnnotations": [{"key": "keys", "valueExpression": "string(variables.keys)"}],
    });
    install(&s, "one-key", spec, json!({"validationActions": ["Warn"]})).await;
    let r = s.post(CMS, &cm("two", json!({"a": "1", "b": "2"}))).await;
    assert_eq!(r.code, 201, "{}", r.text);
    let warnings: Vec<&str> = r.headers.get_all("warning").iter().filter_map(|v| v.to_str().ok()).collect();
    assert_eq!(
        warnings,
        [
            "299 - \"ValidatingAdmissionPolicy 'one-key' has auditAnnotations, which rkube does not evaluate yet\"",
            "299 - \"Validation failed for ValidatingAdmissionPolicy 'one-key' with binding 'one-key-binding': has 2 keys\""
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parameters_come_from_the_bindings_param_ref() {
    let s = TestServer::embedded().await;
    let spec = json!({
        "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
        "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["secrets"]}]},
        "validations": [{"expression": "!has(object.data) || size(object.data) <= int(params.data.max)", "message": "too many keys"}],
    });
    let binding = json!({"validationActions": ["Deny"], "paramRef": {"name": "limits", "namespace": "default"}});
    install(&s, "secret-keys", spec, binding).await;
    let secret = |name: &str| json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "data": {"a": "MQ==", "b": "Mg=="}});
    let secrets = "/api/v1/namespaces/default/secrets";
    let r = s.post(secrets, &secret("before-params")).await;
    r.assert_status(422, "Invalid");
    assert!(r.message().ends_with("denied request: no params found for policy binding with `Deny` parameterNotFoundAction"), "{}", r.message());
    assert_eq!(s.post(CMS, &cm("limits", json!({"max": "1"}))).await.code, 201);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let r = s.post(secrets, &secret("two-keys")).await;
        if r.message().ends_with("denied request: too many keys") {
            r.assert_status(422, "Invalid");
            break;
        }
        assert!(Instant::now() < deadline, "params never seen: {}", r.text);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut limits = s.get(&format!("{CMS}/limits")).await.body;
    limits["data"]["max"] = json!("2");
    assert_eq!(s.put(&format!("{CMS}/limits"), &limits).await.code, 200);
    let deadline = Instant::now() + Duration::from_secs(5);
    while s.post(secrets, &secret("allowed")).await.code != 201 {
        assert!(Instant::now() < deadline, "new params never applied");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn match_constraints_conditions_and_failure_policy_decide_what_is_checked() {
    let s = TestServer::embedded().await;
    let mut constraints = configmaps_rule();
    constraints["excludeResourceRules"] = json!([{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["*"], "resources": ["configmaps"], "resourceNames": ["exempt"]}]);
    let spec = json!({
        "matchConstraints": constraints,
        "matchConditions": [{"name": "labelled", "expression": "has(object.metadata.labels) && 'checked' in object.metadata.labels"}],
        "validations": [{"expression": "object.data.ok == 'yes'"}],
        "failurePolicy": "Fail",
    });
    install(&s, "checked", spec, json!({"validationActions": ["Deny"]})).await;
    let mut labelled = cm("labelled", json!({"ok": "no"}));
    labelled["metadata"]["labels"] = json!({"checked": "1"});
    s.post(CMS, &labelled).await.assert_status(422, "Invalid");
    assert_eq!(s.post(CMS, &cm("unlabelled", json!({"ok": "no"}))).await.code, 201, "matchConditions false: not checked");
    let mut exempt = labelled.clone();
    exempt["metadata"]["name"] = json!("exempt");
    assert_eq!(s.post(CMS, &exempt).await.code, 201, "excluded by name");
    // An evaluation error under failurePolicy Fail denies, naming the expression.
    let mut no_data = cm("no-data", Value::Null);
    no_data["metadata"]["labels"] = json!({"checked": "1"});
    no_data.as_object_mut().unwrap().remove("data");
    let r = s.post(CMS, &no_data).await;
    r.assert_status(422, "Invalid");
    assert!(r.message().contains("denied request: expression 'object.data.ok == 'yes'' resulted in error: "), "{}", r.message());
}
