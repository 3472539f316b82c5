//! Volumes the node agent prepares on the host and hands to the runtime as
//! CRI mounts (upstream kubelet's volume manager and its `emptyDir`,
//! `hostPath`, `configMap`, `secret`, `downwardAPI` and `projected` plugins,
//! `pkg/volume/*`).
//!
//! Each volume lives in kubelet's layout,
//! `<root-dir>/pods/<pod uid>/volumes/kubernetes.io~<plugin>/<volume>/`
//! (`hostPath` volumes are the host path itself), and is mounted where the
//! container's `volumeMounts` say (`subPath` inside it, `readOnly`; the
//! API data volumes below, `configMap` to `projected`, are always read-only):
//!
//! - `emptyDir`: an empty directory; `medium: Memory` is a tmpfs (with
//!   `sizeLimit`) when the agent runs as root, else a plain directory;
//! - `hostPath`: the path, checked or created by its `type`
//!   (`DirectoryOrCreate`, `Directory`, `FileOrCreate`, `File`, `Socket`,
//!   `CharDevice`, `BlockDevice`);
//! - `configMap`, `secret`, `downwardAPI`, `projected` (ServiceAccount
//!   tokens bound to the pod and rotated at 80% of their lifetime,
//!   ConfigMaps, Secrets, downward API files, ClusterTrustBundles
//!   ([`super::trust_bundles`])): files with `items`, `mode`
//!   and `defaultMode` (0644), written atomically ([`super::atomic_writer`])
//!   and rewritten by [`refresh`] when their sources change.
//!
//! - `persistentVolumeClaim`: the claim's bound PersistentVolume, which
//!   must be a `hostPath` (checked like one) or `local` volume on this
//!   machine; the claim's `readOnly` makes every mount of it read-only.
//!
//! A volume that cannot be set up (a missing ConfigMap that is not
//! `optional`, a failed hostPath check, a claim not bound yet, a type rkube
//! does not support such as `nfs`) is a [`MountError`]: the container is
//! not created, kubelet's `FailedMount` event says why, and the next sync
//! of the pod tries again.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::{Container, KeyToPath, PersistentVolume, PersistentVolumeClaim, Pod, Volume, VolumeProjection};
use serde_json::{json, Value};

use rkube_runtime::cri;

use super::atomic_writer::{self, FileData};
use super::cri_config::DownwardValues;

/// `defaultMode` of file-backed volumes (upstream's 0644).
pub const DEFAULT_MODE: u32 = 0o644;

/// A volume that could not be set up, worded as kubelet's `FailedMount` event.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("MountVolume.SetUp failed for volume {volume:?} : {message}")]
pub struct MountError {
    /// The volume's name.
    pub volume: String,
    /// Why.
    pub message: String,
}

/// Where a volume of `plugin` (`projected`, `configmap`, `empty-dir`, …) lives:
/// `<root>/pods/<uid>/volumes/kubernetes.io~<plugin>/<name>`.
pub fn volume_dir(root: &Path, pod_uid: &str, plugin: &str, volume: &str) -> PathBuf {
    root.join("pods").join(pod_uid).join("volumes").join(format!("kubernetes.io~{plugin}")).join(volume)
}

/// [`volume_dir`] of a projected volume.
pub fn projected_dir(root: &Path, pod_uid: &str, volume: &str) -> PathBuf {
    volume_dir(root, pod_uid, "projected", volume)
}

/// The CRI mounts of `container`, setting up the volumes it uses. Errors:
/// the first volume that cannot be set up.
pub async fn container_mounts(
    client: &kube::Client,
    root: &Path,
    pod: &Pod,
    container: &Container,
    dw: &DownwardValues,
) -> Result<Vec<cri::Mount>, MountError> {
    let volumes = pod.spec.as_ref().and_then(|s| s.volumes.as_deref()).unwrap_or_default();
    let mut mounts = Vec::new();
    for vm in container.volume_mounts.as_deref().unwrap_or_default() {
        let Some(volume) = volumes.iter().find(|v| v.name == vm.name) else { continue };
        let dir = prepare(client, root, pod, volume, dw)
            .await
            .map_err(|message| MountError { volume: volume.name.clone(), message })?;
        let host = match vm.sub_path.as_deref().filter(|p| !p.is_empty()) {
            Some(sub) => {
                atomic_writer::validate_path(sub).map_err(|e| MountError { volume: volume.name.clone(), message: e.to_string() })?;
                let p = dir.join(sub);
                // Upstream creates a missing subPath as a directory.
                if !p.exists() {
                    let _ = std::fs::create_dir_all(&p);
                }
                p
            }
            None => dir,
        };
        mounts.push(cri::Mount {
            container_path: vm.mount_path.clone(),
            host_path: host.display().to_string(),
            readonly: vm.read_only.unwrap_or(false)
                || volume.persistent_volume_claim.as_ref().and_then(|c| c.read_only).unwrap_or(false)
                || is_api_data(volume),
            ..Default::default()
        });
    }
    Ok(mounts)
}

/// Whether `volume` holds API data the agent writes (`configMap`, `secret`, `downwardAPI`,
/// `projected`): containers get it read-only whatever the mount says, as kubelet mounts these
/// plugins (their volume attributes are read-only).
pub fn is_api_data(volume: &Volume) -> bool {
    volume.config_map.is_some() || volume.secret.is_some() || volume.downward_api.is_some() || volume.projected.is_some()
}

/// Rewrites the file-backed volumes of `pod` (ConfigMaps, Secrets,
/// downward API, projected) from their sources now, so updates reach
/// running containers; returns the volumes that failed.
pub async fn refresh(client: &kube::Client, root: &Path, pod: &Pod, dw: &DownwardValues) -> Vec<MountError> {
    let volumes = pod.spec.as_ref().and_then(|s| s.volumes.as_deref()).unwrap_or_default();
    let mut errors = Vec::new();
    for v in volumes.iter().filter(|v| v.config_map.is_some() || v.secret.is_some() || v.downward_api.is_some() || v.projected.is_some()) {
        // Only volumes already set up (a container uses them) are refreshed.
        let Some((plugin, _)) = file_plugin(v) else { continue };
        if !volume_dir(root, pod.metadata.uid.as_deref().unwrap_or_default(), plugin, &v.name).exists() {
            continue;
        }
        if let Err(message) = prepare(client, root, pod, v, dw).await {
            errors.push(MountError { volume: v.name.clone(), message });
        }
    }
    errors
}

/// Whether `pod` has volumes [`refresh`] rewrites.
pub fn has_file_volumes(pod: &Pod) -> bool {
    pod.spec.as_ref().and_then(|s| s.volumes.as_ref()).is_some_and(|vs| vs.iter().any(|v| file_plugin(v).is_some()))
}

/// The plugin directory name and default mode of a file-backed volume.
fn file_plugin(v: &Volume) -> Option<(&'static str, u32)> {
    let mode = |m: Option<i32>| m.and_then(|m| u32::try_from(m).ok()).unwrap_or(DEFAULT_MODE);
    if let Some(c) = &v.config_map {
        Some(("configmap", mode(c.default_mode)))
    } else if let Some(s) = &v.secret {
        Some(("secret", mode(s.default_mode)))
    } else if let Some(d) = &v.downward_api {
        Some(("downward-api", mode(d.default_mode)))
    } else {
        v.projected.as_ref().map(|p| ("projected", mode(p.default_mode)))
    }
}

/// Sets up `volume` and returns its host path. Errors: why it cannot be.
async fn prepare(client: &kube::Client, root: &Path, pod: &Pod, volume: &Volume, dw: &DownwardValues) -> Result<PathBuf, String> {
    let uid = pod.metadata.uid.as_deref().unwrap_or_default();
    if let Some(e) = &volume.empty_dir {
        let dir = volume_dir(root, uid, "empty-dir", &volume.name);
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        if e.medium.as_deref() == Some("Memory") {
            mount_tmpfs(&dir, e.size_limit.as_ref().map(|q| q.0.as_str()))?;
        }
        return Ok(dir);
    }
    if let Some(h) = &volume.host_path {
        return host_path(&h.path, h.type_.as_deref().unwrap_or(""));
    }
    if let Some(c) = &volume.persistent_volume_claim {
        let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
        return claim_path(client, ns, &c.claim_name).await;
    }
    let Some((plugin, default_mode)) = file_plugin(volume) else {
        return Err(format!("volume type of {:?} is not supported by rkube's node agent yet", volume.name));
    };
    let dir = volume_dir(root, uid, plugin, &volume.name);
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let mut files: BTreeMap<String, FileData> = BTreeMap::new();
    if let Some(c) = &volume.config_map {
        object_files(client, ns, "config", &c.name, c.items.as_deref(), c.optional.unwrap_or(false), default_mode, &mut files).await?;
    } else if let Some(s) = &volume.secret {
        let name = s.secret_name.clone().unwrap_or_default();
        object_files(client, ns, "secret", &name, s.items.as_deref(), s.optional.unwrap_or(false), default_mode, &mut files).await?;
    } else if let Some(d) = &volume.downward_api {
        downward_files(pod, d.items.as_deref().unwrap_or_default(), default_mode, dw, &mut files)?;
    } else if let Some(p) = &volume.projected {
        for source in p.sources.as_deref().unwrap_or_default() {
            project(client, pod, ns, source, default_mode, &dir, dw, &mut files).await?;
        }
    }
    atomic_writer::write(&dir, &files).map_err(|e| e.to_string())?;
    Ok(dir)
}

/// Mounts a tmpfs on `dir` (once) when running as root.
fn mount_tmpfs(dir: &Path, size_limit: Option<&str>) -> Result<(), String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        tracing::warn!(dir = %dir.display(), "not running as root: the Memory emptyDir is a plain directory");
        return Ok(());
    }
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let path = dir.display().to_string();
    if mounts.lines().any(|l| l.split(' ').nth(4) == Some(path.as_str())) {
        return Ok(());
    }
    let bytes = size_limit.and_then(rkube_scheduler::resources::parse_milli).map(|m| m / 1000);
    let options = bytes.map(|b| format!("size={b}")).unwrap_or_default();
    let c = |s: &str| std::ffi::CString::new(s).map_err(|e| e.to_string());
    let (src, target, fstype, data) = (c("tmpfs")?, c(&path)?, c("tmpfs")?, c(&options)?);
    // SAFETY: every pointer is a valid NUL-terminated string living across the call.
    let rc = unsafe { libc::mount(src.as_ptr(), target.as_ptr(), fstype.as_ptr(), 0, data.as_ptr().cast()) };
    if rc != 0 {
        return Err(format!("mounting tmpfs on {path}: {}", std::io::Error::last_os_error()));
    }
    Ok(())
}

/// Unmounts the Memory emptyDirs of a pod and removes its volume
/// directories (when the pod is gone; the containers' bind mounts lived in
/// their own mount namespaces).
pub fn clean_up(root: &Path, pod_uid: &str) {
    let pod_dir = root.join("pods").join(pod_uid);
    let empty = pod_dir.join("volumes").join("kubernetes.io~empty-dir");
    if let Ok(entries) = std::fs::read_dir(&empty) {
        for e in entries.flatten() {
            if let Ok(c) = std::ffi::CString::new(e.path().display().to_string()) {
                // SAFETY: `c` is a valid NUL-terminated path; a directory that is no mount point just fails.
                unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
            }
        }
    }
    let _ = std::fs::remove_dir_all(&pod_dir);
}

/// The host path of claim `namespace/name`: fetched with its volume, then [`bound_volume_path`].
async fn claim_path(client: &kube::Client, namespace: &str, name: &str) -> Result<PathBuf, String> {
    let claims: kube::Api<PersistentVolumeClaim> = kube::Api::namespaced(client.clone(), namespace);
    let claim = claims.get_opt(name).await.map_err(|e| format!("error processing PVC {namespace}/{name}: {e}"))?;
    let volume_name = claim.as_ref().and_then(|c| c.spec.as_ref()).and_then(|s| s.volume_name.clone()).unwrap_or_default();
    let pv = if volume_name.is_empty() {
        None
    } else {
        let pvs: kube::Api<PersistentVolume> = kube::Api::all(client.clone());
        pvs.get_opt(&volume_name).await.map_err(|e| format!("error processing PVC {namespace}/{name}: {e}"))?
    };
    bound_volume_path(namespace, name, claim.as_ref(), pv.as_ref())
}

/// The host path behind claim `namespace/name` (`claim`, and `pv`, the
/// volume its `spec.volumeName` names), as kubelet's volume manager resolves
/// it: a `hostPath` volume's path after its type check, or a `local`
/// volume's path, which must exist. Errors (kubelet's words): the claim is
/// missing, not bound (no `volumeName` or phase not `Bound`), its volume is
/// missing, or the volume's type is one rkube cannot mount.
pub fn bound_volume_path(
    namespace: &str,
    name: &str,
    claim: Option<&PersistentVolumeClaim>,
    pv: Option<&PersistentVolume>,
) -> Result<PathBuf, String> {
    let claim = claim.ok_or_else(|| format!("error processing PVC {namespace}/{name}: persistentvolumeclaim {name:?} not found"))?;
    let volume_name = claim.spec.as_ref().and_then(|s| s.volume_name.as_deref()).unwrap_or("");
    let phase = claim.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("");
    if volume_name.is_empty() || phase != "Bound" {
        return Err(format!("error processing PVC {namespace}/{name}: PVC is not bound"));
    }
    let pv = pv.ok_or_else(|| format!("error processing PVC {namespace}/{name}: persistentvolume {volume_name:?} not found"))?;
    let spec = pv.spec.as_ref();
    if let Some(h) = spec.and_then(|s| s.host_path.as_ref()) {
        return host_path(&h.path, h.type_.as_deref().unwrap_or(""));
    }
    if let Some(l) = spec.and_then(|s| s.local.as_ref()) {
        let path = PathBuf::from(&l.path);
        if !path.exists() {
            return Err(format!("path {:?} does not exist", l.path));
        }
        return Ok(path);
    }
    Err(format!("PersistentVolume {volume_name:?} is not a hostPath or local volume, the only kinds rkube's node agent mounts"))
}

/// A hostPath volume's path after its `type` check (upstream's
/// `checkType`); `DirectoryOrCreate` and `FileOrCreate` create it.
fn host_path(path: &str, type_: &str) -> Result<PathBuf, String> {
    use std::os::unix::fs::FileTypeExt as _;
    let p = PathBuf::from(path);
    let meta = std::fs::metadata(&p);
    let fail = |what: &str| Err(format!("hostPath type check failed: {path} is not a {what}"));
    match type_ {
        "" => {}
        "DirectoryOrCreate" => {
            if meta.is_err() {
                std::fs::create_dir_all(&p).map_err(|e| e.to_string())?;
                use std::os::unix::fs::PermissionsExt as _;
                let _ = std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755));
            } else if !meta.as_ref().is_ok_and(|m| m.is_dir()) {
                return fail("directory");
            }
        }
        "FileOrCreate" => {
            if meta.is_err() {
                std::fs::OpenOptions::new().create(true).append(true).open(&p).map_err(|e| e.to_string())?;
            } else if !meta.as_ref().is_ok_and(|m| m.is_file()) {
                return fail("file");
            }
        }
        "Directory" if !meta.as_ref().is_ok_and(|m| m.is_dir()) => return fail("directory"),
        "File" if !meta.as_ref().is_ok_and(|m| m.is_file()) => return fail("file"),
        "Socket" if !meta.as_ref().is_ok_and(|m| m.file_type().is_socket()) => return fail("socket file"),
        "CharDevice" if !meta.as_ref().is_ok_and(|m| m.file_type().is_char_device()) => return fail("character device"),
        "BlockDevice" if !meta.as_ref().is_ok_and(|m| m.file_type().is_block_device()) => return fail("block device"),
        "Directory" | "File" | "Socket" | "CharDevice" | "BlockDevice" => {}
        other => return Err(format!("invalid HostPathType {other:?}")),
    }
    Ok(p)
}

/// Mode of an item: its own `mode`, else the volume's default.
fn item_mode(mode: Option<i32>, default_mode: u32) -> u32 {
    mode.and_then(|m| u32::try_from(m).ok()).unwrap_or(default_mode)
}

/// The files of a ConfigMap (`kind` `config`) or Secret (`kind` `secret`)
/// volume or projection: its `items`, or every key.
#[allow(clippy::too_many_arguments)]
async fn object_files(
    client: &kube::Client,
    ns: &str,
    kind: &str,
    name: &str,
    items: Option<&[KeyToPath]>,
    optional: bool,
    default_mode: u32,
    files: &mut BTreeMap<String, FileData>,
) -> Result<(), String> {
    let (data, what) = if kind == "secret" {
        (super::env::secret_data(client, ns, name).await, "secret")
    } else {
        (super::env::config_map_data(client, ns, name).await, "configmap")
    };
    match data.map_err(|e| e.to_string())? {
        Some(data) => select(items, data, optional, default_mode, kind, files),
        None if optional => Ok(()),
        None => Err(format!("{what} {name:?} not found")),
    }
}

/// The files of a downward API volume (or projection): `fieldRef`s of the
/// pod's metadata and `resourceFieldRef`s of its containers.
fn downward_files(
    pod: &Pod,
    items: &[k8s_openapi::api::core::v1::DownwardAPIVolumeFile],
    default_mode: u32,
    dw: &DownwardValues,
    files: &mut BTreeMap<String, FileData>,
) -> Result<(), String> {
    for item in items {
        let value = if let Some(f) = &item.field_ref {
            super::env::field_value(pod, &f.field_path, dw).map_err(|e| e.0)?
        } else if let Some(r) = &item.resource_field_ref {
            let name = r.container_name.clone().unwrap_or_default();
            let c = pod
                .spec
                .as_ref()
                .and_then(|s| s.containers.iter().find(|c| c.name == name))
                .ok_or_else(|| format!("container {name:?} not found in pod"))?;
            super::env::resource_value(c, &r.resource, r.divisor.as_ref().map(|q| q.0.as_str()), dw).map_err(|e| e.0)?
        } else {
            continue;
        };
        files.insert(item.path.clone(), FileData { bytes: value.into_bytes(), mode: item_mode(item.mode, default_mode) });
    }
    Ok(())
}

/// Adds the files of one projection `source` to `files`.
#[allow(clippy::too_many_arguments)]
async fn project(
    client: &kube::Client,
    pod: &Pod,
    ns: &str,
    source: &VolumeProjection,
    default_mode: u32,
    dir: &Path,
    dw: &DownwardValues,
    files: &mut BTreeMap<String, FileData>,
) -> Result<(), String> {
    if let Some(t) = &source.service_account_token {
        let lifetime = t.expiration_seconds.unwrap_or(3600);
        let token = match current_token(dir, &t.path, lifetime) {
            Some(kept) => kept,
            None => request_token(client, pod, ns, t.audience.as_deref(), lifetime).await?,
        };
        files.insert(t.path.clone(), FileData { bytes: token, mode: default_mode });
    }
    if let Some(cm) = &source.config_map {
        object_files(client, ns, "config", &cm.name, cm.items.as_deref(), cm.optional.unwrap_or(false), default_mode, files).await?;
    }
    if let Some(s) = &source.secret {
        object_files(client, ns, "secret", &s.name, s.items.as_deref(), s.optional.unwrap_or(false), default_mode, files).await?;
    }
    if let Some(d) = &source.downward_api {
        downward_files(pod, d.items.as_deref().unwrap_or_default(), default_mode, dw, files)?;
    }
    if let Some(b) = &source.cluster_trust_bundle {
        let bytes = super::trust_bundles::project(client, b).await?;
        files.insert(b.path.clone(), FileData { bytes, mode: default_mode });
    }
    Ok(())
}

/// The token already in the volume, while it is younger than 80% of its
/// `lifetime` (seconds; kubelet's token manager rotates then).
fn current_token(dir: &Path, path: &str, lifetime: i64) -> Option<Vec<u8>> {
    let file = dir.join(atomic_writer::DATA_DIR).join(path);
    let age = SystemTime::now().duration_since(std::fs::metadata(&file).ok()?.modified().ok()?).ok()?;
    let keep = Duration::from_secs(u64::try_from(lifetime).unwrap_or(0) * 8 / 10);
    (age < keep).then(|| std::fs::read(&file).ok()).flatten()
}

/// A TokenRequest for the pod's ServiceAccount, bound to the pod.
async fn request_token(client: &kube::Client, pod: &Pod, ns: &str, audience: Option<&str>, lifetime: i64) -> Result<Vec<u8>, String> {
    let sa = pod.spec.as_ref().and_then(|s| s.service_account_name.as_deref()).unwrap_or("default");
    let mut spec = json!({
        "expirationSeconds": lifetime,
        "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": pod.metadata.name, "uid": pod.metadata.uid},
    });
    if let Some(aud) = audience.filter(|a| !a.is_empty()) {
        spec["audiences"] = json!([aud]);
    }
    let body = serde_json::to_vec(&json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}))
        .map_err(|e| e.to_string())?;
    let req = kube::core::Request::new(format!("/api/v1/namespaces/{ns}/serviceaccounts"))
        .create_subresource("token", sa, &kube::api::PostParams::default(), body)
        .map_err(|e| e.to_string())?;
    let answer: Value = client.request(req).await.map_err(|e| e.to_string())?;
    let token = answer.pointer("/status/token").and_then(Value::as_str).ok_or("no token in the TokenRequest answer")?;
    Ok(token.as_bytes().to_vec())
}

/// The `items` of a ConfigMap or Secret (`key` → `path`, `mode`), or every
/// key when none are listed. Errors: a listed key that is missing, unless
/// `optional` (upstream's `configmap references non-existent config key: k`,
/// with `kind` `config` or `secret`).
fn select(
    items: Option<&[KeyToPath]>,
    data: BTreeMap<String, Vec<u8>>,
    optional: bool,
    default_mode: u32,
    kind: &str,
    files: &mut BTreeMap<String, FileData>,
) -> Result<(), String> {
    match items {
        Some(items) if !items.is_empty() => {
            for item in items {
                match data.get(&item.key) {
                    Some(v) => {
                        files.insert(item.path.clone(), FileData { bytes: v.clone(), mode: item_mode(item.mode, default_mode) });
                    }
                    None if optional => {}
                    None if kind == "secret" => return Err(format!("references non-existent secret key: {}", item.key)),
                    None => return Err(format!("configmap references non-existent {kind} key: {}", item.key)),
                }
            }
        }
        _ => files.extend(data.into_iter().map(|(k, bytes)| (k, FileData { bytes, mode: default_mode }))),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn volumes_live_in_kubelets_layout() {
        let d = projected_dir(Path::new("/var/lib/kubelet"), "u-1", "kube-api-access-abcde");
        assert_eq!(d, PathBuf::from("/var/lib/kubelet/pods/u-1/volumes/kubernetes.io~projected/kube-api-access-abcde"));
        let e = volume_dir(Path::new("/r"), "u", "empty-dir", "cache");
        assert_eq!(e, PathBuf::from("/r/pods/u/volumes/kubernetes.io~empty-dir/cache"));
    }

    #[test]
    fn listed_items_are_selected_with_their_modes_and_missing_keys_fail_unless_optional() {
        let data: BTreeMap<String, Vec<u8>> = [("ca.crt".to_string(), b"PEM".to_vec()), ("x".to_string(), b"1".to_vec())].into();
        let items = vec![KeyToPath { key: "ca.crt".into(), path: "certs/ca.crt".into(), mode: Some(0o400) }];
        let mut files = BTreeMap::new();
        select(Some(&items), data.clone(), false, DEFAULT_MODE, "config", &mut files).unwrap();
        assert_eq!(files.keys().collect::<Vec<_>>(), ["certs/ca.crt"]);
        assert_eq!(files["certs/ca.crt"].mode, 0o400);
        let missing = vec![KeyToPath { key: "nope".into(), path: "n".into(), mode: None }];
        assert!(select(Some(&missing), data.clone(), false, DEFAULT_MODE, "config", &mut BTreeMap::new()).is_err());
        assert!(select(Some(&missing), data.clone(), true, DEFAULT_MODE, "config", &mut BTreeMap::new()).is_ok());
        let mut all = BTreeMap::new();
        select(None, data, false, 0o600, "config", &mut all).unwrap();
        assert_eq!(all.len(), 2);
        assert!(all.values().all(|f| f.mode == 0o600));
    }

    #[test]
    fn host_paths_are_checked_or_created_by_type() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("made");
        assert_eq!(host_path(dir.to_str().unwrap(), "DirectoryOrCreate").unwrap(), dir);
        assert!(dir.is_dir());
        let file = tmp.path().join("f");
        host_path(file.to_str().unwrap(), "FileOrCreate").unwrap();
        assert!(file.is_file());
        let err = host_path(file.to_str().unwrap(), "Directory").unwrap_err();
        assert_eq!(err, format!("hostPath type check failed: {} is not a directory", file.display()));
        assert!(host_path("/nonexistent/x", "File").is_err());
        assert!(host_path("/nonexistent/x", "").is_ok());
        assert!(host_path("/tmp", "Bogus").is_err());
    }

    #[test]
    fn a_claim_resolves_to_its_bound_host_path_or_local_volume() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("vol");
        let claim = |volume: &str, phase: &str| -> PersistentVolumeClaim {
            serde_json::from_value(json!({"metadata": {"name": "data"}, "spec": {"volumeName": volume}, "status": {"phase": phase}})).unwrap()
        };
        let pv = |source: Value| -> PersistentVolume { serde_json::from_value(json!({"metadata": {"name": "pv1"}, "spec": source})).unwrap() };
        let host = pv(json!({"hostPath": {"path": path.to_str().unwrap(), "type": "DirectoryOrCreate"}}));
        assert_eq!(bound_volume_path("ns", "data", Some(&claim("pv1", "Bound")), Some(&host)).unwrap(), path);
        assert!(path.is_dir(), "DirectoryOrCreate creates the directory");
        let local = pv(json!({"local": {"path": path.to_str().unwrap()}}));
        assert_eq!(bound_volume_path("ns", "data", Some(&claim("pv1", "Bound")), Some(&local)).unwrap(), path);
        assert_eq!(
            bound_volume_path("ns", "data", Some(&claim("", "Pending")), None).unwrap_err(),
            "error processing PVC ns/data: PVC is not bound"
        );
        assert_eq!(
            bound_volume_path("ns", "data", None, None).unwrap_err(),
            "error processing PVC ns/data: persistentvolumeclaim \"data\" not found"
        );
        let nfs = pv(json!({"nfs": {"server": "x", "path": "/"}}));
        assert!(bound_volume_path("ns", "data", Some(&claim("pv1", "Bound")), Some(&nfs)).unwrap_err().contains("not a hostPath or local volume"));
    }

    #[test]
    fn a_young_token_is_kept_and_an_old_one_rotated() {
        let tmp = tempfile::tempdir().unwrap();
        let files: BTreeMap<String, FileData> = [("token".to_string(), FileData { bytes: b"jwt".to_vec(), mode: 0o644 })].into();
        atomic_writer::write(tmp.path(), &files).unwrap();
        assert_eq!(current_token(tmp.path(), "token", 3607), Some(b"jwt".to_vec()));
        assert_eq!(current_token(tmp.path(), "token", 0), None);
        assert_eq!(current_token(tmp.path(), "other", 3607), None);
    }
}
