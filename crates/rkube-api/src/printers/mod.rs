//! Table printers: the column definitions and cells `kubectl get` shows
//! for each built-in resource, following upstream's table printers
//! (`pkg/printers/internalversion/printers.go`). Each row of the resource
//! table names its [`Printer`] ([`crate::registry::ResourceInfo::printer`]);
//! rows without one print NAME and AGE ([`DEFAULT`]). The server always
//! fills every column, including the priority-1 ones kubectl shows only with
//! `-o wide`.

mod format;
pub mod metrics;
mod pod;
mod workloads;

pub use format::{human_duration, since, timestamp};

use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use format::{
    age, array_at, format_label_selector, format_labels, int_at, list_with_more, map_len, str_at,
};
use workloads as w;

const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";

/// Where a column's description comes from.
#[derive(Debug, Clone, Copy)]
pub enum Desc {
    /// Fixed text.
    Text(&'static str),
    /// The description of a property in the published OpenAPI schema: `(definition, property)`.
    Schema(&'static str, &'static str),
}

/// One `TableColumnDefinition`.
#[derive(Debug, Clone, Copy)]
pub struct Column {
    /// Column name (kubectl upper-cases it for the header).
    pub name: &'static str,
    /// OpenAPI type of the cells: `string`, `integer`, ...
    pub ty: &'static str,
    /// OpenAPI format (`name` marks the name column).
    pub format: &'static str,
    /// 0 for default columns, 1 for `-o wide` columns.
    pub priority: i64,
    /// Description source.
    pub description: Desc,
}

pub(super) const fn col(name: &'static str, ty: &'static str, priority: i64, description: Desc) -> Column {
    Column { name, ty, format: "", priority, description }
}

pub(super) const NAME: Column = Column { name: "Name", ty: "string", format: "name", priority: 0, description: Desc::Schema(OBJECT_META, "name") };
pub(super) const AGE: Column = col("Age", "string", 0, Desc::Schema(OBJECT_META, "creationTimestamp"));
pub(super) const CONTAINERS: Column = col("Containers", "string", 1, Desc::Text("Names of each container in the template."));
pub(super) const IMAGES: Column = col("Images", "string", 1, Desc::Text("Images referenced by each container in the template."));

/// Computes the cells of one object at time `now`.
pub type CellsFn = fn(&Value, DateTime<Utc>) -> Vec<Value>;

/// How one resource is printed.
#[derive(Debug, Clone, Copy)]
pub struct Printer {
    /// Column definitions, in cell order.
    pub columns: &'static [Column],
    /// Cell computation.
    pub cells: CellsFn,
    /// Optional row conditions (pods: `Completed`).
    pub conditions: Option<fn(&Value) -> Option<Value>>,
}

const fn printer(columns: &'static [Column], cells: CellsFn) -> Printer {
    Printer { columns, cells, conditions: None }
}

/// NAME and AGE: the printer of every row that names no other (upstream's
/// default table convertor).
pub const DEFAULT: Printer = printer(DEFAULT_COLUMNS, default_cells);

/// `pods`.
pub const POD: Printer = Printer { columns: POD_COLUMNS, cells: pod::cells, conditions: Some(pod::conditions) };

/// `nodes`.
pub const NODE: Printer = printer(NODE_COLUMNS, node_cells);

/// `services`.
pub const SERVICE: Printer = printer(SERVICE_COLUMNS, service_cells);

/// `namespaces`.
pub const NAMESPACE: Printer = printer(NAMESPACE_COLUMNS, namespace_cells);

/// `configmaps`.
pub const CONFIG_MAP: Printer = printer(CONFIGMAP_COLUMNS, configmap_cells);

/// `secrets`.
pub const SECRET: Printer = printer(SECRET_COLUMNS, secret_cells);

/// `endpoints`.
pub const ENDPOINTS: Printer = printer(ENDPOINTS_COLUMNS, endpoints_cells);

/// `events`.
pub const EVENT: Printer = printer(EVENT_COLUMNS, event_cells);

/// `events` (events.k8s.io).
pub const EVENT_V1: Printer = printer(EVENT_COLUMNS, event_v1_cells);

/// `serviceaccounts`.
pub const SERVICE_ACCOUNT: Printer = printer(SERVICE_ACCOUNT_COLUMNS, service_account_cells);

/// `certificatesigningrequests` (certificates.k8s.io).
pub const CERTIFICATE_SIGNING_REQUEST: Printer = printer(CSR_COLUMNS, csr_cells);

/// `clustertrustbundles` (certificates.k8s.io): NAME, SIGNERNAME (`<none>` without one), no AGE.
pub const CLUSTER_TRUST_BUNDLE: Printer = printer(CTB_COLUMNS, ctb_cells);

/// `endpointslices` (discovery.k8s.io).
pub const ENDPOINT_SLICE: Printer = printer(ENDPOINT_SLICE_COLUMNS, endpoint_slice_cells);

/// `deployments` (apps).
pub const DEPLOYMENT: Printer = printer(DEPLOYMENT_COLUMNS, deployment_cells);

/// `leases` (coordination.k8s.io).
pub const LEASE: Printer = printer(LEASE_COLUMNS, lease_cells);

/// `replicationcontrollers`.
pub const REPLICATION_CONTROLLER: Printer = printer(w::REPLICA_SET_COLUMNS, w::replication_controller_cells);

/// `persistentvolumeclaims`.
pub const PERSISTENT_VOLUME_CLAIM: Printer = printer(w::PVC_COLUMNS, w::pvc_cells);

/// `persistentvolumes`.
pub const PERSISTENT_VOLUME: Printer = printer(w::PV_COLUMNS, w::pv_cells);

/// `replicasets` (apps).
pub const REPLICA_SET: Printer = printer(w::REPLICA_SET_COLUMNS, w::replica_set_cells);

/// `statefulsets` (apps).
pub const STATEFUL_SET: Printer = printer(w::STATEFUL_SET_COLUMNS, w::stateful_set_cells);

/// `daemonsets` (apps).
pub const DAEMON_SET: Printer = printer(w::DAEMON_SET_COLUMNS, w::daemon_set_cells);

/// `controllerrevisions` (apps).
pub const CONTROLLER_REVISION: Printer = printer(w::CONTROLLER_REVISION_COLUMNS, w::controller_revision_cells);

/// `jobs` (batch).
pub const JOB: Printer = printer(w::JOB_COLUMNS, w::job_cells);

/// `cronjobs` (batch).
pub const CRON_JOB: Printer = printer(w::CRON_JOB_COLUMNS, w::cron_job_cells);

/// `horizontalpodautoscalers` (autoscaling).
pub const HORIZONTAL_POD_AUTOSCALER: Printer = printer(w::HPA_COLUMNS, w::hpa_cells);

/// `ingresses` (networking.k8s.io).
pub const INGRESS: Printer = printer(w::INGRESS_COLUMNS, w::ingress_cells);

/// `networkpolicies` (networking.k8s.io).
pub const NETWORK_POLICY: Printer = printer(w::NETWORK_POLICY_COLUMNS, w::network_policy_cells);

/// `poddisruptionbudgets` (policy).
pub const POD_DISRUPTION_BUDGET: Printer = printer(w::PDB_COLUMNS, w::pdb_cells);

/// `priorityclasses` (scheduling.k8s.io).
pub const PRIORITY_CLASS: Printer = printer(w::PRIORITY_CLASS_COLUMNS, w::priority_class_cells);

/// `runtimeclasses` (node.k8s.io).
pub const RUNTIME_CLASS: Printer = printer(w::RUNTIME_CLASS_COLUMNS, w::runtime_class_cells);

/// `storageclasses` (storage.k8s.io).
pub const STORAGE_CLASS: Printer = printer(w::STORAGE_CLASS_COLUMNS, w::storage_class_cells);

pub(super) fn name(obj: &Value) -> Value {
    json!(str_at(obj, "/metadata/name"))
}

// ---- default -----------------------------------------------------------------

const DEFAULT_COLUMNS: &[Column] = &[NAME, AGE];

fn default_cells(obj: &Value, now: DateTime<Utc>) -> Vec<Value> {
    vec![name(obj), json!(age(obj, now))]
}

// ---- pods --------------------------------------------------------------------

const POD_COLUMNS: &[Column] = &[
    NAME,
    col("Ready", "string", 0, Desc::Text("The aggregate readiness state of this pod for accepting traffic.")),
    col("Status", "string", 0, Desc::Text("The aggregate status of the containers in this pod.")),
    col("Restarts", "string", 0, Desc::Text("The number of times the containers in this pod have been restarted, and how long ago the last restart was.")),
    AGE,
    col("IP", "string", 1, Desc::Schema("io.k8s.api.core.v1.PodStatus", "podIP")),
    col("Node", "string", 1, Desc::Schema("io.k8s.api.core.v1.PodSpec", "nodeName")),
    col("Nominated Node", "string", 1, Desc::Schema("io.k8s.api.core.v1.PodStatus", "nominatedNodeName")),
    col("Readiness Gates", "string", 1, Desc::Schema("io.k8s.api.core.v1.PodSpec", "readinessGates")),
];

// ---- nodes -------------------------------------------------------------------

const NODE_SYSTEM_INFO: &str = "io.k8s.api.core.v1.NodeSystemInfo";
const NODE_COLUMNS: &[Column] = &[
    NAME,
    col("Status", "string", 0, Desc::Text("The status of the node")),
    col("Roles", "string", 0, Desc::Text("The roles of the node")),
    AGE,
    col("Version", "string", 0, Desc::Schema(NODE_SYSTEM_INFO, "kubeletVersion")),
    col("Internal-IP", "string", 1, Desc::Schema("io.k8s.api.core.v1.NodeStatus", "addresses")),
    col("External-IP", "string", 1, Desc::Schema("io.k8s.api.core.v1.NodeStatus", "addresses")),
    col("OS-Image", "string", 1, Desc::Schema(NODE_SYSTEM_INFO, "osImage")),
    col("Kernel-Version", "string", 1, Desc::Schema(NODE_SYSTEM_INFO, "kernelVersion")),
    col("Container-Runtime", "string", 1, Desc::Schema(NODE_SYSTEM_INFO, "containerRuntimeVersion")),
];

/// Label prefix of node roles (`node-role.kubernetes.io/<role>`).
const NODE_ROLE_PREFIX: &str = "node-role.kubernetes.io/";
/// Legacy role label (`kubernetes.io/role=<role>`).
const NODE_ROLE_LABEL: &str = "kubernetes.io/role";

fn node_address(node: &Value, ty: &str) -> String {
    array_at(node, "/status/addresses")
        .iter()
        .find(|a| str_at(a, "/type") == ty)
        .map(|a| str_at(a, "/address").to_string())
        .unwrap_or_else(|| "<none>".to_string())
}

fn node_cells(node: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let mut status: Vec<&str> = Vec::new();
    if let Some(ready) = array_at(node, "/status/conditions").iter().find(|c| str_at(c, "/type") == "Ready") {
        status.push(if str_at(ready, "/status") == "True" { "Ready" } else { "NotReady" });
    }
    if status.is_empty() {
        status.push("Unknown");
    }
    if node.pointer("/spec/unschedulable").and_then(Value::as_bool) == Some(true) {
        status.push("SchedulingDisabled");
    }
    let mut roles: Vec<String> = Vec::new();
    if let Some(labels) = node.pointer("/metadata/labels").and_then(Value::as_object) {
        for (k, v) in labels {
            let role = match k.strip_prefix(NODE_ROLE_PREFIX) {
                Some(role) if !role.is_empty() => role.to_string(),
                Some(_) => continue,
                None if k == NODE_ROLE_LABEL => match v.as_str() {
                    Some(role) if !role.is_empty() => role.to_string(),
                    _ => continue,
                },
                None => continue,
            };
            if !roles.contains(&role) {
                roles.push(role);
            }
        }
    }
    roles.sort();
    let roles = if roles.is_empty() { "<none>".to_string() } else { roles.join(",") };
    let unknown_if_empty = |s: &str| if s.is_empty() { "<unknown>".to_string() } else { s.to_string() };
    vec![
        name(node),
        json!(status.join(",")),
        json!(roles),
        json!(age(node, now)),
        json!(str_at(node, "/status/nodeInfo/kubeletVersion")),
        json!(node_address(node, "InternalIP")),
        json!(node_address(node, "ExternalIP")),
        json!(unknown_if_empty(str_at(node, "/status/nodeInfo/osImage"))),
        json!(unknown_if_empty(str_at(node, "/status/nodeInfo/kernelVersion"))),
        json!(unknown_if_empty(str_at(node, "/status/nodeInfo/containerRuntimeVersion"))),
    ]
}

// ---- services ----------------------------------------------------------------

const SERVICE_SPEC: &str = "io.k8s.api.core.v1.ServiceSpec";
const SERVICE_COLUMNS: &[Column] = &[
    NAME,
    col("Type", "string", 0, Desc::Schema(SERVICE_SPEC, "type")),
    col("Cluster-IP", "string", 0, Desc::Schema(SERVICE_SPEC, "clusterIP")),
    col("External-IP", "string", 0, Desc::Schema(SERVICE_SPEC, "externalIPs")),
    col("Port(s)", "string", 0, Desc::Schema(SERVICE_SPEC, "ports")),
    AGE,
    col("Selector", "string", 1, Desc::Schema(SERVICE_SPEC, "selector")),
];

fn strings(values: &[Value]) -> Vec<String> {
    values.iter().filter_map(Value::as_str).map(str::to_string).collect()
}

fn service_external_ip(svc: &Value) -> String {
    let external_ips = strings(array_at(svc, "/spec/externalIPs"));
    match str_at(svc, "/spec/type") {
        "ClusterIP" | "NodePort" | "" => {
            if external_ips.is_empty() {
                "<none>".to_string()
            } else {
                external_ips.join(",")
            }
        }
        "LoadBalancer" => {
            // Ingress IPs (or hostnames), de-duplicated and sorted; the server
            // renders the wide form (no 16-character clipping).
            let mut lb: Vec<String> = array_at(svc, "/status/loadBalancer/ingress")
                .iter()
                .filter_map(|i| {
                    let ip = str_at(i, "/ip");
                    let host = str_at(i, "/hostname");
                    if !ip.is_empty() {
                        Some(ip.to_string())
                    } else if !host.is_empty() {
                        Some(host.to_string())
                    } else {
                        None
                    }
                })
                .collect();
            lb.sort();
            lb.dedup();
            let mut all = lb;
            all.extend(external_ips);
            if all.is_empty() {
                "<pending>".to_string()
            } else {
                all.join(",")
            }
        }
        "ExternalName" => str_at(svc, "/spec/externalName").to_string(),
        _ => "<unknown>".to_string(),
    }
}

fn service_cells(svc: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let cluster_ip = array_at(svc, "/spec/clusterIPs")
        .first()
        .and_then(Value::as_str)
        .or_else(|| svc.pointer("/spec/clusterIP").and_then(Value::as_str))
        .filter(|s| !s.is_empty())
        .unwrap_or("<none>");
    let ports: Vec<String> = array_at(svc, "/spec/ports")
        .iter()
        .map(|p| {
            let protocol = match str_at(p, "/protocol") {
                "" => "TCP",
                other => other,
            };
            let node_port = int_at(p, "/nodePort");
            if node_port > 0 {
                format!("{}:{node_port}/{protocol}", int_at(p, "/port"))
            } else {
                format!("{}/{protocol}", int_at(p, "/port"))
            }
        })
        .collect();
    let ports = if ports.is_empty() { "<none>".to_string() } else { ports.join(",") };
    vec![
        name(svc),
        json!(str_at(svc, "/spec/type")),
        json!(cluster_ip),
        json!(service_external_ip(svc)),
        json!(ports),
        json!(age(svc, now)),
        json!(format_labels(svc.pointer("/spec/selector"))),
    ]
}

// ---- namespaces, configmaps, secrets, service accounts, leases ----------------

const NAMESPACE_COLUMNS: &[Column] = &[NAME, col("Status", "string", 0, Desc::Text("The status of the namespace")), AGE];

fn namespace_cells(ns: &Value, now: DateTime<Utc>) -> Vec<Value> {
    vec![name(ns), json!(str_at(ns, "/status/phase")), json!(age(ns, now))]
}

const CONFIGMAP_COLUMNS: &[Column] = &[NAME, col("Data", "string", 0, Desc::Schema("io.k8s.api.core.v1.ConfigMap", "data")), AGE];

fn configmap_cells(cm: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let data = map_len(cm, "/data") + map_len(cm, "/binaryData");
    vec![name(cm), json!(data), json!(age(cm, now))]
}

const SECRET_COLUMNS: &[Column] = &[
    NAME,
    col("Type", "string", 0, Desc::Schema("io.k8s.api.core.v1.Secret", "type")),
    col("Data", "string", 0, Desc::Schema("io.k8s.api.core.v1.Secret", "data")),
    AGE,
];

fn secret_cells(secret: &Value, now: DateTime<Utc>) -> Vec<Value> {
    vec![name(secret), json!(str_at(secret, "/type")), json!(map_len(secret, "/data")), json!(age(secret, now))]
}

const SERVICE_ACCOUNT_COLUMNS: &[Column] =
    &[NAME, col("Secrets", "string", 0, Desc::Schema("io.k8s.api.core.v1.ServiceAccount", "secrets")), AGE];

fn service_account_cells(sa: &Value, now: DateTime<Utc>) -> Vec<Value> {
    vec![name(sa), json!(array_at(sa, "/secrets").len()), json!(age(sa, now))]
}

const CSR_SPEC: &str = "io.k8s.api.certificates.v1.CertificateSigningRequestSpec";
const CSR_COLUMNS: &[Column] = &[
    NAME,
    AGE,
    col("SignerName", "string", 0, Desc::Schema(CSR_SPEC, "signerName")),
    col("Requestor", "string", 0, Desc::Schema(CSR_SPEC, "request")),
    col("RequestedDuration", "string", 0, Desc::Schema(CSR_SPEC, "expirationSeconds")),
    col("Condition", "string", 0, Desc::Schema("io.k8s.api.certificates.v1.CertificateSigningRequestStatus", "conditions")),
];

/// Upstream `printCertificateSigningRequest` and `extractCSRStatus`: the
/// condition is `Denied`, `Approved` or `Pending`, then `,Failed` and `,Issued`.
fn csr_cells(csr: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let has = |t: &str| array_at(csr, "/status/conditions").iter().any(|c| str_at(c, "/type") == t);
    let mut condition = if has("Denied") { "Denied" } else if has("Approved") { "Approved" } else { "Pending" }.to_string();
    if has("Failed") {
        condition.push_str(",Failed");
    }
    if !str_at(csr, "/status/certificate").is_empty() {
        condition.push_str(",Issued");
    }
    let or_none = |s: &str| if s.is_empty() { "<none>".to_string() } else { s.to_string() };
    let duration = csr
        .pointer("/spec/expirationSeconds")
        .and_then(Value::as_i64)
        .map(format::human_duration)
        .unwrap_or_else(|| "<none>".into());
    vec![
        name(csr),
        json!(age(csr, now)),
        json!(or_none(str_at(csr, "/spec/signerName"))),
        json!(str_at(csr, "/spec/username")),
        json!(duration),
        json!(condition),
    ]
}

const CTB_COLUMNS: &[Column] =
    &[NAME, col("SignerName", "string", 0, Desc::Schema("io.k8s.api.certificates.v1beta1.ClusterTrustBundleSpec", "signerName"))];

fn ctb_cells(bundle: &Value, _: DateTime<Utc>) -> Vec<Value> {
    let signer = str_at(bundle, "/spec/signerName");
    vec![name(bundle), json!(if signer.is_empty() { "<none>" } else { signer })]
}

const LEASE_COLUMNS: &[Column] =
    &[NAME, col("Holder", "string", 0, Desc::Schema("io.k8s.api.coordination.v1.LeaseSpec", "holderIdentity")), AGE];

fn lease_cells(lease: &Value, now: DateTime<Utc>) -> Vec<Value> {
    vec![name(lease), json!(str_at(lease, "/spec/holderIdentity")), json!(age(lease, now))]
}

// ---- endpoints and endpoint slices --------------------------------------------

const ENDPOINTS_COLUMNS: &[Column] = &[NAME, col("Endpoints", "string", 0, Desc::Schema("io.k8s.api.core.v1.Endpoints", "subsets")), AGE];

/// Most addresses listed before `+ N more...`.
const LIST_MAX: usize = 3;

fn join_host_port(ip: &str, port: i64) -> String {
    if ip.contains(':') {
        format!("[{ip}]:{port}")
    } else {
        format!("{ip}:{port}")
    }
}

fn endpoints_cells(ep: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let subsets = array_at(ep, "/subsets");
    let text = if subsets.is_empty() {
        "<none>".to_string()
    } else {
        let mut list = Vec::new();
        let mut count = 0usize;
        for ss in subsets {
            let addresses = array_at(ss, "/addresses");
            let ports = array_at(ss, "/ports");
            if ports.is_empty() {
                count += addresses.len();
                for a in addresses {
                    if list.len() < LIST_MAX {
                        list.push(str_at(a, "/ip").to_string());
                    }
                }
                continue;
            }
            for p in ports {
                count += addresses.len();
                for a in addresses {
                    if list.len() < LIST_MAX {
                        list.push(join_host_port(str_at(a, "/ip"), int_at(p, "/port")));
                    }
                }
            }
        }
        list_with_more(&list, count, "")
    };
    vec![name(ep), json!(text), json!(age(ep, now))]
}

const ENDPOINT_SLICE_DEF: &str = "io.k8s.api.discovery.v1.EndpointSlice";
const ENDPOINT_SLICE_COLUMNS: &[Column] = &[
    NAME,
    col("AddressType", "string", 0, Desc::Schema(ENDPOINT_SLICE_DEF, "addressType")),
    col("Ports", "string", 0, Desc::Schema(ENDPOINT_SLICE_DEF, "ports")),
    col("Endpoints", "string", 0, Desc::Schema(ENDPOINT_SLICE_DEF, "endpoints")),
    AGE,
];

fn endpoint_slice_cells(slice: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let ports_all = array_at(slice, "/ports");
    let ports: Vec<String> = ports_all
        .iter()
        .take(LIST_MAX)
        .map(|p| match p.get("port").and_then(Value::as_i64) {
            Some(n) => n.to_string(),
            None => match p.get("name").and_then(Value::as_str) {
                Some(n) => n.to_string(),
                None => "*".to_string(),
            },
        })
        .collect();
    let addresses: Vec<&str> = array_at(slice, "/endpoints")
        .iter()
        .flat_map(|e| array_at(e, "/addresses").iter().filter_map(Value::as_str))
        .collect();
    let listed: Vec<String> = addresses.iter().take(LIST_MAX).map(|s| s.to_string()).collect();
    vec![
        name(slice),
        json!(str_at(slice, "/addressType")),
        json!(list_with_more(&ports, ports_all.len(), "<unset>")),
        json!(list_with_more(&listed, addresses.len(), "<unset>")),
        json!(age(slice, now)),
    ]
}

// ---- events ------------------------------------------------------------------

const EVENT_DEF: &str = "io.k8s.api.core.v1.Event";
const EVENT_COLUMNS: &[Column] = &[
    col("Last Seen", "string", 0, Desc::Schema(EVENT_DEF, "lastTimestamp")),
    col("Type", "string", 0, Desc::Schema(EVENT_DEF, "type")),
    col("Reason", "string", 0, Desc::Schema(EVENT_DEF, "reason")),
    col("Object", "string", 0, Desc::Schema(EVENT_DEF, "involvedObject")),
    col("Subobject", "string", 1, Desc::Schema("io.k8s.api.core.v1.ObjectReference", "fieldPath")),
    col("Source", "string", 1, Desc::Schema(EVENT_DEF, "source")),
    col("Message", "string", 0, Desc::Schema(EVENT_DEF, "message")),
    col("First Seen", "string", 1, Desc::Schema(EVENT_DEF, "firstTimestamp")),
    col("Count", "string", 1, Desc::Schema(EVENT_DEF, "count")),
    Column { name: "Name", ty: "string", format: "name", priority: 1, description: Desc::Schema(OBJECT_META, "name") },
];

fn event_cells(ev: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let first = match timestamp(ev.get("firstTimestamp")) {
        Some(t) => since(Some(t), now),
        None => since(timestamp(ev.get("eventTime")), now),
    };
    let mut last = match timestamp(ev.get("lastTimestamp")) {
        Some(t) => since(Some(t), now),
        None => first.clone(),
    };
    let mut count = int_at(ev, "/count");
    if let Some(series) = ev.get("series").filter(|s| s.is_object()) {
        last = since(timestamp(series.get("lastObservedTime")), now);
        count = int_at(series, "/count");
    } else if count == 0 {
        count = 1;
    }
    let kind = str_at(ev, "/involvedObject/kind").to_lowercase();
    let object_name = str_at(ev, "/involvedObject/name");
    let target = if object_name.is_empty() { kind } else { format!("{kind}/{object_name}") };
    let first_non_empty = |a: &str, b: &str| if a.is_empty() { b.to_string() } else { a.to_string() };
    let component = first_non_empty(str_at(ev, "/source/component"), str_at(ev, "/reportingComponent"));
    let instance = first_non_empty(str_at(ev, "/source/host"), str_at(ev, "/reportingInstance"));
    let source = if instance.is_empty() { component } else { format!("{component}, {instance}") };
    vec![
        json!(last),
        json!(str_at(ev, "/type")),
        json!(str_at(ev, "/reason")),
        json!(target),
        json!(str_at(ev, "/involvedObject/fieldPath")),
        json!(source),
        json!(str_at(ev, "/message").trim()),
        json!(first),
        json!(count),
        name(ev),
    ]
}

/// events.k8s.io/v1 events print as core/v1 events (upstream prints both
/// from the internal `Event`).
fn event_v1_cells(ev: &Value, now: DateTime<Utc>) -> Vec<Value> {
    event_cells(&crate::registry::conversion::event_to_core(ev.clone()), now)
}

// ---- deployments ---------------------------------------------------------------

const DEPLOYMENT_COLUMNS: &[Column] = &[
    NAME,
    col("Ready", "string", 0, Desc::Text("Number of the pod with ready state")),
    col("Up-to-date", "string", 0, Desc::Schema("io.k8s.api.apps.v1.DeploymentStatus", "updatedReplicas")),
    col("Available", "string", 0, Desc::Schema("io.k8s.api.apps.v1.DeploymentStatus", "availableReplicas")),
    AGE,
    CONTAINERS,
    IMAGES,
    col("Selector", "string", 1, Desc::Schema("io.k8s.api.apps.v1.DeploymentSpec", "selector")),
];

/// Container names and images of a pod template, comma-joined (`layoutContainerCells`).
pub(super) fn containers_and_images(obj: &Value, pointer: &str) -> (String, String) {
    let containers = array_at(obj, pointer);
    let names: Vec<&str> = containers.iter().map(|c| str_at(c, "/name")).collect();
    let images: Vec<&str> = containers.iter().map(|c| str_at(c, "/image")).collect();
    (names.join(","), images.join(","))
}

fn deployment_cells(d: &Value, now: DateTime<Utc>) -> Vec<Value> {
    // spec.replicas defaults to 1 (apps/v1 defaulting).
    let desired = d.pointer("/spec/replicas").and_then(Value::as_i64).unwrap_or(1);
    let (containers, images) = containers_and_images(d, "/spec/template/spec/containers");
    vec![
        name(d),
        json!(format!("{}/{desired}", int_at(d, "/status/readyReplicas"))),
        json!(int_at(d, "/status/updatedReplicas")),
        json!(int_at(d, "/status/availableReplicas")),
        json!(age(d, now)),
        json!(containers),
        json!(images),
        json!(format_label_selector(d.pointer("/spec/selector"))),
    ]
}
