//! Columns of the workload and cluster kinds added with the full resource
//! table, following upstream's printers (`pkg/printers/internalversion/printers.go`:
//! `printReplicaSet`, `printStatefulSet`, `printDaemonSet`, `printJob`,
//! `printCronJob`, `printReplicationController`, `printHorizontalPodAutoscaler`,
//! `printPersistentVolumeClaim`, `printPersistentVolume`, `printIngress`,
//! `printStorageClass`, `printPriorityClass`, `printPodDisruptionBudget`,
//! `printNetworkPolicy`, `printRuntimeClass`, `printControllerRevision`).

use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use super::format::{age, array_at, format_label_selector, human_duration, int_at, since, str_at, timestamp};
use super::{col, containers_and_images, name, Column, Desc, AGE, CONTAINERS, IMAGES, NAME};

const SELECTOR: Column = col("Selector", "string", 1, Desc::Text("The label selector of the workload's pods."));

fn template_cells(obj: &Value, pointer: &str) -> [Value; 2] {
    let (c, i) = containers_and_images(obj, pointer);
    [json!(c), json!(i)]
}

// ---- replica sets, replication controllers ----

pub(super) const REPLICA_SET_COLUMNS: &[Column] = &[
    NAME,
    col("Desired", "integer", 0, Desc::Text("Number of desired pods.")),
    col("Current", "integer", 0, Desc::Text("Number of actually running pods.")),
    col("Ready", "integer", 0, Desc::Text("Number of ready pods.")),
    AGE,
    CONTAINERS,
    IMAGES,
    SELECTOR,
];

pub(super) fn replica_set_cells(rs: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let [c, i] = template_cells(rs, "/spec/template/spec/containers");
    vec![
        name(rs),
        json!(rs.pointer("/spec/replicas").and_then(Value::as_i64).unwrap_or(1)),
        json!(int_at(rs, "/status/replicas")),
        json!(int_at(rs, "/status/readyReplicas")),
        json!(age(rs, now)),
        c,
        i,
        json!(format_label_selector(rs.pointer("/spec/selector"))),
    ]
}

pub(super) fn replication_controller_cells(rc: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let mut cells = replica_set_cells(rc, now);
    let selector = rc.pointer("/spec/selector").and_then(Value::as_object).map(|m| {
        let mut pairs: Vec<String> = m.iter().map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or(""))).collect();
        pairs.sort();
        pairs.join(",")
    });
    cells[7] = json!(selector.unwrap_or_default());
    cells
}

// ---- stateful sets, daemon sets ----

pub(super) const STATEFUL_SET_COLUMNS: &[Column] = &[
    NAME,
    col("Ready", "string", 0, Desc::Text("Number of the pod with ready state")),
    AGE,
    CONTAINERS,
    IMAGES,
];

pub(super) fn stateful_set_cells(s: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let [c, i] = template_cells(s, "/spec/template/spec/containers");
    let desired = s.pointer("/spec/replicas").and_then(Value::as_i64).unwrap_or(1);
    vec![name(s), json!(format!("{}/{desired}", int_at(s, "/status/readyReplicas"))), json!(age(s, now)), c, i]
}

pub(super) const DAEMON_SET_COLUMNS: &[Column] = &[
    NAME,
    col("Desired", "integer", 0, Desc::Schema("io.k8s.api.apps.v1.DaemonSetStatus", "desiredNumberScheduled")),
    col("Current", "integer", 0, Desc::Schema("io.k8s.api.apps.v1.DaemonSetStatus", "currentNumberScheduled")),
    col("Ready", "integer", 0, Desc::Schema("io.k8s.api.apps.v1.DaemonSetStatus", "numberReady")),
    col("Up-to-date", "integer", 0, Desc::Schema("io.k8s.api.apps.v1.DaemonSetStatus", "updatedNumberScheduled")),
    col("Available", "integer", 0, Desc::Schema("io.k8s.api.apps.v1.DaemonSetStatus", "numberAvailable")),
    col("Node Selector", "string", 0, Desc::Schema("io.k8s.api.core.v1.PodSpec", "nodeSelector")),
    AGE,
    CONTAINERS,
    IMAGES,
    SELECTOR,
];

pub(super) fn daemon_set_cells(d: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let [c, i] = template_cells(d, "/spec/template/spec/containers");
    let node_selector = d
        .pointer("/spec/template/spec/nodeSelector")
        .and_then(Value::as_object)
        .map(|m| {
            let mut pairs: Vec<String> = m.iter().map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or(""))).collect();
            pairs.sort();
            pairs.join(",")
        })
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "<none>".into());
    vec![
        name(d),
        json!(int_at(d, "/status/desiredNumberScheduled")),
        json!(int_at(d, "/status/currentNumberScheduled")),
        json!(int_at(d, "/status/numberReady")),
        json!(int_at(d, "/status/updatedNumberScheduled")),
        json!(int_at(d, "/status/numberAvailable")),
        json!(node_selector),
        json!(age(d, now)),
        c,
        i,
        json!(format_label_selector(d.pointer("/spec/selector"))),
    ]
}

// ---- jobs, cron jobs ----

pub(super) const JOB_COLUMNS: &[Column] = &[
    NAME,
    col("Status", "string", 0, Desc::Text("Status of the job.")),
    col("Completions", "string", 0, Desc::Text("The completed job pods and the desired ones.")),
    col("Duration", "string", 0, Desc::Text("Time required to complete the job.")),
    AGE,
    CONTAINERS,
    IMAGES,
    SELECTOR,
];

fn has_condition(obj: &Value, ty: &str) -> bool {
    array_at(obj, "/status/conditions")
        .iter()
        .any(|c| str_at(c, "/type") == ty && str_at(c, "/status") == "True")
}

pub(super) fn job_cells(j: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let [c, i] = template_cells(j, "/spec/template/spec/containers");
    let succeeded = int_at(j, "/status/succeeded");
    let completions = match j.pointer("/spec/completions").and_then(Value::as_i64) {
        Some(n) => format!("{succeeded}/{n}"),
        None => {
            let parallelism = j.pointer("/spec/parallelism").and_then(Value::as_i64).unwrap_or(0);
            if parallelism > 1 {
                format!("{succeeded}/1 of {parallelism}")
            } else {
                format!("{succeeded}/1")
            }
        }
    };
    let status = if has_condition(j, "Complete") {
        "Complete"
    } else if has_condition(j, "Failed") {
        "Failed"
    } else if j.pointer("/metadata/deletionTimestamp").is_some() {
        "Terminating"
    } else if has_condition(j, "SuspendTarget") || has_condition(j, "Suspended") {
        "Suspended"
    } else if has_condition(j, "FailureTarget") {
        "FailureTarget"
    } else {
        "Running"
    };
    let start = timestamp(j.pointer("/status/startTime"));
    let duration = match (start, timestamp(j.pointer("/status/completionTime"))) {
        (Some(s), Some(e)) => human_duration((e - s).num_seconds()),
        (Some(s), None) => human_duration((now - s).num_seconds()),
        _ => String::new(),
    };
    vec![
        name(j),
        json!(status),
        json!(completions),
        json!(duration),
        json!(age(j, now)),
        c,
        i,
        json!(format_label_selector(j.pointer("/spec/selector"))),
    ]
}

pub(super) const CRON_JOB_COLUMNS: &[Column] = &[
    NAME,
    col("Schedule", "string", 0, Desc::Schema("io.k8s.api.batch.v1.CronJobSpec", "schedule")),
    col("Timezone", "string", 0, Desc::Schema("io.k8s.api.batch.v1.CronJobSpec", "timeZone")),
    col("Suspend", "boolean", 0, Desc::Schema("io.k8s.api.batch.v1.CronJobSpec", "suspend")),
    col("Active", "integer", 0, Desc::Schema("io.k8s.api.batch.v1.CronJobStatus", "active")),
    col("Last Schedule", "string", 0, Desc::Schema("io.k8s.api.batch.v1.CronJobStatus", "lastScheduleTime")),
    AGE,
    CONTAINERS,
    IMAGES,
    SELECTOR,
];

pub(super) fn cron_job_cells(cj: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let [c, i] = template_cells(cj, "/spec/jobTemplate/spec/template/spec/containers");
    let last = match timestamp(cj.pointer("/status/lastScheduleTime")) {
        Some(t) => since(Some(t), now),
        None => "<none>".into(),
    };
    let tz = match str_at(cj, "/spec/timeZone") {
        "" => "<none>",
        tz => tz,
    };
    vec![
        name(cj),
        json!(str_at(cj, "/spec/schedule")),
        json!(tz),
        json!(cj.pointer("/spec/suspend").and_then(Value::as_bool).unwrap_or(false)),
        json!(array_at(cj, "/status/active").len()),
        json!(last),
        json!(age(cj, now)),
        c,
        i,
        json!(format_label_selector(cj.pointer("/spec/jobTemplate/spec/selector"))),
    ]
}

// ---- autoscaling ----

pub(super) const HPA_COLUMNS: &[Column] = &[
    NAME,
    col("Reference", "string", 0, Desc::Schema("io.k8s.api.autoscaling.v2.HorizontalPodAutoscalerSpec", "scaleTargetRef")),
    col("Targets", "string", 0, Desc::Schema("io.k8s.api.autoscaling.v2.HorizontalPodAutoscalerSpec", "metrics")),
    col("MinPods", "string", 0, Desc::Schema("io.k8s.api.autoscaling.v2.HorizontalPodAutoscalerSpec", "minReplicas")),
    col("MaxPods", "integer", 0, Desc::Schema("io.k8s.api.autoscaling.v2.HorizontalPodAutoscalerSpec", "maxReplicas")),
    col("Replicas", "integer", 0, Desc::Schema("io.k8s.api.autoscaling.v2.HorizontalPodAutoscalerStatus", "currentReplicas")),
    AGE,
];

/// autoscaling/v1 HPAs print as their v2 form (upstream prints both from the internal type).
pub(super) fn hpa_cells(h: &Value, now: DateTime<Utc>) -> Vec<Value> {
    if h.get("apiVersion").and_then(Value::as_str) == Some("autoscaling/v1") {
        return hpa_v2_cells(&crate::registry::hpa_conversion::hpa_to_v2(h.clone()), now);
    }
    hpa_v2_cells(h, now)
}

fn hpa_v2_cells(h: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let reference = format!("{}/{}", str_at(h, "/spec/scaleTargetRef/kind"), str_at(h, "/spec/scaleTargetRef/name"));
    let targets: Vec<String> = array_at(h, "/spec/metrics")
        .iter()
        .map(|m| match m.pointer("/resource/target/averageUtilization").and_then(Value::as_i64) {
            Some(u) => format!("{}: <unknown>/{u}%", str_at(m, "/resource/name")),
            None => "<unknown>".into(),
        })
        .collect();
    let targets = if targets.is_empty() { "<none>".to_string() } else { targets.join(", ") };
    vec![
        name(h),
        json!(reference),
        json!(targets),
        json!(h.pointer("/spec/minReplicas").and_then(Value::as_i64).unwrap_or(1).to_string()),
        json!(int_at(h, "/spec/maxReplicas")),
        json!(int_at(h, "/status/currentReplicas")),
        json!(age(h, now)),
    ]
}

// ---- volumes ----

/// Access modes in kubectl's short form (`RWO,ROX,RWX,RWOP`).
fn access_modes(obj: &Value, pointer: &str) -> String {
    let short = |m: &str| match m {
        "ReadWriteOnce" => "RWO",
        "ReadOnlyMany" => "ROX",
        "ReadWriteMany" => "RWX",
        "ReadWriteOncePod" => "RWOP",
        _ => "",
    };
    let mut out: Vec<&str> = Vec::new();
    for m in ["ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany", "ReadWriteOncePod"] {
        if array_at(obj, pointer).iter().any(|v| v.as_str() == Some(m)) {
            out.push(short(m));
        }
    }
    out.join(",")
}

fn or_unset(s: &str) -> &str {
    if s.is_empty() {
        "<unset>"
    } else {
        s
    }
}

pub(super) const PVC_COLUMNS: &[Column] = &[
    NAME,
    col("Status", "string", 0, Desc::Schema("io.k8s.api.core.v1.PersistentVolumeClaimStatus", "phase")),
    col("Volume", "string", 0, Desc::Schema("io.k8s.api.core.v1.PersistentVolumeClaimSpec", "volumeName")),
    col("Capacity", "string", 0, Desc::Schema("io.k8s.api.core.v1.PersistentVolumeClaimStatus", "capacity")),
    col("Access Modes", "string", 0, Desc::Schema("io.k8s.api.core.v1.PersistentVolumeClaimStatus", "accessModes")),
    col("StorageClass", "string", 0, Desc::Text("StorageClass of the pvc")),
    col("VolumeAttributesClass", "string", 0, Desc::Text("VolumeAttributesClass of the pvc")),
    AGE,
    col("VolumeMode", "string", 1, Desc::Schema("io.k8s.api.core.v1.PersistentVolumeClaimSpec", "volumeMode")),
];

pub(super) fn pvc_cells(p: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let bound = !str_at(p, "/spec/volumeName").is_empty();
    let (capacity, modes) = if bound {
        (str_at(p, "/status/capacity/storage").to_string(), access_modes(p, "/status/accessModes"))
    } else {
        (String::new(), String::new())
    };
    vec![
        name(p),
        json!(str_at(p, "/status/phase")),
        json!(str_at(p, "/spec/volumeName")),
        json!(capacity),
        json!(modes),
        json!(str_at(p, "/spec/storageClassName")),
        json!(or_unset(str_at(p, "/spec/volumeAttributesClassName"))),
        json!(age(p, now)),
        json!(str_at(p, "/spec/volumeMode")),
    ]
}

pub(super) const PV_COLUMNS: &[Column] = &[
    NAME,
    col("Capacity", "string", 0, Desc::Schema("io.k8s.api.core.v1.PersistentVolumeSpec", "capacity")),
    col("Access Modes", "string", 0, Desc::Schema("io.k8s.api.core.v1.PersistentVolumeSpec", "accessModes")),
    col("Reclaim Policy", "string", 0, Desc::Schema("io.k8s.api.core.v1.PersistentVolumeSpec", "persistentVolumeReclaimPolicy")),
    col("Status", "string", 0, Desc::Schema("io.k8s.api.core.v1.PersistentVolumeStatus", "phase")),
    col("Claim", "string", 0, Desc::Schema("io.k8s.api.core.v1.PersistentVolumeSpec", "claimRef")),
    col("StorageClass", "string", 0, Desc::Text("StorageClass of the pv")),
    col("VolumeAttributesClass", "string", 0, Desc::Text("VolumeAttributesClass of the pv")),
    col("Reason", "string", 0, Desc::Schema("io.k8s.api.core.v1.PersistentVolumeStatus", "reason")),
    AGE,
    col("VolumeMode", "string", 1, Desc::Schema("io.k8s.api.core.v1.PersistentVolumeSpec", "volumeMode")),
];

pub(super) fn pv_cells(p: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let claim = match (str_at(p, "/spec/claimRef/namespace"), str_at(p, "/spec/claimRef/name")) {
        (_, "") => String::new(),
        (ns, n) => format!("{ns}/{n}"),
    };
    vec![
        name(p),
        json!(str_at(p, "/spec/capacity/storage")),
        json!(access_modes(p, "/spec/accessModes")),
        json!(str_at(p, "/spec/persistentVolumeReclaimPolicy")),
        json!(str_at(p, "/status/phase")),
        json!(claim),
        json!(str_at(p, "/spec/storageClassName")),
        json!(or_unset(str_at(p, "/spec/volumeAttributesClassName"))),
        json!(str_at(p, "/status/reason")),
        json!(age(p, now)),
        json!(str_at(p, "/spec/volumeMode")),
    ]
}

pub(super) const STORAGE_CLASS_COLUMNS: &[Column] = &[
    NAME,
    col("Provisioner", "string", 0, Desc::Schema("io.k8s.api.storage.v1.StorageClass", "provisioner")),
    col("ReclaimPolicy", "string", 0, Desc::Schema("io.k8s.api.storage.v1.StorageClass", "reclaimPolicy")),
    col("VolumeBindingMode", "string", 0, Desc::Schema("io.k8s.api.storage.v1.StorageClass", "volumeBindingMode")),
    col("AllowVolumeExpansion", "string", 0, Desc::Schema("io.k8s.api.storage.v1.StorageClass", "allowVolumeExpansion")),
    AGE,
];

pub(super) fn storage_class_cells(sc: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let mut n = str_at(sc, "/metadata/name").to_string();
    if str_at(sc, "/metadata/annotations/storageclass.kubernetes.io~1is-default-class") == "true" {
        n.push_str(" (default)");
    }
    vec![
        json!(n),
        json!(str_at(sc, "/provisioner")),
        json!(str_at(sc, "/reclaimPolicy")),
        json!(str_at(sc, "/volumeBindingMode")),
        json!(sc.get("allowVolumeExpansion").and_then(Value::as_bool).unwrap_or(false).to_string()),
        json!(age(sc, now)),
    ]
}

// ---- networking, policy, scheduling ----

pub(super) const INGRESS_COLUMNS: &[Column] = &[
    NAME,
    col("Class", "string", 0, Desc::Schema("io.k8s.api.networking.v1.IngressSpec", "ingressClassName")),
    col("Hosts", "string", 0, Desc::Text("Hosts that incoming requests are matched against before the ingress rule")),
    col("Address", "string", 0, Desc::Text("Address is a list containing ingress points for the load-balancer")),
    col("Ports", "string", 0, Desc::Text("Ports of TLS configurations that open")),
    AGE,
];

pub(super) fn ingress_cells(ing: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let class = match str_at(ing, "/spec/ingressClassName") {
        "" => "<none>",
        c => c,
    };
    let hosts: Vec<&str> = array_at(ing, "/spec/rules").iter().map(|r| str_at(r, "/host")).filter(|h| !h.is_empty()).collect();
    let hosts = if hosts.is_empty() { "*".to_string() } else { hosts.join(",") };
    let addresses: Vec<&str> = array_at(ing, "/status/loadBalancer/ingress")
        .iter()
        .map(|i| if str_at(i, "/ip").is_empty() { str_at(i, "/hostname") } else { str_at(i, "/ip") })
        .collect();
    let ports = if array_at(ing, "/spec/tls").is_empty() { "80" } else { "80, 443" };
    vec![name(ing), json!(class), json!(hosts), json!(addresses.join(",")), json!(ports), json!(age(ing, now))]
}

pub(super) const NETWORK_POLICY_COLUMNS: &[Column] = &[
    NAME,
    col("Pod-Selector", "string", 0, Desc::Schema("io.k8s.api.networking.v1.NetworkPolicySpec", "podSelector")),
    AGE,
];

pub(super) fn network_policy_cells(np: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let sel = format_label_selector(np.pointer("/spec/podSelector"));
    vec![name(np), json!(sel), json!(age(np, now))]
}

pub(super) const PDB_COLUMNS: &[Column] = &[
    NAME,
    col("Min Available", "string", 0, Desc::Schema("io.k8s.api.policy.v1.PodDisruptionBudgetSpec", "minAvailable")),
    col("Max Unavailable", "string", 0, Desc::Schema("io.k8s.api.policy.v1.PodDisruptionBudgetSpec", "maxUnavailable")),
    col("Allowed Disruptions", "integer", 0, Desc::Schema("io.k8s.api.policy.v1.PodDisruptionBudgetStatus", "disruptionsAllowed")),
    AGE,
];

fn int_or_string(v: Option<&Value>) -> String {
    match v {
        Some(Value::Number(n)) => n.to_string(),
        Some(Value::String(s)) => s.clone(),
        _ => "N/A".into(),
    }
}

pub(super) fn pdb_cells(p: &Value, now: DateTime<Utc>) -> Vec<Value> {
    vec![
        name(p),
        json!(int_or_string(p.pointer("/spec/minAvailable"))),
        json!(int_or_string(p.pointer("/spec/maxUnavailable"))),
        json!(int_at(p, "/status/disruptionsAllowed")),
        json!(age(p, now)),
    ]
}

pub(super) const PRIORITY_CLASS_COLUMNS: &[Column] = &[
    NAME,
    col("Value", "integer", 0, Desc::Schema("io.k8s.api.scheduling.v1.PriorityClass", "value")),
    col("Global-Default", "boolean", 0, Desc::Schema("io.k8s.api.scheduling.v1.PriorityClass", "globalDefault")),
    AGE,
    col("PreemptionPolicy", "string", 0, Desc::Schema("io.k8s.api.scheduling.v1.PriorityClass", "preemptionPolicy")),
];

pub(super) fn priority_class_cells(pc: &Value, now: DateTime<Utc>) -> Vec<Value> {
    vec![
        name(pc),
        json!(int_at(pc, "/value")),
        json!(pc.get("globalDefault").and_then(Value::as_bool).unwrap_or(false)),
        json!(age(pc, now)),
        json!(str_at(pc, "/preemptionPolicy")),
    ]
}

pub(super) const RUNTIME_CLASS_COLUMNS: &[Column] =
    &[NAME, col("Handler", "string", 0, Desc::Schema("io.k8s.api.node.v1.RuntimeClass", "handler")), AGE];

pub(super) fn runtime_class_cells(rc: &Value, now: DateTime<Utc>) -> Vec<Value> {
    vec![name(rc), json!(str_at(rc, "/handler")), json!(age(rc, now))]
}

pub(super) const CONTROLLER_REVISION_COLUMNS: &[Column] = &[
    NAME,
    col("Controller", "string", 0, Desc::Text("Controller of the object")),
    col("Revision", "integer", 0, Desc::Schema("io.k8s.api.apps.v1.ControllerRevision", "revision")),
    AGE,
];

pub(super) fn controller_revision_cells(cr: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let controller = array_at(cr, "/metadata/ownerReferences")
        .iter()
        .find(|o| o.get("controller").and_then(Value::as_bool) == Some(true))
        .map(|o| {
            let group = str_at(o, "/apiVersion").split_once('/').map(|(g, _)| g).unwrap_or("");
            let kind = str_at(o, "/kind").to_lowercase();
            let resource = if group.is_empty() { kind } else { format!("{kind}.{group}") };
            format!("{resource}/{}", str_at(o, "/name"))
        })
        .unwrap_or_else(|| "<none>".into());
    vec![name(cr), json!(controller), json!(int_at(cr, "/revision")), json!(age(cr, now))]
}
