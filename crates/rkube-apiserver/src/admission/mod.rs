//! Admission plugins: what changes or refuses an object between decoding
//! and storage (upstream `plugin/pkg/admission`). rkube has one so far,
//! [`service_account`] (`ServiceAccount`); namespace lifecycle checks are
//! part of every create ([`crate::handlers::create`]). Admission webhooks
//! ([`webhook`]: `MutatingAdmissionWebhook`, `ValidatingAdmissionWebhook`)
//! always run, as they are on by default upstream.
//!
//! `--enable-admission-plugins` and `--disable-admission-plugins` take
//! upstream's plugin names; `ServiceAccount` is on by default in
//! `rkube apiserver` and `rkube up`, as in kube-apiserver. A library user's
//! [`crate::ServerConfig::default`] enables none: it runs no serviceaccount
//! controller to create the `default` ServiceAccounts the plugin requires.

pub mod service_account;
pub mod webhook;

/// The plugin name of [`service_account`].
pub const SERVICE_ACCOUNT: &str = "ServiceAccount";

/// Plugins rkube implements.
pub const PLUGINS: &[&str] = &[SERVICE_ACCOUNT];

/// Which admission plugins run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AdmissionConfig {
    /// `ServiceAccount`: pods get a ServiceAccount and its token volume.
    pub service_account: bool,
}

/// kube-apiserver's admission flags; `#[command(flatten)]` them.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct AdmissionArgs {
    /// Admission plugins to enable besides the default ones (rkube implements: ServiceAccount, on by default).
    #[arg(long = "enable-admission-plugins", value_delimiter = ',')]
    pub enable: Vec<String>,
    /// Admission plugins to disable although they are on by default (e.g. ServiceAccount).
    #[arg(long = "disable-admission-plugins", value_delimiter = ',')]
    pub disable: Vec<String>,
}

impl AdmissionArgs {
    /// The plugins to run: the defaults (`ServiceAccount`), plus enabled,
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
        Ok(AdmissionConfig { service_account: !disable.iter().any(|p| p == SERVICE_ACCOUNT) })
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
        let both = AdmissionArgs { enable: vec!["ServiceAccount".into()], disable: vec!["ServiceAccount".into()] };
        assert!(both.load().unwrap_err().contains("overlapped"));
    }
}
