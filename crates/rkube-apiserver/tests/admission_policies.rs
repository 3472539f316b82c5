//! ValidatingAdmissionPolicies and their bindings, evaluated on writes:
//! denials with upstream's message, code and reason, `Warn` as a `Warning`
//! header, variables, `messageExpression`, parameters (by name and by
//! label selector), match constraints, `failurePolicy`, and
//! `auditAnnotations` in the audit log.

use crate::common;
use crate::log_support;

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

/// A policy sees a created object whole, its managedFields included (the
/// create path keeps them apart only while nothing reads them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_reads_the_managed_fields_of_an_object_being_created() {
    let s = TestServer::embedded().await;
    let spec = json!({"matchConstraints": configmaps_rule(), "validations": [{
        "expression": "has(object.metadata.managedFields) && object.metadata.managedFields[0].manager == 'creator' && has(object.metadata.managedFields[0].fieldsV1)",
        "message": "no managedFields"}]});
    install(&s, "managed", spec, json!({"validationActions": ["Deny"]})).await;
    let r = s.post(&format!("{CMS}?fieldManager=creator"), &cm("seen", json!({"a": "1"}))).await;
    assert_eq!(r.code, 201, "{}", r.text);
    let apply = cm("applied", json!({"a": "1"})).to_string();
    let r = s.patch(&format!("{CMS}/applied?fieldManager=creator"), "application/apply-patch+yaml", &apply).await;
    assert_eq!(r.code, 201, "{}", r.text);
    let r = s.post(&format!("{CMS}?fieldManager=other"), &cm("other", json!({"a": "1"}))).await;
    r.assert_status(422, "Invalid");
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
    assert_eq!(warnings, ["299 - \"Validation failed for ValidatingAdmissionPolicy 'one-key' with binding 'one-key-binding': has 2 keys\""]);
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
    assert!(
        r.message().ends_with("denied request: failed to configure binding: no params found for policy binding with `Deny` parameterNotFoundAction"),
        "{}",
        r.message()
    );
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

/// The `Warning` header values of `r`.
fn warnings_of(r: &common::Resp) -> Vec<String> {
    r.headers.get_all("warning").iter().filter_map(|v| v.to_str().ok()).map(str::to_string).collect()
}

/// `paramRef.selector`: the policy is applied once per ConfigMap the
/// selector matches (in the request's namespace), none matching is allowed
/// with `parameterNotFoundAction: Allow`, and is upstream's configuration
/// error with `Deny` (denied under `failurePolicy: Fail`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_param_selector_applies_the_policy_once_per_matching_param() {
    let s = TestServer::embedded().await;
    let on = |resource: &str| json!({"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": [resource]}]});
    let spec = json!({
        "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
        "matchConstraints": on("secrets"),
        "validations": [{"expression": "!has(object.data) || size(object.data) <= int(params.data.max)",
                         "messageExpression": "'more than ' + params.data.max + ' keys'"}],
    });
    let selector = json!({"matchLabels": {"role": "limit"}});
    install(&s, "selected", spec, json!({"validationActions": ["Warn"], "paramRef": {"selector": selector, "parameterNotFoundAction": "Allow"}})).await;
    let deny_spec = json!({
        "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
        "matchConstraints": on("serviceaccounts"),
        "validations": [{"expression": "true"}],
        "failurePolicy": "Fail",
    });
    let none = json!({"matchLabels": {"role": "nothing-has-this"}});
    install(&s, "required", deny_spec, json!({"validationActions": ["Deny"], "paramRef": {"selector": none, "parameterNotFoundAction": "Deny"}})).await;

    let secrets = "/api/v1/namespaces/default/secrets";
    let secret = |name: &str, keys: usize| {
        let data: serde_json::Map<String, Value> = (0..keys).map(|i| (format!("k{i}"), json!("MQ=="))).collect();
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "data": data})
    };
    let r = s.post(secrets, &secret("no-params-yet", 4)).await;
    assert_eq!(r.code, 201, "no parameter matches and the binding allows that: {}", r.text);
    assert!(warnings_of(&r).is_empty(), "{:?}", warnings_of(&r));

    for (name, max, labelled) in [("a-limit", "3", true), ("b-limit", "1", true), ("unlabelled", "0", false)] {
        let mut c = cm(name, json!({"max": max}));
        if labelled {
            c["metadata"]["labels"] = json!({"role": "limit"});
        }
        assert_eq!(s.post(CMS, &c).await.code, 201);
    }
    let warning = |n: &str| format!("299 - \"Validation failed for ValidatingAdmissionPolicy 'selected' with binding 'selected-binding': more than {n} keys\"");
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut n = 0;
    loop {
        n += 1;
        let r = s.post(secrets, &secret(&format!("four-keys-{n}"), 4)).await;
        assert_eq!(r.code, 201, "{}", r.text);
        if warnings_of(&r) == [warning("3"), warning("1")] {
            break;
        }
        assert!(Instant::now() < deadline, "one warning per matching parameter never came: {:?}", warnings_of(&r));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let r = s.post(secrets, &secret("two-keys", 2)).await;
    assert_eq!(warnings_of(&r), [warning("1")], "only the parameter with max 1 fails");

    let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "robot"}});
    let r = s.post("/api/v1/namespaces/default/serviceaccounts", &sa).await;
    r.assert_status(422, "Invalid");
    assert_eq!(
        r.message(),
        "serviceaccounts \"robot\" is forbidden: ValidatingAdmissionPolicy 'required' with binding 'required-binding' denied request: \
         failed to configure binding: no params found for policy binding with `Deny` parameterNotFoundAction"
    );
}

/// A server like `rkube apiserver --audit-log-path --audit-policy-file`
/// (policy level `Metadata`), over plain HTTP with anonymous requests
/// allowed; returns its base URL, its filter chain (to flush the log) and
/// the stop sender.
async fn audited_server(dir: &std::path::Path) -> (String, std::sync::Arc<rkube_apiserver::filters::FilterChain>, tokio::sync::oneshot::Sender<()>) {
    use rkube_apiserver::filters::{self, FilterArgs, FilterChain};
    let storage: std::sync::Arc<dyn rkube_storage::Storage> =
        std::sync::Arc::new(rkube_storage::embedded::EmbeddedStorage::open(&dir.join("data")).expect("open store"));
    let st = rkube_apiserver::server::default_state(storage);
    rkube_apiserver::bootstrap(&st).await.expect("bootstrap");
    let policy = dir.join("audit-policy.yaml");
    std::fs::write(&policy, "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n").expect("write audit policy");
    let args = FilterArgs {
        audit_log_path: Some(dir.join("audit.log").display().to_string()),
        audit_policy_file: Some(policy),
        ..FilterArgs::default()
    };
    let metrics = std::sync::Arc::new(rkube_apiserver::filters::metrics::ApiserverMetrics::new());
    let chain = std::sync::Arc::new(FilterChain::build(args.load().expect("filter args"), None, metrics).expect("filter chain"));
    let router = filters::apply(rkube_apiserver::router(st), &chain);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(filters::serve(listener, router, None, async move {
        let _ = rx.await;
    }));
    (base, chain, tx)
}

/// `auditAnnotations`: each `valueExpression`'s string is added to the
/// request's audit event as `<policy name>/<key>` (a `null` adds nothing),
/// also for a request the policy denies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_annotations_reach_the_audit_log_as_policy_slash_key() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (base, chain, stop) = audited_server(dir.path()).await;
    let client = common::http_client(Some(Duration::from_secs(30)));
    let post = |path: &str, body: Value| {
        let req = client.post(format!("{base}{path}")).json(&body);
        async move {
            let r = req.send().await.expect("request");
            let code = r.status().as_u16();
            (code, r.json::<Value>().await.unwrap_or(Value::Null))
        }
    };
    let spec = json!({
        "matchConstraints": configmaps_rule(),
        "validations": [{"expression": "object.metadata.name != 'refused'", "message": "refused"}],
        "auditAnnotations": [{"key": "keys", "valueExpression": "string(size(object.data))"},
                             {"key": "nothing", "valueExpression": "null"}],
    });
    let policy = json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy", "metadata": {"name": "audited"}, "spec": spec});
    assert_eq!(post(POLICIES, policy).await.0, 201);
    let binding = json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
                         "metadata": {"name": "audited-binding"}, "spec": {"policyName": "audited", "validationActions": ["Deny"]}});
    assert_eq!(post(BINDINGS, binding).await.0, 201);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let (code, body) = post(CMS, cm("refused", json!({"a": "1"}))).await;
        if code == 422 {
            assert!(body["message"].as_str().is_some_and(|m| m.ends_with("denied request: refused")), "{body}");
            break;
        }
        assert!(Instant::now() < deadline, "the policy never applied: {code} {body}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(post(CMS, cm("two", json!({"a": "1", "b": "2"}))).await.0, 201);
    chain.shutdown().await;
    let _ = stop.send(());
    let events = log_support::read_audit(&dir.path().join("audit.log"));
    let creates: Vec<&Value> = events
        .iter()
        .filter(|e| e["verb"] == "create" && e["stage"] == "ResponseComplete" && e["objectRef"]["resource"] == "configmaps")
        .collect();
    // The last create answered `code`: the denied "refused" (422), the allowed "two" (201).
    let of = |code: u16| {
        creates.iter().rev().find(|e| e["responseStatus"]["code"] == code).map(|e| e["annotations"].clone()).unwrap_or(Value::Null)
    };
    let denied = of(422);
    assert_eq!(denied["audited/keys"], "1", "the denied create: {denied}");
    let allowed = of(201);
    assert_eq!(allowed["audited/keys"], "2", "the allowed create: {allowed}");
    assert!(allowed.get("audited/nothing").is_none(), "a null value adds nothing: {allowed}");
}

/// A policy whose expressions do not compile is refused when written,
/// 422 Invalid naming each expression's field with upstream's
/// `compilation failed: ...` detail; `params` exists only with a
/// `paramKind`, `variables` only with variables (each seeing those before it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policies_whose_expressions_do_not_compile_are_refused() {
    let s = TestServer::embedded().await;
    let policy = |spec: Value| {
        json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
               "metadata": {"name": "broken"}, "spec": spec})
    };
    let spec = json!({"matchConstraints": configmaps_rule(),
        "matchConditions": [{"name": "named", "expression": "  has(object.metadata.name) &&  "}],
        "variables": [{"name": "keys", "expression": "variables.later.size()"}, {"name": "later", "expression": "object.data"}],
        "validations": [
            {"expression": "params.max > 1"},
            {"expression": "variables.keys > 0", "messageExpression": "'denied by ' + authorizer.path('/').check('get').reason()"},
        ],
        "auditAnnotations": [{"key": "k", "valueExpression": "object.data.frobnicate()"}]});
    let r = s.post(POLICIES, &policy(spec)).await;
    r.assert_status(422, "Invalid");
    let causes = r.body["details"]["causes"].as_array().unwrap();
    let fields: Vec<&str> = causes.iter().filter_map(|c| c["field"].as_str()).collect();
    assert_eq!(
        fields,
        [
            "spec.matchConditions[0].expression",
            "spec.variables[0].expression",
            "spec.validations[0].expression",
            "spec.validations[1].messageExpression",
            "spec.auditAnnotations[0].valueExpression",
        ]
    );
    let message = |i: usize| causes[i]["message"].as_str().unwrap_or("");
    assert_eq!(
        message(0),
        "Invalid value: \"has(object.metadata.name) &&\": compilation failed: ERROR: <input>:1:29: Syntax error: mismatched input '<EOF>' expecting {'[', '{', '(', '.', '-', '!', 'true', 'false', 'null', NUM_FLOAT, NUM_INT, NUM_UINT, STRING, BYTES, IDENTIFIER}\n | has(object.metadata.name) &&\n | ............................^"
    );
    assert_eq!(
        message(1),
        "Invalid value: \"variables.later.size()\": compilation failed: ERROR: <input>:1:10: undefined field 'later'\n | variables.later.size()\n | .........^"
    );
    assert_eq!(
        message(2),
        "Invalid value: \"params.max > 1\": compilation failed: ERROR: <input>:1:1: undeclared reference to 'params' (in container '')\n | params.max > 1\n | ^"
    );
    assert!(message(3).contains("undeclared reference to 'authorizer' (in container '')"), "{}", message(3));
    assert!(message(4).contains("undeclared reference to 'frobnicate' (in container '')"), "{}", message(4));
    assert!(
        r.message().starts_with("ValidatingAdmissionPolicy.admissionregistration.k8s.io \"broken\" is invalid: [spec.matchConditions[0].expression: "),
        "{}",
        r.message()
    );

    // The same expressions, declared as upstream declares them, are accepted.
    let spec = json!({"matchConstraints": configmaps_rule(), "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
        "matchConditions": [{"name": "named", "expression": "has(object.metadata.name)"}],
        "variables": [{"name": "later", "expression": "object.data"}, {"name": "keys", "expression": "variables.later.size()"}],
        "validations": [{"expression": "int(params.data.max) > variables.keys", "messageExpression": "'too many: ' + string(variables.keys)"}],
        "auditAnnotations": [{"key": "k", "valueExpression": "string(variables.keys)"}]});
    let r = s.post(POLICIES, &policy(spec)).await;
    assert_eq!(r.code, 201, "{}", r.text);
}

/// The `authorizer` variable asks the server's authorizer (here
/// AlwaysAllow): checks of the requester, of the request's own resource
/// (`authorizer.requestResource`) and of a ServiceAccount decide the
/// validations, instead of being skipped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_authorizer_variable_asks_the_servers_authorizer() {
    let s = TestServer::embedded().await;
    let spec = json!({"matchConstraints": configmaps_rule(),
        "variables": [{"name": "mayListSecrets",
                       "expression": "authorizer.group('').resource('secrets').namespace(object.metadata.namespace).check('list').allowed()"}],
        "validations": [
            {"expression": "authorizer.requestResource.check('create').allowed() && authorizer.serviceAccount('default', 'builder').path('/healthz').check('get').allowed()"},
            {"expression": "!variables.mayListSecrets || !has(object.data) || !('password' in object.data)",
             "messageExpression": "'whoever may list secrets may not keep a password in a ConfigMap: ' + object.metadata.name"},
        ]});
    install(&s, "authz", spec, json!({"validationActions": ["Deny"]})).await;
    let r = s.post(CMS, &cm("plain", json!({"a": "1"}))).await;
    assert_eq!(r.code, 201, "{}", r.text);
    assert!(warnings_of(&r).is_empty(), "{:?}", warnings_of(&r));
    let r = s.post(CMS, &cm("leaky", json!({"password": "x"}))).await;
    r.assert_status(422, "Invalid");
    assert_eq!(
        r.message(),
        "configmaps \"leaky\" is forbidden: ValidatingAdmissionPolicy 'authz' with binding 'authz-binding' denied request: whoever may list secrets may not keep a password in a ConfigMap: leaky"
    );
}
