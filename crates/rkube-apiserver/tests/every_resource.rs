//! One table-driven test over every row of the resource table, on the
//! embedded store with the watch cache and with `--watch-cache=false`:
//! create (defaults visible), get, list, watch, update, the status and
//! scale subresources, the server-side table, delete. Each row gets a
//! minimal valid object from [`sample`]; a row without one fails the test,
//! so a new row cannot be added without being exercised here. Every row is
//! also read, listed, watched and updated in protobuf by an independent
//! protobuf client ([`pb_support`], prost types generated from Kubernetes'
//! `.proto` files), as client-go's typed clients do.

use crate::common;
use crate::pb_support;

use common::TestServer;
use rkube_api::registry::{self, ResourceInfo};
use serde_json::{json, Value};

/// A PKCS#10 request (P-256, CN=every-resource), base64 of its PEM: CSRs are validated.
const CSR_PEM_B64: &str = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURSBSRVFVRVNULS0tLS0KTUlIU01Ic0NBUUF3R1RFWE1CVUdBMVVFQXd3T1pYWmxjbmt0Y21WemIzVnlZMlV3V1RBVEJnY3Foa2pPUFFJQgpCZ2dxaGtqT1BRTUJCd05DQUFRS1RodkRzNEJIRUw4MEl4NUxUNW9QdU0xeVh4bXoxajNmZFZWYnF4STczTlhICnhEYWNSV2R1OE9TWnc4VGYvd3diVkZMNGlQRk4zNXNsZHhCMFMwNmxvQUF3Q2dZSUtvWkl6ajBFQXdJRFJ3QXcKUkFJZ1R3NUxwZ2J0V0NlQ1Fsb21KRWVyODF6TVFyZFFxTFZOcVlpNVdoNWZkSG9DSUdNTHI5dVFZazNzL0JZOAp5MjJyNUI4bU5qdDBvMFh3QlI0YXowc3lkV0Z2Ci0tLS0tRU5EIENFUlRJRklDQVRFIFJFUVVFU1QtLS0tLQo=";

const NS: &str = "default";

fn containers() -> Value {
    json!([{"name": "c", "image": "busybox:1.36"}])
}

fn pod_template(restart: &str) -> Value {
    json!({"metadata": {"labels": {"app": "x"}}, "spec": {"restartPolicy": restart, "containers": containers()}})
}

/// A minimal valid object of `row` (without apiVersion/kind/metadata), and its name.
fn sample(row: &ResourceInfo) -> Option<(&'static str, Value)> {
    let selector = json!({"matchLabels": {"app": "x"}});
    let workload = json!({"spec": {"selector": selector, "template": pod_template("Always")}});
    let webhook = json!({"webhooks": [{
        "name": "a.example.com",
        "clientConfig": {"url": "https://example.com/hook"},
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
        "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}],
    }]});
    let rules = json!([{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}]);
    Some(match (row.group, row.resource) {
        ("", "configmaps") => ("cm1", json!({"data": {"a": "b"}})),
        ("", "endpoints") => ("ep1", json!({"subsets": [{"addresses": [{"ip": "10.0.0.1"}], "ports": [{"port": 80}]}]})),
        ("", "events") => ("ev1", json!({"involvedObject": {"kind": "Pod", "name": "p", "namespace": NS}, "reason": "Test", "message": "m"})),
        ("", "limitranges") => ("lr1", json!({"spec": {"limits": [{"type": "Container", "max": {"cpu": "1"}}]}})),
        ("", "namespaces") => ("ns1", json!({})),
        ("", "nodes") => ("node1", json!({"spec": {}})),
        ("", "persistentvolumeclaims") => {
            ("pvc1", json!({"spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}))
        }
        ("", "persistentvolumes") => (
            "pv1",
            json!({"spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"], "hostPath": {"path": "/tmp/pv1"}}}),
        ),
        ("", "pods") => ("pod1", json!({"spec": {"containers": containers()}})),
        ("", "podtemplates") => ("pt1", json!({"template": pod_template("Always")})),
        ("", "replicationcontrollers") => {
            ("rc1", json!({"spec": {"selector": {"app": "x"}, "template": pod_template("Always")}}))
        }
        ("", "resourcequotas") => ("rq1", json!({"spec": {"hard": {"pods": "10"}}})),
        ("", "secrets") => ("s1", json!({"data": {"a": "Yg=="}})),
        ("", "serviceaccounts") => ("sa1", json!({})),
        ("", "services") => ("svc1", json!({"spec": {"ports": [{"port": 80}]}})),
        ("admissionregistration.k8s.io", "mutatingwebhookconfigurations") => ("mwc1", webhook),
        ("admissionregistration.k8s.io", "validatingwebhookconfigurations") => ("vwc1", webhook),
        ("admissionregistration.k8s.io", "validatingadmissionpolicies") => (
            "vap1",
            json!({"spec": {"matchConstraints": {"resourceRules": rules}, "validations": [{"expression": "true"}]}}),
        ),
        ("admissionregistration.k8s.io", "validatingadmissionpolicybindings") => {
            ("vapb1", json!({"spec": {"policyName": "vap1", "validationActions": ["Deny"]}}))
        }
        ("apiregistration.k8s.io", "apiservices") => (
            "v1.example.com",
            json!({"spec": {"group": "example.com", "version": "v1", "groupPriorityMinimum": 1000, "versionPriority": 15}}),
        ),
        ("apps", "controllerrevisions") => ("cr1", json!({"revision": 1, "data": {}})),
        ("apps", "daemonsets") => ("ds1", workload),
        ("apps", "deployments") => ("deploy1", workload),
        ("apps", "replicasets") => ("rs1", workload),
        ("apps", "statefulsets") => ("sts1", workload),
        ("autoscaling", "horizontalpodautoscalers") => (
            "hpa1",
            json!({"spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "d"}, "maxReplicas": 3}}),
        ),
        ("batch", "cronjobs") => (
            "cj1",
            json!({"spec": {"schedule": "*/5 * * * *", "jobTemplate": {"spec": {"template": pod_template("Never")}}}}),
        ),
        ("batch", "jobs") => ("job1", json!({"spec": {"template": pod_template("Never")}})),
        ("certificates.k8s.io", "certificatesigningrequests") => (
            "csr1",
            json!({"spec": {"request": CSR_PEM_B64, "signerName": "example.com/signer", "usages": ["client auth"]}}),
        ),
        ("coordination.k8s.io", "leases") => ("lease1", json!({"spec": {"holderIdentity": "me"}})),
        ("discovery.k8s.io", "endpointslices") => ("eps1", json!({"addressType": "IPv4", "endpoints": []})),
        ("events.k8s.io", "events") => (
            "ev2",
            json!({"eventTime": "2024-01-01T00:00:00.000000Z", "reportingController": "example.com/ctl",
                   "reportingInstance": "i1", "action": "Test", "reason": "Test", "type": "Normal",
                   "regarding": {"kind": "Pod", "name": "p", "namespace": NS}, "note": "m"}),
        ),
        ("flowcontrol.apiserver.k8s.io", "flowschemas") => {
            ("fs1", json!({"spec": {"priorityLevelConfiguration": {"name": "catch-all"}}}))
        }
        ("flowcontrol.apiserver.k8s.io", "prioritylevelconfigurations") => {
            ("plc1", json!({"spec": {"type": "Limited", "limited": {}}}))
        }
        ("networking.k8s.io", "ingressclasses") => ("ic1", json!({"spec": {"controller": "example.com/ingress"}})),
        ("networking.k8s.io", "ingresses") => {
            ("ing1", json!({"spec": {"defaultBackend": {"service": {"name": "svc1", "port": {"number": 80}}}}}))
        }
        ("networking.k8s.io", "ipaddresses") => {
            ("10.99.0.7", json!({"spec": {"parentRef": {"resource": "services", "name": "svc1", "namespace": NS}}}))
        }
        ("networking.k8s.io", "networkpolicies") => ("np1", json!({"spec": {"podSelector": {}}})),
        ("networking.k8s.io", "servicecidrs") => ("cidr1", json!({"spec": {"cidrs": ["10.100.0.0/16"]}})),
        ("certificates.k8s.io", "clustertrustbundles") => ("ctb1", json!({"spec": {"trustBundle": ca_pem()}})),
        ("node.k8s.io", "runtimeclasses") => ("rtc1", json!({"handler": "runc"})),
        ("policy", "poddisruptionbudgets") => ("pdb1", json!({"spec": {"minAvailable": 1, "selector": selector}})),
        ("rbac.authorization.k8s.io", "clusterrolebindings") => (
            "crb1",
            json!({"roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"}, "subjects": []}),
        ),
        ("rbac.authorization.k8s.io", "clusterroles") => ("cr1", json!({"rules": []})),
        ("rbac.authorization.k8s.io", "rolebindings") => (
            "rb1",
            json!({"roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"}, "subjects": []}),
        ),
        ("rbac.authorization.k8s.io", "roles") => ("role1", json!({"rules": []})),
        ("scheduling.k8s.io", "priorityclasses") => ("pc1", json!({"value": 1000})),
        ("storage.k8s.io", "csidrivers") => ("csi.example.com", json!({"spec": {}})),
        ("storage.k8s.io", "csinodes") => ("node1", json!({"spec": {"drivers": []}})),
        ("storage.k8s.io", "csistoragecapacities") => ("cap1", json!({"storageClassName": "standard"})),
        ("storage.k8s.io", "storageclasses") => ("sc1", json!({"provisioner": "example.com/p"})),
        ("storage.k8s.io", "volumeattachments") => {
            ("va1", json!({"spec": {"attacher": "a", "nodeName": "node1", "source": {"persistentVolumeName": "pv1"}}}))
        }
        _ => return None,
    })
}

/// A self-signed CA certificate, PEM (what a ClusterTrustBundle holds).
fn ca_pem() -> String {
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let key = rcgen::KeyPair::generate().expect("key");
    params.self_signed(&key).expect("self-signed").pem()
}

fn collection(row: &ResourceInfo) -> String {
    let base = if row.group.is_empty() { "/api/v1".to_string() } else { format!("/apis/{}/{}", row.group, row.version) };
    if row.namespaced {
        format!("{base}/namespaces/{NS}/{}", row.resource)
    } else {
        format!("{base}/{}", row.resource)
    }
}

const TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io";

async fn exercise(s: &TestServer, row: &'static ResourceInfo) {
    let what = format!("{}.{}", row.resource, row.group);
    let (name, body) = sample(row).unwrap_or_else(|| panic!("no sample object for {what}: add one to sample()"));
    let mut obj = body;
    obj["apiVersion"] = json!(row.api_version());
    obj["kind"] = json!(row.kind);
    obj["metadata"] = json!({"name": name, "labels": {"app": "x"}});
    let coll = collection(row);
    let item = format!("{coll}/{name}");

    // create: 201, server fields set, the object comes back as stored.
    let created = s.post(&coll, &obj).await;
    assert_eq!(created.code, 201, "{what}: create: {}", created.text);
    assert_eq!(created.body["kind"], row.kind, "{what}");
    assert_eq!(created.body["apiVersion"], row.api_version(), "{what}");
    assert!(created.body.pointer("/metadata/uid").and_then(Value::as_str).is_some_and(|u| !u.is_empty()), "{what}");
    let mut defaulted = created.body.clone();
    row.strategy.apply_defaults(&mut defaulted);
    assert_eq!(defaulted, created.body, "{what}: defaults are visible after create");

    // get and list, from the cache when it serves them.
    let got = s.get(&item).await;
    assert_eq!(got.code, 200, "{what}: get: {}", got.text);
    assert_eq!(got.body, created.body, "{what}: get returns the created object");
    let listed = s.get(&format!("{coll}?labelSelector=app%3Dx")).await;
    assert_eq!(listed.code, 200, "{what}: list: {}", listed.text);
    assert_eq!(listed.body["kind"], row.list_kind, "{what}");
    let names: Vec<&str> =
        listed.body["items"].as_array().unwrap().iter().filter_map(|i| i.pointer("/metadata/name")?.as_str()).collect();
    assert_eq!(names, vec![name], "{what}: list");

    // protobuf GET and LIST: the same objects, read by prost.
    let url = |path: &str| format!("{}{path}", s.base);
    let pb = pb_support::send(&s.client, "GET", &url(&item), None).await;
    assert_eq!((pb.code, pb.content_type.as_str()), (200, pb_support::PROTOBUF), "{what}: protobuf get");
    assert_eq!(pb_support::to_json(&pb.body), pb_support::go_json(&got.body), "{what}: protobuf get");
    let pb = pb_support::send(&s.client, "GET", &url(&format!("{coll}?labelSelector=app%3Dx")), None).await;
    assert_eq!((pb.code, pb.content_type.as_str()), (200, pb_support::PROTOBUF), "{what}: protobuf list");
    let mut want = listed.body.clone();
    for item in want["items"].as_array_mut().unwrap() {
        // List items carry no apiVersion/kind in protobuf (nor in client-go's typed lists).
        let item = item.as_object_mut().unwrap();
        item.remove("apiVersion");
        item.remove("kind");
    }
    assert_eq!(pb_support::to_json(&pb.body), pb_support::go_json(&want), "{what}: protobuf list");

    // table: the printer's columns, one cell per column.
    let table = s.get_as(&format!("{coll}?labelSelector=app%3Dx"), TABLE).await;
    assert_eq!(table.code, 200, "{what}: table: {}", table.text);
    let columns = table.body["columnDefinitions"].as_array().unwrap();
    assert!(columns.iter().any(|c| c["name"] == "Name" && c["format"] == "name"), "{what}: a Name column");
    let rows = table.body["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{what}");
    assert_eq!(rows[0]["cells"].as_array().unwrap().len(), columns.len(), "{what}: one cell per column");

    // watch from the create, then update: the update arrives as MODIFIED.
    let mut watch = s.watch(&format!("{coll}?watch=true&resourceVersion={}", created.rv())).await;
    assert_eq!(watch.code, 200, "{what}: watch");
    let mut pb_watch = pb_support::Frames::open(&url(&format!("{coll}?watch=true&resourceVersion={}", created.rv()))).await;
    assert_eq!(pb_watch.code, 200, "{what}: protobuf watch");
    assert_eq!(pb_watch.content_type, "application/vnd.kubernetes.protobuf;stream=watch", "{what}");
    let mut update = got.body.clone();
    update["metadata"]["labels"]["updated"] = json!("yes");
    let updated = s.put(&item, &update).await;
    assert_eq!(updated.code, 200, "{what}: update: {}", updated.text);
    assert_ne!(updated.rv(), created.rv(), "{what}: update writes");
    let event = watch.next_within(10).await.unwrap_or_else(|| panic!("{what}: no watch event"));
    assert_eq!(event["type"], "MODIFIED", "{what}: {event}");
    assert_eq!(event["object"]["metadata"]["labels"]["updated"], "yes", "{what}");
    let (ty, obj) = pb_watch.next_within(10).await.unwrap_or_else(|| panic!("{what}: no protobuf watch event"));
    assert_eq!(ty, "MODIFIED", "{what}");
    assert_eq!(obj, pb_support::go_json(&updated.body), "{what}: protobuf watch event");

    // protobuf PUT, answered in protobuf.
    let mut pb_update = updated.body.clone();
    pb_update["metadata"]["labels"]["protobuf"] = json!("yes");
    let pb = pb_support::send(&s.client, "PUT", &url(&item), Some(pb_support::body_of(&pb_update))).await;
    assert_eq!((pb.code, pb.content_type.as_str()), (200, pb_support::PROTOBUF), "{what}: protobuf put");
    let put_back = pb_support::to_json(&pb.body);
    assert_eq!(put_back["metadata"]["labels"]["protobuf"], "yes", "{what}: protobuf put");
    assert_eq!(put_back, pb_support::go_json(&s.get(&item).await.body), "{what}: protobuf put answers the stored object");

    if row.has_status_subresource() {
        let status = s.get(&format!("{item}/status")).await;
        assert_eq!(status.code, 200, "{what}: get status: {}", status.text);
        assert_eq!(status.body["metadata"]["name"], name);
        let put = s.put(&format!("{item}/status"), &status.body).await;
        assert_eq!(put.code, 200, "{what}: put status: {}", put.text);
    }
    if row.subresource("scale").is_some() {
        let scale = s.get(&format!("{item}/scale")).await;
        assert_eq!(scale.code, 200, "{what}: scale: {}", scale.text);
        assert_eq!(scale.body["kind"], "Scale");
        assert_eq!(scale.body["spec"]["replicas"], 1, "{what}: default replicas");
        assert_eq!(scale.body["status"]["selector"], "app=x", "{what}");
        let pb = pb_support::send(&s.client, "GET", &url(&format!("{item}/scale")), None).await;
        assert_eq!(pb_support::to_json(&pb.body), pb_support::go_json(&scale.body), "{what}: protobuf scale");
        let mut wanted = scale.body.clone();
        wanted["spec"]["replicas"] = json!(3);
        let scaled = s.put(&format!("{item}/scale"), &wanted).await;
        assert_eq!(scaled.code, 200, "{what}: put scale: {}", scaled.text);
        assert_eq!(s.get(&item).await.body["spec"]["replicas"], 3, "{what}");
    }

    let deleted = s.delete(&item, None).await;
    assert_eq!(deleted.code, 200, "{what}: delete: {}", deleted.text);
    if row.resource != "namespaces" {
        assert_eq!(s.get(&item).await.code, 404, "{what}: gone after delete");
    }
}

async fn every_row(s: TestServer) {
    for row in registry::all() {
        // componentstatuses are computed and read-only; the review APIs are
        // create-only and never stored (tests/review.rs).
        if row.resource == "componentstatuses" || !row.stored {
            continue;
        }
        // CRDs: the API server's own controller writes their status (and
        // removes their finalizer) while this generic walk would race it;
        // tests/crds.rs covers them.
        if row.resource == "customresourcedefinitions" {
            continue;
        }
        exercise(&s, row).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_row_serves_crud_watch_status_scale_and_tables_from_the_cache() {
    every_row(TestServer::embedded().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_row_serves_crud_watch_status_scale_and_tables_from_storage() {
    every_row(TestServer::embedded_storage_reads().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn component_statuses_report_the_storage() {
    let s = TestServer::embedded().await;
    let list = s.get("/api/v1/componentstatuses").await;
    assert_eq!(list.code, 200, "{}", list.text);
    assert_eq!(list.body["kind"], "ComponentStatusList");
    assert_eq!(list.body["items"][0]["metadata"]["name"], "etcd-0");
    assert_eq!(list.body["items"][0]["conditions"][0], json!({"type": "Healthy", "status": "True", "message": "ok"}));
    let create = s.post("/api/v1/componentstatuses", &json!({"apiVersion": "v1", "kind": "ComponentStatus", "metadata": {"name": "x"}})).await;
    create.assert_status(405, "MethodNotAllowed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn built_in_objects_exist_from_the_first_start() {
    let s = TestServer::embedded().await;
    let pc = s.get("/apis/scheduling.k8s.io/v1/priorityclasses/system-node-critical").await;
    assert_eq!(pc.code, 200, "{}", pc.text);
    assert_eq!(pc.body["value"], 2_000_001_000);
    assert_eq!(pc.body["preemptionPolicy"], "PreemptLowerPriority");
    for name in ["exempt", "catch-all"] {
        assert_eq!(s.get(&format!("/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas/{name}")).await.code, 200);
        assert_eq!(s.get(&format!("/apis/flowcontrol.apiserver.k8s.io/v1/prioritylevelconfigurations/{name}")).await.code, 200);
    }
    let services = s.get("/apis/apiregistration.k8s.io/v1/apiservices").await;
    let names: Vec<&str> =
        services.body["items"].as_array().unwrap().iter().filter_map(|i| i.pointer("/metadata/name")?.as_str()).collect();
    for want in ["v1.", "v1.apps", "v1.batch", "v2.autoscaling", "v1.storage.k8s.io"] {
        assert!(names.contains(&want), "{want} missing from {names:?}");
    }
    let apps = s.get("/apis/apiregistration.k8s.io/v1/apiservices/v1.apps").await;
    assert_eq!(apps.body["status"]["conditions"][0]["reason"], "Local");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subresources_accept_only_their_verbs() {
    let s = TestServer::embedded().await;
    // finalize is PUT-only; the main resource keeps its verbs.
    let r = s.get("/api/v1/namespaces/default/finalize").await;
    r.assert_status(405, "MethodNotAllowed");
    let mut ns = s.get("/api/v1/namespaces/default").await.body;
    ns["spec"]["finalizers"] = json!([]);
    ns["metadata"]["labels"]["ignored"] = json!("by-finalize");
    let put = s.put("/api/v1/namespaces/default/finalize", &ns).await;
    assert_eq!(put.code, 200, "{}", put.text);
    assert_eq!(put.body["spec"]["finalizers"], json!([]));
    assert!(put.body["metadata"]["labels"].get("ignored").is_none(), "finalize changes only spec.finalizers");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workload_validation_and_job_selectors_follow_upstream() {
    let s = TestServer::embedded().await;
    let bad = json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "bad"},
        "spec": {"selector": {"matchLabels": {"app": "a"}}, "template": pod_template("Always")}});
    let r = s.post("/apis/apps/v1/namespaces/default/statefulsets", &bad).await;
    r.assert_status(422, "Invalid");
    assert_eq!(r.body["details"]["causes"][0]["field"], "spec.template.metadata.labels");

    let job = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "pi"}, "spec": {"template": pod_template("Always")}});
    let r = s.post("/apis/batch/v1/namespaces/default/jobs", &job).await;
    r.assert_status(422, "Invalid");
    assert_eq!(r.body["details"]["causes"][0]["field"], "spec.template.spec.restartPolicy");

    let job = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "pi"}, "spec": {"template": pod_template("Never")}});
    let r = s.post("/apis/batch/v1/namespaces/default/jobs", &job).await;
    assert_eq!(r.code, 201, "{}", r.text);
    let uid = r.body["metadata"]["uid"].as_str().unwrap();
    assert_eq!(r.body["spec"]["selector"]["matchLabels"]["batch.kubernetes.io/controller-uid"], uid);
    assert_eq!(r.body["spec"]["template"]["metadata"]["labels"]["job-name"], "pi");
    assert_eq!(r.body["spec"]["backoffLimit"], 6);
    let mut changed = r.body.clone();
    changed["spec"]["template"]["spec"]["containers"][0]["image"] = json!("other");
    let r = s.put("/apis/batch/v1/namespaces/default/jobs/pi", &changed).await;
    r.assert_status(422, "Invalid");
    assert_eq!(r.body["details"]["causes"][0]["field"], "spec.template");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eviction_honours_pod_disruption_budgets() {
    let s = TestServer::embedded().await;
    let pods = "/api/v1/namespaces/default/pods";
    let pod = |name: &str| {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": "x"}},
               "spec": {"containers": containers()}})
    };
    let eviction = |name: &str| json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name}});
    // A pending pod is evicted at once, budget or not.
    assert_eq!(s.post(pods, &pod("pending")).await.code, 201);
    let r = s.post(&format!("{pods}/pending/eviction"), &eviction("pending")).await;
    assert_eq!(r.code, 201, "{}", r.text);
    assert_eq!(r.body["status"], "Success");
    assert_eq!(s.get(&format!("{pods}/pending")).await.code, 404);

    // A running pod under a budget the disruption controller has not processed: 429.
    assert_eq!(s.post(pods, &pod("web")).await.code, 201);
    let mut running = s.get(&format!("{pods}/web")).await.body;
    running["status"]["phase"] = json!("Running");
    assert_eq!(s.put(&format!("{pods}/web/status"), &running).await.code, 200);
    let pdb = json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "web"},
                     "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "x"}}}});
    let pdbs = "/apis/policy/v1/namespaces/default/poddisruptionbudgets";
    assert_eq!(s.post(pdbs, &pdb).await.code, 201);
    let r = s.post(&format!("{pods}/web/eviction"), &eviction("web")).await;
    r.assert_status(429, "TooManyRequests");
    assert_eq!(r.message(), "Cannot evict pod as it would violate the pod's disruption budget.");
    assert_eq!(r.body["details"]["causes"][0]["reason"], "DisruptionBudget");
    assert_eq!(r.body["details"]["causes"][0]["message"], "The disruption budget web is still being processed by the server.");

    // No disruptions allowed: 429 naming the healthy counts.
    let mut budget = s.get(&format!("{pdbs}/web")).await.body;
    budget["status"] = json!({"observedGeneration": 1, "disruptionsAllowed": 0, "currentHealthy": 1, "desiredHealthy": 1, "expectedPods": 1});
    assert_eq!(s.put(&format!("{pdbs}/web/status"), &budget).await.code, 200);
    let r = s.post(&format!("{pods}/web/eviction"), &eviction("web")).await;
    r.assert_status(429, "TooManyRequests");
    assert_eq!(r.body["details"]["causes"][0]["message"], "The disruption budget web needs 1 healthy pods and has 1 currently");

    // One disruption allowed: the pod goes and the budget records it.
    let mut budget = s.get(&format!("{pdbs}/web")).await.body;
    budget["status"]["disruptionsAllowed"] = json!(1);
    budget["status"]["currentHealthy"] = json!(2);
    assert_eq!(s.put(&format!("{pdbs}/web/status"), &budget).await.code, 200);
    let r = s.post(&format!("{pods}/web/eviction"), &eviction("web")).await;
    assert_eq!(r.code, 201, "{}", r.text);
    assert_eq!(s.get(&format!("{pods}/web")).await.code, 404);
    let after = s.get(&format!("{pdbs}/web")).await.body;
    assert_eq!(after["status"]["disruptionsAllowed"], 0);
    assert!(after["status"]["disruptedPods"].get("web").is_some(), "{after}");

    // The wrong name in the body is a 400.
    assert_eq!(s.post(pods, &pod("other")).await.code, 201);
    s.post(&format!("{pods}/other/eviction"), &eviction("web")).await.assert_status(400, "BadRequest");
}

/// kube-rs sees every group: `Discovery::run` finds every row of the table
/// (each resource at its most stable version: `clustertrustbundles` is only in
/// `certificates.k8s.io/v1beta1`, beside the preferred `v1`), and `Api::all`
/// lists every listable resource (what kube-rs's own cluster tests and
/// controllers built on it do first).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rs_discovery_finds_and_lists_every_resource() {
    use kube::api::{Api, DynamicObject, ListParams};
    use kube::discovery::{verbs, Discovery};
    let s = TestServer::embedded().await;
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = kube::Client::try_from(kube::Config::new(s.base.parse().expect("server URL"))).expect("kube client");
    let discovery = Discovery::new(client.clone()).run().await.expect("discovery");
    let mut seen = Vec::new();
    for group in discovery.groups() {
        for (ar, caps) in group.resources_by_stability() {
            seen.push((ar.group.clone(), ar.plural.clone()));
            if !caps.supports_operation(verbs::LIST) {
                continue;
            }
            let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
            let list = api.list(&ListParams::default().limit(5)).await;
            assert!(list.is_ok(), "Api::all list of {}.{}: {:?}", ar.plural, ar.group, list.err());
        }
    }
    for row in registry::all() {
        assert!(
            seen.iter().any(|(g, p)| g == row.group && p == row.resource),
            "kube-rs discovery lacks {}.{}",
            row.resource,
            row.group
        );
    }
}

/// What Kubernetes serves and rkube does not yet is a 404 `NotFound` that
/// says so, not a bare "could not find the requested resource".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn not_yet_served_apis_say_so() {
    let s = TestServer::embedded().await;
    assert_eq!(s.post("/api/v1/namespaces/default/pods", &json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p"}, "spec": {"containers": containers()}})).await.code, 201);
    let proxy = s.get("/api/v1/namespaces/default/pods/p/proxy").await;
    proxy.assert_status(404, "NotFound");
    assert_eq!(proxy.message(), "the proxy subresource of pods is not implemented in rkube yet");
    // pods/exec, attach and portforward are served: a pod no node runs yet has no kubelet to go
    // through.
    let exec = s.get("/api/v1/namespaces/default/pods/p/exec?command=true&stdout=true").await;
    exec.assert_status(400, "BadRequest");
    assert_eq!(exec.message(), "pod p does not have a host assigned");
    let attach = s.get("/api/v1/namespaces/default/pods/p/attach?stdout=true").await;
    attach.assert_status(400, "BadRequest");
    let forward = s.get("/api/v1/namespaces/default/pods/p/portforward?ports=80").await;
    forward.assert_status(400, "BadRequest");
    assert_eq!(forward.message(), "pod p does not have a host assigned");
    // pods/log is served: a pod no node runs yet has nothing to read.
    let log = s.get("/api/v1/namespaces/default/pods/p/log").await;
    log.assert_status(400, "BadRequest");
    assert!(log.message().ends_with("is waiting to start: ContainerCreating"), "{}", log.message());
    // Paths Kubernetes does not serve either keep upstream's generic answer.
    let nope = s.get("/api/v1/namespaces/default/pods/p/nope").await;
    nope.assert_status(404, "NotFound");
    assert_eq!(nope.message(), "the server could not find the requested resource");
}

/// Errors come back in the encoding the client negotiated, as upstream's
/// `ErrorNegotiated`: a protobuf client reads a protobuf `Status` (same code
/// and reason); errors of a JSON client, or found before negotiation, are JSON.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_are_statuses_in_the_negotiated_encoding() {
    let s = TestServer::embedded().await;
    let url = format!("{}/api/v1/namespaces/default/configmaps/ghost", s.base);
    let r = pb_support::send(&s.client, "GET", &url, None).await;
    assert_eq!((r.code, r.content_type.as_str()), (404, pb_support::PROTOBUF));
    let status = pb_support::to_json(&r.body);
    assert_eq!(
        (status["kind"].as_str(), status["reason"].as_str(), status["code"].as_i64()),
        (Some("Status"), Some("NotFound"), Some(404))
    );
    assert_eq!(status["message"], "configmaps \"ghost\" not found");
    let json_client = s.get("/api/v1/namespaces/default/configmaps/ghost").await;
    assert_eq!(json_client.headers["content-type"], "application/json");
    json_client.assert_status(404, "NotFound");
    // A conflict on a protobuf create: 409 AlreadyExists in protobuf.
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "twice"}});
    let coll = format!("{}/api/v1/namespaces/default/configmaps", s.base);
    assert_eq!(pb_support::send(&s.client, "POST", &coll, Some(pb_support::body_of(&cm))).await.code, 201);
    let again = pb_support::send(&s.client, "POST", &coll, Some(pb_support::body_of(&cm))).await;
    assert_eq!((again.code, again.content_type.as_str()), (409, pb_support::PROTOBUF));
    assert_eq!(pb_support::to_json(&again.body)["reason"], "AlreadyExists");
}
