//! `kubectl patch` with `--type=json` (RFC 6902), `--type=merge` (RFC 7396)
//! and `--type=strategic` (merge keys and `$patch` directives).

use serde_json::{json, Value};

use super::apply::apply_app;
use crate::common::{at, str_at, Cluster, Kubectl};

fn containers(deploy: &Value) -> Vec<(String, String)> {
    at(deploy, "/spec/template/spec/containers")
        .as_array()
        .map(|cs| {
            cs.iter()
                .map(|c| {
                    (
                        str_at(c, "/name").to_owned(),
                        str_at(c, "/image").to_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
    p.iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

/// JSON patch edits by path, merge patch merges maps and deletes with
/// `null`, strategic merge merges lists by their merge key (and `$patch:
/// delete` removes one element) where merge patch replaces the whole list.
pub fn patch_json_merge_and_strategic(c: &mut Cluster, k: &Kubectl) {
    k.ok(&[
        "create",
        "configmap",
        "p",
        "-n",
        "default",
        "--from-literal=a=1",
    ]);

    let out = k.ok(&[
        "patch", "configmap", "p", "-n", "default", "--type=json", "-p",
        r#"[{"op":"add","path":"/data/b","value":"2"},{"op":"replace","path":"/data/a","value":"10"}]"#,
    ]);
    assert_eq!(out.stdout.trim_end(), "configmap/p patched");
    assert_eq!(
        at(
            &k.json(&["get", "configmap", "p", "-n", "default"]),
            "/data"
        ),
        &json!({"a": "10", "b": "2"})
    );

    // A failing `test` operation rejects the whole patch.
    let out = k.run(&[
        "patch", "configmap", "p", "-n", "default", "--type=json", "-p",
        r#"[{"op":"replace","path":"/data/b","value":"changed"},{"op":"test","path":"/data/a","value":"wrong"}]"#,
    ]);
    assert_eq!(
        out.code,
        Some(1),
        "failed json-patch test op must fail the command: {out:?}"
    );
    assert_eq!(
        at(
            &k.json(&["get", "configmap", "p", "-n", "default"]),
            "/data"
        ),
        &json!({"a": "10", "b": "2"})
    );

    let out = k.ok(&[
        "patch",
        "configmap",
        "p",
        "-n",
        "default",
        "--type=merge",
        "-p",
        r#"{"data":{"a":null,"c":"3"}}"#,
    ]);
    assert_eq!(out.stdout.trim_end(), "configmap/p patched");
    assert_eq!(
        at(
            &k.json(&["get", "configmap", "p", "-n", "default"]),
            "/data"
        ),
        &json!({"b": "2", "c": "3"})
    );

    let out = k.ok(&[
        "patch",
        "configmap",
        "p",
        "-n",
        "default",
        "--type=merge",
        "-p",
        r#"{"data":{"c":"3"}}"#,
    ]);
    assert_eq!(out.stdout.trim_end(), "configmap/p patched (no change)");

    apply_app(c, k);
    let out = k.ok(&[
        "patch", "deployment", "web", "-n", "shop", "--type=strategic", "-p",
        r#"{"spec":{"template":{"spec":{"containers":[{"name":"web","image":"nginx:1.27","env":[{"name":"EXTRA","value":"1"}]}]}}}}"#,
    ]);
    assert_eq!(out.stdout.trim_end(), "deployment.apps/web patched");
    let d = k.json(&["get", "deployment", "web", "-n", "shop"]);
    assert_eq!(
        containers(&d),
        pairs(&[("web", "nginx:1.27"), ("sidecar", "busybox:1.36")]),
        "containers merged by name"
    );
    let mut env: Vec<(String, String)> = at(&d, "/spec/template/spec/containers/0/env")
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
        .unwrap_or_default();
    env.sort();
    assert_eq!(
        env,
        pairs(&[("EXTRA", "1"), ("MODE", "blue")]),
        "env merged by name"
    );
    assert_eq!(
        at(&d, "/spec/template/spec/containers/0/ports/0/containerPort"),
        &json!(8080),
        "unpatched fields kept"
    );
    assert_eq!(at(&d, "/metadata/generation"), &json!(2));

    let out = k.ok(&[
        "patch",
        "deployment",
        "web",
        "-n",
        "shop",
        "--type=strategic",
        "-p",
        r#"{"spec":{"template":{"spec":{"containers":[{"name":"sidecar","$patch":"delete"}]}}}}"#,
    ]);
    assert_eq!(out.stdout.trim_end(), "deployment.apps/web patched");
    let d = k.json(&["get", "deployment", "web", "-n", "shop"]);
    assert_eq!(
        containers(&d),
        pairs(&[("web", "nginx:1.27")]),
        "$patch: delete removes one element"
    );

    // Merge patch replaces lists wholesale.
    let out = k.ok(&[
        "patch",
        "deployment",
        "web",
        "-n",
        "shop",
        "--type=merge",
        "-p",
        r#"{"spec":{"template":{"spec":{"containers":[{"name":"only","image":"busybox:1.36"}]}}}}"#,
    ]);
    assert_eq!(out.stdout.trim_end(), "deployment.apps/web patched");
    let d = k.json(&["get", "deployment", "web", "-n", "shop"]);
    assert_eq!(containers(&d), pairs(&[("only", "busybox:1.36")]));
    assert_eq!(at(&d, "/metadata/generation"), &json!(4));
}
