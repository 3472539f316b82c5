//! ClusterTrustBundles (`certificates.k8s.io/v1beta1`) on `rkube up --node` with the real
//! kubectl 1.33: `kubectl apply` and `get` of a bundle; an invalid PEM refused as upstream
//! refuses it (422, field `spec.trustBundle`); a bundle whose name lacks its signer's prefix
//! refused; a user without `attest` on the signer refused (403) while the admin may write; and,
//! as root (volumes are mounted only then), a pod reading the bundles projected by `name` and by
//! `signerName` + `labelSelector` (deduplicated, ordered by their bytes), and an empty file for
//! a missing `optional` one.
//!
//! The cluster process is killed by PID when its guard drops; the pod (a host process) dies
//! with it: its shell ends in `exec sleep`, so the process left is the one the runtime's
//! parent-death signal reaches.

use crate::common;

use std::time::Duration;

use base64::Engine as _;
use common::{Backend, Cluster, Credentials};

const LIMIT: Duration = Duration::from_secs(60);

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// A fresh self-signed CA: its PEM and the base64 of its DER (one line).
fn ca() -> (String, String) {
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let key = rcgen::KeyPair::generate().expect("key");
    let cert = params.self_signed(&key).expect("self-signed");
    (cert.pem(), base64::engine::general_purpose::STANDARD.encode(cert.der()))
}

/// A ClusterTrustBundle manifest; `pem` indented as a YAML block scalar.
fn bundle(name: &str, signer: Option<&str>, team: Option<&str>, pem: &str) -> String {
    let labels = team.map(|t| format!("  labels: {{team: {t}}}\n")).unwrap_or_default();
    let signer = signer.map(|s| format!("  signerName: {s}\n")).unwrap_or_default();
    let body: String = pem.lines().map(|l| format!("    {l}\n")).collect();
    format!("apiVersion: certificates.k8s.io/v1beta1\nkind: ClusterTrustBundle\nmetadata:\n  name: {name}\n{labels}spec:\n{signer}  trustBundle: |\n{body}")
}

#[test]
fn cluster_trust_bundles_are_validated_attested_and_projected_into_pods() {
    let fixtures = tempfile::tempdir().expect("tempdir");
    let tokens = fixtures.path().join("tokens.csv");
    std::fs::write(&tokens, "dave-secret,dave,1002\n").expect("token file");
    let cluster = Cluster::builder(Backend::Embedded).arg("--node").arg(format!("--token-auth-file={}", tokens.display())).start();
    let k = cluster.kubectl("1.33");
    let apply = |name: &str, yaml: &str| {
        let file = cluster.write_file(&format!("{name}.yaml"), yaml);
        k.run(&["apply", "-f", &file.display().to_string()])
    };

    // A bundle without a signer: apply, then get it back.
    let (plain_pem, plain_der) = ca();
    let f = apply("plain", &bundle("plain-ca", None, None, &plain_pem));
    assert_eq!((f.code, f.stdout.trim()), (Some(0), "clustertrustbundle.certificates.k8s.io/plain-ca created"), "{}", f.stderr);
    let got = k.json(&["get", "clustertrustbundle", "plain-ca", "-o", "json"]);
    assert_eq!(got["apiVersion"], "certificates.k8s.io/v1beta1");
    assert_eq!(got["spec"]["trustBundle"].as_str().map(str::trim), Some(plain_pem.trim()));
    let table = k.ok(&["get", "clustertrustbundle", "plain-ca"]).stdout;
    let rows: Vec<Vec<&str>> = table.lines().map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(rows, [vec!["NAME", "SIGNERNAME"], vec!["plain-ca", "<none>"]], "upstream's columns:\n{table}");

    // Upstream's validation: PEM of CA certificates only; names carry the signer's prefix.
    let f = apply("bad", &bundle("bad", None, None, "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----"));
    assert_eq!(f.code, Some(1), "{}", f.stdout);
    assert!(
        f.stderr.contains(r#"The ClusterTrustBundle "bad" is invalid: spec.trustBundle: Invalid value: "<value omitted>": entry 0 has bad block type: PRIVATE KEY"#),
        "{}",
        f.stderr
    );
    let (one_pem, one_der) = ca();
    let f = apply("unprefixed", &bundle("widgets", Some("example.com/widgets"), None, &one_pem));
    assert!(
        f.stderr.contains("metadata.name: Invalid value: \"widgets\": ClusterTrustBundle for signerName example.com/widgets must be named with prefix example.com:widgets:"),
        "{}",
        f.stderr
    );

    // Writing a bundle of a signer needs `attest` on it: dave may create bundles, not attest.
    k.ok(&["create", "clusterrole", "ctb-writer", "--verb=create,get,list", "--resource=clustertrustbundles.certificates.k8s.io"]);
    k.ok(&["create", "clusterrolebinding", "dave-ctb", "--clusterrole=ctb-writer", "--user=dave"]);
    let dave = cluster.kubectl_with("1.33", &cluster.write_kubeconfig_for("dave", &Credentials::Token("dave-secret".into())));
    let file = cluster.write_file("dave.yaml", &bundle("example.com:widgets:dave", Some("example.com/widgets"), Some("a"), &one_pem));
    let f = dave.run(&["create", "-f", &file.display().to_string()]);
    assert_eq!(f.code, Some(1), "{}", f.stdout);
    assert!(
        f.stderr.contains(r#"clustertrustbundles.certificates.k8s.io "example.com:widgets:dave" is forbidden: user not permitted to attest for signerName "example.com/widgets""#),
        "{}",
        f.stderr
    );

    // The admin attests: two bundles of team a (one anchor in both), one of team b.
    let (two_pem, two_der) = ca();
    let (other_pem, _) = ca();
    for (name, team, pem) in [
        ("example.com:widgets:one", "a", format!("{one_pem}{two_pem}")),
        ("example.com:widgets:two", "a", two_pem.clone()),
        ("example.com:widgets:three", "b", other_pem),
    ] {
        let f = apply(name, &bundle(name, Some("example.com/widgets"), Some(team), &pem));
        assert_eq!(f.code, Some(0), "{name}: {}", f.stderr);
    }
    let listed = k.ok(&["get", "clustertrustbundles", "--field-selector", "spec.signerName=example.com/widgets", "-o", "name"]);
    assert_eq!(listed.stdout.lines().count(), 3, "{}", listed.stdout);

    if !is_root() {
        eprintln!("projection skipped: volumes are mounted only when rkube runs as root");
        return;
    }
    cluster.wait_for_ready_node(&k, LIMIT);
    let b = cluster.dir().join("mnt").display().to_string();
    let pod = format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{name: trusting}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: c
    image: busybox
    command: [sh, -c]
    args:
    - |
      echo "BYNAME=$(grep -v -- ----- {b}/ca/by-name.pem | tr -d '\n')"
      echo "BYSIGNER=$(grep -v -- ----- {b}/ca/by-signer.pem | tr -d '\n') BLOCKS=$(grep -c BEGIN {b}/ca/by-signer.pem)"
      echo "NONE=$(wc -c < {b}/ca/none.pem)"
      exec sleep 3600
    volumeMounts: [{{name: ca, mountPath: {b}/ca}}]
  volumes:
  - name: ca
    projected:
      sources:
      - clusterTrustBundle: {{name: plain-ca, path: by-name.pem}}
      - clusterTrustBundle: {{signerName: example.com/widgets, labelSelector: {{matchLabels: {{team: a}}}}, path: by-signer.pem}}
      - clusterTrustBundle: {{name: not-there, optional: true, path: none.pem}}
"#
    );
    let file = cluster.write_file("pod.yaml", &pod);
    k.ok(&["apply", "-f", &file.display().to_string()]);
    let log = cluster.wait_until("the projected bundles in the log", LIMIT, || {
        let out = k.run(&["logs", "trusting"]).stdout;
        out.contains("NONE=").then_some(out)
    });
    let mut team_a = [
        base64::engine::general_purpose::STANDARD.decode(&one_der).expect("der"),
        base64::engine::general_purpose::STANDARD.decode(&two_der).expect("der"),
    ];
    team_a.sort();
    let by_signer: String = team_a.iter().map(|d| base64::engine::general_purpose::STANDARD.encode(d)).collect();
    for want in [format!("BYNAME={plain_der}"), format!("BYSIGNER={by_signer} BLOCKS=2"), "NONE=0".to_string()] {
        assert!(log.contains(&want), "{want:?} missing in:\n{log}");
    }
}
