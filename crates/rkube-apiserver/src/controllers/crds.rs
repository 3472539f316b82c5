//! The CustomResourceDefinition controllers of the API server (upstream's
//! apiextensions-apiserver runs them in kube-apiserver's process:
//! `pkg/controller/status/naming_controller.go`,
//! `pkg/controller/establish/establishing_controller.go`,
//! `pkg/controller/finalizer/crd_finalizer.go` and the CRD handler that
//! serves custom resources).
//!
//! On every CRD change (and a full pass at start), for each CRD:
//!
//! - **naming**: its `spec.names` are checked against the accepted names of
//!   the other CRDs of its group (plural, singular, short names, kind, list
//!   kind). Without a conflict they become `status.acceptedNames` with
//!   `NamesAccepted=True` (`NoConflicts`, `no conflicts found`); a conflict
//!   gives `NamesAccepted=False` with reason `PluralConflict`,
//!   `SingularConflict`, `ShortNamesConflict`, `KindConflict` or
//!   `ListKindConflict` and message `"<name>" is already in use`.
//! - **establishing**: once names are accepted, `Established=True`
//!   (`InitialNamesAccepted`, `the initial names have been accepted`);
//!   the storage version is kept in `status.storedVersions`. Rkube does
//!   both in one status write (upstream's `Installing` step in between is
//!   not observable here: the rows are registered in the same pass).
//! - **serving**: an established CRD's served versions become rows of the
//!   resource table ([`rkube_api::apiextensions::rows_for`]) with a watch
//!   cache each, so handlers, discovery, OpenAPI and tables see them.
//! - **finalizing**: a CRD being deleted gets `Terminating=True`
//!   (`InstanceDeletionInProgress`) and loses its custom resources first
//!   (objects with finalizers are marked for deletion and waited for; new
//!   ones are refused, [`refuse_create_while_terminating`]), then its rows
//!   and its `customresourcecleanup.apiextensions.k8s.io` finalizer, which
//!   lets it go.
//!
//! [`start`] runs one pass before returning, so CRDs stored before a restart
//! are served before the server answers its first request.
//!
//! Rows live in the process-global resource table: two API servers in one
//! process that define the same custom resource share its row (the one
//! registered last). Each server unregisters the rows it registered when it
//! stops.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use rkube_api::apiextensions::{self, CLEANUP_FINALIZER};
use rkube_api::registry;
use rkube_storage::{KeyValue, RangeRequest, StorageError};
use serde_json::{json, Value};

use crate::state::ApiState;

/// Storage prefix of CRDs below `--etcd-prefix` (upstream's key layout).
pub const CRD_PREFIX: &str = "apiextensions.k8s.io/customresourcedefinitions/";

/// How long serving a custom resource waits for its watch cache to fill
/// before reporting the CRD established anyway.
const CACHE_READY_WAIT: Duration = Duration::from_secs(5);

/// How long a CRD being deleted waits before looking again at custom
/// resources that still have finalizers.
const CLEANUP_RETRY: Duration = Duration::from_millis(500);

/// A row's `(group, version, resource)`.
type RowKey = (String, String, String);

/// The controller's memory: which rows each CRD registered, and from what.
#[derive(Default)]
struct Served {
    /// CRD name → (the CRD's spec and accepted names it was built from, the
    /// rows registered).
    by_crd: HashMap<String, (Value, Vec<RowKey>)>,
}

/// The controller of one API server.
#[derive(Clone)]
pub struct CrdController {
    st: ApiState,
    served: Arc<tokio::sync::Mutex<Served>>,
    retry_pending: Arc<std::sync::atomic::AtomicBool>,
}

/// Runs one pass (CRDs already stored are served when it returns, unless
/// storage does not answer within 10 s), then keeps reconciling in the
/// background until the server shuts down; the rows it registered are then
/// unregistered.
pub async fn start(st: &ApiState) {
    let c = CrdController {
        st: st.clone(),
        served: Arc::new(tokio::sync::Mutex::new(Served::default())),
        retry_pending: Arc::new(std::sync::atomic::AtomicBool::new(false)),
    };
    if tokio::time::timeout(Duration::from_secs(10), c.reconcile_all()).await.is_err() {
        tracing::warn!("CustomResourceDefinitions are not served yet: storage did not answer; retrying in the background");
    }
    let stop = st.shutdown.subscribe();
    tokio::spawn(async move {
        let (storage, prefix) = (c.st.storage.clone(), c.st.prefix().to_string());
        let (pass, events) = (c.clone(), c.clone());
        super::run_watching(
            "crd-controllers",
            storage,
            &prefix,
            &[CRD_PREFIX],
            stop,
            move || {
                let c = pass.clone();
                async move { c.reconcile_all().await }
            },
            move |_events| {
                let c = events.clone();
                async move {
                    if let Err(e) = c.reconcile_all().await {
                        tracing::warn!(error = %e, "reconciling CustomResourceDefinitions");
                    }
                }
            },
        )
        .await;
        c.unregister_everything().await;
    });
}

fn str_at<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

fn strs_at(v: &Value, pointer: &str) -> Vec<String> {
    v.pointer(pointer).and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).map(str::to_string).collect()
}

/// The condition `type` of a CRD.
fn condition<'a>(crd: &'a Value, ty: &str) -> Option<&'a Value> {
    crd.pointer("/status/conditions")?.as_array()?.iter().find(|c| c.get("type").and_then(Value::as_str) == Some(ty))
}

/// A condition, keeping `lastTransitionTime` of `old` when the status did not change.
fn make_condition(old: Option<&Value>, ty: &str, status: &str, reason: &str, message: &str) -> Value {
    let since = match old {
        Some(o) if o.get("status").and_then(Value::as_str) == Some(status) => o.get("lastTransitionTime").cloned(),
        _ => None,
    };
    json!({
        "type": ty,
        "status": status,
        "lastTransitionTime": since.unwrap_or_else(|| json!(rkube_api::time::now_rfc3339())),
        "reason": reason,
        "message": message,
    })
}

/// The names accepted and the `NamesAccepted` condition's `(status, reason,
/// message)` of `crd` among `others` (every other CRD), as upstream's naming
/// controller decides them.
fn names_and_condition(crd: &Value, others: &[&Value]) -> (Value, (&'static str, &'static str, String)) {
    let group = str_at(crd, "/spec/group");
    let same_group: Vec<&Value> = others.iter().copied().filter(|o| str_at(o, "/spec/group") == group).collect();
    let mut taken_resources: Vec<String> = Vec::new();
    let mut taken_kinds: Vec<String> = Vec::new();
    for o in &same_group {
        let names = o.pointer("/status/acceptedNames").cloned().unwrap_or(Value::Null);
        taken_resources.extend(["/plural", "/singular"].iter().map(|p| str_at(&names, p).to_string()).filter(|s| !s.is_empty()));
        taken_resources.extend(strs_at(&names, "/shortNames"));
        taken_kinds.extend(["/kind", "/listKind"].iter().map(|p| str_at(&names, p).to_string()).filter(|s| !s.is_empty()));
    }
    for r in registry::all().iter().filter(|r| r.group == group) {
        taken_resources.push(r.resource.to_string());
        taken_resources.extend(r.short_names.iter().map(|s| s.to_string()));
        taken_kinds.push(r.kind.to_string());
    }
    let requested = crd.pointer("/spec/names").cloned().unwrap_or(Value::Null);
    let in_use = |what: &str| format!("{what:?} is already in use");
    let conflict = if let Some(p) = Some(str_at(&requested, "/plural")).filter(|p| taken_resources.iter().any(|t| t == p)) {
        Some(("PluralConflict", in_use(p)))
    } else if let Some(s) = Some(str_at(&requested, "/singular")).filter(|s| !s.is_empty() && taken_resources.iter().any(|t| t == s)) {
        Some(("SingularConflict", in_use(s)))
    } else if let Some(s) = strs_at(&requested, "/shortNames").into_iter().find(|s| taken_resources.contains(s)) {
        Some(("ShortNamesConflict", in_use(&s)))
    } else if let Some(k) = Some(str_at(&requested, "/kind")).filter(|k| taken_kinds.iter().any(|t| t == k)) {
        Some(("KindConflict", in_use(k)))
    } else {
        Some(str_at(&requested, "/listKind"))
            .filter(|k| !k.is_empty() && taken_kinds.iter().any(|t| t == k))
            .map(|k| ("ListKindConflict", in_use(k)))
    };
    match conflict {
        None => (requested, ("True", "NoConflicts", "no conflicts found".to_string())),
        Some((reason, message)) => {
            let old = crd.pointer("/status/acceptedNames").cloned().unwrap_or_else(|| json!({"plural": "", "kind": ""}));
            (old, ("False", reason, message))
        }
    }
}

/// The status `crd` should have among `others`.
fn desired_status(crd: &Value, others: &[&Value]) -> Value {
    let (accepted, (ns, reason, message)) = names_and_condition(crd, others);
    let names_accepted = make_condition(condition(crd, "NamesAccepted"), "NamesAccepted", ns, reason, &message);
    let old_established = condition(crd, "Established");
    let established = if ns == "True" || old_established.is_some_and(|c| c.get("status").and_then(Value::as_str) == Some("True")) {
        make_condition(old_established, "Established", "True", "InitialNamesAccepted", "the initial names have been accepted")
    } else {
        make_condition(old_established, "Established", "False", "NotAccepted", "not all names are accepted")
    };
    let mut conditions = vec![names_accepted, established];
    if let Some(t) = condition(crd, "Terminating") {
        conditions.push(t.clone());
    }
    let mut stored = strs_at(crd, "/status/storedVersions");
    let versions = crd.pointer("/spec/versions").and_then(Value::as_array);
    if let Some(v) = versions.into_iter().flatten().find(|v| v.get("storage").and_then(Value::as_bool) == Some(true)) {
        let name = str_at(v, "/name").to_string();
        if !name.is_empty() && !stored.contains(&name) {
            stored.push(name);
        }
    }
    json!({"conditions": conditions, "acceptedNames": accepted, "storedVersions": stored})
}

/// The status without `lastTransitionTime`s, to compare.
fn comparable(status: &Value) -> Value {
    let mut s = status.clone();
    if let Some(conds) = s.get_mut("conditions").and_then(Value::as_array_mut) {
        for c in conds.iter_mut().filter_map(Value::as_object_mut) {
            c.remove("lastTransitionTime");
        }
    }
    s
}

impl CrdController {
    fn crd_dir(&self) -> String {
        format!("{}/{CRD_PREFIX}", self.st.prefix().trim_end_matches('/'))
    }

    /// One pass over every CRD; returns the storage revision read.
    async fn reconcile_all(&self) -> Result<i64, String> {
        let mut served = self.served.lock().await;
        let resp = self.st.storage.range(RangeRequest::prefix(&self.crd_dir())).await.map_err(|e| e.to_string())?;
        let crds: Vec<(KeyValue, Value)> =
            resp.kvs.into_iter().filter_map(|kv| serde_json::from_slice(&kv.value).ok().map(|v| (kv, v))).collect();
        let mut seen = Vec::new();
        for (i, (kv, crd)) in crds.iter().enumerate() {
            let name = crate::object::name(crd).to_string();
            seen.push(name.clone());
            if crate::object::is_terminating(crd) {
                self.finalize(&mut served, kv, crd).await;
                continue;
            }
            // Names are checked against CRDs earlier in the pass as they are now.
            let others: Vec<&Value> = crds.iter().enumerate().filter(|(j, _)| *j != i).map(|(_, (_, c))| c).collect();
            let status = desired_status(crd, &others);
            let mut current = crd.clone();
            current["status"] = status;
            // Serve first (rows and a ready watch cache), then say so: a
            // client that saw `Established` can list at once.
            if apiextensions::crd::is_established(&current) {
                self.serve(&mut served, &name, &current).await;
            }
            if comparable(&current["status"]) != comparable(crd.get("status").unwrap_or(&Value::Null)) {
                if let Err(e) = self.write(kv, &current).await {
                    // Another writer got in between: its event brings us back.
                    tracing::debug!(crd = %name, error = %e, "writing CRD status");
                }
            }
        }
        let gone: Vec<String> = served.by_crd.keys().filter(|n| !seen.contains(n)).cloned().collect();
        for name in gone {
            unregister(&mut served, &name);
        }
        Ok(resp.revision)
    }

    async fn write(&self, kv: &KeyValue, obj: &Value) -> Result<(), StorageError> {
        let bytes = crate::handlers::encode_for_storage(obj).map_err(|e| StorageError::Internal(e.0.message.clone()))?;
        self.st.storage.update(&kv.key, bytes, kv.mod_revision).await.map(|_| ())
    }

    /// Registers the rows of an established CRD (when its spec or accepted
    /// names changed since the last time) and their watch caches.
    async fn serve(&self, served: &mut Served, name: &str, crd: &Value) {
        let fingerprint = json!({"spec": crd.get("spec"), "names": crd.pointer("/status/acceptedNames")});
        if served.by_crd.get(name).is_some_and(|(f, _)| *f == fingerprint) {
            return;
        }
        let rows = apiextensions::rows_for(crd);
        let keys: Vec<RowKey> =
            rows.iter().map(|r| (r.group.to_string(), r.version.to_string(), r.resource.to_string())).collect();
        if let Some((_, old)) = served.by_crd.get(name) {
            for (g, v, r) in old.iter().filter(|k| !keys.contains(k)) {
                registry::unregister(g, v, r);
            }
        }
        for row in rows {
            match registry::register(row) {
                Ok(row) => {
                    let entry = self.st.cache.add_resource(row);
                    if entry.enabled() {
                        let mut ready = entry.cacher.subscribe_ready();
                        if tokio::time::timeout(CACHE_READY_WAIT, ready.wait_for(|s| s.is_ready())).await.is_err() {
                            tracing::warn!(crd = %name, "the watch cache of a custom resource is not ready yet");
                        }
                    }
                }
                Err(e) => tracing::warn!(crd = %name, error = %e, "not serving a custom resource"),
            }
        }
        served.by_crd.insert(name.to_string(), (fingerprint, keys));
    }

    /// Deletes the custom resources of a CRD being deleted; once none is
    /// left, stops serving them and removes the cleanup finalizer.
    async fn finalize(&self, served: &mut Served, kv: &KeyValue, crd: &Value) {
        let name = crate::object::name(crd).to_string();
        let has_finalizer = strs_at(crd, "/metadata/finalizers").iter().any(|f| f == CLEANUP_FINALIZER);
        if !has_finalizer {
            unregister(served, &name);
            return;
        }
        // Say so first (upstream's finalizer controller:
        // `Terminating=True`, `InstanceDeletionInProgress`).
        let mut kv = kv.clone();
        let mut crd = crd.clone();
        let in_progress = condition(&crd, "Terminating").is_some_and(|c| c.get("reason").and_then(Value::as_str) == Some("InstanceDeletionInProgress"));
        if !in_progress {
            let terminating = make_condition(None, "Terminating", "True", "InstanceDeletionInProgress", "CustomResource deletion is in progress");
            let conds = crd["status"].as_object_mut().map(|st| st.entry("conditions").or_insert_with(|| json!([])));
            if let Some(list) = conds.and_then(Value::as_array_mut) {
                list.retain(|c| c.get("type").and_then(Value::as_str) != Some("Terminating"));
                list.push(terminating);
            }
            if let Err(e) = self.write(&kv, &crd).await {
                tracing::debug!(crd = %name, error = %e, "writing the Terminating condition");
                return;
            }
            match self.st.storage.get(&kv.key).await {
                Ok(Some(fresh)) => match serde_json::from_slice(&fresh.value) {
                    Ok(v) => (kv, crd) = (fresh, v),
                    Err(_) => return,
                },
                _ => return,
            }
        }
        let (kv, crd) = (&kv, &crd);
        let group = str_at(crd, "/spec/group");
        let plural = str_at(crd, "/spec/names/plural");
        let remaining = if group.is_empty() || plural.is_empty() {
            0
        } else {
            let dir = format!("{}/{group}/{plural}/", self.st.prefix().trim_end_matches('/'));
            match self.delete_all(&dir).await {
                Ok(n) => n,
                Err(e) => {
                    tracing::warn!(crd = %name, error = %e, "deleting custom resources");
                    usize::MAX
                }
            }
        };
        if remaining > 0 {
            self.retry_later();
            return;
        }
        unregister(served, &name);
        let mut done = crd.clone();
        if let Some(list) = done.pointer_mut("/metadata/finalizers").and_then(Value::as_array_mut) {
            list.retain(|f| f.as_str() != Some(CLEANUP_FINALIZER));
        }
        let result = if strs_at(&done, "/metadata/finalizers").is_empty() {
            self.st.storage.delete(&kv.key, Some(kv.mod_revision)).await.map(|_| ())
        } else {
            self.write(kv, &done).await
        };
        if let Err(e) = result {
            tracing::debug!(crd = %name, error = %e, "removing the cleanup finalizer");
        }
    }

    /// Deletes every object under `dir`; objects with finalizers are marked
    /// for deletion instead. Returns how many are left.
    async fn delete_all(&self, dir: &str) -> Result<usize, StorageError> {
        let resp = self.st.storage.range(RangeRequest::prefix(dir)).await?;
        let mut left = 0;
        for kv in resp.kvs {
            let Ok(mut obj) = serde_json::from_slice::<Value>(&kv.value) else {
                self.st.storage.delete(&kv.key, Some(kv.mod_revision)).await?;
                continue;
            };
            if strs_at(&obj, "/metadata/finalizers").is_empty() {
                match self.st.storage.delete(&kv.key, Some(kv.mod_revision)).await {
                    Ok(_) | Err(StorageError::NotFound { .. }) => {}
                    Err(StorageError::Conflict { .. }) => left += 1,
                    Err(e) => return Err(e),
                }
                continue;
            }
            left += 1;
            if !crate::object::is_terminating(&obj) {
                crate::object::set_meta(&mut obj, "deletionTimestamp", json!(rkube_api::time::now_rfc3339()));
                crate::object::set_meta(&mut obj, "deletionGracePeriodSeconds", json!(0));
                match self.write(&kv, &obj).await {
                    Ok(()) | Err(StorageError::Conflict { .. }) | Err(StorageError::NotFound { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(left)
    }

    /// Runs a pass after [`CLEANUP_RETRY`] (one pending at a time).
    fn retry_later(&self) {
        use std::sync::atomic::Ordering;
        if self.retry_pending.swap(true, Ordering::SeqCst) {
            return;
        }
        let c = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(CLEANUP_RETRY).await;
            c.retry_pending.store(false, Ordering::SeqCst);
            if *c.st.shutdown.borrow() {
                return;
            }
            if let Err(e) = c.reconcile_all().await {
                tracing::debug!(error = %e, "reconciling CustomResourceDefinitions");
            }
        });
    }

    async fn unregister_everything(&self) {
        let mut served = self.served.lock().await;
        let names: Vec<String> = served.by_crd.keys().cloned().collect();
        for name in names {
            unregister(&mut served, &name);
        }
    }
}

/// Upstream's CRD handler refuses creates of custom resources while their
/// CRD is being deleted: 405 `MethodNotAllowed`, `create not allowed while
/// custom resource definition is terminating`. `Ok` when the CRD is not
/// terminating (or cannot be read: storage errors surface on the write).
pub async fn refuse_create_while_terminating(st: &ApiState, info: &registry::ResourceInfo) -> crate::error::ApiResult<()> {
    let Some(custom) = info.custom else { return Ok(()) };
    let key = format!("{}/{CRD_PREFIX}{}", st.prefix().trim_end_matches('/'), custom.crd_name);
    let Ok(Some(kv)) = st.storage.get(&key).await else { return Ok(()) };
    let terminating = serde_json::from_slice::<Value>(&kv.value).is_ok_and(|crd| crate::object::is_terminating(&crd));
    if !terminating {
        return Ok(());
    }
    let details = rkube_api::status::StatusDetails {
        group: info.group.to_string(),
        kind: info.resource.to_string(),
        ..Default::default()
    };
    let status = rkube_api::status::Status::method_not_allowed("create not allowed while custom resource definition is terminating");
    Err(status.with_details(details).into())
}

fn unregister(served: &mut Served, crd_name: &str) {
    if let Some((_, keys)) = served.by_crd.remove(crd_name) {
        for (g, v, r) in keys {
            registry::unregister(&g, &v, &r);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crd(name: &str, plural: &str, kind: &str) -> Value {
        json!({"metadata": {"name": name}, "spec": {"group": "example.com", "names": {"plural": plural, "kind": kind, "singular": kind.to_lowercase(), "listKind": format!("{kind}List")},
               "versions": [{"name": "v1", "served": true, "storage": true}]}})
    }

    #[test]
    fn names_without_conflicts_are_accepted_and_established() {
        let status = desired_status(&crd("widgets.example.com", "widgets", "Widget"), &[]);
        assert_eq!(status["acceptedNames"]["plural"], "widgets");
        assert_eq!(status["conditions"][0]["reason"], "NoConflicts");
        assert_eq!(status["conditions"][1]["status"], "True");
        assert_eq!(status["conditions"][1]["reason"], "InitialNamesAccepted");
        assert_eq!(status["storedVersions"], json!(["v1"]));
    }

    #[test]
    fn a_kind_in_use_in_the_group_is_a_conflict() {
        let mut other = crd("gadgets.example.com", "gadgets", "Widget");
        other["spec"]["names"]["singular"] = json!("gadget");
        other["spec"]["names"]["listKind"] = json!("GadgetList");
        other["status"] = json!({"acceptedNames": other["spec"]["names"].clone()});
        let status = desired_status(&crd("widgets.example.com", "widgets", "Widget"), &[&other]);
        assert_eq!(status["conditions"][0]["status"], "False");
        assert_eq!(status["conditions"][0]["reason"], "KindConflict");
        assert_eq!(status["conditions"][0]["message"], "\"Widget\" is already in use");
        assert_eq!(status["conditions"][1]["status"], "False");
        assert_eq!(status["conditions"][1]["reason"], "NotAccepted");
    }
}
