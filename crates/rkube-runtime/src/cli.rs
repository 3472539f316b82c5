//! `rkube runtime` flags and entry point.

use std::path::PathBuf;

use crate::endpoint::socket_path;
use crate::runtime::{detect_host_ip, RuntimeConfig};
use crate::server::serve;

/// Flags of `rkube runtime`.
#[derive(clap::Args, Debug)]
pub struct RuntimeArgs {
    /// Where to serve CRI v1 (RuntimeService + ImageService).
    #[arg(long, default_value = "unix:///run/rkube/cri.sock")]
    pub listen: String,
    /// Directory for runtime state (reported by ImageFsInfo).
    #[arg(long, default_value = "/var/lib/rkube/runtime")]
    pub root: PathBuf,
    /// IP reported for every pod sandbox (host network); default: the host's primary address.
    #[arg(long)]
    pub pod_ip: Option<String>,
    /// Per-subscriber buffer of GetContainerEvents, in events.
    #[arg(long, default_value_t = crate::events::DEFAULT_EVENT_BUFFER)]
    pub event_buffer: usize,
}

/// Run `rkube runtime` until SIGINT/SIGTERM; then kill every container and exit.
pub async fn run(args: RuntimeArgs) -> anyhow::Result<()> {
    let socket = socket_path(&args.listen)?;
    std::fs::create_dir_all(&args.root)?;
    let config = RuntimeConfig {
        root_dir: args.root,
        pod_ip: args.pod_ip.unwrap_or_else(detect_host_ip),
        event_buffer: args.event_buffer,
        cgroups: true,
    };
    let mut handle = serve(&socket, config).await?;
    eprintln!("rkube runtime listening on {}", handle.endpoint());
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        res = handle.wait() => { res?; }
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    handle.shutdown().await;
    Ok(())
}
