//! What a controller is started with.

use std::sync::Arc;

use tokio::sync::watch;

/// Settings of individual controllers that come from
/// `rkube controller-manager` flags (kube-controller-manager's names).
#[derive(Debug, Clone)]
pub struct ControllerConfig {
    /// `--terminated-pod-gc-threshold`: terminated pods kept before the pod
    /// garbage collector deletes the oldest (`<= 0` disables that part).
    pub terminated_pod_gc_threshold: i32,
    /// `--node-monitor-period`, `--node-monitor-grace-period`,
    /// `--node-startup-grace-period` of the node lifecycle controller.
    pub node_lifecycle: crate::controllers::nodelifecycle::NodeLifecycleOptions,
    /// `--default-local-storage-path` (k3s's flag name): the directory the
    /// local-path provisioner creates volumes in.
    pub local_path_root: std::path::PathBuf,
}

/// `--default-local-storage-path`'s default for `rkube controller-manager`
/// (`rkube up` uses `<data-dir>/storage`).
pub const DEFAULT_LOCAL_STORAGE_PATH: &str = "/var/lib/rkube/storage";

impl Default for ControllerConfig {
    fn default() -> Self {
        ControllerConfig {
            terminated_pod_gc_threshold: 12500,
            node_lifecycle: Default::default(),
            local_path_root: std::path::PathBuf::from(DEFAULT_LOCAL_STORAGE_PATH),
        }
    }
}

/// Handed to each controller's start function: the client it talks to the
/// API server with and the signal to stop on.
#[derive(Clone)]
pub struct ControllerContext {
    /// A client for the API server (the controller manager's kubeconfig,
    /// or a per-controller ServiceAccount's credentials).
    pub client: kube::Client,
    /// Turns `true` when the controller manager stops (or loses its lease);
    /// a controller returns soon after.
    pub stop: watch::Receiver<bool>,
    /// Flag-given settings of the controllers.
    pub config: Arc<ControllerConfig>,
}

impl ControllerContext {
    /// Resolves when the stop signal fires (or its sender is gone).
    pub async fn stopped(&self) {
        let mut stop = self.stop.clone();
        while !*stop.borrow() {
            if stop.changed().await.is_err() {
                return;
            }
        }
    }
}
