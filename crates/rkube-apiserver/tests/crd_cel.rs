//! `x-kubernetes-validations` rules calling Kubernetes' CEL libraries
//! (quantity, url, regex, lists), and the cost limit of rule evaluation,
//! through the HTTP API of a real in-process server.
//!
//! Every test uses its own API group: the resource table is process-global.

use crate::common;

use std::time::{Duration, Instant};

use common::TestServer;
use serde_json::{json, Value};

const CRDS: &str = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";

/// A namespaced `Gadget` kind of `group` whose `spec` has `rules` and the
/// properties `memory`, `endpoint`, `version` (strings), `tags` (strings)
/// and `l` (at most 100 integers).
fn gadget_crd(group: &str, rules: Value) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("gadgets.{group}")},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": "gadgets", "kind": "Gadget"},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "x-kubernetes-validations": rules, "properties": {
                        "memory": {"type": "string"},
                        "endpoint": {"type": "string"},
                        "version": {"type": "string"},
                        "tags": {"type": "array", "items": {"type": "string"}},
                        "l": {"type": "array", "maxItems": 100, "items": {"type": "integer"}}
                    }}
                }}}
            }]
        }
    })
}

fn gadget(group: &str, name: &str, spec: Value) -> Value {
    json!({"apiVersion": format!("{group}/v1"), "kind": "Gadget", "metadata": {"name": name}, "spec": spec})
}

/// Creates the CRD, checks it drew no warning, and waits until its
/// resources are served; gives their collection path.
async fn serve(s: &TestServer, group: &str, rules: Value) -> String {
    let r = s.post(CRDS, &gadget_crd(group, rules)).await;
    assert_eq!(r.code, 201, "{}", r.text);
    let warnings: Vec<&str> = r.headers.get_all("warning").iter().filter_map(|v| v.to_str().ok()).collect();
    assert!(warnings.is_empty(), "every rule is enforced: {warnings:?}");
    let collection = format!("/apis/{group}/v1/namespaces/default/gadgets");
    let deadline = Instant::now() + Duration::from_secs(5);
    while s.get(&collection).await.code != 200 {
        assert!(Instant::now() < deadline, "{collection} not served within 5 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    collection
}

/// Rules using the quantity, url, regex and list libraries are enforced:
/// an object breaking one is a 422 naming `spec` and the rule's message (a
/// rule failing to evaluate, upstream's `<error> evaluating rule: <rule>`),
/// and an object keeping them all is created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rules_calling_kubernetes_cel_libraries_refuse_bad_custom_resources() {
    let s = TestServer::embedded().await;
    let g = "cellib.example.com";
    let gadgets = serve(
        &s,
        g,
        json!([
            {"rule": "quantity(self.memory).isLessThan(quantity('1Gi'))", "message": "memory must be below 1Gi"},
            {"rule": "isURL(self.endpoint) && url(self.endpoint).getScheme() == 'https'", "message": "endpoint must be an https URL"},
            {"rule": "self.version.findAll('[0-9]+').size() == 3", "message": "version must have three numbers"},
            {"rule": "self.tags.isSorted() && self.l.sum() <= 10", "message": "tags must be sorted and l sum to at most 10"}
        ]),
    )
    .await;
    let good = json!({"memory": "512Mi", "endpoint": "https://example.com/hook", "version": "v1.2.3", "tags": ["a", "b"], "l": [1, 2]});
    let created = s.post(&gadgets, &gadget(g, "good", good.clone())).await;
    assert_eq!(created.code, 201, "{}", created.text);

    let cases = [
        ("memory", json!("2Gi"), "memory must be below 1Gi"),
        ("endpoint", json!("http://example.com/hook"), "endpoint must be an https URL"),
        ("endpoint", json!("not a url"), "endpoint must be an https URL"),
        ("version", json!("v1.2"), "version must have three numbers"),
        ("tags", json!(["b", "a"]), "tags must be sorted and l sum to at most 10"),
        ("l", json!([5, 6]), "tags must be sorted and l sum to at most 10"),
        (
            "memory",
            json!("lots"),
            "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$' evaluating rule: memory must be below 1Gi",
        ),
    ];
    for (i, (field, bad, message)) in cases.into_iter().enumerate() {
        let mut spec = good.clone();
        spec[field] = bad.clone();
        let name = format!("bad{i}");
        let r = s.post(&gadgets, &gadget(g, &name, spec)).await;
        r.assert_status(422, "Invalid");
        assert_eq!(
            r.message(),
            format!("Gadget.{g} \"{name}\" is invalid: spec: Invalid value: \"object\": {message}"),
            "{field} = {bad}"
        );
        assert_eq!(r.body["details"]["causes"][0]["field"], "spec");
    }
}

/// A rule whose work grows with the cube of a list is cancelled by the
/// per-call cost limit with upstream's message, promptly, and no rule runs
/// after it; the same rule over a short list passes. (Its estimate over
/// 100 items, 3 * 10^6, is under the static limit, as upstream's.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expensive_rule_is_cancelled_by_the_cost_limit() {
    let s = TestServer::embedded().await;
    let g = "celcost.example.com";
    let rule = "self.l.all(x, self.l.all(y, self.l.all(z, x == y)))";
    let gadgets = serve(&s, g, json!([{"rule": rule}, {"rule": "self.l.size() < 3", "message": "short"}])).await;

    let started = Instant::now();
    // Equal elements: no all() ends early (10^6 iterations of the innermost step).
    let r = s.post(&gadgets, &gadget(g, "big", json!({"l": vec![0; 100]}))).await;
    let took = started.elapsed();
    r.assert_status(422, "Invalid");
    assert_eq!(
        r.message(),
        format!(
            "Gadget.{g} \"big\" is invalid: spec: Invalid value: \"object\": 'operation cancelled: actual cost limit exceeded': no further validation rules will be run due to call cost exceeds limit for rule: {rule}"
        )
    );
    assert!(took < Duration::from_secs(30), "the rule ran for {took:?}");

    let r = s.post(&gadgets, &gadget(g, "small", json!({"l": [1, 1]}))).await;
    assert_eq!(r.code, 201, "{}", r.text);
}

/// Writing a CRD whose rule's estimated worst case exceeds upstream's
/// static limit (a cubic rule over a list without `maxItems`) is a 422
/// naming the rule, with upstream's message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crd_whose_rule_is_estimated_too_expensive_is_refused() {
    let s = TestServer::embedded().await;
    let g = "celestimate.example.com";
    let mut crd = gadget_crd(g, json!([{"rule": "self.l.all(x, self.l.all(y, self.l.all(z, x == y)))"}]));
    let l = &mut crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["l"];
    l.as_object_mut().expect("l's schema").remove("maxItems");
    let r = s.post(CRDS, &crd).await;
    r.assert_status(422, "Invalid");
    assert_eq!(
        r.message(),
        format!(
            "CustomResourceDefinition.apiextensions.k8s.io \"gadgets.{g}\" is invalid: spec.versions[0].schema.openAPIV3Schema.properties[spec].x-kubernetes-validations[0].rule: Forbidden: estimated rule cost exceeds budget by factor of more than 100x (try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)"
        )
    );
}
