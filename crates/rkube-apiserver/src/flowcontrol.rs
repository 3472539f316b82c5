//! API Priority and Fairness configuration (KEP-1040): the bootstrap
//! FlowSchemas and PriorityLevelConfigurations every server ensures, and the
//! controller that hands the current objects to the filter chain's
//! classifier ([`crate::filters::apf::FlowControl`]).
//!
//! Bootstrap objects (upstream
//! `staging/src/k8s.io/apiserver/pkg/apis/flowcontrol/bootstrap/default.go`):
//! the mandatory `exempt` and `catch-all` levels and FlowSchemas, and the
//! suggested levels `system`, `node-high`, `leader-election`,
//! `workload-high`, `workload-low`, `global-default` with their FlowSchemas
//! (`system-nodes`, `system-node-high`, `probes`, `system-leader-election`,
//! `workload-leader-election`,
//! `kube-controller-manager`, `kube-scheduler`,
//! `kube-system-service-accounts`, `service-accounts`, `global-default`),
//! each annotated `apf.kubernetes.io/autoupdate-spec: "true"`. As upstream's
//! ensurer (`pkg/registry/flowcontrol/ensurer`) at every start: a missing
//! object is created; a mandatory one always gets the bootstrap spec back; a
//! suggested one gets it back when its annotation reads true, or when the
//! annotation is missing and its generation is still 1, and is otherwise
//! left alone (a user's own change); the annotation is set to say which.
//!
//! The controller ([`run`]) lists both kinds from the watch cache, installs
//! them, and watches them: every change is installed within the watch's
//! latency, so an edited FlowSchema takes effect while the server runs.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use rkube_api::list_options::ListOptions;
use rkube_api::registry::{self, ResourceInfo};
use rkube_cache::backoff::Backoff;
use rkube_cache::WatchEvent;
use serde_json::{json, Value};

use crate::error::ApiError;
use crate::filters::apf::{FlowControl, AUTOUPDATE_ANNOTATION};
use crate::state::ApiState;

const GROUP: &str = "flowcontrol.apiserver.k8s.io";
const API_VERSION: &str = "flowcontrol.apiserver.k8s.io/v1";

fn meta(name: &str) -> Value {
    json!({"name": name, "annotations": {AUTOUPDATE_ANNOTATION: "true"}})
}

fn limited(name: &str, shares: i32, lendable: i32, queuing: Option<(i32, i32, i32)>) -> Value {
    let limit_response = match queuing {
        Some((queues, hand_size, queue_length_limit)) => json!({"type": "Queue",
            "queuing": {"queues": queues, "handSize": hand_size, "queueLengthLimit": queue_length_limit}}),
        None => json!({"type": "Reject"}),
    };
    json!({
        "kind": "PriorityLevelConfiguration",
        "apiVersion": API_VERSION,
        "metadata": meta(name),
        "spec": {"type": "Limited", "limited": {
            "nominalConcurrencyShares": shares,
            "lendablePercent": lendable,
            "limitResponse": limit_response,
        }},
    })
}

fn groups(names: &[&str]) -> Vec<Value> {
    names.iter().map(|n| json!({"kind": "Group", "group": {"name": n}})).collect()
}

fn users(names: &[&str]) -> Vec<Value> {
    names.iter().map(|n| json!({"kind": "User", "user": {"name": n}})).collect()
}

fn kube_system_service_accounts(names: &[&str]) -> Vec<Value> {
    names
        .iter()
        .map(|n| json!({"kind": "ServiceAccount", "serviceAccount": {"name": n, "namespace": "kube-system"}}))
        .collect()
}

fn resource_rule(
    verbs: &[&str],
    groups: &[&str],
    resources: &[&str],
    namespaces: &[&str],
    cluster_scope: bool,
) -> Value {
    let mut r = json!({"verbs": verbs, "apiGroups": groups, "resources": resources, "namespaces": namespaces});
    if cluster_scope {
        r["clusterScope"] = json!(true);
    }
    r
}

/// Every verb on everything, resource or not.
fn everything() -> (Vec<Value>, Vec<Value>) {
    (vec![resource_rule(&["*"], &["*"], &["*"], &["*"], true)], vec![json!({"verbs": ["*"], "nonResourceURLs": ["*"]})])
}

fn flow_schema(
    name: &str,
    level: &str,
    precedence: i32,
    distinguisher: Option<&str>,
    subjects: Vec<Value>,
    rules: (Vec<Value>, Vec<Value>),
) -> Value {
    let mut rule = json!({"subjects": subjects});
    if !rules.0.is_empty() {
        rule["resourceRules"] = json!(rules.0);
    }
    if !rules.1.is_empty() {
        rule["nonResourceRules"] = json!(rules.1);
    }
    let mut spec =
        json!({"priorityLevelConfiguration": {"name": level}, "matchingPrecedence": precedence, "rules": [rule]});
    if let Some(d) = distinguisher {
        spec["distinguisherMethod"] = json!({"type": d});
    }
    json!({"kind": "FlowSchema", "apiVersion": API_VERSION, "metadata": meta(name), "spec": spec})
}

/// Upstream's mandatory and suggested objects: (FlowSchemas,
/// PriorityLevelConfigurations), without uid or timestamps.
pub fn bootstrap_objects() -> (Vec<Value>, Vec<Value>) {
    let levels = vec![
        json!({
            "kind": "PriorityLevelConfiguration",
            "apiVersion": API_VERSION,
            "metadata": meta("exempt"),
            "spec": {"type": "Exempt", "exempt": {"nominalConcurrencyShares": 0, "lendablePercent": 0}},
        }),
        limited("catch-all", 5, 0, None),
        limited("system", 30, 33, Some((64, 6, 50))),
        limited("node-high", 40, 25, Some((64, 6, 50))),
        limited("leader-election", 10, 0, Some((16, 4, 50))),
        limited("workload-high", 40, 50, Some((128, 6, 50))),
        limited("workload-low", 100, 90, Some((128, 6, 50))),
        limited("global-default", 20, 50, Some((128, 6, 50))),
    ];
    let anyone = || groups(&["system:unauthenticated", "system:authenticated"]);
    let leader_election_verbs = ["get", "create", "update"];
    let schemas = vec![
        flow_schema("exempt", "exempt", 1, None, groups(&["system:masters"]), everything()),
        flow_schema(
            "probes",
            "exempt",
            2,
            None,
            anyone(),
            (vec![], vec![json!({"verbs": ["get"], "nonResourceURLs": ["/healthz", "/readyz", "/livez"]})]),
        ),
        flow_schema(
            "system-leader-election",
            "leader-election",
            100,
            Some("ByUser"),
            [users(&["system:kube-controller-manager", "system:kube-scheduler"]), kube_system_service_accounts(&["*"])]
                .concat(),
            (
                vec![
                    resource_rule(&leader_election_verbs, &[""], &["endpoints", "configmaps"], &["kube-system"], false),
                    resource_rule(&leader_election_verbs, &["coordination.k8s.io"], &["leases"], &["*"], false),
                ],
                vec![],
            ),
        ),
        flow_schema(
            "workload-leader-election",
            "leader-election",
            200,
            Some("ByUser"),
            kube_system_service_accounts(&["*"]),
            (
                vec![
                    resource_rule(&leader_election_verbs, &[""], &["endpoints", "configmaps"], &["*"], false),
                    resource_rule(&leader_election_verbs, &["coordination.k8s.io"], &["leases"], &["*"], false),
                ],
                vec![],
            ),
        ),
        flow_schema(
            "system-node-high",
            "node-high",
            400,
            Some("ByUser"),
            groups(&["system:nodes"]),
            (
                vec![
                    resource_rule(&["*"], &[""], &["nodes", "nodes/status"], &["*"], true),
                    resource_rule(&["*"], &["coordination.k8s.io"], &["leases"], &["*"], false),
                ],
                vec![],
            ),
        ),
        flow_schema("system-nodes", "system", 500, Some("ByUser"), groups(&["system:nodes"]), everything()),
        flow_schema(
            "kube-controller-manager",
            "workload-high",
            800,
            Some("ByNamespace"),
            users(&["system:kube-controller-manager"]),
            everything(),
        ),
        flow_schema(
            "kube-scheduler",
            "workload-high",
            800,
            Some("ByNamespace"),
            users(&["system:kube-scheduler"]),
            everything(),
        ),
        flow_schema(
            "kube-system-service-accounts",
            "workload-high",
            900,
            Some("ByNamespace"),
            kube_system_service_accounts(&["*"]),
            everything(),
        ),
        flow_schema(
            "service-accounts",
            "workload-low",
            9000,
            Some("ByUser"),
            groups(&["system:serviceaccounts"]),
            everything(),
        ),
        flow_schema("global-default", "global-default", 9900, Some("ByUser"), anyone(), everything()),
        flow_schema("catch-all", "catch-all", 10000, Some("ByUser"), anyone(), everything()),
    ];
    (schemas, levels)
}

fn row(resource: &str) -> Result<&'static ResourceInfo, ApiError> {
    registry::lookup(GROUP, "v1", resource).ok_or_else(|| ApiError::internal(format!("{resource} are not served")))
}

/// Creates the missing bootstrap objects and brings the existing ones up to
/// date as upstream's ensurer does (see the module docs). Errors: storage
/// failures.
pub async fn ensure(st: &ApiState) -> Result<(), ApiError> {
    let (schemas, levels) = bootstrap_objects();
    let (fs, plc) = (row("flowschemas")?, row("prioritylevelconfigurations")?);
    for (info, objs) in [(plc, levels), (fs, schemas)] {
        for obj in objs {
            crate::builtin_objects::create_missing(st, info, obj.clone()).await?;
            update_existing(st, info, &obj).await?;
        }
    }
    Ok(())
}

/// Go's `strconv.ParseBool`, which reads the autoupdate annotation upstream.
fn parse_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// What the ensurer writes over `stored`, an existing object named like
/// `wanted` (a bootstrap object with defaults), or `None` when it is up to
/// date. Upstream `ensurer/strategy.go` (`ShouldUpdate`): the spec is kept
/// up to date always for the mandatory `exempt` and `catch-all` objects,
/// and for the suggested ones when the annotation reads true, or is missing
/// or unreadable while `metadata.generation` is still 1 (nobody changed the
/// spec); the annotation is then set to whether the spec is kept up to date.
fn ensured(stored: &Value, wanted: &Value) -> Option<Value> {
    let name = crate::object::name(wanted);
    let annotation = stored.pointer("/metadata/annotations").and_then(|a| a.get(AUTOUPDATE_ANNOTATION)).and_then(Value::as_str);
    let auto = crate::filters::apf::MANDATORY.contains(&name)
        || annotation.and_then(parse_bool).unwrap_or_else(|| stored.pointer("/metadata/generation").and_then(Value::as_i64) == Some(1));
    let fix_annotation = annotation.and_then(parse_bool) != Some(auto);
    let fix_spec = auto && stored.get("spec") != wanted.get("spec");
    if !fix_annotation && !fix_spec {
        return None;
    }
    let mut out = stored.clone();
    let meta = out.as_object_mut()?.entry("metadata").or_insert_with(|| json!({}));
    let meta = meta.as_object_mut()?;
    meta.remove("resourceVersion");
    if fix_annotation {
        let annotations = meta.entry("annotations").or_insert_with(|| json!({}));
        if let Some(a) = annotations.as_object_mut() {
            a.insert(AUTOUPDATE_ANNOTATION.to_string(), json!(auto.to_string()));
        }
    }
    if fix_spec {
        let generation = meta.get("generation").and_then(Value::as_i64).unwrap_or(1);
        meta.insert("generation".into(), json!(generation + 1));
        out["spec"] = wanted["spec"].clone();
    }
    Some(out)
}

/// Writes [`ensured`] of the stored object named like `bootstrap`, if any.
async fn update_existing(st: &ApiState, info: &ResourceInfo, bootstrap: &Value) -> Result<(), ApiError> {
    let name = crate::object::name(bootstrap).to_string();
    let key = info.object_key(st.prefix(), "", &name);
    let Some(kv) = st.storage.get(&key).await.map_err(|e| ApiError::from_storage(e, info, &name))? else {
        return Ok(());
    };
    let Ok(stored) = serde_json::from_slice::<Value>(&kv.value) else { return Ok(()) };
    let mut wanted = bootstrap.clone();
    info.strategy.apply_defaults(&mut wanted);
    let Some(updated) = ensured(&stored, &wanted) else { return Ok(()) };
    let bytes = crate::handlers::encode_for_storage(&updated)?;
    match st.storage.update(&kv.key, bytes, kv.mod_revision).await {
        // Someone else wrote it meanwhile: the next start looks again.
        Ok(_) | Err(rkube_storage::StorageError::Conflict { .. }) => Ok(()),
        Err(e) => Err(ApiError::from_storage(e, info, &name)),
    }
}

/// The objects of one kind the controller knows, by name.
type Objects = BTreeMap<String, Value>;

/// Follows the FlowSchemas and PriorityLevelConfigurations through `st`'s
/// watch cache and installs them into `flow_control` after every change,
/// until `stop` turns true. A broken watch is listed again after a jittered
/// backoff.
pub async fn run(st: ApiState, flow_control: Arc<FlowControl>, mut stop: tokio::sync::watch::Receiver<bool>) {
    let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(30));
    loop {
        tokio::select! {
            why = list_and_watch(&st, &flow_control, &mut backoff) => {
                tracing::debug!(error = %why, "flow control configuration: listing again");
            }
            _ = stop.wait_for(|s| *s) => return,
        }
        tokio::select! {
            _ = tokio::time::sleep(backoff.next_delay()) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
    }
}

fn decode(obj: &rkube_cache::CachedObject) -> Option<Value> {
    serde_json::from_slice(&obj.json).ok()
}

/// Applies one watch event to `objects`; `Err` when the watch must end.
fn apply(objects: &mut Objects, ev: WatchEvent) -> Result<bool, String> {
    match ev {
        WatchEvent::Added(o) | WatchEvent::Modified(o) => {
            if let Some(v) = decode(&o) {
                objects.insert(o.name.clone(), v);
            }
            Ok(true)
        }
        WatchEvent::Deleted(o) => Ok(objects.remove(&o.name).is_some()),
        WatchEvent::Bookmark(_) => Ok(false),
        WatchEvent::Error(e) => Err(e.to_string()),
    }
}

/// One list of both kinds, then their watches until one breaks; returns why.
async fn list_and_watch(st: &ApiState, fc: &FlowControl, backoff: &mut Backoff) -> String {
    let (fs_info, pl_info) = match (row("flowschemas"), row("prioritylevelconfigurations")) {
        (Ok(f), Ok(p)) => (f, p),
        _ => return "flowcontrol resources are not served".into(),
    };
    let list = |info: &'static ResourceInfo| async move {
        let page = st.cache.list(info, None, &ListOptions::default()).await.map_err(|e| e.to_string())?;
        let objects: Objects = page.items.iter().filter_map(|o| Some((o.name.clone(), decode(o)?))).collect();
        Ok::<_, String>((objects, page.resource_version))
    };
    let ((mut schemas, fs_rv), (mut levels, pl_rv)) = match (list(fs_info).await, list(pl_info).await) {
        (Ok(f), Ok(p)) => (f, p),
        (Err(e), _) | (_, Err(e)) => return e,
    };
    let install = |schemas: &Objects, levels: &Objects| {
        fc.install(&schemas.values().cloned().collect::<Vec<_>>(), &levels.values().cloned().collect::<Vec<_>>());
    };
    install(&schemas, &levels);
    let watch = |info: &'static ResourceInfo, rv: i64| async move {
        let opts = ListOptions { resource_version: Some(rv.to_string()), watch: true, ..ListOptions::default() };
        st.cache.watch(info, None, &opts).await.map_err(|e| e.to_string())
    };
    let (mut fs_watch, mut pl_watch) = match (watch(fs_info, fs_rv).await, watch(pl_info, pl_rv).await) {
        (Ok(f), Ok(p)) => (f, p),
        (Err(e), _) | (_, Err(e)) => return e,
    };
    backoff.reset();
    loop {
        let changed = tokio::select! {
            ev = fs_watch.next() => match ev {
                Some(ev) => apply(&mut schemas, ev),
                None => return "FlowSchema watch ended".into(),
            },
            ev = pl_watch.next() => match ev {
                Some(ev) => apply(&mut levels, ev),
                None => return "PriorityLevelConfiguration watch ended".into(),
            },
        };
        match changed {
            Ok(true) => install(&schemas, &levels),
            Ok(false) => {}
            Err(e) => return e,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(name: &str, annotation: Option<&str>, generation: i64, shares: i64) -> Value {
        let mut obj = json!({"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "PriorityLevelConfiguration",
            "metadata": {"name": name, "generation": generation, "resourceVersion": "5"},
            "spec": {"type": "Limited", "limited": {"nominalConcurrencyShares": shares}}});
        if let Some(a) = annotation {
            obj["metadata"]["annotations"] = json!({AUTOUPDATE_ANNOTATION: a});
        }
        obj
    }

    #[test]
    fn suggested_objects_follow_their_annotation_and_mandatory_ones_are_always_restored() {
        let wanted = |name: &str| object(name, Some("true"), 1, 30);
        // Suggested, annotated true: the spec comes back, the generation moves on.
        let out = ensured(&object("workload-low", Some("true"), 3, 7), &wanted("workload-low")).unwrap();
        assert_eq!(out["spec"]["limited"]["nominalConcurrencyShares"], 30);
        assert_eq!(out["metadata"]["generation"], 4);
        assert!(out["metadata"].get("resourceVersion").is_none());
        // Go's ParseBool spellings count.
        for t in ["True", "1", "t"] {
            assert!(ensured(&object("workload-low", Some(t), 3, 7), &wanted("workload-low")).is_some(), "{t}");
        }
        // Suggested, annotated false: a user's change stays.
        assert_eq!(ensured(&object("workload-low", Some("false"), 3, 7), &wanted("workload-low")), None);
        // Up to date: nothing to write.
        assert_eq!(ensured(&object("workload-low", Some("true"), 1, 30), &wanted("workload-low")), None);
        // Mandatory, annotated false: restored anyway, and annotated true.
        let out = ensured(&object("catch-all", Some("false"), 2, 7), &wanted("catch-all")).unwrap();
        assert_eq!(out["spec"]["limited"]["nominalConcurrencyShares"], 30);
        assert_eq!(out["metadata"]["annotations"][AUTOUPDATE_ANNOTATION], "true");
        // No annotation, generation 1 (nobody edited the spec): restored and annotated true.
        let out = ensured(&object("global-default", None, 1, 7), &wanted("global-default")).unwrap();
        assert_eq!(out["spec"]["limited"]["nominalConcurrencyShares"], 30);
        assert_eq!(out["metadata"]["annotations"][AUTOUPDATE_ANNOTATION], "true");
        // No annotation, generation 2 (edited): kept, and annotated false.
        let out = ensured(&object("global-default", Some("maybe"), 2, 7), &wanted("global-default")).unwrap();
        assert_eq!(out["spec"]["limited"]["nominalConcurrencyShares"], 7);
        assert_eq!(out["metadata"]["generation"], 2);
        assert_eq!(out["metadata"]["annotations"][AUTOUPDATE_ANNOTATION], "false");
    }
}
