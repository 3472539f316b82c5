//! `namespace-controller` (alias `namespace`): empties namespaces being
//! deleted, then removes the `kubernetes` finalizer through the `finalize`
//! subresource so the API server can remove the namespace.
//!
//! For a namespace with `metadata.deletionTimestamp` and `kubernetes` in
//! `spec.finalizers`, each pass:
//! 1. discovers every namespaced resource at its group's preferred version
//!    ([`super::discovery`]) that can be listed and deleted;
//! 2. deletes its objects in the namespace (`deletecollection` when the
//!    resource has that verb, else one DELETE per object);
//! 3. lists what remains, and records upstream's five conditions in
//!    `status.conditions` (`NamespaceDeletionDiscoveryFailure`,
//!    `NamespaceDeletionGroupVersionParsingFailure`,
//!    `NamespaceDeletionContentFailure`, `NamespaceContentRemaining`,
//!    `NamespaceFinalizersRemaining`);
//! 4. when nothing remains and nothing failed, PUTs `namespaces/<ns>/finalize`
//!    without `kubernetes`; otherwise it tries again with a backoff (250ms,
//!    doubling up to 16s), e.g. while pods finish their graceful deletion.
//!
//! Upstream: `pkg/controller/namespace/namespace_controller.go`,
//! `deletion/namespaced_resources_deleter.go`, `status_condition_utils.go`.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, NamespaceCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::discovery::{verbs, Scope};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;

use super::discovery::{self, Discovered};
use crate::context::ControllerContext;

/// The `spec.finalizers` entry this controller owns (upstream
/// `v1.FinalizerKubernetes`).
pub const FINALIZER_KUBERNETES: &str = "kubernetes";

/// Starts the controller (the [`super::CONTROLLERS`] row's start function).
pub fn start(ctx: ControllerContext) -> BoxFuture<'static, anyhow::Result<()>> {
    Box::pin(run(ctx))
}

struct State {
    client: kube::Client,
    /// Failed or unfinished passes per namespace, for the backoff.
    attempts: Mutex<HashMap<String, u32>>,
}

impl State {
    fn backoff(&self, ns: &str) -> Duration {
        let mut a = self.attempts.lock().unwrap_or_else(|p| p.into_inner());
        let n = a.entry(ns.to_string()).or_insert(0);
        let d = Duration::from_millis(250u64.saturating_mul(1 << (*n).min(6)));
        *n = n.saturating_add(1);
        d
    }
    fn reset(&self, ns: &str) {
        self.attempts.lock().unwrap_or_else(|p| p.into_inner()).remove(ns);
    }
}

async fn run(ctx: ControllerContext) -> anyhow::Result<()> {
    let state = Arc::new(State { client: ctx.client.clone(), attempts: Mutex::new(HashMap::new()) });
    let api: Api<Namespace> = Api::all(ctx.client.clone());
    let stop = ctx.clone();
    Controller::new(api, watcher::Config::default())
        .graceful_shutdown_on(async move { stop.stopped().await })
        .run(reconcile, error_policy, state)
        .for_each(|r| {
            if let Err(e) = r {
                tracing::debug!(error = %e, "namespace controller");
            }
            futures::future::ready(())
        })
        .await;
    Ok(())
}

/// Errors of one pass (retried with the backoff).
#[derive(Debug, thiserror::Error)]
enum Error {
    #[error(transparent)]
    Kube(#[from] kube::Error),
    #[error("namespace {0} still has content")]
    Remaining(String),
}

fn error_policy(ns: Arc<Namespace>, err: &Error, state: Arc<State>) -> Action {
    let name = ns.metadata.name.clone().unwrap_or_default();
    if !matches!(err, Error::Remaining(_)) {
        tracing::warn!(namespace = %name, error = %err, "namespace deletion failed; retrying");
    }
    Action::requeue(state.backoff(&name))
}

async fn reconcile(ns: Arc<Namespace>, state: Arc<State>) -> Result<Action, Error> {
    let name = ns.metadata.name.clone().unwrap_or_default();
    let finalizers = ns.spec.as_ref().and_then(|s| s.finalizers.clone()).unwrap_or_default();
    if ns.metadata.deletion_timestamp.is_none() || !finalizers.iter().any(|f| f == FINALIZER_KUBERNETES) {
        state.reset(&name);
        return Ok(Action::await_change());
    }
    let found = discovery::preferred_resources(&state.client).await?;
    let report = delete_content(&state.client, &name, &found).await;
    let api: Api<Namespace> = Api::all(state.client.clone());
    let old = ns.status.as_ref().and_then(|s| s.conditions.clone()).unwrap_or_default();
    let conditions = conditions(&report, &old, Time(k8s_openapi::jiff::Timestamp::now()));
    if conditions != old {
        let patch = serde_json::json!({"status": {"conditions": conditions}});
        match api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch)).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => return Ok(Action::await_change()),
            Err(e) => return Err(e.into()),
        }
    }
    if !report.is_clean() {
        return Err(Error::Remaining(name));
    }
    finalize(&api, &name).await?;
    state.reset(&name);
    Ok(Action::await_change())
}

/// Removes `kubernetes` from `spec.finalizers` through `namespaces/<ns>/finalize`
/// (on the latest object; a namespace already gone is fine).
async fn finalize(api: &Api<Namespace>, name: &str) -> Result<(), kube::Error> {
    let Some(mut ns) = api.get_opt(name).await? else { return Ok(()) };
    let spec = ns.spec.get_or_insert_with(Default::default);
    let left: Vec<String> = spec.finalizers.take().unwrap_or_default().into_iter().filter(|f| f != FINALIZER_KUBERNETES).collect();
    spec.finalizers = Some(left);
    match api.replace_subresource("finalize", name, &PostParams::default(), &ns).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

/// What one deletion pass found.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct DeletionReport {
    /// How many group versions failed discovery, and upstream's message
    /// for them.
    pub discovery_failure: Option<(usize, String)>,
    /// One message per resource whose deletion failed.
    pub content_errors: Vec<String>,
    /// Objects left per `resource.group` (`pods.`, `deployments.apps`).
    pub remaining: BTreeMap<String, usize>,
    /// Objects left per finalizer they still carry.
    pub finalizers: BTreeMap<String, usize>,
}

impl DeletionReport {
    /// True when the namespace can be finalized.
    pub fn is_clean(&self) -> bool {
        self.discovery_failure.is_none()
            && self.content_errors.is_empty()
            && self.remaining.is_empty()
            && self.finalizers.is_empty()
    }
}

/// Deletes every namespaced, listable and deletable object in `ns`, then
/// counts what is left.
async fn delete_content(client: &kube::Client, ns: &str, found: &Discovered) -> DeletionReport {
    let discovery_failure = found.failure_message().map(|m| (found.failures.len(), m));
    let mut report = DeletionReport { discovery_failure, ..Default::default() };
    for (ar, caps) in &found.resources {
        if caps.scope != Scope::Namespaced || !caps.supports_operation(verbs::LIST) {
            continue;
        }
        let collection = caps.supports_operation(verbs::DELETE_COLLECTION);
        if !collection && !caps.supports_operation(verbs::DELETE) {
            continue;
        }
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, ar);
        if let Err(e) = delete_all(&api, collection).await {
            report.content_errors.push(format!("{e} for {}.{}", ar.plural, ar.group));
            continue;
        }
        match api.list_metadata(&ListParams::default()).await {
            Ok(left) if !left.items.is_empty() => {
                report.remaining.insert(format!("{}.{}", ar.plural, ar.group), left.items.len());
                for item in &left.items {
                    for f in item.metadata.finalizers.iter().flatten() {
                        *report.finalizers.entry(f.clone()).or_default() += 1;
                    }
                }
            }
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 405 => {}
            Err(e) => report.content_errors.push(format!("{e} for {}.{}", ar.plural, ar.group)),
        }
    }
    report
}

async fn delete_all(api: &Api<DynamicObject>, collection: bool) -> Result<(), kube::Error> {
    let dp = DeleteParams::default();
    let result = if collection {
        api.delete_collection(&dp, &ListParams::default()).await.map(|_| ())
    } else {
        let mut r = Ok(());
        for item in api.list_metadata(&ListParams::default()).await?.items {
            let name = item.metadata.name.unwrap_or_default();
            match api.delete(&name, &dp).await {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
                Err(e) => r = Err(e),
            }
        }
        r
    };
    match result {
        // A resource that cannot be deleted after all is skipped, as upstream's
        // `MethodNotSupported` handling.
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 405 => Ok(()),
        other => other,
    }
}

/// Upstream's conditions for `report`: all five types, each `True` with the
/// failure's reason and message or `False` with the all-clear ones; an
/// unchanged status keeps its `lastTransitionTime`.
pub fn conditions(report: &DeletionReport, old: &[NamespaceCondition], now: Time) -> Vec<NamespaceCondition> {
    let bad: [(&str, Option<(&str, String)>); 5] = [
        (
            "NamespaceDeletionDiscoveryFailure",
            report
                .discovery_failure
                .as_ref()
                .map(|(n, m)| ("DiscoveryFailed", format!("Discovery failed for some groups, {n} failing: {m}"))),
        ),
        ("NamespaceDeletionGroupVersionParsingFailure", None),
        (
            "NamespaceDeletionContentFailure",
            (!report.content_errors.is_empty()).then(|| {
                ("ContentDeletionFailed", format!("Failed to delete all resource types, {} remaining: {}", report.content_errors.len(), aggregate(&report.content_errors)))
            }),
        ),
        (
            "NamespaceContentRemaining",
            (!report.remaining.is_empty()).then(|| {
                let parts: Vec<String> = report.remaining.iter().map(|(r, n)| format!("{r} has {n} resource instances")).collect();
                ("SomeResourcesRemain", format!("Some resources are remaining: {}", parts.join(", ")))
            }),
        ),
        (
            "NamespaceFinalizersRemaining",
            (!report.finalizers.is_empty()).then(|| {
                let parts: Vec<String> = report.finalizers.iter().map(|(f, n)| format!("{f} in {n} resource instances")).collect();
                ("SomeFinalizersRemain", format!("Some content in the namespace has finalizers remaining: {}", parts.join(", ")))
            }),
        ),
    ];
    bad.into_iter()
        .map(|(ty, failure)| {
            let (status, reason, message) = match failure {
                Some((reason, message)) => ("True", reason.to_string(), message),
                None => {
                    let (reason, message) = ok_condition(ty);
                    ("False", reason.to_string(), message.to_string())
                }
            };
            let kept = old.iter().find(|c| c.type_ == ty && c.status == status).and_then(|c| c.last_transition_time.clone());
            NamespaceCondition {
                type_: ty.to_string(),
                status: status.to_string(),
                reason: Some(reason),
                message: Some(message),
                last_transition_time: Some(kept.unwrap_or_else(|| now.clone())),
            }
        })
        .collect()
}

/// The reason and message of a condition type when all is well.
fn ok_condition(ty: &str) -> (&'static str, &'static str) {
    match ty {
        "NamespaceDeletionDiscoveryFailure" => ("ResourcesDiscovered", "All resources successfully discovered"),
        "NamespaceDeletionGroupVersionParsingFailure" => ("ParsedGroupVersions", "All legacy kube types successfully parsed"),
        "NamespaceDeletionContentFailure" => ("ContentDeleted", "All content successfully deleted, may be waiting on finalization"),
        "NamespaceContentRemaining" => ("ContentRemoved", "All content successfully removed"),
        _ => ("ContentHasNoFinalizers", "All content-preserving finalizers finished"),
    }
}

/// Upstream's aggregate error text: the error alone, or `[e1, e2]`.
fn aggregate(errors: &[String]) -> String {
    match errors {
        [one] => one.clone(),
        many => format!("[{}]", many.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: i64) -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_second(s).unwrap())
    }

    #[test]
    fn a_clean_pass_reports_all_five_conditions_false_with_upstreams_messages() {
        let c = conditions(&DeletionReport::default(), &[], t(10));
        let got: Vec<(&str, &str, &str)> =
            c.iter().map(|c| (c.type_.as_str(), c.status.as_str(), c.reason.as_deref().unwrap_or(""))).collect();
        assert_eq!(
            got,
            vec![
                ("NamespaceDeletionDiscoveryFailure", "False", "ResourcesDiscovered"),
                ("NamespaceDeletionGroupVersionParsingFailure", "False", "ParsedGroupVersions"),
                ("NamespaceDeletionContentFailure", "False", "ContentDeleted"),
                ("NamespaceContentRemaining", "False", "ContentRemoved"),
                ("NamespaceFinalizersRemaining", "False", "ContentHasNoFinalizers"),
            ]
        );
        assert_eq!(c[3].message.as_deref(), Some("All content successfully removed"));
    }

    #[test]
    fn remaining_content_and_finalizers_are_counted_per_resource_and_finalizer() {
        let mut r = DeletionReport::default();
        r.remaining.insert("pods.".into(), 2);
        r.remaining.insert("configmaps.".into(), 1);
        r.finalizers.insert("example.com/hold".into(), 1);
        let c = conditions(&r, &[], t(10));
        assert_eq!((c[3].status.as_str(), c[3].reason.as_deref()), ("True", Some("SomeResourcesRemain")));
        assert_eq!(
            c[3].message.as_deref(),
            Some("Some resources are remaining: configmaps. has 1 resource instances, pods. has 2 resource instances")
        );
        assert_eq!(
            c[4].message.as_deref(),
            Some("Some content in the namespace has finalizers remaining: example.com/hold in 1 resource instances")
        );
        assert!(!r.is_clean());
    }

    #[test]
    fn unchanged_conditions_keep_their_transition_time() {
        let first = conditions(&DeletionReport::default(), &[], t(10));
        let again = conditions(&DeletionReport::default(), &first, t(20));
        assert_eq!(first, again);
        let mut r = DeletionReport::default();
        r.content_errors.push("boom for widgets.example.com".into());
        let changed = conditions(&r, &first, t(30));
        assert_eq!(changed[2].last_transition_time, Some(t(30)));
        assert_eq!(
            changed[2].message.as_deref(),
            Some("Failed to delete all resource types, 1 remaining: boom for widgets.example.com")
        );
        assert_eq!(changed[0].last_transition_time, Some(t(10)));
    }
}
