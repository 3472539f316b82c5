//! The objects the scenarios write: pods of about 1.5 KB and configmaps of
//! about 1 KB of JSON (the sizes KEP-2340's figures use), nodes, leases,
//! services, endpoint slices and namespaces; plus their storage keys for
//! loading straight into storage.

use serde_json::{json, Value};

/// Kinds the `list` and `init` scenarios load.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// ConfigMaps of ~1 KB (KEP-2340's 300k × 1 KB configmaps).
    Configmaps,
    /// Pods of ~1.5 KB.
    Pods,
}

impl Kind {
    /// The resource name (`configmaps`, `pods`).
    pub fn resource(self) -> &'static str {
        match self {
            Kind::Configmaps => "configmaps",
            Kind::Pods => "pods",
        }
    }

    /// The object named `name` in `ns`, number `i`, as stored (with uid and creationTimestamp).
    pub fn object(self, ns: &str, name: &str, i: usize) -> Value {
        match self {
            Kind::Configmaps => configmap(ns, name, i),
            Kind::Pods => pod(ns, name, &format!("node-{}", i % 1000), i),
        }
    }

    /// The storage key of the object (`/registry/<resource>/<ns>/<name>`, from rkube-api's registry).
    pub fn key(self, ns: &str, name: &str) -> String {
        match rkube_api::registry::lookup("", "v1", self.resource()) {
            Some(info) => info.object_key("/registry", ns, name),
            None => format!("/registry/{}/{ns}/{name}", self.resource()),
        }
    }

    /// The collection path in `ns`.
    pub fn collection(self, ns: &str) -> String {
        format!("/api/v1/namespaces/{ns}/{}", self.resource())
    }
}

/// A fixed creation timestamp so runs are repeatable.
const CREATED: &str = "2025-01-01T00:00:00Z";

/// A deterministic UUID-shaped uid for object `i` of a given `tag`.
pub fn uid(tag: u32, i: usize) -> String {
    format!("{tag:08x}-0000-4000-8000-{i:012x}")
}

/// A ConfigMap of about 1 KB of JSON (`data.payload` pads it).
pub fn configmap(ns: &str, name: &str, i: usize) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": ns,
            "uid": uid(1, i),
            "creationTimestamp": CREATED,
            "labels": {"app": format!("app-{}", i % 50), "bench": "list"},
        },
        "data": {"payload": payload(i, 800)},
    })
}

/// `len` printable characters that differ per `i` (not compressible to nothing).
pub fn payload(i: usize, len: usize) -> String {
    let seed = format!("{i:08x}");
    seed.chars().cycle().zip("abcdefghijklmnopqrstuvwxyz0123456789".chars().cycle()).map(|(a, b)| if a == '0' { b } else { a }).take(len).collect()
}

/// A pod of about 1.5 KB of JSON bound to `node`, Running.
pub fn pod(ns: &str, name: &str, node: &str, i: usize) -> Value {
    let mut p = pending_pod(ns, name, node, i);
    p["metadata"]["uid"] = json!(uid(2, i));
    p["metadata"]["creationTimestamp"] = json!(CREATED);
    p["status"] = running_status(i);
    p
}

/// A pod as a controller creates it: bound to `node`, no status yet (~1.1 KB).
pub fn pending_pod(ns: &str, name: &str, node: &str, i: usize) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": ns,
            "labels": {"app": format!("app-{}", i % 50), "tier": "backend", "pod-template-hash": "7d9c8b6f5"},
            "annotations": {"kubernetes.io/config.seen": CREATED, "bench.rkube.io/note": payload(i, 200)},
        },
        "spec": {
            "nodeName": node,
            "containers": [{
                "name": "app",
                "image": "registry.example/app:1.2.3",
                "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
                "terminationMessagePath": "/dev/termination-log",
                "terminationMessagePolicy": "File",
                "imagePullPolicy": "IfNotPresent",
            }],
            "restartPolicy": "Always",
            "schedulerName": "default-scheduler",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
        },
    })
}

/// The status a kubelet reports for a started pod.
pub fn running_status(i: usize) -> Value {
    json!({
        "phase": "Running",
        "podIP": pod_ip(i),
        "hostIP": format!("10.1.{}.{}", (i / 250) % 250, i % 250 + 1),
        "startTime": CREATED,
        "conditions": [
            {"type": "Initialized", "status": "True", "lastTransitionTime": CREATED},
            {"type": "Ready", "status": "True", "lastTransitionTime": CREATED},
            {"type": "ContainersReady", "status": "True", "lastTransitionTime": CREATED},
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": CREATED},
        ],
        "containerStatuses": [{"name": "app", "ready": true, "restartCount": 0, "image": "registry.example/app:1.2.3",
            "imageID": "", "started": true, "state": {"running": {"startedAt": CREATED}}}],
    })
}

/// A pod IP for pod `i`.
pub fn pod_ip(i: usize) -> String {
    format!("10.244.{}.{}", (i / 250) % 250, i % 250 + 1)
}

/// A Namespace.
pub fn namespace(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "uid": uid(3, name.len()), "creationTimestamp": CREATED},
        "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}})
}

/// A Node as a kubelet registers it.
pub fn node(name: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "type": "hollow"}},
        "spec": {},
        "status": {
            "capacity": {"cpu": "8", "memory": "32Gi", "pods": "110"},
            "allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "lastHeartbeatTime": CREATED, "lastTransitionTime": CREATED}],
            "nodeInfo": {"kubeletVersion": "v1.33.0-hollow", "operatingSystem": "linux", "architecture": "amd64",
                "machineID": "", "systemUUID": "", "bootID": "", "kernelVersion": "", "osImage": "", "containerRuntimeVersion": "", "kubeProxyVersion": ""},
        },
    })
}

/// The node Lease a kubelet renews (`kube-node-lease/<node>`).
pub fn lease(node: &str, renew_time: &str) -> Value {
    json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": node, "namespace": "kube-node-lease"},
        "spec": {"holderIdentity": node, "leaseDurationSeconds": 40, "renewTime": renew_time},
    })
}

/// A ClusterIP Service selecting `app=<name>`.
pub fn service(ns: &str, name: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"selector": {"app": name}, "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}]},
    })
}

/// The EndpointSlice of service `svc` listing `ips`.
pub fn endpoint_slice(ns: &str, svc: &str, ips: &[String]) -> Value {
    let endpoints: Vec<Value> = ips.iter().map(|ip| json!({"addresses": [ip], "conditions": {"ready": true}})).collect();
    json!({
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {"name": format!("{svc}-bench"), "namespace": ns, "labels": {"kubernetes.io/service-name": svc}},
        "addressType": "IPv4",
        "endpoints": endpoints,
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
    })
}

/// RFC 3339 time with microseconds, now (for lease renewals).
pub fn now_micro() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn size(v: &Value) -> usize {
        serde_json::to_vec(v).map(|b| b.len()).unwrap_or(0)
    }

    #[test]
    fn object_sizes_match_kep_2340() {
        let cm = size(&configmap("bench", "cm-000001", 1));
        assert!((950..=1100).contains(&cm), "configmap is {cm} bytes");
        let p = size(&pod("bench", "pod-000001", "node-1", 1));
        assert!((1400..=1700).contains(&p), "pod is {p} bytes");
    }

    #[test]
    fn keys_follow_the_registry_layout() {
        assert_eq!(Kind::Configmaps.key("ns", "a"), "/registry/configmaps/ns/a");
        assert_eq!(Kind::Pods.key("ns", "a"), "/registry/pods/ns/a");
    }
}
