//! What the namespace controller and the garbage collector act on: every
//! resource the server serves at its group's preferred version, found through
//! kube-rs's discovery (upstream `ServerPreferredResources`), tolerating
//! groups whose discovery fails (upstream `ErrGroupDiscoveryFailed`).

use kube::core::GroupVersion;
use kube::discovery::{ApiCapabilities, ApiResource};

/// The result of one discovery pass.
#[derive(Debug, Default, Clone)]
pub struct Discovered {
    /// Every top-level resource (no subresources) of each group's preferred
    /// version, with its scope and verbs.
    pub resources: Vec<(ApiResource, ApiCapabilities)>,
    /// `group/version` and error of each group version whose discovery failed,
    /// sorted by group version.
    pub failures: Vec<(String, String)>,
}

impl Discovered {
    /// Upstream's `ErrGroupDiscoveryFailed` message: `unable to retrieve the
    /// complete list of server APIs: <gv>: <err>, ...`; `None` when nothing
    /// failed.
    pub fn failure_message(&self) -> Option<String> {
        if self.failures.is_empty() {
            return None;
        }
        let parts: Vec<String> = self.failures.iter().map(|(gv, e)| format!("{gv}: {e}")).collect();
        Some(format!("unable to retrieve the complete list of server APIs: {}", parts.join(", ")))
    }

    /// The resource serving `api_version` and `kind`, if discovered.
    pub fn by_kind(&self, api_version: &str, kind: &str) -> Option<&(ApiResource, ApiCapabilities)> {
        self.resources.iter().find(|(ar, _)| ar.api_version == api_version && ar.kind == kind)
    }
}

/// Discovers the preferred version of every group (`/api`, `/apis`, then one
/// request per group). Errors: only when the group lists themselves cannot
/// be read; a failing group is recorded in [`Discovered::failures`].
pub async fn preferred_resources(client: &kube::Client) -> kube::Result<Discovered> {
    let mut gvs: Vec<GroupVersion> = Vec::new();
    let core = client.list_core_api_versions().await?;
    if let Some(v) = core.versions.first() {
        gvs.push(GroupVersion::gv("", v));
    }
    for g in client.list_api_groups().await?.groups {
        let version = g
            .preferred_version
            .as_ref()
            .map(|p| p.version.clone())
            .or_else(|| g.versions.first().map(|v| v.version.clone()));
        if let Some(v) = version {
            gvs.push(GroupVersion::gv(&g.name, &v));
        }
    }
    let mut out = Discovered::default();
    for gv in gvs {
        match kube::discovery::pinned_group(client, &gv).await {
            Ok(group) => out.resources.extend(group.versioned_resources(&gv.version)),
            Err(e) => out.failures.push((gv.api_version(), e.to_string())),
        }
    }
    out.failures.sort();
    Ok(out)
}
