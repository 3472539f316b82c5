//! Legacy ServiceAccount token Secrets (upstream
//! `pkg/controller/serviceaccount/tokens_controller.go`): a Secret of type
//! `kubernetes.io/service-account-token` annotated
//! `kubernetes.io/service-account.name: <sa>` gets `data.token` (a legacy
//! token, [`crate::serviceaccount::claims::TokenConfig::issue_legacy`]),
//! `data.ca.crt` and `data.namespace`, and the annotation
//! `kubernetes.io/service-account.uid`. A Secret whose ServiceAccount does not
//! exist (or has another UID than the annotation names) is deleted, as upstream.
//! Secrets that already hold a token are left alone.

use std::sync::Arc;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use rkube_api::registry;
use rkube_storage::{Event, EventKind, KeyValue, RangeRequest, StorageError};
use serde_json::{json, Value};

use crate::serviceaccount::claims::ObjectRef;
use crate::serviceaccount::TokenConfig;
use crate::state::ApiState;

/// The Secret type of legacy tokens.
pub const SERVICE_ACCOUNT_TOKEN_TYPE: &str = "kubernetes.io/service-account-token";
/// Annotation naming the ServiceAccount.
pub const SA_NAME_ANNOTATION: &str = "kubernetes.io/service-account.name";
/// Annotation with the ServiceAccount's UID.
pub const SA_UID_ANNOTATION: &str = "kubernetes.io/service-account.uid";

/// Runs the controller until `stop` turns true, signing with `tokens`;
/// `root_ca` goes into `data.ca.crt`.
pub async fn run(st: ApiState, tokens: Arc<TokenConfig>, root_ca: Option<String>, stop: tokio::sync::watch::Receiver<bool>) {
    let ctx = Arc::new((tokens, root_ca));
    let (storage, prefix) = (st.storage.clone(), st.prefix().to_string());
    let pass = (st.clone(), ctx.clone());
    super::run_watching(
        "serviceaccount-token-controller",
        storage,
        &prefix,
        &["secrets/"],
        stop,
        move || {
            let (st, c) = pass.clone();
            async move {
                let dir = format!("{}/secrets/", st.prefix().trim_end_matches('/'));
                let resp = st.storage.range(RangeRequest::prefix(&dir)).await.map_err(|e| e.to_string())?;
                for kv in resp.kvs {
                    sync(&st, &c.0, c.1.as_deref(), kv).await;
                }
                Ok(resp.revision)
            }
        },
        move |events: Vec<Event>| {
            let (st, c) = (st.clone(), ctx.clone());
            async move {
                for ev in events.into_iter().filter(|ev| ev.kind == EventKind::Put) {
                    sync(&st, &c.0, c.1.as_deref(), ev.kv).await;
                }
            }
        },
    )
    .await
}

async fn sync(st: &ApiState, tokens: &TokenConfig, root_ca: Option<&str>, kv: KeyValue) {
    let Ok(mut secret) = serde_json::from_slice::<Value>(&kv.value) else { return };
    if secret.get("type").and_then(Value::as_str) != Some(SERVICE_ACCOUNT_TOKEN_TYPE) {
        return;
    }
    if secret.pointer("/data/token").and_then(Value::as_str).is_some_and(|t| !t.is_empty()) {
        return;
    }
    let annotations = secret.pointer("/metadata/annotations").cloned().unwrap_or_else(|| json!({}));
    let sa_name = annotations.get(SA_NAME_ANNOTATION).and_then(Value::as_str).unwrap_or("").to_string();
    let want_uid = annotations.get(SA_UID_ANNOTATION).and_then(Value::as_str).unwrap_or("").to_string();
    let ns = crate::object::namespace(&secret).to_string();
    let name = crate::object::name(&secret).to_string();
    let Some(sa_info) = registry::lookup("", "v1", "serviceaccounts") else { return };
    let sa = match st.storage.get(&sa_info.object_key(st.prefix(), &ns, &sa_name)).await {
        Ok(v) => v.and_then(|kv| serde_json::from_slice::<Value>(&kv.value).ok()),
        Err(e) => {
            tracing::warn!(secret = %format!("{ns}/{name}"), error = %e, "reading its service account");
            return;
        }
    };
    let sa_uid = sa.as_ref().and_then(|s| s.pointer("/metadata/uid").and_then(Value::as_str)).unwrap_or("").to_string();
    if sa.is_none() || (!want_uid.is_empty() && want_uid != sa_uid) {
        tracing::info!(secret = %format!("{ns}/{name}"), service_account = %sa_name, "deleting a token secret whose service account does not exist");
        if let Err(e) = st.storage.delete(&kv.key, Some(kv.mod_revision)).await {
            if !matches!(e, StorageError::NotFound { .. } | StorageError::Conflict { .. }) {
                tracing::warn!(secret = %format!("{ns}/{name}"), error = %e, "deleting token secret");
            }
        }
        return;
    }
    let token = match tokens.issue_legacy(&ns, &ObjectRef { name: sa_name.clone(), uid: sa_uid.clone() }, &name) {
        Ok(t) => t,
        Err(e) => {
            tracing::warn!(secret = %format!("{ns}/{name}"), error = %e, "signing a legacy token");
            return;
        }
    };
    let data = secret.as_object_mut().map(|o| o.entry("data").or_insert_with(|| json!({})));
    if let Some(Value::Object(data)) = data {
        data.insert("token".into(), json!(STANDARD.encode(&token)));
        data.insert("namespace".into(), json!(STANDARD.encode(&ns)));
        if let Some(ca) = root_ca {
            data.insert("ca.crt".into(), json!(STANDARD.encode(ca)));
        }
    }
    crate::object::metadata_mut(&mut secret)
        .entry("annotations")
        .or_insert_with(|| json!({}))
        .as_object_mut()
        .map(|a| a.insert(SA_UID_ANNOTATION.into(), json!(sa_uid)));
    let Ok(bytes) = crate::handlers::encode_for_storage(&secret) else { return };
    match st.storage.update(&kv.key, bytes, kv.mod_revision).await {
        Ok(_) | Err(StorageError::Conflict { .. }) | Err(StorageError::NotFound { .. }) => {}
        Err(e) => tracing::warn!(secret = %format!("{ns}/{name}"), error = %e, "writing token secret"),
    }
}
