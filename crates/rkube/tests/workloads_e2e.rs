//! End to end: `rkube up --node` runs the controller manager in-process, so
//! Deployments made with the real kubectl 1.27 and 1.33 get ReplicaSets and
//! Running pods, roll out a new ReplicaSet on a template change, roll back
//! with `rollout undo`, scale, and report `ScalingReplicaSet` and
//! `SuccessfulCreate` events; `kubectl expose` gets Endpoints and an
//! EndpointSlice of the pods, and deletes cascade.
//!
//! The cluster process is killed by PID when its guard drops; the pods
//! (host processes) die with it.

use crate::common;

use std::time::Duration;

use common::{str_at, Backend, Cluster, Kubectl};
use serde_json::Value;

/// Longest wait for a rollout step.
const LIMIT: Duration = Duration::from_secs(90);

/// Polls `f` until it returns `Some`, failing with `what` and the server log after [`LIMIT`].
#[track_caller]
fn wait_for<T>(cluster: &Cluster, what: &str, f: impl FnMut() -> Option<T>) -> T {
    cluster.wait_until(what, LIMIT, f)
}

fn node_ready(cluster: &Cluster, k: &Kubectl) {
    cluster.wait_for_ready_node(k, LIMIT);
}

/// The ReplicaSets of Deployment `web`, as (name, spec.replicas, revision annotation).
fn replica_sets(k: &Kubectl) -> Vec<(String, i64, String)> {
    let list = k.json(&["get", "replicasets", "-l", "app=web"]);
    let mut out: Vec<(String, i64, String)> = list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|rs| {
            (
                str_at(rs, "/metadata/name").to_string(),
                rs["spec"]["replicas"].as_i64().unwrap_or(-1),
                rs["metadata"]["annotations"]["deployment.kubernetes.io/revision"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    out.sort();
    out
}

/// Pods of `web` not being deleted.
fn live_pods(k: &Kubectl) -> Vec<Value> {
    let list = k.json(&["get", "pods", "-l", "app=web"]);
    list["items"].as_array().cloned().unwrap_or_default().into_iter().filter(|p| p["metadata"]["deletionTimestamp"].is_null()).collect()
}

fn deployment_rolls_out_rolls_back_scales_and_reports_events(version: &str) {
    let cluster = Cluster::builder(Backend::Embedded).arg("--node").start();
    let k = cluster.kubectl(version);
    node_ready(&cluster, &k);

    k.ok(&["create", "deployment", "web", "--image=busybox", "--replicas=3", "--", "sleep", "3600"]);
    let status = k.ok(&["rollout", "status", "deployment/web", "--timeout=90s"]);
    assert!(status.stdout.contains("successfully rolled out"), "{}", status.stdout);
    let pods = live_pods(&k);
    assert_eq!(pods.len(), 3, "{pods:?}");
    let first = replica_sets(&k);
    assert_eq!(first.len(), 1, "{first:?}");
    let (rs1, replicas, revision) = first[0].clone();
    assert_eq!((replicas, revision.as_str()), (3, "1"));
    let hash = rs1.strip_prefix("web-").unwrap_or_else(|| panic!("ReplicaSet name {rs1}"));
    for p in &pods {
        assert_eq!(p["status"]["phase"], "Running", "{p}");
        assert_eq!(p["metadata"]["labels"]["pod-template-hash"], hash, "{p}");
        let owner = &p["metadata"]["ownerReferences"][0];
        assert_eq!((owner["kind"].as_str(), owner["name"].as_str(), owner["controller"].as_bool(), owner["blockOwnerDeletion"].as_bool()),
                   (Some("ReplicaSet"), Some(rs1.as_str()), Some(true), Some(true)));
    }
    let d = k.json(&["get", "deployment", "web"]);
    assert_eq!(d["metadata"]["annotations"]["deployment.kubernetes.io/revision"], "1");
    assert_eq!((d["status"]["replicas"].as_i64(), d["status"]["availableReplicas"].as_i64(), d["status"]["updatedReplicas"].as_i64()), (Some(3), Some(3), Some(3)));
    let conds: Vec<(String, String)> = d["status"]["conditions"].as_array().into_iter().flatten()
        .map(|c| (c["type"].as_str().unwrap_or("").to_string(), c["reason"].as_str().unwrap_or("").to_string())).collect();
    assert!(conds.contains(&("Available".into(), "MinimumReplicasAvailable".into())), "{conds:?}");
    assert!(conds.contains(&("Progressing".into(), "NewReplicaSetAvailable".into())), "{conds:?}");

    // A template change rolls out a second ReplicaSet at revision 2.
    k.ok(&["set", "image", "deployment/web", "busybox=busybox:1.36"]);
    k.ok(&["rollout", "status", "deployment/web", "--timeout=90s"]);
    let second = replica_sets(&k);
    assert_eq!(second.len(), 2, "{second:?}");
    let new = second.iter().find(|r| r.0 != rs1).cloned().unwrap_or_else(|| panic!("{second:?}"));
    assert_eq!((new.1, new.2.as_str()), (3, "2"), "{second:?}");
    assert!(second.contains(&(rs1.clone(), 0, "1".into())), "{second:?}");
    wait_for(&cluster, "3 pods of the new ReplicaSet only", || {
        let pods = live_pods(&k);
        (pods.len() == 3 && pods.iter().all(|p| p["metadata"]["ownerReferences"][0]["name"] == new.0.as_str())).then_some(())
    });

    // Undo: the first ReplicaSet comes back as revision 3.
    k.ok(&["rollout", "undo", "deployment/web"]);
    k.ok(&["rollout", "status", "deployment/web", "--timeout=90s"]);
    let third = replica_sets(&k);
    assert!(third.contains(&(rs1.clone(), 3, "3".into())), "{third:?}");
    assert!(third.contains(&(new.0.clone(), 0, "2".into())), "{third:?}");
    let history = k.ok(&["rollout", "history", "deployment/web"]).stdout;
    let revisions: Vec<&str> = history.lines().filter_map(|l| l.split_whitespace().next()).filter(|w| w.parse::<u32>().is_ok()).collect();
    assert_eq!(revisions, ["2", "3"], "{history}");

    // Scale down to 1.
    k.ok(&["scale", "deployment/web", "--replicas=1"]);
    wait_for(&cluster, "one pod left after scale", || (live_pods(&k).len() == 1).then_some(()));
    wait_for(&cluster, "status.replicas 1", || {
        let d = k.json(&["get", "deployment", "web"]);
        (d["status"]["replicas"].as_i64() == Some(1) && d["status"]["availableReplicas"].as_i64() == Some(1)).then_some(())
    });

    let events = k.ok(&["get", "events"]).stdout;
    assert!(events.contains("ScalingReplicaSet"), "{events}");
    assert!(events.contains(&format!("Scaled up replica set {rs1} from 0 to 3")), "{events}");
    assert!(events.contains("SuccessfulCreate"), "{events}");
    assert!(events.contains("Created pod: web-"), "{events}");
    assert!(events.contains("SuccessfulDelete"), "{events}");
}


/// `kubectl expose` of a Deployment gives a Service whose Endpoints and
/// EndpointSlice list the Deployment's pods (their IPs and names, ready);
/// deleting the Deployment removes its ReplicaSet and pods (garbage
/// collector, background cascade) and the Endpoints follow; deleting the
/// Service removes its Endpoints.
fn expose_lists_the_pods_in_endpoints_and_slices_and_deletes_cascade(version: &str) {
    let cluster = Cluster::builder(Backend::Embedded).arg("--node").start();
    let k = cluster.kubectl(version);
    node_ready(&cluster, &k);

    k.ok(&["create", "deployment", "web", "--image=busybox", "--replicas=2", "--", "sleep", "3600"]);
    k.ok(&["rollout", "status", "deployment/web", "--timeout=90s"]);
    k.ok(&["expose", "deployment", "web", "--port=80", "--target-port=8080"]);
    let pods = live_pods(&k);
    let mut want: Vec<(String, String)> = pods
        .iter()
        .map(|p| (p["status"]["podIP"].as_str().unwrap_or("").to_string(), p["metadata"]["name"].as_str().unwrap_or("").to_string()))
        .collect();
    want.sort();
    assert!(want.iter().all(|(ip, _)| !ip.is_empty()), "running pods have IPs: {want:?}");

    wait_for(&cluster, "Endpoints listing both pods", || {
        let ep = k.json(&["get", "endpoints", "web"]);
        let subset = &ep["subsets"][0];
        let mut got: Vec<(String, String)> = subset["addresses"].as_array().into_iter().flatten()
            .map(|a| (a["ip"].as_str().unwrap_or("").to_string(), a["targetRef"]["name"].as_str().unwrap_or("").to_string()))
            .collect();
        got.sort();
        (got == want && subset["ports"][0]["port"] == 8080).then_some(())
    });
    wait_for(&cluster, "an EndpointSlice with both pods ready", || {
        let list = k.json(&["get", "endpointslices", "-l", "kubernetes.io/service-name=web"]);
        let items = list["items"].as_array().cloned().unwrap_or_default();
        let eps: Vec<Value> = items.iter().flat_map(|s| s["endpoints"].as_array().cloned().unwrap_or_default()).collect();
        let mut got: Vec<(String, String)> = eps.iter()
            .filter(|e| e["conditions"]["ready"] == true)
            .map(|e| (e["addresses"][0].as_str().unwrap_or("").to_string(), e["targetRef"]["name"].as_str().unwrap_or("").to_string()))
            .collect();
        got.sort();
        (items.len() == 1 && got == want && items[0]["metadata"]["ownerReferences"][0]["name"] == "web").then_some(())
    });

    // Background cascade: the ReplicaSet and its pods go with the Deployment.
    k.ok(&["delete", "deployment", "web"]);
    wait_for(&cluster, "the ReplicaSet and pods deleted by the garbage collector", || {
        (replica_sets(&k).is_empty() && live_pods(&k).is_empty()).then_some(())
    });
    wait_for(&cluster, "Endpoints without addresses", || {
        k.json(&["get", "endpoints", "web"])["subsets"].as_array().is_none_or(|s| s.is_empty()).then_some(())
    });
    k.ok(&["delete", "service", "web"]);
    wait_for(&cluster, "the Endpoints deleted with the Service", || {
        k.run(&["get", "endpoints", "web"]).stderr.contains("NotFound").then_some(())
    });
}

per_kubectl_version!(deployment_rolls_out_rolls_back_scales_and_reports_events, expose_lists_the_pods_in_endpoints_and_slices_and_deletes_cascade);
