//! What rkube's control-plane components (`rkube scheduler`,
//! `rkube controller-manager`) share, after upstream's
//! `k8s.io/client-go/tools/leaderelection` and `k8s.io/component-base`:
//!
//! - [`client`]: the `--kubeconfig` flag's client (kube-rs);
//! - [`leader`]: leader election on a `coordination.k8s.io/v1` Lease
//!   ([`leader::LeaderElectionArgs`], [`leader::LeaderElector`]), whose pure
//!   step ([`leader::decide`]) says whether to create, take over, renew or wait;
//! - [`serving`]: the `--bind-address`/`--secure-port` server of `/healthz`,
//!   `/livez`, `/readyz` (with named checks such as `leaderElection`) and
//!   `/metrics` (prometheus-client), over HTTPS with a self-signed certificate
//!   unless `--tls-cert-file` is given.
#![deny(missing_docs)]

pub mod client;
pub mod leader;
pub mod serving;

/// Resolves on SIGINT or SIGTERM (never, when the SIGTERM handler cannot
/// be installed): how `rkube scheduler` and `rkube controller-manager`
/// learn to stop.
pub async fn shutdown_signal() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => return std::future::pending().await,
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
