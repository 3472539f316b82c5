//! Admission plugins: what changes or refuses an object between decoding
//! and storage (upstream `plugin/pkg/admission`): [`service_account`]
//! (`ServiceAccount`), [`default_toleration_seconds`]
//! (`DefaultTolerationSeconds`), [`limit_ranger`] (`LimitRanger`),
//! [`priority`] (`Priority`), [`default_storage_class`]
//! (`DefaultStorageClass`) and [`resource_quota`] (`ResourceQuota`);
//! namespace lifecycle checks are
//! part of every create ([`crate::handlers::create`]). Admission webhooks
//! ([`webhook`]: `MutatingAdmissionWebhook`, `ValidatingAdmissionWebhook`)
//! always run, as they are on by default upstream, and so does
//! [`cluster_trust_bundle_attest`] (`ClusterTrustBundleAttest`).
//!
//! `--enable-admission-plugins` and `--disable-admission-plugins` take
//! upstream's plugin names; all six are on by default in `rkube apiserver` and
//! `rkube up`, as in kube-apiserver. A library user's
//! [`crate::ServerConfig::default`] enables none: it runs no serviceaccount
//! controller to create the `default` ServiceAccounts the plugin requires.

pub mod cluster_trust_bundle_attest;
pub mod default_storage_class;
pub mod default_toleration_seconds;
pub mod limit_ranger;
pub mod policy;
pub mod priority;
pub mod resource_quota;
pub mod service_account;
pub mod webhook;

/// The plugin name of [`service_account`].
pub const SERVICE_ACCOUNT: &str = "ServiceAccount";

/// The plugin name of [`default_toleration_seconds`].
pub const DEFAULT_TOLERATION_SECONDS: &str = "DefaultTolerationSeconds";

/// The plugin name of [`limit_ranger`].
pub const LIMIT_RANGER: &str = "LimitRanger";

/// The plugin name of [`resource_quota`].
pub const RESOURCE_QUOTA: &str = "ResourceQuota";

/// The plugin name of [`priority`].
pub const PRIORITY: &str = "Priority";

/// The plugin name of [`default_storage_class`].
pub const DEFAULT_STORAGE_CLASS: &str = "DefaultStorageClass";

/// Plugins rkube implements.
pub const PLUGINS: &[&str] = &[SERVICE_ACCOUNT, DEFAULT_TOLERATION_SECONDS, LIMIT_RANGER, PRIORITY, DEFAULT_STORAGE_CLASS, RESOURCE_QUOTA];

/// An admission plugin's 403: `<resource>[.<group>] "<name>" is forbidden:
/// <message>` (without the name when it is empty), with the name, group and
/// resource in `details` (upstream `admission.NewForbidden`).
pub(crate) fn forbidden(group: &str, resource: &str, name: &str, message: &str) -> crate::error::ApiError {
    let qualified = if group.is_empty() { resource.to_string() } else { format!("{resource}.{group}") };
    let what = if name.is_empty() { qualified } else { format!("{qualified} {}", rkube_api::field_error::go_quote(name)) };
    rkube_api::status::Status::new(403, "Forbidden", format!("{what} is forbidden: {message}"))
        .with_details(rkube_api::status::StatusDetails {
            name: name.to_string(),
            group: group.to_string(),
            kind: resource.to_string(),
            ..Default::default()
        })
        .into()
}

/// Every object of the cluster-scoped `group`/`version` `resource` from the
/// watch cache (a resourceVersion="0" LIST), as `(name, object)` sorted by
/// name; from storage while the cache is (re)initializing (KEP-4568), so
/// admission does not refuse writes then. Errors: 500 when the resource is
/// not served; the cache's or storage's own Status otherwise.
pub(crate) async fn cached_objects(
    st: &crate::state::ApiState,
    group: &str,
    version: &str,
    resource: &str,
) -> crate::error::ApiResult<Vec<(String, serde_json::Value)>> {
    let info = rkube_api::registry::lookup(group, version, resource)
        .ok_or_else(|| crate::error::ApiError::internal(format!("no {resource} resource")))?;
    let opts = rkube_api::list_options::ListOptions { resource_version: Some("0".into()), ..Default::default() };
    let mut objects: Vec<(String, serde_json::Value)> = match st.cache.list(info, None, &opts).await {
        Ok(page) => {
            page.items.iter().filter_map(|item| Some((item.name.clone(), serde_json::from_slice(&item.json).ok()?))).collect()
        }
        Err(e) if e.is_not_ready() => crate::source::stored_objects(st, info, None)
            .await?
            .into_iter()
            .filter_map(|obj| Some((obj.pointer("/metadata/name")?.as_str()?.to_string(), obj)))
            .collect(),
        Err(e) => return Err(e.into()),
    };
    objects.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(objects)
}

/// Which admission plugins run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AdmissionConfig {
    /// `ServiceAccount`: pods get a ServiceAccount and its token volume.
    pub service_account: bool,
    /// `DefaultTolerationSeconds`: the (not-ready, unreachable) seconds of
    /// the NoExecute tolerations new pods get; `None` when off.
    pub default_toleration_seconds: Option<(i64, i64)>,
    /// `ResourceQuota`: creates are checked against and charged to the
    /// namespace's ResourceQuotas.
    pub resource_quota: bool,
    /// `LimitRanger`: pods and claims get the namespace's LimitRange
    /// defaults and are checked against their bounds.
    pub limit_ranger: bool,
    /// `Priority`: pods get `spec.priority` from their PriorityClass.
    pub priority: bool,
    /// `DefaultStorageClass`: claims without a class get the default StorageClass.
    pub default_storage_class: bool,
}

/// kube-apiserver's admission flags; `#[command(flatten)]` them.
#[derive(clap::Args, Debug, Clone)]
pub struct AdmissionArgs {
    /// Admission plugins to enable besides the default ones (rkube implements: ServiceAccount, DefaultTolerationSeconds, LimitRanger, Priority, DefaultStorageClass, ResourceQuota, all on by default).
    #[arg(long = "enable-admission-plugins", value_delimiter = ',')]
    pub enable: Vec<String>,
    /// Admission plugins to disable although they are on by default (e.g. ServiceAccount).
    #[arg(long = "disable-admission-plugins", value_delimiter = ',')]
    pub disable: Vec<String>,
    /// Indicates the tolerationSeconds of the toleration for notReady:NoExecute that is
    /// added by default to every pod that does not already have such a toleration.
    #[arg(long = "default-not-ready-toleration-seconds", default_value_t = 300)]
    pub default_not_ready_toleration_seconds: i64,
    /// Indicates the tolerationSeconds of the toleration for unreachable:NoExecute that is
    /// added by default to every pod that does not already have such a toleration.
    #[arg(long = "default-unreachable-toleration-seconds", default_value_t = 300)]
    pub default_unreachable_toleration_seconds: i64,
}

impl Default for AdmissionArgs {
    fn default() -> Self {
        AdmissionArgs {
            enable: Vec::new(),
            disable: Vec::new(),
            default_not_ready_toleration_seconds: 300,
            default_unreachable_toleration_seconds: 300,
        }
    }
}

impl AdmissionArgs {
    /// The plugins to run: the defaults (all six), plus enabled,
    /// minus disabled. Errors name a plugin rkube does not implement, or one
    /// both enabled and disabled (as upstream refuses).
    pub fn load(&self) -> Result<AdmissionConfig, String> {
        let names = |v: &[String]| -> Vec<String> { v.iter().map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect() };
        let (enable, disable) = (names(&self.enable), names(&self.disable));
        for p in enable.iter().chain(disable.iter()) {
            if !PLUGINS.contains(&p.as_str()) {
                return Err(format!("admission plugin {p:?} is not implemented by rkube (it implements: {})", PLUGINS.join(", ")));
            }
        }
        if let Some(p) = enable.iter().find(|p| disable.contains(p)) {
            return Err(format!("{p} in --enable-admission-plugins and --disable-admission-plugins overlapped"));
        }
        let on = |name: &str| !disable.iter().any(|p| p == name);
        Ok(AdmissionConfig {
            service_account: on(SERVICE_ACCOUNT),
            default_toleration_seconds: on(DEFAULT_TOLERATION_SECONDS)
                .then_some((self.default_not_ready_toleration_seconds, self.default_unreachable_toleration_seconds)),
            resource_quota: on(RESOURCE_QUOTA),
            limit_ranger: on(LIMIT_RANGER),
            priority: on(PRIORITY),
            default_storage_class: on(DEFAULT_STORAGE_CLASS),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_account_is_on_unless_disabled_and_unknown_plugins_are_refused() {
        assert!(AdmissionArgs::default().load().unwrap().service_account);
        let off = AdmissionArgs { disable: vec!["ServiceAccount".into()], ..Default::default() };
        assert!(!off.load().unwrap().service_account);
        let unknown = AdmissionArgs { enable: vec!["NodeRestriction".into()], ..Default::default() };
        assert!(unknown.load().unwrap_err().contains("NodeRestriction"));
        let both = AdmissionArgs {
            enable: vec!["ServiceAccount".into()],
            disable: vec!["ServiceAccount".into()],
            ..Default::default()
        };
        assert!(both.load().unwrap_err().contains("overlapped"));
    }

    #[test]
    fn default_toleration_seconds_is_on_with_its_flags_unless_disabled() {
        assert_eq!(AdmissionArgs::default().load().unwrap().default_toleration_seconds, Some((300, 300)));
        let args = AdmissionArgs { default_unreachable_toleration_seconds: 30, ..Default::default() };
        assert_eq!(args.load().unwrap().default_toleration_seconds, Some((300, 30)));
        let off = AdmissionArgs { disable: vec!["DefaultTolerationSeconds".into()], ..Default::default() };
        assert_eq!(off.load().unwrap().default_toleration_seconds, None);
    }

    #[test]
    fn default_storage_class_is_on_unless_disabled() {
        assert!(AdmissionArgs::default().load().unwrap().default_storage_class);
        let off = AdmissionArgs { disable: vec!["DefaultStorageClass".into()], ..Default::default() };
        assert!(!off.load().unwrap().default_storage_class);
    }

    #[test]
    fn priority_is_on_unless_disabled() {
        assert!(AdmissionArgs::default().load().unwrap().priority);
        let off = AdmissionArgs { disable: vec!["Priority".into()], ..Default::default() };
        assert!(!off.load().unwrap().priority);
    }

    #[test]
    fn resource_quota_and_limit_ranger_are_on_unless_disabled() {
        assert!(AdmissionArgs::default().load().unwrap().resource_quota);
        let off = AdmissionArgs { disable: vec!["ResourceQuota".into()], ..Default::default() };
        assert!(!off.load().unwrap().resource_quota);
        assert!(AdmissionArgs::default().load().unwrap().limit_ranger);
        let off = AdmissionArgs { disable: vec!["LimitRanger".into()], ..Default::default() };
        assert!(!off.load().unwrap().limit_ranger);
    }
}
