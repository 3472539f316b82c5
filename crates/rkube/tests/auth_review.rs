//! `kubectl auth whoami` and `kubectl auth can-i` (kubectl 1.27 and 1.33)
//! against `rkube up`, answered by the review APIs: SelfSubjectReview for
//! `whoami`, SelfSubjectAccessReview for `can-i`, SelfSubjectRulesReview for
//! `can-i --list`; the admin certificate user and a `--token-auth-file`
//! user, RBAC bindings made with kubectl, `--as` impersonation and `-n`.
//! kubectl 1.33 sends these bodies as protobuf, kubectl 1.27 as JSON.

use crate::common;

use common::{Backend, Cluster, Credentials, Kubectl};
use serde_json::json;

/// `rkube up` with a token file holding alice (uid 1001, group `dev`).
fn cluster_with_alice() -> (Cluster, tempfile::TempDir) {
    let fixtures = tempfile::tempdir().expect("tempdir");
    let tokens = fixtures.path().join("tokens.csv");
    std::fs::write(&tokens, "alice-secret,alice,1001,\"dev\"\n").expect("token file");
    let cluster = Cluster::builder(Backend::Embedded)
        .arg(format!("--token-auth-file={}", tokens.display()))
        .start();
    (cluster, fixtures)
}

fn alice(cluster: &Cluster, version: &str) -> Kubectl {
    cluster.kubectl_with(
        version,
        &cluster.write_kubeconfig_for("alice", &Credentials::Token("alice-secret".into())),
    )
}

/// Runs `can-i` and asserts its exit code (0 yes, 1 no) and stdout.
#[track_caller]
fn can_i(kubectl: &Kubectl, args: &[&str], allowed: bool) {
    let mut a = vec!["auth", "can-i"];
    a.extend_from_slice(args);
    let f = kubectl.run(&a);
    let want = if allowed { (Some(0), "yes") } else { (Some(1), "no") };
    assert_eq!((f.code, f.stdout.trim()), want, "`{}`: {}", f.cmdline, f.stderr);
}

/// kubectl 1.27's `auth whoami` asks only authentication.k8s.io/v1beta1 and
/// v1alpha1, which Kubernetes 1.33 does not serve by default (v1 is GA since
/// 1.28): it fails against rkube as against kube-apiserver 1.33.
fn whoami_of_kubectl_1_27_needs_the_beta_api_kubernetes_1_33_does_not_serve() {
    let (cluster, _fixtures) = cluster_with_alice();
    let f = cluster.kubectl("1.27").run(&["auth", "whoami"]);
    assert_eq!(
        (f.code, f.stderr.trim_end()),
        (
            Some(1),
            "error: the selfsubjectreviews API is not enabled in the cluster\n\
             enable APISelfSubjectReview feature gate and authentication.k8s.io/v1alpha1 or authentication.k8s.io/v1beta1 API"
        ),
        "{}",
        f.stdout
    );
}

#[test]
fn kubectl_1_27_whoami_is_not_enabled_as_against_kubernetes_1_33() {
    whoami_of_kubectl_1_27_needs_the_beta_api_kubernetes_1_33_does_not_serve();
}

#[test]
fn kubectl_1_33_whoami_names_the_admin_certificate_user_and_token_users() {
    whoami_names_the_admin_certificate_user_and_token_users("1.33");
}

fn whoami_names_the_admin_certificate_user_and_token_users(version: &str) {
    let (cluster, _fixtures) = cluster_with_alice();
    let admin = cluster.kubectl(version);
    let f = admin.ok(&["auth", "whoami"]);
    assert_eq!(
        common::lines(&f.stdout),
        vec![
            "ATTRIBUTE   VALUE",
            "Username    rkube-admin",
            "Groups      [system:masters system:authenticated]",
        ],
        "{}",
        f.stdout
    );
    let alice = alice(&cluster, version);
    let got = alice.json(&["auth", "whoami"]);
    assert_eq!(got["kind"], "SelfSubjectReview", "{got}");
    assert_eq!(
        got["status"]["userInfo"],
        json!({"username": "alice", "uid": "1001", "groups": ["dev", "system:authenticated"]}),
        "{got}"
    );
    // --as / --as-group (admin may impersonate): whoami shows the target.
    let f = admin.ok(&["auth", "whoami", "--as=bob", "--as-group=qa"]);
    assert_eq!(
        common::lines(&f.stdout),
        vec!["ATTRIBUTE   VALUE", "Username    bob", "Groups      [qa system:authenticated]"],
        "{}",
        f.stdout
    );
}

fn can_i_answers_yes_or_no_from_rbac(version: &str) {
    let (cluster, _fixtures) = cluster_with_alice();
    let admin = cluster.kubectl(version);
    let alice = alice(&cluster, version);
    // Discovery lists the review resources (create only: none is listable).
    let f = admin.ok(&["api-resources", "--api-group=authentication.k8s.io", "-o", "name"]);
    assert_eq!(common::lines(&f.stdout), vec!["selfsubjectreviews.authentication.k8s.io", "tokenreviews.authentication.k8s.io"]);
    let f = admin.ok(&["api-resources", "--api-group=authorization.k8s.io", "--verbs=create", "-o", "name"]);
    assert_eq!(
        common::lines(&f.stdout),
        vec![
            "localsubjectaccessreviews.authorization.k8s.io",
            "selfsubjectaccessreviews.authorization.k8s.io",
            "selfsubjectrulesreviews.authorization.k8s.io",
            "subjectaccessreviews.authorization.k8s.io",
        ]
    );
    let f = admin.ok(&["api-resources", "--api-group=authorization.k8s.io", "--verbs=list", "-o", "name"]);
    assert_eq!(f.stdout.trim(), "", "{}", f.stderr);
    can_i(&admin, &["delete", "nodes"], true);
    can_i(&alice, &["list", "pods"], false);
    admin.ok(&["create", "role", "pod-reader", "-n", "default", "--verb=get,list", "--resource=pods"]);
    admin.ok(&["create", "rolebinding", "alice-reads", "-n", "default", "--role=pod-reader", "--user=alice"]);
    can_i(&alice, &["list", "pods"], true);
    can_i(&alice, &["get", "pods/web"], true);
    can_i(&alice, &["delete", "pods"], false);
    can_i(&alice, &["list", "pods", "-n", "kube-system"], false);
    can_i(&alice, &["create", "selfsubjectaccessreviews.authorization.k8s.io"], true);
    // --as: the admin asks on alice's behalf (impersonation).
    can_i(&admin, &["list", "pods", "--as=alice"], true);
    can_i(&admin, &["list", "pods", "--as=alice", "-n", "kube-system"], false);
    can_i(&admin, &["list", "pods", "--as=bob", "--as-group=dev"], false);
}

fn can_i_list_shows_the_rules_of_the_namespace(version: &str) {
    let (cluster, _fixtures) = cluster_with_alice();
    let admin = cluster.kubectl(version);
    let alice = alice(&cluster, version);
    admin.ok(&["create", "role", "pod-reader", "-n", "default", "--verb=get,list", "--resource=pods", "--resource-name=web"]);
    admin.ok(&["create", "rolebinding", "alice-reads", "-n", "default", "--role=pod-reader", "--user=alice"]);
    let table = |f: common::process::Finished| -> Vec<Vec<String>> {
        common::lines(&f.stdout).iter().map(|l| l.split_whitespace().map(str::to_owned).collect()).collect()
    };
    let rows = table(alice.ok(&["auth", "can-i", "--list"]));
    assert_eq!(rows[0], vec!["Resources", "Non-Resource", "URLs", "Resource", "Names", "Verbs"], "{rows:?}");
    let has = |rows: &[Vec<String>], row: &[&str]| rows.iter().any(|r| r == row);
    assert!(has(&rows, &["pods", "[]", "[web]", "[get", "list]"]), "{rows:?}");
    assert!(has(&rows, &["selfsubjectreviews.authentication.k8s.io", "[]", "[]", "[create]"]), "{rows:?}");
    assert!(has(&rows, &["[/healthz]", "[]", "[get]"]), "{rows:?}");
    // In kube-system alice's RoleBinding does not apply.
    let rows = table(alice.ok(&["auth", "can-i", "--list", "-n", "kube-system"]));
    assert!(!rows.iter().any(|r| r[0] == "pods"), "{rows:?}");
    // The same through --as from the admin.
    let rows = table(admin.ok(&["auth", "can-i", "--list", "--as=alice"]));
    assert!(has(&rows, &["pods", "[]", "[web]", "[get", "list]"]), "{rows:?}");
    // The admin (system:masters): cluster-admin's wildcards.
    let rows = table(admin.ok(&["auth", "can-i", "--list"]));
    assert!(has(&rows, &["*.*", "[]", "[]", "[*]"]), "{rows:?}");
    assert!(has(&rows, &["[*]", "[]", "[*]"]), "{rows:?}");
}

per_kubectl_version!(
    can_i_answers_yes_or_no_from_rbac,
    can_i_list_shows_the_rules_of_the_namespace,
);
