//! `kubectl apply` (client-side, strategic merge) and `apply --server-side`.

use serde_json::{json, Value};

use super::manifests::{configmap, APP_V1, APP_V1_CREATED, APP_V2, APP_V2_CONFIGURED};
use crate::common::{at, lines, str_at, Cluster, Kubectl};

/// Applies [`APP_V1`] to an empty server and asserts kubectl's report.
#[track_caller]
pub fn apply_app(c: &Cluster, k: &Kubectl) {
    let f = c.write_file("app-v1.yaml", APP_V1);
    let out = k.ok(&["apply", "-f", f.to_str().unwrap()]);
    assert_eq!(
        lines(&out.stdout),
        APP_V1_CREATED,
        "kubectl apply -f (create) stdout; stderr: {}",
        out.stderr
    );
}

fn env_of(container: &Value) -> Vec<(String, String)> {
    container["env"]
        .as_array()
        .map(|e| {
            e.iter()
                .map(|v| {
                    (
                        str_at(v, "/name").to_owned(),
                        str_at(v, "/value").to_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

fn container<'a>(pod_spec: &'a Value, name: &str) -> &'a Value {
    pod_spec["containers"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["name"] == name))
        .unwrap_or_else(|| panic!("no container {name} in {pod_spec}"))
}

/// Multi-document `apply -f` creates all six kinds; a second `apply -f` of a
/// changed manifest strategic-merges the changes (image, env, labels) while
/// keeping what other writers added (an annotation) and bumping `generation`
/// only on spec changes.
pub fn apply_multi_document_manifest_then_reapply_merges_changes(c: &mut Cluster, k: &Kubectl) {
    apply_app(c, k);

    let deploy = k.json(&["get", "deployment", "web", "-n", "shop"]);
    assert_eq!(at(&deploy, "/metadata/generation"), &json!(1));
    assert!(
        deploy
            .pointer("/metadata/annotations/kubectl.kubernetes.io~1last-applied-configuration")
            .is_some(),
        "client-side apply records last-applied-configuration: {deploy}"
    );
    let rv1: u64 = str_at(&deploy, "/metadata/resourceVersion")
        .parse()
        .expect("numeric resourceVersion");

    // Another writer adds an annotation: a merge must keep it.
    let out = k.ok(&[
        "annotate",
        "deployment",
        "web",
        "-n",
        "shop",
        "owner=team-a",
    ]);
    // kubectl 1.27 itself prints "annotate" (fixed in 1.28).
    let verb = if k.version == "1.27" {
        "annotate"
    } else {
        "annotated"
    };
    assert_eq!(out.stdout.trim_end(), format!("deployment.apps/web {verb}"));

    let f = c.write_file("app-v2.yaml", APP_V2);
    let out = k.ok(&["apply", "-f", f.to_str().unwrap()]);
    assert_eq!(
        lines(&out.stdout),
        APP_V2_CONFIGURED,
        "kubectl apply -f (changed) stdout; stderr: {}",
        out.stderr
    );

    let deploy = k.json(&["get", "deployment", "web", "-n", "shop"]);
    let spec = at(&deploy, "/spec/template/spec");
    let web = container(spec, "web");
    assert_eq!(str_at(web, "/image"), "nginx:1.26");
    assert_eq!(
        env_of(web),
        vec![
            ("MODE".into(), "green".into()),
            ("LOG_LEVEL".into(), "debug".into())
        ]
    );
    assert_eq!(
        str_at(container(spec, "sidecar"), "/image"),
        "busybox:1.36",
        "the untouched container stays"
    );
    assert_eq!(
        at(&deploy, "/metadata/labels"),
        &json!({"app": "web", "tier": "frontend"})
    );
    assert_eq!(
        str_at(&deploy, "/metadata/annotations/owner"),
        "team-a",
        "annotation from another writer survives apply"
    );
    assert_eq!(
        at(&deploy, "/metadata/generation"),
        &json!(2),
        "spec change bumps generation"
    );
    let rv2: u64 = str_at(&deploy, "/metadata/resourceVersion")
        .parse()
        .expect("numeric resourceVersion");
    assert!(rv2 > rv1, "resourceVersion grows: {rv1} -> {rv2}");

    let pod = k.json(&["get", "pod", "web-0", "-n", "shop"]);
    assert_eq!(
        str_at(container(at(&pod, "/spec"), "web"), "/image"),
        "nginx:1.26"
    );
    assert_eq!(
        at(&pod, "/metadata/labels"),
        &json!({"app": "web", "tier": "frontend"})
    );

    let cm = k.json(&["get", "configmap", "web-config", "-n", "shop"]);
    assert_eq!(at(&cm, "/data"), &json!({"mode": "green"}));

    // Applying the same manifest again changes nothing.
    let out = k.ok(&["apply", "-f", f.to_str().unwrap()]);
    assert!(
        lines(&out.stdout).iter().all(|l| l.ends_with(" unchanged")),
        "re-apply of the same manifest: {}",
        out.stdout
    );
}

/// `apply --server-side` creates an object (`serverside-applied`), records the
/// field manager in `managedFields`, and merges a second manager's fields
/// instead of replacing the object.
pub fn apply_server_side_creates_then_merges_field_managers(c: &mut Cluster, k: &Kubectl) {
    let f = c.write_file("ssa.yaml", &configmap("default", "ssa", &[("a", "1")]));
    let out = k.ok(&["apply", "--server-side", "-f", f.to_str().unwrap()]);
    assert_eq!(out.stdout.trim_end(), "configmap/ssa serverside-applied");

    let cm = k.json(&[
        "get",
        "configmap",
        "ssa",
        "-n",
        "default",
        "--show-managed-fields",
    ]);
    assert_eq!(at(&cm, "/data"), &json!({"a": "1"}));
    let managers = at(&cm, "/metadata/managedFields")
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        managers
            .iter()
            .any(|m| m["manager"] == "kubectl" && m["operation"] == "Apply"),
        "managedFields records manager kubectl / Apply: {managers:?}"
    );

    // Same manager changes its field.
    let f = c.write_file("ssa.yaml", &configmap("default", "ssa", &[("a", "2")]));
    let out = k.ok(&["apply", "--server-side", "-f", f.to_str().unwrap()]);
    assert_eq!(out.stdout.trim_end(), "configmap/ssa serverside-applied");

    // A second manager applies only its own field: both stay.
    let other = c.write_file(
        "ssa-other.yaml",
        &configmap("default", "ssa", &[("b", "3")]),
    );
    let out = k.ok(&[
        "apply",
        "--server-side",
        "--field-manager=other",
        "-f",
        other.to_str().unwrap(),
    ]);
    assert_eq!(out.stdout.trim_end(), "configmap/ssa serverside-applied");

    let cm = k.json(&[
        "get",
        "configmap",
        "ssa",
        "-n",
        "default",
        "--show-managed-fields",
    ]);
    assert_eq!(at(&cm, "/data"), &json!({"a": "2", "b": "3"}));
    let managers = at(&cm, "/metadata/managedFields")
        .as_array()
        .cloned()
        .unwrap_or_default();
    for m in ["kubectl", "other"] {
        assert!(
            managers
                .iter()
                .any(|e| e["manager"] == m && e["operation"] == "Apply"),
            "managedFields has {m}/Apply: {managers:?}"
        );
    }
}

/// A Deployment and a Service, as a user's manifest has them.
fn web_app(replicas: u32, port: u32) -> String {
    format!(
        r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: default
spec:
  replicas: {replicas}
  selector:
    matchLabels:
      app: web
  template:
    metadata:
      labels:
        app: web
    spec:
      containers:
      - name: web
        image: nginx
        ports:
        - containerPort: 80
---
apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: default
spec:
  selector:
    app: web
  ports:
  - port: {port}
    targetPort: 80
"#
    )
}

/// `kubectl apply` then `kubectl apply --server-side` of a Deployment and a
/// Service: kubectl 1.26+ migrates the client-side apply ownership into its
/// server-side entry (a JSON patch of managedFields, then a re-apply), which
/// succeeds without a warning, and so does every later server-side apply,
/// changed manifests included.
pub fn apply_then_apply_server_side_migrates_and_reapplies(c: &mut Cluster, k: &Kubectl) {
    let f = c.write_file("web.yaml", &web_app(2, 80));
    let f = f.to_str().unwrap();
    let out = k.ok(&["apply", "-f", f]);
    assert_eq!(lines(&out.stdout), ["deployment.apps/web created", "service/web created"]);
    for round in 0..2 {
        let out = k.ok(&["apply", "--server-side", "-f", f]);
        assert_eq!(
            (lines(&out.stdout), out.stderr.as_str()),
            (vec!["deployment.apps/web serverside-applied".to_string(), "service/web serverside-applied".to_string()], ""),
            "apply --server-side round {round}"
        );
    }
    let f = c.write_file("web.yaml", &web_app(3, 8080));
    let out = k.ok(&["apply", "--server-side", "-f", f.to_str().unwrap()]);
    assert_eq!(
        (lines(&out.stdout), out.stderr.as_str()),
        (vec!["deployment.apps/web serverside-applied".to_string(), "service/web serverside-applied".to_string()], ""),
        "apply --server-side of a changed manifest"
    );
    let deploy = k.json(&["get", "deployment", "web", "-n", "default"]);
    assert_eq!(at(&deploy, "/spec/replicas"), &json!(3));
    assert_eq!(at(&deploy, "/spec/template/metadata/labels"), &json!({"app": "web"}));
    assert_eq!(at(&deploy, "/spec/selector"), &json!({"matchLabels": {"app": "web"}}));
    let svc = k.json(&["get", "service", "web", "-n", "default"]);
    let ports = at(&svc, "/spec/ports").as_array().cloned().unwrap_or_default();
    assert_eq!(ports.len(), 1, "service ports: {ports:?}");
    assert_eq!((&ports[0]["port"], &ports[0]["targetPort"]), (&json!(8080), &json!(80)));
}

fn secret_with_string_data(password: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: creds\n  namespace: default\nstringData:\n  password: {password}\n"
    )
}

/// A Secret's `stringData` is written into `data` (base64) and never kept,
/// with client-side apply, its re-apply, and server-side apply.
pub fn apply_secret_string_data_lands_in_data(c: &mut Cluster, k: &Kubectl) {
    use base64::Engine;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let steps: [(&str, &[&str], &str); 3] = [
        ("hunter2", &["apply"], "secret/creds created"),
        ("swordfish", &["apply"], "secret/creds configured"),
        ("letmein", &["apply", "--server-side"], "secret/creds serverside-applied"),
    ];
    for (password, cmd, printed) in steps {
        let f = c.write_file("creds.yaml", &secret_with_string_data(password));
        let mut args = cmd.to_vec();
        args.extend(["-f", f.to_str().unwrap()]);
        let out = k.ok(&args);
        assert_eq!(out.stdout.trim_end(), printed, "{args:?}; stderr: {}", out.stderr);
        let secret = k.json(&["get", "secret", "creds", "-n", "default"]);
        assert_eq!(at(&secret, "/data"), &json!({"password": b64(password)}), "{args:?}");
        assert_eq!(secret.get("stringData"), None, "{args:?}");
    }
}
