//! Discovery as kubectl sees it: `api-resources` (short names),
//! `api-versions`, `version`, and `explain` (OpenAPI v2 for 1.27, v3 later).

use crate::common::{str_at, Cluster, Kubectl, Table};

/// `api-resources` lists every served resource with its upstream short
/// names, group/version, scope and kind.
pub fn api_resources_lists_short_names(_c: &mut Cluster, k: &Kubectl) {
    let out = k.ok(&["api-resources"]);
    let t = Table::parse(&out.stdout);
    assert_eq!(
        t.header_strs(),
        ["NAME", "SHORTNAMES", "APIVERSION", "NAMESPACED", "KIND"]
    );
    let want = [
        ("configmaps", "cm", "v1", "true", "ConfigMap"),
        ("endpoints", "ep", "v1", "true", "Endpoints"),
        ("events", "ev", "v1", "true", "Event"),
        ("namespaces", "ns", "v1", "false", "Namespace"),
        ("nodes", "no", "v1", "false", "Node"),
        ("pods", "po", "v1", "true", "Pod"),
        ("secrets", "", "v1", "true", "Secret"),
        ("serviceaccounts", "sa", "v1", "true", "ServiceAccount"),
        ("services", "svc", "v1", "true", "Service"),
        ("deployments", "deploy", "apps/v1", "true", "Deployment"),
        ("leases", "", "coordination.k8s.io/v1", "true", "Lease"),
        (
            "endpointslices",
            "",
            "discovery.k8s.io/v1",
            "true",
            "EndpointSlice",
        ),
        ("persistentvolumeclaims", "pvc", "v1", "true", "PersistentVolumeClaim"),
        ("replicationcontrollers", "rc", "v1", "true", "ReplicationController"),
        ("componentstatuses", "cs", "v1", "false", "ComponentStatus"),
        ("statefulsets", "sts", "apps/v1", "true", "StatefulSet"),
        ("daemonsets", "ds", "apps/v1", "true", "DaemonSet"),
        ("jobs", "", "batch/v1", "true", "Job"),
        ("cronjobs", "cj", "batch/v1", "true", "CronJob"),
        ("horizontalpodautoscalers", "hpa", "autoscaling/v2", "true", "HorizontalPodAutoscaler"),
        ("ingresses", "ing", "networking.k8s.io/v1", "true", "Ingress"),
        ("priorityclasses", "pc", "scheduling.k8s.io/v1", "false", "PriorityClass"),
        ("storageclasses", "sc", "storage.k8s.io/v1", "false", "StorageClass"),
        ("apiservices", "", "apiregistration.k8s.io/v1", "false", "APIService"),
        ("certificatesigningrequests", "csr", "certificates.k8s.io/v1", "false", "CertificateSigningRequest"),
        ("events", "ev", "events.k8s.io/v1", "true", "Event"),
    ];
    // Every GA resource of Kubernetes 1.33 that rkube serves (52 rows today).
    assert!(t.rows.len() >= 52, "{} resources listed:\n{}", t.rows.len(), out.stdout);
    for (name, short, gv, namespaced, kind) in want {
        let found: Vec<&Vec<String>> = t
            .rows
            .iter()
            .filter(|r| r[0] == name && r[2] == gv)
            .collect();
        assert_eq!(
            found.len(),
            1,
            "one row for {name} ({gv}) in:\n{}",
            out.stdout
        );
        assert_eq!(
            found[0].iter().map(String::as_str).collect::<Vec<_>>(),
            [name, short, gv, namespaced, kind]
        );
    }

    let out = k.ok(&["api-resources", "--api-group=apps", "-o", "name"]);
    assert!(
        out.stdout.lines().any(|l| l == "deployments.apps"),
        "{}",
        out.stdout
    );

    let out = k.ok(&["api-versions"]);
    for gv in [
        "apps/v1",
        "coordination.k8s.io/v1",
        "discovery.k8s.io/v1",
        "v1",
    ] {
        assert!(
            out.stdout.lines().any(|l| l == gv),
            "api-versions lists {gv}:\n{}",
            out.stdout
        );
    }

    let v = k.ok(&["version", "-o", "json"]).json();
    assert!(
        str_at(&v, "/serverVersion/gitVersion").starts_with("v1."),
        "{v}"
    );
    assert_eq!(str_at(&v, "/serverVersion/major"), "1");

    let out = k.ok(&["explain", "pods.spec.containers.image"]);
    assert!(
        out.stdout.contains("KIND:") && out.stdout.contains("Pod"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("FIELD:") && out.stdout.contains("image"),
        "{}",
        out.stdout
    );
}

/// `/healthz`, `/livez`, `/readyz` answer `ok`; `?verbose` lists each check
/// as `[+]<name> ok` and ends with `readyz check passed`, like kube-apiserver.
pub fn health_endpoints_answer_like_kube_apiserver(_c: &mut Cluster, k: &Kubectl) {
    for path in ["/healthz", "/livez", "/readyz"] {
        let out = k.ok(&["get", "--raw", path]);
        assert_eq!(out.stdout, "ok", "GET {path}");
    }
    let out = k.ok(&["get", "--raw", "/readyz?verbose"]);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(
        lines.last().copied(),
        Some("readyz check passed"),
        "{}",
        out.stdout
    );
    assert!(lines.len() >= 2, "at least one named check: {}", out.stdout);
    for l in &lines[..lines.len() - 1] {
        assert!(
            l.starts_with("[+]") && l.ends_with(" ok"),
            "check line {l:?} in:\n{}",
            out.stdout
        );
    }
    assert!(
        lines.iter().any(|l| l.starts_with("[+]ping ")),
        "a ping check: {}",
        out.stdout
    );
}
