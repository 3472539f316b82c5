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
    let hook = |name: &str, path: &str| {
        [
            format!("- name: {name}"),
            format!("  clientConfig: {{url: \"{}\", caBundle: {ca}}}", wh.url(path)),
            "  rules: [{operations: [CREATE], apiGroups: [\"\"], apiVersions: [v1], resources: [configmaps]}]".to_string(),
            "  sideEffects: None".to_string(),
            "  admissionReviewVersions: [v1]".to_string(),
        ]
        .join("\n")
    };
    let config = |kind: &str, name: &str, hooks: Vec<String>| {
        format!("apiVersion: admissionregistration.k8s.io/v1\nkind: {kind}\nmetadata:\n  name: {name}\nwebhooks:\n{}\n", hooks.join("\n"))
    };
    [
        config(
            "ValidatingWebhookConfiguration",
            "e2e-validating",
            vec![hook("deny.e2e.example.com", "/deny-prefix"), hook("warn.e2e.example.com", "/warn")],
        ),
        config("MutatingWebhookConfiguration", "e2e-mutating", vec![hook("label.e2e.example.com", "/add-label")]),
    ]
    .join("---\n")
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
        let raw = |r: &str| -> serde_json::Value {
            let path = format!("/apis/admissionregistration.k8s.io/v1/{r}?resourceVersion=0");
            serde_json::from_str(&k.ok(&["get", "--raw", &path]).stdout).unwrap_or_default()
        };
        let (v, m) = (raw("validatingwebhookconfigurations"), raw("mutatingwebhookconfigurations"));
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
