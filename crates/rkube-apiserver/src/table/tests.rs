//! Golden tests of Table rows (times relative to a fixed clock).

use chrono::{DateTime, Duration, Utc};
use serde_json::{json, Value};

use super::*;

fn now() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2024-05-01T12:00:00Z").expect("valid time").with_timezone(&Utc)
}

/// RFC 3339 time `secs` seconds before [`now`].
fn ago(secs: i64) -> String {
    (now() - Duration::seconds(secs)).format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// The row of the resource table serving `resource` in `group` (any version).
fn info(resource: &str, group: &str) -> &'static ResourceInfo {
    rkube_api::registry::every()
        .into_iter()
        .find(|r| r.group == group && r.resource == resource)
        .unwrap_or_else(|| panic!("no row for {group}/{resource}"))
}

/// The cells of the single row of a Table of `item`, printed by its row's printer.
fn row(resource: &str, group: &str, item: Value) -> Vec<Value> {
    let t = to_table_at(info(resource, group).printer, &[item], IncludeObject::Metadata, None, now());
    t["rows"][0]["cells"].as_array().cloned().unwrap_or_default()
}

fn pod(name: &str, created: i64, spec: Value, status: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default", "creationTimestamp": ago(created)}, "spec": spec, "status": status})
}

fn one_container() -> Value {
    json!({"containers": [{"name": "c", "image": "nginx"}], "nodeName": "node-1"})
}

#[test]
fn human_duration_matches_apimachinery() {
    let cases = [
        (-2, "<invalid>"),
        (-1, "0s"),
        (0, "0s"),
        (59, "59s"),
        (119, "119s"),
        (120, "2m"),
        (182, "3m2s"),
        (600, "10m"),
        (10_799, "179m"),
        (3 * 3600, "3h"),
        (3 * 3600 + 5 * 60, "3h5m"),
        (8 * 3600, "8h"),
        (47 * 3600, "47h"),
        (48 * 3600, "2d"),
        (51 * 3600, "2d3h"),
        (8 * 86_400, "8d"),
        (730 * 86_400, "2y"),
        (740 * 86_400, "2y10d"),
        (8 * 365 * 86_400, "8y"),
    ];
    for (secs, want) in cases {
        assert_eq!(human_duration(secs), want, "{secs}s");
    }
}

#[test]
fn running_pod_row() {
    let p = pod(
        "web",
        300,
        one_container(),
        json!({"phase": "Running", "podIP": "10.0.0.5", "podIPs": [{"ip": "10.0.0.5"}],
               "conditions": [{"type": "Ready", "status": "True"}],
               "containerStatuses": [{"name": "c", "ready": true, "restartCount": 0, "state": {"running": {"startedAt": ago(290)}}}]}),
    );
    assert_eq!(json!(row("pods", "", p)), json!(["web", "1/1", "Running", "0", "5m", "10.0.0.5", "node-1", "<none>", "<none>"]));
}

#[test]
fn pending_pod_rows() {
    let creating = pod(
        "creating",
        30,
        one_container(),
        json!({"phase": "Pending", "containerStatuses": [{"name": "c", "ready": false, "restartCount": 0, "state": {"waiting": {"reason": "ContainerCreating"}}}]}),
    );
    assert_eq!(json!(row("pods", "", creating)), json!(["creating", "0/1", "ContainerCreating", "0", "30s", "<none>", "node-1", "<none>", "<none>"]));

    let unscheduled = pod("unscheduled", 5, json!({"containers": [{"name": "c", "image": "i"}, {"name": "d", "image": "i"}]}), json!({"phase": "Pending"}));
    assert_eq!(json!(row("pods", "", unscheduled)), json!(["unscheduled", "0/2", "Pending", "0", "5s", "<none>", "<none>", "<none>", "<none>"]));

    let no_status = json!({"metadata": {"name": "bare"}, "spec": {"containers": [{"name": "c"}]}});
    assert_eq!(json!(row("pods", "", no_status)), json!(["bare", "0/1", "", "0", "<unknown>", "<none>", "<none>", "<none>", "<none>"]));
}

#[test]
fn crashlooping_pod_row_shows_restarts_with_last_restart_age() {
    let p = pod(
        "crash",
        51 * 3600,
        one_container(),
        json!({"phase": "Running", "podIPs": [{"ip": "10.0.0.9"}],
               "containerStatuses": [{"name": "c", "ready": false, "restartCount": 5,
                   "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off"}},
                   "lastState": {"terminated": {"exitCode": 1, "reason": "Error", "finishedAt": ago(190)}}}]}),
    );
    assert_eq!(json!(row("pods", "", p)), json!(["crash", "0/1", "CrashLoopBackOff", "5 (3m10s ago)", "2d3h", "10.0.0.9", "node-1", "<none>", "<none>"]));
}

#[test]
fn completed_pod_row_and_condition() {
    let p = pod(
        "job",
        3600,
        one_container(),
        json!({"phase": "Succeeded", "containerStatuses": [{"name": "c", "ready": false, "restartCount": 0,
               "state": {"terminated": {"exitCode": 0, "reason": "Completed", "finishedAt": ago(3500)}}}]}),
    );
    let table = to_table_at(info("pods", "").printer, &[p], IncludeObject::Metadata, None, now());
    assert_eq!(table["rows"][0]["cells"], json!(["job", "0/1", "Completed", "0", "60m", "<none>", "node-1", "<none>", "<none>"]));
    assert_eq!(table["rows"][0]["conditions"][0]["type"], "Completed");
    assert_eq!(table["rows"][0]["conditions"][0]["reason"], "Succeeded");
}

#[test]
fn terminating_pod_row() {
    let mut p = pod(
        "going",
        600,
        one_container(),
        json!({"phase": "Running", "containerStatuses": [{"name": "c", "ready": true, "restartCount": 0, "state": {"running": {}}}]}),
    );
    p["metadata"]["deletionTimestamp"] = json!(ago(10));
    assert_eq!(row("pods", "", p.clone())[1..3], [json!("1/1"), json!("Terminating")]);
    // A finished pod keeps its final status while being deleted.
    p["status"]["phase"] = json!("Succeeded");
    p["status"]["containerStatuses"][0]["state"] = json!({"terminated": {"exitCode": 0, "reason": "Completed"}});
    assert_eq!(row("pods", "", p)[2], "Completed");
}

#[test]
fn init_and_multi_container_pod_rows() {
    let init = pod(
        "init",
        20,
        json!({"initContainers": [{"name": "setup", "image": "i"}], "containers": [{"name": "c", "image": "i"}]}),
        json!({"phase": "Pending",
               "initContainerStatuses": [{"name": "setup", "ready": false, "restartCount": 0, "state": {"running": {}}}],
               "containerStatuses": [{"name": "c", "ready": false, "restartCount": 0, "state": {"waiting": {"reason": "PodInitializing"}}}]}),
    );
    assert_eq!(row("pods", "", init)[2], "Init:0/1");

    let init_failed = pod(
        "initfail",
        20,
        json!({"initContainers": [{"name": "setup", "image": "i"}], "containers": [{"name": "c", "image": "i"}]}),
        json!({"phase": "Pending",
               "initContainerStatuses": [{"name": "setup", "restartCount": 2, "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}),
    );
    assert_eq!(row("pods", "", init_failed)[2..4], [json!("Init:CrashLoopBackOff"), json!("2")]);

    let sidecar = pod(
        "sidecar",
        20,
        json!({"initContainers": [{"name": "proxy", "image": "i", "restartPolicy": "Always"}], "containers": [{"name": "c", "image": "i"}]}),
        json!({"phase": "Running", "conditions": [{"type": "Initialized", "status": "True"}, {"type": "Ready", "status": "True"}],
               "initContainerStatuses": [{"name": "proxy", "ready": true, "started": true, "restartCount": 1, "state": {"running": {}}}],
               "containerStatuses": [{"name": "c", "ready": true, "restartCount": 0, "state": {"running": {}}}]}),
    );
    assert_eq!(row("pods", "", sidecar)[1..4], [json!("2/2"), json!("Running"), json!("1")]);

    let half_done = pod(
        "half",
        20,
        json!({"containers": [{"name": "a", "image": "i"}, {"name": "b", "image": "i"}], "readinessGates": [{"conditionType": "example.com/gate"}]}),
        json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}, {"type": "example.com/gate", "status": "False"}],
               "containerStatuses": [
                   {"name": "a", "ready": true, "restartCount": 0, "state": {"running": {}}},
                   {"name": "b", "ready": false, "restartCount": 0, "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]}),
    );
    let cells = row("pods", "", half_done);
    assert_eq!(cells[1..3], [json!("1/2"), json!("Running")]);
    assert_eq!(cells[8], "0/1");

    let exit = pod(
        "exit",
        20,
        one_container(),
        json!({"phase": "Failed", "containerStatuses": [{"name": "c", "restartCount": 0, "state": {"terminated": {"exitCode": 2}}}]}),
    );
    assert_eq!(row("pods", "", exit)[2], "ExitCode:2");
}

#[test]
fn service_rows() {
    let cluster_ip = json!({"metadata": {"name": "web", "creationTimestamp": ago(7200)},
        "spec": {"type": "ClusterIP", "clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10"],
                 "ports": [{"port": 80, "protocol": "TCP"}, {"port": 53, "protocol": "UDP"}], "selector": {"app": "web", "tier": "fe"}}});
    assert_eq!(json!(row("services", "", cluster_ip)), json!(["web", "ClusterIP", "10.96.0.10", "<none>", "80/TCP,53/UDP", "120m", "app=web,tier=fe"]));

    let node_port = json!({"metadata": {"name": "np", "creationTimestamp": ago(60)},
        "spec": {"type": "NodePort", "clusterIPs": ["10.96.0.11"], "externalIPs": ["1.2.3.4"], "ports": [{"port": 80, "nodePort": 30080, "protocol": "TCP"}]}});
    assert_eq!(json!(row("services", "", node_port)), json!(["np", "NodePort", "10.96.0.11", "1.2.3.4", "80:30080/TCP", "60s", "<none>"]));

    let lb = json!({"metadata": {"name": "lb", "creationTimestamp": ago(60)}, "spec": {"type": "LoadBalancer", "clusterIPs": ["10.96.0.12"], "ports": [{"port": 443, "nodePort": 31443, "protocol": "TCP"}]}});
    assert_eq!(row("services", "", lb.clone())[3], "<pending>");
    let mut lb_ready = lb;
    lb_ready["status"] = json!({"loadBalancer": {"ingress": [{"ip": "203.0.113.7"}, {"hostname": "lb.example.com"}]}});
    assert_eq!(row("services", "", lb_ready)[3], "203.0.113.7,lb.example.com");

    let headless = json!({"metadata": {"name": "h", "creationTimestamp": ago(60)}, "spec": {"type": "ClusterIP", "clusterIP": "None", "clusterIPs": ["None"]}});
    assert_eq!(row("services", "", headless)[2..5], [json!("None"), json!("<none>"), json!("<none>")]);

    let external = json!({"metadata": {"name": "ext"}, "spec": {"type": "ExternalName", "externalName": "db.example.com"}});
    assert_eq!(row("services", "", external)[2..4], [json!("<none>"), json!("db.example.com")]);
}

#[test]
fn node_rows() {
    let ready = json!({"metadata": {"name": "node-1", "creationTimestamp": ago(8 * 86_400),
            "labels": {"node-role.kubernetes.io/control-plane": "", "node-role.kubernetes.io/": "", "kubernetes.io/role": "worker", "kubernetes.io/hostname": "node-1"}},
        "spec": {"unschedulable": true},
        "status": {"conditions": [{"type": "MemoryPressure", "status": "False"}, {"type": "Ready", "status": "True"}],
                   "addresses": [{"type": "InternalIP", "address": "192.168.1.10"}, {"type": "Hostname", "address": "node-1"}],
                   "nodeInfo": {"kubeletVersion": "v1.33.0", "osImage": "Debian GNU/Linux 12", "kernelVersion": "6.1.0", "containerRuntimeVersion": "containerd://1.7.0"}}});
    assert_eq!(
        json!(row("nodes", "", ready)),
        json!(["node-1", "Ready,SchedulingDisabled", "control-plane,worker", "8d", "v1.33.0", "192.168.1.10", "<none>", "Debian GNU/Linux 12", "6.1.0", "containerd://1.7.0"])
    );
    let not_ready = json!({"metadata": {"name": "node-2", "creationTimestamp": ago(90)}, "status": {"conditions": [{"type": "Ready", "status": "Unknown"}], "addresses": [{"type": "ExternalIP", "address": "198.51.100.2"}]}});
    assert_eq!(json!(row("nodes", "", not_ready)), json!(["node-2", "NotReady", "<none>", "90s", "", "<none>", "198.51.100.2", "<unknown>", "<unknown>", "<unknown>"]));
    let bare = json!({"metadata": {"name": "node-3"}});
    assert_eq!(row("nodes", "", bare)[1], "Unknown");
}

#[test]
fn deployment_rows() {
    let d = json!({"metadata": {"name": "web", "creationTimestamp": ago(3 * 3600 + 120)},
        "spec": {"replicas": 3,
                 "selector": {"matchLabels": {"app": "web"}, "matchExpressions": [{"key": "tier", "operator": "In", "values": ["fe", "be"]}, {"key": "canary", "operator": "DoesNotExist"}]},
                 "template": {"spec": {"containers": [{"name": "nginx", "image": "nginx:1.25"}, {"name": "sidecar", "image": "busybox"}]}}},
        "status": {"replicas": 3, "readyReplicas": 2, "updatedReplicas": 3, "availableReplicas": 2}});
    assert_eq!(
        json!(row("deployments", "apps", d)),
        json!(["web", "2/3", 3, 2, "3h2m", "nginx,sidecar", "nginx:1.25,busybox", "app=web,!canary,tier in (be,fe)"])
    );
    let fresh = json!({"metadata": {"name": "new", "creationTimestamp": ago(1)}, "spec": {"selector": {"matchLabels": {"a": "b"}}, "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}});
    assert_eq!(json!(row("deployments", "apps", fresh)), json!(["new", "0/1", 0, 0, "1s", "c", "i", "a=b"]));
}

#[test]
fn other_resource_rows() {
    let ns = json!({"metadata": {"name": "default", "creationTimestamp": ago(86_400)}, "status": {"phase": "Active"}});
    assert_eq!(json!(row("namespaces", "", ns)), json!(["default", "Active", "24h"]));

    let cm = json!({"metadata": {"name": "cfg", "creationTimestamp": ago(10)}, "data": {"a": "1", "b": "2"}, "binaryData": {"c": "AA=="}});
    assert_eq!(json!(row("configmaps", "", cm)), json!(["cfg", 3, "10s"]));

    let secret = json!({"metadata": {"name": "s", "creationTimestamp": ago(10)}, "type": "Opaque", "data": {"k": "dg=="}});
    assert_eq!(json!(row("secrets", "", secret)), json!(["s", "Opaque", 1, "10s"]));

    let sa = json!({"metadata": {"name": "default", "creationTimestamp": ago(10)}});
    assert_eq!(json!(row("serviceaccounts", "", sa)), json!(["default", 0, "10s"]));

    let lease = json!({"metadata": {"name": "l", "creationTimestamp": ago(10)}, "spec": {"holderIdentity": "node-1"}});
    assert_eq!(json!(row("leases", "coordination.k8s.io", lease)), json!(["l", "node-1", "10s"]));

    let ep = json!({"metadata": {"name": "web", "creationTimestamp": ago(10)}, "subsets": [
        {"addresses": [{"ip": "10.0.0.1"}, {"ip": "10.0.0.2"}], "ports": [{"port": 80}, {"port": 443}]}]});
    assert_eq!(json!(row("endpoints", "", ep)), json!(["web", "10.0.0.1:80,10.0.0.2:80,10.0.0.1:443 + 1 more...", "10s"]));
    let empty_ep = json!({"metadata": {"name": "none", "creationTimestamp": ago(10)}});
    assert_eq!(row("endpoints", "", empty_ep)[1], "<none>");

    let slice = json!({"metadata": {"name": "web-abc", "creationTimestamp": ago(10)}, "addressType": "IPv4",
        "ports": [{"name": "http", "port": 80, "protocol": "TCP"}, {"name": "named"}],
        "endpoints": [{"addresses": ["10.0.0.1"]}, {"addresses": ["10.0.0.2"]}]});
    assert_eq!(json!(row("endpointslices", "discovery.k8s.io", slice)), json!(["web-abc", "IPv4", "80,named", "10.0.0.1,10.0.0.2", "10s"]));
    let empty_slice = json!({"metadata": {"name": "e"}, "addressType": "IPv6"});
    assert_eq!(row("endpointslices", "discovery.k8s.io", empty_slice)[2..4], [json!("<unset>"), json!("<unset>")]);

    let ev = json!({"metadata": {"name": "web.17a", "creationTimestamp": ago(100)},
        "involvedObject": {"kind": "Pod", "name": "web", "fieldPath": "spec.containers{c}"},
        "reason": "Pulled", "message": "Successfully pulled image\n", "type": "Normal",
        "source": {"component": "kubelet", "host": "node-1"}, "firstTimestamp": ago(100), "lastTimestamp": ago(40), "count": 3});
    assert_eq!(
        json!(row("events", "", ev)),
        json!(["40s", "Normal", "Pulled", "pod/web", "spec.containers{c}", "kubelet, node-1", "Successfully pulled image", "100s", 3, "web.17a"])
    );
    let new_style = json!({"metadata": {"name": "x"}, "involvedObject": {"kind": "Node"}, "eventTime": "2024-05-01T11:59:30.000000Z", "reportingComponent": "rkube", "type": "Warning", "reason": "R"});
    assert_eq!(json!(row("events", "", new_style)), json!(["30s", "Warning", "R", "node", "", "rkube", "", "30s", 1, "x"]));

    let other = json!({"metadata": {"name": "thing", "creationTimestamp": ago(5)}});
    let t = to_table_at(&rkube_api::printers::DEFAULT, &[other], IncludeObject::None, None, now());
    assert_eq!(t["rows"][0]["cells"], json!(["thing", "5s"]));
}

#[test]
fn table_shape_and_include_object() {
    let p = pod("web", 5, one_container(), json!({"phase": "Running"}));
    let meta = json!({"resourceVersion": "42", "continue": "tok", "remainingItemCount": 3});
    let t = to_table_at(info("pods", "").printer, std::slice::from_ref(&p), IncludeObject::Metadata, Some(meta.clone()), now());
    assert_eq!(t["kind"], "Table");
    assert_eq!(t["apiVersion"], "meta.k8s.io/v1");
    assert_eq!(t["metadata"], meta);
    let names: Vec<&str> = t["columnDefinitions"].as_array().expect("cols").iter().filter_map(|c| c["name"].as_str()).collect();
    assert_eq!(names, ["Name", "Ready", "Status", "Restarts", "Age", "IP", "Node", "Nominated Node", "Readiness Gates"]);
    let priorities: Vec<i64> = t["columnDefinitions"].as_array().expect("cols").iter().filter_map(|c| c["priority"].as_i64()).collect();
    assert_eq!(priorities, [0, 0, 0, 0, 0, 1, 1, 1, 1]);
    assert_eq!(t["columnDefinitions"][0]["format"], "name");
    assert!(t["columnDefinitions"][0]["description"].as_str().is_some_and(|d| !d.is_empty()));
    assert_eq!(t["rows"][0]["object"], json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": p["metadata"]}));

    let full = to_table(info("pods", ""), std::slice::from_ref(&p), IncludeObject::Object, None);
    assert_eq!(full["rows"][0]["object"], p);
    assert_eq!(full["metadata"], json!({}));
    let none = to_table(info("pods", ""), std::slice::from_ref(&p), IncludeObject::None, None);
    assert_eq!(none["rows"][0]["object"], Value::Null);

    let mut beta = to_table(info("pods", ""), &[], IncludeObject::Metadata, None);
    set_version(&mut beta, TableVersion::V1Beta1);
    assert_eq!(beta["apiVersion"], "meta.k8s.io/v1beta1");
    assert_eq!(beta["rows"], json!([]));
}

#[test]
fn accept_header_parsing_follows_kubectl_requests() {
    let kubectl = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
    assert_eq!(
        is_table_request(kubectl, None),
        Ok(Some(TableRequest { version: TableVersion::V1, include_object: IncludeObject::Metadata }))
    );
    assert_eq!(
        is_table_request("application/json;as=Table;v=v1beta1;g=meta.k8s.io", Some("Object")),
        Ok(Some(TableRequest { version: TableVersion::V1Beta1, include_object: IncludeObject::Object }))
    );
    assert_eq!(
        is_table_request("application/json;as=Table;v=v2;g=meta.k8s.io, application/json;as=Table;v=v1;g=meta.k8s.io", Some("None")),
        Ok(Some(TableRequest { version: TableVersion::V1, include_object: IncludeObject::None }))
    );
    assert_eq!(is_table_request("application/json", Some("bogus")), Ok(None));
    assert_eq!(is_table_request("application/yaml", None), Ok(None));
    assert_eq!(is_table_request("application/vnd.kubernetes.protobuf;as=Table;v=v1;g=meta.k8s.io,application/json", None), Ok(None));
    assert_eq!(
        is_table_request(kubectl, Some("bogus")),
        Err(TableError::InvalidIncludeObject("bogus".into()))
    );
    assert_eq!(TableVersion::V1.content_type(), "application/json;as=Table;v=v1;g=meta.k8s.io");
}

#[test]
fn csr_rows_show_signer_requestor_duration_and_condition() {
    let csr = |status: Value, expiration: Option<i64>| {
        let mut spec = json!({"signerName": "kubernetes.io/kube-apiserver-client", "username": "alice"});
        if let Some(e) = expiration {
            spec["expirationSeconds"] = json!(e);
        }
        json!({"metadata": {"name": "c1", "creationTimestamp": ago(30)}, "spec": spec, "status": status})
    };
    let pending = row("certificatesigningrequests", "certificates.k8s.io", csr(json!({}), None));
    assert_eq!(pending, vec![json!("c1"), json!("30s"), json!("kubernetes.io/kube-apiserver-client"), json!("alice"), json!("<none>"), json!("Pending")]);
    let issued = csr(json!({"conditions": [{"type": "Approved", "status": "True"}], "certificate": "Q0VSVA=="}), Some(86400));
    let cells = row("certificatesigningrequests", "certificates.k8s.io", issued);
    assert_eq!((cells[4].as_str(), cells[5].as_str()), (Some("24h"), Some("Approved,Issued")));
    let failed = csr(json!({"conditions": [{"type": "Approved", "status": "True"}, {"type": "Failed", "status": "True"}]}), None);
    assert_eq!(row("certificatesigningrequests", "certificates.k8s.io", failed)[5], "Approved,Failed");
    let denied = csr(json!({"conditions": [{"type": "Denied", "status": "True"}]}), None);
    assert_eq!(row("certificatesigningrequests", "certificates.k8s.io", denied)[5], "Denied");
}
