//! The `default` ServiceAccount and the `kube-root-ca.crt` ConfigMap of
//! every namespace (upstream `pkg/controller/serviceaccount/serviceaccounts_controller.go`
//! and `pkg/controller/certificates/rootcacertpublisher/publisher.go`).
//!
//! A namespace that is created (or found by the full pass) and not
//! terminating gets a ServiceAccount `default` when it has none, and, when
//! the cluster CA is known, a ConfigMap `kube-root-ca.crt` whose `ca.crt`
//! holds it (rewritten when it differs). Deleting either brings it back.

use std::sync::Arc;

use rkube_api::registry;
use rkube_storage::{Event, EventKind, RangeRequest, StorageError};
use serde_json::{json, Value};

use crate::admission::service_account::{DEFAULT_SERVICE_ACCOUNT, ROOT_CA_CONFIGMAP};
use crate::state::ApiState;

/// Runs the controller until `stop` turns true; `root_ca` is the CA
/// certificate (PEM) published as `kube-root-ca.crt` (`None`: not published).
pub async fn run(st: ApiState, root_ca: Option<String>, stop: tokio::sync::watch::Receiver<bool>) {
    let root_ca = Arc::new(root_ca);
    let (storage, prefix) = (st.storage.clone(), st.prefix().to_string());
    let pass = (st.clone(), root_ca.clone());
    super::run_watching(
        "serviceaccount-controller",
        storage,
        &prefix,
        &["namespaces/", "serviceaccounts/", "configmaps/"],
        stop,
        move || {
            let (st, ca) = pass.clone();
            async move { full_pass(&st, ca.as_deref()).await }
        },
        move |events| {
            let (st, ca) = (st.clone(), root_ca.clone());
            async move {
                for ev in events {
                    on_event(&st, ca.as_deref(), ev).await;
                }
            }
        },
    )
    .await
}

async fn full_pass(st: &ApiState, root_ca: Option<&str>) -> Result<i64, String> {
    let dir = format!("{}/namespaces/", st.prefix().trim_end_matches('/'));
    let resp = st.storage.range(RangeRequest::prefix(&dir)).await.map_err(|e| e.to_string())?;
    for kv in &resp.kvs {
        if let Some(ns) = kv.key.strip_prefix(&dir) {
            ensure(st, ns, root_ca).await;
        }
    }
    Ok(resp.revision)
}

async fn on_event(st: &ApiState, root_ca: Option<&str>, ev: Event) {
    let base = st.prefix().trim_end_matches('/');
    let key = ev.kv.key.as_str();
    if let Some(ns) = key.strip_prefix(&format!("{base}/namespaces/")) {
        if ev.kind == EventKind::Put {
            ensure(st, ns, root_ca).await;
        }
    } else if let Some((ns, name)) = super::namespaced_key(key, &format!("{base}/serviceaccounts/")) {
        if ev.kind == EventKind::Delete && name == DEFAULT_SERVICE_ACCOUNT {
            ensure(st, ns, root_ca).await;
        }
    } else if let Some((ns, name)) = super::namespaced_key(key, &format!("{base}/configmaps/")) {
        if name == ROOT_CA_CONFIGMAP && root_ca.is_some() {
            ensure(st, ns, root_ca).await;
        }
    }
}

/// Whether namespace `ns` exists and is not terminating.
async fn active(st: &ApiState, ns: &str) -> bool {
    let Some(info) = registry::lookup("", "v1", "namespaces") else { return false };
    match st.storage.get(&info.object_key(st.prefix(), "", ns)).await {
        Ok(Some(kv)) => serde_json::from_slice::<Value>(&kv.value).is_ok_and(|obj| !crate::object::is_terminating(&obj)),
        _ => false,
    }
}

/// Makes sure `ns` has its `default` ServiceAccount and root CA ConfigMap.
pub async fn ensure(st: &ApiState, ns: &str, root_ca: Option<&str>) {
    if !active(st, ns).await {
        return;
    }
    if let Some(info) = registry::lookup("", "v1", "serviceaccounts") {
        let sa = json!({"kind": "ServiceAccount", "apiVersion": "v1", "metadata": {"name": DEFAULT_SERVICE_ACCOUNT, "namespace": ns}});
        if let Err(e) = crate::builtin_objects::create_missing(st, info, sa).await {
            tracing::warn!(namespace = ns, error = %e, "creating the default service account");
        }
    }
    if let Some(ca) = root_ca {
        if let Err(e) = publish_root_ca(st, ns, ca).await {
            tracing::warn!(namespace = ns, error = %e, "publishing {ROOT_CA_CONFIGMAP}");
        }
    }
}

async fn publish_root_ca(st: &ApiState, ns: &str, ca: &str) -> Result<(), String> {
    let info = registry::lookup("", "v1", "configmaps").ok_or("configmaps are not served")?;
    let key = info.object_key(st.prefix(), ns, ROOT_CA_CONFIGMAP);
    match st.storage.get(&key).await.map_err(|e| e.to_string())? {
        None => {
            let cm = json!({"kind": "ConfigMap", "apiVersion": "v1",
                            "metadata": {"name": ROOT_CA_CONFIGMAP, "namespace": ns}, "data": {"ca.crt": ca}});
            crate::builtin_objects::create_missing(st, info, cm).await.map_err(|e| e.to_string())
        }
        Some(kv) => {
            let mut cm: Value = serde_json::from_slice(&kv.value).map_err(|e| e.to_string())?;
            if cm.pointer("/data/ca.crt").and_then(Value::as_str) == Some(ca) {
                return Ok(());
            }
            cm["data"] = json!({"ca.crt": ca});
            let bytes = crate::handlers::encode_for_storage(&cm).map_err(|e| e.to_string())?;
            match st.storage.update(&key, bytes, kv.mod_revision).await {
                // Someone else wrote it: the watch brings us back.
                Ok(_) | Err(StorageError::Conflict { .. }) | Err(StorageError::NotFound { .. }) => Ok(()),
                Err(e) => Err(e.to_string()),
            }
        }
    }
}
