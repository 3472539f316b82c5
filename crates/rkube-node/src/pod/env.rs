//! A container's environment, command and args as kubelet makes them
//! (upstream `pkg/kubelet/kubelet_pods.go` `makeEnvironmentVariables`,
//! `third_party/forked/golang/expansion`): `envFrom` sources, then `env`
//! entries (`value` with `$(VAR)` expansion, or `valueFrom` a ConfigMap
//! key, a Secret key, a pod field or a container resource), later names
//! replacing earlier ones; then `$(VAR)` expansion of command and args.
//!
//! A missing ConfigMap, Secret or key that is not `optional` is a
//! [`ConfigError`], which kubelet reports as the container waiting with
//! reason `CreateContainerConfigError` and the error as message.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::{ConfigMap, Container, Pod, Secret};
use kube::api::Api;
use rkube_runtime::cri;

use super::cri_config::DownwardValues;

/// Why a container's configuration cannot be made; the message is
/// upstream's (`configmap "x" not found`, `couldn't find key k in ConfigMap ns/x`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

/// What a resolution read from the API: ConfigMaps' `data` and Secrets'
/// decoded `data`, by name (`None`: not found).
#[derive(Debug, Default, Clone)]
pub struct Sources {
    config_maps: HashMap<String, Option<BTreeMap<String, String>>>,
    secrets: HashMap<String, Option<BTreeMap<String, String>>>,
}

impl Sources {
    /// Reads every ConfigMap and Secret `container`'s `env` and `envFrom`
    /// name, in `namespace`. Errors: the API server's, except 404 (recorded
    /// as not found).
    pub async fn fetch(client: &kube::Client, namespace: &str, container: &Container) -> Result<Sources, kube::Error> {
        let mut out = Sources::default();
        let text = |d: BTreeMap<String, Vec<u8>>| d.into_iter().map(|(k, v)| (k, String::from_utf8_lossy(&v).into_owned())).collect();
        let (cm_names, secret_names) = referenced(container);
        for name in cm_names {
            let data = config_map_data(client, namespace, &name).await?.map(text);
            out.config_maps.insert(name, data);
        }
        for name in secret_names {
            let data = secret_data(client, namespace, &name).await?.map(text);
            out.secrets.insert(name, data);
        }
        Ok(out)
    }

    /// Sources given directly (tests): ConfigMaps and Secrets by name.
    pub fn from_maps(
        config_maps: impl IntoIterator<Item = (String, BTreeMap<String, String>)>,
        secrets: impl IntoIterator<Item = (String, BTreeMap<String, String>)>,
    ) -> Sources {
        Sources {
            config_maps: config_maps.into_iter().map(|(k, v)| (k, Some(v))).collect(),
            secrets: secrets.into_iter().map(|(k, v)| (k, Some(v))).collect(),
        }
    }

    fn config_map(&self, name: &str) -> Option<&BTreeMap<String, String>> {
        self.config_maps.get(name).and_then(Option::as_ref)
    }

    fn secret(&self, name: &str) -> Option<&BTreeMap<String, String>> {
        self.secrets.get(name).and_then(Option::as_ref)
    }
}

/// A ConfigMap's `data` and `binaryData` as bytes by key (`None`: not
/// found). Errors: the API server's, except 404.
pub async fn config_map_data(client: &kube::Client, ns: &str, name: &str) -> Result<Option<BTreeMap<String, Vec<u8>>>, kube::Error> {
    let found = Api::<ConfigMap>::namespaced(client.clone(), ns).get_opt(name).await?;
    Ok(found.map(|c| {
        let mut data: BTreeMap<String, Vec<u8>> = c.data.unwrap_or_default().into_iter().map(|(k, v)| (k, v.into_bytes())).collect();
        data.extend(c.binary_data.unwrap_or_default().into_iter().map(|(k, v)| (k, v.0)));
        data
    }))
}

/// A Secret's `data` (and `stringData`, should a stored one carry it) by
/// key (`None`: not found). Errors: the API server's, except 404.
pub async fn secret_data(client: &kube::Client, ns: &str, name: &str) -> Result<Option<BTreeMap<String, Vec<u8>>>, kube::Error> {
    let found = Api::<Secret>::namespaced(client.clone(), ns).get_opt(name).await?;
    Ok(found.map(|s| {
        let mut data: BTreeMap<String, Vec<u8>> = s.data.unwrap_or_default().into_iter().map(|(k, v)| (k, v.0)).collect();
        data.extend(s.string_data.unwrap_or_default().into_iter().map(|(k, v)| (k, v.into_bytes())));
        data
    }))
}

/// The ConfigMap and Secret names a container's environment reads.
fn referenced(c: &Container) -> (Vec<String>, Vec<String>) {
    let (mut cms, mut secrets) = (Vec::new(), Vec::new());
    for from in c.env_from.iter().flatten() {
        if let Some(r) = &from.config_map_ref {
            cms.push(r.name.clone());
        }
        if let Some(r) = &from.secret_ref {
            secrets.push(r.name.clone());
        }
    }
    for e in c.env.iter().flatten() {
        let Some(v) = &e.value_from else { continue };
        if let Some(r) = &v.config_map_key_ref {
            cms.push(r.name.clone());
        }
        if let Some(r) = &v.secret_key_ref {
            secrets.push(r.name.clone());
        }
    }
    cms.sort();
    cms.dedup();
    secrets.sort();
    secrets.dedup();
    (cms, secrets)
}

/// Whether `name` is a valid environment variable name (upstream's
/// `IsEnvVarName`: `[-._a-zA-Z][-._a-zA-Z0-9]*`).
pub fn is_env_var_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || "-._".contains(c))
        && chars.all(|c| c.is_ascii_alphanumeric() || "-._".contains(c))
}

/// A container's environment: `(name, value)` pairs in order.
pub type Environment = Vec<(String, String)>;

/// `envFrom` keys skipped for not being variable names, per source, as
/// kubelet's `InvalidEnvironmentVariableNames` event words it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkippedKeys {
    /// `configMap` or `secret`.
    pub kind: &'static str,
    /// `<namespace>/<name>` of the source.
    pub source: String,
    /// The keys (with the prefix).
    pub keys: Vec<String>,
}

impl SkippedKeys {
    /// The event's message.
    pub fn message(&self) -> String {
        format!(
            "Keys [{}] from the EnvFrom {} {} were skipped since they are considered invalid environment variable names.",
            self.keys.join(", "),
            self.kind,
            self.source
        )
    }
}

/// The environment of `container` (ordered; a later definition of a name
/// replaces the value in place), and the `envFrom` keys skipped for not
/// being valid names.
pub fn environment(
    pod: &Pod,
    container: &Container,
    dw: &DownwardValues,
    sources: &Sources,
) -> Result<(Environment, Vec<SkippedKeys>), ConfigError> {
    let ns = pod.metadata.namespace.clone().unwrap_or_else(|| "default".into());
    let mut env: Vec<(String, String)> = Vec::new();
    let mut invalid = Vec::new();
    let set = |env: &mut Vec<(String, String)>, k: String, v: String| match env.iter_mut().find(|(n, _)| *n == k) {
        Some(slot) => slot.1 = v,
        None => env.push((k, v)),
    };
    for from in container.env_from.iter().flatten() {
        let prefix = from.prefix.clone().unwrap_or_default();
        let (kind, source, data) = if let Some(r) = &from.config_map_ref {
            match sources.config_map(&r.name) {
                Some(d) => ("configMap", &r.name, d),
                None if r.optional == Some(true) => continue,
                None => return Err(ConfigError(format!("configmap {:?} not found", r.name))),
            }
        } else if let Some(r) = &from.secret_ref {
            match sources.secret(&r.name) {
                Some(d) => ("secret", &r.name, d),
                None if r.optional == Some(true) => continue,
                None => return Err(ConfigError(format!("secret {:?} not found", r.name))),
            }
        } else {
            continue;
        };
        let mut skipped = Vec::new();
        for (k, v) in data {
            let name = format!("{prefix}{k}");
            if is_env_var_name(&name) {
                set(&mut env, name, v.clone());
            } else {
                skipped.push(name);
            }
        }
        if !skipped.is_empty() {
            invalid.push(SkippedKeys { kind, source: format!("{ns}/{source}"), keys: skipped });
        }
    }
    for e in container.env.iter().flatten() {
        let value = match (&e.value, &e.value_from) {
            (Some(v), _) => Some(expand(v, &env)),
            (None, Some(from)) => value_from(pod, container, from, dw, sources, &ns)?,
            (None, None) => Some(String::new()),
        };
        if let Some(v) = value {
            set(&mut env, e.name.clone(), v);
        }
    }
    Ok((env, invalid))
}

fn value_from(
    pod: &Pod,
    container: &Container,
    from: &k8s_openapi::api::core::v1::EnvVarSource,
    dw: &DownwardValues,
    sources: &Sources,
    ns: &str,
) -> Result<Option<String>, ConfigError> {
    if let Some(r) = &from.config_map_key_ref {
        let optional = r.optional == Some(true);
        let Some(data) = sources.config_map(&r.name) else {
            return if optional { Ok(None) } else { Err(ConfigError(format!("configmap {:?} not found", r.name))) };
        };
        return match data.get(&r.key) {
            Some(v) => Ok(Some(v.clone())),
            None if optional => Ok(None),
            None => Err(ConfigError(format!("couldn't find key {} in ConfigMap {ns}/{}", r.key, r.name))),
        };
    }
    if let Some(r) = &from.secret_key_ref {
        let optional = r.optional == Some(true);
        let Some(data) = sources.secret(&r.name) else {
            return if optional { Ok(None) } else { Err(ConfigError(format!("secret {:?} not found", r.name))) };
        };
        return match data.get(&r.key) {
            Some(v) => Ok(Some(v.clone())),
            None if optional => Ok(None),
            None => Err(ConfigError(format!("couldn't find key {} in Secret {ns}/{}", r.key, r.name))),
        };
    }
    if let Some(f) = &from.field_ref {
        return field_value(pod, &f.field_path, dw).map(Some);
    }
    if let Some(r) = &from.resource_field_ref {
        let target = match r.container_name.as_deref().filter(|n| !n.is_empty()) {
            Some(name) => pod
                .spec
                .as_ref()
                .and_then(|s| s.containers.iter().chain(s.init_containers.iter().flatten()).find(|c| c.name == name))
                .ok_or_else(|| ConfigError(format!("container {name} not found")))?,
            None => container,
        };
        return resource_value(target, &r.resource, r.divisor.as_ref().map(|q| q.0.as_str()), dw).map(Some);
    }
    Ok(None)
}

/// A downward API field of the pod (upstream's `podFieldSelectorRuntimeValue`
/// and `ExtractFieldPathAsString`). Errors: a path kubelet does not support.
pub fn field_value(pod: &Pod, path: &str, dw: &DownwardValues) -> Result<String, ConfigError> {
    let m = &pod.metadata;
    let subscript = |prefix: &str| path.strip_prefix(prefix).and_then(|r| r.strip_prefix("['")).and_then(|r| r.strip_suffix("']"));
    let map_text = |map: &Option<BTreeMap<String, String>>| {
        map.iter().flatten().map(|(k, v)| format!("{k}={v:?}")).collect::<Vec<_>>().join("\n")
    };
    let spec = pod.spec.as_ref();
    let v = match path {
        "metadata.name" => m.name.clone().unwrap_or_default(),
        "metadata.namespace" => m.namespace.clone().unwrap_or_default(),
        "metadata.uid" => m.uid.clone().unwrap_or_default(),
        "metadata.labels" => map_text(&m.labels),
        "metadata.annotations" => map_text(&m.annotations),
        "spec.nodeName" => dw.node_name.clone(),
        "spec.serviceAccountName" => spec.and_then(|s| s.service_account_name.clone()).unwrap_or_default(),
        "status.hostIP" | "status.hostIPs" => dw.host_ip.clone(),
        "status.podIP" | "status.podIPs" => dw.pod_ip.clone(),
        _ => {
            if let Some(k) = subscript("metadata.labels") {
                m.labels.as_ref().and_then(|l| l.get(k)).cloned().unwrap_or_default()
            } else if let Some(k) = subscript("metadata.annotations") {
                m.annotations.as_ref().and_then(|a| a.get(k)).cloned().unwrap_or_default()
            } else {
                return Err(ConfigError(format!("unsupported fieldPath: {path}")));
            }
        }
    };
    Ok(v)
}

/// A container resource as an env value (upstream's
/// `ExtractContainerResourceValue`): the quantity divided by `divisor`
/// (default 1) and rounded up; an unset limit is the node's allocatable.
pub fn resource_value(c: &Container, resource: &str, divisor: Option<&str>, dw: &DownwardValues) -> Result<String, ConfigError> {
    let res = c.resources.as_ref();
    let (list, name) = match resource.split_once('.') {
        Some(("limits", n)) => (res.and_then(|r| r.limits.as_ref()), n),
        Some(("requests", n)) => (res.and_then(|r| r.requests.as_ref()), n),
        _ => return Err(ConfigError(format!("unsupported container resource : {resource:?}"))),
    };
    let quantity = list.and_then(|l| l.get(name)).map(|q| q.0.clone());
    let milli = match quantity {
        Some(q) => rkube_scheduler::resources::parse_milli(&q),
        None if resource.starts_with("limits.") => dw.allocatable.get(name).copied(),
        None => Some(0),
    }
    .unwrap_or(0);
    let divisor = rkube_scheduler::resources::parse_milli(divisor.unwrap_or("1")).filter(|d| *d > 0).unwrap_or(1000);
    // Both are in thousandths: the ratio rounds up to a whole number.
    let value = (milli + divisor - 1).div_euclid(divisor);
    Ok(value.to_string())
}

/// Expands `$(NAME)` from `env` in `s`, as upstream's `expansion.Expand`:
/// `$$` is a literal `$`, an unknown `$(NAME)` stays as written, and a
/// `$` not followed by `(` or `$` stays.
pub fn expand(s: &str, env: &[(String, String)]) -> String {
    let b = s.as_bytes();
    let mut out = String::with_capacity(s.len());
    let mut i = 0;
    let mut last = 0;
    while i < b.len() {
        if b[i] == b'$' && i + 1 < b.len() {
            match b[i + 1] {
                b'$' => {
                    out.push_str(&s[last..i]);
                    out.push('$');
                    i += 2;
                    last = i;
                    continue;
                }
                b'(' => {
                    if let Some(end) = s[i + 2..].find(')') {
                        let name = &s[i + 2..i + 2 + end];
                        out.push_str(&s[last..i]);
                        match env.iter().rev().find(|(k, _)| k == name) {
                            Some((_, v)) => out.push_str(v),
                            None => out.push_str(&s[i..i + 3 + end]),
                        }
                        i += 3 + end;
                        last = i;
                        continue;
                    }
                }
                _ => {}
            }
        }
        i += 1;
    }
    out.push_str(&s[last..]);
    out
}

/// The CRI environment, command and args of `container`.
pub fn cri_parts(env: &[(String, String)], container: &Container) -> (Vec<cri::KeyValue>, Vec<String>, Vec<String>) {
    let kvs = env.iter().map(|(k, v)| cri::KeyValue { key: k.clone(), value: v.clone() }).collect();
    let command = container.command.iter().flatten().map(|s| expand(s, env)).collect();
    let args = container.args.iter().flatten().map(|s| expand(s, env)).collect();
    (kvs, command, args)
}

#[cfg(test)]
mod tests;
