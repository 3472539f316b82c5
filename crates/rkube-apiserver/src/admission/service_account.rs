//! The `ServiceAccount` admission plugin for pods (upstream
//! `plugin/pkg/admission/serviceaccount/admission.go`), on create:
//!
//! - a mirror pod (annotation `kubernetes.io/config.mirror`) may not name a
//!   ServiceAccount or mount its token (403), and is otherwise left alone;
//! - `spec.serviceAccountName` defaults to `default` (and the deprecated
//!   `spec.serviceAccount` follows it);
//! - the ServiceAccount must exist: 403 `error looking up service account
//!   <ns>/<name>: serviceaccount "<name>" not found` otherwise; `default` is
//!   looked up for up to about 1.5 s, since the serviceaccount controller
//!   creates it right after its namespace;
//! - unless `automountServiceAccountToken` is false (the pod's, else the
//!   ServiceAccount's), a projected volume `kube-api-access-<5 chars>`
//!   (a `serviceAccountToken` of 3607 s at `token`, `ca.crt` from the
//!   `kube-root-ca.crt` ConfigMap, `namespace` from the downward API, mode
//!   0644) is added and mounted read-only at
//!   `/var/run/secrets/kubernetes.io/serviceaccount` in every container and
//!   init container that does not mount something there already;
//! - a pod without `imagePullSecrets` gets the ServiceAccount's.

use std::time::Duration;

use rkube_api::registry;

use serde_json::{json, Value};

use crate::error::{ApiError, ApiResult};
use crate::state::ApiState;

/// The ServiceAccount pods run as when they name none.
pub const DEFAULT_SERVICE_ACCOUNT: &str = "default";

/// Where containers find their token, CA and namespace.
pub const TOKEN_MOUNT_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// Name prefix of the projected token volume.
pub const VOLUME_PREFIX: &str = "kube-api-access-";

/// The ConfigMap every namespace gets with the cluster CA (`ca.crt`).
pub const ROOT_CA_CONFIGMAP: &str = "kube-root-ca.crt";

/// Lifetime the projected token asks for, seconds (upstream: an hour plus 7 s,
/// so the node agent can tell these tokens apart).
pub const PROJECTED_EXPIRATION_SECONDS: i64 = 3607;

/// Annotation of mirror pods (static pods of a node).
const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// Lookups of the `default` ServiceAccount before giving up, and the pause between them.
const DEFAULT_LOOKUPS: usize = 10;
const LOOKUP_INTERVAL: Duration = Duration::from_millis(150);

fn forbidden(pod: &str, message: String) -> ApiError {
    super::forbidden("", "pods", pod, &message)
}

/// Five lowercase alphanumerics (upstream `utilrand.String(5)` alphabet, without vowels).
fn suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut n = uuid::Uuid::new_v4().as_u128();
    (0..5)
        .map(|_| {
            let c = ALPHABET[(n % ALPHABET.len() as u128) as usize] as char;
            n /= ALPHABET.len() as u128;
            c
        })
        .collect()
}

/// The projected volume of the ServiceAccount token, named `name`.
pub fn token_volume(name: &str) -> Value {
    json!({
        "name": name,
        "projected": {
            "defaultMode": 420,
            "sources": [
                {"serviceAccountToken": {"expirationSeconds": PROJECTED_EXPIRATION_SECONDS, "path": "token"}},
                {"configMap": {"name": ROOT_CA_CONFIGMAP, "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
            ],
        },
    })
}

async fn lookup(st: &ApiState, ns: &str, name: &str) -> ApiResult<Option<Value>> {
    let info = registry::lookup("", "v1", "serviceaccounts").ok_or_else(|| ApiError::internal("serviceaccounts are not served"))?;
    let key = info.object_key(st.prefix(), ns, name);
    let attempts = if name == DEFAULT_SERVICE_ACCOUNT { DEFAULT_LOOKUPS } else { 1 };
    for attempt in 0..attempts {
        if attempt > 0 {
            tokio::time::sleep(LOOKUP_INTERVAL).await;
        }
        if let Some(kv) = st.storage.get(&key).await.map_err(|e| ApiError::from_storage(e, info, name))? {
            return crate::source::decode_stored(&kv.key, &kv.value, kv.mod_revision)
                .map(Some)
                .map_err(|e| ApiError::from_storage(e, info, name));
        }
    }
    Ok(None)
}

fn mounts_token_path(container: &Value) -> bool {
    container.get("volumeMounts").and_then(Value::as_array).is_some_and(|ms| {
        ms.iter().any(|m| m.get("mountPath").and_then(Value::as_str).map(|p| p.trim_end_matches('/')) == Some(TOKEN_MOUNT_PATH))
    })
}

/// Admits the pod `pod` being created in `ns` (see the module docs).
pub async fn admit_pod(st: &ApiState, ns: &str, pod: &mut Value) -> ApiResult<()> {
    let pod_name = pod.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("").to_string();
    let spec_sa = pod.pointer("/spec/serviceAccountName").and_then(Value::as_str).unwrap_or("").to_string();
    if pod.pointer(&format!("/metadata/annotations/{}", MIRROR_ANNOTATION.replace('/', "~1"))).is_some() {
        let projected = pod
            .pointer("/spec/volumes")
            .and_then(Value::as_array)
            .is_some_and(|vs| vs.iter().any(|v| v.pointer("/projected/sources").is_some_and(|s| s.to_string().contains("serviceAccountToken"))));
        if !spec_sa.is_empty() {
            return Err(forbidden(&pod_name, "a mirror pod may not reference service accounts".into()));
        }
        if projected {
            return Err(forbidden(&pod_name, "a mirror pod may not use ServiceAccountToken volume projections".into()));
        }
        return Ok(());
    }
    let sa_name = if spec_sa.is_empty() { DEFAULT_SERVICE_ACCOUNT.to_string() } else { spec_sa };
    let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else {
        return Ok(());
    };
    spec.insert("serviceAccountName".into(), json!(sa_name));
    spec.insert("serviceAccount".into(), json!(sa_name));
    let Some(sa) = lookup(st, ns, &sa_name).await? else {
        return Err(forbidden(
            &pod_name,
            format!("error looking up service account {ns}/{sa_name}: serviceaccount {sa_name:?} not found"),
        ));
    };
    let automount = spec
        .get("automountServiceAccountToken")
        .and_then(Value::as_bool)
        .or_else(|| sa.get("automountServiceAccountToken").and_then(Value::as_bool))
        .unwrap_or(true);
    if automount {
        let needs_mount = |key: &str, spec: &serde_json::Map<String, Value>| {
            spec.get(key).and_then(Value::as_array).is_some_and(|cs| cs.iter().any(|c| !mounts_token_path(c)))
        };
        if needs_mount("containers", spec) || needs_mount("initContainers", spec) {
            let existing = spec
                .get("volumes")
                .and_then(Value::as_array)
                .and_then(|vs| vs.iter().find_map(|v| v.get("name").and_then(Value::as_str).filter(|n| n.starts_with(VOLUME_PREFIX))))
                .map(str::to_string);
            let volume = match existing {
                Some(name) => name,
                None => {
                    let name = format!("{VOLUME_PREFIX}{}", suffix());
                    let volumes = spec.entry("volumes").or_insert_with(|| json!([]));
                    if let Some(vs) = volumes.as_array_mut() {
                        vs.push(token_volume(&name));
                    }
                    name
                }
            };
            for key in ["initContainers", "containers"] {
                for c in spec.get_mut(key).and_then(Value::as_array_mut).into_iter().flatten() {
                    if mounts_token_path(c) {
                        continue;
                    }
                    let mount = json!({"name": volume, "readOnly": true, "mountPath": TOKEN_MOUNT_PATH});
                    match c.get_mut("volumeMounts").and_then(Value::as_array_mut) {
                        Some(ms) => ms.push(mount),
                        None => c["volumeMounts"] = json!([mount]),
                    }
                }
            }
        }
    }
    let has_pull_secrets = spec.get("imagePullSecrets").and_then(Value::as_array).is_some_and(|a| !a.is_empty());
    if !has_pull_secrets {
        if let Some(secrets) = sa.get("imagePullSecrets").and_then(Value::as_array).filter(|a| !a.is_empty()) {
            spec.insert("imagePullSecrets".into(), Value::Array(secrets.clone()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn volume_names_have_five_character_suffixes() {
        let a = suffix();
        assert_eq!(a.len(), 5);
        assert!(a.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit()));
        let v = token_volume("kube-api-access-abcde");
        assert_eq!(v["projected"]["sources"][0]["serviceAccountToken"]["expirationSeconds"], 3607);
        assert_eq!(v["projected"]["defaultMode"], 420);
    }

    #[test]
    fn a_mount_at_the_token_path_is_recognised() {
        assert!(mounts_token_path(&json!({"volumeMounts": [{"name": "x", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount/"}]})));
        assert!(!mounts_token_path(&json!({"volumeMounts": [{"name": "x", "mountPath": "/data"}]})));
        assert!(!mounts_token_path(&json!({"name": "c"})));
    }
}
