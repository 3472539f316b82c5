//! The errors kubectl users see: `Error from server (<Reason>): <message>`.

use super::manifests::configmap;
use crate::common::{at, Cluster, Kubectl};

/// A GET of a missing object is 404 NotFound with the upstream message,
/// named by resource (and group).
pub fn get_missing_object_is_not_found(_c: &mut Cluster, k: &Kubectl) {
    k.fails_with(
        &["get", "pod", "nope", "-n", "default"],
        r#"Error from server (NotFound): pods "nope" not found"#,
    );
    k.fails_with(
        &["get", "deployment", "nope", "-n", "default"],
        r#"Error from server (NotFound): deployments.apps "nope" not found"#,
    );
    k.fails_with(
        &["get", "namespace", "nope"],
        r#"Error from server (NotFound): namespaces "nope" not found"#,
    );
    k.fails_with(
        &[
            "create",
            "configmap",
            "x",
            "-n",
            "missing",
            "--from-literal=a=1",
        ],
        r#"error: failed to create configmap: namespaces "missing" not found"#,
    );
}

/// Creating an object that exists is 409 AlreadyExists.
pub fn create_duplicate_is_already_exists(c: &mut Cluster, k: &Kubectl) {
    let f = c.write_file("dup.yaml", &configmap("default", "dup", &[("a", "1")]));
    let path = f.to_str().unwrap();
    let out = k.ok(&["create", "-f", path]);
    assert_eq!(out.stdout.trim_end(), "configmap/dup created");
    k.fails_with(
        &["create", "-f", path],
        &format!(r#"Error from server (AlreadyExists): error when creating "{path}": configmaps "dup" already exists"#),
    );
    k.ok(&["create", "namespace", "twice"]);
    k.fails_with(
        &["create", "namespace", "twice"],
        r#"Error from server (AlreadyExists): namespaces "twice" already exists"#,
    );
}

/// `replace` of a manifest carrying an old resourceVersion is 409 Conflict
/// and changes nothing; with the current resourceVersion it succeeds.
pub fn replace_stale_manifest_is_conflict(c: &mut Cluster, k: &Kubectl) {
    k.ok(&[
        "create",
        "configmap",
        "stale",
        "-n",
        "default",
        "--from-literal=a=1",
    ]);
    let mut old = k.json(&["get", "configmap", "stale", "-n", "default"]);
    k.ok(&[
        "patch",
        "configmap",
        "stale",
        "-n",
        "default",
        "--type=merge",
        "-p",
        r#"{"data":{"a":"2"}}"#,
    ]);

    old["data"]["a"] = "3".into();
    let f = c.write_file("stale.json", &old.to_string());
    let path = f.to_str().unwrap();
    k.fails_with(
        &["replace", "-f", path],
        &format!(
            r#"Error from server (Conflict): error when replacing "{path}": Operation cannot be fulfilled on configmaps "stale": the object has been modified; please apply your changes to the latest version and try again"#
        ),
    );
    let now = k.json(&["get", "configmap", "stale", "-n", "default"]);
    assert_eq!(
        at(&now, "/data/a"),
        "2",
        "a rejected replace changes nothing"
    );

    let mut fresh = now.clone();
    fresh["data"]["a"] = "4".into();
    let f = c.write_file("fresh.json", &fresh.to_string());
    let out = k.ok(&["replace", "-f", f.to_str().unwrap()]);
    assert_eq!(out.stdout.trim_end(), "configmap/stale replaced");
    assert_eq!(
        at(
            &k.json(&["get", "configmap", "stale", "-n", "default"]),
            "/data/a"
        ),
        "4"
    );
}

const BAD_NAME: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: Bad_Name\n  namespace: default\ndata:\n  a: \"1\"\n";

const UNKNOWN_FIELD: &str = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: typo\n  namespace: default\nspec:\n  containers:\n  - name: c\n    image: busybox:1.36\n    imagee: busybox:1.37\n";

/// An invalid name is 422 Invalid with a field cause; kubectl prints
/// `The <Kind> "<name>" is invalid: <field>: <cause>`. Nothing is created.
pub fn create_invalid_name_is_invalid_with_field_cause(c: &mut Cluster, k: &Kubectl) {
    let f = c.write_file("bad-name.yaml", BAD_NAME);
    k.fails_with(
        &["create", "-f", f.to_str().unwrap()],
        r#"The ConfigMap "Bad_Name" is invalid: metadata.name: Invalid value: "Bad_Name": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"#,
    );
    // Every namespace has `kube-root-ca.crt`; nothing else.
    let out = k.ok(&["get", "configmaps", "-n", "default", "-o", "name", "--field-selector=metadata.name!=kube-root-ca.crt"]);
    assert_eq!(out.stdout, "", "an invalid object is not stored");
}

/// kubectl's default `--validate=strict` asks the server to reject unknown
/// fields (`fieldValidation=Strict`): 400 BadRequest, nothing created.
pub fn create_unknown_field_is_rejected_by_strict_validation(c: &mut Cluster, k: &Kubectl) {
    let f = c.write_file("typo.yaml", UNKNOWN_FIELD);
    let path = f.to_str().unwrap();
    k.fails_with(
        &["create", "-f", path],
        &format!(
            r#"Error from server (BadRequest): error when creating "{path}": Pod in version "v1" cannot be handled as a Pod: strict decoding error: unknown field "spec.containers[0].imagee""#
        ),
    );
    k.fails_with(
        &["get", "pod", "typo", "-n", "default"],
        r#"Error from server (NotFound): pods "typo" not found"#,
    );
}

/// A request body over kube-apiserver's 3 MiB limit is 413
/// RequestEntityTooLarge and stores nothing.
pub fn create_body_over_3mib_is_request_entity_too_large(c: &mut Cluster, k: &Kubectl) {
    let big = "x".repeat(4 * 1024 * 1024);
    let f = c.write_file("big.yaml", &configmap("default", "big", &[("blob", &big)]));
    let path = f.to_str().unwrap();
    k.fails_with(
        &["create", "-f", path],
        &format!(r#"Error from server (RequestEntityTooLarge): error when creating "{path}": Request entity too large: limit is 3145728"#),
    );
    k.fails_with(
        &["get", "configmap", "big", "-n", "default"],
        r#"Error from server (NotFound): configmaps "big" not found"#,
    );
}

/// A ConfigMap whose data is over 1 MiB (upstream `MaxSecretSize`) is
/// Invalid with upstream's message, and nothing is stored.
pub fn create_configmap_over_1mib_is_invalid(c: &mut Cluster, k: &Kubectl) {
    let big = "x".repeat(1024 * 1024 + 1);
    let f = c.write_file("big-data.yaml", &configmap("default", "big", &[("blob", &big)]));
    k.fails_with(
        &["create", "-f", f.to_str().unwrap()],
        r#"The ConfigMap "big" is invalid: []: Too long: may not be more than 1048576 bytes"#,
    );
    k.fails_with(
        &["get", "configmap", "big", "-n", "default"],
        r#"Error from server (NotFound): configmaps "big" not found"#,
    );
}
