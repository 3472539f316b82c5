//! The `rkube` command line: a thin layer over the library crates.
//!
//! `rkube apiserver | up | proxy | runtime | node | controller-manager | bench | snapshot`; the
//! command line is defined in the `rkube` library (`src/lib.rs`), each
//! subcommand's flags and behaviour in its crate (`rkube_apiserver::cli`,
//! `rkube_proxy::cli`, `rkube_storage::embedded::snapshot`).

use rkube::{Command, SnapshotCommand};

fn main() -> std::process::ExitCode {
    let cli = rkube::parse();
    // One crypto provider (ring) for every TLS client and server in the process:
    // reqwest, kube-rs and the API server's rustls all find it here, whatever
    // features cargo unified for them.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(err) => {
            eprintln!("rkube: cannot start the async runtime: {err}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async move {
        match cli.command {
            Command::Apiserver(args) => rkube_apiserver::cli::run_apiserver(args).await,
            Command::Up(args) => up(args).await,
            Command::Proxy(args) => rkube_proxy::cli::run(args).await,
            Command::Runtime(args) => rkube_runtime::cli::run(args).await,
            Command::Node(args) => rkube_node::cli::run(args).await,
            Command::ControllerManager(args) => rkube_controller_manager::cli::run(args).await,
            Command::Bench(args) => rkube_bench::cli::run(args).await,
            Command::Snapshot(cmd) => tokio::task::spawn_blocking(move || run_snapshot(cmd)).await?,
        }
    });
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("rkube: {err:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Runs `rkube snapshot ...`; prints one line on success.
fn run_snapshot(cmd: SnapshotCommand) -> anyhow::Result<()> {
    use rkube_storage::embedded::snapshot;
    match cmd {
        SnapshotCommand::Save(args) => {
            let status = snapshot::save(&args.data_dir, &args.file)?;
            println!("Snapshot saved at {}: {status}", args.file.display());
        }
        SnapshotCommand::Restore(args) => {
            let status = snapshot::restore(&args.file, &args.data_dir, args.overwrite)?;
            println!("Restored {} into {}: {status}", args.file.display(), args.data_dir.display());
        }
        SnapshotCommand::Check(args) => {
            let status = snapshot::check(&args.file)?;
            println!("{}: ok: {status}", args.file.display());
        }
    }
    Ok(())
}

/// `rkube up`: the API server, then (once it answers) the controller
/// manager as `system:kube-controller-manager`, and with `--node` a local
/// node (CRI runtime + node agent + binder); they stop when the server does.
async fn up(args: rkube_apiserver::cli::UpArgs) -> anyhow::Result<()> {
    let data_dir = args.data_dir.clone();
    let with_node = args.node;
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
    let mut server = tokio::spawn(rkube_apiserver::cli::run_up_with(args, move || {
        let _ = ready_tx.send(());
    }));
    tokio::select! {
        ready = ready_rx => {
            if ready.is_err() {
                return server.await?;
            }
        }
        result = &mut server => return result?,
    }
    let data_dir = std::fs::canonicalize(&data_dir)?;
    let controllers = match start_controller_manager(&data_dir).await {
        Ok(cm) => cm,
        Err(err) => {
            server.abort();
            return Err(err.context("starting the controller manager"));
        }
    };
    let node = if with_node {
        match rkube_node::run_local_node(data_dir.join("kubeconfig"), &data_dir).await {
            Ok(node) => {
                eprintln!("rkube: node {} is running pods on this machine", node.node_name);
                Some(node)
            }
            Err(err) => {
                server.abort();
                controllers.shutdown().await;
                return Err(err.context("starting the local node"));
            }
        }
    } else {
        None
    };
    let result = server.await;
    if let Some(node) = node {
        node.shutdown().await;
    }
    controllers.shutdown().await;
    result?
}

/// Starts every default controller in this process with the identity
/// `system:kube-controller-manager` (`<data-dir>/controller-manager.kubeconfig`).
async fn start_controller_manager(data_dir: &std::path::Path) -> anyhow::Result<rkube_controller_manager::cli::ControllerManager> {
    use rkube_apiserver::filters::rbac::KUBE_CONTROLLER_MANAGER;
    let kubeconfig =
        rkube_apiserver::up_auth::write_component_kubeconfig(data_dir, KUBE_CONTROLLER_MANAGER, "controller-manager.kubeconfig")?;
    let client = rkube_controller_manager::cli::client(Some(&kubeconfig)).await?;
    let (selected, _) = rkube_controller_manager::controllers::select(&["*".to_string()]).map_err(|e| anyhow::anyhow!(e))?;
    Ok(rkube_controller_manager::cli::start(client, &selected))
}
