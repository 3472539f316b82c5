//! `kubectl get`: server-side tables, output formats, all-namespaces,
//! label and field selectors, and paging with `--chunk-size`.

use serde_json::{json, Value};

use super::apply::apply_app;
use super::manifests::{configmap, event, DEFAULT_POD, NODE_A};
use crate::common::table::is_age;
use crate::common::{at, item_names, str_at, Cluster, Kubectl, Table};

fn apply_default_pod(c: &Cluster, k: &Kubectl) {
    let f = c.write_file("tools.yaml", DEFAULT_POD);
    let out = k.ok(&["apply", "-f", f.to_str().unwrap()]);
    assert_eq!(out.stdout.trim_end(), "pod/tools created");
}

#[track_caller]
fn get_table(k: &Kubectl, args: &[&str]) -> Table {
    let mut a = vec!["get"];
    a.extend_from_slice(args);
    let out = k.ok(&a);
    Table::parse(&out.stdout)
}

/// `kubectl get <kind>` prints the server-side Table columns kube-apiserver
/// prints for each common kind, with the values of our objects.
pub fn get_table_shows_upstream_columns(c: &mut Cluster, k: &Kubectl) {
    apply_app(c, k);

    let t = get_table(k, &["pods", "-n", "shop"]);
    assert_eq!(
        t.header_strs(),
        ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    );
    assert_eq!(t.rows.len(), 1, "{t:?}");
    assert_eq!(&t.rows[0][..4], ["web-0", "0/1", "Pending", "0"]);
    assert!(is_age(&t.rows[0][4]), "AGE cell {:?}", t.rows[0][4]);

    let t = get_table(k, &["services", "-n", "shop"]);
    assert_eq!(
        t.header_strs(),
        [
            "NAME",
            "TYPE",
            "CLUSTER-IP",
            "EXTERNAL-IP",
            "PORT(S)",
            "AGE"
        ]
    );
    assert_eq!(
        &t.row("NAME", "web")[..5],
        ["web", "ClusterIP", "10.96.100.10", "<none>", "80/TCP"]
    );

    let t = get_table(k, &["deployments", "-n", "shop"]);
    assert_eq!(
        t.header_strs(),
        ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"]
    );
    assert_eq!(&t.row("NAME", "web")[..4], ["web", "0/2", "0", "0"]);

    let t = get_table(k, &["configmaps", "-n", "shop"]);
    assert_eq!(t.header_strs(), ["NAME", "DATA", "AGE"]);
    assert_eq!(&t.row("NAME", "web-config")[..2], ["web-config", "1"]);

    let t = get_table(k, &["endpointslices", "-n", "shop"]);
    assert_eq!(
        t.header_strs(),
        ["NAME", "ADDRESSTYPE", "PORTS", "ENDPOINTS", "AGE"]
    );
    assert_eq!(
        &t.row("NAME", "web-abc12")[..4],
        ["web-abc12", "IPv4", "8080", "10.244.0.5"]
    );

    let t = get_table(k, &["namespaces"]);
    assert_eq!(t.header_strs(), ["NAME", "STATUS", "AGE"]);
    for ns in ["default", "shop"] {
        assert_eq!(
            t.cell(&t.row("NAME", ns), "STATUS"),
            "Active",
            "namespace {ns}"
        );
    }

    // Short names from discovery work as resource names.
    let t = get_table(k, &["po,svc", "-n", "shop"]);
    assert!(
        t.rows.iter().any(|r| r[0] == "pod/web-0"),
        "kubectl get po,svc: {t:?}"
    );
}

/// `-o json`, `-o yaml` and `-o wide` show the stored object with
/// server-set metadata, and the priority-1 table columns.
pub fn get_output_json_yaml_and_wide(c: &mut Cluster, k: &Kubectl) {
    apply_app(c, k);
    apply_default_pod(c, k);

    let pod = k.json(&["get", "pod", "web-0", "-n", "shop"]);
    assert_eq!(
        (str_at(&pod, "/apiVersion"), str_at(&pod, "/kind")),
        ("v1", "Pod")
    );
    assert_eq!(
        (
            str_at(&pod, "/metadata/name"),
            str_at(&pod, "/metadata/namespace")
        ),
        ("web-0", "shop")
    );
    assert!(!str_at(&pod, "/metadata/uid").is_empty());
    assert!(
        str_at(&pod, "/metadata/creationTimestamp").ends_with('Z'),
        "RFC 3339 UTC creationTimestamp: {pod}"
    );
    assert!(
        str_at(&pod, "/metadata/resourceVersion")
            .parse::<u64>()
            .is_ok(),
        "numeric resourceVersion: {pod}"
    );
    assert_eq!(str_at(&pod, "/status/phase"), "Pending");

    let list = k.json(&["get", "pods", "-n", "shop"]);
    assert_eq!(
        (str_at(&list, "/apiVersion"), str_at(&list, "/kind")),
        ("v1", "List")
    );
    assert_eq!(item_names(&list), ["web-0"]);
    assert_eq!(str_at(&list, "/items/0/kind"), "Pod");

    let yaml = k.ok(&["get", "pod", "web-0", "-n", "shop", "-o", "yaml"]);
    let from_yaml: Value = serde_yaml::from_str(&yaml.stdout)
        .unwrap_or_else(|e| panic!("-o yaml is not YAML ({e}):\n{}", yaml.stdout));
    assert_eq!(from_yaml, pod, "-o yaml and -o json show the same object");

    let t = get_table(k, &["pods", "-A", "-o", "wide"]);
    assert_eq!(
        t.header_strs(),
        [
            "NAMESPACE",
            "NAME",
            "READY",
            "STATUS",
            "RESTARTS",
            "AGE",
            "IP",
            "NODE",
            "NOMINATED NODE",
            "READINESS GATES"
        ]
    );
    let tools = t.row("NAME", "tools");
    assert_eq!(t.cell(&tools, "NODE"), "node-a");
    assert_eq!(t.cell(&tools, "IP"), "<none>");
    let web = t.row("NAME", "web-0");
    assert_eq!(
        [
            t.cell(&web, "NODE"),
            t.cell(&web, "NOMINATED NODE"),
            t.cell(&web, "READINESS GATES")
        ],
        ["<none>"; 3]
    );

    let t = get_table(k, &["services", "-n", "shop", "-o", "wide"]);
    assert_eq!(
        t.header_strs(),
        [
            "NAME",
            "TYPE",
            "CLUSTER-IP",
            "EXTERNAL-IP",
            "PORT(S)",
            "AGE",
            "SELECTOR"
        ]
    );
    assert_eq!(t.cell(&t.row("NAME", "web"), "SELECTOR"), "app=web");

    let t = get_table(k, &["deployments", "-n", "shop", "-o", "wide"]);
    assert_eq!(
        t.header_strs(),
        [
            "NAME",
            "READY",
            "UP-TO-DATE",
            "AVAILABLE",
            "AGE",
            "CONTAINERS",
            "IMAGES",
            "SELECTOR"
        ]
    );
    let web = t.row("NAME", "web");
    assert_eq!(
        [
            t.cell(&web, "CONTAINERS"),
            t.cell(&web, "IMAGES"),
            t.cell(&web, "SELECTOR")
        ],
        ["web,sidecar", "nginx:1.25,busybox:1.36", "app=web"]
    );
}

fn ns_name_rows(t: &Table) -> Vec<(String, String)> {
    let (ns, name) = (t.col("NAMESPACE"), t.col("NAME"));
    t.rows
        .iter()
        .map(|r| (r[ns].clone(), r[name].clone()))
        .collect()
}

fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
    p.iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

/// `-A` lists across namespaces; `-l` (equality and set-based) and
/// `--field-selector` filter on the server.
pub fn get_all_namespaces_with_label_and_field_selectors(c: &mut Cluster, k: &Kubectl) {
    apply_app(c, k);
    apply_default_pod(c, k);

    let t = get_table(k, &["pods", "-A"]);
    assert_eq!(
        t.header_strs(),
        ["NAMESPACE", "NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    );
    assert_eq!(
        ns_name_rows(&t),
        pairs(&[("default", "tools"), ("shop", "web-0")])
    );

    // (kubectl get arguments, expected (namespace, name) rows)
    type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)]);
    let cases: &[Case] = &[
        (&["-l", "app=web"], &[("shop", "web-0")]),
        (&["-l", "app!=web"], &[("default", "tools")]),
        (&["-l", "app in (tools,other)"], &[("default", "tools")]),
        (&["-l", "app,app notin (web)"], &[("default", "tools")]),
        (
            &["--field-selector", "metadata.namespace=shop"],
            &[("shop", "web-0")],
        ),
        (
            &["--field-selector", "metadata.name=tools"],
            &[("default", "tools")],
        ),
        (
            &["--field-selector", "spec.nodeName=node-a"],
            &[("default", "tools")],
        ),
        (
            &["--field-selector", "spec.nodeName="],
            &[("shop", "web-0")],
        ),
        (
            &["--field-selector", "status.phase=Pending"],
            &[("default", "tools"), ("shop", "web-0")],
        ),
        (
            &["-l", "app=web", "--field-selector", "status.phase!=Pending"],
            &[],
        ),
    ];
    for (args, want) in cases {
        let mut a = vec!["get", "pods", "-A"];
        a.extend_from_slice(args);
        let out = k.ok(&a);
        if want.is_empty() {
            assert_eq!(
                (out.stdout.as_str(), out.stderr.trim_end()),
                ("", "No resources found"),
                "kubectl {a:?}"
            );
        } else {
            assert_eq!(
                ns_name_rows(&Table::parse(&out.stdout)),
                pairs(want),
                "kubectl {a:?}"
            );
        }
    }

    // Namespaced list with a selector (set-based too: the endpointslice
    // controller's own slice for `web` is left out by its managed-by label).
    let list = k.json(&[
        "get",
        "services,endpointslices",
        "-n",
        "shop",
        "-l",
        "kubernetes.io/service-name=web,!endpointslice.kubernetes.io/managed-by",
    ]);
    assert_eq!(item_names(&list), ["web-abc12"]);
}

/// Leaves out the `kube-root-ca.crt` ConfigMap every namespace gets.
const NOT_ROOT_CA: &str = "--field-selector=metadata.name!=kube-root-ca.crt";

/// `--chunk-size=2` pages through more objects than one chunk: kubectl sends
/// `limit=2` then follows `metadata.continue` until done, and shows every
/// object exactly once.
pub fn get_chunk_size_pages_through_every_object(c: &mut Cluster, k: &Kubectl) {
    k.ok(&["create", "namespace", "paged"]);
    let docs: Vec<String> = (0..5)
        .map(|i| configmap("paged", &format!("cm-{i}"), &[("i", &i.to_string())]))
        .collect();
    let f = c.write_file("paged.yaml", &docs.join("---\n"));
    k.ok(&["create", "-f", f.to_str().unwrap()]);

    let out = k.ok(&["get", "configmaps", "-n", "paged", NOT_ROOT_CA, "--chunk-size=2", "-v=6"]);
    let t = Table::parse(&out.stdout);
    assert_eq!(t.header_strs(), ["NAME", "DATA", "AGE"]);
    assert_eq!(t.column("NAME"), ["cm-0", "cm-1", "cm-2", "cm-3", "cm-4"]);
    let requests: Vec<&str> = out
        .stderr
        .lines()
        .filter(|l| l.contains("/namespaces/paged/configmaps?"))
        .collect();
    assert_eq!(
        requests.len(),
        3,
        "5 objects in pages of 2 = 3 requests:\n{}",
        requests.join("\n")
    );
    // kubectl 1.27 logs `GET <url> 200 OK in N milliseconds`, 1.33 `"Response" verb="GET" url="<url>" status="200 OK"`.
    assert!(
        requests
            .iter()
            .all(|l| l.contains("limit=2") && l.contains("200 OK")),
        "{requests:#?}"
    );
    assert_eq!(
        requests.iter().filter(|l| l.contains("continue=")).count(),
        2,
        "{requests:#?}"
    );

    let list = k.json(&["get", "configmaps", "-n", "paged", NOT_ROOT_CA, "--chunk-size=2"]);
    assert_eq!(item_names(&list), ["cm-0", "cm-1", "cm-2", "cm-3", "cm-4"]);
    assert_eq!(at(&list, "/items/4/data"), &json!({"i": "4"}));

    let out = k.ok(&[
        "get",
        "configmaps",
        "-n",
        "paged",
        NOT_ROOT_CA,
        "--chunk-size=2",
        "-o",
        "name",
    ]);
    assert_eq!(
        out.stdout.lines().collect::<Vec<_>>(),
        [
            "configmap/cm-0",
            "configmap/cm-1",
            "configmap/cm-2",
            "configmap/cm-3",
            "configmap/cm-4"
        ]
    );
}

/// Tables for nodes (STATUS from the Ready condition, VERSION from the
/// kubelet), events (LAST SEEN, OBJECT as kind/name) and secrets (TYPE,
/// DATA); a secret's data reads back base64-encoded.
pub fn get_table_for_nodes_events_and_secrets(c: &mut Cluster, k: &Kubectl) {
    let f = c.write_file("node.yaml", NODE_A);
    let out = k.ok(&["apply", "-f", f.to_str().unwrap()]);
    assert_eq!(out.stdout.trim_end(), "node/node-a created");
    let t = get_table(k, &["nodes"]);
    assert_eq!(
        t.header_strs(),
        ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    );
    let row = t.row("NAME", "node-a");
    assert_eq!(
        [
            t.cell(&row, "STATUS"),
            t.cell(&row, "ROLES"),
            t.cell(&row, "VERSION")
        ],
        ["Ready", "<none>", "v1.33.0"]
    );
    let t = get_table(k, &["nodes", "-o", "wide"]);
    let row = t.row("NAME", "node-a");
    assert_eq!(t.cell(&row, "INTERNAL-IP"), "10.0.0.10");
    assert_eq!(t.cell(&row, "CONTAINER-RUNTIME"), "containerd://1.6.20");

    k.ok(&["create", "namespace", "shop"]);
    let f = c.write_file(
        "event.yaml",
        &event(
            "web-0.1",
            "Pod",
            "v1",
            "web-0",
            "uid-1",
            "Scheduled",
            "Successfully assigned shop/web-0 to node-a",
        ),
    );
    k.ok(&["create", "-f", f.to_str().unwrap()]);
    let t = get_table(k, &["events", "-n", "shop"]);
    assert_eq!(
        t.header_strs(),
        ["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
    );
    assert_eq!(t.rows.len(), 1, "{t:?}");
    assert_eq!(
        &t.rows[0][1..],
        [
            "Normal",
            "Scheduled",
            "pod/web-0",
            "Successfully assigned shop/web-0 to node-a"
        ]
    );

    let out = k.ok(&[
        "create",
        "secret",
        "generic",
        "creds",
        "-n",
        "shop",
        "--from-literal=password=s3cret",
    ]);
    assert_eq!(out.stdout.trim_end(), "secret/creds created");
    let t = get_table(k, &["secrets", "-n", "shop"]);
    assert_eq!(t.header_strs(), ["NAME", "TYPE", "DATA", "AGE"]);
    assert_eq!(&t.row("NAME", "creds")[..3], ["creds", "Opaque", "1"]);
    let out = k.ok(&[
        "get",
        "secret",
        "creds",
        "-n",
        "shop",
        "-o",
        "jsonpath={.data.password}",
    ]);
    assert_eq!(out.stdout, "czNjcmV0", "base64 of s3cret");
}
