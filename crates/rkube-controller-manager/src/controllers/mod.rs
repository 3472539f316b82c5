//! The controller table: one [`Controller`] row per controller rkube runs,
//! named as upstream names it (`cmd/kube-controller-manager/names`: a
//! `-controller` suffix since 1.28, the older short name kept as an alias),
//! and the `--controllers` selection rules of upstream's
//! `cmd/kube-controller-manager/app/controllermanager.go`.
//!
//! Adding a controller is adding a row to [`CONTROLLERS`] and a module.

pub mod disruption;
pub mod endpoints;

use futures::future::BoxFuture;

pub mod cronjob;
pub mod daemonset;
pub mod deployment;
pub mod job;
pub mod replicaset;
pub mod statefulset;

use crate::context::ControllerContext;

pub mod discovery;
pub mod garbagecollector;
pub mod namespace;
pub mod nodelifecycle;
pub mod podgc;
pub mod resourcequota;
pub mod ttlafterfinished;
pub mod volume;

/// One controller: its names, whether `*` enables it, and how to start it.
pub struct Controller {
    /// Upstream's name (`deployment-controller`).
    pub name: &'static str,
    /// The ServiceAccount in `kube-system` it acts as with
    /// `--use-service-account-credentials` (upstream's
    /// `ClientBuilder.ClientOrDie("<name>")`), bound to the ClusterRole
    /// `system:controller:<name>`.
    pub service_account: &'static str,
    /// Older names accepted by `--controllers` (`deployment`).
    pub aliases: &'static [&'static str],
    /// Whether `*` includes it (upstream's "enabled by default").
    pub enabled_by_default: bool,
    /// Runs the controller until `ctx` says stop; an error ends the
    /// controller manager (as upstream's `run` failing to start one).
    pub start: fn(ControllerContext) -> BoxFuture<'static, anyhow::Result<()>>,
}

impl std::fmt::Debug for Controller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Controller").field("name", &self.name).finish()
    }
}

impl Controller {
    /// Whether `name` is this controller's name or one of its aliases.
    pub fn is_named(&self, name: &str) -> bool {
        self.name == name || self.aliases.contains(&name)
    }
}

/// Every controller rkube runs, in start order.
pub static CONTROLLERS: &[Controller] = &[
    Controller {
        name: "replicaset-controller",
        service_account: "replicaset-controller",
        aliases: &["replicaset"],
        enabled_by_default: true,
        start: replicaset::start_replicasets,
    },
    Controller {
        name: "replicationcontroller-controller",
        service_account: "replication-controller",
        aliases: &["replicationcontroller"],
        enabled_by_default: true,
        start: replicaset::start_replication_controllers,
    },
    Controller {
        name: "deployment-controller",
        service_account: "deployment-controller",
        aliases: &["deployment"],
        enabled_by_default: true,
        start: deployment::start,
    },
    Controller {
        name: "garbage-collector-controller",
        service_account: "generic-garbage-collector",
        aliases: &["garbagecollector"],
        enabled_by_default: true,
        start: garbagecollector::start,
    },
    Controller {
        name: "namespace-controller",
        service_account: "namespace-controller",
        aliases: &["namespace"],
        enabled_by_default: true,
        start: namespace::start,
    },
    Controller {
        name: "endpoints-controller",
        service_account: "endpoint-controller",
        aliases: &["endpoint"],
        enabled_by_default: true,
        start: endpoints::start_endpoints,
    },
    Controller {
        name: "endpointslice-controller",
        service_account: "endpointslice-controller",
        aliases: &["endpointslice"],
        enabled_by_default: true,
        start: endpoints::start_slices,
    },
    Controller {
        name: "disruption-controller",
        service_account: "disruption-controller",
        aliases: &["disruption"],
        enabled_by_default: true,
        start: disruption::start,
    },
    Controller {
        name: "statefulset-controller",
        service_account: "statefulset-controller",
        aliases: &["statefulset"],
        enabled_by_default: true,
        start: statefulset::start,
    },
    Controller {
        name: "daemonset-controller",
        service_account: "daemon-set-controller",
        aliases: &["daemonset"],
        enabled_by_default: true,
        start: daemonset::start,
    },
    Controller { name: "job-controller", service_account: "job-controller", aliases: &["job"], enabled_by_default: true, start: job::start },
    Controller {
        name: "cronjob-controller",
        service_account: "cronjob-controller",
        aliases: &["cronjob"],
        enabled_by_default: true,
        start: cronjob::start,
    },
    Controller {
        name: "ttl-after-finished-controller",
        service_account: "ttl-after-finished-controller",
        aliases: &["ttl-after-finished"],
        enabled_by_default: true,
        start: ttlafterfinished::start,
    },
    Controller {
        name: "pod-garbage-collector-controller",
        service_account: "pod-garbage-collector",
        aliases: &["podgc"],
        enabled_by_default: true,
        start: podgc::start,
    },
    Controller {
        name: "node-lifecycle-controller",
        service_account: "node-controller",
        aliases: &["nodelifecycle"],
        enabled_by_default: true,
        start: nodelifecycle::start,
    },
    Controller {
        name: "taint-eviction-controller",
        service_account: "node-controller",
        aliases: &[],
        enabled_by_default: true,
        start: nodelifecycle::start_taint_eviction,
    },
    Controller {
        name: "resourcequota-controller",
        service_account: "resourcequota-controller",
        aliases: &["resourcequota"],
        enabled_by_default: true,
        start: resourcequota::start,
    },
    Controller {
        name: "persistentvolume-binder-controller",
        service_account: "persistent-volume-binder",
        aliases: &["persistentvolume-binder"],
        enabled_by_default: true,
        start: volume::binder::start,
    },
    Controller {
        name: "persistentvolume-protection-controller",
        service_account: "pv-protection-controller",
        aliases: &["pv-protection"],
        enabled_by_default: true,
        start: volume::protection::start_pv,
    },
    Controller {
        name: "persistentvolumeclaim-protection-controller",
        service_account: "pvc-protection-controller",
        aliases: &["pvc-protection"],
        enabled_by_default: true,
        start: volume::protection::start_pvc,
    },
    // Not upstream's: k3s runs local-path-provisioner as an add-on; rkube
    // runs it here, off unless selected (`rkube up` selects it), since it
    // writes to this machine's disk.
    Controller {
        name: "local-path-provisioner-controller",
        service_account: "local-path-provisioner",
        aliases: &["local-path-provisioner"],
        enabled_by_default: false,
        start: volume::localpath::start,
    },
];

/// Upstream controllers rkube does not run (yet): `--controllers` accepts
/// their names (with a warning) so upstream command lines keep working.
pub const NOT_IMPLEMENTED: &[&str] = &[
    "bootstrap-signer-controller",
    "bootstrapsigner",
    "certificatesigningrequest-approving-controller",
    "csrapproving",
    "certificatesigningrequest-cleaner-controller",
    "csrcleaner",
    "clusterrole-aggregation-controller",
    "clusterrole-aggregation",
    "cloud-node-lifecycle-controller",
    "cloud-node-lifecycle",
    "ephemeral-volume-controller",
    "ephemeral-volume",
    "horizontal-pod-autoscaler-controller",
    "horizontalpodautoscaling",
    "legacy-serviceaccount-token-cleaner-controller",
    "legacy-service-account-token-cleaner",
    "node-ipam-controller",
    "nodeipam",
    "persistentvolume-attach-detach-controller",
    "attachdetach",
    "persistentvolume-expander-controller",
    "persistentvolume-expander",
    "endpointslice-mirroring-controller",
    "endpointslicemirroring",
    "service-lb-controller",
    "service",
    "node-route-controller",
    "route",
    "token-cleaner-controller",
    "tokencleaner",
    "ttl-controller",
    "ttl",
    "storage-version-migrator-controller",
    "validatingadmissionpolicy-status-controller",
    "service-cidr-controller",
    // These four run inside rkube's API server process for now.
    "serviceaccount-controller",
    "serviceaccount",
    "serviceaccount-token-controller",
    "serviceaccount-token",
    "root-ca-certificate-publisher-controller",
    "root-ca-cert-publisher",
    "certificatesigningrequest-signing-controller",
    "csrsigning",
];

/// The controllers `--controllers` selects, in [`CONTROLLERS`] order, and a
/// warning for each name that rkube knows but does not run.
///
/// Rules (upstream's `IsControllerEnabled`): `*` enables every controller
/// enabled by default; `foo` enables `foo`; `-foo` disables it; an explicit
/// name wins over `*` whatever the order. Errors: a name that is neither a
/// controller nor an alias (`"foo" is not in the list of known controllers`).
pub fn select(spec: &[String]) -> Result<(Vec<&'static Controller>, Vec<String>), String> {
    let mut star = false;
    let mut on: Vec<&str> = Vec::new();
    let mut off: Vec<&str> = Vec::new();
    let mut warnings = Vec::new();
    for raw in spec.iter().map(|s| s.trim()).filter(|s| !s.is_empty()) {
        if raw == "*" {
            star = true;
            continue;
        }
        let (disable, name) = match raw.strip_prefix('-') {
            Some(n) => (true, n),
            None => (false, raw),
        };
        let known = CONTROLLERS.iter().find(|c| c.is_named(name));
        match known {
            Some(c) if disable => off.push(c.name),
            Some(c) => on.push(c.name),
            None if NOT_IMPLEMENTED.contains(&name) => {
                if !disable {
                    warnings.push(format!("controller {name:?} is not implemented by rkube; ignoring it"));
                }
            }
            None => return Err(format!("{raw:?} is not in the list of known controllers")),
        }
    }
    let chosen = CONTROLLERS
        .iter()
        .filter(|c| {
            if off.contains(&c.name) {
                false
            } else if on.contains(&c.name) {
                true
            } else {
                star && c.enabled_by_default
            }
        })
        .collect();
    Ok((chosen, warnings))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(s: &str) -> Vec<String> {
        s.split(',').map(String::from).collect()
    }

    #[test]
    fn every_controller_s_service_account_has_a_bootstrap_role() {
        use rkube_apiserver::filters::rbac_controllers::CONTROLLER_ROLES;
        for c in CONTROLLERS {
            assert!(CONTROLLER_ROLES.iter().any(|r| r.name == c.service_account), "{} acts as {}, which has no role", c.name, c.service_account);
        }
        for r in CONTROLLER_ROLES {
            assert!(CONTROLLERS.iter().any(|c| c.service_account == r.name), "role of {} is bound to no controller", r.name);
        }
    }

    #[test]
    fn unknown_controller_names_are_refused_with_upstreams_message() {
        assert_eq!(select(&spec("*,frobnicator")).unwrap_err(), "\"frobnicator\" is not in the list of known controllers");
    }

    #[test]
    fn upstream_controllers_rkube_lacks_are_accepted_with_a_warning() {
        let (_, warnings) = select(&spec("*,ttl")).unwrap();
        assert_eq!(warnings.len(), 1);
        assert!(warnings[0].contains("\"ttl\" is not implemented"), "{warnings:?}");
        let (_, warnings) = select(&spec("*,-ttl")).unwrap();
        assert!(warnings.is_empty());
    }

    #[test]
    fn star_selects_the_controllers_enabled_by_default_and_minus_removes() {
        let (all, _) = select(&spec("*")).unwrap();
        let default: Vec<_> = CONTROLLERS.iter().filter(|c| c.enabled_by_default).map(|c| c.name).collect();
        assert_eq!(all.iter().map(|c| c.name).collect::<Vec<_>>(), default);
        if let Some(first) = CONTROLLERS.first() {
            let (fewer, _) = select(&[String::from("*"), format!("-{}", first.aliases.first().unwrap_or(&first.name))]).unwrap();
            assert!(!fewer.iter().any(|c| c.name == first.name));
        }
        let (none, _) = select(&[]).unwrap();
        assert!(none.is_empty());
    }
}
