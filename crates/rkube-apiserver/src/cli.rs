//! Command-line entry points (to be written).
/// Flags of `rkube apiserver`.
#[derive(clap::Args, Debug)]
pub struct ApiserverArgs {}
/// Flags of `rkube up`.
#[derive(clap::Args, Debug)]
pub struct UpArgs {}
/// Run `rkube apiserver`.
pub async fn run_apiserver(_args: ApiserverArgs) -> anyhow::Result<()> { anyhow::bail!("not implemented yet") }
/// Run `rkube up`.
pub async fn run_up(_args: UpArgs) -> anyhow::Result<()> { anyhow::bail!("not implemented yet") }
