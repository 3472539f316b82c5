//! What a controller is started with.

use tokio::sync::watch;

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
