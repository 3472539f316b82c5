//! Volumes the node agent prepares on the host and hands to the runtime as
//! CRI mounts (upstream kubelet's volume manager and the `projected` volume
//! plugin, `pkg/volume/projected`).
//!
//! So far: **projected** volumes, the kind the ServiceAccount admission plugin
//! adds to every pod (`kube-api-access-*`), with their `serviceAccountToken`
//! (a TokenRequest bound to the pod, for the source's audience and
//! `expirationSeconds`), `configMap`, `secret` and `downwardAPI`
//! (`metadata.name`, `namespace`, `uid`) sources. Files are written under
//! `<root-dir>/pods/<pod uid>/volumes/kubernetes.io~projected/<volume>/`
//! (kubelet's layout), with the volume's `defaultMode` (0644 by default), and
//! mounted where the container's `volumeMounts` say. A volume that cannot be
//! prepared (a missing ConfigMap that is not `optional`, a refused
//! TokenRequest) is left out with a warning naming it; other volume types are
//! not mounted yet. Tokens are issued when a container is created and not
//! rotated afterwards.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{ConfigMap, Container, Pod, Secret, Volume, VolumeProjection};
use kube::Api;
use serde_json::{json, Value};

use rkube_runtime::cri;

/// Where a pod's volumes live: `<root>/pods/<uid>/volumes/kubernetes.io~projected/<name>`.
pub fn projected_dir(root: &Path, pod_uid: &str, volume: &str) -> PathBuf {
    root.join("pods").join(pod_uid).join("volumes").join("kubernetes.io~projected").join(volume)
}

/// The CRI mounts of `container`, preparing the volumes they use (see the module docs).
pub async fn container_mounts(client: &kube::Client, root: &Path, pod: &Pod, container: &Container) -> Vec<cri::Mount> {
    let volumes = pod.spec.as_ref().and_then(|s| s.volumes.as_deref()).unwrap_or_default();
    let mut mounts = Vec::new();
    for vm in container.volume_mounts.as_deref().unwrap_or_default() {
        let Some(volume) = volumes.iter().find(|v| v.name == vm.name) else { continue };
        if volume.projected.is_none() {
            continue;
        }
        let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
        match prepare_projected(client, root, pod, volume).await {
            Ok(dir) => {
                let host = match vm.sub_path.as_deref().filter(|p| !p.is_empty()) {
                    Some(sub) => dir.join(sub),
                    None => dir,
                };
                mounts.push(cri::Mount {
                    container_path: vm.mount_path.clone(),
                    host_path: host.display().to_string(),
                    readonly: vm.read_only.unwrap_or(false),
                    ..Default::default()
                });
            }
            Err(e) => tracing::warn!(pod = pod_name, volume = %volume.name, error = %e, "volume not mounted (FailedMount)"),
        }
    }
    mounts
}

/// Writes every file of the projected volume `volume`; returns its directory.
async fn prepare_projected(client: &kube::Client, root: &Path, pod: &Pod, volume: &Volume) -> anyhow::Result<PathBuf> {
    let projected = volume.projected.as_ref().ok_or_else(|| anyhow::anyhow!("not a projected volume"))?;
    let uid = pod.metadata.uid.as_deref().unwrap_or_default();
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let mut files: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    for source in projected.sources.as_deref().unwrap_or_default() {
        project(client, pod, ns, source, &mut files).await?;
    }
    let dir = projected_dir(root, uid, &volume.name);
    std::fs::create_dir_all(&dir)?;
    let mode = projected.default_mode.unwrap_or(0o644) as u32;
    for (path, bytes) in &files {
        if path.split('/').any(|p| p == ".." || p.is_empty()) {
            anyhow::bail!("invalid path {path:?}");
        }
        let target = dir.join(path);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let tmp = target.with_extension("tmp-rkube");
        std::fs::write(&tmp, bytes)?;
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(mode & 0o777))?;
        std::fs::rename(&tmp, &target)?;
    }
    Ok(dir)
}

/// Adds the files of one projection `source` to `files`.
async fn project(
    client: &kube::Client,
    pod: &Pod,
    ns: &str,
    source: &VolumeProjection,
    files: &mut BTreeMap<String, Vec<u8>>,
) -> anyhow::Result<()> {
    if let Some(t) = &source.service_account_token {
        let sa = pod.spec.as_ref().and_then(|s| s.service_account_name.as_deref()).unwrap_or("default");
        let mut spec = json!({
            "expirationSeconds": t.expiration_seconds.unwrap_or(3600),
            "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": pod.metadata.name, "uid": pod.metadata.uid},
        });
        if let Some(aud) = t.audience.as_deref().filter(|a| !a.is_empty()) {
            spec["audiences"] = json!([aud]);
        }
        let body = serde_json::to_vec(&json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}))?;
        let req = kube::core::Request::new(format!("/api/v1/namespaces/{ns}/serviceaccounts"))
            .create_subresource("token", sa, &kube::api::PostParams::default(), body)?;
        let answer: Value = client.request(req).await?;
        let token = answer.pointer("/status/token").and_then(Value::as_str).ok_or_else(|| anyhow::anyhow!("no token in the answer"))?;
        files.insert(t.path.clone(), token.as_bytes().to_vec());
    }
    if let Some(cm) = &source.config_map {
        let optional = cm.optional.unwrap_or(false);
        match Api::<ConfigMap>::namespaced(client.clone(), ns).get_opt(&cm.name).await? {
            Some(obj) => {
                let data = obj.data.unwrap_or_default();
                select(cm.items.as_deref(), data.into_iter().map(|(k, v)| (k, v.into_bytes())).collect(), optional, files)?;
            }
            None if optional => {}
            None => anyhow::bail!("configmap {:?} not found", cm.name),
        }
    }
    if let Some(s) = &source.secret {
        let optional = s.optional.unwrap_or(false);
        match Api::<Secret>::namespaced(client.clone(), ns).get_opt(&s.name).await? {
            Some(obj) => {
                let data = obj.data.unwrap_or_default();
                select(s.items.as_deref(), data.into_iter().map(|(k, v)| (k, v.0)).collect(), optional, files)?;
            }
            None if optional => {}
            None => anyhow::bail!("secret {:?} not found", s.name),
        }
    }
    if let Some(d) = &source.downward_api {
        for item in d.items.as_deref().unwrap_or_default() {
            let Some(f) = &item.field_ref else { continue };
            let value = match f.field_path.as_str() {
                "metadata.name" => pod.metadata.name.clone(),
                "metadata.namespace" => Some(ns.to_string()),
                "metadata.uid" => pod.metadata.uid.clone(),
                _ => None,
            };
            if let Some(v) = value {
                files.insert(item.path.clone(), v.into_bytes());
            }
        }
    }
    Ok(())
}

/// The `items` of a ConfigMap or Secret (`key` → `path`), or every key when none are listed.
fn select(
    items: Option<&[k8s_openapi::api::core::v1::KeyToPath]>,
    data: BTreeMap<String, Vec<u8>>,
    optional: bool,
    files: &mut BTreeMap<String, Vec<u8>>,
) -> anyhow::Result<()> {
    match items {
        Some(items) if !items.is_empty() => {
            for item in items {
                match data.get(&item.key) {
                    Some(v) => {
                        files.insert(item.path.clone(), v.clone());
                    }
                    None if optional => {}
                    None => anyhow::bail!("key {:?} not found", item.key),
                }
            }
        }
        _ => files.extend(data),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn projected_volumes_live_in_kubelets_layout() {
        let d = projected_dir(Path::new("/var/lib/kubelet"), "u-1", "kube-api-access-abcde");
        assert_eq!(d, PathBuf::from("/var/lib/kubelet/pods/u-1/volumes/kubernetes.io~projected/kube-api-access-abcde"));
    }

    #[test]
    fn listed_items_are_selected_and_missing_keys_fail_unless_optional() {
        let data: BTreeMap<String, Vec<u8>> = [("ca.crt".to_string(), b"PEM".to_vec()), ("x".to_string(), b"1".to_vec())].into();
        let items = vec![k8s_openapi::api::core::v1::KeyToPath { key: "ca.crt".into(), path: "ca.crt".into(), mode: None }];
        let mut files = BTreeMap::new();
        select(Some(&items), data.clone(), false, &mut files).unwrap();
        assert_eq!(files.keys().collect::<Vec<_>>(), ["ca.crt"]);
        let missing = vec![k8s_openapi::api::core::v1::KeyToPath { key: "nope".into(), path: "n".into(), mode: None }];
        assert!(select(Some(&missing), data.clone(), false, &mut BTreeMap::new()).is_err());
        assert!(select(Some(&missing), data.clone(), true, &mut BTreeMap::new()).is_ok());
        let mut all = BTreeMap::new();
        select(None, data, false, &mut all).unwrap();
        assert_eq!(all.len(), 2);
    }
}
