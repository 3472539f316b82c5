//! End to end: CustomResourceDefinitions driven by the real kubectl 1.27 and
//! 1.33 against `rkube up`: `kubectl apply` of a CRD with a schema, `status`
//! and `scale` subresources, printer columns and short names; `kubectl wait
//! --for condition=established`; `kubectl get <shortname>` shows the
//! printer columns; `kubectl explain` reads the schema; `kubectl scale`;
//! the resource is served right after a restart; a schema violation is
//! refused naming the field; deleting the CRD deletes its objects. A CRD
//! with a conversion webhook (a real HTTPS server started by the test):
//! what kubectl writes in one version it reads in the other, converted.
//!
//! The cluster process is killed by PID when its guard drops.

use crate::common;
use crate::webhook_support;

use common::{Backend, Cluster, Stop, Table};

const CRD: &str = r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.e2e.example.com
spec:
  group: e2e.example.com
  scope: Namespaced
  names:
    plural: widgets
    singular: widget
    kind: Widget
    shortNames: [wd]
    categories: [all]
  versions:
  - name: v1
    served: true
    storage: true
    subresources:
      status: {}
      scale:
        specReplicasPath: .spec.replicas
        statusReplicasPath: .status.replicas
    additionalPrinterColumns:
    - name: Size
      type: string
      jsonPath: .spec.size
    - name: Replicas
      type: integer
      jsonPath: .spec.replicas
    - name: Age
      type: date
      jsonPath: .metadata.creationTimestamp
    schema:
      openAPIV3Schema:
        type: object
        description: A Widget is a thing the tests make.
        properties:
          spec:
            type: object
            description: What the widget should be.
            required: [size]
            properties:
              size:
                type: string
                description: How big the widget is.
                enum: [small, large]
              replicas:
                type: integer
                minimum: 0
                default: 1
          status:
            type: object
            properties:
              replicas:
                type: integer
"#;

fn widget(name: &str, spec: &str) -> String {
    format!("apiVersion: e2e.example.com/v1\nkind: Widget\nmetadata:\n  name: {name}\nspec:\n{spec}")
}

fn crds_serve_custom_resources_to_kubectl(version: &str) {
    let mut cluster = Cluster::start(Backend::Embedded);
    let k = cluster.kubectl(version);

    let applied = k.run_stdin(&["apply", "-f", "-"], CRD).success();
    assert_eq!(applied.stdout.trim(), "customresourcedefinition.apiextensions.k8s.io/widgets.e2e.example.com created");
    k.ok(&["wait", "--for", "condition=established", "crd/widgets.e2e.example.com", "--timeout=30s"]);
    let crd = k.json(&["get", "crd", "widgets.e2e.example.com"]);
    assert_eq!(crd["status"]["acceptedNames"]["shortNames"][0], "wd", "{crd}");

    let created = k.run_stdin(&["apply", "-f", "-"], &widget("w1", "  size: large\n  replicas: 2\n")).success();
    assert_eq!(created.stdout.trim(), "widget.e2e.example.com/w1 created");

    // The short name and the printer columns, AGE last.
    let out = k.ok(&["get", "wd"]).stdout;
    let table = Table::parse(&out);
    assert_eq!(table.header, ["NAME", "SIZE", "REPLICAS", "AGE"], "{out}");
    assert_eq!(&table.rows[0][..3], ["w1", "large", "2"], "{out}");

    // explain reads the CRD's schema from OpenAPI.
    let explained = k.ok(&["explain", "widgets.spec.size"]).stdout;
    assert!(explained.contains("How big the widget is."), "{explained}");
    assert!(explained.contains("KIND:") && explained.contains("Widget"), "{explained}");

    // scale through the scale subresource.
    let scaled = k.ok(&["scale", "widget/w1", "--replicas=4"]).stdout;
    assert_eq!(scaled.trim(), "widget.e2e.example.com/w1 scaled");
    assert_eq!(k.json(&["get", "widget", "w1"])["spec"]["replicas"], 4);

    // After a restart the CRD's resource is served as soon as the server is ready.
    cluster.stop(Stop::Term);
    cluster.restart();
    let after = k.ok(&["get", "wd", "w1", "--no-headers"]).stdout;
    assert!(after.starts_with("w1") && after.contains("large") && after.contains('4'), "{after}");

    // A schema violation is refused with the field named.
    let bad = k.run_stdin(&["apply", "-f", "-"], &widget("w2", "  size: huge\n  replicas: three\n"));
    assert_ne!(bad.code, Some(0), "{}", bad.stdout);
    assert!(
        bad.stderr.contains(r#"spec.replicas: Invalid value: "string": spec.replicas in body must be of type integer: "string""#),
        "{}",
        bad.stderr
    );
    assert!(bad.stderr.contains(r#"spec.size: Unsupported value: "huge": supported values: "small", "large""#), "{}", bad.stderr);

    // Deleting the CRD deletes its objects; the resource is no longer served.
    let deleted = k.ok(&["delete", "crd", "widgets.e2e.example.com", "--timeout=60s"]).stdout;
    assert_eq!(deleted.trim(), "customresourcedefinition.apiextensions.k8s.io \"widgets.e2e.example.com\" deleted");
    let gone = k.run(&["get", "--raw", "/apis/e2e.example.com/v1/namespaces/default/widgets"]);
    assert_ne!(gone.code, Some(0), "{}", gone.stdout);
    assert!(gone.stderr.contains("NotFound") || gone.stderr.contains("not found"), "{}", gone.stderr);
}

/// A CRD storing `v1` (`spec.size`) and serving `v2` (`spec.dimension`),
/// converted by `wh`'s `/convert`.
fn conversion_crd(wh: &webhook_support::WebhookServer) -> String {
    let version = |name: &str, storage: bool, field: &str| {
        format!(
            "  - name: {name}\n    served: true\n    storage: {storage}\n    schema:\n      openAPIV3Schema:\n        type: object\n        \
             properties:\n          spec:\n            type: object\n            properties:\n              {field}: {{type: string}}\n"
        )
    };
    format!(
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: widgets.conv.example.com\nspec:\n  \
         group: conv.example.com\n  scope: Namespaced\n  names: {{plural: widgets, kind: Widget}}\n  conversion:\n    strategy: Webhook\n    \
         webhook:\n      conversionReviewVersions: [v1]\n      clientConfig: {{url: \"{}\", caBundle: {}}}\n  versions:\n{}{}",
        wh.url("/convert"),
        wh.ca_bundle(),
        version("v1", true, "size"),
        version("v2", false, "dimension"),
    )
}

fn conversion_webhooks_convert_what_kubectl_reads_and_writes(version: &str) {
    let wh = webhook_support::WebhookServer::start(&[]);
    let cluster = Cluster::start(Backend::Embedded);
    let k = cluster.kubectl(version);
    let applied = k.run_stdin(&["apply", "-f", "-"], &conversion_crd(&wh)).success();
    assert!(applied.stderr.is_empty(), "no warning for a Webhook CRD: {}", applied.stderr);
    k.ok(&["wait", "--for", "condition=established", "crd/widgets.conv.example.com", "--timeout=30s"]);
    let v2 = "apiVersion: conv.example.com/v2\nkind: Widget\nmetadata:\n  name: w\nspec:\n  dimension: large\n";
    let created = k.run_stdin(&["apply", "-f", "-"], v2).success();
    assert_eq!(created.stdout.trim(), "widget.conv.example.com/w created");
    let as_v1 = k.json(&["get", "widgets.v1.conv.example.com", "w"]);
    assert_eq!((as_v1["apiVersion"].as_str(), &as_v1["spec"]), (Some("conv.example.com/v1"), &serde_json::json!({"size": "large"})), "{as_v1}");
    let as_v2 = k.json(&["get", "widgets.v2.conv.example.com", "w"]);
    assert_eq!((as_v2["apiVersion"].as_str(), &as_v2["spec"]), (Some("conv.example.com/v2"), &serde_json::json!({"dimension": "large"})), "{as_v2}");
    let reviews = wh.requests("/convert");
    assert!(reviews.iter().any(|r| r["request"]["desiredAPIVersion"] == "conv.example.com/v1"), "{reviews:?}");
}

per_kubectl_version!(crds_serve_custom_resources_to_kubectl, conversion_webhooks_convert_what_kubectl_reads_and_writes);
