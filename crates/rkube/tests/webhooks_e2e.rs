//! End to end: admission webhooks driven by the real kubectl 1.27 and 1.33
//! against `rkube up`, with a real HTTPS webhook server started by the test
//! (rustls, its own CA, on 127.0.0.1): `kubectl apply` of a
//! ValidatingWebhookConfiguration and a MutatingWebhookConfiguration; a
//! ConfigMap named `deny-*` is refused with the webhook's message; other
//! ConfigMaps get the mutating webhook's label; a webhook's warning reaches
//! kubectl's stderr; a dry run reaches a `sideEffects: None` webhook; the
//! webhooks' audit annotations reach the audit log.
//!
//! The cluster process is killed by PID when its guard drops; the webhook
//! server's threads stop with the test process.

use crate::common;
use crate::webhook_support;

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

/// Waits until the watch cache (what admission reads) holds one
/// configuration of each kind, as a resourceVersion=0 list shows.
fn wait_for_cached(cluster: &Cluster, k: &common::kubectl::Kubectl) {
    cluster.wait_until("the configurations in the watch cache", Duration::from_secs(5), || {
        let raw = |r: &str| -> serde_json::Value {
            let path = format!("/apis/admissionregistration.k8s.io/v1/{r}?resourceVersion=0");
            serde_json::from_str(&k.ok(&["get", "--raw", &path]).stdout).unwrap_or_default()
        };
        let (v, m) = (raw("validatingwebhookconfigurations"), raw("mutatingwebhookconfigurations"));
        (v["items"].as_array().is_some_and(|i| i.len() == 1) && m["items"].as_array().is_some_and(|i| i.len() == 1)).then_some(())
    });
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
    wait_for_cached(&cluster, &k);

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

#[test]
fn webhook_audit_annotations_reach_the_audit_log() {
    let fixtures = tempfile::tempdir().expect("tempdir");
    let (builder, log) = Cluster::builder(Backend::Embedded).metadata_audit_log(fixtures.path());
    let cluster = builder.start();
    let k = cluster.kubectl("1.33");
    let wh = WebhookServer::start(&[]);
    let ca = wh.ca_bundle();
    let hook = |name: &str, path: &str, policy: &str| {
        format!(
            "- name: {name}\n  clientConfig: {{url: \"{}\", caBundle: {ca}}}\n  failurePolicy: {policy}\n  \
             rules: [{{operations: [CREATE], apiGroups: [\"\"], apiVersions: [v1], resources: [configmaps]}}]\n  \
             sideEffects: None\n  admissionReviewVersions: [v1]\n",
            wh.url(path)
        )
    };
    let down = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).unwrap_or(1);
    let yaml = format!(
        "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\nmetadata:\n  name: audited\nwebhooks:\n{}{}\
         ---\napiVersion: admissionregistration.k8s.io/v1\nkind: MutatingWebhookConfiguration\nmetadata:\n  name: audited\nwebhooks:\n{}",
        hook("annotate.e2e.example.com", "/annotate", "Fail"),
        hook("down.e2e.example.com", "/unused", "Ignore").replace(&wh.url("/unused"), &format!("https://127.0.0.1:{down}/")),
        hook("label.e2e.example.com", "/add-label", "Fail"),
    );
    k.run_stdin(&["apply", "-f", "-"], &yaml).success();
    wait_for_cached(&cluster, &k);
    k.run(&["create", "configmap", "audited"]).success();

    let is_create = |e: &serde_json::Value| {
        e["stage"] == "ResponseComplete" && e["verb"] == "create" && e["objectRef"]["resource"] == "configmaps"
    };
    let event = cluster.wait_until("the create's audit event", Duration::from_secs(10), || {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        text.lines().filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok()).find(|e| is_create(e))
    });
    let notes = &event["annotations"];
    assert_eq!(notes["annotate.e2e.example.com/decision"], "looked", "{event}");
    assert_eq!(notes["failed-open.validating.webhook.admission.k8s.io/round_0_index_1"], "down.e2e.example.com", "{event}");
    let mutation: serde_json::Value =
        serde_json::from_str(notes["mutation.webhook.admission.k8s.io/round_0_index_0"].as_str().unwrap_or("")).unwrap_or_default();
    assert_eq!(mutation, serde_json::json!({"configuration": "audited", "webhook": "label.e2e.example.com", "mutated": true}), "{event}");
}
