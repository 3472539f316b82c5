//! The `--kubeconfig` client of a component.

use std::path::Path;

use anyhow::Context as _;

/// A kube-rs client from the kubeconfig at `kubeconfig` (its current
/// context), or, without one, kube-rs's discovery: in-cluster config, then
/// `$KUBECONFIG`, then `~/.kube/config` (upstream's components use the
/// in-cluster config when `--kubeconfig` is empty).
///
/// Errors: the file cannot be read or parsed, or names no usable cluster.
pub async fn client(kubeconfig: Option<&Path>) -> anyhow::Result<kube::Client> {
    Ok(kube::Client::try_from(config(kubeconfig).await?)?)
}

/// The kube-rs config [`client`] builds its client from (for a component
/// that makes more clients from it, as the controller manager's
/// per-controller ServiceAccount clients). Errors as [`client`]'s.
pub async fn config(kubeconfig: Option<&Path>) -> anyhow::Result<kube::Config> {
    Ok(match kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("reading kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default()).await?
        }
        None => kube::Config::infer().await?,
    })
}
