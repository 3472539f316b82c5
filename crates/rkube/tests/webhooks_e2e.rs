//! End to end: admission webhooks driven by the real kubectl 1.27 and 1.33
//! against `rkube up`, with a real HTTPS webhook server started by the test
//! (rustls, its own CA, on 127.0.0.1): `kubectl apply` of a
//! ValidatingWebhookConfiguration and a MutatingWebhookConfiguration; a
//! ConfigMap named `deny-*` is refused with the webhook's message; other
//! ConfigMaps get the mutating webhook's label; a webhook's warning reaches
//! kubectl's stderr; a dry run reaches a `sideEffects: None` webhook.
//!
//! The cluster process is killed by PID when its guard drops; the webhook
//! server's threads stop with the test process.

mod common;
#[path = "../../rkube-apiserver/tests/webhook_support/mod.rs"]
mod webhook_support;

use std::time::Duration;

use common::{Backend, Cluster};
use webhook_support::{WebhookServer, MUTATED_LABEL};

fn configurations(wh: &WebhookServer) -> String {
    let ca = wh.ca_bundle();
    let rules = "    rules:\n    - operations: [CREATE]\n      apiGroups: [\"\"]\n      apiVersions: [v1]\n      resources: [configmaps]\n    sideEffects: None\n    admissionReviewVersions: [v1]\n";
    format!(
        "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\nmetadata:\n  name: e2e-validating\nwebhooks:\n\
  - name: deny.e2e.example.com\n    clientConfig:\n      url: {deny}\n      caBundle: {ca}\n{rules}\
  - name: warn.e2e.example.com\n    clientConfig:\n      url: {warn}\n      caBundle: {ca}\n{rules}\
---\napiVersion: admissionregistration.k8s.io/v1\nkind: MutatingWebhookConfiguration\nmetadata:\n  name: e2e-mutating\nwebhooks:\n\
  - name: label.e2e.example.com\n    clientConfig:\n      url: {label}\n      caBundle: {ca}\n{rules}",
        deny = wh.url("/deny-prefix"),
        warn = wh.url("/warn"),
        label = wh.url("/add-label"),
    )
}

fn webhooks_admit_kubectl_writes(version: &str) {
    let cluster = Cluster::start(Backend::Embedded);
    let k = cluster.kubectl(version);
    let wh = WebhookServer::start(&[]);

    let applied = k.run_stdin(&["apply", "-f", "-"], &configurations(&wh)).success();
    assert_eq!(
        applied.stdout.trim(),
        "validatingwebhookconfiguration.admissionregistration.k8s.io/e2e-validating created\n\
         mutatingwebhookconfiguration.admissionregistration.k8s.io/e2e-mutating created"
    );
    // Admission reads the configurations from the watch cache, which a
    // resourceVersion=0 list shows.
    cluster.wait_until("the configurations in the watch cache", Duration::from_secs(5), || {
        let v = k.json(&["get", "--raw", "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations?resourceVersion=0"]);
        let m = k.json(&["get", "--raw", "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations?resourceVersion=0"]);
        (v["items"].as_array().is_some_and(|i| i.len() == 1) && m["items"].as_array().is_some_and(|i| i.len() == 1)).then_some(())
    });

    let denied = k.run(&["create", "configmap", "deny-me", "--from-literal=k=v"]);
    assert_eq!(denied.code, Some(1), "{}", denied.stdout);
    assert_eq!(
        denied.stderr.trim(),
        "error: failed to create configmap: admission webhook \"deny.e2e.example.com\" denied the request: names starting with deny- are refused"
    );

    let created = k.run(&["create", "configmap", "welcome", "--from-literal=k=v"]).success();
    assert_eq!(created.stdout.trim(), "configmap/welcome created");
    assert_eq!(created.stderr.trim(), "Warning: configmaps here are watched");
    let cm = k.json(&["get", "configmap", "welcome"]);
    assert_eq!(cm["metadata"]["labels"][MUTATED_LABEL], "true", "{cm}");

    let dry = k.run(&["create", "configmap", "dry", "--from-literal=k=v", "--dry-run=server"]).success();
    assert_eq!(dry.stdout.trim(), "configmap/dry created (server dry run)");
    let dry_reviews: Vec<_> =
        wh.requests("/deny-prefix").into_iter().filter(|r| r["request"]["name"] == "dry").collect();
    assert_eq!(dry_reviews.len(), 1);
    assert_eq!(dry_reviews[0]["request"]["dryRun"], true);
    assert_eq!(k.run(&["get", "configmap", "dry"]).code, Some(1), "a dry run stores nothing");
}

per_kubectl_version!(webhooks_admit_kubectl_writes);
