//! ServiceAccounts on `rkube up`, with kubectl 1.27 and 1.33: every
//! namespace gets its `default` ServiceAccount and `kube-root-ca.crt`;
//! `kubectl create token` issues bound tokens that authenticate as
//! `system:serviceaccount:<ns>:<name>` (403 until RBAC allows, then 200),
//! stop authenticating when the pod they are bound to is deleted, and are
//! refused once expired; legacy token Secrets are filled and stop working when
//! deleted; the issuer's JWKS verifies a token's signature with an
//! independent ES256 implementation (ring); pods get their ServiceAccount and
//! the projected token volume, and a missing ServiceAccount is refused.

use crate::common;

use std::time::{Duration, Instant};

use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine as _;
use common::{Cluster, Credentials, Kubectl};
use serde_json::Value;

const ISSUER: &str = "https://kubernetes.default.svc.cluster.local";
const UNAUTHORIZED: &str = "error: You must be logged in to the server (Unauthorized)";

/// Polls `f` until it returns `Some`, for up to 10 s.
#[track_caller]
fn eventually<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn as_token(cluster: &Cluster, version: &str, name: &str, token: &str) -> Kubectl {
    cluster.kubectl_with(version, &cluster.write_kubeconfig_for(name, &Credentials::Token(token.to_string())))
}

fn payload(token: &str) -> Value {
    let part = token.split('.').nth(1).expect("a JWT has a payload");
    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(part).expect("base64url")).expect("JSON claims")
}

/// Asserts `kubectl get --raw` with this identity answers 401.
#[track_caller]
fn assert_unauthorized(kubectl: &Kubectl) {
    kubectl.fails_with(&["get", "--raw", "/api/v1/namespaces/team/pods"], UNAUTHORIZED);
}

fn new_namespace_gets_default_service_account_and_root_ca(version: &str) {
    let cluster = Cluster::start(common::Backend::Embedded);
    let admin = cluster.kubectl(version);
    admin.ok(&["create", "namespace", "team"]);
    let sa = eventually("the default ServiceAccount", || {
        let f = admin.run(&["get", "serviceaccount", "default", "-n", "team", "-o", "json"]);
        (f.code == Some(0)).then(|| f.json())
    });
    assert!(!common::str_at(&sa, "/metadata/uid").is_empty());
    let ca = std::fs::read_to_string(cluster.pki_dir().join("ca.crt")).expect("ca.crt");
    let cm = eventually("kube-root-ca.crt", || {
        let f = admin.run(&["get", "configmap", "kube-root-ca.crt", "-n", "team", "-o", "json"]);
        (f.code == Some(0)).then(|| f.json())
    });
    assert_eq!(common::str_at(&cm, "/data/ca.crt"), ca);
    // Deleted, it comes back.
    admin.ok(&["delete", "serviceaccount", "default", "-n", "team"]);
    let again = eventually("the default ServiceAccount again", || {
        let f = admin.run(&["get", "serviceaccount", "default", "-n", "team", "-o", "json"]);
        (f.code == Some(0)).then(|| f.json())
    });
    assert_ne!(common::str_at(&again, "/metadata/uid"), common::str_at(&sa, "/metadata/uid"));
}

fn bound_tokens_authenticate_until_their_pod_is_deleted_and_expire(version: &str) {
    let cluster = Cluster::start(common::Backend::Embedded);
    let admin = cluster.kubectl(version);
    admin.ok(&["create", "namespace", "team"]);
    eventually("the default ServiceAccount", || {
        (admin.run(&["get", "serviceaccount", "default", "-n", "team"]).code == Some(0)).then_some(())
    });

    let token = admin.ok(&["create", "token", "default", "-n", "team", "--duration=20m"]).stdout.trim().to_string();
    let claims = payload(&token);
    assert_eq!(claims["iss"], ISSUER);
    assert_eq!(claims["sub"], "system:serviceaccount:team:default");
    assert_eq!(claims["aud"], ISSUER);
    assert_eq!(claims["exp"].as_i64().unwrap() - claims["iat"].as_i64().unwrap(), 1200);
    let sa = as_token(&cluster, version, "sa", &token);
    sa.fails_with(
        &["get", "pods", "-n", "team"],
        r#"Error from server (Forbidden): pods is forbidden: User "system:serviceaccount:team:default" cannot list resource "pods" in API group "" in the namespace "team""#,
    );
    admin.ok(&["create", "rolebinding", "sa-view", "--clusterrole=view", "--serviceaccount=team:default", "-n", "team"]);
    let f = sa.ok(&["get", "pods", "-n", "team"]);
    assert_eq!(f.stderr.trim(), "No resources found in team namespace.");

    // A token bound to a pod names it, and dies with it.
    admin.ok(&["run", "p", "-n", "team", "--image=busybox", "--restart=Never", "--", "sleep", "3600"]);
    let bound = admin
        .ok(&["create", "token", "default", "-n", "team", "--bound-object-kind=Pod", "--bound-object-name=p"])
        .stdout
        .trim()
        .to_string();
    let pod = admin.json(&["get", "pod", "p", "-n", "team"]);
    assert_eq!(payload(&bound)["kubernetes.io"]["pod"]["uid"], pod["metadata"]["uid"]);
    let pod_sa = as_token(&cluster, version, "pod-sa", &bound);
    pod_sa.ok(&["get", "pods", "-n", "team"]);
    admin.ok(&["delete", "pod", "p", "-n", "team", "--grace-period=0", "--force"]);
    eventually("the pod to be gone", || (admin.run(&["get", "pod", "p", "-n", "team"]).code == Some(1)).then_some(()));
    assert_unauthorized(&pod_sa);
    // The unbound token still works.
    sa.ok(&["get", "pods", "-n", "team"]);

    // An expired token of the same key and issuer: 401.
    let key = rkube_apiserver::serviceaccount::keys::load_signing_key(&cluster.pki_dir().join("sa.key")).expect("sa.key");
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64;
    let mut claims = claims.clone();
    claims["iat"] = (now - 7200).into();
    claims["nbf"] = (now - 7200).into();
    claims["exp"] = (now - 3600).into();
    let header = jsonwebtoken::Header { alg: jsonwebtoken::Algorithm::ES256, kid: Some(key.public.kid.clone()), ..Default::default() };
    let expired = jsonwebtoken::encode(&header, &claims, &key.encoding).expect("sign");
    assert_unauthorized(&as_token(&cluster, version, "expired", &expired));
    // The same claims unexpired authenticate: the expiry is what failed.
    claims["exp"] = (now + 600).into();
    let fresh = jsonwebtoken::encode(&header, &claims, &key.encoding).expect("sign");
    as_token(&cluster, version, "fresh", &fresh).ok(&["get", "pods", "-n", "team"]);

    // TokenRequest validation: at least 10 minutes.
    let short = admin.run(&["create", "token", "default", "-n", "team", "--duration=5m"]);
    assert_ne!(short.code, Some(0));
    assert!(short.stderr.contains("may not specify a duration less than 10 minutes"), "{}", short.stderr);
}

fn jwks_verifies_a_token_signature_independently(version: &str) {
    let cluster = Cluster::start(common::Backend::Embedded);
    let admin = cluster.kubectl(version);
    let config: Value = serde_json::from_str(&admin.ok(&["get", "--raw", "/.well-known/openid-configuration"]).stdout).unwrap();
    assert_eq!(config["issuer"], ISSUER);
    assert_eq!(config["jwks_uri"], format!("{ISSUER}/openid/v1/jwks"));
    eventually("the default ServiceAccount", || {
        (admin.run(&["get", "serviceaccount", "default"]).code == Some(0)).then_some(())
    });
    let token = admin.ok(&["create", "token", "default"]).stdout.trim().to_string();
    // ServiceAccounts may read the key set (system:service-account-issuer-discovery).
    let jwks: Value =
        serde_json::from_str(&as_token(&cluster, version, "sa", &token).ok(&["get", "--raw", "/openid/v1/jwks"]).stdout).unwrap();
    let header: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(token.split('.').next().unwrap()).unwrap()).unwrap();
    assert_eq!(header["alg"], "ES256");
    let key = jwks["keys"].as_array().unwrap().iter().find(|k| k["kid"] == header["kid"]).expect("the token's kid is published");
    let mut point = vec![4u8];
    point.extend(URL_SAFE_NO_PAD.decode(key["x"].as_str().unwrap()).unwrap());
    point.extend(URL_SAFE_NO_PAD.decode(key["y"].as_str().unwrap()).unwrap());
    let public = ring::signature::UnparsedPublicKey::new(&ring::signature::ECDSA_P256_SHA256_FIXED, point);
    let (signed, signature) = token.rsplit_once('.').unwrap();
    let signature = URL_SAFE_NO_PAD.decode(signature).unwrap();
    public.verify(signed.as_bytes(), &signature).expect("the published key verifies the token");
    let mut tampered = signed.as_bytes().to_vec();
    let last = tampered.len() - 1;
    tampered[last] ^= 1;
    assert!(public.verify(&tampered, &signature).is_err(), "a changed token does not verify");
}

fn pods_get_their_service_account_and_token_volume(version: &str) {
    let cluster = Cluster::start(common::Backend::Embedded);
    let admin = cluster.kubectl(version);
    eventually("the default ServiceAccount", || {
        (admin.run(&["get", "serviceaccount", "default"]).code == Some(0)).then_some(())
    });
    admin.ok(&["run", "web", "--image=busybox", "--restart=Never", "--", "sleep", "3600"]);
    let pod = admin.json(&["get", "pod", "web"]);
    assert_eq!(common::str_at(&pod, "/spec/serviceAccountName"), "default");
    let volume = &pod["spec"]["volumes"][0];
    let vname = volume["name"].as_str().unwrap();
    assert!(vname.starts_with("kube-api-access-") && vname.len() == "kube-api-access-".len() + 5, "{vname}");
    let sources = &volume["projected"]["sources"];
    assert_eq!(sources[0]["serviceAccountToken"]["expirationSeconds"], 3607);
    assert_eq!(sources[1]["configMap"]["name"], "kube-root-ca.crt");
    assert_eq!(sources[2]["downwardAPI"]["items"][0]["fieldRef"]["fieldPath"], "metadata.namespace");
    let mount = &pod["spec"]["containers"][0]["volumeMounts"][0];
    assert_eq!(mount["mountPath"], "/var/run/secrets/kubernetes.io/serviceaccount");
    assert_eq!(mount["readOnly"], true);
    assert_eq!(mount["name"], vname);

    let no_token = r#"{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "quiet"},
        "spec": {"automountServiceAccountToken": false, "containers": [{"name": "c", "image": "busybox"}]}}"#;
    admin.run_stdin(&["create", "-f", "-"], no_token).success();
    let quiet = admin.json(&["get", "pod", "quiet"]);
    assert!(quiet["spec"].get("volumes").is_none(), "{quiet}");

    let ghost = r#"{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "haunted"},
        "spec": {"serviceAccountName": "ghost", "containers": [{"name": "c", "image": "busybox"}]}}"#;
    let f = admin.run_stdin(&["create", "-f", "-"], ghost);
    assert_eq!(
        (f.code, f.stderr.trim()),
        (
            Some(1),
            r#"Error from server (Forbidden): error when creating "STDIN": pods "haunted" is forbidden: error looking up service account default/ghost: serviceaccount "ghost" not found"#
        )
    );
}

fn legacy_token_secret_is_filled_and_dies_with_it(version: &str) {
    let cluster = Cluster::start(common::Backend::Embedded);
    let admin = cluster.kubectl(version);
    admin.ok(&["create", "serviceaccount", "builder"]);
    let secret = r#"{"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/service-account-token",
        "metadata": {"name": "builder-token", "annotations": {"kubernetes.io/service-account.name": "builder"}}}"#;
    admin.run_stdin(&["create", "-f", "-"], secret).success();
    let filled = eventually("the token controller", || {
        let s = admin.json(&["get", "secret", "builder-token"]);
        s["data"]["token"].is_string().then_some(s)
    });
    let token = String::from_utf8(STANDARD.decode(filled["data"]["token"].as_str().unwrap()).unwrap()).unwrap();
    assert_eq!(payload(&token)["iss"], "kubernetes/serviceaccount");
    assert_eq!(STANDARD.decode(filled["data"]["namespace"].as_str().unwrap()).unwrap(), b"default");
    let sa = admin.json(&["get", "serviceaccount", "builder"]);
    assert_eq!(filled["metadata"]["annotations"]["kubernetes.io/service-account.uid"], sa["metadata"]["uid"]);
    let builder = as_token(&cluster, version, "builder", &token);
    builder.fails_with(
        &["get", "pods"],
        r#"Error from server (Forbidden): pods is forbidden: User "system:serviceaccount:default:builder" cannot list resource "pods" in API group "" in the namespace "default""#,
    );
    admin.ok(&["delete", "secret", "builder-token"]);
    builder.fails_with(&["get", "--raw", "/api/v1/namespaces/default/pods"], UNAUTHORIZED);
}

per_kubectl_version!(
    new_namespace_gets_default_service_account_and_root_ca,
    bound_tokens_authenticate_until_their_pod_is_deleted_and_expire,
    jwks_verifies_a_token_signature_independently,
    pods_get_their_service_account_and_token_volume,
    legacy_token_secret_is_filled_and_dies_with_it,
);
