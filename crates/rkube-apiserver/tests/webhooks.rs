//! Admission webhooks through the HTTP API of a real in-process server,
//! calling a real HTTPS webhook server started by each test (rustls, its
//! own CA from rcgen, on 127.0.0.1): denials and their Status, JSON Patch
//! mutations and their order, `failurePolicy`, `timeoutSeconds`, dry run and
//! `sideEffects`, selectors, warnings, UPDATE's `oldObject`, `service`
//! references resolved through Endpoints, and `reinvocationPolicy`.

use crate::common;
use crate::webhook_support;

use std::time::{Duration, Instant};

use common::{configmap, TestServer};
use serde_json::{json, Value};
use webhook_support::{WebhookServer, MUTATED_LABEL};

const VALIDATING: &str = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations";
const MUTATING: &str = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations";
const CONFIGMAPS: &str = "/api/v1/namespaces/default/configmaps";

/// One webhook on CREATE and UPDATE of ConfigMaps, with `extra` merged in.
fn hook(name: &str, client_config: Value, extra: Value) -> Value {
    let mut w = json!({
        "name": name,
        "clientConfig": client_config,
        "rules": [{"operations": ["CREATE", "UPDATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]}],
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
    });
    if let (Some(m), Some(e)) = (w.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            m.insert(k.clone(), v.clone());
        }
    }
    w
}

fn url_config(server: &WebhookServer, path: &str) -> Value {
    json!({"url": server.url(path), "caBundle": server.ca_bundle()})
}

/// Creates a configuration at `collection` and waits until the watch cache
/// serves it (what admission reads); returns how long that took.
async fn install(s: &TestServer, collection: &str, name: &str, webhooks: Vec<Value>) -> Duration {
    let kind = if collection == VALIDATING { "ValidatingWebhookConfiguration" } else { "MutatingWebhookConfiguration" };
    let body = json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind, "metadata": {"name": name}, "webhooks": webhooks});
    let started = Instant::now();
    let r = s.post(collection, &body).await;
    assert_eq!(r.code, 201, "{}", r.text);
    let rv: i64 = r.rv().parse().unwrap_or(0);
    loop {
        let list = s.get(&format!("{collection}?resourceVersion=0")).await;
        let cached: i64 = list.rv().parse().unwrap_or(0);
        if cached >= rv {
            return started.elapsed();
        }
        assert!(started.elapsed() < Duration::from_secs(5), "configuration not cached within 5 s");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn validating_webhook_denial_is_upstreams_400_naming_the_webhook() {
    let s = TestServer::embedded().await;
    let wh = WebhookServer::start(&[]);
    let took = install(&s, VALIDATING, "deny", vec![hook("deny.example.com", url_config(&wh, "/deny-prefix"), json!({}))]).await;
    assert!(took < Duration::from_secs(1), "a new configuration applies within a second, took {took:?}");

    let r = s.post(CONFIGMAPS, &configmap("deny-me")).await;
    r.assert_status(400, "");
    assert_eq!(r.message(), "admission webhook \"deny.example.com\" denied the request: names starting with deny- are refused");
    assert_eq!(s.get(&format!("{CONFIGMAPS}/deny-me")).await.code, 404, "a denied object is not stored");

    let ok = s.post(CONFIGMAPS, &configmap("fine")).await;
    assert_eq!(ok.code, 201, "{}", ok.text);
    let seen = wh.requests("/deny-prefix");
    assert_eq!(seen.len(), 2);
    let req = &seen[1]["request"];
    assert_eq!(seen[1]["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(seen[1]["kind"], "AdmissionReview");
    assert!(req["uid"].as_str().is_some_and(|u| !u.is_empty()));
    assert_eq!(req["kind"], json!({"group": "", "version": "v1", "kind": "ConfigMap"}));
    assert_eq!(req["resource"], json!({"group": "", "version": "v1", "resource": "configmaps"}));
    assert_eq!(req["requestKind"], req["kind"]);
    assert_eq!(req["requestResource"], req["resource"]);
    assert_eq!(req["operation"], "CREATE");
    assert_eq!(req["name"], "fine");
    assert_eq!(req["namespace"], "default");
    assert_eq!(req["dryRun"], false);
    assert_eq!(req["object"]["data"], json!({"k": "v"}));
    assert!(req["object"]["metadata"]["uid"].is_string(), "validating webhooks see the object as it will be stored");
    assert_eq!(req["oldObject"], Value::Null);
    assert_eq!(req["options"]["kind"], "CreateOptions");
}

#[tokio::test]
async fn a_denial_keeps_the_webhooks_own_status_code_and_reason() {
    let s = TestServer::embedded().await;
    let wh = WebhookServer::start(&[]);
    install(&s, VALIDATING, "own-status", vec![hook("status.example.com", url_config(&wh, "/deny-status"), json!({}))]).await;
    let r = s.post(CONFIGMAPS, &configmap("any")).await;
    r.assert_status(422, "Invalid");
    assert_eq!(r.message(), "admission webhook \"status.example.com\" denied the request: custom denial");
}

#[tokio::test]
async fn mutating_webhook_patch_is_stored_and_seen_by_validating_webhooks() {
    let s = TestServer::embedded().await;
    let wh = WebhookServer::start(&[]);
    install(&s, MUTATING, "label", vec![hook("label.example.com", url_config(&wh, "/add-label"), json!({}))]).await;
    install(&s, VALIDATING, "watch", vec![hook("watch.example.com", url_config(&wh, "/allow"), json!({}))]).await;

    let r = s.post(CONFIGMAPS, &configmap("labelled")).await;
    assert_eq!(r.code, 201, "{}", r.text);
    assert_eq!(r.body["metadata"]["labels"][MUTATED_LABEL], "true");
    let stored = s.get(&format!("{CONFIGMAPS}/labelled")).await;
    assert_eq!(stored.body["metadata"]["labels"][MUTATED_LABEL], "true");
    let validated = wh.requests("/allow");
    assert_eq!(validated.len(), 1);
    assert_eq!(validated[0]["request"]["object"]["metadata"]["labels"][MUTATED_LABEL], "true", "mutation runs before validation");
    let mutated = wh.requests("/add-label");
    assert!(mutated[0]["request"]["object"]["metadata"].get("uid").is_none(), "mutating webhooks run before server-set metadata");
}

/// A create is refused as invalid only after the mutating webhooks ran: one
/// may make an invalid object valid (without any, the object is refused
/// before its managedFields are computed, with the same answer).
#[tokio::test]
async fn a_mutating_webhook_may_repair_an_invalid_object_before_it_is_validated() {
    let s = TestServer::embedded().await;
    let mut bad = configmap("repaired");
    bad["metadata"]["labels"] = json!({"not a key!": "x"});
    let refused = s.post(CONFIGMAPS, &bad).await;
    refused.assert_status(422, "Invalid");
    assert!(refused.message().contains("metadata.labels: Invalid value: \"not a key!\""), "{}", refused.message());

    let wh = WebhookServer::start(&[]);
    install(&s, MUTATING, "repair", vec![hook("repair.example.com", url_config(&wh, "/replace-labels"), json!({}))]).await;
    let r = s.post(CONFIGMAPS, &bad).await;
    assert_eq!(r.code, 201, "{}", r.text);
    assert_eq!(r.body["metadata"]["labels"], json!({MUTATED_LABEL: "true"}));
    // The client's fields were recorded before the webhook ran.
    assert_eq!(r.body["metadata"]["managedFields"][0]["fieldsV1"]["f:metadata"]["f:labels"]["f:not a key!"], json!({}));
}

#[tokio::test]
async fn failure_policy_fail_answers_500_and_ignore_lets_the_write_through() {
    let s = TestServer::embedded().await;
    let wh = WebhookServer::start(&[]);
    // A port nothing listens on: bind, read the port, close.
    let down = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).unwrap_or(1);
    let cc = json!({"url": format!("https://127.0.0.1:{down}/validate"), "caBundle": wh.ca_bundle()});
    install(&s, VALIDATING, "ignore", vec![hook("ignore.example.com", cc.clone(), json!({"failurePolicy": "Ignore"}))]).await;
    let r = s.post(CONFIGMAPS, &configmap("through")).await;
    assert_eq!(r.code, 201, "Ignore fails open: {}", r.text);

    install(&s, VALIDATING, "fail", vec![hook("fail.example.com", cc, json!({}))]).await;
    let r = s.post(CONFIGMAPS, &configmap("blocked")).await;
    r.assert_status(500, "InternalError");
    let prefix = format!(
        "Internal error occurred: failed calling webhook \"fail.example.com\": failed to call webhook: Post \"https://127.0.0.1:{down}/validate?timeout=10s\": "
    );
    assert!(r.message().starts_with(&prefix), "{}", r.message());
}

#[tokio::test]
async fn timeout_seconds_bounds_a_slow_webhook() {
    let s = TestServer::embedded().await;
    let wh = WebhookServer::start(&[]);
    install(&s, VALIDATING, "slow", vec![hook("slow.example.com", url_config(&wh, "/sleep"), json!({"timeoutSeconds": 1}))]).await;
    let started = Instant::now();
    let r = s.post(CONFIGMAPS, &configmap("late")).await;
    let took = started.elapsed();
    r.assert_status(500, "InternalError");
    let expected = format!(
        "Internal error occurred: failed calling webhook \"slow.example.com\": failed to call webhook: Post \"{}?timeout=1s\": context deadline exceeded",
        wh.url("/sleep")
    );
    assert_eq!(r.message(), expected);
    assert!(took >= Duration::from_secs(1) && took < Duration::from_millis(2500), "answered after {took:?}");
}

#[tokio::test]
async fn dry_run_calls_side_effect_free_webhooks_with_dry_run_true_and_refuses_others() {
    let s = TestServer::embedded().await;
    let wh = WebhookServer::start(&[]);
    install(&s, VALIDATING, "pure", vec![hook("pure.example.com", url_config(&wh, "/pure"), json!({"sideEffects": "None"}))]).await;
    let r = s.post(&format!("{CONFIGMAPS}?dryRun=All"), &configmap("dry")).await;
    assert_eq!(r.code, 201, "{}", r.text);
    let seen = wh.requests("/pure");
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0]["request"]["dryRun"], true);
    assert_eq!(seen[0]["request"]["options"]["dryRun"], json!(["All"]));

    // admissionregistration/v1 refuses sideEffects Some; a configuration
    // stored before (v1beta1 allowed it) is refused for dry runs.
    let some = hook("some.example.com", url_config(&wh, "/some"), json!({"sideEffects": "Some"}));
    let body = json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration", "metadata": {"name": "legacy"}, "webhooks": [some.clone()]});
    let refused = s.post(VALIDATING, &body).await;
    refused.assert_status(422, "Invalid");
    assert!(refused.message().contains("webhooks[0].sideEffects: Unsupported value: \"Some\""), "{}", refused.message());
    let mut stored = body.clone();
    stored["metadata"]["uid"] = json!("0b6c7a4e-1111-4222-8333-444455556666");
    stored["metadata"]["creationTimestamp"] = json!("2024-01-01T00:00:00Z");
    stored["webhooks"][0]["failurePolicy"] = json!("Fail");
    let kv = s
        .storage
        .create("/registry/validatingwebhookconfigurations/legacy", stored.to_string().into_bytes().into())
        .await
        .expect("store the legacy configuration");
    loop {
        let list = s.get(&format!("{VALIDATING}?resourceVersion=0")).await;
        if list.rv().parse::<i64>().unwrap_or(0) >= kv.mod_revision {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let r = s.post(&format!("{CONFIGMAPS}?dryRun=All"), &configmap("dry2")).await;
    r.assert_status(400, "BadRequest");
    assert_eq!(r.message(), "admission webhook \"some.example.com\" does not support dry run");
    assert!(wh.requests("/some").is_empty(), "not called for the dry run");
    let wet = s.post(CONFIGMAPS, &configmap("wet")).await;
    assert_eq!(wet.code, 201, "{}", wet.text);
    assert_eq!(wh.requests("/some").len(), 1);
}

#[tokio::test]
async fn namespace_and_object_selectors_choose_the_requests_sent() {
    let s = TestServer::embedded().await;
    let wh = WebhookServer::start(&[]);
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-x", "labels": {"team": "x"}}});
    assert_eq!(s.post("/api/v1/namespaces", &ns).await.code, 201);
    install(&s, VALIDATING, "ns", vec![hook("ns.example.com", url_config(&wh, "/ns"), json!({"namespaceSelector": {"matchLabels": {"team": "x"}}}))]).await;
    install(&s, VALIDATING, "obj", vec![hook("obj.example.com", url_config(&wh, "/obj"), json!({"objectSelector": {"matchExpressions": [{"key": "watched", "operator": "Exists"}]}}))]).await;

    assert_eq!(s.post(CONFIGMAPS, &configmap("plain")).await.code, 201);
    assert_eq!(s.post("/api/v1/namespaces/team-x/configmaps", &configmap("in-x")).await.code, 201);
    let mut labelled = configmap("labelled");
    labelled["metadata"]["labels"] = json!({"watched": "yes"});
    assert_eq!(s.post(CONFIGMAPS, &labelled).await.code, 201);

    let names = |path: &str| -> Vec<String> {
        wh.requests(path).iter().map(|r| r["request"]["name"].as_str().unwrap_or("").to_string()).collect()
    };
    assert_eq!(names("/ns"), vec!["in-x"]);
    assert_eq!(names("/obj"), vec!["labelled"]);
}

#[tokio::test]
async fn webhook_warnings_are_warning_headers() {
    let s = TestServer::embedded().await;
    let wh = WebhookServer::start(&[]);
    install(&s, VALIDATING, "warn", vec![hook("warn.example.com", url_config(&wh, "/warn"), json!({}))]).await;
    let r = s.post(CONFIGMAPS, &configmap("warned")).await;
    assert_eq!(r.code, 201, "{}", r.text);
    let warnings: Vec<&str> = r.headers.get_all("warning").iter().filter_map(|v| v.to_str().ok()).collect();
    assert_eq!(warnings, vec!["299 - \"configmaps here are watched\""]);
}

/// `matchConditions` are CEL over `object`, `oldObject` and `request`: a
/// false one skips the webhook, true ones call it; one that cannot be
/// evaluated fails the request under `failurePolicy: Fail` (500) and skips
/// the webhook under `Ignore`; one rkube's CEL cannot evaluate (the
/// `authorizer`) counts as matching, with a warning.
#[tokio::test]
async fn match_conditions_choose_the_requests_a_webhook_sees() {
    let s = TestServer::embedded().await;
    let wh = WebhookServer::start(&[]);
    let conditions = json!({"matchConditions": [
        {"name": "labelled", "expression": "has(object.metadata.labels) && object.metadata.labels['send'] == 'yes'"},
        {"name": "creates", "expression": "request.operation == 'CREATE'"},
    ]});
    install(&s, VALIDATING, "cel", vec![hook("cel.example.com", url_config(&wh, "/allow"), conditions)]).await;
    let mut sent = configmap("sent");
    sent["metadata"]["labels"] = json!({"send": "yes"});
    assert_eq!(s.post(CONFIGMAPS, &sent).await.code, 201);
    assert_eq!(s.post(CONFIGMAPS, &configmap("not-sent")).await.code, 201);
    let seen: Vec<String> = wh.requests("/allow").iter().filter_map(|r| r["request"]["name"].as_str().map(String::from)).collect();
    assert_eq!(seen, ["sent"]);

    let failing = json!({"failurePolicy": "Fail", "matchConditions": [{"name": "reads-spec", "expression": "object.spec.x == 1"}]});
    install(&s, VALIDATING, "cel-fail", vec![hook("fail.example.com", url_config(&wh, "/allow"), failing)]).await;
    let r = s.post(CONFIGMAPS, &configmap("errors")).await;
    r.assert_status(500, "InternalError");
    assert_eq!(
        r.message(),
        "Internal error occurred: failed calling webhook \"fail.example.com\": failed to evaluate matchCondition \"reads-spec\": no such key: spec"
    );
}

#[tokio::test]
async fn match_conditions_rkube_cannot_evaluate_match_with_a_warning() {
    let s = TestServer::embedded().await;
    let wh = WebhookServer::start(&[]);
    let conditions = json!({"matchConditions": [{"name": "authz", "expression": "authorizer.group('').resource('pods').check('get').allowed()"}]});
    install(&s, VALIDATING, "cel", vec![hook("cel.example.com", url_config(&wh, "/allow"), conditions)]).await;
    let r = s.post(CONFIGMAPS, &configmap("with-conditions")).await;
    assert_eq!(r.code, 201, "{}", r.text);
    let warnings: Vec<&str> = r.headers.get_all("warning").iter().filter_map(|v| v.to_str().ok()).collect();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].contains("webhook cel.example.com matchCondition \\\"authz\\\" uses CEL rkube cannot evaluate"), "{warnings:?}");
    assert_eq!(wh.requests("/allow").len(), 1);
}

#[tokio::test]
async fn updates_send_the_old_object_and_can_be_denied() {
    let s = TestServer::embedded().await;
    let wh = WebhookServer::start(&[]);
    assert_eq!(s.post(CONFIGMAPS, &configmap("deny-later")).await.code, 201);
    install(&s, VALIDATING, "deny", vec![hook("deny.example.com", url_config(&wh, "/deny-prefix"), json!({}))]).await;
    let r = s.patch(&format!("{CONFIGMAPS}/deny-later"), "application/merge-patch+json", r#"{"data":{"k":"w"}}"#).await;
    r.assert_status(400, "");
    let seen = wh.requests("/deny-prefix");
    let req = &seen[0]["request"];
    assert_eq!(req["operation"], "UPDATE");
    assert_eq!(req["oldObject"]["data"], json!({"k": "v"}));
    assert_eq!(req["object"]["data"], json!({"k": "w"}));
    assert_eq!(req["options"]["kind"], "PatchOptions");
    assert_eq!(s.get(&format!("{CONFIGMAPS}/deny-later")).await.body["data"], json!({"k": "v"}));
}

#[tokio::test]
async fn service_references_resolve_through_the_services_endpoints() {
    let s = TestServer::embedded().await;
    let wh = WebhookServer::start(&["hooks.default.svc"]);
    let svc = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "hooks"},
        "spec": {"ports": [{"name": "https", "port": 443, "targetPort": 8443}]}});
    assert_eq!(s.post("/api/v1/namespaces/default/services", &svc).await.code, 201);
    let ep = json!({"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "hooks"},
        "subsets": [{"addresses": [{"ip": "127.0.0.1"}], "ports": [{"name": "https", "port": wh.port}]}]});
    let r = s.post("/api/v1/namespaces/default/endpoints", &ep).await;
    assert_eq!(r.code, 201, "{}", r.text);
    let cc = json!({"service": {"namespace": "default", "name": "hooks", "path": "/deny-prefix"}, "caBundle": wh.ca_bundle()});
    install(&s, VALIDATING, "svc", vec![hook("svc.example.com", cc, json!({}))]).await;
    let r = s.post(CONFIGMAPS, &configmap("deny-svc")).await;
    assert_eq!(r.message(), "admission webhook \"svc.example.com\" denied the request: names starting with deny- are refused");
}

#[tokio::test]
async fn if_needed_webhooks_are_called_again_after_a_later_mutation() {
    let s = TestServer::embedded().await;
    let wh = WebhookServer::start(&[]);
    // Configurations run by name: "a-observe" first, then "b-label".
    install(&s, MUTATING, "a-observe", vec![hook("observe.example.com", url_config(&wh, "/observe"), json!({"reinvocationPolicy": "IfNeeded"}))]).await;
    install(&s, MUTATING, "b-label", vec![hook("label.example.com", url_config(&wh, "/add-label"), json!({}))]).await;
    assert_eq!(s.post(CONFIGMAPS, &configmap("again")).await.code, 201);
    let observed = wh.requests("/observe");
    assert_eq!(observed.len(), 2, "called once more after the label was added");
    assert!(observed[0]["request"]["object"]["metadata"].get("labels").is_none());
    assert_eq!(observed[1]["request"]["object"]["metadata"]["labels"][MUTATED_LABEL], "true");
    assert_eq!(wh.requests("/add-label").len(), 1, "Never: not reinvoked");
}

#[tokio::test]
async fn invalid_configurations_are_refused_with_upstreams_422() {
    let s = TestServer::embedded().await;
    let bad = json!({
        "name": "short",
        "clientConfig": {"url": "http://127.0.0.1:9/x?y=1"},
        "rules": [{"operations": ["GET"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"], "scope": "Everywhere"}],
        "failurePolicy": "Sometimes",
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
    });
    let dup = hook("twice.example.com", json!({"url": "https://127.0.0.1:9/"}), json!({}));
    let body = json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "bad"}, "webhooks": [bad, dup.clone(), dup]});
    let r = s.post(VALIDATING, &body).await;
    r.assert_status(422, "Invalid");
    let causes: Vec<String> = r.body["details"]["causes"]
        .as_array()
        .map(|c| c.iter().map(|c| format!("{}: {}", c["field"].as_str().unwrap_or(""), c["message"].as_str().unwrap_or(""))).collect())
        .unwrap_or_default();
    for expected in [
        "webhooks[0].name: Invalid value: \"short\": should be a domain with at least three segments separated by dots",
        "webhooks[0].failurePolicy: Unsupported value: \"Sometimes\": supported values: \"Fail\", \"Ignore\"",
        "webhooks[0].rules[0].operations[0]: Unsupported value: \"GET\": supported values: \"*\", \"CONNECT\", \"CREATE\", \"DELETE\", \"UPDATE\"",
        "webhooks[0].rules[0].scope: Unsupported value: \"Everywhere\": supported values: \"*\", \"Cluster\", \"Namespaced\"",
        "webhooks[0].clientConfig.url: Invalid value: \"http\": 'https' is the only allowed URL scheme; desired format: https://host[/path]",
        "webhooks[0].clientConfig.url: Invalid value: \"y=1\": query parameters are not permitted in the URL",
        "webhooks[2].name: Duplicate value: \"twice.example.com\"",
    ] {
        assert!(causes.iter().any(|c| c == expected), "missing {expected:?} in {causes:#?}");
    }
    let svc = hook("svc.example.com", json!({"service": {"namespace": "default", "name": "hooks", "path": "/v"}}), json!({}));
    let ok = s.post(MUTATING, &json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "defaults"}, "webhooks": [svc]})).await;
    assert_eq!(ok.code, 201, "{}", ok.text);
    let w = &ok.body["webhooks"][0];
    assert_eq!(w["clientConfig"]["service"]["port"], 443);
    assert_eq!((w["failurePolicy"].clone(), w["timeoutSeconds"].clone(), w["reinvocationPolicy"].clone()), (json!("Fail"), json!(10), json!("Never")));
}

#[tokio::test]
async fn custom_resources_are_admitted_by_webhooks() {
    let s = TestServer::embedded().await;
    let wh = WebhookServer::start(&[]);
    let group = "webhooks.admission.example.com";
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("gadgets.{group}")},
        "spec": {"group": group, "scope": "Namespaced", "names": {"plural": "gadgets", "kind": "Gadget"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}
    });
    let r = s.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", &crd).await;
    assert_eq!(r.code, 201, "{}", r.text);
    let path = format!("/apis/{group}/v1/namespaces/default/gadgets");
    let deadline = Instant::now() + Duration::from_secs(5);
    while s.get(&path).await.code != 200 {
        assert!(Instant::now() < deadline, "gadgets not served within 5 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let rules = json!([{"operations": ["CREATE"], "apiGroups": [group], "apiVersions": ["*"], "resources": ["gadgets"]}]);
    install(&s, MUTATING, "gadget-label", vec![hook("label.example.com", url_config(&wh, "/add-label"), json!({"rules": rules}))]).await;
    install(&s, VALIDATING, "gadget-deny", vec![hook("deny.example.com", url_config(&wh, "/deny-prefix"), json!({"rules": rules}))]).await;
    let gadget = |name: &str| json!({"apiVersion": format!("{group}/v1"), "kind": "Gadget", "metadata": {"name": name}});
    let denied = s.post(&path, &gadget("deny-gadget")).await;
    denied.assert_status(400, "");
    assert_eq!(denied.message(), "admission webhook \"deny.example.com\" denied the request: names starting with deny- are refused");
    let ok = s.post(&path, &gadget("fine")).await;
    assert_eq!(ok.code, 201, "{}", ok.text);
    assert_eq!(ok.body["metadata"]["labels"][MUTATED_LABEL], "true");
    let seen = wh.requests("/deny-prefix");
    assert_eq!(seen[1]["request"]["kind"], json!({"group": group, "version": "v1", "kind": "Gadget"}));
    assert_eq!(seen[1]["request"]["resource"], json!({"group": group, "version": "v1", "resource": "gadgets"}));
}

#[tokio::test]
async fn deletes_are_validated_with_the_stored_object_as_old_object_and_can_be_denied() {
    let s = TestServer::embedded().await;
    let wh = WebhookServer::start(&[]);
    assert_eq!(s.post(CONFIGMAPS, &configmap("deny-keep")).await.code, 201);
    assert_eq!(s.post(CONFIGMAPS, &configmap("drop")).await.code, 201);
    let rules = json!([{"operations": ["DELETE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]}]);
    install(&s, VALIDATING, "guard", vec![hook("guard.example.com", url_config(&wh, "/deny-prefix"), json!({"rules": rules}))]).await;
    let refused = s.delete(&format!("{CONFIGMAPS}/deny-keep"), None).await;
    refused.assert_status(400, "");
    assert_eq!(refused.message(), "admission webhook \"guard.example.com\" denied the request: names starting with deny- are refused");
    assert_eq!(s.get(&format!("{CONFIGMAPS}/deny-keep")).await.code, 200, "a denied delete keeps the object");
    let r = s.delete(&format!("{CONFIGMAPS}/drop"), None).await;
    assert_eq!(r.code, 200, "{}", r.text);
    let seen = wh.requests("/deny-prefix");
    assert_eq!(seen.len(), 2);
    let req = &seen[1]["request"];
    assert_eq!(req["operation"], "DELETE");
    assert_eq!(req["name"], "drop");
    assert_eq!(req["namespace"], "default");
    assert_eq!(req["object"], Value::Null);
    assert_eq!(req["oldObject"]["metadata"]["name"], "drop");
    assert_eq!(req["options"]["kind"], "DeleteOptions");
}
