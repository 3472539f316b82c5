//! `rkube proxy` flags (to be written).
/// Flags of `rkube proxy`.
#[derive(clap::Args, Debug)]
pub struct ProxyArgs {}
/// Run `rkube proxy`.
pub async fn run(_args: ProxyArgs) -> anyhow::Result<()> { anyhow::bail!("not implemented yet") }
