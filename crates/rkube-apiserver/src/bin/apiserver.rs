//! `apiserver`: the same server as `rkube apiserver` (same flags), as a
//! binary of this crate so its integration tests can run real server
//! processes (`CARGO_BIN_EXE_apiserver`), e.g. several on one etcd.

use clap::Parser;

/// `apiserver [FLAGS]`: see `rkube apiserver --help`.
#[derive(Parser, Debug)]
#[command(name = "apiserver", about = "rkube's Kubernetes API server (test entry point)")]
struct Cli {
    #[command(flatten)]
    args: rkube_apiserver::cli::ApiserverArgs,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    rkube_apiserver::cli::run_apiserver(Cli::parse().args).await
}
